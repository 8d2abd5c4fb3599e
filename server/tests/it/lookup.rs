//! Finding a resource by its key (`GET /payments?idempotencyKey=K`, `GET /refunds?...`), as the
//! contract's section "Finding a resource by its key" says: the resource the caller's key made,
//! as it is now and in the caller's version, `PROCESSING` while the key runs, through a
//! tombstone after the window, nothing for another tenant's key or a key that made nothing, and
//! a read that records nothing. On both databases, against the provider simulator over HTTP.

use crate::support::{Serve, TestApp, TestDatabase, conformance, expect_error, ms, secs};
use serde_json::{Value, json};

conformance!(
    a_key_finds_the_payment_it_made_and_nothing_else,
    a_running_key_finds_its_payment_processing,
    a_refunds_key_finds_the_refund_it_made,
    the_look_up_records_nothing,
    a_tombstone_still_finds_the_payment,
);

fn payment(reference: &str, amount: &str) -> String {
    json!({ "accountId": "acc_1", "amount": amount, "currency": "EUR", "merchantReference": reference })
        .to_string()
}

/// `GET <path>?idempotencyKey=<key>` as `tenant`, with `api_version` if given.
async fn found(
    app: &TestApp,
    tenant: &str,
    path: &str,
    key: &str,
    api_version: Option<&str>,
) -> reqwest::Response {
    let mut request = app
        .http
        .get(app.url(path))
        .query(&[("idempotencyKey", key)])
        .bearer_auth(app.key(tenant));
    if let Some(version) = api_version {
        request = request.header("api-version", version);
    }
    request.send().await.expect("GET by key")
}

/// The `data` of a 200 look-up.
async fn data(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("json");
    body["data"].as_array().expect("a data array").clone()
}

async fn a_key_finds_the_payment_it_made_and_nothing_else(db: TestDatabase) {
    let app = TestApp::on_database(db)
        .tenant("acme", "100.00")
        .tenant("globex", "100.00")
        .in_process()
        .await;
    let made = app.pay("k-made", payment("inv-1", "10.00")).await;
    assert_eq!(made.status(), 201);
    let made: Value = made.json().await.expect("json");
    let id = made["paymentId"].as_str().expect("an id").to_owned();

    // The payment as it is now, in the caller's version: what GET /payments/{id} says.
    for version in ["2026-05-01", "2026-09-01"] {
        let now = app
            .read_as("acme", &format!("/payments/{id}"), Some(version))
            .await;
        let listed = data(found(&app, "acme", "/payments", "k-made", Some(version)).await).await;
        assert_eq!(listed, vec![now], "{version}");
    }

    // Nothing for another tenant's key, a key never sent, or a key that made no payment.
    assert!(
        data(found(&app, "globex", "/payments", "k-made", None).await)
            .await
            .is_empty()
    );
    assert!(
        data(found(&app, "acme", "/payments", "k-never", None).await)
            .await
            .is_empty()
    );
    let refused = app.pay("k-too-much", payment("inv-2", "500.00")).await;
    assert_eq!(
        refused.status(),
        422,
        "insufficient funds binds the key, and makes no payment"
    );
    assert!(
        data(found(&app, "acme", "/payments", "k-too-much", None).await)
            .await
            .is_empty()
    );
    // A key of one operation finds nothing of the other.
    assert!(
        data(found(&app, "acme", "/refunds", "k-made", None).await)
            .await
            .is_empty()
    );

    // Bad input: the contract's errors, with the key parsed as the header is.
    expect_error(
        found(&app, "acme", "/payments", "", None).await,
        400,
        "IDEMPOTENCY_KEY_INVALID",
    )
    .await;
    expect_error(
        found(&app, "acme", "/payments", "a key", None).await,
        400,
        "IDEMPOTENCY_KEY_INVALID",
    )
    .await;
    expect_error(
        found(&app, "acme", "/payments", &"k".repeat(256), None).await,
        400,
        "IDEMPOTENCY_KEY_INVALID",
    )
    .await;
    let missing = app
        .http
        .get(app.url("/payments"))
        .bearer_auth(app.key("acme"))
        .send()
        .await
        .expect("GET");
    expect_error(missing, 400, "IDEMPOTENCY_KEY_MISSING").await;
    let unauthenticated = app
        .http
        .get(app.url("/payments?idempotencyKey=k-made"))
        .send()
        .await
        .expect("GET");
    expect_error(unauthenticated, 401, "UNAUTHENTICATED").await;
    expect_error(
        found(&app, "acme", "/payments", "k-made", Some("1999-01-01")).await,
        400,
        "UNSUPPORTED_API_VERSION",
    )
    .await;
}

