//! Cleanup under load: settled records past their window (10^4 in the test command, 10^5 in
//! `scripts/proof`: `IDEM_PROOF_EXPIRED_RECORDS`), 10^3 tombstones past
//! retention and 2·10^3 request journal entries past both, purged and deleted in batches by the cleanup worker while a real `idem serve`
//! takes payments and replays on the same database. No request fails, no batch overruns its
//! bound, every body is gone, every tombstone keeps its metadata, nothing in flight is touched.

use crate::support::{AN_HOUR, DialectName, Serve, TestApp, TestDatabase, conformance};
use chrono::Utc;
use domain::key::IdempotencyKey;
use domain::scope::{Operation, Scope};
use domain::tenant::TenantId;
use idem::store::metrics::JournalEntry;
use idem::workers::retention::{Cleanup, CleanupSettings};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Settled records past their window to purge. Each batch is bounded alike whatever their
/// number (1,000 rows at most), so the test command's slice checks every batch's bound as the
/// full size does, in a tenth of the time.
fn expired_records() -> i64 {
    std::env::var("IDEM_PROOF_EXPIRED_RECORDS")
        .ok()
        .and_then(|count| count.parse().ok())
        .unwrap_or(10_000)
}
const OLD_TOMBSTONES: i64 = 1_000;
const RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
const OLD_JOURNAL: usize = 2_000;
/// The window and the retention: journal entries older than this go.
const JOURNAL_RETENTION: Duration = Duration::from_secs(31 * 24 * 3600);

/// `count` journal entries of acme's, `days` old: every other one a replay (counted per key
/// and minute), the others a row each.
fn journal_entries(tenant_id: &str, prefix: &str, count: usize, days: i64) -> Vec<JournalEntry> {
    (0..count)
        .map(|index| JournalEntry {
            scope: Scope {
                tenant_id: TenantId::from_stored(tenant_id.to_owned()),
                operation: Operation::CreatePayment,
                key: IdempotencyKey::parse(format!("{prefix}-{index}").as_bytes()).expect("key"),
            },
            at: Utc::now() - chrono::Duration::days(days),
            fingerprint: "f".repeat(64),
            canonical_command: None,
            status_code: 201,
            error_code: None,
            replayed: index % 2 == 0,
            retry_delay: Some(chrono::Duration::seconds(1)),
            window: Duration::from_secs(24 * 3600),
        })
        .collect()
}

