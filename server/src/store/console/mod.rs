//! What the operator console reads: outcome series from the per-minute buckets, live gauges
//! from partial indexes, the records browser (keyset pages), a record's whole story, the
//! recovery queue (a record's whole story is `history.rs`'s). Nothing here counts the whole
//! records table. Rows are the store's own; the
//! console backend shapes them into its view models.

use crate::store::console::rows::cursor_time;
mod rows;

pub use rows::{QueuePage, QueueRow, RecordName, RecordQuery, RecordSummary};

use super::dialect::{Dialect, SqlStore, rfc3339_millis};

use super::error::StoreError;

use chrono::Utc;

use domain::queue::{Attention, EvidenceFilter, QueueCursor, QueueFilter};

use domain::record::{ProgressStep, RecordStatus};

use domain::recovery::{ProviderEvidence, UnknownCause};

use domain::retry_delay::{self, DelayBucket, DelaySummary};

use domain::scope::Operation;

use sqlx::Row;

use std::time::Duration;

/// A tenant, as the console's filters name it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TenantListing {
    pub id: String,
    pub name: String,
}

/// What the dashboard reads: `[from_epoch, to_epoch)` in epoch seconds, of one tenant and one
/// operation or (`None`) of all.
pub struct DashboardSelection<'a> {
    pub from_epoch: i64,
    pub to_epoch: i64,
    pub tenant: Option<&'a str>,
    pub operation: Option<&'a str>,
}

/// One bucket's count of one outcome (a row of [`ConsoleStatements::OUTCOME_SERIES`]).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct OutcomeCount {
    /// The bucket's start, in epoch seconds.
    pub bucket: i64,
    pub outcome: String,
    pub total: i64,
}

/// Counts behind the live gauges that the records table answers (through partial indexes;
/// the row of [`ConsoleStatements::RECORD_GAUGES`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, sqlx::FromRow)]
pub struct RecordGauges {
    pub in_progress: i64,
    pub stale_in_progress: i64,
    pub oldest_stale_in_progress_secs: f64,
    pub unknown: i64,
    pub oldest_unknown_secs: f64,
    pub needs_operator: i64,
}

#[async_trait::async_trait]
pub trait ConsoleStore: Send + Sync {
    /// Sums of the selection's outcome counts per `step_seconds` bucket (epoch seconds) and
    /// outcome name.
    async fn outcome_series(
        &self,
        selection: &DashboardSelection<'_>,
        step_seconds: i64,
    ) -> Result<Vec<OutcomeCount>, StoreError>;

    /// `max_attempts`: the recovery worker's limit (records at it need an operator).
    async fn record_gauges(&self, max_attempts: i32) -> Result<RecordGauges, StoreError>;

    /// Every tenant's id and name, by name.
    async fn tenants(&self) -> Result<Vec<TenantListing>, StoreError>;

    /// Newest first, after `query.after`; `limit` rows at most.
    async fn list_records(&self, query: &RecordQuery, limit: i64) -> Result<Vec<RecordSummary>, StoreError>;

    /// Records whose key, payment id or provider charge id is exactly `needle` (or that made a
    /// payment it names and released it).
    async fn find_records(&self, needle: &str, limit: i64) -> Result<Vec<RecordSummary>, StoreError>;

    /// Records needing attention (unknown outcomes, in-progress records whose owner's lease
    /// ran out) that match `filter`, in its order after `after`: `limit` rows at most, and how
    /// many match in all. `max_attempts`: the recovery worker's limit.
    async fn recovery_queue(
        &self,
        filter: &QueueFilter,
        after: Option<&QueueCursor>,
        max_attempts: i32,
        limit: i64,
    ) -> Result<QueuePage, StoreError>;

    /// Keeps what the provider just said about a record for an operator (replacing what it
    /// said before); nothing when the record is gone.
    async fn note_evidence(&self, record: &RecordName, evidence: &ProviderEvidence)
    -> Result<(), StoreError>;

    /// Released payments whose provider key showed a charge after all, not yet refunded.
    async fn late_charges(&self) -> Result<i64, StoreError>;

    /// The selection's journalled retries per operation, compared with `windows`.
    async fn retry_delays(
        &self,
        selection: &DashboardSelection<'_>,
        windows: [Duration; COMPARED_WINDOWS],
    ) -> Result<Vec<RetryDelays>, StoreError>;
}

