//! Bulk reconciliation in the background. Starting a job writes the frozen set (each record at
//! the version its preview showed, with the action shown) and runs it at once in this
//! instance, holding a lease on the job; every instance also resumes, now and then, unfinished
//! jobs whose runner's lease ran out (the process died). Each item is applied exactly as a
//! single reconciliation (guards, audit) in the name of the operator who started the job, and
//! only while they may still reconcile: their role and standing are read again for every item.

use super::{StoreConsole, checked_reason, scope_of, unavailable, views};
use crate::store::StoreError;
use crate::store::bulk::{BulkItem, BulkItemResult, ClaimedBulkJob};
use crate::store::operators::StoredOperator;
use app::backend::{ConsoleActions, ConsoleError};
use app::dto::{BulkJobView, CurrentOperator, RecordRef};
use domain::operator::{AuditEntry, OperatorRole};
use domain::recovery::ReconcileAction;
use std::time::Duration;

/// How long a runner holds a job without finishing an item before another may resume it:
/// longer than one item can take (a provider call, bounded by its timeout).
pub const BULK_LEASE: Duration = Duration::from_secs(60);

/// Records one bulk reconciliation takes at most.
const MAX_BULK_ITEMS: usize = 500;

impl StoreConsole {
    /// Writes the frozen set and starts running it here.
    pub(super) async fn start_bulk_job(
        &self,
        operator: &CurrentOperator,
        items: Vec<(RecordRef, i64, ReconcileAction)>,
        reason: String,
    ) -> Result<BulkJobView, ConsoleError> {
        let reason = checked_reason(&reason)?;
        if items.is_empty() || items.len() > MAX_BULK_ITEMS {
            return Err(ConsoleError::Invalid(format!(
                "a bulk reconciliation takes 1 to {MAX_BULK_ITEMS} records"
            )));
        }
        let items = items
            .into_iter()
            .zip(0..)
            .map(|((record, version, action), position)| {
                scope_of(&record)?;
                Ok(BulkItem {
                    position,
                    record: views::record_name(&record),
                    version,
                    action,
                })
            })
            .collect::<Result<Vec<_>, ConsoleError>>()?;
        let job = ClaimedBulkJob {
            id: format!("blk_{}", domain::random::random_hex(12)),
            requested_by: operator.username.clone(),
            reason,
        };
        self.store
            .create_bulk_job(&job, &items)
            .await
            .map_err(unavailable("bulk reconcile"))?;
        // Run it here and now; if this instance dies, another resumes it after the lease.
        let claimed = self
            .store
            .claim_bulk_job(Some(&job.id), BULK_LEASE)
            .await
            .map_err(unavailable("bulk reconcile"))?;
        if let Some(claimed) = claimed {
            let console = self.clone();
            tokio::spawn(async move { console.run_bulk_job(claimed).await });
        }
        let view = self
            .store
            .bulk_job(&job.id)
            .await
            .map_err(unavailable("bulk job"))?;
        view.map(views::bulk_job)
            .ok_or_else(|| ConsoleError::Invalid("the job vanished".to_owned()))
    }

    /// One pass of the resumer: runs, one after the other, unfinished jobs nobody holds;
    /// returns how many.
    pub async fn resume_bulk_jobs(&self) -> usize {
        let mut resumed = 0;
        loop {
            match self.store.claim_bulk_job(None, BULK_LEASE).await {
                Ok(Some(job)) => {
                    tracing::warn!(job = %job.id, "bulk reconcile: resuming a job whose runner stopped");
                    self.run_bulk_job(job).await;
                    resumed += 1;
                }
                Ok(None) => return resumed,
                Err(error) => {
                    tracing::warn!(%error, "bulk reconcile: no job claimed; trying again later");
                    return resumed;
                }
            }
        }
    }

    /// Applies a claimed job's pending items in order, then marks it finished.
    async fn run_bulk_job(&self, job: ClaimedBulkJob) {
        let items = match self.store.pending_bulk_items(&job.id).await {
            Ok(items) => items,
            Err(error) => {
                tracing::error!(%error, job = %job.id, "bulk reconcile: items not read; resumed later");
                return;
            }
        };
        for item in items {
            let result = match self.run_bulk_item(&job, &item).await {
                Ok(result) => result,
                Err(error) => {
                    tracing::error!(%error, job = %job.id, "bulk reconcile: operator not read; resumed later");
                    return;
                }
            };
            if let Err(error) = self
                .store
                .finish_bulk_item(&job.id, item.position, &result, BULK_LEASE)
                .await
            {
                // Applied (and audited) but not noted: a resumed run finds the record changed
                // and says so, nothing is applied twice.
                tracing::error!(%error, job = %job.id, "bulk reconcile: result not recorded; resumed later");
                return;
            }
        }
        if let Err(error) = self.store.finish_bulk_job(&job.id).await {
            tracing::error!(%error, job = %job.id, "bulk reconcile: not marked finished; resumed later");
        }
    }

    /// One item, applied only if the job's operator may reconcile now (a role lowered or an
    /// account disabled since the job started stops what is left of it).
    async fn run_bulk_item(
        &self,
        job: &ClaimedBulkJob,
        item: &BulkItem,
    ) -> Result<BulkItemResult, StoreError> {
        let standing = self.store.operator_by_username(&job.requested_by).await?;
        let operator = match reconciling_operator(standing) {
            Ok(operator) => operator,
            Err(refusal) => {
                let message = format!("not applied: {} {refusal}", job.requested_by);
                let action = format!("reconcile.{}", item.action.as_str());
                let refused = AuditEntry::new(&job.requested_by, action)
                    .on(item.record.audit_target())
                    .because(&job.reason)
                    .ended("refused")
                    .details(&message);
                self.write_audit(refused).await;
                return Ok(BulkItemResult {
                    ok: false,
                    message,
                    status: None,
                });
            }
        };
        let record = views::record_ref(item.record.clone());
        Ok(
            match self
                .apply_reconcile(&operator, record, item.version, item.action, job.reason.clone())
                .await
            {
                Ok(result) => BulkItemResult {
                    ok: result.ok,
                    message: result.message,
                    status: result.status,
                },
                Err(error) => BulkItemResult {
                    ok: false,
                    message: error.to_string(),
                    status: None,
                },
            },
        )
    }
}

/// The operator a job's items are applied as, or why they may no longer be.
fn reconciling_operator(standing: Option<StoredOperator>) -> Result<CurrentOperator, &'static str> {
    match standing {
        None => Err("no longer exists"),
        Some(operator) if operator.disabled => Err("is disabled"),
        Some(operator) if operator.role < OperatorRole::Operator => Err("may no longer reconcile"),
        Some(operator) => Ok(CurrentOperator {
            username: operator.username,
            role: operator.role,
        }),
    }
}
