//! The request journal: every request that arrived with a key and what it was answered, for
//! the console's record page (a conflicting retry keeps its command, for the diff). Buffered
//! in a bounded queue and written every `--journal-flush-ms` in multi-row statements (and at
//! shutdown), so a request costs no round trip for it. A crash loses the entries of the last
//! flush interval: diagnostics only, never a record, a payment or an answer.

use super::Buffered;
use crate::store::MetricsStore;
use crate::store::metrics::JournalEntry;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

/// Entries kept while the database cannot take them; past this the oldest are dropped.
const MAX_PENDING: usize = 100_000;

#[derive(Default)]
pub struct RequestJournal {
    pending: Mutex<VecDeque<JournalEntry>>,
}

impl RequestJournal {
    fn pending(&self) -> MutexGuard<'_, VecDeque<JournalEntry>> {
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn record(&self, entry: JournalEntry) {
        let mut pending = self.pending();
        pending.push_back(entry);
        drop_oldest_beyond_bound(&mut pending);
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
