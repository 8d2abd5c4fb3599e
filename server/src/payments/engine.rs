//! create_payment, end to end: claim, provider call with no transaction open, completion;
//! or, for a request that finds a record, the answer `decide` gives.
//!
//! The handler runs [`PaymentsEngine::create_payment`] in its own task, so a client that
//! disconnects cannot cancel it halfway (no half-done operation, no connection returned to
//! the pool inside a transaction).

use crate::crash::{CrashPoint, crash_point};
use crate::idempotency::journal::RequestJournal;
use crate::idempotency::sealing::ResponseSealer;
use crate::metrics::OutcomeCounter;
use crate::provider::client::ProviderClient;
use crate::provider::{Charge, ChargeStatus};
use crate::store::Store;
use crate::store::console::JournalEntry;
use app::dto::RecordRef;
use chrono::{DateTime, Utc};
use domain::api_error::ApiError;
use domain::claim::{
    ClaimOutcome, KeyRelease, NewClaim, PaymentCompletion, ProviderVerdict, Refusal, StoredResponse,
    UnkeyedOutcome,
};
use domain::command::CreatePayment;
use domain::command::FieldProblem;
use domain::decision::{Decision, decide};
use domain::expiry::{AfterExpiry, ExpiryPolicy};
use domain::fingerprint::{Fingerprint, FingerprintInput, FingerprintVersion};
use domain::key::IdempotencyKey;
use domain::operator::AuditEntry;
use domain::outcome::Outcome;
use domain::payment::{NewPayment, PaymentId, new_event_id};
use domain::record::ClaimedAs;
use domain::record::{ProgressStep, RecordAt};
use domain::recovery::{OverrideOutcome, ProviderEvidence, ReconcileAction};
use domain::representation::{ApiVersion, PaymentStatus, PaymentView};
use domain::scope::Scope;
use domain::tenant::Principal;
use domain::tenant::TenantId;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// How long an owner may work before a retry may take over.
    pub lease: Duration,
    /// create_payment's window, policy after it, and tombstone retention.
    pub expiry: ExpiryPolicy,
    /// This instance, as lease owner.
    pub instance_id: String,
}

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
}

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

/// What the client is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub response: StoredResponse,
    /// `Idempotent-Replayed: true`.
    pub replayed: bool,
    /// `Idempotency-Expires`, when a record exists.
    pub expires_at: Option<DateTime<Utc>>,
    pub retry_after_secs: Option<u64>,
}

impl Answer {
    fn fresh(response: StoredResponse, expires_at: Option<DateTime<Utc>>) -> Answer {
        Answer {
            response,
            replayed: false,
            expires_at,
            retry_after_secs: None,
        }
    }

    fn error(error: ApiError, expires_at: Option<DateTime<Utc>>) -> Answer {
        Answer {
            response: error_response(&error),
            replayed: false,
            expires_at,
            retry_after_secs: error.retry_after_secs(),
        }
    }

    fn outcome_unknown(payment_id: &str, expires_at: Option<DateTime<Utc>>, retry_after_secs: u64) -> Answer {
        let body = json!({
            "paymentId": payment_id,
            "status": PaymentStatus::Processing.as_str(),
            "errorCode": "PAYMENT_OUTCOME_UNKNOWN",
        });
        Answer {
            response: json_response(202, body.to_string().into_bytes(), Vec::new()),
            replayed: false,
            expires_at,
            retry_after_secs: Some(retry_after_secs),
        }
    }
}

fn json_response(status: u16, body: Vec<u8>, mut headers: Vec<(String, String)>) -> StoredResponse {
    headers.insert(0, ("content-type".to_owned(), "application/json".to_owned()));
    StoredResponse {
        status,
        headers,
        body,
    }
}

fn error_response(error: &ApiError) -> StoredResponse {
    json_response(error.status(), error.body(), Vec::new())
}

/// How a payment's owner reaches the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Charging {
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
enum Owner<'a> {
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

/// The associated data a stored body is sealed with: its record's scope.
fn sealing_scope(scope: &Scope) -> Vec<u8> {
    format!("{}|{}|{}", scope.tenant_id, scope.operation, scope.key).into_bytes()
}

