//! The command line of the one binary. Every flag has an environment variable; `--help` shows both.

use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand, ValueEnum};
use domain::expiry::AfterExpiry;
use domain::fingerprint::FingerprintVersion;
use domain::operator::OperatorRole;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "idem",
    version,
    about = "Payments API with a payment-grade idempotency layer, and its operator console."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Connections to PostgreSQL a process opens at most unless told otherwise.
pub const DEFAULT_DATABASE_MAX_CONNECTIONS: u32 = 16;

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Database URL: postgres://… for PostgreSQL, sqlite://… for SQLite.
    /// Unset: the embedded SQLite database <data dir>/idem.db, created on first run.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,

    /// Most connections this process opens to PostgreSQL (instances × this must stay below
    /// the server's max_connections; see docs/deployment.md). The embedded SQLite ignores it.
    #[arg(
        long,
        env = "IDEM_DATABASE_MAX_CONNECTIONS",
        global = true,
        default_value_t = DEFAULT_DATABASE_MAX_CONNECTIONS,
        value_parser = clap::value_parser!(u32).range(1..=10_000),
    )]
    pub database_max_connections: u32,

    /// Directory for the embedded database and other local state.
    #[arg(long, env = "IDEM_DATA_DIR", global = true, default_value = "./data")]
    pub data_dir: PathBuf,

    /// Log line format on standard error.
    #[arg(long, env = "IDEM_LOG_FORMAT", global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Log filter, in tracing's EnvFilter syntax (e.g. "info,idem=debug").
    #[arg(long, env = "IDEM_LOG", global = true, default_value = "info")]
    pub log_filter: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the payments API and the operator console.
    Serve(Box<ServeArgs>),
    /// Run the payment provider simulator.
    ProviderSim(ProviderSimArgs),
    /// Apply the database migrations, then exit.
    Migrate,
    #[command(flatten)]
    Admin(AdminCommand),
}

/// The administrative commands: each runs against the database and prints its result.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Manage tenants.
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Manage a tenant's API keys.
    #[command(subcommand, name = "api-key")]
    ApiKey(ApiKeyCommand),
    /// Manage a tenant's accounts.
    #[command(subcommand)]
    Account(AccountCommand),
    /// Manage console operators.
    #[command(subcommand)]
    Operator(OperatorCommand),
}

#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Create an operator; prints the generated password alone on standard output (shown
    /// this once, stored only as an Argon2id hash).
    Create {
        /// Lower-case username: a-z, 0-9, '.', '_' or '-'.
        #[arg(long)]
        username: String,
        /// viewer (reads), operator (also reconciles) or admin (also overrides).
        #[arg(long, value_parser = parse_role)]
        role: OperatorRole,
    },
    /// Give an operator a new generated password (printed once); their sessions end.
    ResetPassword { username: String },
    /// Change an operator's role; it applies from their next request, including to bulk
    /// reconcile jobs they started.
    SetRole {
        username: String,
        #[arg(long, value_parser = parse_role)]
        role: OperatorRole,
    },
    /// Disable an operator: their sessions stop working at once and their unfinished bulk
    /// jobs apply nothing more; nothing of theirs is deleted.
    Disable { username: String },
    /// Enable a disabled operator again with a new generated password (printed once); their
    /// sessions from before stay ended.
    Enable { username: String },
    /// List operators: username, role, enabled or disabled, created (tab-separated).
    List,
}

fn parse_role(text: &str) -> Result<OperatorRole, String> {
    text.parse()
        .map_err(|_| format!("unknown role {text:?} (viewer, operator or admin)"))
}

#[derive(Debug, Args)]
pub struct ProviderSimArgs {
    /// Address to listen on.
    #[arg(long, env = "IDEM_LISTEN", default_value = "127.0.0.1:4010")]
    pub listen: SocketAddr,
}

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant; prints its id alone on standard output.
    Create {
        /// Lower-case name: a-z, 0-9, '_' or '-'.
        name: String,
        /// Accept payments without an Idempotency-Key (duplicates are then stopped only by
        /// the account and merchant reference). Keys are required by default.
        #[arg(long)]
        optional_idempotency_key: bool,
    },
    /// Whether the tenant's payments need an Idempotency-Key (every instance applies it within
    /// 5 s).
    Keys {
        name: String,
        #[arg(value_enum)]
        rule: KeysRule,
    },
    /// List tenants: name, id, keys required or optional, created (tab-separated).
    List,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KeysRule {
    Required,
    Optional,
}

