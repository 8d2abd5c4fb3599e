//! A reconciliation's preview and result.

use crate::records::model::RecordRef;
use domain::record::RecordStatus;
use domain::recovery::{ProviderEvidence, ReconcileAction};

use serde::{Deserialize, Serialize};

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

/// How an applied reconciliation ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileResult {
    pub record: RecordRef,
    pub ok: bool,
    pub status: Option<RecordStatus>,
    pub message: String,
}
