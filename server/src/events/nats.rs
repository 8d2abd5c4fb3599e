//! NATS JetStream as the transport. Events are published to `<prefix>.<event type>` on one
//! stream with the event id as `Nats-Msg-Id`, so the broker's de-duplication window drops a
//! republication it has seen; consumers never rely on it (their inboxes deduplicate). Each
//! consumer is a durable pull consumer named after it: a message is acknowledged only after
//! its side effect committed, refused (redelivered later) when handling failed.

use super::consumers::{Consumer, handle_isolating};
use super::transport::{Transport, TransportError};
use crate::supervisor::Worker;
use async_nats::jetstream::context::PublishAckFuture;
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
        self.send_as(message, message_id).await?.await.map_err(failed)?;
        Ok(())
    }

    /// Sends without waiting for the broker's acknowledgement, which the returned future
    /// brings.
    async fn send_as(
        &self,
        message: &EventMessage,
        message_id: &str,
    ) -> Result<PublishAckFuture, TransportError> {
        let payload = serde_json::to_vec(message).map_err(failed)?;
        self.jetstream
            .send_publish(
                format!("{}.{}", self.settings.subject_prefix, message.event_type),
                PublishMessage::build()
                    .payload(payload.into())
                    .message_id(message_id),
            )
            .await
            .map_err(failed)
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

/// The most messages a consumer takes in one batch: those already delivered to it, up to this.
const CONSUMER_BATCH: usize = 64;

/// A consumer fed by its durable pull consumer: the messages that have arrived handled as one
/// batch, then each acknowledged (or given back for redelivery).
pub struct NatsConsumer {
    pull: jetstream::consumer::PullConsumer,
    consumer: Arc<dyn Consumer>,
}

impl NatsConsumer {
    async fn handle(&self, delivered: &[jetstream::Message]) -> Vec<AckKind> {
        let mut acks = vec![AckKind::Ack; delivered.len()];
        let mut events = Vec::with_capacity(delivered.len());
        let mut positions = Vec::with_capacity(delivered.len());
        for (position, message) in delivered.iter().enumerate() {
            match serde_json::from_slice::<EventMessage>(&message.payload) {
                Ok(event) => {
                    events.push(event);
                    positions.push(position);
                }
                Err(error) => {
                    tracing::error!(%error, consumer = self.consumer.name(), "not an Idem event; dropped");
                    acks[position] = AckKind::Term;
                }
            }
        }
        let errors = handle_isolating(self.consumer.as_ref(), &events).await;
        for ((event, position), error) in events.iter().zip(positions).zip(errors) {
            if let Some(error) = error {
                tracing::warn!(%error, event_id = %event.event_id, consumer = self.consumer.name(), "event not handled; redelivered later");
                acks[position] = AckKind::Nak(Some(Duration::from_secs(1)));
            }
        }
        acks
    }
}

#[async_trait::async_trait]
impl Worker for NatsConsumer {
    fn name(&self) -> &'static str {
        "NATS consumer"
    }

    async fn run(&self, stop: CancellationToken) {
        while !stop.is_cancelled() {
            let messages = match self.pull.messages().await {
                Ok(messages) => messages,
                Err(error) => {
                    tracing::warn!(%error, consumer = self.consumer.name(), "NATS: cannot pull; retrying");
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            let mut batches = messages.ready_chunks(CONSUMER_BATCH);
            loop {
                let batch = tokio::select! {
                    () = stop.cancelled() => return,
                    batch = batches.next() => batch,
                };
                let Some(batch) = batch else { break };
                let mut delivered = Vec::with_capacity(batch.len());
                let mut pull_failed = false;
                for message in batch {
                    match message {
                        Ok(message) => delivered.push(message),
                        Err(error) => {
                            tracing::warn!(%error, consumer = self.consumer.name(), "NATS: pull failed");
                            pull_failed = true;
                        }
                    }
                }
                let acks = self.handle(&delivered).await;
                for (message, ack) in delivered.iter().zip(acks) {
                    if let Err(error) = message.ack_with(ack).await {
                        tracing::warn!(%error, "NATS: acknowledgement lost; the message comes again");
                    }
                }
                if pull_failed {
                    break;
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl Transport for NatsJetStream {
    /// Sends the whole batch, then waits for the acknowledgements: one round trip for all.
    async fn publish(&self, messages: &[EventMessage]) -> Vec<Result<(), TransportError>> {
        let mut sent = Vec::with_capacity(messages.len());
        for message in messages {
            sent.push(self.send_as(message, &message.event_id).await);
        }
        let mut results = Vec::with_capacity(messages.len());
        for acknowledgement in sent {
            results.push(match acknowledgement {
                Ok(acknowledgement) => acknowledgement.await.map(drop).map_err(failed),
                Err(error) => Err(error),
            });
        }
        results
    }
}
