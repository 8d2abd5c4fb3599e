//! What the instances count and journal, written in batches (never a write per request on the
//! request path), and the live state `/metrics` reports per tenant and operation.

use super::dialect::{Dialect, SqlStore, WriteTx, rfc3339_millis};
use super::error::StoreError;
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use domain::outcome::Outcome;
use domain::retry_delay;
use domain::scope::{Operation, Scope};
use std::collections::BTreeMap;
use std::time::Duration;
use strum::VariantArray;

/// Rows per insert statement: a few hundred kilobytes of JSON.
const ROWS_PER_STATEMENT: usize = 500;

/// One per-minute bucket's increment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeCount {
    /// The minute the outcomes happened in (the counting instance's clock).
    pub bucket_start: DateTime<Utc>,
    pub tenant_id: String,
    pub operation: Operation,
    pub outcome: Outcome,
    pub count: i64,
}

/// A request that arrived with a key, and what it was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    pub scope: Scope,
    pub at: DateTime<Utc>,
    pub fingerprint: String,
    /// Only when it differs from the record's command (a conflicting retry).
    pub canonical_command: Option<String>,
    pub status_code: u16,
    pub error_code: Option<String>,
    pub replayed: bool,
    /// How long after its key's first request this retry arrived; `None` for a first request
    /// and a conflicting one.
    pub retry_delay: Option<TimeDelta>,
    /// The operation's window when the request came: a bound of its delay's bucket.
    pub window: Duration,
}

/// Live gauges of one tenant and operation.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveGauges {
    pub tenant_id: String,
    pub operation: Operation,
    pub unknown_count: i64,
    /// How long ago the oldest request with an unknown outcome was made: money uncertain.
    pub unknown_oldest_age_seconds: f64,
    /// Unknown outcomes that used up their automatic recovery attempts: only an operator
    /// settles them now.
    pub recovery_exhausted_count: i64,
    /// Requests in progress whose lease ran out: their owner is gone or stuck.
    pub stale_in_progress_count: i64,
    pub in_progress_age_max_seconds: f64,
}

#[async_trait::async_trait]
pub trait MetricsStore: Send + Sync {
    /// Adds counted outcomes to their per-minute buckets, all or nothing.
    async fn add_outcome_counts(&self, counts: &[OutcomeCount]) -> Result<(), StoreError>;

    /// Journals requests, all or nothing: a replay is added to its key's count for its minute,
    /// any other request gets a row of its own, and a retry's delay is added to its bucket.
    async fn add_journal_entries(&self, entries: &[JournalEntry]) -> Result<(), StoreError>;

    /// Unknown outcomes (how many, the oldest, those that made `recovery_max_attempts`
    /// automatic recovery attempts or more), stale in-progress requests and the oldest
    /// in-progress request, for every tenant and operation (zero where there are none, so that
    /// every series exists).
    async fn live_gauges(&self, recovery_max_attempts: i32) -> Result<Vec<LiveGauges>, StoreError>;

    /// Marks the API keys with these ids used now (one statement).
    async fn note_api_keys_used(&self, ids: &[String]) -> Result<(), StoreError>;
}

/// Metrics statements that differ by dialect.
pub trait MetricsStatements: Dialect {
    /// `$1` a JSON array of outcome counts (`bucket_start` RFC 3339, `tenant_id`,
    /// `operation_name`, `outcome`, `count`): each added to its bucket.
    const ADD_OUTCOME_COUNTS: &'static str;
    /// `$1` a JSON array of API key ids: last used now.
    const NOTE_API_KEYS_USED: &'static str;
    /// `$1` a JSON array of [`ReplayRow`]s: each added to its key's minute (counts summed,
    /// first and last widened, longest delay kept, the newest status).
    const ADD_REPLAYS: &'static str;
    /// `$1` a JSON array of [`RetryDelayRow`]s: each added to its bucket.
    const ADD_RETRY_DELAYS: &'static str;

