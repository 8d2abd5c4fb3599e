//! The API and the console on one port (the default; `application.rs` assembles it from the
//! two routers, of which `http` builds only the API's): each request goes to the one it is
//! meant for. An API client that mistypes a path must be told so in the contract's shape, not be
//! redirected to the console's sign-in or refused as a cross-origin browser, which would send
//! its developers looking at CORS instead of at the path.

use app::auth::SERVER_FUNCTIONS_PREFIX;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use tower::ServiceExt;

/// The first path segments the API answers under (`payments`, `healthz`, `docs`, ...).
#[derive(Debug, Clone)]
pub struct ApiPaths(Arc<BTreeSet<String>>);

impl ApiPaths {
    /// The segments of every path in the API's document, and of the extra paths it serves
    /// undocumented (the document itself and its docs page).
    pub fn of(document: &utoipa::openapi::OpenApi, undocumented: &[&str]) -> ApiPaths {
        let segments = document
            .paths
            .paths
            .keys()
            .map(String::as_str)
            .chain(undocumented.iter().copied())
            .map(|path| first_segment(path).to_owned())
            .collect();
        ApiPaths(Arc::new(segments))
    }

    fn own(&self, path: &str) -> bool {
        self.0.contains(first_segment(path))
    }
}

fn first_segment(path: &str) -> &str {
    let path = path.trim_start_matches('/');
    path.split_once('/').map_or(path, |(first, _)| first)
}

/// Both routers, and what tells their requests apart.
#[derive(Clone)]
pub struct SharedPort {
    pub api: Router,
    pub console: Router,
    pub api_paths: ApiPaths,
}

impl SharedPort {
    pub fn router(self) -> Router {
        Router::new().fallback(dispatch).with_state(self)
    }

    /// A request is the API's when it names one of the API's paths, carries an API key, or
    /// speaks JSON outside the console's server functions (which speak JSON too, under their
    /// own prefix). Everything else is the console's: its pages, its 404 page, its sign-in
    /// redirect and its Origin check, as a browser gets them.
    fn is_api_call(&self, request: &Request) -> bool {
        let path = request.uri().path();
        self.api_paths.own(path)
            || carries_bearer_key(request.headers())
            || (!path.starts_with(SERVER_FUNCTIONS_PREFIX) && speaks_json(request.headers()))
    }
}

async fn dispatch(State(port): State<SharedPort>, request: Request) -> Response {
    let router = if port.is_api_call(&request) {
        port.api
    } else {
        port.console
    };
    let answered: Result<Response, Infallible> = router.oneshot(request).await;
    answered.unwrap_or_else(|never| match never {})
}

fn carries_bearer_key(headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.as_bytes().get(..7))
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
}

/// Sends JSON, or asks for JSON and not HTML (a browser's navigation always asks for HTML).
fn speaks_json(headers: &HeaderMap) -> bool {
    let is = |value: &str, wanted: &str| {
        let media_type = value.split(';').next().unwrap_or_default().trim();
        media_type.eq_ignore_ascii_case(wanted)
    };
    let sends_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| is(value, "application/json"));
    let accepted: Vec<&str> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .collect();
    let asks_for_json = accepted.iter().any(|value| is(value, "application/json"))
        && !accepted.iter().any(|value| is(value, "text/html"));
    sends_json || asks_for_json
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| (name.clone(), HeaderValue::from_static(value)))
            .collect()
    }

    #[test]
    fn a_path_belongs_to_the_api_by_its_first_segment() {
        let paths = ApiPaths(Arc::new(
            ["payments", "healthz", "openapi.json", "docs"]
                .map(String::from)
                .into(),
        ));
        for path in [
            "/payments",
            "/payments/pay_1/nothing",
            "/healthz",
            "/openapi.json",
            "/docs/",
            "/docs",
        ] {
            assert!(paths.own(path), "{path}");
        }
        for path in [
            "/",
            "/payment",
            "/paymentsx",
            "/records/payments",
            "/api/console/find",
            "/sign-in",
        ] {
            assert!(!paths.own(path), "{path}");
        }
    }

    #[test]
    fn a_bearer_key_in_any_spelling_of_the_scheme_marks_an_api_call() {
        assert!(carries_bearer_key(&headers(&[(
            header::AUTHORIZATION,
            "Bearer idem_key_x"
        )])));
        assert!(carries_bearer_key(&headers(&[(
            header::AUTHORIZATION,
            "bearer idem_key_x"
        )])));
        assert!(!carries_bearer_key(&headers(&[(
            header::AUTHORIZATION,
            "Basic dXNlcg=="
        )])));
        assert!(!carries_bearer_key(&headers(&[(header::AUTHORIZATION, "Bear")])));
        assert!(!carries_bearer_key(&HeaderMap::new()));
    }

    #[test]
    fn json_without_html_marks_an_api_call_and_a_browsers_navigation_does_not() {
        let browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8";
        assert!(!speaks_json(&headers(&[(header::ACCEPT, browser)])));
        assert!(!speaks_json(&headers(&[(header::ACCEPT, "*/*")])));
        assert!(!speaks_json(&headers(&[(
            header::ACCEPT,
            "application/json, text/html"
        )])));
        assert!(!speaks_json(&headers(&[(
            header::CONTENT_TYPE,
            "application/x-www-form-urlencoded"
        )])));
        assert!(speaks_json(&headers(&[(header::ACCEPT, "application/json")])));
        assert!(speaks_json(&headers(&[(
            header::ACCEPT,
            "Application/JSON; charset=utf-8"
        )])));
        assert!(speaks_json(&headers(&[(
            header::CONTENT_TYPE,
            "application/json"
        )])));
    }
}