/// `$1` status, `$2` step, `$3` tenant, `$4` operation, `$5` key prefix (empty: any), `$6`
/// from, `$7` to, `$8`..`$11` cursor (created at, tenant, operation, key), `$12` limit:
/// [`RecordSummary`] columns.
const LIST_RECORDS: &str = "select r.tenant_id, t.name as tenant_name, r.operation_name, r.idempotency_key, r.status, \
     r.progress_step, r.resource_id, r.provider_reference, r.created_at, r.updated_at, \
     r.recovery_attempts, coalesce(p.amount_minor, f.amount_minor) as amount_minor, \
     coalesce(p.currency, f.currency) as currency, coalesce(p.merchant_reference, f.reference) as \
     merchant_reference from idempotency_records r join tenants t on t.id = r.tenant_id left join \
     payments p on r.operation_name = 'create_payment' and p.id = r.resource_id left join refunds \
     f on r.operation_name = 'create_refund' and f.id = r.resource_id where ({text($1)} = '' or \
     r.status = $1) and ({text($2)} = '' or r.progress_step = $2) and ({text($3)} = '' or \
     r.tenant_id = $3 or t.name = $3) and ({text($4)} = '' or r.operation_name = $4) and \
     ({text($5)} = '' or substr(r.idempotency_key, 1, length($5)) = $5) and r.created_at >= \
     {time($6)} and r.created_at < {time($7)} and (r.created_at, r.tenant_id, r.operation_name, \
     r.idempotency_key) < ({time($8)}, $9, $10, $11) order by r.created_at desc, r.tenant_id \
     desc, r.operation_name desc, r.idempotency_key desc limit $12";

/// Console statements that differ by dialect.
pub trait ConsoleStatements {
    /// `$1` step seconds, `$2` from epoch, `$3` to epoch, `$4` tenant, `$5` operation (empty:
    /// any).
    const OUTCOME_SERIES: &'static str;
    /// `$1` attempt limit, `$2` tenant name, `$3` operation, `$4` attention, `$5` created at
    /// most at, `$6` created at least at, `$7` currency, `$8`..`$9` amount bounds (minor
    /// units), `$10` unknown cause, `$11` evidence (or `not_asked`), `$12` exact key, resource
    /// id or merchant reference (empty: any), `$13` order, `$14` 1 with a cursor, `$15`..`$18`
    /// the cursor (sort value, tenant, operation, key), `$19` limit: `total` (every row), then
    /// the page's [`QueueRow`] columns (none when the page is empty), in the order's
    /// `sort_value`.
    const RECOVERY_QUEUE: &'static str;
    /// `$1` from epoch, `$2` to epoch, `$3` tenant, `$4` operation (empty: any): the retry
    /// delay buckets of the range summed per operation and bucket ([`DelayBucketRow`]s), in
    /// operation order.
    const RETRY_DELAYS: &'static str;
}

/// `$1` attempt limit: in progress, stale in progress, oldest stale age, unknown, oldest
/// unknown age, at the limit.
const RECORD_GAUGES: &str = "select (select count(*) from idempotency_records where status = 'IN_PROGRESS') as \
     in_progress, (select count(*) from idempotency_records where status = 'IN_PROGRESS' and \
     locked_until <= {now}) as stale_in_progress, (select \
     coalesce({seconds_since(min(created_at))}, 0.0) from idempotency_records where status = \
     'IN_PROGRESS' and locked_until <= {now}) as oldest_stale_in_progress_secs, (select count(*) \
     from idempotency_records where status = 'UNKNOWN_REQUIRES_RECOVERY') as unknown, (select \
     coalesce({seconds_since(min(created_at))}, 0.0) from idempotency_records where status = \
     'UNKNOWN_REQUIRES_RECOVERY') as oldest_unknown_secs, (select count(*) from \
     idempotency_records where status = 'UNKNOWN_REQUIRES_RECOVERY' and recovery_attempts >= $1) \
     as needs_operator";

/// How many windows [`ConsoleStore::retry_delays`] compares the retries with.
pub const COMPARED_WINDOWS: usize = retry_delay::OTHER_WINDOWS.len() + 1;

/// Retries of one operation in a time range: how long after their key's first request they
/// came, and how many came after each of the windows asked about (exact for the windows the
/// dashboard compares, bucketed quantiles: see [`domain::retry_delay`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryDelays {
    pub operation: String,
    pub summary: DelaySummary<COMPARED_WINDOWS>,
}

/// A row of [`ConsoleStatements::RETRY_DELAYS`].
#[derive(sqlx::FromRow)]
struct DelayBucketRow {
    operation_name: String,
    above_ms: i64,
    retries: i64,
    longest_ms: i64,
}

