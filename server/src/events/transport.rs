//! How published events reach consumers: one trait, an in-process implementation (the
//! embedded default: the consumers run in this process) and NATS JetStream.

use super::consumers::Consumer;
use domain::event::EventMessage;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("delivery failed: {0}")]
    Delivery(String),
}

#[async_trait::async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Delivers the message; `Ok` only once the transport has it durably (or, in-process,
    /// every consumer has processed it). Delivering the same message again must be harmless.
    async fn publish(&self, message: &EventMessage) -> Result<(), TransportError>;
}

/// Delivers straight to this process's consumers; a consumer's failure fails the publish, so
/// the publisher retries (the consumers that succeeded deduplicate the retry).
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
    async fn publish(&self, message: &EventMessage) -> Result<(), TransportError> {
        for consumer in &self.consumers {
            consumer
                .handle(message)
                .await
                .map_err(|error| TransportError::Delivery(format!("{}: {error}", consumer.name())))?;
        }
        Ok(())
    }
}
