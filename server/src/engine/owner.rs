//! What the holder of a record's lease does: ask the provider with no transaction open, then
//! complete (every write fenced by the lease version); and how a dead owner's record is taken
//! over (one conditional update, one winner) and resumed from its last durable step, asking
//! the provider before sending anything.

use super::PaymentsEngine;
use super::answer::{Answer, bound_error, created};
use crate::crash::{CrashPoint, crash_point};
use crate::provider::{Charge, ChargeStatus};
use chrono::{DateTime, Utc};
use domain::api_error::ApiError;
use domain::claim::{PaymentCompletion, ProviderVerdict};
use domain::command::CreatePayment;
use domain::operator::AuditEntry;
use domain::outcome::Outcome;
use domain::payment::{PaymentId, new_event_id};
use domain::record::RecordAt;
use domain::recovery::ProviderFailure;
use domain::representation::{ApiVersion, PaymentStatus, PaymentView};
use domain::scope::{Operation, Scope};
use domain::tenant::TenantId;
use serde_json::json;
use std::time::Instant;

/// How a payment's owner reaches the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Charging {
    /// The first owner: nothing was sent before.
    Send,
    /// A taker resuming at PROVIDER_REQUEST_SENT: ask by the payment's key first, and send
    /// (with the same key) only if the provider never accepted it.
    AskFirst,
    /// Two admins vouch for the charge (an override without the provider's evidence):
    /// nothing is sent or asked.
    Vouched(Charge),
}

/// Who settles the payment: the holder of a key's lease (every write fenced by it), or, for
/// a tenant without keys, the request alone.
#[derive(Debug, Clone, Copy)]
pub(super) enum Owner<'a> {
    Keyed {
        scope: &'a Scope,
        lease_version: i64,
        expires_at: DateTime<Utc>,
        /// An operator's reconciliation: written with the completion.
        audit: Option<&'a AuditEntry>,
    },
    Unkeyed,
}

impl Owner<'_> {
    fn expires_at(&self) -> Option<DateTime<Utc>> {
        match self {
            Owner::Keyed { expires_at, .. } => Some(*expires_at),
            Owner::Unkeyed => None,
        }
    }
}

/// What an owner's work came to: its answer, or "fenced out": another owner took the record
/// over meanwhile, nothing was written, and the record must be read again.
#[derive(Debug)]
pub(super) enum Owned {
    Answered(Answer),
    FencedOut,
}

impl PaymentsEngine {
    /// The owner's part after the local transaction: ask the provider, then settle.
    pub(super) async fn execute(
        &self,
        owner: Owner<'_>,
        tenant_id: &TenantId,
        payment: &PaymentView,
        version: ApiVersion,
        charging: Charging,
    ) -> Owned {
        let expires_at = owner.expires_at();
        // PROVIDER_REQUEST_SENT is durable from here on.
        crash_point(CrashPoint::BeforeProviderCall);
        let send = || async {
            let sent = Instant::now();
            self.provider
                .create_charge(&payment.id, payment.amount)
                .await
                .map_err(|error| error.of_send("charge request", sent.elapsed()))
        };
        let asked = Instant::now();
        let charge = match charging {
            Charging::Send => send().await,
            // A taker never sends blindly: the first owner may have been charged already.
            Charging::AskFirst => match self.provider.find_charge(&payment.id).await {
                Ok(Some(charge)) => Ok(charge),
                Ok(None) => send().await,
                Err(error) => Err(error.of_look_up("charge look-up", asked.elapsed())),
            },
            Charging::Vouched(charge) => Ok(charge),
        };
        let charge = match charge {
            Ok(charge) => charge,
            Err(failure) => {
                // Whatever the failure, a charge may exist or the request may need sending
                // again with the same provider key: recovery decides by asking, never guessing.
                tracing::warn!(error = %failure.words, payment_id = %payment.id, "provider call failed; outcome unknown");
                return self
                    .outcome_unknown(owner, tenant_id, CreatePayment::OPERATION, &payment.id, &failure)
                    .await;
            }
        };
        crash_point(CrashPoint::ProviderAnswered);
        let completion = completion(payment, version, &charge, owner);
        let Owner::Keyed {
            scope, lease_version, ..
        } = owner
        else {
            return Owned::Answered(
                match self.payments.settle_payment_without_key(&completion).await {
                    Ok(()) => Answer::stored(completion.response, None),
                    Err(error) => Answer::error(error.as_api_error("completion without key"), None),
                },
            );
        };
        let answer = completion.response.clone();
        let completion = PaymentCompletion {
            response: self.sealed(scope, &answer),
            ..completion
        };
        match self
            .records
            .complete_create_payment(scope, lease_version, &completion)
            .await
        {
            Ok(true) => {
                crash_point(CrashPoint::AfterCompletion);
                Owned::Answered(Answer::stored(answer, expires_at))
            }
            Ok(false) => Owned::FencedOut,
            // The provider answered but the answer is not recorded: the record stays at
            // PROVIDER_REQUEST_SENT; a retry (or recovery) asks the provider again by key.
            Err(error) => Owned::Answered(Answer::error(error.as_api_error("completion"), expires_at)),
        }
    }

