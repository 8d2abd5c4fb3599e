use super::{APPLIED_MIGRATIONS, COUNT_RECORDS_BY_STATUS, Dialect, Readiness, Store, StoreError};
use app::dto::StatusCount;
use sqlx::SqlitePool;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

static MIGRATOR: Migrator = sqlx::migrate!("../migrations/sqlite");

/// The embedded store: one file, WAL so that readers never wait for the writer, a busy
/// timeout so that writers queue instead of failing, foreign keys enforced.
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    pub async fn connect_url(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url).map_err(StoreError::InvalidUrl)?;
        Self::connect(options).await
    }

    pub async fn open_file(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::DataDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        Self::connect(SqliteConnectOptions::new().filename(path)).await
    }

    async fn connect(options: SqliteConnectOptions) -> Result<Self, StoreError> {
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await?;
        Ok(SqliteStore { pool })
    }
}

#[async_trait::async_trait]
impl Store for SqliteStore {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        Ok(MIGRATOR.run(&self.pool).await?)
    }

    async fn readiness(&self) -> Result<Readiness, StoreError> {
        let migrations_tables: i64 = sqlx::query_scalar(
            "select count(*) from sqlite_master where type = 'table' and name = '_sqlx_migrations'",
        )
        .fetch_one(&self.pool)
        .await?;
        let applied: Vec<i64> = if migrations_tables > 0 {
            sqlx::query_scalar(APPLIED_MIGRATIONS)
                .fetch_all(&self.pool)
                .await?
        } else {
            Vec::new()
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
