//! The request journal: every request that arrived with a key and what it was answered, for
//! the console's record page (a conflicting retry keeps its command, for the diff). Buffered
//! in a bounded queue and written every `--journal-flush-ms` in batches, one statement each (and at
//! shutdown), so a request costs no round trip for it. A crash loses the entries of the last
//! flush interval: diagnostics only, never a record, a payment or an answer.
//!
//! A retry's delay (since its key's first request) is also observed here, as the histogram
//! `idempotency_retry_delay_seconds` and the longest this instance has seen: the data for
//! sizing the window.

use super::Buffered;
use crate::store::MetricsStore;
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

#[derive(Default)]
pub struct RequestJournal {
    pending: Mutex<VecDeque<JournalEntry>>,
    /// The longest retry delay seen per tenant and operation, in seconds.
    longest_retry: Mutex<HashMap<(String, Operation), f64>>,
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
        let tenant = scope.tenant_id.as_str().to_owned();
        let operation = scope.operation;
        metrics::histogram!(
            RETRY_DELAY_SECONDS,
            "tenant" => tenant.clone(),
            "operation" => operation.as_str(),
        )
        .record(seconds);
        let mut longest = self.longest_retry.lock().unwrap_or_else(PoisonError::into_inner);
        let known = longest.entry((tenant.clone(), operation)).or_insert(0.0);
        if seconds > *known {
            *known = seconds;
            metrics::gauge!(
                LONGEST_RETRY_DELAY_SECONDS,
                "tenant" => tenant,
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
    async fn flush(&self, store: &dyn MetricsStore) {
        let drained: Vec<JournalEntry> = self.pending().drain(..).collect();
        if drained.is_empty() {
            return;
        }
        if let Err(error) = store.add_journal_entries(&drained).await {
            tracing::warn!(%error, entries = drained.len(), "request journal not flushed; kept for the next try");
            let mut pending = self.pending();
            let newer = std::mem::take(&mut *pending);
            pending.extend(drained);
            pending.extend(newer);
            drop_oldest_beyond_bound(&mut pending);
        }
    }
}
