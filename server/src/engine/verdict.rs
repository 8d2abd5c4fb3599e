//! What a key's record says to a request that found it ([`decide`], counted as its outcome),
//! and carrying that out: the answer, a note of an expired retry, or the takeover of a record
//! whose owner is gone, read again each time the takeover is fenced out in its turn.

use super::PaymentsEngine;
use super::answer::Answer;
use super::owner::{Charging, Owned};
use super::sealing::SealingError;
use crate::store::records::FoundRecord;
use chrono::Utc;
use domain::api_error::ApiError;
use domain::claim::StoredResponse;
use domain::decision::{Decision, decide};
use domain::expiry::AfterExpiry;
use domain::fingerprint::UnknownFingerprintVersion;
use domain::outcome::Outcome;
use domain::record::ProgressStep;
use domain::scope::{Operation, Scope};

/// How many times one request reads its record again after being fenced out before it tells
/// the client to come back: each round means another owner made progress meanwhile.
const MAX_ROUNDS: usize = 3;

/// What a record says to a request: an answer now, an answer once the record notes it, or
/// "its owner is gone: take it over".
pub(super) enum Verdict {
    Answer(Answer),
    /// A retry past the window under the `reject` policy, counted on its record.
    NoteExpiredRetry(Answer),
    Resume {
        lease_version: i64,
    },
}

impl PaymentsEngine {
    /// An owner's answer; when it was fenced out, what the record says now.
    pub(super) async fn answered(
        &self,
        scope: &Scope,
        owned: Owned,
        expires_at: Option<chrono::DateTime<Utc>>,
    ) -> Answer {
        match owned {
            Owned::Answered(answer) => answer,
            Owned::FencedOut => self.answer_current(scope, expires_at).await,
        }
    }

    /// This owner was fenced out (another took over meanwhile): the record is the truth now,
    /// answered as it stands.
    async fn answer_current(&self, scope: &Scope, expires_at: Option<chrono::DateTime<Utc>>) -> Answer {
        match self.records.look_up(scope).await {
            Ok(Some(found)) => {
                let fingerprint = found.at.record.request_fingerprint.clone();
                self.answer_record(scope, found, &fingerprint).await
            }
            Ok(None) => Answer::error(ApiError::Internal, expires_at),
            Err(error) => Answer::error(error.as_api_error("reload after fencing"), expires_at),
        }
    }

    /// The answer `found` gives a request with `fingerprint_hex`, taking the record over when
    /// its owner is gone.
    pub(super) async fn answer_record(
        &self,
        scope: &Scope,
        mut found: FoundRecord,
        fingerprint_hex: &str,
    ) -> Answer {
        let verdict = self.verdict(scope, &mut found, fingerprint_hex);
        self.carry_out(scope, found, verdict).await
    }

    /// Gives `verdict`'s answer, with what it writes first. A takeover that is fenced out in
    /// turn reads the record again and answers it as it stands: a loop, each round answering
    /// or reading newer state.
    pub(super) async fn carry_out(
        &self,
        scope: &Scope,
        mut found: FoundRecord,
        mut verdict: Verdict,
    ) -> Answer {
        let mut takeovers = 0;
        loop {
            let lease_version = match verdict {
                Verdict::Answer(answer) => return answer,
                Verdict::NoteExpiredRetry(answer) => {
                    if let Err(error) = self.records.note_expired_retry(scope).await {
                        error.as_api_error("note expired retry");
                    }
                    return answer;
                }
                Verdict::Resume { lease_version } => lease_version,
            };
            match self
                .take_over_and_resume(scope, &found.at, lease_version, None, Charging::AskFirst)
                .await
            {
                Owned::Answered(answer) => return answer,
                Owned::FencedOut => takeovers += 1,
            }
            let expires_at = Some(found.at.record.expires_at);
            found = match self.records.look_up(scope).await {
                Ok(Some(current)) => current,
                Ok(None) => return Answer::error(ApiError::Internal, expires_at),
                Err(error) => return Answer::error(error.as_api_error("reload after fencing"), expires_at),
            };
            if takeovers == MAX_ROUNDS {
                return Answer::in_progress(1, Some(found.at.record.expires_at));
            }
            let fingerprint = found.at.record.request_fingerprint.clone();
            verdict = self.verdict(scope, &mut found, &fingerprint);
        }
    }

