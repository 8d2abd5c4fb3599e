//! Clients that hang up mid-request: thousands of requests aborted at random points. Every
//! acknowledged payment must exist, every operation must run to its end anyway (its retry is
//! a replay), and no database connection may be left inside a transaction, on the payment
//! path, on the console's and in the store itself.

use crate::support::{
    Console, DialectName, OPERATOR_PASSWORD, Serve, TestApp, TestDatabase, create_operator, ms, secs,
};
use domain::operator::{AuditEntry, OperatorRole};
use futures_util::StreamExt;
use futures_util::stream;
use std::time::{Duration, Instant};

const BODY: &str = r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-1"}"#;

const REQUESTS: usize = 2_000;
const CONCURRENCY: usize = 32;

/// Odd requests are abandoned at a repeatable spread of points between 0 and twice the
/// typical latency (so before, during and after the server's work on them, however fast this
/// machine is); even ones wait for their answer.
fn abort_after(index: usize, typical_latency: Duration) -> Duration {
    if index.is_multiple_of(2) {
        return Duration::from_secs(30);
    }
    let span = u64::try_from(typical_latency.as_micros() * 2)
        .unwrap_or(u64::MAX)
        .max(1);
    Duration::from_micros((index as u64 * 7_919) % span)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_requests_leave_no_half_done_operation_and_no_open_transaction() {
    // A short lease and a busy recovery worker: an operation whose completion failed under
    // load (a pool wait timed out) is taken over in seconds, not in the default half minute.
    let app = TestApp::on(DialectName::Postgres)
        .tenant("acme", "1000000.00")
        .with(Serve::RateLimitPerSec(0))
        .with(Serve::Lease(secs(3)))
        .with(Serve::ProviderTimeout(ms(2000)))
        .with(Serve::RecoveryEvery(ms(200)))
        .process()
        .await;
    let post = |index: usize| {
        let body = format!(
            r#"{{"accountId":"acc_1","amount":"1.00","currency":"EUR","merchantReference":"inv-{index}"}}"#
        );
        app.post(app.key("acme"), Some(&format!("cancel-{index}")), &body)
    };

    // The typical latency under this concurrency: the median of requests nobody abandons,
    // timed one by one once the instance is warm (a first wave opens its connections and
    // prepares its statements, which made a wave's time overstate a request's, and the
    // abandoned share too small once requests got faster).
    let warm_up: Vec<(u16, Duration)> = stream::iter(REQUESTS..REQUESTS + CONCURRENCY * 3)
        .map(|index| {
            let request = post(index);
            async move {
                let started = std::time::Instant::now();
                let status = request.send().await.expect("warm-up").status().as_u16();
                (status, started.elapsed())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    assert!(warm_up.iter().all(|(status, _)| *status == 201));
    let mut warm_latencies: Vec<Duration> = warm_up[CONCURRENCY..].iter().map(|(_, took)| *took).collect();
    warm_latencies.sort();
    let typical_latency = warm_latencies[warm_latencies.len() / 2];

    let outcomes: Vec<(usize, Option<u16>)> = stream::iter(0..REQUESTS)
        .map(|index| {
            let request = post(index);
            async move {
                // Dropping the request future closes the connection wherever it was.
                let status = tokio::time::timeout(abort_after(index, typical_latency), request.send())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|response| response.status().as_u16());
                (index, status)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let acknowledged = outcomes.iter().filter(|(_, status)| *status == Some(201)).count();
    let aborted = outcomes.iter().filter(|(_, status)| status.is_none()).count();
    // An overloaded instance may answer 503 (a database connection was not free in time);
    // that is the contract's "try again", never a half-done operation.
    let unavailable: Vec<usize> = outcomes
        .iter()
        .filter(|(_, status)| *status == Some(503))
        .map(|(index, _)| *index)
        .collect();
    assert!(
        aborted > REQUESTS / 10,
        "requests must really be aborted: {aborted}"
    );
    assert!(
        acknowledged + unavailable.len() >= REQUESTS / 2,
        "the others are answered: {acknowledged} + {} unavailable",
        unavailable.len()
    );
    // How many overload answers a machine gives is for the benchmarks: here each is the
    // contract's "try again", and its retry below settles its key.
    println!("{} of {REQUESTS} answered 503 under overload", unavailable.len());
    assert!(
        outcomes
            .iter()
            .all(|(_, status)| matches!(status, None | Some(201 | 503))),
        "only successes, aborts or overload: {:?}",
        outcomes
            .iter()
            .filter(|(_, status)| !matches!(status, None | Some(201 | 503)))
            .take(5)
            .collect::<Vec<_>>()
    );
    // Their clients retry, as told: each ends in the one payment of its key.
    for index in &unavailable {
        let mut status = 0;
        for _ in 0..50 {
            status = post(*index).send().await.expect("retry").status().as_u16();
            if status == 201 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(status, 201, "the retry of request {index} settles");
    }

    // Let the operations whose clients left finish on their own (or be taken over after the
    // lease, when their completion failed).
    let mut in_progress = i64::MAX;
    for _ in 0..300 {
        in_progress = app
            .db
            .query_i64("select count(*) from idempotency_records where status = 'IN_PROGRESS'")
            .await;
        if in_progress == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(in_progress, 0, "every started operation ran to its end");

    let warm_up_payments = warm_up.len() as i64;
    let payments = app
        .db
        .query_i64("select count(*) from payments where status = 'PENDING'")
        .await
        - warm_up_payments;
    let records = app
        .db
        .query_i64("select count(*) from idempotency_records where status = 'COMPLETED'")
        .await;
    assert_eq!(
        payments + warm_up_payments,
        records,
        "one payment per completed record"
    );
    assert!(
        payments >= acknowledged as i64,
        "every acknowledged payment exists"
    );
    assert_eq!(
        app.db
            .query_i64("select count(*) from payments where status = 'PROCESSING'")
            .await,
        0,
        "no half-done payment"
    );
    let idle_in_transaction = app
        .db
        .query_i64(
            // Background workers are between two statements of a transaction now and then
            // (for long on a loaded machine); a connection *left* inside one stays there, in
            // the same transaction.
            "select count(*) from pg_stat_activity where datname = current_database() \
             and state like 'idle in transaction%' and xact_start < now() - interval '10 seconds'",
        )
        .await;
    assert_eq!(idle_in_transaction, 0, "no connection left inside a transaction");

    // Each acknowledged or started operation answers its retry with the stored result.
    for (index, _) in outcomes
        .iter()
        .filter(|(_, status)| *status == Some(201))
        .take(50)
    {
        let replay = post(*index).send().await.expect("retry");
        assert_eq!(replay.status(), 201);
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
    }
    let balance = app.db.query_i64("select balance_minor from accounts").await;
    assert_eq!(
        balance,
        100_000_000 - 100 * (payments + warm_up_payments),
        "the held amounts match the payments"
    );
}

/// Connections of this database sitting inside a transaction, however briefly.
const IDLE_IN_TRANSACTION: &str = "select count(*) from pg_stat_activity \
     where datname = current_database() and state like 'idle in transaction%'";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_write_cancelled_at_any_point_leaves_no_connection_in_a_transaction() {
    let db = TestDatabase::migrated(DialectName::Postgres).await;
    let store = db.migrated_store().await;
    let mut completed = 0;
    // Cut off after 0 to 2 ms, in steps of 10 µs: before, while and after `BEGIN` is on the
    // wire, and at every later step of the write.
    for round in 0..200_u64 {
        let entry = AuditEntry::new("test", format!("cancelled.{round}"));
        let write = store.append_audit(&entry);
        if let Ok(written) = tokio::time::timeout(Duration::from_micros(round * 10), write).await {
            written.expect("an audit entry");
            completed += 1;
        }
        // Checked each time, before the next write (which would end a leaked transaction): a
        // transaction being rolled back is fine, one left behind stays.
        db.eventually_equals(
            IDLE_IN_TRANSACTION,
            0,
            &format!(
                "a write cut off after {} µs left its connection inside a transaction",
                round * 10
            ),
        )
        .await;
    }
    // Every connection is back in the pool, outside any transaction.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(db.query_i64(IDLE_IN_TRANSACTION).await, 0);
    let written = db
        .query_i64("select count(*) from audit_log where action like 'cancelled.%'")
        .await;
    assert!(
        written >= completed,
        "{written} written, {completed} acknowledged"
    );
    assert!(completed < 200, "some writes were really cancelled");
    // The pool still works: nothing leaked a transaction to the next borrower.
    store
        .append_audit(&AuditEntry::new("test", "after"))
        .await
        .expect("a write after the cancellations");
    assert_eq!(db.query_i64(IDLE_IN_TRANSACTION).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_writes_cut_off_at_any_point_leave_nothing_half_done() {
    let app = TestApp::on(DialectName::Postgres)
        .tenant("acme", "100.00")
        .in_process()
        .await;
    let admin = app.console("ada", OperatorRole::Admin).await;
    let cookie = admin.cookie.clone().expect("signed in");
    assert_eq!(app.pay("k-revealed", BODY).await.status(), 201);
    let tenant = admin.tenant_of("k-revealed").await;
    let record = [
        ("record[tenant_id]", tenant.as_str()),
        ("record[operation]", "create_payment"),
        ("record[key]", "k-revealed"),
    ];

    // Sign-ins (a session saved and audited) by operators on hosts of their own, five each,
    // as the sign-in limits allow.
    const SIGNING_IN: usize = 40;
    let store = app.db.store().await;
    let mut hosts = Vec::new();
    for operator in 0..SIGNING_IN {
        create_operator(store.as_ref(), &format!("op{operator}"), OperatorRole::Viewer)
            .await
            .expect("an operator");
        let host = Console::from_host(app.address, [127, 0, 0, 10 + operator as u8].into());
        hosts.push((format!("op{operator}"), host));
    }
    store.close().await;
    // Those sign-ins, reveals (audited), default-currency changes (the account and its
    // audit), each abandoned at a spread of points.
    let request = |index: usize| match index % 3 {
        0 => {
            let (username, host) = &hosts[(index / 3) % SIGNING_IN];
            host.sign_in_request(username, OPERATOR_PASSWORD)
        }
        1 => app
            .http
            .post(app.url("/api/console/reveal"))
            .header("origin", admin.origin())
            .header("cookie", &cookie)
            .form(&record),
        _ => app
            .as_tenant(
                reqwest::Method::PUT,
                "/accounts/acc_1/settings/default-currency",
                "acme",
            )
            .json(&serde_json::json!({ "currency": if index.is_multiple_of(2) { "USD" } else { "EUR" } })),
    };
    let outcomes: Vec<(usize, Option<u16>)> = stream::iter(0..600)
        .map(|index| {
            let request = request(index);
            async move {
                // One request in ten of each kind runs to its end, so that answers exist
                // however slow the machine; the others are abandoned at a spread of points.
                let cut_after = if index % 30 < 3 {
                    Duration::from_secs(60)
                } else {
                    Duration::from_micros((index as u64 * 7_919) % 60_000)
                };
                let status = tokio::time::timeout(cut_after, request.send())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|response| response.status().as_u16());
                (index, status)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let cut = outcomes.iter().filter(|(_, status)| status.is_none()).count();
    assert!(cut > 60, "requests must really be cut off: {cut}");
    assert!(
        outcomes
            .iter()
            .all(|(_, status)| matches!(status, None | Some(200 | 303))),
        "only answers or cut-offs: {outcomes:?}"
    );

    app.db
        .eventually_equals(IDLE_IN_TRANSACTION, 0, "no connection left inside a transaction")
        .await;
    // Nothing half done: the currency was set (some changes ran to their end), every
    // change of the default currency has its audit row, every reveal answered was audited.
    assert_eq!(
        app.db
            .query_i64("select count(*) from accounts where default_currency is not null")
            .await,
        1
    );
    let changes_answered = outcomes
        .iter()
        .filter(|(index, status)| index % 3 == 2 && *status == Some(200))
        .count();
    assert!(changes_answered >= 20, "{changes_answered} changes answered");
    // Only a change is audited (setting the value it has already writes nothing), so the
    // audited values alternate: as many of each, or one more of the value the account has.
    // A change committed without its audit row, or an audit row without its change, breaks
    // the alternation.
    let audited_as = async |currency: &str| {
        app.db
            .query_i64(&format!(
                "select count(*) from account_audit where setting = 'default_currency' \
                 and new_value = '{currency}'"
            ))
            .await
    };
    let (usd, eur) = (audited_as("USD").await, audited_as("EUR").await);
    let current = app
        .db
        .query_one::<String>("select default_currency from accounts where default_currency is not null")
        .await;
    assert!((usd - eur).abs() <= 1, "audited {usd} USD and {eur} EUR changes");
    if usd != eur {
        let more = if usd > eur { "USD" } else { "EUR" };
        assert_eq!(current, more, "audited {usd} USD and {eur} EUR changes");
    }
    // A session exists only after its sign-in was audited.
    let sessions = app.db.query_i64("select count(*) from operator_sessions").await;
    let signed_in = app
        .db
        .query_i64("select count(*) from audit_log where action = 'sign_in' and result = 'ok'")
        .await;
    assert!(
        sessions >= 1 && sessions <= signed_in,
        "{sessions} sessions, {signed_in} audited sign-ins"
    );
    let revealed = outcomes
        .iter()
        .filter(|(index, status)| index % 3 == 1 && *status == Some(200))
        .count() as i64;
    let audited = app
        .db
        .query_i64("select count(*) from audit_log where action = 'reveal_response'")
        .await;
    assert!(audited >= revealed, "{audited} audited, {revealed} answered");
    // The console still works for everyone: a session at once, and a new sign-in once the
    // storm's 200 sign-ins have left the sign-in limits room again (a cut-off sign-in still
    // spent its token and keeps its password checker until its check ends).
    assert_eq!(admin.call("whoami", &[]).await.status(), 200);
    let store = app.db.store().await;
    create_operator(store.as_ref(), "vera", OperatorRole::Viewer)
        .await
        .expect("an operator");
    store.close().await;
    let browser = app.browser();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let response = browser.post_sign_in("vera", OPERATOR_PASSWORD).await;
        assert_eq!(response.status(), 303);
        let location = response.headers()["location"]
            .to_str()
            .expect("location")
            .to_owned();
        if location != "/sign-in?error=limited" {
            assert_eq!(location, "/", "vera signed in");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sign-ins still limited 30 s after the storm"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
