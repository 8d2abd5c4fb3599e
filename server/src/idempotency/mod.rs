//! The idempotency layer's server-side parts: the request journal and sealed responses. Keys,
//! fingerprints, record states and the decision are the domain's (`domain`).

pub mod journal;
pub mod sealing;
