//! Bulk reconciliations run in the background: the frozen set of items (record, version,
//! action) written with the job, a runner's lease on the job (so that one instance runs it
//! and another resumes it when that one died), each item's result as it is done. One body for
//! both dialects; statements that differ are in [`BulkSql`].

use crate::store::StoreError;
use app::dto::{BulkItemView, BulkJobView, ReconcileResult, RecordRef};
use chrono::{DateTime, Utc};
use domain::record::RecordStatus;
use domain::recovery::ReconcileAction;
use std::time::Duration;

/// One record of a bulk reconciliation, as the operator saw it in the preview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkItem {
    pub position: i32,
    pub record: RecordRef,
    pub version: i64,
    pub action: ReconcileAction,
}

/// A job a runner holds: who started it and why (each item is applied in their name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedBulkJob {
    pub id: String,
    pub requested_by: String,
    pub reason: String,
}

pub fn new_bulk_job_id() -> String {
    format!("blk_{}", domain::random::random_hex(12))
}

#[async_trait::async_trait]
pub trait BulkStore {
    /// The job and its items, in one transaction.
    async fn create_bulk_job(&self, job: &ClaimedBulkJob, items: &[BulkItem]) -> Result<(), StoreError>;

    /// Takes an unfinished job nobody holds (or whose holder's lease ran out) for `lease`:
    /// the one named, or else the oldest.
    async fn claim_bulk_job(
        &self,
        only: Option<&str>,
        lease: Duration,
    ) -> Result<Option<ClaimedBulkJob>, StoreError>;

    /// The items not done yet, in order.
    async fn pending_bulk_items(&self, job_id: &str) -> Result<Vec<BulkItem>, StoreError>;

    /// An item's result; the runner's lease is renewed with it.
    async fn finish_bulk_item(
        &self,
        job_id: &str,
        position: i32,
        result: &ReconcileResult,
        lease: Duration,
    ) -> Result<(), StoreError>;

    async fn finish_bulk_job(&self, job_id: &str) -> Result<(), StoreError>;

    async fn bulk_job(&self, job_id: &str) -> Result<Option<BulkJobView>, StoreError>;
}

pub(super) struct BulkSql {
    /// `$1` lease seconds, `$2` the job's id or empty for any: returns id, requester, reason.
    pub claim_job: &'static str,
    /// `$1` job, `$2` lease seconds.
    pub renew_job: &'static str,
    /// `$1` job, `$2` position, `$3` ok, `$4` message, `$5` record status.
    pub finish_item: &'static str,
    /// `$1` job.
    pub finish_job: &'static str,
}

pub(super) const INSERT_JOB: &str = "insert into bulk_jobs (id, requested_by, reason) values ($1, $2, $3)";
pub(super) const INSERT_ITEM: &str = "insert into bulk_job_items (job_id, position, tenant_id, \
     operation_name, idempotency_key, record_version, action) values ($1, $2, $3, $4, $5, $6, $7)";
pub(super) const PENDING_ITEMS: &str = "select position, tenant_id, operation_name, idempotency_key, \
     record_version, action from bulk_job_items where job_id = $1 and done_at is null order by position";
pub(super) const JOB: &str =
    "select id, requested_by, reason, created_at, finished_at from bulk_jobs where id = $1";
pub(super) const JOB_ITEMS: &str = "select position, tenant_id, operation_name, idempotency_key, \
     record_version, action, ok, message, record_status from bulk_job_items where job_id = $1 order by position";

pub(super) type ItemRow = (i32, String, String, String, i64, String);
pub(super) type ItemResultRow = (
    i32,
    String,
    String,
    String,
    i64,
    String,
    Option<bool>,
    Option<String>,
    Option<String>,
);
pub(super) type JobRow = (String, String, String, DateTime<Utc>, Option<DateTime<Utc>>);

fn action_of(stored: &str) -> Result<ReconcileAction, StoreError> {
    stored
        .parse()
        .map_err(|_| StoreError::Corrupt(format!("bulk action {stored}")))
}

pub(super) fn item_of(
    (position, tenant_id, operation, key, version, action): ItemRow,
) -> Result<BulkItem, StoreError> {
    Ok(BulkItem {
        position,
        record: RecordRef {
            tenant_id,
            operation,
            key,
        },
        version,
        action: action_of(&action)?,
    })
}

