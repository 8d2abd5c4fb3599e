//! The server's word on who is calling, for server functions and server rendering. The
//! `server` crate's session gate puts the signed-in operator into the request; every server
//! function starts with [`require`], so a call is refused on the server whatever the page
//! showed (hidden buttons are not security).

use crate::dto::{CurrentOperator, OperatorRole};
use leptos::prelude::*;

/// The signed-in operator of the current request, if any.
pub fn current_operator() -> Option<CurrentOperator> {
    use_context::<http::request::Parts>()?
        .extensions
        .get::<CurrentOperator>()
        .cloned()
}

/// The signed-in operator, if their role is at least `role`; otherwise the call fails (and
/// the failure names what was missing, never more).
pub fn require(role: OperatorRole) -> Result<CurrentOperator, ServerFnError> {
    let operator = current_operator().ok_or_else(|| ServerFnError::new("sign in first"))?;
    if operator.role < role {
        return Err(ServerFnError::new(format!(
            "this needs the {role} role; {} is {}",
            operator.username, operator.role
        )));
    }
    Ok(operator)
}
