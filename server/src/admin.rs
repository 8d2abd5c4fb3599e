//! The CLI's administrative commands: tenants, API keys, accounts.

use crate::auth::api_key::{ApiKeyId, NewApiKey};
use crate::auth::tenant::{TenantId, TenantName};
use crate::cli::{AccountCommand, ApiKeyCommand, TenantCommand};
use crate::payments::account::NewAccount;
use crate::payments::command::AccountId;
use crate::payments::money::{Balance, Currency};
use crate::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("no tenant is named {0:?}")]
    UnknownTenant(String),
    #[error("a tenant named {0:?} already exists")]
    TenantExists(String),
    #[error("tenant {tenant:?} already has an account {account:?}")]
    AccountExists { tenant: String, account: String },
    #[error("no active API key has the id {0:?}")]
    UnknownApiKey(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn invalid(field: &str, problem: impl std::fmt::Display) -> AdminError {
    AdminError::InvalidArgument(format!("{field}: {problem}"))
}

async fn tenant_id(store: &dyn Store, name: &str) -> Result<TenantId, AdminError> {
    let parsed = TenantName::parse(name).map_err(|problem| invalid("--tenant", problem))?;
    store
        .tenant_id_by_name(&parsed)
        .await?
        .ok_or_else(|| AdminError::UnknownTenant(name.to_owned()))
}

/// Runs a tenant command; returns what to print on standard output.
pub async fn tenant(store: &dyn Store, command: TenantCommand) -> Result<String, AdminError> {
    match command {
        TenantCommand::Create {
            name,
            optional_idempotency_key,
        } => {
            let parsed = TenantName::parse(&name).map_err(|problem| invalid("NAME", problem))?;
            let id = TenantId::generate();
            match store.create_tenant(&id, &parsed, !optional_idempotency_key).await {
                Err(StoreError::AlreadyExists) => Err(AdminError::TenantExists(name)),
                other => other.map_err(AdminError::from),
            }?;
            tracing::info!(tenant = %parsed, tenant_id = %id, "tenant created");
            Ok(id.to_string())
        }
    }
}

pub async fn api_key(store: &dyn Store, command: ApiKeyCommand) -> Result<String, AdminError> {
    match command {
        ApiKeyCommand::Create { tenant } => {
            let tenant_id = tenant_id(store, &tenant).await?;
            let key = NewApiKey::generate();
            store.create_api_key(&tenant_id, &key).await?;
            tracing::info!(%tenant, api_key_id = %key.id, "API key created; it is shown once");
            Ok(key.key)
        }
        ApiKeyCommand::Revoke { key_id } => {
            if store
                .revoke_api_key(&ApiKeyId::from_stored(key_id.clone()))
                .await?
            {
                tracing::info!(api_key_id = %key_id, "API key revoked");
                Ok(format!("revoked {key_id}"))
            } else {
                Err(AdminError::UnknownApiKey(key_id))
            }
        }
    }
}

pub async fn account(store: &dyn Store, command: AccountCommand) -> Result<String, AdminError> {
    match command {
        AccountCommand::Create {
            tenant,
            id,
            currency,
            balance,
        } => {
            let account_id = AccountId::parse(&id).map_err(|problem| invalid("--id", problem))?;
            let currency = Currency::parse(&currency).map_err(|problem| invalid("--currency", problem))?;
            let balance =
                Balance::parse(&balance, currency).map_err(|problem| invalid("--balance", problem))?;
            let account = NewAccount {
                tenant_id: tenant_id(store, &tenant).await?,
                id: account_id,
                balance,
            };
            match store.create_account(&account).await {
                Err(StoreError::AlreadyExists) => Err(AdminError::AccountExists {
                    tenant: tenant.clone(),
                    account: id.clone(),
                }),
                other => other.map_err(AdminError::from),
            }?;
            tracing::info!(%tenant, account = %id, "account created");
            Ok(format!("created account {id}"))
        }
    }
}