pub(super) fn job_of(
    (id, requested_by, reason, created_at, finished_at): JobRow,
    rows: Vec<ItemResultRow>,
) -> Result<BulkJobView, StoreError> {
    let items = rows
        .into_iter()
        .map(
            |(position, tenant_id, operation, key, version, action, ok, message, status)| {
                let record = RecordRef {
                    tenant_id,
                    operation,
                    key,
                };
                Ok(BulkItemView {
                    position,
                    version,
                    action: action_of(&action)?,
                    result: ok.map(|ok| ReconcileResult {
                        record: record.clone(),
                        ok,
                        status: status
                            .as_deref()
                            .and_then(|status| status.parse::<RecordStatus>().ok()),
                        message: message.unwrap_or_default(),
                    }),
                    record,
                })
            },
        )
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(BulkJobView {
        id,
        requested_by,
        reason,
        created_at: crate::store::rfc3339_millis(created_at),
        finished_at: finished_at.map(crate::store::rfc3339_millis),
        items,
    })
}

macro_rules! impl_bulk_store {
    ($store:ty, $sql:expr) => {
        #[async_trait::async_trait]
        impl $crate::store::bulk::BulkStore for $store {
            async fn create_bulk_job(
                &self,
                job: &$crate::store::bulk::ClaimedBulkJob,
                items: &[$crate::store::bulk::BulkItem],
            ) -> Result<(), $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                sqlx::query($crate::store::bulk::INSERT_JOB)
                    .bind(job.id.as_str())
                    .bind(job.requested_by.as_str())
                    .bind(job.reason.as_str())
                    .execute(&mut *tx)
                    .await?;
                for item in items {
                    sqlx::query($crate::store::bulk::INSERT_ITEM)
                        .bind(job.id.as_str())
                        .bind(item.position)
                        .bind(item.record.tenant_id.as_str())
                        .bind(item.record.operation.as_str())
                        .bind(item.record.key.as_str())
                        .bind(item.version)
                        .bind(item.action.as_str())
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn claim_bulk_job(
                &self,
                only: Option<&str>,
                lease: std::time::Duration,
            ) -> Result<Option<$crate::store::bulk::ClaimedBulkJob>, $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                let claimed: Option<(String, String, String)> = sqlx::query_as($sql.claim_job)
                    .bind(lease.as_secs_f64())
                    .bind(only.unwrap_or_default())
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(claimed.map(
                    |(id, requested_by, reason)| $crate::store::bulk::ClaimedBulkJob {
                        id,
                        requested_by,
                        reason,
                    },
                ))
            }

            async fn pending_bulk_items(
                &self,
                job_id: &str,
            ) -> Result<Vec<$crate::store::bulk::BulkItem>, $crate::store::StoreError> {
                let rows: Vec<$crate::store::bulk::ItemRow> =
                    sqlx::query_as($crate::store::bulk::PENDING_ITEMS)
                        .bind(job_id)
                        .fetch_all(&self.pool)
                        .await?;
                rows.into_iter().map($crate::store::bulk::item_of).collect()
            }

            async fn finish_bulk_item(
                &self,
                job_id: &str,
                position: i32,
                result: &app::dto::ReconcileResult,
                lease: std::time::Duration,
            ) -> Result<(), $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                sqlx::query($sql.finish_item)
                    .bind(job_id)
                    .bind(position)
                    .bind(result.ok)
                    .bind(result.message.as_str())
                    .bind(result.status.map(|status| status.as_str()))
                    .execute(&mut *tx)
                    .await?;
                sqlx::query($sql.renew_job)
                    .bind(job_id)
                    .bind(lease.as_secs_f64())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn finish_bulk_job(&self, job_id: &str) -> Result<(), $crate::store::StoreError> {
                $crate::store::shared::write_one!(self.pool, $sql.finish_job, job_id).await?;
                Ok(())
            }

            async fn bulk_job(
                &self,
                job_id: &str,
            ) -> Result<Option<app::dto::BulkJobView>, $crate::store::StoreError> {
                let job: Option<$crate::store::bulk::JobRow> = sqlx::query_as($crate::store::bulk::JOB)
                    .bind(job_id)
                    .fetch_optional(&self.pool)
                    .await?;
                let Some(job) = job else {
                    return Ok(None);
                };
                let items: Vec<$crate::store::bulk::ItemResultRow> =
                    sqlx::query_as($crate::store::bulk::JOB_ITEMS)
                        .bind(job_id)
                        .fetch_all(&self.pool)
                        .await?;
                $crate::store::bulk::job_of(job, items).map(Some)
            }
        }
    };
}
pub(super) use impl_bulk_store;
