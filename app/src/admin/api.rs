//! The server functions of this feature; each checks the caller's role first.

use crate::admin::model::AdminChange;
use crate::admin::model::AdminOutcome;
use crate::admin::model::Administration;
#[cfg(feature = "ssr")]
use domain::operator::OperatorRole;

#[cfg(feature = "ssr")]
use crate::backend::failed;
use leptos::prelude::*;
use leptos::server_fn::codec::Json;

/// Operators, tenants and their API keys (admins only).
#[server(endpoint = "console/admin")]
pub async fn get_administration() -> Result<Administration, ServerFnError> {
    crate::auth::require(OperatorRole::Admin)?;
    crate::backend::backend()?.administration().await.map_err(failed)
}

/// One administrative change (admins only), audited in the admin's name.
#[server(endpoint = "console/admin/change", input = Json)]
pub async fn administer(change: AdminChange) -> Result<AdminOutcome, ServerFnError> {
    let admin = crate::auth::require(OperatorRole::Admin)?;
    crate::backend::backend()?
        .administer(&admin, change)
        .await
        .map_err(failed)
}
