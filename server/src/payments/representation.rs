//! The payment as each API version shows it. A response is produced in one version and
//! replayed in that version forever, whatever the default becomes.

use super::payment::NewPayment;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentStatus {
    Processing,
    Pending,
    Settled,
    Declined,
}

impl PaymentStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            PaymentStatus::Processing => "PROCESSING",
            PaymentStatus::Pending => "PENDING",
            PaymentStatus::Settled => "SETTLED",
            PaymentStatus::Declined => "DECLINED",
        }
    }
}

/// The payment representation's bytes in `version`.
pub fn payment_body(
    version: ApiVersion,
    payment: &NewPayment,
    status: PaymentStatus,
    created_at: DateTime<Utc>,
) -> Vec<u8> {
    let common = (
        payment.account_id.as_str(),
        payment.amount.to_string(),
        payment.amount.currency().code(),
        payment.merchant_reference.as_str(),
    );
    let body = match version {
        ApiVersion::V2 => json!({
            "paymentId": payment.id.as_str(),
            "status": status.as_str(),
            "accountId": common.0,
            "amount": common.1,
            "currency": common.2,
            "merchantReference": common.3,
        }),
        ApiVersion::V3 => json!({
            "id": payment.id.as_str(),
            "state": status.as_str(),
            "accountId": common.0,
            "amount": common.1,
            "currency": common.2,
            "merchantReference": common.3,
            "createdAt": created_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        }),
    };
    body.to_string().into_bytes()
}
