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
pub mod decision;
pub mod event;
pub mod expiry;
pub mod fingerprint;
pub mod key;
pub mod money;
pub mod operator;
pub mod outcome;
pub mod payment;
#[cfg(feature = "random")]
pub mod random;
pub mod record;
pub mod recovery;
pub mod representation;
pub mod scope;
pub mod tenant;
