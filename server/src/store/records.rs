//! Idempotency records, for the engine: the insert-first claim of a scoped key (with the
//! payment's local transaction), the owner's fenced writes (completion, unknown outcome), the
//! takeover of a dead owner's record, an operator's release of a key, and the reads a retry
//! and the recovery worker decide from.

use super::dialect::{Dialect, RowsAffected, SqlStore};
use super::error::StoreError;
use super::operators::insert_audit;
use super::payments::{
    LocalStep, PaymentStatements, create_payment_in, no_longer_processing, payment_outcome, refusal,
    release_hold_in, settle_payment_in,
};
use crate::crash::{CrashPoint, crash_point};
use chrono::{DateTime, Utc};
use domain::api_error::ApiError;
use domain::claim::{ClaimOutcome, KeyRelease, NewClaim, PaymentCompletion, ProviderVerdict, StoredResponse};
use domain::expiry::AfterExpiry;
use domain::key::IdempotencyKey;
use domain::payment::{NewPayment, new_event_id};
use domain::record::{ClaimedAs, RecordAt, StoredRecord};
use domain::recovery::{ProviderFailure, UnknownCause};
use domain::scope::{Operation, Scope};
use domain::tenant::TenantId;
use sqlx::query::QueryAs;
use sqlx::{Database, Transaction};
use std::time::Duration;

/// A scoped key's record as one read found it, with its stored response.
#[derive(Debug, Clone)]
pub struct FoundRecord {
    pub at: RecordAt,
    /// Settled records only (a purged tombstone has none).
    pub response: Option<StoredResponse>,
}

#[async_trait::async_trait]
pub trait RecordStore: Send + Sync {
    /// The record of a scoped key with its stored response, if any, and the database's clock
    /// at the time of reading: one statement, no transaction, no lock. A replay needs nothing
    /// more.
    async fn look_up(&self, scope: &Scope) -> Result<Option<FoundRecord>, StoreError>;

    /// The record of a scoped key, if any, with the database's clock at the time of reading.
    async fn load_record(&self, scope: &Scope) -> Result<Option<RecordAt>, StoreError> {
        Ok(self.look_up(scope).await?.map(|found| found.at))
    }

    /// The stored response of a scoped key, if any (settled records only).
    async fn load_response(&self, scope: &Scope) -> Result<Option<StoredResponse>, StoreError> {
        Ok(self.look_up(scope).await?.and_then(|found| found.response))
    }

    /// The local transaction of a new create_payment: insert-first claim of the scoped key,
    /// account check, amount held, payment row and its PaymentCreated event, all committed
    /// together (or nothing, when the claim finds an existing record or the command cannot be
    /// executed). `insufficient_funds` is the answer the key is bound to when the balance is
    /// too low.
    async fn claim_create_payment(
        &self,
        claim: &NewClaim,
        payment: &NewPayment,
        insufficient_funds: &StoredResponse,
    ) -> Result<ClaimOutcome, StoreError>;

    /// The completion transaction: payment status and charge id, the hold released when
    /// declined, the outcome's event, and the record settled (COMPLETED for an authorisation,
    /// FAILED_REPLAYABLE for a decline) with its response. Conditional on `lease_version`:
    /// `Ok(false)` means another owner took over and nothing was written.
    async fn complete_create_payment(
        &self,
        scope: &Scope,
        lease_version: i64,
        completion: &PaymentCompletion,
    ) -> Result<bool, StoreError>;

    /// Marks a claimed record UNKNOWN_REQUIRES_RECOVERY (the provider's answer was lost),
    /// counting the attempt and backing off the next one (1 s, 2 s, 4 s … 256 s), and notes
    /// why (`failure`: its cause when a send failed, its words and time always).
    /// Conditional on `lease_version`, like every owner's write.
    async fn mark_outcome_unknown(
        &self,
        scope: &Scope,
        lease_version: i64,
        failure: &ProviderFailure,
    ) -> Result<bool, StoreError>;

