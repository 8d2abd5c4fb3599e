//! The WAL's upkeep beside the group commit: a checkpointer on a reader's connection copies
//! what the writer committed into the database file, and the committer starts the WAL over
//! between two groups once it has grown past its mark.

use super::Writer;
use crate::store::dialect::Dialect;
use sqlx::Pool;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

impl<D: Dialect> Writer<D> {
    /// Copies what the checkpointer has not yet into the file and starts the WAL over from its
    /// beginning, between groups (no transaction open). Readers still on the WAL's frames are
    /// waited for 10 ms at most (then the WAL is left as it is, for a later try,
    /// [`RestartRetry`]): a reader's long query must not hold every write. Whether it was
    /// started over.
    pub(super) async fn restart_wal(&mut self) -> bool {
        let Some(connection) = self.connection() else {
            return false;
        };
        let restart = async {
            sqlx::query(WAIT_FOR_READERS).execute(&mut *connection).await?;
            sqlx::query_as::<_, Checkpoint>(RESTART_WAL)
                .fetch_one(&mut *connection)
                .await
        }
        .await;
        // Apart, so that it runs whatever became of the checkpoint.
        if let Err(error) = sqlx::query(WAIT_AS_EVERY_CONNECTION).execute(connection).await {
            self.abort_group(&format!("setting the busy timeout back: {error}"))
                .await;
        }
        match restart {
            Ok(checkpoint) => checkpoint.busy == 0,
            Err(error) => {
                tracing::warn!(%error, "the WAL was not started over; a later try follows");
                false
            }
        }
    }
}

/// How often the checkpointer copies what the writer committed into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// The writer's checkpoint that starts the WAL over, with the writer's busy timeout lowered
/// for it ...
const WAIT_FOR_READERS: &str = "pragma busy_timeout = 10";
const RESTART_WAL: &str = "pragma wal_checkpoint(restart)";
/// ... and set back to every connection's (`sqlite::BUSY_TIMEOUT`).
const WAIT_AS_EVERY_CONNECTION: &str = "pragma busy_timeout = 5000";

/// When the committer tries again to start the WAL over after readers kept a try busy. A try
/// is busy while a reader that began before it copied the last frames has not finished; a
/// short query that lost its core for more than the 10 ms is gone a few milliseconds later. So
/// the first retry comes after the next group 10 ms on, and each further one waits twice as
/// long, up to the checkpointer's own pace (its looks meanwhile add no tries). Retried only at
/// the checkpointer's next look (100 ms), a writer that never pauses filled the WAL past a
/// quarter of what it wrote (`the_wal_is_started_over_while_writes_never_stop` failed 4 runs of
/// 8 in a build with optimised dependencies, docs/performance.md); retried after every group,
/// a long console query would cost every group its 10 ms.
pub(super) struct RestartRetry {
    at: Option<Instant>,
    backoff: Duration,
}

impl RestartRetry {
    const FIRST_BACKOFF: Duration = Duration::from_millis(10);

    pub(super) fn none() -> RestartRetry {
        RestartRetry {
            at: None,
            backoff: Self::FIRST_BACKOFF,
        }
    }

    /// Whether to try now, when the checkpointer has `asked` or not: as it asks, but while a
    /// retry is scheduled only once that is due, so that a reader that keeps every try busy is
    /// tried no more often than the checkpointer would alone.
    pub(super) fn tries_now(&self, asked: bool, now: Instant) -> bool {
        self.at.map_or(asked, |at| now >= at)
    }

    /// The retry after a try that `started` the WAL over, or not, and ended at `now`.
    pub(super) fn after(self, started: bool, now: Instant) -> RestartRetry {
        if started {
            return RestartRetry::none();
        }
        RestartRetry {
            at: Some(now + self.backoff),
            backoff: (self.backoff * 2).min(CHECKPOINT_EVERY),
        }
    }
}

/// When the WAL is to be started over, told by the checkpointer to the committer.
pub(super) struct Restart {
    pub(super) at_frames: i64,
    pub(super) due: Arc<AtomicBool>,
    pub(super) wake_committer: Arc<Notify>,
}

/// A checkpoint's result, as `pragma wal_checkpoint` names its columns.
#[derive(sqlx::FromRow)]
struct Checkpoint {
    /// 1 when it could not finish: a restart found readers still on the WAL.
    busy: i64,
    /// The frames in the WAL: it grows from its start until the WAL is started over.
    log: i64,
}

