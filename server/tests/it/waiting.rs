//! `Prefer: wait=N` on keyed POSTs, as the contract's section "waiting on an in-flight request"
//! says: a request whose key another request owns is held until that request answers (then it
//! gets the replay, or the 202 of an unknown outcome) or N seconds pass (then the usual 409),
//! with `Preference-Applied: wait=N` (N capped into 1 to 10). A different command is refused at
//! once; held requests are bounded per instance, and a client that hangs up frees its slot; a
//! held request sees an owner on another instance, and an instance killed with requests held
//! loses nothing. On both databases, with real `idem serve` processes (each with its own
//! metrics) and the provider simulator holding the owner's call until the test lets it go.

use crate::support::{Serve, TestApp, TestDatabase, conformance, expect_error, expect_replay, metric, ms};
use reqwest::RequestBuilder;
use serde_json::{Value, json};
use std::net::SocketAddr;
use tokio::task::JoinHandle;

conformance!(
    a_held_request_gets_the_answer_its_owner_gives,
    a_held_request_is_told_in_progress_at_its_deadline,
    held_requests_are_bounded_and_a_client_that_hangs_up_frees_its_slot,
    a_held_request_sees_its_owner_on_another_instance_and_a_killed_instance_loses_nothing,
    a_held_request_gets_the_unknown_outcome_and_refunds_wait_too,
);

const WAITING: &str = "idempotency_waiting_requests";
const WAITS: &str = "idempotency_waits_total";

fn payment(reference: &str, amount: &str) -> String {
    json!({ "accountId": "acc_1", "amount": amount, "currency": "EUR", "merchantReference": reference })
        .to_string()
}

