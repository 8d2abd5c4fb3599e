//! A bulk job's runner: claimed under a lease, it previews every item against the provider,
//! then applies the kept groups item by item; another instance resumes it when this one dies.

use super::{PREVIEWS_AT_ONCE, reconciling_operator};
use crate::console::{StoreConsole, scope_of, views};
use crate::store::StoreError;
use crate::store::bulk::{BulkItem, BulkItemResult, ClaimedBulkJob, ItemPreview};
use app::backend::{ConsoleActions, ConsoleReads};
use domain::operator::AuditEntry;
use domain::recovery::BulkJobState;
use futures_util::StreamExt;

impl StoreConsole {
    /// Claims the job and runs it on a task of its own, here; if this instance dies, another
    /// resumes it after the lease.
    pub(super) async fn run_here(&self, id: &str) {
        match self.store.claim_bulk_job(Some(id), self.bulk_lease).await {
            Ok(Some(claimed)) => {
                let console = self.clone();
                tokio::spawn(async move { console.run_bulk_job(claimed).await });
            }
            // Another runner holds it (or it has nothing to do): the resumer takes it later.
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, job = id, "bulk: not claimed here; resumed later"),
        }
    }

    /// One pass of the resumer: runs, one after the other, jobs with work to do that nobody
    /// holds; returns how many.
    pub async fn resume_bulk_jobs(&self) -> usize {
        let mut resumed = 0;
        loop {
            match self.store.claim_bulk_job(None, self.bulk_lease).await {
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

    /// Previews a claimed job's items, or applies its kept items in order, then moves it on.
    async fn run_bulk_job(&self, job: ClaimedBulkJob) {
        let ran = match job.state {
            BulkJobState::Previewing => self.preview_items(&job).await,
            _ => self.apply_items(&job).await,
        };
        if let Err(error) = ran {
            tracing::error!(%error, job = %job.id, "bulk reconcile: stopped; resumed later");
        }
    }

    async fn preview_items(&self, job: &ClaimedBulkJob) -> Result<(), StoreError> {
        let items = self.store.unpreviewed_bulk_items(&job.id).await?;
        for chunk in items.chunks(PREVIEWS_AT_ONCE * 4) {
            if self.store.bulk_job_state(&job.id).await? != Some(BulkJobState::Previewing) {
                return Ok(());
            }
            // Owned futures: a borrowing closure here is not `Send` for every lifetime
            // (rust-lang/rust#102211), which `tokio::spawn` needs.
            let previews: Vec<_> = futures_util::stream::iter(chunk.to_vec())
                .map(|item| {
                    let console = self.clone();
                    async move { console.preview_item(&item).await }
                })
                .buffer_unordered(PREVIEWS_AT_ONCE)
                .collect()
                .await;
            for (position, version, preview) in previews {
                self.store
                    .note_bulk_preview(&job.id, position, version, &preview, self.bulk_lease)
                    .await?;
            }
        }
        self.store.finish_bulk_preview(&job.id).await
    }

    /// An item's preview, through the single record's: what the provider says and the first
    /// option, at the version it was previewed at (nothing to apply to a record that no
    /// longer needs an operator).
    async fn preview_item(&self, item: &BulkItem) -> (i32, i64, ItemPreview) {
        let record = views::record_ref(item.record.clone());
        let preview = match self.preview_reconcile(record).await {
            Ok(preview) => preview,
            Err(error) => {
                return (
                    item.position,
                    item.version,
                    ItemPreview {
                        evidence: domain::recovery::ProviderEvidence::Unreachable {
                            problem: error.to_string(),
                        },
                        proposed: None,
                    },
                );
            }
        };
        (
            item.position,
            preview.version,
            ItemPreview {
                proposed: preview.options.first().map(|option| option.action),
                evidence: preview.evidence,
            },
        )
    }

    async fn apply_items(&self, job: &ClaimedBulkJob) -> Result<(), StoreError> {
        for item in self.store.pending_bulk_items(&job.id).await? {
            // Paused or aborted: stop here; a resume hands the job to a runner again.
            if self.store.bulk_job_state(&job.id).await? != Some(BulkJobState::Running) {
                return Ok(());
            }
            let result = self.run_bulk_item(job, &item).await?;
            // Applied (and audited) but not noted, on failure: a resumed run finds the record
            // changed and says so; nothing is applied twice.
            self.store
                .finish_bulk_item(&job.id, item.position, &result, self.bulk_lease)
                .await?;
        }
        self.store.finish_bulk_job(&job.id).await
    }

    /// One item, applied only if the job's operator may reconcile now (a role lowered or an
    /// account disabled since the job started stops what is left of it).
    async fn run_bulk_item(
        &self,
        job: &ClaimedBulkJob,
        item: &BulkItem,
    ) -> Result<BulkItemResult, StoreError> {
        let Some(action) = item.action else {
            return Ok(BulkItemResult {
                ok: false,
                message: "nothing to apply".to_owned(),
                status: None,
            });
        };
        let standing = self.store.operator_by_username(&job.requested_by).await?;
        let operator = match reconciling_operator(standing) {
            Ok(operator) => operator,
            Err(refusal) => {
                let message = format!("not applied: {} {refusal}", job.requested_by);
                let refused = AuditEntry::new(&job.requested_by, format!("reconcile.{}", action.as_str()))
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
        if let Err(refused) = scope_of(&views::record_ref(item.record.clone())) {
            return Ok(BulkItemResult {
                ok: false,
                message: refused.to_string(),
                status: None,
            });
        }
        let record = views::record_ref(item.record.clone());
        Ok(
            match self
                .apply_reconcile(&operator, record, item.version, action, job.reason.clone())
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
