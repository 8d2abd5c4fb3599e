//! What the operator console reads: outcome series from the per-minute buckets, live gauges
//! from partial indexes, the records browser (keyset pages), a record's whole story, the
//! request journal, the recovery queue. One body for both dialects; statements that differ
//! are in [`ConsoleSql`]. Nothing here counts the whole records table.

use crate::store::StoreError;
use app::dto::{RecordDetail, RecordFilter, RecordRef, RecordSummary, TenantOption};
use chrono::{DateTime, Utc};
use domain::record::RecordStatus;

/// A request that arrived with a key, as the engine journals it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    pub record: RecordRef,
    pub at: DateTime<Utc>,
    pub fingerprint: String,
    /// Only when it differs from the record's command (a conflicting retry).
    pub canonical_command: Option<String>,
    pub status_code: u16,
    pub error_code: Option<String>,
    pub replayed: bool,
}

/// A journal row as read back for the record page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRow {
    pub at: DateTime<Utc>,
    pub fingerprint: String,
    pub canonical_command: Option<String>,
    pub status_code: u16,
    pub error_code: Option<String>,
    pub replayed: bool,
}

/// Counts behind the live gauges that the records table answers (through partial indexes).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RecordGauges {
    pub in_progress: i64,
    pub stale_in_progress: i64,
    pub oldest_stale_in_progress_secs: f64,
    pub unknown: i64,
    pub oldest_unknown_secs: f64,
    pub needs_operator: i64,
}

#[async_trait::async_trait]
pub trait ConsoleStore {
    /// Sums of outcome counts per `step`-second bucket (epoch seconds), outcome, in
    /// `[from, to)`; `tenant`/`operation` empty for all.
    async fn outcome_series(
        &self,
        step: i64,
        from_epoch: i64,
        to_epoch: i64,
        tenant: &str,
        operation: &str,
    ) -> Result<Vec<(i64, String, i64)>, StoreError>;

    /// `max_attempts`: the recovery worker's limit (records at it need an operator).
    async fn record_gauges(&self, max_attempts: i32) -> Result<RecordGauges, StoreError>;

    async fn tenant_options(&self) -> Result<Vec<TenantOption>, StoreError>;

    /// Newest first, after `filter.after`; `limit` rows at most.
    async fn list_records(&self, query: &RecordQuery, limit: i64) -> Result<Vec<RecordSummary>, StoreError>;

    /// Records whose key, payment id or provider charge id is exactly `needle`.
    async fn find_records(&self, needle: &str, limit: i64) -> Result<Vec<RecordSummary>, StoreError>;

    /// The record with its payment, events and audit entries, and its raw journal (the caller
    /// turns it into requests with diffs).
    async fn record_detail(
        &self,
        record: &RecordRef,
    ) -> Result<Option<(RecordDetail, Vec<JournalRow>)>, StoreError>;

    async fn add_journal_entries(&self, entries: &[JournalEntry]) -> Result<(), StoreError>;

    /// Records needing attention: unknown outcomes (oldest first) and in-progress records
    /// whose owner's lease ran out.
    async fn recovery_queue(&self, limit: i64) -> Result<Vec<RecordSummary>, StoreError>;

    /// Released payments whose provider key showed a charge after all, not yet refunded.
    async fn late_charges(&self) -> Result<i64, StoreError>;

    /// Records that the late charge of `payment_id`, released by `record`'s key, was refunded
    /// (`reference` says how), with `audit`, in one transaction; `false` (nothing written) when
    /// that key released no such payment, it has no late charge, or it was resolved already.
    async fn resolve_late_charge(
        &self,
        record: &RecordRef,
        payment_id: &str,
        by: &str,
        reference: &str,
        audit: &domain::operator::AuditEntry,
    ) -> Result<bool, StoreError>;
}