    /// Takes over a record whose owner's lease expired (or whose outcome is unknown): one
    /// conditional update on the stale lease version, so exactly one taker wins.
    /// `Some((new lease version, expiry))` for the winner, `None` for everyone else.
    async fn take_over(
        &self,
        scope: &Scope,
        stale_lease_version: i64,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<(i64, DateTime<Utc>)>, StoreError>;

    /// An operator's release of a key whose payment the provider never charged: the record
    /// (still needing an operator, still at `previewed_version`) becomes FAILED_RETRYABLE with
    /// a higher lease version, its payment DECLINED and released (hold returned, merchant
    /// reference freed), with a PaymentDeclined event and the audit entry, in one
    /// transaction. `false` (nothing written) when the record changed since the preview.
    async fn release_key(
        &self,
        scope: &Scope,
        previewed_version: i64,
        release: &KeyRelease,
    ) -> Result<bool, StoreError>;

    /// Records the recovery worker should try to resolve: unknown outcomes whose backoff has
    /// passed and that have not used up `max_attempts`, and in-progress records whose lease
    /// expired.
    async fn recovery_candidates(&self, max_attempts: i32, limit: i64) -> Result<Vec<Scope>, StoreError>;

    /// Notes on the record that a retry arrived after its window (the `reject` policy; a
    /// renewal by `new_operation` notes it in the claim).
    async fn note_expired_retry(&self, scope: &Scope) -> Result<(), StoreError>;
}

/// Record statements that differ by dialect (the database's clock and interval arithmetic).
/// Placeholders are `$1`, `$2`, … in order of first use, which both dialects bind positionally.
pub trait RecordStatements {
    /// `$1`..`$3` scope: the columns [`StoredRecord`] holds, the database's clock, and the
    /// stored response (status, headers, body; null without one), in one statement.
    const LOOK_UP_RECORD: &'static str;
    /// The claim, one statement: `insert … on conflict (scope) do update … where … returning`.
    /// `$1`..`$6` scope and fingerprint (version, hex, canonical), `$7` payment id, `$8`
    /// response schema version, `$9` lease owner, `$10` lease seconds, `$11` created by, `$12`
    /// window seconds, `$13` whether a settled record past its window is renewed
    /// (`new_operation`). An existing record is taken for the new operation in the same
    /// statement, with a higher lease version, only when it is settled and past its window
    /// under `new_operation`, or was released by an operator (FAILED_RETRYABLE) and this retry
    /// repeats it exactly (same fingerprint, same version); any other record is left alone and
    /// nothing is returned. Returns the lease version, the expiry and how it was claimed
    /// (`new`, `after_expiry`, `after_release`).
    const CLAIM_RECORD: &'static str;
    /// `$1` response status, `$2`..`$4` scope: the record is bound to a stored refusal (a 422).
    const BIND_STORED_ERROR: &'static str;
    /// `$1` status, `$2` response status, `$3` provider reference, `$4`..`$6` scope, `$7`
    /// lease version: IN_PROGRESS at that version -> settled.
    const SETTLE_RECORD: &'static str;
    /// `$1`..`$3` scope, `$4` lease version, `$5` the failed send's cause (null after a failed
    /// look-up: the cause stays), `$6` the failure in words: IN_PROGRESS at that version ->
    /// unknown outcome, attempt counted, next look backed off, the failure and its time noted.
    const MARK_UNKNOWN: &'static str;
    /// `$1` new owner, `$2` lease seconds, `$3`..`$5` scope, `$6` the stale lease version:
    /// takes an expired lease (or an unknown outcome), bumping its version; returns the new
    /// version and the expiry.
    const TAKE_OVER: &'static str;
    /// `$1` attempt limit, `$2` batch size: unknown outcomes due for another look, and
    /// in-progress records whose owner's lease ran out.
    const RECOVERY_CANDIDATES: &'static str;
    /// `$1`..`$3` scope, `$4` the previewed lease version: a record that still needs an
    /// operator becomes FAILED_RETRYABLE (lease version bumped, so no owner can write);
    /// returns its payment id.
    const RELEASE_RECORD: &'static str;
    /// create_payment's claim as one statement that is its own transaction (no BEGIN or
    /// COMMIT: one round trip), where the dialect writes several tables in one (PostgreSQL's
    /// data-modifying `with`): the claim ([`Self::CLAIM_RECORD`]'s `$1`..`$14`, `$8` the
    /// payment id), a renewed record's old response deleted, the hold, the payment and its
    /// PaymentCreated event, each only if the one before it happened. `$15` amount, `$16`
    /// account, `$17` currency, `$18` merchant reference, `$19` channel, `$20` event id, `$21`
    /// event payload. Returns the claim's lease version, expiry and how it was claimed, with
    /// the payment's creation time ([`ClaimedAtOnce`]). No row: the key's record exists. When
    /// no hold can be taken (the account refuses, or lacks the funds) it raises
    /// `idem:not_held` and writes nothing. `None`: the dialect takes the claim's steps one by
    /// one.
    const CLAIM_PAYMENT_AT_ONCE: Option<&'static str>;
    /// create_payment's completion as one statement likewise: [`Self::SETTLE_RECORD`]'s
    /// `$1`..`$7`, then the response (`$8` headers, `$9` body), the payment's outcome (`$10`
    /// status, `$11` payment id; `$3` the charge id), its hold given back when `$12` (a
    /// decline), its event (`$13` id, `$14` type, `$15` payload). Returns how many records it
    /// settled ([`Settled`]): 0 for an owner fenced out. A record settled whose payment is no
    /// longer PROCESSING raises `idem:payment_not_processing` and writes nothing.
    const COMPLETE_PAYMENT_AT_ONCE: Option<&'static str>;
}

/// A row of [`RecordStatements::CLAIM_RECORD`].
#[derive(sqlx::FromRow)]
struct ClaimedRecord {
    lease_version: i64,
    expires_at: DateTime<Utc>,
    claimed_as: String,
}

/// A row of [`RecordStatements::CLAIM_PAYMENT_AT_ONCE`].
#[derive(sqlx::FromRow)]
struct ClaimedAtOnce {
    lease_version: i64,
    expires_at: DateTime<Utc>,
    claimed_as: String,
    created_at: DateTime<Utc>,
}

/// A row of [`RecordStatements::COMPLETE_PAYMENT_AT_ONCE`].
#[derive(sqlx::FromRow)]
struct Settled {
    records: i64,
}

/// Why a statement that is its own transaction refused its whole work (it raised
/// `idem:<reason>`, so it wrote nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AtOnceRefusal {
    /// The claim could take no hold: the steps one by one name the refusal.
    NotHeld,
    /// The completion settled a record whose payment is no longer PROCESSING.
    PaymentNotProcessing,
}

