//! The console's reads: dashboard, records, a record's page, the recovery queue and a
//! reconcile preview, overrides, bulk jobs, events, the audit log.

use super::{StoreConsole, scope_of, unavailable, views};
use crate::events::consumers::{LEDGER, RECEIPTS};
use crate::store::console::{COMPARED_WINDOWS, DashboardSelection};
use app::audit::model::AuditEntryView;
use app::backend::{ConsoleError, ConsoleReads};
use app::dashboard::model::{
    Dashboard, DashboardRange, LiveGauges, RetryWindow, Series, TenantOption, WindowFit,
};
use app::events::model::{ConsumerLag, EventsOverview};
use app::overrides::model::OverrideRequestView;
use app::reconcile::model::{ReconcileOption, ReconcilePreview};
use app::records::model::{RecordDetail, RecordFilter, RecordPage, RecordRef, RecordSummary};
use app::recovery::model::{BulkJobView, RecoveryQueue};
use chrono::{DateTime, SecondsFormat, Utc};
use domain::cursor::AuditCursor;
use domain::outcome::Outcome;
use domain::queue::{QueueCursor, QueueFilter, QueueQuery};
use domain::record::RecordStatus;
use domain::recovery::{EvidenceKind, ProviderEvidence, ReconcileAction};
use domain::retry_delay;
use domain::scope::Operation;
use std::time::Duration;
use strum::VariantArray;

/// Rows per records page.
const PAGE: usize = 50;

/// Rows per recovery queue page.
const QUEUE_PAGE: usize = 50;

/// How long back the events page looks for a consumer's lag.
const LAG_WINDOW: Duration = Duration::from_secs(24 * 3600);

fn now_text() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A dashboard range in epoch seconds, `[from, to)`: whole steps, the current one last.
fn epochs_of(range: DashboardRange) -> (i64, i64) {
    let step = range.step_seconds();
    let to = (Utc::now().timestamp() / step + 1) * step;
    (to - range.seconds(), to)
}

/// A filter's value, empty meaning any.
fn named(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_owned())
}

/// A count as the console shows it.
fn count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

#[async_trait::async_trait]
impl ConsoleReads for StoreConsole {
    async fn dashboard(
        &self,
        range: DashboardRange,
        tenant: String,
        operation: String,
    ) -> Result<Dashboard, ConsoleError> {
        let step = range.step_seconds();
        let points = usize::try_from(range.seconds() / step).unwrap_or(0);
        let (from, to) = epochs_of(range);
        let rows = self
            .store
            .outcome_series(
                &DashboardSelection {
                    from_epoch: from,
                    to_epoch: to,
                    tenant: named(&tenant).as_deref(),
                    operation: named(&operation).as_deref(),
                },
                step,
            )
            .await
            .map_err(unavailable("dashboard series"))?;
        let series = Outcome::VARIANTS
            .iter()
            .map(|outcome| {
                let mut values = vec![0_u64; points];
                for row in rows.iter().filter(|row| row.outcome == outcome.as_str()) {
                    if let Some(slot) = usize::try_from((row.bucket - from) / step)
                        .ok()
                        .and_then(|i| values.get_mut(i))
                    {
                        *slot += count(row.total);
                    }
                }
                Series {
                    outcome: *outcome,
                    total: values.iter().sum(),
                    points: values,
                }
            })
            .collect();
        let (gauges, outbox, cleanup, charged_after_release, tenants) = tokio::try_join!(
            self.store.record_gauges(self.recovery_max_attempts),
            self.store.outbox_backlog(),
            self.store
                .retention_backlog(self.engine.settings().create_payment.expiry.retention),
            self.store.late_charges(),
            self.store.tenants(),
        )
        .map_err(unavailable("dashboard gauges"))?;
        Ok(Dashboard {
            range,
            from: DateTime::from_timestamp(from, 0)
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
            tenants: tenants
                .into_iter()
                .map(|tenant| TenantOption {
                    id: tenant.id,
                    name: tenant.name,
                })
                .collect(),
            read_at: now_text(),
        })
    }

