//! create_refund's own part of the idempotency layer: its fingerprint (the payment in the
//! path is part of it), its claim (the refund's local transaction), and what its owner does:
//! refund at the provider with the refund's provider key (asking first when resuming), then
//! complete, fenced by the lease. Claims, decisions, replays, takeovers and recovery are the
//! layer's (`keyed.rs`, `owner.rs`), the same as create_payment's.

use super::PaymentsEngine;
use super::answer::{Answer, bound_error, json_response};
use super::keyed::KeyedOperation;
use super::owner::{Charging, Owned, Owner};
use crate::crash::{CrashPoint, crash_point};
use crate::provider::{ChargeStatus, ProviderRefund};
use crate::store::StoreError;
use crate::store::refunds::StoredRefund;
use chrono::{DateTime, Utc};
use domain::api_error::ApiError;
use domain::claim::{ClaimOutcome, NewClaim, RefundCompletion};
use domain::fingerprint::{Fingerprint, FingerprintInput, FingerprintVersion};
use domain::key::IdempotencyKey;
use domain::payment::new_event_id;
use domain::prefer::Wait;
use domain::refund::{CreateRefund, NewRefund, RefundId, RefundOf, RefundStatus, RefundView};
use domain::representation::ApiVersion;
use domain::scope::Scope;
use domain::tenant::Principal;
use serde_json::json;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// A parsed, authenticated create_refund request (refunds always carry a key): from the API
/// (of a payment), or from the console (of a late charge).
#[derive(Debug, Clone)]
pub struct CreateRefundRequest {
    pub principal: Principal,
    pub key: IdempotencyKey,
    /// The version the answer is stored under (a refund looks the same in every version, so
    /// the version is not part of its fingerprint).
    pub api_version: ApiVersion,
    pub command: CreateRefund,
    pub of: RefundOf,
    /// `Prefer: wait=N`: how long the request may be held while another request owns its key.
    pub wait: Option<Wait>,
}

struct KeyedRefund {
    request: CreateRefundRequest,
    /// Made at the claim, as create_payment's payment is.
    refund: OnceLock<NewRefund>,
}

impl KeyedRefund {
    fn refund(&self) -> &NewRefund {
        self.refund.get_or_init(|| NewRefund {
            id: RefundId::generate(),
            tenant_id: self.request.principal.tenant_id.clone(),
            command: self.request.command.clone(),
            of: self.request.of,
        })
    }
}

#[async_trait::async_trait]
impl KeyedOperation for KeyedRefund {
    fn fingerprint(&self, version: FingerprintVersion) -> Fingerprint {
        let command = &self.request.command;
        Fingerprint::compute_in(
            version,
            &FingerprintInput {
                operation: CreateRefund::OPERATION,
                path_params: command.path_params(),
                api_version: "",
                command,
            },
        )
    }

    async fn claim(&self, engine: &PaymentsEngine, claim: &NewClaim) -> Result<ClaimOutcome, StoreError> {
        let scope = &claim.scope;
        let exceeds_remaining = |error: &ApiError| engine.sealed(scope, &bound_error(error));
        engine
            .refunds
            .claim_create_refund(claim, self.refund(), &exceeds_remaining)
            .await
    }

    async fn execute(&self, engine: &PaymentsEngine, owner: Owner<'_>, _created_at: DateTime<Utc>) -> Owned {
        // The payment's charge is read with the refund: the payment may have been authorised
        // between the request's first read of it and the claim.
        engine
            .resume_refund(owner, self.refund().id.as_str(), Charging::Send)
            .await
    }
}

impl PaymentsEngine {
    pub async fn create_refund(self: &Arc<Self>, request: CreateRefundRequest) -> Answer {
        let scope = Scope {
            tenant_id: request.principal.tenant_id.clone(),
            operation: CreateRefund::OPERATION,
            key: request.key.clone(),
        };
        let (created_by, api_version, wait) = (
            request.principal.api_key_id.clone(),
            request.api_version,
            request.wait,
        );
        let operation = KeyedRefund {
            request,
            refund: OnceLock::new(),
        };
        self.keyed(operation, scope, created_by, api_version, wait).await
    }

    /// A create_refund's owner (new, or resuming after a takeover) with its refund.
    pub(super) async fn resume_refund(&self, owner: Owner<'_>, refund_id: &str, charging: Charging) -> Owned {
        let Owner::Keyed {
            scope, expires_at, ..
        } = owner
        else {
            return Owned::Answered(Answer::error(ApiError::Internal, None));
        };
        match self.refunds.refund(&scope.tenant_id, refund_id).await {
            Ok(Some(refund)) => self.execute_refund(owner, &refund, charging).await,
            Ok(None) => {
                tracing::error!(refund_id, "record at PROVIDER_REQUEST_SENT without its refund");
                Owned::Answered(Answer::error(ApiError::Internal, Some(expires_at)))
            }
            Err(error) => Owned::Answered(Answer::error(error.as_api_error("refund read"), Some(expires_at))),
        }
    }

