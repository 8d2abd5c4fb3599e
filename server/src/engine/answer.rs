//! What a request is answered, in the contract's terms: the stored answer of its key's
//! operation, an unknown outcome, or one of the contract's errors. The engine decides which;
//! `http::payments` renders it, and the bodies come from the domain (a payment's
//! representation, `ApiError::body`), so every answer is made in one place.

use chrono::{DateTime, Utc};
use domain::api_error::ApiError;
use domain::claim::StoredResponse;
use domain::prefer::Wait;
use domain::representation::{ApiVersion, PaymentView};
use domain::scope::Operation;

/// The reply itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The answer stored for the key (the first execution's own, or a replay of it): status,
    /// headers and body bytes, exactly as stored.
    Stored(StoredResponse),
    /// `202 PAYMENT_OUTCOME_UNKNOWN` (`REFUND_OUTCOME_UNKNOWN`): the provider's answer was
    /// lost; retries get the same until recovery resolves it.
    OutcomeUnknown {
        operation: Operation,
        /// The payment's or the refund's id.
        resource_id: String,
        retry_after_secs: u64,
    },
    /// A contract error that is not bound to the key (it is not stored).
    Error(ApiError),
}

/// What the client is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub reply: Reply,
    /// `Idempotent-Replayed: true`.
    pub replayed: bool,
    /// `Idempotency-Expires`, when a record exists.
    pub expires_at: Option<DateTime<Utc>>,
    /// `Preference-Applied: wait=N`: the request asked to wait, and would have been held (up
    /// to N seconds) had another request owned its key.
    pub wait_applied: Option<Wait>,
}

impl Answer {
    pub(super) fn stored(response: StoredResponse, expires_at: Option<DateTime<Utc>>) -> Answer {
        Answer {
            reply: Reply::Stored(response),
            replayed: false,
            expires_at,
            wait_applied: None,
        }
    }

    pub(super) fn replay(response: StoredResponse, expires_at: Option<DateTime<Utc>>) -> Answer {
        Answer {
            replayed: true,
            ..Answer::stored(response, expires_at)
        }
    }

    pub(super) fn error(error: ApiError, expires_at: Option<DateTime<Utc>>) -> Answer {
        Answer {
            reply: Reply::Error(error),
            replayed: false,
            expires_at,
            wait_applied: None,
        }
    }

    /// `409 IDEMPOTENCY_REQUEST_IN_PROGRESS`: another owner holds the key now.
    pub(super) fn in_progress(retry_after_secs: u64, expires_at: Option<DateTime<Utc>>) -> Answer {
        Answer::error(ApiError::RequestInProgress { retry_after_secs }, expires_at)
    }

    pub(super) fn outcome_unknown(
        operation: Operation,
        resource_id: &str,
        retry_after_secs: u64,
        expires_at: Option<DateTime<Utc>>,
    ) -> Answer {
        Answer {
            reply: Reply::OutcomeUnknown {
                operation,
                resource_id: resource_id.to_owned(),
                retry_after_secs,
            },
            replayed: false,
            expires_at,
            wait_applied: None,
        }
    }

    pub(super) fn with_wait_applied(self, wait_applied: Option<Wait>) -> Answer {
        Answer { wait_applied, ..self }
    }

    /// The HTTP status this answer has.
    pub fn status(&self) -> u16 {
        match &self.reply {
            Reply::Stored(response) => response.status,
            Reply::OutcomeUnknown { .. } => 202,
            Reply::Error(error) => error.status(),
        }
    }

    /// The contract's error code, for the request journal (`None` for a success).
    pub fn error_code(&self) -> Option<String> {
        match &self.reply {
            Reply::Stored(response) if response.status >= 400 => {
                serde_json::from_slice::<serde_json::Value>(&response.body)
                    .ok()
                    .and_then(|body| body["errorCode"].as_str().map(str::to_owned))
            }
            Reply::Stored(_) => None,
            Reply::OutcomeUnknown { operation, .. } => Some(outcome_unknown_code(*operation).to_owned()),
            Reply::Error(error) => Some(error.code().to_owned()),
        }
    }
}

/// The code of an unknown outcome's `202` body.
pub fn outcome_unknown_code(operation: Operation) -> &'static str {
    match operation {
        Operation::CreatePayment => "PAYMENT_OUTCOME_UNKNOWN",
        Operation::CreateRefund => "REFUND_OUTCOME_UNKNOWN",
    }
}

/// The answers a settled payment stores for its key: `201` with the payment in the request's
/// API version, or a contract error bound to the key (a decline, insufficient funds).
pub(super) fn created(payment: &PaymentView, version: ApiVersion) -> StoredResponse {
    json_response(
        201,
        payment.body(version),
        vec![("location".to_owned(), format!("/payments/{}", payment.id))],
    )
}

pub(super) fn bound_error(error: &ApiError) -> StoredResponse {
    json_response(error.status(), error.body(), Vec::new())
}

pub(super) fn json_response(
    status: u16,
    body: Vec<u8>,
    mut headers: Vec<(String, String)>,
) -> StoredResponse {
    headers.insert(0, ("content-type".to_owned(), "application/json".to_owned()));
    StoredResponse {
        status,
        headers,
        body,
    }
}
