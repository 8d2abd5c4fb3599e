//! Idem as a test runs it: a fresh database, tenants with their API keys, the provider
//! simulator, and `idem serve` itself, built in this process by `Application::build` or run as
//! the real binary. A test names what it needs:
//!
//! ```ignore
//! let app = TestApp::on(DialectName::Postgres)
//!     .tenant("acme", "100.00")
//!     .with(Serve::ProviderTimeout(ms(800)))
//!     .process()
//!     .await;
//! ```

use super::console::{Console, OPERATOR_PASSWORD, create_operator};
use super::process::{IdemProcess, SERVE_ON_FREE_PORTS, TEST_RESPONSE_KEYS, admin, idem_command};
use super::settings::{Serve, ms, secs};
use super::sim::Sim;
use super::{DialectName, TestDatabase, eventually};
use clap::Parser;
use domain::operator::OperatorRole;
use flate2::GzBuilder;
use idem::admin::AdminError;
use idem::application::{Application, Listeners};
use idem::cli::{AccountCommand, ApiKeyCommand, Cli, ServeArgs, TenantCommand};
use idem::store::{Store, StoreError};
use reqwest::{Method, RequestBuilder};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use tempfile::TempDir;
use tokio::process::Command;

/// The sum of the samples of metric `name` in exposition `text` whose labels contain every
/// one of `labels` (`name="value"` each).
pub fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (labels_text, value) = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            let wanted = labels
                .iter()
                .all(|label| labels_text.split(',').any(|pair| pair == *label));
            wanted.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// Where `idem serve` processes log: nowhere, since many tests provoke warnings on purpose,
/// unless `IDEM_TEST_SERVER_LOGS` is set.
fn server_logs() -> Stdio {
    match std::env::var_os("IDEM_TEST_SERVER_LOGS") {
        Some(_) => Stdio::inherit(),
        None => Stdio::null(),
    }
}

/// What a test asks for, before it starts.
pub struct Setup {
    db: Option<TestDatabase>,
    dialect: DialectName,
    /// Name, opening balance of `acc_1` (EUR), whether keys are optional.
    tenants: Vec<(String, String, bool)>,
    /// `idem serve` flags over the defaults of the way it runs.
    flags: BTreeMap<String, String>,
}

pub struct TestApp {
    /// The first instance's address.
    pub address: SocketAddr,
    /// The first instance's metrics listener.
    pub metrics_address: SocketAddr,
    /// A client that follows no redirects.
    pub http: reqwest::Client,
    pub sim: Sim,
    /// The instances' data directory (receipts, keys).
    pub dir: TempDir,
    /// The console build stand-in (`pkg/idem.css`) of instances in this process, kept for as
    /// long as they run.
    _site_root: Option<TempDir>,
    /// Each tenant's API key, in the order the setup named them.
    keys: Vec<(String, String)>,
    flags: BTreeMap<String, String>,
    server: Option<IdemProcess>,
    /// Dropped last: every process stops before its database goes.
    pub db: TestDatabase,
}

impl TestApp {
    /// A fresh database of `dialect`.
    pub fn on(dialect: DialectName) -> Setup {
        Setup {
            db: None,
            dialect,
            tenants: Vec::new(),
            flags: BTreeMap::new(),
        }
    }

    /// A database the test made (a `conformance!` test's).
    pub fn on_database(db: TestDatabase) -> Setup {
        let dialect = db.target.dialect();
        Setup {
            db: Some(db),
            ..TestApp::on(dialect)
        }
    }
}

impl Setup {
    /// A tenant that requires idempotency keys, with an API key and `acc_1` holding `balance`
    /// EUR.
    pub fn tenant(mut self, name: &str, balance: &str) -> Setup {
        self.tenants.push((name.to_owned(), balance.to_owned(), false));
        self
    }

    /// A tenant that may send payments without a key.
    pub fn keyless_tenant(mut self, name: &str, balance: &str) -> Setup {
        self.tenants.push((name.to_owned(), balance.to_owned(), true));
        self
    }

