//! Test helpers: a fresh database of either dialect (`database.rs`); Idem itself with its
//! tenants and provider simulator, in this process or as the real binary (`app.rs`,
//! `sim.rs`, `process.rs`); a console browser (`console.rs`); a real Prometheus
//! (`prometheus.rs`); PostgreSQL clusters of a test's own, to crash and fail over
//! (`cluster.rs`); ports for the servers started as programs of their own (`ports.rs`); the
//! checks every suite shares.

mod app;
mod cluster;
mod console;
mod database;
mod ports;
mod process;
mod prometheus;
mod settings;
mod sim;
mod statements;

pub use app::{
    STYLESHEET, Setup, TestApp, answer_after_takeover, expect_error, expect_replay, gzipped_stylesheet,
    metric,
};
pub use cluster::{Cluster, Forwarder};
pub use console::{
    Console, OPERATOR_PASSWORD, create_operator, keys_of, server_function_sources, session_cookie,
};
pub use database::{TestDatabase, Violation, audited, audited_for};
pub use idem::store::DialectName;
pub use ports::unused_port;
pub use process::{IdemProcess, SERVE_ON_FREE_PORTS, TEST_RESPONSE_KEYS, idem_command};
pub use prometheus::Prometheus;
pub use settings::{A_DAY, AN_HOUR, Serve, ms, secs};
pub use sim::Sim;
pub use statements::StatementLog;

/// Reads `observe` until what it returns satisfies `wanted`, and returns that: how a test waits
/// for a worker, another process or a held call. A bound against a hang, not a timing target
/// (with several tests at once on two cores a worker's pass can wait its turn for seconds): it
/// panics naming `what` and the last value after 60 s. The pause between reads only keeps the
/// polling from taking the CPU that what it waits for needs.
pub async fn eventually<T: std::fmt::Debug, Read: Future<Output = T>>(
    what: &str,
    mut observe: impl FnMut() -> Read,
    wanted: impl Fn(&T) -> bool,
) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let value = observe().await;
        if wanted(&value) {
            return value;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: still {value:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

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
/// `name::sqlite`: migrated databases ([`TestDatabase::migrated`]), or empty ones for the tests
/// of migrating itself (`conformance!(unmigrated: name)`).
macro_rules! conformance {
    (unmigrated: $($name:ident),* $(,)?) => {
        $crate::support::conformance!(@each create: $($name),*);
    };
    (@each $database:ident: $($name:ident),*) => {$(
        mod $name {
            #[tokio::test]
            async fn postgres() {
                super::$name($crate::support::TestDatabase::$database($crate::support::DialectName::Postgres).await).await
            }

            #[tokio::test]
            async fn sqlite() {
                super::$name($crate::support::TestDatabase::$database($crate::support::DialectName::Sqlite).await).await
            }
        }
    )*};
    ($($name:ident),* $(,)?) => {
        $crate::support::conformance!(@each migrated: $($name),*);
    };
}
pub(crate) use conformance;

/// The audit entry a test's administrative store call is made under.
pub fn test_audit() -> domain::operator::AuditEntry {
    domain::operator::AuditEntry::new("test", "test.setup")
}

/// A tenant named `name` made in `store`, with an API key and the account `acc_1` holding
/// `balance` EUR: its id and key.
pub async fn seed_tenant(
    store: &dyn idem::store::Store,
    name: &str,
    balance: &str,
) -> (domain::tenant::TenantId, idem::auth::api_key::NewApiKey) {
    use domain::money::{Balance, Currency};
    let tenant_id = domain::tenant::TenantId::generate();
    let tenant_name = domain::tenant::TenantName::parse(name).expect("name");
    store
        .create_tenant(&tenant_id, &tenant_name, true, &test_audit())
        .await
        .expect("tenant");
    let key = idem::auth::api_key::NewApiKey::generate();
    store
        .create_api_key(&tenant_id, &key, &test_audit())
        .await
        .expect("api key");
    store
        .create_account(&domain::payment::NewAccount {
            tenant_id: tenant_id.clone(),
            id: domain::command::AccountId::parse("acc_1").expect("id"),
            balance: Balance::parse(balance, Currency::Eur).expect("balance"),
        })
        .await
        .expect("account");
    (tenant_id, key)
}
