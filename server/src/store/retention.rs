//! The stored responses' lifecycle: purging bodies after the window (records become EXPIRED
//! tombstones) and deleting tombstones after retention; and the request journal's, deleted
//! once its records' tombstones may be gone.

use super::dialect::{Dialect, RowsAffected, SqlStore};
use super::error::StoreError;
use sqlx::Database;
use sqlx::query::Query;
use std::time::{Duration, Instant};

/// One cleanup batch: how many rows it took, and how long its transaction held its locks
/// (from the moment it had them to its commit; waiting for them is not holding them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOutcome {
    pub rows: u64,
    pub held: Duration,
}

/// Work the cleanup has not done yet (the row of [`RetentionStatements::BACKLOG`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct RetentionBacklog {
    /// Settled records past their window whose body is still stored.
    pub to_purge: i64,
    /// Tombstones past their retention.
    pub to_delete: i64,
}

#[async_trait::async_trait]
pub trait RetentionStore: Send + Sync {
    /// Turns up to `limit` settled records past their window into EXPIRED tombstones (body
    /// deleted, canonical command emptied, outcome kept in `settled_status`), oldest first,
    /// in one transaction that `bound` limits where the database can (PostgreSQL: statement
    /// and lock timeouts; an overrun rolls back).
    async fn purge_expired(&self, limit: i64, bound: Duration) -> Result<BatchOutcome, StoreError>;

    /// Deletes up to `limit` tombstones whose window ended more than `retention` ago.
    async fn delete_tombstones(
        &self,
        retention: Duration,
        limit: i64,
        bound: Duration,
    ) -> Result<BatchOutcome, StoreError>;

    /// Deletes up to `limit` request journal entries and up to `limit` minutes of replay
    /// counts older than `older_than`, oldest first, in a batch each.
    async fn delete_journal(
        &self,
        older_than: Duration,
        limit: i64,
        bound: Duration,
    ) -> Result<BatchOutcome, StoreError>;

    async fn retention_backlog(&self, retention: Duration) -> Result<RetentionBacklog, StoreError>;
}

/// Retention statements that differ by dialect.
pub trait RetentionStatements {
    /// Statements run first in a cleanup transaction to bound it, `$1` the bound as text
    /// (`"250ms"`); empty where the dialect has no such setting.
    const BOUND_CLEANUP: &'static [&'static str];
    /// `$1` batch size: the oldest settled records past their window (found through the
    /// partial index `idempotency_records_to_purge`) become tombstones that keep scope, key,
    /// fingerprint, outcome, resource id and provider reference (a trigger deletes each one's
    /// body in the same statement). The batch's rows are named by their physical row id, so
    /// each batch touches only its own rows, never a scan of the table.
    const PURGE_BATCH: &'static str;
    /// `$1` retention seconds, `$2` batch size.
    const DELETE_TOMBSTONES: &'static str;
    /// `$1` age in seconds, `$2` batch size: the oldest journal entries older than that (found
    /// through the index on `at`), named by their physical row id.
    const DELETE_JOURNAL: &'static str;
    /// `$1` age in seconds, `$2` batch size: the oldest minutes of replay counts older than
    /// that, named by their physical row id.
    const DELETE_REPLAYS: &'static str;
}

/// `$1` retention seconds: (records to purge, tombstones to delete).
const BACKLOG: &str = "select (select count(*) from idempotency_records where status in ('COMPLETED', \
     'FAILED_REPLAYABLE', 'FAILED_RETRYABLE') and expires_at <= {now}) as to_purge, (select \
     count(*) from idempotency_records where status = 'EXPIRED' and expires_at <= {now-$1}) as \
     to_delete";

impl<D: Dialect + RetentionStatements> SqlStore<D> {
    /// One cleanup batch: `statement` in a transaction holding its write lock (SQLite) and
    /// bounded where the dialect can bound it; the rows it wrote and how long it held.
    async fn bounded_batch<'q>(
        &self,
        bound: Duration,
        statement: Query<'q, D, <D as Database>::Arguments<'q>>,
    ) -> Result<BatchOutcome, StoreError> {
        let mut tx = self.begin().await?;
        let holding_since = Instant::now();
        let bound = format!("{}ms", bound.as_millis().max(1));
        for setting in D::BOUND_CLEANUP {
            sqlx::query(setting)
                .bind(bound.as_str())
                .execute(&mut *tx)
                .await?;
        }
        let rows = statement.execute(&mut *tx).await?.rows_affected();
        tx.commit().await?;
        Ok(BatchOutcome {
            rows,
            held: holding_since.elapsed(),
        })
    }
}

#[async_trait::async_trait]
impl<D: Dialect + RetentionStatements> RetentionStore for SqlStore<D> {
    async fn purge_expired(&self, limit: i64, bound: Duration) -> Result<BatchOutcome, StoreError> {
        self.bounded_batch(bound, sqlx::query(D::PURGE_BATCH).bind(limit))
            .await
    }

    async fn delete_tombstones(
        &self,
        retention: Duration,
        limit: i64,
        bound: Duration,
    ) -> Result<BatchOutcome, StoreError> {
        let statement = sqlx::query(D::DELETE_TOMBSTONES)
            .bind(retention.as_secs_f64())
            .bind(limit);
        self.bounded_batch(bound, statement).await
    }

    async fn delete_journal(
        &self,
        older_than: Duration,
        limit: i64,
        bound: Duration,
    ) -> Result<BatchOutcome, StoreError> {
        let mut deleted = BatchOutcome {
            rows: 0,
            held: Duration::ZERO,
        };
        for statement in [D::DELETE_JOURNAL, D::DELETE_REPLAYS] {
            let statement = sqlx::query(statement).bind(older_than.as_secs_f64()).bind(limit);
            let batch = self.bounded_batch(bound, statement).await?;
            deleted.rows += batch.rows;
            deleted.held = deleted.held.max(batch.held);
        }
        Ok(deleted)
    }

    async fn retention_backlog(&self, retention: Duration) -> Result<RetentionBacklog, StoreError> {
        Ok(sqlx::query_as(D::sql(BACKLOG))
            .bind(retention.as_secs_f64())
            .fetch_one(&self.pool)
            .await?)
    }
}
