//! Storage: small traits, one per concern and shaped for the code that uses it, implemented
//! once over either SQL database (PostgreSQL in production, an embedded SQLite file by
//! default) by [`SqlStore`], generic over the [`Dialect`]. The conformance suite
//! (`server/tests/it/store_conformance.rs` and the other `conformance!` tests) runs every body
//! against both.
//!
//! | trait | used by |
//! |---|---|
//! | [`RecordStore`] | the engine, whatever the operation: look-ups, owners' fenced writes, takeovers |
//! | [`KeyedPaymentStore`] | the engine: create_payment's claim and completion, a key's release |
//! | [`PaymentStore`] | the engine and the API: payments, their settlement, accounts |
//! | [`RefundStore`] | the engine and the API: refunds, claimed and completed with their records |
//! | [`TenantStore`] | the command line and the API's authentication |
//! | [`EventStore`] | the outbox publisher, the consumers, the console's events page |
//! | [`ConsoleStore`], [`HistoryStore`] | the console's reads; a record's whole story |
//! | [`MetricsStore`] | outcome counts, the request journal, `/metrics` gauges |
//! | [`OperatorStore`] | operators, sessions and the audit log |
//! | [`ApprovalStore`], [`BulkStore`] | the console's two-admin overrides and bulk jobs |
//! | [`RetentionStore`] | the cleanup worker |
//! | [`SealingKeyStore`] | the response sealer: keys in use, live instances and their keys |
//!
//! Time comparisons that matter (leases, windows) use the database's clock, never an
//! instance's, so that several `serve` instances agree. Rows come back as the domain's types
//! or as plain rows of this module; nothing here knows HTTP or the console's view models.

pub mod approvals;
pub mod bulk;
pub mod console;
mod dialect;
mod error;
pub mod events;
mod group_commit;
pub mod history;
pub mod metrics;
pub mod operators;
pub mod payments;
mod postgres;
pub mod records;
pub mod refunds;
pub mod retention;
pub mod sealing;
mod sql;
mod sqlite;
mod target;
pub mod tenants;

pub use approvals::ApprovalStore;
pub use bulk::BulkStore;
pub use console::ConsoleStore;
pub use dialect::{Dialect, SqlStore, rfc3339_millis};
pub use error::StoreError;
pub use events::EventStore;
pub use history::HistoryStore;
pub use metrics::MetricsStore;
pub use operators::OperatorStore;
pub use payments::PaymentStore;
pub use payments::keyed::KeyedPaymentStore;
pub use records::RecordStore;
pub use refunds::RefundStore;
pub use retention::RetentionStore;
pub use sealing::SealingKeyStore;
pub use target::{DatabaseTarget, DialectName};
pub use tenants::TenantStore;

use std::sync::Arc;

/// Whether the store can serve traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    MigrationsPending { applied: usize, expected: usize },
}

/// Every concern's store, and the database itself (migrations, readiness, closing). What a
/// component needs is one of the concern traits; this one is for what builds them.
#[async_trait::async_trait]
pub trait Store:
    RecordStore
    + RefundStore
    + PaymentStore
    + KeyedPaymentStore
    + TenantStore
    + EventStore
    + ConsoleStore
    + HistoryStore
    + MetricsStore
    + OperatorStore
    + ApprovalStore
    + BulkStore
    + RetentionStore
    + SealingKeyStore
    + Send
    + Sync
    + 'static
{
    fn dialect(&self) -> DialectName;

    /// Applies every pending migration of this dialect.
    async fn migrate(&self) -> Result<(), StoreError>;

    /// `Err(Unavailable)` when the database cannot be reached.
    async fn readiness(&self) -> Result<Readiness, StoreError>;

    /// Closes the pool, waiting for connections in use to be returned.
    async fn close(&self);
}

#[async_trait::async_trait]
impl<D> Store for SqlStore<D>
where
    D: Dialect
        + records::RecordStatements
        + payments::PaymentStatements
        + payments::keyed::KeyedPaymentStatements
        + events::EventStatements
        + console::ConsoleStatements
        + metrics::MetricsStatements
        + operators::OperatorStatements
        + bulk::BulkStatements
        + retention::RetentionStatements
        + sealing::SealingStatements,
{
    fn dialect(&self) -> DialectName {
        D::DIALECT
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        Ok(D::migrator().run(&self.pool).await?)
    }

    async fn readiness(&self) -> Result<Readiness, StoreError> {
        let tables: i64 = sqlx::query_scalar(D::MIGRATIONS_TABLE_EXISTS)
            .fetch_one(&self.pool)
            .await?;
        let applied: Vec<i64> = if tables > 0 {
            sqlx::query_scalar("select version from _sqlx_migrations where success")
                .fetch_all(&self.pool)
                .await?
        } else {
            Vec::new()
        };
        let expected: Vec<i64> = D::migrator().iter().map(|migration| migration.version).collect();
        let applied = expected
            .iter()
            .filter(|version| applied.contains(version))
            .count();
        Ok(if applied == expected.len() {
            Readiness::Ready
        } else {
            Readiness::MigrationsPending {
                applied,
                expected: expected.len(),
            }
        })
    }

    async fn close(&self) {
        self.close_pools().await;
    }
}

/// Opens the target's database (creating the embedded SQLite file and its directory on
/// first run) with at most `max_connections` to PostgreSQL (SQLite has its own fixed pools).
/// Migrations are not applied here: see [`Store::migrate`].
pub async fn open(target: &DatabaseTarget, max_connections: u32) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match target {
        DatabaseTarget::Postgres { url } => {
            Arc::new(SqlStore::new(postgres::connect(url, max_connections).await?))
        }
        DatabaseTarget::Sqlite { url } => Arc::new(sqlite::connect_url(url).await?),
        DatabaseTarget::EmbeddedSqlite { path } => Arc::new(sqlite::open_file(path).await?),
    })
}
