//! Refunds, the second keyed operation, as a client sees it: every row of the contract's
//! refunds table, on PostgreSQL and SQLite, through the same idempotency layer as payments,
//! against the provider simulator over HTTP.

use crate::support::{
    DialectName, Serve, Setup, TestApp, answer_after_takeover, eventually, expect_error, expect_replay,
    metric, secs,
};
use domain::event::EventMessage;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::Duration;

/// Runs `async fn name(dialect)` on both databases.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn postgres() {
                super::$name(crate::support::DialectName::Postgres).await
            }

            #[tokio::test]
            async fn sqlite() {
                super::$name(crate::support::DialectName::Sqlite).await
            }
        }
    )*};
}

on_both!(
    a_refund_is_made_once_and_replayed_byte_for_byte,
    the_payment_in_the_path_is_part_of_the_request,
    refunds_never_sum_above_the_payment_and_a_refusal_over_it_binds_the_key,
    a_reference_is_refunded_once_whatever_the_key,
    another_tenants_or_an_unknown_payment_is_not_found_and_nothing_is_recorded,
    only_authorised_payments_are_refundable,
    a_declined_refund_is_replayed_and_gives_its_amount_back,
    an_unknown_refund_outcome_is_answered_202_and_resolved_by_a_retry,
    a_lost_refund_answer_is_resolved_by_the_recovery_worker_alone,
    bad_refund_requests_are_refused_before_anything_is_recorded,
    a_refund_retried_after_its_window_is_rejected_by_default,
    a_retry_while_the_refund_runs_is_told_to_wait,
    a_succeeded_refund_is_booked_once_and_the_ledger_sums_to_zero,
    concurrent_refunds_over_two_instances_never_sum_above_the_payment,
);

fn setup(dialect: DialectName, settings: &[Serve]) -> Setup {
    settings.iter().cloned().fold(
        TestApp::on(dialect)
            .tenant("acme", "100.00")
            .tenant("globex", "50.00"),
        Setup::with,
    )
}

async fn api(dialect: DialectName, settings: &[Serve]) -> TestApp {
    setup(dialect, settings).in_process().await
}

/// A new authorised payment of `amount` EUR; its id.
async fn paid(api: &TestApp, amount: &str) -> String {
    let body = json!({
        "accountId": "acc_1",
        "amount": amount,
        "currency": "EUR",
        "merchantReference": format!("invoice-{}", uuid::Uuid::new_v4()),
    });
    let response = api.pay(&uuid::Uuid::new_v4().to_string(), body.to_string()).await;
    let status = response.status();
    let payment: Value = response.json().await.expect("json");
    assert!([201, 202, 402].contains(&status.as_u16()), "{payment}");
    payment["paymentId"]
        .as_str()
        .or(payment["details"]["paymentId"].as_str())
        .expect("a payment id")
        .to_owned()
}

/// `GET /refunds/{refund_id}` as `tenant`.
async fn get_refund(api: &TestApp, refund_id: &str, tenant: &str) -> reqwest::Response {
    api.as_tenant(Method::GET, &format!("/refunds/{refund_id}"), tenant)
        .send()
        .await
        .expect("GET /refunds/{id}")
}

/// The refund as `tenant` reads it now.
async fn read_refund(api: &TestApp, refund_id: &str, tenant: &str) -> Value {
    let read = get_refund(api, refund_id, tenant).await;
    assert_eq!(read.status(), 200);
    read.json().await.expect("json")
}

/// A new refund of `amount` under `key`, made by the provider; its body.
async fn refunded(api: &TestApp, payment_id: &str, key: &str, amount: &str, reference: &str) -> Value {
    let response = api.refund(payment_id, key, refund_body(amount, reference)).await;
    assert_eq!(response.status(), 201);
    response.json().await.expect("json")
}

fn refund_body(amount: &str, reference: &str) -> String {
    json!({ "amount": amount, "reference": reference }).to_string()
}

/// How many idempotency records a key has (refusals before or in the claim record none).
async fn records_of(api: &TestApp, key: &str) -> i64 {
    api.db
        .query_i64(&format!(
            "select count(*) from idempotency_records where idempotency_key = '{key}'"
        ))
        .await
}

