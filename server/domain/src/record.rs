//! The idempotency record's state: its public status, its recovery point, and what the
//! decision for a retry needs to know of it.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use strum::{Display, EnumString, IntoStaticStr, VariantArray};

/// The public states of an idempotency record (what each failure leaves: `docs/failure-policy.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, Display, VariantArray)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum RecordStatus {
    InProgress,
    Completed,
    FailedReplayable,
    FailedRetryable,
    UnknownRequiresRecovery,
    Expired,
}

impl RecordStatus {
    /// The name stored in the database and shown to operators.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the outcome is decided (only such records expire, and only they are replayed
    /// or renewed).
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            RecordStatus::Completed
                | RecordStatus::FailedReplayable
                | RecordStatus::FailedRetryable
                | RecordStatus::Expired
        )
    }
}

/// How far create_payment got. Durable: a taker resumes from here, never from the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, Display, VariantArray)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum ProgressStep {
    Received,
    LocalPaymentCreated,
    /// Durable *before* the provider is called: from here on a charge may exist, so a taker
    /// asks the provider by the payment's key before sending anything.
    ProviderRequestSent,
    ProviderConfirmed,
    Completed,
    UnknownRequiresRecovery,
}

impl ProgressStep {
    /// The name stored in the database and shown to operators.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// How a claim came to own its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ClaimedAs {
    /// The key's first request.
    New,
    /// The key's earlier record was past its window (`new_operation` policy): an expired retry.
    AfterExpiry,
    /// An operator had marked the key's operation failed and released the key: this retry
    /// executes it anew.
    AfterRelease,
}

/// What the decision for a retry needs to know of a stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    pub status: RecordStatus,
    pub progress_step: ProgressStep,
    /// The retry is fingerprinted in this version, so old records stay comparable.
    pub fingerprint_version: u16,
    pub request_fingerprint: String,
    /// The fencing token: every write by an owner is conditional on it.
    pub lease_version: i64,
    pub locked_until: Option<DateTime<Utc>>,
    pub expires_at: DateTime<Utc>,
    /// The payment the record made, once it made one.
    pub resource_id: Option<String>,
    /// The API version the answer is produced in (a taker answers in it too).
    pub response_schema_version: Option<String>,
    /// When an unknown outcome may be asked about again (backoff).
    pub next_recovery_at: Option<DateTime<Utc>>,
    /// When the key's first request (of this operation: a renewal starts it again) arrived.
    pub first_request_at: DateTime<Utc>,
}

/// A record as read, and the database's clock when it was read: leases and windows are
/// compared with the database's time, never with an instance's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordAt {
    pub record: StoredRecord,
    pub now: DateTime<Utc>,
}

impl RecordAt {
    /// Whether only an operator (or a retry) can move it on: an unknown outcome, or an
    /// in-progress record whose owner's lease ran out.
    pub fn needs_operator(&self) -> bool {
        match self.record.status {
            RecordStatus::UnknownRequiresRecovery => true,
            RecordStatus::InProgress => self.record.locked_until.is_none_or(|until| until <= self.now),
            _ => false,
        }
    }

    /// How long after its key's first request a retry arrived, if the request with
    /// `fingerprint_hex` is one: a request that finds its key's record with the same command
    /// (a different command is a conflict, not a retry). Windows are sized from these.
    pub fn retry_delay(&self, fingerprint_hex: &str) -> Option<TimeDelta> {
        (self.record.request_fingerprint == fingerprint_hex)
            .then(|| (self.now - self.record.first_request_at).max(TimeDelta::zero()))
    }
}
