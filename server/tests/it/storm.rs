//! Retry storms: 64 identical requests released together per key, for 200 keys. On
//! PostgreSQL they are split across two `idem serve` processes; on SQLite one process takes
//! them all. Exactly one payment and one provider charge per key; every other answer is a
//! replay or "in progress"; no 5xx. And the same at 2, 8, 32 and 64 duplicates a key over two
//! instances: `IDEM_PROOF_STORM_KEYS` keys at each (20 in the test command, 1,000 in
//! `scripts/proof`). Last, the storm as clients that retry correctly make it (`idem-client`,
//! with `Prefer: wait`): every call answered with the key's one payment.

use crate::support::{DialectName, Serve, TestApp};
use futures_util::future::join_all;
use idem_client::{Client, NewPayment, RetryPolicy};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::Barrier;

/// Keys stormed, and identical requests per key.
#[derive(Debug, Clone, Copy)]
struct Size {
    keys: usize,
    per_key: usize,
}

const STORM: Size = Size {
    keys: 200,
    per_key: 64,
};
/// Keys stormed at once (each with all its requests in flight together).
const KEYS_IN_FLIGHT: usize = 8;

#[derive(Debug, Default)]
struct Tally {
    fresh: usize,
    replayed: usize,
    in_progress: usize,
    other: Vec<String>,
}

/// One payment and one provider charge per key, and each amount (10.00) taken once.
async fn paid_once_per_key(app: &TestApp, keys: usize) {
    let charges = app.sim.charges().await;
    assert_eq!(charges.len(), keys, "one charge per key");
    assert!(
        charges.iter().all(|charge| charge.create_calls == 1),
        "each charged once"
    );
    assert_eq!(
        app.db.query_i64("select count(*) from payments").await,
        keys as i64
    );
    assert_eq!(
        app.db.query_i64("select balance_minor from accounts").await,
        100_000_000 - 1_000 * keys as i64,
        "each amount taken once"
    );
}

/// Idem as a real process, without a rate limit, over an account that pays every storm.
async fn stormed(dialect: DialectName) -> TestApp {
    TestApp::on(dialect)
        .tenant("acme", "1000000.00")
        .with(Serve::RateLimitPerSec(0))
        .process()
        .await
}

