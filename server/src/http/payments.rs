//! The payments API's HTTP surface: request parsing in the contract's precedence
//! (authentication, then validation), and answers rendered with the contract's headers.

use super::error::ErrorResponse;
use super::openapi::{
    AnyRequestRefusals, ApiVersionName, CreatePaymentBody, CurrencyCode, DefaultCurrencySettings, Discovery,
    ErrorBody, KeyedRefusals, OutcomeUnknownBody, Payment,
};
use super::{AppState, Caller};
use crate::auth::api_key::PresentedKey;
use crate::auth::source::Source;
use crate::engine::{Answer, CreatePaymentRequest, Reply, outcome_unknown_code};
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::SecondsFormat;
use domain::api_error::ApiError;
use domain::command::{AccountId, CreatePayment, FieldProblem};
use domain::key::IdempotencyKey;
use domain::money::Currency;
use domain::prefer::{Preferences, Wait};
use domain::representation::ApiVersion;
use domain::scope::Operation;
use domain::tenant::Principal;
use serde_json::json;
use std::time::Duration;

/// `POST /payments`: a payment, made once per scoped key (tenant, operation, Idempotency-Key);
/// a retry gets the first answer.
#[utoipa::path(
    post,
    path = "/payments",
    tag = "payments",
    security(("apiKey" = [])),
    params(
        ("Idempotency-Key" = String, Header, min_length = 1, max_length = 255, pattern = r"^[\x21-\x7E]{1,255}$",
            description = "1 to 255 visible ASCII characters (0x21-0x7E). A tenant made with optional keys may leave it out."),
        ("Api-Version" = Option<ApiVersionName>, Header, nullable = false, description = "The tenant's pinned version when absent. Part of the fingerprint."),
        ("Prefer" = Option<String>, Header, nullable = false, description = "RFC 7240, not part of the fingerprint. `return=minimal`: a 201 without a body (Location only). `wait=N` (seconds, 1 to 10; larger is capped at 10): while another request owns the key, hold this one until that request answers or N seconds pass, then answer what a retry would get then (a replay, the 202, or at the deadline the 409 in progress); a different command is refused at once; past the instance's bound of held requests, the immediate 409."),
    ),
    request_body(content = CreatePaymentBody, content_type = "application/json"),
    responses(
        (status = 201, description = "A new payment, authorised; or the replay of one (Idempotent-Replayed: true, the first body byte for byte).", body = Payment,
            headers(
                ("Location" = String, description = "/payments/{id}"),
                ("Idempotency-Expires" = String, description = "RFC 3339: the end of the key's window"),
                ("Idempotent-Replayed" = String, description = "`true` on a replay, absent otherwise"),
                ("Preference-Applied" = String, description = "`wait=N` (the capped wait) when the request asked to wait and was not refused by the bound of held requests"),
            )),
        (status = 202, description = "PAYMENT_OUTCOME_UNKNOWN: the provider's answer was lost; retry with the same key.", body = OutcomeUnknownBody,
            headers(("Retry-After" = String, description = "seconds"), ("Idempotency-Expires" = String, description = "RFC 3339"), ("Preference-Applied" = String, description = "`wait=N` when the request asked to wait"))),
        (status = 402, description = "PAYMENT_DECLINED (details.paymentId); replayed for the same key.", body = ErrorBody,
            headers(("Idempotency-Expires" = String, description = "RFC 3339"), ("Idempotent-Replayed" = String, description = "`true` on a replay"))),
        (status = 404, description = "ACCOUNT_NOT_FOUND (also another tenant's account). Nothing recorded.", body = ErrorBody),
        (status = 409, description = "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST; IDEMPOTENCY_REQUEST_IN_PROGRESS (Retry-After); DUPLICATE_MERCHANT_REFERENCE (details.paymentId).", body = ErrorBody,
            headers(("Retry-After" = String, description = "seconds, while the first request runs"), ("Preference-Applied" = String, description = "`wait=N` when the request asked to wait and was held until N seconds passed"))),
        (status = 422, description = "INSUFFICIENT_FUNDS (binds the key); IDEMPOTENCY_KEY_EXPIRED under the `reject` policy (details.resourceId).", body = ErrorBody),
        KeyedRefusals,
    )
)]
pub async fn create_payment(
    State(state): State<AppState>,
    Caller(caller): Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let preferences = preferences(&headers);
    let request = match parse_create_payment(&state, caller, &headers, &body, preferences.wait).await {
        Ok(request) => request,
        Err(error) => return ErrorResponse(error).into_response(),
    };
    let answer = state.engine.create_payment(request).await;
    render(answer, preferences.minimal)
}

