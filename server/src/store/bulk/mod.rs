//! Bulk reconciliations, run in the background: the frozen set of items (record and version)
//! written with the job, each item's preview (the provider's evidence and the action proposed
//! for it), the groups an operator kept with the job's name and reason, a runner's lease on
//! the job (so that one instance runs it and another resumes it when that one died), each
//! item's result as it is done, and the operator's pause, resume and abort.

use crate::store::bulk::reports::ITEM_COLUMNS;
use crate::store::bulk::reports::JOB_COLUMNS;
use crate::store::bulk::reports::job_of;
use crate::store::bulk::reports::report_of;
mod reports;

pub use reports::{BulkJob, ItemReport, JobCounts, JobGroup};

use super::console::RecordName;

use super::dialect::{Dialect, RowsAffected, SqlStore, WriteTx};

use super::error::StoreError;

use domain::record::RecordStatus;

use domain::recovery::{BulkControl, BulkJobState, EvidenceKind, ProviderEvidence, ReconcileAction};

use domain::scope::Operation;

use sqlx::Row;

use std::time::Duration;

/// One record of a bulk job, frozen when the job was made: the record at the version seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrozenItem {
    pub position: i32,
    pub record: RecordName,
    pub version: i64,
}

/// An item as the runner takes it: frozen, with the action to apply (none before its preview).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkItem {
    pub position: i32,
    pub record: RecordName,
    pub version: i64,
    pub action: Option<ReconcileAction>,
}

/// An item's preview: what the provider said and the action proposed (none: nothing can be
/// applied to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemPreview {
    pub evidence: ProviderEvidence,
    pub proposed: Option<ReconcileAction>,
}

/// How one item ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkItemResult {
    pub ok: bool,
    pub message: String,
    /// The record's status after it, when it could be read.
    pub status: Option<RecordStatus>,
}

/// A new job: who selects, and how (the filter or "by hand", for the record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBulkJob {
    pub id: String,
    pub requested_by: String,
    pub selection: String,
}

/// A job a runner holds: who started it and why (each item is applied in their name), and
/// what it is doing (previewing or applying).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedBulkJob {
    pub id: String,
    pub requested_by: String,
    pub reason: String,
    pub state: BulkJobState,
}

/// What an operator kept of one group of a previewed job: the group (operation, evidence)
/// and the action applied to it, or `None` to leave it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupChoice {
    pub operation: Operation,
    pub evidence: EvidenceKind,
    pub action: Option<ReconcileAction>,
}

/// The operator's word that starts a previewed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobApproval {
    pub applied_by: String,
    pub name: String,
    pub reason: String,
    pub choices: Vec<GroupChoice>,
}

#[async_trait::async_trait]
pub trait BulkStore: Send + Sync {
    /// The job (previewing) and its frozen items, in one transaction.
    async fn create_bulk_job(&self, job: &NewBulkJob, items: &[FrozenItem]) -> Result<(), StoreError>;

    /// Takes a job that has work to do (previewing or running) that nobody holds, or whose
    /// holder's lease ran out, for `lease`: the one named, or else the oldest.
    async fn claim_bulk_job(
        &self,
        only: Option<&str>,
        lease: Duration,
    ) -> Result<Option<ClaimedBulkJob>, StoreError>;

    /// The job's state now (`None`: no such job).
    async fn bulk_job_state(&self, job_id: &str) -> Result<Option<BulkJobState>, StoreError>;

    /// The items not previewed yet, in order.
    async fn unpreviewed_bulk_items(&self, job_id: &str) -> Result<Vec<BulkItem>, StoreError>;

    /// An item's preview at the record's version it saw (what applying it is guarded by); the
    /// runner's lease is renewed with it.
    async fn note_bulk_preview(
        &self,
        job_id: &str,
        position: i32,
        version: i64,
        preview: &ItemPreview,
        lease: Duration,
    ) -> Result<(), StoreError>;

