//! Administration: tenants, API keys, accounts, console operators. The rules live here once:
//! the command line (`run`) and the console's administration pages both call these functions,
//! each change audited in its transaction in the name of its actor (an operator's username,
//! or `cli:<user>` for the command line).

use crate::auth::api_key::NewApiKey;
use crate::auth::operator::generated_password;
use crate::cli::{AccountCommand, AdminCommand, ApiKeyCommand, KeysRule, OperatorCommand, TenantCommand};
use crate::store::operators::{OperatorChange, StoredOperator};
use crate::store::{OperatorStore, Store, StoreError, TenantStore};
use domain::command::AccountId;
use domain::money::{Balance, Currency};
use domain::operator::AuditEntry;
use domain::operator::{OperatorRole, OperatorUsername};
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
    #[error("{0} is the last enabled admin: make another admin first")]
    LastAdmin(String),
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
            let id = create_tenant(store, &command_line(), &name, !optional_idempotency_key).await?;
            Ok(id.to_string())
        }
        TenantCommand::Keys { name, rule } => {
            let id = tenant_id(store, &name).await?;
            let required = rule == KeysRule::Required;
            set_idempotency_key_required(store, &command_line(), &id, required).await?;
            Ok(format!("tenant {name}: {}", keys_rule(required)))
        }
        TenantCommand::List => Ok(store
            .list_tenants()
            .await?
            .into_iter()
            .map(|tenant| {
                let rule = if tenant.require_idempotency_key {
                    "required"
                } else {
                    "optional"
                };
                format!(
                    "{}\t{}\t{rule}\t{}",
                    tenant.name,
                    tenant.id,
                    crate::store::rfc3339_millis(tenant.created_at)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")),
    }
}

/// Creates a tenant named `name`; keys are required unless `require_idempotency_key` is false.
pub async fn create_tenant(
    store: &dyn TenantStore,
    actor: &str,
    name: &str,
    require_idempotency_key: bool,
) -> Result<TenantId, AdminError> {
    let parsed = TenantName::parse(name).map_err(|problem| invalid("NAME", problem))?;
    let id = TenantId::generate();
    let audit = AuditEntry::new(actor, "tenant.create")
        .on(format!("tenant {parsed}"))
        .details(keys_rule(require_idempotency_key));
    match store
        .create_tenant(&id, &parsed, require_idempotency_key, &audit)
        .await
    {
        Err(StoreError::AlreadyExists) => Err(AdminError::TenantExists(name.to_owned())),
        other => other.map_err(AdminError::from),
    }?;
    tracing::info!(tenant = %parsed, tenant_id = %id, %actor, "tenant created");
    Ok(id)
}

/// Whether the tenant's payments need an Idempotency-Key (within 5 s on every instance).
pub async fn set_idempotency_key_required(
    store: &dyn TenantStore,
    actor: &str,
    tenant_id: &TenantId,
    required: bool,
) -> Result<(), AdminError> {
    let audit = AuditEntry::new(actor, "tenant.set_keys")
        .on(format!("tenant {tenant_id}"))
        .details(keys_rule(required));
    if store
        .set_idempotency_key_required(tenant_id, required, &audit)
        .await?
    {
        tracing::info!(%tenant_id, required, %actor, "tenant's key rule changed");
        Ok(())
    } else {
        Err(AdminError::UnknownTenant(tenant_id.to_string()))
    }
}

fn keys_rule(required: bool) -> &'static str {
    if required {
        "idempotency keys required"
    } else {
        "idempotency keys optional"
    }
}

/// A new API key of the tenant, shown this once (only its hash is stored).
pub async fn create_api_key(
    store: &dyn TenantStore,
    actor: &str,
    tenant_id: &TenantId,
) -> Result<NewApiKey, AdminError> {
    let key = NewApiKey::generate();
    let audit = AuditEntry::new(actor, "api_key.create")
        .on(format!("api key {}", key.id))
        .details(format!("tenant {tenant_id}"));
    store.create_api_key(tenant_id, &key, &audit).await?;
    tracing::info!(%tenant_id, api_key_id = %key.id, %actor, "API key created; it is shown once");
    Ok(key)
}

/// Revokes the active key with this id: every instance refuses it within 5 s.
pub async fn revoke_api_key(store: &dyn TenantStore, actor: &str, key_id: &str) -> Result<(), AdminError> {
    let audit = AuditEntry::new(actor, "api_key.revoke").on(format!("api key {key_id}"));
    if store
        .revoke_api_key(&ApiKeyId::from_stored(key_id.to_owned()), &audit)
        .await?
    {
        tracing::info!(api_key_id = %key_id, %actor, "API key revoked");
        Ok(())
    } else {
        Err(AdminError::UnknownApiKey(key_id.to_owned()))
    }
}

pub async fn api_key(store: &dyn TenantStore, command: ApiKeyCommand) -> Result<String, AdminError> {
    match command {
        ApiKeyCommand::Create { tenant } => {
            let tenant_id = tenant_id(store, &tenant).await?;
            Ok(create_api_key(store, &command_line(), &tenant_id).await?.key)
        }
        ApiKeyCommand::Revoke { key_id } => {
            revoke_api_key(store, &command_line(), &key_id).await?;
            Ok(format!("revoked {key_id}"))
        }
        ApiKeyCommand::List { tenant } => {
            let tenant_id = tenant_id(store, &tenant).await?;
            let time = |at: Option<chrono::DateTime<chrono::Utc>>| {
                at.map_or_else(|| "-".to_owned(), crate::store::rfc3339_millis)
            };
            Ok(store
                .list_api_keys()
                .await?
                .into_iter()
                .filter(|key| key.tenant_id == tenant_id)
                .map(|key| {
                    format!(
                        "{}\t{}\t{}\t{}\t{}",
                        key.id,
                        key.created_by.as_deref().unwrap_or("-"),
                        crate::store::rfc3339_millis(key.created_at),
                        time(key.last_used_at),
                        time(key.revoked_at),
                    )
                })
                .collect::<Vec<_>>()
                .join("\n"))
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
    let actor = command_line();
    match command {
        OperatorCommand::Create { username, role } => create_operator(store, &actor, &username, role).await,
        OperatorCommand::ResetPassword { username } => reset_password(store, &actor, &username).await,
        OperatorCommand::Enable { username } => enable_operator(store, &actor, &username).await,
        OperatorCommand::SetRole { username, role } => {
            set_role(store, &actor, &username, role).await?;
            Ok(format!("operator {username} is now {role}"))
        }
        OperatorCommand::Disable { username } => {
            disable_operator(store, &actor, &username).await?;
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

/// Creates an operator with a generated password, returned to be shown once.
pub async fn create_operator(
    store: &dyn OperatorStore,
    actor: &str,
    username: &str,
    role: OperatorRole,
) -> Result<String, AdminError> {
    let parsed = OperatorUsername::parse(username).map_err(|problem| invalid("--username", problem))?;
    let (password, password_hash) = generated_password().await;
    let operator = StoredOperator {
        id: format!("op_{}", domain::random::random_hex(8)),
        username: parsed.to_string(),
        password_hash,
        role,
        disabled: false,
    };
    let audit = operator_audit(actor, "create", &operator.username, format!("role {role}"));
    match store.create_operator(&operator, &audit).await {
        Err(StoreError::AlreadyExists) => Err(AdminError::OperatorExists(username.to_owned())),
        other => other.map_err(AdminError::from),
    }?;
    tracing::info!(operator = %parsed, %role, %actor, "operator created; the password is shown once");
    Ok(password.expose().to_owned())
}

/// A new generated password (returned, to be shown once); the operator's sessions end.
pub async fn reset_password(
    store: &dyn OperatorStore,
    actor: &str,
    username: &str,
) -> Result<String, AdminError> {
    let password =
        with_new_password(store, actor, username, OperatorChange::Password, "reset_password").await?;
    tracing::info!(operator = %username, %actor, "operator password reset; their sessions end");
    Ok(password)
}

/// Enables a disabled operator with a new generated password (returned, to be shown once).
pub async fn enable_operator(
    store: &dyn OperatorStore,
    actor: &str,
    username: &str,
) -> Result<String, AdminError> {
    let password = with_new_password(store, actor, username, OperatorChange::Enable, "enable").await?;
    tracing::info!(operator = %username, %actor, "operator enabled with a new password; shown once");
    Ok(password)
}

/// Changes an operator's role, from their next request.
pub async fn set_role(
    store: &dyn OperatorStore,
    actor: &str,
    username: &str,
    role: OperatorRole,
) -> Result<(), AdminError> {
    let change = OperatorChange::Role(role);
    change_operator(
        store,
        actor,
        username,
        &change,
        "set_role",
        &format!("role {role}"),
    )
    .await?;
    tracing::info!(operator = %username, %role, %actor, "operator role changed");
    Ok(())
}

/// Disables an operator: their sessions stop at once, nothing of theirs is deleted.
pub async fn disable_operator(
    store: &dyn OperatorStore,
    actor: &str,
    username: &str,
) -> Result<(), AdminError> {
    change_operator(
        store,
        actor,
        username,
        &OperatorChange::Disable,
        "disable",
        "sessions ended",
    )
    .await?;
    tracing::info!(operator = %username, %actor, "operator disabled");
    Ok(())
}

/// Gives the operator a new generated password through `change` (which ends every session
/// they had); returns the password, to be shown once.
async fn with_new_password(
    store: &dyn OperatorStore,
    actor: &str,
    username: &str,
    change: fn(String) -> OperatorChange,
    action: &str,
) -> Result<String, AdminError> {
    let (password, hash) = generated_password().await;
    change_operator(
        store,
        actor,
        username,
        &change(hash),
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
    actor: &str,
    username: &str,
    change: &OperatorChange,
    action: &str,
    details: &str,
) -> Result<(), AdminError> {
    let audit = operator_audit(actor, action, username, details.to_owned());
    match store.change_operator(username, change, &audit).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(AdminError::UnknownOperator(username.to_owned())),
        Err(StoreError::LastAdmin) => Err(AdminError::LastAdmin(username.to_owned())),
        Err(error) => Err(error.into()),
    }
}

/// The command line has no console identity: its entries name the system user who ran it
/// (`cli:<user>`, which no console username can be: they have no colon).
fn command_line() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".to_owned());
    format!("cli:{user}")
}

/// `actor` did `operator.<action>` to `username`.
fn operator_audit(actor: &str, action: &str, username: &str, details: String) -> AuditEntry {
    let entry = AuditEntry::new(actor, format!("operator.{action}")).on(format!("operator {username}"));
    match details.is_empty() {
        true => entry,
        false => entry.details(details),
    }
}
