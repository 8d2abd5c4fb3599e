//! The insert-first claim of a scoped key, what it can find, and what the owner of a claimed
//! record writes when it settles it: the rows the store takes and gives back.

use crate::api_error::ApiError;
use crate::command::FieldProblem;
use crate::expiry::AfterExpiry;
use crate::fingerprint::Fingerprint;
use crate::money::Currency;
use crate::operator::AuditEntry;
use crate::payment::PaymentId;
use crate::record::{ClaimedAs, RecordAt};
use crate::refund::{RefundId, RefundStatus};
use crate::scope::Scope;
use crate::tenant::ApiKeyId;
use chrono::{DateTime, Utc};
use std::time::Duration;

/// Everything the claim writes into the new record.
#[derive(Debug, Clone)]
pub struct NewClaim {
    pub scope: Scope,
    pub fingerprint: Fingerprint,
    pub created_by: ApiKeyId,
    /// The API version the response will be produced in (replays keep it).
    pub response_schema_version: String,
    /// Who holds the lease: an instance id, for the console and for fencing diagnostics.
    pub lease_owner: String,
    pub lease: Duration,
    pub window: Duration,
    /// Whether a settled record past its window is taken for this operation.
    pub after_expiry: AfterExpiry,
}

/// A response as stored for replay: status, the contract headers, and the exact body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl StoredResponse {
    pub fn headers_json(&self) -> String {
        serde_json::to_string(&self.headers).unwrap_or_else(|_| "[]".to_owned())
    }

    pub fn from_stored(status: u16, headers_json: &str, body: Vec<u8>) -> Result<StoredResponse, String> {
        let headers =
            serde_json::from_str(headers_json).map_err(|error| format!("stored headers: {error}"))?;
        Ok(StoredResponse {
            status,
            headers,
            body,
        })
    }
}

/// What an operator's release of a key writes besides the record: the payment it declines
/// (the provider has no charge for it), that payment's event, and the audit entry.
#[derive(Debug, Clone)]
pub struct KeyRelease {
    pub payment_id: PaymentId,
    pub event_id: String,
    pub event_payload: String,
    pub audit: AuditEntry,
}

/// What the claim of a keyed operation found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This request owns the key: the record (IN_PROGRESS, PROVIDER_REQUEST_SENT) and the
    /// operation's local part (a payment PROCESSING with its amount held, or a refund
    /// PROCESSING counted against its payment) with its Created event are committed together.
    Claimed {
        lease_version: i64,
        expires_at: DateTime<Utc>,
        /// When the operation's resource (the payment, the refund) was created.
        created_at: DateTime<Utc>,
        claimed_as: ClaimedAs,
    },
    /// Another request made the record first; `decide` says what this one gets.
    Existing(RecordAt),
    /// The command was refused in a way the key is bound to (insufficient funds, a refund
    /// over what remains): the stored answer is `error`, replayed to every retry.
    Bound {
        error: ApiError,
        expires_at: DateTime<Utc>,
        claimed_as: ClaimedAs,
    },
    /// The command cannot be executed: nothing was written for it. A retry after the window
    /// (`claimed_as` is `AfterExpiry`) is still noted on the record it found.
    Refused { refusal: Refusal, claimed_as: ClaimedAs },
}

/// Why a keyed operation was not executed (nothing was written for it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No such account for this tenant.
    AccountNotFound,
    /// The account holds another currency.
    CurrencyMismatch { account_currency: Currency },
    /// The tenant already has a payment for this account and merchant reference (under any
    /// key, or none).
    DuplicateMerchantReference { payment_id: PaymentId },
    /// The payment to refund is not this tenant's (or does not exist).
    PaymentNotFound,
    /// Only PENDING and SETTLED payments that were not released can be refunded.
    PaymentNotRefundable { payment_status: String },
    /// The payment already has a refund with this reference (under any key).
    DuplicateRefundReference { refund_id: RefundId },
}

impl Refusal {
    /// The contract's error for it.
    pub fn api_error(self) -> ApiError {
        match self {
            Refusal::AccountNotFound => ApiError::AccountNotFound,
            Refusal::CurrencyMismatch { account_currency } => {
                ApiError::ValidationFailed(vec![FieldProblem::new(
                    "currency",
                    format!("must be the account's currency ({account_currency})"),
                )])
            }
            Refusal::DuplicateMerchantReference { payment_id } => ApiError::DuplicateMerchantReference {
                payment_id: payment_id.to_string(),
            },
            Refusal::PaymentNotFound => ApiError::PaymentNotFound,
            Refusal::PaymentNotRefundable { payment_status } => {
                ApiError::PaymentNotRefundable { payment_status }
            }
            Refusal::DuplicateRefundReference { refund_id } => ApiError::DuplicateRefundReference {
                refund_id: refund_id.to_string(),
            },
        }
    }
}

/// What the local transaction of a create_payment without an idempotency key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnkeyedOutcome {
    Created { payment_created_at: DateTime<Utc> },
    InsufficientFunds,
    Refused(Refusal),
}

/// How the provider answered a claimed create_payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderVerdict {
    Authorized,
    Declined,
}

/// The completion transaction's content: fenced by the owner's lease version.
#[derive(Debug, Clone)]
pub struct PaymentCompletion {
    /// The operator's audit entry, written in the same transaction, when an operator's
    /// reconciliation completes the payment.
    pub audit: Option<AuditEntry>,
    pub payment_id: PaymentId,
    pub verdict: ProviderVerdict,
    pub provider_charge_id: String,
    pub event_id: String,
    pub event_payload: String,
    pub response: StoredResponse,
}

/// A refund's completion transaction, fenced by its owner's lease version: the refund's
/// outcome (a decline gives its amount back to what remains refundable), its event, and the
/// record settled with its response.
#[derive(Debug, Clone)]
pub struct RefundCompletion {
    /// The operator's audit entry, when an operator's reconciliation completes the refund.
    pub audit: Option<AuditEntry>,
    pub refund_id: RefundId,
    /// `Succeeded` or `Failed`.
    pub status: RefundStatus,
    pub provider_refund_id: String,
    pub event_id: String,
    pub event_payload: String,
    pub response: StoredResponse,
}