    async fn retry_windows(
        &self,
        range: DashboardRange,
        tenant: String,
        operation: String,
    ) -> Result<Vec<RetryWindow>, ConsoleError> {
        let (from, to) = epochs_of(range);
        let mut shown = Vec::new();
        // Each operation against its own window: one statement per operation shown.
        for operation in Operation::VARIANTS
            .iter()
            .filter(|candidate| operation.is_empty() || candidate.as_str() == operation)
        {
            let current = self.engine.settings().of(*operation).expiry.window;
            let mut compared = [current; COMPARED_WINDOWS];
            compared[1..].copy_from_slice(&retry_delay::OTHER_WINDOWS);
            let rows = self
                .store
                .retry_delays(
                    &DashboardSelection {
                        from_epoch: from,
                        to_epoch: to,
                        tenant: named(&tenant).as_deref(),
                        operation: Some(operation.as_str()),
                    },
                    compared,
                )
                .await
                .map_err(unavailable("retry delays"))?;
            let row = rows
                .iter()
                .find(|row| row.operation == operation.as_str())
                .map(|row| &row.summary);
            let seconds = |ms: i64| ms as f64 / 1000.0;
            let mut windows: Vec<WindowFit> = compared
                .iter()
                .enumerate()
                .map(|(index, window)| WindowFit {
                    window_secs: window.as_secs(),
                    outside: row.map_or(0, |row| count(row.outside[index])),
                    current: index == 0,
                })
                .collect();
            windows.sort_by_key(|fit| (fit.window_secs, !fit.current));
            windows.dedup_by_key(|fit| fit.window_secs);
            shown.push(RetryWindow {
                operation: *operation,
                window_secs: current.as_secs(),
                retries: row.map_or(0, |row| count(row.retries)),
                quantile_secs: row.map_or([0.0; 4], |row| row.quantiles_ms.map(seconds)),
                longest_secs: row.map_or(0.0, |row| seconds(row.longest_ms)),
                windows,
            });
        }
        Ok(shown)
    }

    async fn records(&self, filter: RecordFilter) -> Result<RecordPage, ConsoleError> {
        let query = views::record_query(&filter).map_err(ConsoleError::Invalid)?;
        let mut rows: Vec<RecordSummary> = self
            .store
            .list_records(&query, (PAGE + 1) as i64)
            .await
            .map_err(unavailable("records"))?
            .into_iter()
            .map(views::summary)
            .collect();
        let next = (rows.len() > PAGE).then(|| rows[PAGE - 1].cursor.clone());
        rows.truncate(PAGE);
        Ok(RecordPage { rows, next })
    }

    async fn find(&self, needle: String) -> Result<Vec<RecordSummary>, ConsoleError> {
        let needle = needle.trim();
        if needle.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .store
            .find_records(needle, 20)
            .await
            .map_err(unavailable("find records"))?;
        Ok(rows.into_iter().map(views::summary).collect())
    }

    async fn record(&self, record: RecordRef) -> Result<Option<RecordDetail>, ConsoleError> {
        // A name no record can have names no record.
        let Ok(scope) = scope_of(&record) else {
            return Ok(None);
        };
        let Some(history) = self
            .store
            .record_history(&scope)
            .await
            .map_err(unavailable("record detail"))?
        else {
            return Ok(None);
        };
        let audit = self
            .store
            .audit_of_target(&scope.audit_target(), 100)
            .await
            .map_err(unavailable("record audit"))?;
        Ok(Some(views::record_detail(
            history,
            audit,
            self.recovery_max_attempts,
        )))
    }

    async fn recovery_queue(&self, query: QueueQuery) -> Result<RecoveryQueue, ConsoleError> {
        let (filter, after) =
            QueueFilter::parse(&query).map_err(|refused| ConsoleError::Invalid(refused.to_string()))?;
        let (page, tenants) = tokio::try_join!(
            self.store.recovery_queue(
                &filter,
                after.as_ref(),
                self.recovery_max_attempts,
                (QUEUE_PAGE + 1) as i64
            ),
            self.store.tenants(),
        )
        .map_err(unavailable("recovery queue"))?;
        let mut rows = page.rows;
        let next = (rows.len() > QUEUE_PAGE).then(|| {
            let last = &rows[QUEUE_PAGE - 1];
            QueueCursor {
                sort_value: last.sort_value,
                tenant_id: last.record.tenant_id.clone(),
                operation: last.record.operation.clone(),
                key: last.record.key.clone(),
            }
            .to_text()
        });
        rows.truncate(QUEUE_PAGE);
        Ok(RecoveryQueue {
            total: count(page.total),
            rows: rows
                .into_iter()
                .map(|row| views::queue_row(row, self.recovery_max_attempts))
                .collect(),
            next,
            tenants: tenants.into_iter().map(|tenant| tenant.name).collect(),
            read_at: now_text(),
        })
    }

