//! Deploys that change the fingerprint's canonical form, between real `idem serve` processes
//! on each database: a record keeps the version it was made in, and its retries are compared
//! in that version, whichever version the instance that answers makes new records in.
//!
//! Version 2 (text in NFC) exists in test builds only (`docs/fingerprint.md`). It tells apart
//! what version 1 does not: "ガ" as one code point and as "カ" with a combining mark are two
//! commands in version 1 and one in version 2.

use crate::support::{Serve, TestApp, TestDatabase, conformance, expect_error, expect_replay, ms, secs};
use domain::operator::OperatorRole;
use futures_util::future::join_all;
use serde_json::{Value, json};
use std::collections::BTreeMap;

const COMPOSED: &str = "\u{30AC}-7781";
const DECOMPOSED: &str = "\u{30AB}\u{3099}-7781";

fn payment(reference: &str) -> String {
    json!({"accountId": "acc_1", "amount": "10.00", "currency": "EUR", "merchantReference": reference})
        .to_string()
}

/// The version `key`'s record was fingerprinted in.
async fn version_of(app: &TestApp, key: &str) -> i64 {
    app.db
        .query_i64(&format!(
            "select cast(fingerprint_version as bigint) from idempotency_records where idempotency_key = '{key}'"
        ))
        .await
}

/// Redeploys the app's instance on `version` (a new process on the same database).
async fn deploy(app: &mut TestApp, version: &str) {
    app.set(Serve::FingerprintVersion(version.to_owned()));
    app.restart(&[]).await;
}