pub(super) struct ConsoleSql {
    /// `$1` step seconds, `$2` from epoch, `$3` to epoch, `$4` tenant, `$5` operation.
    pub outcome_series: &'static str,
    /// `$1` attempt limit: in progress, stale in progress, oldest stale age, unknown, oldest
    /// unknown age, at the limit.
    pub record_gauges: &'static str,
    /// `$1` status, `$2` step, `$3` tenant, `$4` operation, `$5` key prefix, `$6` from,
    /// `$7` to, `$8`..`$11` cursor (created at, tenant, operation, key), `$12` limit.
    pub list_records: &'static str,
    /// `$1` limit.
    pub recovery_queue: &'static str,
    /// `$1` payment, `$2` operator, `$3` reference, `$4` tenant, `$5` key: an unresolved late
    /// charge of a payment that key released -> resolved now.
    pub resolve_late_charge: &'static str,
    /// `$1`..`$10` a journal entry (id, scope, at, fingerprint, command, status, error code,
    /// replayed).
    pub insert_journal: &'static str,
}

macro_rules! find_records_by {
    ($condition:literal) => {
        concat!(
            "select tenant_id, operation_name, idempotency_key, status, progress_step, resource_id, ",
            "provider_reference, created_at, updated_at, recovery_attempts from idempotency_records ",
            $condition
        )
    };
}

pub(super) const TENANT_OPTIONS: &str = "select id, name from tenants order by name";
/// One index probe per way of naming a record: its key, its payment, its provider charge, or a
/// payment the key made earlier (released by an operator, so no longer the record's).
pub(super) const FIND_RECORDS: &str = concat!(
    find_records_by!("where idempotency_key = $1"),
    " union ",
    find_records_by!("where resource_id = $2"),
    " union ",
    find_records_by!("where provider_reference = $3"),
    " union ",
    find_records_by!(
        "where operation_name = 'create_payment' and (tenant_id, idempotency_key) = \
         (select tenant_id, idempotency_key from payments where id = $2)"
    ),
    " order by created_at desc limit $4"
);
pub(super) const RECORD_DETAIL: &str = "select status, progress_step, settled_status, \
     cast(fingerprint_version as integer), request_fingerprint, canonical_command, resource_id, \
     provider_reference, response_status_code, lease_owner, lease_version, locked_until, recovery_attempts, \
     next_recovery_at, expired_retries, created_by, created_at, updated_at, completed_at, expires_at, claimed_as \
     from idempotency_records where tenant_id = $1 and operation_name = $2 and idempotency_key = $3";
pub(super) const RECORD_PAYMENT: &str = "select id, account_id, amount_minor, currency, merchant_reference, status, \
     provider_charge_id from payments where tenant_id = $1 and id = $2";
pub(super) const PAYMENT_EVENTS: &str = "select id, event_type, created_at, published_at from outbox_events \
     where payment_id = $1 order by created_at, id";
pub(super) const RECORD_JOURNAL: &str = "select at, fingerprint, canonical_command, status_code, error_code, replayed \
     from idempotency_requests where tenant_id = $1 and operation_name = $2 and idempotency_key = $3 \
     order by at, id limit 500";
pub(super) const RECORD_STEPS: &str = "select at, status, progress_step, lease_version, lease_owner \
     from record_steps where tenant_id = $1 and operation_name = $2 and idempotency_key = $3 \
     order by at, lease_version limit 200";
pub(super) const LATE_CHARGES: &str =
    "select count(*) from payments where late_charge_id is not null and late_charge_resolved_at is null";
pub(super) const RELEASED_PAYMENTS: &str = "select id, released_at, late_charge_id, late_charge_resolved_at, \
     late_charge_resolved_by, late_charge_resolution from payments \
     where tenant_id = $1 and idempotency_key = $2 and released_at is not null order by released_at";
pub(super) const TARGET_AUDIT: &str = "select id, at, actor, action, target, reason, result, details from audit_log \
     where target = $1 order by at desc, id desc limit 100";

/// A payment a key released: id, released at, late charge, and its resolution (at, by,
/// reference).
pub(super) type ReleasedRow = (
    String,
    DateTime<Utc>,
    Option<String>,
    Option<DateTime<Utc>>,
    Option<String>,
    Option<String>,
);

