//! Events that happen once. Every payment state change writes its event into the outbox in
//! the same transaction as the change (the engine does). Here: the publisher that delivers
//! them (several instances at once, each event claimed by one for a while, retried with
//! backoff, dead-lettered after too many failures), the transports (in-process, NATS
//! JetStream), and the consumers, each of which deduplicates through its inbox and writes its
//! side effect in the same transaction as its inbox row, so a message is never marked
//! processed before its side effect exists, and never applied twice.

pub mod consumers;
pub mod nats;
pub mod publisher;
pub mod transport;

use serde::{Deserialize, Serialize};

/// An outbox event as it travels: its id is the message id everywhere (the broker's
/// de-duplication window and every consumer inbox key on it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventMessage {
    pub event_id: String,
    pub event_type: String,
    pub payment_id: String,
    /// The event's JSON, as written with the change.
    pub payload: String,
}
