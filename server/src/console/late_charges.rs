//! Refunding a late charge (a charge the provider made after an operator released its
//! payment) from the console, through create_refund like any refund: the key is derived from
//! the charge (`late-charge-<chargeId>`), so a double click or two operators at once get the
//! one refund's answer (a replay, or "in progress"), never a second refund. Once the provider
//! made it, the late charge is marked refunded with the refund's id, audited with the
//! operator's reason. Or an operator marks it refunded on their word (a refund made at the
//! provider by hand), audited the same way.

use super::{StoreConsole, checked_reason, scope_of, unavailable};
use crate::engine::{Answer, CreateRefundRequest, Reply};
use crate::store::payments::LateChargeResolution;
use app::backend::{ConsoleError, LateChargeActions};
use app::reconcile::model::ReconcileResult;
use app::records::model::{LateChargeRefundPreview, RecordRef};
use app::sign_in::model::CurrentOperator;
use domain::key::IdempotencyKey;
use domain::money::Amount;
use domain::operator::AuditEntry;
use domain::payment::PaymentId;
use domain::refund::{CreateRefund, RefundOf, RefundReason, RefundReference};
use domain::representation::ApiVersion;
use domain::scope::Scope;
use domain::tenant::{ApiKeyId, Principal};

/// A released payment of the record's key with an unrefunded late charge.
struct LateCharge {
    scope: Scope,
    payment_id: String,
    charge_id: String,
    amount: Amount,
}

impl LateCharge {
    /// The create_refund key and the refund's reference: both named after the charge.
    fn key(&self) -> String {
        format!("late-charge-{}", self.charge_id)
    }
}

impl StoreConsole {
    /// The late charge to refund: a payment the record's key released, with a charge the
    /// provider made after, not yet marked refunded.
    async fn late_charge(&self, record: &RecordRef, payment_id: &str) -> Result<LateCharge, ConsoleError> {
        let scope = scope_of(record)?;
        let history = self
            .store
            .record_history(&scope)
            .await
            .map_err(unavailable("late charge"))?
            .ok_or_else(|| ConsoleError::Invalid("no such record".to_owned()))?;
        let charge_id = history
            .released_payments
            .into_iter()
            .find(|released| released.id == payment_id && released.late_charge_resolution.is_none())
            .and_then(|released| released.late_charge_id)
            .ok_or_else(|| ConsoleError::Invalid(no_late_charge(payment_id)))?;
        let payment = self
            .store
            .payment(&scope.tenant_id, payment_id)
            .await
            .map_err(unavailable("late charge's payment"))?
            .ok_or_else(|| ConsoleError::Invalid(format!("no payment {payment_id}")))?;
        Ok(LateCharge {
            scope,
            payment_id: payment_id.to_owned(),
            charge_id,
            amount: payment.amount,
        })
    }
}

#[async_trait::async_trait]
impl LateChargeActions for StoreConsole {
    async fn preview_late_charge_refund(
        &self,
        record: RecordRef,
        payment_id: String,
    ) -> Result<LateChargeRefundPreview, ConsoleError> {
        let late = self.late_charge(&record, &payment_id).await?;
        let key = late.key();
        Ok(LateChargeRefundPreview {
            steps: vec![
                format!(
                    "ask the provider to refund charge {} by {} {} (POST /v1/refunds, reason duplicate)",
                    late.charge_id,
                    late.amount,
                    late.amount.currency()
                ),
                format!(
                    "as create_refund under the key {key}: a second click or a second operator gets this refund's answer, never a second refund"
                ),
                "once the provider made it: the late charge is marked refunded with the refund's id"
                    .to_owned(),
            ],
            amount: late.amount.to_string(),
            currency: late.amount.currency().code().to_owned(),
            payment_id: late.payment_id,
            charge_id: late.charge_id,
            key,
        })
    }

