//! The administration page's view models.

use domain::operator::OperatorRole;

use serde::{Deserialize, Serialize};

/// What the administration page shows: operators, and tenants with their API keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Administration {
    pub operators: Vec<OperatorView>,
    pub tenants: Vec<TenantView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorView {
    pub username: String,
    pub role: OperatorRole,
    pub disabled: bool,
    pub created_at: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantView {
    pub id: String,
    pub name: String,
    pub require_idempotency_key: bool,
    pub created_at: String,
    /// Newest first, revoked ones included.
    pub api_keys: Vec<ApiKeyView>,
}

/// An API key by its id (never the key, never its hash).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyView {
    pub id: String,
    /// An operator's username or `cli:<user>`; empty for keys from before it was kept.
    pub created_by: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// One administrative change, as an admin asks for it in the console (the same rules as the
/// command line's `idem operator|tenant|api-key`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminChange {
    CreateOperator {
        username: String,
        role: OperatorRole,
    },
    SetRole {
        username: String,
        role: OperatorRole,
    },
    DisableOperator {
        username: String,
    },
    EnableOperator {
        username: String,
    },
    ResetPassword {
        username: String,
    },
    CreateTenant {
        name: String,
        require_idempotency_key: bool,
    },
    SetKeysRequired {
        tenant_id: String,
        required: bool,
    },
    CreateApiKey {
        tenant_id: String,
    },
    RevokeApiKey {
        key_id: String,
    },
}

/// What a change did, and the secret it made (a password or an API key), shown this once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminOutcome {
    pub done: String,
    pub shown_once: Option<String>,
}