#[async_trait::async_trait]
impl<D: Dialect + ConsoleStatements> ConsoleStore for SqlStore<D> {
    async fn outcome_series(
        &self,
        selection: &DashboardSelection<'_>,
        step_seconds: i64,
    ) -> Result<Vec<OutcomeCount>, StoreError> {
        Ok(sqlx::query_as(D::OUTCOME_SERIES)
            .bind(step_seconds)
            .bind(selection.from_epoch)
            .bind(selection.to_epoch)
            .bind(selection.tenant.unwrap_or_default())
            .bind(selection.operation.unwrap_or_default())
            .fetch_all(&self.pool)
            .await?)
    }

    async fn record_gauges(&self, max_attempts: i32) -> Result<RecordGauges, StoreError> {
        let gauges: RecordGauges = sqlx::query_as(D::sql(RECORD_GAUGES))
            .bind(max_attempts)
            .fetch_one(&self.pool)
            .await?;
        Ok(RecordGauges {
            oldest_stale_in_progress_secs: gauges.oldest_stale_in_progress_secs.max(0.0),
            oldest_unknown_secs: gauges.oldest_unknown_secs.max(0.0),
            ..gauges
        })
    }

    async fn tenants(&self) -> Result<Vec<TenantListing>, StoreError> {
        Ok(sqlx::query_as("select id, name from tenants order by name")
            .fetch_all(&self.pool)
            .await?)
    }

    async fn list_records(&self, query: &RecordQuery, limit: i64) -> Result<Vec<RecordSummary>, StoreError> {
        let (after_at, after_tenant, after_operation, after_key) = match &query.after {
            Some(cursor) => (
                cursor_time(cursor.created_at),
                cursor.tenant_id.as_str(),
                cursor.operation.as_str(),
                cursor.key.as_str(),
            ),
            None => ("9999-12-31T23:59:59.999Z".to_owned(), "", "", ""),
        };
        let rows = sqlx::query(D::sql(LIST_RECORDS))
            .bind(query.status.map_or("", RecordStatus::as_str))
            .bind(query.step.map_or("", ProgressStep::as_str))
            .bind(query.tenant.as_deref().unwrap_or_default())
            .bind(query.operation.as_deref().unwrap_or_default())
            .bind(query.key_prefix.as_deref().unwrap_or_default())
            .bind(
                query
                    .from
                    .map_or_else(|| "0001-01-01T00:00:00.000Z".to_owned(), rfc3339_millis),
            )
            .bind(
                query
                    .to
                    .map_or_else(|| "9999-12-31T23:59:59.999Z".to_owned(), rfc3339_millis),
            )
            .bind(after_at)
            .bind(after_tenant)
            .bind(after_operation)
            .bind(after_key)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(RecordSummary::read::<D>).collect()
    }

    async fn find_records(&self, needle: &str, limit: i64) -> Result<Vec<RecordSummary>, StoreError> {
        // One index probe per way of naming a record: its key, its payment (or refund), its
        // provider charge, the merchant reference of its payment or refund, or a payment the
        // key made earlier (released by an operator, so no longer the record's).
        let rows = sqlx::query(
            "with named (tenant_id, operation_name, idempotency_key) as ( \
             select tenant_id, operation_name, idempotency_key from idempotency_records where idempotency_key = $1 \
             union select tenant_id, operation_name, idempotency_key from idempotency_records where resource_id = $1 \
             union select tenant_id, operation_name, idempotency_key from idempotency_records where provider_reference = $1 \
             union select tenant_id, 'create_payment', idempotency_key from payments \
             where merchant_reference = $1 and idempotency_key is not null \
             union select tenant_id, 'create_refund', idempotency_key from refunds \
             where reference = $1 and idempotency_key is not null \
             union select tenant_id, 'create_payment', idempotency_key from payments \
             where id = $1 and idempotency_key is not null) \
             select r.tenant_id, t.name as tenant_name, r.operation_name, r.idempotency_key, r.status, \
             r.progress_step, r.resource_id, r.provider_reference, r.created_at, r.updated_at, \
             r.recovery_attempts, coalesce(p.amount_minor, f.amount_minor) as amount_minor, \
             coalesce(p.currency, f.currency) as currency, \
             coalesce(p.merchant_reference, f.reference) as merchant_reference \
             from named n join idempotency_records r on r.tenant_id = n.tenant_id \
             and r.operation_name = n.operation_name and r.idempotency_key = n.idempotency_key \
             join tenants t on t.id = r.tenant_id \
             left join payments p on r.operation_name = 'create_payment' and p.id = r.resource_id \
             left join refunds f on r.operation_name = 'create_refund' and f.id = r.resource_id \
             order by r.created_at desc limit $2",
        )
        .bind(needle)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(RecordSummary::read::<D>).collect()
    }

