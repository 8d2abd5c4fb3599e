//! Everything `idem serve` runs, built in one place from its settings: the engine over the
//! store and the provider, the HTTP router (payments API and console), and the background
//! workers under their supervisor. `serve` and every in-process test build it the same way.

use crate::cli::ServeArgs;
use crate::console::StoreConsole;
use crate::engine::sealing::ResponseSealer;
use crate::engine::{EngineParts, EngineSettings, PaymentsEngine};
use crate::events::consumers::{Consumer, Ledger, ReceiptSender, ReceiptSink, Receipts};
use crate::events::nats::{NatsJetStream, NatsSettings};
use crate::events::publisher::{Publisher, PublisherSettings};
use crate::events::transport::{InProcess, Transport};
use crate::http::rate_limit::ApiRateLimit;
use crate::http::{self, AppState, HttpSettings};
use crate::metrics::journal::RequestJournal;
use crate::metrics::prometheus::Exposition;
use crate::metrics::{self, Buffered, Flusher, OutcomeCounter};
use crate::provider::client::ProviderClient;
use crate::provider::sim::InProcessSimulator;
use crate::store::{DialectName, Store, StoreError};
use crate::supervisor::{Supervisor, Worker};
use crate::workers::console::{BulkResumer, OverrideExpiry, SessionExpiry};
use crate::workers::heartbeat::KeyHeartbeat;
use crate::workers::recovery::{Recovery, RecoverySettings};
use crate::workers::retention::{Cleanup, CleanupSettings};
use crate::workers::settlement::{ReleaseWatch, Settlement};
use axum::Router;
use domain::expiry::ExpiryPolicy;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

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

/// How often a running instance notes its response key as in use.
const KEY_HEARTBEAT: Duration = Duration::from_secs(600);
/// How often an instance looks for bulk reconciliations whose runner stopped.
const BULK_RESUME_EVERY: Duration = Duration::from_secs(5);
/// How long workers get to finish their pass at shutdown.
const WORKERS_GRACE: Duration = Duration::from_secs(10);

/// The built application: it serves on its listener until told to stop.
pub struct Application {
    listener: TcpListener,
    address: SocketAddr,
    router: Router,
    workers: Supervisor,
    store: Arc<dyn Store>,
    /// Written once more after the workers stopped, so that nothing counted is lost.
    buffers: Vec<Arc<dyn Buffered>>,
}