    /// An `idem serve` setting (`Serve`), over the defaults of the way Idem runs.
    pub fn with(mut self, setting: Serve) -> Setup {
        let (flag, value) = setting.flag();
        self.flags.insert(flag.to_owned(), value);
        self
    }

    /// Recovery tests' tuning: a 1 s lease (both operations), an 800 ms provider timeout, the recovery worker
    /// every 200 ms, no rate limit.
    pub fn recovering(self) -> Setup {
        self.with(Serve::Lease(secs(1)))
            .with(Serve::RefundLease(secs(1)))
            .with(Serve::ProviderTimeout(ms(800)))
            .with(Serve::RecoveryEvery(ms(200)))
            .with(Serve::RateLimitPerSec(0))
    }

    async fn prepare(mut self) -> (TestDatabase, TempDir, Arc<dyn Store>, Vec<(String, String)>, Self) {
        let db = match self.db.take() {
            Some(db) => db,
            None => TestDatabase::migrated(self.dialect).await,
        };
        let dir = tempfile::tempdir().expect("data directory");
        let store = db.migrated_store().await;
        let mut keys = Vec::new();
        for (name, balance, keyless) in &self.tenants {
            keys.push((name.clone(), seed(store.as_ref(), name, balance, *keyless).await));
        }
        (db, dir, store, keys, self)
    }

    /// Idem built in this process. Its background work waits a day unless a flag says
    /// otherwise: these tests drive every step themselves.
    pub async fn in_process(self) -> TestApp {
        let (db, dir, store, keys, setup) = self.prepare().await;
        let sim = Sim::in_process().await;
        let site_root = site_root();
        let idle = "86400000";
        let mut flags = BTreeMap::from(
            [
                ("--site-root", site_root.path().display().to_string()),
                ("--request-timeout-secs", "10".into()),
                ("--body-limit-bytes", "16384".into()),
                ("--provider-url", sim.url()),
                ("--provider-timeout-ms", "5000".into()),
                ("--response-keys", TEST_RESPONSE_KEYS.into()),
                ("--rate-limit-per-sec", "0".into()),
                ("--recovery-interval-ms", idle.into()),
                ("--settlement-interval-ms", idle.into()),
                ("--outbox-interval-ms", idle.into()),
                ("--cleanup-interval-ms", idle.into()),
                ("--metrics-flush-ms", idle.into()),
                ("--journal-flush-ms", idle.into()),
                ("--bulk-resume-interval-ms", idle.into()),
                ("--retention-secs", "604800".into()),
            ]
            .map(|(flag, value)| (flag.to_owned(), value)),
        );
        flags.extend(setup.flags);
        let (address, metrics_address) = build_in_process(store, dir.path(), &flags).await;
        TestApp {
            address,
            metrics_address,
            http: client(),
            sim,
            dir,
            _site_root: Some(site_root),
            keys,
            flags,
            server: None,
            db,
        }
    }

    /// The real `idem serve` binary, with `idem provider-sim`, in processes of their own.
    pub async fn process(self) -> TestApp {
        let mut app = self.seeded().await;
        app.restart(&[]).await;
        app
    }

