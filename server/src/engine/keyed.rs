//! The idempotency layer's request path, one for every keyed operation: one read of the
//! key's record (with its stored response) answers every retry of a record that exists and
//! cannot be renewed, the replay included; otherwise the insert-first claim decides every
//! race. A request that finds its key's record gets what [`decide`] says (`verdict.rs`), and takes the
//! record over when its owner is gone. An operation brings only its own part
//! ([`KeyedOperation`]): its fingerprint, its claim's local transaction, and what its new
//! owner does: create_payment's in `payments.rs`, create_refund's in `refunds.rs`.
//!
//! Whatever writes (the claim and what its owner does, a takeover, a note of an expired
//! retry) runs [`to_the_end`], on a task of its own: a caller that goes away (a client hanging
//! up) cannot cancel it between two writes. An answer the look-up gives writes nothing and
//! needs no task.
//!
//! A request that asked to wait (`Prefer: wait=N`) and finds its key in progress under another
//! request is held in its caller's future (`waiting.rs`) and then goes through the path again,
//! as a retry at that moment would: it is counted and journalled once, with the answer it got.

use super::PaymentsEngine;
use super::answer::Answer;
use super::owner::{Owned, Owner};
use super::verdict::{Verdict, made_by_a_newer_deploy};
use super::waiting::Held;
use crate::store::StoreError;
use crate::store::metrics::JournalEntry;
use crate::store::records::FoundRecord;
use chrono::{DateTime, TimeDelta, Utc};
use domain::api_error::ApiError;
use domain::claim::{ClaimOutcome, NewClaim};
use domain::decision::{Decision, decide};
use domain::expiry::AfterExpiry;
use domain::fingerprint::{Fingerprint, FingerprintVersion, UnknownFingerprintVersion};
use domain::outcome::Outcome;
use domain::prefer::Wait;
use domain::record::ClaimedAs;
use domain::representation::ApiVersion;
use domain::scope::{Operation, Scope};
use domain::tenant::ApiKeyId;
use std::sync::Arc;

/// What one pass of the request path came to: an answer, or (only for a request that may be
/// held) "another request owns the key now".
enum Attempt {
    Answered(Answer, Option<Compared>),
    KeyHeld,
}

/// What one keyed operation brings to the idempotency layer.
#[async_trait::async_trait]
pub(super) trait KeyedOperation: Send + Sync + 'static {
    /// The request's fingerprint in `version` (a retry is compared in its record's version).
    fn fingerprint(&self, version: FingerprintVersion) -> Fingerprint;

    /// The insert-first claim of the key with the operation's local transaction.
    async fn claim(&self, engine: &PaymentsEngine, claim: &NewClaim) -> Result<ClaimOutcome, StoreError>;

    /// The new owner's work once its claim committed (the resource was created at
    /// `created_at`): the provider, then the completion, fenced by the lease.
    async fn execute(&self, engine: &PaymentsEngine, owner: Owner<'_>, created_at: DateTime<Utc>) -> Owned;
}

impl PaymentsEngine {
    /// A keyed request of `operation` (made with the API key `created_by`), through the
    /// idempotency layer: the answer its key's record gives, or the claim, journalled; held
    /// for up to `wait` while another request owns the key.
    pub(super) async fn keyed(
        self: &Arc<Self>,
        operation: impl KeyedOperation,
        scope: Scope,
        created_by: ApiKeyId,
        api_version: ApiVersion,
        wait: Option<Wait>,
    ) -> Answer {
        let settings = self.settings.of(scope.operation);
        let claim = NewClaim {
            scope,
            fingerprint: operation.fingerprint(self.settings.fingerprint_version),
            created_by,
            response_schema_version: api_version.as_str().to_owned(),
            lease_owner: self.settings.instance_id.clone(),
            lease: settings.lease,
            window: settings.expiry.window,
            after_expiry: settings.expiry.after_expiry,
        };
        let (answer, compared) = self.answer_holding(Arc::new(operation), &claim, wait).await;
        let (fingerprint, retry_delay) = compared.as_ref().map_or((&claim.fingerprint, None), |compared| {
            (&compared.fingerprint, compared.retry_delay)
        });
        self.journal_answer(&claim.scope, fingerprint, &answer, retry_delay);
        answer
    }

    /// Notes the request and its answer in the request journal (a conflicting retry with its
    /// command, for the console's diff; a retry with its delay, for sizing the window).
    fn journal_answer(
        &self,
        scope: &Scope,
        fingerprint: &Fingerprint,
        answer: &Answer,
        retry_delay: Option<TimeDelta>,
    ) {
        let error_code = answer.error_code();
        let conflicting = error_code.as_deref() == Some(ApiError::KeyReusedWithDifferentRequest.code());
        self.journal.record(JournalEntry {
            scope: scope.clone(),
            at: Utc::now(),
            fingerprint: fingerprint.sha256_hex.clone(),
            canonical_command: conflicting.then(|| fingerprint.canonical.clone()),
            status_code: answer.status(),
            error_code,
            replayed: answer.replayed,
            retry_delay,
            window: self.settings.of(scope.operation).expiry.window,
        });
    }

