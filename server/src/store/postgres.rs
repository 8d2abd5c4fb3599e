use super::{
    APPLIED_MIGRATIONS, AUTHENTICATE_API_KEY, COUNT_RECORDS_BY_STATUS, Dialect, INSERT_ACCOUNT,
    INSERT_API_KEY, INSERT_TENANT, PrincipalRow, Readiness, Store, StoreError, TENANT_ID_BY_NAME,
};
use crate::auth::Principal;
use crate::auth::api_key::{ApiKeyHash, ApiKeyId, NewApiKey};
use crate::auth::tenant::{TenantId, TenantName};
use crate::payments::account::NewAccount;
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

    async fn create_tenant(&self, id: &TenantId, name: &TenantName) -> Result<(), StoreError> {
        sqlx::query(INSERT_TENANT)
            .bind(id.as_str())
            .bind(name.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn tenant_id_by_name(&self, name: &TenantName) -> Result<Option<TenantId>, StoreError> {
        let id: Option<String> = sqlx::query_scalar(TENANT_ID_BY_NAME)
            .bind(name.as_str())
            .fetch_optional(&self.pool)
            .await?;
        Ok(id.map(TenantId::from_stored))
    }

    async fn create_api_key(&self, tenant_id: &TenantId, key: &NewApiKey) -> Result<(), StoreError> {
        sqlx::query(INSERT_API_KEY)
            .bind(key.id.as_str())
            .bind(tenant_id.as_str())
            .bind(key.hash.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn authenticate_api_key(&self, hash: &ApiKeyHash) -> Result<Option<Principal>, StoreError> {
        let row: Option<PrincipalRow> = sqlx::query_as(AUTHENTICATE_API_KEY)
            .bind(hash.as_str())
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(super::principal_of))
    }

    async fn revoke_api_key(&self, id: &ApiKeyId) -> Result<bool, StoreError> {
        let revoked =
            sqlx::query("update api_keys set revoked_at = now() where id = $1 and revoked_at is null")
                .bind(id.as_str())
                .execute(&self.pool)
                .await?;
        Ok(revoked.rows_affected() == 1)
    }

    async fn create_account(&self, account: &NewAccount) -> Result<(), StoreError> {
        sqlx::query(INSERT_ACCOUNT)
            .bind(account.tenant_id.as_str())
            .bind(account.id.as_str())
            .bind(account.balance.currency.code())
            .bind(account.balance.minor_units)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
