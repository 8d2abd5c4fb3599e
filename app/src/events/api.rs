//! The server functions of this feature; each checks the caller's role first.

use crate::events::model::EventsOverview;
use crate::events::model::RedriveResult;
#[cfg(feature = "ssr")]
use domain::operator::OperatorRole;

#[cfg(feature = "ssr")]
use crate::backend::failed;
use leptos::prelude::*;
use leptos::server_fn::codec::Json;

/// The events page: backlog, consumer lag, dead letters.
#[server(endpoint = "console/events")]
pub async fn get_events() -> Result<EventsOverview, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?.events().await.map_err(failed)
}

/// Re-drives exactly the dead letters the operator saw (event id, dead since), with a reason.
#[server(endpoint = "console/events/redrive", input = Json)]
pub async fn redrive_events(
    dead_letters: Vec<(String, String)>,
    reason: String,
) -> Result<Vec<RedriveResult>, ServerFnError> {
    let operator = crate::auth::require(OperatorRole::Operator)?;
    crate::backend::backend()?
        .redrive(&operator, dead_letters, reason)
        .await
        .map_err(failed)
}