    /// Appends `rows` to the request journal in `tx`. The journal takes a row for every
    /// request that carries a key, so this is the largest statement a replay causes: how each
    /// dialect writes a batch most cheaply differs (PostgreSQL streams it with `COPY`).
    fn append_journal(
        tx: &mut WriteTx<Self>,
        rows: &[JournalRow<'_>],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Per tenant and operation with UNKNOWN_REQUIRES_RECOVERY records: how many, the age in
/// seconds (float) of the oldest, and how many made `$1` recovery attempts or more.
const UNKNOWN_GAUGES: &str = "select tenant_id, operation_name, count(*) as unknown, {seconds_since(min(created_at))} as \
     oldest_seconds, count(case when recovery_attempts >= $1 then 1 end) as exhausted from \
     idempotency_records where status = 'UNKNOWN_REQUIRES_RECOVERY' group by tenant_id, \
     operation_name";

/// Per tenant and operation with IN_PROGRESS records: the age in seconds (float) of the
/// oldest, and how many have an expired lease.
const IN_PROGRESS_GAUGES: &str = "select tenant_id, operation_name, {seconds_since(min(created_at))} as oldest_seconds, \
     count(case when locked_until <= {now} then 1 end) as stale from idempotency_records where \
     status = 'IN_PROGRESS' group by tenant_id, operation_name";

/// An outcome count as [`MetricsStatements::ADD_OUTCOME_COUNTS`] reads it.
#[derive(serde::Serialize)]
struct OutcomeCountRow<'a> {
    bucket_start: String,
    tenant_id: &'a str,
    operation_name: &'static str,
    outcome: &'static str,
    count: i64,
}

/// A journal entry as a row of `idempotency_requests`, its fields in the table's column order
/// and with its column names.
#[derive(serde::Serialize)]
pub struct JournalRow<'a> {
    pub id: String,
    pub tenant_id: &'a str,
    pub operation_name: &'static str,
    pub idempotency_key: &'a str,
    pub at: String,
    pub fingerprint: &'a str,
    pub canonical_command: Option<&'a str>,
    pub status_code: u16,
    pub error_code: Option<&'a str>,
    pub retry_delay_ms: Option<i64>,
}

/// The replays of one key in one minute, as [`MetricsStatements::ADD_REPLAYS`] reads them.
#[derive(serde::Serialize)]
struct ReplayRow<'a> {
    tenant_id: &'a str,
    operation_name: &'static str,
    idempotency_key: &'a str,
    minute: String,
    replays: i64,
    first_at: String,
    last_at: String,
    longest_delay_ms: i64,
    status_code: u16,
}

/// The retries of one tenant and operation in one minute and delay bucket, as
/// [`MetricsStatements::ADD_RETRY_DELAYS`] reads them.
#[derive(serde::Serialize)]
struct RetryDelayRow<'a> {
    bucket_start: String,
    tenant_id: &'a str,
    operation_name: &'static str,
    above_ms: i64,
    retries: i64,
    longest_ms: i64,
}

/// The minute `at` falls in.
fn minute_of(at: DateTime<Utc>) -> DateTime<Utc> {
    at.duration_trunc(TimeDelta::minutes(1)).unwrap_or(at)
}

/// `entries`' replays, one row per key and minute.
fn replay_rows(entries: &[JournalEntry]) -> Vec<ReplayRow<'_>> {
    // In key order, so that instances flushing the same keys at once lock their rows in the
    // same order.
    let mut replays: BTreeMap<(&str, Operation, &str, DateTime<Utc>), ReplayRow<'_>> = BTreeMap::new();
    for entry in entries.iter().filter(|entry| entry.replayed) {
        let minute = minute_of(entry.at);
        let delay_ms = entry.retry_delay.map_or(0, |delay| delay.num_milliseconds());
        let at = rfc3339_millis(entry.at);
        let scope = &entry.scope;
        let name = (
            scope.tenant_id.as_str(),
            scope.operation,
            scope.key.as_str(),
            minute,
        );
        let row = replays.entry(name).or_insert_with(|| ReplayRow {
            tenant_id: entry.scope.tenant_id.as_str(),
            operation_name: entry.scope.operation.as_str(),
            idempotency_key: entry.scope.key.as_str(),
            minute: rfc3339_millis(minute),
            replays: 0,
            first_at: at.clone(),
            last_at: at.clone(),
            longest_delay_ms: delay_ms,
            status_code: entry.status_code,
        });
        row.replays += 1;
        // RFC 3339 with milliseconds in UTC: ordered as text as in time.
        if at < row.first_at {
            row.first_at = at;
        } else if at > row.last_at {
            row.last_at = at;
            row.status_code = entry.status_code;
        }
        row.longest_delay_ms = row.longest_delay_ms.max(delay_ms);
    }
    replays.into_values().collect()
}

