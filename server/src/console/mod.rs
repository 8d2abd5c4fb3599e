//! The server's side of the console: access (operators, sessions, the gate), and the console
//! backend port (`app::backend::ConsoleBackend`) implemented over the store and the engine.

pub mod access;
pub mod bulk;
mod diff;
pub mod sessions;

use crate::events::consumers::{LEDGER, RECEIPTS};
use crate::payments::engine::{PaymentsEngine, Reconciled};
use crate::store::approvals::{NewOverrideRequest, OVERRIDE_DECISION_WINDOW, new_override_id};
use crate::store::bulk::{BulkItem, ClaimedBulkJob, new_bulk_job_id};
use crate::store::console::{RecordQuery, audit_target};
use crate::store::operators::AuditCursor;
use crate::store::{Store, StoreError};
use app::backend::{ConsoleBackend, ConsoleError};
use app::dto::{
    AuditEntryView, BulkJobView, ConsumerLag, CurrentOperator, Dashboard, DashboardRange, EventsOverview,
    LiveGauges, OverrideRequestView, ReconcileOption, ReconcilePreview, ReconcileResult, RecordDetail,
    RecordFilter, RecordPage, RecordRef, RecordSummary, RedriveResult, RequestView, RevealedResponse, Series,
};
use chrono::{SecondsFormat, Utc};
use domain::key::IdempotencyKey;
use domain::operator::AuditEntry;
use domain::operator::OperatorRole;
use domain::outcome::Outcome;
use domain::record::RecordAt;
use domain::record::RecordStatus;
use domain::recovery::{OverrideOutcome, OverrideState, ProviderEvidence, ReconcileAction};
use domain::scope::{Operation, Scope};
use domain::tenant::TenantId;
use std::sync::Arc;
use strum::VariantArray;

/// Rows per records page.
const PAGE: usize = 50;

/// Records one bulk reconciliation takes at most.
const MAX_BULK_ITEMS: usize = 500;

#[derive(Clone)]
pub struct StoreConsole {
    store: Arc<dyn Store>,
    engine: Arc<PaymentsEngine>,
    /// The recovery worker's attempt limit: unknown outcomes at it need an operator.
    recovery_max_attempts: i32,
}

impl StoreConsole {
    pub fn new(store: Arc<dyn Store>, engine: Arc<PaymentsEngine>, recovery_max_attempts: i32) -> Self {
        StoreConsole {
            store,
            engine,
            recovery_max_attempts,
        }
    }
}

/// A store failure as the operator sees it; the details go to the log.
fn unavailable(during: &'static str) -> impl Fn(StoreError) -> ConsoleError {
    move |error| {
        tracing::error!(%error, during, "console: store failure");
        ConsoleError::StoreUnavailable
    }
}

/// The engine's scope for a record named by the console; only operations this binary knows.
fn scope_of(record: &RecordRef) -> Result<Scope, ConsoleError> {
    let Ok(operation) = record.operation.parse::<Operation>() else {
        return Err(ConsoleError::Invalid(format!(
            "unknown operation {:?}",
            record.operation
        )));
    };
    let key = IdempotencyKey::parse(record.key.as_bytes())
        .map_err(|_| ConsoleError::Invalid("not an idempotency key".to_owned()))?;
    Ok(Scope {
        tenant_id: TenantId::from_stored(record.tenant_id.clone()),
        operation,
        key,
    })
}

