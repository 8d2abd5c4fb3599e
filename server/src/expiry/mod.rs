//! Expiry is part of the API contract (`domain::expiry`); this is its worker.

pub mod cleanup;
