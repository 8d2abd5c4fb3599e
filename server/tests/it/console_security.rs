//! The console's security matrix: every server function, called with valid arguments, without
//! a session, from another origin, and as every role. The role each needs is read from
//! every page's `app/src/<page>/api.rs` itself, so a new server function without a row here fails this test, and
//! so does one whose role check is missing.

use crate::support::{Console, TestApp, server_function_sources};
use domain::operator::OperatorRole;
use serde_json::{Value, json};
use std::collections::BTreeMap;

enum Arguments {
    Form(Vec<(&'static str, &'static str)>),
    Json(Value),
}

const RECORD: [(&str, &str); 3] = [
    ("record[tenant_id]", "ten_missing"),
    ("record[operation]", "create_payment"),
    ("record[key]", "k-missing"),
];

/// The records browser's filter, as its form names each field.
const RECORD_FILTER: [&str; 8] = [
    "filter[status]",
    "filter[step]",
    "filter[tenant]",
    "filter[operation]",
    "filter[key_prefix]",
    "filter[from]",
    "filter[to]",
    "filter[after]",
];

fn with_record(more: &[(&'static str, &'static str)]) -> Arguments {
    Arguments::Form(RECORD.iter().chain(more).copied().collect())
}

/// Valid arguments for every server function (naming things that do not exist: the role is
/// checked before anything is looked up).
fn calls() -> BTreeMap<&'static str, Arguments> {
    let record = json!({ "tenant_id": "ten_missing", "operation": "create_payment", "key": "k-missing" });
    let filters = [("range", "1h"), ("tenant", ""), ("operation", "")];
    BTreeMap::from([
        ("console/whoami", Arguments::Form(vec![])),
        ("console/dashboard", Arguments::Form(filters.to_vec())),
        ("console/retry-windows", Arguments::Form(filters.to_vec())),
        (
            "console/records",
            Arguments::Form(RECORD_FILTER.iter().map(|name| (*name, "")).collect()),
        ),
        ("console/find", Arguments::Form(vec![("needle", "k-missing")])),
        ("console/record", with_record(&[])),
        (
            "console/recovery-queue",
            Arguments::Json(json!({ "query": { "attention": "needs_operator" } })),
        ),
        ("console/reconcile/preview", with_record(&[])),
        (
            "console/reconcile/apply",
            with_record(&[
                ("version", "1"),
                ("action", "ApplyProviderResult"),
                ("reason", "provider statement OPS-1"),
            ]),
        ),
        (
            "console/bulk/select",
            Arguments::Json(json!({ "selection": { "Records": [record] } })),
        ),
        (
            "console/bulk/apply",
            Arguments::Json(json!({
                "id": "blk_missing",
                "name": "provider outage",
                "reason": "provider statement OPS-1",
                "choices": [],
            })),
        ),
        (
            "console/bulk/control",
            Arguments::Json(json!({ "id": "blk_missing", "control": "Abort" })),
        ),
        ("console/bulk/job", Arguments::Form(vec![("id", "blk_missing")])),
        ("console/bulk/jobs", Arguments::Form(vec![])),
        (
            "console/overrides/request",
            Arguments::Json(json!({
                "record": record,
                "version": 1,
                "outcome": "NotCharged",
                "reason": "the customer's bank statement (OPS-2)",
            })),
        ),
        ("console/overrides", Arguments::Form(vec![])),
        (
            "console/overrides/decide",
            Arguments::Form(vec![
                ("id", "ovr_missing"),
                ("approve", "false"),
                ("reason", "not enough evidence"),
            ]),
        ),
        ("console/events", Arguments::Form(vec![])),
        (
            "console/events/redrive",
            Arguments::Json(json!({
                "dead_letters": [["evt_missing", "2026-12-01T00:00:00Z"]],
                "reason": "broker is back (OPS-3)",
            })),
        ),
        (
            "console/late-charge/resolve",
            with_record(&[("payment_id", "pay_missing"), ("reference", "refund re_1")]),
        ),
        (
            "console/late-charge/refund-preview",
            with_record(&[("payment_id", "pay_missing")]),
        ),
        (
            "console/late-charge/refund",
            with_record(&[
                ("payment_id", "pay_missing"),
                ("reason", "customer charged twice"),
            ]),
        ),
        ("console/reveal", with_record(&[])),
        ("console/audit", Arguments::Form(vec![("before", "")])),
        ("console/admin", Arguments::Form(vec![])),
        (
            "console/admin/change",
            Arguments::Json(json!({ "change": { "RevokeApiKey": { "key_id": "key_missing" } } })),
        ),
    ])
}

