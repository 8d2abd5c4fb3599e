//! Test helpers: a fresh database of either dialect (`database.rs`); Idem itself with its
//! tenants and provider simulator, in this process or as the real binary (`app.rs`,
//! `sim.rs`, `process.rs`); a console browser (`console.rs`); a real Prometheus
//! (`prometheus.rs`); PostgreSQL clusters of a test's own, to crash and fail over
//! (`cluster.rs`); the checks every suite shares.

mod app;
mod cluster;
mod console;
mod database;
mod process;
mod prometheus;
mod settings;
mod sim;

pub use app::{Setup, TestApp, answer_after_takeover, expect_error, expect_replay, metric};
pub use cluster::{Cluster, Forwarder};
pub use console::{Console, OPERATOR_PASSWORD, create_operator, server_function_sources, session_cookie};
pub use database::{TestDatabase, Violation};
pub use idem::store::DialectName;
pub use process::{IdemProcess, SERVE_ON_FREE_PORTS, TEST_RESPONSE_KEYS, idem_command};
pub use prometheus::Prometheus;
pub use settings::{A_DAY, AN_HOUR, Serve, ms, secs};
pub use sim::Sim;

/// Cases a property test runs: `PROPTEST_CASES` when set (a longer campaign), else `default`.
/// (A `with_cases(n)` in the test would override the variable: proptest reads it only for
/// its default configuration.)
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default)
}

/// Runs each named test, an `async fn name(db: TestDatabase)`, against PostgreSQL (a fresh
/// database per test) and SQLite (a fresh file per test), as `name::postgres` and
/// `name::sqlite`.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn postgres() {
                super::$name($crate::support::TestDatabase::create($crate::support::DialectName::Postgres).await).await
            }

            #[tokio::test]
            async fn sqlite() {
                super::$name($crate::support::TestDatabase::create($crate::support::DialectName::Sqlite).await).await
            }
        }
    )*};
}
pub(crate) use conformance;

/// The audit entry a test's administrative store call is made under.
pub fn test_audit() -> domain::operator::AuditEntry {
    domain::operator::AuditEntry::new("test", "test.setup")
}