    /// The owner's part after the local transaction: refund at the provider, then complete.
    async fn execute_refund(&self, owner: Owner<'_>, refund: &StoredRefund, charging: Charging) -> Owned {
        let Owner::Keyed {
            scope,
            lease_version,
            expires_at,
            audit,
        } = owner
        else {
            return Owned::Answered(Answer::error(ApiError::Internal, None));
        };
        let view = &refund.view;
        let Some(charge_id) = refund.provider_charge_id.as_deref() else {
            tracing::error!(refund_id = %view.id, "refund of a payment without a provider charge");
            return Owned::Answered(Answer::error(ApiError::Internal, Some(expires_at)));
        };
        // PROVIDER_REQUEST_SENT is durable from here on.
        crash_point(CrashPoint::BeforeProviderCall);
        let send = || async {
            let sent = Instant::now();
            self.provider
                .create_refund(&view.id, charge_id, view.amount)
                .await
                .map_err(|error| error.of_send("refund request", sent.elapsed()))
        };
        let asked = Instant::now();
        let answered = match charging {
            Charging::Send => send().await,
            // A taker never sends blindly: the first owner's refund may have been made.
            Charging::AskFirst => match self.provider.find_refund(&view.id).await {
                Ok(Some(found)) => Ok(found),
                Ok(None) => send().await,
                Err(error) => Err(error.of_look_up("refund look-up", asked.elapsed())),
            },
            Charging::Vouched(_) => {
                tracing::error!(refund_id = %view.id, "a refund's outcome cannot be vouched for");
                return Owned::Answered(Answer::error(ApiError::Internal, Some(expires_at)));
            }
        };
        let provider_refund = match answered {
            Ok(provider_refund) => provider_refund,
            Err(failure) => {
                // Whatever the failure, the refund may exist: recovery asks, never guesses.
                tracing::warn!(error = %failure.words, refund_id = %view.id, "provider refund failed; outcome unknown");
                return self
                    .outcome_unknown(owner, &scope.tenant_id, scope.operation, &view.id, &failure)
                    .await;
            }
        };
        crash_point(CrashPoint::ProviderAnswered);
        let completion = completion(view, &provider_refund, audit.cloned());
        let answer = completion.response.clone();
        let completion = RefundCompletion {
            response: self.sealed(scope, &answer),
            ..completion
        };
        match self
            .refunds
            .complete_create_refund(scope, lease_version, &completion)
            .await
        {
            Ok(true) => {
                crash_point(CrashPoint::AfterCompletion);
                Owned::Answered(Answer::stored(answer, Some(expires_at)))
            }
            Ok(false) => Owned::FencedOut,
            // The provider answered but the answer is not recorded: the record stays at
            // PROVIDER_REQUEST_SENT; a retry (or recovery) asks the provider again by key.
            Err(error) => Owned::Answered(Answer::error(
                error.as_api_error("refund completion"),
                Some(expires_at),
            )),
        }
    }
}

/// What the completion writes for the provider's answer: the refund's outcome and its event,
/// and the answer bound to the key (`201` with the refund, or `402 REFUND_DECLINED`).
fn completion(
    refund: &RefundView,
    provider_refund: &ProviderRefund,
    audit: Option<domain::operator::AuditEntry>,
) -> RefundCompletion {
    let status = match provider_refund.status {
        ChargeStatus::Succeeded => RefundStatus::Succeeded,
        ChargeStatus::Declined => RefundStatus::Failed,
    };
    let response = match status {
        RefundStatus::Succeeded => json_response(
            201,
            RefundView {
                status,
                ..refund.clone()
            }
            .body(),
            vec![("location".to_owned(), format!("/refunds/{}", refund.id))],
        ),
        _ => bound_error(&ApiError::RefundDeclined {
            refund_id: refund.id.clone(),
        }),
    };
    let event_id = new_event_id();
    RefundCompletion {
        audit,
        refund_id: RefundId::from_stored(refund.id.clone()),
        status,
        provider_refund_id: provider_refund.provider_refund_id.clone(),
        event_payload: json!({
            "eventId": event_id,
            "type": if status == RefundStatus::Succeeded { "RefundSucceeded" } else { "RefundFailed" },
            "refundId": refund.id,
            "paymentId": refund.payment_id,
            "amount": refund.amount.to_string(),
            "currency": refund.amount.currency().code(),
            "providerRefundId": provider_refund.provider_refund_id,
        })
        .to_string(),
        event_id,
        response,
    }
}
