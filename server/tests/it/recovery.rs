//! A request's owner dies: crash the real `idem serve` at each step boundary, restart it, and
//! retry with the same key. Exactly one payment, exactly one provider charge, and the final
//! answer is what every later replay returns.

use crate::support::{
    AN_HOUR, DialectName, Serve, Setup, TestApp, answer_after_takeover, eventually, expect_error,
    expect_replay,
};
use serde_json::{Value, json};

const BODY: &str =
    r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"invoice-crash"}"#;

const COMPLETED: &str = "select count(*) from idempotency_records where status = 'COMPLETED'";

fn acme() -> Setup {
    TestApp::on(DialectName::Postgres)
        .tenant("acme", "100.00")
        .recovering()
}

/// `POST /payments` under `key`, which may find no one to answer it.
async fn try_pay(app: &TestApp, key: &str) -> reqwest::Result<reqwest::Response> {
    app.post(app.key("acme"), Some(key), BODY).send().await
}

/// Starts an instance that aborts at `crash_point` and sends it a payment under `key`: the
/// process dies before it answers.
async fn crash_at(app: &mut TestApp, crash_point: &str, key: &str) {
    app.restart(&[("IDEM_CRASH_POINT", crash_point)]).await;
    assert!(
        try_pay(app, key).await.is_err(),
        "{crash_point}: the process died before answering"
    );
    let status = app.server().ended().await;
    assert!(!status.success(), "{crash_point}: aborted, not a clean exit");
}

/// Who recovers the crashed request: the client's retry, or the recovery worker alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recoverer {
    Retry,
    WorkerOnly,
}

/// Whether the first answer after the restart was a replay.
async fn crash_then_retry(crash_point: &str) -> bool {
    crash_then_recover(crash_point, Recoverer::Retry).await
}

/// Whether the first answer after the restart was a replay.
async fn crash_then_recover(crash_point: &str, recoverer: Recoverer) -> bool {
    let mut app = acme().seeded().await;
    crash_at(&mut app, crash_point, "crash-key").await;

    app.restart(&[]).await;
    if recoverer == Recoverer::WorkerOnly {
        app.db
            .eventually_equals(
                COMPLETED,
                1,
                &format!("{crash_point}: the worker alone recovered it"),
            )
            .await;
    }
    let answer = answer_after_takeover(crash_point, || app.pay("crash-key", BODY)).await;
    assert_eq!(answer.status(), 201, "{crash_point}");
    let first_was_replay = answer.headers().contains_key("idempotent-replayed");
    let final_body = answer.bytes().await.expect("body");
    let payment: Value = serde_json::from_slice(&final_body).expect("json");
    assert_eq!(payment["status"], "PENDING");

    let replay = app.pay("crash-key", BODY).await;
    expect_replay(
        replay,
        &final_body,
        &format!("{crash_point}: the final answer is the replay"),
    )
    .await;

    let charges = app.sim.charges().await;
    assert_eq!(charges.len(), 1, "{crash_point}: one charge");
    assert_eq!(
        charges[0].create_calls, 1,
        "{crash_point}: sent once, never blindly again"
    );
    assert_eq!(
        charges[0].reference, payment["paymentId"],
        "{crash_point}: the same payment"
    );
    assert_eq!(
        app.db.query_i64("select count(*) from payments").await,
        1,
        "{crash_point}: one payment"
    );
    assert_eq!(app.db.query_i64(COMPLETED).await, 1, "{crash_point}");
    assert_eq!(
        app.db.query_i64("select balance_minor from accounts").await,
        9_000,
        "{crash_point}: held once"
    );
    first_was_replay
}

#[tokio::test]
async fn a_crash_inside_the_local_transaction_leaves_nothing_and_the_retry_executes() {
    crash_then_retry("inside_local_transaction").await;
}

#[tokio::test]
async fn a_crash_before_the_provider_call_is_resumed_with_the_same_payment() {
    crash_then_retry("before_provider_call").await;
}

#[tokio::test]
async fn a_crash_after_the_provider_answered_is_resumed_by_asking_the_provider() {
    crash_then_retry("provider_answered").await;
}

#[tokio::test]
async fn a_crash_after_completion_is_answered_by_the_replay() {
    assert!(
        crash_then_retry("after_completion").await,
        "the completion committed before the crash: the first answer after it is the replay"
    );
}