/// `POST /payments` as the first tenant to the instance at `address`, under `key`.
fn pay_at(app: &TestApp, address: SocketAddr, key: &str, body: &str) -> RequestBuilder {
    app.http
        .post(format!("http://{address}/payments"))
        .bearer_auth(app.key("acme"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(body.to_owned())
}

type Sent = JoinHandle<reqwest::Result<reqwest::Response>>;

/// The provider holds the next call until the test lets it go.
async fn hold_the_next_provider_call(app: &TestApp) {
    app.sim
        .fault(&json!({ "mode": "latency", "count": 1, "held": true }))
        .await;
}

/// `request` sent as the key's owner, once the provider holds its call: it returns when that
/// call is held (the claim made, the key in progress).
async fn owner_held_at_the_provider(app: &TestApp, request: RequestBuilder) -> Sent {
    let applied = app.sim.faults_applied().await;
    hold_the_next_provider_call(app).await;
    let owner = tokio::spawn(request.send());
    app.sim.until_faults_applied(applied + 1).await;
    owner
}

/// A `201` answer's body.
async fn created(answer: reqwest::Response, what: &str) -> Vec<u8> {
    assert_eq!(answer.status(), 201, "{what}");
    answer.bytes().await.expect("body").to_vec()
}

/// The answer of a request sent on a task of its own, once it comes.
async fn answer_of(sent: Sent) -> reqwest::Response {
    sent.await.expect("a task").expect("an answer")
}

fn preference_applied(response: &reqwest::Response) -> Option<&str> {
    response
        .headers()
        .get("preference-applied")
        .map(|value| value.to_str().expect("ascii"))
}

/// How the holds of the instance whose metrics are at `metrics_address` ended so far:
/// (answered, deadline, refused).
async fn waits(app: &TestApp, metrics_address: SocketAddr) -> (f64, f64, f64) {
    let text = app.metrics_at(metrics_address).await;
    let of = |result: &str| metric(&text, WAITS, &[&format!("result=\"{result}\"")]);
    (of("answered"), of("deadline"), of("refused"))
}

/// The simulator's charges: one per payment, each sent once.
async fn one_charge_each(app: &TestApp, payments: usize) {
    let charges = app.sim.charges().await;
    assert_eq!(charges.len(), payments, "{charges:?}");
    assert!(
        charges.iter().all(|charge| charge.create_calls == 1),
        "{charges:?}"
    );
    assert_eq!(
        app.db.query_i64("select count(*) from payments").await,
        i64::try_from(payments).expect("a count")
    );
}

async fn a_held_request_gets_the_answer_its_owner_gives(db: TestDatabase) {
    let app = TestApp::on_database(db).tenant("acme", "100.00").process().await;
    let body = payment("inv-1", "10.00");
    let owner = owner_held_at_the_provider(&app, pay_at(&app, app.address, "k-1", &body)).await;

    // Without the preference nothing changes: the immediate 409.
    let at_once = pay_at(&app, app.address, "k-1", &body)
        .send()
        .await
        .expect("POST");
    assert_eq!(preference_applied(&at_once), None);
    expect_error(at_once, 409, "IDEMPOTENCY_REQUEST_IN_PROGRESS").await;
    // A different command under the key is refused at once: it was never held.
    let other = pay_at(&app, app.address, "k-1", &payment("inv-2", "11.00"))
        .header("prefer", "wait=10")
        .send()
        .await
        .expect("POST");
    expect_error(other, 409, "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST").await;
    assert_eq!(waits(&app, app.metrics_address).await, (0.0, 0.0, 0.0));

    let held = tokio::spawn(
        pay_at(&app, app.address, "k-1", &body)
            .header("prefer", "return=representation, wait=60")
            .send(),
    );
    app.until_metric(app.metrics_address, WAITING, &[], 1.0).await;
    assert_eq!(app.sim.release_held_calls().await, 1);

    let owner = answer_of(owner).await;
    assert_eq!(preference_applied(&owner), None, "the owner did not ask to wait");
    let stored = created(owner, "the owner").await;
    let held = answer_of(held).await;
    assert_eq!(preference_applied(&held), Some("wait=10"), "60 s is capped at 10");
    expect_replay(held, &stored, "the held request").await;
    app.until_metric(app.metrics_address, WAITING, &[], 0.0).await;
    assert_eq!(waits(&app, app.metrics_address).await, (1.0, 0.0, 0.0));
    one_charge_each(&app, 1).await;
}

async fn a_held_request_is_told_in_progress_at_its_deadline(db: TestDatabase) {
    let app = TestApp::on_database(db).tenant("acme", "100.00").process().await;
    let body = payment("inv-1", "10.00");
    let owner = owner_held_at_the_provider(&app, pay_at(&app, app.address, "k-1", &body)).await;

    // The owner stays at the provider: each is held to its deadline, then answered as a retry
    // then is. `wait=0` is outside 1 to 10, and capped to 1.
    for (asked, applied) in [("wait=1", "wait=1"), ("wait=0", "wait=1")] {
        let late = pay_at(&app, app.address, "k-1", &body)
            .header("prefer", asked)
            .send()
            .await
            .expect("POST");
        assert_eq!(preference_applied(&late), Some(applied), "{asked}");
        assert!(late.headers().contains_key("retry-after"), "{asked}");
        expect_error(late, 409, "IDEMPOTENCY_REQUEST_IN_PROGRESS").await;
    }
    assert_eq!(waits(&app, app.metrics_address).await, (0.0, 2.0, 0.0));

    assert_eq!(app.sim.release_held_calls().await, 1);
    let stored = created(answer_of(owner).await, "the owner").await;
    // Nothing to wait for: the replay at once, the preference applied all the same.
    let replay = pay_at(&app, app.address, "k-1", &body)
        .header("prefer", "wait=5")
        .send()
        .await
        .expect("POST");
    assert_eq!(preference_applied(&replay), Some("wait=5"));
    expect_replay(replay, &stored, "a retry after the owner answered").await;
    // Preferences the API does not know, or cannot read, are ignored.
    let unread = pay_at(&app, app.address, "k-1", &body)
        .header("prefer", "wait=soon, respond-async")
        .send()
        .await
        .expect("POST");
    assert_eq!(preference_applied(&unread), None);
    expect_replay(unread, &stored, "a retry with an unreadable wait").await;
    one_charge_each(&app, 1).await;
}

async fn held_requests_are_bounded_and_a_client_that_hangs_up_frees_its_slot(db: TestDatabase) {
    let app = TestApp::on_database(db)
        .tenant("acme", "100.00")
        .with(Serve::MaxWaitingRequests(1))
        .process()
        .await;
    let body = payment("inv-1", "10.00");
    let owner = owner_held_at_the_provider(&app, pay_at(&app, app.address, "k-1", &body)).await;
    let waiting = || -> Sent {
        tokio::spawn(
            pay_at(&app, app.address, "k-1", &body)
                .header("prefer", "wait=10")
                .send(),
        )
    };

    let first = waiting();
    app.until_metric(app.metrics_address, WAITING, &[], 1.0).await;
    // Past the bound: the immediate 409, the preference not applied.
    let refused = answer_of(waiting()).await;
    assert_eq!(preference_applied(&refused), None);
    expect_error(refused, 409, "IDEMPOTENCY_REQUEST_IN_PROGRESS").await;
    assert_eq!(waits(&app, app.metrics_address).await, (0.0, 0.0, 1.0));

    // The first client hangs up: its slot is free at once, long before its deadline.
    first.abort();
    assert!(first.await.expect_err("aborted").is_cancelled());
    app.until_metric(app.metrics_address, WAITING, &[], 0.0).await;
    let second = waiting();
    app.until_metric(app.metrics_address, WAITING, &[], 1.0).await;

    assert_eq!(app.sim.release_held_calls().await, 1);
    let stored = created(answer_of(owner).await, "the owner").await;
    let second = answer_of(second).await;
    assert_eq!(preference_applied(&second), Some("wait=10"));
    expect_replay(second, &stored, "the request held in the freed slot").await;
    one_charge_each(&app, 1).await;
}

async fn a_held_request_sees_its_owner_on_another_instance_and_a_killed_instance_loses_nothing(
    db: TestDatabase,
) {
    let app = TestApp::on_database(db).tenant("acme", "100.00").process().await;
    let other = app.spawn_server(&[]).await;
    let other_metrics = other.metrics_address.expect("the other instance's metrics");
    let held_on_the_other = |key: &str, body: &str| -> Sent {
        tokio::spawn(
            pay_at(&app, other.address, key, body)
                .header("prefer", "wait=10")
                .send(),
        )
    };

    // The owner runs on the first instance; the request held on the other learns of its
    // answer by reading the record again.
    let body = payment("inv-1", "10.00");
    let owner = owner_held_at_the_provider(&app, pay_at(&app, app.address, "k-1", &body)).await;
    let held = held_on_the_other("k-1", &body);
    app.until_metric(other_metrics, WAITING, &[], 1.0).await;
    // The look-up by key on the other instance finds the payment running, then settled.
    let found_on_the_other = |app: &TestApp| {
        app.http
            .get(format!("http://{}/payments", other.address))
            .query(&[("idempotencyKey", "k-1")])
            .bearer_auth(app.key("acme"))
            .send()
    };
    let running: Value = found_on_the_other(&app)
        .await
        .expect("GET")
        .json()
        .await
        .expect("json");
    assert_eq!(running["data"][0]["status"], "PROCESSING", "{running}");
    assert_eq!(app.sim.release_held_calls().await, 1);
    let stored = created(answer_of(owner).await, "the owner").await;
    let held = answer_of(held).await;
    assert_eq!(preference_applied(&held), Some("wait=10"));
    expect_replay(held, &stored, "held on another instance").await;
    let settled: Value = found_on_the_other(&app)
        .await
        .expect("GET")
        .json()
        .await
        .expect("json");
    let owner: Value = serde_json::from_slice(&stored).expect("json");
    assert_eq!(settled["data"][0]["paymentId"], owner["paymentId"], "{settled}");
    assert_eq!(settled["data"][0]["status"], "PENDING", "{settled}");

    // The instance holding a request is killed: the request fails, the owner's answer stands,
    // and the client's retry gets it.
    let body = payment("inv-2", "20.00");
    let owner = owner_held_at_the_provider(&app, pay_at(&app, app.address, "k-2", &body)).await;
    let held = held_on_the_other("k-2", &body);
    app.until_metric(other_metrics, WAITING, &[], 1.0).await;
    drop(other);
    assert!(
        held.await.expect("a task").is_err(),
        "a request held on a killed instance gets no answer"
    );
    assert_eq!(app.sim.release_held_calls().await, 1);
    let stored = created(answer_of(owner).await, "the owner").await;
    let retry = pay_at(&app, app.address, "k-2", &body)
        .header("prefer", "wait=10")
        .send()
        .await
        .expect("POST");
    expect_replay(retry, &stored, "the retry after the killed instance").await;
    one_charge_each(&app, 2).await;
}

async fn a_held_request_gets_the_unknown_outcome_and_refunds_wait_too(db: TestDatabase) {
    let app = TestApp::on_database(db)
        .tenant("acme", "100.00")
        .with(Serve::ProviderTimeout(ms(3000)))
        .process()
        .await;
    // The provider keeps the owner's answer: the owner answers 202 when its client gives up,
    // and so does the request held behind it.
    let body = payment("inv-1", "10.00");
    app.sim
        .fault(&json!({ "mode": "drop_response_after_accept", "count": 1 }))
        .await;
    let owner = tokio::spawn(pay_at(&app, app.address, "k-1", &body).send());
    app.sim.until_faults_applied(1).await;
    let held = pay_at(&app, app.address, "k-1", &body)
        .header("prefer", "wait=10")
        .send()
        .await
        .expect("POST");
    assert_eq!(preference_applied(&held), Some("wait=10"));
    assert_eq!(
        waits(&app, app.metrics_address).await,
        (1.0, 0.0, 0.0),
        "held until the owner answered"
    );
    let held = expect_error(held, 202, "PAYMENT_OUTCOME_UNKNOWN").await;
    let owner = expect_error(answer_of(owner).await, 202, "PAYMENT_OUTCOME_UNKNOWN").await;
    assert_eq!(held["paymentId"], owner["paymentId"]);

    // A refund's key waits the same way.
    let paid = app.pay("k-2", payment("inv-2", "30.00")).await;
    assert_eq!(paid.status(), 201);
    let paid: Value = paid.json().await.expect("json");
    let payment_id = paid["paymentId"].as_str().expect("an id").to_owned();
    let refund =
        json!({ "amount": "5.00", "reason": "requested_by_customer", "reference": "r-1" }).to_string();
    let refund_request = || {
        app.http
            .post(app.url(&format!("/payments/{payment_id}/refunds")))
            .bearer_auth(app.key("acme"))
            .header("idempotency-key", "rk-1")
            .header("content-type", "application/json")
            .body(refund.clone())
    };
    let owner = owner_held_at_the_provider(&app, refund_request()).await;
    let held = tokio::spawn(refund_request().header("prefer", "wait=10").send());
    app.until_metric(app.metrics_address, WAITING, &[], 1.0).await;
    assert_eq!(app.sim.release_held_calls().await, 1);
    let stored = created(answer_of(owner).await, "the refund's owner").await;
    let held = answer_of(held).await;
    assert_eq!(preference_applied(&held), Some("wait=10"));
    expect_replay(held, &stored, "a refund's held request").await;
    assert_eq!(waits(&app, app.metrics_address).await, (2.0, 0.0, 0.0));
}
