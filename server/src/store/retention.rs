//! The stored responses' lifecycle: the sealing keys instances use, purging bodies after the
//! window (records become EXPIRED tombstones) and deleting tombstones after retention. One
//! body for both dialects, like `impl_store!`; the statements differ in [`RetentionSql`].

use crate::store::StoreError;
use chrono::{DateTime, Utc};
use domain::scope::Scope;
use std::time::Duration;

/// One cleanup batch: how many rows it took, and how long its transaction held its locks
/// (from the moment it had them to its commit; waiting for them is not holding them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOutcome {
    pub rows: u64,
    pub held: Duration,
}

/// Work the cleanup has not done yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionBacklog {
    /// Settled records past their window whose body is still stored.
    pub to_purge: i64,
    /// Tombstones past their retention.
    pub to_delete: i64,
}

/// A sealing key some instance used against this database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseKeyCheck {
    pub key_id: String,
    /// A known plaintext sealed with the key; see `sealing::KEY_CHECK_PLAINTEXT`.
    pub probe: Vec<u8>,
    pub last_sealed_at: DateTime<Utc>,
}

#[async_trait::async_trait]
pub trait RetentionStore {
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

    async fn retention_backlog(&self, retention: Duration) -> Result<RetentionBacklog, StoreError>;

    /// Notes on the record that a retry arrived after its window (the `reject` policy; a
    /// renewal by `new_operation` notes it in the claim).
    async fn note_expired_retry(&self, scope: &Scope) -> Result<(), StoreError>;

    async fn response_key_checks(&self) -> Result<Vec<ResponseKeyCheck>, StoreError>;

    /// Registers this instance's sealing key (its probe is kept from the first registration)
    /// and notes that it seals with it now.
    async fn note_sealing_key(&self, key_id: &str, probe: &[u8]) -> Result<(), StoreError>;
}

/// Retention statements that differ by dialect.
pub(super) struct RetentionSql {
    /// How a cleanup transaction starts: SQLite takes its one write lock at once (`BEGIN
    /// IMMEDIATE`), so that the time after it is the time the lock is held.
    pub begin: &'static str,
    /// Statements run first in a cleanup transaction to bound it, `$1` the bound as text
    /// (`"250ms"`); empty where the dialect has no such setting.
    pub bound_transaction: &'static [&'static str],
    /// `$1` batch size: tombstones the oldest settled records past their window (a trigger
    /// deletes each one's body in the same statement).
    pub purge_batch: &'static str,
    /// `$1` retention seconds, `$2` batch size.
    pub delete_tombstones: &'static str,
    /// `$1` retention seconds: (records to purge, tombstones to delete).
    pub backlog: &'static str,
    /// `$1` key id, `$2` probe.
    pub note_sealing_key: &'static str,
    /// `$1`..`$3` scope.
    pub note_expired_retry: &'static str,
}

/// One purge batch: the oldest settled records past their window (found through the partial
/// index `idempotency_records_to_purge`) become tombstones that keep scope, key, fingerprint,
/// outcome, resource id and provider reference. The batch's rows are named by their physical
/// row id (`$row_id`; `$open` and `$close` around the sub-select make the dialect's "row id
/// among", `$lock` is its row-lock clause), so each batch touches only its own rows, never a
/// scan of the table.
macro_rules! purge_batch {
    ($now:expr, $row_id:expr, $open:expr, $lock:expr, $close:expr) => {
        concat!(
            "update idempotency_records set settled_status = status, status = 'EXPIRED', ",
            "canonical_command = '', lease_owner = null, locked_until = null, purged_at = ",
            $now,
            ", updated_at = ",
            $now,
            " where ",
            $row_id,
            $open,
            "select ",
            $row_id,
            " from idempotency_records ",
            "where status in ('COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE') and expires_at <= ",
            $now,
            " order by expires_at limit $1",
            $lock,
            $close
        )
    };
}
pub(super) use purge_batch;

