//! `idem serve`'s flags as the typed settings of each part it builds (the engine, the
//! provider client, the API, the console, the background jobs and the events), checked once,
//! so that `Application::build` only assembles parts.

use super::ServeError;
use crate::auth::source::Sources;
use crate::bounds::Bounds;
use crate::cli::ServeArgs;
use crate::console::router::ConsoleSettings;
use crate::engine::{EngineSettings, OperationSettings, WaitSettings};
use crate::events::consumers::ReceiptSink;
use crate::events::nats::NatsSettings;
use crate::events::publisher::PublisherSettings;
use crate::workers::recovery::RecoverySettings;
use crate::workers::retention::CleanupSettings;
use domain::expiry::ExpiryPolicy;
use domain::prefer::LONGEST_WAIT_SECS;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// How often refused sign-ins are summed up in the audit log (one entry per source).
const REFUSALS_SUMMED_UP_EVERY: Duration = Duration::from_secs(60);

/// Everything `Application::build` needs, from the command line.
pub(super) struct Settings {
    pub engine: EngineSettings,
    pub provider: ProviderSettings,
    /// The keys that seal stored responses (`--response-keys`); none: generate one (SQLite only).
    pub response_keys: Option<String>,
    pub api: ApiSettings,
    pub console: ConsoleSettings,
    /// The console's view of the recovery worker's limit, and a bulk job runner's lease.
    pub recovery_max_attempts: i32,
    pub bulk_lease: Duration,
    pub workers: WorkerSettings,
    pub events: EventSettings,
    pub retention: Duration,
}

/// Where the provider is and how long it is waited for.
pub(super) struct ProviderSettings {
    /// None: run the simulator in this process.
    pub url: Option<String>,
    pub connect_timeout: Duration,
    pub timeout: Duration,
}

/// The payments API's own limits.
pub(super) struct ApiSettings {
    pub bounds: Bounds,
    pub sources: Sources,
    pub rate_limit_per_sec: u32,
}

/// How often each background job runs, and what it takes per pass.
pub(super) struct WorkerSettings {
    pub recovery: RecoverySettings,
    pub recovery_every: Duration,
    /// How often settlement and the release watch pass, and how long a payment waits before
    /// either looks at it again.
    pub settlement_every: Duration,
    pub cleanup: CleanupSettings,
    /// How often retention, session expiry and override expiry pass.
    pub cleanup_every: Duration,
    pub bulk_resume_every: Duration,
    pub heartbeat: Duration,
    pub flush: FlushSettings,
}

/// How often each buffer in memory is written out.
pub(super) struct FlushSettings {
    pub outcomes: Duration,
    pub journal: Duration,
    pub api_key_use: Duration,
    pub refused_sign_ins: Duration,
}

/// The outbox, its transport and the receipts.
pub(super) struct EventSettings {
    /// None: deliver in this process.
    pub nats: Option<NatsSettings>,
    pub outbox_every: Duration,
    pub publisher: PublisherSettings,
    pub receipts: ReceiptSink,
}

impl Settings {
    /// The settings of an instance whose data directory is `data_dir`, serving on `address`.
    pub(super) fn of(args: &ServeArgs, data_dir: &Path, address: SocketAddr) -> Result<Settings, ServeError> {
        check(args)?;
        let retention = Duration::from_secs(args.retention_secs);
        let engine = engine(args, retention);
        let bounds = Bounds {
            request_timeout: Duration::from_secs(args.request_timeout_secs),
            body_limit_bytes: args.body_limit_bytes,
        };
        let sources = Sources {
            trust_forwarded_for: args.trust_forwarded_for,
        };
        let workers = workers(args, &engine, retention);
        Ok(Settings {
            provider: ProviderSettings {
                url: args.provider_url.clone(),
                connect_timeout: Duration::from_secs(2),
                timeout: Duration::from_millis(args.provider_timeout_ms),
            },
            response_keys: args.response_keys.clone(),
            api: ApiSettings {
                bounds,
                sources,
                rate_limit_per_sec: args.rate_limit_per_sec,
            },
            console: ConsoleSettings {
                site_root: args.site_root.clone(),
                site_addr: address,
                secure_cookies: args.secure_cookies,
                sources,
                session_lifetime: Duration::from_secs(args.session_lifetime_secs),
                bounds,
            },
            recovery_max_attempts: args.recovery_max_attempts,
            bulk_lease: Duration::from_millis(args.bulk_lease_ms),
            events: events(args, data_dir)?,
            engine,
            workers,
            retention,
        })
    }
}

