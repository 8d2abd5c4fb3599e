//! Payments: the create-payment command (parse, validate, normalise) and money.

pub mod command;
pub mod money;
