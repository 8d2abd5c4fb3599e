//! Events that happen once: what a payment's state change announces through the outbox.

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