/// Seeds `expired` completed records (window ended a day ago) with their bodies,
/// `OLD_TOMBSTONES` tombstones from 40 days ago, and 3 unknown outcomes past their window,
/// which cleanup must leave alone.
fn seed_sql(dialect: DialectName, expired: i64) -> String {
    let tenant = "(select id from tenants where name = 'acme')";
    let columns = "tenant_id, operation_name, idempotency_key, fingerprint_version, request_fingerprint, \
         canonical_command, status, progress_step, resource_type, resource_id, provider_reference, \
         response_status_code, response_schema_version, lease_version, created_by, expires_at";
    match dialect {
        DialectName::Postgres => format!(
            "insert into idempotency_records ({columns}) \
             select {tenant}, 'create_payment', 'old-' || g, 1, md5(g::text) || md5(g::text), '{{}}', \
             'COMPLETED', 'COMPLETED', 'payment', 'pay_old_' || g, 'ch_old_' || g, 201, '2026-05-01', 1, \
             'key_seed', now() - interval '1 day' - make_interval(secs => g) \
             from generate_series(1, {expired}) g; \
             insert into idempotency_responses (tenant_id, operation_name, idempotency_key, headers, body) \
             select tenant_id, operation_name, idempotency_key, '[]', decode('00ff', 'hex') \
             from idempotency_records where idempotency_key like 'old-%'; \
             insert into idempotency_records ({columns}, settled_status) \
             select {tenant}, 'create_payment', 'tomb-' || g, 1, md5(g::text) || md5(g::text), '', \
             'EXPIRED', 'COMPLETED', 'payment', 'pay_tomb_' || g, 'ch_tomb_' || g, 201, '2026-05-01', 1, \
             'key_seed', now() - interval '40 days', 'COMPLETED' \
             from generate_series(1, {OLD_TOMBSTONES}) g; \
             insert into idempotency_records ({columns}) \
             select {tenant}, 'create_payment', 'unknown-' || g, 1, md5(g::text) || md5(g::text), '{{}}', \
             'UNKNOWN_REQUIRES_RECOVERY', 'UNKNOWN_REQUIRES_RECOVERY', 'payment', 'pay_unknown_' || g, null, \
             null, '2026-05-01', 1, 'key_seed', now() - interval '1 day' \
             from generate_series(1, 3) g;"
        ),
        DialectName::Sqlite => {
            let ago = |modifier: &str| format!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', {modifier})");
            let series = |count: i64| {
                format!("with recursive g(n) as (select 1 union all select n + 1 from g where n < {count})")
            };
            format!(
                "{} insert into idempotency_records ({columns}) \
                 select {tenant}, 'create_payment', 'old-' || n, 1, printf('%064d', n), '{{}}', \
                 'COMPLETED', 'COMPLETED', 'payment', 'pay_old_' || n, 'ch_old_' || n, 201, '2026-05-01', 1, \
                 'key_seed', {} from g; \
                 insert into idempotency_responses (tenant_id, operation_name, idempotency_key, headers, body) \
                 select tenant_id, operation_name, idempotency_key, '[]', x'00ff' \
                 from idempotency_records where idempotency_key like 'old-%'; \
                 {} insert into idempotency_records ({columns}, settled_status) \
                 select {tenant}, 'create_payment', 'tomb-' || n, 1, printf('%064d', n), '', \
                 'EXPIRED', 'COMPLETED', 'payment', 'pay_tomb_' || n, 'ch_tomb_' || n, 201, '2026-05-01', 1, \
                 'key_seed', {}, 'COMPLETED' from g; \
                 {} insert into idempotency_records ({columns}) \
                 select {tenant}, 'create_payment', 'unknown-' || n, 1, printf('%064d', n), '{{}}', \
                 'UNKNOWN_REQUIRES_RECOVERY', 'UNKNOWN_REQUIRES_RECOVERY', 'payment', 'pay_unknown_' || n, \
                 null, null, '2026-05-01', 1, 'key_seed', {} from g;",
                series(expired),
                ago("'-1 day', '-' || n || ' seconds'"),
                series(OLD_TOMBSTONES),
                ago("'-40 days'"),
                series(3),
                ago("'-1 day'"),
            )
        }
    }
}