pub(super) fn released_of(
    (id, released_at, late_charge_id, resolved_at, resolved_by, resolution): ReleasedRow,
) -> app::dto::ReleasedPaymentView {
    app::dto::ReleasedPaymentView {
        id,
        released_at: crate::store::rfc3339_millis(released_at),
        late_charge_id,
        late_charge_resolved: resolved_at.map(|at| app::dto::LateChargeResolution {
            at: crate::store::rfc3339_millis(at),
            by: resolved_by.unwrap_or_default(),
            reference: resolution.unwrap_or_default(),
        }),
    }
}

/// How the audit log names a record.
pub fn audit_target(record: &RecordRef) -> String {
    format!("{}/{}/{}", record.tenant_id, record.operation, record.key)
}

/// In progress, stale, oldest stale age, unknown, oldest unknown age, at the attempt limit.
pub(super) type GaugeRow = (i64, i64, f64, i64, f64, i64);

pub(super) type SummaryRow = (
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    DateTime<Utc>,
    DateTime<Utc>,
    i32,
);

pub(super) fn summary_of(
    (
        tenant_id,
        operation,
        key,
        status,
        step,
        resource_id,
        provider_reference,
        created_at,
        updated_at,
        recovery_attempts,
    ): SummaryRow,
) -> Result<RecordSummary, StoreError> {
    let status: RecordStatus = status
        .parse()
        .map_err(|error| StoreError::Corrupt(format!("{error}")))?;
    let created = crate::store::rfc3339_millis(created_at);
    // Microseconds: PostgreSQL keeps them, and a cursor rounded down would skip rows.
    let exact = created_at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let cursor = serde_json::to_string(&[exact.as_str(), &tenant_id, &operation, &key]).unwrap_or_default();
    Ok(RecordSummary {
        record: RecordRef {
            tenant_id,
            operation,
            key,
        },
        status,
        step,
        resource_id,
        provider_reference,
        created_at: created,
        updated_at: crate::store::rfc3339_millis(updated_at),
        recovery_attempts,
        cursor,
    })
}

/// A records-browser filter, parsed: every part checked, "any" made explicit, as the query
/// binds it. Built by [`RecordQuery::parse`] from what the browser sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordQuery {
    pub(super) status: String,
    pub(super) step: String,
    pub(super) tenant: String,
    pub(super) operation: String,
    pub(super) key_prefix: String,
    pub(super) from: String,
    pub(super) to: String,
    pub(super) cursor: [String; 4],
}

impl RecordQuery {
    /// What is wrong with the filter, in the operator's words, when it cannot be used.
    pub fn parse(filter: &RecordFilter) -> Result<RecordQuery, String> {
        if !filter.status.is_empty() && filter.status.parse::<RecordStatus>().is_err() {
            return Err(format!("unknown status {:?}", filter.status));
        }
        if !filter.step.is_empty() && filter.step.parse::<domain::record::ProgressStep>().is_err() {
            return Err(format!("unknown step {:?}", filter.step));
        }
        let bound = |text: &str, default: &str| -> Result<String, String> {
            if text.is_empty() {
                return Ok(default.to_owned());
            }
            DateTime::parse_from_rfc3339(text)
                .map(|at| crate::store::rfc3339_millis(at.with_timezone(&Utc)))
                .map_err(|_| format!("not an RFC 3339 time: {text:?}"))
        };
        let cursor = if filter.after.is_empty() {
            [MAX_TIME.to_owned(), String::new(), String::new(), String::new()]
        } else {
            serde_json::from_str(&filter.after).map_err(|_| "not a page cursor".to_owned())?
        };
        Ok(RecordQuery {
            status: filter.status.clone(),
            step: filter.step.clone(),
            tenant: filter.tenant.clone(),
            operation: filter.operation.clone(),
            key_prefix: filter.key_prefix.clone(),
            from: bound(&filter.from, MIN_TIME)?,
            to: bound(&filter.to, MAX_TIME)?,
            cursor,
        })
    }
}

const MIN_TIME: &str = "0001-01-01T00:00:00.000Z";
const MAX_TIME: &str = "9999-12-31T23:59:59.999Z";

