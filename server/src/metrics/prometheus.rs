//! `/metrics` in the Prometheus text format. Counters and histograms are recorded where things
//! happen (the `metrics` facade); gauges of live state (unknown outcomes, the oldest of them and
//! those past automatic recovery, stale and oldest in-progress requests, cleanup and outbox
//! backlogs) are read from the database at scrape time, so every instance reports the same
//! truth. Every series exists from the first scrape (at 0), as the Prometheus client guidelines
//! ask: a missing series reads as "no data" on a dashboard and misfires `absent()` alerts.

use crate::store::Store;
use crate::store::metrics::LiveGauges;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Seconds; from a fast replay to a provider call near its timeout.
const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// Seconds after a key's first request; from a client's immediate retry to a month, with the
/// windows teams choose (1 h to 7 days) as bounds, so that "how many came after a window of
/// this length" is read off exactly.
const RETRY_DELAY_BUCKETS: [f64; 16] = [
    1.0,
    5.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3_600.0,
    6.0 * 3_600.0,
    12.0 * 3_600.0,
    86_400.0,
    2.0 * 86_400.0,
    3.0 * 86_400.0,
    7.0 * 86_400.0,
    14.0 * 86_400.0,
    30.0 * 86_400.0,
    90.0 * 86_400.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide recorder once; later calls share it.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = match PrometheusBuilder::new()
                .set_buckets(&LATENCY_BUCKETS)
                .and_then(|builder| {
                    builder.set_buckets_for_metric(
                        Matcher::Full(super::journal::RETRY_DELAY_SECONDS.to_owned()),
                        &RETRY_DELAY_BUCKETS,
                    )
                }) {
                Ok(builder) => builder,
                Err(error) => {
                    tracing::error!(%error, "metrics: invalid buckets");
                    return None;
                }
            };
            builder
                .install_recorder()
                .map_err(|error| tracing::error!(%error, "metrics: recorder not installed"))
                .ok()
        })
        .clone()
}

/// What `/metrics` renders.
pub struct Exposition {
    handle: Option<PrometheusHandle>,
    store: Arc<dyn Store>,
    /// Tombstone retention, to count the tombstones due for deletion.
    retention: Duration,
    /// Automatic recovery attempts, to count the unknown outcomes that used them up.
    recovery_max_attempts: i32,
}

impl Exposition {
    pub fn new(
        handle: Option<PrometheusHandle>,
        store: Arc<dyn Store>,
        retention: Duration,
        recovery_max_attempts: i32,
    ) -> Exposition {
        Exposition {
            handle,
            store,
            retention,
            recovery_max_attempts,
        }
    }

    /// The exposition text, gauges refreshed from the store; `None` without a recorder.
    pub async fn render(&self) -> Option<String> {
        let handle = self.handle.as_ref()?;
        let store = self.store.as_ref();
        match store.live_gauges(self.recovery_max_attempts).await {
            Ok(rows) => set_gauges(rows),
            Err(error) => tracing::warn!(%error, "metrics: live gauges not refreshed"),
        }
        match store.retention_backlog(self.retention).await {
            Ok(backlog) => {
                metrics::gauge!("idempotency_cleanup_backlog", "phase" => "purge")
                    .set(backlog.to_purge as f64);
                metrics::gauge!("idempotency_cleanup_backlog", "phase" => "delete")
                    .set(backlog.to_delete as f64);
            }
            Err(error) => tracing::warn!(%error, "metrics: cleanup backlog not refreshed"),
        }
        match store.outbox_backlog().await {
            Ok(backlog) => {
                metrics::gauge!("outbox_backlog").set(backlog.unpublished as f64);
                metrics::gauge!("outbox_oldest_unpublished_age_seconds")
                    .set(backlog.oldest_unpublished_age_seconds.max(0.0));
            }
            Err(error) => tracing::warn!(%error, "metrics: outbox backlog not refreshed"),
        }
        Some(handle.render())
    }
}

/// Every tenant and operation's gauges, and its outcome counters made to exist.
fn set_gauges(rows: Vec<LiveGauges>) {
    for row in rows {
        super::register_tenant_series(&row.tenant_id, row.operation);
        let labels = [
            ("tenant", row.tenant_id),
            ("operation", row.operation.as_str().to_owned()),
        ];
        metrics::gauge!("idempotency_unknown_state_count", &labels).set(row.unknown_count as f64);
        metrics::gauge!("idempotency_unknown_oldest_age_seconds", &labels)
            .set(row.unknown_oldest_age_seconds);
        metrics::gauge!("idempotency_recovery_exhausted_count", &labels)
            .set(row.recovery_exhausted_count as f64);
        metrics::gauge!("idempotency_stale_in_progress_count", &labels)
            .set(row.stale_in_progress_count as f64);
        metrics::gauge!("idempotency_in_progress_age_max_seconds", &labels)
            .set(row.in_progress_age_max_seconds);
    }
}
