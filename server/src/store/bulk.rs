//! Bulk reconciliations run in the background: the frozen set of items (record, version,
//! action) written with the job, a runner's lease on the job (so that one instance runs it
//! and another resumes it when that one died), each item's result as it is done.

use super::console::RecordName;
use super::dialect::{Dialect, SqlStore};
use super::error::StoreError;
use chrono::{DateTime, Utc};
use domain::record::RecordStatus;
use domain::recovery::ReconcileAction;
use std::time::Duration;

/// One record of a bulk reconciliation, as the operator saw it in the preview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkItem {
    pub position: i32,
    pub record: RecordName,
    pub version: i64,
    pub action: ReconcileAction,
}

/// How one item ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkItemResult {
    pub ok: bool,
    pub message: String,
    /// The record's status after it, when it could be read.
    pub status: Option<RecordStatus>,
}

/// A job a runner holds: who started it and why (each item is applied in their name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedBulkJob {
    pub id: String,
    pub requested_by: String,
    pub reason: String,
}

/// A job and how far it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkJob {
    pub id: String,
    pub requested_by: String,
    pub reason: String,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub items: Vec<(BulkItem, Option<BulkItemResult>)>,
}

#[async_trait::async_trait]
pub trait BulkStore: Send + Sync {
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
        result: &BulkItemResult,
        lease: Duration,
    ) -> Result<(), StoreError>;

    async fn finish_bulk_job(&self, job_id: &str) -> Result<(), StoreError>;

    async fn bulk_job(&self, job_id: &str) -> Result<Option<BulkJob>, StoreError>;
}

/// Bulk statements that differ by dialect.
pub trait BulkStatements {
    /// `$1` lease seconds, `$2` the job's id or empty for any: returns id, requester, reason.
    const CLAIM_JOB: &'static str;
    /// `$1` job, `$2` lease seconds.
    const RENEW_JOB: &'static str;
    /// `$1` job, `$2` position, `$3` ok, `$4` message, `$5` record status.
    const FINISH_ITEM: &'static str;
    /// `$1` job.
    const FINISH_JOB: &'static str;
}

/// Position, tenant, operation, key, version, action.
type ItemRow = (i32, String, String, String, i64, String);

fn item_of((position, tenant_id, operation, key, version, action): ItemRow) -> Result<BulkItem, StoreError> {
    Ok(BulkItem {
        position,
        record: RecordName {
            tenant_id,
            operation,
            key,
        },
        version,
        action: StoreError::parse_stored("bulk action", &action)?,
    })
}

#[async_trait::async_trait]
impl<D: Dialect + BulkStatements> BulkStore for SqlStore<D> {
    async fn create_bulk_job(&self, job: &ClaimedBulkJob, items: &[BulkItem]) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("insert into bulk_jobs (id, requested_by, reason) values ($1, $2, $3)")
            .bind(job.id.as_str())
            .bind(job.requested_by.as_str())
            .bind(job.reason.as_str())
            .execute(&mut *tx)
            .await?;
        for item in items {
            sqlx::query(
                "insert into bulk_job_items (job_id, position, tenant_id, operation_name, idempotency_key, \
                 record_version, action) values ($1, $2, $3, $4, $5, $6, $7)",
            )
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
        lease: Duration,
    ) -> Result<Option<ClaimedBulkJob>, StoreError> {
        let mut tx = self.begin().await?;
        let claimed: Option<(String, String, String)> = sqlx::query_as(D::CLAIM_JOB)
            .bind(lease.as_secs_f64())
            .bind(only.unwrap_or_default())
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(claimed.map(|(id, requested_by, reason)| ClaimedBulkJob {
            id,
            requested_by,
            reason,
        }))
    }

    async fn pending_bulk_items(&self, job_id: &str) -> Result<Vec<BulkItem>, StoreError> {
        let rows: Vec<ItemRow> = sqlx::query_as(
            "select position, tenant_id, operation_name, idempotency_key, record_version, action \
             from bulk_job_items where job_id = $1 and done_at is null order by position",
        )
        .bind(job_id)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(item_of).collect()
    }

    async fn finish_bulk_item(
        &self,
        job_id: &str,
        position: i32,
        result: &BulkItemResult,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(D::FINISH_ITEM)
            .bind(job_id)
            .bind(position)
            .bind(result.ok)
            .bind(result.message.as_str())
            .bind(result.status.map(RecordStatus::as_str))
            .execute(&mut *tx)
            .await?;
        sqlx::query(D::RENEW_JOB)
            .bind(job_id)
            .bind(lease.as_secs_f64())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn finish_bulk_job(&self, job_id: &str) -> Result<(), StoreError> {
        self.write_one(sqlx::query(D::FINISH_JOB).bind(job_id)).await?;
        Ok(())
    }

    async fn bulk_job(&self, job_id: &str) -> Result<Option<BulkJob>, StoreError> {
        let job: Option<(String, String, String, DateTime<Utc>, Option<DateTime<Utc>>)> = sqlx::query_as(
            "select id, requested_by, reason, created_at, finished_at from bulk_jobs where id = $1",
        )
        .bind(job_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some((id, requested_by, reason, created_at, finished_at)) = job else {
            return Ok(None);
        };
        let rows: Vec<(
            i32,
            String,
            String,
            String,
            i64,
            String,
            Option<bool>,
            Option<String>,
            Option<String>,
        )> = sqlx::query_as(
            "select position, tenant_id, operation_name, idempotency_key, record_version, action, ok, \
                 message, record_status from bulk_job_items where job_id = $1 order by position",
        )
        .bind(job_id)
        .fetch_all(&self.pool)
        .await?;
        let items = rows
            .into_iter()
            .map(
                |(position, tenant_id, operation, key, version, action, ok, message, status)| {
                    let item = item_of((position, tenant_id, operation, key, version, action))?;
                    let result = ok.map(|ok| BulkItemResult {
                        ok,
                        message: message.unwrap_or_default(),
                        status: status.and_then(|status| status.parse().ok()),
                    });
                    Ok((item, result))
                },
            )
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Some(BulkJob {
            id,
            requested_by,
            reason,
            created_at,
            finished_at,
            items,
        }))
    }
}
