//! The one place that says what the store needs of a SQL database, so that every store body
//! is written once, generic over [`Dialect`], and `sqlx::Postgres` and `sqlx::Sqlite` are its
//! two implementations (`postgres.rs`, `sqlite.rs`).
//!
//! What the bodies need of sqlx (binding and reading these column types, executing on a
//! connection) is stated as supertraits of `Dialect`. Rust implies a trait's supertraits
//! wherever the trait is a bound, but not its other where-clauses (rust-lang/rust#20671), so
//! each requirement is phrased as `Imply<T, Is: Bound>` (the `imply-hack` crate), and
//! `D: Dialect` is then the only bound a body names. A statement that differs only in how
//! the clock and row locks are spelled is written once beside its use, with placeholders
//! `Dialect::sql` fills in (`sql.rs`); one that differs in more (JSON parameters, physical
//! row ids, epoch buckets) is an associated constant, grouped by concern (`RecordStatements`
//! in `records/`, …), declared and documented beside its use and written out in each
//! dialect's file. A concern's store is implemented for every `D: Dialect` with its
//! statements, so that this file knows no concern.

use super::error::StoreError;
use super::group_commit::{GroupCommit, Member};
use super::target::DialectName;
use chrono::{DateTime, SecondsFormat, Utc};
use imply_hack::Imply;
use sqlx::migrate::{Migrate, Migrator};
use sqlx::query::Query;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Transaction, Type};
use std::sync::Arc;

/// A SQL database the store runs on.
pub trait Dialect:
    Database
    + for<'c> Imply<&'c mut <Self as Database>::Connection, Is: Executor<'c, Database = Self>>
    + for<'q> Imply<<Self as Database>::Arguments<'q>, Is: IntoArguments<'q, Self>>
    + Imply<<Self as Database>::QueryResult, Is: RowsAffected>
    + Imply<<Self as Database>::Connection, Is: Migrate>
    + Imply<usize, Is: ColumnIndex<<Self as Database>::Row>>
    + for<'q> Imply<&'q str, Is: Encode<'q, Self> + Type<Self> + ColumnIndex<<Self as Database>::Row>>
    + for<'q> Imply<Option<&'q str>, Is: Encode<'q, Self> + Type<Self>>
    + for<'q> Imply<&'q [u8], Is: Encode<'q, Self> + Type<Self>>
    + for<'q> Imply<String, Is: Encode<'q, Self> + Decode<'q, Self> + Type<Self>>
    + for<'q> Imply<Vec<u8>, Is: Decode<'q, Self> + Type<Self>>
    + for<'q> Imply<bool, Is: Encode<'q, Self> + Decode<'q, Self> + Type<Self>>
    + for<'q> Imply<Option<bool>, Is: Encode<'q, Self>>
    + for<'q> Imply<Option<i64>, Is: Encode<'q, Self>>
    + for<'q> Imply<i16, Is: Encode<'q, Self> + Decode<'q, Self> + Type<Self>>
    + for<'q> Imply<i32, Is: Encode<'q, Self> + Decode<'q, Self> + Type<Self>>
    + for<'q> Imply<i64, Is: Encode<'q, Self> + Decode<'q, Self> + Type<Self>>
    + for<'q> Imply<f64, Is: Encode<'q, Self> + Decode<'q, Self> + Type<Self>>
    + for<'q> Imply<DateTime<Utc>, Is: Decode<'q, Self> + Type<Self>>
    + Send
    + Sync
{
    const DIALECT: DialectName;

    /// `template`, a statement written once for both dialects (`store/sql.rs`), in this
    /// dialect's spelling.
    fn sql(template: &'static str) -> &'static str {
        super::sql::expanded(Self::DIALECT, template)
    }

    /// This dialect's migrations, embedded in the binary. Running them on PostgreSQL takes an
    /// advisory lock, so that instances starting together take turns.
    fn migrator() -> &'static Migrator;

    /// `select count(*)` of the migrations table (0 or 1).
    const MIGRATIONS_TABLE_EXISTS: &'static str;
}

/// How many rows a statement wrote (sqlx has it on each driver's result type, not in a trait).
pub trait RowsAffected {
    fn rows_affected(&self) -> u64;
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows_affected(&self) -> u64 {
        self.rows_affected()
    }
}

/// Every concern's store trait, implemented once over one pool of either dialect.
///
/// Every write runs in an explicit transaction, even a single statement: a connection that
/// came back to the pool in a broken state (a cancelled `begin`, sqlx#4385) can then never
/// swallow an autocommit write and answer success. The exceptions are create_payment's claim
/// and completion on PostgreSQL (`KeyedPaymentStatements::CLAIM_PAYMENT_AT_ONCE`), each one
/// statement sent alone to save its BEGIN and COMMIT round trips (the hot path's two writes):
/// they rely on [`SqlStore::begin`] always finishing, which closes the one way sqlx#4385 left
/// a pooled connection inside a transaction; a transaction dropped unfinished has its
/// rollback run before its connection's next statement.
pub struct SqlStore<D: Dialect> {
    /// Reads outside transactions.
    pub(super) pool: Pool<D>,
    /// Where transactions begin: the same pool on PostgreSQL; on SQLite a pool of one
    /// connection, the single writer (see `sqlite::connect`).
    pub(super) writer: Pool<D>,
    /// SQLite: the writer's transactions share commits (`group_commit/`).
    group: Option<Arc<GroupCommit<D>>>,
}

/// A write transaction: the pool's own (PostgreSQL), or a caller's part of a shared commit
/// (SQLite, `group_commit/`). Statements run on `&mut *tx`, as on a sqlx transaction; dropped
/// without `commit`, it is rolled back.
pub enum WriteTx<D: Dialect> {
    Alone(Transaction<'static, D>),
    Shared(Member<D>),
}

impl<D: Dialect> WriteTx<D> {
    /// Commits: durable when it returns.
    pub async fn commit(self) -> Result<(), StoreError> {
        match self {
            WriteTx::Alone(tx) => Ok(tx.commit().await?),
            WriteTx::Shared(member) => member.commit().await,
        }
    }

    pub async fn rollback(self) -> Result<(), StoreError> {
        match self {
            WriteTx::Alone(tx) => Ok(tx.rollback().await?),
            WriteTx::Shared(member) => member.rollback().await,
        }
    }
}

impl<D: Dialect> std::ops::Deref for WriteTx<D> {
    type Target = D::Connection;

    fn deref(&self) -> &D::Connection {
        match self {
            WriteTx::Alone(tx) => tx,
            WriteTx::Shared(member) => member,
        }
    }
}

impl<D: Dialect> std::ops::DerefMut for WriteTx<D> {
    fn deref_mut(&mut self) -> &mut D::Connection {
        match self {
            WriteTx::Alone(tx) => tx,
            WriteTx::Shared(member) => member,
        }
    }
}

impl<D: Dialect> SqlStore<D> {
    /// Reads and transactions on one pool.
    pub fn new(pool: Pool<D>) -> Self {
        SqlStore {
            writer: pool.clone(),
            pool,
            group: None,
        }
    }

    /// Reads on `pool`, transactions on `writer` (a pool of one connection), sharing commits;
    /// the WAL started over past `restart_wal_at` frames.
    pub fn with_group_writer(pool: Pool<D>, writer: Pool<D>, restart_wal_at: i64) -> Self {
        SqlStore {
            group: Some(Arc::new(GroupCommit::over(
                writer.clone(),
                pool.clone(),
                restart_wal_at,
            ))),
            pool,
            writer,
        }
    }

    /// Closes both pools, waiting for connections in use to be returned.
    pub(super) async fn close_pools(&self) {
        if let Some(group) = &self.group {
            group.close().await;
        }
        self.pool.close().await;
        self.writer.close().await;
    }

    /// A transaction, begun on a task of its own. sqlx 0.8 leaves a pooled connection inside
    /// a transaction when `begin` is cancelled between sending `BEGIN` and reading its answer
    /// (sqlx#4385, fixed upstream by #4394, in no release): the next borrower's statements
    /// would then run in that transaction and hold its locks. On its own task `begin` always
    /// finishes; a caller cancelled meanwhile drops the transaction it did not receive, and
    /// dropping rolls it back.
    ///
    /// SQLite's writer shares commits (`group_commit/`), and its group's transaction is
    /// `BEGIN IMMEDIATE`: the write lock is held from the start, so that a cleanup batch's
    /// time after `begin` is the time it holds the lock.
    pub(super) async fn begin(&self) -> Result<WriteTx<D>, StoreError> {
        if let Some(group) = &self.group {
            return Ok(WriteTx::Shared(group.begin().await?));
        }
        let pool = self.writer.clone();
        let begun = tokio::spawn(async move { pool.begin().await })
            .await
            .map_err(|stopped| StoreError::Corrupt(format!("beginning a transaction: {stopped}")))?;
        Ok(WriteTx::Alone(begun?))
    }

    /// A write transaction whose first statement is `first` (expanded), and that statement as
    /// it is to be sent: on SQLite with the savepoint's opening in front of it, one hand-off to
    /// sqlx's worker thread instead of two (`group_commit/`).
    pub(super) async fn begin_with(
        &self,
        first: &'static str,
    ) -> Result<(WriteTx<D>, &'static str), StoreError> {
        if let Some(group) = &self.group {
            let (member, first) = group.begin_with(first).await?;
            return Ok((WriteTx::Shared(member), first));
        }
        Ok((self.begin().await?, first))
    }

    /// One write statement in its own transaction; the rows it affected.
    pub(super) async fn write_one<'q>(
        &self,
        statement: Query<'q, D, <D as Database>::Arguments<'q>>,
    ) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        let affected = statement.execute(&mut *tx).await?.rows_affected();
        tx.commit().await?;
        Ok(affected)
    }
}

