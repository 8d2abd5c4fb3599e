//! The rows the console browses by: a record's name, a row of the records browser and its filter, and a row of the recovery queue.

use crate::store::dialect::Dialect;
use crate::store::error::StoreError;
use chrono::{DateTime, Utc};
use domain::cursor::RecordCursor;
use domain::record::{ProgressStep, RecordStatus};
use domain::recovery::{EvidenceKind, ProviderEvidence, UnknownCause};
use domain::scope::Scope;
use sqlx::Row;

/// A record as stored names it. Parsed into a [`Scope`] only to act on it, so that a record of
/// an operation this binary does not know can still be listed and read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecordName {
    pub tenant_id: String,
    pub operation: String,
    pub key: String,
}

impl RecordName {
    /// The record a row names by its `tenant_id`, `operation_name` and `idempotency_key`.
    pub(in crate::store) fn read<D: Dialect>(
        row: &<D as sqlx::Database>::Row,
    ) -> Result<RecordName, StoreError> {
        Ok(RecordName {
            tenant_id: row.try_get("tenant_id")?,
            operation: row.try_get("operation_name")?,
            key: row.try_get("idempotency_key")?,
        })
    }

    /// How the audit log names this record.
    pub fn audit_target(&self) -> String {
        domain::scope::audit_target(&self.tenant_id, &self.operation, &self.key)
    }
}

impl From<&Scope> for RecordName {
    fn from(scope: &Scope) -> Self {
        RecordName {
            tenant_id: scope.tenant_id.to_string(),
            operation: scope.operation.as_str().to_owned(),
            key: scope.key.as_str().to_owned(),
        }
    }
}

/// A row of the records browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSummary {
    pub record: RecordName,
    pub tenant_name: String,
    pub status: RecordStatus,
    pub step: ProgressStep,
    pub resource_id: Option<String>,
    pub provider_reference: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub recovery_attempts: i32,
    /// The payment's (or refund's) amount in minor units, currency and merchant reference.
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub merchant_reference: Option<String>,
}

/// A records-browser filter; `None` means any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordQuery {
    pub status: Option<RecordStatus>,
    pub step: Option<ProgressStep>,
    /// A tenant's id or name.
    pub tenant: Option<String>,
    pub operation: Option<String>,
    pub key_prefix: Option<String>,
    /// Bounds on the creation time: `[from, to)`.
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub after: Option<RecordCursor>,
}

impl RecordSummary {
    pub(super) fn read<D: Dialect>(row: &<D as sqlx::Database>::Row) -> Result<RecordSummary, StoreError> {
        Ok(RecordSummary {
            record: RecordName::read::<D>(row)?,
            tenant_name: row.try_get("tenant_name")?,
            status: StoreError::parse_stored("record status", &row.try_get::<String, _>("status")?)?,
            step: StoreError::parse_stored("progress step", &row.try_get::<String, _>("progress_step")?)?,
            resource_id: row.try_get("resource_id")?,
            provider_reference: row.try_get("provider_reference")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
            recovery_attempts: row.try_get("recovery_attempts")?,
            amount_minor: row.try_get("amount_minor")?,
            currency: row.try_get("currency")?,
            merchant_reference: row.try_get("merchant_reference")?,
        })
    }
}

/// A row of the recovery queue: the record and what an operator decides by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRow {
    pub record: RecordName,
    pub tenant_name: String,
    pub status: RecordStatus,
    /// The record's lease version: what a reconciliation is guarded by.
    pub version: i64,
    pub resource_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub recovery_attempts: i32,
    pub next_recovery_at: Option<DateTime<Utc>>,
    pub unknown_cause: Option<UnknownCause>,
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub merchant_reference: Option<String>,
    /// What the provider said when last asked for an operator, and when.
    pub evidence: Option<(ProviderEvidence, DateTime<Utc>)>,
    /// Its place in the filter's order (what the next page's cursor carries).
    pub sort_value: i64,
}

/// A page of the recovery queue and how many records match in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePage {
    pub total: i64,
    pub rows: Vec<QueueRow>,
}

impl QueueRow {
    pub(super) fn read<D: Dialect>(row: &<D as sqlx::Database>::Row) -> Result<QueueRow, StoreError> {
        let stored = |name: &str, text: Option<String>| {
            text.map(|text| StoreError::parse_stored(name, &text)).transpose()
        };
        let evidence_kind: Option<EvidenceKind> = stored("evidence", row.try_get("evidence")?)?;
        let evidence = match (
            evidence_kind,
            row.try_get::<Option<DateTime<Utc>>, _>("evidence_at")?,
        ) {
            (Some(kind), Some(at)) => {
                let detail: Option<String> = row.try_get("evidence_detail")?;
                Some((ProviderEvidence::from_kept(kind, detail.unwrap_or_default()), at))
            }
            _ => None,
        };
        Ok(QueueRow {
            record: RecordName::read::<D>(row)?,
            tenant_name: row.try_get("tenant_name")?,
            status: StoreError::parse_stored("record status", &row.try_get::<String, _>("status")?)?,
            version: row.try_get("lease_version")?,
            resource_id: row.try_get("resource_id")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
            recovery_attempts: row.try_get("recovery_attempts")?,
            next_recovery_at: row.try_get("next_recovery_at")?,
            unknown_cause: StoreError::parse_optional("unknown cause", row.try_get("unknown_cause")?)?,
            last_error: row.try_get("last_error")?,
            last_error_at: row.try_get("last_error_at")?,
            amount_minor: row.try_get("amount_minor")?,
            currency: row.try_get("currency")?,
            merchant_reference: row.try_get("merchant_reference")?,
            evidence,
            sort_value: row.try_get("sort_value")?,
        })
    }
}

/// Microseconds: PostgreSQL keeps them, and a cursor rounded down would skip rows.
pub(crate) fn cursor_time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}
