//! What a request costs the database: a replay is one read, a verified API key is not read
//! again, and a revoked key stops working on every instance within the bound the cache states.

use crate::support::{DialectName, TestApp, expect_error};
use idem::http::api_keys::VERIFIED_FOR;
use std::time::{Duration, Instant};

const BODY: &str =
    r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"invoice-1"}"#;

#[tokio::test]
async fn a_replay_is_one_read_and_no_transaction_of_its_own() {
    // Only the replays touch the database while they run: every job idles.
    let app = TestApp::on(DialectName::Postgres)
        .tenant("acme", "100.00")
        .serve("--instance-heartbeat-ms", "86400000")
        .in_process()
        .await;
    assert_eq!(app.pay("k-once", BODY).await.status(), 201);
    let (commits, rollbacks) = app.db.transactions().await;
    const REPLAYS: i64 = 50;
    let started = Instant::now();
    for _ in 0..REPLAYS {
        let replay = app.pay("k-once", BODY).await;
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
    }
    let key_verifications = (started.elapsed().as_secs_f64() / VERIFIED_FOR.as_secs_f64()).ceil() as i64 + 1;
    let (commits_after, rollbacks_after) = app.db.transactions().await;
    assert_eq!(rollbacks_after, rollbacks, "no claim attempted and rolled back");
    // Each statement outside a transaction counts as one committed transaction: one per
    // replay (the look-up), one more each time the API key's verification ran out, and a few
    // that do not grow with the replays (measured: 4 more for 50 replays and for 200; the
    // database's own autovacuum counts here too). The claim-first path cost 4 per replay.
    const UNRELATED: i64 = 6;
    let statements = commits_after - commits;
    assert!(
        (REPLAYS..=REPLAYS + key_verifications + UNRELATED).contains(&statements),
        "{statements} statements for {REPLAYS} replays and at most {key_verifications} key checks"
    );
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
