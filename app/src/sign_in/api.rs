//! The server functions of this feature; each checks the caller's role first.

use crate::sign_in::model::CurrentOperator;
#[cfg(feature = "ssr")]
use domain::operator::OperatorRole;

use leptos::prelude::*;

/// The signed-in operator (the server refuses this call without a session).
#[server(endpoint = "console/whoami")]
pub async fn whoami() -> Result<CurrentOperator, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)
}
