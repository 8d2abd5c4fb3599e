//! The HTTP surface served in-process over a real database of each dialect.

use crate::support::{
    DialectName, STYLESHEET, TestApp, TestDatabase, conformance, expect_error, gzipped_stylesheet,
};
use app::dashboard::model::Dashboard;
use domain::operator::OperatorRole;
use reqwest::Method;
use serde_json::Value;

async fn health_and_readiness_answer(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let health = app.get("/healthz").await;
    assert_eq!(health.status(), 200);
    assert_eq!(health.json::<Value>().await.expect("json")["status"], "ok");

    let ready = app.get("/readyz").await;
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<Value>().await.expect("json")["status"], "ready");
}

async fn readiness_fails_while_migrations_are_pending(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let expected = app.db.query_i64("select count(*) from _sqlx_migrations").await;
    // The database lost track of one migration (as if this binary were newer than the
    // schema): the instance keeps running, but says it is not ready.
    app.db
        .execute("delete from _sqlx_migrations where version = (select max(version) from _sqlx_migrations)")
        .await
        .expect("forget a migration");
    assert_eq!(
        app.get("/healthz").await.status(),
        200,
        "alive even when not ready"
    );
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status(), 503);
    assert!(ready.headers().contains_key("retry-after"));
    let body: Value = ready.json().await.expect("json");
    assert_eq!(body["reason"], "migrations_pending");
    assert_eq!(body["appliedMigrations"], expected - 1);
    assert_eq!(body["expectedMigrations"], expected);
}

async fn the_dashboard_reads_outcome_buckets_and_live_gauges(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let console = app.console("vera", OperatorRole::Viewer).await;
    let dashboard: Dashboard = console
        .call("dashboard", &[("range", "1h"), ("tenant", ""), ("operation", "")])
        .await
        .json()
        .await
        .expect("dashboard json");
    assert_eq!(dashboard.series.len(), 8);
    assert_eq!(dashboard.series[0].points.len(), 60, "one point per minute");
    assert!(dashboard.series.iter().all(|series| series.total == 0));
    assert_eq!(dashboard.live.unknown, 0);

    let now = idem::store::rfc3339_millis(chrono::Utc::now());
    let minute = &now[..16];
    app.db
        .execute(&format!(
            "insert into tenants (id, name) values ('ten_1', 'acme');
             insert into idempotency_records (tenant_id, operation_name, idempotency_key,
               fingerprint_version, request_fingerprint, canonical_command, status, progress_step,
               created_by, expires_at)
             values ('ten_1', 'create_payment', 'k1', 1, 'f', '{{}}', 'UNKNOWN_REQUIRES_RECOVERY',
               'PROVIDER_REQUEST_SENT', 'key_1', '2030-01-01T00:00:00.000Z');
             insert into outcome_buckets (bucket_start, tenant_id, operation_name, outcome, count)
             values ('{minute}:00.000Z', 'ten_1', 'create_payment', 'replay', 3),
                    ('{minute}:00.000Z', 'ten_1', 'create_payment', 'conflict_different_request', 2),
                    ('2020-01-01T00:00:00.000Z', 'ten_1', 'create_payment', 'replay', 100)"
        ))
        .await
        .expect("arrange a record and counts");
    let total = |dashboard: &Dashboard, outcome: &str| {
        dashboard
            .series
            .iter()
            .find(|series| series.outcome.as_str() == outcome)
            .expect("series")
            .total
    };
    let dashboard: Dashboard = console
        .call(
            "dashboard",
            &[
                ("range", "1h"),
                ("tenant", "ten_1"),
                ("operation", "create_payment"),
            ],
        )
        .await
        .json()
        .await
        .expect("dashboard json");
    assert_eq!(total(&dashboard, "replay"), 3, "only the range is counted");
    assert_eq!(total(&dashboard, "conflict_different_request"), 2);
    assert_eq!(dashboard.live.unknown, 1);
    assert_eq!(dashboard.tenants.len(), 1);
    let other_tenant: Dashboard = console
        .call(
            "dashboard",
            &[("range", "7d"), ("tenant", "ten_other"), ("operation", "")],
        )
        .await
        .json()
        .await
        .expect("dashboard json");
    assert_eq!(total(&other_tenant, "replay"), 0, "filtered by tenant");
}