    /// Previewing -> previewed, the runner's lease given back.
    async fn finish_bulk_preview(&self, job_id: &str) -> Result<(), StoreError>;

    /// Previewed -> running with the operator's name, reason and choices, in one transaction;
    /// `false` when the job was not previewed (not yet, or no longer).
    async fn apply_bulk_job(&self, job_id: &str, approval: &JobApproval) -> Result<bool, StoreError>;

    /// The items kept and not done yet, in order.
    async fn pending_bulk_items(&self, job_id: &str) -> Result<Vec<BulkItem>, StoreError>;

    /// An item's result; the runner's lease is renewed with it.
    async fn finish_bulk_item(
        &self,
        job_id: &str,
        position: i32,
        result: &BulkItemResult,
        lease: Duration,
    ) -> Result<(), StoreError>;

    /// Running -> finished.
    async fn finish_bulk_job(&self, job_id: &str) -> Result<(), StoreError>;

    /// An operator's pause, resume or abort, if the job is in a state it applies to; an abort
    /// reports every kept item not done as not applied, in the same transaction.
    async fn control_bulk_job(&self, job_id: &str, control: BulkControl) -> Result<bool, StoreError>;

    async fn bulk_job(&self, job_id: &str) -> Result<Option<BulkJob>, StoreError>;

    /// The job's groups, by operation and evidence.
    async fn bulk_job_groups(&self, job_id: &str) -> Result<Vec<JobGroup>, StoreError>;

    /// The job's items in order, from `from_position`, `limit` at most.
    async fn bulk_job_items(
        &self,
        job_id: &str,
        from_position: i32,
        limit: i64,
    ) -> Result<Vec<ItemReport>, StoreError>;

    /// The newest jobs first, `limit` at most.
    async fn bulk_jobs(&self, limit: i64) -> Result<Vec<BulkJob>, StoreError>;
}

/// Bulk statements that differ by dialect.
pub trait BulkStatements {
    /// `$1` job, `$2` the message: every kept item not done is reported not applied.
    const ABORT_ITEMS: &'static str;
}

/// `$1` job, `$2` lease seconds.
const RENEW_JOB: &str = "update bulk_jobs set runner_until = {now+$2} where id = $1";

/// `$1` lease seconds, `$2` the job's id or empty for any: returns id, requested_by (the
/// operator who applied it, once applied), reason, state.
const CLAIM_JOB: &str = "update bulk_jobs set runner_until = {now+$1} where id in (select id from bulk_jobs where \
     state in ('previewing', 'running') and (runner_until is null or runner_until <= {now}) and \
     ($2 = '' or id = $2) order by created_at limit 1 {skip_locked}) returning id, \
     coalesce(applied_by, requested_by) as requested_by, reason, state";

/// `$1` job, `$2` position, `$3` evidence kind, `$4` its detail, `$5` proposed action, `$6`
/// the record's version previewed.
const NOTE_PREVIEW: &str = "update bulk_job_items set evidence = $3, evidence_detail = $4, action = $5, record_version = \
     $6, previewed_at = {now} where job_id = $1 and position = $2";

/// `$1` job: running -> finished.
const FINISH_JOB: &str = "update bulk_jobs set state = 'finished', finished_at = {now}, runner_until = null where id = \
     $1 and state = 'running'";

/// `$1` job, `$2` position, `$3` ok, `$4` message, `$5` record status.
const FINISH_ITEM: &str = "update bulk_job_items set ok = $3, message = $4, record_status = $5, done_at = {now} where \
     job_id = $1 and position = $2";

/// `$1` job, `$2` name, `$3` reason, `$4` applied by: previewed -> running.
const APPLY_JOB: &str = "update bulk_jobs set state = 'running', name = $2, reason = $3, applied_by = $4, applied_at \
     = {now}, runner_until = null where id = $1 and state = 'previewed'";

/// `$1` job: -> aborted, from a state an abort applies to.
const ABORT_JOB: &str = "update bulk_jobs set state = 'aborted', finished_at = {now} where id = $1 and state in \
     ('previewing', 'previewed', 'running', 'paused')";

