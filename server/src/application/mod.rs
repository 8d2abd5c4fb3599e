//! Everything `idem serve` runs, built in one place from its settings: the engine over the
//! store and the provider, the HTTP router (payments API and console), and the background
//! workers under their supervisor. `serve` and every in-process test build it the same way.

use crate::cli::ServeArgs;
use crate::console::refusals::SignInRefusals;
use crate::console::{self, StoreConsole};
use crate::engine::sealing::{ResponseSealer, SealingError};
use crate::engine::{EngineParts, PaymentsEngine};
use crate::events::consumers::{Consumer, Ledger, ReceiptSender, ReceiptSink, Receipts};
use crate::events::nats::{NatsJetStream, NatsSettings};
use crate::events::publisher::{Publisher, PublisherSettings};
use crate::events::transport::{InProcess, Transport};
use crate::http::api_keys::VerifiedKeys;
use crate::http::rate_limit::ApiRateLimit;
use crate::http::{self, AppState, SharedPort};
use crate::metrics::journal::RequestJournal;
use crate::metrics::prometheus::Exposition;
use crate::metrics::{self, Buffered, OutcomeCounter};
use crate::provider::client::ProviderClient;
use crate::provider::sim::InProcessSimulator;
use crate::store::{DialectName, Store, StoreError};
use crate::supervisor::{Every, Supervisor};
use crate::workers::recovery::{Recovery, RecoverySettings};
use crate::workers::retention::{Cleanup, CleanupSettings};
use axum::Router;
use domain::scope::Operation;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use strum::VariantArray;
use tokio::net::TcpListener;

mod settings;

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
/// How often refused sign-ins are summed up in the audit log (one entry per source).
const REFUSALS_SUMMED_UP_EVERY: Duration = Duration::from_secs(60);
/// How long after its release a payment's provider key is still asked about, for a charge
/// that arrives after all.
const RELEASE_WATCH: Duration = Duration::from_secs(24 * 3600);
/// Payments the settlement and the release watch look at per pass.
const JOB_BATCH: i64 = 100;
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
    flushers: Vec<Flusher>,
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
        settings::check(&args)?;
        let address = listeners.api.local_addr().map_err(ServeError::Server)?;
        let metrics_address = listeners.metrics.local_addr().map_err(ServeError::Server)?;
        let mut workers = Supervisor::default();
        let provider_url = match &args.provider_url {
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
            Duration::from_secs(2),
            Duration::from_millis(args.provider_timeout_ms),
        )
        .map_err(|error| ServeError::Provider(error.to_string()))?;
        let sealer = Arc::new(sealer(&args, store.dialect(), data_dir)?);
        let retention = Duration::from_secs(args.retention_secs);
        let engine_settings = settings::engine(&args, retention);
        let instance = Instance {
            id: engine_settings.instance_id.clone(),
            heartbeat: Duration::from_millis(args.instance_heartbeat_ms.max(10)),
            replay_horizon: engine_settings.longest_replay(),
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
            EngineParts {
                records: store.clone(),
                payments: store.clone(),
                keyed_payments: store.clone(),
                refunds: store.clone(),
                provider,
                outcomes: outcomes.clone(),
                journal: journal.clone(),
                sealer: sealer.clone(),
            },
            engine_settings.clone(),
        ));
        let console = Arc::new(StoreConsole::new(
            store.clone(),
            engine.clone(),
            args.recovery_max_attempts,
            Duration::from_millis(args.bulk_lease_ms),
        ));
        let verified_keys = Arc::new(VerifiedKeys::default());
        let refusals = Arc::new(SignInRefusals::default());
        let flushers = vec![
            Flusher::new("outcome counts flusher", every(args.metrics_flush_ms), outcomes),
            Flusher::new("request journal flusher", every(args.journal_flush_ms), journal),
            Flusher::new(
                "API key use flusher",
                every(args.metrics_flush_ms),
                verified_keys.clone(),
            ),
            Flusher::new(
                "refused sign-ins summary",
                REFUSALS_SUMMED_UP_EVERY,
                refusals.clone(),
            ),
        ];
        spawn_jobs(&mut workers, &args, &store, &engine, &console, &flushers);
        spawn_heartbeat(&mut workers, &store, &sealer, &instance);
        spawn_events(&mut workers, &args, &store, data_dir).await?;
        let (bounds, sources) = (settings::bounds(&args), settings::sources(&args));
        let api = http::api(
            AppState {
                store: store.clone(),
                engine,
                rate_limit: Arc::new(ApiRateLimit::per_second(args.rate_limit_per_sec)),
                verified_keys,
                failed_authentications: Arc::default(),
                sources,
            },
            &bounds,
        );
        let console_settings = settings::console(&args, address);
        let console_router = console::router::router(
            StoreConsole::clone(&console),
            store.clone(),
            refusals,
            &console_settings,
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
        let exposition = Exposition::new(recorder, store.clone(), retention, args.recovery_max_attempts);
        crate::provider::client::register_metrics();
        crate::workers::recovery::register_metrics();
        crate::engine::background::register_metrics();
        crate::console::refusals::register_metrics();
        crate::engine::final_answers::register_metrics();
        for operation in Operation::VARIANTS {
            metrics::register_window(*operation, engine_settings.of(*operation).expiry.window);
        }
        let metrics_router = http::metrics_router(Arc::new(exposition), &bounds);
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
        for flusher in &self.flushers {
            flusher.buffer.flush(self.store.as_ref()).await;
        }
        if let Err(error) = self.sealer.leave(self.store.as_ref(), &self.instance.id).await {
            tracing::warn!(%error, "this instance stays registered until its heartbeat ages");
        }
        self.store.close().await;
        served
    }
}

