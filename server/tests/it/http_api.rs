//! The HTTP surface served in-process over a real database of each dialect.

use crate::support::{Dialect, TestDatabase, conformance, spawn_app, spawn_app_with_store};
use app::dto::{OperatorRole, Overview};
use serde_json::Value;

conformance! {
    async fn health_and_readiness_answer(db) {
        let app = spawn_app(db).await;
        let health = app.get("/healthz").await;
        assert_eq!(health.status(), 200);
        assert_eq!(health.json::<Value>().await.expect("json")["status"], "ok");

        let ready = app.get("/readyz").await;
        assert_eq!(ready.status(), 200);
        assert_eq!(ready.json::<Value>().await.expect("json")["status"], "ready");
    }

    async fn readiness_fails_while_migrations_are_pending(db) {
        let store = db.store().await;
        let app = spawn_app_with_store(db, store).await;
        assert_eq!(app.get("/healthz").await.status(), 200, "alive even when not ready");
        let ready = app.get("/readyz").await;
        assert_eq!(ready.status(), 503);
        assert!(ready.headers().contains_key("retry-after"));
        let body: Value = ready.json().await.expect("json");
        assert_eq!(body["reason"], "migrations_pending");
        assert_eq!(body["appliedMigrations"], 0);
    }

    async fn the_overview_server_function_reads_real_counts(db) {
        let mut app = spawn_app(db).await;
        app.sign_in("vera", OperatorRole::Viewer).await;
        let overview: Overview = app.server_fn("console/overview").await.json().await.expect("overview json");
        assert_eq!(overview.total(), 0);
        assert_eq!(overview.counts.len(), 6);

        app.db
            .execute(
                "insert into tenants (id, name) values ('ten_1', 'acme');
                 insert into idempotency_records (tenant_id, operation_name, idempotency_key,
                   fingerprint_version, request_fingerprint, canonical_command, status, progress_step,
                   created_by, expires_at)
                 values ('ten_1', 'create_payment', 'k1', 1, 'f', '{}', 'UNKNOWN_REQUIRES_RECOVERY',
                   'PROVIDER_REQUEST_SENT', 'key_1', '2030-01-01T00:00:00.000Z')",
            )
            .await
            .expect("arrange a record");
        let overview: Overview = app.server_fn("console/overview").await.json().await.expect("overview json");
        assert_eq!(overview.total(), 1);
    }

    async fn the_console_is_rendered_on_the_server_with_the_data(db) {
        let mut app = spawn_app(db).await;
        app.sign_in("vera", OperatorRole::Viewer).await;
        let page = app.get("/").await;
        assert_eq!(page.status(), 200);
        assert!(page.headers()["content-type"].to_str().expect("ascii").starts_with("text/html"));
        let html = page.text().await.expect("html");
        assert!(html.contains("<title>Overview · Idem</title>"), "{html}");
        assert!(html.contains(r#"data-status="UNKNOWN_REQUIRES_RECOVERY""#), "counts rendered: {html}");
        assert!(html.contains("/pkg/idem.js"), "hydration script referenced");
        assert!(html.contains("/pkg/idem.wasm"), "wasm named as the build names it");

        let sign_in = app.get("/sign-in").await;
        assert_eq!(sign_in.status(), 200);
        assert!(sign_in.text().await.expect("html").contains("Sign in to the Idem console"));

        let missing = app.get("/no-such-page").await;
        assert_eq!(missing.status(), 404);
    }
}

#[tokio::test]
async fn every_response_carries_a_request_id_and_keeps_the_callers() {
    let app = spawn_app(TestDatabase::create(Dialect::Sqlite).await).await;
    let generated = app.get("/healthz").await;
    let id = generated.headers()["x-request-id"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert_eq!(id.len(), 36, "a UUID: {id}");

    let echoed = app
        .client
        .get(app.url("/healthz"))
        .header("x-request-id", "caller-chosen-42")
        .send()
        .await
        .expect("GET");
    assert_eq!(echoed.headers()["x-request-id"], "caller-chosen-42");
}

#[tokio::test]
async fn static_assets_are_served_with_a_revalidation_policy() {
    let app = spawn_app(TestDatabase::create(Dialect::Sqlite).await).await;
    let css = app.get("/pkg/idem.css").await;
    assert_eq!(css.status(), 200);
    assert_eq!(css.headers()["cache-control"], "no-cache");
    let last_modified = css.headers()["last-modified"].clone();

    let revalidated = app
        .client
        .get(app.url("/pkg/idem.css"))
        .header("if-modified-since", last_modified)
        .send()
        .await
        .expect("GET");
    assert_eq!(revalidated.status(), 304);
    assert_eq!(app.get("/pkg/missing.js").await.status(), 404);
    assert!(app.site_root.path().join("pkg/idem.css").exists());
}

#[tokio::test]
async fn responses_are_compressed_when_the_client_accepts_gzip() {
    let app = spawn_app(TestDatabase::create(Dialect::Sqlite).await).await;
    let page = app
        .client
        .get(app.url("/sign-in"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .expect("GET");
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-encoding"], "gzip");
}

#[tokio::test]
async fn request_bodies_over_the_limit_are_refused() {
    let app = spawn_app(TestDatabase::create(Dialect::Sqlite).await).await;
    let response = app
        .client
        .post(app.url("/api/console/overview"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(vec![b'a'; 64 * 1024])
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), 413);
}

#[tokio::test]
async fn readiness_fails_when_the_database_goes_away() {
    let mut app = spawn_app(TestDatabase::create(Dialect::Postgres).await).await;
    app.sign_in("vera", OperatorRole::Viewer).await;
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

    let overview = app.server_fn("console/overview").await;
    assert!(
        overview.status().is_server_error(),
        "the console reports the outage: {}",
        overview.status()
    );
}
