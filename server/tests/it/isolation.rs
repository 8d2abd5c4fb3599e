//! Tenant isolation, probed: tenant B uses tenant A's idempotency keys (with A's bodies and
//! others), payment ids and account ids, and the same requests with keys and ids that never
//! existed. Both sets of answers must be alike (the same statuses, error codes and bodies, once
//! the probe's own new payment ids are set aside), and no answer to B may carry anything of A's.
//! `IDEM_PROOF_TENANT_PROBES` sets the probes per kind (60 in the test command, about 400
//! requests in all; `scripts/proof` runs 33,400 a kind: 100,700 probes with what is A's and as
//! many with what never existed).

use crate::support::{DialectName, Serve, TestApp};
use futures_util::StreamExt;
use reqwest::Method;
use serde_json::Value;
use std::collections::BTreeMap;

/// A probe's answer with what identifies the probe removed: its status, its error code and its
/// body with the payment id B's own request made (if any) blanked.
type Answer = (u16, String, String);

fn body(account: &str, reference: &str, amount: &str) -> String {
    format!(
        r#"{{"accountId":"{account}","amount":"{amount}","currency":"EUR","merchantReference":"{reference}"}}"#
    )
}

async fn answer(response: reqwest::Response) -> Answer {
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    let mut json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let code = json["errorCode"].as_str().unwrap_or_default().to_owned();
    for field in ["paymentId", "merchantReference"] {
        if json.get(field).is_some() {
            json[field] = Value::String(String::new());
        }
    }
    (status, code, json.to_string())
}

#[tokio::test]
async fn another_tenants_keys_payments_and_accounts_are_indistinguishable_from_ones_that_never_existed() {
    let probes: usize = std::env::var("IDEM_PROOF_TENANT_PROBES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(60);
    let api = TestApp::on(DialectName::Postgres)
        .tenant("acme", "1000000.00")
        .tenant("globex", "1000000.00")
        .with(Serve::RateLimitPerSec(0))
        .process()
        .await;
    api.admin(&[
        "account",
        "create",
        "--tenant",
        "acme",
        "--id",
        "acc_acme",
        "--currency",
        "EUR",
        "--balance",
        "100.00",
    ])
    .await;

    // What acme has: keys bound to payments, the payments' ids, an account of its own.
    // Two sets of acme's keys: globex's probes with acme's body make records of globex's own
    // under the first set's keys, which must not meet the probes with other bodies.
    let acme_keys: Vec<String> = (0..2 * probes.min(500))
        .map(|index| format!("acme-key-{index}"))
        .collect();
    let (same_body_keys, other_body_keys) = acme_keys.split_at(acme_keys.len() / 2);
    let acme_payments: Vec<String> = futures_util::stream::iter(&acme_keys)
        .map(|key| async {
            let response = api
                .post(api.key("acme"), Some(key), &body("acc_1", key, "0.01"))
                .send()
                .await
                .expect("POST");
            assert_eq!(response.status(), 201);
            let payment: Value = response.json().await.expect("json");
            payment["paymentId"].as_str().expect("id").to_owned()
        })
        .buffered(16)
        .collect()
        .await;

    // Each kind of probe, once with what is acme's and once with what never existed.
    let globex = api.key("globex").to_owned();
    let probe = |kind: usize, index: usize, known: bool| {
        let (api, globex) = (&api, globex.clone());
        let acme_keys = if kind == 0 {
            same_body_keys
        } else {
            other_body_keys
        };
        let acme_key = &acme_keys[index % acme_keys.len()];
        let acme_payment = &acme_payments[index % acme_payments.len()];
        let key = if known {
            acme_key.clone()
        } else {
            format!("never-{kind}-{index}")
        };
        let payment = if known {
            acme_payment.clone()
        } else {
            format!("pay_{:016x}", index + 1)
        };
        let account = if known { "acc_acme" } else { "acc_never" };
        async move {
            let request = match kind {
                // A's key and A's body (A's account id is globex's own acc_1 too): globex's own
                // new payment, never A's replay. Each of A's keys once.
                0 => api.post(&globex, Some(&key), &body("acc_1", &key, "0.01")),
                // A's key with another body on an account globex does not have.
                1 => api.post(
                    &globex,
                    Some(&key),
                    &body(account, &format!("ref-{index}"), "1.00"),
                ),
                // A's payment id.
                2 => api.request(Method::GET, &format!("/payments/{payment}"), &globex),
                // A's account, through the other keyed route.
                _ => api
                    .request(
                        Method::PUT,
                        &format!("/accounts/{account}/settings/default-currency"),
                        &globex,
                    )
                    .header("content-type", "application/json")
                    .body(r#"{"currency":"USD"}"#),
            };
            let response = request.send().await.expect("probe");
            let replayed = response.headers().contains_key("idempotent-replayed");
            let text_answer = answer(response).await;
            (kind, known, replayed, text_answer)
        }
    };
    let per_kind = |kind: usize| if kind == 0 { same_body_keys.len() } else { probes };
    let jobs = (0..4).flat_map(|kind| {
        (0..per_kind(kind)).flat_map(move |index| [(kind, index, true), (kind, index, false)])
    });
    let answers: Vec<(usize, bool, bool, Answer)> = futures_util::stream::iter(jobs)
        .map(|(kind, index, known)| probe(kind, index, known))
        .buffer_unordered(16)
        .collect()
        .await;

    let mut distributions: BTreeMap<(usize, bool), BTreeMap<Answer, usize>> = BTreeMap::new();
    for (kind, known, replayed, answer) in &answers {
        assert!(!replayed, "a probe was answered as a replay: {answer:?}");
        for secret in acme_payments.iter().chain(["acc_acme".to_owned()].iter()) {
            assert!(!answer.2.contains(secret.as_str()), "{secret} leaked: {answer:?}");
        }
        *distributions
            .entry((*kind, *known))
            .or_default()
            .entry(answer.clone())
            .or_default() += 1;
    }
    for kind in 0..4 {
        assert_eq!(
            distributions[&(kind, true)],
            distributions[&(kind, false)],
            "probe kind {kind}: acme's against never-existing"
        );
    }
    // What each kind of probe got: a new payment of globex's own, then 404s.
    let only = |kind: usize| -> Vec<(u16, String)> {
        distributions[&(kind, true)]
            .keys()
            .map(|(status, code, _)| (*status, code.clone()))
            .collect()
    };
    assert_eq!(only(0), [(201, String::new())]);
    assert_eq!(only(1), [(404, "ACCOUNT_NOT_FOUND".to_owned())]);
    assert_eq!(only(2), [(404, "PAYMENT_NOT_FOUND".to_owned())]);
    assert_eq!(only(3), [(404, "ACCOUNT_NOT_FOUND".to_owned())]);
    // Acme's records are untouched: still its own payments, nothing new.
    assert_eq!(
        api.db
            .query_i64(
                "select count(*) from payments p join tenants t on t.id = p.tenant_id where t.name = 'acme'"
            )
            .await,
        i64::try_from(acme_keys.len()).expect("count")
    );
}
