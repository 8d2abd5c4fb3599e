//! Expiry is part of the API contract: each operation has a window (advertised by
//! `GET /idempotency` and `Idempotency-Expires`), an in-progress lease separate from it, and a
//! policy for retries that arrive after it. After the window the cleanup worker purges the
//! stored body and keeps a tombstone for the retention period, then deletes it.

use std::time::Duration;
use strum::{EnumString, IntoStaticStr, VariantArray};

/// What a retry gets once its key's window has passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum AfterExpiry {
    /// The window promised nothing more: the key starts a new operation (the business key
    /// still stops a second payment).
    NewOperation,
    /// `422 IDEMPOTENCY_KEY_EXPIRED` naming the resource the key once made.
    Reject,
}

impl AfterExpiry {
    /// Its name in `GET /idempotency` and on the command line.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One operation's expiry contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpiryPolicy {
    pub window: Duration,
    pub after_expiry: AfterExpiry,
    /// How long a tombstone outlives the window.
    pub retention: Duration,
}
