use super::TestDatabase;
use domain::expiry::{AfterExpiry, ExpiryPolicy};
use domain::operator::AuditEntry;
use domain::operator::OperatorRole;
use idem::auth::operator::Password;
use idem::http::rate_limit::ApiRateLimit;
use idem::http::{self, AppState, HttpSettings};
use idem::idempotency::journal::RequestJournal;
use idem::idempotency::sealing::ResponseSealer;
use idem::metrics::OutcomeCounter;
use idem::metrics::prometheus::Exposition;
use idem::payments::engine::{EngineSettings, PaymentsEngine};
use idem::provider::client::ProviderClient;
use idem::provider::sim;
use idem::store::Store;
use idem::store::operators::StoredOperator;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;

/// The HTTP app served in-process on a random port, over a real database.
pub struct TestApp {
    pub address: SocketAddr,
    pub client: reqwest::Client,
    pub db: TestDatabase,
    /// A console build stand-in: `pkg/idem.css` only.
    pub site_root: TempDir,
    /// The console session cookie (`name=value`) once signed in.
    pub session: Option<String>,
}

/// The password of every operator `TestApp::sign_in` creates.
pub const OPERATOR_PASSWORD: &str = "correct horse battery staple";

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// The console's own origin, as a browser names it on every POST.
    pub fn origin(&self) -> String {
        format!("http://{}", self.address)
    }

    fn with_session(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.session {
            Some(cookie) => request.header("cookie", cookie),
            None => request,
        }
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.with_session(self.client.get(self.url(path)))
            .send()
            .await
            .expect("GET")
    }

    /// Calls a console server function the way the browser does (same origin, session cookie).
    pub async fn server_fn(&self, endpoint: &str) -> reqwest::Response {
        self.server_fn_with(endpoint, "").await
    }

    /// A server function with form-encoded arguments.
    pub async fn server_fn_with(&self, endpoint: &str, form: &str) -> reqwest::Response {
        self.with_session(self.client.post(self.url(&format!("/api/{endpoint}"))))
            .header("origin", self.origin())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form.to_owned())
            .send()
            .await
            .expect("server function call")
    }

    /// Creates an operator with this role (once per name) and signs in as them.
    pub async fn sign_in(&mut self, username: &str, role: OperatorRole) {
        let store = self.db.store().await;
        let created = create_operator(store.as_ref(), username, role).await;
        assert!(
            matches!(created, Ok(()) | Err(idem::store::StoreError::AlreadyExists)),
            "{created:?}"
        );
        store.close().await;
        let response = self.post_sign_in(username, OPERATOR_PASSWORD).await;
        assert_eq!(response.status(), 303);
        assert_eq!(response.headers()["location"], "/");
        self.session = Some(session_cookie(&response).expect("a session cookie"));
    }

    /// The sign-in form, posted as a browser posts it.
    pub async fn post_sign_in(&self, username: &str, password: &str) -> reqwest::Response {
        self.client
            .post(self.url("/sign-in"))
            .header("origin", self.origin())
            .form(&[("username", username), ("password", password), ("next", "/")])
            .send()
            .await
            .expect("POST /sign-in")
    }
}

/// Creates an operator whose password is `OPERATOR_PASSWORD`, as a test arranges it.
pub async fn create_operator(
    store: &dyn Store,
    username: &str,
    role: OperatorRole,
) -> Result<(), idem::store::StoreError> {
    let operator = StoredOperator {
        id: format!("op_{username}"),
        username: username.to_owned(),
        password_hash: Password::parse(OPERATOR_PASSWORD).expect("password").hash(),
        role,
        disabled: false,
    };
    let audit = AuditEntry {
        actor: "test".to_owned(),
        action: "operator.create".to_owned(),
        target: Some(format!("operator {username}")),
        reason: None,
        result: "ok".to_owned(),
        details: None,
    };
    store.create_operator(&operator, &audit).await
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

pub async fn spawn_app(db: TestDatabase) -> TestApp {
    let store = db.migrated_store().await;
    spawn_app_with_store(db, store).await
}

pub async fn spawn_app_with_store(db: TestDatabase, store: Arc<dyn Store>) -> TestApp {
    let site_root = tempfile::tempdir().expect("site root");
    std::fs::create_dir_all(site_root.path().join("pkg")).expect("pkg dir");
    std::fs::write(site_root.path().join("pkg/idem.css"), "body { color: black; }\n").expect("css");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("local address");
    let settings = HttpSettings {
        site_root: site_root.path().to_path_buf(),
        site_addr: address,
        request_timeout: Duration::from_secs(10),
        body_limit_bytes: 16 * 1024,
        secure_cookies: false,
        recovery_max_attempts: 10,
    };
    // The provider simulator, in-process as `idem serve` runs it by default.
    let sim_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let sim_address = sim_listener.local_addr().expect("local address");
    tokio::spawn(async move { axum::serve(sim_listener, sim::router(sim::Simulator::default())).await });
    let provider = ProviderClient::new(
        &format!("http://{sim_address}"),
        Duration::from_secs(2),
        Duration::from_secs(5),
    )
    .expect("provider client");
    let engine = PaymentsEngine::new(
        store.clone(),
        provider,
        Arc::new(OutcomeCounter::default()),
        Arc::new(RequestJournal::default()),
        Arc::new(ResponseSealer::load_or_create(&site_root.path().join("keys")).expect("sealing key")),
        EngineSettings {
            lease: Duration::from_secs(30),
            expiry: ExpiryPolicy {
                window: Duration::from_secs(24 * 3600),
                after_expiry: AfterExpiry::NewOperation,
                retention: Duration::from_secs(7 * 24 * 3600),
            },
            instance_id: "test-instance".to_owned(),
        },
    );
    let state = AppState {
        store,
        engine: Arc::new(engine),
        rate_limit: Arc::new(ApiRateLimit::per_second(0)),
        metrics: Arc::new(Exposition::new(
            idem::metrics::prometheus::install(),
            Duration::from_secs(7 * 24 * 3600),
        )),
    };
    let router = http::router(state, &settings);
    tokio::spawn(async move { axum::serve(listener, router).await });

    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("HTTP client");
    TestApp {
        address,
        client,
        db,
        site_root,
        session: None,
    }
}