/// What is kept in memory and written in batches, with its own schedule.
struct Flusher {
    name: &'static str,
    every: Duration,
    buffer: Arc<dyn Buffered>,
}

impl Flusher {
    fn new(name: &'static str, every: Duration, buffer: Arc<dyn Buffered>) -> Flusher {
        Flusher { name, every, buffer }
    }
}

/// A job's interval from its setting (10 ms at least).
fn every(millis: u64) -> Duration {
    Duration::from_millis(millis.max(10))
}

/// Every job but the events', each on its own schedule.
fn spawn_jobs(
    workers: &mut Supervisor,
    args: &ServeArgs,
    store: &Arc<dyn Store>,
    engine: &Arc<PaymentsEngine>,
    console: &Arc<StoreConsole>,
    flushers: &[Flusher],
) {
    for flusher in flushers {
        let store = store.clone();
        workers.spawn(Every::new(
            flusher.name,
            flusher.every,
            flusher.buffer.clone(),
            move |buffer| {
                let store = store.clone();
                async move { buffer.flush(store.as_ref()).await }
            },
        ));
    }
    let recovery = Arc::new(Recovery {
        engine: engine.clone(),
        records: store.clone(),
        payments: store.clone(),
        settings: RecoverySettings {
            max_attempts: args.recovery_max_attempts,
            batch: 50,
        },
    });
    workers.spawn(Every::new(
        "recovery",
        every(args.recovery_interval_ms),
        recovery,
        |recovery| async move {
            recovery.run_once().await;
        },
    ));
    // A payment is looked at again only after an interval.
    let settle = every(args.settlement_interval_ms);
    workers.spawn(Every::new(
        "settlement",
        settle,
        engine.clone(),
        move |engine| async move {
            engine.settle_pending(settle, JOB_BATCH).await;
        },
    ));
    workers.spawn(Every::new(
        "release watch",
        settle,
        engine.clone(),
        move |engine| async move {
            engine.watch_released(RELEASE_WATCH, settle, JOB_BATCH).await;
        },
    ));
    // Expired console sessions and undecided override requests are swept as often as
    // expired records.
    let sweep = every(args.cleanup_interval_ms);
    let cleanup = Arc::new(Cleanup::new(
        store.clone(),
        CleanupSettings {
            retention: Duration::from_secs(args.retention_secs),
            journal_retention: engine.settings().longest_memory(),
            max_batch: args.cleanup_batch,
            batch_bound: every(args.cleanup_batch_bound_ms),
            pause: Duration::from_millis(20),
        },
    ));
    workers.spawn(Every::new("retention", sweep, cleanup, |cleanup| async move {
        cleanup.pass().await;
    }));
    workers.spawn(Every::new(
        "session expiry",
        sweep,
        console.clone(),
        |console| async move {
            console.delete_expired_sessions().await;
        },
    ));
    workers.spawn(Every::new(
        "override expiry",
        sweep,
        console.clone(),
        |console| async move {
            console.expire_override_requests().await;
        },
    ));
    workers.spawn(Every::new(
        "bulk resumer",
        every(args.bulk_resume_interval_ms),
        console.clone(),
        |console| async move {
            console.resume_bulk_jobs().await;
        },
    ));
}