    /// The database seeded and `idem provider-sim` running, but no `idem serve` yet: the test
    /// starts it (`restart`, or `serve_command` for a process it watches itself).
    pub async fn seeded(self) -> TestApp {
        let (db, dir, store, keys, setup) = self.prepare().await;
        store.close().await;
        let sim = Sim::process().await;
        let mut flags = BTreeMap::from([("--provider-url".to_owned(), sim.url())]);
        flags.extend(setup.flags);
        TestApp {
            address: "127.0.0.1:0".parse().expect("an address"),
            metrics_address: "127.0.0.1:0".parse().expect("an address"),
            http: client(),
            sim,
            dir,
            _site_root: None,
            keys,
            flags,
            server: None,
            db,
        }
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("HTTP client")
}

/// The stand-in site's stylesheet.
pub const STYLESHEET: &str = "body { color: black; }\n";

/// A stand-in for the console's build: `pkg/idem.css`, and beside it the gzipped copy
/// that `scripts/build-site` makes.
fn site_root() -> TempDir {
    let site_root = tempfile::tempdir().expect("site root");
    let pkg = site_root.path().join("pkg");
    std::fs::create_dir_all(&pkg).expect("pkg dir");
    std::fs::write(pkg.join("idem.css"), STYLESHEET).expect("css");
    std::fs::write(pkg.join("idem.css.gz"), gzipped_stylesheet()).expect("css.gz");
    site_root
}

/// The stylesheet as `gzip --best` writes it, with its file name in the header (which no
/// compression on the fly writes).
pub fn gzipped_stylesheet() -> Vec<u8> {
    let mut encoder = GzBuilder::new()
        .filename("idem.css")
        .write(Vec::new(), flate2::Compression::best());
    encoder.write_all(STYLESHEET.as_bytes()).expect("gzip");
    encoder.finish().expect("gzip")
}

/// A tenant, its API key and its `acc_1`, made by the code the command line runs; the key.
async fn seed(store: &dyn Store, name: &str, balance: &str, keyless: bool) -> String {
    let created = idem::admin::tenant(
        store,
        TenantCommand::Create {
            name: name.to_owned(),
            optional_idempotency_key: keyless,
        },
    )
    .await;
    assert!(
        matches!(created, Ok(_) | Err(AdminError::TenantExists(_))),
        "{created:?}"
    );
    let key = idem::admin::api_key(
        store,
        ApiKeyCommand::Create {
            tenant: name.to_owned(),
        },
    )
    .await
    .expect("an API key");
    let account = AccountCommand::Create {
        tenant: name.to_owned(),
        id: "acc_1".to_owned(),
        currency: "EUR".to_owned(),
        balance: balance.to_owned(),
    };
    idem::admin::account(store, account).await.expect("an account");
    key
}

/// `idem serve`'s settings as its command line makes them from `flags`.
fn serve_args(flags: &BTreeMap<String, String>) -> ServeArgs {
    let command_line = std::iter::once("idem")
        .chain(SERVE_ON_FREE_PORTS)
        .map(str::to_owned)
        .chain(
            flags
                .iter()
                .flat_map(|(flag, value)| [flag.clone(), value.clone()])
                .filter(|arg| !arg.is_empty()),
        );
    match Cli::try_parse_from(command_line)
        .expect("valid serve flags")
        .command
    {
        idem::cli::Command::Serve(args) => *args,
        _ => unreachable!("parsed as serve"),
    }
}

async fn build_in_process(
    store: Arc<dyn Store>,
    data_dir: &std::path::Path,
    flags: &BTreeMap<String, String>,
) -> (SocketAddr, SocketAddr) {
    let bind = async || tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let listeners = Listeners {
        api: bind().await,
        console: None,
        metrics: bind().await,
    };
    let application = Application::build(listeners, store, data_dir, serve_args(flags))
        .await
        .expect("the application builds");
    let addresses = (application.address(), application.metrics_address());
    tokio::spawn(application.run_until_stopped(std::future::pending()));
    addresses
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// The first instance's Prometheus exposition text.
    pub async fn metrics(&self) -> String {
        self.metrics_at(self.metrics_address).await
    }

    /// The Prometheus exposition text of the instance whose metrics listen at `address`.
    pub async fn metrics_at(&self, address: SocketAddr) -> String {
        let response = self
            .http
            .get(format!("http://{address}/metrics"))
            .send()
            .await
            .expect("GET /metrics");
        assert_eq!(response.status(), 200);
        assert!(
            response.headers()["content-type"]
                .to_str()
                .expect("ascii")
                .starts_with("text/plain")
        );
        response.text().await.expect("text")
    }

    /// Polls the metrics of the instance at `metrics_address` until the sum of `name` with
    /// `labels` is `wanted`; panics naming it after 60 s.
    pub async fn until_metric(&self, metrics_address: SocketAddr, name: &str, labels: &[&str], wanted: f64) {
        eventually(
            &format!("{name}{labels:?} to be {wanted}"),
            async || metric(&self.metrics_at(metrics_address).await, name, labels),
            |value| *value == wanted,
        )
        .await;
    }

    /// The API key of a tenant the setup named.
    pub fn key(&self, tenant: &str) -> &str {
        self.keys
            .iter()
            .find(|(name, _)| name == tenant)
            .map(|(_, key)| key.as_str())
            .unwrap_or_else(|| panic!("no tenant {tenant}"))
    }

    /// `GET` on the first instance, without a session.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http.get(self.url(path)).send().await.expect("GET")
    }

