//! The request journal: every request that arrived with a key and what it was answered, for
//! the console's record page (a conflicting retry keeps its command, for the diff). Buffered
//! in memory and written in batches like outcome counts, so the hot path writes nothing more;
//! the last seconds before a crash may be missing from the journal, never from the records.

use super::Buffered;
use crate::store::MetricsStore;
use crate::store::metrics::JournalEntry;
use std::sync::{Mutex, MutexGuard};

/// Entries kept while the database cannot take them; past this the oldest are dropped.
const MAX_PENDING: usize = 100_000;

#[derive(Default)]
pub struct RequestJournal {
    pending: Mutex<Vec<JournalEntry>>,
}

impl RequestJournal {
    fn pending(&self) -> MutexGuard<'_, Vec<JournalEntry>> {
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn record(&self, entry: JournalEntry) {
        let mut pending = self.pending();
        if pending.len() >= MAX_PENDING {
            pending.remove(0);
            metrics::counter!("request_journal_dropped_total").increment(1);
        }
        pending.push(entry);
    }
}

#[async_trait::async_trait]
impl Buffered for RequestJournal {
    async fn flush(&self, store: &dyn MetricsStore) {
        let drained: Vec<JournalEntry> = std::mem::take(&mut *self.pending());
        if drained.is_empty() {
            return;
        }
        if let Err(error) = store.add_journal_entries(&drained).await {
            tracing::warn!(%error, entries = drained.len(), "request journal not flushed; kept for the next try");
            let mut pending = self.pending();
            let newer = std::mem::take(&mut *pending);
            *pending = drained;
            pending.extend(newer);
        }
    }
}