fn now_text() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[async_trait::async_trait]
impl ConsoleBackend for StoreConsole {
    async fn dashboard(
        &self,
        range: DashboardRange,
        tenant: String,
        operation: String,
    ) -> Result<Dashboard, ConsoleError> {
        let step = range.step_seconds();
        let points = usize::try_from(range.seconds() / step).unwrap_or(0);
        let to = (Utc::now().timestamp() / step + 1) * step;
        let from = to - range.seconds();
        let rows = self
            .store
            .outcome_series(step, from, to, &tenant, &operation)
            .await
            .map_err(unavailable("dashboard series"))?;
        let series = Outcome::VARIANTS
            .iter()
            .map(|outcome| {
                let mut values = vec![0_u64; points];
                for (bucket, _, count) in rows.iter().filter(|(_, name, _)| name == outcome.as_str()) {
                    if let Some(slot) = usize::try_from((bucket - from) / step)
                        .ok()
                        .and_then(|i| values.get_mut(i))
                    {
                        *slot += u64::try_from(*count).unwrap_or(0);
                    }
                }
                Series {
                    outcome: outcome.as_str().to_owned(),
                    total: values.iter().sum(),
                    points: values,
                }
            })
            .collect();
        let gauges = self
            .store
            .record_gauges(self.recovery_max_attempts)
            .await
            .map_err(unavailable("dashboard gauges"))?;
        let outbox = self
            .store
            .outbox_backlog()
            .await
            .map_err(unavailable("outbox backlog"))?;
        let cleanup = self
            .store
            .retention_backlog(self.engine.settings().expiry.retention)
            .await
            .map_err(unavailable("cleanup backlog"))?;
        let charged_after_release = self
            .store
            .late_charges()
            .await
            .map_err(unavailable("late charges"))?;
        let count = |value: i64| u64::try_from(value).unwrap_or(0);
        Ok(Dashboard {
            range,
            from: chrono::DateTime::from_timestamp(from, 0)
                .unwrap_or_default()
                .to_rfc3339_opts(SecondsFormat::Secs, true),
            step_seconds: step,
            series,
            live: LiveGauges {
                in_progress: count(gauges.in_progress),
                stale_in_progress: count(gauges.stale_in_progress),
                oldest_stale_in_progress_secs: gauges.oldest_stale_in_progress_secs,
                unknown: count(gauges.unknown),
                oldest_unknown_secs: gauges.oldest_unknown_secs,
                needs_operator: count(gauges.needs_operator),
                outbox_backlog: count(outbox.unpublished),
                outbox_oldest_secs: outbox.oldest_unpublished_age_seconds,
                cleanup_to_purge: count(cleanup.to_purge),
                cleanup_to_delete: count(cleanup.to_delete),
                charged_after_release: count(charged_after_release),
            },
            tenants: self
                .store
                .tenant_options()
                .await
                .map_err(unavailable("tenants"))?,
            read_at: now_text(),
        })
    }

    async fn records(&self, filter: RecordFilter) -> Result<RecordPage, ConsoleError> {
        let query = RecordQuery::parse(&filter).map_err(ConsoleError::Invalid)?;
        let mut rows = self
            .store
            .list_records(&query, (PAGE + 1) as i64)
            .await
            .map_err(unavailable("records"))?;
        let next = (rows.len() > PAGE).then(|| rows[PAGE - 1].cursor.clone());
        rows.truncate(PAGE);
        Ok(RecordPage { rows, next })
    }

    async fn find(&self, needle: String) -> Result<Vec<RecordSummary>, ConsoleError> {
        let needle = needle.trim();
        if needle.is_empty() {
            return Ok(Vec::new());
        }
        self.store
            .find_records(needle, 20)
            .await
            .map_err(unavailable("find records"))
    }

    async fn record(&self, record: RecordRef) -> Result<Option<RecordDetail>, ConsoleError> {
        let Some((mut detail, journal)) = self
            .store
            .record_detail(&record)
            .await
            .map_err(unavailable("record detail"))?
        else {
            return Ok(None);
        };
        detail.requests = journal
            .into_iter()
            .map(|entry| RequestView {
                at: crate::store::rfc3339_millis(entry.at),
                status_code: entry.status_code,
                same_request: entry.canonical_command.is_none(),
                changes: entry
                    .canonical_command
                    .as_deref()
                    .map(|retry| diff::changes(&detail.canonical_command, retry))
                    .unwrap_or_default(),
                error_code: entry.error_code,
                replayed: entry.replayed,
            })
            .collect();
        Ok(Some(detail))
    }

    async fn recovery_queue(&self) -> Result<Vec<RecordSummary>, ConsoleError> {
        self.store
            .recovery_queue(200)
            .await
            .map_err(unavailable("recovery queue"))
    }

    async fn preview_reconcile(&self, record: RecordRef) -> Result<ReconcilePreview, ConsoleError> {
        let found = self.existing_record(&record, "reconcile preview").await?;
        let status = found.record.status;
        let needs_operator = found.needs_operator();
        let payment_id = found.record.resource_id.clone().unwrap_or_default();
        let evidence = self.engine.provider_evidence(&payment_id).await;
        let options = if needs_operator {
            options(status, &payment_id, &evidence)
        } else {
            Vec::new()
        };
        let blocked = options.is_empty().then(|| match &evidence {
            _ if !needs_operator => format!("nothing to do: the record is {status}"),
            ProviderEvidence::Unreachable { problem } => {
                format!("nothing can be applied: the provider did not answer ({problem})")
            }
            _ => "nothing can be applied".to_owned(),
        });
        Ok(ReconcilePreview {
            record,
            status,
            version: found.record.lease_version,
            evidence,
            options,
            blocked,
        })
    }

