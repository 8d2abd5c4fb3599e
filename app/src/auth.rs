//! The server's word on who is calling, for server functions and server rendering. The
//! `server` crate's session gate puts the signed-in operator into the request; every server
//! function starts with [`require`], so a call is refused on the server whatever the page
//! showed (hidden buttons are not security).

use crate::sign_in::model::CurrentOperator;
use domain::operator::OperatorRole;
use leptos::prelude::*;

/// The signed-in operator of the current request, if any.
pub fn current_operator() -> Option<CurrentOperator> {
    use_context::<http::request::Parts>()?
        .extensions
        .get::<CurrentOperator>()
        .cloned()
}

/// A refused server-function call: `status` on the response (a server function's error is
/// otherwise a 500, which would blame the server for the caller's mistake), `message` in its
/// body.
pub fn refused(status: http::StatusCode, message: impl Into<String>) -> ServerFnError {
    // A page rendered on the server calls server functions as plain functions: their refusal
    // is shown on the page and must not become the page's own status.
    let server_function_call = use_context::<http::request::Parts>()
        .is_some_and(|parts| parts.uri.path().starts_with(SERVER_FUNCTIONS_PREFIX));
    if server_function_call && let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(status);
    }
    ServerFnError::new(message.into())
}

/// Where Leptos mounts server functions (its default prefix).
pub const SERVER_FUNCTIONS_PREFIX: &str = "/api/";

/// The signed-in operator, if their role is at least `role`; otherwise the call fails with
/// 401 or 403 (and the failure names what was missing, never more).
pub fn require(role: OperatorRole) -> Result<CurrentOperator, ServerFnError> {
    let operator =
        current_operator().ok_or_else(|| refused(http::StatusCode::UNAUTHORIZED, "sign in first"))?;
    if operator.role < role {
        return Err(refused(
            http::StatusCode::FORBIDDEN,
            format!(
                "this needs the {role} role; {} is {}",
                operator.username, operator.role
            ),
        ));
    }
    Ok(operator)
}
