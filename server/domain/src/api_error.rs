//! The contract's errors: each one's code, HTTP status, message, `retryable` flag, details and
//! `Retry-After`, and its body, which always has the same shape:
//! `{ "errorCode", "message", "retryable", "details"? }`.
//!
//! Pure data: the engine stores some of these bodies for replay (a decline, insufficient
//! funds), and `server::http::error` is the one place that turns them into HTTP responses.

use crate::command::FieldProblem;
use crate::key::InvalidIdempotencyKey;
use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("A valid API key is required.")]
    Unauthenticated,
    #[error("An Idempotency-Key is required (the header; for a look-up, the idempotencyKey parameter).")]
    IdempotencyKeyMissing,
    #[error("The Idempotency-Key header is invalid: {0}.")]
    IdempotencyKeyInvalid(String),
    #[error("Api-Version {0:?} is not supported.")]
    UnsupportedApiVersion(String),
    #[error("The request is not valid.")]
    ValidationFailed(Vec<FieldProblem>),
    #[error("The account does not exist.")]
    AccountNotFound,
    #[error("The payment does not exist.")]
    PaymentNotFound,
    #[error("A payment with this merchant reference already exists for this account.")]
    DuplicateMerchantReference { payment_id: String },
    #[error("This idempotency key was already used with a different request.")]
    KeyReusedWithDifferentRequest,
    #[error("This idempotency key expired; use a new key for a new request.")]
    IdempotencyKeyExpired { resource_id: Option<String> },
    #[error("A request with this idempotency key is still being processed.")]
    RequestInProgress { retry_after_secs: u64 },
    #[error("The payment was declined.")]
    PaymentDeclined { payment_id: String },
    #[error("The account's balance does not cover the amount.")]
    InsufficientFunds,
    #[error("The refund does not exist.")]
    RefundNotFound,
    #[error("The payment cannot be refunded in its current status.")]
    PaymentNotRefundable { payment_status: String },
    #[error("The amount is more than the payment still has to refund.")]
    RefundExceedsRemaining { remaining: String },
    #[error("A refund with this reference already exists for this payment.")]
    DuplicateRefundReference { refund_id: String },
    #[error("The refund was declined.")]
    RefundDeclined { refund_id: String },
    #[error("The request body is larger than the {limit_bytes} bytes allowed.")]
    PayloadTooLarge { limit_bytes: usize },
    #[error("Too many requests; retry after the indicated time.")]
    RateLimited { retry_after_secs: u64 },
    #[error("The service is temporarily unavailable; retry with the same key.")]
    Unavailable,
    #[error("The payments API has no such path.")]
    NotFound,
    #[error("This path does not accept the method; `Allow` lists the methods it does accept.")]
    MethodNotAllowed { allowed: Vec<String> },
    #[error("An internal error occurred.")]
    Internal,
}

