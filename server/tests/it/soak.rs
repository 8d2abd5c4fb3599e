//! Random kills during concurrent traffic over two instances: rounds of concurrent payments
//! (some keys retried across rounds, each request sent to either instance) while one of the
//! two real `idem serve` processes, chosen at random, is killed with SIGKILL at a random
//! moment of the round. At the end every key is retried until it settles: one payment per
//! key, one provider charge per payment, nothing left IN_PROGRESS or UNKNOWN, and every
//! payment a `201` acknowledged before a kill still there, the one its key answers. On
//! PostgreSQL, and on SQLite (where a kill lands in the middle of commits the writer's callers
//! share). 4 kills in the test command, 500 in scripts/proof (`IDEM_PROOF_RANDOM_KILLS`).

use crate::support::{DialectName, TestApp};
use futures_util::future::join_all;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const KEYS_PER_ROUND: usize = 40;

fn rounds() -> u64 {
    std::env::var("IDEM_PROOF_RANDOM_KILLS")
        .ok()
        .and_then(|kills| kills.parse().ok())
        .unwrap_or(4)
}

fn body(key: &str) -> String {
    format!(r#"{{"accountId":"acc_1","amount":"1.00","currency":"EUR","merchantReference":"ref-{key}"}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_kills_during_traffic_never_pay_twice_and_leave_nothing_stuck() {
    random_kills(DialectName::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_kills_during_group_commits_on_sqlite_lose_nothing_acknowledged() {
    random_kills(DialectName::Sqlite).await;
}

async fn random_kills(dialect: DialectName) {
    let mut app = TestApp::on(dialect)
        .tenant("acme", "100000.00")
        .recovering()
        .process()
        .await;
    app.sim
        .fault(&serde_json::json!({ "mode": "latency", "count": 100_000, "delayMs": 30 }))
        .await;
    let mut other = app.spawn_server(&[]).await;
    let mut keys = BTreeSet::new();
    // The payment each acknowledged key was answered with.
    let mut acknowledged: BTreeMap<String, String> = BTreeMap::new();
    // The seed is printed, so that a failing run can be told apart and repeated.
    let seed: u64 = std::env::var("IDEM_PROOF_KILL_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("random kills: seed {seed}");
    let mut random = fastrand::Rng::with_seed(seed);

    for round in 0..rounds() {
        let round_keys: Vec<String> = (0..KEYS_PER_ROUND)
            .map(|index| {
                // Every fifth request retries a key of the previous round.
                if round > 0 && index % 5 == 0 {
                    format!("soak-{}-{index}", round - 1)
                } else {
                    format!("soak-{round}-{index}")
                }
            })
            .collect();
        keys.extend(round_keys.iter().cloned());
        // Requests start 15 ms apart (0 to 600 ms) and the provider takes 30 ms a charge, so
        // each round's kill (100 to 500 ms in) lands in the middle of the traffic.
        let traffic = join_all(round_keys.iter().enumerate().map(|(index, key)| {
            let address = if random.bool() { app.address } else { other.address };
            let request = app
                .http
                .post(format!("http://{address}/payments"))
                .bearer_auth(app.key("acme"))
                .header("idempotency-key", key)
                .header("content-type", "application/json")
                .body(body(key))
                .timeout(Duration::from_secs(5));
            async move {
                tokio::time::sleep(Duration::from_millis(15 * index as u64)).await;
                request.send().await
            }
        }));
        let kill_first = random.bool();
        let kill_after = Duration::from_millis(random.u64(100..500));
        let victim = if kill_first { app.server() } else { &mut other };
        let kill = async {
            tokio::time::sleep(kill_after).await;
            victim.signal("KILL");
        };
        let (answers, ()) = tokio::join!(traffic, kill);
        for (key, answer) in round_keys.iter().zip(answers) {
            let Ok(answer) = answer else { continue };
            let status = answer.status().as_u16();
            assert!(
                matches!(status, 201 | 202 | 409),
                "round {round} (seed {seed}): only successes, unknowns and waits, got {status}"
            );
            if status == 201
                && let Ok(body) = answer.json::<Value>().await
                && let Some(id) = body["paymentId"].as_str()
            {
                acknowledged.insert(key.clone(), id.to_owned());
            }
        }
        let _ = victim.child.wait().await;
        if kill_first {
            app.restart(&[]).await;
        } else {
            other = app.spawn_server(&[]).await;
        }
    }

    // Every key is retried until it settles.
    for key in &keys {
        let mut settled = None;
        for _ in 0..100 {
            let response = app
                .post(app.key("acme"), Some(key), &body(key))
                .send()
                .await
                .expect("retry");
            let status = response.status().as_u16();
            if status == 201 {
                let body: Value = response.json().await.expect("a payment");
                if let Some(first) = acknowledged.get(key) {
                    assert_eq!(
                        body["paymentId"].as_str(),
                        Some(first.as_str()),
                        "{key}: the payment acknowledged before a kill (seed {seed})"
                    );
                }
                settled = Some(status);
                break;
            }
            assert!(matches!(status, 202 | 409), "{key}: {status}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(settled, Some(201), "{key} settled (seed {seed})");
    }

    let charges = app.sim.charges().await;
    let payments = app.db.query_i64("select count(*) from payments").await;
    assert_eq!(payments, keys.len() as i64, "one payment per key");
    assert_eq!(charges.len() as i64, payments, "one charge per payment");
    assert!(
        charges.iter().all(|charge| charge.create_calls == 1),
        "no charge was sent twice"
    );
    assert_eq!(
        app.db.query_i64(
            "select count(*) from idempotency_records where status in ('IN_PROGRESS', 'UNKNOWN_REQUIRES_RECOVERY')"
        )
        .await,
        0,
        "nothing stuck"
    );
    assert_eq!(
        app.db.query_i64("select balance_minor from accounts").await,
        10_000_000 - 100 * payments,
        "each payment held once"
    );
}