/// The keys that seal stored responses: configured, or (for the embedded database only)
/// generated into the data directory on first run.
fn sealer(args: &ServeArgs, dialect: DialectName, data_dir: &Path) -> Result<ResponseSealer, ServeError> {
    match (&args.response_keys, dialect) {
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

/// The instance's registration and its check of the response keys in use, every heartbeat.
fn spawn_heartbeat(
    workers: &mut Supervisor,
    store: &Arc<dyn Store>,
    sealer: &Arc<ResponseSealer>,
    instance: &Instance,
) {
    let store = store.clone();
    let instance = instance.clone();
    workers.spawn(Every::new(
        "instance heartbeat",
        instance.heartbeat,
        sealer.clone(),
        move |sealer| {
            let store = store.clone();
            let instance = instance.clone();
            async move {
                if let Err(error) = sealer
                    .heartbeat(store.as_ref(), &instance.id, instance.replay_horizon)
                    .await
                {
                    tracing::warn!(%error, "instance heartbeat not written");
                }
            }
        },
    ));
}

/// The outbox publisher over the transport (NATS JetStream, or in-process delivery), the
/// consumers behind it, and the receipt sender.
async fn spawn_events(
    workers: &mut Supervisor,
    args: &ServeArgs,
    store: &Arc<dyn Store>,
    data_dir: &Path,
) -> Result<(), ServeError> {
    let consumers: Vec<Arc<dyn Consumer>> = vec![
        Arc::new(Ledger::new(store.clone())),
        Arc::new(Receipts::new(store.clone())),
    ];
    let transport: Arc<dyn Transport> = match &args.nats_url {
        Some(url) => {
            let nats = NatsJetStream::connect(NatsSettings {
                url: url.clone(),
                stream: args.nats_stream.clone(),
                subject_prefix: args.nats_subject_prefix.clone(),
                ack_wait: Duration::from_secs(args.nats_ack_wait_secs.max(1)),
            })
            .await
            .map_err(|error| ServeError::Config(error.to_string()))?;
            for consumer in consumers {
                let worker = nats
                    .consumer(consumer)
                    .await
                    .map_err(|error| ServeError::Config(error.to_string()))?;
                workers.spawn(Arc::new(worker));
            }
            tracing::info!("events go through NATS JetStream");
            Arc::new(nats)
        }
        None => Arc::new(InProcess::new(consumers)),
    };
    let interval = Duration::from_millis(args.outbox_interval_ms.max(10));
    let publisher = Arc::new(Publisher::new(
        store.clone(),
        transport,
        PublisherSettings {
            batch: 50,
            claim: Duration::from_secs(args.outbox_claim_secs.max(1)),
            max_attempts: args.outbox_max_attempts,
        },
    ));
    workers.spawn(Every::new(
        "outbox publisher",
        interval,
        publisher,
        |publisher| async move {
            publisher.run_once().await;
        },
    ));
    crate::files::create_private_dir(data_dir)
        .map_err(|error| ServeError::Config(format!("data directory: {error}")))?;
    let sink = match (&args.smtp_url, &args.smtp_to) {
        (Some(url), Some(to)) => ReceiptSink::smtp(url, &args.smtp_from, to).map_err(ServeError::Config)?,
        _ => ReceiptSink::File(
            args.receipts_sink
                .clone()
                .unwrap_or_else(|| data_dir.join("receipts.jsonl")),
        ),
    };
    let sender = Arc::new(ReceiptSender::new(store.clone(), sink));
    workers.spawn(Every::new(
        "receipt sender",
        interval,
        sender,
        |sender| async move {
            if let Err(error) = sender.send_pending(100).await {
                tracing::warn!(%error, "receipts: sending failed; pending receipts stay pending");
            }
        },
    ));
    Ok(())
}
