//! The long-running commands: `idem serve` (open the store, migrate, listen) and
//! `idem provider-sim`; both stop gracefully on SIGINT or SIGTERM.

use crate::cli::{ProviderSimArgs, ServeArgs};
use crate::events;
use crate::expiry::cleanup::{self, CleanupSettings};
use crate::http::rate_limit::ApiRateLimit;
use crate::http::{self, AppState, HttpSettings};
use crate::idempotency::journal::RequestJournal;
use crate::idempotency::sealing::{self, ResponseSealer};
use crate::metrics::prometheus::Exposition;
use crate::metrics::{self, Buffered, OutcomeCounter};
use crate::payments::engine::{EngineSettings, PaymentsEngine};
use crate::provider;
use crate::provider::client::ProviderClient;
use crate::recovery::{self, RecoverySettings};
use crate::store::{self, DatabaseTarget, StoreError};
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

pub async fn serve(target: DatabaseTarget, data_dir: &Path, args: ServeArgs) -> Result<(), ServeError> {
    // An owner still waiting for the provider must never look dead to a retry or the worker.
    if args.lease_secs.saturating_mul(1000) <= args.provider_timeout_ms {
        return Err(ServeError::Config(format!(
            "the in-progress lease ({} s) must be longer than the provider timeout ({} ms)",
            args.lease_secs, args.provider_timeout_ms
        )));
    }
    let store = store::open(&target).await?;
    store.migrate().await?;
    tracing::info!(database = %target.redacted(), "database ready, migrations applied");

    let (listener, address) = bind(args.listen).await?;
    // Connections queue on the bound socket until the router serves them, so the address can
    // be announced now, before the workers start (a test may crash one of them at once).
    announce("Idem console", address);
    let settings = HttpSettings {
        site_root: args.site_root,
        site_addr: address,
        request_timeout: Duration::from_secs(args.request_timeout_secs),
        body_limit_bytes: args.body_limit_bytes,
        secure_cookies: args.secure_cookies,
        recovery_max_attempts: args.recovery_max_attempts,
    };
    let provider_url = match args.provider_url {
        Some(url) => url,
        None => start_in_process_simulator().await?,
    };
    let provider = ProviderClient::new(
        &provider_url,
        Duration::from_secs(2),
        Duration::from_millis(args.provider_timeout_ms),
    )
    .map_err(|error| ServeError::Provider(error.to_string()))?;
    let outcomes = Arc::new(OutcomeCounter::default());
    let journal = Arc::new(RequestJournal::default());
    let flush_every = Duration::from_millis(args.metrics_flush_ms.max(10));
    metrics::spawn_flusher(outcomes.clone(), store.clone(), flush_every);
    metrics::spawn_flusher(journal.clone(), store.clone(), flush_every);
    let sealer = match (&args.response_keys, &target) {
        (Some(spec), _) => ResponseSealer::from_spec(spec),
        // A key generated into one instance's data directory would leave every other
        // instance (and this one, once its disk is replaced) unable to replay.
        (None, DatabaseTarget::Postgres { .. }) => {
            return Err(ServeError::Config(
                "PostgreSQL is shared by instances: pass the same --response-keys (IDEM_RESPONSE_KEYS) \
                 to every instance; generate a key with `head -c 32 /dev/urandom | base64`"
                    .into(),
            ));
        }
        (None, _) => ResponseSealer::load_or_create(data_dir),
    }
    .map_err(|error| ServeError::Config(error.to_string()))?;
    let sealer = Arc::new(sealer);
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
    sealing::spawn_key_heartbeat(sealer.clone(), store.clone(), KEY_HEARTBEAT);
    let engine = PaymentsEngine::new(
        store.clone(),
        provider,
        outcomes.clone(),
        journal.clone(),
        sealer,
        EngineSettings {
            lease,
            expiry,
            instance_id: format!("idem-{}", uuid::Uuid::new_v4().simple()),
        },
    );
    let engine = Arc::new(engine);
    recovery::spawn_worker(
        engine.clone(),
        store.clone(),
        RecoverySettings {
            interval: Duration::from_millis(args.recovery_interval_ms.max(10)),
            max_attempts: args.recovery_max_attempts,
            batch: 50,
        },
    );
    crate::console::bulk::spawn_resumer(
        crate::console::StoreConsole::new(store.clone(), engine.clone(), args.recovery_max_attempts),
        BULK_RESUME_EVERY,
    );
    crate::payments::settlement::spawn_worker(
        engine.clone(),
        Duration::from_millis(args.settlement_interval_ms.max(10)),
    );
    cleanup::spawn_worker(
        store.clone(),
        CleanupSettings {
            interval: Duration::from_millis(args.cleanup_interval_ms.max(10)),
            retention: expiry.retention,
            max_batch: args.cleanup_batch,
            batch_bound: Duration::from_millis(args.cleanup_batch_bound_ms.max(1)),
            pause: Duration::from_millis(20),
        },
    );
    let consumers: Vec<Arc<dyn events::consumers::Consumer>> = vec![
        Arc::new(events::consumers::Ledger::new(store.clone())),
        Arc::new(events::consumers::Receipts::new(store.clone())),
    ];
    let transport: Arc<dyn events::transport::Transport> = match &args.nats_url {
        Some(url) => {
            let nats = events::nats::NatsJetStream::connect(events::nats::NatsSettings {
                url: url.clone(),
                stream: args.nats_stream.clone(),
                subject_prefix: args.nats_subject_prefix.clone(),
                ack_wait: Duration::from_secs(args.nats_ack_wait_secs.max(1)),
            })
            .await
            .map_err(|error| ServeError::Config(error.to_string()))?;
            for consumer in consumers {
                nats.spawn_consumer(consumer)
                    .await
                    .map_err(|error| ServeError::Config(error.to_string()))?;
            }
            tracing::info!("events go through NATS JetStream");
            Arc::new(nats)
        }
        None => Arc::new(events::transport::InProcess::new(consumers)),
    };
    events::publisher::spawn_publisher(events::publisher::Publisher::new(
        store.clone(),
        transport,
        events::publisher::PublisherSettings {
            interval: Duration::from_millis(args.outbox_interval_ms.max(10)),
            batch: 50,
            claim: Duration::from_secs(args.outbox_claim_secs.max(1)),
            max_attempts: args.outbox_max_attempts,
        },
    ));
    std::fs::create_dir_all(data_dir)
        .map_err(|error| ServeError::Config(format!("data directory: {error}")))?;
    let receipts_sink = match (&args.smtp_url, &args.smtp_to) {
        (Some(url), Some(to)) => {
            events::consumers::ReceiptSink::smtp(url, &args.smtp_from, to).map_err(ServeError::Config)?
        }
        _ => events::consumers::ReceiptSink::File(
            args.receipts_sink
                .clone()
                .unwrap_or_else(|| data_dir.join("receipts.jsonl")),
        ),
    };
    events::consumers::spawn_receipt_sender(
        events::consumers::ReceiptSender::new(store.clone(), receipts_sink),
        Duration::from_millis(args.outbox_interval_ms.max(10)),
    );
    let state = AppState {
        store: store.clone(),
        engine,
        rate_limit: Arc::new(ApiRateLimit::per_second(args.rate_limit_per_sec)),
        metrics: Arc::new(Exposition::new(metrics::prometheus::install(), expiry.retention)),
    };
    let router = http::router(state, &settings);

    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(ServeError::Server)?;
    tracing::info!("in-flight requests finished; flushing counts and closing the database pool");
    outcomes.flush(store.as_ref()).await;
    journal.flush(store.as_ref()).await;
    store.close().await;
    Ok(())
}

