//! The server functions of this feature; each checks the caller's role first.

use crate::audit::model::AuditEntryView;
#[cfg(feature = "ssr")]
use domain::operator::OperatorRole;

#[cfg(feature = "ssr")]
use crate::backend::failed;
use leptos::prelude::*;

#[server(endpoint = "console/audit")]
pub async fn get_audit(before: String) -> Result<Vec<AuditEntryView>, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?.audit(before).await.map_err(failed)
}
