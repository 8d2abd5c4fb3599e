//! What a request that finds an existing record for its scoped key gets. A pure function of
//! the stored record, the retry's fingerprint and the database's clock, so that every case
//! the contract lists is decided in one place and tested without a database.
//!
//! Precedence (contract): authentication and validation happen before this; then a different
//! fingerprint wins over everything the record's state would say; then the state decides.
//! Expiry comes first of all, but only for records whose outcome is settled: an operation
//! still running, or whose outcome is unknown, never expires into a second execution.

use crate::record::{ProgressStep, RecordStatus, StoredRecord};
use chrono::{DateTime, Utc};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// `409 IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST`: never a replay, never executed.
    ConflictDifferentRequest,
    /// The stored status and body, byte for byte, with `Idempotent-Replayed: true`.
    Replay,
    /// `409 IDEMPOTENCY_REQUEST_IN_PROGRESS` with `Retry-After`.
    InProgress { retry_after_secs: u64 },
    /// The owner's lease ran out: take over (one conditional update on the lease version; only
    /// one taker wins) and resume from the last durable step, never from the start.
    TakeOver {
        lease_version: i64,
        resume_from: ProgressStep,
    },
    /// The earlier attempt failed before any side effect and released the key: execute again,
    /// claiming the record with a conditional update on its lease version.
    Reexecute { lease_version: i64 },
    /// The outcome is unknown and due for another look: take the record (one conditional
    /// update on its lease version) and ask the provider, as recovery does.
    Recover { lease_version: i64 },
    /// `202 PAYMENT_OUTCOME_UNKNOWN`: the provider was asked recently; ask again later.
    OutcomeUnknown { retry_after_secs: u64 },
    /// Past the window: the operation's expiry policy decides (new operation, or reject).
    Expired,
}

pub fn decide(record: &StoredRecord, retry_fingerprint_hex: &str, now: DateTime<Utc>) -> Decision {
    if record.status == RecordStatus::Expired || (record.status.is_settled() && record.expires_at <= now) {
        return Decision::Expired;
    }
    if record.request_fingerprint != retry_fingerprint_hex {
        return Decision::ConflictDifferentRequest;
    }
    match record.status {
        RecordStatus::Completed | RecordStatus::FailedReplayable => Decision::Replay,
        RecordStatus::FailedRetryable => Decision::Reexecute {
            lease_version: record.lease_version,
        },
        RecordStatus::UnknownRequiresRecovery => match record.next_recovery_at {
            Some(next) if next > now => Decision::OutcomeUnknown {
                retry_after_secs: seconds_until(next, now),
            },
            _ => Decision::Recover {
                lease_version: record.lease_version,
            },
        },
        RecordStatus::InProgress => match record.locked_until {
            Some(until) if until > now => Decision::InProgress {
                retry_after_secs: seconds_until(until, now),
            },
            _ => Decision::TakeOver {
                lease_version: record.lease_version,
                resume_from: record.progress_step,
            },
        },
        RecordStatus::Expired => Decision::Expired,
    }
}

