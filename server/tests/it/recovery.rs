//! A request's owner dies: crash the real `idem serve` at each step boundary, restart it, and
//! retry with the same key. Exactly one payment, exactly one provider charge, and the final
//! answer is what every later replay returns.

use crate::support::{
    DialectName, IdemProcess, TestDatabase, seed_tenant, seed_tenant_with, serve_recovering,
};
use serde_json::{Value, json};
use std::time::Duration;

const BODY: &str =
    r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"invoice-crash"}"#;

async fn serve(
    dir: &std::path::Path,
    db: &TestDatabase,
    sim: &IdemProcess,
    crash_point: Option<&str>,
) -> IdemProcess {
    match crash_point {
        Some(point) => serve_recovering(dir, db, sim, &[("IDEM_CRASH_POINT", point)]).await,
        None => serve_recovering(dir, db, sim, &[]).await,
    }
}

/// Who recovers the crashed request: the client's retry, or the recovery worker alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recoverer {
    Retry,
    WorkerOnly,
}

async fn crash_then_retry(crash_point: &str) {
    crash_then_recover(crash_point, Recoverer::Retry).await;
}

async fn crash_then_recover(crash_point: &str, recoverer: Recoverer) {
    let db = TestDatabase::create(DialectName::Postgres).await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let api_key = seed_tenant(dir.path(), &db, "acme", "100.00").await;
    let sim = IdemProcess::provider_sim().await;
    let http = reqwest::Client::new();
    let pay = |address: std::net::SocketAddr| {
        http.post(format!("http://{address}/payments"))
            .bearer_auth(&api_key)
            .header("idempotency-key", "crash-key")
            .body(BODY)
            .send()
    };

    let mut doomed = serve(dir.path(), &db, &sim, Some(crash_point)).await;
    assert!(
        pay(doomed.address).await.is_err(),
        "{crash_point}: the process died before answering"
    );
    let status = tokio::time::timeout(Duration::from_secs(10), doomed.child.wait())
        .await
        .expect("the process ends")
        .expect("wait");
    assert!(!status.success(), "{crash_point}: aborted, not a clean exit");

    let server = serve(dir.path(), &db, &sim, None).await;
    if recoverer == Recoverer::WorkerOnly {
        let mut status = String::new();
        for _ in 0..100 {
            status = db_status(&db).await;
            if status == "COMPLETED" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            status, "COMPLETED",
            "{crash_point}: the worker alone recovered it"
        );
    }
    // Until the dead owner's lease runs out, a retry is told to wait; then it takes over.
    let mut answer = None;
    for _ in 0..40 {
        let response = pay(server.address).await.expect("retry");
        if response.status() != 409 {
            answer = Some(response);
            break;
        }
        assert!(response.headers().contains_key("retry-after"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answer = answer.unwrap_or_else(|| panic!("{crash_point}: never recovered"));
    assert_eq!(answer.status(), 201, "{crash_point}");
    let final_body = answer.bytes().await.expect("body");
    let payment: Value = serde_json::from_slice(&final_body).expect("json");
    assert_eq!(payment["status"], "PENDING");

    let replay = pay(server.address).await.expect("replay");
    assert_eq!(replay.headers()["idempotent-replayed"], "true", "{crash_point}");
    assert_eq!(
        replay.bytes().await.expect("body"),
        final_body,
        "{crash_point}: the final answer is the replay"
    );

    let charges = sim.sim_charges().await;
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
        db.query_i64("select count(*) from payments").await,
        1,
        "{crash_point}: one payment"
    );
    assert_eq!(
        db.query_i64("select count(*) from idempotency_records where status = 'COMPLETED'")
            .await,
        1,
        "{crash_point}"
    );
    assert_eq!(
        db.query_i64("select balance_minor from accounts").await,
        9_000,
        "{crash_point}: held once"
    );
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
    crash_then_retry("after_completion").await;
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
    let db = TestDatabase::create(DialectName::Postgres).await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let api_key = seed_tenant(dir.path(), &db, "acme", "100.00").await;
    let sim = IdemProcess::provider_sim().await;
    let http = reqwest::Client::new();
    for fault in faults {
        sim.sim_fault(fault).await;
    }
    let server = serve(dir.path(), &db, &sim, None).await;
    let pay = || {
        http.post(format!("http://{}/payments", server.address))
            .bearer_auth(&api_key)
            .header("idempotency-key", "fault-key")
            .body(BODY)
            .send()
    };

    let first = pay().await.expect("POST");
    assert_eq!(first.status(), 202, "{faults:?}");
    let first: Value = first.json().await.expect("json");
    assert_eq!(first["errorCode"], "PAYMENT_OUTCOME_UNKNOWN");
    // Backing off for a second before anyone asks the provider again.
    assert_eq!(db_status(&db).await, "UNKNOWN_REQUIRES_RECOVERY", "{faults:?}");
    let waiting = pay().await.expect("retry while unknown");
    assert_eq!(
        waiting.status(),
        202,
        "{faults:?}: still unknown, told to come back"
    );
    assert!(waiting.headers().contains_key("retry-after"));

    let mut status = String::new();
    for _ in 0..100 {
        status = db_status(&db).await;
        if status == "COMPLETED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, "COMPLETED", "{faults:?}: the worker resolved it");

    let resolved = pay().await.expect("retry");
    assert_eq!(resolved.status(), 201, "{faults:?}");
    assert_eq!(resolved.headers()["idempotent-replayed"], "true");
    let resolved: Value = resolved.json().await.expect("json");
    assert_eq!(
        resolved["paymentId"], first["paymentId"],
        "{faults:?}: the same payment"
    );

    let charges = sim.sim_charges().await;
    assert_eq!(charges.len(), 1, "{faults:?}: one charge");
    assert_eq!(db.query_i64("select count(*) from payments").await, 1);
}

async fn db_status(db: &TestDatabase) -> String {
    let completed = db
        .query_i64("select count(*) from idempotency_records where status = 'COMPLETED'")
        .await;
    let unknown = db
        .query_i64("select count(*) from idempotency_records where status = 'UNKNOWN_REQUIRES_RECOVERY'")
        .await;
    match (completed, unknown) {
        (1, _) => "COMPLETED".to_owned(),
        (_, 1) => "UNKNOWN_REQUIRES_RECOVERY".to_owned(),
        _ => "OTHER".to_owned(),
    }
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
    let db = TestDatabase::create(DialectName::Postgres).await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let api_key = seed_tenant(dir.path(), &db, "acme", "100.00").await;
    let sim = IdemProcess::provider_sim().await;
    let http = reqwest::Client::new();

    let mut doomed = serve(dir.path(), &db, &sim, Some("before_provider_call")).await;
    let lost = http
        .post(format!("http://{}/payments", doomed.address))
        .bearer_auth(&api_key)
        .header("idempotency-key", "race-key")
        .body(BODY)
        .send()
        .await;
    assert!(lost.is_err());
    let _ = doomed.child.wait().await;

    // Two instances (their workers asleep, so that the retries race each other), sixteen
    // retries released together once the dead owner's lease is over.
    let servers = [
        serve_recovering(dir.path(), &db, &sim, &[("IDEM_RECOVERY_INTERVAL_MS", "3600000")]).await,
        serve_recovering(dir.path(), &db, &sim, &[("IDEM_RECOVERY_INTERVAL_MS", "3600000")]).await,
    ];
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let retries = (0..16).map(|index| {
        http.post(format!("http://{}/payments", servers[index % 2].address))
            .bearer_auth(&api_key)
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
        db.query_i64("select lease_version from idempotency_records")
            .await,
        2,
        "one takeover"
    );
    let charges = sim.sim_charges().await;
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0].create_calls, 1);
}

#[tokio::test]
async fn a_payment_without_a_key_whose_answer_was_lost_is_settled_by_the_worker() {
    let db = TestDatabase::create(DialectName::Postgres).await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let api_key = seed_tenant_with(
        dir.path(),
        &db,
        "keyless",
        "100.00",
        &["--optional-idempotency-key"],
    )
    .await;
    let sim = IdemProcess::provider_sim().await;
    let http = reqwest::Client::new();
    sim.sim_fault(&json!({ "mode": "drop_response_after_accept", "count": 1 }))
        .await;
    let server = serve(dir.path(), &db, &sim, None).await;

    let first = http
        .post(format!("http://{}/payments", server.address))
        .bearer_auth(&api_key)
        .body(BODY)
        .send()
        .await
        .expect("POST");
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.expect("json");
    let payment_url = format!(
        "http://{}/payments/{}",
        server.address,
        first["paymentId"].as_str().expect("id")
    );

    let mut state = Value::Null;
    for _ in 0..60 {
        let payment: Value = http
            .get(&payment_url)
            .bearer_auth(&api_key)
            .send()
            .await
            .expect("GET")
            .json()
            .await
            .expect("json");
        state = payment["status"].clone();
        if state == "PENDING" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state, "PENDING", "the worker asked the provider and settled it");
    let charges = sim.sim_charges().await;
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0].create_calls, 1, "found, not sent again");
    assert_eq!(
        db.query_i64("select count(*) from outbox_events where event_type = 'PaymentAuthorized'")
            .await,
        1
    );
}
