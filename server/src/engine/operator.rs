//! What only operators do: reconcile a record that needs one against the provider's answer,
//! asked again when applying; apply an override two admins vouched for; release a key whose
//! payment the provider never charged. Each is guarded by the record's version the operator
//! saw, and its audit entry commits with the change.

use super::PaymentsEngine;
use super::answer::Answer;
use super::owner::Charging;
use crate::provider::{Charge, ChargeStatus};
use domain::claim::{KeyRelease, StoredResponse};
use domain::operator::AuditEntry;
use domain::payment::{PaymentId, new_event_id};
use domain::record::RecordAt;
use domain::recovery::{OverrideOutcome, ProviderEvidence, ReconcileAction};
use domain::scope::{Operation, Scope};
use serde_json::json;

/// Why an operator's reconciliation was not applied (nothing was written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileRefusal {
    #[error("the record changed since the preview (or no longer needs reconciling); preview it again")]
    Changed,
    #[error("the provider's answer changed since the preview; preview it again")]
    EvidenceChanged,
    #[error("the provider cannot be reached: {0}")]
    ProviderUnreachable(String),
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    #[error(
        "this action is offered for payments only; a refund is reconciled with the provider's answer or sent again"
    )]
    NotForOperation,
}

/// How an applied reconciliation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// The record was resolved and holds this answer for the key's retries (or, when the
    /// provider call failed again, is still unresolved and the answer says so).
    Answered(Answer),
    /// The payment is declined and the key released: the key's next retry executes anew.
    KeyReleased,
}

impl PaymentsEngine {
    /// What the provider says right now about the charge of a payment, or the refund of a
    /// refund (`resource_id`, as `operation` made it).
    pub async fn provider_evidence(&self, operation: Operation, resource_id: &str) -> ProviderEvidence {
        let found = match operation {
            Operation::CreatePayment => self
                .provider
                .find_charge(resource_id)
                .await
                .map(|found| found.map(|charge| (charge.charge_id, charge.status))),
            Operation::CreateRefund => self
                .provider
                .find_refund(resource_id)
                .await
                .map(|found| found.map(|refund| (refund.provider_refund_id, refund.status))),
        };
        match found {
            Ok(Some((charge_id, status))) => ProviderEvidence::Charged {
                charge_id,
                status: match status {
                    ChargeStatus::Succeeded => "succeeded".to_owned(),
                    ChargeStatus::Declined => "declined".to_owned(),
                },
            },
            Ok(None) => ProviderEvidence::NoCharge,
            Err(error) => ProviderEvidence::Unreachable {
                problem: error.to_string(),
            },
        }
    }

    /// A record's stored response, opened (for an operator's audited reveal); `Ok(None)` when
    /// the record has none (not settled, or purged after its window).
    pub async fn stored_response(&self, scope: &Scope) -> Result<Option<StoredResponse>, String> {
        let Some(stored) = self
            .records
            .load_response(scope)
            .await
            .map_err(|error| error.to_string())?
        else {
            return Ok(None);
        };
        self.opened(scope, stored)
            .map(Some)
            .map_err(|error| error.to_string())
    }

    /// An operator's reconciliation of a record that needs one: guarded by the version the
    /// operator previewed and by the provider's answer, asked again now, which must still
    /// call for `action`. The change and the audit entry commit together.
    pub async fn reconcile(
        &self,
        scope: &Scope,
        previewed_version: i64,
        action: ReconcileAction,
        audit: &AuditEntry,
    ) -> Result<Reconciled, ReconcileRefusal> {
        let found = self.record_needing_operator(scope, previewed_version).await?;
        let payment_id = found.record.resource_id.clone().unwrap_or_default();
        match (self.provider_evidence(scope.operation, &payment_id).await, action) {
            (ProviderEvidence::Charged { .. }, ReconcileAction::ApplyProviderResult)
            | (ProviderEvidence::NoCharge, ReconcileAction::RetryCharge) => {}
            (_, ReconcileAction::MarkFailedAndReleaseKey) if scope.operation != Operation::CreatePayment => {
                return Err(ReconcileRefusal::NotForOperation);
            }
            (ProviderEvidence::NoCharge, ReconcileAction::MarkFailedAndReleaseKey) => {
                return self
                    .release_key(
                        scope,
                        PaymentId::from_stored(payment_id),
                        previewed_version,
                        audit,
                    )
                    .await;
            }
            (ProviderEvidence::Unreachable { problem }, _) => {
                return Err(ReconcileRefusal::ProviderUnreachable(problem));
            }
            _ => return Err(ReconcileRefusal::EvidenceChanged),
        }
        Ok(Reconciled::Answered(
            self.resume_for_operator(scope, &found, previewed_version, audit, Charging::AskFirst)
                .await,
        ))
    }

