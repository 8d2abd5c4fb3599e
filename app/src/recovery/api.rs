//! The server functions of this feature; each checks the caller's role first.

use crate::recovery::model::BulkJobView;
use crate::recovery::model::BulkSelection;
use crate::recovery::model::GroupChoice;
use crate::recovery::model::RecoveryQueue;
#[cfg(feature = "ssr")]
use domain::operator::OperatorRole;
use domain::queue::QueueQuery;
use domain::recovery::BulkControl;

#[cfg(feature = "ssr")]
use crate::backend::failed;
use leptos::prelude::*;
use leptos::server_fn::codec::Json;

/// A page of the recovery queue: the records needing attention that match `query`.
#[server(endpoint = "console/recovery-queue", input = Json)]
pub async fn get_recovery_queue(query: QueueQuery) -> Result<RecoveryQueue, ServerFnError> {
    crate::auth::require(OperatorRole::Viewer)?;
    crate::backend::backend()?
        .recovery_queue(query)
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
