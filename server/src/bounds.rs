//! What bounds every router the binary serves, whichever part it is (the API, the console,
//! the metrics): the size of a request's body and the time a request may take. Each part
//! answers the refusals in its own way (the API in the contract's shape).

use axum::Router;
use axum::http::StatusCode;
use std::time::Duration;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub request_timeout: Duration,
    pub body_limit_bytes: usize,
}

impl Bounds {
    /// `router` with the body limit and the request timeout.
    pub fn around(&self, router: Router) -> Router {
        router
            .layer(RequestBodyLimitLayer::new(self.body_limit_bytes))
            .layer(TimeoutLayer::with_status_code(
                StatusCode::SERVICE_UNAVAILABLE,
                self.request_timeout,
            ))
    }
}
