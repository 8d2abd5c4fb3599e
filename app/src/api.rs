//! Server functions: the console's only way to reach the server. Each one runs on the server
//! (under `ssr`) and is a typed HTTP call from the browser (under `hydrate`). Each starts by
//! checking the caller's role on the server: deny by default.

use crate::dto::{
    AdminChange, AdminOutcome, Administration, AuditEntryView, BulkJobView, BulkSelection, CurrentOperator,
    Dashboard, EventsOverview, GroupChoice, LateChargeRefundPreview, OverrideRequestView, ReconcilePreview,
    ReconcileResult, RecordDetail, RecordFilter, RecordPage, RecordRef, RecordSummary, RecoveryQueue,
    RedriveResult, RetryWindow, RevealedResponse,
};
#[cfg(feature = "ssr")]
use domain::operator::OperatorRole;
use domain::queue::QueueQuery;
use domain::recovery::BulkControl;
use domain::recovery::OverrideOutcome;
use domain::recovery::ReconcileAction;
use leptos::prelude::*;
use leptos::server_fn::codec::Json;

/// A backend failure as the caller gets it: 400 for a request that cannot be carried out as
/// asked (the message says why), 503 when the store is unavailable.
#[cfg(feature = "ssr")]
fn failed(error: crate::backend::ConsoleError) -> ServerFnError {
    use crate::backend::ConsoleError;
    let status = match error {
        ConsoleError::Invalid(_) => http::StatusCode::BAD_REQUEST,
        ConsoleError::StoreUnavailable => http::StatusCode::SERVICE_UNAVAILABLE,
    };
    crate::auth::refused(status, error.to_string())
}

/// The signed-in operator (the server refuses this call without a session).
#[server(endpoint = "console/whoami")]
pub async fn whoami() -> Result<CurrentOperator, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)
}

/// Outcome series over `range` (`15m`, `1h`, `24h`, `7d`) and the live gauges.
#[server(endpoint = "console/dashboard")]
pub async fn get_dashboard(
    range: String,
    tenant: String,
    operation: String,
) -> Result<Dashboard, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    let range = crate::dto::DashboardRange::parse(&range).unwrap_or_default();
    crate::backend::backend()?
        .dashboard(range, tenant, operation)
        .await
        .map_err(failed)
}

/// Retry delays against the window, per operation, over `range` (as the dashboard's).
#[server(endpoint = "console/retry-windows")]
pub async fn get_retry_windows(
    range: String,
    tenant: String,
    operation: String,
) -> Result<Vec<RetryWindow>, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    let range = crate::dto::DashboardRange::parse(&range).unwrap_or_default();
    crate::backend::backend()?
        .retry_windows(range, tenant, operation)
        .await
        .map_err(failed)
}

/// One page of the records browser.
#[server(endpoint = "console/records")]
pub async fn list_records(filter: RecordFilter) -> Result<RecordPage, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?.records(filter).await.map_err(failed)
}

/// Exact look-up by idempotency key, payment id or provider charge id.
#[server(endpoint = "console/find")]
pub async fn find_records(needle: String) -> Result<Vec<RecordSummary>, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?.find(needle).await.map_err(failed)
}

#[server(endpoint = "console/record")]
pub async fn get_record(record: RecordRef) -> Result<Option<RecordDetail>, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?.record(record).await.map_err(failed)
}

/// A page of the recovery queue: the records needing attention that match `query`.
#[server(endpoint = "console/recovery-queue", input = Json)]
pub async fn get_recovery_queue(query: QueueQuery) -> Result<RecoveryQueue, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?
        .recovery_queue(query)
        .await
        .map_err(failed)
}

/// The read-only first step of a reconciliation: asks the provider, changes nothing.
#[server(endpoint = "console/reconcile/preview")]
pub async fn preview_reconcile(record: RecordRef) -> Result<ReconcilePreview, ServerFnError> {
    crate::auth::require(OperatorRole::Operator)?;
    crate::backend::backend()?
        .preview_reconcile(record)
        .await
        .map_err(failed)
}

/// Applies a previewed reconciliation with the operator's reason.
#[server(endpoint = "console/reconcile/apply")]
pub async fn apply_reconcile(
    record: RecordRef,
    version: i64,
    action: ReconcileAction,
    reason: String,
) -> Result<ReconcileResult, ServerFnError> {
    let operator = crate::auth::require(OperatorRole::Operator)?;
    crate::backend::backend()?
        .apply_reconcile(&operator, record, version, action, reason)
        .await
        .map_err(failed)
}

/// Freezes the records of a bulk reconciliation on the server (every record matching a
/// filter, or those ticked, each at its version now) and previews them in the background.
#[server(endpoint = "console/bulk/select", input = Json)]
pub async fn select_for_bulk(selection: BulkSelection) -> Result<BulkJobView, ServerFnError> {
    let operator = crate::auth::require(OperatorRole::Operator)?;
    crate::backend::backend()?
        .select_for_bulk(&operator, selection)
        .await
        .map_err(failed)
}

/// Applies a previewed bulk job to the groups kept, under one name and one reason.
#[server(endpoint = "console/bulk/apply", input = Json)]
pub async fn apply_bulk_job(
    id: String,
    name: String,
    reason: String,
    choices: Vec<GroupChoice>,
) -> Result<BulkJobView, ServerFnError> {
    let operator = crate::auth::require(OperatorRole::Operator)?;
    crate::backend::backend()?
        .apply_bulk_job(&operator, id, name, reason, choices)
        .await
        .map_err(failed)
}

