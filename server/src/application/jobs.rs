//! Every background job an instance runs, each by name under the supervisor: the flushers,
//! recovery, settlement, the release watch, retention, session and override expiry, the bulk
//! resumer, the heartbeat, and the events' publisher, consumers and receipt sender.

use super::settings::{EventSettings, FlushSettings, WorkerSettings};
use super::{Instance, ServeError};
use crate::console::StoreConsole;
use crate::console::refusals::SignInRefusals;
use crate::engine::PaymentsEngine;
use crate::engine::sealing::ResponseSealer;
use crate::events::consumers::{Consumer, Ledger, ReceiptSender, Receipts};
use crate::events::nats::NatsJetStream;
use crate::events::publisher::Publisher;
use crate::events::transport::{InProcess, Transport};
use crate::http::api_keys::VerifiedKeys;
use crate::metrics::journal::RequestJournal;
use crate::metrics::{Buffered, OutcomeCounter};
use crate::store::Store;
use crate::supervisor::{Every, Supervisor};
use crate::workers::recovery::Recovery;
use crate::workers::retention::Cleanup;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long after its release a payment's provider key is still asked about, for a charge
/// that arrives after all.
const RELEASE_WATCH: Duration = Duration::from_secs(24 * 3600);
/// Payments the settlement and the release watch look at per pass.
const JOB_BATCH: i64 = 100;

/// What is kept in memory and written in batches, with its own schedule.
pub(super) struct Flusher {
    name: &'static str,
    every: Duration,
    buffer: Arc<dyn Buffered>,
}

/// Every buffer an instance keeps, by name; each is written once more at shutdown, so that
/// nothing counted is lost.
pub(super) struct Flushers {
    pub outcomes: Flusher,
    pub journal: Flusher,
    pub api_key_use: Flusher,
    pub refused_sign_ins: Flusher,
}

impl Flushers {
    pub(super) fn new(
        settings: &FlushSettings,
        outcomes: Arc<OutcomeCounter>,
        journal: Arc<RequestJournal>,
        api_key_use: Arc<VerifiedKeys>,
        refused_sign_ins: Arc<SignInRefusals>,
    ) -> Flushers {
        let flusher = |name, every, buffer: Arc<dyn Buffered>| Flusher { name, every, buffer };
        Flushers {
            outcomes: flusher("outcome counts flusher", settings.outcomes, outcomes),
            journal: flusher("request journal flusher", settings.journal, journal),
            api_key_use: flusher("API key use flusher", settings.api_key_use, api_key_use),
            refused_sign_ins: flusher(
                "refused sign-ins summary",
                settings.refused_sign_ins,
                refused_sign_ins,
            ),
        }
    }

    fn all(&self) -> [&Flusher; 4] {
        [
            &self.outcomes,
            &self.journal,
            &self.api_key_use,
            &self.refused_sign_ins,
        ]
    }

    /// Writes every buffer now (at shutdown, after the jobs stopped).
    pub(super) async fn flush_all(&self, store: &dyn Store) {
        for flusher in self.all() {
            flusher.buffer.flush(store).await;
        }
    }
}

/// Every job but the events', each on its own schedule.
pub(super) fn spawn_jobs(
    workers: &mut Supervisor,
    settings: &WorkerSettings,
    store: &Arc<dyn Store>,
    engine: &Arc<PaymentsEngine>,
    console: &Arc<StoreConsole>,
    flushers: &Flushers,
) {
    for flusher in flushers.all() {
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
        settings: settings.recovery.clone(),
    });
    workers.spawn(Every::new(
        "recovery",
        settings.recovery_every,
        recovery,
        |recovery| async move {
            recovery.run_once().await;
        },
    ));
    // A payment is looked at again only after an interval.
    let settle = settings.settlement_every;
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
    let sweep = settings.cleanup_every;
    let cleanup = Arc::new(Cleanup::new(store.clone(), settings.cleanup.clone()));
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
        settings.bulk_resume_every,
        console.clone(),
        |console| async move {
            console.resume_bulk_jobs().await;
        },
    ));
}

/// The instance's registration and its check of the response keys in use, every heartbeat.
pub(super) fn spawn_heartbeat(
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
pub(super) async fn spawn_events(
    workers: &mut Supervisor,
    settings: EventSettings,
    store: &Arc<dyn Store>,
    data_dir: &Path,
) -> Result<(), ServeError> {
    let consumers: Vec<Arc<dyn Consumer>> = vec![
        Arc::new(Ledger::new(store.clone())),
        Arc::new(Receipts::new(store.clone())),
    ];
    let transport: Arc<dyn Transport> = match settings.nats {
        Some(nats) => {
            let nats = NatsJetStream::connect(nats)
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
    let publisher = Arc::new(Publisher::new(store.clone(), transport, settings.publisher));
    workers.spawn(Every::new(
        "outbox publisher",
        settings.outbox_every,
        publisher,
        |publisher| async move {
            publisher.run_once().await;
        },
    ));
    crate::files::create_private_dir(data_dir)
        .map_err(|error| ServeError::Config(format!("data directory: {error}")))?;
    let sender = Arc::new(ReceiptSender::new(store.clone(), settings.receipts));
    workers.spawn(Every::new(
        "receipt sender",
        settings.outbox_every,
        sender,
        |sender| async move {
            if let Err(error) = sender.send_all_pending(100).await {
                tracing::warn!(%error, "receipts: sending failed; pending receipts stay pending");
            }
        },
    ));
    Ok(())
}