impl Application {
    /// Builds everything over `store` (opened and migrated), serving on `listener`.
    pub async fn build(
        listener: TcpListener,
        store: Arc<dyn Store>,
        data_dir: &Path,
        args: ServeArgs,
    ) -> Result<Application, ServeError> {
        // An owner still waiting for the provider must never look dead to a retry or the worker.
        if args.lease_secs.saturating_mul(1000) <= args.provider_timeout_ms {
            return Err(ServeError::Config(format!(
                "the in-progress lease ({} s) must be longer than the provider timeout ({} ms)",
                args.lease_secs, args.provider_timeout_ms
            )));
        }
        let address = listener.local_addr().map_err(ServeError::Server)?;
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
        let expiry = ExpiryPolicy {
            window: Duration::from_secs(args.window_secs),
            after_expiry: args.after_expiry,
            retention: Duration::from_secs(args.retention_secs),
        };
        let lease = Duration::from_secs(args.lease_secs);
        sealer
            .check_against(store.as_ref(), expiry.window + lease)
            .await
            .map_err(|error| ServeError::Config(error.to_string()))?;
        let outcomes = Arc::new(OutcomeCounter::default());
        let journal = Arc::new(RequestJournal::default());
        let engine = Arc::new(PaymentsEngine::new(
            EngineParts {
                records: store.clone(),
                payments: store.clone(),
                provider,
                outcomes: outcomes.clone(),
                journal: journal.clone(),
                sealer: sealer.clone(),
            },
            EngineSettings {
                lease,
                expiry,
                instance_id: format!("idem-{}", uuid::Uuid::new_v4().simple()),
            },
        ));
        let console = StoreConsole::new(store.clone(), engine.clone(), args.recovery_max_attempts);
        let buffers: Vec<Arc<dyn Buffered>> = vec![outcomes, journal];
        let flush_every = Duration::from_millis(args.metrics_flush_ms.max(10));
        for (name, buffer) in ["outcome counts", "request journal"].into_iter().zip(&buffers) {
            workers.spawn(Arc::new(Flusher {
                name,
                buffer: buffer.clone(),
                store: store.clone(),
                interval: flush_every,
            }));
        }
        let settlement_every = Duration::from_millis(args.settlement_interval_ms.max(10));
        // Expired console sessions and undecided override requests are swept as often as
        // expired records.
        let sweep_every = Duration::from_millis(args.cleanup_interval_ms.max(10));
        let periodic: Vec<Arc<dyn Worker>> = vec![
            Arc::new(KeyHeartbeat {
                sealer,
                store: store.clone(),
                interval: KEY_HEARTBEAT,
            }),
            Arc::new(Recovery {
                engine: engine.clone(),
                records: store.clone(),
                payments: store.clone(),
                settings: RecoverySettings {
                    interval: Duration::from_millis(args.recovery_interval_ms.max(10)),
                    max_attempts: args.recovery_max_attempts,
                    batch: 50,
                },
            }),
            Arc::new(Settlement {
                engine: engine.clone(),
                interval: settlement_every,
            }),
            Arc::new(ReleaseWatch {
                engine: engine.clone(),
                interval: settlement_every,
            }),
            Arc::new(Cleanup::new(
                store.clone(),
                CleanupSettings {
                    interval: sweep_every,
                    retention: expiry.retention,
                    max_batch: args.cleanup_batch,
                    batch_bound: Duration::from_millis(args.cleanup_batch_bound_ms.max(1)),
                    pause: Duration::from_millis(20),
                },
            )),
            Arc::new(SessionExpiry {
                operators: store.clone(),
                interval: sweep_every,
            }),
            Arc::new(OverrideExpiry {
                approvals: store.clone(),
                interval: sweep_every,
            }),
            Arc::new(BulkResumer {
                console: console.clone(),
                interval: BULK_RESUME_EVERY,
            }),
        ];
        for worker in periodic {
            workers.spawn(worker);
        }
        spawn_events(&mut workers, &args, &store, data_dir).await?;
        let settings = HttpSettings {
            site_root: args.site_root.clone(),
            site_addr: address,
            request_timeout: Duration::from_secs(args.request_timeout_secs),
            body_limit_bytes: args.body_limit_bytes,
            secure_cookies: args.secure_cookies,
        };
        let state = AppState {
            store: store.clone(),
            engine,
            rate_limit: Arc::new(ApiRateLimit::per_second(args.rate_limit_per_sec)),
            metrics: Arc::new(Exposition::new(metrics::prometheus::install(), expiry.retention)),
        };
        let router = http::router(state, console, &settings);
        Ok(Application {
            listener,
            address,
            router,
            workers,
            store,
            buffers,
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Serves until `shutdown` resolves: then stops accepting, lets requests in flight
    /// finish, stops the workers (waiting for each pass under way), writes what is buffered
    /// once more and closes the database pool.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let served = axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(ServeError::Server);
        tracing::info!("in-flight requests finished; stopping the workers");
        self.workers.shutdown(WORKERS_GRACE).await;
        for buffer in &self.buffers {
            buffer.flush(self.store.as_ref()).await;
        }
        self.store.close().await;
        served
    }
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
    workers.spawn(Arc::new(Publisher::new(
        store.clone(),
        transport,
        PublisherSettings {
            interval,
            batch: 50,
            claim: Duration::from_secs(args.outbox_claim_secs.max(1)),
            max_attempts: args.outbox_max_attempts,
        },
    )));
    std::fs::create_dir_all(data_dir)
        .map_err(|error| ServeError::Config(format!("data directory: {error}")))?;
    let sink = match (&args.smtp_url, &args.smtp_to) {
        (Some(url), Some(to)) => ReceiptSink::smtp(url, &args.smtp_from, to).map_err(ServeError::Config)?,
        _ => ReceiptSink::File(
            args.receipts_sink
                .clone()
                .unwrap_or_else(|| data_dir.join("receipts.jsonl")),
        ),
    };
    workers.spawn(Arc::new(ReceiptSender::new(store.clone(), sink, interval)));
    Ok(())
}
