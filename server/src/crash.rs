//! Test-only crash points: `IDEM_CRASH_POINT=<name>` makes `idem serve` abort (no cleanup, no
//! answer, like `kill -9`) the first time a request or worker reaches that step boundary, so that
//! tests can crash the real process exactly there. Only the environment sets it; no request
//! can reach it.

use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// The claim's insert ran; the local transaction has not committed (so it rolls back).
    InsideLocalTransaction,
    /// The local transaction committed (PROVIDER_REQUEST_SENT is durable); nothing was sent.
    BeforeProviderCall,
    /// The provider answered; its answer is not recorded yet.
    ProviderAnswered,
    /// The completion committed; the client has no answer yet.
    AfterCompletion,
    /// An outbox event was published; it is not marked published yet.
    PublishedBeforeMarked,
    /// A consumer wrote its inbox row and its side effect; they are not committed yet.
    ConsumerAfterSideEffect,
    /// A receipt went to the sink; it is not marked sent yet.
    ReceiptSentBeforeMarked,
}

impl CrashPoint {
    pub const fn name(self) -> &'static str {
        match self {
            CrashPoint::InsideLocalTransaction => "inside_local_transaction",
            CrashPoint::BeforeProviderCall => "before_provider_call",
            CrashPoint::ProviderAnswered => "provider_answered",
            CrashPoint::AfterCompletion => "after_completion",
            CrashPoint::PublishedBeforeMarked => "published_before_marked",
            CrashPoint::ConsumerAfterSideEffect => "consumer_after_side_effect",
            CrashPoint::ReceiptSentBeforeMarked => "receipt_sent_before_marked",
        }
    }
}

static CONFIGURED: OnceLock<Option<String>> = OnceLock::new();

pub fn crash_point(point: CrashPoint) {
    let configured = CONFIGURED.get_or_init(|| std::env::var("IDEM_CRASH_POINT").ok());
    if configured.as_deref() == Some(point.name()) {
        eprintln!(
            "idem: crash point {} reached (IDEM_CRASH_POINT); aborting",
            point.name()
        );
        std::process::abort();
    }
}
