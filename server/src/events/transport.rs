//! How published events reach consumers: one trait, an in-process implementation (the
//! embedded default: the consumers run in this process) and NATS JetStream.

use super::consumers::{Consumer, handle_isolating};
use domain::event::EventMessage;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("delivery failed: {0}")]
    Delivery(String),
}

#[async_trait::async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Delivers the messages; per message, `Ok` only once the transport has it durably (or,
    /// in-process, every consumer has processed it). Delivering the same message again must be
    /// harmless.
    async fn publish(&self, messages: &[EventMessage]) -> Vec<Result<(), TransportError>>;
}

/// Delivers straight to this process's consumers, each taking the batch in one transaction; a
/// consumer's failure fails the messages it could not handle, so the publisher retries them
/// (the consumers that succeeded deduplicate the retry).
pub struct InProcess {
    consumers: Vec<Arc<dyn Consumer>>,
}

impl InProcess {
    pub fn new(consumers: Vec<Arc<dyn Consumer>>) -> InProcess {
        InProcess { consumers }
    }
}

#[async_trait::async_trait]
impl Transport for InProcess {
    async fn publish(&self, messages: &[EventMessage]) -> Vec<Result<(), TransportError>> {
        let mut results: Vec<Result<(), TransportError>> = messages.iter().map(|_| Ok(())).collect();
        for consumer in &self.consumers {
            let errors = handle_isolating(consumer.as_ref(), messages).await;
            for (result, error) in results.iter_mut().zip(errors) {
                if let (Ok(()), Some(error)) = (&result, error) {
                    *result = Err(TransportError::Delivery(format!("{}: {error}", consumer.name())));
                }
            }
        }
        results
    }
}
