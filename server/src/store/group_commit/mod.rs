//! SQLite's writer: write transactions share commits. With `synchronous=FULL` every SQLite
//! commit syncs the WAL to disk before it returns, and one writer connection means one commit
//! at a time, so a sync per transaction bounds the embedded database's writes.
//!
//! Here one transaction is open on the writer connection at a time, and each caller's write
//! transaction is a savepoint inside it: its statements, and it waits. A
//! committer task commits the open transaction whenever it reaches the writer, which is first in
//! line after the callers that queued before it (the lock is fair), so every caller that came
//! while a sync was under way shares the next one. A caller's `commit` returns only after the
//! commit that holds its work has returned, synced: nothing is acknowledged that a crash can
//! take back, and a crash takes back only work that nobody was told of. A caller that rolls
//! back waits for that commit too (it may have read other callers' work of the group). A caller
//! that fails or goes away has its savepoint rolled back before anyone else uses the
//! connection.
//!
//! Every statement is a hand-off to sqlx's worker thread, and hand-offs, not SQLite, were
//! half of the writer's time (docs/performance.md), so a transaction costs as few as can be:
//! - a caller that commits leaves its savepoint open, and the next caller's opening statement
//!   releases it and makes its own (`release idem_a; savepoint idem_b`), so that never more
//!   than one savepoint is open. (Left open until the group's `COMMIT`, savepoints nested
//!   hundreds deep under overload, and SQLite's page writes look at each of them: tried and
//!   taken back.)
//! - [`GroupCommit::begin_with`] sends the opening statement in front of the caller's first
//!   (a claim's or a completion's script): the whole transaction is one hand-off, then the
//!   commit it shares.
//!
//! The two savepoint names alternate so that a caller's rollback names only its own: when its
//! opening statement did not run to its end (it failed, or the caller went away before
//! sending it), `rollback to` its name finds no savepoint, and the group is undone and told
//! so, where one name would have rolled back to the caller's before it, whose work that caller
//! was promised.
//!
//! Measured before building it (debug build, 8 s of fresh creates offered at 400/s, one
//! instance on the embedded file): the backlog at the end was 4.3-4.7 s with `synchronous=FULL`
//! and 1.5-2.1 s with `NORMAL` (no sync at commit), so the sync was about a quarter of a create's
//! serial cost on the writer.

mod wal;

use super::dialect::Dialect;
use super::error::StoreError;
use super::sql::{Made, kept};
use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, Notify, OwnedMutexGuard, oneshot};
use wal::{Restart, RestartRetry, checkpoints};

/// How long a caller waits for the writer before it is told the database is unavailable.
const WRITER_WAIT: Duration = Duration::from_secs(10);

/// What a caller hears of the commit that holds its work: `Err` with why it did not commit.
type Committed = Result<(), String>;

/// The writer connection, between callers.
struct Writer<D: Database> {
    /// The writer pool's one connection, taken from its pool by the first transaction and kept
    /// between transactions: given back and taken again, it went through a task of the pool's
    /// own each time, and the next group's `begin` waited for it (the longest wait of SQLite's
    /// writer under fresh creates, about 0.5 ms a group: docs/performance.md). `close` gives
    /// it back, so that closing the store finds it in its pool; after a failed commit it is
    /// closed, and the next transaction takes a fresh one.
    connection: Option<PoolConnection<D>>,
    /// The savepoint of the last caller, while a transaction is open holding the work of the
    /// callers in `waiting`: that caller committed, rolled back to it, or went away and was
    /// rolled back to it, and the next caller's opening statement releases it.
    open: Option<Savepoint>,
    waiting: Vec<oneshot::Sender<Committed>>,
    /// The last caller went away inside its savepoint: it is rolled back before anything else.
    abandoned: bool,
}