    async fn apply_reconcile(
        &self,
        operator: &CurrentOperator,
        record: RecordRef,
        version: i64,
        action: ReconcileAction,
        reason: String,
    ) -> Result<ReconcileResult, ConsoleError> {
        let reason = checked_reason(&reason)?;
        let scope = scope_of(&record)?;
        let audit = |result: &str, details: String| AuditEntry {
            actor: operator.username.clone(),
            action: format!("reconcile.{}", action.as_str()),
            target: Some(audit_target(&record)),
            reason: Some(reason.clone()),
            result: result.to_owned(),
            details: Some(details),
        };
        let applied = audit("ok", format!("previewed version {version}"));
        let (ok, message) = match self.engine.reconcile(&scope, version, action, &applied).await {
            // The completion (or the release) committed with its audit entry.
            Ok(Reconciled::Answered(answer)) if matches!(answer.response.status, 201 | 402) => {
                (true, "applied".to_owned())
            }
            Ok(Reconciled::KeyReleased) => (true, "applied: payment declined, key released".to_owned()),
            Ok(Reconciled::Answered(answer)) => {
                let message = format!(
                    "not settled: the provider call answered {}",
                    answer.response.status
                );
                self.write_audit(audit("failed", message.clone())).await;
                (false, message)
            }
            Err(refusal) => {
                self.write_audit(audit("refused", refusal.to_string())).await;
                (false, refusal.to_string())
            }
        };
        let status = self
            .store
            .load_record(&scope)
            .await
            .ok()
            .flatten()
            .map(|found| found.record.status);
        Ok(ReconcileResult {
            record,
            ok,
            status,
            message,
        })
    }

    async fn request_override(
        &self,
        admin: &CurrentOperator,
        record: RecordRef,
        version: i64,
        outcome: OverrideOutcome,
        reason: String,
    ) -> Result<OverrideRequestView, ConsoleError> {
        let reason = checked_reason(&reason)?;
        let outcome = checked_outcome(outcome)?;
        let found = self.existing_record(&record, "override request").await?;
        if !found.needs_operator() || found.record.lease_version != version {
            return Err(ConsoleError::Invalid(
                "the record changed since you looked, or no longer needs an operator; reload it".to_owned(),
            ));
        }
        let request = NewOverrideRequest {
            id: new_override_id(),
            record: record.clone(),
            record_version: version,
            outcome,
            requested_by: admin.username.clone(),
            reason: reason.clone(),
        };
        let audit = AuditEntry {
            actor: admin.username.clone(),
            action: "override.request".to_owned(),
            target: Some(audit_target(&record)),
            reason: Some(reason),
            result: "ok".to_owned(),
            details: Some(format!(
                "{}: {} at version {version}; waits for a second admin",
                request.id, request.outcome
            )),
        };
        match self
            .store
            .request_override(&request, &audit, OVERRIDE_DECISION_WINDOW)
            .await
        {
            Ok(()) => self.override_view(&request.id).await,
            Err(StoreError::AlreadyExists) => Err(ConsoleError::Invalid(
                "this record already has an override waiting for a second admin".to_owned(),
            )),
            Err(error) => Err(unavailable("override request")(error)),
        }
    }

    async fn overrides(&self) -> Result<Vec<OverrideRequestView>, ConsoleError> {
        self.store
            .override_requests(100)
            .await
            .map_err(unavailable("override requests"))
    }