/// `entries`' retry delays, one row per tenant, operation, minute and bucket.
fn retry_delay_rows(entries: &[JournalEntry]) -> Vec<RetryDelayRow<'_>> {
    let mut buckets: BTreeMap<(DateTime<Utc>, &str, Operation, i64), RetryDelayRow<'_>> = BTreeMap::new();
    for entry in entries {
        let Some(delay) = entry.retry_delay else {
            continue;
        };
        let delay_ms = delay.num_milliseconds();
        let above_ms = retry_delay::bucket_above_ms(delay_ms, retry_delay::millis(entry.window));
        let minute = minute_of(entry.at);
        let tenant_id = entry.scope.tenant_id.as_str();
        let row = buckets
            .entry((minute, tenant_id, entry.scope.operation, above_ms))
            .or_insert_with(|| RetryDelayRow {
                bucket_start: rfc3339_millis(minute),
                tenant_id,
                operation_name: entry.scope.operation.as_str(),
                above_ms,
                retries: 0,
                longest_ms: delay_ms,
            });
        row.retries += 1;
        row.longest_ms = row.longest_ms.max(delay_ms);
    }
    buckets.into_values().collect()
}

/// A journal entry's id: its time first, so that new rows land at the end of the primary
/// key's index instead of on a random page of it; then its flush's random part (one draw from
/// the OS per flush, not per request) and its position in that flush.
fn journal_entry_id(at: DateTime<Utc>, flush: &str, position: usize) -> String {
    format!("req_{:012x}{flush}{position:06x}", at.timestamp_millis())
}