    /// The provider's answer was lost (counted): the record becomes UNKNOWN_REQUIRES_RECOVERY
    /// (fenced by the lease) with why, and the client is told so.
    pub(super) async fn outcome_unknown(
        &self,
        owner: Owner<'_>,
        tenant_id: &TenantId,
        operation: Operation,
        resource_id: &str,
        failure: &ProviderFailure,
    ) -> Owned {
        self.count(tenant_id, operation, Outcome::ProviderError);
        self.count(tenant_id, operation, Outcome::OutcomeUnknown);
        let expires_at = owner.expires_at();
        let Owner::Keyed {
            scope, lease_version, ..
        } = owner
        else {
            // Without a record the payment itself stays PROCESSING for recovery.
            return Owned::Answered(Answer::outcome_unknown(operation, resource_id, 1, None));
        };
        match self
            .records
            .mark_outcome_unknown(scope, lease_version, failure)
            .await
        {
            Ok(true) => Owned::Answered(Answer::outcome_unknown(operation, resource_id, 1, expires_at)),
            Ok(false) => Owned::FencedOut,
            Err(error) => Owned::Answered(Answer::error(
                error.as_api_error("mark outcome unknown"),
                expires_at,
            )),
        }
    }

    /// The owner died (its lease expired) after PROVIDER_REQUEST_SENT, or the provider's
    /// answer was lost: take the record over (exactly one taker wins) and resume its operation
    /// with the same resource, asking the provider before sending anything, so that it is
    /// done at most once. The retry path, the recovery worker and operators all come here.
    pub(super) async fn take_over_and_resume(
        &self,
        scope: &Scope,
        found: &RecordAt,
        stale_lease_version: i64,
        audit: Option<&AuditEntry>,
        charging: Charging,
    ) -> Owned {
        let expires_at = Some(found.record.expires_at);
        let taken = self
            .records
            .take_over(
                scope,
                stale_lease_version,
                &self.settings.instance_id,
                self.settings.of(scope.operation).lease,
            )
            .await;
        let (lease_version, expires_at) = match taken {
            Ok(Some(taken)) => taken,
            // Another retry or worker won: it owns the record now.
            Ok(None) => return Owned::Answered(Answer::in_progress(1, expires_at)),
            Err(error) => return Owned::Answered(Answer::error(error.as_api_error("take over"), expires_at)),
        };
        self.count(&scope.tenant_id, scope.operation, Outcome::Takeover);
        tracing::warn!(tenant_id = %scope.tenant_id, operation = %scope.operation, lease_version, "took over a stale owner's record");
        let owner = Owner::Keyed {
            scope,
            lease_version,
            expires_at,
            audit,
        };
        let resource_id = found.record.resource_id.as_deref().unwrap_or_default();
        match scope.operation {
            Operation::CreatePayment => {
                let version = found
                    .record
                    .response_schema_version
                    .as_deref()
                    .and_then(ApiVersion::parse)
                    .unwrap_or(ApiVersion::V2);
                self.resume_payment(owner, resource_id, version, charging).await
            }
            Operation::CreateRefund => self.resume_refund(owner, resource_id, charging).await,
        }
    }

    /// A taken-over create_payment, resumed with its payment.
    async fn resume_payment(
        &self,
        owner: Owner<'_>,
        payment_id: &str,
        version: ApiVersion,
        charging: Charging,
    ) -> Owned {
        let Owner::Keyed {
            scope, expires_at, ..
        } = owner
        else {
            return Owned::Answered(Answer::error(ApiError::Internal, None));
        };
        let payment = match self.payments.payment(&scope.tenant_id, payment_id).await {
            Ok(Some(payment)) => payment,
            Ok(None) => {
                tracing::error!(payment_id, "record at PROVIDER_REQUEST_SENT without its payment");
                return Owned::Answered(Answer::error(ApiError::Internal, Some(expires_at)));
            }
            Err(error) => {
                return Owned::Answered(Answer::error(error.as_api_error("resume"), Some(expires_at)));
            }
        };
        self.execute(owner, &scope.tenant_id, &payment, version, charging)
            .await
    }
}

/// What the completion writes for the provider's answer: the payment's outcome and its event,
/// and the answer bound to the key (`201` with the payment, or `402 PAYMENT_DECLINED`).
fn completion(
    payment: &PaymentView,
    version: ApiVersion,
    charge: &Charge,
    owner: Owner<'_>,
) -> PaymentCompletion {
    let verdict = match charge.status {
        ChargeStatus::Succeeded => ProviderVerdict::Authorized,
        ChargeStatus::Declined => ProviderVerdict::Declined,
    };
    let response = match verdict {
        ProviderVerdict::Authorized => created(
            &PaymentView {
                status: PaymentStatus::Pending,
                ..payment.clone()
            },
            version,
        ),
        ProviderVerdict::Declined => bound_error(&ApiError::PaymentDeclined {
            payment_id: payment.id.to_string(),
        }),
    };
    let event_id = new_event_id();
    PaymentCompletion {
        audit: match owner {
            Owner::Keyed { audit, .. } => audit.cloned(),
            Owner::Unkeyed => None,
        },
        payment_id: PaymentId::from_stored(payment.id.clone()),
        verdict,
        provider_charge_id: charge.charge_id.clone(),
        event_payload: json!({
            "eventId": event_id,
            "type": if verdict == ProviderVerdict::Authorized { "PaymentAuthorized" } else { "PaymentDeclined" },
            "paymentId": payment.id,
            "providerChargeId": charge.charge_id,
        })
        .to_string(),
        event_id,
        response,
    }
}
