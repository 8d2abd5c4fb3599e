//! What the instances count and journal, written in batches (never a write per request on the
//! request path), and the live state `/metrics` reports per tenant and operation.

use super::dialect::{Dialect, SqlStore, rfc3339_millis};
use super::error::StoreError;
use chrono::{DateTime, Utc};
use domain::outcome::Outcome;
use domain::scope::{Operation, Scope};
use std::collections::BTreeMap;
use strum::VariantArray;

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
}

/// Live gauges of one tenant and operation.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveGauges {
    pub tenant_id: String,
    pub operation: Operation,
    pub unknown_count: i64,
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

    /// Unknown outcomes, stale in-progress requests and the oldest in-progress request, for
    /// every tenant and operation (zero where there are none, so that every series exists).
    async fn live_gauges(&self) -> Result<Vec<LiveGauges>, StoreError>;
}

/// Metrics statements that differ by dialect.
pub trait MetricsStatements {
    /// Per tenant and operation with IN_PROGRESS records: the age in seconds (float) of the
    /// oldest, and how many have an expired lease.
    const IN_PROGRESS_GAUGES: &'static str;
    /// `$1` bucket start (RFC 3339 text), `$2` tenant, `$3` operation, `$4` outcome, `$5`
    /// count to add.
    const ADD_OUTCOME_COUNT: &'static str;
    /// `$1`..`$10` a journal entry (id, scope, at as RFC 3339 text, fingerprint, command,
    /// status, error code, replayed).
    const INSERT_JOURNAL: &'static str;
}

#[async_trait::async_trait]
impl<D: Dialect + MetricsStatements> MetricsStore for SqlStore<D> {
    async fn add_outcome_counts(&self, counts: &[OutcomeCount]) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        for count in counts {
            sqlx::query(D::ADD_OUTCOME_COUNT)
                .bind(rfc3339_millis(count.bucket_start))
                .bind(count.tenant_id.as_str())
                .bind(count.operation.as_str())
                .bind(count.outcome.as_str())
                .bind(count.count)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn add_journal_entries(&self, entries: &[JournalEntry]) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        for entry in entries {
            sqlx::query(D::INSERT_JOURNAL)
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
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn live_gauges(&self) -> Result<Vec<LiveGauges>, StoreError> {
        let tenants: Vec<(String,)> = sqlx::query_as("select id from tenants")
            .fetch_all(&self.pool)
            .await?;
        let unknown: Vec<(String, String, i64)> = sqlx::query_as(
            "select tenant_id, operation_name, count(*) from idempotency_records \
             where status = 'UNKNOWN_REQUIRES_RECOVERY' group by tenant_id, operation_name",
        )
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
                        stale_in_progress_count: 0,
                        in_progress_age_max_seconds: 0.0,
                    },
                );
            }
        }
        let key = |tenant_id: String, operation: &str| {
            Ok::<_, StoreError>((tenant_id, StoreError::parse_stored("operation", operation)?))
        };
        for (tenant_id, operation, count) in unknown {
            if let Some(gauge) = gauges.get_mut(&key(tenant_id, &operation)?) {
                gauge.unknown_count = count;
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
