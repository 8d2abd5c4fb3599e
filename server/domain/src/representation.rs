//! The payment as each API version shows it. A response is produced in one version and
//! replayed in that version forever, whatever the default becomes.

use crate::money::Amount;
use crate::payment::NewPayment;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;
use strum::{EnumString, IntoStaticStr, VariantArray};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiVersion {
    /// `2026-05-01`: `paymentId`, `status`.
    V2,
    /// `2026-09-01`: `id`, `state`, `createdAt`.
    V3,
}

impl ApiVersion {
    pub fn parse(text: &str) -> Option<ApiVersion> {
        match text {
            "2026-05-01" => Some(ApiVersion::V2),
            "2026-09-01" => Some(ApiVersion::V3),
            _ => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V2 => "2026-05-01",
            ApiVersion::V3 => "2026-09-01",
        }
    }
}

/// A payment's public status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum PaymentStatus {
    Processing,
    Pending,
    Settled,
    Declined,
}

impl PaymentStatus {
    /// The name stored in the database and shown in representations.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A payment as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentView {
    pub id: String,
    pub account_id: String,
    pub amount: Amount,
    pub merchant_reference: String,
    pub status: PaymentStatus,
    pub created_at: DateTime<Utc>,
}

impl PaymentView {
    pub fn of_new(payment: &NewPayment, status: PaymentStatus, created_at: DateTime<Utc>) -> PaymentView {
        PaymentView {
            id: payment.id.to_string(),
            account_id: payment.account_id.as_str().to_owned(),
            amount: payment.amount,
            merchant_reference: payment.merchant_reference.as_str().to_owned(),
            status,
            created_at,
        }
    }

    /// The representation's bytes in `version`.
    pub fn body(&self, version: ApiVersion) -> Vec<u8> {
        let body = match version {
            ApiVersion::V2 => json!({
                "paymentId": self.id,
                "status": self.status.as_str(),
                "accountId": self.account_id,
                "amount": self.amount.to_string(),
                "currency": self.amount.currency().code(),
                "merchantReference": self.merchant_reference,
            }),
            ApiVersion::V3 => json!({
                "id": self.id,
                "state": self.status.as_str(),
                "accountId": self.account_id,
                "amount": self.amount.to_string(),
                "currency": self.amount.currency().code(),
                "merchantReference": self.merchant_reference,
                "createdAt": self.created_at.to_rfc3339_opts(SecondsFormat::Secs, true),
            }),
        };
        body.to_string().into_bytes()
    }
}