fn refusal_answer(refusal: Refusal) -> Answer {
    let error = match refusal {
        Refusal::AccountNotFound => ApiError::AccountNotFound,
        Refusal::CurrencyMismatch { account_currency } => ApiError::ValidationFailed(vec![FieldProblem {
            field: "currency".to_owned(),
            problem: format!("must be the account's currency ({account_currency})"),
        }]),
        Refusal::DuplicateMerchantReference { payment_id } => ApiError::DuplicateMerchantReference {
            payment_id: payment_id.to_string(),
        },
    };
    Answer::error(error, None)
}

pub struct PaymentsEngine {
    store: Arc<dyn Store>,
    provider: ProviderClient,
    outcomes: Arc<OutcomeCounter>,
    journal: Arc<RequestJournal>,
    sealer: Arc<ResponseSealer>,
    settings: EngineSettings,
}

impl PaymentsEngine {
    pub fn new(
        store: Arc<dyn Store>,
        provider: ProviderClient,
        outcomes: Arc<OutcomeCounter>,
        journal: Arc<RequestJournal>,
        sealer: Arc<ResponseSealer>,
        settings: EngineSettings,
    ) -> Self {
        PaymentsEngine {
            store,
            provider,
            outcomes,
            journal,
            sealer,
            settings,
        }
    }

    /// The response as stored: its body sealed, bound to the record's scope.
    fn sealed(&self, scope: &Scope, response: &StoredResponse) -> StoredResponse {
        StoredResponse {
            body: self.sealer.seal(&sealing_scope(scope), &response.body),
            ..response.clone()
        }
    }

    fn count(&self, tenant_id: &TenantId, outcome: Outcome) {
        self.outcomes.record(tenant_id, CreatePayment::OPERATION, outcome);
    }

    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    fn fingerprint(&self, request: &CreatePaymentRequest, version: FingerprintVersion) -> Fingerprint {
        Fingerprint::compute_in(
            version,
            &FingerprintInput {
                operation: CreatePayment::OPERATION,
                path_params: BTreeMap::new(),
                api_version: if request.api_version_requested {
                    request.api_version.as_str()
                } else {
                    ""
                },
                command: &request.command,
            },
        )
    }

    pub async fn create_payment(&self, request: CreatePaymentRequest) -> Answer {
        let payment = NewPayment::from_command(
            PaymentId::generate(),
            request.principal.tenant_id.clone(),
            &request.command,
        );
        let Some(key) = request.key.clone() else {
            return self.create_payment_without_key(&request, &payment).await;
        };
        let scope = Scope {
            tenant_id: request.principal.tenant_id.clone(),
            operation: CreatePayment::OPERATION,
            key,
        };
        let claim = NewClaim {
            scope: scope.clone(),
            fingerprint: self.fingerprint(&request, FingerprintVersion::CURRENT),
            created_by: request.principal.api_key_id.clone(),
            response_schema_version: request.api_version.as_str().to_owned(),
            lease_owner: self.settings.instance_id.clone(),
            lease: self.settings.lease,
            window: self.settings.expiry.window,
            after_expiry: self.settings.expiry.after_expiry,
        };
        let insufficient_funds = self.sealed(&scope, &error_response(&ApiError::InsufficientFunds));
        let answer = self
            .claim_and_answer(&request, &scope, &claim, &payment, &insufficient_funds)
            .await;
        self.journal_answer(&scope, &claim.fingerprint, &answer);
        answer
    }

    /// Notes the request and its answer in the request journal (a conflicting retry with its
    /// command, for the console's diff).
    fn journal_answer(&self, scope: &Scope, fingerprint: &Fingerprint, answer: &Answer) {
        let error_code = (answer.response.status >= 400)
            .then(|| serde_json::from_slice::<serde_json::Value>(&answer.response.body).ok())
            .flatten()
            .and_then(|body| body["errorCode"].as_str().map(str::to_owned));
        let conflicting = error_code.as_deref() == Some(ApiError::KeyReusedWithDifferentRequest.code());
        self.journal.record(JournalEntry {
            record: RecordRef {
                tenant_id: scope.tenant_id.to_string(),
                operation: scope.operation.as_str().to_owned(),
                key: scope.key.as_str().to_owned(),
            },
            at: Utc::now(),
            fingerprint: fingerprint.sha256_hex.clone(),
            canonical_command: conflicting.then(|| fingerprint.canonical.clone()),
            status_code: answer.response.status,
            error_code,
            replayed: answer.replayed,
        });
    }