/// Each server function's endpoint and the role its first line requires, from the source.
fn required_roles() -> BTreeMap<String, OperatorRole> {
    let source = server_function_sources();
    let mut roles = BTreeMap::new();
    for declared in source.split("#[server(endpoint = \"").skip(1) {
        let endpoint = declared.split('"').next().expect("an endpoint");
        let body = declared.split("#[server(").next().expect("the function");
        let role = body
            .split("require(OperatorRole::")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .unwrap_or_else(|| panic!("{endpoint} checks no role"));
        let role: OperatorRole = role.to_lowercase().parse().expect("a role");
        roles.insert(endpoint.to_owned(), role);
    }
    roles
}

/// Calls `endpoint` as `console` (its session, if any) from `origin` (`None`: no Origin header).
async fn call(
    console: &Console,
    origin: Option<&str>,
    endpoint: &str,
    arguments: &Arguments,
) -> (u16, String) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let mut request = client.post(console.url(&format!("/api/{endpoint}")));
    if let Some(cookie) = &console.cookie {
        request = request.header("cookie", cookie);
    }
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    request = match arguments {
        Arguments::Form(form) => request.form(form),
        Arguments::Json(body) => request.json(body),
    };
    let response = request.send().await.expect("server function");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

#[tokio::test]
async fn every_server_function_refuses_no_session_another_origin_and_a_lesser_role() {
    let app = TestApp::on(crate::support::DialectName::Postgres)
        .tenant("acme", "100.00")
        .in_process()
        .await;
    let roles = required_roles();
    let calls = calls();
    assert_eq!(
        roles.keys().map(String::as_str).collect::<Vec<_>>(),
        calls.keys().copied().collect::<Vec<_>>(),
        "every server function has its arguments here"
    );
    // What changes something or opens a stored response is never a viewer's; what manages
    // people, keys and overrides is an admin's.
    for (endpoint, least) in [
        ("console/reconcile/preview", OperatorRole::Operator),
        ("console/reconcile/apply", OperatorRole::Operator),
        ("console/bulk/select", OperatorRole::Operator),
        ("console/bulk/apply", OperatorRole::Operator),
        ("console/bulk/control", OperatorRole::Operator),
        ("console/events/redrive", OperatorRole::Operator),
        ("console/late-charge/resolve", OperatorRole::Operator),
        ("console/late-charge/refund-preview", OperatorRole::Operator),
        ("console/late-charge/refund", OperatorRole::Operator),
        ("console/reveal", OperatorRole::Operator),
        ("console/overrides/request", OperatorRole::Admin),
        ("console/overrides/decide", OperatorRole::Admin),
        ("console/admin", OperatorRole::Admin),
        ("console/admin/change", OperatorRole::Admin),
    ] {
        assert!(roles[endpoint] >= least, "{endpoint} needs {least} at least");
    }
    let nobody = app.browser();
    let signed_in = [
        (
            OperatorRole::Viewer,
            app.console("vera", OperatorRole::Viewer).await,
        ),
        (
            OperatorRole::Operator,
            app.console("otto", OperatorRole::Operator).await,
        ),
        (OperatorRole::Admin, app.console("ada", OperatorRole::Admin).await),
    ];
    let admin = &signed_in[2].1;
    let own = admin.origin().to_owned();
    let audit_entries = || app.db.query_i64("select count(*) from audit_log");
    for (endpoint, arguments) in &calls {
        let required = roles[*endpoint];
        let (status, body) = call(&nobody, Some(&own), endpoint, arguments).await;
        assert_eq!(status, 401, "{endpoint} without a session: {body}");

        // A bulk job an earlier call started audits its items in the background: it must be
        // done before the count, or its entries would look like the refused calls' writes.
        app.db
            .eventually_equals(
                "select count(*) from bulk_jobs where state in ('previewing', 'running')",
                0,
                "bulk jobs started by earlier calls finish",
            )
            .await;
        let before = audit_entries().await;
        for origin in [Some("http://evil.example"), None] {
            let (status, body) = call(admin, origin, endpoint, arguments).await;
            assert_eq!(status, 403, "{endpoint} from {origin:?}: {body}");
        }
        assert_eq!(
            audit_entries().await,
            before,
            "{endpoint}: a refused origin writes nothing"
        );

        for (role, console) in &signed_in {
            let (status, body) = call(console, Some(&own), endpoint, arguments).await;
            if *role < required {
                assert_eq!(status, 403, "{endpoint} as {role}: {body}");
                assert!(
                    body.contains(&format!("needs the {required} role")),
                    "{endpoint}: {body}"
                );
            } else {
                assert!(
                    ![401, 403, 500].contains(&status),
                    "{endpoint} as {role} is let through to its own checks: {status} {body}"
                );
            }
        }
    }
}