async fn parse_create_payment(
    state: &AppState,
    caller: Source,
    headers: &HeaderMap,
    body: &[u8],
    wait: Option<Wait>,
) -> Result<CreatePaymentRequest, ApiError> {
    let principal = authenticate(state, caller, headers).await?;
    let key = match idempotency_key(headers)? {
        Some(key) => Some(key),
        None if principal.require_idempotency_key => return Err(ApiError::IdempotencyKeyMissing),
        None => None,
    };
    let api_version = api_version(headers, &principal)?;
    let api_version_requested = headers.contains_key("api-version");
    let command =
        CreatePayment::parse_json(body).map_err(|invalid| ApiError::ValidationFailed(invalid.problems))?;
    Ok(CreatePaymentRequest {
        principal,
        key,
        api_version,
        api_version_requested,
        command,
        wait,
    })
}

/// The request's `Idempotency-Key`, parsed, if it has one.
pub(super) fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    headers
        .get("idempotency-key")
        .map(|value| IdempotencyKey::parse(value.as_bytes()).map_err(ApiError::from))
        .transpose()
}

/// The request's `Api-Version`, or the tenant's pinned one.
pub(super) fn api_version(headers: &HeaderMap, principal: &Principal) -> Result<ApiVersion, ApiError> {
    let text = match headers.get("api-version") {
        Some(value) => value.to_str().unwrap_or_default(),
        None => principal.pinned_api_version.as_str(),
    };
    ApiVersion::parse(text).ok_or_else(|| ApiError::UnsupportedApiVersion(text.to_owned()))
}

/// `GET /payments/{id}`: the payment's current state (a fresh read, not a replay), in the
/// caller's API version; another tenant's payment does not exist.
#[utoipa::path(
    get,
    path = "/payments/{id}",
    tag = "payments",
    security(("apiKey" = [])),
    params(
        ("id" = String, Path, description = "The payment's id (pay_…)"),
        ("Api-Version" = Option<ApiVersionName>, Header, nullable = false, description = "The tenant's pinned version when absent"),
    ),
    responses(
        (status = 200, description = "The payment now, in the caller's version.", body = Payment),
        (status = 400, description = "UNSUPPORTED_API_VERSION", body = ErrorBody),
        (status = 404, description = "PAYMENT_NOT_FOUND (also another tenant's payment)", body = ErrorBody),
        AnyRequestRefusals,
    )
)]
pub async fn get_payment(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let principal = match authenticate(&state, caller, &headers).await {
        Ok(principal) => principal,
        Err(error) => return ErrorResponse(error).into_response(),
    };
    let version = match api_version(&headers, &principal) {
        Ok(version) => version,
        Err(error) => return ErrorResponse(error).into_response(),
    };
    match state.store.payment(&principal.tenant_id, &id).await {
        Ok(Some(payment)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            payment.body(version),
        )
            .into_response(),
        Ok(None) => ErrorResponse(ApiError::PaymentNotFound).into_response(),
        Err(error) => ErrorResponse(error.as_api_error("payment read")).into_response(),
    }
}

/// `PUT /accounts/{accountId}/settings/default-currency`: strict, unknown fields refused.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DefaultCurrencyBody {
    /// ISO 4217 (lower case is accepted too).
    #[schema(value_type = CurrencyCode)]
    currency: String,
}

/// `PUT /accounts/{accountId}/settings/default-currency`: naturally idempotent. Repeating it
/// leaves the same state and writes no second audit entry.
#[utoipa::path(
    put,
    path = "/accounts/{account_id}/settings/default-currency",
    tag = "payments",
    security(("apiKey" = [])),
    params(("account_id" = String, Path, example = "acc_1", description = "The tenant's account id")),
    request_body(content = DefaultCurrencyBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The account's settings (the same when nothing changed).", body = DefaultCurrencySettings),
        (status = 400, description = "VALIDATION_FAILED (details.fields)", body = ErrorBody),
        (status = 404, description = "ACCOUNT_NOT_FOUND", body = ErrorBody),
        (status = 413, description = "PAYLOAD_TOO_LARGE", body = ErrorBody),
        AnyRequestRefusals,
    )
)]
pub async fn set_default_currency(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(account_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let principal = match authenticate(&state, caller, &headers).await {
        Ok(principal) => principal,
        Err(error) => return ErrorResponse(error).into_response(),
    };
    let currency = match serde_json::from_slice::<DefaultCurrencyBody>(&body) {
        Ok(body) => match Currency::parse(&body.currency) {
            Ok(currency) => currency,
            Err(problem) => return ErrorResponse(invalid_field("currency", problem)).into_response(),
        },
        Err(problem) => return ErrorResponse(invalid_field("body", problem)).into_response(),
    };
    // An id that cannot exist is answered like any missing account.
    let Ok(account) = AccountId::parse(&account_id) else {
        return ErrorResponse(ApiError::AccountNotFound).into_response();
    };
    match state
        .store
        .set_default_currency(&principal.tenant_id, &account, currency, &principal.api_key_id)
        .await
    {
        Ok(Some(_changed)) => Json(json!({
            "accountId": account.as_str(),
            "defaultCurrency": currency.code(),
        }))
        .into_response(),
        Ok(None) => ErrorResponse(ApiError::AccountNotFound).into_response(),
        Err(error) => ErrorResponse(error.as_api_error("set default currency")).into_response(),
    }
}

fn invalid_field(field: &str, problem: impl std::fmt::Display) -> ApiError {
    ApiError::ValidationFailed(vec![FieldProblem {
        field: field.to_owned(),
        problem: problem.to_string(),
    }])
}

/// `Authorization: Bearer <api key>`: a value shaped like a key, looked up by its hash (kept
/// verified for a few seconds), then held to its rate limit. A source that keeps presenting
/// unknown keys is refused before its next unverified ones cost a database query; keys
/// verified already still pass.
pub(super) async fn authenticate(
    state: &AppState,
    caller: Source,
    headers: &HeaderMap,
) -> Result<Principal, ApiError> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .and_then(PresentedKey::parse)
        .ok_or(ApiError::Unauthenticated)?;
    let limited = |wait: Duration| ApiError::RateLimited {
        retry_after_secs: wait.as_secs() + 1,
    };
    let hash = presented.hash();
    let principal = match state.verified_keys.verified(&hash) {
        Some(principal) => Ok(Some(principal)),
        None => {
            state.failed_authentications.check(caller).map_err(limited)?;
            state.verified_keys.look_up(state.store.as_ref(), hash).await
        }
    };
    match principal {
        Ok(Some(principal)) => match state.rate_limit.check(&principal.tenant_id) {
            Ok(()) => Ok(principal),
            Err(wait) => Err(limited(wait)),
        },
        Ok(None) => {
            state.failed_authentications.failed(caller);
            Err(ApiError::Unauthenticated)
        }
        Err(error) => Err(error.as_api_error("authentication")),
    }
}

