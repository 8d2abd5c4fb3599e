//! NATS JetStream as the transport. Events are published to `<prefix>.<event type>` on one
//! stream with the event id as `Nats-Msg-Id`, so the broker's de-duplication window drops a
//! republication it has seen; consumers never rely on it (their inboxes deduplicate). Each
//! consumer is a durable pull consumer named after it: a message is acknowledged only after
//! its side effect committed, refused (redelivered later) when handling failed.

use super::consumers::Consumer;
use super::transport::{Transport, TransportError};
use crate::supervisor::Worker;
use async_nats::jetstream::{self, AckKind, consumer::pull, message::PublishMessage};
use domain::event::EventMessage;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
pub struct NatsSettings {
    pub url: String,
    pub stream: String,
    pub subject_prefix: String,
    /// How long a delivered, unacknowledged message waits before it is delivered again.
    pub ack_wait: Duration,
}

#[derive(Clone)]
pub struct NatsJetStream {
    jetstream: jetstream::Context,
    settings: NatsSettings,
}

fn failed(error: impl std::fmt::Display) -> TransportError {
    TransportError::Delivery(format!("NATS: {error}"))
}

impl NatsJetStream {
    /// Connects and makes sure the stream exists.
    pub async fn connect(settings: NatsSettings) -> Result<NatsJetStream, TransportError> {
        let client = async_nats::connect(&settings.url).await.map_err(failed)?;
        let jetstream = jetstream::new(client);
        jetstream
            .get_or_create_stream(jetstream::stream::Config {
                name: settings.stream.clone(),
                subjects: vec![format!("{}.>", settings.subject_prefix)],
                duplicate_window: Duration::from_secs(120),
                ..Default::default()
            })
            .await
            .map_err(failed)?;
        Ok(NatsJetStream { jetstream, settings })
    }

    /// Publishes under an explicit broker message id (the event id, normally).
    pub async fn publish_as(&self, message: &EventMessage, message_id: &str) -> Result<(), TransportError> {
        let payload = serde_json::to_vec(message).map_err(failed)?;
        self.jetstream
            .send_publish(
                format!("{}.{}", self.settings.subject_prefix, message.event_type),
                PublishMessage::build()
                    .payload(payload.into())
                    .message_id(message_id),
            )
            .await
            .map_err(failed)?
            .await
            .map_err(failed)?;
        Ok(())
    }

    /// `consumer` as a durable pull consumer of the stream (created now, so that a missing
    /// stream stops the start), to run under the supervisor.
    pub async fn consumer(&self, consumer: Arc<dyn Consumer>) -> Result<NatsConsumer, TransportError> {
        let stream = self
            .jetstream
            .get_stream(&self.settings.stream)
            .await
            .map_err(failed)?;
        let pull: jetstream::consumer::PullConsumer = stream
            .get_or_create_consumer(
                consumer.name(),
                pull::Config {
                    durable_name: Some(consumer.name().to_owned()),
                    ack_policy: jetstream::consumer::AckPolicy::Explicit,
                    ack_wait: self.settings.ack_wait,
                    ..Default::default()
                },
            )
            .await
            .map_err(failed)?;
        Ok(NatsConsumer { pull, consumer })
    }
}

/// A consumer fed by its durable pull consumer: each message handled, then acknowledged (or
/// given back for redelivery).
pub struct NatsConsumer {
    pull: jetstream::consumer::PullConsumer,
    consumer: Arc<dyn Consumer>,
}

impl NatsConsumer {
    async fn handle(&self, message: &jetstream::Message) -> AckKind {
        match serde_json::from_slice::<EventMessage>(&message.payload) {
            Ok(event) => match self.consumer.handle(&event).await {
                Ok(_) => AckKind::Ack,
                Err(error) => {
                    tracing::warn!(%error, event_id = %event.event_id, consumer = self.consumer.name(), "event not handled; redelivered later");
                    AckKind::Nak(Some(Duration::from_secs(1)))
                }
            },
            Err(error) => {
                tracing::error!(%error, consumer = self.consumer.name(), "not an Idem event; dropped");
                AckKind::Term
            }
        }
    }
}

#[async_trait::async_trait]
impl Worker for NatsConsumer {
    fn name(&self) -> &'static str {
        "NATS consumer"
    }

    async fn run(&self, stop: CancellationToken) {
        while !stop.is_cancelled() {
            let mut messages = match self.pull.messages().await {
                Ok(messages) => messages,
                Err(error) => {
                    tracing::warn!(%error, consumer = self.consumer.name(), "NATS: cannot pull; retrying");
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            loop {
                let next = tokio::select! {
                    () = stop.cancelled() => return,
                    next = messages.next() => next,
                };
                let message = match next {
                    Some(Ok(message)) => message,
                    Some(Err(error)) => {
                        tracing::warn!(%error, consumer = self.consumer.name(), "NATS: pull failed");
                        break;
                    }
                    None => break,
                };
                let ack = self.handle(&message).await;
                if let Err(error) = message.ack_with(ack).await {
                    tracing::warn!(%error, "NATS: acknowledgement lost; the message comes again");
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl Transport for NatsJetStream {
    async fn publish(&self, message: &EventMessage) -> Result<(), TransportError> {
        self.publish_as(message, &message.event_id).await
    }
}