    async fn decide_override(
        &self,
        admin: &CurrentOperator,
        id: String,
        approve: bool,
        reason: String,
    ) -> Result<OverrideRequestView, ConsoleError> {
        let reason = checked_reason(&reason)?;
        let request = self.override_view(&id).await?;
        let action = if approve {
            "override.approve"
        } else {
            "override.reject"
        };
        let audit = |result: &str, details: String| AuditEntry {
            actor: admin.username.clone(),
            action: action.to_owned(),
            target: Some(audit_target(&request.record)),
            reason: Some(reason.clone()),
            result: result.to_owned(),
            details: Some(format!(
                "{id}, requested by {}: {}; {details}",
                request.requested_by, request.outcome
            )),
        };
        let refuse = |why: &'static str| {
            let entry = audit("refused", why.to_owned());
            async move {
                self.write_audit(entry).await;
                Err(ConsoleError::Invalid(why.to_owned()))
            }
        };
        if request.requested_by == admin.username {
            return refuse("an override needs a second admin: its requester cannot decide it").await;
        }
        // Both admins must stand behind an applied override when it is applied: a requester
        // since disabled or demoted (left, or not trusted any more) vouches for nothing.
        if approve {
            let requester = self
                .store
                .operator_by_username(&request.requested_by)
                .await
                .map_err(unavailable("override requester"))?;
            if !requester
                .is_some_and(|requester| !requester.disabled && requester.role == OperatorRole::Admin)
            {
                return refuse("its requester is no longer an enabled admin: it can only be rejected").await;
            }
        }
        let decision = if approve {
            OverrideState::Approved
        } else {
            OverrideState::Rejected
        };
        let rejected = audit("ok", "nothing applied".to_owned());
        let decided = self
            .store
            .decide_override(
                &id,
                decision,
                &admin.username,
                &reason,
                (!approve).then_some(&rejected),
                OVERRIDE_DECISION_WINDOW,
            )
            .await
            .map_err(unavailable("override decision"))?;
        if !decided {
            return refuse(
                "the request is no longer pending: decided already, or expired unanswered \
                 (ask again with today's evidence)",
            )
            .await;
        }
        if approve {
            let scope = scope_of(&request.record)?;
            let applied = audit("ok", format!("applied at version {}", request.record_version));
            let (state, result) = match self
                .engine
                .override_outcome(&scope, request.record_version, &request.outcome, &applied)
                .await
            {
                Ok(Reconciled::KeyReleased) => (
                    OverrideState::Applied,
                    "payment declined, key released".to_owned(),
                ),
                Ok(Reconciled::Answered(answer)) if matches!(answer.response.status, 201 | 402) => (
                    OverrideState::Applied,
                    format!("record settled with answer {}", answer.response.status),
                ),
                Ok(Reconciled::Answered(answer)) => {
                    let message = format!("not settled: answered {}", answer.response.status);
                    self.write_audit(audit("failed", message.clone())).await;
                    (OverrideState::Failed, message)
                }
                Err(refusal) => {
                    self.write_audit(audit("refused", refusal.to_string())).await;
                    (OverrideState::Failed, refusal.to_string())
                }
            };
            self.store
                .finish_override(&id, state, &result)
                .await
                .map_err(unavailable("override result"))?;
        }
        self.override_view(&id).await
    }

    async fn start_bulk_reconcile(
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
                    record,
                    version,
                    action,
                })
            })
            .collect::<Result<Vec<_>, ConsoleError>>()?;
        let job = ClaimedBulkJob {
            id: new_bulk_job_id(),
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
            .claim_bulk_job(Some(&job.id), bulk::BULK_LEASE)
            .await
            .map_err(unavailable("bulk reconcile"))?;
        if let Some(claimed) = claimed {
            let console = self.clone();
            tokio::spawn(async move { console.run_bulk_job(claimed).await });
        }
        self.bulk_job(job.id)
            .await?
            .ok_or_else(|| ConsoleError::Invalid("the job vanished".to_owned()))
    }

    async fn bulk_job(&self, id: String) -> Result<Option<BulkJobView>, ConsoleError> {
        self.store.bulk_job(&id).await.map_err(unavailable("bulk job"))
    }

    async fn events(&self) -> Result<EventsOverview, ConsoleError> {
        let backlog = self
            .store
            .outbox_backlog()
            .await
            .map_err(unavailable("outbox backlog"))?;
        let mut consumers = Vec::new();
        for consumer in [LEDGER, RECEIPTS] {
            let lag = self
                .store
                .consumer_lag(
                    consumer,
                    "PaymentAuthorized",
                    std::time::Duration::from_secs(24 * 3600),
                )
                .await
                .map_err(unavailable("consumer lag"))?;
            consumers.push(ConsumerLag {
                consumer: consumer.to_owned(),
                lag: u64::try_from(lag).unwrap_or(0),
            });
        }
        Ok(EventsOverview {
            unpublished: u64::try_from(backlog.unpublished).unwrap_or(0),
            oldest_unpublished_secs: backlog.oldest_unpublished_age_seconds,
            consumers,
            dead_letters: self
                .store
                .dead_letters(200)
                .await
                .map_err(unavailable("dead letters"))?,
            read_at: now_text(),
        })
    }

    async fn redrive(
        &self,
        operator: &CurrentOperator,
        dead_letters: Vec<(String, String)>,
        reason: String,
    ) -> Result<Vec<RedriveResult>, ConsoleError> {
        let reason = checked_reason(&reason)?;
        let mut results = Vec::with_capacity(dead_letters.len());
        for (event_id, dead_at) in dead_letters {
            let audit = AuditEntry {
                actor: operator.username.clone(),
                action: "redrive_event".to_owned(),
                target: Some(event_id.clone()),
                reason: Some(reason.clone()),
                result: "ok".to_owned(),
                details: Some(format!("dead since {dead_at}")),
            };
            let (ok, message) = match self.store.redrive_event(&event_id, &dead_at, &audit).await {
                Ok(true) => (true, "back to the publisher".to_owned()),
                Ok(false) => {
                    let message = "not re-driven: it changed since the preview".to_owned();
                    self.write_audit(AuditEntry {
                        result: "refused".to_owned(),
                        details: Some(message.clone()),
                        ..audit
                    })
                    .await;
                    (false, message)
                }
                Err(error) => return Err(unavailable("redrive")(error)),
            };
            results.push(RedriveResult {
                event_id,
                ok,
                message,
            });
        }
        Ok(results)
    }

    async fn resolve_late_charge(
        &self,
        operator: &CurrentOperator,
        record: RecordRef,
        payment_id: String,
        reference: String,
    ) -> Result<ReconcileResult, ConsoleError> {
        let reference = checked_reason(&reference)?;
        scope_of(&record)?;
        let audit = |result: &str, details: String| AuditEntry {
            actor: operator.username.clone(),
            action: "late_charge.resolve".to_owned(),
            target: Some(audit_target(&record)),
            reason: Some(reference.clone()),
            result: result.to_owned(),
            details: Some(details),
        };
        let resolved = self
            .store
            .resolve_late_charge(
                &record,
                &payment_id,
                &operator.username,
                &reference,
                &audit("ok", format!("{payment_id}: refunded at the provider")),
            )
            .await
            .map_err(unavailable("late charge resolution"))?;
        if !resolved {
            let why = format!(
                "{payment_id} has no unresolved late charge under this key (none found, or resolved already)"
            );
            self.write_audit(audit("refused", why.clone())).await;
            return Err(ConsoleError::Invalid(why));
        }
        Ok(ReconcileResult {
            record,
            ok: true,
            status: None,
            message: format!("the late charge of {payment_id} is marked refunded"),
        })
    }

    async fn reveal_response(
        &self,
        operator: &CurrentOperator,
        record: RecordRef,
    ) -> Result<Option<RevealedResponse>, ConsoleError> {
        let scope = scope_of(&record)?;
        // Audited first: if the entry cannot be written, nothing is revealed.
        self.store
            .append_audit(&AuditEntry {
                actor: operator.username.clone(),
                action: "reveal_response".to_owned(),
                target: Some(audit_target(&record)),
                reason: None,
                result: "ok".to_owned(),
                details: None,
            })
            .await
            .map_err(unavailable("reveal audit"))?;
        let stored = self.engine.stored_response(&scope).await.map_err(|problem| {
            tracing::error!(%problem, "console: a stored response cannot be opened");
            ConsoleError::Invalid("the stored response cannot be opened (see the server log)".to_owned())
        })?;
        Ok(stored.map(|response| RevealedResponse {
            status: response.status,
            headers: response.headers,
            body: String::from_utf8_lossy(&response.body).into_owned(),
        }))
    }

    async fn audit(&self, before: String) -> Result<Vec<AuditEntryView>, ConsoleError> {
        let cursor = if before.is_empty() {
            None
        } else {
            let (at, id): (String, String) = serde_json::from_str(&before)
                .map_err(|_| ConsoleError::Invalid("not a page cursor".to_owned()))?;
            let at = chrono::DateTime::parse_from_rfc3339(&at)
                .map_err(|_| ConsoleError::Invalid("not a page cursor".to_owned()))?
                .with_timezone(&Utc);
            Some(AuditCursor { at, id })
        };
        self.store
            .audit_page(cursor.as_ref(), 50)
            .await
            .map_err(unavailable("audit log"))
    }
}

