//! What operators do: reconcile a record (guarded by its version and the provider's answer),
//! ask for and decide a two-admin override, re-drive dead letters, reveal a stored response
//! (late charges are `late_charges.rs`). Each is audited, in the same transaction as the
//! change it makes where it makes one; refusals and failures are audited too.

use super::{StoreConsole, checked_reason, scope_of, unavailable, views};
use crate::engine::Reconciled;
use crate::store::StoreError;
use crate::store::approvals::{NewOverrideRequest, OverrideDecision};
use app::backend::{ConsoleActions, ConsoleError};
use app::events::model::RedriveResult;
use app::overrides::model::OverrideRequestView;
use app::reconcile::model::ReconcileResult;
use app::records::model::{RecordRef, RevealedResponse};
use app::recovery::model::{BulkJobView, BulkSelection, GroupChoice};
use app::sign_in::model::CurrentOperator;
use domain::operator::{AuditEntry, OperatorRole};
use domain::recovery::{BulkControl, OverrideOutcome, OverrideState, ReconcileAction};
use std::time::Duration;

/// How long a request waits for a second admin. Evidence a day old is not the evidence the
/// approver would be looking at, so after that the request is rejected and must be made again.
pub const OVERRIDE_DECISION_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Whether an applied reconciliation settled the record: `Ok(None)` the key was released,
/// `Ok(Some(status))` the record holds that answer for the key now, `Err(status)` the
/// provider call answered that and the record is still unresolved.
fn settled(reconciled: &Reconciled) -> Result<Option<u16>, u16> {
    match reconciled {
        Reconciled::KeyReleased => Ok(None),
        Reconciled::Answered(answer) if matches!(answer.status(), 201 | 402) => Ok(Some(answer.status())),
        Reconciled::Answered(answer) => Err(answer.status()),
    }
}

/// Runs an operator's action on a task of its own, so that a browser that goes away cannot cut
/// it between two of its writes (a takeover and its completion, a decision and its outcome):
/// it runs to its end, as a payment does.
pub(super) async fn to_the_end<T: Send + 'static>(
    action: impl Future<Output = Result<T, ConsoleError>> + Send + 'static,
) -> Result<T, ConsoleError> {
    match tokio::spawn(action).await {
        Ok(done) => done,
        Err(stopped) => std::panic::resume_unwind(stopped.into_panic()),
    }
}

impl StoreConsole {
    async fn override_view(&self, id: &str) -> Result<OverrideRequestView, ConsoleError> {
        self.store
            .override_request(id)
            .await
            .map_err(unavailable("override request"))?
            .map(views::override_request)
            .ok_or_else(|| ConsoleError::Invalid("no such override request".to_owned()))
    }
}

/// The charge two admins vouch for must name one: 1 to 128 visible characters.
fn checked_outcome(outcome: OverrideOutcome) -> Result<OverrideOutcome, ConsoleError> {
    let charge_id = match &outcome {
        OverrideOutcome::Charged { charge_id } | OverrideOutcome::Declined { charge_id } => charge_id,
        OverrideOutcome::NotCharged => return Ok(outcome),
    };
    let visible = |character: char| !character.is_whitespace() && !character.is_control();
    if charge_id.is_empty() || charge_id.chars().count() > 128 || !charge_id.chars().all(visible) {
        return Err(ConsoleError::Invalid(
            "name the provider's charge id (1 to 128 characters, no spaces)".to_owned(),
        ));
    }
    Ok(outcome)
}

#[async_trait::async_trait]
impl ConsoleActions for StoreConsole {
    async fn apply_reconcile(
        &self,
        operator: &CurrentOperator,
        record: RecordRef,
        version: i64,
        action: ReconcileAction,
        reason: String,
    ) -> Result<ReconcileResult, ConsoleError> {
        let operator = operator.clone();
        let console = self.clone();
        to_the_end(async move {
            let reason = checked_reason(&reason)?;
            let scope = scope_of(&record)?;
            let audit = |result: &str, details: String| {
                AuditEntry::new(&operator.username, format!("reconcile.{}", action.as_str()))
                    .on(scope.audit_target())
                    .because(&reason)
                    .ended(result)
                    .details(details)
            };
            let applied = audit("ok", format!("previewed version {version}"));
            let (ok, message) = match console.engine.reconcile(&scope, version, action, &applied).await {
                // The completion (or the release) committed with its audit entry.
                Ok(reconciled) => match settled(&reconciled) {
                    Ok(None) => (true, "applied: payment declined, key released".to_owned()),
                    Ok(Some(_)) => (true, "applied".to_owned()),
                    Err(status) => {
                        let message = format!("not settled: the provider call answered {status}");
                        console.write_audit(audit("failed", message.clone())).await;
                        (false, message)
                    }
                },
                Err(refusal) => {
                    console.write_audit(audit("refused", refusal.to_string())).await;
                    (false, refusal.to_string())
                }
            };
            let status = console
                .store
                .load_record(&scope)
                .await
                .ok()
                .flatten()
                .map(|found| found.record.status);
            Ok(ReconcileResult {
                record,
                ok,
                status,
                message,
            })
        })
        .await
    }