impl AtOnceRefusal {
    fn of(error: &sqlx::Error) -> Option<AtOnceRefusal> {
        let sqlx::Error::Database(error) = error else {
            return None;
        };
        // PL/pgSQL's `raise exception` (`idem_refuse`, migration 0025).
        if error.code().as_deref() != Some("P0001") {
            return None;
        }
        match error.message() {
            "idem:not_held" => Some(AtOnceRefusal::NotHeld),
            "idem:payment_not_processing" => Some(AtOnceRefusal::PaymentNotProcessing),
            _ => None,
        }
    }
}

impl From<AtOnceRefusal> for StoreError {
    fn from(refusal: AtOnceRefusal) -> Self {
        StoreError::Corrupt(format!("a statement refused its work: {refusal:?}"))
    }
}

/// A row of [`RecordStatements::LOOK_UP_RECORD`]: the record's columns, the database's time,
/// then its response's columns (absent when it has none).
#[derive(sqlx::FromRow)]
struct LookUpRow {
    status: String,
    progress_step: String,
    fingerprint_version: i32,
    request_fingerprint: String,
    lease_version: i64,
    locked_until: Option<DateTime<Utc>>,
    expires_at: DateTime<Utc>,
    resource_id: Option<String>,
    response_schema_version: Option<String>,
    next_recovery_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    database_now: DateTime<Utc>,
    response_status_code: Option<i32>,
    headers: Option<String>,
    body: Option<Vec<u8>>,
}

fn found_of(row: LookUpRow) -> Result<FoundRecord, StoreError> {
    let version = row.fingerprint_version;
    let record = StoredRecord {
        status: StoreError::parse_stored("record status", &row.status)?,
        progress_step: StoreError::parse_stored("progress step", &row.progress_step)?,
        fingerprint_version: u16::try_from(version)
            .map_err(|_| StoreError::corrupt("fingerprint version", version))?,
        request_fingerprint: row.request_fingerprint,
        lease_version: row.lease_version,
        locked_until: row.locked_until,
        expires_at: row.expires_at,
        resource_id: row.resource_id,
        response_schema_version: row.response_schema_version,
        next_recovery_at: row.next_recovery_at,
        first_request_at: row.created_at,
    };
    let response = match (row.headers, row.body) {
        (Some(headers), Some(body)) => {
            let status = row
                .response_status_code
                .and_then(|status| u16::try_from(status).ok())
                .ok_or_else(|| StoreError::Corrupt("response without a status".into()))?;
            Some(StoredResponse::from_stored(status, &headers, body).map_err(StoreError::Corrupt)?)
        }
        _ => None,
    };
    Ok(FoundRecord {
        at: RecordAt {
            record,
            now: row.database_now,
        },
        response,
    })
}

