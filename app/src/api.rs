//! Server functions: the console's only way to reach the server. Each one runs on the server
//! (under `ssr`) and is a typed HTTP call from the browser (under `hydrate`).

use crate::dto::Overview;
use leptos::prelude::*;

/// Record counts per status for the overview page.
#[server(endpoint = "console/overview")]
pub async fn get_overview() -> Result<Overview, ServerFnError> {
    crate::backend::backend()?
        .overview()
        .await
        .map_err(|error| ServerFnError::new(error.to_string()))
}