    async fn select_for_bulk(
        &self,
        operator: &CurrentOperator,
        selection: BulkSelection,
    ) -> Result<BulkJobView, ConsoleError> {
        self.select_bulk_job(operator, selection).await
    }

    async fn apply_bulk_job(
        &self,
        operator: &CurrentOperator,
        id: String,
        name: String,
        reason: String,
        choices: Vec<GroupChoice>,
    ) -> Result<BulkJobView, ConsoleError> {
        self.apply_job(operator, &id, &name, &reason, choices).await
    }

    async fn control_bulk_job(
        &self,
        operator: &CurrentOperator,
        id: String,
        control: BulkControl,
    ) -> Result<BulkJobView, ConsoleError> {
        self.control_job(operator, &id, control).await
    }

    async fn request_override(
        &self,
        admin: &CurrentOperator,
        record: RecordRef,
        version: i64,
        outcome: OverrideOutcome,
        reason: String,
    ) -> Result<OverrideRequestView, ConsoleError> {
        let reason = checked_reason(&reason)?;
        let outcome = checked_outcome(outcome)?;
        let found = self.existing_record(&record, "override request").await?;
        if !found.needs_operator() || found.record.lease_version != version {
            return Err(ConsoleError::Invalid(
                "the record changed since you looked, or no longer needs an operator; reload it".to_owned(),
            ));
        }
        let scope = scope_of(&record)?;
        let request = NewOverrideRequest {
            id: format!("ovr_{}", domain::random::random_hex(12)),
            record_version: version,
            outcome,
            requested_by: admin.username.clone(),
            reason: reason.clone(),
            scope,
        };
        let audit = AuditEntry::new(&admin.username, "override.request")
            .on(request.scope.audit_target())
            .because(reason)
            .details(format!(
                "{}: {} at version {version}; waits for a second admin",
                request.id, request.outcome
            ));
        match self
            .store
            .request_override(&request, &audit, OVERRIDE_DECISION_WINDOW)
            .await
        {
            Ok(()) => self.override_view(&request.id).await,
            Err(StoreError::AlreadyExists) => Err(ConsoleError::Invalid(
                "this record already has an override waiting for a second admin".to_owned(),
            )),
            Err(error) => Err(unavailable("override request")(error)),
        }
    }

