//! Idem: a payments API whose idempotency layer is payment grade, and its operator console.
//!
//! One module per concern; `docs/ARCHITECTURE.md` is the map.

pub mod admin;
pub mod auth;
pub mod cli;
pub mod console;
pub mod crash;
pub mod events;
pub mod expiry;
pub mod http;
pub mod idempotency;
pub mod metrics;
pub mod payments;
pub mod provider;
pub mod recovery;
pub mod serve;
pub mod store;
pub mod telemetry;