async fn a_record_made_before_the_deploy_keeps_its_version_and_a_new_key_gets_the_new_one(db: TestDatabase) {
    let mut app = TestApp::on_database(db).tenant("acme", "100.00").process().await;
    let first = app.pay("k-before", payment(DECOMPOSED)).await;
    assert_eq!(first.status(), 201);
    let first = first.bytes().await.expect("body");
    assert_eq!(version_of(&app, "k-before").await, 1);

    deploy(&mut app, "2").await;
    // The same retry is computed in version 1, and replayed.
    expect_replay(
        app.pay("k-before", payment(DECOMPOSED)).await,
        &first,
        "the retry of a version 1 record",
    )
    .await;
    // What version 2 would call the same command is another one in version 1.
    expect_error(
        app.pay("k-before", payment(COMPOSED)).await,
        409,
        "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST",
    )
    .await;
    expect_error(
        app.pay("k-before", payment(DECOMPOSED).replace("10.00", "11.00"))
            .await,
        409,
        "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST",
    )
    .await;
    assert_eq!(
        version_of(&app, "k-before").await,
        1,
        "the record keeps its version"
    );

    // A new key after the deploy is fingerprinted in version 2, where both spellings are
    // one command.
    let reference = "\u{30AC}-after";
    let second = app.pay("k-after", payment(reference)).await;
    assert_eq!(second.status(), 201);
    let second = second.bytes().await.expect("body");
    assert_eq!(version_of(&app, "k-after").await, 2);
    let canonical: String = app
        .db
        .query_one("select canonical_command from idempotency_records where idempotency_key = 'k-after'")
        .await;
    assert!(canonical.contains(r#""fingerprintVersion":2"#), "{canonical}");
    expect_replay(
        app.pay("k-after", payment("\u{30AB}\u{3099}-after")).await,
        &second,
        "the other spelling, in version 2",
    )
    .await;

    // And a deploy back to version 1 still answers both records in their own versions.
    deploy(&mut app, "1").await;
    expect_replay(
        app.pay("k-before", payment(DECOMPOSED)).await,
        &first,
        "v1 after the rollback",
    )
    .await;
    expect_replay(
        app.pay("k-after", payment(reference)).await,
        &second,
        "v2 after the rollback",
    )
    .await;
    assert_eq!(app.sim.charges().await.len(), 2, "one charge per payment");
}

/// A key an operator released (the provider never charged it) before the deploy is retried
/// after it: the retry renews it in its record's version, which the claim compares, and
/// executes, instead of being told "in progress" until the window ends.
async fn a_key_released_before_the_deploy_is_executed_by_its_retry_after_it(db: TestDatabase) {
    let mut app = TestApp::on_database(db)
        .tenant("acme", "100.00")
        .recovering()
        .with(Serve::RecoveryMaxAttempts(0))
        .process()
        .await;
    app.sim
        .fault(&json!({ "mode": "fail_before_accept", "count": 1 }))
        .await;
    assert_eq!(app.pay("k-released", payment(DECOMPOSED)).await.status(), 202);
    let operator = app.console("otto", OperatorRole::Operator).await;
    let tenant_id = operator.tenant_of("k-released").await;
    let record = [
        ("record[tenant_id]", tenant_id.as_str()),
        ("record[operation]", "create_payment"),
        ("record[key]", "k-released"),
    ];
    let preview = operator.json("reconcile/preview", &record).await;
    assert_eq!(preview["evidence"], "NoCharge", "{preview}");
    let version = preview["version"].as_i64().expect("version").to_string();
    let mut apply = record.to_vec();
    apply.extend([
        ("version", version.as_str()),
        ("action", "MarkFailedAndReleaseKey"),
        ("reason", "provider has no charge (OPS-34)"),
    ]);
    let released = operator.json("reconcile/apply", &apply).await;
    assert_eq!(released["status"], "FAILED_RETRYABLE", "{released}");

    deploy(&mut app, "2").await;
    let retried = app.pay("k-released", payment(DECOMPOSED)).await;
    assert_eq!(retried.status(), 201, "{:?}", retried.text().await);
    assert_eq!(version_of(&app, "k-released").await, 1);
    assert_eq!(app.sim.charges().await.len(), 1);
}

/// (The issue's third case.) A record made before the deploy and purged to its tombstone after
/// it: a retry past the window is an expired retry, and a retry of the tombstone's command
/// (counted as one in the window-sizing table).
async fn an_expired_retry_of_a_tombstone_from_before_the_deploy_is_counted_as_one(db: TestDatabase) {
    let mut app = TestApp::on_database(db)
        .tenant("acme", "100.00")
        .with(Serve::Window(secs(1)))
        .with(Serve::CleanupEvery(ms(100)))
        .with(Serve::MetricsFlushEvery(ms(100)))
        .with(Serve::JournalFlushEvery(ms(50)))
        .process()
        .await;
    let first = app.pay("k-old", payment(DECOMPOSED)).await;
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.expect("json");
    app.db
        .eventually_equals(
            "select count(*) from idempotency_records where idempotency_key = 'k-old' and status = 'EXPIRED'",
            1,
            "the record became a tombstone",
        )
        .await;

    deploy(&mut app, "2").await;
    // The same command: a new operation under `new_operation`, which the merchant reference
    // stops from paying twice.
    let again = expect_error(
        app.pay("k-old", payment(DECOMPOSED)).await,
        409,
        "DUPLICATE_MERCHANT_REFERENCE",
    )
    .await;
    assert_eq!(again["details"]["paymentId"], first["paymentId"]);
    app.db
        .eventually_equals("select cast(coalesce(sum(count), 0) as bigint) from outcome_buckets where outcome = 'expired_retry'", 1, "counted as an expired retry")
        .await;
    app.db
        .eventually_equals(
            "select cast(coalesce(sum(retries), 0) as bigint) from retry_delay_buckets",
            1,
            "a retry of the tombstone's command, compared in its version",
        )
        .await;
    assert_eq!(
        app.db
            .query_i64("select cast(expired_retries as bigint) from idempotency_records where idempotency_key = 'k-old'")
            .await,
        1,
        "and noted on the record"
    );
    assert_eq!(app.sim.charges().await.len(), 1);
}

/// (The issue's fourth case.) A rolling deploy: one instance on each version, a storm of one key
/// on both while its first request is in flight, for a key first sent to each. One payment and one charge a key; every
/// answer a payment, a replay or "in progress", never "another request".
async fn a_storm_over_instances_on_two_versions_pays_once(db: TestDatabase) {
    let app = TestApp::on_database(db)
        .tenant("acme", "1000.00")
        .with(Serve::RateLimitPerSec(0))
        .process()
        .await;
    let on_v2 = app.spawn_server(&[("IDEM_FINGERPRINT_VERSION", "2")]).await;
    let instances = [app.address, on_v2.address];
    for (first_to, key) in [(0, "k-storm-v1"), (1, "k-storm-v2")] {
        let body = payment(&format!("inv-{key}"));
        app.sim
            .fault(&json!({ "mode": "latency", "count": 1, "delayMs": 500 }))
            .await;
        let first = app.pay_at(instances[first_to], key, &body);
        let storm = async {
            app.db
                .eventually_equals(
                    &format!("select count(*) from idempotency_records where idempotency_key = '{key}'"),
                    1,
                    "the first request's claim",
                )
                .await;
            join_all((0..32).map(|index| app.pay_at(instances[index % 2], key, &body))).await
        };
        let (first, storm) = tokio::join!(first, storm);
        assert_eq!(first.status(), 201, "{key}");
        let first = first.bytes().await.expect("body");
        let mut tally: BTreeMap<String, usize> = BTreeMap::new();
        for answer in storm {
            let replayed = answer.headers().contains_key("idempotent-replayed");
            let status = answer.status().as_u16();
            let body: Value = answer.json().await.unwrap_or(Value::Null);
            let kind = match (status, body["errorCode"].as_str()) {
                (201, _) if replayed => "replayed".to_owned(),
                (409, Some("IDEMPOTENCY_REQUEST_IN_PROGRESS")) => "in progress".to_owned(),
                (status, code) => format!("{status} {code:?}"),
            };
            *tally.entry(kind).or_default() += 1;
        }
        assert!(
            tally
                .keys()
                .all(|kind| kind == "replayed" || kind == "in progress"),
            "{key}: {tally:?}"
        );
        for instance in instances {
            expect_replay(app.pay_at(instance, key, &body).await, &first, key).await;
        }
        assert_eq!(version_of(&app, key).await, [1, 2][first_to], "{key}");
    }
    assert_eq!(app.db.query_i64("select count(*) from payments").await, 2);
    let charges = app.sim.charges().await;
    assert_eq!(charges.len(), 2);
    assert!(
        charges.iter().all(|charge| charge.create_calls == 1),
        "{charges:?}"
    );
}

/// A record in a version this build does not know (made by a newer deploy) is never judged:
/// its retries are told to come back (503, retryable), and nothing is executed or recorded.
async fn a_record_of_an_unknown_version_is_left_to_the_deploy_that_made_it(db: TestDatabase) {
    let app = TestApp::on_database(db).tenant("acme", "100.00").process().await;
    let first = app.pay("k-newer", payment("inv-newer")).await;
    assert_eq!(first.status(), 201);
    app.db
        .execute("update idempotency_records set fingerprint_version = 99 where idempotency_key = 'k-newer'")
        .await
        .expect("a record from the future");
    for body in [payment("inv-newer"), payment("inv-other")] {
        let refused = app.pay("k-newer", &body).await;
        assert!(refused.headers().contains_key("retry-after"));
        let error = expect_error(refused, 503, "UNAVAILABLE").await;
        assert_eq!(error["retryable"], true);
    }
    assert_eq!(app.db.query_i64("select count(*) from payments").await, 1);
    assert_eq!(app.sim.charges().await.len(), 1);
}

conformance!(
    a_record_made_before_the_deploy_keeps_its_version_and_a_new_key_gets_the_new_one,
    a_key_released_before_the_deploy_is_executed_by_its_retry_after_it,
    an_expired_retry_of_a_tombstone_from_before_the_deploy_is_counted_as_one,
    a_storm_over_instances_on_two_versions_pays_once,
    a_record_of_an_unknown_version_is_left_to_the_deploy_that_made_it,
);

#[tokio::test]
async fn a_version_this_build_does_not_know_is_refused_at_start() {
    let app = TestApp::on(crate::support::DialectName::Sqlite).seeded().await;
    let mut command = app.serve_command(&[("IDEM_FINGERPRINT_VERSION", "99")]);
    let output = command
        .stderr(std::process::Stdio::piped())
        .output()
        .await
        .expect("idem serve");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("fingerprint version 99 is not one this build knows (1, 2)"),
        "{stderr}"
    );
}
