//! Integration tests: one binary (one link) for every suite.

mod support;

mod architecture;

mod cancellation;
mod claim;
mod cli;
mod client;
mod console_access;
mod console_api;
mod console_security;
mod cost;
mod deploys;
mod docs;
mod events;
mod faults;
mod fingerprint;
mod http_api;
mod incident;
mod isolation;
mod lookup;
mod migrations;
mod model;
mod parsers;
mod payments_api;
mod process;
mod provider;
mod recovery;
mod refunds;
mod retention;
mod soak;
mod store_conformance;
mod storm;
mod waiting;
