//! The server's side of the console: access (operators, sessions, the gate), and the console
//! backend port (`app::backend::ConsoleBackend`) implemented over the store and the engine.

pub mod access;
mod diff;
pub mod sessions;

use crate::auth::tenant::TenantId;
use crate::events::consumers::{LEDGER, RECEIPTS};
use crate::idempotency::claim::Scope;
use crate::idempotency::key::IdempotencyKey;
use crate::metrics::Outcome;
use crate::payments::command::CreatePayment;
use crate::payments::engine::PaymentsEngine;
use crate::store::console::audit_target;
use crate::store::operators::{AuditCursor, AuditEntry};
use crate::store::{Store, StoreError};
use app::backend::{ConsoleBackend, ConsoleError};
use app::dto::{
    AuditEntryView, ConsumerLag, CurrentOperator, Dashboard, DashboardRange, EventsOverview, LiveGauges,
    ProviderEvidence, ReconcileAction, ReconcilePreview, ReconcileResult, RecordDetail, RecordFilter,
    RecordPage, RecordRef, RecordStatus, RecordSummary, RedriveResult, RequestView, RevealedResponse, Series,
};
use chrono::{SecondsFormat, Utc};
use std::sync::Arc;

/// Rows per records page.
const PAGE: usize = 50;

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
    if record.operation != CreatePayment::OPERATION {
        return Err(ConsoleError::Invalid(format!(
            "unknown operation {:?}",
            record.operation
        )));
    }
    let key = IdempotencyKey::parse(record.key.as_bytes())
        .map_err(|_| ConsoleError::Invalid("not an idempotency key".to_owned()))?;
    Ok(Scope {
        tenant_id: TenantId::from_stored(record.tenant_id.clone()),
        operation: CreatePayment::OPERATION,
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
        let series = Outcome::ALL
            .into_iter()
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
        if !filter.status.is_empty() && filter.status.parse::<RecordStatus>().is_err() {
            return Err(ConsoleError::Invalid(format!(
                "unknown status {:?}",
                filter.status
            )));
        }
        let mut rows = match self.store.list_records(&filter, (PAGE + 1) as i64).await {
            Ok(rows) => rows,
            // The filter's times or cursor did not parse.
            Err(StoreError::Corrupt(problem)) => return Err(ConsoleError::Invalid(problem)),
            Err(error) => return Err(unavailable("records")(error)),
        };
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
        let scope = scope_of(&record)?;
        let found = self
            .store
            .load_record(&scope)
            .await
            .map_err(unavailable("reconcile preview"))?
            .ok_or_else(|| ConsoleError::Invalid("no such record".to_owned()))?;
        let status = found.record.status;
        let needs_operator = match status {
            RecordStatus::UnknownRequiresRecovery => true,
            RecordStatus::InProgress => found.record.locked_until.is_none_or(|until| until <= found.now),
            _ => false,
        };
        let payment_id = found.record.resource_id.clone().unwrap_or_default();
        let evidence = self.engine.provider_evidence(&payment_id).await;
        let (action, changes) = if needs_operator {
            proposal(status, &payment_id, &evidence)
        } else {
            (None, vec![format!("nothing to do: the record is {status}")])
        };
        Ok(ReconcilePreview {
            record,
            status,
            version: found.record.lease_version,
            evidence,
            action,
            changes,
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
            action: format!("reconcile.{}", action_name(action)),
            target: Some(audit_target(&record)),
            reason: Some(reason.clone()),
            result: result.to_owned(),
            details: Some(details),
        };
        let applied = audit("ok", format!("previewed version {version}"));
        let (ok, message) = match self.engine.reconcile(&scope, version, action, &applied).await {
            // The completion committed with its audit entry.
            Ok(answer) if matches!(answer.response.status, 201 | 402) => (true, "applied".to_owned()),
            Ok(answer) => {
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

fn action_name(action: ReconcileAction) -> &'static str {
    match action {
        ReconcileAction::ApplyProviderResult => "apply_provider_result",
        ReconcileAction::RetryCharge => "retry_charge",
    }
}

/// What applying would do, in the operator's words, given what the provider said.
fn proposal(
    status: RecordStatus,
    payment_id: &str,
    evidence: &ProviderEvidence,
) -> (Option<ReconcileAction>, Vec<String>) {
    match evidence {
        ProviderEvidence::Charged {
            charge_id,
            status: charge,
        } if charge == "succeeded" => (
            Some(ReconcileAction::ApplyProviderResult),
            vec![
                format!("record {status} -> COMPLETED"),
                format!("payment {payment_id} PROCESSING -> PENDING, provider charge {charge_id}"),
                "response 201 stored: retries with the key are answered with it".to_owned(),
                "event PaymentAuthorized".to_owned(),
            ],
        ),
        ProviderEvidence::Charged { charge_id, .. } => (
            Some(ReconcileAction::ApplyProviderResult),
            vec![
                format!("record {status} -> FAILED_REPLAYABLE"),
                format!(
                    "payment {payment_id} PROCESSING -> DECLINED (charge {charge_id}); the held amount is released"
                ),
                "response 402 PAYMENT_DECLINED stored: retries with the key are answered with it".to_owned(),
                "event PaymentDeclined".to_owned(),
            ],
        ),
        ProviderEvidence::NoCharge => (
            Some(ReconcileAction::RetryCharge),
            vec![
                format!(
                    "the charge is sent now with the payment's provider key provider_payment_{payment_id}"
                ),
                format!("then record {status} -> COMPLETED or FAILED_REPLAYABLE, as the provider answers"),
            ],
        ),
        ProviderEvidence::Unreachable { problem } => (
            None,
            vec![format!(
                "nothing can be applied: the provider did not answer ({problem})"
            )],
        ),
    }
}
