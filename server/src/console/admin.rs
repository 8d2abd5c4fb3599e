//! The console's administration: operators, tenants and API keys, through the same functions
//! as the command line (`crate::admin`), in the signed-in admin's name.

use super::{StoreConsole, unavailable};
use crate::admin::{self, AdminError};
use crate::store::rfc3339_millis as at;
use app::admin::model::{AdminChange, AdminOutcome, Administration, ApiKeyView, OperatorView, TenantView};
use app::backend::{ConsoleAdmin, ConsoleError};
use app::sign_in::model::CurrentOperator;
use domain::tenant::TenantId;

/// An administrative failure as the admin sees it: what was refused and why, or "try again".
fn refused(error: AdminError) -> ConsoleError {
    match error {
        AdminError::Store(error) => unavailable("administration")(error),
        refusal => ConsoleError::Invalid(refusal.to_string()),
    }
}

#[async_trait::async_trait]
impl ConsoleAdmin for StoreConsole {
    async fn administration(&self) -> Result<Administration, ConsoleError> {
        let store = self.store.as_ref();
        let (operators, tenants, keys) = tokio::try_join!(
            store.list_operators(),
            store.list_tenants(),
            store.list_api_keys()
        )
        .map_err(unavailable("administration"))?;
        let tenant_views = tenants
            .into_iter()
            .map(|tenant| TenantView {
                api_keys: keys
                    .iter()
                    .filter(|key| key.tenant_id == tenant.id)
                    .map(|key| ApiKeyView {
                        id: key.id.as_str().to_owned(),
                        created_by: key.created_by.clone().unwrap_or_default(),
                        created_at: at(key.created_at),
                        last_used_at: key.last_used_at.map(at),
                        revoked_at: key.revoked_at.map(at),
                    })
                    .collect(),
                id: tenant.id.to_string(),
                name: tenant.name,
                require_idempotency_key: tenant.require_idempotency_key,
                created_at: at(tenant.created_at),
            })
            .collect();
        Ok(Administration {
            operators: operators
                .into_iter()
                .map(|operator| OperatorView {
                    username: operator.username,
                    role: operator.role,
                    disabled: operator.disabled,
                    created_at: at(operator.created_at),
                })
                .collect(),
            tenants: tenant_views,
        })
    }

    async fn administer(
        &self,
        admin: &CurrentOperator,
        change: AdminChange,
    ) -> Result<AdminOutcome, ConsoleError> {
        let store = self.store.as_ref();
        let actor = admin.username.as_str();
        if let AdminChange::SetRole { username, .. }
        | AdminChange::DisableOperator { username }
        | AdminChange::EnableOperator { username }
        | AdminChange::ResetPassword { username } = &change
            && *username == admin.username
        {
            return Err(ConsoleError::Invalid(
                "an admin's own role, standing and password are changed by another admin".to_owned(),
            ));
        }
        let changed: Result<(String, Option<String>), AdminError> = match change {
            AdminChange::CreateOperator { username, role } => {
                admin::create_operator(store, actor, &username, role)
                    .await
                    .map(|password| (format!("operator {username} created as {role}"), Some(password)))
            }
            AdminChange::SetRole { username, role } => admin::set_role(store, actor, &username, role)
                .await
                .map(|()| (format!("operator {username} is now {role}"), None)),
            AdminChange::DisableOperator { username } => admin::disable_operator(store, actor, &username)
                .await
                .map(|()| (format!("operator {username} is disabled"), None)),
            AdminChange::EnableOperator { username } => admin::enable_operator(store, actor, &username)
                .await
                .map(|password| {
                    (
                        format!("operator {username} is enabled with a new password"),
                        Some(password),
                    )
                }),
            AdminChange::ResetPassword { username } => admin::reset_password(store, actor, &username)
                .await
                .map(|password| (format!("operator {username} has a new password"), Some(password))),
            AdminChange::CreateTenant {
                name,
                require_idempotency_key,
            } => admin::create_tenant(store, actor, &name, require_idempotency_key)
                .await
                .map(|_| (format!("tenant {name} created"), None)),
            AdminChange::SetKeysRequired { tenant_id, required } => {
                let tenant = TenantId::from_stored(tenant_id);
                let rule = if required { "required" } else { "optional" };
                admin::set_idempotency_key_required(store, actor, &tenant, required)
                    .await
                    .map(|()| (format!("idempotency keys are {rule} for {tenant}"), None))
            }
            AdminChange::CreateApiKey { tenant_id } => {
                let tenant = self.existing_tenant(tenant_id).await?;
                admin::create_api_key(store, actor, &tenant)
                    .await
                    .map(|key| (format!("API key {} created for {tenant}", key.id), Some(key.key)))
            }
            AdminChange::RevokeApiKey { key_id } => {
                admin::revoke_api_key(store, actor, &key_id).await.map(|()| {
                    (
                        format!("API key {key_id} revoked; every instance refuses it within 5 s"),
                        None,
                    )
                })
            }
        };
        let (done, shown_once) = changed.map_err(refused)?;
        Ok(AdminOutcome { done, shown_once })
    }
}

impl StoreConsole {
    /// The tenant with this id, or a refusal naming it.
    async fn existing_tenant(&self, tenant_id: String) -> Result<TenantId, ConsoleError> {
        let tenants = self
            .store
            .list_tenants()
            .await
            .map_err(unavailable("administration: tenants"))?;
        tenants
            .into_iter()
            .map(|tenant| tenant.id)
            .find(|id| id.as_str() == tenant_id)
            .ok_or_else(|| refused(AdminError::UnknownTenant(tenant_id)))
    }
}
