//! Idem: a payments API whose idempotency layer is payment grade, and its operator console.
//!
//! The domain floor is its own crate (`domain`); here, bottom up: `crash` (test-only crash
//! points), `files` (the data directory's), `supervisor`, `store`, `provider`, `auth`, `metrics`, `engine`, `events`,
//! `console`, `workers`, `http`, `application`, and the command line (`cli`, `admin`,
//! `serve`, `telemetry`). Every import points down; `docs/ARCHITECTURE.md` is the map and
//! `server/tests/it/architecture.rs` checks it.

pub mod admin;
pub mod application;
pub mod auth;
pub mod bounds;
pub mod cli;
pub mod console;
pub mod crash;
pub mod engine;
pub mod events;
pub mod files;
pub mod http;
pub mod metrics;
pub mod provider;
pub mod serve;
pub mod store;
pub mod supervisor;
pub mod telemetry;
pub mod workers;
