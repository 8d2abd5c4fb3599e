//! The request journal: every request that arrived with a key and what it was answered, for
//! the console's record page (a conflicting retry keeps its command, for the diff). Buffered
//! in a bounded queue and written every `--journal-flush-ms` (and at shutdown) in transactions
//! of at most [`ENTRIES_PER_WRITE`] entries, so a request costs no round trip for it. A crash
//! loses the entries of the last flush interval: diagnostics only, never a record, a payment or
//! an answer.
//!
//! A retry's delay (since its key's first request) is also observed here, as the histogram
//! `idempotency_retry_delay_seconds` and the longest this instance has seen: the data for
//! sizing the window.

use super::Buffered;
use crate::store::Store;
use crate::store::metrics::JournalEntry;
use chrono::TimeDelta;
use domain::scope::{Operation, Scope};
use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The histogram of retry delays, per tenant and operation.
pub const RETRY_DELAY_SECONDS: &str = "idempotency_retry_delay_seconds";
/// The longest retry delay this instance has seen since it started, per tenant and operation.
pub const LONGEST_RETRY_DELAY_SECONDS: &str = "idempotency_retry_delay_max_seconds";

/// Entries kept while the database cannot take them; past this the oldest are dropped.
const MAX_PENDING: usize = 100_000;

/// Entries written in one transaction at most. On SQLite a write transaction holds the one
/// writer, and a payment's claim waits behind it: a flood of conflicting retries (20,000 a
/// second) made each flush about 2,000 rows that held the writer for about 100 ms, and the
/// fresh creates that came meanwhile waited that long (docs/performance.md). Between two
/// chunks the writer goes to whoever queued for it first.
pub const ENTRIES_PER_WRITE: usize = 256;

#[derive(Default)]
pub struct RequestJournal {
    pending: Mutex<VecDeque<JournalEntry>>,
    /// Each tenant's retry-delay series, per operation.
    retries: Mutex<HashMap<String, HashMap<Operation, RetrySeries>>>,
}

/// One tenant's and operation's retry delays: its histogram's handle (registered on first use
/// and kept, so that a retry looks no series up by freshly allocated labels) and the longest
/// delay seen, in seconds.
struct RetrySeries {
    delays: metrics::Histogram,
    longest: f64,
}

impl RequestJournal {
    fn pending(&self) -> MutexGuard<'_, VecDeque<JournalEntry>> {
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn record(&self, entry: JournalEntry) {
        if let Some(delay) = entry.retry_delay {
            self.observe_retry(&entry.scope, delay);
        }
        let mut pending = self.pending();
        pending.push_back(entry);
        drop_oldest_beyond_bound(&mut pending);
    }

    fn observe_retry(&self, scope: &Scope, delay: TimeDelta) {
        let seconds = delay.as_seconds_f64();
        let tenant = scope.tenant_id.as_str();
        let operation = scope.operation;
        let mut retries = self.retries.lock().unwrap_or_else(PoisonError::into_inner);
        let of_tenant = match retries.get_mut(tenant) {
            Some(of_tenant) => of_tenant,
            None => retries.entry(tenant.to_owned()).or_default(),
        };
        let series = of_tenant.entry(operation).or_insert_with(|| RetrySeries {
            delays: metrics::histogram!(
                RETRY_DELAY_SECONDS,
                "tenant" => tenant.to_owned(),
                "operation" => operation.as_str(),
            ),
            longest: 0.0,
        });
        series.delays.record(seconds);
        if seconds > series.longest {
            series.longest = seconds;
            metrics::gauge!(
                LONGEST_RETRY_DELAY_SECONDS,
                "tenant" => tenant.to_owned(),
                "operation" => operation.as_str(),
            )
            .set(seconds);
        }
    }
}

/// Keeps at most [`MAX_PENDING`] entries, counting what it drops.
fn drop_oldest_beyond_bound(pending: &mut VecDeque<JournalEntry>) {
    let excess = pending.len().saturating_sub(MAX_PENDING);
    if excess > 0 {
        pending.drain(..excess);
        metrics::counter!("request_journal_dropped_total").increment(excess as u64);
    }
}

#[async_trait::async_trait]
impl Buffered for RequestJournal {
    async fn flush(&self, store: &dyn Store) {
        let mut drained: Vec<JournalEntry> = self.pending().drain(..).collect();
        let mut written = 0;
        while written < drained.len() {
            let chunk = &drained[written..drained.len().min(written + ENTRIES_PER_WRITE)];
            if let Err(error) = store.add_journal_entries(chunk).await {
                let unwritten = drained.split_off(written);
                tracing::warn!(%error, entries = unwritten.len(), "request journal not flushed; kept for the next try");
                let mut pending = self.pending();
                let newer = std::mem::take(&mut *pending);
                pending.extend(unwritten);
                pending.extend(newer);
                drop_oldest_beyond_bound(&mut pending);
                return;
            }
            written += chunk.len();
        }
    }
}