impl ApiError {
    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            ApiError::Unauthenticated => 401,
            ApiError::IdempotencyKeyMissing
            | ApiError::IdempotencyKeyInvalid(_)
            | ApiError::UnsupportedApiVersion(_)
            | ApiError::ValidationFailed(_) => 400,
            ApiError::AccountNotFound
            | ApiError::PaymentNotFound
            | ApiError::RefundNotFound
            | ApiError::NotFound => 404,
            ApiError::MethodNotAllowed { .. } => 405,
            ApiError::DuplicateMerchantReference { .. }
            | ApiError::KeyReusedWithDifferentRequest
            | ApiError::RequestInProgress { .. }
            | ApiError::PaymentNotRefundable { .. }
            | ApiError::DuplicateRefundReference { .. } => 409,
            ApiError::PaymentDeclined { .. } | ApiError::RefundDeclined { .. } => 402,
            ApiError::InsufficientFunds
            | ApiError::IdempotencyKeyExpired { .. }
            | ApiError::RefundExceedsRemaining { .. } => 422,
            ApiError::PayloadTooLarge { .. } => 413,
            ApiError::RateLimited { .. } => 429,
            ApiError::Unavailable => 503,
            ApiError::Internal => 500,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthenticated => "UNAUTHENTICATED",
            ApiError::IdempotencyKeyMissing => "IDEMPOTENCY_KEY_MISSING",
            ApiError::IdempotencyKeyInvalid(_) => "IDEMPOTENCY_KEY_INVALID",
            ApiError::UnsupportedApiVersion(_) => "UNSUPPORTED_API_VERSION",
            ApiError::ValidationFailed(_) => "VALIDATION_FAILED",
            ApiError::AccountNotFound => "ACCOUNT_NOT_FOUND",
            ApiError::PaymentNotFound => "PAYMENT_NOT_FOUND",
            ApiError::DuplicateMerchantReference { .. } => "DUPLICATE_MERCHANT_REFERENCE",
            ApiError::KeyReusedWithDifferentRequest => "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST",
            ApiError::RequestInProgress { .. } => "IDEMPOTENCY_REQUEST_IN_PROGRESS",
            ApiError::IdempotencyKeyExpired { .. } => "IDEMPOTENCY_KEY_EXPIRED",
            ApiError::PaymentDeclined { .. } => "PAYMENT_DECLINED",
            ApiError::InsufficientFunds => "INSUFFICIENT_FUNDS",
            ApiError::RefundNotFound => "REFUND_NOT_FOUND",
            ApiError::PaymentNotRefundable { .. } => "PAYMENT_NOT_REFUNDABLE",
            ApiError::RefundExceedsRemaining { .. } => "REFUND_EXCEEDS_REMAINING",
            ApiError::DuplicateRefundReference { .. } => "DUPLICATE_REFUND_REFERENCE",
            ApiError::RefundDeclined { .. } => "REFUND_DECLINED",
            ApiError::PayloadTooLarge { .. } => "PAYLOAD_TOO_LARGE",
            ApiError::RateLimited { .. } => "RATE_LIMITED",
            ApiError::Unavailable => "UNAVAILABLE",
            ApiError::NotFound => "NOT_FOUND",
            ApiError::MethodNotAllowed { .. } => "METHOD_NOT_ALLOWED",
            ApiError::Internal => "INTERNAL_ERROR",
        }
    }

    /// Whether repeating the same request with the same key can help.
    pub fn retryable(&self) -> bool {
        match self {
            ApiError::RequestInProgress { .. }
            | ApiError::RateLimited { .. }
            | ApiError::Unavailable
            | ApiError::Internal => true,
            // Refundable once the payment's outcome is known.
            ApiError::PaymentNotRefundable { payment_status } => payment_status == "PROCESSING",
            _ => false,
        }
    }

    fn details(&self) -> Option<Value> {
        match self {
            ApiError::ValidationFailed(problems) => Some(json!({ "fields": problems })),
            ApiError::DuplicateMerchantReference { payment_id }
            | ApiError::PaymentDeclined { payment_id } => Some(json!({ "paymentId": payment_id })),
            ApiError::IdempotencyKeyExpired { resource_id } => Some(json!({ "resourceId": resource_id })),
            ApiError::PayloadTooLarge { limit_bytes } => Some(json!({ "limitBytes": limit_bytes })),
            ApiError::PaymentNotRefundable { payment_status } => {
                Some(json!({ "paymentStatus": payment_status }))
            }
            ApiError::RefundExceedsRemaining { remaining } => Some(json!({ "remaining": remaining })),
            ApiError::MethodNotAllowed { allowed } => Some(json!({ "allowed": allowed })),
            ApiError::DuplicateRefundReference { refund_id } | ApiError::RefundDeclined { refund_id } => {
                Some(json!({ "refundId": refund_id }))
            }
            _ => None,
        }
    }

    /// `Retry-After`, for the errors a client should retry after a pause.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            ApiError::RequestInProgress { retry_after_secs } | ApiError::RateLimited { retry_after_secs } => {
                Some(*retry_after_secs)
            }
            ApiError::Unavailable | ApiError::Internal => Some(1),
            _ => None,
        }
    }

    /// The body's bytes, as sent and, for replayable failures, as stored for replay.
    pub fn body(&self) -> Vec<u8> {
        let mut body = json!({
            "errorCode": self.code(),
            "message": self.to_string(),
            "retryable": self.retryable(),
        });
        if let Some(details) = self.details() {
            body["details"] = details;
        }
        body.to_string().into_bytes()
    }
}

/// A key that does not parse, wherever it was sent (the header, or a look-up's query).
impl From<InvalidIdempotencyKey> for ApiError {
    fn from(problem: InvalidIdempotencyKey) -> Self {
        ApiError::IdempotencyKeyInvalid(problem.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_have_the_contract_shape() {
        let body: Value =
            serde_json::from_slice(&ApiError::KeyReusedWithDifferentRequest.body()).expect("json");
        assert_eq!(body["errorCode"], "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST");
        assert_eq!(
            body["message"],
            "This idempotency key was already used with a different request."
        );
        assert_eq!(body["retryable"], false);
        assert!(body.get("details").is_none());

        let in_progress = ApiError::RequestInProgress { retry_after_secs: 2 };
        assert_eq!(in_progress.status(), 409);
        assert_eq!(in_progress.retry_after_secs(), Some(2));

        let duplicate = ApiError::DuplicateMerchantReference {
            payment_id: "pay_1".into(),
        };
        let body: Value = serde_json::from_slice(&duplicate.body()).expect("json");
        assert_eq!(body["details"]["paymentId"], "pay_1");
    }

    #[test]
    fn a_wrong_path_or_method_is_the_callers_mistake_and_says_what_would_do() {
        let unknown: Value = serde_json::from_slice(&ApiError::NotFound.body()).expect("json");
        assert_eq!(
            (
                ApiError::NotFound.status(),
                &unknown["errorCode"],
                &unknown["retryable"]
            ),
            (404, &Value::from("NOT_FOUND"), &Value::from(false))
        );
        let wrong_method = ApiError::MethodNotAllowed {
            allowed: vec!["GET".into(), "HEAD".into()],
        };
        let body: Value = serde_json::from_slice(&wrong_method.body()).expect("json");
        assert_eq!(wrong_method.status(), 405);
        assert_eq!(body["errorCode"], "METHOD_NOT_ALLOWED");
        assert_eq!(body["retryable"], false);
        assert_eq!(body["details"]["allowed"], serde_json::json!(["GET", "HEAD"]));
    }
}