async fn a_refund_is_made_once_and_replayed_byte_for_byte(dialect: DialectName) {
    let api = api(dialect, &[]).await;
    let payment_id = paid(&api, "10.00").await;
    let first = api
        .refund(&payment_id, "rf-key-1", refund_body("4.00", "rf-1"))
        .await;
    assert_eq!(first.status(), 201);
    let location = first.headers()["location"].to_str().expect("ascii").to_owned();
    let expires = first.headers()["idempotency-expires"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let expires = chrono::DateTime::parse_from_rfc3339(&expires).expect("RFC 3339");
    let window = expires.signed_duration_since(chrono::Utc::now());
    assert!(
        window > chrono::TimeDelta::days(7) - chrono::TimeDelta::minutes(1)
            && window <= chrono::TimeDelta::days(7),
        "a refund's window is 7 days: {window}"
    );
    let stored = first.bytes().await.expect("body");
    let refund: Value = serde_json::from_slice(&stored).expect("json");
    let refund_id = refund["refundId"].as_str().expect("id").to_owned();
    assert!(refund_id.starts_with("rf_"), "{refund}");
    assert_eq!(location, format!("/refunds/{refund_id}"));
    assert_eq!(
        (
            &refund["paymentId"],
            &refund["amount"],
            &refund["currency"],
            &refund["reason"],
            &refund["reference"],
            &refund["status"]
        ),
        (
            &json!(payment_id),
            &json!("4.00"),
            &json!("EUR"),
            &json!("requested_by_customer"),
            &json!("rf-1"),
            &json!("SUCCEEDED")
        )
    );

    // Equivalent spellings are the same request; the key's answer comes back byte for byte.
    for body in [
        refund_body("4.00", "rf-1"),
        json!({ "reference": "rf-1", "reason": "requested_by_customer", "amount": "4" }).to_string(),
    ] {
        let replay = api.refund(&payment_id, "rf-key-1", body).await;
        assert_eq!(replay.status(), 201);
        assert_eq!(replay.headers()["location"], location.as_str());
        expect_replay(replay, &stored, "a refund's replay").await;
    }

    let refunds = api.sim.refunds().await;
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    assert_eq!(refunds[0].create_calls, 1, "replays never reach the provider");
    assert_eq!(refunds[0].idempotency_key, format!("provider_refund_{refund_id}"));
    assert_eq!(refunds[0].reference, refund_id);

    let read = read_refund(&api, &refund_id, "acme").await;
    assert_eq!(read, refund, "a fresh read shows the refund as made");
    let events = api
        .db
        .query_i64(&format!(
            "select count(*) from outbox_events where payment_id = '{payment_id}' \
             and event_type in ('RefundCreated', 'RefundSucceeded')"
        ))
        .await;
    assert_eq!(events, 2, "RefundCreated and RefundSucceeded, once each");

    // Counted per operation, like payments.
    let tenant_id: String = api
        .db
        .query_one("select id from tenants where name = 'acme'")
        .await;
    let tenant = format!("tenant=\"{tenant_id}\"");
    let metrics = api.metrics().await;
    let counted = |name: &str| metric(&metrics, name, &[tenant.as_str(), "operation=\"create_refund\""]);
    assert_eq!(counted("idempotency_new_execution_total"), 1.0, "{metrics}");
    assert_eq!(counted("idempotency_replay_total"), 2.0);
    assert_eq!(
        metric(
            &metrics,
            "idempotency_window_seconds",
            &["operation=\"create_refund\""]
        ),
        604_800.0
    );
}

async fn the_payment_in_the_path_is_part_of_the_request(dialect: DialectName) {
    let api = api(dialect, &[]).await;
    let first = paid(&api, "10.00").await;
    let second = paid(&api, "10.00").await;
    assert_eq!(
        api.refund(&first, "rf-key", refund_body("1.00", "rf-1"))
            .await
            .status(),
        201
    );
    expect_error(
        api.refund(&second, "rf-key", refund_body("1.00", "rf-1")).await,
        409,
        "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST",
    )
    .await;
    expect_error(
        api.refund(&first, "rf-key", refund_body("2.00", "rf-1")).await,
        409,
        "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST",
    )
    .await;
    assert_eq!(api.sim.refunds().await.len(), 1);
    // The same key string under create_payment is another scope.
    assert_eq!(records_of(&api, "rf-key").await, 1);
}

async fn refunds_never_sum_above_the_payment_and_a_refusal_over_it_binds_the_key(dialect: DialectName) {
    let api = api(dialect, &[]).await;
    let payment_id = paid(&api, "10.00").await;
    assert_eq!(
        api.refund(&payment_id, "k-1", refund_body("6.00", "rf-1"))
            .await
            .status(),
        201
    );
    let over = api.refund(&payment_id, "k-2", refund_body("5.00", "rf-2")).await;
    let stored = over.bytes().await.expect("body");
    let body: Value = serde_json::from_slice(&stored).expect("json");
    assert_eq!(body["errorCode"], "REFUND_EXCEEDS_REMAINING", "{body}");
    assert_eq!(body["details"]["remaining"], "4.00");
    assert_eq!(body["retryable"], false);
    // Bound to the key: the same request is answered the same, even once more remains.
    let replay = api.refund(&payment_id, "k-2", refund_body("5.00", "rf-2")).await;
    assert_eq!(replay.status(), 422);
    expect_replay(replay, &stored, "a refusal over the remaining amount").await;

    assert_eq!(
        api.refund(&payment_id, "k-3", refund_body("4.00", "rf-3"))
            .await
            .status(),
        201,
        "exactly what remains can be refunded"
    );
    let nothing_left = expect_error(
        api.refund(&payment_id, "k-4", refund_body("0.01", "rf-4")).await,
        422,
        "REFUND_EXCEEDS_REMAINING",
    )
    .await;
    assert_eq!(nothing_left["details"]["remaining"], "0.00");
    let refunded: i64 = api
        .db
        .query_i64(&format!(
            "select cast(coalesce(sum(amount_minor), 0) as bigint) from refunds where payment_id = '{payment_id}' \
             and status <> 'FAILED'"
        ))
        .await;
    assert_eq!(refunded, 1000);
    assert_eq!(api.sim.refunds().await.len(), 2);
}

async fn a_reference_is_refunded_once_whatever_the_key(dialect: DialectName) {
    let api = api(dialect, &[]).await;
    let payment_id = paid(&api, "10.00").await;
    let first = refunded(&api, &payment_id, "k-1", "1.00", "rf-1").await;
    let duplicate = expect_error(
        api.refund(&payment_id, "k-2", refund_body("1.00", "rf-1")).await,
        409,
        "DUPLICATE_REFUND_REFERENCE",
    )
    .await;
    assert_eq!(duplicate["details"]["refundId"], first["refundId"]);
    assert_eq!(
        records_of(&api, "k-2").await,
        0,
        "nothing recorded for the duplicate"
    );
    // The reference wins over the amount: the same reference for more than remains is still
    // the duplicate it is.
    expect_error(
        api.refund(&payment_id, "k-3", refund_body("50.00", "rf-1")).await,
        409,
        "DUPLICATE_REFUND_REFERENCE",
    )
    .await;
    assert_eq!(api.sim.refunds().await.len(), 1);
}

async fn another_tenants_or_an_unknown_payment_is_not_found_and_nothing_is_recorded(dialect: DialectName) {
    let api = api(dialect, &[]).await;
    let payment_id = paid(&api, "10.00").await;
    let refund = refunded(&api, &payment_id, "k-1", "1.00", "rf-1").await;
    let refund_id = refund["refundId"].as_str().expect("id");

    let as_globex = api
        .as_tenant(Method::POST, &format!("/payments/{payment_id}/refunds"), "globex")
        .header("idempotency-key", "k-1")
        .header("content-type", "application/json")
        .body(refund_body("1.00", "rf-1"))
        .send()
        .await
        .expect("POST");
    expect_error(as_globex, 404, "PAYMENT_NOT_FOUND").await;
    expect_error(
        api.refund("pay_0000000000000000", "k-9", refund_body("1.00", "rf-9"))
            .await,
        404,
        "PAYMENT_NOT_FOUND",
    )
    .await;
    assert_eq!(records_of(&api, "k-9").await, 0);
    let foreign_read = get_refund(&api, refund_id, "globex").await;
    expect_error(foreign_read, 404, "REFUND_NOT_FOUND").await;
    let unknown_read = get_refund(&api, "rf_0000000000000000", "acme").await;
    expect_error(unknown_read, 404, "REFUND_NOT_FOUND").await;
    // globex's own key "k-1" names nothing of acme's.
    assert_eq!(records_of(&api, "k-1").await, 1);
}

async fn only_authorised_payments_are_refundable(dialect: DialectName) {
    let api = api(dialect, &[]).await;
    // 10.02: the simulator declines the charge.
    let declined = paid(&api, "10.02").await;
    let refused = expect_error(
        api.refund(&declined, "k-1", refund_body("1.00", "rf-1")).await,
        409,
        "PAYMENT_NOT_REFUNDABLE",
    )
    .await;
    assert_eq!(refused["details"]["paymentStatus"], "DECLINED");
    assert_eq!(refused["retryable"], false);
    assert_eq!(records_of(&api, "k-1").await, 0, "nothing recorded");

    // A payment whose outcome is not known yet (10.04: accepted, answered 500) is not
    // refundable yet, and the client may come back once it is.
    let processing = paid(&api, "10.04").await;
    let not_yet = expect_error(
        api.refund(&processing, "k-2", refund_body("1.00", "rf-2")).await,
        409,
        "PAYMENT_NOT_REFUNDABLE",
    )
    .await;
    assert_eq!(not_yet["details"]["paymentStatus"], "PROCESSING");
    assert_eq!(not_yet["retryable"], true);
    assert!(api.sim.refunds().await.is_empty());
}

async fn a_declined_refund_is_replayed_and_gives_its_amount_back(dialect: DialectName) {
    let api = api(dialect, &[]).await;
    let payment_id = paid(&api, "10.00").await;
    // 3.02: the simulator declines the refund.
    let declined = api.refund(&payment_id, "k-1", refund_body("3.02", "rf-1")).await;
    let stored = declined.bytes().await.expect("body");
    let body: Value = serde_json::from_slice(&stored).expect("json");
    assert_eq!(body["errorCode"], "REFUND_DECLINED", "{body}");
    let refund_id = body["details"]["refundId"]
        .as_str()
        .expect("refund id")
        .to_owned();
    let replay = api.refund(&payment_id, "k-1", refund_body("3.02", "rf-1")).await;
    assert_eq!(replay.status(), 402);
    expect_replay(replay, &stored, "a declined refund").await;
    let read = read_refund(&api, &refund_id, "acme").await;
    assert_eq!(read["status"], "FAILED");
    assert_eq!(
        api.refund(&payment_id, "k-2", refund_body("10.00", "rf-2"))
            .await
            .status(),
        201,
        "a failed refund does not count against what remains"
    );
}

async fn an_unknown_refund_outcome_is_answered_202_and_resolved_by_a_retry(dialect: DialectName) {
    let api = api(dialect, &[]).await;
    let payment_id = paid(&api, "10.00").await;
    // 2.04: the simulator makes the refund, then answers 500.
    let unknown = api.refund(&payment_id, "k-1", refund_body("2.04", "rf-1")).await;
    assert_eq!(unknown.status(), 202);
    assert!(unknown.headers().contains_key("retry-after"));
    assert!(unknown.headers().contains_key("idempotency-expires"));
    let body: Value = unknown.json().await.expect("json");
    assert_eq!(body["status"], "PROCESSING");
    assert_eq!(body["errorCode"], "REFUND_OUTCOME_UNKNOWN");
    let refund_id = body["refundId"].as_str().expect("refund id").to_owned();
    let read = read_refund(&api, &refund_id, "acme").await;
    assert_eq!(read["status"], "PROCESSING");
    // Processing refunds count against what remains.
    expect_error(
        api.refund(&payment_id, "k-2", refund_body("8.00", "rf-2")).await,
        422,
        "REFUND_EXCEEDS_REMAINING",
    )
    .await;

    // The next look is backed off by a second; a retry after it asks the provider by the
    // refund's key and completes with what it finds: the same refund, never a second one.
    let mut answer = None;
    for _ in 0..50 {
        let retry = api.refund(&payment_id, "k-1", refund_body("2.04", "rf-1")).await;
        if retry.status() == 201 {
            answer = Some(retry.json::<Value>().await.expect("json"));
            break;
        }
        assert_eq!(retry.status(), 202);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answer = answer.expect("the retry resolves the refund");
    assert_eq!(answer["refundId"], refund_id.as_str());
    assert_eq!(answer["status"], "SUCCEEDED");
    let refunds = api.sim.refunds().await;
    assert_eq!(refunds.len(), 1);
    assert_eq!(
        refunds[0].create_calls, 1,
        "the taker asked first and never sent again"
    );
}

async fn a_lost_refund_answer_is_resolved_by_the_recovery_worker_alone(dialect: DialectName) {
    let api = TestApp::on(dialect)
        .tenant("acme", "100.00")
        .recovering()
        .in_process()
        .await;
    let payment_id = paid(&api, "10.00").await;
    // 2.05: the simulator makes the refund and never answers (past the 800 ms timeout).
    let unknown = api.refund(&payment_id, "k-1", refund_body("2.05", "rf-1")).await;
    assert_eq!(unknown.status(), 202);
    api.db
        .eventually_equals(
            "select count(*) from refunds where status = 'SUCCEEDED'",
            1,
            "the worker resolved the refund by asking the provider",
        )
        .await;
    let resolved = api.refund(&payment_id, "k-1", refund_body("2.05", "rf-1")).await;
    assert_eq!(resolved.status(), 201);
    assert_eq!(
        resolved
            .headers()
            .get("idempotent-replayed")
            .map(|value| value.as_bytes()),
        Some(&b"true"[..]),
        "the worker's answer is the key's"
    );
    let refunds = api.sim.refunds().await;
    assert_eq!((refunds.len(), refunds[0].create_calls), (1, 1), "{refunds:?}");
}

async fn bad_refund_requests_are_refused_before_anything_is_recorded(dialect: DialectName) {
    let api = api(dialect, &[]).await;
    let payment_id = paid(&api, "10.00").await;
    let path = format!("/payments/{payment_id}/refunds");
    let without_key = api
        .as_tenant(Method::POST, &path, "acme")
        .header("content-type", "application/json")
        .body(refund_body("1.00", "rf-1"))
        .send()
        .await
        .expect("POST");
    expect_error(without_key, 400, "IDEMPOTENCY_KEY_MISSING").await;
    let bad_key = api
        .as_tenant(Method::POST, &path, "acme")
        .header("idempotency-key", "with space")
        .body(refund_body("1.00", "rf-1"))
        .send()
        .await
        .expect("POST");
    expect_error(bad_key, 400, "IDEMPOTENCY_KEY_INVALID").await;
    let unauthenticated = reqwest::Client::new()
        .post(api.url(&path))
        .header("idempotency-key", "k-0")
        .body(refund_body("1.00", "rf-1"))
        .send()
        .await
        .expect("POST");
    expect_error(unauthenticated, 401, "UNAUTHENTICATED").await;

    for (body, fields) in [
        (r#"{"amount":1,"reference":"rf-1"}"#, vec!["amount"]),
        (r#"{"amount":"1.001","reference":"rf-1"}"#, vec!["amount"]),
        (r#"{"amount":"-1","reference":"rf-1"}"#, vec!["amount"]),
        (
            r#"{"amount":"1.00","reference":"","reason":"because","extra":1}"#,
            vec!["extra", "reason", "reference"],
        ),
        ("[]", vec!["body"]),
    ] {
        let refused = expect_error(
            api.refund(&payment_id, "k-1", body).await,
            400,
            "VALIDATION_FAILED",
        )
        .await;
        let named: Vec<&str> = refused["details"]["fields"]
            .as_array()
            .expect("fields")
            .iter()
            .map(|field| field["field"].as_str().expect("name"))
            .collect();
        assert_eq!(named, fields, "{body}: {refused}");
    }
    let bad_version = api
        .as_tenant(Method::POST, &path, "acme")
        .header("idempotency-key", "k-1")
        .header("api-version", "1999-01-01")
        .body(refund_body("1.00", "rf-1"))
        .send()
        .await
        .expect("POST");
    expect_error(bad_version, 400, "UNSUPPORTED_API_VERSION").await;
    assert_eq!(records_of(&api, "k-1").await, 0);
    assert!(api.sim.refunds().await.is_empty());

    let discovery = api.discovery().await;
    let refunds = discovery["operations"]
        .as_array()
        .expect("operations")
        .iter()
        .find(|operation| operation["operation"] == "create_refund")
        .expect("create_refund is listed")
        .clone();
    assert_eq!(refunds["path"], "/payments/{paymentId}/refunds");
    assert_eq!(refunds["windowSeconds"], 7 * 24 * 3600);
    assert_eq!(refunds["afterExpiry"], "reject");
    assert_eq!(refunds["inProgressLeaseSeconds"], 30);
}

async fn a_refund_retried_after_its_window_is_rejected_by_default(dialect: DialectName) {
    // A process of its own: the window is a gauge of the process, which every test that runs
    // Idem in this one reads.
    let api = setup(dialect, &[Serve::RefundWindow(secs(1))]).process().await;
    let payment_id = paid(&api, "10.00").await;
    let refund = refunded(&api, &payment_id, "k-1", "1.00", "rf-1").await;
    // Retries are replays until the window passes; the first one after it is refused.
    let after_the_window = eventually(
        "a retry after the refund's window",
        || api.refund(&payment_id, "k-1", refund_body("1.00", "rf-1")),
        |retry| retry.status() != 201,
    )
    .await;
    let expired = expect_error(after_the_window, 422, "IDEMPOTENCY_KEY_EXPIRED").await;
    assert_eq!(expired["details"]["resourceId"], refund["refundId"]);
    let noted = api
        .db
        .query_i64(
            "select cast(expired_retries as bigint) from idempotency_records where idempotency_key = 'k-1'",
        )
        .await;
    assert_eq!(noted, 1, "counted as an expired retry");
    assert_eq!(api.sim.refunds().await.len(), 1);
}

async fn a_retry_while_the_refund_runs_is_told_to_wait(dialect: DialectName) {
    let api = api(dialect, &[]).await;
    let payment_id = paid(&api, "10.00").await;
    // 1.06: the simulator answers the refund after 2 s.
    let (first, second) = tokio::join!(
        api.refund(&payment_id, "k-1", refund_body("1.06", "rf-1")),
        async {
            running(&api, "k-1").await;
            api.refund(&payment_id, "k-1", refund_body("1.06", "rf-1")).await
        }
    );
    assert_eq!(first.status(), 201);
    assert!(second.headers().contains_key("retry-after"));
    expect_error(second, 409, "IDEMPOTENCY_REQUEST_IN_PROGRESS").await;
    // A different request under the running key is a conflict, not "in progress".
    let (_, conflicting) = tokio::join!(
        api.refund(&payment_id, "k-2", refund_body("1.06", "rf-2")),
        async {
            running(&api, "k-2").await;
            api.refund(&payment_id, "k-2", refund_body("2.00", "rf-2")).await
        }
    );
    expect_error(conflicting, 409, "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST").await;
}

/// Waits until the refund under `key` runs: its record is IN_PROGRESS.
async fn running(api: &TestApp, key: &str) {
    api.db
        .eventually_equals(
            &format!(
                "select count(*) from idempotency_records \
                 where operation_name = 'create_refund' and idempotency_key = '{key}' \
                 and status = 'IN_PROGRESS'"
            ),
            1,
            &format!("the refund under {key} runs"),
        )
        .await;
}

async fn a_succeeded_refund_is_booked_once_and_the_ledger_sums_to_zero(dialect: DialectName) {
    let api = api(dialect, &[]).await;
    let payment_id = paid(&api, "10.00").await;
    for (key, amount, reference) in [
        ("k-1", "4.00", "rf-1"),
        ("k-2", "1.00", "rf-2"),
        ("k-3", "2.02", "rf-3"),
    ] {
        api.refund(&payment_id, key, refund_body(amount, reference)).await;
    }
    let store = api.db.migrated_store().await;
    let rows: Vec<(String, String, String, String)> = api
        .db
        .query_all(&format!(
            "select id, event_type, payment_id, payload from outbox_events where payment_id = '{payment_id}' \
             order by created_at"
        ))
        .await;
    let messages: Vec<EventMessage> = rows
        .into_iter()
        .map(|(event_id, event_type, payment_id, payload)| EventMessage {
            event_id,
            event_type,
            payment_id,
            payload,
        })
        .collect();
    let types: Vec<&str> = messages
        .iter()
        .map(|message| message.event_type.as_str())
        .collect();
    for wanted in ["RefundCreated", "RefundSucceeded", "RefundFailed"] {
        assert!(types.contains(&wanted), "{types:?}");
    }
    let booked: Vec<&EventMessage> = messages
        .iter()
        .filter(|message| ["PaymentAuthorized", "RefundSucceeded"].contains(&message.event_type.as_str()))
        .collect();
    assert_eq!(booked.len(), 3, "one authorisation and two succeeded refunds");
    // Delivered twice: booked once.
    let first = store
        .consume_into_ledger("ledger", &booked)
        .await
        .expect("first delivery");
    assert_eq!(first, vec![true; 3]);
    let again = store
        .consume_into_ledger("ledger-again", &booked)
        .await
        .expect("second delivery");
    assert_eq!(
        again,
        vec![false; 3],
        "a second consumer name finds every booking made"
    );
    let customer: i64 = api
        .db
        .query_i64(
            "select cast(coalesce(sum(amount_minor), 0) as bigint) from ledger_postings where account like 'customer:%'",
        )
        .await;
    assert_eq!(customer, -1000 + 400 + 100, "paid 10.00, refunded 4.00 and 1.00");
    assert_eq!(
        api.db
            .query_i64("select cast(coalesce(sum(amount_minor), 0) as bigint) from ledger_postings")
            .await,
        0,
        "the ledger sums to zero"
    );
    assert_eq!(
        api.db
            .query_i64("select count(*) from ledger_transactions where source_refund_id is not null")
            .await,
        2
    );
}

async fn concurrent_refunds_over_two_instances_never_sum_above_the_payment(dialect: DialectName) {
    let api = api(dialect, &[]).await;
    let instances = [api.address, api.another_instance().await];
    let payment_id = paid(&api, "10.00").await;
    // 40 refunds of 1.00 under distinct keys and references, each sent twice (once to each
    // instance) at once: ten fit.
    let attempts = (0..40).flat_map(|index| {
        let payment_id = payment_id.clone();
        let api = &api;
        instances.map(move |address| {
            let payment_id = payment_id.clone();
            async move {
                api.refund_at(
                    address,
                    &payment_id,
                    &format!("storm-{index}"),
                    refund_body("1.00", &format!("rf-{index}")),
                )
                .await
                .status()
                .as_u16()
            }
        })
    });
    let statuses = futures_util::future::join_all(attempts).await;
    let created = statuses.iter().filter(|status| **status == 201).count();
    assert!(
        statuses.iter().all(|status| [201, 409, 422].contains(status)),
        "{statuses:?}"
    );
    let refunded = api
        .db
        .query_i64(&format!(
            "select cast(coalesce(sum(amount_minor), 0) as bigint) from refunds where payment_id = '{payment_id}' \
             and status <> 'FAILED'"
        ))
        .await;
    assert_eq!(
        refunded, 1000,
        "exactly the payment's amount, never more: {statuses:?}"
    );
    let made = api
        .db
        .query_i64(&format!(
            "select count(*) from refunds where payment_id = '{payment_id}'"
        ))
        .await;
    assert_eq!(made, 10);
    assert!(
        created >= 10,
        "each made refund answered 201 at least once: {statuses:?}"
    );
    let refunds = api.sim.refunds().await;
    assert_eq!(refunds.len(), 10);
    assert!(
        refunds.iter().all(|refund| refund.create_calls == 1),
        "each refund sent to the provider once: {refunds:?}"
    );
}

// A refund's owner dies: the real `idem serve` is killed at each step boundary of a refund,
// restarted, and the refund recovered by a retry or by the recovery worker alone. Exactly one
// refund, sent to the provider once, and the final answer is what every later replay returns.

on_both!(
    a_refund_crashed_inside_its_local_transaction_leaves_nothing_and_the_retry_executes,
    a_refund_crashed_before_the_provider_call_is_resumed_with_the_same_refund,
    a_refund_crashed_after_the_provider_answered_is_resumed_by_asking_the_provider,
    a_refund_crashed_after_completion_is_answered_by_the_replay,
    the_worker_alone_recovers_a_refund_crashed_at_every_step,
);

const CRASH_REFUND: &str = r#"{"amount":"3.00","reference":"rf-crash"}"#;
const RECOVERED_REFUNDS: &str = "select count(*) from idempotency_records where operation_name = 'create_refund' and status = 'COMPLETED'";

/// Who recovers the crashed refund: the client's retry, or the recovery worker alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recoverer {
    Retry,
    WorkerOnly,
}

async fn a_refund_crashed_inside_its_local_transaction_leaves_nothing_and_the_retry_executes(
    dialect: DialectName,
) {
    let mut app = crash_app(dialect).await;
    let payment_id = paid(&app, "10.00").await;
    crash_refund_at(&mut app, &payment_id, "inside_local_transaction").await;
    assert_eq!(records_of(&app, "crash-refund").await, 0, "the claim rolled back");
    refund_recovered(
        &mut app,
        &payment_id,
        "inside_local_transaction",
        Recoverer::Retry,
    )
    .await;
}

async fn a_refund_crashed_before_the_provider_call_is_resumed_with_the_same_refund(dialect: DialectName) {
    crash_then_recover(dialect, "before_provider_call", Recoverer::Retry).await;
}

async fn a_refund_crashed_after_the_provider_answered_is_resumed_by_asking_the_provider(
    dialect: DialectName,
) {
    crash_then_recover(dialect, "provider_answered", Recoverer::Retry).await;
}

async fn a_refund_crashed_after_completion_is_answered_by_the_replay(dialect: DialectName) {
    assert!(
        crash_then_recover(dialect, "after_completion", Recoverer::Retry).await,
        "the completion committed before the crash: the first answer after it is the replay"
    );
}

async fn the_worker_alone_recovers_a_refund_crashed_at_every_step(dialect: DialectName) {
    for crash_point in ["before_provider_call", "provider_answered", "after_completion"] {
        crash_then_recover(dialect, crash_point, Recoverer::WorkerOnly).await;
    }
}

/// The real binaries, tuned for recovery (1 s leases, the worker every 200 ms).
async fn crash_app(dialect: DialectName) -> TestApp {
    TestApp::on(dialect)
        .tenant("acme", "100.00")
        .recovering()
        .process()
        .await
}

/// Whether the first answer after the restart was a replay.
async fn crash_then_recover(dialect: DialectName, crash_point: &str, recoverer: Recoverer) -> bool {
    let mut app = crash_app(dialect).await;
    let payment_id = paid(&app, "10.00").await;
    crash_refund_at(&mut app, &payment_id, crash_point).await;
    refund_recovered(&mut app, &payment_id, crash_point, recoverer).await
}

/// Restarts the first instance so that it aborts at `crash_point`, and sends it the refund:
/// the process dies before it answers.
async fn crash_refund_at(app: &mut TestApp, payment_id: &str, crash_point: &str) {
    app.restart(&[("IDEM_CRASH_POINT", crash_point)]).await;
    let sent = app
        .as_tenant(Method::POST, &format!("/payments/{payment_id}/refunds"), "acme")
        .header("idempotency-key", "crash-refund")
        .header("content-type", "application/json")
        .body(CRASH_REFUND)
        .send()
        .await;
    assert!(sent.is_err(), "{crash_point}: the process died before answering");
    let status = app.server().ended().await;
    assert!(!status.success(), "{crash_point}: aborted, not a clean exit");
}

/// Restarts a healthy instance and checks that the refund is made exactly once; whether the
/// first answer after the restart was a replay.
async fn refund_recovered(
    app: &mut TestApp,
    payment_id: &str,
    crash_point: &str,
    recoverer: Recoverer,
) -> bool {
    app.restart(&[]).await;
    if recoverer == Recoverer::WorkerOnly {
        app.db
            .eventually_equals(
                RECOVERED_REFUNDS,
                1,
                &format!("{crash_point}: the worker alone recovered the refund"),
            )
            .await;
    }
    let answer = answer_after_takeover(crash_point, || {
        app.refund(payment_id, "crash-refund", CRASH_REFUND)
    })
    .await;
    assert_eq!(answer.status(), 201, "{crash_point}");
    let first_was_replay = answer.headers().contains_key("idempotent-replayed");
    let final_body = answer.bytes().await.expect("body");
    let refund: Value = serde_json::from_slice(&final_body).expect("json");
    assert_eq!(refund["status"], "SUCCEEDED", "{crash_point}");
    let replay = app.refund(payment_id, "crash-refund", CRASH_REFUND).await;
    expect_replay(
        replay,
        &final_body,
        &format!("{crash_point}: the final answer is the replay"),
    )
    .await;

    let refunds = app.sim.refunds().await;
    assert_eq!(refunds.len(), 1, "{crash_point}: one refund at the provider");
    assert_eq!(
        refunds[0].create_calls, 1,
        "{crash_point}: sent once, never blindly again"
    );
    assert_eq!(
        refunds[0].reference, refund["refundId"],
        "{crash_point}: the same refund"
    );
    app.db
        .expect_i64(
            &format!("select count(*) from refunds where payment_id = '{payment_id}'"),
            1,
            &format!("{crash_point}: one refund"),
        )
        .await;
    app.db
        .expect_i64(
            &format!("select cast(refunded_minor as bigint) from payments where id = '{payment_id}'"),
            300,
            &format!("{crash_point}: counted once against the payment"),
        )
        .await;
    first_was_replay
}
