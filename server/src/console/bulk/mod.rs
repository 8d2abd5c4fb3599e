//! Bulk reconciliation in the background, for an outage's hundreds or thousands of unknown
//! outcomes. Selecting freezes the set on the server (every record matching a filter, or the
//! records ticked, each at its version), so that the browser never sends a list of thousands;
//! the job then previews each record against the provider (several at a time) and groups them
//! by operation and evidence, each group with the action proposed. The operator keeps groups,
//! names the job, gives one reason and applies; each kept item is then applied exactly as a
//! single reconciliation (the version it was previewed at and the provider's answer checked
//! again, one audit entry) in the name of the operator who applied the job, and only while
//! they may still reconcile. A job can be paused, resumed and aborted; its runner holds a
//! lease, so that another instance resumes it when this one dies.

mod runner;

use super::exports::csv_lines;
use super::{StoreConsole, checked_reason, unavailable, views};
use crate::store::StoreError;
use crate::store::bulk::{FrozenItem, GroupChoice, JobApproval, NewBulkJob};
use crate::store::console::RecordName;
use crate::store::operators::StoredOperator;
use app::backend::ConsoleError;
use app::recovery::model::{BulkJobView, BulkSelection};
use app::sign_in::model::CurrentOperator;
use domain::operator::{AuditEntry, OperatorRole};
use domain::queue::{QueueFilter, QueueQuery};
use domain::recovery::{BulkControl, ReconcileAction};
use domain::scope::Operation;

/// Records one bulk job takes at most: a larger outage is cleared in several named jobs.
pub const MAX_BULK_ITEMS: usize = 10_000;

/// Records ticked by hand one job takes at most.
const MAX_TICKED: usize = 500;

/// Provider look-ups a preview runs at once: a thousand records in seconds, without a
/// thundering herd at a provider that is just recovering.
const PREVIEWS_AT_ONCE: usize = 8;

/// Items a job's page shows; the results file has them all.
const ITEMS_SHOWN: i64 = 100;

/// Items read per page when the results file is written.
const RESULTS_PAGE: i64 = 1_000;

impl StoreConsole {
    /// Freezes the selection as a new job and starts previewing it here.
    pub(super) async fn select_bulk_job(
        &self,
        operator: &CurrentOperator,
        selection: BulkSelection,
    ) -> Result<BulkJobView, ConsoleError> {
        let (described, items) = match selection {
            BulkSelection::Matching(query) => self.matching_items(&query).await?,
            BulkSelection::Records(records) => {
                if records.is_empty() || records.len() > MAX_TICKED {
                    return Err(ConsoleError::Invalid(format!(
                        "a bulk reconciliation of ticked records takes 1 to {MAX_TICKED} of them; \
                         select all matching a filter for more"
                    )));
                }
                let mut items = Vec::with_capacity(records.len());
                for record in records {
                    let found = self.existing_record(&record, "bulk select").await?;
                    items.push((views::record_name(&record), found.record.lease_version));
                }
                (format!("{} records ticked by hand", items.len()), items)
            }
        };
        let frozen: Vec<FrozenItem> = items
            .into_iter()
            .zip(0..)
            .map(|((record, version), position)| FrozenItem {
                position,
                record,
                version,
            })
            .collect();
        let job = NewBulkJob {
            id: format!("blk_{}", domain::random::random_hex(12)),
            requested_by: operator.username.clone(),
            selection: described,
        };
        self.store
            .create_bulk_job(&job, &frozen)
            .await
            .map_err(unavailable("bulk select"))?;
        self.write_audit(
            AuditEntry::new(&operator.username, "bulk.select")
                .on(&job.id)
                .ended("ok")
                .details(format!("{} records: {}", frozen.len(), job.selection)),
        )
        .await;
        self.run_here(&job.id).await;
        self.existing_job(&job.id).await
    }

