//! A request's owner dies: crash the real `idem serve` at each step boundary, restart it, and
//! retry with the same key. Exactly one payment, exactly one provider charge, and the final
//! answer is what every later replay returns.

use crate::support::{Dialect, IdemProcess, TestDatabase, idem_command, seed_tenant};
use idem::provider::sim::SimCharges;
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;

const BODY: &str =
    r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"invoice-crash"}"#;

async fn serve(
    dir: &std::path::Path,
    db: &TestDatabase,
    sim: &IdemProcess,
    crash_point: Option<&str>,
) -> IdemProcess {
    let mut command = idem_command(dir);
    command
        .env("DATABASE_URL", db.url())
        .env("IDEM_PROVIDER_URL", format!("http://{}", sim.address))
        .env("IDEM_LEASE_SECS", "1")
        .stderr(Stdio::null());
    if let Some(point) = crash_point {
        command.env("IDEM_CRASH_POINT", point);
    }
    IdemProcess::serve_with(command).await
}

async fn crash_then_retry(crash_point: &str) {
    let db = TestDatabase::create(Dialect::Postgres).await;
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

    let charges: SimCharges = http
        .get(format!("http://{}/_sim/charges", sim.address))
        .send()
        .await
        .expect("charges")
        .json()
        .await
        .expect("json");
    assert_eq!(charges.charges.len(), 1, "{crash_point}: one charge");
    assert_eq!(
        charges.charges[0].create_calls, 1,
        "{crash_point}: sent once, never blindly again"
    );
    assert_eq!(
        charges.charges[0].reference, payment["paymentId"],
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