async fn expired_records_are_purged_in_bounded_batches_under_traffic(db: TestDatabase) {
    let mut app = TestApp::on_database(db)
        .tenant("acme", "1000000.00")
        .with(Serve::RateLimitPerSec(0))
        // This test's own cleanup does the work, so that every batch is measured here.
        .with(Serve::CleanupEvery(AN_HOUR))
        // The seeded unknown outcomes have no payment behind them: not for recovery.
        .with(Serve::RecoveryMaxAttempts(0))
        .seeded()
        .await;
    let expired = expired_records();
    app.db
        .execute(&seed_sql(app.db.target.dialect(), expired))
        .await
        .expect("seed expired records");
    app.restart(&[]).await;
    let api_key = app.key("acme").to_owned();

    // Traffic for as long as the cleanup runs: new payments, each replayed once.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|client| {
            let (stop, served, api_key) = (stop.clone(), served.clone(), api_key.clone());
            let url = app.url("/payments");
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                let mut failures = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let body = format!(
                        r#"{{"accountId":"acc_1","amount":"1.00","currency":"EUR","merchantReference":"live-{client}-{n}"}}"#
                    );
                    for attempt in ["first", "replay"] {
                        let response = http
                            .post(&url)
                            .bearer_auth(&api_key)
                            .header("idempotency-key", format!("live-{client}-{n}"))
                            .header("content-type", "application/json")
                            .body(body.clone())
                            .send()
                            .await;
                        match response {
                            Ok(response) if response.status() == 201 => {
                                served.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(response) => failures.push(format!("{attempt} {n}: {}", response.status())),
                            Err(error) => failures.push(format!("{attempt} {n}: {error}")),
                        }
                    }
                }
                failures
            })
        })
        .collect();

    let store = app.db.store().await;
    let acme: String = app
        .db
        .query_one("select id from tenants where name = 'acme'")
        .await;
    store
        .add_journal_entries(&journal_entries(&acme, "journal-old", OLD_JOURNAL, 32))
        .await
        .expect("old journal entries");
    store
        .add_journal_entries(&journal_entries(&acme, "journal-kept", 10, 20))
        .await
        .expect("recent journal entries");
    let bound = Duration::from_secs(2);
    let cleanup = Cleanup::new(
        store.clone(),
        CleanupSettings {
            retention: RETENTION,
            journal_retention: JOURNAL_RETENTION,
            max_batch: 1_000,
            batch_bound: bound,
            pause: Duration::from_millis(5),
        },
    );
    let report = cleanup.run_once().await;
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for client in clients {
        failures.extend(client.await.expect("client task"));
    }

    assert!(failures.is_empty(), "no request failed: {failures:?} {report:?}");
    assert!(
        served.load(Ordering::Relaxed) > 0,
        "traffic ran during the cleanup"
    );
    assert_eq!(
        report.purged,
        u64::try_from(expired).expect("count"),
        "{report:?}"
    );
    assert_eq!(
        report.deleted,
        u64::try_from(OLD_TOMBSTONES).expect("count"),
        "{report:?}"
    );
    assert_eq!(
        report.journal_deleted,
        u64::try_from(OLD_JOURNAL).expect("count"),
        "{report:?}"
    );
    assert_eq!(
        report.overruns, 0,
        "no batch failed or overran its bound: {report:?}"
    );
    assert!(report.longest_hold <= bound, "{report:?}");
    assert!(
        report.batches >= u32::try_from(expired / 1_000).expect("count"),
        "in batches of at most 1000: {report:?}"
    );

    let backlog = store.retention_backlog(RETENTION).await.expect("backlog");
    assert_eq!((backlog.to_purge, backlog.to_delete), (0, 0));
    let count = |sql: &'static str| app.db.query_i64(sql);
    assert_eq!(
        count("select count(*) from idempotency_responses where idempotency_key like 'old-%'").await,
        0,
        "every expired body is gone"
    );
    assert_eq!(
        count(
            "select count(*) from idempotency_records where idempotency_key like 'old-%' \
             and status = 'EXPIRED' and settled_status = 'COMPLETED' and resource_id like 'pay_old_%' \
             and provider_reference like 'ch_old_%' and length(request_fingerprint) = 64 \
             and canonical_command = ''"
        )
        .await,
        expired,
        "every tombstone keeps its metadata"
    );
    assert_eq!(
        count("select count(*) from idempotency_records where idempotency_key like 'tomb-%'").await,
        0
    );
    assert_eq!(
        count("select count(*) from idempotency_records where status = 'UNKNOWN_REQUIRES_RECOVERY'").await,
        3,
        "unknown outcomes never expire"
    );
    assert_eq!(
        count(
            "select count(*) from idempotency_records r join idempotency_responses s \
             on s.tenant_id = r.tenant_id and s.operation_name = r.operation_name \
             and s.idempotency_key = r.idempotency_key where r.idempotency_key like 'live-%'"
        )
        .await,
        count("select count(*) from idempotency_records where idempotency_key like 'live-%'").await,
        "records inside their window keep their bodies"
    );
    assert_eq!(
        count("select count(*) from idempotency_requests where idempotency_key like 'journal-old-%'").await,
        0,
        "journal entries past the window and the retention are gone"
    );
    assert_eq!(
        count("select count(*) from idempotency_replays where idempotency_key like 'journal-old-%'").await,
        0,
        "replay counts past the retention are gone"
    );
    assert_eq!(
        count("select count(*) from idempotency_requests where idempotency_key like 'journal-kept-%'").await,
        5
    );
    assert_eq!(
        count("select count(*) from idempotency_replays where idempotency_key like 'journal-kept-%'").await,
        5
    );
    assert!(
        count("select count(*) from idempotency_requests where idempotency_key like 'live-%'").await > 0,
        "the live traffic's journal stays"
    );
}

conformance!(expired_records_are_purged_in_bounded_batches_under_traffic);
