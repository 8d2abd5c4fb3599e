//! The idempotency layer: scoped keys and fingerprints (what the first request meant).

pub mod fingerprint;
pub mod key;
