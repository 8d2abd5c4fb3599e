//! The records browser's and a record page's view models.

use crate::audit::model::AuditEntryView;
use crate::recovery::model::NextLook;
use domain::recovery::UnknownCause;

use domain::record::{ClaimedAs, ProgressStep, RecordStatus};
use domain::scope::Operation;
use serde::{Deserialize, Serialize};

/// The records browser's filter; empty strings (or missing fields) mean "any".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RecordFilter {
    pub status: String,
    pub step: String,
    pub tenant: String,
    pub operation: String,
    pub key_prefix: String,
    /// RFC 3339 bounds on the creation time (empty: open).
    pub from: String,
    pub to: String,
    /// The last row of the previous page (`RecordSummary::cursor`), empty for the first page.
    pub after: String,
}

/// A scoped key, as the console names a record in links: `tenant/operation/key`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RecordRef {
    pub tenant_id: String,
    /// As the record stores it: a record of an operation a newer deploy added is still listed
    /// and read; [`RecordRef::known_operation`] is the one this build knows.
    pub operation: String,
    pub key: String,
}

impl RecordRef {
    /// The record's operation, when this build knows it.
    pub fn known_operation(&self) -> Option<Operation> {
        self.operation.parse().ok()
    }

    /// The record page's path; each part percent-encoded.
    pub fn href(&self) -> String {
        format!(
            "/records/{}/{}/{}",
            encode_segment(&self.tenant_id),
            encode_segment(&self.operation),
            encode_segment(&self.key)
        )
    }
}

/// Percent-encodes everything but unreserved characters, for one path segment.
pub fn encode_segment(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// A row of the records browser.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordSummary {
    pub record: RecordRef,
    pub tenant_name: String,
    pub status: RecordStatus,
    pub step: ProgressStep,
    pub resource_id: Option<String>,
    pub provider_reference: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub recovery_attempts: i32,
    /// Decimal, in its currency (`10.00`), with the merchant reference: the payment's or the
    /// refund's.
    pub amount: Option<String>,
    pub currency: Option<String>,
    pub merchant_reference: Option<String>,
    /// Opaque keyset cursor for the next page.
    pub cursor: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordPage {
    pub rows: Vec<RecordSummary>,
    /// Set when there may be more rows after these.
    pub next: Option<String>,
}

/// One field that a conflicting retry changed, e.g. `amount 10.00 -> 100.00`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldChange {
    pub field: String,
    pub before: String,
    pub after: String,
}

/// A request that arrived with the record's key, and its answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestView {
    pub at: String,
    pub status_code: u16,
    pub error_code: Option<String>,
    pub same_request: bool,
    /// Against the record's command, for a different request.
    pub changes: Vec<FieldChange>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventView {
    pub id: String,
    pub event_type: String,
    pub created_at: String,
    pub published_at: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentSummary {
    pub id: String,
    pub account_id: String,
    pub amount: String,
    pub currency: String,
    pub merchant_reference: String,
    pub status: String,
    pub provider_charge_id: Option<String>,
}

/// A refund as the record page shows it, with the record of the key it was made under.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundSummary {
    pub id: String,
    pub payment_id: String,
    pub amount: String,
    pub currency: String,
    pub reason: String,
    pub reference: String,
    pub status: String,
    pub provider_refund_id: Option<String>,
    pub record: Option<RecordRef>,
    pub created_at: String,
}

