//! The signed-in operator, as the server established it.

use domain::operator::OperatorRole;

use serde::{Deserialize, Serialize};

/// The signed-in operator of a console request, as the server established it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentOperator {
    pub username: String,
    pub role: OperatorRole,
}
