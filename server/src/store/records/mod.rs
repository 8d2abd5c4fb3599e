//! Idempotency records, for the engine, whatever the operation: the insert-first claim of a
//! scoped key (inside the transaction in which each operation's store makes its resource:
//! `payments/keyed.rs`, `refunds.rs`), the owner's fenced settling and the unknown outcome,
//! the takeover of a dead owner's record, and the reads a retry and the recovery worker
//! decide from. Nothing here knows an operation.

mod claim;

use super::dialect::{Dialect, SqlStore, WriteTx};
use super::error::StoreError;
use chrono::{DateTime, Utc};
use claim::{Claimed, bind_error_in};
pub(super) use claim::{
    LocalOutcome, begin_settled, bind_claim, claim_record, claim_record_in, settle_record,
};
use domain::claim::{ClaimOutcome, Refusal, StoredResponse};
use domain::key::IdempotencyKey;
use domain::record::{ClaimedAs, RecordAt, StoredRecord};
use domain::recovery::{ProviderFailure, UnknownCause};
use domain::scope::{Operation, Scope};
use domain::tenant::TenantId;
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
    /// `$1`..`$3` scope, `$4` lease version, `$5` the failed send's cause (null after a failed
    /// look-up: the cause stays), `$6` the failure in words: IN_PROGRESS at that version ->
    /// unknown outcome, attempt counted, next look backed off, the failure and its time noted.
    const MARK_UNKNOWN: &'static str;
}

/// `$1` new owner, `$2` lease seconds, `$3`..`$5` scope, `$6` the stale lease version:
/// takes an expired lease (or an unknown outcome), bumping its version; returns the new
/// version and the expiry.
const TAKE_OVER: &str = "update idempotency_records set lease_version = lease_version + 1, lease_owner = $1, \
     locked_until = {now+$2}, status = 'IN_PROGRESS', progress_step = 'PROVIDER_REQUEST_SENT', \
     updated_at = {now} where tenant_id = $3 and operation_name = $4 and idempotency_key = $5 and \
     lease_version = $6 and (status = 'UNKNOWN_REQUIRES_RECOVERY' or (status = 'IN_PROGRESS' and \
     (locked_until is null or locked_until <= {now}))) returning lease_version, expires_at";

/// `$1`..`$3` scope, `$4` the previewed lease version: a record that still needs an
/// operator becomes FAILED_RETRYABLE (lease version bumped, so no owner can write);
/// returns its resource id.
pub(super) const RELEASE_RECORD: &str = "update idempotency_records set status = 'FAILED_RETRYABLE', lease_version = lease_version + \
     1, locked_until = null, next_recovery_at = null, completed_at = {now}, updated_at = {now} \
     where tenant_id = $1 and operation_name = $2 and idempotency_key = $3 and lease_version = $4 \
     and (status = 'UNKNOWN_REQUIRES_RECOVERY' or (status = 'IN_PROGRESS' and (locked_until is \
     null or locked_until <= {now}))) returning resource_id";

/// `$1` attempt limit, `$2` batch size: unknown outcomes due for another look, and
/// in-progress records whose owner's lease ran out.
const RECOVERY_CANDIDATES: &str = "select tenant_id, operation_name, idempotency_key from idempotency_records where (status = \
     'UNKNOWN_REQUIRES_RECOVERY' and recovery_attempts < $1 and (next_recovery_at is null or \
     next_recovery_at <= {now})) or (status = 'IN_PROGRESS' and locked_until <= {now}) order by \
     updated_at limit $2";

/// `$1`..`$3` scope: the columns [`StoredRecord`] holds, the database's clock, and the
/// stored response (status, headers, body; null without one), in one statement.
const LOOK_UP_RECORD: &str = "select r.status, r.progress_step, cast(r.fingerprint_version as integer) as \
     fingerprint_version, r.request_fingerprint, r.lease_version, r.locked_until, r.expires_at, \
     r.resource_id, r.response_schema_version, r.next_recovery_at, r.created_at, {now} as \
     database_now, r.response_status_code, s.headers, s.body from idempotency_records r left join \
     idempotency_responses s on s.tenant_id = r.tenant_id and s.operation_name = r.operation_name \
     and s.idempotency_key = r.idempotency_key where r.tenant_id = $1 and r.operation_name = $2 \
     and r.idempotency_key = $3";

