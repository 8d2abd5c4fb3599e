//! What a request costs the database: a replay is one read (counted with pg_stat_statements
//! on a cluster of the test's own), a verified API key is not read again, and a revoked key
//! stops working on every instance within the bound the cache states.

use crate::support::{
    A_DAY, AN_HOUR, Cluster, DialectName, Serve, Setup, StatementLog, TestApp, TestDatabase, expect_error,
    expect_replay, ms,
};
use idem::http::api_keys::VERIFIED_FOR;
use sqlx::Connection;
use std::time::{Duration, Instant};

const BODY: &str =
    r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"invoice-1"}"#;

#[tokio::test]
async fn a_replay_reads_only_and_is_answered_while_the_records_are_locked_against_writes() {
    let app = TestApp::on(DialectName::Postgres)
        .tenant("acme", "100.00")
        .in_process()
        .await;
    let first = app.pay("k-once", BODY).await;
    assert_eq!(first.status(), 201);
    let first_body = first.bytes().await.expect("body");

    // Another session holds the records and their responses against every write (EXCLUSIVE
    // lets plain reads through, and nothing else): a claim, a renewal or any transaction that
    // writes would wait here until the request times out.
    let mut locker = sqlx::PgConnection::connect(&app.db.url()).await.expect("connect");
    sqlx::raw_sql("begin; lock table idempotency_records, idempotency_responses in exclusive mode")
        .execute(&mut locker)
        .await
        .expect("lock");
    for _ in 0..50 {
        let replay = tokio::time::timeout(Duration::from_secs(5), app.pay("k-once", BODY))
            .await
            .expect("a replay never waits for a write lock");
        expect_replay(replay, &first_body, "the stored answer").await;
    }
    // A new key needs the claim, which waits for the lock: the lock really holds writes.
    let fresh = tokio::time::timeout(
        Duration::from_millis(500),
        app.pay("k-fresh", BODY.replace("invoice-1", "invoice-2")),
    )
    .await;
    assert!(fresh.is_err(), "a claim waits for the lock");
    sqlx::raw_sql("rollback")
        .execute(&mut locker)
        .await
        .expect("unlock");
}

/// The id of an API key (`idem_<id>_<secret>`, the id being `key_<hex>`).
fn key_id(key: &str) -> String {
    let rest = key.strip_prefix("idem_").expect("an Idem key");
    let mut parts = rest.splitn(3, '_');
    format!("{}_{}", parts.next().expect("key"), parts.next().expect("hex"))
}