/// The stored response of a settled record: its status, its headers (JSON) and its body.
/// Writes a record's response inside `tx`.
async fn insert_response_in<D: Dialect>(
    tx: &mut Transaction<'static, D>,
    scope: &Scope,
    response: &StoredResponse,
) -> Result<(), StoreError> {
    sqlx::query(
        "insert into idempotency_responses (tenant_id, operation_name, idempotency_key, headers, body) \
         values ($1, $2, $3, $4, $5)",
    )
    .bind(scope.tenant_id.as_str())
    .bind(scope.operation.as_str())
    .bind(scope.key.as_str())
    .bind(response.headers_json())
    .bind(response.body.as_slice())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The insert-first claim of `claim`'s scoped key inside `tx`, for an operation whose
/// resource (`resource_type`, `resource_id`) the same transaction creates: exactly one request
/// wins the key; the others wait for its transaction and then find its row (`None`). A
/// renewed record loses its old answer, which is not this operation's.
pub(super) async fn claim_record_in<D: Dialect + RecordStatements>(
    tx: &mut Transaction<'static, D>,
    claim: &NewClaim,
    resource_type: &str,
    resource_id: &str,
) -> Result<Option<(i64, DateTime<Utc>, ClaimedAs)>, StoreError> {
    let scope = &claim.scope;
    let inserted: Option<ClaimedRecord> =
        bind_claim(sqlx::query_as(D::CLAIM_RECORD), claim, resource_type, resource_id)
            .fetch_optional(&mut **tx)
            .await?;
    let Some(ClaimedRecord {
        lease_version,
        expires_at,
        claimed_as,
    }) = inserted
    else {
        return Ok(None);
    };
    crash_point(CrashPoint::InsideLocalTransaction);
    let claimed_as: ClaimedAs = StoreError::parse_stored("claimed_as", &claimed_as)?;
    if claimed_as != ClaimedAs::New {
        sqlx::query(
            "delete from idempotency_responses \
             where tenant_id = $1 and operation_name = $2 and idempotency_key = $3",
        )
        .bind(scope.tenant_id.as_str())
        .bind(scope.operation.as_str())
        .bind(scope.key.as_str())
        .execute(&mut **tx)
        .await?;
    }
    Ok(Some((lease_version, expires_at, claimed_as)))
}

/// [`RecordStatements::CLAIM_RECORD`]'s parameters, `$1`..`$14`.
fn bind_claim<'q, D: Dialect, O>(
    query: QueryAs<'q, D, O, <D as Database>::Arguments<'q>>,
    claim: &'q NewClaim,
    resource_type: &'q str,
    resource_id: &'q str,
) -> QueryAs<'q, D, O, <D as Database>::Arguments<'q>> {
    let scope = &claim.scope;
    query
        .bind(scope.tenant_id.as_str())
        .bind(scope.operation.as_str())
        .bind(scope.key.as_str())
        .bind(i16::try_from(claim.fingerprint.version.number()).unwrap_or(i16::MAX))
        .bind(claim.fingerprint.sha256_hex.as_str())
        .bind(claim.fingerprint.canonical.as_str())
        .bind(resource_type)
        .bind(resource_id)
        .bind(claim.response_schema_version.as_str())
        .bind(claim.lease_owner.as_str())
        .bind(claim.lease.as_secs_f64())
        .bind(claim.created_by.as_str())
        .bind(claim.window.as_secs_f64())
        .bind(claim.after_expiry == AfterExpiry::NewOperation)
}

/// Binds a just-claimed record to a refusal the contract replays (`response`), inside `tx`.
pub(super) async fn bind_error_in<D: Dialect + RecordStatements>(
    tx: &mut Transaction<'static, D>,
    scope: &Scope,
    response: &StoredResponse,
) -> Result<(), StoreError> {
    sqlx::query(D::BIND_STORED_ERROR)
        .bind(i32::from(response.status))
        .bind(scope.tenant_id.as_str())
        .bind(scope.operation.as_str())
        .bind(scope.key.as_str())
        .execute(&mut **tx)
        .await?;
    insert_response_in(tx, scope, response).await
}

