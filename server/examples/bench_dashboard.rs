//! How long the dashboard takes on the server as history grows: 10^4, 10^5 and 10^6
//! idempotency records (mostly settled, a few hundred unknown and in progress) and a week of
//! per-minute outcome buckets, on a fresh PostgreSQL database for each size.
//!
//!   cargo run --release -p idem --example bench_dashboard [postgres admin URL]
//!
//! Prints the median and worst of 30 dashboard reads (7-day range) per size. The claim it
//! checks: the time stays flat, because the dashboard reads buckets and partial indexes and
//! never counts the records table.

use app::backend::ConsoleReads;
use app::dashboard::model::DashboardRange;
use domain::expiry::{AfterExpiry, ExpiryPolicy};
use domain::fingerprint::FingerprintVersion;
use idem::console::StoreConsole;
use idem::engine::sealing::ResponseSealer;
use idem::engine::{EngineParts, EngineSettings, OperationSettings, PaymentsEngine, WaitSettings};
use idem::metrics::OutcomeCounter;
use idem::metrics::journal::RequestJournal;
use idem::provider::client::ProviderClient;
use idem::store::{self, DatabaseTarget};
use sqlx::Connection;
use std::sync::Arc;
use std::time::{Duration, Instant};

const READS: usize = 30;

#[tokio::main]
async fn main() {
    let admin_url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    println!("records     median    worst   (dashboard, 7 days, {READS} reads)");
    for records in [10_000_i64, 100_000, 1_000_000] {
        let name = format!("idem_bench_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&admin_url)
            .await
            .expect("connect to PostgreSQL");
        sqlx::query(&format!("create database {name}"))
            .execute(&mut admin)
            .await
            .expect("create database");
        let url = format!(
            "{}/{name}",
            admin_url.rsplit_once('/').expect("a database in the URL").0
        );
        let (median, worst) = measure(&url, records).await;
        println!("{records:>9}  {median:>7.1?}  {worst:>7.1?}");
        sqlx::query(&format!("drop database {name} with (force)"))
            .execute(&mut admin)
            .await
            .expect("drop database");
    }
}

async fn measure(url: &str, records: i64) -> (Duration, Duration) {
    let store = store::open(
        &DatabaseTarget::Postgres { url: url.to_owned() },
        idem::cli::DEFAULT_DATABASE_MAX_CONNECTIONS,
    )
    .await
    .expect("open");
    store.migrate().await.expect("migrate");
    let pool = sqlx::PgPool::connect(url).await.expect("seed connection");
    sqlx::raw_sql(&format!(
        "insert into tenants (id, name) values ('ten_bench', 'bench');
         insert into idempotency_records (tenant_id, operation_name, idempotency_key, fingerprint_version,
           request_fingerprint, canonical_command, status, progress_step, resource_type, resource_id,
           response_status_code, lease_version, created_by, created_at, updated_at, expires_at)
         select 'ten_bench', 'create_payment', 'k-' || g, 1, md5(g::text), '{{}}',
           case when g % 1000 = 0 then 'UNKNOWN_REQUIRES_RECOVERY' when g % 1000 = 1 then 'IN_PROGRESS'
                else 'COMPLETED' end,
           'COMPLETED', 'payment', 'pay_' || g, 201, 1, 'key_bench',
           now() - make_interval(secs => g % 604800), now(), now() + interval '1 day'
         from generate_series(1, {records}) g;
         insert into outcome_buckets (bucket_start, tenant_id, operation_name, outcome, count)
         select date_trunc('minute', now()) - make_interval(mins => m), 'ten_bench', 'create_payment', o, 1 + m % 7
         from generate_series(0, 10079) m,
              unnest(array['new_execution', 'replay', 'conflict_different_request', 'in_progress']) o;
         analyze;"
    ))
    .execute(&pool)
    .await
    .expect("seed");
    pool.close().await;

    let provider = ProviderClient::new(
        "http://127.0.0.1:9",
        Duration::from_secs(1),
        Duration::from_secs(1),
    )
    .expect("provider client (never called)");
    let keys = tempfile::tempdir().expect("key directory");
    let engine = Arc::new(PaymentsEngine::new(
        EngineParts::over(
            &store,
            provider,
            Arc::new(OutcomeCounter::default()),
            Arc::new(RequestJournal::default()),
            Arc::new(ResponseSealer::load_or_create(keys.path()).expect("sealing key")),
        ),
        EngineSettings {
            create_payment: OperationSettings {
                lease: Duration::from_secs(30),
                expiry: ExpiryPolicy {
                    window: Duration::from_secs(86_400),
                    after_expiry: AfterExpiry::NewOperation,
                    retention: Duration::from_secs(30 * 86_400),
                },
            },
            create_refund: OperationSettings {
                lease: Duration::from_secs(30),
                expiry: ExpiryPolicy {
                    window: Duration::from_secs(7 * 86_400),
                    after_expiry: AfterExpiry::Reject,
                    retention: Duration::from_secs(30 * 86_400),
                },
            },
            instance_id: "bench".to_owned(),
            fingerprint_version: FingerprintVersion::CURRENT,
            waiting: WaitSettings {
                max_waiting: 0,
                longest: Duration::ZERO,
            },
            answer_cache_bytes: 0,
        },
    ));
    let console = StoreConsole::new(store.clone(), engine, 10, std::time::Duration::from_secs(60));
    let mut times = Vec::with_capacity(READS);
    for _ in 0..READS {
        let started = Instant::now();
        let dashboard = console
            .dashboard(DashboardRange::SevenDays, String::new(), String::new())
            .await
            .expect("dashboard");
        times.push(started.elapsed());
        assert_eq!(
            dashboard.live.unknown,
            u64::try_from(records / 1000).expect("count")
        );
    }
    store.close().await;
    times.sort();
    (times[READS / 2], times[READS - 1])
}
