//! The audit log's lines.

use domain::operator::AuditEntry;

use serde::{Deserialize, Serialize};

/// One line of the audit log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntryView {
    pub id: String,
    /// RFC 3339, UTC.
    pub at: String,
    #[serde(flatten)]
    pub entry: AuditEntry,
}
