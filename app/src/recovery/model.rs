//! The recovery queue's and bulk jobs' view models.

use crate::reconcile::model::ReconcileResult;
use crate::records::model::encode_segment;
use crate::recovery::RecordRef;
use domain::queue::QueueQuery;
use domain::record::RecordStatus;
use domain::recovery::{BulkJobState, EvidenceKind, ProviderEvidence, ReconcileAction, UnknownCause};

use serde::{Deserialize, Serialize};

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
