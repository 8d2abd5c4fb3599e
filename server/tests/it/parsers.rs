//! The parsers under generated input, with proptest (the same properties run under `cargo
//! fuzz` in scripts/fuzz-parsers, outside the test command): the command parser, the
//! fingerprint's canonical form and the idempotency-key parser. None panics; a key is accepted
//! exactly when the contract allows it; a refused command says why; the canonical form of a
//! command parses back to the same fingerprint. A failing case shrinks and prints its input
//! (and proptest keeps its seed), to become a regression test here.

use crate::support::keys_of;
use domain::command::CreatePayment;
use domain::fingerprint::Fingerprint;
use domain::key::IdempotencyKey;
use proptest::prelude::*;
use serde_json::{Value, json};

fn fingerprint_of(command: &CreatePayment) -> Fingerprint {
    Fingerprint::compute(&command.fingerprint_input("2026-05-01"))
}

/// A field name: one of the command's, a near miss, or anything.
fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "accountId",
            "amount",
            "currency",
            "merchantReference",
            "channel",
            "AccountId",
            "amount ",
            "__proto__",
        ])
        .prop_map(str::to_owned),
        "[a-zA-Z_]{1,12}",
    ]
}

/// A JSON value of any type, the strings shaped like the fields' values more often than not.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|number| json!(number)),
        any::<f64>().prop_map(|number| json!(number)),
        "-?[0-9]{1,20}(\\.[0-9]{0,4})?".prop_map(Value::String),
        prop::sample::select(vec![
            "EUR", "eur", "JPY", "XXX", "", "web", "pos", "mobile", "acc_1"
        ])
        .prop_map(|text| Value::String(text.to_owned())),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,4}", inner, 0..3)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::support::proptest_cases(3_000)))]

    #[test]
    fn the_command_parser_takes_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Err(invalid) = CreatePayment::parse_json(&bytes) {
            prop_assert!(!invalid.problems.is_empty());
        }
    }

    #[test]
    fn a_command_is_parsed_or_refused_with_reasons_and_its_canonical_form_is_a_fixed_point(
        fields in prop::collection::btree_map(field_name(), json_value(), 0..7),
    ) {
        let body = serde_json::to_vec(&fields).expect("json");
        match CreatePayment::parse_json(&body) {
            Err(invalid) => prop_assert!(!invalid.problems.is_empty()),
            Ok(command) => {
                let first = fingerprint_of(&command);
                let canonical: Value = serde_json::from_str(&first.canonical).expect("canonical json");
                let again = CreatePayment::parse_json(canonical["command"].to_string().as_bytes())
                    .expect("a canonical command parses");
                prop_assert_eq!(fingerprint_of(&again), first);
            }
        }
    }

    #[test]
    fn every_command_the_contract_allows_is_accepted_and_its_canonical_form_is_a_fixed_point(
        account in "[A-Za-z0-9_-]{1,64}",
        amount in "[1-9][0-9]{0,6}(\\.[0-9]{1,2})?",
        currency in prop::sample::select(vec!["EUR", "eur", "Usd", "GBP", "chf"]),
        reference in "[^\\p{Cc}]{1,60}",
        channel in prop::option::of(prop::sample::select(vec!["web", "mobile", "pos"])),
    ) {
        let mut body = json!({
            "accountId": account,
            "amount": amount,
            "currency": currency,
            "merchantReference": reference,
        });
        if let Some(channel) = channel {
            body["channel"] = json!(channel);
        }
        let command = CreatePayment::parse_json(body.to_string().as_bytes());
        prop_assert!(command.is_ok(), "{} refused: {:?}", body, command.err().map(|invalid| invalid.problems));
        let first = fingerprint_of(&command.expect("checked"));
        let canonical: Value = serde_json::from_str(&first.canonical).expect("canonical json");
        let again = CreatePayment::parse_json(canonical["command"].to_string().as_bytes())
            .expect("a canonical command parses");
        prop_assert_eq!(fingerprint_of(&again), first);
    }

    #[test]
    fn a_key_is_accepted_exactly_when_the_contract_allows_it(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..300),
            prop::collection::vec(0x21_u8..=0x7E, 0..300),
        ],
    ) {
        let allowed = (1..=255).contains(&bytes.len()) && bytes.iter().all(|byte| (0x21..=0x7E).contains(byte));
        prop_assert_eq!(IdempotencyKey::parse(&bytes).is_ok(), allowed, "{:?}", bytes);
    }
}