#[tokio::test]
async fn the_worker_alone_recovers_a_crash_at_every_step() {
    // (A crash inside the local transaction leaves nothing to recover: only the client's
    // retry, which then simply executes, can follow it.)
    for crash_point in ["before_provider_call", "provider_answered", "after_completion"] {
        crash_then_recover(crash_point, Recoverer::WorkerOnly).await;
    }
}

/// A provider fault leaves the outcome unknown; without any client retry the recovery worker
/// resolves it by asking the provider, and the client's later retry gets the resolved answer.
async fn fault_then_worker_recovers(faults: &[Value]) {
    let app = acme().process().await;
    for fault in faults {
        app.sim.fault(fault).await;
    }

    let first = app.pay("fault-key", BODY).await;
    let first = expect_error(first, 202, "PAYMENT_OUTCOME_UNKNOWN").await;
    // Backing off for a second before anyone asks the provider again.
    assert_eq!(
        app.db
            .query_i64("select count(*) from idempotency_records where status = 'UNKNOWN_REQUIRES_RECOVERY'")
            .await,
        1,
        "{faults:?}"
    );
    let waiting = app.pay("fault-key", BODY).await;
    assert_eq!(
        waiting.status(),
        202,
        "{faults:?}: still unknown, told to come back"
    );
    assert!(waiting.headers().contains_key("retry-after"));

    app.db
        .eventually_equals(COMPLETED, 1, &format!("{faults:?}: the worker resolved it"))
        .await;

    let resolved = app.pay("fault-key", BODY).await;
    assert_eq!(resolved.status(), 201, "{faults:?}");
    assert_eq!(resolved.headers()["idempotent-replayed"], "true");
    let resolved: Value = resolved.json().await.expect("json");
    assert_eq!(
        resolved["paymentId"], first["paymentId"],
        "{faults:?}: the same payment"
    );

    let charges = app.sim.charges().await;
    assert_eq!(charges.len(), 1, "{faults:?}: one charge");
    assert_eq!(app.db.query_i64("select count(*) from payments").await, 1);
}

#[tokio::test]
async fn a_dropped_answer_with_lookups_refused_stays_unknown_until_they_work() {
    fault_then_worker_recovers(&[
        json!({ "mode": "drop_response_after_accept", "count": 1 }),
        json!({ "mode": "lookups_unavailable", "count": 1 }),
    ])
    .await;
}

#[tokio::test]
async fn an_error_after_accepting_is_resolved_by_asking_not_by_charging_again() {
    fault_then_worker_recovers(&[json!({ "mode": "error_after_accept", "count": 1 })]).await;
}

#[tokio::test]
async fn a_refusal_before_accepting_is_resolved_by_sending_with_the_same_key() {
    fault_then_worker_recovers(&[json!({ "mode": "fail_before_accept", "count": 1 })]).await;
}

#[tokio::test]
async fn many_retries_after_a_crash_make_one_takeover_and_one_charge() {
    let mut app = acme().seeded().await;
    crash_at(&mut app, "before_provider_call", "race-key").await;

    // Two instances (their workers asleep, so that the retries race each other), sixteen
    // retries released together once the dead owner's lease is over.
    app.set(Serve::RecoveryEvery(AN_HOUR));
    app.restart(&[]).await;
    let second = app.spawn_server(&[]).await;
    let addresses = [app.address, second.address];
    app.db
        .until_passed(
            "idempotency_records",
            "locked_until",
            "idempotency_key = 'race-key'",
        )
        .await;
    let retries = (0..16).map(|index| {
        app.http
            .post(format!("http://{}/payments", addresses[index % 2]))
            .bearer_auth(app.key("acme"))
            .header("idempotency-key", "race-key")
            .body(BODY)
            .send()
    });
    let mut fresh = 0;
    for answer in futures_util::future::join_all(retries).await {
        let answer = answer.expect("answered");
        match (
            answer.status().as_u16(),
            answer.headers().contains_key("idempotent-replayed"),
        ) {
            (201, false) => fresh += 1,
            (201, true) | (409, false) => {}
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert_eq!(fresh, 1, "exactly one taker completed it");
    assert_eq!(
        app.db
            .query_i64("select lease_version from idempotency_records")
            .await,
        2,
        "one takeover"
    );
    let charges = app.sim.charges().await;
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0].create_calls, 1);
}

