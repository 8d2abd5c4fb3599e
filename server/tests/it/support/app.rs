use super::TestDatabase;
use idem::expiry::{AfterExpiry, ExpiryPolicy};
use idem::http::rate_limit::ApiRateLimit;
use idem::http::{self, AppState, HttpSettings};
use idem::idempotency::sealing::ResponseSealer;
use idem::metrics::OutcomeCounter;
use idem::metrics::prometheus::Exposition;
use idem::payments::engine::{EngineSettings, PaymentsEngine};
use idem::provider::client::ProviderClient;
use idem::provider::sim;
use idem::store::Store;
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
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.expect("GET")
    }

    /// Calls a console server function the way the browser does.
    pub async fn server_fn(&self, endpoint: &str) -> reqwest::Response {
        self.client
            .post(self.url(&format!("/api/{endpoint}")))
            .header("content-type", "application/x-www-form-urlencoded")
            .send()
            .await
            .expect("server function call")
    }
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
    }
}
