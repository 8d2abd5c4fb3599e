//! The idempotency record's state: its public status and its recovery point.

pub use app::dto::RecordStatus;
use chrono::{DateTime, Utc};
use std::fmt;
use std::str::FromStr;

/// How far create_payment got. Durable: a taker resumes from here, never from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    pub const ALL: [ProgressStep; 6] = [
        ProgressStep::Received,
        ProgressStep::LocalPaymentCreated,
        ProgressStep::ProviderRequestSent,
        ProgressStep::ProviderConfirmed,
        ProgressStep::Completed,
        ProgressStep::UnknownRequiresRecovery,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            ProgressStep::Received => "RECEIVED",
            ProgressStep::LocalPaymentCreated => "LOCAL_PAYMENT_CREATED",
            ProgressStep::ProviderRequestSent => "PROVIDER_REQUEST_SENT",
            ProgressStep::ProviderConfirmed => "PROVIDER_CONFIRMED",
            ProgressStep::Completed => "COMPLETED",
            ProgressStep::UnknownRequiresRecovery => "UNKNOWN_REQUIRES_RECOVERY",
        }
    }
}

impl fmt::Display for ProgressStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown progress step {0:?}")]
pub struct UnknownProgressStep(pub String);

impl FromStr for ProgressStep {
    type Err = UnknownProgressStep;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        ProgressStep::ALL
            .into_iter()
            .find(|step| step.as_str() == text)
            .ok_or_else(|| UnknownProgressStep(text.to_owned()))
    }
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
