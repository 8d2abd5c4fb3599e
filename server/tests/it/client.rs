//! The Rust client (`idem-client`) against a real `idem serve` while the provider simulator
//! injects every fault mode: each logical operation is answered, with one payment and one
//! charge, whatever the provider did to its first attempt; and an answer lost on the way back is
//! found by its key, with nothing sent again. On both databases.

use crate::support::{Forwarder, TestApp, TestDatabase, conformance};
use idem_client::{Client, Error, NewPayment, NewRefund, RetryPolicy};
use serde_json::json;
use std::time::Duration;

conformance!(
    every_logical_operation_is_answered_once_whatever_the_provider_does,
    an_answer_lost_on_the_way_back_is_found_by_its_key,
);

async fn every_logical_operation_is_answered_once_whatever_the_provider_does(db: TestDatabase) {
    let app = TestApp::on_database(db)
        .tenant("acme", "1000.00")
        .recovering()
        .process()
        .await;
    let policy = RetryPolicy {
        // A bound against a hang, not a timing target: recovery settles an unknown outcome
        // after its first backoff, and two tests share two cores.
        deadline: Duration::from_secs(90),
        first_backoff: Duration::from_millis(50),
        longest_backoff: Duration::from_secs(1),
        attempt_timeout: Duration::from_secs(5),
        wait_secs: Some(2),
    };
    let client = Client::new(&format!("http://{}", app.address), app.key("acme"), policy);
    let faults = [
        json!({ "mode": "latency", "delayMs": 300 }),
        json!({ "mode": "fail_before_accept" }),
        json!({ "mode": "drop_response_after_accept" }),
        json!({ "mode": "error_after_accept" }),
        json!({ "mode": "lookups_unavailable", "count": 2 }),
    ];
    let mut payments = Vec::new();
    for (n, fault) in faults.iter().enumerate() {
        let reference = format!("inv-{n}");
        // The next create call is this operation's (they run one after another).
        let mut fault = fault.clone();
        if fault.get("count").is_none() {
            fault["count"] = json!(1);
        }
        if fault["mode"] == "lookups_unavailable" {
            // Look-ups refused while a lost answer is being recovered.
            app.sim
                .fault(&json!({ "mode": "drop_response_after_accept", "count": 1 }))
                .await;
        }
        app.sim.fault(&fault).await;
        let key = Client::new_key();
        let made = client
            .create_payment(&key, &NewPayment::new("acc_1", "10.00", "EUR", &reference))
            .await
            .unwrap_or_else(|error| panic!("{fault}: {error}"));
        assert_ne!(made.resource.status, "PROCESSING", "{fault}");
        // The same logical operation again: the same payment, replayed.
        let again = client
            .create_payment(&key, &NewPayment::new("acc_1", "10.00", "EUR", &reference))
            .await
            .unwrap_or_else(|error| panic!("{fault} again: {error}"));
        assert!(again.replayed, "{fault}");
        assert_eq!(again.resource.payment_id, made.resource.payment_id, "{fault}");
        assert_eq!(
            client
                .payment_by_key(&key)
                .await
                .expect("look-up")
                .map(|found| found.payment_id),
            Some(made.resource.payment_id.clone())
        );
        payments.push(made.resource);
    }

    // A decision is never retried: the same key with another command, at once.
    let key = Client::new_key();
    client
        .create_payment(&key, &NewPayment::new("acc_1", "1.00", "EUR", "inv-decided"))
        .await
        .expect("made");
    match client
        .create_payment(&key, &NewPayment::new("acc_1", "2.00", "EUR", "inv-decided"))
        .await
    {
        Err(Error::Refused(error)) => {
            assert_eq!(
                (error.status, error.code.as_str()),
                (409, "IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST")
            );
        }
        other => panic!("{other:?}"),
    }

    // A refund through the client, its provider call faulted too.
    let paid = &payments[0];
    app.sim
        .fault(&json!({ "mode": "error_after_accept", "count": 1 }))
        .await;
    let refunded = client
        .create_refund(
            &Client::new_key(),
            &paid.payment_id,
            &NewRefund {
                amount: "4.00".to_owned(),
                reason: "requested_by_customer".to_owned(),
                reference: "rf-1".to_owned(),
            },
        )
        .await
        .expect("a refund answered");
    assert_ne!(refunded.resource.status, "PROCESSING");

    // One payment and one charge per logical operation.
    let charges = app.sim.charges().await;
    assert_eq!(charges.len(), faults.len() + 1, "{charges:?}");
    for n in 0..faults.len() {
        let reference = format!("inv-{n}");
        let paid = payments
            .iter()
            .find(|payment| payment.merchant_reference == reference)
            .expect("a payment");
        assert_eq!(
            charges
                .iter()
                .filter(|charge| charge.reference == paid.payment_id)
                .count(),
            1,
            "{reference}: {charges:?}"
        );
    }
    assert_eq!(
        app.db.query_i64("select count(*) from payments").await,
        i64::try_from(faults.len() + 1).expect("a count")
    );
    assert_eq!(app.sim.refunds().await.len(), 1);
}

async fn an_answer_lost_on_the_way_back_is_found_by_its_key(db: TestDatabase) {
    let app = TestApp::on_database(db).tenant("acme", "100.00").process().await;
    let network = Forwarder::to(app.address.port()).await;
    let client = Client::new(
        &format!("http://{}", network.address),
        app.key("acme"),
        RetryPolicy::default(),
    );

    // The server makes the payment; its answer never arrives. The key's look-up finds it
    // settled, and nothing is sent again.
    network.lose_answers(1);
    let key = Client::new_key();
    let made = client
        .create_payment(&key, &NewPayment::new("acc_1", "10.00", "EUR", "inv-1"))
        .await
        .expect("found by its key");
    assert!(made.found_by_key && made.replayed, "{made:?}");
    assert_eq!(made.attempts, 1, "no second POST");
    assert_eq!(made.resource.status, "PENDING");

    // A decline found by its key is the decline its key answers.
    network.lose_answers(1);
    match client
        .create_payment(
            &Client::new_key(),
            &NewPayment::new("acc_1", "10.02", "EUR", "inv-2"),
        )
        .await
    {
        Err(Error::Refused(error)) => {
            assert_eq!((error.status, error.code.as_str()), (402, "PAYMENT_DECLINED"))
        }
        other => panic!("{other:?}"),
    }

    let charges = app.sim.charges().await;
    assert_eq!(charges.len(), 2, "{charges:?}");
    assert!(
        charges.iter().all(|charge| charge.create_calls == 1),
        "{charges:?}"
    );
    assert_eq!(app.db.query_i64("select count(*) from payments").await, 2);
}
