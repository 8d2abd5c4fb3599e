//! Finding a resource by its idempotency key (`GET /payments?idempotencyKey=K`,
//! `GET /refunds?idempotencyKey=K`): what a client that lost its answer asks instead of sending
//! the command again. A read: it records nothing, takes no lease and answers the resource as it
//! is now, found through the key's record, a tombstone's too.

use super::error::ErrorResponse;
use super::openapi::{AnyRequestRefusals, ApiVersionName, ErrorBody, PaymentsFound, RefundsFound};
use super::payments::{api_version, authenticate};
use super::{AppState, Caller};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::api_error::ApiError;
use domain::key::IdempotencyKey;
use domain::scope::{Operation, Scope};
use domain::tenant::Principal;

/// `GET /payments?idempotencyKey=K`.
#[utoipa::path(
    get,
    path = "/payments",
    tag = "payments",
    security(("apiKey" = [])),
    params(
        ("idempotencyKey" = String, Query, min_length = 1, max_length = 255, pattern = r"^[\x21-\x7E]{1,255}$",
            description = "The Idempotency-Key a create_payment was sent with."),
        ("Api-Version" = Option<ApiVersionName>, Header, nullable = false, description = "The tenant's pinned version when absent"),
    ),
    responses(
        (status = 200, description = "The payment the key made, as it is now and in the caller's version (PROCESSING while the key runs); `data` is empty when the key made none, or is another tenant's. Records nothing.", body = PaymentsFound),
        (status = 400, description = "IDEMPOTENCY_KEY_MISSING, IDEMPOTENCY_KEY_INVALID or UNSUPPORTED_API_VERSION", body = ErrorBody),
        AnyRequestRefusals,
    )
)]
pub async fn find_payments(
    State(state): State<AppState>,
    Caller(caller): Caller,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let found = async {
        let principal = authenticate(&state, caller, &headers).await?;
        let version = api_version(&headers, &principal)?;
        let Some(payment_id) = made_by(&state, &principal, Operation::CreatePayment, query).await? else {
            return Ok(None);
        };
        let payment = state
            .store
            .payment(&principal.tenant_id, &payment_id)
            .await
            .map_err(|error| error.as_api_error("payment read"))?;
        Ok(payment.map(|payment| payment.body(version)))
    };
    listed(found.await)
}

/// `GET /refunds?idempotencyKey=K`.
#[utoipa::path(
    get,
    path = "/refunds",
    tag = "refunds",
    security(("apiKey" = [])),
    params(
        ("idempotencyKey" = String, Query, min_length = 1, max_length = 255, pattern = r"^[\x21-\x7E]{1,255}$",
            description = "The Idempotency-Key a create_refund was sent with."),
    ),
    responses(
        (status = 200, description = "The refund the key made, as it is now (PROCESSING while the key runs); `data` is empty when the key made none, or is another tenant's. Records nothing.", body = RefundsFound),
        (status = 400, description = "IDEMPOTENCY_KEY_MISSING or IDEMPOTENCY_KEY_INVALID", body = ErrorBody),
        AnyRequestRefusals,
    )
)]
pub async fn find_refunds(
    State(state): State<AppState>,
    Caller(caller): Caller,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let found = async {
        let principal = authenticate(&state, caller, &headers).await?;
        let Some(refund_id) = made_by(&state, &principal, Operation::CreateRefund, query).await? else {
            return Ok(None);
        };
        let refund = state
            .store
            .refund(&principal.tenant_id, &refund_id)
            .await
            .map_err(|error| error.as_api_error("refund read"))?;
        Ok(refund.map(|refund| refund.view.body()))
    };
    listed(found.await)
}

/// The id of the resource the caller's key made under `operation`, if it made one: read from
/// the key's record (a tombstone keeps it), never from the stored answer.
async fn made_by(
    state: &AppState,
    principal: &Principal,
    operation: Operation,
    query: Option<String>,
) -> Result<Option<String>, ApiError> {
    let scope = Scope {
        tenant_id: principal.tenant_id.clone(),
        operation,
        key: key_of(query.as_deref())?,
    };
    let found = state
        .store
        .look_up(&scope)
        .await
        .map_err(|error| error.as_api_error("look-up by key"))?;
    Ok(found.and_then(|found| found.at.record.resource_id))
}

/// The `idempotencyKey` query parameter, parsed as the header is; other parameters are
/// ignored, as a list's unknown filters are.
fn key_of(query: Option<&str>) -> Result<IdempotencyKey, ApiError> {
    let raw = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(name, _)| name == "idempotencyKey")
        .map(|(_, value)| value.into_owned())
        .ok_or(ApiError::IdempotencyKeyMissing)?;
    Ok(IdempotencyKey::parse(raw.as_bytes())?)
}

/// `{"data": [<the resource>]}`, or `{"data": []}`.
fn listed(found: Result<Option<Vec<u8>>, ApiError>) -> Response {
    match found {
        Ok(resource) => {
            let mut body = b"{\"data\":[".to_vec();
            body.extend(resource.unwrap_or_default());
            body.extend_from_slice(b"]}");
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
                body,
            )
                .into_response()
        }
        Err(error) => ErrorResponse(error).into_response(),
    }
}
