//! The provider client against the real simulator process, over HTTP.

use crate::support::Sim;
use domain::money::{Amount, Currency};
use idem::provider::client::{ProviderClient, ProviderError};
use idem::provider::{ChargeStatus, provider_key};
use serde_json::json;
use std::time::Duration;

fn client(sim: &Sim, timeout: Duration) -> ProviderClient {
    ProviderClient::new(&sim.url(), Duration::from_secs(2), timeout).expect("client")
}

fn eur(text: &str) -> Amount {
    Amount::parse(text, Currency::Eur).expect("valid amount")
}

#[tokio::test]
async fn the_provider_deduplicates_by_the_payment_key() {
    let sim = Sim::process().await;
    let client = client(&sim, Duration::from_secs(5));

    let first = client.create_charge("pay_1", eur("10.00")).await.expect("charge");
    assert_eq!(first.status, ChargeStatus::Succeeded);
    assert_eq!(first.reference, "pay_1");
    let again = client
        .create_charge("pay_1", eur("10.00"))
        .await
        .expect("same charge");
    assert_eq!(again, first);

    let charges = sim.charges().await;
    assert_eq!(charges.len(), 1);
    assert_eq!(charges[0].idempotency_key, provider_key("pay_1"));
    assert_eq!(charges[0].create_calls, 2);
    assert_eq!(
        (charges[0].amount.as_str(), charges[0].currency.as_str()),
        ("10.00", "EUR")
    );

    assert_eq!(client.find_charge("pay_1").await.expect("look up"), Some(first));
    assert_eq!(client.find_charge("pay_never").await.expect("look up"), None);

    match client.create_charge("pay_1", eur("99.00")).await {
        Err(ProviderError::Rejected { status: 409, .. }) => {}
        other => panic!("a different charge under the same key is refused, got {other:?}"),
    }
}

#[tokio::test]
async fn test_values_and_the_control_api_decline() {
    let sim = Sim::process().await;
    let client = client(&sim, Duration::from_secs(5));
    let by_value = client
        .create_charge("pay_tv", eur("10.02"))
        .await
        .expect("answer");
    assert_eq!(
        by_value.status,
        ChargeStatus::Declined,
        "amounts ending in 02 are declined"
    );

    sim.fault(&json!({ "mode": "decline", "count": 1, "reference": "pay_d" }))
        .await;
    let other = client
        .create_charge("pay_other", eur("10.00"))
        .await
        .expect("answer");
    assert_eq!(
        other.status,
        ChargeStatus::Succeeded,
        "the fault only matches its reference"
    );
    let declined = client.create_charge("pay_d", eur("10.00")).await.expect("answer");
    assert_eq!(declined.status, ChargeStatus::Declined);
}

#[tokio::test]
async fn failures_are_classified_by_what_they_prove() {
    let sim = Sim::process().await;
    let client = client(&sim, Duration::from_millis(800));

    // Refused before accepting: the client cannot know that, so the outcome is unknown...
    sim.fault(&json!({ "mode": "fail_before_accept", "count": 1 }))
        .await;
    assert!(matches!(
        client.create_charge("pay_f", eur("1.00")).await,
        Err(ProviderError::OutcomeUnknown(..))
    ));
    // ...and asking by the key settles it: nothing was charged.
    assert_eq!(client.find_charge("pay_f").await.expect("look up"), None);

    sim.fault(&json!({ "mode": "error_after_accept", "count": 1 }))
        .await;
    assert!(matches!(
        client.create_charge("pay_e", eur("1.00")).await,
        Err(ProviderError::OutcomeUnknown(..))
    ));
    assert!(
        client.find_charge("pay_e").await.expect("look up").is_some(),
        "accepted before the 500"
    );

    sim.fault(&json!({ "mode": "drop_response_after_accept", "count": 1 }))
        .await;
    assert!(matches!(
        client.create_charge("pay_x", eur("1.00")).await,
        Err(ProviderError::OutcomeUnknown(..))
    ));
    let lost = client
        .find_charge("pay_x")
        .await
        .expect("look up")
        .expect("charged");
    assert_eq!(lost.status, ChargeStatus::Succeeded);

    sim.fault(&json!({ "mode": "lookups_unavailable", "count": 1 }))
        .await;
    assert!(matches!(
        client.find_charge("pay_x").await,
        Err(ProviderError::OutcomeUnknown(..))
    ));
    assert!(
        client
            .find_charge("pay_x")
            .await
            .expect("available again")
            .is_some()
    );

    sim.fault(&json!({ "mode": "latency", "count": 1, "delayMs": 200 }))
        .await;
    assert!(
        client.create_charge("pay_slow", eur("1.00")).await.is_ok(),
        "slow but within the timeout"
    );

    let charges = sim.charges().await;
    let keys: Vec<&str> = charges
        .iter()
        .map(|charge| charge.idempotency_key.as_str())
        .collect();
    assert!(
        !keys.contains(&provider_key("pay_f").as_str()),
        "nothing charged for pay_f: {keys:?}"
    );
    assert_eq!(charges.len(), 3, "{keys:?}");
}

#[tokio::test]
async fn an_unreachable_provider_means_nothing_was_sent() {
    let client = ProviderClient::new(
        "http://127.0.0.1:1",
        Duration::from_secs(1),
        Duration::from_secs(1),
    )
    .expect("client");
    assert!(matches!(
        client.create_charge("pay_1", eur("1.00")).await,
        Err(ProviderError::NotSent(_))
    ));
}