async fn the_console_is_rendered_on_the_server_with_the_data(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let console = app.console("vera", OperatorRole::Viewer).await;
    let page = console.get("/").await;
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with("text/html")
    );
    let html = page.text().await.expect("html");
    let seen = page_text(&html);
    assert!(
        html.contains("<title>Dashboard · Idem</title>"),
        "the dashboard, not: {seen}"
    );
    assert!(
        html.contains(r#"data-gauge="unknown""#),
        "gauges rendered on the server: {seen}"
    );
    assert!(
        html.contains(r#"data-series="replay""#),
        "charts rendered on the server: {seen}"
    );
    assert!(html.contains("/pkg/idem.js"), "hydration script referenced");
    assert!(
        html.contains("/pkg/idem.wasm"),
        "wasm named as the build names it"
    );

    let sign_in = console.get("/sign-in").await;
    assert_eq!(sign_in.status(), 200);
    assert!(
        sign_in
            .text()
            .await
            .expect("html")
            .contains("Sign in to the Idem console")
    );

    let missing = console.get("/no-such-page").await;
    assert_eq!(missing.status(), 404);
}

conformance!(
    health_and_readiness_answer,
    readiness_fails_while_migrations_are_pending,
    the_dashboard_reads_outcome_buckets_and_live_gauges,
    the_console_is_rendered_on_the_server_with_the_data
);

/// What a person would read on a page (no scripts, no tags), short enough for a failure
/// message: a whole server-rendered page would push the reason out of CI's log excerpt.
fn page_text(html: &str) -> String {
    let without_scripts = html
        .split("<script")
        .map(|part| part.split_once("</script>").map_or(part, |(_, after)| after))
        .collect::<String>();
    let mut text = String::new();
    let mut in_tag = false;
    for character in without_scripts.chars() {
        match character {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                text.push(' ');
            }
            _ if !in_tag => text.push(character),
            _ => {}
        }
    }
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    words.chars().take(600).collect()
}