/// The writer, its committer and its checkpointer.
pub(super) struct GroupCommit<D: Database> {
    pool: Pool<D>,
    writer: Arc<Mutex<Writer<D>>>,
    wake_committer: Arc<Notify>,
    committer: tokio::task::JoinHandle<()>,
    checkpointer: tokio::task::JoinHandle<()>,
}

/// A caller's write transaction: a savepoint inside the open transaction, with the writer held
/// until it commits or goes away.
pub struct Member<D: Database> {
    writer: OwnedMutexGuard<Writer<D>>,
    wake_committer: Arc<Notify>,
    released: bool,
}

impl<D: Dialect> GroupCommit<D> {
    /// Group commits over `pool`, a pool of one connection, checkpointed from `readers`; the
    /// WAL is started over once it holds `restart_wal_at` frames.
    pub(super) fn over(pool: Pool<D>, readers: Pool<D>, restart_wal_at: i64) -> GroupCommit<D> {
        let writer = Arc::new(Mutex::new(Writer {
            connection: None,
            open: None,
            waiting: Vec::new(),
            abandoned: false,
        }));
        let wake_committer = Arc::new(Notify::new());
        let restart_due = Arc::new(AtomicBool::new(false));
        let committer = tokio::spawn({
            let (writer, wake_committer, restart_due) = (
                Arc::clone(&writer),
                Arc::clone(&wake_committer),
                Arc::clone(&restart_due),
            );
            async move {
                let mut retry = RestartRetry::none();
                loop {
                    wake_committer.notified().await;
                    let mut writer = writer.lock().await;
                    writer.commit_group().await;
                    let asked = restart_due.swap(false, Ordering::Relaxed);
                    if retry.tries_now(asked, Instant::now()) {
                        let started = writer.restart_wal().await;
                        retry = retry.after(started, Instant::now());
                    }
                }
            }
        });
        let checkpointer = tokio::spawn(checkpoints(
            readers,
            Restart {
                at_frames: restart_wal_at,
                due: restart_due,
                wake_committer: Arc::clone(&wake_committer),
            },
        ));
        GroupCommit {
            pool,
            writer,
            wake_committer,
            committer,
            checkpointer,
        }
    }

    /// A write transaction: the writer (in line behind the callers and the committer before
    /// this one), the group's transaction begun if none is open, and this caller's savepoint.
    pub(super) async fn begin(&self) -> Result<Member<D>, StoreError> {
        Ok(self.join(Opening::Now).await?.0)
    }

    /// A write transaction whose first statement is `first`, and that statement as the caller
    /// is to send it: the transaction's opening statement in front of `first`, one hand-off
    /// where `begin` and `first` would be two.
    pub(super) async fn begin_with(
        &self,
        first: &'static str,
    ) -> Result<(Member<D>, &'static str), StoreError> {
        let (member, opening) = self.join(Opening::WithFirstStatement).await?;
        Ok((member, joined(opening, first)))
    }

    /// The writer, this caller's savepoint named and its opening statement: sent now, or
    /// returned for the caller to send with its first. Run on a task of its own, so that a
    /// caller that goes away meanwhile cannot leave the connection half way through `BEGIN`
    /// (the member it did not receive is dropped, and rolled back).
    async fn join(&self, opening: Opening) -> Result<(Member<D>, &'static str), StoreError> {
        let (pool, writer, wake_committer) = (
            self.pool.clone(),
            Arc::clone(&self.writer),
            Arc::clone(&self.wake_committer),
        );
        tokio::spawn(async move {
            // As long as the writer pool's acquire would wait: a writer that never comes back
            // (a caller that waits on the writer while holding it) fails closed, never hangs.
            let mut writer = tokio::time::timeout(WRITER_WAIT, writer.lock_owned())
                .await
                .map_err(|_| StoreError::Unavailable(sqlx::Error::PoolTimedOut))?;
            writer.settle_abandoned().await;
            if writer.connection.is_none() {
                writer.connection = Some(pool.acquire().await?);
            }
            let savepoint = writer.open.map_or(Savepoint::A, Savepoint::next);
            let statement = savepoint.opening(writer.open.is_some());
            if opening == Opening::Now {
                let begun = match writer.connection() {
                    Some(connection) => sqlx::query(statement).execute(connection).await,
                    None => Err(sqlx::Error::PoolClosed),
                };
                if let Err(error) = begun {
                    // Which of the statements ran is not known, so no savepoint can be trusted
                    // to undo only this caller: the group is undone, and told so. (A failed
                    // `begin immediate` leaves nobody to tell.)
                    writer
                        .abort_group(&format!("beginning a caller's savepoint: {error}"))
                        .await;
                    return Err(error.into());
                }
            }
            writer.open = Some(savepoint);
            let member = Member {
                writer,
                wake_committer,
                released: false,
            };
            Ok((member, statement))
        })
        .await
        .map_err(|stopped| StoreError::Corrupt(format!("beginning a transaction: {stopped}")))?
    }