#[derive(Debug, Subcommand)]
pub enum ApiKeyCommand {
    /// Create an API key; prints the key alone on standard output. It is shown this once and
    /// stored only as a hash.
    Create {
        /// The tenant's name.
        #[arg(long)]
        tenant: String,
    },
    /// Revoke an API key by its id (the `key_…` part of the key).
    Revoke { key_id: String },
    /// List a tenant's API keys: id, created by, created, last used, revoked (tab-separated;
    /// `-` where there is none).
    List {
        /// The tenant's name.
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum AccountCommand {
    /// Create an account with an opening balance.
    Create {
        /// The tenant's name.
        #[arg(long)]
        tenant: String,
        /// The account id, chosen by the tenant (e.g. acc_1).
        #[arg(long)]
        id: String,
        /// ISO 4217 currency code (CHF, EUR, GBP, JPY, USD).
        #[arg(long)]
        currency: String,
        /// Opening balance as a decimal string (e.g. 1000.00).
        #[arg(long)]
        balance: String,
    },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "IDEM_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,

    /// Address of the Prometheus metrics listener (`GET /metrics`), apart from the API's so
    /// that API callers cannot read other tenants' figures; keep it on loopback or a private
    /// network.
    #[arg(long, env = "IDEM_METRICS_LISTEN", default_value = "127.0.0.1:9464")]
    pub metrics_listen: SocketAddr,

    /// Serve the console (its pages, sign-in, server functions and downloads) on an address of
    /// its own, and only the payments API on --listen, so that a deployment can
    /// keep the console off the port its API callers reach. By default both share --listen.
    #[arg(long, env = "IDEM_CONSOLE_LISTEN")]
    pub console_listen: Option<SocketAddr>,

    /// Directory with the console's built assets (pkg/ with the wasm, JS and CSS).
    #[arg(long, env = "IDEM_SITE_ROOT", default_value = "target/site")]
    pub site_root: PathBuf,

    /// Longest time, in seconds, a request may take before it is answered 503.
    #[arg(long, env = "IDEM_REQUEST_TIMEOUT_SECS", default_value_t = 30)]
    pub request_timeout_secs: u64,

    /// Largest request body accepted, in bytes.
    #[arg(long, env = "IDEM_BODY_LIMIT_BYTES", default_value_t = 64 * 1024)]
    pub body_limit_bytes: usize,

    /// Base URL of the payment provider. Unset: a provider simulator runs in-process.
    #[arg(long, env = "IDEM_PROVIDER_URL")]
    pub provider_url: Option<String>,

    /// How long a provider call may take, in milliseconds; past it the outcome is unknown.
    #[arg(long, env = "IDEM_PROVIDER_TIMEOUT_MS", default_value_t = 10_000)]
    pub provider_timeout_ms: u64,

    /// How long, in seconds, a request owns its idempotency key before a retry may take over.
    #[arg(long, env = "IDEM_LEASE_SECS", default_value_t = 30)]
    pub lease_secs: u64,

    /// Keys that seal stored responses, `id:base64-of-32-bytes[,id:…]`; the first seals, all
    /// open (rotation). Unset: a key generated on first run in <data dir>/response-keys
    /// (every instance sharing a database must use the same keys).
    #[arg(long, env = "IDEM_RESPONSE_KEYS", hide_env_values = true)]
    pub response_keys: Option<String>,

    /// How often, in milliseconds, authorised payments are checked for settlement at the
    /// provider.
    #[arg(long, env = "IDEM_SETTLEMENT_INTERVAL_MS", default_value_t = 10_000)]
    pub settlement_interval_ms: u64,

    /// NATS server URL: events go through NATS JetStream. Unset: delivered in-process.
    #[arg(long, env = "IDEM_NATS_URL")]
    pub nats_url: Option<String>,

    /// The JetStream stream events are published to (created if absent).
    #[arg(long, env = "IDEM_NATS_STREAM", default_value = "IDEM_EVENTS")]
    pub nats_stream: String,

    /// Subjects are `<prefix>.<event type>`.
    #[arg(long, env = "IDEM_NATS_SUBJECT_PREFIX", default_value = "idem.events")]
    pub nats_subject_prefix: String,

    /// Seconds a delivered, unacknowledged event waits before JetStream delivers it again.
    #[arg(long, env = "IDEM_NATS_ACK_WAIT_SECS", default_value_t = 30)]
    pub nats_ack_wait_secs: u64,

    /// How often, in milliseconds, the outbox publisher looks for events to deliver.
    #[arg(long, env = "IDEM_OUTBOX_INTERVAL_MS", default_value_t = 500)]
    pub outbox_interval_ms: u64,

    /// How long, in seconds, a publisher's claim keeps other publishers off an event (after a
    /// crash, its events wait this long before another instance publishes them).
    #[arg(long, env = "IDEM_OUTBOX_CLAIM_SECS", default_value_t = 30)]
    pub outbox_claim_secs: u64,

    /// Publication attempts per event before it is dead-lettered for an operator.
    #[arg(long, env = "IDEM_OUTBOX_MAX_ATTEMPTS", default_value_t = 10)]
    pub outbox_max_attempts: i32,

    /// Send receipts by e-mail through this SMTP server (`smtp://user:pass@host:587`,
    /// `smtps://…`). Unset: receipts go to the file sink.
    #[arg(long, env = "IDEM_SMTP_URL", hide_env_values = true, requires = "smtp_to")]
    pub smtp_url: Option<String>,

    /// The receipts' sender address.
    #[arg(long, env = "IDEM_SMTP_FROM", default_value = "Idem <receipts@idem.invalid>")]
    pub smtp_from: String,

    /// Where receipts are mailed.
    #[arg(long, env = "IDEM_SMTP_TO")]
    pub smtp_to: Option<String>,

    /// Where receipts are delivered without SMTP (JSON lines, one per receipt, with its
    /// message id). Unset: <data dir>/receipts.jsonl.
    #[arg(long, env = "IDEM_RECEIPTS_SINK")]
    pub receipts_sink: Option<PathBuf>,

    /// Mark the console's session cookie Secure (set it when Idem is served over HTTPS).
    #[arg(long, env = "IDEM_SECURE_COOKIES")]
    pub secure_cookies: bool,

    /// Idem is behind one reverse proxy that appends the client's address to
    /// X-Forwarded-For: sign-in limits and the API's limit on unknown keys count that address,
    /// not the proxy's.
    #[arg(long, env = "IDEM_TRUST_FORWARDED_FOR")]
    pub trust_forwarded_for: bool,

    /// How often an instance looks for bulk reconciliations whose runner stopped, in
    /// milliseconds.
    #[arg(long, env = "IDEM_BULK_RESUME_INTERVAL_MS", default_value_t = 5_000)]
    pub bulk_resume_interval_ms: u64,

    /// How long a bulk job's runner holds it without finishing an item before another
    /// instance resumes it, in milliseconds: longer than one item can take (a provider call,
    /// bounded by its timeout).
    #[arg(long, env = "IDEM_BULK_LEASE_MS", default_value_t = 60_000)]
    pub bulk_lease_ms: u64,

    /// How often an instance renews its registration (the response keys it holds) and checks
    /// the keys in use, in milliseconds; one silent for three heartbeats is no longer live.
    #[arg(long, env = "IDEM_INSTANCE_HEARTBEAT_MS", default_value_t = 5_000)]
    pub instance_heartbeat_ms: u64,

    /// How long a console session lasts after its sign-in however much it is used, in
    /// seconds (it also ends after 8 hours unused).
    #[arg(long, env = "IDEM_SESSION_LIFETIME_SECS", default_value_t = 12 * 3600)]
    pub session_lifetime_secs: u64,

    /// Requests per second allowed per tenant (whatever key it uses) on this instance (0: no
    /// limit).
    #[arg(long, env = "IDEM_RATE_LIMIT_PER_SEC", default_value_t = 100)]
    pub rate_limit_per_sec: u32,

    /// Memory, in bytes, for final answers (completed and declined records with their stored
    /// responses), so that a replay needs no database until shortly before its window ends
    /// (0: off).
    #[arg(long, env = "IDEM_ANSWER_CACHE_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub answer_cache_bytes: u64,

    /// How many requests asking to wait (`Prefer: wait=N`) this instance holds at once while
    /// another request owns their key; past it, a request is answered at once (409).
    #[arg(long, env = "IDEM_MAX_WAITING_REQUESTS", default_value_t = 256)]
    pub max_waiting_requests: usize,

    /// How often, in milliseconds, this instance writes its outcome counts to the database.
    #[arg(long, env = "IDEM_METRICS_FLUSH_MS", default_value_t = 5_000)]
    pub metrics_flush_ms: u64,

    /// How often, in milliseconds, this instance writes its request journal (the console's
    /// record pages) to the database, in batches (one statement each).
    #[arg(long, env = "IDEM_JOURNAL_FLUSH_MS", default_value_t = 100)]
    pub journal_flush_ms: u64,

    /// How often, in milliseconds, the recovery worker looks for unknown outcomes and dead
    /// owners' records.
    #[arg(long, env = "IDEM_RECOVERY_INTERVAL_MS", default_value_t = 5_000)]
    pub recovery_interval_ms: u64,

    /// Provider look-ups per unknown outcome before it is left to an operator.
    #[arg(long, env = "IDEM_RECOVERY_MAX_ATTEMPTS", default_value_t = 10)]
    pub recovery_max_attempts: i32,

    /// The fingerprint version new records are made in: by default the build's current one;
    /// another version this build knows during a two-step deploy of a new canonicalisation
    /// (docs/fingerprint.md). A retry is always compared in its own record's version.
    #[arg(
        long,
        env = "IDEM_FINGERPRINT_VERSION",
        default_value_t = FingerprintVersion::CURRENT,
        value_parser = clap::value_parser!(u16).try_map(FingerprintVersion::known),
    )]
    pub fingerprint_version: FingerprintVersion,