impl StoreConsole {
    async fn write_audit(&self, entry: AuditEntry) {
        if let Err(error) = self.store.append_audit(&entry).await {
            tracing::error!(%error, action = %entry.action, "console: audit entry not written");
        }
    }

    /// The record an operator named, as it is now.
    async fn existing_record(
        &self,
        record: &RecordRef,
        during: &'static str,
    ) -> Result<RecordAt, ConsoleError> {
        self.store
            .load_record(&scope_of(record)?)
            .await
            .map_err(unavailable(during))?
            .ok_or_else(|| ConsoleError::Invalid("no such record".to_owned()))
    }

    async fn override_view(&self, id: &str) -> Result<OverrideRequestView, ConsoleError> {
        self.store
            .override_request(id)
            .await
            .map_err(unavailable("override request"))?
            .ok_or_else(|| ConsoleError::Invalid("no such override request".to_owned()))
    }
}

/// The charge two admins vouch for must name one: 1 to 128 visible characters.
fn checked_outcome(outcome: OverrideOutcome) -> Result<OverrideOutcome, ConsoleError> {
    let charge_id = match &outcome {
        OverrideOutcome::Charged { charge_id } | OverrideOutcome::Declined { charge_id } => charge_id,
        OverrideOutcome::NotCharged => return Ok(outcome),
    };
    let visible = |character: char| !character.is_whitespace() && !character.is_control();
    if charge_id.is_empty() || charge_id.chars().count() > 128 || !charge_id.chars().all(visible) {
        return Err(ConsoleError::Invalid(
            "name the provider's charge id (1 to 128 characters, no spaces)".to_owned(),
        ));
    }
    Ok(outcome)
}

