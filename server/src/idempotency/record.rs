//! The idempotency record's state: its public status and its recovery point.

pub use app::dto::{ProgressStep, RecordStatus};
use chrono::{DateTime, Utc};

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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_round_trips_through_its_stored_name() {
        for step in ProgressStep::ALL {
            assert_eq!(step.as_str().parse::<ProgressStep>(), Ok(step));
        }
        assert!("SENT".parse::<ProgressStep>().is_err());
    }
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
}
