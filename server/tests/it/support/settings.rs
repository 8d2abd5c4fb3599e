//! `idem serve`'s settings as a test states them: typed values, each written once as the flag
//! that says it. The flags are the one language both ways of running Idem take (an instance
//! built in this process parses them with the binary's own clap code into the same typed
//! settings), so a test names a value, never a flag's spelling.

use domain::expiry::AfterExpiry;
use std::time::Duration;

/// One `idem serve` setting a test changes.
#[derive(Debug, Clone)]
pub enum Serve {
    /// create_payment's in-progress lease (whole seconds).
    Lease(Duration),
    /// create_refund's in-progress lease (whole seconds).
    RefundLease(Duration),
    ProviderTimeout(Duration),
    /// create_payment's idempotency window (whole seconds).
    Window(Duration),
    /// create_refund's idempotency window (whole seconds).
    RefundWindow(Duration),
    /// create_payment's policy for a retry after its window.
    AfterExpiry(AfterExpiry),
    /// How long a tombstone is kept after its window (whole seconds).
    Retention(Duration),
    /// Memory for final answers (0: none).
    AnswerCacheBytes(u64),
    DatabaseMaxConnections(u32),
    /// The longest a request may take (whole seconds).
    RequestTimeout(Duration),
    BodyLimitBytes(usize),
    /// Requests a tenant may make a second (0: no limit).
    RateLimitPerSec(u32),
    RecoveryEvery(Duration),
    /// Recovery's attempts before a record is left to operators (0: none).
    RecoveryMaxAttempts(u32),
    SettlementEvery(Duration),
    CleanupEvery(Duration),
    OutboxEvery(Duration),
    /// How long an outbox batch stays claimed (whole seconds).
    OutboxClaim(Duration),
    MetricsFlushEvery(Duration),
    JournalFlushEvery(Duration),
    BulkResumeEvery(Duration),
    BulkLease(Duration),
    InstanceHeartbeat(Duration),
    /// A console session's lifetime (whole seconds).
    SessionLifetime(Duration),
    MaxWaitingRequests(usize),
    /// The fingerprint version new records are made in, by its name (`v1`, `v2`).
    FingerprintVersion(String),
    /// Sources are told apart by `X-Forwarded-For` from a trusted proxy.
    TrustForwardedFor,
    SmtpUrl(String),
    SmtpTo(String),
}

impl Serve {
    /// The flag that says this setting, and its value (empty for a switch).
    pub fn flag(&self) -> (&'static str, String) {
        let secs = |duration: &Duration| duration.as_secs().to_string();
        let millis = |duration: &Duration| duration.as_millis().to_string();
        match self {
            Serve::Lease(lease) => ("--lease-secs", secs(lease)),
            Serve::RefundLease(lease) => ("--refund-lease-secs", secs(lease)),
            Serve::ProviderTimeout(timeout) => ("--provider-timeout-ms", millis(timeout)),
            Serve::Window(window) => ("--window-secs", secs(window)),
            Serve::RefundWindow(window) => ("--refund-window-secs", secs(window)),
            Serve::AfterExpiry(policy) => ("--after-expiry", policy.as_str().to_owned()),
            Serve::Retention(retention) => ("--retention-secs", secs(retention)),
            Serve::AnswerCacheBytes(bytes) => ("--answer-cache-bytes", bytes.to_string()),
            Serve::DatabaseMaxConnections(connections) => {
                ("--database-max-connections", connections.to_string())
            }
            Serve::RequestTimeout(timeout) => ("--request-timeout-secs", secs(timeout)),
            Serve::BodyLimitBytes(bytes) => ("--body-limit-bytes", bytes.to_string()),
            Serve::RateLimitPerSec(limit) => ("--rate-limit-per-sec", limit.to_string()),
            Serve::RecoveryEvery(every) => ("--recovery-interval-ms", millis(every)),
            Serve::RecoveryMaxAttempts(attempts) => ("--recovery-max-attempts", attempts.to_string()),
            Serve::SettlementEvery(every) => ("--settlement-interval-ms", millis(every)),
            Serve::CleanupEvery(every) => ("--cleanup-interval-ms", millis(every)),
            Serve::OutboxEvery(every) => ("--outbox-interval-ms", millis(every)),
            Serve::OutboxClaim(claim) => ("--outbox-claim-secs", secs(claim)),
            Serve::MetricsFlushEvery(every) => ("--metrics-flush-ms", millis(every)),
            Serve::JournalFlushEvery(every) => ("--journal-flush-ms", millis(every)),
            Serve::BulkResumeEvery(every) => ("--bulk-resume-interval-ms", millis(every)),
            Serve::BulkLease(lease) => ("--bulk-lease-ms", millis(lease)),
            Serve::InstanceHeartbeat(every) => ("--instance-heartbeat-ms", millis(every)),
            Serve::SessionLifetime(lifetime) => ("--session-lifetime-secs", secs(lifetime)),
            Serve::MaxWaitingRequests(held) => ("--max-waiting-requests", held.to_string()),
            Serve::FingerprintVersion(version) => ("--fingerprint-version", version.clone()),
            Serve::TrustForwardedFor => ("--trust-forwarded-for", String::new()),
            Serve::SmtpUrl(url) => ("--smtp-url", url.clone()),
            Serve::SmtpTo(to) => ("--smtp-to", to.clone()),
        }
    }
}

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `n` seconds.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// An hour: a worker that should not run during the test.
pub const AN_HOUR: Duration = Duration::from_secs(3600);

/// A day: a worker or a beat that should not come at all.
pub const A_DAY: Duration = Duration::from_secs(86_400);