/// `idem provider-sim`: the simulator on its own port until SIGINT or SIGTERM.
pub async fn provider_sim(args: ProviderSimArgs) -> Result<(), ServeError> {
    let (listener, address) = bind(args.listen).await?;
    announce("Idem provider simulator", address);
    axum::serve(
        listener,
        provider::sim::router(provider::sim::Simulator::default()),
    )
    .with_graceful_shutdown(shutdown_signal())
    .await
    .map_err(ServeError::Server)
}

/// The provider simulator on a free loopback port of this process, so that a fresh checkout
/// runs with nothing else started.
async fn start_in_process_simulator() -> Result<String, ServeError> {
    let (listener, address) = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(
            listener,
            provider::sim::router(provider::sim::Simulator::default()),
        )
        .await
        {
            tracing::error!(%error, "in-process provider simulator stopped");
        }
    });
    tracing::info!(%address, "provider simulator running in-process");
    Ok(format!("http://{address}"))
}

async fn bind(address: SocketAddr) -> Result<(TcpListener, SocketAddr), ServeError> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| ServeError::Bind { address, source })?;
    let bound = listener.local_addr().map_err(ServeError::Server)?;
    Ok((listener, bound))
}

/// One line on stdout naming the URL, for people and for scripts that start Idem on port 0.
fn announce(what: &str, address: SocketAddr) {
    tracing::info!(%address, "{what} listening");
    println!("{what}: http://{address}/");
}

/// Resolves on SIGINT or SIGTERM. In-flight requests then run to completion while no new
/// connection is accepted.
async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = interrupt => tracing::info!("SIGINT received, shutting down"),
        () = terminate => tracing::info!("SIGTERM received, shutting down"),
    }
}
