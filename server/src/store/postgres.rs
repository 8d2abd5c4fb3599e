use super::{APPLIED_MIGRATIONS, COUNT_RECORDS_BY_STATUS, Dialect, Readiness, Store, StoreError};
use app::dto::StatusCount;
use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::str::FromStr;
use std::time::Duration;

static MIGRATOR: Migrator = sqlx::migrate!("../migrations/postgres");

/// The production store: several `serve` instances share one PostgreSQL database.
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url).map_err(StoreError::InvalidUrl)?;
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(3))
            .connect_with(options)
            .await?;
        Ok(PostgresStore { pool })
    }
}

#[async_trait::async_trait]
impl Store for PostgresStore {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        // The migrator holds an advisory lock, so instances starting together take turns.
        Ok(MIGRATOR.run(&self.pool).await?)
    }

    async fn readiness(&self) -> Result<Readiness, StoreError> {
        sqlx::query("select 1").execute(&self.pool).await?;
        let migrations_table: Option<String> =
            sqlx::query_scalar("select to_regclass('_sqlx_migrations')::text")
                .fetch_one(&self.pool)
                .await?;
        let applied: Vec<i64> = match migrations_table {
            Some(_) => {
                sqlx::query_scalar(APPLIED_MIGRATIONS)
                    .fetch_all(&self.pool)
                    .await?
            }
            None => Vec::new(),
        };
        Ok(super::readiness_of(&applied, &MIGRATOR))
    }

    async fn count_records_by_status(&self) -> Result<Vec<StatusCount>, StoreError> {
        let rows = sqlx::query_as(COUNT_RECORDS_BY_STATUS)
            .fetch_all(&self.pool)
            .await?;
        super::zero_filled_counts(rows)
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
