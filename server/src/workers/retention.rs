//! The retention worker: purges bodies of settled records past their window, deletes
//! tombstones past retention and request journal entries as old as the oldest tombstone may
//! be (window + retention), in small batches, so that it never fights traffic. Each batch
//! is one short transaction, bounded where the database allows (PostgreSQL: statement and lock
//! timeouts; rows a request holds are skipped, not waited for). The batch size adapts: a batch
//! that overran its bound halves the next one, a quick one doubles it up to the maximum.

use crate::store::RetentionStore;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct CleanupSettings {
    pub retention: Duration,
    /// How long journal entries are kept: the window and the retention, so that a record's
    /// requests stay as long as its tombstone may.
    pub journal_retention: Duration,
    /// The largest batch, in records.
    pub max_batch: i64,
    /// The longest a batch may hold its transaction.
    pub batch_bound: Duration,
    /// The least pause between batches (it is at least [`YIELD_FACTOR`] times the last
    /// batch's time), leaving the database to traffic.
    pub pause: Duration,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanupReport {
    pub purged: u64,
    pub deleted: u64,
    pub journal_deleted: u64,
    pub batches: u32,
    /// Batches that failed or held their locks longer than the bound (their work was rolled
    /// back where the database enforced the bound, and is retried with a smaller batch).
    pub overruns: u32,
    /// The longest any batch held its locks.
    pub longest_hold: Duration,
}

/// The worker, and its state between passes: the batch size it learned.
pub struct Cleanup {
    store: Arc<dyn RetentionStore>,
    settings: CleanupSettings,
    batch: Mutex<i64>,
}

const MIN_BATCH: i64 = 10;

/// The pause after a batch, in multiples of the batch's own time: the worker holds the
/// database a fifth of the time at most while a backlog drains, and traffic the rest (on
/// SQLite, whose writers poll for the one write lock, requests find it free most of the time).
/// docs/performance.md weighs this against how fast a backlog drains.
const YIELD_FACTOR: u32 = 4;

#[derive(Debug, Clone, Copy)]
enum Phase {
    Purge,
    DeleteTombstones,
    DeleteJournal,
}

impl Phase {
    const fn counter(self) -> &'static str {
        match self {
            Phase::Purge => "idempotency_cleanup_purged_total",
            Phase::DeleteTombstones => "idempotency_cleanup_deleted_total",
            Phase::DeleteJournal => "idempotency_cleanup_journal_deleted_total",
        }
    }
}

impl Cleanup {
    pub fn new(store: Arc<dyn RetentionStore>, settings: CleanupSettings) -> Cleanup {
        let batch = Mutex::new(settings.max_batch.max(MIN_BATCH));
        Cleanup {
            store,
            settings,
            batch,
        }
    }

    /// Purges, then deletes tombstones and journal entries, until nothing is due (or a phase
    /// keeps failing).
    pub async fn run_once(&self) -> CleanupReport {
        let mut report = CleanupReport::default();
        report.purged = self.drain(Phase::Purge, &mut report).await;
        report.deleted = self.drain(Phase::DeleteTombstones, &mut report).await;
        report.journal_deleted = self.drain(Phase::DeleteJournal, &mut report).await;
        report
    }

    fn batch(&self) -> i64 {
        *self.batch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn learn(&self, next: i64) {
        *self.batch.lock().unwrap_or_else(PoisonError::into_inner) = next;
    }

    async fn drain(&self, phase: Phase, report: &mut CleanupReport) -> u64 {
        let mut done = 0;
        let mut failures_in_a_row = 0;
        loop {
            let size = self.batch();
            let started = Instant::now();
            let result = match phase {
                Phase::Purge => self.store.purge_expired(size, self.settings.batch_bound).await,
                Phase::DeleteTombstones => {
                    self.store
                        .delete_tombstones(self.settings.retention, size, self.settings.batch_bound)
                        .await
                }
                Phase::DeleteJournal => {
                    self.store
                        .delete_journal(self.settings.journal_retention, size, self.settings.batch_bound)
                        .await
                }
            };
            let elapsed = started.elapsed();
            report.batches += 1;
            let batch = match result {
                Ok(batch) => batch,
                Err(error) => {
                    report.overruns += 1;
                    failures_in_a_row += 1;
                    metrics::counter!("idempotency_cleanup_batch_overruns_total").increment(1);
                    tracing::warn!(%error, batch = size, ?phase, "cleanup batch failed; trying a smaller one");
                    self.learn((size / 2).max(MIN_BATCH));
                    if failures_in_a_row >= 3 {
                        return done;
                    }
                    tokio::time::sleep(self.settings.pause).await;
                    continue;
                }
            };
            failures_in_a_row = 0;
            let count = batch.rows;
            report.longest_hold = report.longest_hold.max(batch.held);
            metrics::histogram!("idempotency_cleanup_batch_seconds").record(batch.held.as_secs_f64());
            done += count;
            metrics::counter!(phase.counter()).increment(count);
            if batch.held > self.settings.batch_bound {
                report.overruns += 1;
                metrics::counter!("idempotency_cleanup_batch_overruns_total").increment(1);
                self.learn((size / 2).max(MIN_BATCH));
            } else if batch.held < self.settings.batch_bound / 4 {
                self.learn((size * 2).min(self.settings.max_batch.max(MIN_BATCH)));
            }
            if count < u64::try_from(size).unwrap_or(0) {
                return done;
            }
            tokio::time::sleep(self.settings.pause.max(elapsed * YIELD_FACTOR)).await;
        }
    }
}

impl Cleanup {
    /// One pass, logged when it did something.
    pub async fn pass(&self) {
        let report = self.run_once().await;
        if report.purged + report.deleted + report.journal_deleted > 0 {
            tracing::info!(
                purged = report.purged,
                deleted = report.deleted,
                journal_deleted = report.journal_deleted,
                batches = report.batches,
                longest_hold_ms = report.longest_hold.as_millis(),
                "retention pass"
            );
        }
    }
}