/// An operator's reason for an action: it goes into the audit log, so it must say something.
fn checked_reason(reason: &str) -> Result<String, ConsoleError> {
    let reason = reason.trim();
    if (5..=500).contains(&reason.chars().count()) {
        Ok(reason.to_owned())
    } else {
        Err(ConsoleError::Invalid(
            "say why, in 5 to 500 characters: the reason goes into the audit log".to_owned(),
        ))
    }
}

/// What each possible action would do, in the operator's words, given what the provider
/// said; the safest first.
fn options(status: RecordStatus, payment_id: &str, evidence: &ProviderEvidence) -> Vec<ReconcileOption> {
    let option = |action, changes: Vec<String>| ReconcileOption { action, changes };
    match evidence {
        ProviderEvidence::Charged {
            charge_id,
            status: charge,
        } if charge == "succeeded" => vec![option(
            ReconcileAction::ApplyProviderResult,
            vec![
                format!("record {status} -> COMPLETED"),
                format!("payment {payment_id} PROCESSING -> PENDING, provider charge {charge_id}"),
                "response 201 stored: retries with the key are answered with it".to_owned(),
                "event PaymentAuthorized".to_owned(),
            ],
        )],
        ProviderEvidence::Charged { charge_id, .. } => vec![option(
            ReconcileAction::ApplyProviderResult,
            vec![
                format!("record {status} -> FAILED_REPLAYABLE"),
                format!(
                    "payment {payment_id} PROCESSING -> DECLINED (charge {charge_id}); the held amount is released"
                ),
                "response 402 PAYMENT_DECLINED stored: retries with the key are answered with it".to_owned(),
                "event PaymentDeclined".to_owned(),
            ],
        )],
        ProviderEvidence::NoCharge => vec![
            option(
                ReconcileAction::RetryCharge,
                vec![
                    format!(
                        "the charge is sent now with the payment's provider key provider_payment_{payment_id}"
                    ),
                    format!(
                        "then record {status} -> COMPLETED or FAILED_REPLAYABLE, as the provider answers"
                    ),
                ],
            ),
            option(
                ReconcileAction::MarkFailedAndReleaseKey,
                vec![
                    format!("record {status} -> FAILED_RETRYABLE: the key's next retry executes anew"),
                    format!(
                        "payment {payment_id} PROCESSING -> DECLINED, not charged; the held amount and its merchant reference are released"
                    ),
                    "nothing is sent to the provider; event PaymentDeclined".to_owned(),
                ],
            ),
        ],
        ProviderEvidence::Unreachable { .. } => Vec::new(),
    }
}