    async fn claim_and_answer(
        &self,
        request: &CreatePaymentRequest,
        scope: &Scope,
        claim: &NewClaim,
        payment: &NewPayment,
        insufficient_funds: &StoredResponse,
    ) -> Answer {
        match self
            .store
            .claim_create_payment(claim, payment, insufficient_funds)
            .await
        {
            Ok(ClaimOutcome::Claimed {
                lease_version,
                expires_at,
                payment_created_at,
                claimed_as,
            }) => {
                if claimed_as == ClaimedAs::AfterExpiry {
                    self.count(&scope.tenant_id, Outcome::ExpiredRetry);
                }
                self.count(&scope.tenant_id, Outcome::NewExecution);
                let view = PaymentView::of_new(payment, PaymentStatus::Processing, payment_created_at);
                let owner = Owner::Keyed {
                    scope,
                    lease_version,
                    expires_at,
                    audit: None,
                };
                self.execute(
                    owner,
                    &scope.tenant_id,
                    &view,
                    request.api_version,
                    Charging::Send,
                )
                .await
            }
            Ok(ClaimOutcome::Existing(found)) => self.answer_existing(request, scope, found).await,
            Ok(ClaimOutcome::InsufficientFunds { expires_at }) => {
                Answer::error(ApiError::InsufficientFunds, Some(expires_at))
            }
            Ok(ClaimOutcome::Refused(refusal)) => refusal_answer(refusal),
            // The claim's transaction did not commit: nothing was recorded, a retry executes.
            Err(error) => Answer::error(error.as_api_error("claim"), None),
        }
    }

    /// A tenant that does not require keys: no record, the same local transaction (the
    /// business key still stops a second payment), the same provider call and completion.
    async fn create_payment_without_key(
        &self,
        request: &CreatePaymentRequest,
        payment: &NewPayment,
    ) -> Answer {
        match self.store.create_payment_without_key(payment).await {
            Ok(UnkeyedOutcome::Created { payment_created_at }) => {
                self.count(&payment.tenant_id, Outcome::NewExecution);
                let view = PaymentView::of_new(payment, PaymentStatus::Processing, payment_created_at);
                self.execute(
                    Owner::Unkeyed,
                    &payment.tenant_id,
                    &view,
                    request.api_version,
                    Charging::Send,
                )
                .await
            }
            Ok(UnkeyedOutcome::InsufficientFunds) => Answer::error(ApiError::InsufficientFunds, None),
            Ok(UnkeyedOutcome::Refused(refusal)) => refusal_answer(refusal),
            Err(error) => Answer::error(error.as_api_error("create payment without key"), None),
        }
    }