#[tokio::test]
async fn a_payment_without_a_key_whose_answer_was_lost_is_settled_by_the_worker() {
    let app = TestApp::on(DialectName::Postgres)
        .keyless_tenant("keyless", "100.00")
        .recovering()
        .process()
        .await;
    app.sim
        .fault(&json!({ "mode": "drop_response_after_accept", "count": 1 }))
        .await;
    let api_key = app.key("keyless");

    let first = app.post(api_key, None, BODY).send().await.expect("POST");
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.expect("json");
    let payment_path = format!("/payments/{}", first["paymentId"].as_str().expect("id"));

    eventually(
        "the worker asked the provider and settled it",
        || async { app.read_as("keyless", &payment_path, None).await["status"].clone() },
        |status| status == "PENDING",
    )
    .await;
    let charges = app.sim.charges().await;
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0].create_calls, 1, "found, not sent again");
    assert_eq!(
        app.db
            .query_i64("select count(*) from outbox_events where event_type = 'PaymentAuthorized'")
            .await,
        1
    );
}

/// How many times the crash matrix kills each step boundary: a few in the test command, 50 in
/// scripts/proof (`IDEM_PROOF_CRASH_KILLS`).
fn crash_kills_per_boundary() -> usize {
    std::env::var("IDEM_PROOF_CRASH_KILLS")
        .ok()
        .and_then(|kills| kills.parse().ok())
        .unwrap_or(2)
}

/// The crash matrix: one instance is aborted at every step boundary of a payment, again and
/// again, each time under a new key, while a second instance that never crashes runs the
/// recovery worker. The worker alone settles every crashed payment it can (all but those that
/// died inside the local transaction, which left nothing); then every key's retry gets its
/// payment. One payment and one provider call per key, each held once, nothing stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crash_matrix_kills_every_step_boundary_again_and_again() {
    crash_matrix(DialectName::Postgres).await;
}

/// The crash matrix on the embedded database, whose writer's callers share commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crash_matrix_on_sqlite_kills_every_step_boundary_again_and_again() {
    crash_matrix(DialectName::Sqlite).await;
}

async fn crash_matrix(dialect: DialectName) {
    const CRASH_POINTS: [&str; 4] = [
        "inside_local_transaction",
        "before_provider_call",
        "provider_answered",
        "after_completion",
    ];
    let kills = crash_kills_per_boundary();
    let mut app = TestApp::on(dialect)
        .tenant("acme", "100000.00")
        .recovering()
        .process()
        .await;
    let survivor = app.spawn_server(&[]).await;
    let body = |key: &str| {
        format!(r#"{{"accountId":"acc_1","amount":"1.00","currency":"EUR","merchantReference":"ref-{key}"}}"#)
    };
    let mut keys = Vec::new();
    for round in 0..kills {
        for crash_point in CRASH_POINTS {
            let key = format!("matrix-{crash_point}-{round}");
            app.restart(&[("IDEM_CRASH_POINT", crash_point)]).await;
            let died = app
                .post(app.key("acme"), Some(&key), &body(&key))
                .send()
                .await
                .is_err();
            assert!(died, "{key}: the process died before answering");
            assert!(!app.server().ended().await.success(), "{key}: aborted");
            keys.push(key);
        }
    }
    app.stop();

    app.db
        .eventually_equals(
            "select count(*) from idempotency_records where status <> 'COMPLETED'",
            0,
            "the survivor's worker alone settled every crashed payment",
        )
        .await;
    assert_eq!(
        app.db.query_i64("select count(*) from idempotency_records").await,
        (kills * (CRASH_POINTS.len() - 1)) as i64,
        "a crash inside the local transaction left no record"
    );
    for key in &keys {
        let answer = app.pay_at(survivor.address, key, &body(key)).await;
        assert_eq!(answer.status(), 201, "{key}");
        let replayed = answer.headers().contains_key("idempotent-replayed");
        assert_eq!(
            replayed,
            !key.starts_with("matrix-inside_local_transaction"),
            "{key}: a settled payment is replayed, one that left nothing executes"
        );
    }

    let payments = app.db.query_i64("select count(*) from payments").await;
    assert_eq!(payments, keys.len() as i64, "one payment per key");
    let charges = app.sim.charges().await;
    assert_eq!(charges.len() as i64, payments, "one charge per payment");
    assert!(
        charges.iter().all(|charge| charge.create_calls == 1),
        "no charge was sent twice"
    );
    assert_eq!(
        app.db.query_i64("select balance_minor from accounts").await,
        10_000_000 - 100 * payments,
        "each payment held once"
    );
}
