//! Router assembly and the middleware every request goes through.

pub mod api_keys;
pub mod error;
mod health;
pub mod openapi;
mod payments;
pub mod rate_limit;
mod refunds;
mod shared_port;

use crate::auth::source::{Source, Sources};
use crate::console;
use crate::console::StoreConsole;
use crate::console::access::AccessState;
use crate::console::limits::SignInLimits;
use crate::console::refusals::SignInRefusals;
use crate::engine::PaymentsEngine;
use crate::http::error::ErrorResponse;
use crate::http::shared_port::{ApiPaths, SharedPort};
use crate::metrics::prometheus::Exposition;
use crate::store::Store;
use app::backend::Backend;
use axum::Router;
use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::routing::{get, post};
use domain::api_error::ApiError;
use leptos::prelude::*;
use leptos_axum::{AxumRouteListing, LeptosRoutes, generate_route_list};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower_http::compression::CompressionLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::services::ServeDir;
use tower_http::set_header::{SetResponseHeader, SetResponseHeaderLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

/// What the router needs besides the store.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Where the built console lives (`pkg/` inside it).
    pub site_root: PathBuf,
    /// The address the console believes it is served on (for Leptos's options).
    pub site_addr: SocketAddr,
    pub request_timeout: Duration,
    pub body_limit_bytes: usize,
    /// Mark the console's session cookie `Secure` (serve behind TLS).
    pub secure_cookies: bool,
    /// How a caller's address is found (the limits count callers by it).
    pub sources: Sources,
    /// A console session's absolute lifetime.
    pub session_lifetime: Duration,
}

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

/// The payments API and the console, each behind the middleware every request goes through:
/// served on one port ([`Routers::shared`]) or each on its own (`--console-listen`).
pub struct Routers {
    pub api: Router,
    pub console: Router,
    api_paths: ApiPaths,
}

impl Routers {
    /// Both on one port, the default: each request goes to the one it is meant for.
    pub fn shared(self) -> Router {
        outermost(
            SharedPort {
                api: self.api,
                console: self.console,
                api_paths: self.api_paths,
            }
            .router(),
        )
    }

    /// The API and the console apart: an API port that serves nothing of the console.
    pub fn apart(self) -> (Router, Router) {
        (outermost(self.api), outermost(self.console))
    }
}

/// The payments API's router and the console's.
pub fn routers(
    state: AppState,
    console: StoreConsole,
    refusals: Arc<SignInRefusals>,
    settings: &HttpSettings,
) -> Routers {
    let console_backend = Backend(Arc::new(console.clone()));
    let access = AccessState {
        store: state.store.clone(),
        limits: Arc::new(SignInLimits::default()),
        refusals,
        password_checks: console::access::password_checks(),
        sources: settings.sources,
        session_lifetime: settings.session_lifetime,
    };

    let (api, document) = OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(payments::create_payment))
        .routes(routes!(payments::get_payment))
        .routes(routes!(payments::discovery))
        .routes(routes!(payments::set_default_currency))
        .routes(routes!(refunds::create_refund))
        .routes(routes!(refunds::get_refund))
        .split_for_parts();
    let api_paths = ApiPaths::of(&document, &[DOCS_PATH, DOCUMENT_PATH]);
    let api = api
        .merge(api_docs(document))
        .with_state(state)
        .layer(axum::middleware::from_fn(record_latency));
    // Around the whole router, not around each route: axum writes a 405's `Allow` after the
    // layers of the route that refused the method have run.
    let api = Router::new().fallback_service(bounded(api, settings)).layer(
        axum::middleware::map_response_with_state(settings.body_limit_bytes, in_the_contracts_shape),
    );
    let console = bounded(
        console_router(console, console_backend, access, settings),
        settings,
    );
    Routers {
        api,
        console,
        api_paths,
    }
}

/// Where the API's docs page and its OpenAPI document are served.
const DOCS_PATH: &str = "/docs";
const DOCUMENT_PATH: &str = "/openapi.json";

/// What every answer goes through, on whichever port: compression, the request id (made,
/// echoed) and a span per request.
fn outermost(router: Router) -> Router {
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
pub fn metrics_router(exposition: Arc<Exposition>, settings: &HttpSettings) -> Router {
    let metrics = Router::new()
        .route("/metrics", get(metrics_text))
        .with_state(exposition);
    bounded(metrics, settings)
}

/// `router` with the body limit and the request timeout (each part answers their refusals
/// in its own way).
fn bounded(router: Router, settings: &HttpSettings) -> Router {
    router
        .layer(RequestBodyLimitLayer::new(settings.body_limit_bytes))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            settings.request_timeout,
        ))
}

/// The console: server-rendered pages, their server functions, and the built assets. Pages
/// set their own Content-Security-Policy (with the nonce of their inline scripts); every other
/// answer gets one that allows nothing, and none may be framed or sniffed.
fn console_router(
    store_console: StoreConsole,
    backend: Backend,
    access: AccessState,
    settings: &HttpSettings,
) -> Router {
    let options = LeptosOptions::builder()
        .output_name("idem")
        .site_root(settings.site_root.to_string_lossy().into_owned())
        .site_pkg_dir("pkg")
        .site_addr(settings.site_addr)
        .build();
    let routes = console_routes();
    let provide_backend = move || provide_context(backend.clone());

    // File names under pkg/ are not content-hashed, so browsers must revalidate (cheap: 304
    // on an unchanged Last-Modified) rather than cache blindly across deploys.
    let assets = SetResponseHeader::overriding(
        ServeDir::new(settings.site_root.join("pkg")),
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );

    let sign_in = Router::new()
        .route("/sign-in", post(console::access::sign_in))
        .route("/sign-out", post(console::access::sign_out))
        .with_state(access.clone());
    let downloads = Router::new()
        .route(
            "/console/bulk-jobs/{id}/results.csv",
            get(console::bulk::results_file),
        )
        .route("/console/records.csv", get(console::exports::records_file))
        .with_state(store_console);
    let session_layer = console::access::session_layer(&access, settings.secure_cookies);

    Router::new()
        .leptos_routes_with_context(&options, routes, provide_backend.clone(), {
            let options = options.clone();
            move || app::shell(options.clone())
        })
        .nest_service("/pkg", assets)
        .fallback(leptos_axum::file_and_error_handler_with_context(
            provide_backend,
            app::shell,
        ))
        .with_state(options)
        .merge(sign_in)
        .merge(downloads)
        .layer(axum::middleware::from_fn_with_state(
            access.clone(),
            console::access::gate,
        ))
        .layer(session_layer)
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        ))
}

/// The console's routes, listed once per process. Listing them runs the app with resource
/// loading suppressed through a *process-wide* flag (leptos_server's
/// `IS_SUPPRESSING_RESOURCE_LOAD`, leptos issue #4773): a page whose resource first polls
/// while any router is being built waits forever (the request timeout then answers 503). So
/// no router may be built while pages render; `serve` builds one at start, and in-process
/// tests build many, concurrently, which made a page hang about once in a few hundred renders.
fn console_routes() -> Vec<AxumRouteListing> {
    static ROUTES: std::sync::OnceLock<Vec<AxumRouteListing>> = std::sync::OnceLock::new();
    ROUTES.get_or_init(|| generate_route_list(app::App)).clone()
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