    /// The owner's part after the local transaction: ask the provider, then settle.
    async fn execute(
        &self,
        owner: Owner<'_>,
        tenant_id: &TenantId,
        payment: &PaymentView,
        version: ApiVersion,
        charging: Charging,
    ) -> Answer {
        let expires_at = owner.expires_at();
        // PROVIDER_REQUEST_SENT is durable from here on.
        crash_point(CrashPoint::BeforeProviderCall);
        let charge = match charging {
            Charging::Send => self.provider.create_charge(&payment.id, payment.amount).await,
            // A taker never sends blindly: the first owner may have been charged already.
            Charging::AskFirst => match self.provider.find_charge(&payment.id).await {
                Ok(Some(charge)) => Ok(charge),
                Ok(None) => self.provider.create_charge(&payment.id, payment.amount).await,
                Err(error) => Err(error),
            },
            Charging::Vouched(charge) => Ok(charge),
        };
        let charge = match charge {
            Ok(charge) => charge,
            Err(error) => {
                // Whatever the failure, a charge may exist or the request may need sending
                // again with the same provider key: recovery decides by asking, never guessing.
                tracing::warn!(%error, payment_id = %payment.id, "provider call failed; outcome unknown");
                self.count(tenant_id, Outcome::ProviderError);
                self.count(tenant_id, Outcome::OutcomeUnknown);
                let Owner::Keyed {
                    scope, lease_version, ..
                } = owner
                else {
                    // Without a record the payment itself stays PROCESSING for recovery.
                    return Answer::outcome_unknown(&payment.id, None, 1);
                };
                return match self.store.mark_outcome_unknown(scope, lease_version).await {
                    Ok(true) => Answer::outcome_unknown(&payment.id, expires_at, 1),
                    Ok(false) => self.answer_current(scope, expires_at).await,
                    Err(error) => Answer::error(error.as_api_error("mark outcome unknown"), expires_at),
                };
            }
        };
        crash_point(CrashPoint::ProviderAnswered);
        let verdict = match charge.status {
            ChargeStatus::Succeeded => ProviderVerdict::Authorized,
            ChargeStatus::Declined => ProviderVerdict::Declined,
        };
        let response = match verdict {
            ProviderVerdict::Authorized => json_response(
                201,
                PaymentView {
                    status: PaymentStatus::Pending,
                    ..payment.clone()
                }
                .body(version),
                vec![("location".to_owned(), format!("/payments/{}", payment.id))],
            ),
            ProviderVerdict::Declined => error_response(&ApiError::PaymentDeclined {
                payment_id: payment.id.to_string(),
            }),
        };
        let event_id = new_event_id();
        let completion = PaymentCompletion {
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
        };
        let Owner::Keyed {
            scope, lease_version, ..
        } = owner
        else {
            return match self.store.settle_payment_without_key(&completion).await {
                Ok(()) => Answer::fresh(completion.response, None),
                Err(error) => Answer::error(error.as_api_error("completion without key"), None),
            };
        };
        let answer = completion.response.clone();
        let completion = PaymentCompletion {
            response: self.sealed(scope, &answer),
            ..completion
        };
        match self
            .store
            .complete_create_payment(scope, lease_version, &completion)
            .await
        {
            Ok(true) => {
                crash_point(CrashPoint::AfterCompletion);
                Answer::fresh(answer, expires_at)
            }
            Ok(false) => self.answer_current(scope, expires_at).await,
            // The provider answered but the answer is not recorded: the record stays at
            // PROVIDER_REQUEST_SENT; a retry (or recovery) asks the provider again by key.
            Err(error) => Answer::error(error.as_api_error("completion"), expires_at),
        }
    }

    /// The recovery worker's entry: resolve one record against the provider if it still
    /// needs it (an unknown outcome due for a look, or a dead owner's record). The same
    /// function serves a client's retry; `None` when there was nothing to do.
    pub async fn recover(&self, scope: &Scope) -> Option<Answer> {
        let found = match self.store.load_record(scope).await {
            Ok(Some(found)) => found,
            Ok(None) => return None,
            Err(error) => {
                error.as_api_error("recovery read");
                return None;
            }
        };
        let lease_version = match decide(&found.record, &found.record.request_fingerprint, found.now) {
            Decision::Recover { lease_version }
            | Decision::TakeOver {
                lease_version,
                resume_from: ProgressStep::ProviderRequestSent,
            } => lease_version,
            _ => return None,
        };
        Some(
            self.take_over_and_resume(scope, &found, lease_version, None, Charging::AskFirst)
                .await,
        )
    }

    /// A record's stored response, opened (for an operator's audited reveal); `Ok(None)` when
    /// the record has none (not settled, or purged after its window).
    pub async fn stored_response(&self, scope: &Scope) -> Result<Option<StoredResponse>, String> {
        let Some(stored) = self
            .store
            .load_response(scope)
            .await
            .map_err(|error| error.to_string())?
        else {
            return Ok(None);
        };
        let body = self
            .sealer
            .open(&sealing_scope(scope), &stored.body)
            .map_err(|error| error.to_string())?;
        Ok(Some(StoredResponse { body, ..stored }))
    }

