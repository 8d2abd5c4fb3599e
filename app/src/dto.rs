//! The console's view models: what the server sends the browser, shaped for the pages. State
//! names, roles and operator actions are the domain's own types (`domain`), not copies.

use domain::operator::{AuditEntry, OperatorRole};
use domain::queue::QueueQuery;
use domain::record::RecordStatus;
use domain::recovery::{
    BulkJobState, EvidenceKind, OverrideOutcome, OverrideState, ProviderEvidence, ReconcileAction,
    UnknownCause,
};
use serde::{Deserialize, Serialize};

/// The signed-in operator of a console request, as the server established it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentOperator {
    pub username: String,
    pub role: OperatorRole,
}

/// One line of the audit log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntryView {
    pub id: String,
    /// RFC 3339, UTC.
    pub at: String,
    #[serde(flatten)]
    pub entry: AuditEntry,
}

/// The dashboard's time ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum DashboardRange {
    #[serde(rename = "15m")]
    FifteenMinutes,
    #[default]
    #[serde(rename = "1h")]
    OneHour,
    #[serde(rename = "24h")]
    OneDay,
    #[serde(rename = "7d")]
    SevenDays,
}

impl DashboardRange {
    pub const ALL: [DashboardRange; 4] = [
        DashboardRange::FifteenMinutes,
        DashboardRange::OneHour,
        DashboardRange::OneDay,
        DashboardRange::SevenDays,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            DashboardRange::FifteenMinutes => "15m",
            DashboardRange::OneHour => "1h",
            DashboardRange::OneDay => "24h",
            DashboardRange::SevenDays => "7d",
        }
    }

    pub fn parse(text: &str) -> Option<DashboardRange> {
        DashboardRange::ALL
            .into_iter()
            .find(|range| range.as_str() == text)
    }

    pub const fn seconds(self) -> i64 {
        match self {
            DashboardRange::FifteenMinutes => 15 * 60,
            DashboardRange::OneHour => 3600,
            DashboardRange::OneDay => 24 * 3600,
            DashboardRange::SevenDays => 7 * 24 * 3600,
        }
    }

    /// One chart point per step: 15 to 96 points whatever the range.
    pub const fn step_seconds(self) -> i64 {
        match self {
            DashboardRange::FifteenMinutes | DashboardRange::OneHour => 60,
            DashboardRange::OneDay => 15 * 60,
            DashboardRange::SevenDays => 2 * 3600,
        }
    }
}

/// One outcome over the range, a count per step (zeros included).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Series {
    /// The stored outcome name (`replay`, `conflict_different_request`, …).
    pub outcome: String,
    pub points: Vec<u64>,
    pub total: u64,
}

/// Live state across every instance, from indexed counts (never a scan of all records).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveGauges {
    pub in_progress: u64,
    /// IN_PROGRESS whose owner's lease ran out (a dead owner, not yet taken over).
    pub stale_in_progress: u64,
    pub oldest_stale_in_progress_secs: f64,
    pub unknown: u64,
    pub oldest_unknown_secs: f64,
    /// Unknown outcomes the recovery worker gave up on.
    pub needs_operator: u64,
    pub outbox_backlog: u64,
    pub outbox_oldest_secs: f64,
    pub cleanup_to_purge: u64,
    pub cleanup_to_delete: u64,
    /// Released payments the provider charged after all (to refund).
    pub charged_after_release: u64,
}

/// One operation's retries over the dashboard's range (a retry: a request that found its
/// key's record with the same command), measured from their key's first request, against the
/// operation's window: the data for sizing it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryWindow {
    pub operation: String,
    /// The window this operation is answered with now.
    pub window_secs: u64,
    pub retries: u64,
    /// Nearest-rank quantiles of the delays: p50, p90, p99, p99.9 (0 without retries).
    pub quantile_secs: [f64; 4],
    pub longest_secs: f64,
    /// Shorter and longer windows than the current one (and it), shortest first.
    pub windows: Vec<WindowFit>,
}

/// How a window of `window_secs` would have fared with the range's retries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowFit {
    pub window_secs: u64,
    /// Retries that came after it (past a window, a retry is no longer replayed).
    pub outside: u64,
    pub current: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantOption {
    pub id: String,
    pub name: String,
}