    /// Commits what is open and gives the connection back to its pool.
    pub(super) async fn close(&self) {
        let mut writer = self.writer.lock().await;
        writer.commit_group().await;
        writer.connection = None;
        drop(writer);
        self.committer.abort();
        self.checkpointer.abort();
    }
}

impl<D: Database> Drop for GroupCommit<D> {
    /// A store dropped without `close` takes its committer with it, and with it the last
    /// handle on the writer pool.
    fn drop(&mut self) {
        self.committer.abort();
        self.checkpointer.abort();
    }
}

impl<D: Dialect> Writer<D> {
    fn connection(&mut self) -> Option<&mut D::Connection> {
        self.connection.as_deref_mut()
    }

    /// Rolls back the savepoint of a caller that went away inside it (the last caller: it
    /// held the writer).
    async fn settle_abandoned(&mut self) {
        if !std::mem::take(&mut self.abandoned) {
            return;
        }
        let (Some(savepoint), Some(connection)) = (self.open, self.connection.as_deref_mut()) else {
            return;
        };
        let undone = sqlx::query(savepoint.rollback()).execute(connection).await;
        if let Err(error) = undone {
            // The connection's state is not known: the whole group is undone, and told so.
            self.abort_group(&format!("rolling back a caller's savepoint: {error}"))
                .await;
        }
    }

    /// Commits the open transaction (after rolling back an abandoned savepoint) and tells every
    /// caller whose work it holds.
    async fn commit_group(&mut self) {
        self.settle_abandoned().await;
        if self.open.is_none() {
            return;
        }
        let committed = match self.connection() {
            Some(connection) => sqlx::query("commit").execute(connection).await,
            None => Err(sqlx::Error::PoolClosed),
        };
        match committed {
            Ok(_) => {
                self.open = None;
                for caller in self.waiting.drain(..) {
                    // A caller that went away meanwhile has nothing to hear.
                    let _ = caller.send(Ok(()));
                }
            }
            Err(error) => self.abort_group(&format!("commit: {error}")).await,
        }
    }

    /// Rolls back the open transaction, tells its callers it did not commit, and closes the
    /// connection (the pool opens a fresh one for the next transaction).
    async fn abort_group(&mut self, why: &str) {
        tracing::error!(
            why,
            "the writer's transaction is rolled back: its callers are told it did not commit"
        );
        if let Some(mut connection) = self.connection.take() {
            let _ = sqlx::query("rollback").execute(&mut *connection).await;
            let _ = connection.close().await;
        }
        self.open = None;
        self.abandoned = false;
        for caller in self.waiting.drain(..) {
            let _ = caller.send(Err(why.to_owned()));
        }
    }
}

impl<D: Dialect> Member<D> {
    /// Leaves the savepoint's work in the group's transaction and waits for the commit that
    /// holds it. No statement: the next caller's savepoint, or the commit, releases it.
    pub(super) async fn commit(mut self) -> Result<(), StoreError> {
        let (told, committed) = oneshot::channel();
        self.released = true;
        self.writer.waiting.push(told);
        // Dropping the member hands the writer on and wakes the committer.
        drop(self);
        heard(committed).await
    }

