//! Clients that hang up mid-request: thousands of requests aborted at random points. Every
//! acknowledged payment must exist, every operation must run to its end anyway (its retry is
//! a replay), and no database connection may be left inside a transaction.

use crate::support::{DialectName, TestApp};
use futures_util::StreamExt;
use futures_util::stream;
use std::time::Duration;

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
        .serve("--rate-limit-per-sec", "0")
        .serve("--lease-secs", "3")
        .serve("--provider-timeout-ms", "2000")
        .serve("--recovery-interval-ms", "200")
        .process()
        .await;
    let post = |index: usize| {
        let body = format!(
            r#"{{"accountId":"acc_1","amount":"1.00","currency":"EUR","merchantReference":"inv-{index}"}}"#
        );
        app.post(app.key("acme"), Some(&format!("cancel-{index}")), &body)
    };

    // The typical latency under this concurrency, from requests nobody abandons.
    let started = std::time::Instant::now();
    let warm_up: Vec<u16> = stream::iter(REQUESTS..REQUESTS + CONCURRENCY * 2)
        .map(|index| {
            let request = post(index);
            async move { request.send().await.expect("warm-up").status().as_u16() }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    assert!(warm_up.iter().all(|status| *status == 201));
    let typical_latency = started.elapsed() / 2;

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
    assert!(
        unavailable.len() <= REQUESTS / 20,
        "overload answers are the exception: {}",
        unavailable.len()
    );
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