async fn storm(dialect: DialectName, servers: usize, size: Size) {
    let Size { keys, per_key } = size;
    let app = stormed(dialect).await;
    let mut others = Vec::new();
    for _ in 1..servers {
        others.push(app.spawn_server(&[]).await);
    }
    let addresses: Vec<_> = std::iter::once(app.address)
        .chain(others.iter().map(|instance| instance.address))
        .collect();
    let api_key = app.key("acme");
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(per_key)
        .build()
        .expect("client");

    let mut tallies: BTreeMap<usize, Tally> = BTreeMap::new();
    for batch in (0..keys).collect::<Vec<_>>().chunks(KEYS_IN_FLIGHT) {
        let barrier = Arc::new(Barrier::new(batch.len() * per_key));
        let requests = batch.iter().flat_map(|&key| {
            (0..per_key).map({
                let (http, barrier, addresses) = (&http, barrier.clone(), &addresses);
                move |attempt| {
                    let barrier = barrier.clone();
                    async move {
                        let address = addresses[attempt % addresses.len()];
                        let body = format!(
                            r#"{{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-{key}"}}"#
                        );
                        let request = http
                            .post(format!("http://{address}/payments"))
                            .bearer_auth(api_key)
                            .header("idempotency-key", format!("storm-{key}"))
                            .body(body);
                        barrier.wait().await;
                        let response = request.send().await.expect("POST /payments");
                        let status = response.status().as_u16();
                        let replayed = response.headers().contains_key("idempotent-replayed");
                        let body = response.text().await.unwrap_or_default();
                        (key, status, replayed, body)
                    }
                }
            })
        });
        for (key, status, replayed, body) in join_all(requests).await {
            let tally = tallies.entry(key).or_default();
            match (status, replayed) {
                (201, false) => tally.fresh += 1,
                (201, true) => tally.replayed += 1,
                (409, false) if body.contains("IDEMPOTENCY_REQUEST_IN_PROGRESS") => tally.in_progress += 1,
                _ => tally.other.push(format!("{status}: {body}")),
            }
        }
    }

    for (key, tally) in &tallies {
        assert!(
            tally.other.is_empty(),
            "key {key}: unexpected answers {:?}",
            tally.other
        );
        assert_eq!(tally.fresh, 1, "key {key}: {tally:?}");
        assert_eq!(tally.fresh + tally.replayed + tally.in_progress, per_key);
    }
    paid_once_per_key(&app, keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_storm_across_two_instances_on_postgres_pays_once_per_key() {
    storm(DialectName::Postgres, 2, STORM).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_storm_on_sqlite_pays_once_per_key() {
    storm(DialectName::Sqlite, 1, STORM).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_at_every_concurrency_over_two_instances_pay_once_per_key() {
    let keys: usize = std::env::var("IDEM_PROOF_STORM_KEYS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(20);
    for per_key in [2, 8, 32, 64] {
        storm(DialectName::Postgres, 2, Size { keys, per_key }).await;
    }
}

/// `per_key` callers of one logical operation per key, each through `idem-client` with the same
/// key and `Prefer: wait=10`, released together and spread over two instances: every call gets
/// the key's one payment, exactly one of them fresh; one charge per key.
async fn client_storm(dialect: DialectName, size: Size) {
    let Size { keys, per_key } = size;
    let app = stormed(dialect).await;
    let other = app.spawn_server(&[]).await;
    let clients: Vec<Client> = [app.address, other.address]
        .iter()
        .map(|address| {
            Client::new(
                &format!("http://{address}"),
                app.key("acme"),
                RetryPolicy::default().waiting(10),
            )
        })
        .collect();
    for batch in (0..keys).collect::<Vec<_>>().chunks(KEYS_IN_FLIGHT) {
        let barrier = Arc::new(Barrier::new(batch.len() * per_key));
        let calls = batch.iter().flat_map(|&key| {
            let idempotency_key = Client::new_key();
            (0..per_key).map({
                let (clients, barrier) = (&clients, barrier.clone());
                move |caller| {
                    let (barrier, idempotency_key) = (barrier.clone(), idempotency_key.clone());
                    async move {
                        let payment = NewPayment::new("acc_1", "10.00", "EUR", &format!("inv-{key}"));
                        barrier.wait().await;
                        let made = clients[caller % clients.len()]
                            .create_payment(&idempotency_key, &payment)
                            .await;
                        (key, made)
                    }
                }
            })
        });
        let mut answers: BTreeMap<usize, Vec<_>> = BTreeMap::new();
        for (key, made) in join_all(calls).await {
            let made = made.unwrap_or_else(|error| panic!("key {key}: {error}"));
            answers.entry(key).or_default().push(made);
        }
        for (key, made) in &answers {
            assert_eq!(made.len(), per_key);
            let ids: std::collections::BTreeSet<_> =
                made.iter().map(|made| &made.resource.payment_id).collect();
            assert_eq!(ids.len(), 1, "key {key}: one payment for every call");
            assert_eq!(
                made.iter().filter(|made| !made.replayed).count(),
                1,
                "key {key}: one fresh answer, every other a replay"
            );
        }
    }
    paid_once_per_key(&app, keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_retry_correctly_get_one_payment_per_key_over_two_instances_on_postgres() {
    client_storm(
        DialectName::Postgres,
        Size {
            keys: 40,
            per_key: 16,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_retry_correctly_get_one_payment_per_key_over_two_instances_on_sqlite() {
    client_storm(
        DialectName::Sqlite,
        Size {
            keys: 40,
            per_key: 16,
        },
    )
    .await;
}