    async fn refund_late_charge(
        &self,
        operator: &CurrentOperator,
        record: RecordRef,
        payment_id: String,
        reason: String,
    ) -> Result<ReconcileResult, ConsoleError> {
        let reason = checked_reason(&reason)?;
        let late = self.late_charge(&record, &payment_id).await?;
        let invalid =
            |problem: &str| ConsoleError::Invalid(format!("late charge {}: {problem}", late.charge_id));
        let key = IdempotencyKey::parse(late.key().as_bytes()).map_err(|_| invalid("no key can be made"))?;
        let reference =
            RefundReference::parse(&late.key()).map_err(|_| invalid("no reference can be made"))?;
        let request = CreateRefundRequest {
            principal: Principal {
                tenant_id: late.scope.tenant_id.clone(),
                api_key_id: ApiKeyId::from_stored(format!("console:{}", operator.username)),
                require_idempotency_key: true,
                pinned_api_version: ApiVersion::V2.as_str().to_owned(),
            },
            key,
            api_version: ApiVersion::V2,
            command: CreateRefund {
                payment_id: PaymentId::from_stored(late.payment_id.clone()),
                amount: late.amount,
                // The customer paid twice: once under the released payment, once under the
                // payment its key's retry made.
                reason: RefundReason::Duplicate,
                reference,
            },
            of: RefundOf::LateCharge,
            wait: None,
        };
        // The engine runs the refund to its end, whether or not the browser waits for it.
        let answer = self.engine.create_refund(request).await;
        let audit = |result: &str, details: String| {
            AuditEntry::new(&operator.username, "late_charge.refund")
                .on(late.scope.audit_target())
                .because(&reason)
                .ended(result)
                .details(details)
        };
        let (ok, message) = match refunded(&answer) {
            Some(refund_id) => {
                let details = format!("{payment_id}: charge {} refunded by {refund_id}", late.charge_id);
                let marked = self
                    .store
                    .resolve_late_charge(&LateChargeResolution {
                        scope: &late.scope,
                        payment_id: &payment_id,
                        by: &operator.username,
                        reference: &refund_id,
                        audit: &audit("ok", details.clone()),
                    })
                    .await
                    .map_err(unavailable("late charge resolution"))?;
                if !marked {
                    // Another operator's click made the same refund and marked it first.
                    self.write_audit(audit("ok", format!("{details}; marked already")))
                        .await;
                }
                (
                    true,
                    format!("the late charge {} is refunded by {refund_id}", late.charge_id),
                )
            }
            None => {
                let why = format!(
                    "the refund of charge {} was answered {} ({}): nothing is marked refunded",
                    late.charge_id,
                    answer.status(),
                    answer.error_code().unwrap_or_default()
                );
                self.write_audit(audit("refused", why.clone())).await;
                (false, why)
            }
        };
        Ok(ReconcileResult {
            record,
            ok,
            status: None,
            message,
        })
    }

    async fn resolve_late_charge(
        &self,
        operator: &CurrentOperator,
        record: RecordRef,
        payment_id: String,
        reference: String,
    ) -> Result<ReconcileResult, ConsoleError> {
        let reference = checked_reason(&reference)?;
        let scope = scope_of(&record)?;
        let audit = |result: &str, details: String| {
            AuditEntry::new(&operator.username, "late_charge.resolve")
                .on(scope.audit_target())
                .because(&reference)
                .ended(result)
                .details(details)
        };
        let resolved = self
            .store
            .resolve_late_charge(&LateChargeResolution {
                scope: &scope,
                payment_id: &payment_id,
                by: &operator.username,
                reference: &reference,
                audit: &audit("ok", format!("{payment_id}: refunded at the provider")),
            })
            .await
            .map_err(unavailable("late charge resolution"))?;
        if !resolved {
            let why = no_late_charge(&payment_id);
            self.write_audit(audit("refused", why.clone())).await;
            return Err(ConsoleError::Invalid(why));
        }
        Ok(ReconcileResult {
            record,
            ok: true,
            status: None,
            message: format!("the late charge of {payment_id} is marked refunded"),
        })
    }
}

/// Why an operator cannot act on a payment's late charge.
fn no_late_charge(payment_id: &str) -> String {
    format!("{payment_id} has no unresolved late charge under this key (none found, or resolved already)")
}

/// The refund's id when the provider made it (`201`, new or replayed).
fn refunded(answer: &Answer) -> Option<String> {
    let Reply::Stored(stored) = &answer.reply else {
        return None;
    };
    if stored.status != 201 {
        return None;
    }
    serde_json::from_slice::<serde_json::Value>(&stored.body)
        .ok()?
        .get("refundId")?
        .as_str()
        .map(str::to_owned)
}
