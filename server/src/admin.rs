//! The CLI's administrative commands: tenants, API keys, accounts, console operators.

use crate::auth::api_key::NewApiKey;
use crate::auth::operator::Password;
use crate::cli::{AccountCommand, AdminCommand, ApiKeyCommand, OperatorCommand, TenantCommand};
use crate::store::operators::{OperatorChange, StoredOperator};
use crate::store::{OperatorStore, Store, StoreError, TenantStore};
use domain::command::AccountId;
use domain::money::{Balance, Currency};
use domain::operator::AuditEntry;
use domain::operator::OperatorUsername;
use domain::payment::NewAccount;
use domain::tenant::{ApiKeyId, TenantId, TenantName};

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
    #[error("an operator named {0:?} already exists")]
    OperatorExists(String),
    #[error("no operator is named {0:?}")]
    UnknownOperator(String),
    #[error("no active API key has the id {0:?}")]
    UnknownApiKey(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn invalid(field: &str, problem: impl std::fmt::Display) -> AdminError {
    AdminError::InvalidArgument(format!("{field}: {problem}"))
}

async fn tenant_id(store: &dyn TenantStore, name: &str) -> Result<TenantId, AdminError> {
    let parsed = TenantName::parse(name).map_err(|problem| invalid("--tenant", problem))?;
    store
        .tenant_id_by_name(&parsed)
        .await?
        .ok_or_else(|| AdminError::UnknownTenant(name.to_owned()))
}

/// Runs one administrative command; what it prints.
pub async fn run(store: &dyn Store, command: AdminCommand) -> Result<String, AdminError> {
    match command {
        AdminCommand::Tenant(command) => tenant(store, command).await,
        AdminCommand::ApiKey(command) => api_key(store, command).await,
        AdminCommand::Account(command) => account(store, command).await,
        AdminCommand::Operator(command) => operator(store, command).await,
    }
}

/// Runs a tenant command; returns what to print on standard output.
pub async fn tenant(store: &dyn TenantStore, command: TenantCommand) -> Result<String, AdminError> {
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

pub async fn api_key(store: &dyn TenantStore, command: ApiKeyCommand) -> Result<String, AdminError> {
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

pub async fn account(store: &dyn TenantStore, command: AccountCommand) -> Result<String, AdminError> {
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

/// Runs an operator command; prints the generated password (and only that) when it makes
/// one. Every change is written to the audit log with it, in the name of the command line.
pub async fn operator(store: &dyn OperatorStore, command: OperatorCommand) -> Result<String, AdminError> {
    match command {
        OperatorCommand::Create { username, role } => {
            let parsed =
                OperatorUsername::parse(&username).map_err(|problem| invalid("--username", problem))?;
            let password = Password::generate();
            let operator = StoredOperator {
                id: format!("op_{}", domain::random::random_hex(8)),
                username: parsed.to_string(),
                password_hash: password.hash(),
                role,
                disabled: false,
            };
            let audit = command_line_audit("create", &operator.username, format!("role {role}"));
            match store.create_operator(&operator, &audit).await {
                Err(StoreError::AlreadyExists) => Err(AdminError::OperatorExists(username)),
                other => other.map_err(AdminError::from),
            }?;
            tracing::info!(operator = %parsed, %role, "operator created; the password is shown once");
            Ok(password.expose().to_owned())
        }
        OperatorCommand::ResetPassword { username } => {
            let password =
                with_new_password(store, &username, OperatorChange::Password, "reset_password").await?;
            tracing::info!(operator = %username, "operator password reset; their sessions end");
            Ok(password)
        }
        OperatorCommand::Enable { username } => {
            let password = with_new_password(store, &username, OperatorChange::Enable, "enable").await?;
            tracing::info!(operator = %username, "operator enabled with a new password; shown once");
            Ok(password)
        }
        OperatorCommand::SetRole { username, role } => {
            let change = OperatorChange::Role(role);
            change_operator(store, &username, &change, "set_role", &format!("role {role}")).await?;
            tracing::info!(operator = %username, %role, "operator role changed");
            Ok(format!("operator {username} is now {role}"))
        }
        OperatorCommand::Disable { username } => {
            change_operator(
                store,
                &username,
                &OperatorChange::Disable,
                "disable",
                "sessions ended",
            )
            .await?;
            tracing::info!(operator = %username, "operator disabled");
            Ok(format!("operator {username} is disabled"))
        }
        OperatorCommand::List => Ok(store
            .list_operators()
            .await?
            .into_iter()
            .map(|operator| {
                let standing = if operator.disabled { "disabled" } else { "enabled" };
                format!(
                    "{}\t{}\t{standing}\t{}",
                    operator.username,
                    operator.role,
                    crate::store::rfc3339_millis(operator.created_at)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")),
    }
}

/// Gives the operator a new generated password through `change` (which ends every session
/// they had); returns the password, to be shown once.
async fn with_new_password(
    store: &dyn OperatorStore,
    username: &str,
    change: fn(String) -> OperatorChange,
    action: &str,
) -> Result<String, AdminError> {
    let password = Password::generate();
    change_operator(
        store,
        username,
        &change(password.hash()),
        action,
        "new password; sessions ended",
    )
    .await?;
    Ok(password.expose().to_owned())
}

/// Applies `change` with its audit entry (`operator.<action>`), or says there is no such
/// operator.
async fn change_operator(
    store: &dyn OperatorStore,
    username: &str,
    change: &OperatorChange,
    action: &str,
    details: &str,
) -> Result<(), AdminError> {
    let audit = command_line_audit(action, username, details.to_owned());
    if store.change_operator(username, change, &audit).await? {
        Ok(())
    } else {
        Err(AdminError::UnknownOperator(username.to_owned()))
    }
}

/// The command line has no console identity: its entries name the system user who ran it
/// (`cli:<user>`, which no console username can be: they have no colon).
fn command_line_audit(action: &str, username: &str, details: String) -> AuditEntry {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".to_owned());
    let entry = AuditEntry::new(format!("cli:{user}"), format!("operator.{action}"))
        .on(format!("operator {username}"));
    match details.is_empty() {
        true => entry,
        false => entry.details(details),
    }
}
