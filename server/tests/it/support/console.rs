//! A browser of the console, as far as the server can tell: one session cookie, and the
//! console's own origin on every POST.

use domain::operator::{AuditEntry, OperatorRole};
use idem::auth::operator::Password;
use idem::store::operators::StoredOperator;
use idem::store::{OperatorStore, StoreError};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::OnceLock;

/// The password of every operator the tests create.
pub const OPERATOR_PASSWORD: &str = "correct horse battery staple";

/// Creates an operator whose password is `OPERATOR_PASSWORD`, audited as the command line
/// audits it.
pub async fn create_operator(
    store: &dyn OperatorStore,
    username: &str,
    role: OperatorRole,
) -> Result<(), StoreError> {
    let operator = StoredOperator {
        id: format!("op_{username}"),
        username: username.to_owned(),
        password_hash: operator_password_hash(),
        role,
        disabled: false,
    };
    let audit = AuditEntry::new("test", "operator.create").on(format!("operator {username}"));
    store.create_operator(&operator, &audit).await
}

/// `OPERATOR_PASSWORD`'s Argon2 hash, made once per test process and given to every operator
/// the process makes: Argon2 costs tens of milliseconds of a core on purpose, and one test makes
/// forty operators. Signing in still checks the password against it.
fn operator_password_hash() -> String {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| Password::parse(OPERATOR_PASSWORD).expect("password").hash())
        .clone()
}

/// The `name=value` of the session cookie a response sets, if any.
pub fn session_cookie(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with("idem_session="))
        .and_then(|value| value.split(';').next())
        .map(str::to_owned)
}

pub struct Console {
    http: reqwest::Client,
    base: String,
    /// The session cookie (`name=value`) once signed in.
    pub cookie: Option<String>,
}

impl Console {
    /// A browser with no session yet.
    pub fn at(address: SocketAddr) -> Console {
        Console::from_host(address, [127, 0, 0, 1].into())
    }

    /// A browser with no session yet on another host: it connects from `local`, a loopback
    /// address other than 127.0.0.1.
    pub fn from_host(address: SocketAddr, local: std::net::IpAddr) -> Console {
        Console {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .local_address(local)
                .build()
                .expect("HTTP client"),
            base: format!("http://{address}"),
            cookie: None,
        }
    }

    /// Signs in as an existing operator; the sign-in must succeed.
    pub async fn signed_in(address: SocketAddr, username: &str, password: &str) -> Console {
        let mut console = Console::at(address);
        let response = console.post_sign_in(username, password).await;
        assert_eq!(response.status(), 303, "sign-in as {username}");
        assert_eq!(response.headers()["location"], "/");
        console.cookie = Some(session_cookie(&response).expect("a session cookie"));
        console
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The console's own origin, as a browser names it on every POST.
    pub fn origin(&self) -> &str {
        &self.base
    }

    fn with_session(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.cookie {
            Some(cookie) => request.header("cookie", cookie),
            None => request,
        }
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.with_session(self.http.get(self.url(path)))
            .send()
            .await
            .expect("GET")
    }

    /// The sign-in form, posted as a browser posts it.
    pub async fn post_sign_in(&self, username: &str, password: &str) -> reqwest::Response {
        self.sign_in_via_proxy(username, password, None).await
    }

    /// `POST /sign-in` as this browser sends it (with its session, if any), not yet sent.
    pub fn sign_in_request(&self, username: &str, password: &str) -> reqwest::RequestBuilder {
        self.with_session(self.http.post(self.url("/sign-in")))
            .header("origin", self.origin())
            .form(&[("username", username), ("password", password), ("next", "/")])
    }

    /// `POST /sign-in` (with this browser's session, if any) as a reverse proxy forwards it for the client at `forwarded_for`.
    pub async fn sign_in_via_proxy(
        &self,
        username: &str,
        password: &str,
        forwarded_for: Option<&str>,
    ) -> reqwest::Response {
        let mut request = self.sign_in_request(username, password);
        if let Some(client) = forwarded_for {
            request = request.header("x-forwarded-for", format!("192.0.2.250, {client}"));
        }
        request.send().await.expect("POST /sign-in")
    }

    /// Calls the server function at `/api/console/{endpoint}` the way the browser does (same
    /// origin, the session, form-encoded arguments).
    pub async fn call(&self, endpoint: &str, form: &[(&str, &str)]) -> reqwest::Response {
        self.with_session(self.http.post(self.url(&format!("/api/console/{endpoint}"))))
            .header("origin", self.origin())
            .form(form)
            .send()
            .await
            .expect("server function")
    }

    /// A server function's answer, which must be a success, as JSON.
    pub async fn json(&self, endpoint: &str, form: &[(&str, &str)]) -> Value {
        self.try_json(endpoint, form)
            .await
            .unwrap_or_else(|refusal| panic!("{endpoint}: {refusal}"))
    }

    /// A server function's answer as JSON, or its refusal's text.
    pub async fn try_json(&self, endpoint: &str, form: &[(&str, &str)]) -> Result<Value, String> {
        answer(self.call(endpoint, form).await).await
    }

    /// A server function that takes JSON; its answer as JSON, or its refusal's text.
    pub async fn post_json(&self, endpoint: &str, body: &Value) -> Result<Value, String> {
        let request = self.http.post(self.url(&format!("/api/console/{endpoint}")));
        let response = self
            .with_session(request)
            .header("origin", self.origin())
            .json(body)
            .send()
            .await
            .expect("server function");
        answer(response).await
    }

    /// Posts `body` to `endpoint` and expects the refusal of a caller without `role`.
    pub async fn expect_refused_without(&self, role: &str, endpoint: &str, body: &Value) {
        let refused = self
            .post_json(endpoint, body)
            .await
            .expect_err("refused for its role");
        assert!(
            refused.contains(&format!("needs the {role} role")),
            "{endpoint}: {refused}"
        );
    }

    /// The tenant of the record found under `key`.
    pub async fn tenant_of(&self, key: &str) -> String {
        let found = self.json("find", &[("needle", key)]).await;
        found[0]["record"]["tenant_id"]
            .as_str()
            .expect("tenant")
            .to_owned()
    }
}

/// A server function's success as JSON, or its refusal's text.
async fn answer(response: reqwest::Response) -> Result<Value, String> {
    let succeeded = response.status().is_success();
    let text = response.text().await.expect("text");
    match succeeded {
        true => Ok(serde_json::from_str(&text).expect("json")),
        false => Err(text),
    }
}

/// The source of every console server function: each page's `app/src/<page>/api.rs`, in the
/// order of their paths.
pub fn server_function_sources() -> String {
    let app = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../app/src");
    let mut files: Vec<_> = std::fs::read_dir(&app)
        .expect("app/src")
        .filter_map(|entry| Some(entry.ok()?.path().join("api.rs")))
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no app/src/<page>/api.rs");
    files
        .iter()
        .map(|path| std::fs::read_to_string(path).expect("an api.rs"))
        .collect()
}

/// The record keys of a console page of records (the recovery queue's, the records list's).
pub fn keys_of(page: &serde_json::Value) -> Vec<String> {
    page["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| row["record"]["key"].as_str().expect("key").to_owned())
        .collect()
}
