//! Who may use the console, and how: operators sign in with a password (Argon2id) into a
//! server-side session (axum-login over tower-sessions, kept in Idem's database); the session
//! cookie is HttpOnly and SameSite=Strict; every state-changing request must come from the
//! console's own origin; everything but the sign-in page and its assets needs a session (deny
//! by default), and each server function checks the operator's role again on the server.

use super::limits::SignInLimits;
use super::refusals::{Refusal, SignInRefusals};
use super::sessions::StoreSessions;
use crate::auth::operator::PasswordChecks;
use crate::auth::source::Sources;
use crate::store::Store;
use crate::store::operators::StoredOperator;
use app::auth::SERVER_FUNCTIONS_PREFIX;
use app::sign_in::model::CurrentOperator;
use axum::extract::{ConnectInfo, Form, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum_login::{AuthManagerLayer, AuthManagerLayerBuilder, AuthSession, AuthUser, AuthnBackend, UserId};
use domain::operator::AuditEntry;
use domain::operator::OperatorRole;
use domain::operator::OperatorUsername;
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::sync::Arc;
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};

/// A signed-in operator, as the session layer keeps it.
#[derive(Clone)]
pub struct SignedIn {
    id: String,
    username: String,
    role: OperatorRole,
    /// SHA-256 of the operator's password hash: the session is bound to the password
    /// (changing it signs every session out) without the session holding the hash itself.
    password_binding: [u8; 32],
}

impl SignedIn {
    fn of(operator: StoredOperator) -> SignedIn {
        SignedIn {
            password_binding: Sha256::digest(operator.password_hash.as_bytes()).into(),
            id: operator.id,
            username: operator.username,
            role: operator.role,
        }
    }
}

impl std::fmt::Debug for SignedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedIn")
            .field("username", &self.username)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl AuthUser for SignedIn {
    type Id = String;

    fn id(&self) -> String {
        self.id.clone()
    }

    fn session_auth_hash(&self) -> &[u8] {
        &self.password_binding
    }
}

pub struct Credentials {
    pub username: String,
    pub password: String,
}

#[derive(Clone)]
pub struct Operators {
    store: Arc<dyn Store>,
    password_checks: Arc<PasswordChecks>,
}

/// Password checks at once per core.
const PASSWORD_CHECKS_PER_CORE: usize = 2;

/// This machine's password checkers: two per core.
pub fn password_checks() -> Arc<PasswordChecks> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    Arc::new(PasswordChecks::new(PASSWORD_CHECKS_PER_CORE * cores))
}

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("every password check is taken")]
    Busy,
}

impl AuthnBackend for Operators {
    type User = SignedIn;
    type Credentials = Credentials;
    type Error = AccessError;

    async fn authenticate(&self, credentials: Credentials) -> Result<Option<SignedIn>, AccessError> {
        let operator = match OperatorUsername::parse(&credentials.username) {
            Ok(username) => self.store.operator_by_username(username.as_str()).await?,
            Err(_) => None,
        }
        .filter(|operator| !operator.disabled);
        let hash = operator.as_ref().map(|operator| operator.password_hash.clone());
        // An unknown user is checked against a decoy, so both answers take as long.
        let matches = self
            .password_checks
            .check(credentials.password, hash)
            .await
            .ok_or(AccessError::Busy)?;
        Ok(operator.filter(|_| matches).map(SignedIn::of))
    }

    async fn get_user(&self, id: &UserId<Self>) -> Result<Option<SignedIn>, AccessError> {
        Ok(self
            .store
            .operator_by_id(id)
            .await?
            .filter(|operator| !operator.disabled)
            .map(SignedIn::of))
    }
}

pub type OperatorSession = AuthSession<Operators>;

/// How long a session lasts without use.
const SESSION_IDLE: time::Duration = time::Duration::hours(8);
/// Where a session keeps when its operator signed in (Unix seconds), for its absolute lifetime.
const SIGNED_IN_AT: &str = "idem.signed_in_at";

pub fn session_layer(
    access: &AccessState,
    secure_cookies: bool,
) -> AuthManagerLayer<Operators, StoreSessions> {
    let store = access.store.clone();
    let sessions = SessionManagerLayer::new(StoreSessions::new(store.clone()))
        .with_name("idem_session")
        .with_http_only(true)
        .with_same_site(SameSite::Strict)
        .with_secure(secure_cookies)
        .with_expiry(Expiry::OnInactivity(SESSION_IDLE));
    let operators = Operators {
        store,
        password_checks: access.password_checks.clone(),
    };
    AuthManagerLayerBuilder::new(operators, sessions).build()
}