    /// What the record says to a request with `fingerprint_hex`, counted as its outcome.
    /// A replay takes the response read with the record (it is not needed again).
    pub(super) fn verdict(&self, scope: &Scope, found: &mut FoundRecord, fingerprint_hex: &str) -> Verdict {
        let FoundRecord { at: found, response } = found;
        let expires_at = Some(found.record.expires_at);
        let decision = decide(&found.record, fingerprint_hex, found.now);
        self.count(
            &scope.tenant_id,
            scope.operation,
            self.outcome_of(scope.operation, &decision),
        );
        Verdict::Answer(match decision {
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
            Decision::Replay => self.replay(scope, response.take(), expires_at),
            Decision::InProgress { retry_after_secs } => Answer::in_progress(retry_after_secs, expires_at),
            Decision::TakeOver {
                lease_version,
                resume_from: ProgressStep::ProviderRequestSent,
            }
            | Decision::Recover { lease_version } => return Verdict::Resume { lease_version },
            // No other step is ever left durable by an owner (the local transaction moves a
            // record to PROVIDER_REQUEST_SENT at once). A released key (FAILED_RETRYABLE) is
            // renewed by the claim itself, which compares the retry in the record's version;
            // it reaches this verdict only when another request renewed it first.
            Decision::TakeOver { .. } | Decision::Reexecute { .. } => {
                tracing::error!(tenant_id = %scope.tenant_id, "record in a state no owner leaves; not taken over");
                Answer::in_progress(1, expires_at)
            }
            Decision::OutcomeUnknown { retry_after_secs } => Answer::outcome_unknown(
                scope.operation,
                found.record.resource_id.as_deref().unwrap_or_default(),
                retry_after_secs,
                expires_at,
            ),
            Decision::Expired => match self.after_expiry(scope.operation) {
                AfterExpiry::Reject => {
                    return Verdict::NoteExpiredRetry(Answer::error(
                        ApiError::IdempotencyKeyExpired {
                            resource_id: found.record.resource_id.clone(),
                        },
                        expires_at,
                    ));
                }
                // The record passed its window between the claim and this read: the retry's
                // own claim renews it, so it is told to come back at once.
                AfterExpiry::NewOperation => Answer::in_progress(1, expires_at),
            },
        })
    }

    fn outcome_of(&self, operation: Operation, decision: &Decision) -> Outcome {
        match decision {
            Decision::ConflictDifferentRequest => Outcome::ConflictDifferentRequest,
            Decision::Replay => Outcome::Replay,
            Decision::InProgress { .. } | Decision::TakeOver { .. } | Decision::Reexecute { .. } => {
                Outcome::InProgress
            }
            Decision::Expired => match self.after_expiry(operation) {
                AfterExpiry::Reject => Outcome::ExpiredRetry,
                AfterExpiry::NewOperation => Outcome::InProgress,
            },
            Decision::OutcomeUnknown { .. } | Decision::Recover { .. } => Outcome::OutcomeUnknown,
        }
    }

    /// The stored answer, as read with its record, opened: the same status and body bytes as
    /// the first time.
    fn replay(
        &self,
        scope: &Scope,
        stored: Option<StoredResponse>,
        expires_at: Option<chrono::DateTime<Utc>>,
    ) -> Answer {
        match stored {
            Some(stored) => match self.opened(scope, stored) {
                Ok(response) => Answer::replay(response, expires_at),
                // Another instance holds the key: the retry (after `Retry-After`) gets the
                // replay there, or here once this instance has the key.
                Err(error @ SealingError::KeyNotHeld(_)) => {
                    tracing::error!(%error, tenant_id = %scope.tenant_id, "stored response sealed with a key this instance lacks");
                    Answer::error(ApiError::Unavailable, expires_at)
                }
                Err(error) => {
                    tracing::error!(%error, tenant_id = %scope.tenant_id, "stored response cannot be opened");
                    Answer::error(ApiError::Internal, expires_at)
                }
            },
            None => {
                tracing::error!(tenant_id = %scope.tenant_id, "settled record without a stored response");
                Answer::error(ApiError::Internal, expires_at)
            }
        }
    }
}

/// The answer for a key whose record is in a fingerprint version this build does not know: a
/// newer deploy made it, and only an instance of that deploy can tell a retry from another
/// command. Nothing is decided here: the client retries, and reaches one once the deploy rolls
/// on (`docs/fingerprint.md`).
pub(super) fn made_by_a_newer_deploy(scope: &Scope, unknown: UnknownFingerprintVersion) -> Answer {
    tracing::error!(
        tenant_id = %scope.tenant_id,
        operation = scope.operation.as_str(),
        %unknown,
        "a record made by a newer deploy; answered 503 for the client to retry"
    );
    Answer::error(ApiError::Unavailable, None)
}
