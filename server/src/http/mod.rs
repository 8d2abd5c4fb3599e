//! Router assembly and the middleware every request goes through.

pub mod api_keys;
mod by_key;
pub mod error;
mod health;
pub mod openapi;
mod payments;
pub mod rate_limit;
mod refunds;
mod shared_port;

use crate::auth::source::{Source, Sources};
use crate::bounds::Bounds;
use crate::engine::PaymentsEngine;
use crate::http::error::ErrorResponse;
use crate::metrics::prometheus::Exposition;
use crate::store::Store;
use axum::Router;
use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::routing::get;
use domain::api_error::ApiError;
use std::net::SocketAddr;
use std::sync::Arc;
use tower_http::compression::CompressionLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

pub use shared_port::{ApiPaths, SharedPort};

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub engine: Arc<PaymentsEngine>,
    pub rate_limit: Arc<rate_limit::ApiRateLimit>,
    pub verified_keys: Arc<api_keys::VerifiedKeys>,
    pub failed_authentications: Arc<rate_limit::FailedAuthentications>,
    pub sources: Sources,
}

/// Who sent an API request, as the limits count callers.
pub struct Caller(pub Source);

impl FromRequestParts<AppState> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Caller, Self::Rejection> {
        // Served with connect info always; a router driven without it counts as one source.
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |ConnectInfo(peer)| *peer);
        Ok(Caller(state.sources.of(peer, &parts.headers)))
    }
}

/// The payments API's router, bounded, and the paths it answers under (for the port it may
/// share with the console).
pub struct Api {
    pub router: Router,
    pub paths: ApiPaths,
}

/// The payments API.
pub fn api(state: AppState, bounds: &Bounds) -> Api {
    let (api, document) = OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(payments::create_payment, by_key::find_payments))
        .routes(routes!(payments::get_payment))
        .routes(routes!(payments::discovery))
        .routes(routes!(payments::set_default_currency))
        .routes(routes!(refunds::create_refund))
        .routes(routes!(refunds::get_refund))
        .routes(routes!(by_key::find_refunds))
        .split_for_parts();
    let paths = ApiPaths::of(&document, &[DOCS_PATH, DOCUMENT_PATH]);
    let api = api
        .merge(api_docs(document))
        .with_state(state)
        .layer(axum::middleware::from_fn(record_latency));
    // Around the whole router, not around each route: axum writes a 405's `Allow` after the
    // layers of the route that refused the method have run.
    let router =
        Router::new()
            .fallback_service(bounds.around(api))
            .layer(axum::middleware::map_response_with_state(
                bounds.body_limit_bytes,
                in_the_contracts_shape,
            ));
    Api { router, paths }
}

/// Where the API's docs page and its OpenAPI document are served.
const DOCS_PATH: &str = "/docs";
const DOCUMENT_PATH: &str = "/openapi.json";

/// What every answer goes through, on whichever port: compression, the request id (made,
/// echoed) and a span per request.
pub fn outermost(router: Router) -> Router {
    router
        .layer(CompressionLayer::new())
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_response(DefaultOnResponse::new().level(tracing::Level::INFO)),
        )
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
}

/// The API's docs (Swagger UI, its assets from the binary) and the document they render. They
/// are served on the console's origin, so they get a policy of their own: scripts and styles
/// from here only (Swagger UI sets inline styles and draws icons from `data:` images), nothing
/// framed, nothing sniffed.
fn api_docs(document: utoipa::openapi::OpenApi) -> Router<AppState> {
    Router::from(SwaggerUi::new(DOCS_PATH).url(DOCUMENT_PATH, document))
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
                 img-src 'self' data:; font-src 'self' data:; connect-src 'self'; \
                 base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            ),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ))
}

/// The metrics listener's router: `GET /metrics` only. It is served on an address of its own
/// (`--metrics-listen`), never on the API's: the figures name every tenant, and each scrape
/// runs database reads.
pub fn metrics_router(exposition: Arc<Exposition>, bounds: &Bounds) -> Router {
    bounds.around(
        Router::new()
            .route("/metrics", get(metrics_text))
            .with_state(exposition),
    )
}

/// The API's answers from outside its handlers in the contract's JSON shape, like every other
/// error of the API: an oversized body and a request that ran out of time (the layers around
/// the handlers), a path the API does not have and a method its path does not accept (the
/// router, whose 405 names the accepted methods in `Allow`).
async fn in_the_contracts_shape(
    State(body_limit_bytes): State<usize>,
    response: axum::response::Response,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let contract_shaped = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
    match response.status() {
        _ if contract_shaped => response,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorResponse(ApiError::PayloadTooLarge {
            limit_bytes: body_limit_bytes,
        })
        .into_response(),
        StatusCode::SERVICE_UNAVAILABLE => ErrorResponse(ApiError::Unavailable).into_response(),
        StatusCode::NOT_FOUND => ErrorResponse(ApiError::NotFound).into_response(),
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = response
                .headers()
                .get(header::ALLOW)
                .and_then(|allow| allow.to_str().ok())
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|method| !method.is_empty())
                .map(str::to_owned)
                .collect();
            ErrorResponse(ApiError::MethodNotAllowed { allowed }).into_response()
        }
        _ => response,
    }
}

/// `GET /metrics`: Prometheus text exposition.
async fn metrics_text(State(exposition): State<Arc<Exposition>>) -> axum::response::Response {
    use axum::response::IntoResponse;
    match exposition.render().await {
        Some(text) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            )],
            text,
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder not installed\n",
        )
            .into_response(),
    }
}

/// Latency of every API request, by method, route (never the raw path: ids would explode
/// the label set) and status.
async fn record_latency(request: Request, next: axum::middleware::Next) -> axum::response::Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let method = request.method().to_string();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    metrics::histogram!(
        "http_request_duration_seconds",
        "method" => method,
        "route" => route,
        "status" => response.status().as_u16().to_string(),
    )
    .record(started.elapsed().as_secs_f64());
    response
}

/// One span per request, carrying the request id that is also echoed to the client, so that
/// every log line of a request can be found from the client's `x-request-id`. Only the path
/// is logged: query strings and bodies may carry data that must not reach logs.
fn request_span(request: &Request) -> tracing::Span {
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("-");
    tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id,
    )
}