#[derive(Clone)]
pub struct AccessState {
    pub store: Arc<dyn Store>,
    pub limits: Arc<SignInLimits>,
    /// Refused sign-ins, counted and summed up in the audit log once a minute per source.
    pub refusals: Arc<SignInRefusals>,
    pub password_checks: Arc<PasswordChecks>,
    pub sources: Sources,
    /// How long a session lasts after its sign-in, however much it is used.
    pub session_lifetime: std::time::Duration,
}

#[derive(serde::Deserialize)]
pub struct SignInForm {
    username: String,
    password: String,
    #[serde(default)]
    next: String,
}

/// Where to go after signing in: a page of this console, parsed as one (its route, then only
/// characters that cannot make a browser leave the site), or the dashboard. Filtering out
/// known bad prefixes is not enough: browsers drop tabs and newlines from URLs and read `\`
/// as `/`, so `/\t/evil.example` would be followed to `//evil.example`.
fn safe_next(next: &str) -> &str {
    if is_console_page(next) { next } else { "/" }
}

fn is_console_page(target: &str) -> bool {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let Some(path) = path.strip_prefix('/') else {
        return false;
    };
    let segments: Vec<&str> = path.split('/').collect();
    let known_route = match segments.as_slice() {
        [""] | ["records" | "recovery" | "events" | "audit"] => true,
        ["records", tenant, operation, key] => !tenant.is_empty() && !operation.is_empty() && !key.is_empty(),
        _ => false,
    };
    known_route && segments.iter().all(|segment| url_text(segment, b"")) && url_text(query, b"=&+")
}

/// Only unreserved characters, `extra`, and percent escapes of printable characters other
/// than `/` and `\` (which would change the path a browser follows).
fn url_text(text: &str, extra: &[u8]) -> bool {
    let bytes = text.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let escaped = text
                .get(at + 1..at + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok());
            match escaped {
                Some(byte) if (0x20..0x7f).contains(&byte) && byte != b'/' && byte != b'\\' => at += 3,
                _ => return false,
            }
            continue;
        }
        let byte = bytes[at];
        if !(byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) || extra.contains(&byte)) {
            return false;
        }
        at += 1;
    }
    true
}

