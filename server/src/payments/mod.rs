//! Payments: the create-payment command (parse, validate, normalise) and money.

pub mod account;
pub mod command;
pub mod engine;
pub mod http;
pub mod money;
pub mod payment;
pub mod representation;
pub mod settlement;