/// Everything the record page shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordDetail {
    pub record: RecordRef,
    pub status: RecordStatus,
    pub step: ProgressStep,
    pub settled_status: Option<RecordStatus>,
    pub fingerprint_version: i32,
    pub fingerprint: String,
    /// Empty once the record expired (purged with the body).
    pub canonical_command: String,
    pub resource_id: Option<String>,
    pub provider_reference: Option<String>,
    pub response_status_code: Option<i32>,
    pub lease_owner: Option<String>,
    pub lease_version: i64,
    pub locked_until: Option<String>,
    pub recovery_attempts: i32,
    /// When the worker looks again, or when it gave up (only while the outcome is unknown or
    /// the owner is gone).
    pub next_look: Option<NextLook>,
    /// Why the outcome is (or was) unknown: the failed send's cause.
    pub unknown_cause: Option<UnknownCause>,
    /// The latest provider failure in words, and when.
    pub last_error: Option<String>,
    pub last_error_at: Option<String>,
    pub expired_retries: i32,
    pub created_by: String,
    pub created_at: String,
    pub updated_at: String,
    pub completed_at: Option<String>,
    pub expires_at: String,
    /// How its current execution was claimed.
    pub claimed_as: ClaimedAs,
    /// Every change of status, step or lease, oldest first.
    pub steps: Vec<StepView>,
    /// Requests, steps, provider failures, the provider's evidence and operators' actions,
    /// oldest first.
    pub timeline: Vec<TimelineEntry>,
    /// Payments this key made earlier that an operator released, oldest first.
    pub released_payments: Vec<ReleasedPaymentView>,
    /// The record's payment: the one it made, or the one its refund refunds.
    pub payment: Option<PaymentSummary>,
    /// The refund a create_refund record made.
    pub refund: Option<RefundSummary>,
    /// Every refund of the record's payment, oldest first.
    pub refunds: Vec<RefundSummary>,
    pub events: Vec<EventView>,
    /// Requests with the key, but its replays (counted in `replays`).
    pub requests: Vec<RequestView>,
    pub replays: Option<ReplaysView>,
    pub audit: Vec<AuditEntryView>,
}

/// A key's replays: a replay is counted, not journalled one by one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplaysView {
    pub count: i64,
    pub first_at: String,
    pub last_at: String,
    /// The longest time from the key's first request to a replay.
    pub longest_delay_ms: i64,
}

impl ReplaysView {
    /// "40 replays between T1 and T2 (longest delay 3.2 s)".
    pub fn text(&self) -> String {
        let replays = if self.count == 1 { "replay" } else { "replays" };
        let delay = format!("longest delay {:.1} s", self.longest_delay_ms as f64 / 1000.0);
        if self.first_at == self.last_at {
            format!("{} {replays} at {} ({delay})", self.count, self.first_at)
        } else {
            format!(
                "{} {replays} between {} and {} ({delay})",
                self.count, self.first_at, self.last_at
            )
        }
    }
}

/// A payment an operator declined and released (the provider had no charge for it then).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedPaymentView {
    pub id: String,
    pub released_at: String,
    /// A charge the provider showed for it after all: money to refund.
    pub late_charge_id: Option<String>,
    /// Who said that charge was refunded, when, and with what reference.
    pub late_charge_resolved: Option<LateChargeResolution>,
}

/// What refunding a late charge asks the provider, shown before an operator applies it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateChargeRefundPreview {
    pub payment_id: String,
    pub charge_id: String,
    pub amount: String,
    pub currency: String,
    /// The create_refund key it goes under, derived from the charge.
    pub key: String,
    /// Exactly what applying does, in order.
    pub steps: Vec<String>,
}

/// An operator's word that a late charge was refunded at the provider.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateChargeResolution {
    pub at: String,
    pub by: String,
    pub reference: String,
}

/// One change of a record's status, step or lease, as it committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepView {
    pub at: String,
    pub status: RecordStatus,
    pub step: ProgressStep,
    pub lease_version: i64,
    pub lease_owner: Option<String>,
    /// Why, for a step that made the outcome unknown: the provider failure in words.
    pub note: Option<String>,
}

/// What one line of a record's timeline is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimelineKind {
    /// A client's request with the key, and its answer.
    Request,
    /// A change of the record's status, step or lease (a claim, a takeover, a settling).
    Step,
    /// A provider call that failed, with how long it took.
    ProviderFailure,
    /// The provider's answer that settled the record (the charge or refund it answered with).
    ProviderAnswer,
    /// What the provider said when an operator's preview asked.
    Evidence,
    /// An operator's action, from the audit log.
    Operator,
}

impl TimelineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TimelineKind::Request => "request",
            TimelineKind::Step => "step",
            TimelineKind::ProviderFailure => "provider-failure",
            TimelineKind::ProviderAnswer => "provider-answer",
            TimelineKind::Evidence => "evidence",
            TimelineKind::Operator => "operator",
        }
    }
}

/// One line of a record's timeline: everything that happened to it, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineEntry {
    pub at: String,
    pub kind: TimelineKind,
    pub text: String,
}

/// A stored response, opened for an operator (the reveal is audited).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevealedResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}
