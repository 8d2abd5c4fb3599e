//! The server functions of this feature; each checks the caller's role first.

use crate::dashboard::model::Dashboard;
use crate::dashboard::model::RetryWindow;
#[cfg(feature = "ssr")]
use domain::operator::OperatorRole;

#[cfg(feature = "ssr")]
use crate::backend::failed;
use leptos::prelude::*;

/// Outcome series over `range` (`15m`, `1h`, `24h`, `7d`) and the live gauges.
#[server(endpoint = "console/dashboard")]
pub async fn get_dashboard(
    range: String,
    tenant: String,
    operation: String,
) -> Result<Dashboard, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    let range = crate::dashboard::model::DashboardRange::parse(&range).unwrap_or_default();
    crate::backend::backend()?
        .dashboard(range, tenant, operation)
        .await
        .map_err(failed)
}

/// Retry delays against the window, per operation, over `range` (as the dashboard's).
#[server(endpoint = "console/retry-windows")]
pub async fn get_retry_windows(
    range: String,
    tenant: String,
    operation: String,
) -> Result<Vec<RetryWindow>, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    let range = crate::dashboard::model::DashboardRange::parse(&range).unwrap_or_default();
    crate::backend::backend()?
        .retry_windows(range, tenant, operation)
        .await
        .map_err(failed)
}