/// An amount as the API writes it (`"10.00"`), from the stored minor units.
pub(super) fn minor_to_decimal(minor: i64, currency: &str) -> String {
    use domain::money::{Amount, Currency};
    Currency::parse(currency)
        .ok()
        .and_then(|currency| Amount::from_minor_units(minor, currency).ok())
        .map_or_else(|| format!("{minor} (minor units)"), |amount| amount.to_string())
}

macro_rules! impl_console_store {
    ($store:ty, $db:ty, $sql:expr) => {
        #[async_trait::async_trait]
        impl $crate::store::console::ConsoleStore for $store {
            async fn outcome_series(
                &self,
                step: i64,
                from_epoch: i64,
                to_epoch: i64,
                tenant: &str,
                operation: &str,
            ) -> Result<Vec<(i64, String, i64)>, $crate::store::StoreError> {
                Ok(sqlx::query_as($sql.outcome_series)
                    .bind(step)
                    .bind(from_epoch)
                    .bind(to_epoch)
                    .bind(tenant)
                    .bind(operation)
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn record_gauges(
                &self,
                max_attempts: i32,
            ) -> Result<$crate::store::console::RecordGauges, $crate::store::StoreError> {
                let row: $crate::store::console::GaugeRow = sqlx::query_as($sql.record_gauges)
                    .bind(max_attempts)
                    .fetch_one(&self.pool)
                    .await?;
                let (in_progress, stale_in_progress, oldest_stale, unknown, oldest_unknown, needs_operator) =
                    row;
                Ok($crate::store::console::RecordGauges {
                    in_progress,
                    stale_in_progress,
                    oldest_stale_in_progress_secs: oldest_stale.max(0.0),
                    unknown,
                    oldest_unknown_secs: oldest_unknown.max(0.0),
                    needs_operator,
                })
            }

            async fn tenant_options(&self) -> Result<Vec<app::dto::TenantOption>, $crate::store::StoreError> {
                let rows: Vec<(String, String)> = sqlx::query_as($crate::store::console::TENANT_OPTIONS)
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows
                    .into_iter()
                    .map(|(id, name)| app::dto::TenantOption { id, name })
                    .collect())
            }

            async fn list_records(
                &self,
                query: &$crate::store::console::RecordQuery,
                limit: i64,
            ) -> Result<Vec<app::dto::RecordSummary>, $crate::store::StoreError> {
                let [at, tenant, operation, key] = &query.cursor;
                let rows: Vec<$crate::store::console::SummaryRow> = sqlx::query_as($sql.list_records)
                    .bind(query.status.as_str())
                    .bind(query.step.as_str())
                    .bind(query.tenant.as_str())
                    .bind(query.operation.as_str())
                    .bind(query.key_prefix.as_str())
                    .bind(query.from.as_str())
                    .bind(query.to.as_str())
                    .bind(at)
                    .bind(tenant)
                    .bind(operation)
                    .bind(key)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                rows.into_iter()
                    .map($crate::store::console::summary_of)
                    .collect()
            }

            async fn find_records(
                &self,
                needle: &str,
                limit: i64,
            ) -> Result<Vec<app::dto::RecordSummary>, $crate::store::StoreError> {
                let rows: Vec<$crate::store::console::SummaryRow> =
                    sqlx::query_as($crate::store::console::FIND_RECORDS)
                        .bind(needle)
                        .bind(needle)
                        .bind(needle)
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?;
                rows.into_iter()
                    .map($crate::store::console::summary_of)
                    .collect()
            }

            async fn record_detail(
                &self,
                record: &app::dto::RecordRef,
            ) -> Result<
                Option<(
                    app::dto::RecordDetail,
                    Vec<$crate::store::console::JournalRow>,
                )>,
                $crate::store::StoreError,
            > {
                use sqlx::Row;
                use $crate::store::rfc3339_millis as at;
                let Some(row) = sqlx::query($crate::store::console::RECORD_DETAIL)
                    .bind(record.tenant_id.as_str())
                    .bind(record.operation.as_str())
                    .bind(record.key.as_str())
                    .fetch_optional(&self.pool)
                    .await?
                else {
                    return Ok(None);
                };
                let status: String = row.try_get(0)?;
                let step: String = row.try_get(1)?;
                let settled_status: Option<String> = row.try_get(2)?;
                let fingerprint_version: i32 = row.try_get(3)?;
                let fingerprint: String = row.try_get(4)?;
                let canonical_command: String = row.try_get(5)?;
                let resource_id: Option<String> = row.try_get(6)?;
                let provider_reference: Option<String> = row.try_get(7)?;
                let response_status_code: Option<i32> = row.try_get(8)?;
                let lease_owner: Option<String> = row.try_get(9)?;
                let lease_version: i64 = row.try_get(10)?;
                let locked_until: Option<chrono::DateTime<chrono::Utc>> = row.try_get(11)?;
                let recovery_attempts: i32 = row.try_get(12)?;
                let next_recovery_at: Option<chrono::DateTime<chrono::Utc>> = row.try_get(13)?;
                let expired_retries: i32 = row.try_get(14)?;
                let created_by: String = row.try_get(15)?;
                let created_at: chrono::DateTime<chrono::Utc> = row.try_get(16)?;
                let updated_at: chrono::DateTime<chrono::Utc> = row.try_get(17)?;
                let completed_at: Option<chrono::DateTime<chrono::Utc>> = row.try_get(18)?;
                let expires_at: chrono::DateTime<chrono::Utc> = row.try_get(19)?;
                let claimed_as: String = row.try_get(20)?;
                let released: Vec<$crate::store::console::ReleasedRow> =
                    sqlx::query_as($crate::store::console::RELEASED_PAYMENTS)
                        .bind(record.tenant_id.as_str())
                        .bind(record.key.as_str())
                        .fetch_all(&self.pool)
                        .await?;
                let steps: Vec<(
                    chrono::DateTime<chrono::Utc>,
                    String,
                    String,
                    i64,
                    Option<String>,
                )> = sqlx::query_as($crate::store::console::RECORD_STEPS)
                    .bind(record.tenant_id.as_str())
                    .bind(record.operation.as_str())
                    .bind(record.key.as_str())
                    .fetch_all(&self.pool)
                    .await?;
                let payment = match resource_id.as_deref() {
                    Some(payment_id) => {
                        let row: Option<(String, String, i64, String, String, String, Option<String>)> =
                            sqlx::query_as($crate::store::console::RECORD_PAYMENT)
                                .bind(record.tenant_id.as_str())
                                .bind(payment_id)
                                .fetch_optional(&self.pool)
                                .await?;
                        row.map(
                            |(
                                id,
                                account_id,
                                amount,
                                currency,
                                merchant_reference,
                                status,
                                provider_charge_id,
                            )| {
                                app::dto::PaymentSummary {
                                    id,
                                    account_id,
                                    amount: $crate::store::console::minor_to_decimal(amount, &currency),
                                    currency,
                                    merchant_reference,
                                    status,
                                    provider_charge_id,
                                }
                            },
                        )
                    }
                    None => None,
                };
                let events: Vec<(
                    String,
                    String,
                    chrono::DateTime<chrono::Utc>,
                    Option<chrono::DateTime<chrono::Utc>>,
                )> = match &payment {
                    Some(payment) => {
                        sqlx::query_as($crate::store::console::PAYMENT_EVENTS)
                            .bind(payment.id.as_str())
                            .fetch_all(&self.pool)
                            .await?
                    }
                    None => Vec::new(),
                };
                let journal: Vec<(
                    chrono::DateTime<chrono::Utc>,
                    String,
                    Option<String>,
                    i32,
                    Option<String>,
                    bool,
                )> = sqlx::query_as($crate::store::console::RECORD_JOURNAL)
                    .bind(record.tenant_id.as_str())
                    .bind(record.operation.as_str())
                    .bind(record.key.as_str())
                    .fetch_all(&self.pool)
                    .await?;
                let audit: Vec<$crate::store::operators::AuditRow> =
                    sqlx::query_as($crate::store::console::TARGET_AUDIT)
                        .bind($crate::store::console::audit_target(record))
                        .fetch_all(&self.pool)
                        .await?;
                let detail = app::dto::RecordDetail {
                    record: record.clone(),
                    status: status
                        .parse()
                        .map_err(|error| $crate::store::StoreError::Corrupt(format!("{error}")))?,
                    step,
                    settled_status,
                    fingerprint_version,
                    fingerprint,
                    canonical_command,
                    resource_id,
                    provider_reference,
                    response_status_code,
                    lease_owner,
                    lease_version,
                    locked_until: locked_until.map(at),
                    recovery_attempts,
                    next_recovery_at: next_recovery_at.map(at),
                    expired_retries,
                    created_by,
                    created_at: at(created_at),
                    updated_at: at(updated_at),
                    completed_at: completed_at.map(at),
                    expires_at: at(expires_at),
                    claimed_as,
                    released_payments: released
                        .into_iter()
                        .map($crate::store::console::released_of)
                        .collect(),
                    steps: steps
                        .into_iter()
                        .map(
                            |(when, status, step, lease_version, lease_owner)| app::dto::StepView {
                                at: at(when),
                                status,
                                step,
                                lease_version,
                                lease_owner,
                            },
                        )
                        .collect(),
                    payment,
                    events: events
                        .into_iter()
                        .map(
                            |(id, event_type, created_at, published_at)| app::dto::EventView {
                                id,
                                event_type,
                                created_at: at(created_at),
                                published_at: published_at.map(at),
                            },
                        )
                        .collect(),
                    requests: Vec::new(),
                    audit: audit
                        .into_iter()
                        .map($crate::store::operators::audit_of)
                        .collect(),
                };
                let journal = journal
                    .into_iter()
                    .map(
                        |(when, fingerprint, canonical_command, status_code, error_code, replayed)| {
                            $crate::store::console::JournalRow {
                                at: when,
                                fingerprint,
                                canonical_command,
                                status_code: u16::try_from(status_code).unwrap_or(0),
                                error_code,
                                replayed,
                            }
                        },
                    )
                    .collect();
                Ok(Some((detail, journal)))
            }

            async fn add_journal_entries(
                &self,
                entries: &[$crate::store::console::JournalEntry],
            ) -> Result<(), $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                for entry in entries {
                    sqlx::query($sql.insert_journal)
                        .bind(format!("req_{}", domain::random::random_hex(12)))
                        .bind(entry.record.tenant_id.as_str())
                        .bind(entry.record.operation.as_str())
                        .bind(entry.record.key.as_str())
                        .bind($crate::store::rfc3339_millis(entry.at))
                        .bind(entry.fingerprint.as_str())
                        .bind(entry.canonical_command.as_deref())
                        .bind(i32::from(entry.status_code))
                        .bind(entry.error_code.as_deref())
                        .bind(entry.replayed)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn late_charges(&self) -> Result<i64, $crate::store::StoreError> {
                Ok(sqlx::query_scalar($crate::store::console::LATE_CHARGES)
                    .fetch_one(&self.pool)
                    .await?)
            }

            async fn resolve_late_charge(
                &self,
                record: &app::dto::RecordRef,
                payment_id: &str,
                by: &str,
                reference: &str,
                audit: &domain::operator::AuditEntry,
            ) -> Result<bool, $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                let resolved = sqlx::query($sql.resolve_late_charge)
                    .bind(payment_id)
                    .bind(by)
                    .bind(reference)
                    .bind(record.tenant_id.as_str())
                    .bind(record.key.as_str())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if resolved != 1 {
                    return Ok(false);
                }
                Self::audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn recovery_queue(
                &self,
                limit: i64,
            ) -> Result<Vec<app::dto::RecordSummary>, $crate::store::StoreError> {
                let rows: Vec<$crate::store::console::SummaryRow> = sqlx::query_as($sql.recovery_queue)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                rows.into_iter()
                    .map($crate::store::console::summary_of)
                    .collect()
            }
        }
    };
}
pub(super) use impl_console_store;