/// What an attacker types into a filter or a text field.
fn corpus() -> Vec<String> {
    let mut corpus: Vec<String> = [
        "' or '1'='1",
        "k-known' --",
        "'; drop table idempotency_records; --",
        "%",
        "_",
        "k-%",
        "\\",
        "<script>alert(1)</script>",
        "\"><img src=x onerror=alert(1)>",
        "../../../etc/passwd",
        "..%2f..%2fetc%2fpasswd",
        "\u{202e}kcatta",
        "k-known\u{200b}",
        "\u{0007}\u{001b}[31m",
        "${jndi:ldap://example.invalid/a}",
        "😀",
        "",
    ]
    .iter()
    .map(|text| (*text).to_owned())
    .collect();
    corpus.push("a".repeat(10_000));
    corpus
}

#[tokio::test]
async fn hostile_text_in_every_filter_and_field_finds_nothing_renders_escaped_and_breaks_nothing() {
    let app = TestApp::on(crate::support::DialectName::Postgres)
        .tenant("acme", "100.00")
        .in_process()
        .await;
    let body = r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"known"}"#;
    assert_eq!(app.pay("k-known", body).await.status(), 201);
    let operator = app.console("otto", OperatorRole::Operator).await;
    let own = operator.origin().to_owned();
    let records_before = app.db.query_i64("select count(*) from idempotency_records").await;

    for text in corpus() {
        let text = text.as_str();
        let shown = text.chars().take(40).collect::<String>();
        // Look-ups: exact matches only, so nothing is found.
        let (status, body) = call_form(&operator, &own, "console/find", &[("needle".to_owned(), text)]).await;
        assert_eq!(status, 200, "find {shown:?}: {body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).expect("json"),
            json!([]),
            "find {shown:?}"
        );
        for field in ["tenant", "operation", "key_prefix"] {
            let named = format!("filter[{field}]");
            let form: Vec<(String, &str)> = RECORD_FILTER
                .iter()
                .map(|name| ((*name).to_owned(), if *name == named { text } else { "" }))
                .collect();
            let (status, body) = call_form(&operator, &own, "console/records", &form).await;
            assert!(
                [200, 400].contains(&status),
                "records {field}={shown:?}: {status} {body}"
            );
            // Empty is "any", the one text that may list the record.
            if status == 200 && !text.is_empty() {
                let page: Value = serde_json::from_str(&body).expect("json");
                assert_eq!(page["rows"], json!([]), "records {field}={shown:?}");
            } else {
                assert!(
                    body.contains("tenant") || body.contains("operation") || body.contains("key"),
                    "{body}"
                );
            }
        }
        let filters: Vec<(String, &str)> = ["range", "tenant", "operation"]
            .iter()
            .map(|name| ((*name).to_owned(), text))
            .collect();
        let (status, body) = call_form(&operator, &own, "console/dashboard", &filters).await;
        // Three 10,000-character filters are over the console's body limit: refused as such.
        assert!(
            [200, 413].contains(&status),
            "dashboard {shown:?}: {status} {body}"
        );
        // A reason goes with the change it explains: here there is none (no such record, or a
        // reason too short to be one).
        let mut apply: Vec<(String, &str)> = RECORD
            .iter()
            .map(|(name, value)| ((*name).to_owned(), *value))
            .collect();
        apply.extend([
            ("version".to_owned(), "1"),
            ("action".to_owned(), "ApplyProviderResult"),
            ("reason".to_owned(), text),
        ]);
        let (status, body) = call_form(&operator, &own, "console/reconcile/apply", &apply).await;
        assert!(
            [200, 400].contains(&status),
            "apply with reason {shown:?}: {status} {body}"
        );
        if status == 200 {
            let result: Value = serde_json::from_str(&body).expect("json");
            assert_eq!(result["ok"], false, "apply with reason {shown:?}: {body}");
        }

        // Rendered on the server, escaped.
        let page = operator
            .get(&format!(
                "/records?key_prefix={}&q={}",
                urlencode(text),
                urlencode(text)
            ))
            .await;
        assert!(
            [200, 400, 414].contains(&page.status().as_u16()),
            "{shown:?}: {}",
            page.status()
        );
        let html = page.text().await.expect("html");
        for raw in ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>"] {
            assert!(!html.contains(raw), "{raw} rendered unescaped");
        }
        if text == "<script>alert(1)</script>" {
            assert!(
                html.contains("&lt;script&gt;alert(1)&lt;/script&gt;")
                    || html.contains("&lt;script>alert(1)&lt;/script>"),
                "the filter is shown back, escaped"
            );
        }
    }
    assert_eq!(
        app.db.query_i64("select count(*) from idempotency_records").await,
        records_before,
        "nothing written, nothing dropped"
    );
    assert_eq!(app.db.query_i64("select count(*) from payments").await, 1);
}

/// A form server function with `form` (its names and values made at run time).
async fn call_form(
    console: &Console,
    origin: &str,
    endpoint: &str,
    form: &[(String, &str)],
) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(console.url(&format!("/api/{endpoint}")))
        .header("cookie", console.cookie.as_deref().expect("signed in"))
        .header("origin", origin)
        .form(form)
        .send()
        .await
        .expect("records");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}