    /// The idempotency window of create_payment, in seconds.
    #[arg(long, env = "IDEM_WINDOW_SECS", default_value_t = 24 * 3600)]
    pub window_secs: u64,

    /// What a create_payment retry gets after its key's window: a new operation (the
    /// business key still stops a second payment) or 422 IDEMPOTENCY_KEY_EXPIRED.
    #[arg(
        long,
        env = "IDEM_AFTER_EXPIRY",
        default_value = "new_operation",
        value_parser = clap::builder::PossibleValuesParser::new(["new_operation", "reject"])
            .try_map(|text| text.parse::<AfterExpiry>()),
    )]
    pub after_expiry: AfterExpiry,

    /// The idempotency window of create_refund, in seconds (refunds are retried from queues
    /// for days).
    #[arg(long, env = "IDEM_REFUND_WINDOW_SECS", default_value_t = 7 * 24 * 3600)]
    pub refund_window_secs: u64,

    /// What a create_refund retry gets after its key's window: 422 IDEMPOTENCY_KEY_EXPIRED
    /// naming the refund, or a new operation (the refund reference still stops a second
    /// refund).
    #[arg(
        long,
        env = "IDEM_REFUND_AFTER_EXPIRY",
        default_value = "reject",
        value_parser = clap::builder::PossibleValuesParser::new(["new_operation", "reject"])
            .try_map(|text| text.parse::<AfterExpiry>()),
    )]
    pub refund_after_expiry: AfterExpiry,

    /// How long, in seconds, a create_refund request owns its key before a retry may take over.
    #[arg(long, env = "IDEM_REFUND_LEASE_SECS", default_value_t = 30)]
    pub refund_lease_secs: u64,

    /// How long, in seconds, an expired record's tombstone (scope, key, fingerprint, outcome,
    /// resource and provider reference; no body) is kept after its window.
    #[arg(long, env = "IDEM_RETENTION_SECS", default_value_t = 30 * 24 * 3600)]
    pub retention_secs: u64,

    /// How often, in milliseconds, the cleanup worker purges expired bodies and old tombstones.
    #[arg(long, env = "IDEM_CLEANUP_INTERVAL_MS", default_value_t = 10_000)]
    pub cleanup_interval_ms: u64,

    /// The largest cleanup batch, in records.
    #[arg(long, env = "IDEM_CLEANUP_BATCH", default_value_t = 500)]
    pub cleanup_batch: i64,

    /// The longest, in milliseconds, a cleanup batch may hold its transaction (enforced by
    /// PostgreSQL; an overrun rolls back and the next batch is smaller).
    #[arg(long, env = "IDEM_CLEANUP_BATCH_BOUND_MS", default_value_t = 1_000)]
    pub cleanup_batch_bound_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_defaults_match_the_contract() {
        let cli = Cli::try_parse_from(["idem", "serve"]).expect("serve parses with no flags");
        let Command::Serve(args) = cli.command else {
            panic!("expected serve");
        };
        assert_eq!(args.listen.to_string(), "127.0.0.1:3000");
        assert_eq!(args.metrics_listen.to_string(), "127.0.0.1:9464");
        assert_eq!(args.console_listen, None, "one port by default");
        assert_eq!(cli.global.data_dir, PathBuf::from("./data"));
        assert_eq!(cli.global.database_max_connections, 16);
        assert!(Cli::try_parse_from(["idem", "serve", "--database-max-connections", "0"]).is_err());

        let cli = Cli::try_parse_from(["idem", "provider-sim"]).expect("provider-sim parses with no flags");
        let Command::ProviderSim(args) = cli.command else {
            panic!("expected provider-sim");
        };
        assert_eq!(args.listen.to_string(), "127.0.0.1:4010");
    }
}