/// Everything the dashboard shows, read at `read_at`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dashboard {
    pub range: DashboardRange,
    /// The first step's start, RFC 3339 UTC.
    pub from: String,
    pub step_seconds: i64,
    pub series: Vec<Series>,
    pub live: LiveGauges,
    pub tenants: Vec<TenantOption>,
    pub read_at: String,
}

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
    pub operation: String,
    pub key: String,
}

impl RecordRef {
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
    pub step: String,
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
    pub step: String,
    pub settled_status: Option<String>,
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
    /// How its current execution was claimed: `new`, `after_expiry`, `after_release`.
    pub claimed_as: String,
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

/// How far one consumer is behind: published events it acts on, from the last day, that it
/// has not processed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerLag {
    pub consumer: String,
    pub lag: u64,
}

/// An event that failed to publish too often and waits for an operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub event_id: String,
    pub event_type: String,
    pub payment_id: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    /// RFC 3339; also the version a re-drive is guarded by.
    pub dead_at: String,
}

/// The events page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventsOverview {
    pub unpublished: u64,
    pub oldest_unpublished_secs: f64,
    pub consumers: Vec<ConsumerLag>,
    pub dead_letters: Vec<DeadLetter>,
    pub read_at: String,
}

/// How a re-drive of one dead letter ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedriveResult {
    pub event_id: String,
    pub ok: bool,
    pub message: String,
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
    pub status: String,
    pub step: String,
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

/// One thing applying could do, and exactly what it changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileOption {
    pub action: ReconcileAction,
    pub changes: Vec<String>,
}

/// The read-only first step of a reconciliation: what the provider says, and exactly what
/// each possible action would change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcilePreview {
    pub record: RecordRef,
    pub status: RecordStatus,
    /// The record's version when previewed: applying refuses if it changed.
    pub version: i64,
    pub evidence: ProviderEvidence,
    /// What may be applied, the one a bulk reconciliation applies first; empty when nothing
    /// can be (then `blocked` says why).
    pub options: Vec<ReconcileOption>,
    pub blocked: Option<String>,
}

/// An admin's override of a record, and a second admin's decision on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideRequestView {
    pub id: String,
    pub record: RecordRef,
    /// The record's version when requested: approval refuses if it changed.
    pub record_version: i64,
    pub outcome: OverrideOutcome,
    pub requested_by: String,
    pub reason: String,
    pub requested_at: String,
    pub state: OverrideState,
    pub decided_by: Option<String>,
    pub decision_reason: Option<String>,
    pub decided_at: Option<String>,
    /// What applying it did, once approved.
    pub result: Option<String>,
}

/// How an applied reconciliation ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileResult {
    pub record: RecordRef,
    pub ok: bool,
    pub status: Option<RecordStatus>,
    pub message: String,
}

/// A page of the recovery queue: the records needing attention that match the filter, how many
/// match in all, and where the next page starts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryQueue {
    pub total: u64,
    pub rows: Vec<QueueRowView>,
    /// The cursor of the next page, when there is one.
    pub next: Option<String>,
    /// Tenant names, for the filter.
    pub tenants: Vec<String>,
    pub read_at: String,
}

/// When the recovery worker looks at a record next.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NextLook {
    /// It looks again at this time.
    At(String),
    /// It used up its attempts at this time: only an operator moves the record on.
    GaveUp(String),
    /// An owner's lease ran out: its next pass takes the record over.
    NextPass,
}

/// A row of the recovery queue: the record, what an operator decides by, and the evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueRowView {
    pub record: RecordRef,
    pub tenant_name: String,
    pub status: RecordStatus,
    pub version: i64,
    pub resource_id: Option<String>,
    /// Decimal, in its currency (`10.00`).
    pub amount: Option<String>,
    pub currency: Option<String>,
    pub merchant_reference: Option<String>,
    pub created_at: String,
    pub recovery_attempts: i32,
    pub unknown_cause: Option<UnknownCause>,
    pub last_error: Option<String>,
    pub last_error_at: Option<String>,
    pub next_look: NextLook,
    /// What the provider said when last asked for an operator, and when.
    pub evidence: Option<(ProviderEvidence, String)>,
}

