//! create_payment's own part of the idempotency layer: its request, its fingerprint, its claim
//! (the payment's local transaction), and what its owner does: charge at the provider with the
//! payment's provider key (asking first when resuming), then complete, fenced by the lease.
//! Claims, decisions, replays, takeovers and recovery are the layer's (`keyed.rs`,
//! `owner.rs`), the same as create_refund's (`refunds.rs`); a tenant without keys gets the
//! same local transaction, provider call and completion without a record.

use super::PaymentsEngine;
use super::answer::{Answer, bound_error, created};
use super::keyed::{KeyedOperation, to_the_end};
use super::owner::{Charging, Owned, Owner};
use crate::crash::{CrashPoint, crash_point};
use crate::provider::{Charge, ChargeStatus};
use crate::store::StoreError;
use chrono::{DateTime, Utc};
use domain::api_error::ApiError;
use domain::claim::{ClaimOutcome, NewClaim, PaymentCompletion, ProviderVerdict, UnkeyedOutcome};
use domain::command::CreatePayment;
use domain::fingerprint::{Fingerprint, FingerprintVersion};
use domain::key::IdempotencyKey;
use domain::outcome::Outcome;
use domain::payment::{NewPayment, PaymentId, new_event_id};
use domain::prefer::Wait;
use domain::representation::{ApiVersion, PaymentStatus, PaymentView};
use domain::scope::Scope;
use domain::tenant::{Principal, TenantId};
use serde_json::json;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// A parsed, authenticated create_payment request.
#[derive(Debug, Clone)]
pub struct CreatePaymentRequest {
    pub principal: Principal,
    /// `None` only for tenants that do not require keys.
    pub key: Option<IdempotencyKey>,
    /// The version the answer is produced in: the request's, or the tenant's default.
    pub api_version: ApiVersion,
    /// Whether the client named the version. Only a named version is part of the
    /// fingerprint: a retry that relies on the default stays the same request when a deploy
    /// changes the default, and is replayed in the version its answer was produced in.
    pub api_version_requested: bool,
    pub command: CreatePayment,
    /// `Prefer: wait=N`: how long the request may be held while another request owns its key.
    pub wait: Option<Wait>,
}

/// create_payment with a key: its payment, made by the claim.
struct KeyedPayment {
    request: CreatePaymentRequest,
    /// Made at the claim: a request its key's record answers needs no payment (nor an id
    /// drawn from the OS).
    payment: OnceLock<NewPayment>,
}

impl KeyedPayment {
    fn payment(&self) -> &NewPayment {
        self.payment.get_or_init(|| new_payment(&self.request))
    }
}

#[async_trait::async_trait]
impl KeyedOperation for KeyedPayment {
    fn fingerprint(&self, version: FingerprintVersion) -> Fingerprint {
        fingerprint(&self.request, version)
    }

    async fn claim(&self, engine: &PaymentsEngine, claim: &NewClaim) -> Result<ClaimOutcome, StoreError> {
        let insufficient_funds = engine.sealed(&claim.scope, &bound_error(&ApiError::InsufficientFunds));
        engine
            .keyed_payments
            .claim_create_payment(claim, self.payment(), &insufficient_funds)
            .await
    }

    async fn execute(&self, engine: &PaymentsEngine, owner: Owner<'_>, created_at: DateTime<Utc>) -> Owned {
        let payment = self.payment();
        let view = PaymentView::of_new(payment, PaymentStatus::Processing, created_at);
        engine
            .execute_payment(
                owner,
                &payment.tenant_id,
                &view,
                self.request.api_version,
                Charging::Send,
            )
            .await
    }
}

impl PaymentsEngine {
    pub async fn create_payment(self: &Arc<Self>, request: CreatePaymentRequest) -> Answer {
        let Some(key) = request.key.clone() else {
            let engine = Arc::clone(self);
            return to_the_end(async move {
                engine
                    .create_payment_without_key(&request, &new_payment(&request))
                    .await
            })
            .await
            .unwrap_or_else(|failed| failed);
        };
        let scope = Scope {
            tenant_id: request.principal.tenant_id.clone(),
            operation: CreatePayment::OPERATION,
            key,
        };
        let (created_by, api_version, wait) = (
            request.principal.api_key_id.clone(),
            request.api_version,
            request.wait,
        );
        let operation = KeyedPayment {
            request,
            payment: OnceLock::new(),
        };
        self.keyed(operation, scope, created_by, api_version, wait).await
    }

    /// A tenant that does not require keys: no record, the same local transaction (the
    /// business key still stops a second payment), the same provider call and completion.
    async fn create_payment_without_key(
        &self,
        request: &CreatePaymentRequest,
        payment: &NewPayment,
    ) -> Answer {
        match self.payments.create_payment_without_key(payment).await {
            Ok(UnkeyedOutcome::Created { payment_created_at }) => {
                self.count(
                    &payment.tenant_id,
                    CreatePayment::OPERATION,
                    Outcome::NewExecution,
                );
                let view = PaymentView::of_new(payment, PaymentStatus::Processing, payment_created_at);
                match self
                    .execute_payment(
                        Owner::Unkeyed,
                        &payment.tenant_id,
                        &view,
                        request.api_version,
                        Charging::Send,
                    )
                    .await
                {
                    Owned::Answered(answer) => answer,
                    Owned::FencedOut => Answer::error(ApiError::Internal, None),
                }
            }
            Ok(UnkeyedOutcome::InsufficientFunds) => Answer::error(ApiError::InsufficientFunds, None),
            Ok(UnkeyedOutcome::Refused(refusal)) => Answer::error(refusal.api_error(), None),
            Err(error) => Answer::error(error.as_api_error("create payment without key"), None),
        }
    }

    /// The owner's part after the local transaction: ask the provider, then settle.
    pub(super) async fn execute_payment(
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
            .keyed_payments
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

    /// A taken-over create_payment, resumed with its payment.
    pub(super) async fn resume_payment(
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
        self.execute_payment(owner, &scope.tenant_id, &payment, version, charging)
            .await
    }
}

/// The payment a create_payment request makes, under a new id.
fn new_payment(request: &CreatePaymentRequest) -> NewPayment {
    NewPayment::from_command(
        PaymentId::generate(),
        request.principal.tenant_id.clone(),
        &request.command,
    )
}

/// A create_payment's fingerprint in `version`.
fn fingerprint(request: &CreatePaymentRequest, version: FingerprintVersion) -> Fingerprint {
    let api_version = if request.api_version_requested {
        request.api_version.as_str()
    } else {
        ""
    };
    Fingerprint::compute_in(version, &request.command.fingerprint_input(api_version))
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
