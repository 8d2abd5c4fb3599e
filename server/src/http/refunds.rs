//! The refunds API: `POST /payments/{paymentId}/refunds` through the same idempotency layer as
//! payments, and `GET /refunds/{refundId}`. Parsing follows the contract's precedence:
//! authentication, the key, the version, the body, then the payment (a refund's amount is
//! read in its payment's currency); nothing is recorded before all of them pass.

use super::error::ErrorResponse;
use super::openapi::{
    AnyRequestRefusals, ApiVersionName, ErrorBody, KeyedRefusals, Refund, RefundBodySchema,
    RefundOutcomeUnknownBody,
};
use super::payments::{api_version, authenticate, idempotency_key, preferences, render};
use super::{AppState, Caller};
use crate::auth::source::Source;
use crate::engine::CreateRefundRequest;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::api_error::ApiError;
use domain::prefer::Wait;
use domain::refund::{RefundBody, RefundOf};

/// `POST /payments/{paymentId}/refunds`: a refund, made once per scoped key (tenant,
/// create_refund, Idempotency-Key); a retry gets the first answer.
#[utoipa::path(
    post,
    path = "/payments/{paymentId}/refunds",
    tag = "refunds",
    security(("apiKey" = [])),
    params(
        ("paymentId" = String, Path, description = "The payment to refund (pay_…); part of the fingerprint"),
        ("Idempotency-Key" = String, Header, min_length = 1, max_length = 255, pattern = r"^[\x21-\x7E]{1,255}$",
            description = "1 to 255 visible ASCII characters (0x21-0x7E). Always required for refunds."),
        ("Api-Version" = Option<ApiVersionName>, Header, nullable = false, description = "Checked; a refund looks the same in every version, so it is not part of the fingerprint."),
        ("Prefer" = Option<String>, Header, nullable = false, description = "RFC 7240, not part of the fingerprint. `return=minimal`: a 201 without a body (Location only). `wait=N` (seconds, 1 to 10; larger is capped at 10): while another request owns the key, hold this one until that request answers or N seconds pass, then answer what a retry would get then (a replay, the 202, or at the deadline the 409 in progress); a different command is refused at once; past the instance's bound of held requests, the immediate 409."),
    ),
    request_body(content = RefundBodySchema, content_type = "application/json"),
    responses(
        (status = 201, description = "A refund made by the provider; or the replay of one (Idempotent-Replayed: true, the first body byte for byte).", body = Refund,
            headers(
                ("Location" = String, description = "/refunds/{refundId}"),
                ("Idempotency-Expires" = String, description = "RFC 3339: the end of the key's window"),
                ("Idempotent-Replayed" = String, description = "`true` on a replay, absent otherwise"),
                ("Preference-Applied" = String, description = "`wait=N` (the capped wait) when the request asked to wait and was not refused by the bound of held requests"),
            )),
        (status = 202, description = "REFUND_OUTCOME_UNKNOWN: the provider's answer was lost; retry with the same key.", body = RefundOutcomeUnknownBody,
            headers(("Retry-After" = String, description = "seconds"), ("Idempotency-Expires" = String, description = "RFC 3339"), ("Preference-Applied" = String, description = "`wait=N` when the request asked to wait"))),
        (status = 402, description = "REFUND_DECLINED (details.refundId); replayed for the same key.", body = ErrorBody,
            headers(("Idempotency-Expires" = String, description = "RFC 3339"), ("Idempotent-Replayed" = String, description = "`true` on a replay"))),
        (status = 404, description = "PAYMENT_NOT_FOUND (also another tenant's payment). Nothing recorded.", body = ErrorBody),
        (status = 409, description = "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST; IDEMPOTENCY_REQUEST_IN_PROGRESS (Retry-After); DUPLICATE_REFUND_REFERENCE (details.refundId); PAYMENT_NOT_REFUNDABLE (details.paymentStatus, nothing recorded).", body = ErrorBody,
            headers(("Retry-After" = String, description = "seconds, while the first request runs"), ("Preference-Applied" = String, description = "`wait=N` when the request asked to wait and was held until N seconds passed"))),
        (status = 422, description = "REFUND_EXCEEDS_REMAINING (details.remaining; binds the key); IDEMPOTENCY_KEY_EXPIRED under the `reject` policy (details.resourceId).", body = ErrorBody),
        KeyedRefusals,
    )
)]
pub async fn create_refund(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(payment_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let preferences = preferences(&headers);
    let request =
        match parse_create_refund(&state, caller, &payment_id, &headers, &body, preferences.wait).await {
            Ok(request) => request,
            Err(error) => return ErrorResponse(error).into_response(),
        };
    let answer = state.engine.create_refund(request).await;
    render(answer, preferences.minimal)
}

async fn parse_create_refund(
    state: &AppState,
    caller: Source,
    payment_id: &str,
    headers: &HeaderMap,
    body: &[u8],
    wait: Option<Wait>,
) -> Result<CreateRefundRequest, ApiError> {
    let principal = authenticate(state, caller, headers).await?;
    let key = idempotency_key(headers)?.ok_or(ApiError::IdempotencyKeyMissing)?;
    let api_version = api_version(headers, &principal)?;
    let body =
        RefundBody::parse_json(body).map_err(|invalid| ApiError::ValidationFailed(invalid.problems))?;
    let payment = state
        .store
        .refundable_payment(&principal.tenant_id, payment_id)
        .await
        .map_err(|error| error.as_api_error("payment read for a refund"))?
        .ok_or(ApiError::PaymentNotFound)?;
    let command = body
        .command(payment.id, payment.currency)
        .map_err(|invalid| ApiError::ValidationFailed(invalid.problems))?;
    Ok(CreateRefundRequest {
        principal,
        key,
        api_version,
        command,
        of: RefundOf::Payment,
        wait,
    })
}

/// `GET /refunds/{refundId}`: the refund's current state (a fresh read, not a replay);
/// another tenant's refund does not exist.
#[utoipa::path(
    get,
    path = "/refunds/{refundId}",
    tag = "refunds",
    security(("apiKey" = [])),
    params(("refundId" = String, Path, description = "The refund's id (rf_…)")),
    responses(
        (status = 200, description = "The refund now.", body = Refund),
        (status = 404, description = "REFUND_NOT_FOUND (also another tenant's refund)", body = ErrorBody),
        AnyRequestRefusals,
    )
)]
pub async fn get_refund(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(refund_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let principal = match authenticate(&state, caller, &headers).await {
        Ok(principal) => principal,
        Err(error) => return ErrorResponse(error).into_response(),
    };
    match state.store.refund(&principal.tenant_id, &refund_id).await {
        Ok(Some(refund)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            refund.view.body(),
        )
            .into_response(),
        Ok(None) => ErrorResponse(ApiError::RefundNotFound).into_response(),
        Err(error) => ErrorResponse(error.as_api_error("refund read")).into_response(),
    }
}