/// Refuses flags that contradict each other.
fn check(args: &ServeArgs) -> Result<(), ServeError> {
    // An owner still waiting for the provider must never look dead to a retry or the worker.
    for lease_secs in [args.lease_secs, args.refund_lease_secs] {
        if lease_secs.saturating_mul(1000) <= args.provider_timeout_ms {
            return Err(ServeError::Config(format!(
                "the in-progress lease ({lease_secs} s) must be longer than the provider timeout ({} ms)",
                args.provider_timeout_ms
            )));
        }
    }
    Ok(())
}

/// Each operation's lease, window and policy after it, this instance's name, its memory for
/// final answers, the fingerprint version of its new records, and how it holds waiting
/// requests.
fn engine(args: &ServeArgs, retention: Duration) -> EngineSettings {
    EngineSettings {
        create_payment: OperationSettings {
            lease: Duration::from_secs(args.lease_secs),
            expiry: ExpiryPolicy {
                window: Duration::from_secs(args.window_secs),
                after_expiry: args.after_expiry,
                retention,
            },
        },
        create_refund: OperationSettings {
            lease: Duration::from_secs(args.refund_lease_secs),
            expiry: ExpiryPolicy {
                window: Duration::from_secs(args.refund_window_secs),
                after_expiry: args.refund_after_expiry,
                retention,
            },
        },
        instance_id: format!("idem-{}", uuid::Uuid::new_v4().simple()),
        answer_cache_bytes: args.answer_cache_bytes,
        fingerprint_version: args.fingerprint_version,
        waiting: WaitSettings {
            max_waiting: args.max_waiting_requests,
            // A held request is answered a second before the request timeout would cut it off.
            longest: Duration::from_secs(u64::from(LONGEST_WAIT_SECS))
                .min(Duration::from_secs(args.request_timeout_secs.saturating_sub(1))),
        },
    }
}

fn workers(args: &ServeArgs, engine: &EngineSettings, retention: Duration) -> WorkerSettings {
    WorkerSettings {
        recovery: RecoverySettings {
            max_attempts: args.recovery_max_attempts,
            batch: 50,
        },
        recovery_every: every(args.recovery_interval_ms),
        settlement_every: every(args.settlement_interval_ms),
        cleanup: CleanupSettings {
            retention,
            journal_retention: engine.longest_memory(),
            max_batch: args.cleanup_batch,
            batch_bound: every(args.cleanup_batch_bound_ms),
            pause: Duration::from_millis(20),
        },
        cleanup_every: every(args.cleanup_interval_ms),
        bulk_resume_every: every(args.bulk_resume_interval_ms),
        heartbeat: every(args.instance_heartbeat_ms),
        flush: FlushSettings {
            outcomes: every(args.metrics_flush_ms),
            journal: every(args.journal_flush_ms),
            api_key_use: every(args.metrics_flush_ms),
            refused_sign_ins: REFUSALS_SUMMED_UP_EVERY,
        },
    }
}

fn events(args: &ServeArgs, data_dir: &Path) -> Result<EventSettings, ServeError> {
    let receipts = match (&args.smtp_url, &args.smtp_to) {
        (Some(url), Some(to)) => ReceiptSink::smtp(url, &args.smtp_from, to).map_err(ServeError::Config)?,
        _ => ReceiptSink::File(
            args.receipts_sink
                .clone()
                .unwrap_or_else(|| data_dir.join("receipts.jsonl")),
        ),
    };
    Ok(EventSettings {
        nats: args.nats_url.as_ref().map(|url| NatsSettings {
            url: url.clone(),
            stream: args.nats_stream.clone(),
            subject_prefix: args.nats_subject_prefix.clone(),
            ack_wait: Duration::from_secs(args.nats_ack_wait_secs.max(1)),
        }),
        outbox_every: every(args.outbox_interval_ms),
        publisher: PublisherSettings {
            batch: 50,
            claim: Duration::from_secs(args.outbox_claim_secs.max(1)),
            max_attempts: args.outbox_max_attempts,
        },
        receipts,
    })
}

/// A job's interval from its setting (10 ms at least).
fn every(millis: u64) -> Duration {
    Duration::from_millis(millis.max(10))
}
