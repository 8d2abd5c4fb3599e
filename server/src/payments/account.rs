use super::command::AccountId;
use super::money::Balance;
use crate::auth::tenant::TenantId;

/// An account to create: it belongs to one tenant and starts with a balance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAccount {
    pub tenant_id: TenantId,
    pub id: AccountId,
    pub balance: Balance,
}
