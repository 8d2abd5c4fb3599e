//! Final answers from memory: a scoped key whose record is COMPLETED or FAILED_REPLAYABLE
//! answers every retry the same way until its window ends (the stored response again, or
//! `409` for another command), and nothing the store allows changes such a record before
//! then (`store_conformance::a_final_record_cannot_change_before_its_window_ends` goes
//! through every write). So a look-up that finds one is kept in memory, keyed by the whole
//! scope (tenant, operation, key) and with the record's fingerprint, and answers the key's
//! next retries without the database, until shortly before the record's window ends; from
//! then on the database decides, and the after-expiry policy applies as it always did.
//!
//! Each entry keeps the record as read and the database's clock at the read; a hit moves
//! that clock on by the time elapsed since (a monotonic clock: no instance's wall clock is
//! compared with the database's). The cache is bounded by bytes (`--answer-cache-bytes`):
//! the least used entries make room for new ones. Every answer given from it is counted
//! and journalled like any other (the engine does that after `decide`, which it still runs).

use crate::store::records::FoundRecord;
use domain::record::RecordStatus;
use domain::scope::Scope;
use moka::notification::RemovalCause;
use moka::sync::Cache;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long before its window ends an entry stops answering (the database decides from then
/// on): more than the time between a read and its entry's insertion.
const BEFORE_WINDOW_ENDS: Duration = Duration::from_secs(2);
/// What an entry costs besides its bytes of body, headers and fingerprint.
const ENTRY_OVERHEAD_BYTES: usize = 256;

#[derive(Clone)]
struct Entry {
    found: Arc<FoundRecord>,
    read_at: Instant,
    /// How long it may answer from its insertion.
    lives: Duration,
    bytes: u32,
}

/// When an entry leaves: its own lifetime, from when it was read.
struct UntilShortlyBeforeTheWindowEnds;

impl moka::Expiry<Scope, Entry> for UntilShortlyBeforeTheWindowEnds {
    fn expire_after_create(&self, _scope: &Scope, entry: &Entry, _created_at: Instant) -> Option<Duration> {
        Some(entry.lives.saturating_sub(entry.read_at.elapsed()))
    }
}

pub struct FinalAnswers {
    /// `None` when the cache is off (`--answer-cache-bytes 0`).
    cache: Option<Cache<Scope, Entry>>,
}

/// `idempotency_answer_cache_*` at zero, so that rates read from the start.
pub fn register_metrics() {
    for name in [
        "idempotency_answer_cache_hits_total",
        "idempotency_answer_cache_misses_total",
        "idempotency_answer_cache_evictions_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    metrics::gauge!("idempotency_answer_cache_bytes").set(0.0);
}

impl FinalAnswers {
    /// A cache of at most `max_bytes` (0: none).
    pub fn new(max_bytes: u64) -> FinalAnswers {
        let cache = (max_bytes > 0).then(|| {
            Cache::builder()
                .max_capacity(max_bytes)
                .weigher(|_scope: &Scope, entry: &Entry| entry.bytes)
                .expire_after(UntilShortlyBeforeTheWindowEnds)
                .eviction_listener(|_scope, _entry, cause| {
                    if cause == RemovalCause::Size {
                        metrics::counter!("idempotency_answer_cache_evictions_total").increment(1);
                    }
                })
                .build()
        });
        FinalAnswers { cache }
    }

    /// The record of `scope` as last read, when it is final and its window is not about to
    /// end, with the database's clock moved on by the time since the read.
    pub fn get(&self, scope: &Scope) -> Option<FoundRecord> {
        let cache = self.cache.as_ref()?;
        let Some(entry) = cache.get(scope) else {
            metrics::counter!("idempotency_answer_cache_misses_total").increment(1);
            return None;
        };
        metrics::counter!("idempotency_answer_cache_hits_total").increment(1);
        let mut found = FoundRecord::clone(&entry.found);
        found.at.now += entry.read_at.elapsed();
        Some(found)
    }

    /// Keeps `found` (just read for `scope`) when its answer is final, until shortly before
    /// its window ends.
    pub fn remember(&self, scope: &Scope, found: &FoundRecord) {
        let Some(cache) = &self.cache else {
            return;
        };
        let record = &found.at.record;
        let is_final = matches!(
            record.status,
            RecordStatus::Completed | RecordStatus::FailedReplayable
        );
        let window_left = (record.expires_at - found.at.now)
            .to_std()
            .unwrap_or_default()
            .saturating_sub(BEFORE_WINDOW_ENDS);
        let Some(response) = found
            .response
            .as_ref()
            .filter(|_| is_final && !window_left.is_zero())
        else {
            return;
        };
        let bytes = response.body.len()
            + response
                .headers
                .iter()
                .map(|(name, value)| name.len() + value.len())
                .sum::<usize>()
            + record.request_fingerprint.len()
            + ENTRY_OVERHEAD_BYTES;
        cache.insert(
            scope.clone(),
            Entry {
                found: Arc::new(found.clone()),
                read_at: Instant::now(),
                lives: window_left,
                bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
            },
        );
        metrics::gauge!("idempotency_answer_cache_bytes").set(cache.weighted_size() as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, TimeDelta, Utc};
    use domain::claim::StoredResponse;
    use domain::key::IdempotencyKey;
    use domain::record::{ProgressStep, RecordAt, StoredRecord};
    use domain::scope::Operation;
    use domain::tenant::TenantId;

    fn scope(tenant: &str, key: &str) -> Scope {
        Scope {
            tenant_id: TenantId::from_stored(tenant.to_owned()),
            operation: Operation::CreatePayment,
            key: IdempotencyKey::parse(key.as_bytes()).expect("a key"),
        }
    }

    fn found(status: RecordStatus, window_left: TimeDelta, body: &str) -> FoundRecord {
        let now: DateTime<Utc> = "2026-12-03T12:00:00Z".parse().expect("a time");
        FoundRecord {
            at: RecordAt {
                record: StoredRecord {
                    status,
                    progress_step: ProgressStep::Completed,
                    fingerprint_version: 1,
                    request_fingerprint: "f".repeat(64),
                    lease_version: 1,
                    locked_until: None,
                    expires_at: now + window_left,
                    resource_id: Some("pay_1".to_owned()),
                    response_schema_version: Some("2026-09-01".to_owned()),
                    next_recovery_at: None,
                    first_request_at: now,
                },
                now,
            },
            response: Some(StoredResponse {
                status: 201,
                headers: vec![("content-type".to_owned(), "application/json".to_owned())],
                body: body.as_bytes().to_vec(),
            }),
        }
    }

    #[test]
    fn only_final_answers_are_kept_and_by_their_whole_scope() {
        let answers = FinalAnswers::new(1 << 20);
        let hour = TimeDelta::hours(1);
        answers.remember(
            &scope("ten_a", "k-done"),
            &found(RecordStatus::Completed, hour, "{}"),
        );
        answers.remember(
            &scope("ten_a", "k-declined"),
            &found(RecordStatus::FailedReplayable, hour, "{}"),
        );
        for status in [
            RecordStatus::InProgress,
            RecordStatus::UnknownRequiresRecovery,
            RecordStatus::FailedRetryable,
            RecordStatus::Expired,
        ] {
            answers.remember(&scope("ten_a", status.as_str()), &found(status, hour, "{}"));
            assert!(
                answers.get(&scope("ten_a", status.as_str())).is_none(),
                "{status}"
            );
        }
        let hit = answers.get(&scope("ten_a", "k-done")).expect("kept");
        assert_eq!(hit.at.record.status, RecordStatus::Completed);
        assert!(
            hit.at.now >= found(RecordStatus::Completed, hour, "{}").at.now,
            "the clock moves on"
        );
        assert!(answers.get(&scope("ten_a", "k-declined")).is_some());
        assert!(
            answers.get(&scope("ten_b", "k-done")).is_none(),
            "another tenant's key is another scope"
        );
    }

    #[test]
    fn an_answer_about_to_reach_its_window_end_is_left_to_the_database() {
        let answers = FinalAnswers::new(1 << 20);
        answers.remember(
            &scope("ten_a", "k-late"),
            &found(RecordStatus::Completed, TimeDelta::milliseconds(1_500), "{}"),
        );
        answers.remember(
            &scope("ten_a", "k-past"),
            &found(RecordStatus::Completed, TimeDelta::seconds(-5), "{}"),
        );
        assert!(answers.get(&scope("ten_a", "k-late")).is_none());
        assert!(answers.get(&scope("ten_a", "k-past")).is_none());
    }

    #[test]
    fn an_entry_leaves_shortly_before_its_window_ends() {
        let answers = FinalAnswers::new(1 << 20);
        let window_left = BEFORE_WINDOW_ENDS + Duration::from_millis(200);
        answers.remember(
            &scope("ten_a", "k-short"),
            &found(
                RecordStatus::Completed,
                TimeDelta::from_std(window_left).expect("short"),
                "{}",
            ),
        );
        let read = Instant::now();
        assert!(answers.get(&scope("ten_a", "k-short")).is_some());
        // Asked again and again: it stops answering, and before the window ends.
        while answers.get(&scope("ten_a", "k-short")).is_some() {
            assert!(
                read.elapsed() < window_left,
                "still answering at the window's end"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(read.elapsed() < window_left);
    }

    #[test]
    fn the_cache_is_bounded_by_bytes() {
        let answers = FinalAnswers::new(64 * 1024);
        let body = "x".repeat(4 * 1024);
        for n in 0..100 {
            answers.remember(
                &scope("ten_a", &format!("k-{n}")),
                &found(RecordStatus::Completed, TimeDelta::hours(1), &body),
            );
        }
        let cache = answers.cache.as_ref().expect("on");
        cache.run_pending_tasks();
        assert!(cache.weighted_size() <= 64 * 1024, "{}", cache.weighted_size());
        assert!(cache.entry_count() < 100);
        assert!(FinalAnswers::new(0).cache.is_none(), "0 turns it off");
    }
}
