//! The events page's view models.

use serde::{Deserialize, Serialize};

/// How far one consumer is behind: published events it acts on, from the last day, that it
/// has not processed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerLag {
    pub consumer: String,
    pub lag: u64,
}

/// An event that failed to publish too often and waits for an operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub event_id: String,
    pub event_type: String,
    pub payment_id: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    /// RFC 3339; also the version a re-drive is guarded by.
    pub dead_at: String,
}

/// The events page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventsOverview {
    pub unpublished: u64,
    pub oldest_unpublished_secs: f64,
    pub consumers: Vec<ConsumerLag>,
    pub dead_letters: Vec<DeadLetter>,
    pub read_at: String,
}

/// How a re-drive of one dead letter ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveResult {
    pub event_id: String,
    pub ok: bool,
    pub message: String,
}
