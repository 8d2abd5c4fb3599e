//! Everything `idem serve` runs, built in one place from its settings: the engine over the
//! store and the provider, the HTTP router (payments API and console), and the background
//! workers under their supervisor. `serve` and every in-process test build it the same way.

use crate::cli::ServeArgs;
use crate::console::refusals::SignInRefusals;
use crate::console::{self, StoreConsole};
use crate::engine::sealing::{ResponseSealer, SealingError};
use crate::engine::{EngineParts, PaymentsEngine};
use crate::http::api_keys::VerifiedKeys;
use crate::http::rate_limit::ApiRateLimit;
use crate::http::{self, AppState, SharedPort};
use crate::metrics::journal::RequestJournal;
use crate::metrics::prometheus::Exposition;
use crate::metrics::{self, OutcomeCounter};
use crate::provider::client::ProviderClient;
use crate::provider::sim::InProcessSimulator;
use crate::store::{DialectName, Store, StoreError};
use crate::supervisor::{Every, Supervisor};
use axum::Router;
use domain::scope::Operation;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use strum::VariantArray;
use tokio::net::TcpListener;

mod jobs;
mod settings;

use jobs::Flushers;
use settings::Settings;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Server(#[source] std::io::Error),
    #[error("provider client: {0}")]
    Provider(String),
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// Heartbeats an instance may miss before the others stop counting it as live.
const MISSED_HEARTBEATS: u32 = 3;
/// How often the metrics recorder's histogram samples are folded into their buckets.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);
/// How long workers get to finish their pass at shutdown.
const WORKERS_GRACE: Duration = Duration::from_secs(10);

/// Where the application serves.
pub struct Listeners {
    /// The payments API, and the console unless it has a listener of its own.
    pub api: TcpListener,
    /// The console apart from the API (`--console-listen`).
    pub console: Option<TcpListener>,
    /// `GET /metrics` (`--metrics-listen`).
    pub metrics: TcpListener,
}

/// The built application: it serves on its listeners until told to stop.
pub struct Application {
    listeners: Listeners,
    address: SocketAddr,
    metrics_address: SocketAddr,
    router: Router,
    /// The console's, when it has a listener of its own.
    console_router: Option<Router>,
    metrics_router: Router,
    workers: Supervisor,
    store: Arc<dyn Store>,
    /// Written once more after the workers stopped, so that nothing counted is lost.
    flushers: Flushers,
    sealer: Arc<ResponseSealer>,
    instance: Instance,
}

/// This running instance, as the others see it.
#[derive(Debug, Clone)]
struct Instance {
    id: String,
    /// How often it renews its registration and checks the response keys in use.
    heartbeat: Duration,
    /// The longest a sealed body can be replayed after it was sealed.
    replay_horizon: Duration,
}

impl Application {
    /// Builds everything over `store` (opened and migrated), serving on `listeners`.
    pub async fn build(
        listeners: Listeners,
        store: Arc<dyn Store>,
        data_dir: &Path,
        args: ServeArgs,
    ) -> Result<Application, ServeError> {
        let address = listeners.api.local_addr().map_err(ServeError::Server)?;
        let metrics_address = listeners.metrics.local_addr().map_err(ServeError::Server)?;
        let settings = Settings::of(&args, data_dir, address)?;
        let mut workers = Supervisor::default();
        let provider_url = match &settings.provider.url {
            Some(url) => url.clone(),
            None => {
                let simulator = InProcessSimulator::bind().await.map_err(ServeError::Server)?;
                let url = simulator.url();
                tracing::info!(%url, "provider simulator running in-process");
                workers.spawn(Arc::new(simulator));
                url
            }
        };
        let provider = ProviderClient::new(
            &provider_url,
            settings.provider.connect_timeout,
            settings.provider.timeout,
        )
        .map_err(|error| ServeError::Provider(error.to_string()))?;
        let sealer = Arc::new(sealer(
            settings.response_keys.as_deref(),
            store.dialect(),
            data_dir,
        )?);
        let instance = Instance {
            id: settings.engine.instance_id.clone(),
            heartbeat: settings.workers.heartbeat,
            replay_horizon: settings.engine.longest_replay(),
        };
        sealer
            .join(
                store.as_ref(),
                &instance.id,
                instance.replay_horizon,
                instance.heartbeat * MISSED_HEARTBEATS,
            )
            .await
            .map_err(|error| match error {
                // The database is not there (yet): not a configuration problem.
                SealingError::Store(error) => ServeError::Store(error),
                refused => ServeError::Config(refused.to_string()),
            })?;
        let outcomes = Arc::new(OutcomeCounter::default());
        let journal = Arc::new(RequestJournal::default());
        let engine = Arc::new(PaymentsEngine::new(
            EngineParts::over(
                &store,
                provider,
                outcomes.clone(),
                journal.clone(),
                sealer.clone(),
            ),
            settings.engine.clone(),
        ));
        let console = Arc::new(StoreConsole::new(
            store.clone(),
            engine.clone(),
            settings.recovery_max_attempts,
            settings.bulk_lease,
        ));
        let verified_keys = Arc::new(VerifiedKeys::default());
        let refusals = Arc::new(SignInRefusals::default());
        let flushers = Flushers::new(
            &settings.workers.flush,
            outcomes,
            journal,
            verified_keys.clone(),
            refusals.clone(),
        );
        jobs::spawn_jobs(
            &mut workers,
            &settings.workers,
            &store,
            &engine,
            &console,
            &flushers,
        );
        jobs::spawn_heartbeat(&mut workers, &store, &sealer, &instance);
        jobs::spawn_events(&mut workers, settings.events, &store, data_dir).await?;
        let api = http::api(
            AppState {
                store: store.clone(),
                engine,
                rate_limit: Arc::new(ApiRateLimit::per_second(settings.api.rate_limit_per_sec)),
                verified_keys,
                failed_authentications: Arc::default(),
                sources: settings.api.sources,
            },
            &settings.api.bounds,
        );
        let console_router = console::router::router(
            StoreConsole::clone(&console),
            store.clone(),
            refusals,
            &settings.console,
        );
        // The API and the console on one port, each request sent to the one it is meant for, or
        // each on its own (`--console-listen`); either way behind the same outermost layers.
        let (router, console_router) = match listeners.console {
            Some(_) => (http::outermost(api.router), Some(http::outermost(console_router))),
            None => {
                let shared = SharedPort {
                    api: api.router,
                    console: console_router,
                    api_paths: api.paths,
                };
                (http::outermost(shared.router()), None)
            }
        };
        let recorder = metrics::prometheus::install();
        if let Some(recorder) = &recorder {
            // Histogram samples pile up in the recorder until drained: without this a busy
            // instance nobody scrapes grows by every request it answers (about 20 bytes each,
            // measured with scripts/bench-floods' random-bearer flood).
            workers.spawn(Every::new(
                "metrics upkeep",
                METRICS_UPKEEP,
                Arc::new(recorder.clone()),
                |recorder| async move { recorder.run_upkeep() },
            ));
        }
        let exposition = Exposition::new(
            recorder,
            store.clone(),
            settings.retention,
            settings.recovery_max_attempts,
        );
        crate::provider::client::register_metrics();
        crate::workers::recovery::register_metrics();
        crate::engine::background::register_metrics();
        crate::console::refusals::register_metrics();
        crate::engine::final_answers::register_metrics();
        crate::engine::waiting::register_metrics();
        for operation in Operation::VARIANTS {
            metrics::register_window(*operation, settings.engine.of(*operation).expiry.window);
        }
        let metrics_router = http::metrics_router(Arc::new(exposition), &settings.api.bounds);
        Ok(Application {
            listeners,
            address,
            metrics_address,
            router,
            console_router,
            metrics_router,
            workers,
            store,
            flushers,
            sealer,
            instance,
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn metrics_address(&self) -> SocketAddr {
        self.metrics_address
    }

    /// Serves until `shutdown` resolves: then stops accepting, lets requests in flight
    /// finish, stops the workers (waiting for each pass under way), writes what is buffered
    /// once more and closes the database pool.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        // Scrapes are reads: the metrics listener simply stops with the API.
        let metrics = tokio::spawn(axum::serve(self.listeners.metrics, self.metrics_router).into_future());
        // A console on its own listener stops as the API does: no new connection, requests
        // in flight finish.
        let stopping = tokio_util::sync::CancellationToken::new();
        let console = match (self.listeners.console, self.console_router) {
            (Some(listener), Some(router)) => Some(tokio::spawn(
                axum::serve(
                    listener,
                    router.into_make_service_with_connect_info::<SocketAddr>(),
                )
                .with_graceful_shutdown(stopping.clone().cancelled_owned())
                .into_future(),
            )),
            _ => None,
        };
        let served = axum::serve(
            self.listeners.api,
            self.router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(ServeError::Server);
        stopping.cancel();
        if let Some(console) = console
            && let Ok(Err(error)) = console.await
        {
            tracing::warn!(%error, "the console's listener stopped with an error");
        }
        metrics.abort();
        tracing::info!("in-flight requests finished; stopping the workers");
        self.workers.shutdown(WORKERS_GRACE).await;
        self.flushers.flush_all(self.store.as_ref()).await;
        if let Err(error) = self.sealer.leave(self.store.as_ref(), &self.instance.id).await {
            tracing::warn!(%error, "this instance stays registered until its heartbeat ages");
        }
        self.store.close().await;
        served
    }
}

/// The keys that seal stored responses: configured, or (for the embedded database only)
/// generated into the data directory on first run.
fn sealer(
    response_keys: Option<&str>,
    dialect: DialectName,
    data_dir: &Path,
) -> Result<ResponseSealer, ServeError> {
    match (response_keys, dialect) {
        (Some(spec), _) => ResponseSealer::from_spec(spec),
        // A key generated into one instance's data directory would leave every other
        // instance (and this one, once its disk is replaced) unable to replay.
        (None, DialectName::Postgres) => {
            return Err(ServeError::Config(
                "PostgreSQL is shared by instances: pass the same --response-keys (IDEM_RESPONSE_KEYS) \
                 to every instance; generate a key with `head -c 32 /dev/urandom | base64`"
                    .into(),
            ));
        }
        (None, DialectName::Sqlite) => ResponseSealer::load_or_create(data_dir),
    }
    .map_err(|error| ServeError::Config(error.to_string()))
}