/// A row of [`LOOK_UP_RECORD`]: the record's columns, the database's time,
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

impl<D: Dialect + RecordStatements> SqlStore<D> {
    /// The claim found the key's record: `tx` is rolled back and the record read.
    pub(super) async fn existing(&self, tx: WriteTx<D>, scope: &Scope) -> Result<ClaimOutcome, StoreError> {
        tx.rollback().await?;
        self.existing_record(scope).await
    }

    /// The key's record, which a claim found.
    pub(super) async fn existing_record(&self, scope: &Scope) -> Result<ClaimOutcome, StoreError> {
        match self.look_up(scope).await? {
            Some(found) => Ok(ClaimOutcome::Existing(found.at)),
            // Gone between the insert and the read (deleted by cleanup): the caller may
            // simply try again.
            None => Err(StoreError::Corrupt("claimed record vanished".into())),
        }
    }

    /// Ends a claim's transaction once the operation's local step ran in it: committed with
    /// the resource, or with the refusal the key is bound to; or rolled back for a refusal that
    /// keeps nothing, which `name` names afterwards (a payment's duplicate merchant reference
    /// can only be read once the rollback is done).
    pub(super) async fn finish_claim<R, Named>(
        &self,
        mut tx: WriteTx<D>,
        scope: &Scope,
        claimed: Claimed,
        local: LocalOutcome<R>,
        name: impl FnOnce(R) -> Named,
    ) -> Result<ClaimOutcome, StoreError>
    where
        Named: Future<Output = Result<Refusal, StoreError>>,
    {
        let Claimed {
            lease_version,
            expires_at,
            claimed_as,
        } = claimed;
        match local {
            LocalOutcome::Created(created_at) => {
                tx.commit().await?;
                Ok(ClaimOutcome::Claimed {
                    lease_version,
                    expires_at,
                    created_at,
                    claimed_as,
                })
            }
            LocalOutcome::Bound { error, response } => {
                bind_error_in(&mut tx, scope, &response).await?;
                tx.commit().await?;
                Ok(ClaimOutcome::Bound {
                    error,
                    expires_at,
                    claimed_as,
                })
            }
            LocalOutcome::Refused(refused) => {
                tx.rollback().await?;
                self.note_refused_renewal(scope, claimed_as).await?;
                let refusal = name(refused).await?;
                Ok(ClaimOutcome::Refused { refusal, claimed_as })
            }
        }
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
impl<D: Dialect + RecordStatements> RecordStore for SqlStore<D> {
    async fn look_up(&self, scope: &Scope) -> Result<Option<FoundRecord>, StoreError> {
        let row: Option<LookUpRow> = sqlx::query_as(D::sql(LOOK_UP_RECORD))
            .bind(scope.tenant_id.as_str())
            .bind(scope.operation.as_str())
            .bind(scope.key.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.map(found_of).transpose()
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
        let taken: Option<TakenOver> = sqlx::query_as(D::sql(TAKE_OVER))
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

    async fn recovery_candidates(&self, max_attempts: i32, limit: i64) -> Result<Vec<Scope>, StoreError> {
        let rows: Vec<ScopeRow> = sqlx::query_as(D::sql(RECOVERY_CANDIDATES))
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

/// A row of [`TAKE_OVER`]: the new lease.
#[derive(sqlx::FromRow)]
struct TakenOver {
    lease_version: i64,
    expires_at: DateTime<Utc>,
}

/// A row of [`RECOVERY_CANDIDATES`]: a record's scope.
#[derive(sqlx::FromRow)]
struct ScopeRow {
    tenant_id: String,
    operation_name: String,
    idempotency_key: String,
}