/// What the request's `Prefer` header values ask for.
pub(super) fn preferences(headers: &HeaderMap) -> Preferences {
    Preferences::parse(
        headers
            .get_all("prefer")
            .iter()
            .filter_map(|value| value.to_str().ok()),
    )
}

/// The engine's answer as HTTP (in the shape the request's `Prefer` asks for), with the
/// contract's headers: `Idempotent-Replayed`, `Idempotency-Expires`, `Retry-After`,
/// `Preference-Applied`.
pub(super) fn render(answer: Answer, minimal: bool) -> Response {
    let mut response = match answer.reply {
        Reply::Stored(stored) => {
            let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            // A minimal 201 is the Location alone; a replay honours the retry's own preference.
            let minimal = minimal && status == StatusCode::CREATED;
            let body = if minimal { Vec::new() } else { stored.body };
            let mut response = (status, body).into_response();
            let headers = response.headers_mut();
            for (name, value) in &stored.headers {
                if minimal && name == "content-type" {
                    continue;
                }
                if let (Ok(name), Ok(value)) = (
                    HeaderName::try_from(name.as_str()),
                    HeaderValue::try_from(value.as_str()),
                ) {
                    headers.insert(name, value);
                }
            }
            response
        }
        Reply::OutcomeUnknown {
            operation,
            resource_id,
            retry_after_secs,
        } => {
            let id_field = match operation {
                Operation::CreatePayment => "paymentId",
                Operation::CreateRefund => "refundId",
            };
            let body = json!({
                id_field: resource_id,
                "status": "PROCESSING",
                "errorCode": outcome_unknown_code(operation),
            });
            let mut response = (StatusCode::ACCEPTED, Json(body)).into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            response
        }
        Reply::Error(error) => ErrorResponse(error).into_response(),
    };
    let headers = response.headers_mut();
    if answer.replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    if let Some(wait) = answer.wait_applied
        && let Ok(value) = HeaderValue::try_from(wait.applied())
    {
        headers.insert("preference-applied", value);
    }
    if let Some(expires_at) = answer.expires_at
        && let Ok(value) = HeaderValue::try_from(expires_at.to_rfc3339_opts(SecondsFormat::Secs, true))
    {
        headers.insert("idempotency-expires", value);
    }
    response
}

/// `GET /idempotency`: each operation's window, in-progress lease and policy after expiry.
#[utoipa::path(
    get,
    path = "/idempotency",
    tag = "operations",
    responses((status = 200, description = "Each keyed operation's window, lease and policy after expiry; no authentication.", body = Discovery))
)]
pub async fn discovery(State(state): State<AppState>) -> Response {
    let settings = state.engine.settings();
    let operations: Vec<serde_json::Value> = [
        (Operation::CreatePayment, "/payments"),
        (Operation::CreateRefund, "/payments/{paymentId}/refunds"),
    ]
    .into_iter()
    .map(|(operation, path)| {
        let of = settings.of(operation);
        json!({
            "operation": operation,
            "method": "POST",
            "path": path,
            "windowSeconds": of.expiry.window.as_secs(),
            "inProgressLeaseSeconds": of.lease.as_secs(),
            "afterExpiry": of.expiry.after_expiry.as_str(),
            "retentionSeconds": of.expiry.retention.as_secs(),
        })
    })
    .collect();
    Json(json!({ "operations": operations })).into_response()
}