    async fn recovery_queue(
        &self,
        filter: &QueueFilter,
        after: Option<&QueueCursor>,
        max_attempts: i32,
        limit: i64,
    ) -> Result<QueuePage, StoreError> {
        // Ages are bounds on the creation time, taken from this clock: a filter, not a lease.
        let now = Utc::now();
        let amount = filter.amount;
        let rows = sqlx::query(D::RECOVERY_QUEUE)
            .bind(max_attempts)
            .bind(filter.tenant_name.as_deref().unwrap_or_default())
            .bind(filter.operation.map_or("", Operation::as_str))
            .bind(filter.attention.map_or("", Attention::as_str))
            .bind(filter.min_age.map_or_else(
                || "9999-12-31T23:59:59.999Z".to_owned(),
                |age| rfc3339_millis(now - age),
            ))
            .bind(filter.max_age.map_or_else(
                || "0001-01-01T00:00:00.000Z".to_owned(),
                |age| rfc3339_millis(now - age),
            ))
            .bind(amount.map_or("", |range| range.currency.code()))
            .bind(amount.and_then(|range| range.min_minor).unwrap_or(i64::MIN))
            .bind(amount.and_then(|range| range.max_minor).unwrap_or(i64::MAX))
            .bind(filter.cause.map_or("", UnknownCause::as_str))
            .bind(filter.evidence.map_or("", EvidenceFilter::as_str))
            .bind(filter.search.as_deref().unwrap_or_default())
            .bind(filter.order.as_str())
            .bind(i32::from(after.is_some()))
            .bind(after.map_or(0, |cursor| cursor.sort_value))
            .bind(after.map_or("", |cursor| cursor.tenant_id.as_str()))
            .bind(after.map_or("", |cursor| cursor.operation.as_str()))
            .bind(after.map_or("", |cursor| cursor.key.as_str()))
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        let total = match rows.first() {
            Some(row) => row.try_get("total")?,
            None => 0,
        };
        let rows = rows
            .iter()
            // An empty page is one row of the total alone.
            .filter(|row| matches!(row.try_get::<Option<String>, _>("tenant_id"), Ok(Some(_))))
            .map(QueueRow::read::<D>)
            .collect::<Result<_, _>>()?;
        Ok(QueuePage { total, rows })
    }

    async fn note_evidence(
        &self,
        record: &RecordName,
        evidence: &ProviderEvidence,
    ) -> Result<(), StoreError> {
        // `excluded.at` is the proposed row's default: the database's time of this look.
        self.write_one(
            sqlx::query(
                "insert into record_evidence (tenant_id, operation_name, idempotency_key, kind, detail) \
                 select tenant_id, operation_name, idempotency_key, $4, $5 from idempotency_records \
                 where tenant_id = $1 and operation_name = $2 and idempotency_key = $3 \
                 on conflict (tenant_id, operation_name, idempotency_key) do update \
                 set kind = excluded.kind, detail = excluded.detail, at = excluded.at",
            )
            .bind(record.tenant_id.as_str())
            .bind(record.operation.as_str())
            .bind(record.key.as_str())
            .bind(evidence.kind().as_str())
            .bind(evidence.detail()),
        )
        .await?;
        Ok(())
    }

    async fn late_charges(&self) -> Result<i64, StoreError> {
        let count: i64 = sqlx::query_scalar(
            "select count(*) from payments where late_charge_id is not null and late_charge_resolved_at is null",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(count)
    }

    async fn retry_delays(
        &self,
        selection: &DashboardSelection<'_>,
        windows: [Duration; COMPARED_WINDOWS],
    ) -> Result<Vec<RetryDelays>, StoreError> {
        let rows: Vec<DelayBucketRow> = sqlx::query_as(D::RETRY_DELAYS)
            .bind(selection.from_epoch)
            .bind(selection.to_epoch)
            .bind(selection.tenant.unwrap_or_default())
            .bind(selection.operation.unwrap_or_default())
            .fetch_all(&self.pool)
            .await?;
        let windows_ms = windows.map(retry_delay::millis);
        let mut delays = Vec::new();
        for of_operation in rows.chunk_by(|one, other| one.operation_name == other.operation_name) {
            let buckets: Vec<DelayBucket> = of_operation
                .iter()
                .map(|row| DelayBucket {
                    above_ms: row.above_ms,
                    retries: row.retries,
                    longest_ms: row.longest_ms,
                })
                .collect();
            if let (Some(first), Some(summary)) =
                (of_operation.first(), DelaySummary::of(&buckets, windows_ms))
            {
                delays.push(RetryDelays {
                    operation: first.operation_name.clone(),
                    summary,
                });
            }
        }
        Ok(delays)
    }
}
