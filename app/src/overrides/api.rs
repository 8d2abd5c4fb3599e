//! The server functions of this feature; each checks the caller's role first.

use crate::overrides::model::OverrideRequestView;
use crate::records::model::RecordRef;
#[cfg(feature = "ssr")]
use domain::operator::OperatorRole;
use domain::recovery::OverrideOutcome;

#[cfg(feature = "ssr")]
use crate::backend::failed;
use leptos::prelude::*;
use leptos::server_fn::codec::Json;

/// An admin asks for an override without the provider's evidence; a second admin decides.
#[server(endpoint = "console/overrides/request", input = Json)]
pub async fn request_override(
    record: RecordRef,
    version: i64,
    outcome: OverrideOutcome,
    reason: String,
) -> Result<OverrideRequestView, ServerFnError> {
    let admin = crate::auth::require(OperatorRole::Admin)?;
    crate::backend::backend()?
        .request_override(&admin, record, version, outcome, reason)
        .await
        .map_err(failed)
}

#[server(endpoint = "console/overrides")]
pub async fn list_overrides() -> Result<Vec<OverrideRequestView>, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?.overrides().await.map_err(failed)
}

/// A second admin approves (and so applies) or rejects an override request.
#[server(endpoint = "console/overrides/decide")]
pub async fn decide_override(
    id: String,
    approve: bool,
    reason: String,
) -> Result<OverrideRequestView, ServerFnError> {
    let admin = crate::auth::require(OperatorRole::Admin)?;
    crate::backend::backend()?
        .decide_override(&admin, id, approve, reason)
        .await
        .map_err(failed)
}