    async fn preview_reconcile(&self, record: RecordRef) -> Result<ReconcilePreview, ConsoleError> {
        let found = self.existing_record(&record, "reconcile preview").await?;
        let status = found.record.status;
        let needs_operator = found.needs_operator();
        let resource_id = found.record.resource_id.clone().unwrap_or_default();
        let operation = scope_of(&record)?.operation;
        let evidence = self.engine.provider_evidence(operation, &resource_id).await;
        // Kept for the queue (what the provider says, and its filter); a failure to keep it
        // loses nothing the operator sees now.
        if let Err(error) = self
            .store
            .note_evidence(&views::record_name(&record), &evidence)
            .await
        {
            tracing::warn!(%error, "console: the provider's evidence not kept");
        }
        let options = if needs_operator {
            reconcile_options(operation, status, &resource_id, &evidence)
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

    async fn bulk_job(&self, id: String) -> Result<Option<BulkJobView>, ConsoleError> {
        self.bulk_job_view(&id).await
    }

    async fn bulk_jobs(&self) -> Result<Vec<BulkJobView>, ConsoleError> {
        let jobs = self
            .store
            .bulk_jobs(100)
            .await
            .map_err(unavailable("bulk jobs"))?;
        Ok(jobs
            .into_iter()
            .map(|job| views::bulk_job(job, Vec::new(), Vec::new()))
            .collect())
    }

    async fn overrides(&self) -> Result<Vec<OverrideRequestView>, ConsoleError> {
        let requests = self
            .store
            .override_requests(100)
            .await
            .map_err(unavailable("override requests"))?;
        Ok(requests.into_iter().map(views::override_request).collect())
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
                .consumer_lag(consumer, "PaymentAuthorized", LAG_WINDOW)
                .await
                .map_err(unavailable("consumer lag"))?;
            consumers.push(ConsumerLag {
                consumer: consumer.to_owned(),
                lag: count(lag),
            });
        }
        let dead_letters = self
            .store
            .dead_letters(200)
            .await
            .map_err(unavailable("dead letters"))?;
        Ok(EventsOverview {
            unpublished: count(backlog.unpublished),
            oldest_unpublished_secs: backlog.oldest_unpublished_age_seconds,
            consumers,
            dead_letters: dead_letters.into_iter().map(views::dead_letter).collect(),
            read_at: now_text(),
        })
    }

    async fn audit(&self, before: String) -> Result<Vec<AuditEntryView>, ConsoleError> {
        let cursor = if before.is_empty() {
            None
        } else {
            Some(AuditCursor::parse(&before).map_err(|error| ConsoleError::Invalid(error.to_string()))?)
        };
        let page = self
            .store
            .audit_page(cursor.as_ref(), 50)
            .await
            .map_err(unavailable("audit log"))?;
        Ok(page.into_iter().map(views::audit_entry).collect())
    }
}

/// What an operator may apply to a record that needs one, given what the provider said
/// (`ReconcileAction::offered`, the safest first), each with exactly what it changes.
pub(super) fn reconcile_options(
    operation: Operation,
    status: RecordStatus,
    resource_id: &str,
    evidence: &ProviderEvidence,
) -> Vec<ReconcileOption> {
    ReconcileAction::offered(operation, evidence.kind())
        .iter()
        .map(|&action| ReconcileOption {
            action,
            changes: changes(operation, action, status, resource_id, evidence),
        })
        .collect()
}

/// What applying `action` changes, in the operator's words.
fn changes(
    operation: Operation,
    action: ReconcileAction,
    status: RecordStatus,
    id: &str,
    evidence: &ProviderEvidence,
) -> Vec<String> {
    let (noun, provider_noun, created, succeeded, failed, declined_code, key) = match operation {
        Operation::CreatePayment => (
            "payment",
            "provider charge",
            "PaymentAuthorized",
            "PENDING",
            "DECLINED",
            "402 PAYMENT_DECLINED",
            format!("the charge is sent now with the payment's provider key provider_payment_{id}"),
        ),
        Operation::CreateRefund => (
            "refund",
            "provider refund",
            "RefundSucceeded",
            "SUCCEEDED",
            "FAILED",
            "402 REFUND_DECLINED",
            format!("the refund is sent now with its provider key provider_refund_{id}"),
        ),
    };
    match (action, evidence.kind()) {
        (ReconcileAction::ApplyProviderResult, EvidenceKind::Succeeded) => vec![
            format!("record {status} -> COMPLETED"),
            format!(
                "{noun} {id} PROCESSING -> {succeeded}, {provider_noun} {}",
                evidence.detail()
            ),
            "response 201 stored: retries with the key are answered with it".to_owned(),
            format!("event {created}"),
        ],
        (ReconcileAction::ApplyProviderResult, _) => vec![
            format!("record {status} -> FAILED_REPLAYABLE"),
            match operation {
                Operation::CreatePayment => format!(
                    "payment {id} PROCESSING -> DECLINED (charge {}); the held amount is released",
                    evidence.detail()
                ),
                Operation::CreateRefund => format!(
                    "refund {id} PROCESSING -> FAILED (provider refund {}); its amount is refundable again",
                    evidence.detail()
                ),
            },
            format!("response {declined_code} stored: retries with the key are answered with it"),
            match operation {
                Operation::CreatePayment => "event PaymentDeclined".to_owned(),
                Operation::CreateRefund => "event RefundFailed".to_owned(),
            },
        ],
        (ReconcileAction::RetryCharge, _) => vec![
            key,
            format!("then record {status} -> COMPLETED or FAILED_REPLAYABLE, as the provider answers"),
        ],
        (ReconcileAction::MarkFailedAndReleaseKey, _) => vec![
            format!("record {status} -> FAILED_RETRYABLE: the key's next retry executes anew"),
            format!(
                "{noun} {id} PROCESSING -> {failed}, not charged; the held amount and its merchant reference are released"
            ),
            "nothing is sent to the provider; event PaymentDeclined".to_owned(),
        ],
    }
}
