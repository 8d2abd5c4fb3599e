//! Idem's domain floor: what the first request *meant* (keys, scopes, commands and their
//! fingerprints), how far it *got* (record states and steps), what it *answered* (stored
//! responses and the contract's errors), money and ids, and the pure decisions and policies
//! over them.
//!
//! Nothing here knows the web, the database or the console's pages: this crate depends on no
//! such crate (its `Cargo.toml` is the proof, and `server/tests/it/architecture.rs` checks it),
//! so the store, the engine, HTTP and the console all build on it, and it on none of them. The
//! console's wasm build uses it too (state names, roles, operator actions), which is why
//! generating ids, which needs the operating system's random generator, is behind the
//! `random` feature that only the server turns on.

pub mod api_error;
pub mod claim;
pub mod command;
pub mod cursor;
pub mod decision;
pub mod event;
pub mod expiry;
pub mod fingerprint;
pub mod key;
pub mod money;
pub mod operator;
pub mod outcome;
pub mod payment;
pub mod prefer;
pub mod queue;
#[cfg(feature = "random")]
pub mod random;
pub mod record;
pub mod recovery;
pub mod refund;
pub mod representation;
pub mod retry_delay;
pub mod scope;
pub mod tenant;

#[cfg(test)]
mod tests {
    use crate::expiry::AfterExpiry;
    use crate::operator::OperatorRole;
    use crate::outcome::Outcome;
    use crate::record::{ClaimedAs, ProgressStep, RecordStatus};
    use crate::recovery::{
        BulkControl, BulkJobState, EvidenceKind, OverrideState, ReconcileAction, UnknownCause,
    };
    use crate::representation::PaymentStatus;
    use crate::scope::Operation;
    use std::fmt::Debug;
    use std::str::FromStr;
    use strum::VariantArray;

    /// Every value is read back from its stored name (`sample` is one of them, spelled out), and
    /// a near miss is refused.
    fn round_trips<T>(sample: (T, &str), near_miss: &str)
    where
        T: VariantArray + Copy + PartialEq + Debug + Into<&'static str> + FromStr,
    {
        for value in T::VARIANTS {
            let name: &'static str = (*value).into();
            assert_eq!(name.parse::<T>().ok(), Some(*value), "{name}");
        }
        assert_eq!(sample.0.into(), sample.1);
        assert!(near_miss.parse::<T>().is_err(), "{near_miss}");
    }

    #[test]
    fn every_stored_name_round_trips() {
        round_trips((RecordStatus::InProgress, "IN_PROGRESS"), "in_progress");
        round_trips(
            (ProgressStep::ProviderRequestSent, "PROVIDER_REQUEST_SENT"),
            "SENT",
        );
        round_trips((ClaimedAs::AfterRelease, "after_release"), "AfterRelease");
        round_trips((OperatorRole::Admin, "admin"), "Admin");
        round_trips(
            (
                ReconcileAction::MarkFailedAndReleaseKey,
                "mark_failed_and_release_key",
            ),
            "ApplyProviderResult",
        );
        round_trips((OverrideState::Pending, "pending"), "PENDING");
        round_trips((UnknownCause::TimedOut, "timed_out"), "TimedOut");
        round_trips((EvidenceKind::NoCharge, "no_charge"), "NoCharge");
        round_trips((BulkJobState::Previewed, "previewed"), "PREVIEWED");
        round_trips((BulkControl::Abort, "abort"), "Abort");
        round_trips((Operation::CreatePayment, "create_payment"), "CreatePayment");
        round_trips(
            (Outcome::ConflictDifferentRequest, "conflict_different_request"),
            "Replay",
        );
        round_trips((AfterExpiry::NewOperation, "new_operation"), "newOperation");
        round_trips((PaymentStatus::Pending, "PENDING"), "pending");
    }
}