macro_rules! impl_retention_store {
    ($store:ty, $db:ty, $sql:expr) => {
        impl $store {
            /// A cleanup transaction holding its write lock (SQLite) and bounded where the
            /// dialect can bound it; with the moment it started holding.
            async fn bounded_transaction(
                &self,
                bound: std::time::Duration,
            ) -> Result<(sqlx::Transaction<'static, $db>, std::time::Instant), $crate::store::StoreError>
            {
                let mut tx = self.pool.begin_with($sql.begin).await?;
                let holding_since = std::time::Instant::now();
                let bound = format!("{}ms", bound.as_millis().max(1));
                for statement in $sql.bound_transaction {
                    sqlx::query(statement)
                        .bind(bound.as_str())
                        .execute(&mut *tx)
                        .await?;
                }
                Ok((tx, holding_since))
            }
        }

        #[async_trait::async_trait]
        impl $crate::store::retention::RetentionStore for $store {
            async fn purge_expired(
                &self,
                limit: i64,
                bound: std::time::Duration,
            ) -> Result<$crate::store::retention::BatchOutcome, $crate::store::StoreError> {
                let (mut tx, holding_since) = self.bounded_transaction(bound).await?;
                let rows = sqlx::query($sql.purge_batch)
                    .bind(limit)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                tx.commit().await?;
                Ok($crate::store::retention::BatchOutcome {
                    rows,
                    held: holding_since.elapsed(),
                })
            }

            async fn delete_tombstones(
                &self,
                retention: std::time::Duration,
                limit: i64,
                bound: std::time::Duration,
            ) -> Result<$crate::store::retention::BatchOutcome, $crate::store::StoreError> {
                let (mut tx, holding_since) = self.bounded_transaction(bound).await?;
                let rows = sqlx::query($sql.delete_tombstones)
                    .bind(retention.as_secs_f64())
                    .bind(limit)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                tx.commit().await?;
                Ok($crate::store::retention::BatchOutcome {
                    rows,
                    held: holding_since.elapsed(),
                })
            }

            async fn retention_backlog(
                &self,
                retention: std::time::Duration,
            ) -> Result<$crate::store::retention::RetentionBacklog, $crate::store::StoreError> {
                let (to_purge, to_delete): (i64, i64) = sqlx::query_as($sql.backlog)
                    .bind(retention.as_secs_f64())
                    .fetch_one(&self.pool)
                    .await?;
                Ok($crate::store::retention::RetentionBacklog {
                    to_purge,
                    to_delete,
                })
            }

            async fn note_expired_retry(
                &self,
                scope: &domain::scope::Scope,
            ) -> Result<(), $crate::store::StoreError> {
                $crate::store::shared::write_one!(
                    self.pool,
                    $sql.note_expired_retry,
                    scope.tenant_id.as_str(),
                    scope.operation.as_str(),
                    scope.key.as_str()
                )
                .await?;
                Ok(())
            }

            async fn response_key_checks(
                &self,
            ) -> Result<Vec<$crate::store::retention::ResponseKeyCheck>, $crate::store::StoreError> {
                let rows: Vec<(String, Vec<u8>, chrono::DateTime<chrono::Utc>)> =
                    sqlx::query_as($crate::store::retention::RESPONSE_KEY_CHECKS)
                        .fetch_all(&self.pool)
                        .await?;
                Ok(rows
                    .into_iter()
                    .map(
                        |(key_id, probe, last_sealed_at)| $crate::store::retention::ResponseKeyCheck {
                            key_id,
                            probe,
                            last_sealed_at,
                        },
                    )
                    .collect())
            }

            async fn note_sealing_key(
                &self,
                key_id: &str,
                probe: &[u8],
            ) -> Result<(), $crate::store::StoreError> {
                $crate::store::shared::write_one!(self.pool, $sql.note_sealing_key, key_id, probe).await?;
                Ok(())
            }
        }
    };
}
pub(super) use impl_retention_store;

pub(super) const RESPONSE_KEY_CHECKS: &str =
    "select key_id, probe, last_sealed_at from response_key_checks order by key_id";
