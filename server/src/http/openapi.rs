//! The payments API's OpenAPI 3.1 document. Each handler carries its own `#[utoipa::path]`
//! (method, path, headers, every status with its error codes) and the API router is built from
//! those annotations (`utoipa_axum::routes!`), so a route cannot exist undocumented or be
//! documented at another path. The wire formats the handlers parse by hand (strictly, in the
//! domain) are described here as schemas. Served at `/openapi.json`, with a docs page at
//! `/docs` whose assets are compiled into the binary.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Content, HeaderBuilder, Object, Ref, ResponseBuilder, Type};
use utoipa::{IntoResponses, Modify, OpenApi, ToSchema};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Idem payments API",
        description = "Payments with a payment-grade idempotency layer. Every error body has the \
            shape of `ErrorBody`; `errorCode` values are part of the contract. A keyed request's \
            scope is (tenant, operation, Idempotency-Key); a retry inside the window gets the \
            first answer again, byte for byte, with `Idempotent-Replayed: true`. A request the \
            API recognises as its own (under one of its paths, with a bearer key, or sending or \
            asking for JSON and not HTML) to a path it does not have is `404 NOT_FOUND`, and \
            with a method its path does not accept `405 METHOD_NOT_ALLOWED` with `Allow` \
            (components `NotFound` and `MethodNotAllowed`); it is never sent to the console's \
            sign-in.",
    ),
    modifiers(&BearerAuth, &WrongPathOrMethod),
    // Referenced from header parameters, which do not bring their schemas along.
    components(schemas(ApiVersionName)),
    tags((name = "payments", description = "Payments and their idempotency"), (name = "refunds", description = "Refunds: the second keyed operation"), (name = "operations", description = "Health and discovery"))
)]
pub struct ApiDoc;

/// `Authorization: Bearer <api key>` (keys are made with `idem api-key create` or in the
/// console).
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "apiKey",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The answers to a path the API does not have and to a method a path does not accept. OpenAPI
/// describes the paths that exist, not the ones that do not, so these are reusable responses
/// that no operation lists.
struct WrongPathOrMethod;

impl Modify for WrongPathOrMethod {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let error_body = || Content::new(Some(Ref::from_schema_name("ErrorBody")));
        let components = openapi.components.get_or_insert_with(Default::default);
        components.responses.insert(
            "NotFound".to_owned(),
            ResponseBuilder::new()
                .description("`NOT_FOUND`: the API has no such path.")
                .content("application/json", error_body())
                .build()
                .into(),
        );
        components.responses.insert(
            "MethodNotAllowed".to_owned(),
            ResponseBuilder::new()
                .description(
                    "`METHOD_NOT_ALLOWED`: the path does not accept the method; `Allow` and \
                     `details.allowed` list the methods it does accept.",
                )
                .header(
                    "Allow",
                    HeaderBuilder::new()
                        .schema(Some(Object::with_type(Type::String)))
                        .description(Some("The accepted methods, e.g. `GET, HEAD`."))
                        .build(),
                )
                .content("application/json", error_body())
                .build()
                .into(),
        );
    }
}

/// `POST /payments`: strict, unknown fields are refused. Money is a decimal string, never a
/// JSON number.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format; the domain parses it")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreatePaymentBody {
    #[schema(example = "acc_1", pattern = "^[A-Za-z0-9_-]{1,64}$")]
    account_id: String,
    /// Positive, with at most the currency's minor-unit digits (EUR 2, JPY 0); "10" = "10.00".
    #[schema(example = "10.00", pattern = r"^(0|[1-9][0-9]{0,11})(\.[0-9]{1,2})?$")]
    amount: String,
    /// ISO 4217 (lower case is accepted too).
    currency: CurrencyCode,
    /// No control characters; compared exactly.
    #[schema(example = "invoice-7781", pattern = r"^[^\u0000-\u001F\u007F-\u009F]{1,128}$")]
    merchant_reference: String,
    /// Absent means `web`.
    #[schema(nullable = false)]
    channel: Option<Channel>,
}

