//! The console's router: its pages and server functions (Leptos), sign-in and sign-out, the
//! downloads, the built assets, and what wraps them all: the session, the gate, the security
//! headers and the bounds. Served on the API's port (`application.rs` sends a request to the
//! one it is meant for) or on its own (`--console-listen`); `http` knows nothing of it.

use super::StoreConsole;
use super::access::{self, AccessState};
use super::limits::SignInLimits;
use super::refusals::SignInRefusals;
use super::{bulk, exports};
use crate::auth::source::Sources;
use crate::bounds::Bounds;
use crate::store::Store;
use app::backend::Backend;
use axum::Router;
use axum::http::{HeaderValue, header};
use axum::routing::{get, post};
use leptos::prelude::*;
use leptos_axum::{AxumRouteListing, LeptosRoutes, generate_route_list};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tower_http::services::ServeDir;
use tower_http::set_header::{SetResponseHeader, SetResponseHeaderLayer};

/// What the console needs besides the store.
#[derive(Debug, Clone)]
pub struct ConsoleSettings {
    /// Where the built console lives (`pkg/` inside it).
    pub site_root: PathBuf,
    /// The address the console believes it is served on (for Leptos's options).
    pub site_addr: SocketAddr,
    /// Mark the session cookie `Secure` (serve behind TLS).
    pub secure_cookies: bool,
    /// How a caller's address is found (the sign-in limits count callers by it).
    pub sources: Sources,
    /// A session's absolute lifetime.
    pub session_lifetime: Duration,
    pub bounds: Bounds,
}

/// The console, bounded; refused sign-ins are counted into `refusals`.
pub fn router(
    console: StoreConsole,
    store: Arc<dyn Store>,
    refusals: Arc<SignInRefusals>,
    settings: &ConsoleSettings,
) -> Router {
    let backend = Backend(Arc::new(console.clone()));
    let access = AccessState {
        store,
        limits: Arc::new(SignInLimits::default()),
        refusals,
        password_checks: access::password_checks(),
        sources: settings.sources,
        session_lifetime: settings.session_lifetime,
    };
    settings.bounds.around(pages(console, backend, access, settings))
}

/// The console: server-rendered pages, their server functions, and the built assets. Pages
/// set their own Content-Security-Policy (with the nonce of their inline scripts); every other
/// answer gets one that allows nothing, and none may be framed or sniffed.
fn pages(
    store_console: StoreConsole,
    backend: Backend,
    access: AccessState,
    settings: &ConsoleSettings,
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
    // on an unchanged Last-Modified) rather than cache blindly across deploys. The build
    // gzips each asset once (scripts/build-site), and a client that takes gzip is sent that
    // file. Compressed per request, the console's wasm took a debug server seconds of a core
    // at every page load (most of the browser tests' CPU), and a release server CPU that
    // anyone who can reach the port could ask for again and again.
    let assets = SetResponseHeader::overriding(
        ServeDir::new(settings.site_root.join("pkg")).precompressed_gzip(),
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );

    let sign_in = Router::new()
        .route("/sign-in", post(access::sign_in))
        .route("/sign-out", post(access::sign_out))
        .with_state(access.clone());
    let downloads = Router::new()
        .route("/console/bulk-jobs/{id}/results.csv", get(bulk::results_file))
        .route("/console/records.csv", get(exports::records_file))
        .with_state(store_console);
    let session_layer = access::session_layer(&access, settings.secure_cookies);

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
        .layer(axum::middleware::from_fn_with_state(access.clone(), access::gate))
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
