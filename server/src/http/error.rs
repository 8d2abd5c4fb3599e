//! The one place where the contract's errors (`domain::api_error::ApiError`) become HTTP
//! responses: status, `Content-Type`, `Retry-After`, `Allow` and the body in the contract's
//! shape.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::api_error::ApiError;

/// An error answered over HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorResponse(pub ApiError);

impl From<ApiError> for ErrorResponse {
    fn from(error: ApiError) -> Self {
        ErrorResponse(error)
    }
}

impl IntoResponse for ErrorResponse {
    fn into_response(self) -> Response {
        let ErrorResponse(error) = self;
        let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (
            status,
            [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            error.body(),
        )
            .into_response();
        if let Some(seconds) = error.retry_after_secs() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let ApiError::MethodNotAllowed { allowed } = &error
            && let Ok(allow) = HeaderValue::from_str(&allowed.join(", "))
        {
            response.headers_mut().insert(header::ALLOW, allow);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_response_carries_its_status_and_retry_after() {
        let in_progress = ErrorResponse(ApiError::RequestInProgress { retry_after_secs: 2 }).into_response();
        assert_eq!(in_progress.status(), StatusCode::CONFLICT);
        assert_eq!(in_progress.headers()[header::RETRY_AFTER], "2");
        assert_eq!(in_progress.headers()[header::CONTENT_TYPE], "application/json");
        let declined = ErrorResponse(ApiError::PaymentDeclined {
            payment_id: "pay_1".into(),
        })
        .into_response();
        assert_eq!(declined.status(), StatusCode::PAYMENT_REQUIRED);
        assert!(declined.headers().get(header::RETRY_AFTER).is_none());
        let wrong_method = ErrorResponse(ApiError::MethodNotAllowed {
            allowed: vec!["GET".into(), "HEAD".into()],
        })
        .into_response();
        assert_eq!(wrong_method.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(wrong_method.headers()[header::ALLOW], "GET, HEAD");
    }
}
