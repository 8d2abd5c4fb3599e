//! The payment provider: the wire types of its API, the client Idem calls it with, and the
//! simulator that implements it for development, demos and tests.

pub mod client;
pub mod sim;

use serde::{Deserialize, Serialize};

/// The provider-side idempotency key of a payment: derived from the payment id alone, so no
/// change to the command's fields (or a deploy) can ever change it.
pub fn provider_key(payment_id: &str) -> String {
    format!("provider_payment_{payment_id}")
}

/// The provider-side idempotency key of a refund: derived from the refund id alone.
pub fn provider_refund_key(refund_id: &str) -> String {
    format!("provider_refund_{refund_id}")
}

/// `POST /v1/refunds` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RefundRequest {
    pub charge_id: String,
    pub amount: String,
    pub currency: String,
    /// The refund's id (`rf_…`).
    pub reference: String,
}

/// The provider's answer about one refund.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRefund {
    pub provider_refund_id: String,
    /// `succeeded` or `declined`, as for charges.
    pub status: ChargeStatus,
    pub reference: String,
}

/// `POST /v1/charges` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChargeRequest {
    pub amount: String,
    pub currency: String,
    pub reference: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChargeStatus {
    Succeeded,
    Declined,
}

/// The provider's answer about one charge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Charge {
    pub charge_id: String,
    pub status: ChargeStatus,
    pub reference: String,
    /// The money moved (a succeeded charge settles later); absent means not yet.
    #[serde(default)]
    pub settled: bool,
}