/// Copies the WAL's committed pages into the database file, from a reader's connection. The
/// writer's own connection never checkpoints (`wal_autocheckpoint=0`, `sqlite::connect`):
/// SQLite runs its automatic checkpoint inside the commit that crosses 1,000 pages, so the
/// writer, and every caller of its group, waited for it. On a file of 902,265 records (1.4 GB)
/// those page writes were the writer's largest cost (docs/performance.md). A passive checkpoint
/// takes no lock that the writer or a reader waits for; what a reader still needs stays in the
/// WAL for the next one.
///
/// A passive checkpoint never starts the WAL over: SQLite does that only at a write
/// transaction's start that finds every frame copied, which under a steady stream of groups
/// never happens while the checkpointer copies one group behind, so the WAL grew without end
/// (6.7 GB in one round of `scripts/bench`). Past `restart.at_frames` the committer starts it
/// over between two groups, when little is left to copy.
pub(super) async fn checkpoints<D: Dialect>(readers: Pool<D>, restart: Restart) {
    loop {
        tokio::time::sleep(CHECKPOINT_EVERY).await;
        let checkpoint = sqlx::query_as::<_, Checkpoint>("pragma wal_checkpoint(passive)")
            .fetch_one(&readers)
            .await;
        match checkpoint {
            Ok(checkpoint) if checkpoint.log >= restart.at_frames => {
                restart.due.store(true, Ordering::Relaxed);
                restart.wake_committer.notify_one();
            }
            Ok(_) => {}
            Err(_) if readers.is_closed() => return,
            Err(error) => tracing::warn!(%error, "a checkpoint failed; the next one tries again"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{CHECKPOINT_EVERY, RestartRetry, Writer};
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

    /// A restart of the WAL says whether it happened: not while a reader is still on the WAL's
    /// frames (the committer tries again later), and once the reader has gone.
    #[tokio::test]
    async fn a_restart_kept_busy_by_a_reader_says_so() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("wal.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await
            .expect("open");
        let insert = |n: i64| sqlx::query("insert into t (n) values ($1)").bind(n);
        sqlx::query("create table t (n integer)")
            .execute(&pool)
            .await
            .expect("table");
        insert(1).execute(&pool).await.expect("a row");
        let mut reader = pool.acquire().await.expect("the reader");
        sqlx::query("begin").execute(&mut *reader).await.expect("begin");
        sqlx::query("select count(*) from t")
            .execute(&mut *reader)
            .await
            .expect("a read on the WAL");
        let mut writer = Writer {
            connection: Some(pool.acquire().await.expect("the writer")),
            open: None,
            waiting: Vec::new(),
            abandoned: false,
        };
        let connection = writer.connection().expect("the writer's connection");
        insert(2).execute(connection).await.expect("a row after the read");
        assert!(!writer.restart_wal().await, "started over under a reader");
        sqlx::query("commit")
            .execute(&mut *reader)
            .await
            .expect("the reader goes");
        assert!(writer.restart_wal().await, "not started over with no reader left");
    }

    /// After a busy restart the next try comes sooner than the checkpointer's next look, and each
    /// further one later, up to the checkpointer's pace; meanwhile its looks add no tries. A restart
    /// that happened leaves nothing to retry, and the checkpointer's next look tries again.
    #[test]
    fn a_busy_restart_is_retried_ever_later_up_to_the_checkpointers_pace() {
        let start = std::time::Instant::now();
        let just_before = |at| at - std::time::Duration::from_micros(1);
        let mut retry = RestartRetry::none();
        assert!(!retry.tries_now(false, start) && retry.tries_now(true, start));
        let mut waits = Vec::new();
        for _ in 0..6 {
            retry = retry.after(false, start);
            let at = retry.at.expect("a retry");
            assert!(
                !retry.tries_now(true, just_before(at)),
                "asked before the retry is due"
            );
            assert!(retry.tries_now(false, at), "the retry is due");
            waits.push((at - start).as_millis());
        }
        assert_eq!(waits, [10, 20, 40, 80, 100, 100]);
        let retry = retry.after(true, start);
        let later = start + CHECKPOINT_EVERY;
        assert!(!retry.tries_now(false, later) && retry.tries_now(true, later));
        assert_eq!(retry.backoff, RestartRetry::FIRST_BACKOFF);
    }
}