/// What a bulk reconciliation is made of: every record matching a filter (frozen on the
/// server, whatever their number), or the records an operator ticked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BulkSelection {
    Matching(Box<QueueQuery>),
    Records(Vec<RecordRef>),
}

/// A bulk reconciliation and how far it got: previewed item by item, then applied to the
/// groups the operator kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkJobView {
    pub id: String,
    /// The operator's name for it; empty until applied.
    pub name: String,
    pub state: BulkJobState,
    /// How its records were selected, in words.
    pub selection: String,
    pub requested_by: String,
    pub reason: String,
    pub applied_by: Option<String>,
    pub created_at: String,
    pub applied_at: Option<String>,
    pub finished_at: Option<String>,
    pub items: u64,
    pub previewed: u64,
    /// Items in the groups kept (all of them until applied).
    pub included: u64,
    pub done: u64,
    pub ok: u64,
    /// By operation and evidence (empty in the jobs list).
    pub groups: Vec<BulkGroupView>,
    /// The first items in order, with their previews and results (a hundred at most; the
    /// results file has them all).
    pub first_items: Vec<BulkItemView>,
}

impl BulkJobView {
    /// Where its results file is served.
    pub fn results_href(&self) -> String {
        format!("/console/bulk-jobs/{}/results.csv", encode_segment(&self.id))
    }

    pub fn href(&self) -> String {
        format!("/recovery/jobs/{}", encode_segment(&self.id))
    }
}

/// One group of a previewed job: records of one operation the provider said the same of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkGroupView {
    pub operation: String,
    pub evidence: EvidenceKind,
    /// The action proposed (or, once applied, the one chosen); `None`: nothing can be applied.
    pub action: Option<ReconcileAction>,
    /// Every action the group's evidence allows, the proposed one first.
    pub offered: Vec<ReconcileAction>,
    pub included: bool,
    pub items: u64,
    pub done: u64,
    pub ok: u64,
}

/// What the operator keeps of one group when applying: its action, or `None` to leave it out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupChoice {
    pub operation: String,
    pub evidence: EvidenceKind,
    pub action: Option<ReconcileAction>,
}

/// One record of a bulk job: what the preview froze and found, and its result once applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkItemView {
    pub position: i32,
    pub record: RecordRef,
    pub version: i64,
    pub evidence: Option<ProviderEvidence>,
    pub action: Option<ReconcileAction>,
    pub included: bool,
    pub result: Option<ReconcileResult>,
}

/// What the administration page shows: operators, and tenants with their API keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Administration {
    pub operators: Vec<OperatorView>,
    pub tenants: Vec<TenantView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorView {
    pub username: String,
    pub role: OperatorRole,
    pub disabled: bool,
    pub created_at: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantView {
    pub id: String,
    pub name: String,
    pub require_idempotency_key: bool,
    pub created_at: String,
    /// Newest first, revoked ones included.
    pub api_keys: Vec<ApiKeyView>,
}

/// An API key by its id (never the key, never its hash).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyView {
    pub id: String,
    /// An operator's username or `cli:<user>`; empty for keys from before it was kept.
    pub created_by: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// One administrative change, as an admin asks for it in the console (the same rules as the
/// command line's `idem operator|tenant|api-key`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminChange {
    CreateOperator {
        username: String,
        role: OperatorRole,
    },
    SetRole {
        username: String,
        role: OperatorRole,
    },
    DisableOperator {
        username: String,
    },
    EnableOperator {
        username: String,
    },
    ResetPassword {
        username: String,
    },
    CreateTenant {
        name: String,
        require_idempotency_key: bool,
    },
    SetKeysRequired {
        tenant_id: String,
        required: bool,
    },
    CreateApiKey {
        tenant_id: String,
    },
    RevokeApiKey {
        key_id: String,
    },
}

/// What a change did, and the secret it made (a password or an API key), shown this once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminOutcome {
    pub done: String,
    pub shown_once: Option<String>,
}