    /// Every record matching the query, each at its version now, and the filter in words.
    async fn matching_items(
        &self,
        query: &QueueQuery,
    ) -> Result<(String, Vec<(RecordName, i64)>), ConsoleError> {
        let (filter, _) =
            QueueFilter::parse(query).map_err(|refused| ConsoleError::Invalid(refused.to_string()))?;
        let page = self
            .store
            .recovery_queue(&filter, None, self.recovery_max_attempts, MAX_BULK_ITEMS as i64)
            .await
            .map_err(unavailable("bulk select"))?;
        if page.total == 0 {
            return Err(ConsoleError::Invalid("no record matches this filter".to_owned()));
        }
        if page.total > MAX_BULK_ITEMS as i64 {
            return Err(ConsoleError::Invalid(format!(
                "{} records match; a bulk job takes at most {MAX_BULK_ITEMS}: narrow the filter",
                page.total
            )));
        }
        let items = page
            .rows
            .into_iter()
            .map(|row| (row.record, row.version))
            .collect();
        Ok((described(query), items))
    }

    pub(super) async fn apply_job(
        &self,
        operator: &CurrentOperator,
        id: &str,
        name: &str,
        reason: &str,
        choices: Vec<app::recovery::model::GroupChoice>,
    ) -> Result<BulkJobView, ConsoleError> {
        let reason = checked_reason(reason)?;
        let name = name.trim();
        if !(1..=100).contains(&name.chars().count()) {
            return Err(ConsoleError::Invalid(
                "name the job in 1 to 100 characters".to_owned(),
            ));
        }
        let choices = choices
            .into_iter()
            .map(|choice| {
                let operation: Operation = choice.operation.parse().map_err(|_| {
                    ConsoleError::Invalid(format!("unknown operation {:?}", choice.operation))
                })?;
                if let Some(action) = choice.action
                    && !ReconcileAction::offered(operation, choice.evidence).contains(&action)
                {
                    return Err(ConsoleError::Invalid(format!(
                        "{} is not offered when the provider says {}",
                        action.as_str(),
                        choice.evidence.as_str()
                    )));
                }
                Ok(GroupChoice {
                    operation,
                    evidence: choice.evidence,
                    action: choice.action,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let approval = JobApproval {
            applied_by: operator.username.clone(),
            name: name.to_owned(),
            reason: reason.clone(),
            choices,
        };
        let started = self
            .store
            .apply_bulk_job(id, &approval)
            .await
            .map_err(unavailable("bulk apply"))?;
        if !started {
            let job = self.existing_job(id).await?;
            return Err(ConsoleError::Invalid(format!(
                "the job is {}, not waiting to be applied",
                job.state.as_str()
            )));
        }
        let kept: Vec<String> = approval
            .choices
            .iter()
            .map(|choice| {
                format!(
                    "{}/{}: {}",
                    choice.operation.as_str(),
                    choice.evidence.as_str(),
                    choice.action.map_or("left out", ReconcileAction::as_str)
                )
            })
            .collect();
        self.write_audit(
            AuditEntry::new(&operator.username, "bulk.apply")
                .on(id)
                .because(&reason)
                .ended("ok")
                .details(format!("{name}; {}", kept.join(", "))),
        )
        .await;
        self.run_here(id).await;
        self.existing_job(id).await
    }

    pub(super) async fn control_job(
        &self,
        operator: &CurrentOperator,
        id: &str,
        control: BulkControl,
    ) -> Result<BulkJobView, ConsoleError> {
        let changed = self
            .store
            .control_bulk_job(id, control)
            .await
            .map_err(unavailable("bulk control"))?;
        let job = self.existing_job(id).await?;
        let action = format!("bulk.{}", control.as_str());
        if !changed {
            let refusal = format!(
                "a job that is {} cannot be {}d",
                job.state.as_str(),
                control.as_str()
            );
            self.write_audit(
                AuditEntry::new(&operator.username, action)
                    .on(id)
                    .ended("refused")
                    .details(&refusal),
            )
            .await;
            return Err(ConsoleError::Invalid(refusal));
        }
        self.write_audit(AuditEntry::new(&operator.username, action).on(id).ended("ok"))
            .await;
        if control == BulkControl::Resume {
            self.run_here(id).await;
        }
        self.existing_job(id).await
    }

    /// A job with its groups and first items.
    pub(super) async fn bulk_job_view(&self, id: &str) -> Result<Option<BulkJobView>, ConsoleError> {
        let Some(job) = self.store.bulk_job(id).await.map_err(unavailable("bulk job"))? else {
            return Ok(None);
        };
        let (groups, items) = tokio::try_join!(
            self.store.bulk_job_groups(id),
            self.store.bulk_job_items(id, 0, ITEMS_SHOWN),
        )
        .map_err(unavailable("bulk job"))?;
        Ok(Some(views::bulk_job(job, groups, items)))
    }

    async fn existing_job(&self, id: &str) -> Result<BulkJobView, ConsoleError> {
        self.bulk_job_view(id)
            .await?
            .ok_or_else(|| ConsoleError::Invalid("no such bulk job".to_owned()))
    }

    /// Every item of a job with its preview and result, as CSV (`None`: no such job).
    pub async fn bulk_results_csv(&self, id: &str) -> Result<Option<String>, StoreError> {
        if self.store.bulk_job(id).await?.is_none() {
            return Ok(None);
        }
        let header = [
            "position",
            "tenant_id",
            "operation",
            "idempotency_key",
            "version",
            "evidence",
            "evidence_detail",
            "action",
            "outcome",
            "record_status",
            "message",
            "done_at",
        ];
        let mut csv = csv_lines(&[header.map(str::to_owned).to_vec()]);
        let mut from = 0;
        loop {
            let items = self.store.bulk_job_items(id, from, RESULTS_PAGE).await?;
            let Some(last) = items.last() else { break };
            from = last.position + 1;
            let rows: Vec<Vec<String>> = items
                .iter()
                .map(|item| {
                    let outcome = match (&item.result, item.included, item.action) {
                        (Some(result), _, _) if result.ok => "applied",
                        (Some(_), _, _) => "not applied",
                        (None, false, Some(_)) => "left out",
                        (None, _, None) if item.evidence.is_some() => "nothing to apply",
                        (None, _, _) => "pending",
                    };
                    let evidence = item.evidence.as_ref();
                    vec![
                        item.position.to_string(),
                        item.record.tenant_id.clone(),
                        item.record.operation.clone(),
                        item.record.key.clone(),
                        item.version.to_string(),
                        evidence
                            .map_or("", |evidence| evidence.kind().as_str())
                            .to_owned(),
                        evidence.map_or("", |evidence| evidence.detail()).to_owned(),
                        item.action.map_or("", ReconcileAction::as_str).to_owned(),
                        outcome.to_owned(),
                        item.result
                            .as_ref()
                            .and_then(|result| result.status)
                            .map_or("", |status| status.as_str())
                            .to_owned(),
                        item.result
                            .as_ref()
                            .map(|result| result.message.clone())
                            .unwrap_or_default(),
                        item.done_at.map(crate::store::rfc3339_millis).unwrap_or_default(),
                    ]
                })
                .collect();
            csv.push_str(&csv_lines(&rows));
        }
        Ok(Some(csv))
    }
}

/// A filter in words, for the job's record of how it was selected.
fn described(query: &QueueQuery) -> String {
    let fields = [
        ("tenant", &query.tenant),
        ("operation", &query.operation),
        ("attention", &query.attention),
        ("older than (min)", &query.min_age_minutes),
        ("younger than (min)", &query.max_age_minutes),
        ("currency", &query.currency),
        ("amount from", &query.min_amount),
        ("amount to", &query.max_amount),
        ("why unknown", &query.cause),
        ("provider says", &query.evidence),
        ("search", &query.search),
    ];
    let said: Vec<String> = fields
        .iter()
        .filter(|(_, value)| !value.trim().is_empty())
        .map(|(name, value)| format!("{name} = {}", value.trim()))
        .collect();
    if said.is_empty() {
        "every record needing attention".to_owned()
    } else {
        format!("every record needing attention with {}", said.join(", "))
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

/// `GET /console/bulk-jobs/{id}/results.csv`: every item of a job with its evidence, action
/// and result, for any signed-in operator (the gate has checked the session).
pub async fn results_file(
    axum::extract::State(console): axum::extract::State<StoreConsole>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    match console.bulk_results_csv(&id).await {
        Ok(Some(csv)) => {
            let file = format!(
                "attachment; filename=\"{}-results.csv\"",
                id.replace(['"', '\\'], "")
            );
            (
                [
                    (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
                    (header::CONTENT_DISPOSITION, file),
                ],
                csv,
            )
                .into_response()
        }
        Ok(None) => (StatusCode::NOT_FOUND, "no such bulk job\n").into_response(),
        Err(error) => {
            tracing::error!(%error, job = %id, "bulk results: store failure");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the store is unavailable; try again shortly\n",
            )
                .into_response()
        }
    }
}