/// Whole seconds until `until`, rounded up and at least one: `Retry-After: 0` would invite a
/// busy loop.
fn seconds_until(until: DateTime<Utc>, now: DateTime<Utc>) -> u64 {
    let millis = u64::try_from((until - now).num_milliseconds()).unwrap_or(0);
    millis.div_ceil(1000).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordAt;
    use chrono::Duration;

    const SAME: &str = "aaaa";
    const OTHER: &str = "bbbb";

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-29T10:00:00Z")
            .expect("valid time")
            .with_timezone(&Utc)
    }

    fn record(status: RecordStatus) -> StoredRecord {
        StoredRecord {
            status,
            progress_step: ProgressStep::ProviderRequestSent,
            fingerprint_version: 1,
            request_fingerprint: SAME.to_owned(),
            lease_version: 3,
            locked_until: Some(now() + Duration::milliseconds(2_500)),
            expires_at: now() + Duration::hours(24),
            resource_id: Some("pay_1".to_owned()),
            response_schema_version: Some("2026-05-01".to_owned()),
            next_recovery_at: None,
            first_request_at: now() - Duration::minutes(5),
        }
    }

    #[test]
    fn a_completed_or_replayable_failure_is_replayed() {
        assert_eq!(
            decide(&record(RecordStatus::Completed), SAME, now()),
            Decision::Replay
        );
        assert_eq!(
            decide(&record(RecordStatus::FailedReplayable), SAME, now()),
            Decision::Replay
        );
    }

    #[test]
    fn a_different_request_is_a_conflict_whatever_the_state() {
        for status in [
            RecordStatus::Completed,
            RecordStatus::FailedReplayable,
            RecordStatus::FailedRetryable,
            RecordStatus::InProgress,
            RecordStatus::UnknownRequiresRecovery,
        ] {
            assert_eq!(
                decide(&record(status), OTHER, now()),
                Decision::ConflictDifferentRequest,
                "{status}"
            );
        }
    }

    #[test]
    fn a_live_lease_means_in_progress_with_a_rounded_up_retry_after() {
        assert_eq!(
            decide(&record(RecordStatus::InProgress), SAME, now()),
            Decision::InProgress { retry_after_secs: 3 }
        );
        let mut almost_over = record(RecordStatus::InProgress);
        almost_over.locked_until = Some(now() + Duration::milliseconds(1));
        assert_eq!(
            decide(&almost_over, SAME, now()),
            Decision::InProgress { retry_after_secs: 1 }
        );
    }

    #[test]
    fn an_expired_lease_is_taken_over_from_the_last_durable_step() {
        let mut stale = record(RecordStatus::InProgress);
        stale.locked_until = Some(now());
        assert_eq!(
            decide(&stale, SAME, now()),
            Decision::TakeOver {
                lease_version: 3,
                resume_from: ProgressStep::ProviderRequestSent
            }
        );
        stale.locked_until = None;
        assert!(matches!(decide(&stale, SAME, now()), Decision::TakeOver { .. }));
    }

    #[test]
    fn a_released_key_is_executed_again_and_an_unknown_outcome_waits_for_recovery() {
        assert_eq!(
            decide(&record(RecordStatus::FailedRetryable), SAME, now()),
            Decision::Reexecute { lease_version: 3 }
        );
        assert_eq!(
            decide(&record(RecordStatus::UnknownRequiresRecovery), SAME, now()),
            Decision::Recover { lease_version: 3 },
            "an unknown outcome due for a look is recovered by the retry"
        );
        let mut backing_off = record(RecordStatus::UnknownRequiresRecovery);
        backing_off.next_recovery_at = Some(now() + Duration::seconds(4));
        assert_eq!(
            decide(&backing_off, SAME, now()),
            Decision::OutcomeUnknown { retry_after_secs: 4 }
        );
    }

    #[test]
    fn only_settled_records_expire() {
        let past_window = |status| {
            let mut old = record(status);
            old.expires_at = now() - Duration::seconds(1);
            old
        };
        for status in [
            RecordStatus::Completed,
            RecordStatus::FailedReplayable,
            RecordStatus::FailedRetryable,
        ] {
            assert_eq!(
                decide(&past_window(status), SAME, now()),
                Decision::Expired,
                "{status}"
            );
            assert_eq!(
                decide(&past_window(status), OTHER, now()),
                Decision::Expired,
                "{status}"
            );
        }
        assert_eq!(
            decide(&record(RecordStatus::Expired), OTHER, now()),
            Decision::Expired
        );
        assert!(
            matches!(
                decide(&past_window(RecordStatus::UnknownRequiresRecovery), SAME, now()),
                Decision::Recover { .. }
            ),
            "an unknown outcome must be recovered, never forgotten"
        );
        assert!(matches!(
            decide(&past_window(RecordStatus::InProgress), SAME, now()),
            Decision::InProgress { .. }
        ));
    }

    #[test]
    fn a_retry_is_the_same_command_and_its_delay_runs_from_the_first_request() {
        let at = RecordAt {
            record: record(RecordStatus::Completed),
            now: now(),
        };
        assert_eq!(at.retry_delay(SAME), Some(Duration::minutes(5)));
        assert_eq!(at.retry_delay(OTHER), None, "a conflict is not a retry");
        let skewed = RecordAt {
            record: StoredRecord {
                first_request_at: now() + Duration::seconds(1),
                ..record(RecordStatus::InProgress)
            },
            now: now(),
        };
        assert_eq!(skewed.retry_delay(SAME), Some(Duration::zero()));
    }
}