#[tokio::test]
async fn a_revoked_key_stops_working_on_every_instance_within_the_bound() {
    let app = TestApp::on(DialectName::Postgres)
        .tenant("acme", "100.00")
        .process()
        .await;
    let second = app.spawn_server(&[]).await;
    let key = app.key("acme").to_owned();
    let get = |address: std::net::SocketAddr| {
        let request = app
            .http
            .get(format!("http://{address}/payments/pay_0000000000000000"))
            .bearer_auth(&key);
        async move { request.send().await.expect("GET").status().as_u16() }
    };
    // Both instances have verified the key.
    assert_eq!(get(app.address).await, 404);
    assert_eq!(get(second.address).await, 404);

    app.admin(&["api-key", "revoke", &key_id(&key)]).await;
    let revoked_at = Instant::now();
    for address in [app.address, second.address] {
        while get(address).await != 401 {
            assert!(
                revoked_at.elapsed() < VERIFIED_FOR + Duration::from_millis(500),
                "still accepted {:?} after the revocation",
                revoked_at.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // And refused for good, with the contract's error.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for address in [app.address, second.address] {
        let refused = app
            .http
            .get(format!("http://{address}/payments/pay_0000000000000000"))
            .bearer_auth(&key)
            .send()
            .await
            .expect("GET");
        expect_error(refused, 401, "UNAUTHENTICATED").await;
    }
}

/// The statements `replays` replays of one completed key cost the database, counted with
/// pg_stat_statements on a cluster of the test's own, on an instance started with `flags`;
/// with the journal flushed after them, the journal's rows of those replays.
async fn replay_statements(settings: &[Serve], replays: i64) -> (Vec<(String, i64)>, i64) {
    let cluster = Cluster::counting_statements();
    let db = TestDatabase::create_on(&Cluster::url_via(cluster.port)).await;
    let setup = TestApp::on_database(db)
        .tenant("acme", "100.00")
        .with(Serve::InstanceHeartbeat(A_DAY));
    let app = settings
        .iter()
        .cloned()
        .fold(setup, Setup::with)
        .in_process()
        .await;
    let first = app.pay("k-counted", BODY).await;
    assert_eq!(first.status(), 201);
    let first_body = first.bytes().await.expect("body");
    // The key is verified by now; the count starts here.
    expect_replay(app.pay("k-counted", BODY).await, &first_body, "warm").await;
    app.db
        .execute("create extension if not exists pg_stat_statements; select pg_stat_statements_reset()")
        .await
        .expect("counting from here");
    for _ in 0..replays {
        expect_replay(app.pay("k-counted", BODY).await, &first_body, "counted").await;
    }
    let statements: Vec<(String, i64)> = app
        .db
        .query_all(
            "select query, calls from pg_stat_statements \
             where dbid = (select oid from pg_database where datname = current_database()) \
             and query not like '%pg_stat_statements%' order by calls desc",
        )
        .await;
    drop(app);
    (statements, replays)
}

#[tokio::test]
async fn a_replay_is_one_statement() {
    let (statements, replays) = replay_statements(&[Serve::AnswerCacheBytes(0)], 20).await;
    let total: i64 = statements.iter().map(|(_, calls)| calls).sum();
    assert_eq!(total, replays, "one statement per replay: {statements:#?}");
    assert_eq!(statements.len(), 1, "{statements:#?}");
    assert!(
        statements[0].0.trim_start().to_lowercase().starts_with("select"),
        "a read: {statements:#?}"
    );
}

#[tokio::test]
async fn a_final_answer_in_memory_is_replayed_without_the_database() {
    let (statements, _) = replay_statements(&[], 20).await;
    assert_eq!(statements, [], "no statement for replays from memory");
}

#[tokio::test]
async fn replays_from_memory_are_journalled_and_counted_like_any_other() {
    let app = TestApp::on(DialectName::Postgres)
        .tenant("acme", "100.00")
        .with(Serve::JournalFlushEvery(ms(100)))
        .with(Serve::MetricsFlushEvery(ms(100)))
        .in_process()
        .await;
    let hits = async || {
        let text = app.metrics().await;
        crate::support::metric(&text, "idempotency_answer_cache_hits_total", &[])
    };
    let hits_before = hits().await;
    let first = app.pay("k-journal", BODY).await;
    assert_eq!(first.status(), 201);
    let first_body = first.bytes().await.expect("body");
    for _ in 0..10 {
        expect_replay(app.pay("k-journal", BODY).await, &first_body, "replayed").await;
    }
    // The first replay read the database and kept the answer; the nine after it came from
    // memory (other tests in this process may count hits too: at least these).
    assert!(hits().await - hits_before >= 9.0);
    app.db
        .eventually_equals(
            "select cast(coalesce(sum(replays), 0) as bigint) from idempotency_replays where \
             idempotency_key = 'k-journal'",
            10,
            "every replay journalled (counted per key and minute)",
        )
        .await;
    assert_eq!(
        app.db
            .query_i64("select count(*) from idempotency_requests where idempotency_key = 'k-journal'")
            .await,
        1,
        "the first request has a row of its own, a replay none"
    );
    app.db
        .eventually_equals(
            "select cast(coalesce(sum(count), 0) as bigint) from outcome_buckets where outcome = 'replay'",
            10,
            "every replay counted",
        )
        .await;
}

/// `setup` with every background job waiting an hour, so that what a test counts is the
/// requests' own statements.
fn with_background_jobs_waiting(setup: Setup) -> Setup {
    [
        Serve::OutboxEvery(AN_HOUR),
        Serve::JournalFlushEvery(AN_HOUR),
        Serve::MetricsFlushEvery(AN_HOUR),
        Serve::SettlementEvery(AN_HOUR),
        Serve::RecoveryEvery(AN_HOUR),
        Serve::CleanupEvery(AN_HOUR),
        Serve::BulkResumeEvery(AN_HOUR),
        Serve::InstanceHeartbeat(AN_HOUR),
    ]
    .into_iter()
    .fold(setup, Setup::with)
}

/// The round trips a fresh create costs PostgreSQL on the request path: the look-up, the claim
/// and the completion, each one statement sent alone (no BEGIN, no COMMIT), counted with
/// pg_stat_statements on a cluster of the test's own while every background job waits.
#[tokio::test]
async fn a_fresh_create_is_three_round_trips_on_postgres() {
    let cluster = Cluster::counting_statements();
    let db = TestDatabase::create_on(&Cluster::url_via(cluster.port)).await;
    let app = with_background_jobs_waiting(TestApp::on_database(db).tenant("acme", "1000.00"))
        .in_process()
        .await;
    // The key is verified and every statement prepared by now; the count starts here.
    assert_eq!(app.pay("k-warm", BODY).await.status(), 201);
    app.db
        .execute("create extension if not exists pg_stat_statements; select pg_stat_statements_reset()")
        .await
        .expect("counting from here");
    let creates = 20;
    for n in 0..creates {
        let body = BODY.replace("invoice-1", &format!("invoice-c{n}"));
        assert_eq!(app.pay(&format!("k-c{n}"), body).await.status(), 201);
    }
    let statements: Vec<(String, i64)> = app
        .db
        .query_all(
            "select query, calls from pg_stat_statements \
             where dbid = (select oid from pg_database where datname = current_database()) \
             and toplevel and query not like '%pg_stat_statements%' order by calls desc",
        )
        .await;
    drop(app);
    let calls = |start: &str| -> i64 {
        statements
            .iter()
            .filter(|(query, _)| query.trim_start().to_lowercase().starts_with(start))
            .map(|(_, calls)| calls)
            .sum()
    };
    assert_eq!(
        calls("select r.status"),
        creates,
        "one look-up each: {statements:#?}"
    );
    assert_eq!(calls("with claimed"), creates, "one claim each: {statements:#?}");
    assert_eq!(
        calls("with settled"),
        creates,
        "one completion each: {statements:#?}"
    );
    let total: i64 = statements.iter().map(|(_, calls)| calls).sum();
    assert_eq!(
        total,
        3 * creates,
        "three round trips each, nothing else: {statements:#?}"
    );
}

/// What a fresh create sends SQLite, counted from sqlx's statement log: the look-up, then the
/// claim and the completion each as one script (`KeyedPaymentStatements`'s `AtOnce::Script`)
/// that opens its own savepoint of a group commit, with no statement of its own for the
/// savepoint or its release. A step sent on its own (the hold, the payment, the event, the
/// response) would mean the script fell back to the steps one by one.
#[tokio::test]
async fn a_fresh_create_is_two_scripts_on_sqlite() {
    let statements = StatementLog::install();
    let app = with_background_jobs_waiting(TestApp::on(DialectName::Sqlite).tenant("acme", "1000.00"))
        .in_process()
        .await;
    // The key is verified and every statement prepared by now; the count starts here.
    assert_eq!(app.pay("k-warm", BODY).await.status(), 201);
    statements.take();
    let creates = 20;
    for n in 0..creates {
        let body = BODY.replace("invoice-1", &format!("invoice-c{n}"));
        assert_eq!(app.pay(&format!("k-c{n}"), body).await.status(), 201);
    }
    let sent = statements.take();
    drop(app);
    let count = |is: &dyn Fn(&str) -> bool| sent.iter().filter(|statement| is(statement)).count();
    let look_ups = count(&|s| s.starts_with("select r.status"));
    // Each script is sent with its savepoint's opening in front: the group's transaction
    // begun, or the last caller's savepoint released.
    let opened = |s: &str, script: &str| {
        const OPENINGS: [&str; 4] = [
            "begin immediate; savepoint idem_a; ",
            "begin immediate; savepoint idem_b; ",
            "release idem_b; savepoint idem_a; ",
            "release idem_a; savepoint idem_b; ",
        ];
        OPENINGS.iter().any(|opening| {
            s.strip_prefix(opening)
                .is_some_and(|rest| rest.starts_with(script))
        })
    };
    let claims =
        count(&|s| opened(s, "insert into idempotency_records") && s.contains("insert into payments"));
    let completions = count(&|s| opened(s, "update idempotency_records") && s.contains("update payments"));
    let groups = count(&|s| s.starts_with("begin immediate; "));
    let commits = count(&|s| s == "commit");
    // The checkpointer's, every 100 ms on a reader's connection, whatever the requests do.
    let checkpoints = count(&|s| s == "pragma wal_checkpoint(passive)");
    assert_eq!(
        (look_ups, claims, completions),
        (creates, creates, creates),
        "a look-up, and two scripts each opening its savepoint: {sent:#?}"
    );
    assert!(
        groups == commits && (1..=2 * creates).contains(&groups),
        "every savepoint inside a group that commits: {sent:#?}"
    );
    assert_eq!(
        look_ups + claims + completions + commits + checkpoints,
        sent.len(),
        "nothing else: {sent:#?}"
    );
}
