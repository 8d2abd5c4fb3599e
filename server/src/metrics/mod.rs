//! Counting what the idempotency layer answers. Each instance counts in memory and flushes
//! per-minute buckets to the database every few seconds (and on shutdown), so that counts
//! add up across instances and survive restarts without a write per request.

pub mod journal;
pub mod prometheus;

use crate::store::Store;
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
    tenants: Mutex<HashMap<String, TenantCounts>>,
}

/// One tenant's counts not yet flushed, and its counters' handles (registered on first use and
/// kept, so that a request looks no series up by freshly allocated labels).
#[derive(Default)]
struct TenantCounts {
    pending: HashMap<(DateTime<Utc>, Operation, Outcome), i64>,
    counters: HashMap<(Operation, Outcome), metrics::Counter>,
}

impl OutcomeCounter {
    fn tenants(&self) -> MutexGuard<'_, HashMap<String, TenantCounts>> {
        // Counts are plain integers: a panic elsewhere cannot leave them half-written.
        self.tenants
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn record(&self, tenant_id: &TenantId, operation: Operation, outcome: Outcome) {
        let now = Utc::now();
        let minute = now.duration_trunc(TimeDelta::minutes(1)).unwrap_or(now);
        let mut tenants = self.tenants();
        let tenant = match tenants.get_mut(tenant_id.as_str()) {
            Some(tenant) => tenant,
            None => tenants.entry(tenant_id.as_str().to_owned()).or_default(),
        };
        tenant
            .counters
            .entry((operation, outcome))
            .or_insert_with(|| outcome_counter(tenant_id.as_str(), operation, outcome))
            .increment(1);
        *tenant.pending.entry((minute, operation, outcome)).or_default() += 1;
    }

    /// Every count not yet flushed, taken.
    fn drain(&self) -> Vec<(BucketKey, i64)> {
        let mut tenants = self.tenants();
        let mut drained = Vec::new();
        for (tenant_id, tenant) in tenants.iter_mut() {
            drained.extend(
                tenant
                    .pending
                    .drain()
                    .map(|((minute, operation, outcome), count)| {
                        ((minute, tenant_id.clone(), operation, outcome), count)
                    }),
            );
        }
        drained
    }

    /// Counts that could not be flushed, kept for the next flush.
    fn restore(&self, drained: Vec<(BucketKey, i64)>) {
        let mut tenants = self.tenants();
        for ((minute, tenant_id, operation, outcome), count) in drained {
            *tenants
                .entry(tenant_id)
                .or_default()
                .pending
                .entry((minute, operation, outcome))
                .or_default() += count;
        }
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

/// Something kept in memory and written to the store in batches (each to the concern it
/// belongs to).
#[async_trait::async_trait]
pub trait Buffered: Send + Sync + 'static {
    /// Writes what was buffered since the last flush; on failure keeps it for the next one.
    async fn flush(&self, store: &dyn Store);
}

#[async_trait::async_trait]
impl Buffered for OutcomeCounter {
    /// A database hiccup delays counts but loses none.
    async fn flush(&self, store: &dyn Store) {
        let mut drained = self.drain();
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
            self.restore(drained);
        }
    }
}