    async fn decide_override(
        &self,
        admin: &CurrentOperator,
        id: String,
        approve: bool,
        reason: String,
    ) -> Result<OverrideRequestView, ConsoleError> {
        let admin = admin.clone();
        let console = self.clone();
        to_the_end(async move {
            let reason = checked_reason(&reason)?;
            let request = console.override_view(&id).await?;
            let target = views::record_name(&request.record).audit_target();
            let action = if approve {
                "override.approve"
            } else {
                "override.reject"
            };
            let audit = |result: &str, details: String| {
                AuditEntry::new(&admin.username, action)
                    .on(&target)
                    .because(&reason)
                    .ended(result)
                    .details(format!(
                        "{id}, requested by {}: {}; {details}",
                        request.requested_by, request.outcome
                    ))
            };
            let console = &console;
            let refuse = |why: &'static str| {
                let entry = audit("refused", why.to_owned());
                async move {
                    console.write_audit(entry).await;
                    Err(ConsoleError::Invalid(why.to_owned()))
                }
            };
            if request.requested_by == admin.username {
                return refuse("an override needs a second admin: its requester cannot decide it").await;
            }
            // An admin who creates an admin, or resets an admin's password, is shown the new
            // password: without this, one admin could approve their own request under a second
            // identity made for it.
            if approve
                && console
                    .store
                    .vouched_for_since_request(&id, &admin.username)
                    .await
                    .map_err(unavailable("override approver"))?
            {
                return refuse(
                    "its requester created this admin, or set their password or role, after asking: \
                     it needs an admin they did not vouch for",
                )
                .await;
            }
            // Both admins must stand behind an applied override when it is applied: a requester
            // since disabled or demoted (left, or not trusted any more) vouches for nothing.
            if approve {
                let requester = console
                    .store
                    .operator_by_username(&request.requested_by)
                    .await
                    .map_err(unavailable("override requester"))?;
                if !requester
                    .is_some_and(|requester| !requester.disabled && requester.role == OperatorRole::Admin)
                {
                    return refuse("its requester is no longer an enabled admin: it can only be rejected")
                        .await;
                }
            }
            let decision = if approve {
                OverrideState::Approved
            } else {
                OverrideState::Rejected
            };
            let rejected = audit("ok", "nothing applied".to_owned());
            let decided = console
                .store
                .decide_override(&OverrideDecision {
                    id: &id,
                    state: decision,
                    decided_by: &admin.username,
                    reason: &reason,
                    audit: (!approve).then_some(&rejected),
                    window: OVERRIDE_DECISION_WINDOW,
                })
                .await
                .map_err(unavailable("override decision"))?;
            if !decided {
                return refuse(
                    "the request is no longer pending: decided already, or expired unanswered \
                     (ask again with today's evidence)",
                )
                .await;
            }
            if approve {
                let scope = scope_of(&request.record)?;
                let applied = audit("ok", format!("applied at version {}", request.record_version));
                let (state, result) = match console
                    .engine
                    .override_outcome(&scope, request.record_version, &request.outcome, &applied)
                    .await
                {
                    Ok(reconciled) => match settled(&reconciled) {
                        Ok(None) => (
                            OverrideState::Applied,
                            "payment declined, key released".to_owned(),
                        ),
                        Ok(Some(status)) => (
                            OverrideState::Applied,
                            format!("record settled with answer {status}"),
                        ),
                        Err(status) => {
                            let message = format!("not settled: answered {status}");
                            console.write_audit(audit("failed", message.clone())).await;
                            (OverrideState::Failed, message)
                        }
                    },
                    Err(refusal) => {
                        console.write_audit(audit("refused", refusal.to_string())).await;
                        (OverrideState::Failed, refusal.to_string())
                    }
                };
                console
                    .store
                    .finish_override(&id, state, &result)
                    .await
                    .map_err(unavailable("override result"))?;
            }
            console.override_view(&id).await
        })
        .await
    }

    async fn redrive(
        &self,
        operator: &CurrentOperator,
        dead_letters: Vec<(String, String)>,
        reason: String,
    ) -> Result<Vec<RedriveResult>, ConsoleError> {
        let operator = operator.clone();
        let console = self.clone();
        to_the_end(async move {
            let reason = checked_reason(&reason)?;
            let mut results = Vec::with_capacity(dead_letters.len());
            for (event_id, dead_at) in dead_letters {
                let audit = AuditEntry::new(&operator.username, "redrive_event")
                    .on(&event_id)
                    .because(&reason)
                    .details(format!("dead since {dead_at}"));
                let (ok, message) = match console.store.redrive_event(&event_id, &dead_at, &audit).await {
                    Ok(true) => (true, "back to the publisher".to_owned()),
                    Ok(false) => {
                        let message = "not re-driven: it changed since the preview".to_owned();
                        console
                            .write_audit(audit.ended("refused").details(&message))
                            .await;
                        (false, message)
                    }
                    Err(error) => return Err(unavailable("redrive")(error)),
                };
                results.push(RedriveResult {
                    event_id,
                    ok,
                    message,
                });
            }
            Ok(results)
        })
        .await
    }

    async fn reveal_response(
        &self,
        operator: &CurrentOperator,
        record: RecordRef,
    ) -> Result<Option<RevealedResponse>, ConsoleError> {
        let scope = scope_of(&record)?;
        // Audited first: if the entry cannot be written, nothing is revealed.
        self.store
            .append_audit(&AuditEntry {
                actor: operator.username.clone(),
                action: "reveal_response".to_owned(),
                target: Some(scope.audit_target()),
                reason: None,
                result: "ok".to_owned(),
                details: None,
            })
            .await
            .map_err(unavailable("reveal audit"))?;
        let stored = self.engine.stored_response(&scope).await.map_err(|problem| {
            tracing::error!(%problem, "console: a stored response cannot be opened");
            ConsoleError::Invalid("the stored response cannot be opened (see the server log)".to_owned())
        })?;
        Ok(stored.map(|response| RevealedResponse {
            status: response.status,
            headers: response.headers,
            body: String::from_utf8_lossy(&response.body).into_owned(),
        }))
    }
}