#[tokio::test]
async fn every_response_carries_a_request_id_and_keeps_the_callers() {
    let app = TestApp::on(DialectName::Sqlite).in_process().await;
    let generated = app.get("/healthz").await;
    let id = generated.headers()["x-request-id"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert_eq!(id.len(), 36, "a UUID: {id}");

    let echoed = app
        .http
        .get(app.url("/healthz"))
        .header("x-request-id", "caller-chosen-42")
        .send()
        .await
        .expect("GET");
    assert_eq!(echoed.headers()["x-request-id"], "caller-chosen-42");
}

#[tokio::test]
async fn static_assets_are_served_with_a_revalidation_policy() {
    let app = TestApp::on(DialectName::Sqlite).in_process().await;
    let css = app.get("/pkg/idem.css").await;
    assert_eq!(css.status(), 200);
    assert_eq!(css.headers()["cache-control"], "no-cache");
    let last_modified = css.headers()["last-modified"].clone();
    assert_eq!(
        css.text().await.expect("text"),
        STYLESHEET,
        "the built stylesheet itself"
    );

    let revalidated = app
        .http
        .get(app.url("/pkg/idem.css"))
        .header("if-modified-since", last_modified)
        .send()
        .await
        .expect("GET");
    assert_eq!(revalidated.status(), 304);
    assert_eq!(app.get("/pkg/missing.js").await.status(), 404);
}

/// Pages are compressed as they are answered; the console's assets were gzipped by the build,
/// and that file is sent byte for byte, never compressed again per request.
#[tokio::test]
async fn responses_are_compressed_when_the_client_accepts_gzip() {
    let app = TestApp::on(DialectName::Sqlite).in_process().await;
    let accepting_gzip = |path: &str| {
        app.http
            .get(app.url(path))
            .header("accept-encoding", "gzip")
            .send()
    };
    let page = accepting_gzip("/sign-in").await.expect("GET");
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-encoding"], "gzip");

    let css = accepting_gzip("/pkg/idem.css").await.expect("GET");
    assert_eq!(css.status(), 200);
    assert_eq!(css.headers()["content-encoding"], "gzip");
    assert_eq!(css.headers()["cache-control"], "no-cache");
    assert_eq!(
        css.bytes().await.expect("body").as_ref(),
        gzipped_stylesheet(),
        "the build's file, byte for byte"
    );
}

#[tokio::test]
async fn request_bodies_over_the_limit_are_refused() {
    let app = TestApp::on(DialectName::Sqlite).in_process().await;
    let response = app
        .http
        .post(app.url("/api/console/dashboard"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(vec![b'a'; 64 * 1024])
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), 413);
}

#[tokio::test]
async fn readiness_fails_when_the_database_goes_away() {
    let app = TestApp::on(DialectName::Postgres).in_process().await;
    let console = app.console("vera", OperatorRole::Viewer).await;
    assert_eq!(app.get("/readyz").await.status(), 200);

    app.db.drop_now().await;
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status(), 503);
    assert_eq!(
        ready.json::<Value>().await.expect("json")["reason"],
        "database_unavailable"
    );
    assert_eq!(
        app.get("/healthz").await.status(),
        200,
        "the process itself is still alive"
    );

    let dashboard = console
        .call("dashboard", &[("range", "1h"), ("tenant", ""), ("operation", "")])
        .await;
    assert!(
        dashboard.status().is_server_error(),
        "the console reports the outage: {}",
        dashboard.status()
    );
}

/// Building a router lists the console's routes with resource loading suppressed for the whole
/// process (leptos issue #4773): a page whose resource started meanwhile used to wait forever,
/// answered 503 by the request timeout. Routers are built here, on other threads, while pages
/// render; every page must come back complete.
#[test]
fn pages_render_whole_while_other_routers_are_built() {
    let on_own_runtime = |work: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>| {
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(work)
        })
    };
    let builders = (0..4).map(|_| {
        on_own_runtime(Box::pin(async {
            for _ in 0..8 {
                TestApp::on(DialectName::Sqlite).in_process().await;
            }
        }))
    });
    let renderers = (0..4).map(|_| {
        on_own_runtime(Box::pin(async {
            let app = TestApp::on(DialectName::Sqlite).in_process().await;
            for _ in 0..50 {
                let page = app.get("/sign-in").await;
                assert_eq!(page.status(), 200, "a page stalled while a router was built");
                assert!(page.text().await.expect("html").contains("</html>"));
            }
        }))
    });
    for thread in builders.chain(renderers).collect::<Vec<_>>() {
        thread.join().expect("no page stalled");
    }
}