/// Keeps the runner's lease on `job_id` for another `lease`, in the transaction that records
/// an item's progress (a runner that stops renewing it is taken over).
async fn renew_job_in<D: Dialect>(
    tx: &mut WriteTx<D>,
    job_id: &str,
    lease: Duration,
) -> Result<(), StoreError> {
    sqlx::query(D::sql(RENEW_JOB))
        .bind(job_id)
        .bind(lease.as_secs_f64())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[async_trait::async_trait]
impl<D: Dialect + BulkStatements> BulkStore for SqlStore<D> {
    async fn create_bulk_job(&self, job: &NewBulkJob, items: &[FrozenItem]) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "insert into bulk_jobs (id, requested_by, reason, state, selection) \
             values ($1, $2, '', 'previewing', $3)",
        )
        .bind(job.id.as_str())
        .bind(job.requested_by.as_str())
        .bind(job.selection.as_str())
        .execute(&mut *tx)
        .await?;
        for item in items {
            sqlx::query(
                "insert into bulk_job_items (job_id, position, tenant_id, operation_name, idempotency_key, \
                 record_version) values ($1, $2, $3, $4, $5, $6)",
            )
            .bind(job.id.as_str())
            .bind(item.position)
            .bind(item.record.tenant_id.as_str())
            .bind(item.record.operation.as_str())
            .bind(item.record.key.as_str())
            .bind(item.version)
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
        let claimed = sqlx::query(D::sql(CLAIM_JOB))
            .bind(lease.as_secs_f64())
            .bind(only.unwrap_or_default())
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        claimed
            .map(|row| {
                Ok(ClaimedBulkJob {
                    id: row.try_get("id")?,
                    requested_by: row.try_get("requested_by")?,
                    reason: row.try_get("reason")?,
                    state: StoreError::parse_stored("bulk job state", &row.try_get::<String, _>("state")?)?,
                })
            })
            .transpose()
    }

    async fn bulk_job_state(&self, job_id: &str) -> Result<Option<BulkJobState>, StoreError> {
        let state: Option<String> = sqlx::query_scalar("select state from bulk_jobs where id = $1")
            .bind(job_id)
            .fetch_optional(&self.pool)
            .await?;
        StoreError::parse_optional("bulk job state", state)
    }

    async fn unpreviewed_bulk_items(&self, job_id: &str) -> Result<Vec<BulkItem>, StoreError> {
        self.bulk_items_where(job_id, "previewed_at is null").await
    }

    async fn note_bulk_preview(
        &self,
        job_id: &str,
        position: i32,
        version: i64,
        preview: &ItemPreview,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(D::sql(NOTE_PREVIEW))
            .bind(job_id)
            .bind(position)
            .bind(preview.evidence.kind().as_str())
            .bind(preview.evidence.detail())
            .bind(preview.proposed.map(ReconcileAction::as_str))
            .bind(version)
            .execute(&mut *tx)
            .await?;
        renew_job_in(&mut tx, job_id, lease).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn finish_bulk_preview(&self, job_id: &str) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(
                "update bulk_jobs set state = 'previewed', runner_until = null \
                 where id = $1 and state = 'previewing'",
            )
            .bind(job_id),
        )
        .await?;
        Ok(())
    }

    async fn apply_bulk_job(&self, job_id: &str, approval: &JobApproval) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let started = sqlx::query(D::sql(APPLY_JOB))
            .bind(job_id)
            .bind(approval.name.as_str())
            .bind(approval.reason.as_str())
            .bind(approval.applied_by.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if started != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        // Items with nothing to apply are never kept; each group the operator chose is kept
        // with its action, or left out.
        sqlx::query("update bulk_job_items set included = false where job_id = $1 and action is null")
            .bind(job_id)
            .execute(&mut *tx)
            .await?;
        for choice in &approval.choices {
            sqlx::query(
                "update bulk_job_items set action = coalesce($4, action), included = $5 \
                 where job_id = $1 and operation_name = $2 and evidence = $3 and action is not null",
            )
            .bind(job_id)
            .bind(choice.operation.as_str())
            .bind(choice.evidence.as_str())
            .bind(choice.action.map(ReconcileAction::as_str))
            .bind(choice.action.is_some())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn pending_bulk_items(&self, job_id: &str) -> Result<Vec<BulkItem>, StoreError> {
        self.bulk_items_where(job_id, "done_at is null and included and action is not null")
            .await
    }

    async fn finish_bulk_item(
        &self,
        job_id: &str,
        position: i32,
        result: &BulkItemResult,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(D::sql(FINISH_ITEM))
            .bind(job_id)
            .bind(position)
            .bind(result.ok)
            .bind(result.message.as_str())
            .bind(result.status.map(RecordStatus::as_str))
            .execute(&mut *tx)
            .await?;
        renew_job_in(&mut tx, job_id, lease).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn finish_bulk_job(&self, job_id: &str) -> Result<(), StoreError> {
        self.write_one(sqlx::query(D::sql(FINISH_JOB)).bind(job_id))
            .await?;
        Ok(())
    }

    async fn control_bulk_job(&self, job_id: &str, control: BulkControl) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let changed = match control {
            BulkControl::Pause => sqlx::query(
                "update bulk_jobs set state = 'paused' where id = $1 and state = 'running'",
            ),
            // Resumed by whichever instance claims it first (its runner let it go).
            BulkControl::Resume => sqlx::query(
                "update bulk_jobs set state = 'running', runner_until = null where id = $1 and state = 'paused'",
            ),
            BulkControl::Abort => sqlx::query(D::sql(ABORT_JOB)),
        }
        .bind(job_id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if changed && control == BulkControl::Abort {
            sqlx::query(D::ABORT_ITEMS)
                .bind(job_id)
                .bind("not applied: the job was aborted")
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(changed)
    }

    async fn bulk_job(&self, job_id: &str) -> Result<Option<BulkJob>, StoreError> {
        let row = sqlx::query(&format!("select {JOB_COLUMNS} from bulk_jobs j where j.id = $1"))
            .bind(job_id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(job_of::<D>).transpose()
    }

    async fn bulk_job_groups(&self, job_id: &str) -> Result<Vec<JobGroup>, StoreError> {
        let rows = sqlx::query(
            "select operation_name, evidence, action, included, count(*) as items, \
             count(done_at) as done, sum(case when ok then 1 else 0 end) as ok_items \
             from bulk_job_items where job_id = $1 and evidence is not null \
             group by operation_name, evidence, action, included \
             order by count(*) desc, operation_name, evidence, action",
        )
        .bind(job_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(JobGroup {
                    operation: row.try_get("operation_name")?,
                    evidence: StoreError::parse_stored("evidence", &row.try_get::<String, _>("evidence")?)?,
                    action: StoreError::parse_optional("bulk action", row.try_get("action")?)?,
                    included: row.try_get("included")?,
                    items: row.try_get("items")?,
                    done: row.try_get("done")?,
                    ok: row.try_get("ok_items")?,
                })
            })
            .collect()
    }

    async fn bulk_job_items(
        &self,
        job_id: &str,
        from_position: i32,
        limit: i64,
    ) -> Result<Vec<ItemReport>, StoreError> {
        let rows = sqlx::query(&format!(
            "select {ITEM_COLUMNS}, evidence, evidence_detail, included, ok, message, record_status, done_at \
             from bulk_job_items where job_id = $1 and position >= $2 order by position limit $3"
        ))
        .bind(job_id)
        .bind(from_position)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(report_of::<D>).collect()
    }

    async fn bulk_jobs(&self, limit: i64) -> Result<Vec<BulkJob>, StoreError> {
        let rows = sqlx::query(&format!(
            "select {JOB_COLUMNS} from bulk_jobs j order by j.created_at desc, j.id desc limit $1"
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(job_of::<D>).collect()
    }
}