/// The supported currencies.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
pub enum CurrencyCode {
    #[serde(rename = "CHF")]
    Chf,
    #[serde(rename = "EUR")]
    Eur,
    #[serde(rename = "GBP")]
    Gbp,
    #[serde(rename = "JPY")]
    Jpy,
    #[serde(rename = "USD")]
    Usd,
}

/// The representations a client may ask for (`Api-Version`); a tenant's pinned one otherwise.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
pub enum ApiVersionName {
    #[serde(rename = "2026-05-01")]
    V2,
    #[serde(rename = "2026-09-01")]
    V3,
}

#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Web,
    Mobile,
    Pos,
}

#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PaymentStatusName {
    Processing,
    Pending,
    Settled,
    Declined,
}

/// A payment in `Api-Version: 2026-05-01`.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(rename_all = "camelCase")]
pub struct PaymentV2 {
    #[schema(example = "pay_01a24fa65fa24f6c0e1d2a3b4c5d")]
    payment_id: String,
    status: PaymentStatusName,
    account_id: String,
    #[schema(example = "10.00")]
    amount: String,
    currency: String,
    merchant_reference: String,
}

/// A payment in `Api-Version: 2026-09-01`.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(rename_all = "camelCase")]
pub struct PaymentV3 {
    id: String,
    state: PaymentStatusName,
    account_id: String,
    amount: String,
    currency: String,
    merchant_reference: String,
    /// RFC 3339, UTC.
    #[schema(example = "2026-05-07T10:00:00Z")]
    created_at: String,
}

/// A payment, in the version the answer was produced in.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(untagged)]
pub enum Payment {
    V2(PaymentV2),
    V3(PaymentV3),
}

/// `GET /payments?idempotencyKey=K`: the payment the key made, or none.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
pub struct PaymentsFound {
    /// At most one.
    data: Vec<Payment>,
}

/// `GET /refunds?idempotencyKey=K`: the refund the key made, or none.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
pub struct RefundsFound {
    /// At most one.
    data: Vec<Refund>,
}

/// `202`: the provider's answer was lost; a retry with the same key gets the reconciled result
/// once recovery has it.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(rename_all = "camelCase")]
pub struct OutcomeUnknownBody {
    payment_id: String,
    #[schema(example = "PROCESSING")]
    status: String,
    #[schema(example = "PAYMENT_OUTCOME_UNKNOWN")]
    error_code: String,
}

/// `POST /payments/{paymentId}/refunds`: strict, unknown fields are refused.
#[derive(ToSchema, serde::Serialize)]
#[schema(as = RefundBody)]
#[allow(dead_code, reason = "a description of the wire format; the domain parses it")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RefundBodySchema {
    /// In the payment's currency: positive, with at most its minor-unit digits.
    #[schema(example = "4.00", pattern = r"^(0|[1-9][0-9]{0,11})(\.[0-9]{1,2})?$")]
    amount: String,
    /// Absent means `requested_by_customer`.
    #[schema(nullable = false)]
    reason: Option<RefundReasonName>,
    /// The merchant's refund reference: with the payment, the refund's business key.
    #[schema(example = "rf-1", pattern = r"^[^\u0000-\u001F\u007F-\u009F]{1,128}$")]
    reference: String,
}

#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(rename_all = "snake_case")]
pub enum RefundReasonName {
    RequestedByCustomer,
    Duplicate,
    Fraudulent,
}

#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RefundStatusName {
    Processing,
    Succeeded,
    Failed,
}

/// A refund (the same in every API version).
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(rename_all = "camelCase")]
pub struct Refund {
    #[schema(example = "rf_01a24fa65fa24f6c0e1d2a3b4c5d")]
    refund_id: String,
    payment_id: String,
    #[schema(example = "4.00")]
    amount: String,
    currency: String,
    reason: RefundReasonName,
    reference: String,
    status: RefundStatusName,
    /// RFC 3339, UTC.
    #[schema(example = "2026-11-30T10:00:00Z")]
    created_at: String,
}