/// Settles a claimed record (`record_status`: COMPLETED or FAILED_REPLAYABLE) with its
/// response and the provider's reference, inside `tx`, fenced by `lease_version`: the fence
/// comes first, so an owner that lost its lease writes nothing at all (`false`).
pub(super) async fn settle_record_in<D: Dialect + RecordStatements>(
    tx: &mut Transaction<'static, D>,
    scope: &Scope,
    lease_version: i64,
    record_status: &str,
    response: &StoredResponse,
    provider_reference: &str,
) -> Result<bool, StoreError> {
    let settled = sqlx::query(D::SETTLE_RECORD)
        .bind(record_status)
        .bind(i32::from(response.status))
        .bind(provider_reference)
        .bind(scope.tenant_id.as_str())
        .bind(scope.operation.as_str())
        .bind(scope.key.as_str())
        .bind(lease_version)
        .execute(&mut **tx)
        .await?
        .rows_affected();
    if settled == 0 {
        return Ok(false);
    }
    insert_response_in(tx, scope, response).await?;
    Ok(true)
}

impl<D: Dialect + RecordStatements + PaymentStatements> SqlStore<D> {
    /// The claim found the key's record: `tx` is rolled back and the record read.
    pub(super) async fn existing(
        &self,
        tx: Transaction<'static, D>,
        scope: &Scope,
    ) -> Result<ClaimOutcome, StoreError> {
        tx.rollback().await?;
        self.existing_record(scope).await
    }

    /// The key's record, which a claim found.
    async fn existing_record(&self, scope: &Scope) -> Result<ClaimOutcome, StoreError> {
        match self.look_up(scope).await? {
            Some(found) => Ok(ClaimOutcome::Existing(found.at)),
            // Gone between the insert and the read (deleted by cleanup): the caller may
            // simply try again.
            None => Err(StoreError::Corrupt("claimed record vanished".into())),
        }
    }

    /// create_payment's claim as one statement that is its own transaction
    /// ([`RecordStatements::CLAIM_PAYMENT_AT_ONCE`]), for the common case: the key is free and
    /// the account takes the hold. `None` when it is not that case and nothing was written:
    /// the claim's steps one by one then decide and name the refusal.
    async fn claim_payment_at_once(
        &self,
        statement: &'static str,
        claim: &NewClaim,
        payment: &NewPayment,
    ) -> Result<Option<ClaimOutcome>, StoreError> {
        let event_id = new_event_id();
        let event = payment.created_event(&event_id);
        // A crash here or while the statement runs leaves nothing, as inside a transaction:
        // the statement is one.
        crash_point(CrashPoint::InsideLocalTransaction);
        let claimed: Result<Option<ClaimedAtOnce>, sqlx::Error> =
            bind_claim(sqlx::query_as(statement), claim, "payment", payment.id.as_str())
                .bind(payment.amount.minor_units())
                .bind(payment.account_id.as_str())
                .bind(payment.amount.currency().code())
                .bind(payment.merchant_reference.as_str())
                .bind(payment.channel.as_str())
                .bind(event_id.as_str())
                .bind(event.as_str())
                .fetch_optional(&self.writer)
                .await;
        let claimed = match claimed {
            Ok(claimed) => claimed,
            Err(error) => match AtOnceRefusal::of(&error) {
                Some(AtOnceRefusal::NotHeld) => return Ok(None),
                Some(refusal) => return Err(refusal.into()),
                None => match StoreError::from(error) {
                    // The merchant reference is taken by another payment.
                    StoreError::AlreadyExists => return Ok(None),
                    error => return Err(error),
                },
            },
        };
        let Some(claimed) = claimed else {
            return self.existing_record(&claim.scope).await.map(Some);
        };
        Ok(Some(ClaimOutcome::Claimed {
            lease_version: claimed.lease_version,
            expires_at: claimed.expires_at,
            created_at: claimed.created_at,
            claimed_as: StoreError::parse_stored("claimed_as", &claimed.claimed_as)?,
        }))
    }

