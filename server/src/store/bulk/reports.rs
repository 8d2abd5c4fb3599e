//! A bulk job as it is reported: its state and counts, its groups, its items' results, and how each is read.

use crate::store::bulk::BulkItem;
use crate::store::bulk::BulkItemResult;
use crate::store::console::RecordName;
use crate::store::dialect::{Dialect, SqlStore};
use crate::store::error::StoreError;
use chrono::{DateTime, Utc};
use domain::recovery::{BulkJobState, EvidenceKind, ProviderEvidence, ReconcileAction};
use sqlx::Row;

/// A job, without its items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkJob {
    pub id: String,
    pub name: String,
    pub state: BulkJobState,
    pub selection: String,
    pub requested_by: String,
    pub reason: String,
    pub applied_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub applied_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub counts: JobCounts,
}

/// How far a job got, counted over its items.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobCounts {
    pub items: i64,
    pub previewed: i64,
    /// Items in the groups kept (every item until the job is applied).
    pub included: i64,
    pub done: i64,
    pub ok: i64,
}

/// One group of a previewed job: the records of one operation the provider said the same of,
/// and what was proposed for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobGroup {
    pub operation: String,
    pub evidence: EvidenceKind,
    /// The action applied to the group (proposed, or chosen at apply); `None` when nothing
    /// can be applied.
    pub action: Option<ReconcileAction>,
    pub included: bool,
    pub items: i64,
    pub done: i64,
    pub ok: i64,
}

/// One item with everything known of it, for the job's page and its results file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemReport {
    pub position: i32,
    pub record: RecordName,
    pub version: i64,
    pub evidence: Option<ProviderEvidence>,
    pub action: Option<ReconcileAction>,
    pub included: bool,
    pub result: Option<BulkItemResult>,
    pub done_at: Option<DateTime<Utc>>,
}

/// The columns of a job with its counts, for [`job_of`].
pub(crate) const JOB_COLUMNS: &str = "j.id, j.name, j.state, j.selection, j.requested_by, j.reason, j.applied_by, \
     j.created_at, j.applied_at, j.finished_at, \
     (select count(*) from bulk_job_items i where i.job_id = j.id) as items, \
     (select count(*) from bulk_job_items i where i.job_id = j.id and i.previewed_at is not null) as previewed, \
     (select count(*) from bulk_job_items i where i.job_id = j.id and i.included) as included, \
     (select count(*) from bulk_job_items i where i.job_id = j.id and i.included and i.done_at is not null) as done, \
     (select count(*) from bulk_job_items i where i.job_id = j.id and i.ok) as ok_items";

pub(crate) fn job_of<D: Dialect>(row: &<D as sqlx::Database>::Row) -> Result<BulkJob, StoreError> {
    Ok(BulkJob {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        state: StoreError::parse_stored("bulk job state", &row.try_get::<String, _>("state")?)?,
        selection: row.try_get("selection")?,
        requested_by: row.try_get("requested_by")?,
        reason: row.try_get("reason")?,
        applied_by: row.try_get("applied_by")?,
        created_at: row.try_get("created_at")?,
        applied_at: row.try_get("applied_at")?,
        finished_at: row.try_get("finished_at")?,
        counts: JobCounts {
            items: row.try_get("items")?,
            previewed: row.try_get("previewed")?,
            included: row.try_get("included")?,
            done: row.try_get("done")?,
            ok: row.try_get("ok_items")?,
        },
    })
}

pub(crate) fn item_of<D: Dialect>(row: &<D as sqlx::Database>::Row) -> Result<BulkItem, StoreError> {
    Ok(BulkItem {
        position: row.try_get("position")?,
        record: RecordName::read::<D>(row)?,
        version: row.try_get("record_version")?,
        action: StoreError::parse_optional("bulk action", row.try_get("action")?)?,
    })
}

pub(crate) fn report_of<D: Dialect>(row: &<D as sqlx::Database>::Row) -> Result<ItemReport, StoreError> {
    let item = item_of::<D>(row)?;
    let detail: Option<String> = row.try_get("evidence_detail")?;
    let evidence = StoreError::parse_optional::<EvidenceKind>("evidence", row.try_get("evidence")?)?
        .map(|kind| ProviderEvidence::from_kept(kind, detail.unwrap_or_default()));
    let ok: Option<bool> = row.try_get("ok")?;
    let result = match ok {
        Some(ok) => Some(BulkItemResult {
            ok,
            message: row.try_get::<Option<String>, _>("message")?.unwrap_or_default(),
            status: StoreError::parse_optional("record status", row.try_get("record_status")?)?,
        }),
        None => None,
    };
    Ok(ItemReport {
        position: item.position,
        record: item.record,
        version: item.version,
        evidence,
        action: item.action,
        included: row.try_get("included")?,
        result,
        done_at: row.try_get("done_at")?,
    })
}

pub(crate) const ITEM_COLUMNS: &str =
    "position, tenant_id, operation_name, idempotency_key, record_version, action";

impl<D: Dialect> SqlStore<D> {
    /// The job's items that `condition` (SQL over `bulk_job_items`) keeps, in order.
    pub(super) async fn bulk_items_where(
        &self,
        job_id: &str,
        condition: &'static str,
    ) -> Result<Vec<BulkItem>, StoreError> {
        let rows = sqlx::query(&format!(
            "select {ITEM_COLUMNS} from bulk_job_items where job_id = $1 and {condition} order by position"
        ))
        .bind(job_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(item_of::<D>).collect()
    }
}