/// A timestamp in the one text form both dialects compare correctly (SQLite stores this text;
/// PostgreSQL casts it).
pub fn rfc3339_millis(at: DateTime<Utc>) -> String {
    // chrono's RFC 3339 writer: `format` would parse a strftime pattern on every call, and
    // the journal formats a timestamp per request.
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::rfc3339_millis;
    use chrono::{DateTime, NaiveDate, Utc};

    #[test]
    fn timestamps_are_written_with_milliseconds_truncated_and_a_z() {
        let at = |year, month, day, nanos| -> DateTime<Utc> {
            NaiveDate::from_ymd_opt(year, month, day)
                .and_then(|date| date.and_hms_nano_opt(23, 59, 58, nanos))
                .expect("a valid instant")
                .and_utc()
        };
        for (instant, text) in [
            (at(2026, 12, 1, 0), "2026-12-01T23:59:58.000Z"),
            (at(2026, 1, 9, 7_000_000), "2026-01-09T23:59:58.007Z"),
            (at(2026, 6, 30, 999_999_999), "2026-06-30T23:59:58.999Z"),
            (at(1, 1, 1, 120_000_001), "0001-01-01T23:59:58.120Z"),
            (at(9999, 12, 31, 999_000_000), "9999-12-31T23:59:58.999Z"),
        ] {
            assert_eq!(rfc3339_millis(instant), text);
            assert_eq!(
                rfc3339_millis(instant),
                instant.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
            );
        }
    }
}
