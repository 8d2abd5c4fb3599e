//! Bulk reconciliation in the background. Starting a job writes the frozen set (each record at
//! the version its preview showed, with the action shown) and runs it at once in this
//! instance, holding a lease on the job; every instance also resumes, now and then, unfinished
//! jobs whose runner's lease ran out (the process died). Each item is applied exactly as a
//! single reconciliation (guards, audit) in the name of the operator who started the job.

use super::StoreConsole;
use crate::store::bulk::ClaimedBulkJob;
use app::backend::ConsoleBackend;
use app::dto::{CurrentOperator, OperatorRole, ReconcileResult};
use std::time::Duration;

/// How long a runner holds a job without finishing an item before another may resume it:
/// longer than one item can take (a provider call, bounded by its timeout).
pub const BULK_LEASE: Duration = Duration::from_secs(60);

impl StoreConsole {
    /// Applies a claimed job's pending items in order, then marks it finished.
    pub(super) async fn run_bulk_job(&self, job: ClaimedBulkJob) {
        let operator = CurrentOperator {
            username: job.requested_by.clone(),
            role: OperatorRole::Operator,
        };
        let items = match self.store.pending_bulk_items(&job.id).await {
            Ok(items) => items,
            Err(error) => {
                tracing::error!(%error, job = %job.id, "bulk reconcile: items not read; resumed later");
                return;
            }
        };
        for item in items {
            let result = self
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
                });
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