    /// Two admins' override of a record that needs an operator, without the provider's
    /// evidence (the provider cannot answer, or is wrong): settled as they vouch, guarded by
    /// the version the request was made at; the change and the approver's audit entry commit
    /// together. Nothing is sent to the provider.
    pub async fn override_outcome(
        &self,
        scope: &Scope,
        requested_version: i64,
        outcome: &OverrideOutcome,
        audit: &AuditEntry,
    ) -> Result<Reconciled, ReconcileRefusal> {
        if scope.operation != Operation::CreatePayment {
            return Err(ReconcileRefusal::NotForOperation);
        }
        let found = self.record_needing_operator(scope, requested_version).await?;
        let payment_id = found.record.resource_id.clone().unwrap_or_default();
        let (charge_id, status) = match outcome {
            OverrideOutcome::NotCharged => {
                return self
                    .release_key(
                        scope,
                        PaymentId::from_stored(payment_id),
                        requested_version,
                        audit,
                    )
                    .await;
            }
            OverrideOutcome::Charged { charge_id } => (charge_id, ChargeStatus::Succeeded),
            OverrideOutcome::Declined { charge_id } => (charge_id, ChargeStatus::Declined),
        };
        let vouched = Charge {
            charge_id: charge_id.clone(),
            status,
            reference: payment_id,
            settled: false,
        };
        Ok(Reconciled::Answered(
            self.resume_for_operator(
                scope,
                &found,
                requested_version,
                audit,
                Charging::Vouched(vouched),
            )
            .await,
        ))
    }

    /// The record at the version an operator saw, if it still needs an operator (an unknown
    /// outcome, or a dead owner's record).
    async fn record_needing_operator(
        &self,
        scope: &Scope,
        previewed_version: i64,
    ) -> Result<RecordAt, ReconcileRefusal> {
        let found = self
            .records
            .load_record(scope)
            .await
            .map_err(|error| ReconcileRefusal::Unavailable(error.to_string()))?
            .ok_or(ReconcileRefusal::Changed)?;
        if !found.needs_operator() || found.record.lease_version != previewed_version {
            return Err(ReconcileRefusal::Changed);
        }
        Ok(found)
    }

    async fn resume_for_operator(
        &self,
        scope: &Scope,
        found: &RecordAt,
        version: i64,
        audit: &AuditEntry,
        charging: Charging,
    ) -> Answer {
        let owned = self
            .take_over_and_resume(scope, found, version, Some(audit), charging)
            .await;
        self.answered(scope, owned, Some(found.record.expires_at)).await
    }

    /// The provider has no charge for the payment (asked just now): the payment is declined,
    /// its hold and merchant reference released, and the key released, so that the client's
    /// retry executes anew (a new payment with its own provider key).
    async fn release_key(
        &self,
        scope: &Scope,
        payment_id: PaymentId,
        previewed_version: i64,
        audit: &AuditEntry,
    ) -> Result<Reconciled, ReconcileRefusal> {
        let event_id = new_event_id();
        let release = KeyRelease {
            event_payload: json!({
                "eventId": event_id,
                "type": "PaymentDeclined",
                "paymentId": payment_id.as_str(),
                "providerChargeId": null,
                "reason": "not_charged_key_released",
            })
            .to_string(),
            event_id,
            payment_id,
            audit: audit.clone(),
        };
        match self
            .keyed_payments
            .release_key(scope, previewed_version, &release)
            .await
        {
            Ok(true) => {
                tracing::warn!(tenant_id = %scope.tenant_id, payment_id = %release.payment_id, "key released by an operator");
                Ok(Reconciled::KeyReleased)
            }
            Ok(false) => Err(ReconcileRefusal::Changed),
            Err(error) => Err(ReconcileRefusal::Unavailable(error.to_string())),
        }
    }
}