    /// [`Self::answer`], holding the request while another request owns its key when it
    /// asked to `wait` and a slot is free; the answer says whether the wait was applied.
    async fn answer_holding<O: KeyedOperation>(
        self: &Arc<Self>,
        operation: Arc<O>,
        claim: &NewClaim,
        wait: Option<Wait>,
    ) -> (Answer, Option<Compared>) {
        let mut held: Option<Held> = None;
        let mut applied = wait;
        loop {
            let hold = applied.is_some() && held.as_ref().is_none_or(|held| !held.past_deadline());
            match self.answer(Arc::clone(&operation), claim, hold).await {
                Attempt::Answered(answer, compared) => {
                    if let Some(held) = &held {
                        held.ended();
                    }
                    return (answer.with_wait_applied(applied), compared);
                }
                Attempt::KeyHeld => {
                    if held.is_none() {
                        held = applied.and_then(|wait| self.waiting.hold(wait));
                        if held.is_none() {
                            // Past the bound: answered at once, as without the preference.
                            applied = None;
                            continue;
                        }
                    }
                    if let Some(held) = &mut held {
                        held.until_moved(&claim.scope).await;
                    }
                }
            }
        }
    }

    /// The answer, and how the request compared with its key's record if it had one; when
    /// the request may be `hold`, [`Attempt::KeyHeld`] instead of the answer "in progress".
    /// The look-up answers here; the claim, or what the record's verdict writes, runs to the
    /// end.
    async fn answer<O: KeyedOperation>(
        self: &Arc<Self>,
        operation: Arc<O>,
        claim: &NewClaim,
        hold: bool,
    ) -> Attempt {
        let scope = &claim.scope;
        let found = match self.final_answers.get(scope) {
            Some(found) => Some(found),
            None => match self.records.look_up(scope).await {
                Ok(found) => {
                    if let Some(found) = &found {
                        self.final_answers.remember(scope, found);
                    }
                    found
                }
                // Nothing was written: the retry starts afresh.
                Err(error) => {
                    return Attempt::Answered(Answer::error(error.as_api_error("look up"), None), None);
                }
            },
        };
        let Some(mut found) = found else {
            return self.claim_to_the_end(operation, claim.clone(), None, hold).await;
        };
        let compared = match Compared::with(&*operation, &claim.fingerprint, &found) {
            Ok(compared) => compared,
            Err(unknown) => return Attempt::Answered(made_by_a_newer_deploy(scope, unknown), None),
        };
        if let Some(renewal) = self.renewal(claim, &found, &compared.fingerprint) {
            return self
                .claim_to_the_end(operation, renewal, Some(compared), hold)
                .await;
        }
        if hold && held_by_another(&found, &compared.fingerprint) {
            return Attempt::KeyHeld;
        }
        let answer = match self.verdict(scope, &mut found, &compared.fingerprint.sha256_hex) {
            Verdict::Answer(answer) => answer,
            verdict => {
                let (engine, scope) = (Arc::clone(self), scope.clone());
                to_the_end(async move { engine.carry_out(&scope, found, verdict).await })
                    .await
                    .unwrap_or_else(|failed| failed)
            }
        };
        Attempt::Answered(answer, Some(compared))
    }

    /// [`Self::claim_and_answer`], run to the end.
    async fn claim_to_the_end<O: KeyedOperation>(
        self: &Arc<Self>,
        operation: Arc<O>,
        claim: NewClaim,
        compared: Option<Compared>,
        hold: bool,
    ) -> Attempt {
        let engine = Arc::clone(self);
        to_the_end(async move { engine.claim_and_answer(&*operation, &claim, compared, hold).await })
            .await
            .unwrap_or_else(|failed| Attempt::Answered(failed, None))
    }

    /// The insert-first claim, and the answer to what it decided; when the claim found the
    /// key's record made or changed since the look-up (a concurrent request), the answer that
    /// record gives (or [`Attempt::KeyHeld`]), and the request compared with that record
    /// instead of the look-up's.
    async fn claim_and_answer(
        &self,
        operation: &impl KeyedOperation,
        claim: &NewClaim,
        compared: Option<Compared>,
        hold: bool,
    ) -> Attempt {
        if let Some(answer) = self.claim_anew(operation, claim).await {
            return Attempt::Answered(answer, compared);
        }
        let scope = &claim.scope;
        match self.records.look_up(scope).await {
            Ok(Some(found)) => match Compared::with(operation, &claim.fingerprint, &found) {
                Ok(compared) if hold && held_by_another(&found, &compared.fingerprint) => Attempt::KeyHeld,
                Ok(compared) => {
                    let answer = self
                        .answer_record(scope, found, &compared.fingerprint.sha256_hex)
                        .await;
                    Attempt::Answered(answer, Some(compared))
                }
                Err(unknown) => Attempt::Answered(made_by_a_newer_deploy(scope, unknown), None),
            },
            Ok(None) => Attempt::Answered(Answer::in_progress(1, None), None),
            Err(error) => Attempt::Answered(
                Answer::error(error.as_api_error("look up after the claim"), None),
                None,
            ),
        }
    }