    /// One settlement pass: authorised payments not checked for `recheck_after` are looked up
    /// at the provider; those it reports settled become SETTLED with their PaymentSettled
    /// event (once: the update is conditional on PENDING). Returns how many settled.
    pub async fn settle_pending(&self, recheck_after: Duration, limit: i64) -> usize {
        let ids = match self.store.take_payments_to_settle(recheck_after, limit).await {
            Ok(ids) => ids,
            Err(error) => {
                tracing::warn!(%error, "settlement: cannot list payments");
                return 0;
            }
        };
        let mut settled = 0;
        for payment_id in ids {
            let charge = match self.provider.find_charge(&payment_id).await {
                Ok(Some(charge)) if charge.settled => charge,
                Ok(_) => continue,
                Err(error) => {
                    tracing::warn!(%error, %payment_id, "settlement: provider look-up failed; later");
                    continue;
                }
            };
            let event_id = new_event_id();
            let payload = json!({
                "eventId": event_id,
                "type": "PaymentSettled",
                "paymentId": payment_id,
                "providerChargeId": charge.charge_id,
            })
            .to_string();
            match self.store.settle_payment(&payment_id, &event_id, &payload).await {
                Ok(true) => settled += 1,
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, %payment_id, "settlement: not recorded; later"),
            }
        }
        settled
    }

    /// Asks the provider again about payments released in the last `watch`: a charge found
    /// under a released payment's key means money moved for a payment Idem declined (the
    /// provider took the request after Idem's call gave up). It is kept on the payment,
    /// counted and logged as an error, for an operator to refund. Returns how many were found.
    pub async fn watch_released(&self, watch: Duration, recheck_after: Duration, limit: i64) -> usize {
        let ids = match self
            .store
            .take_released_payments_to_watch(watch, recheck_after, limit)
            .await
        {
            Ok(ids) => ids,
            Err(error) => {
                tracing::warn!(%error, "release watch: cannot list payments");
                return 0;
            }
        };
        let mut charged = 0;
        for payment_id in ids {
            match self.provider.find_charge(&payment_id).await {
                Ok(Some(charge)) => match self.store.note_late_charge(&payment_id, &charge.charge_id).await {
                    Ok(true) => {
                        charged += 1;
                        metrics::counter!("idempotency_released_payment_charged_total").increment(1);
                        tracing::error!(
                            %payment_id,
                            charge_id = %charge.charge_id,
                            "a payment released as not charged was charged after all: refund it"
                        );
                    }
                    Ok(false) => {}
                    Err(error) => tracing::warn!(%error, %payment_id, "release watch: not recorded; later"),
                },
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(%error, %payment_id, "release watch: provider look-up failed; later")
                }
            }
        }
        charged
    }

    /// What the provider says about a payment right now.
    pub async fn provider_evidence(&self, payment_id: &str) -> ProviderEvidence {
        match self.provider.find_charge(payment_id).await {
            Ok(Some(charge)) => ProviderEvidence::Charged {
                charge_id: charge.charge_id,
                status: match charge.status {
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

    /// The record at the version an operator saw, if it still needs an operator (an unknown
    /// outcome, or a dead owner's record).
    async fn record_needing_operator(
        &self,
        scope: &Scope,
        previewed_version: i64,
    ) -> Result<RecordAt, ReconcileRefusal> {
        let found = self
            .store
            .load_record(scope)
            .await
            .map_err(|error| ReconcileRefusal::Unavailable(error.to_string()))?
            .ok_or(ReconcileRefusal::Changed)?;
        if !found.needs_operator() || found.record.lease_version != previewed_version {
            return Err(ReconcileRefusal::Changed);
        }
        Ok(found)
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
        match (self.provider_evidence(&payment_id).await, action) {
            (ProviderEvidence::Charged { .. }, ReconcileAction::ApplyProviderResult)
            | (ProviderEvidence::NoCharge, ReconcileAction::RetryCharge) => {}
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
            self.take_over_and_resume(scope, &found, previewed_version, Some(audit), Charging::AskFirst)
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
            self.take_over_and_resume(
                scope,
                &found,
                requested_version,
                Some(audit),
                Charging::Vouched(vouched),
            )
            .await,
        ))
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
        match self.store.release_key(scope, previewed_version, &release).await {
            Ok(true) => {
                tracing::warn!(tenant_id = %scope.tenant_id, payment_id = %release.payment_id, "key released by an operator");
                Ok(Reconciled::KeyReleased)
            }
            Ok(false) => Err(ReconcileRefusal::Changed),
            Err(error) => Err(ReconcileRefusal::Unavailable(error.to_string())),
        }
    }

    /// A payment made without a key whose provider answer was lost: ask the provider by its
    /// key and settle it (the settlement applies only while it is still PROCESSING).
    pub async fn recover_unkeyed(&self, tenant_id: &TenantId, payment: &PaymentView) -> Answer {
        self.execute(
            Owner::Unkeyed,
            tenant_id,
            payment,
            ApiVersion::V2,
            Charging::AskFirst,
        )
        .await
    }

    pub fn lease(&self) -> Duration {
        self.settings.lease
    }

    /// The owner died (its lease expired) after PROVIDER_REQUEST_SENT, or the provider's
    /// answer was lost: take the record over
    /// (exactly one taker wins) and resume with the same payment, asking the provider before
    /// sending anything, so the payment is charged at most once. This is the reconciler: the
    /// retry path and the recovery worker both come here.
    async fn take_over_and_resume(
        &self,
        scope: &Scope,
        found: &RecordAt,
        stale_lease_version: i64,
        audit: Option<&AuditEntry>,
        charging: Charging,
    ) -> Answer {
        let expires_at = Some(found.record.expires_at);
        let taken = self
            .store
            .take_over(
                scope,
                stale_lease_version,
                &self.settings.instance_id,
                self.settings.lease,
            )
            .await;
        let (lease_version, expires_at) = match taken {
            Ok(Some(taken)) => taken,
            // Another retry or worker won: it owns the record now.
            Ok(None) => {
                return Answer::error(ApiError::RequestInProgress { retry_after_secs: 1 }, expires_at);
            }
            Err(error) => return Answer::error(error.as_api_error("take over"), expires_at),
        };
        self.count(&scope.tenant_id, Outcome::Takeover);
        tracing::warn!(tenant_id = %scope.tenant_id, lease_version, "took over a stale owner's record");
        let payment_id = found.record.resource_id.as_deref().unwrap_or_default();
        let payment = match self.store.payment(&scope.tenant_id, payment_id).await {
            Ok(Some(payment)) => payment,
            Ok(None) => {
                tracing::error!(payment_id, "record at PROVIDER_REQUEST_SENT without its payment");
                return Answer::error(ApiError::Internal, Some(expires_at));
            }
            Err(error) => return Answer::error(error.as_api_error("resume"), Some(expires_at)),
        };
        let version = found
            .record
            .response_schema_version
            .as_deref()
            .and_then(ApiVersion::parse)
            .unwrap_or(ApiVersion::V2);
        let owner = Owner::Keyed {
            scope,
            lease_version,
            expires_at,
            audit,
        };
        self.execute(owner, &scope.tenant_id, &payment, version, charging)
            .await
    }

    async fn answer_existing(
        &self,
        request: &CreatePaymentRequest,
        scope: &Scope,
        found: RecordAt,
    ) -> Answer {
        // The retry is compared in the fingerprint version its record was made with.
        let retry = self.fingerprint(request, FingerprintVersion(found.record.fingerprint_version));
        self.answer_with(scope, &found, &retry.sha256_hex).await
    }

    /// This owner was fenced out (another took over meanwhile): the record is the truth now.
    async fn answer_current(&self, scope: &Scope, expires_at: Option<DateTime<Utc>>) -> Answer {
        match self.store.load_record(scope).await {
            Ok(Some(found)) => Box::pin(self.answer_record(scope, found)).await,
            Ok(None) => Answer::error(ApiError::Internal, expires_at),
            Err(error) => Answer::error(error.as_api_error("reload after fencing"), expires_at),
        }
    }

    /// The answer for a record as it stands, to a request with the record's own fingerprint.
    async fn answer_record(&self, scope: &Scope, found: RecordAt) -> Answer {
        let fingerprint = found.record.request_fingerprint.clone();
        self.answer_with(scope, &found, &fingerprint).await
    }

    async fn answer_with(&self, scope: &Scope, found: &RecordAt, fingerprint_hex: &str) -> Answer {
        let expires_at = Some(found.record.expires_at);
        let decision = decide(&found.record, fingerprint_hex, found.now);
        self.count(
            &scope.tenant_id,
            match decision {
                Decision::ConflictDifferentRequest => Outcome::ConflictDifferentRequest,
                Decision::Replay => Outcome::Replay,
                Decision::InProgress { .. } | Decision::TakeOver { .. } | Decision::Reexecute { .. } => {
                    Outcome::InProgress
                }
                Decision::Expired => match self.settings.expiry.after_expiry {
                    AfterExpiry::Reject => Outcome::ExpiredRetry,
                    AfterExpiry::NewOperation => Outcome::InProgress,
                },
                Decision::OutcomeUnknown { .. } | Decision::Recover { .. } => Outcome::OutcomeUnknown,
            },
        );
        match decision {
            Decision::ConflictDifferentRequest => {
                tracing::warn!(
                    tenant_id = %scope.tenant_id,
                    operation = scope.operation.as_str(),
                    stored_fingerprint = %found.record.request_fingerprint,
                    retry_fingerprint = %fingerprint_hex,
                    "idempotency key reused with a different request"
                );
                Answer::error(ApiError::KeyReusedWithDifferentRequest, expires_at)
            }
            Decision::Replay => match self.store.load_response(scope).await {
                Ok(Some(stored)) => match self.sealer.open(&sealing_scope(scope), &stored.body) {
                    Ok(body) => Answer {
                        response: StoredResponse { body, ..stored },
                        replayed: true,
                        expires_at,
                        retry_after_secs: None,
                    },
                    Err(error) => {
                        tracing::error!(%error, tenant_id = %scope.tenant_id, "stored response cannot be opened");
                        Answer::error(ApiError::Internal, expires_at)
                    }
                },
                Ok(None) => {
                    tracing::error!(tenant_id = %scope.tenant_id, "settled record without a stored response");
                    Answer::error(ApiError::Internal, expires_at)
                }
                Err(error) => Answer::error(error.as_api_error("load response"), expires_at),
            },
            Decision::InProgress { retry_after_secs } => {
                Answer::error(ApiError::RequestInProgress { retry_after_secs }, expires_at)
            }
            Decision::TakeOver {
                lease_version,
                resume_from: ProgressStep::ProviderRequestSent,
            } => {
                Box::pin(self.take_over_and_resume(scope, found, lease_version, None, Charging::AskFirst))
                    .await
            }
            // No other step is ever left durable by an owner (the local transaction moves a
            // record to PROVIDER_REQUEST_SENT at once). A released key (FAILED_RETRYABLE) is
            // renewed by the claim itself when the retry's fingerprint matches in the current
            // fingerprint version; one released under an older version is not re-executed
            // (the claim cannot compare it) and waits like an in-progress record.
            Decision::TakeOver { .. } | Decision::Reexecute { .. } => {
                tracing::error!(tenant_id = %scope.tenant_id, "record in a state no owner leaves; not taken over");
                Answer::error(ApiError::RequestInProgress { retry_after_secs: 1 }, expires_at)
            }
            Decision::OutcomeUnknown { retry_after_secs } => Answer::outcome_unknown(
                found.record.resource_id.as_deref().unwrap_or_default(),
                expires_at,
                retry_after_secs,
            ),
            Decision::Recover { lease_version } => {
                Box::pin(self.take_over_and_resume(scope, found, lease_version, None, Charging::AskFirst))
                    .await
            }
            Decision::Expired => match self.settings.expiry.after_expiry {
                AfterExpiry::Reject => {
                    if let Err(error) = self.store.note_expired_retry(scope).await {
                        error.as_api_error("note expired retry");
                    }
                    Answer::error(
                        ApiError::IdempotencyKeyExpired {
                            resource_id: found.record.resource_id.clone(),
                        },
                        expires_at,
                    )
                }
                // The record passed its window between the claim and this read: the retry's
                // own claim renews it, so it is told to come back at once.
                AfterExpiry::NewOperation => {
                    Answer::error(ApiError::RequestInProgress { retry_after_secs: 1 }, expires_at)
                }
            },
        }
    }
}
