use super::TestDatabase;
use clap::Parser;
use domain::operator::{AuditEntry, OperatorRole};
use idem::application::Application;
use idem::auth::operator::Password;
use idem::cli::{Cli, Command, ServeArgs};
use idem::store::Store;
use idem::store::operators::StoredOperator;
use std::net::SocketAddr;
use std::sync::Arc;
use tempfile::TempDir;

/// The HTTP app served in-process on a random port, over a real database.
pub struct TestApp {
    pub address: SocketAddr,
    pub client: reqwest::Client,
    pub db: TestDatabase,
    /// A console build stand-in: `pkg/idem.css` only.
    pub site_root: TempDir,
    /// The instance's data directory (receipts, generated keys), gone with the app.
    _data_dir: TempDir,
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
    let data_dir = tempfile::tempdir().expect("data directory");
    // Background work waits a day: these tests drive every step themselves.
    let idle = "86400000";
    let site = site_root.path().display().to_string();
    let args = serve_args(&[
        "--listen",
        "127.0.0.1:0",
        "--site-root",
        &site,
        "--request-timeout-secs",
        "10",
        "--body-limit-bytes",
        "16384",
        "--provider-timeout-ms",
        "5000",
        "--response-keys",
        super::TEST_RESPONSE_KEYS,
        "--rate-limit-per-sec",
        "0",
        "--recovery-interval-ms",
        idle,
        "--settlement-interval-ms",
        idle,
        "--outbox-interval-ms",
        idle,
        "--cleanup-interval-ms",
        idle,
        "--metrics-flush-ms",
        idle,
        "--retention-secs",
        "604800",
    ]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let application = Application::build(listener, store, data_dir.path(), args)
        .await
        .expect("the application builds");
    let address = application.address();
    tokio::spawn(application.run_until_stopped(std::future::pending()));

    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("HTTP client");
    TestApp {
        address,
        client,
        db,
        site_root,
        _data_dir: data_dir,
        session: None,
    }
}

/// `idem serve`'s settings as its command line makes them from `flags`.
pub fn serve_args(flags: &[&str]) -> ServeArgs {
    let command_line = ["idem", "serve"].into_iter().chain(flags.iter().copied());
    match Cli::try_parse_from(command_line)
        .expect("valid serve flags")
        .command
    {
        Command::Serve(args) => *args,
        _ => unreachable!("parsed as serve"),
    }
}
