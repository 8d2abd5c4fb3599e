//! Tenants, their API keys and accounts: what the command line and the console's
//! administration create, change and revoke (each change audited in its transaction), and the
//! look-up that authenticates every API request.

use super::dialect::{Dialect, SqlStore};
use super::error::StoreError;
use crate::auth::api_key::{ApiKeyHash, NewApiKey};
use chrono::{DateTime, Utc};
use domain::operator::AuditEntry;
use domain::payment::NewAccount;
use domain::tenant::{ApiKeyId, Principal, TenantId, TenantName};

/// A tenant as its administration lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSummary {
    pub id: TenantId,
    pub name: String,
    pub require_idempotency_key: bool,
    pub created_at: DateTime<Utc>,
}

/// An API key as its administration lists it (never the key, never its hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeySummary {
    pub id: ApiKeyId,
    pub tenant_id: TenantId,
    /// An operator's username, `cli:<user>`, or `None` for keys from before it was kept.
    pub created_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[async_trait::async_trait]
pub trait TenantStore: Send + Sync {
    /// `Err(AlreadyExists)` when a tenant has this name.
    async fn create_tenant(
        &self,
        id: &TenantId,
        name: &TenantName,
        require_idempotency_key: bool,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;

    /// `false` when there is no such tenant.
    async fn set_idempotency_key_required(
        &self,
        id: &TenantId,
        required: bool,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;

    async fn tenant_id_by_name(&self, name: &TenantName) -> Result<Option<TenantId>, StoreError>;

    /// Every tenant, by name.
    async fn list_tenants(&self) -> Result<Vec<TenantSummary>, StoreError>;

    /// Stores the key's id and hash (never the key itself), made by the audit entry's actor.
    async fn create_api_key(
        &self,
        tenant_id: &TenantId,
        key: &NewApiKey,
        audit: &AuditEntry,
    ) -> Result<(), StoreError>;

    /// Every tenant's keys, newest first, revoked ones included.
    async fn list_api_keys(&self) -> Result<Vec<ApiKeySummary>, StoreError>;

    /// The principal of an active (not revoked) key with this hash. The look-up is by the
    /// hash's exact value, so its time says nothing about how close a guess was.
    async fn authenticate_api_key(&self, hash: &ApiKeyHash) -> Result<Option<Principal>, StoreError>;

    /// `false` when no active key has this id.
    async fn revoke_api_key(&self, id: &ApiKeyId, audit: &AuditEntry) -> Result<bool, StoreError>;

    /// `Err(AlreadyExists)` when the tenant already has an account with this id.
    async fn create_account(&self, account: &NewAccount) -> Result<(), StoreError>;
}

/// `$1` api key id: revoked now, unless it already was.
const REVOKE_API_KEY: &str = "update api_keys set revoked_at = {now} where id = $1 and revoked_at is null";

#[async_trait::async_trait]
impl<D: Dialect> TenantStore for SqlStore<D> {
    async fn create_tenant(
        &self,
        id: &TenantId,
        name: &TenantName,
        require_idempotency_key: bool,
        audit: &AuditEntry,
    ) -> Result<(), StoreError> {
        self.write_audited(
            sqlx::query("insert into tenants (id, name, require_idempotency_key) values ($1, $2, $3)")
                .bind(id.as_str())
                .bind(name.as_str())
                .bind(require_idempotency_key),
            audit,
        )
        .await?;
        Ok(())
    }

    async fn set_idempotency_key_required(
        &self,
        id: &TenantId,
        required: bool,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError> {
        let statement = sqlx::query("update tenants set require_idempotency_key = $1 where id = $2")
            .bind(required)
            .bind(id.as_str());
        Ok(self.write_audited(statement, audit).await? == 1)
    }

    async fn list_tenants(&self) -> Result<Vec<TenantSummary>, StoreError> {
        let rows: Vec<TenantRow> =
            sqlx::query_as("select id, name, require_idempotency_key, created_at from tenants order by name")
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .into_iter()
            .map(|row| TenantSummary {
                id: TenantId::from_stored(row.id),
                name: row.name,
                require_idempotency_key: row.require_idempotency_key,
                created_at: row.created_at,
            })
            .collect())
    }

    async fn tenant_id_by_name(&self, name: &TenantName) -> Result<Option<TenantId>, StoreError> {
        let id: Option<String> = sqlx::query_scalar("select id from tenants where name = $1")
            .bind(name.as_str())
            .fetch_optional(&self.pool)
            .await?;
        Ok(id.map(TenantId::from_stored))
    }

    async fn create_api_key(
        &self,
        tenant_id: &TenantId,
        key: &NewApiKey,
        audit: &AuditEntry,
    ) -> Result<(), StoreError> {
        self.write_audited(
            sqlx::query("insert into api_keys (id, tenant_id, key_hash, created_by) values ($1, $2, $3, $4)")
                .bind(key.id.as_str())
                .bind(tenant_id.as_str())
                .bind(key.hash.as_str())
                .bind(audit.actor.as_str()),
            audit,
        )
        .await?;
        Ok(())
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeySummary>, StoreError> {
        let rows: Vec<ApiKeyRow> = sqlx::query_as(
            "select id, tenant_id, created_by, created_at, last_used_at, revoked_at from api_keys \
             order by created_at desc, id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| ApiKeySummary {
                id: ApiKeyId::from_stored(row.id),
                tenant_id: TenantId::from_stored(row.tenant_id),
                created_by: row.created_by,
                created_at: row.created_at,
                last_used_at: row.last_used_at,
                revoked_at: row.revoked_at,
            })
            .collect())
    }

    async fn authenticate_api_key(&self, hash: &ApiKeyHash) -> Result<Option<Principal>, StoreError> {
        let row: Option<PrincipalRow> = sqlx::query_as(
            "select k.id as api_key_id, k.tenant_id, t.require_idempotency_key, t.pinned_api_version \
             from api_keys k join tenants t on t.id = k.tenant_id \
             where k.key_hash = $1 and k.revoked_at is null",
        )
        .bind(hash.as_str())
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| Principal {
            tenant_id: TenantId::from_stored(row.tenant_id),
            api_key_id: ApiKeyId::from_stored(row.api_key_id),
            require_idempotency_key: row.require_idempotency_key,
            pinned_api_version: row.pinned_api_version,
        }))
    }

    async fn revoke_api_key(&self, id: &ApiKeyId, audit: &AuditEntry) -> Result<bool, StoreError> {
        Ok(self
            .write_audited(sqlx::query(D::sql(REVOKE_API_KEY)).bind(id.as_str()), audit)
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

/// A row of `tenants`.
#[derive(sqlx::FromRow)]
struct TenantRow {
    id: String,
    name: String,
    require_idempotency_key: bool,
    created_at: DateTime<Utc>,
}

/// A row of `api_keys`, without its hash.
#[derive(sqlx::FromRow)]
struct ApiKeyRow {
    id: String,
    tenant_id: String,
    created_by: Option<String>,
    created_at: DateTime<Utc>,
    last_used_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
}

/// A live API key with its tenant's settings.
#[derive(sqlx::FromRow)]
struct PrincipalRow {
    api_key_id: String,
    tenant_id: String,
    require_idempotency_key: bool,
    pinned_api_version: String,
}