/// `202`: the provider's answer to a refund was lost; a retry with the same key gets the
/// reconciled result once recovery has it.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(rename_all = "camelCase")]
pub struct RefundOutcomeUnknownBody {
    refund_id: String,
    #[schema(example = "PROCESSING")]
    status: String,
    #[schema(example = "REFUND_OUTCOME_UNKNOWN")]
    error_code: String,
}

/// Every error: a stable code, a sentence, whether repeating the request with the same key can
/// help, and details where the code has them (`fields`, `paymentId`, `refundId`, `remaining`,
/// `paymentStatus`, `resourceId`, `limitBytes`, `allowed`).
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    #[schema(example = "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST")]
    error_code: String,
    message: String,
    retryable: bool,
    details: Option<serde_json::Value>,
}

/// The refusals any authenticated request of the API may answer instead of its own (listed in
/// its `responses` beside those).
#[derive(IntoResponses)]
#[allow(dead_code, reason = "a description of the wire format")]
pub enum AnyRequestRefusals {
    #[response(status = 401, description = "UNAUTHENTICATED")]
    Unauthenticated(ErrorBody),
    #[response(status = 429, description = "RATE_LIMITED",
        headers(("Retry-After" = String, description = "seconds")))]
    RateLimited(ErrorBody),
    #[response(status = 503, description = "UNAVAILABLE",
        headers(("Retry-After" = String, description = "seconds")))]
    Unavailable(ErrorBody),
}

/// The refusals a keyed request may answer before its operation runs, or instead of it,
/// whatever the operation.
#[derive(IntoResponses)]
#[allow(dead_code, reason = "a description of the wire format")]
pub enum KeyedRefusals {
    #[response(
        status = 400,
        description = "IDEMPOTENCY_KEY_MISSING, IDEMPOTENCY_KEY_INVALID, UNSUPPORTED_API_VERSION, or VALIDATION_FAILED (details.fields). Nothing recorded."
    )]
    Invalid(ErrorBody),
    #[response(
        status = 401,
        description = "UNAUTHENTICATED: missing, unknown or revoked API key. Nothing recorded."
    )]
    Unauthenticated(ErrorBody),
    #[response(
        status = 413,
        description = "PAYLOAD_TOO_LARGE (details.limitBytes). Nothing recorded."
    )]
    PayloadTooLarge(ErrorBody),
    #[response(status = 429, description = "RATE_LIMITED. Nothing recorded.",
        headers(("Retry-After" = String, description = "seconds")))]
    RateLimited(ErrorBody),
    #[response(
        status = 500,
        description = "INTERNAL_ERROR before any side effect; a retry executes."
    )]
    Internal(ErrorBody),
    #[response(status = 503,
        description = "UNAVAILABLE: the idempotency store is unreachable, or the request timed out; a retry gets the answer.",
        headers(("Retry-After" = String, description = "seconds")))]
    Unavailable(ErrorBody),
}

#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(rename_all = "camelCase")]
pub struct DefaultCurrencySettings {
    account_id: String,
    default_currency: String,
}

/// One keyed operation's idempotency settings.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
#[serde(rename_all = "camelCase")]
pub struct OperationSettings {
    #[schema(example = "create_payment")]
    operation: String,
    method: String,
    path: String,
    window_seconds: u64,
    in_progress_lease_seconds: u64,
    #[schema(example = "new_operation")]
    after_expiry: String,
    retention_seconds: u64,
}

#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
pub struct Discovery {
    operations: Vec<OperationSettings>,
}

/// `/healthz` and `/readyz`: `{"status": "ok" | "ready" | "not_ready", "reason": …}`.
#[derive(ToSchema, serde::Serialize)]
#[allow(dead_code, reason = "a description of the wire format")]
pub struct Health {
    status: String,
    reason: Option<String>,
}
