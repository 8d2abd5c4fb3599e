//! Overrides two admins decide.

use crate::records::model::RecordRef;
use domain::recovery::{OverrideOutcome, OverrideState};

use serde::{Deserialize, Serialize};

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