    /// The insert-first claim for a key without a record, or whose record may be renewed, and
    /// the answer to what it decided; `None` when the claim found the key's record made or
    /// changed since the look-up (by a concurrent request), which is then read again.
    async fn claim_anew(&self, operation: &impl KeyedOperation, claim: &NewClaim) -> Option<Answer> {
        let scope = &claim.scope;
        let claimed = operation.claim(self, claim).await;
        if let Ok(
            ClaimOutcome::Claimed { claimed_as, .. }
            | ClaimOutcome::Bound { claimed_as, .. }
            | ClaimOutcome::Refused { claimed_as, .. },
        ) = &claimed
            && *claimed_as == ClaimedAs::AfterExpiry
        {
            self.count(&scope.tenant_id, scope.operation, Outcome::ExpiredRetry);
        }
        let answer = match claimed {
            Ok(ClaimOutcome::Claimed {
                lease_version,
                expires_at,
                created_at,
                ..
            }) => {
                self.count(&scope.tenant_id, scope.operation, Outcome::NewExecution);
                let owner = Owner::Keyed {
                    scope,
                    lease_version,
                    expires_at,
                    audit: None,
                };
                let owned = operation.execute(self, owner, created_at).await;
                self.waiting.settled(scope);
                self.answered(scope, owned, Some(expires_at)).await
            }
            Ok(ClaimOutcome::Existing(_)) => return None,
            Ok(ClaimOutcome::Bound {
                error, expires_at, ..
            }) => Answer::error(error, Some(expires_at)),
            Ok(ClaimOutcome::Refused { refusal, .. }) => Answer::error(refusal.api_error(), None),
            // The claim's transaction did not commit: nothing was recorded, a retry executes.
            Err(error) => Answer::error(error.as_api_error("claim"), None),
        };
        Some(answer)
    }

    /// The claim that renews `found`'s record, when the request may renew it (only then does a
    /// request that found a record go on to the claim, which decides that race). A key an
    /// operator released is the same operation carried on: it is claimed in its record's
    /// fingerprint version, which the claim compares. A settled record past its window under
    /// `new_operation` is a new operation, in this instance's version.
    fn renewal(&self, claim: &NewClaim, found: &FoundRecord, retry: &Fingerprint) -> Option<NewClaim> {
        match decide(&found.at.record, &retry.sha256_hex, found.at.now) {
            Decision::Reexecute { .. } => Some(NewClaim {
                fingerprint: retry.clone(),
                ..claim.clone()
            }),
            Decision::Expired if self.after_expiry(claim.scope.operation) == AfterExpiry::NewOperation => {
                Some(claim.clone())
            }
            _ => None,
        }
    }

    pub(super) fn after_expiry(&self, operation: Operation) -> AfterExpiry {
        self.settings.of(operation).expiry.after_expiry
    }
}

/// Runs `work` on a task of its own, so that it runs to its end even when its caller goes
/// away (no half-done operation, no connection returned to the pool inside a transaction);
/// the answer when the task failed is a 500.
pub(super) async fn to_the_end<T: Send + 'static>(
    work: impl Future<Output = T> + Send + 'static,
) -> Result<T, Answer> {
    tokio::spawn(work).await.map_err(|error| {
        tracing::error!(%error, "a keyed operation's task failed");
        Answer::error(ApiError::Internal, None)
    })
}

/// Whether another request owns `found`'s key now, so that a retry with `fingerprint` would be
/// told "in progress" (a different command is told so at once, and an owner gone is taken
/// over: neither is held).
fn held_by_another(found: &FoundRecord, fingerprint: &Fingerprint) -> bool {
    matches!(
        decide(&found.at.record, &fingerprint.sha256_hex, found.at.now),
        Decision::InProgress { .. }
    )
}

/// How a request compares with its key's record: its fingerprint in the version the record was
/// made in (the current one, already computed, when they are the same), and how long after the
/// record's first request it came if it is a retry of that record.
struct Compared {
    fingerprint: Fingerprint,
    retry_delay: Option<TimeDelta>,
}

impl Compared {
    fn with(
        operation: &impl KeyedOperation,
        current: &Fingerprint,
        found: &FoundRecord,
    ) -> Result<Compared, UnknownFingerprintVersion> {
        let version = FingerprintVersion::known(found.at.record.fingerprint_version)?;
        let fingerprint = if version == current.version {
            current.clone()
        } else {
            operation.fingerprint(version)
        };
        let retry_delay = found.at.retry_delay(&fingerprint.sha256_hex);
        Ok(Compared {
            fingerprint,
            retry_delay,
        })
    }
}
