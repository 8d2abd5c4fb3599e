//! Recovery: the queue of records needing attention, and the bulk jobs that clear it.

pub mod api;
mod jobs;
pub mod model;
mod queue;

pub use jobs::{BulkJobPage, BulkJobsPage};
pub use queue::RecoveryPage;

use crate::records::model::RecordRef;
use crate::recovery::model::NextLook;
use domain::recovery::{EvidenceKind, UnknownCause};
use domain::scope::Operation;
use leptos::prelude::*;

/// How often the queue reads itself again while its tab is visible.
const LIVE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// How often a job's page reads its progress while it previews or runs.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_millis(700);

/// Rows per queue page (the server's).
const QUEUE_PAGE: usize = 50;

/// Why an outcome is unknown, as a sentence.
pub fn cause_text(cause: Option<UnknownCause>) -> String {
    match cause {
        Some(cause) => format!("The provider {}.", cause.words()),
        None => {
            "The provider call's failure was not recorded (a record from before this was kept).".to_owned()
        }
    }
}

/// When the recovery worker looks again, or that it gave up.
pub fn next_look_text(next: &NextLook) -> String {
    match next {
        NextLook::At(at) => format!("The recovery worker looks again at {at}."),
        NextLook::GaveUp(at) => {
            format!("The recovery worker gave up at {at}: only an operator moves it on.")
        }
        NextLook::NextPass => {
            "Its owner is gone: the recovery worker takes it over at its next pass.".to_owned()
        }
    }
}

/// What the provider says, short, for a table cell or a group.
fn evidence_words(operation: Option<Operation>, kind: EvidenceKind) -> &'static str {
    let refund = operation == Some(Operation::CreateRefund);
    match (kind, refund) {
        (EvidenceKind::Succeeded, false) => "the provider has a succeeded charge",
        (EvidenceKind::Succeeded, true) => "the provider has a succeeded refund",
        (EvidenceKind::Declined, false) => "the provider has a declined charge",
        (EvidenceKind::Declined, true) => "the provider has a declined refund",
        (EvidenceKind::NoCharge, false) => "the provider has no charge",
        (EvidenceKind::NoCharge, true) => "the provider has no refund",
        (EvidenceKind::Unreachable, _) => "the provider did not answer",
    }
}

/// Calls `tick` every `every` while the tab is visible; `live` says whether it is.
fn while_visible(every: std::time::Duration, live: RwSignal<bool>, tick: impl Fn() + Send + Sync + 'static) {
    #[cfg(feature = "hydrate")]
    {
        live.set(!document().hidden());
        if let Ok(handle) = set_interval_with_handle(
            move || {
                let visible = !document().hidden();
                live.set(visible);
                if visible {
                    tick();
                }
            },
            every,
        ) {
            on_cleanup(move || handle.clear());
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (every, live, tick);
}
