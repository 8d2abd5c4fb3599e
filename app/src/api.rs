//! Server functions: the console's only way to reach the server. Each one runs on the server
//! (under `ssr`) and is a typed HTTP call from the browser (under `hydrate`).

#[cfg(feature = "ssr")]
use crate::dto::OperatorRole;
use crate::dto::{CurrentOperator, Overview};
use leptos::prelude::*;

/// The signed-in operator (the server refuses this call without a session).
#[server(endpoint = "console/whoami")]
pub async fn whoami() -> Result<CurrentOperator, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)
}

/// Record counts per status for the overview page.
#[server(endpoint = "console/overview")]
pub async fn get_overview() -> Result<Overview, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?
        .overview()
        .await
        .map_err(|error| ServerFnError::new(error.to_string()))
}