    /// Rolls this caller's savepoint back, and waits for the group's commit all the same: what
    /// the caller read inside it may be other callers' work of the same group (a claim that
    /// found a key another caller had just claimed, say), which it may then read elsewhere
    /// only once committed. The rollback runs on a task of its own (a caller that goes away
    /// cannot stop it half way); a caller that goes away while waiting is simply not told.
    pub(super) async fn rollback(mut self) -> Result<(), StoreError> {
        let (told, committed) = oneshot::channel();
        tokio::spawn(async move {
            // The writer's open savepoint is this caller's: it holds the writer.
            let undo = self.writer.open.map(Savepoint::rollback);
            let undo = undo.ok_or_else(|| StoreError::Corrupt("no savepoint to roll back".to_owned()))?;
            sqlx::query(undo).execute(&mut *self).await?;
            self.released = true;
            self.writer.waiting.push(told);
            Ok::<(), StoreError>(())
        })
        .await
        .map_err(|stopped| StoreError::Corrupt(format!("ending a transaction: {stopped}")))??;
        heard(committed).await
    }
}

/// The two names a caller's savepoint takes in turn (the module's comment says why).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Savepoint {
    A,
    B,
}

impl Savepoint {
    fn next(self) -> Savepoint {
        match self {
            Savepoint::A => Savepoint::B,
            Savepoint::B => Savepoint::A,
        }
    }

    /// What makes this savepoint: the group's transaction begun, or the last caller's
    /// savepoint (the other name) released.
    fn opening(self, in_open_group: bool) -> &'static str {
        match (self, in_open_group) {
            (Savepoint::A, false) => "begin immediate; savepoint idem_a",
            (Savepoint::B, false) => "begin immediate; savepoint idem_b",
            (Savepoint::A, true) => "release idem_b; savepoint idem_a",
            (Savepoint::B, true) => "release idem_a; savepoint idem_b",
        }
    }

    fn rollback(self) -> &'static str {
        match self {
            Savepoint::A => "rollback to idem_a",
            Savepoint::B => "rollback to idem_b",
        }
    }
}

/// Whether `join` sends the opening statement, or leaves it to the caller's first.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Opening {
    Now,
    WithFirstStatement,
}

/// `opening` in front of `first`, as one statement (sqlx prepares each pair once per
/// connection).
fn joined(opening: &'static str, first: &'static str) -> &'static str {
    let name = Made::Joined(opening.as_ptr() as usize, first.as_ptr() as usize);
    kept(name, || format!("{opening}; {first}"))
}

/// What a caller hears of the group's commit.
async fn heard(committed: oneshot::Receiver<Committed>) -> Result<(), StoreError> {
    match committed.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(why)) => Err(StoreError::NotCommitted(why)),
        Err(_) => Err(StoreError::NotCommitted("the writer stopped".to_owned())),
    }
}

impl<D: Database> Drop for Member<D> {
    fn drop(&mut self) {
        if !self.released {
            self.writer.abandoned = true;
        }
        // The committer closes the transaction even when no caller is left to ask for it, so
        // that the write lock is never held for nobody.
        self.wake_committer.notify_one();
    }
}

impl<D: Dialect> std::ops::Deref for Member<D> {
    type Target = D::Connection;

    fn deref(&self) -> &D::Connection {
        self.writer
            .connection
            .as_deref()
            .expect("a member holds the writer while its transaction is open")
    }
}

impl<D: Dialect> std::ops::DerefMut for Member<D> {
    fn deref_mut(&mut self) -> &mut D::Connection {
        self.writer
            .connection
            .as_deref_mut()
            .expect("a member holds the writer while its transaction is open")
    }
}

#[cfg(test)]
mod tests;
