//! What the instances count and journal, written in batches (never a write per request on the
//! request path), and the live state `/metrics` reports per tenant and operation.

use super::dialect::{Dialect, SqlStore, rfc3339_millis};
use super::error::StoreError;
use chrono::{DateTime, TimeDelta, Utc};
use domain::outcome::Outcome;
use domain::scope::{Operation, Scope};
use std::collections::BTreeMap;
use strum::VariantArray;

/// Rows per multi-row insert: far below either dialect's limit on bound parameters.
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

    /// Appends journal entries, all or nothing.
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
pub trait MetricsStatements {
    /// Per tenant and operation with IN_PROGRESS records: the age in seconds (float) of the
    /// oldest, and how many have an expired lease.
    const IN_PROGRESS_GAUGES: &'static str;
    /// Per tenant and operation with UNKNOWN_REQUIRES_RECOVERY records: how many, the age in
    /// seconds (float) of the oldest, and how many made `$1` recovery attempts or more.
    const UNKNOWN_GAUGES: &'static str;
    /// What follows a bound RFC 3339 text to make it a timestamp in this dialect.
    const AS_TIMESTAMP: &'static str;
    /// Whether many-row statements number their parameters (`$1`, `$2`, …: PostgreSQL) or
    /// take them in order (`?`: SQLite, where binding a numbered parameter looks its name up
    /// in a list as long as the statement's parameters, so that binding a 5,000-parameter
    /// insert took longer than running it, while the writer waited).
    const NUMBERED_PARAMETERS: bool;
    /// `$1` a JSON array of API key ids: last used now.
    const NOTE_API_KEYS_USED: &'static str;
}

/// `($1, $2, …), (…), …` (or `(?, ?, …), …`): `rows` rows of `columns` parameters;
/// `suffix(column)` follows each parameter (a cast, or nothing).
fn multi_row_values<D: MetricsStatements>(
    rows: usize,
    columns: usize,
    suffix: impl Fn(usize) -> &'static str,
) -> String {
    (0..rows)
        .map(|row| {
            let parameters: Vec<String> = (0..columns)
                .map(|column| {
                    let suffix = suffix(column);
                    if D::NUMBERED_PARAMETERS {
                        format!("${}{suffix}", row * columns + column + 1)
                    } else {
                        format!("?{suffix}")
                    }
                })
                .collect();
            format!("({})", parameters.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[async_trait::async_trait]
impl<D: Dialect + MetricsStatements> MetricsStore for SqlStore<D> {
    async fn add_outcome_counts(&self, counts: &[OutcomeCount]) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        for chunk in counts.chunks(ROWS_PER_STATEMENT) {
            let values = multi_row_values::<D>(chunk.len(), 5, |column| match column {
                0 => D::AS_TIMESTAMP,
                _ => "",
            });
            let sql = format!(
                "insert into outcome_buckets (bucket_start, tenant_id, operation_name, outcome, count) \
                 values {values} on conflict (bucket_start, tenant_id, operation_name, outcome) \
                 do update set count = outcome_buckets.count + excluded.count"
            );
            let mut statement = sqlx::query(&sql);
            for count in chunk {
                statement = statement
                    .bind(rfc3339_millis(count.bucket_start))
                    .bind(count.tenant_id.as_str())
                    .bind(count.operation.as_str())
                    .bind(count.outcome.as_str())
                    .bind(count.count);
            }
            statement.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn add_journal_entries(&self, entries: &[JournalEntry]) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        for chunk in entries.chunks(ROWS_PER_STATEMENT) {
            let values = multi_row_values::<D>(chunk.len(), 11, |column| match column {
                4 => D::AS_TIMESTAMP,
                _ => "",
            });
            let sql = format!(
                "insert into idempotency_requests (id, tenant_id, operation_name, idempotency_key, at, \
                 fingerprint, canonical_command, status_code, error_code, replayed, retry_delay_ms) values {values}"
            );
            let mut statement = sqlx::query(&sql);
            for entry in chunk {
                statement = statement
                    .bind(format!("req_{}", domain::random::random_hex(12)))
                    .bind(entry.scope.tenant_id.as_str())
                    .bind(entry.scope.operation.as_str())
                    .bind(entry.scope.key.as_str())
                    .bind(rfc3339_millis(entry.at))
                    .bind(entry.fingerprint.as_str())
                    .bind(entry.canonical_command.as_deref())
                    .bind(i32::from(entry.status_code))
                    .bind(entry.error_code.as_deref())
                    .bind(entry.replayed)
                    .bind(entry.retry_delay.map(|delay| delay.num_milliseconds()));
            }
            statement.execute(&mut *tx).await?;
        }
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
        let tenants: Vec<(String,)> = sqlx::query_as("select id from tenants")
            .fetch_all(&self.pool)
            .await?;
        let unknown: Vec<(String, String, i64, f64, i64)> = sqlx::query_as(D::UNKNOWN_GAUGES)
            .bind(recovery_max_attempts)
            .fetch_all(&self.pool)
            .await?;
        let in_progress: Vec<(String, String, f64, i64)> = sqlx::query_as(D::IN_PROGRESS_GAUGES)
            .fetch_all(&self.pool)
            .await?;
        let mut gauges: BTreeMap<(String, Operation), LiveGauges> = BTreeMap::new();
        for (tenant_id,) in tenants {
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
        for (tenant_id, operation, count, age, exhausted) in unknown {
            if let Some(gauge) = gauges.get_mut(&key(tenant_id, &operation)?) {
                gauge.unknown_count = count;
                gauge.unknown_oldest_age_seconds = age.max(0.0);
                gauge.recovery_exhausted_count = exhausted;
            }
        }
        for (tenant_id, operation, age, stale) in in_progress {
            if let Some(gauge) = gauges.get_mut(&key(tenant_id, &operation)?) {
                gauge.in_progress_age_max_seconds = age.max(0.0);
                gauge.stale_in_progress_count = stale;
            }
        }
        Ok(gauges.into_values().collect())
    }
}