    /// `POST /payments` as `api_key`, with `idempotency_key` when given.
    pub fn post(&self, api_key: &str, idempotency_key: Option<&str>, body: &str) -> RequestBuilder {
        let mut request = self
            .request(Method::POST, "/payments", api_key)
            .header("content-type", "application/json")
            .body(body.to_owned());
        if let Some(key) = idempotency_key {
            request = request.header("idempotency-key", key);
        }
        request
    }

    /// A request to `path` with `api_key`.
    pub fn request(&self, method: Method, path: &str, api_key: &str) -> RequestBuilder {
        self.http.request(method, self.url(path)).bearer_auth(api_key)
    }

    /// `GET path` as `tenant`, in `api_version` when given: its JSON body.
    pub async fn read_as(&self, tenant: &str, path: &str, api_version: Option<&str>) -> Value {
        let mut request = self.as_tenant(Method::GET, path, tenant);
        if let Some(version) = api_version {
            request = request.header("api-version", version);
        }
        request.send().await.expect("GET").json().await.expect("json")
    }

    /// A request to `path` as `tenant` (one the setup named).
    pub fn as_tenant(&self, method: Method, path: &str, tenant: &str) -> RequestBuilder {
        self.request(method, path, self.key(tenant))
    }

    /// `POST /payments` as the first tenant, with `idempotency_key`, to the instance at
    /// `address`.
    pub async fn pay_at(&self, address: SocketAddr, idempotency_key: &str, body: &str) -> reqwest::Response {
        let (_, first) = self.keys.first().expect("a tenant");
        self.http
            .post(format!("http://{address}/payments"))
            .bearer_auth(first)
            .header("idempotency-key", idempotency_key)
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .expect("POST /payments")
    }

    /// `POST /payments` as the first tenant, with `idempotency_key`.
    pub async fn pay(&self, idempotency_key: &str, body: impl AsRef<str>) -> reqwest::Response {
        let (_, first) = self.keys.first().expect("a tenant");
        self.post(first, Some(idempotency_key), body.as_ref())
            .send()
            .await
            .expect("POST /payments")
    }

    /// `POST /payments/{payment_id}/refunds` as the first tenant, with `idempotency_key`.
    pub async fn refund(
        &self,
        payment_id: &str,
        idempotency_key: &str,
        body: impl AsRef<str>,
    ) -> reqwest::Response {
        self.refund_at(self.address, payment_id, idempotency_key, body)
            .await
    }

    /// `POST /payments/{payment_id}/refunds` as the first tenant, to the instance at `address`.
    pub async fn refund_at(
        &self,
        address: SocketAddr,
        payment_id: &str,
        idempotency_key: &str,
        body: impl AsRef<str>,
    ) -> reqwest::Response {
        let (_, first) = self.keys.first().expect("a tenant");
        self.http
            .post(format!("http://{address}/payments/{payment_id}/refunds"))
            .bearer_auth(first)
            .header("idempotency-key", idempotency_key)
            .header("content-type", "application/json")
            .body(body.as_ref().to_owned())
            .send()
            .await
            .expect("POST /payments/{id}/refunds")
    }

    /// `GET /idempotency`.
    pub async fn discovery(&self) -> Value {
        self.get("/idempotency").await.json().await.expect("json")
    }