async fn a_running_key_finds_its_payment_processing(db: TestDatabase) {
    let app = TestApp::on_database(db)
        .tenant("acme", "100.00")
        .in_process()
        .await;
    // 10.06: the simulator answers the charge after 2 s, so the key runs that long.
    let running = tokio::spawn({
        let (http, url, key) = (app.http.clone(), app.url("/payments"), app.key("acme").to_owned());
        async move {
            http.post(url)
                .bearer_auth(key)
                .header("idempotency-key", "k-slow")
                .header("content-type", "application/json")
                .body(payment("inv-slow", "10.06"))
                .send()
                .await
                .expect("POST")
        }
    });
    let listed = loop {
        let listed = data(found(&app, "acme", "/payments", "k-slow", None).await).await;
        if !listed.is_empty() {
            break listed;
        }
        assert!(
            !running.is_finished(),
            "the payment was listed before it completed"
        );
    };
    assert_eq!(listed[0]["status"], "PROCESSING", "{listed:?}");
    let done = running.await.expect("the request");
    assert_eq!(done.status(), 201);
    let listed = data(found(&app, "acme", "/payments", "k-slow", None).await).await;
    assert_eq!(listed[0]["status"], "PENDING", "{listed:?}");
}

async fn a_refunds_key_finds_the_refund_it_made(db: TestDatabase) {
    let app = TestApp::on_database(db)
        .tenant("acme", "100.00")
        .tenant("globex", "100.00")
        .in_process()
        .await;
    let made: Value = app
        .pay("k-pay", payment("inv-1", "10.00"))
        .await
        .json()
        .await
        .expect("json");
    let payment_id = made["paymentId"].as_str().expect("an id");
    let refund = app
        .refund(
            payment_id,
            "k-refund",
            json!({ "amount": "4.00", "reference": "rf-1" }).to_string(),
        )
        .await;
    assert_eq!(refund.status(), 201);
    let refund: Value = refund.json().await.expect("json");
    let listed = data(found(&app, "acme", "/refunds", "k-refund", None).await).await;
    assert_eq!(listed, vec![refund]);
    assert!(
        data(found(&app, "globex", "/refunds", "k-refund", None).await)
            .await
            .is_empty()
    );
    assert!(
        data(found(&app, "acme", "/payments", "k-refund", None).await)
            .await
            .is_empty()
    );
    expect_error(
        found(&app, "acme", "/refunds", "", None).await,
        400,
        "IDEMPOTENCY_KEY_INVALID",
    )
    .await;
}

async fn the_look_up_records_nothing(db: TestDatabase) {
    // In this process the harness idles the journal and the counts; here they are written as
    // an instance writes them.
    let app = TestApp::on_database(db)
        .tenant("acme", "100.00")
        .with(Serve::JournalFlushEvery(ms(100)))
        .with(Serve::MetricsFlushEvery(ms(100)))
        .in_process()
        .await;
    assert_eq!(app.pay("k-1", payment("inv-1", "10.00")).await.status(), 201);
    let record = "select status || ' ' || cast(lease_version as text) || ' ' || updated_at \
                  from idempotency_records where idempotency_key = 'k-1'";
    let before: String = app.db.query_one(record).await;
    for key in ["k-1", "k-never"] {
        data(found(&app, "acme", "/payments", key, None).await).await;
    }
    let after: String = app.db.query_one(record).await;
    assert_eq!(before, after, "the record is untouched: no lease, no write");
    assert_eq!(
        app.db.query_i64("select count(*) from idempotency_records").await,
        1,
        "a key never sent stays unknown"
    );
    // The journal is written in batches: a replay after the look-ups is journalled, and the
    // look-ups never are.
    let replay = app.pay("k-1", payment("inv-1", "10.00")).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    app.db
        .eventually_i64(
            "select count(*) from idempotency_replays where idempotency_key = 'k-1'",
            |count| count > 0,
            "the replay is counted",
        )
        .await;
    assert_eq!(
        app.db
            .query_i64(
                "select count(*) from idempotency_requests where idempotency_key in ('k-1', 'k-never')"
            )
            .await,
        1,
        "the first request alone has a journal row"
    );
}

async fn a_tombstone_still_finds_the_payment(db: TestDatabase) {
    let app = TestApp::on_database(db)
        .tenant("acme", "100.00")
        .with(Serve::Window(secs(1)))
        .with(Serve::CleanupEvery(ms(100)))
        .process()
        .await;
    let made: Value = app
        .pay("k-old", payment("inv-1", "10.00"))
        .await
        .json()
        .await
        .expect("json");
    app.db
        .eventually_equals(
            "select count(*) from idempotency_records where idempotency_key = 'k-old' and status = 'EXPIRED'",
            1,
            "the record is a tombstone",
        )
        .await;
    let listed = data(found(&app, "acme", "/payments", "k-old", None).await).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["paymentId"], made["paymentId"]);
}
