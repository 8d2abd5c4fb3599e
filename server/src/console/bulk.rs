//! Bulk reconciliation in the background. Starting a job writes the frozen set (each record at
//! the version its preview showed, with the action shown) and runs it at once in this
//! instance, holding a lease on the job; every instance also resumes, now and then, unfinished
//! jobs whose runner's lease ran out (the process died). Each item is applied exactly as a
//! single reconciliation (guards, audit) in the name of the operator who started the job, and
//! only while they may still reconcile: their role and standing are read again for every item.

use super::StoreConsole;
use crate::store::StoreError;
use crate::store::bulk::{BulkItem, ClaimedBulkJob};
use crate::store::console::audit_target;
use crate::store::operators::StoredOperator;
use app::backend::ConsoleBackend;
use app::dto::{CurrentOperator, ReconcileResult};
use domain::operator::AuditEntry;
use domain::operator::OperatorRole;
use std::time::Duration;

/// How long a runner holds a job without finishing an item before another may resume it:
/// longer than one item can take (a provider call, bounded by its timeout).
pub const BULK_LEASE: Duration = Duration::from_secs(60);

impl StoreConsole {
    /// Applies a claimed job's pending items in order, then marks it finished.
    pub(super) async fn run_bulk_job(&self, job: ClaimedBulkJob) {
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
    ) -> Result<ReconcileResult, StoreError> {
        let standing = self.store.operator_by_username(&job.requested_by).await?;
        let operator = match reconciling_operator(standing) {
            Ok(operator) => operator,
            Err(refusal) => {
                let message = format!("not applied: {} {refusal}", job.requested_by);
                self.write_audit(AuditEntry {
                    actor: job.requested_by.clone(),
                    action: format!("reconcile.{}", item.action.as_str()),
                    target: Some(audit_target(&item.record)),
                    reason: Some(job.reason.clone()),
                    result: "refused".to_owned(),
                    details: Some(message.clone()),
                })
                .await;
                return Ok(ReconcileResult {
                    record: item.record.clone(),
                    ok: false,
                    status: None,
                    message,
                });
            }
        };
        Ok(self
            .apply_reconcile(
                &operator,
                item.record.clone(),
                item.version,
                item.action,
                job.reason.clone(),
            )
            .await
            .unwrap_or_else(|error| ReconcileResult {
                record: item.record.clone(),
                ok: false,
                status: None,
                message: error.to_string(),
            }))
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

/// Resumes, every `interval`, unfinished jobs nobody holds.
pub fn spawn_resumer(console: StoreConsole, interval: Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            loop {
                match console.store.claim_bulk_job(None, BULK_LEASE).await {
                    Ok(Some(job)) => {
                        tracing::warn!(job = %job.id, "bulk reconcile: resuming a job whose runner stopped");
                        console.run_bulk_job(job).await;
                    }
                    Ok(None) => break,
                    Err(error) => {
                        tracing::warn!(%error, "bulk reconcile: no job claimed; trying again later");
                        break;
                    }
                }
            }
        }
    });
}
