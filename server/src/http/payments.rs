//! The payments API's HTTP surface: request parsing in the contract's precedence
//! (authentication, then validation), and answers rendered with the contract's headers.

use super::AppState;
use super::error::ErrorResponse;
use crate::auth::api_key::ApiKeyHash;
use crate::engine::{Answer, CreatePaymentRequest, Reply};
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
use domain::representation::{ApiVersion, PaymentStatus};
use domain::tenant::Principal;
use serde_json::json;

/// `POST /payments`.
pub async fn create_payment(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let request = match parse_create_payment(&state, &headers, &body).await {
        Ok(request) => request,
        Err(error) => return ErrorResponse(error).into_response(),
    };
    let minimal = prefers_minimal(&headers);
    let engine = state.engine.clone();
    // Its own task: a client hanging up cannot cancel the operation halfway.
    match tokio::spawn(async move { engine.create_payment(request).await }).await {
        Ok(answer) => render(answer, minimal),
        Err(error) => {
            tracing::error!(%error, "create_payment task failed");
            ErrorResponse(ApiError::Internal).into_response()
        }
    }
}

async fn parse_create_payment(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<CreatePaymentRequest, ApiError> {
    let principal = authenticate(state, headers).await?;
    let key = match headers.get("idempotency-key") {
        Some(value) => Some(
            IdempotencyKey::parse(value.as_bytes())
                .map_err(|problem| ApiError::IdempotencyKeyInvalid(problem.to_string()))?,
        ),
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
    })
}

/// The request's `Api-Version`, or the tenant's pinned one.
fn api_version(headers: &HeaderMap, principal: &Principal) -> Result<ApiVersion, ApiError> {
    let text = match headers.get("api-version") {
        Some(value) => value.to_str().unwrap_or_default(),
        None => principal.pinned_api_version.as_str(),
    };
    ApiVersion::parse(text).ok_or_else(|| ApiError::UnsupportedApiVersion(text.to_owned()))
}

/// `GET /payments/{id}`: the payment's current state (a fresh read, not a replay), in the
/// caller's API version; another tenant's payment does not exist.
pub async fn get_payment(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let principal = match authenticate(&state, &headers).await {
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

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DefaultCurrencyBody {
    currency: String,
}

/// `PUT /accounts/{accountId}/settings/default-currency`: naturally idempotent. Repeating it
/// leaves the same state and writes no second audit entry.
pub async fn set_default_currency(
    State(state): State<AppState>,
    Path(account_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let principal = match authenticate(&state, &headers).await {
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

/// `Authorization: Bearer <api key>`, looked up by its hash (kept verified for a few seconds),
/// then held to its rate limit.
async fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Principal, ApiError> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|key| !key.is_empty())
        .ok_or(ApiError::Unauthenticated)?;
    match state
        .verified_keys
        .principal(state.store.as_ref(), ApiKeyHash::of(presented))
        .await
    {
        Ok(Some(principal)) => match state.rate_limit.check(&principal.api_key_id) {
            Ok(()) => Ok(principal),
            Err(wait) => Err(ApiError::RateLimited {
                retry_after_secs: wait.as_secs() + 1,
            }),
        },
        Ok(None) => Err(ApiError::Unauthenticated),
        Err(error) => Err(error.as_api_error("authentication")),
    }
}

fn prefers_minimal(headers: &HeaderMap) -> bool {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|preference| preference.trim().eq_ignore_ascii_case("return=minimal"))
}

/// The engine's answer as HTTP, with the contract's headers: `Idempotent-Replayed`,
/// `Idempotency-Expires`, `Retry-After`.
fn render(answer: Answer, minimal: bool) -> Response {
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
            payment_id,
            retry_after_secs,
        } => {
            let body = json!({
                "paymentId": payment_id,
                "status": PaymentStatus::Processing.as_str(),
                "errorCode": "PAYMENT_OUTCOME_UNKNOWN",
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
    if let Some(expires_at) = answer.expires_at
        && let Ok(value) = HeaderValue::try_from(expires_at.to_rfc3339_opts(SecondsFormat::Secs, true))
    {
        headers.insert("idempotency-expires", value);
    }
    response
}

/// `GET /idempotency`: each operation's window, in-progress lease and policy after expiry.
pub async fn discovery(State(state): State<AppState>) -> Response {
    let settings = state.engine.settings();
    Json(json!({
        "operations": [{
            "operation": CreatePayment::OPERATION,
            "method": "POST",
            "path": "/payments",
            "windowSeconds": settings.expiry.window.as_secs(),
            "inProgressLeaseSeconds": settings.lease.as_secs(),
            "afterExpiry": settings.expiry.after_expiry.as_str(),
            "retentionSeconds": settings.expiry.retention.as_secs(),
        }]
    }))
    .into_response()
}