    /// create_payment's completion as one statement
    /// ([`RecordStatements::COMPLETE_PAYMENT_AT_ONCE`]): its own transaction, or with an
    /// operator's audit entry beside it in one.
    async fn complete_payment_at_once(
        &self,
        statement: &'static str,
        scope: &Scope,
        lease_version: i64,
        record_status: &str,
        completion: &PaymentCompletion,
    ) -> Result<bool, StoreError> {
        let (payment_status, event_type) = payment_outcome(completion.verdict);
        let query = sqlx::query_as(statement)
            .bind(record_status)
            .bind(i32::from(completion.response.status))
            .bind(completion.provider_charge_id.as_str())
            .bind(scope.tenant_id.as_str())
            .bind(scope.operation.as_str())
            .bind(scope.key.as_str())
            .bind(lease_version)
            .bind(completion.response.headers_json())
            .bind(completion.response.body.as_slice())
            .bind(payment_status)
            .bind(completion.payment_id.as_str())
            .bind(completion.verdict == ProviderVerdict::Declined)
            .bind(completion.event_id.as_str())
            .bind(event_type)
            .bind(completion.event_payload.as_str());
        let refused = |error: sqlx::Error| match AtOnceRefusal::of(&error) {
            Some(AtOnceRefusal::PaymentNotProcessing) => no_longer_processing(&completion.payment_id),
            Some(refusal) => refusal.into(),
            None => StoreError::from(error),
        };
        let Some(audit) = &completion.audit else {
            let settled: Settled = query.fetch_one(&self.writer).await.map_err(refused)?;
            return Ok(settled.records > 0);
        };
        let mut tx = self.begin().await?;
        let settled: Settled = query.fetch_one(&mut *tx).await.map_err(refused)?;
        if settled.records == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        insert_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// A refused command wrote nothing; a renewal of an expired record is still noted as an
    /// expired retry (the rollback took the claim's note with it).
    pub(super) async fn note_refused_renewal(
        &self,
        scope: &Scope,
        claimed_as: ClaimedAs,
    ) -> Result<(), StoreError> {
        if claimed_as == ClaimedAs::AfterExpiry {
            self.note_expired_retry(scope).await?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl<D: Dialect + RecordStatements + PaymentStatements> RecordStore for SqlStore<D> {
    async fn look_up(&self, scope: &Scope) -> Result<Option<FoundRecord>, StoreError> {
        let row: Option<LookUpRow> = sqlx::query_as(D::LOOK_UP_RECORD)
            .bind(scope.tenant_id.as_str())
            .bind(scope.operation.as_str())
            .bind(scope.key.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.map(found_of).transpose()
    }

    async fn claim_create_payment(
        &self,
        claim: &NewClaim,
        payment: &NewPayment,
        insufficient_funds: &StoredResponse,
    ) -> Result<ClaimOutcome, StoreError> {
        if let Some(statement) = D::CLAIM_PAYMENT_AT_ONCE
            && let Some(outcome) = self.claim_payment_at_once(statement, claim, payment).await?
        {
            return Ok(outcome);
        }
        let scope = &claim.scope;
        let mut tx = self.begin().await?;
        let Some((lease_version, expires_at, claimed_as)) =
            claim_record_in(&mut tx, claim, "payment", payment.id.as_str()).await?
        else {
            return self.existing(tx, scope).await;
        };
        let created_at = match create_payment_in(&mut tx, payment, Some(scope.key.as_str())).await? {
            LocalStep::Created(created_at) => created_at,
            LocalStep::InsufficientFunds => {
                bind_error_in(&mut tx, scope, insufficient_funds).await?;
                tx.commit().await?;
                return Ok(ClaimOutcome::Bound {
                    error: ApiError::InsufficientFunds,
                    expires_at,
                    claimed_as,
                });
            }
            refused => {
                tx.rollback().await?;
                self.note_refused_renewal(scope, claimed_as).await?;
                let refusal = refusal(&self.pool, refused, payment).await?;
                return Ok(ClaimOutcome::Refused { refusal, claimed_as });
            }
        };
        tx.commit().await?;
        Ok(ClaimOutcome::Claimed {
            lease_version,
            expires_at,
            created_at,
            claimed_as,
        })
    }

    async fn complete_create_payment(
        &self,
        scope: &Scope,
        lease_version: i64,
        completion: &PaymentCompletion,
    ) -> Result<bool, StoreError> {
        let record_status = match completion.verdict {
            ProviderVerdict::Authorized => "COMPLETED",
            ProviderVerdict::Declined => "FAILED_REPLAYABLE",
        };
        if let Some(statement) = D::COMPLETE_PAYMENT_AT_ONCE {
            return self
                .complete_payment_at_once(statement, scope, lease_version, record_status, completion)
                .await;
        }
        let mut tx = self.begin().await?;
        let settled = settle_record_in(
            &mut tx,
            scope,
            lease_version,
            record_status,
            &completion.response,
            &completion.provider_charge_id,
        )
        .await?;
        if !settled {
            tx.rollback().await?;
            return Ok(false);
        }
        settle_payment_in(&mut tx, completion).await?;
        if let Some(audit) = &completion.audit {
            insert_audit(&mut tx, audit).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn mark_outcome_unknown(
        &self,
        scope: &Scope,
        lease_version: i64,
        failure: &ProviderFailure,
    ) -> Result<bool, StoreError> {
        let marked = self
            .write_one(
                sqlx::query(D::MARK_UNKNOWN)
                    .bind(scope.tenant_id.as_str())
                    .bind(scope.operation.as_str())
                    .bind(scope.key.as_str())
                    .bind(lease_version)
                    .bind(failure.cause.map(UnknownCause::as_str))
                    .bind(failure.words.as_str()),
            )
            .await?;
        Ok(marked == 1)
    }

    async fn take_over(
        &self,
        scope: &Scope,
        stale_lease_version: i64,
        owner: &str,
        lease: Duration,
    ) -> Result<Option<(i64, DateTime<Utc>)>, StoreError> {
        let mut tx = self.begin().await?;
        let taken: Option<TakenOver> = sqlx::query_as(D::TAKE_OVER)
            .bind(owner)
            .bind(lease.as_secs_f64())
            .bind(scope.tenant_id.as_str())
            .bind(scope.operation.as_str())
            .bind(scope.key.as_str())
            .bind(stale_lease_version)
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(taken.map(|taken| (taken.lease_version, taken.expires_at)))
    }

    async fn release_key(
        &self,
        scope: &Scope,
        previewed_version: i64,
        release: &KeyRelease,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let released: Option<Option<String>> = sqlx::query_scalar(D::RELEASE_RECORD)
            .bind(scope.tenant_id.as_str())
            .bind(scope.operation.as_str())
            .bind(scope.key.as_str())
            .bind(previewed_version)
            .fetch_optional(&mut *tx)
            .await?;
        match released {
            None => {
                tx.rollback().await?;
                return Ok(false);
            }
            Some(payment_id) if payment_id.as_deref() != Some(release.payment_id.as_str()) => {
                return Err(StoreError::Corrupt(format!(
                    "record's payment {payment_id:?} is not {}",
                    release.payment_id
                )));
            }
            Some(_) => {}
        }
        let declined = sqlx::query(D::RELEASE_PAYMENT)
            .bind(release.payment_id.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if declined == 0 {
            return Err(StoreError::Corrupt(format!(
                "payment {} is no longer PROCESSING",
                release.payment_id
            )));
        }
        release_hold_in(&mut tx, release.payment_id.as_str()).await?;
        super::payments::insert_event_in(
            &mut tx,
            &release.event_id,
            release.payment_id.as_str(),
            "PaymentDeclined",
            &release.event_payload,
        )
        .await?;
        insert_audit(&mut tx, &release.audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn recovery_candidates(&self, max_attempts: i32, limit: i64) -> Result<Vec<Scope>, StoreError> {
        let rows: Vec<ScopeRow> = sqlx::query_as(D::RECOVERY_CANDIDATES)
            .bind(max_attempts)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| {
                // Only operations this binary knows can be recovered by it.
                Some(Scope {
                    tenant_id: TenantId::from_stored(row.tenant_id),
                    operation: row.operation_name.parse::<Operation>().ok()?,
                    key: IdempotencyKey::parse(row.idempotency_key.as_bytes()).ok()?,
                })
            })
            .collect())
    }

    async fn note_expired_retry(&self, scope: &Scope) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(
                "update idempotency_records set expired_retries = expired_retries + 1 \
                 where tenant_id = $1 and operation_name = $2 and idempotency_key = $3",
            )
            .bind(scope.tenant_id.as_str())
            .bind(scope.operation.as_str())
            .bind(scope.key.as_str()),
        )
        .await?;
        Ok(())
    }
}

/// A row of [`RecordStatements::TAKE_OVER`]: the new lease.
#[derive(sqlx::FromRow)]
struct TakenOver {
    lease_version: i64,
    expires_at: DateTime<Utc>,
}

/// A row of [`RecordStatements::RECOVERY_CANDIDATES`]: a record's scope.
#[derive(sqlx::FromRow)]
struct ScopeRow {
    tenant_id: String,
    operation_name: String,
    idempotency_key: String,
}