/// Pauses, resumes or aborts a bulk job.
#[server(endpoint = "console/bulk/control", input = Json)]
pub async fn control_bulk_job(id: String, control: BulkControl) -> Result<BulkJobView, ServerFnError> {
    let operator = crate::auth::require(OperatorRole::Operator)?;
    crate::backend::backend()?
        .control_bulk_job(&operator, id, control)
        .await
        .map_err(failed)
}

/// A bulk job: its preview's groups, progress and latest results.
#[server(endpoint = "console/bulk/job")]
pub async fn get_bulk_job(id: String) -> Result<Option<BulkJobView>, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?.bulk_job(id).await.map_err(failed)
}

/// Every bulk job, newest first.
#[server(endpoint = "console/bulk/jobs")]
pub async fn list_bulk_jobs() -> Result<Vec<BulkJobView>, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?.bulk_jobs().await.map_err(failed)
}

/// An admin asks for an override without the provider's evidence; a second admin decides.
#[server(endpoint = "console/overrides/request", input = Json)]
pub async fn request_override(
    record: RecordRef,
    version: i64,
    outcome: OverrideOutcome,
    reason: String,
) -> Result<OverrideRequestView, ServerFnError> {
    let admin = crate::auth::require(OperatorRole::Admin)?;
    crate::backend::backend()?
        .request_override(&admin, record, version, outcome, reason)
        .await
        .map_err(failed)
}

#[server(endpoint = "console/overrides")]
pub async fn list_overrides() -> Result<Vec<OverrideRequestView>, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?.overrides().await.map_err(failed)
}

/// A second admin approves (and so applies) or rejects an override request.
#[server(endpoint = "console/overrides/decide")]
pub async fn decide_override(
    id: String,
    approve: bool,
    reason: String,
) -> Result<OverrideRequestView, ServerFnError> {
    let admin = crate::auth::require(OperatorRole::Admin)?;
    crate::backend::backend()?
        .decide_override(&admin, id, approve, reason)
        .await
        .map_err(failed)
}

/// The events page: backlog, consumer lag, dead letters.
#[server(endpoint = "console/events")]
pub async fn get_events() -> Result<EventsOverview, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?.events().await.map_err(failed)
}

/// Re-drives exactly the dead letters the operator saw (event id, dead since), with a reason.
#[server(endpoint = "console/events/redrive", input = Json)]
pub async fn redrive_events(
    dead_letters: Vec<(String, String)>,
    reason: String,
) -> Result<Vec<RedriveResult>, ServerFnError> {
    let operator = crate::auth::require(OperatorRole::Operator)?;
    crate::backend::backend()?
        .redrive(&operator, dead_letters, reason)
        .await
        .map_err(failed)
}

/// What refunding a released payment's late charge would ask the provider (read-only).
#[server(endpoint = "console/late-charge/refund-preview")]
pub async fn preview_late_charge_refund(
    record: RecordRef,
    payment_id: String,
) -> Result<LateChargeRefundPreview, ServerFnError> {
    crate::auth::require(OperatorRole::Operator)?;
    crate::backend::backend()?
        .preview_late_charge_refund(record, payment_id)
        .await
        .map_err(failed)
}

/// Refunds a released payment's late charge through create_refund (one refund, whoever
/// clicks how often), audited with `reason`.
#[server(endpoint = "console/late-charge/refund")]
pub async fn refund_late_charge(
    record: RecordRef,
    payment_id: String,
    reason: String,
) -> Result<ReconcileResult, ServerFnError> {
    let operator = crate::auth::require(OperatorRole::Operator)?;
    crate::backend::backend()?
        .refund_late_charge(&operator, record, payment_id, reason)
        .await
        .map_err(failed)
}

/// An operator's word that a released payment's late charge was refunded at the provider.
#[server(endpoint = "console/late-charge/resolve")]
pub async fn resolve_late_charge(
    record: RecordRef,
    payment_id: String,
    reference: String,
) -> Result<ReconcileResult, ServerFnError> {
    let operator = crate::auth::require(OperatorRole::Operator)?;
    crate::backend::backend()?
        .resolve_late_charge(&operator, record, payment_id, reference)
        .await
        .map_err(failed)
}

/// The record's stored response, masked until an operator asks; every reveal is audited.
#[server(endpoint = "console/reveal")]
pub async fn reveal_response(record: RecordRef) -> Result<Option<RevealedResponse>, ServerFnError> {
    let operator = crate::auth::require(OperatorRole::Operator)?;
    crate::backend::backend()?
        .reveal_response(&operator, record)
        .await
        .map_err(failed)
}

#[server(endpoint = "console/audit")]
pub async fn get_audit(before: String) -> Result<Vec<AuditEntryView>, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?.audit(before).await.map_err(failed)
}

/// Operators, tenants and their API keys (admins only).
#[server(endpoint = "console/admin")]
pub async fn get_administration() -> Result<Administration, ServerFnError> {
    crate::auth::require(OperatorRole::Admin)?;
    crate::backend::backend()?.administration().await.map_err(failed)
}

/// One administrative change (admins only), audited in the admin's name.
#[server(endpoint = "console/admin/change", input = Json)]
pub async fn administer(change: AdminChange) -> Result<AdminOutcome, ServerFnError> {
    let admin = crate::auth::require(OperatorRole::Admin)?;
    crate::backend::backend()?
        .administer(&admin, change)
        .await
        .map_err(failed)
}