/// `POST /sign-in` (an HTML form; works without JavaScript). A refusal writes nothing: it is
/// counted, and the audit log gets one summary per source a minute (see `refusals`), so that
/// a flood of wrong passwords cannot queue writes in front of payments.
pub async fn sign_in(
    State(access): State<AccessState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    mut session: OperatorSession,
    Form(form): Form<SignInForm>,
) -> Response {
    let source = access.sources.of(peer, &headers);
    let refuse = |refusal: Refusal| {
        access.refusals.count(source, &form.username, refusal);
        let error = match refusal {
            Refusal::WrongPassword => "invalid",
            Refusal::RateLimited | Refusal::Busy => "limited",
        };
        Redirect::to(&format!("/sign-in?error={error}")).into_response()
    };
    if !access.limits.allow(source, &form.username) {
        return refuse(Refusal::RateLimited);
    }
    let credentials = Credentials {
        username: form.username.clone(),
        password: form.password.clone(),
    };
    match session.authenticate(credentials).await {
        Ok(Some(operator)) => {
            if let Err(error) = start_session(&mut session, &operator).await {
                tracing::error!(%error, "console: session not started");
                return StatusCode::SERVICE_UNAVAILABLE.into_response();
            }
            record(&access, AuditEntry::new(&operator.username, "sign_in")).await;
            Redirect::to(safe_next(&form.next)).into_response()
        }
        Ok(None) => refuse(Refusal::WrongPassword),
        Err(axum_login::Error::Backend(AccessError::Busy)) => refuse(Refusal::Busy),
        Err(error) => {
            tracing::error!(%error, "console: sign-in failed");
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
    }
}

/// Signs `operator` in under a new session id, always: a browser already signed in (as anyone)
/// gets a new id too, so an id seen before the sign-in is worth nothing after it. (axum-login
/// renews the id only for a session with nobody signed in.)
async fn start_session(
    session: &mut OperatorSession,
    operator: &SignedIn,
) -> Result<(), axum_login::Error<Operators>> {
    if session.user.is_some() {
        session.session.cycle_id().await?;
    }
    session.login(operator).await?;
    session
        .session
        .insert(SIGNED_IN_AT, chrono::Utc::now().timestamp())
        .await?;
    Ok(())
}

/// Whether the session's sign-in is younger than `lifetime` (a session without a sign-in time
/// is not).
async fn within_lifetime(session: &OperatorSession, lifetime: std::time::Duration) -> bool {
    let signed_in_at = session.session.get::<i64>(SIGNED_IN_AT).await.ok().flatten();
    let age = |at: i64| chrono::Utc::now().timestamp().saturating_sub(at);
    signed_in_at.is_some_and(|at| u64::try_from(age(at)).is_ok_and(|age| age < lifetime.as_secs()))
}

/// `POST /sign-out`.
pub async fn sign_out(State(access): State<AccessState>, mut session: OperatorSession) -> Response {
    if let Ok(Some(operator)) = session.logout().await {
        record(&access, AuditEntry::new(operator.username, "sign_out")).await;
    }
    Redirect::to("/sign-in").into_response()
}

async fn record(access: &AccessState, entry: AuditEntry) {
    if let Err(error) = access.store.append_audit(&entry).await {
        tracing::error!(%error, action = %entry.action, "console: audit entry not written");
    }
}

/// Paths anyone may fetch: the sign-in page and form, and the assets it needs.
fn is_public(path: &str) -> bool {
    path == "/sign-in" || path.starts_with("/pkg/") || path == "/favicon.svg"
}

/// The console's gate, after the session layer: same-origin check on every state-changing
/// request, the signed-in operator put where server functions find it, and everything else
/// refused without a session (pages redirect to sign-in; server functions get 401).
pub async fn gate(
    State(access): State<AccessState>,
    mut session: OperatorSession,
    mut request: Request,
    next: Next,
) -> Response {
    if !matches!(*request.method(), Method::GET | Method::HEAD) && !same_origin(request.headers()) {
        return (StatusCode::FORBIDDEN, "cross-origin request refused\n").into_response();
    }
    let path = request.uri().path().to_owned();
    let operator = match session.user.clone() {
        Some(operator) if within_lifetime(&session, access.session_lifetime).await => Some(operator),
        Some(operator) => {
            if let Err(error) = session.logout().await {
                tracing::warn!(%error, "console: an expired session was not removed");
            }
            record(
                &access,
                AuditEntry::new(operator.username, "session_expired").ended("signed_out"),
            )
            .await;
            None
        }
        None => None,
    };
    match operator {
        Some(operator) => {
            request.extensions_mut().insert(CurrentOperator {
                username: operator.username,
                role: operator.role,
            });
            next.run(request).await
        }
        None if is_public(&path) => next.run(request).await,
        None if path.starts_with(SERVER_FUNCTIONS_PREFIX) => {
            (StatusCode::UNAUTHORIZED, "sign in first\n").into_response()
        }
        None => {
            let target = format!("/sign-in?next={}", urlencode(request.uri().path()));
            Redirect::to(&target).into_response()
        }
    }
}

/// A browser names the page's origin on every POST; it must be this console's own (the `Host`
/// the request was sent to). A missing `Origin` is refused too: only non-browser clients omit
/// it, and they have no business posting to the console.
fn same_origin(headers: &HeaderMap) -> bool {
    let origin = headers.get(header::ORIGIN).and_then(|value| value.to_str().ok());
    let host = headers.get(header::HOST).and_then(|value| value.to_str().ok());
    match (origin, host) {
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(scheme, authority)| matches!(scheme, "http" | "https") && authority == host),
        _ => false,
    }
}

fn urlencode(path: &str) -> String {
    path.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn only_the_consoles_own_pages_are_followed_after_sign_in() {
        for page in [
            "/",
            "/records?status=UNKNOWN_REQUIRES_RECOVERY&after=%5B%222026%22%5D",
            "/records/ten_1/create_payment/abc-123",
            "/records/ten_1/create_payment/k%20with%20space",
            "/recovery",
            "/events",
            "/audit?before=x",
        ] {
            assert_eq!(safe_next(page), page);
        }
        for outside in [
            "",
            "https://evil.example/",
            "javascript:alert(1)",
            "//evil.example",
            "/\\evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/%09/evil.example",
            "/%2F/evil.example",
            "/%2f%2fevil.example",
            "/%5C/evil.example",
            "/records/%2F/x/y",
            "/records//evil.example",
            "///evil.example",
            "/evil.example",
            "/records?next=//evil.example",
            "/records?x=%0a",
            "/records/a/b",
        ] {
            assert_eq!(safe_next(outside), "/", "{outside:?}");
        }
    }

    #[test]
    fn a_post_must_name_this_console_as_its_origin() {
        let headers = |origin: Option<&'static str>| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:3000"));
            if let Some(origin) = origin {
                headers.insert(header::ORIGIN, HeaderValue::from_static(origin));
            }
            headers
        };
        assert!(same_origin(&headers(Some("http://127.0.0.1:3000"))));
        assert!(!same_origin(&headers(Some("http://evil.example"))));
        assert!(!same_origin(&headers(Some("http://127.0.0.1:3001"))));
        assert!(!same_origin(&headers(Some("null"))));
        assert!(!same_origin(&headers(None)));
    }
}