/// Runs `statement` in `tx` with each chunk of `rows` as its JSON array `$1`: a statement of
/// one fixed text, prepared once per connection (a multi-row `values` list has a text per row
/// count, each parsed and planned anew).
pub(super) async fn insert_as_json<D: Dialect, T: serde::Serialize + Sync>(
    tx: &mut WriteTx<D>,
    statement: &'static str,
    rows: &[T],
) -> Result<(), StoreError> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let json = serde_json::to_string(chunk).map_err(|error| StoreError::Corrupt(error.to_string()))?;
        sqlx::query(statement).bind(json).execute(&mut **tx).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl<D: Dialect + MetricsStatements> MetricsStore for SqlStore<D> {
    async fn add_outcome_counts(&self, counts: &[OutcomeCount]) -> Result<(), StoreError> {
        let rows: Vec<OutcomeCountRow<'_>> = counts
            .iter()
            .map(|count| OutcomeCountRow {
                bucket_start: rfc3339_millis(count.bucket_start),
                tenant_id: &count.tenant_id,
                operation_name: count.operation.as_str(),
                outcome: count.outcome.as_str(),
                count: count.count,
            })
            .collect();
        let mut tx = self.begin().await?;
        insert_as_json(&mut tx, D::ADD_OUTCOME_COUNTS, &rows).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn add_journal_entries(&self, entries: &[JournalEntry]) -> Result<(), StoreError> {
        let flush = domain::random::random_hex(6);
        let rows: Vec<JournalRow<'_>> = entries
            .iter()
            .filter(|entry| !entry.replayed)
            .enumerate()
            .map(|(position, entry)| JournalRow {
                id: journal_entry_id(entry.at, &flush, position),
                tenant_id: entry.scope.tenant_id.as_str(),
                operation_name: entry.scope.operation.as_str(),
                idempotency_key: entry.scope.key.as_str(),
                at: rfc3339_millis(entry.at),
                fingerprint: &entry.fingerprint,
                canonical_command: entry.canonical_command.as_deref(),
                status_code: entry.status_code,
                error_code: entry.error_code.as_deref(),
                retry_delay_ms: entry.retry_delay.map(|delay| delay.num_milliseconds()),
            })
            .collect();
        let mut tx = self.begin().await?;
        D::append_journal(&mut tx, &rows).await?;
        insert_as_json(&mut tx, D::ADD_REPLAYS, &replay_rows(entries)).await?;
        insert_as_json(&mut tx, D::ADD_RETRY_DELAYS, &retry_delay_rows(entries)).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn note_api_keys_used(&self, ids: &[String]) -> Result<(), StoreError> {
        let ids = serde_json::to_string(ids).map_err(|error| StoreError::Corrupt(error.to_string()))?;
        self.write_one(sqlx::query(D::NOTE_API_KEYS_USED).bind(ids))
            .await?;
        Ok(())
    }

    async fn live_gauges(&self, recovery_max_attempts: i32) -> Result<Vec<LiveGauges>, StoreError> {
        let tenants: Vec<String> = sqlx::query_scalar("select id from tenants")
            .fetch_all(&self.pool)
            .await?;
        let unknown: Vec<UnknownGaugeRow> = sqlx::query_as(D::sql(UNKNOWN_GAUGES))
            .bind(recovery_max_attempts)
            .fetch_all(&self.pool)
            .await?;
        let in_progress: Vec<InProgressGaugeRow> = sqlx::query_as(D::sql(IN_PROGRESS_GAUGES))
            .fetch_all(&self.pool)
            .await?;
        let mut gauges: BTreeMap<(String, Operation), LiveGauges> = BTreeMap::new();
        for tenant_id in tenants {
            for operation in Operation::VARIANTS {
                gauges.insert(
                    (tenant_id.clone(), *operation),
                    LiveGauges {
                        tenant_id: tenant_id.clone(),
                        operation: *operation,
                        unknown_count: 0,
                        unknown_oldest_age_seconds: 0.0,
                        recovery_exhausted_count: 0,
                        stale_in_progress_count: 0,
                        in_progress_age_max_seconds: 0.0,
                    },
                );
            }
        }
        let key = |tenant_id: String, operation: &str| {
            Ok::<_, StoreError>((tenant_id, StoreError::parse_stored("operation", operation)?))
        };
        for row in unknown {
            if let Some(gauge) = gauges.get_mut(&key(row.tenant_id, &row.operation_name)?) {
                gauge.unknown_count = row.unknown;
                gauge.unknown_oldest_age_seconds = row.oldest_seconds.max(0.0);
                gauge.recovery_exhausted_count = row.exhausted;
            }
        }
        for row in in_progress {
            if let Some(gauge) = gauges.get_mut(&key(row.tenant_id, &row.operation_name)?) {
                gauge.in_progress_age_max_seconds = row.oldest_seconds.max(0.0);
                gauge.stale_in_progress_count = row.stale;
            }
        }
        Ok(gauges.into_values().collect())
    }
}

/// A row of [`MetricsStatements::UNKNOWN_GAUGES`]: one tenant's and operation's unknown outcomes.
#[derive(sqlx::FromRow)]
struct UnknownGaugeRow {
    tenant_id: String,
    operation_name: String,
    unknown: i64,
    oldest_seconds: f64,
    exhausted: i64,
}

/// A row of [`MetricsStatements::IN_PROGRESS_GAUGES`]: one tenant's and operation's records in
/// progress.
#[derive(sqlx::FromRow)]
struct InProgressGaugeRow {
    tenant_id: String,
    operation_name: String,
    oldest_seconds: f64,
    stale: i64,
}
