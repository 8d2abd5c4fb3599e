//! Liveness and readiness for orchestrators and for the Quick start's checks.

use super::AppState;
use super::openapi::Health;
use crate::store::Readiness;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The process is up and answering.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "Up: `{\"status\":\"ok\"}`", body = Health)))]
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// The process can do its job: the database answers and every migration is applied.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready: `{\"status\":\"ready\"}`", body = Health),
        (status = 503, description = "Not ready: reason `database_unavailable`, `migrations_pending` or `response_key_missing`", body = Health,
            headers(("Retry-After" = String, description = "seconds"))),
    ))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    // The detail names key ids and files: for the log, not for whoever can reach the port.
    if let Some(detail) = state.engine.response_keys_unready() {
        tracing::warn!(%detail, "readiness check: a response key is missing");
        return not_ready(json!({ "status": "not_ready", "reason": "response_key_missing" }));
    }
    match state.store.readiness().await {
        Ok(Readiness::Ready) => Json(json!({ "status": "ready" })).into_response(),
        Ok(Readiness::MigrationsPending { applied, expected }) => not_ready(json!({
            "status": "not_ready",
            "reason": "migrations_pending",
            "appliedMigrations": applied,
            "expectedMigrations": expected,
        })),
        Err(error) => {
            tracing::warn!(%error, "readiness check: database unreachable");
            not_ready(json!({ "status": "not_ready", "reason": "database_unavailable" }))
        }
    }
}

fn not_ready(body: serde_json::Value) -> Response {
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}
