//! The server functions of this feature; each checks the caller's role first.

use crate::reconcile::model::ReconcileResult;
use crate::records::model::LateChargeRefundPreview;
use crate::records::model::RecordDetail;
use crate::records::model::RecordFilter;
use crate::records::model::RecordPage;
use crate::records::model::RecordRef;
use crate::records::model::RecordSummary;
use crate::records::model::RevealedResponse;
#[cfg(feature = "ssr")]
use domain::operator::OperatorRole;

#[cfg(feature = "ssr")]
use crate::backend::failed;
use leptos::prelude::*;

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

/// The record's stored response, masked until an operator asks; every reveal is audited.
#[server(endpoint = "console/reveal")]
pub async fn reveal_response(record: RecordRef) -> Result<Option<RevealedResponse>, ServerFnError> {
    let operator = crate::auth::require(OperatorRole::Operator)?;
    crate::backend::backend()?
        .reveal_response(&operator, record)
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
