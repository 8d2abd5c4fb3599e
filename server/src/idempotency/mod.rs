//! The idempotency layer: scoped keys and fingerprints (what the first request meant), the
//! record's state machine (how far it got), and the decision for every retry.

pub mod claim;
pub mod decision;
pub mod fingerprint;
pub mod journal;
pub mod key;
pub mod record;
pub mod sealing;
