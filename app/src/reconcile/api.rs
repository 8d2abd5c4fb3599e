//! The server functions of this feature; each checks the caller's role first.

use crate::reconcile::model::ReconcilePreview;
use crate::reconcile::model::ReconcileResult;
use crate::records::model::RecordRef;
#[cfg(feature = "ssr")]
use domain::operator::OperatorRole;
use domain::recovery::ReconcileAction;

#[cfg(feature = "ssr")]
use crate::backend::failed;
use leptos::prelude::*;

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