/// A page cursor as text: anything, or JSON arrays shaped like the records' (four strings)
/// and the audit log's (two) with arbitrary, near-valid or valid times.
fn cursor_text() -> impl Strategy<Value = String> {
    let time = prop_oneof![
        Just("2026-12-01T10:00:00.000Z".to_owned()),
        Just("2026-13-01T10:00:00Z".to_owned()),
        "[0-9T:.Z+-]{0,30}",
        any::<String>(),
    ];
    prop_oneof![
        any::<String>(),
        "\\PC{0,40}",
        (time.clone(), any::<String>(), any::<String>(), any::<String>())
            .prop_map(|(at, a, b, c)| json!([at, a, b, c]).to_string()),
        (time, any::<String>()).prop_map(|(at, id)| json!([at, id]).to_string()),
        prop::collection::vec(any::<i64>(), 0..6).prop_map(|numbers| json!(numbers).to_string()),
    ]
}

/// The console's page cursors (the records browser's `after`, the audit log's `before`) under
/// generated text, through the real server functions: a page, or `400 not a page cursor`;
/// never a 5xx. And a cursor the server made continues its page: no row twice.
#[test]
fn page_cursors_are_parsed_or_refused_never_a_5xx() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (app, operator) = runtime.block_on(async {
        let app = crate::support::TestApp::on(crate::support::DialectName::Sqlite)
            .tenant("acme", "1000.00")
            .in_process()
            .await;
        for index in 0..3 {
            let body = json!({
                "accountId": "acc_1",
                "amount": "1.00",
                "currency": "EUR",
                "merchantReference": format!("cursor-{index}"),
            });
            assert_eq!(
                app.pay(&format!("cursor-{index}"), body.to_string())
                    .await
                    .status(),
                201
            );
        }
        let operator = app
            .console("cursors", domain::operator::OperatorRole::Viewer)
            .await;
        (app, operator)
    });
    let records = |after: &str| {
        vec![
            ("filter[status]", String::new()),
            ("filter[step]", String::new()),
            ("filter[tenant]", String::new()),
            ("filter[operation]", String::new()),
            ("filter[key_prefix]", String::new()),
            ("filter[from]", String::new()),
            ("filter[to]", String::new()),
            ("filter[after]", after.to_owned()),
        ]
    };
    let call = |endpoint: &'static str, form: Vec<(&'static str, String)>| {
        runtime.block_on(async {
            let form: Vec<(&str, &str)> = form.iter().map(|(name, value)| (*name, value.as_str())).collect();
            let response = operator.call(endpoint, &form).await;
            let status = response.status().as_u16();
            (status, response.text().await.expect("body"))
        })
    };
    let cases = crate::support::proptest_cases(300);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases));
    runner
        .run(&cursor_text(), |text| {
            for (endpoint, form) in [
                ("records", records(&text)),
                ("audit", vec![("before", text.clone())]),
            ] {
                let (status, body) = call(endpoint, form);
                prop_assert!(
                    status == 200 || (status == 400 && body.contains("not a page cursor")),
                    "{endpoint} with {text:?}: {status} {body}"
                );
            }
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));

    // A cursor the server made continues after its row.
    let (status, first) = call("records", records(""));
    assert_eq!(status, 200, "{first}");
    let first: Value = serde_json::from_str(&first).expect("json");
    let rows = first["rows"].as_array().expect("rows");
    let cursor = rows[0]["cursor"].as_str().expect("a row's cursor").to_owned();
    let (status, rest) = call("records", records(&cursor));
    assert_eq!(status, 200, "{rest}");
    let rest: Value = serde_json::from_str(&rest).expect("json");
    let (all, after) = (keys_of(&first), keys_of(&rest));
    assert_eq!(
        after,
        all[1..],
        "the page continues strictly after the cursor's row"
    );
    drop(app);
}