#[tokio::test]
async fn the_control_api_refuses_malformed_faults() {
    let sim = Sim::process().await;
    let http = reqwest::Client::new();
    for fault in [
        json!({ "mode": "explode", "count": 1 }),
        json!({ "mode": "decline", "count": 0 }),
        json!({ "mode": "decline", "count": 1, "extra": true }),
    ] {
        let response = http
            .post(format!("{}/_sim/faults", sim.url()))
            .json(&fault)
            .send()
            .await
            .expect("POST");
        assert_eq!(response.status(), 400, "{fault}");
    }
    let cleared = http
        .delete(format!("{}/_sim/faults", sim.url()))
        .send()
        .await
        .expect("DELETE");
    assert_eq!(cleared.status(), 204);
}

#[tokio::test]
async fn test_values_produce_every_fault_on_the_first_call_only() {
    let sim = Sim::process().await;
    let client = client(&sim, Duration::from_millis(800));

    assert!(matches!(
        client.create_charge("pay_03", eur("1.03")).await,
        Err(ProviderError::OutcomeUnknown(..))
    ));
    assert_eq!(
        client.find_charge("pay_03").await.expect("look up"),
        None,
        "nothing charged"
    );
    let again = client
        .create_charge("pay_03", eur("1.03"))
        .await
        .expect("second call succeeds");
    assert_eq!(again.status, ChargeStatus::Succeeded);

    assert!(matches!(
        client.create_charge("pay_04", eur("1.04")).await,
        Err(ProviderError::OutcomeUnknown(..))
    ));
    assert!(
        client.find_charge("pay_04").await.expect("look up").is_some(),
        "charged before the 500"
    );

    assert!(matches!(
        client.create_charge("pay_05", eur("1.05")).await,
        Err(ProviderError::OutcomeUnknown(..))
    ));
    assert!(
        client.find_charge("pay_05").await.expect("look up").is_some(),
        "charged, answer lost"
    );

    assert!(
        matches!(
            client.create_charge("pay_06", eur("1.06")).await,
            Err(ProviderError::OutcomeUnknown(..))
        ),
        "answered after 2 s: past this client's 800 ms"
    );

    let declined = client.create_charge("pay_02", eur("1.02")).await.expect("answer");
    assert_eq!(declined.status, ChargeStatus::Declined);
    let declined_again = client.create_charge("pay_02", eur("1.02")).await.expect("answer");
    assert_eq!(
        declined_again, declined,
        "the recorded charge, not a new decision"
    );
}

#[tokio::test]
async fn the_provider_refunds_once_per_key_and_never_beyond_the_charge() {
    let sim = Sim::process().await;
    let client = client(&sim, Duration::from_secs(5));
    let charge = client.create_charge("pay_r", eur("10.00")).await.expect("charge");

    let first = client
        .create_refund("rf_1", &charge.charge_id, eur("6.00"))
        .await
        .expect("refund");
    assert_eq!(first.status, ChargeStatus::Succeeded);
    assert_eq!(first.reference, "rf_1");
    assert!(first.provider_refund_id.starts_with("re_"), "{first:?}");
    let again = client
        .create_refund("rf_1", &charge.charge_id, eur("6.00"))
        .await
        .expect("the same refund");
    assert_eq!(again, first, "deduplicated by the refund's key");
    assert_eq!(client.find_refund("rf_1").await.expect("look up"), Some(first));
    assert_eq!(client.find_refund("rf_never").await.expect("look up"), None);

    // 4.00 remain: 5.00 is refused, nothing recorded; 4.00 fits.
    match client.create_refund("rf_2", &charge.charge_id, eur("5.00")).await {
        Err(ProviderError::Rejected { status: 409, .. }) => {}
        other => panic!("a refund beyond the charge is refused, got {other:?}"),
    }
    assert_eq!(client.find_refund("rf_2").await.expect("look up"), None);
    match client.create_refund("rf_3", "ch_unknown", eur("1.00")).await {
        Err(ProviderError::Rejected { status: 404, .. }) => {}
        other => panic!("a refund of an unknown charge is refused, got {other:?}"),
    }
    match client.create_refund("rf_1", &charge.charge_id, eur("1.00")).await {
        Err(ProviderError::Rejected { status: 409, .. }) => {}
        other => panic!("another refund under a used key is refused, got {other:?}"),
    }
    // A declined refund (test value 02) does not count against what remains.
    let declined = client
        .create_refund("rf_4", &charge.charge_id, eur("4.02"))
        .await
        .expect("answer");
    assert_eq!(declined.status, ChargeStatus::Declined);
    client
        .create_refund("rf_5", &charge.charge_id, eur("4.00"))
        .await
        .expect("what remains");

    // The control API's faults apply to refunds by their reference.
    sim.fault(&json!({ "mode": "error_after_accept", "count": 1, "reference": "rf_6" }))
        .await;
    let second_charge = client.create_charge("pay_s", eur("10.00")).await.expect("charge");
    match client
        .create_refund("rf_6", &second_charge.charge_id, eur("1.00"))
        .await
    {
        Err(ProviderError::OutcomeUnknown(..)) => {}
        other => panic!("accepted, then a 500, got {other:?}"),
    }
    let made = client.find_refund("rf_6").await.expect("look up").expect("made");
    assert_eq!(made.status, ChargeStatus::Succeeded);
    sim.fault(&json!({ "mode": "lookups_unavailable", "count": 1, "reference": "rf_6" }))
        .await;
    assert!(matches!(
        client.find_refund("rf_6").await,
        Err(ProviderError::OutcomeUnknown(..))
    ));

    let refunds = sim.refunds().await;
    let calls: Vec<(&str, u32)> = refunds
        .iter()
        .map(|refund| (refund.reference.as_str(), refund.create_calls))
        .collect();
    assert_eq!(
        calls,
        [("rf_1", 3), ("rf_4", 1), ("rf_5", 1), ("rf_6", 1)],
        "{refunds:?}"
    );
    assert_eq!(refunds[0].idempotency_key, "provider_refund_rf_1");
}