/// On the shared port, a request that is clearly an API call (an API path, a bearer key, JSON
/// without HTML) gets the API's answers in the contract's shape, however wrong its path or
/// method; a browser keeps the console's (sign-in redirect, Origin check, its 404 page).
#[tokio::test]
async fn an_api_caller_is_told_of_a_wrong_path_or_method_and_a_browser_still_gets_the_console() {
    let app = TestApp::on(DialectName::Sqlite)
        .tenant("acme", "100.00")
        .in_process()
        .await;
    let key = app.key("acme");
    let payment = r#"{"accountId":"acc_1","amount":"1.00","currency":"EUR","merchantReference":"inv-1"}"#;
    let not_found = async |response: reqwest::Response| {
        assert_eq!(response.headers()["content-type"], "application/json");
        let body = expect_error(response, 404, "NOT_FOUND").await;
        assert_eq!(body["retryable"], false, "{body}");
    };

    // The issue's table, row by row.
    let typo = app
        .request(Method::POST, "/payment", key)
        .header("content-type", "application/json")
        .header("idempotency-key", "k-typo")
        .body(payment)
        .send()
        .await
        .expect("POST");
    not_found(typo).await;
    let below_a_payment = app
        .request(Method::POST, "/payments/pay_x/nothing", key)
        .send()
        .await
        .expect("POST");
    not_found(below_a_payment).await;
    // `GET /refunds` is the look-up by key now (the contract's section on finding a resource by
    // its key): without its key it is the API's 400; a path beside it is still not found.
    let refunds = app
        .request(Method::GET, "/refunds", key)
        .send()
        .await
        .expect("GET");
    expect_error(refunds, 400, "IDEMPOTENCY_KEY_MISSING").await;
    let refund_typo = app
        .request(Method::GET, "/refund", key)
        .send()
        .await
        .expect("GET");
    not_found(refund_typo).await;
    let delete = app
        .request(Method::DELETE, "/payments/pay_0000000000000000", key)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(delete.headers()["allow"], "GET, HEAD");
    assert_eq!(delete.headers()["content-type"], "application/json");
    let body = expect_error(delete, 405, "METHOD_NOT_ALLOWED").await;
    assert_eq!(body["details"]["allowed"], serde_json::json!(["GET", "HEAD"]));
    assert_eq!(body["retryable"], false);

    // Each sign of an API call alone is enough: its path, its key, JSON without HTML.
    let unauthenticated_api_path = app
        .http
        .post(app.url("/payments/pay_x/nothing"))
        .send()
        .await
        .expect("POST");
    not_found(unauthenticated_api_path).await;
    let bearer_on_a_console_path = app
        .request(Method::GET, "/records", key)
        .send()
        .await
        .expect("GET");
    not_found(bearer_on_a_console_path).await;
    let asks_for_json = app
        .http
        .get(app.url("/nothing"))
        .header("accept", "application/json")
        .send()
        .await
        .expect("GET");
    not_found(asks_for_json).await;
    let sends_json = app
        .http
        .post(app.url("/payment"))
        .header("content-type", "application/json")
        .body(payment)
        .send()
        .await
        .expect("POST");
    not_found(sends_json).await;
    let wrong_method_on_the_collection = app
        .request(Method::PUT, "/payments", key)
        .send()
        .await
        .expect("PUT");
    assert_eq!(
        wrong_method_on_the_collection.headers()["allow"],
        "POST, GET, HEAD"
    );
    expect_error(wrong_method_on_the_collection, 405, "METHOD_NOT_ALLOWED").await;
    assert_eq!(
        app.db.query_i64("select count(*) from payments").await,
        0,
        "nothing was paid"
    );

    // A browser on the same port: the console, as before.
    let browser = app.browser();
    let unknown_page = browser.get("/no-such-page").await;
    assert_eq!(unknown_page.status(), 303);
    assert_eq!(unknown_page.headers()["location"], "/sign-in?next=/no-such-page");
    let cross_origin = app
        .http
        .post(app.url("/records"))
        .header("origin", "https://elsewhere.example")
        .form(&[("q", "1")])
        .send()
        .await
        .expect("POST");
    assert_eq!(cross_origin.status(), 403);
    assert_eq!(
        cross_origin.text().await.expect("text"),
        "cross-origin request refused\n"
    );
    assert_eq!(
        browser.call("whoami", &[]).await.status(),
        401,
        "a server function, unsigned"
    );
    let console = app.console("vera", OperatorRole::Viewer).await;
    let signed_in_unknown_page = console.get("/no-such-page").await;
    assert_eq!(signed_in_unknown_page.status(), 404);
    assert!(
        signed_in_unknown_page
            .text()
            .await
            .expect("html")
            .contains("Not found")
    );
    assert_eq!(console.call("whoami", &[]).await.status(), 200);
}
