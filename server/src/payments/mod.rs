//! Payments: the engine (claim, provider call, completion; takeover and reconciliation), the
//! HTTP handlers and the settlement worker.

pub mod engine;
pub mod http;
pub mod settlement;
