//! Counting what the idempotency layer answers. Each instance counts in memory and flushes
//! per-minute buckets to the database every few seconds (and on shutdown), so that counts
//! add up across instances and survive restarts without a write per request.

pub mod journal;
pub mod prometheus;

use crate::store::MetricsStore;
use crate::store::metrics::OutcomeCount;
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use domain::outcome::Outcome;
use domain::scope::Operation;
use domain::tenant::TenantId;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use strum::VariantArray;

type BucketKey = (DateTime<Utc>, String, Operation, Outcome);

#[derive(Default)]
pub struct OutcomeCounter {
    pending: Mutex<HashMap<BucketKey, i64>>,
}

impl OutcomeCounter {
    fn pending(&self) -> MutexGuard<'_, HashMap<BucketKey, i64>> {
        // Counts are plain integers: a panic elsewhere cannot leave them half-written.
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn record(&self, tenant_id: &TenantId, operation: Operation, outcome: Outcome) {
        outcome_counter(tenant_id.as_str(), operation, outcome).increment(1);
        let minute = Utc::now()
            .duration_trunc(TimeDelta::minutes(1))
            .unwrap_or_else(|_| Utc::now());
        *self
            .pending()
            .entry((minute, tenant_id.as_str().to_owned(), operation, outcome))
            .or_default() += 1;
    }
}

/// `idempotency_<outcome>_total{tenant, operation}`.
fn outcome_counter(tenant_id: &str, operation: Operation, outcome: Outcome) -> metrics::Counter {
    metrics::counter!(
        format!("idempotency_{}_total", outcome.as_str()),
        "tenant" => tenant_id.to_owned(),
        "operation" => operation.as_str(),
    )
}

/// Makes every per-tenant series of `tenant_id` and `operation` exist (at 0 until counted):
/// the outcome counters, the retry-delay histogram and the longest retry delay, so that
/// dashboards and `absent()` alerts see a series from the first scrape, and a rate or an
/// increase counts the first event.
pub fn register_tenant_series(tenant_id: &str, operation: Operation) {
    for outcome in Outcome::VARIANTS {
        outcome_counter(tenant_id, operation, *outcome).increment(0);
    }
    let labels = [
        ("tenant", tenant_id.to_owned()),
        ("operation", operation.as_str().to_owned()),
    ];
    // Registering the histogram is what makes it rendered, with empty buckets.
    drop(metrics::histogram!(journal::RETRY_DELAY_SECONDS, &labels));
    metrics::gauge!(journal::LONGEST_RETRY_DELAY_SECONDS, &labels).increment(0.0);
}

/// `idempotency_window_seconds{operation}`: the window this instance answers `operation`
/// with, which dashboards draw against the retry delays.
pub fn register_window(operation: Operation, window: std::time::Duration) {
    metrics::gauge!("idempotency_window_seconds", "operation" => operation.as_str())
        .set(window.as_secs_f64());
}

/// Something kept in memory and written to the store in batches.
#[async_trait::async_trait]
pub trait Buffered: Send + Sync + 'static {
    /// Writes what was buffered since the last flush; on failure keeps it for the next one.
    async fn flush(&self, store: &dyn MetricsStore);
}

#[async_trait::async_trait]
impl Buffered for OutcomeCounter {
    /// A database hiccup delays counts but loses none.
    async fn flush(&self, store: &dyn MetricsStore) {
        let mut drained: Vec<(BucketKey, i64)> = self.pending().drain().collect();
        // Every instance upserts its buckets in the same order, so two flushes at once wait
        // for each other instead of deadlocking.
        drained.sort_by(|(a, _), (b, _)| a.cmp(b));
        if drained.is_empty() {
            return;
        }
        let counts: Vec<OutcomeCount> = drained
            .iter()
            .map(
                |((bucket_start, tenant_id, operation, outcome), count)| OutcomeCount {
                    bucket_start: *bucket_start,
                    tenant_id: tenant_id.clone(),
                    operation: *operation,
                    outcome: *outcome,
                    count: *count,
                },
            )
            .collect();
        if let Err(error) = store.add_outcome_counts(&counts).await {
            tracing::warn!(%error, buckets = counts.len(), "outcome counts not flushed; kept for the next try");
            let mut pending = self.pending();
            for (key, count) in drained {
                *pending.entry(key).or_default() += count;
            }
        }
    }
}
