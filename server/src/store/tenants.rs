//! Tenants, their API keys and accounts: what the command line creates and revokes, and the
//! look-up that authenticates every API request.

use super::dialect::{Dialect, SqlStore};
use super::error::StoreError;
use crate::auth::api_key::{ApiKeyHash, NewApiKey};
use domain::payment::NewAccount;
use domain::tenant::{ApiKeyId, Principal, TenantId, TenantName};

#[async_trait::async_trait]
pub trait TenantStore: Send + Sync {
    /// `Err(AlreadyExists)` when a tenant has this name.
    async fn create_tenant(
        &self,
        id: &TenantId,
        name: &TenantName,
        require_idempotency_key: bool,
    ) -> Result<(), StoreError>;

    async fn tenant_id_by_name(&self, name: &TenantName) -> Result<Option<TenantId>, StoreError>;

    /// Stores the key's id and hash (never the key itself).
    async fn create_api_key(&self, tenant_id: &TenantId, key: &NewApiKey) -> Result<(), StoreError>;

    /// The principal of an active (not revoked) key with this hash. The look-up is by the
    /// hash's exact value, so its time says nothing about how close a guess was.
    async fn authenticate_api_key(&self, hash: &ApiKeyHash) -> Result<Option<Principal>, StoreError>;

    /// `false` when no active key has this id.
    async fn revoke_api_key(&self, id: &ApiKeyId) -> Result<bool, StoreError>;

    /// `Err(AlreadyExists)` when the tenant already has an account with this id.
    async fn create_account(&self, account: &NewAccount) -> Result<(), StoreError>;
}

/// Tenant statements that differ by dialect.
pub trait TenantStatements {
    /// `$1` api key id: revoked now, unless it already was.
    const REVOKE_API_KEY: &'static str;
}

#[async_trait::async_trait]
impl<D: Dialect + TenantStatements> TenantStore for SqlStore<D> {
    async fn create_tenant(
        &self,
        id: &TenantId,
        name: &TenantName,
        require_idempotency_key: bool,
    ) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query("insert into tenants (id, name, require_idempotency_key) values ($1, $2, $3)")
                .bind(id.as_str())
                .bind(name.as_str())
                .bind(require_idempotency_key),
        )
        .await?;
        Ok(())
    }

    async fn tenant_id_by_name(&self, name: &TenantName) -> Result<Option<TenantId>, StoreError> {
        let id: Option<String> = sqlx::query_scalar("select id from tenants where name = $1")
            .bind(name.as_str())
            .fetch_optional(&self.pool)
            .await?;
        Ok(id.map(TenantId::from_stored))
    }

    async fn create_api_key(&self, tenant_id: &TenantId, key: &NewApiKey) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query("insert into api_keys (id, tenant_id, key_hash) values ($1, $2, $3)")
                .bind(key.id.as_str())
                .bind(tenant_id.as_str())
                .bind(key.hash.as_str()),
        )
        .await?;
        Ok(())
    }

    async fn authenticate_api_key(&self, hash: &ApiKeyHash) -> Result<Option<Principal>, StoreError> {
        let row: Option<(String, String, bool, String)> = sqlx::query_as(
            "select k.id, k.tenant_id, t.require_idempotency_key, t.pinned_api_version \
             from api_keys k join tenants t on t.id = k.tenant_id \
             where k.key_hash = $1 and k.revoked_at is null",
        )
        .bind(hash.as_str())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(
            |(api_key_id, tenant_id, require_idempotency_key, pinned_api_version)| Principal {
                tenant_id: TenantId::from_stored(tenant_id),
                api_key_id: ApiKeyId::from_stored(api_key_id),
                require_idempotency_key,
                pinned_api_version,
            },
        ))
    }

    async fn revoke_api_key(&self, id: &ApiKeyId) -> Result<bool, StoreError> {
        Ok(self
            .write_one(sqlx::query(D::REVOKE_API_KEY).bind(id.as_str()))
            .await?
            == 1)
    }

    async fn create_account(&self, account: &NewAccount) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(
                "insert into accounts (tenant_id, id, currency, balance_minor) values ($1, $2, $3, $4)",
            )
            .bind(account.tenant_id.as_str())
            .bind(account.id.as_str())
            .bind(account.balance.currency.code())
            .bind(account.balance.minor_units),
        )
        .await?;
        Ok(())
    }
}
