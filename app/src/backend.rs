//! The console backend port: what the console needs from the server, as a trait the `server`
//! crate implements and hands to Leptos through context. Keeping it here is what lets `app`
//! render on the server without ever depending on sqlx or on `server`.

use crate::admin::model::{AdminChange, AdminOutcome, Administration};
use crate::audit::model::AuditEntryView;
use crate::dashboard::model::{Dashboard, DashboardRange, RetryWindow};
use crate::events::model::{EventsOverview, RedriveResult};
use crate::overrides::model::OverrideRequestView;
use crate::reconcile::model::{ReconcilePreview, ReconcileResult};
use crate::records::model::{
    LateChargeRefundPreview, RecordDetail, RecordFilter, RecordPage, RecordRef, RecordSummary,
    RevealedResponse,
};
use crate::recovery::model::{BulkJobView, BulkSelection, GroupChoice, RecoveryQueue};
use crate::sign_in::model::CurrentOperator;
use domain::queue::QueueQuery;
use domain::recovery::BulkControl;
use domain::recovery::OverrideOutcome;
use domain::recovery::ReconcileAction;
use leptos::prelude::*;
use std::sync::Arc;

/// A failure of the backend, phrased for an operator; details stay in the server's logs.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConsoleError {
    #[error("the idempotency store is unavailable; try again shortly")]
    StoreUnavailable,
    #[error("{0}")]
    Invalid(String),
}

/// What the console reads. Reading asks the provider at most (a reconcile preview) and changes
/// nothing.
#[async_trait::async_trait]
pub trait ConsoleReads: Send + Sync + 'static {
    async fn dashboard(
        &self,
        range: DashboardRange,
        tenant: String,
        operation: String,
    ) -> Result<Dashboard, ConsoleError>;

    /// Per operation (all, or `operation`), the retries journalled over `range` against its
    /// window and shorter and longer ones.
    async fn retry_windows(
        &self,
        range: DashboardRange,
        tenant: String,
        operation: String,
    ) -> Result<Vec<RetryWindow>, ConsoleError>;

    async fn records(&self, filter: RecordFilter) -> Result<RecordPage, ConsoleError>;

    /// Records whose key, payment id or provider charge id is exactly `needle`.
    async fn find(&self, needle: String) -> Result<Vec<RecordSummary>, ConsoleError>;

    async fn record(&self, record: RecordRef) -> Result<Option<RecordDetail>, ConsoleError>;

    /// A page of the records needing attention that match the query; `Invalid` names a filter
    /// field that does not parse.
    async fn recovery_queue(&self, query: QueueQuery) -> Result<RecoveryQueue, ConsoleError>;

    /// Asks the provider, changes nothing.
    async fn preview_reconcile(&self, record: RecordRef) -> Result<ReconcilePreview, ConsoleError>;

    /// A bulk job: its preview's groups, its progress and its latest results.
    async fn bulk_job(&self, id: String) -> Result<Option<BulkJobView>, ConsoleError>;

    /// Every bulk job, newest first (without groups or results).
    async fn bulk_jobs(&self) -> Result<Vec<BulkJobView>, ConsoleError>;

    /// Pending override requests first, then recently decided ones.
    async fn overrides(&self) -> Result<Vec<OverrideRequestView>, ConsoleError>;

    /// Outbox backlog, consumer lag, dead letters.
    async fn events(&self) -> Result<EventsOverview, ConsoleError>;

    /// Newest first; `before` is the id of the last entry of the previous page (or empty).
    async fn audit(&self, before: String) -> Result<Vec<AuditEntryView>, ConsoleError>;
}

