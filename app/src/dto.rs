//! Data shared by the server and the browser.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The public states of an idempotency record (see `docs/ARCHITECTURE.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RecordStatus {
    InProgress,
    Completed,
    FailedReplayable,
    FailedRetryable,
    UnknownRequiresRecovery,
    Expired,
}

impl RecordStatus {
    pub const ALL: [RecordStatus; 6] = [
        RecordStatus::InProgress,
        RecordStatus::Completed,
        RecordStatus::FailedReplayable,
        RecordStatus::FailedRetryable,
        RecordStatus::UnknownRequiresRecovery,
        RecordStatus::Expired,
    ];

    /// The name stored in the database and shown to operators.
    pub const fn as_str(self) -> &'static str {
        match self {
            RecordStatus::InProgress => "IN_PROGRESS",
            RecordStatus::Completed => "COMPLETED",
            RecordStatus::FailedReplayable => "FAILED_REPLAYABLE",
            RecordStatus::FailedRetryable => "FAILED_RETRYABLE",
            RecordStatus::UnknownRequiresRecovery => "UNKNOWN_REQUIRES_RECOVERY",
            RecordStatus::Expired => "EXPIRED",
        }
    }
}

impl fmt::Display for RecordStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown record status {0:?}")]
pub struct UnknownRecordStatus(pub String);

impl FromStr for RecordStatus {
    type Err = UnknownRecordStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RecordStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownRecordStatus(s.to_owned()))
    }
}

/// How many idempotency records are in one status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCount {
    pub status: RecordStatus,
    pub count: u64,
}

/// What the overview page shows: a count for every status (zeros included) and when the
/// server read them, so that an operator can tell a fresh number from a stale one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overview {
    pub counts: Vec<StatusCount>,
    pub read_at: String,
}

impl Overview {
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.count).sum()
    }
}

/// What an operator may do. Ordered: each role may do everything the ones before it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperatorRole {
    /// Reads dashboards, records and the audit log.
    Viewer,
    /// Also reconciles records against the provider.
    Operator,
    /// Also overrides without provider evidence (with a second admin) and manages operators.
    Admin,
}

impl OperatorRole {
    pub const ALL: [OperatorRole; 3] = [OperatorRole::Viewer, OperatorRole::Operator, OperatorRole::Admin];

    pub const fn as_str(self) -> &'static str {
        match self {
            OperatorRole::Viewer => "viewer",
            OperatorRole::Operator => "operator",
            OperatorRole::Admin => "admin",
        }
    }
}

impl fmt::Display for OperatorRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OperatorRole {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OperatorRole::ALL
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| format!("unknown role {s:?} (viewer, operator or admin)"))
    }
}

/// The signed-in operator of a console request, as the server established it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentOperator {
    pub username: String,
    pub role: OperatorRole,
}

/// One line of the audit log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntryView {
    pub id: String,
    /// RFC 3339, UTC.
    pub at: String,
    pub actor: String,
    pub action: String,
    pub target: Option<String>,
    pub reason: Option<String>,
    pub result: String,
    pub details: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips_through_its_stored_name() {
        for status in RecordStatus::ALL {
            assert_eq!(status.as_str().parse::<RecordStatus>(), Ok(status));
        }
        assert!("in_progress".parse::<RecordStatus>().is_err());
    }
}