    /// A console browser signed in as a new operator with `role`.
    pub async fn console(&self, username: &str, role: OperatorRole) -> Console {
        let store = self.db.store().await;
        let created = create_operator(store.as_ref(), username, role).await;
        assert!(
            matches!(created, Ok(()) | Err(StoreError::AlreadyExists)),
            "{created:?}"
        );
        store.close().await;
        Console::signed_in(self.address, username, OPERATOR_PASSWORD).await
    }

    /// A console browser with no session.
    pub fn browser(&self) -> Console {
        Console::at(self.address)
    }

    /// Runs the real `idem` command line against this database; its output.
    pub async fn admin(&self, args: &[&str]) -> String {
        admin(self.dir.path(), &self.db, args).await
    }

    /// `idem serve` on a random port, this database and provider, with this app's settings and
    /// `env` on top of its environment, ready to `IdemProcess::start`.
    pub fn serve_command(&self, env: &[(&str, &str)]) -> Command {
        let mut command = idem_command(self.dir.path());
        command.env("DATABASE_URL", self.db.url()).stderr(server_logs());
        for (name, value) in env {
            command.env(name, value);
        }
        command.args(SERVE_ON_FREE_PORTS).args(
            self.flags
                .iter()
                .flat_map(|(flag, value)| [flag.as_str(), value.as_str()])
                .filter(|arg| !arg.is_empty()),
        );
        command
    }

    /// Another `idem serve` process on this database and provider (see `serve_command`).
    pub async fn spawn_server(&self, env: &[(&str, &str)]) -> IdemProcess {
        IdemProcess::start(self.serve_command(env)).await
    }

    /// An `idem serve` setting for the processes started from now on.
    pub fn set(&mut self, setting: Serve) {
        let (flag, value) = setting.flag();
        self.flags.insert(flag.to_owned(), value);
    }

    /// Kills the first instance's process.
    pub fn stop(&mut self) {
        self.server = None;
    }

    /// Replaces the first instance by a new `idem serve` process (the old one, if any, is
    /// killed), with `env` on top of its environment.
    pub async fn restart(&mut self, env: &[(&str, &str)]) {
        self.server = None;
        let server = self.spawn_server(env).await;
        self.address = server.address;
        self.metrics_address = server.metrics_address.expect("idem serve's metrics listener");
        self.server = Some(server);
    }

    /// The first instance's process (process mode).
    pub fn server(&mut self) -> &mut IdemProcess {
        self.server.as_mut().expect("an idem serve process")
    }

    /// Another instance built in this process on this database (in-process mode).
    pub async fn another_instance(&self) -> SocketAddr {
        build_in_process(self.db.migrated_store().await, self.dir.path(), &self.flags)
            .await
            .0
    }
}

/// The first answer `send` gets that is not `409 IDEMPOTENCY_REQUEST_IN_PROGRESS`: until a
/// dead owner's lease runs out, a retry is told to wait (with `Retry-After`); then it takes
/// over. Panics naming `what` after 40 tries, 200 ms apart.
pub async fn answer_after_takeover<Sent>(what: &str, send: impl Fn() -> Sent) -> reqwest::Response
where
    Sent: Future<Output = reqwest::Response>,
{
    for _ in 0..40 {
        let response = send().await;
        if response.status() != 409 {
            return response;
        }
        assert!(response.headers().contains_key("retry-after"), "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("{what}: never recovered");
}

/// The status and contract error code a response must have; its body, for more checks.
pub async fn expect_error(response: reqwest::Response, status: u16, code: &str) -> Value {
    let got = response.status().as_u16();
    let body: Value = response.json().await.expect("an error body in JSON");
    assert_eq!((got, body["errorCode"].as_str()), (status, Some(code)), "{body}");
    body
}

/// A replay: marked as one, with exactly the stored bytes `stored`.
pub async fn expect_replay(response: reqwest::Response, stored: &[u8], what: &str) {
    assert_eq!(
        response
            .headers()
            .get("idempotent-replayed")
            .map(|value| value.as_bytes()),
        Some(&b"true"[..]),
        "{what}: marked as a replay"
    );
    assert_eq!(response.bytes().await.expect("body"), stored, "{what}");
}