/// What an operator does. Every action is audited, in the same transaction as the change it
/// makes where it makes one.
#[async_trait::async_trait]
pub trait ConsoleActions: Send + Sync + 'static {
    /// Applies what the preview proposed, if the record and the provider still say the same;
    /// audited in the same transaction.
    async fn apply_reconcile(
        &self,
        operator: &CurrentOperator,
        record: RecordRef,
        version: i64,
        action: ReconcileAction,
        reason: String,
    ) -> Result<ReconcileResult, ConsoleError>;

    /// Freezes a bulk reconciliation's records on the server (each at its version now: every
    /// record matching a filter, or those ticked) and previews them in the background: the
    /// provider asked about each, the action proposed, grouped.
    async fn select_for_bulk(
        &self,
        operator: &CurrentOperator,
        selection: BulkSelection,
    ) -> Result<BulkJobView, ConsoleError>;

    /// Applies a previewed job to the groups kept (each with its action), under one name and
    /// one reason; each item is applied only if its record is still at the version frozen
    /// and the provider still says the same, and audited.
    async fn apply_bulk_job(
        &self,
        operator: &CurrentOperator,
        id: String,
        name: String,
        reason: String,
        choices: Vec<GroupChoice>,
    ) -> Result<BulkJobView, ConsoleError>;

    /// Pauses, resumes or aborts a job (audited); an abort leaves every item not done
    /// untouched and reported.
    async fn control_bulk_job(
        &self,
        operator: &CurrentOperator,
        id: String,
        control: BulkControl,
    ) -> Result<BulkJobView, ConsoleError>;

    /// An admin's override of a record that needs an operator, without the provider's
    /// evidence: recorded (and audited) to wait for a second admin, bound to `version`.
    async fn request_override(
        &self,
        admin: &CurrentOperator,
        record: RecordRef,
        version: i64,
        outcome: OverrideOutcome,
        reason: String,
    ) -> Result<OverrideRequestView, ConsoleError>;

    /// A second admin's decision: approving applies the override at once if the record is
    /// still at the requested version (audited with the change); rejecting changes nothing
    /// else. The requester can decide neither.
    async fn decide_override(
        &self,
        admin: &CurrentOperator,
        id: String,
        approve: bool,
        reason: String,
    ) -> Result<OverrideRequestView, ConsoleError>;

    /// Puts exactly these dead letters (each at the `dead_at` the operator saw) back to the
    /// publisher, each audited with `reason`.
    async fn redrive(
        &self,
        operator: &CurrentOperator,
        dead_letters: Vec<(String, String)>,
        reason: String,
    ) -> Result<Vec<RedriveResult>, ConsoleError>;

    /// The record's stored response, opened; audited before anything is returned.
    async fn reveal_response(
        &self,
        operator: &CurrentOperator,
        record: RecordRef,
    ) -> Result<Option<RevealedResponse>, ConsoleError>;
}

/// What the record page's late-charge panel does: a charge the provider made after its payment
/// was released, refunded through create_refund or marked refunded on an operator's word.
/// Each is audited.
#[async_trait::async_trait]
pub trait LateChargeActions: Send + Sync + 'static {
    /// What refunding a released payment's late charge would ask the provider, read-only.
    async fn preview_late_charge_refund(
        &self,
        record: RecordRef,
        payment_id: String,
    ) -> Result<LateChargeRefundPreview, ConsoleError>;

    /// Refunds a released payment's late charge through create_refund, under a key derived
    /// from the charge (so that a second click or a second operator gets the same refund's
    /// answer, never a second refund), then marks the late charge refunded with the refund's
    /// id; audited with `reason`.
    async fn refund_late_charge(
        &self,
        operator: &CurrentOperator,
        record: RecordRef,
        payment_id: String,
        reason: String,
    ) -> Result<ReconcileResult, ConsoleError>;

    /// Records an operator's word that a payment's late charge was refunded at the provider
    /// (`reference`: the refund's id or ticket), audited; the dashboard stops counting it.
    async fn resolve_late_charge(
        &self,
        operator: &CurrentOperator,
        record: RecordRef,
        payment_id: String,
        reference: String,
    ) -> Result<ReconcileResult, ConsoleError>;
}

/// What an admin manages: operators, tenants and API keys. Every change is audited in its
/// transaction, in the admin's name.
#[async_trait::async_trait]
pub trait ConsoleAdmin: Send + Sync + 'static {
    async fn administration(&self) -> Result<Administration, ConsoleError>;

    /// Refuses (`Invalid`) what the command line refuses, and an admin's change of their own
    /// standing (role, disabled, password): another admin does that, so that nobody locks the
    /// last admin out by a slip.
    async fn administer(
        &self,
        admin: &CurrentOperator,
        change: AdminChange,
    ) -> Result<AdminOutcome, ConsoleError>;
}

/// The whole port: what the server implements.
pub trait ConsoleBackend: ConsoleReads + ConsoleActions + LateChargeActions + ConsoleAdmin {}

impl<T: ConsoleReads + ConsoleActions + LateChargeActions + ConsoleAdmin> ConsoleBackend for T {}

/// The handle the server provides as Leptos context for every request.
#[derive(Clone)]
pub struct Backend(pub Arc<dyn ConsoleBackend>);

/// The backend of the current request; an error (not a panic) when the server forgot to
/// provide it, so that a wiring mistake shows up as a failed server function.
pub fn backend() -> Result<Arc<dyn ConsoleBackend>, ServerFnError> {
    use_context::<Backend>()
        .map(|Backend(backend)| backend)
        .ok_or_else(|| ServerFnError::new("console backend missing from the request context"))
}

/// A backend failure as the caller gets it: 400 for a request that cannot be carried out as
/// asked (the message says why), 503 when the store is unavailable.
pub(crate) fn failed(error: ConsoleError) -> leptos::prelude::ServerFnError {
    let status = match error {
        ConsoleError::Invalid(_) => http::StatusCode::BAD_REQUEST,
        ConsoleError::StoreUnavailable => http::StatusCode::SERVICE_UNAVAILABLE,
    };
    crate::auth::refused(status, error.to_string())
}
