//! Idempotency records, for the engine, whatever the operation: the insert-first claim of a
//! scoped key (inside the transaction in which each operation's store makes its resource:
//! `payments/keyed.rs`, `refunds.rs`), the owner's fenced settling and the unknown outcome,
//! the takeover of a dead owner's record, and the reads a retry and the recovery worker
//! decide from. Nothing here knows an operation.

use super::dialect::{Dialect, RowsAffected, SqlStore, WriteTx};
use super::error::StoreError;
use crate::crash::{CrashPoint, crash_point};
use chrono::{DateTime, Utc};
use domain::claim::{ClaimOutcome, NewClaim, StoredResponse};
use domain::expiry::AfterExpiry;
use domain::key::IdempotencyKey;
use domain::record::{ClaimedAs, RecordAt, StoredRecord};
use domain::recovery::{ProviderFailure, UnknownCause};
use domain::scope::{Operation, Scope};
use domain::tenant::TenantId;
use sqlx::Database;
use sqlx::query::QueryAs;
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

/// The claim, one statement: `insert … on conflict (scope) do update … where … returning`.
/// `$1`..`$6` scope and fingerprint (version, hex, canonical), `$7` resource type, `$8`
/// resource id, `$9` response schema version, `$10` lease owner, `$11` lease seconds, `$12`
/// created by, `$13` window seconds, `$14` whether a settled record past its window is renewed
/// (`new_operation`). An existing record is taken for the new operation in the same
/// statement, with a higher lease version, only when it is settled and past its window
/// under `new_operation`, or was released by an operator (FAILED_RETRYABLE) and this retry
/// repeats it exactly (same fingerprint, same version); any other record is left alone and
/// nothing is returned. Returns the lease version, the expiry and how it was claimed
/// (`new`, `after_expiry`, `after_release`).
///
/// A template (`store/sql.rs`), and a macro: PostgreSQL's create_payment claim at once
/// (`KeyedPaymentStatements::CLAIM_PAYMENT_AT_ONCE`) starts with the same text, and
/// `concat!` takes literals.
macro_rules! claim_record {
    () => {
        "\
            insert into idempotency_records (tenant_id, operation_name, idempotency_key, fingerprint_version, \
                request_fingerprint, canonical_command, status, progress_step, resource_type, resource_id, \
                response_schema_version, lease_owner, lease_version, locked_until, created_by, expires_at) \
            values ($1, $2, $3, $4, $5, $6, 'IN_PROGRESS', 'PROVIDER_REQUEST_SENT', $7, $8, $9, $10, 1, \
                {now+$11}, $12, {now+$13}) \
            on conflict (tenant_id, operation_name, idempotency_key) do update set \
                fingerprint_version = excluded.fingerprint_version, \
                request_fingerprint = excluded.request_fingerprint, \
                canonical_command = excluded.canonical_command, \
                status = 'IN_PROGRESS', progress_step = 'PROVIDER_REQUEST_SENT', \
                resource_type = excluded.resource_type, resource_id = excluded.resource_id, \
                provider_reference = null, response_status_code = null, \
                response_schema_version = excluded.response_schema_version, \
                lease_owner = excluded.lease_owner, lease_version = idempotency_records.lease_version + 1, \
                locked_until = excluded.locked_until, created_by = excluded.created_by, \
                created_at = {now}, updated_at = {now}, completed_at = null, \
                expires_at = excluded.expires_at, settled_status = null, purged_at = null, \
                recovery_attempts = 0, next_recovery_at = null, \
                claimed_as = case when idempotency_records.expires_at <= {now} \
                    then 'after_expiry' else 'after_release' end, \
                expired_retries = idempotency_records.expired_retries \
                    + case when idempotency_records.expires_at <= {now} then 1 else 0 end \
            where (idempotency_records.status = 'FAILED_RETRYABLE' \
                    and idempotency_records.expires_at > {now} \
                    and idempotency_records.fingerprint_version = excluded.fingerprint_version \
                    and idempotency_records.request_fingerprint = excluded.request_fingerprint) \
                or ($14 and idempotency_records.expires_at <= {now} \
                    and idempotency_records.status in \
                        ('COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE', 'EXPIRED')) \
            returning lease_version, expires_at, claimed_as"
    };
}

/// The owner's fenced settling of its record: `$1` status, `$2` response status, `$3`
/// provider reference, `$4`..`$6` scope, `$7` lease version: IN_PROGRESS at that version ->
/// settled. A template and a macro, like [`claim_record`], for
/// `KeyedPaymentStatements::COMPLETE_PAYMENT_AT_ONCE`.
macro_rules! settle_record {
    () => {
        "update idempotency_records set status = $1, progress_step = 'COMPLETED', \
             response_status_code = $2, provider_reference = $3, locked_until = null, completed_at = \
             {now}, updated_at = {now} where tenant_id = $4 and operation_name = $5 and idempotency_key \
             = $6 and lease_version = $7 and status = 'IN_PROGRESS'"
    };
}

pub(super) use {claim_record, settle_record};

/// Record statements that differ by dialect (the database's clock and interval arithmetic).
/// Placeholders are `$1`, `$2`, … in order of first use, which both dialects bind positionally.
pub trait RecordStatements {
    /// `$1`..`$3` scope, `$4` lease version, `$5` the failed send's cause (null after a failed
    /// look-up: the cause stays), `$6` the failure in words: IN_PROGRESS at that version ->
    /// unknown outcome, attempt counted, next look backed off, the failure and its time noted.
    const MARK_UNKNOWN: &'static str;
}

/// `$1` response status, `$2`..`$4` scope: the record is bound to a stored refusal (a 422).
const BIND_STORED_ERROR: &str = "update idempotency_records set status = 'FAILED_REPLAYABLE', progress_step = 'COMPLETED', \
     response_status_code = $1, resource_type = null, resource_id = null, locked_until = null, \
     completed_at = {now}, updated_at = {now} where tenant_id = $2 and operation_name = $3 and \
     idempotency_key = $4";

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

/// A row of [`claim_record`]'s statement.
#[derive(sqlx::FromRow)]
struct ClaimedRecord {
    lease_version: i64,
    expires_at: DateTime<Utc>,
    claimed_as: String,
}

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

/// The stored response of a settled record: its status, its headers (JSON) and its body.
/// Writes a record's response inside `tx`.
async fn insert_response_in<D: Dialect>(
    tx: &mut WriteTx<D>,
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
    tx: &mut WriteTx<D>,
    claim: &NewClaim,
    resource_type: &str,
    resource_id: &str,
) -> Result<Option<(i64, DateTime<Utc>, ClaimedAs)>, StoreError> {
    let scope = &claim.scope;
    let inserted: Option<ClaimedRecord> = bind_claim(
        sqlx::query_as(D::sql(claim_record!())),
        claim,
        resource_type,
        resource_id,
    )
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

/// [`claim_record`]'s parameters, `$1`..`$14`.
pub(super) fn bind_claim<'q, D: Dialect, O>(
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
    tx: &mut WriteTx<D>,
    scope: &Scope,
    response: &StoredResponse,
) -> Result<(), StoreError> {
    sqlx::query(D::sql(BIND_STORED_ERROR))
        .bind(i32::from(response.status))
        .bind(scope.tenant_id.as_str())
        .bind(scope.operation.as_str())
        .bind(scope.key.as_str())
        .execute(&mut **tx)
        .await?;
    insert_response_in(tx, scope, response).await
}

/// An owner's completion transaction, begun with its record settled (`record_status`:
/// COMPLETED or FAILED_REPLAYABLE) with its response and the provider's reference, fenced by
/// `lease_version`, for the operation to write its own outcome in; `None` when the owner lost
/// its lease: the fence comes first, so nothing at all was written.
pub(super) async fn begin_settled<D: Dialect + RecordStatements>(
    store: &SqlStore<D>,
    scope: &Scope,
    lease_version: i64,
    record_status: &str,
    response: &StoredResponse,
    provider_reference: &str,
) -> Result<Option<WriteTx<D>>, StoreError> {
    let mut tx = store.begin().await?;
    if settle_record_in(
        &mut tx,
        scope,
        lease_version,
        record_status,
        response,
        provider_reference,
    )
    .await?
    {
        Ok(Some(tx))
    } else {
        tx.rollback().await?;
        Ok(None)
    }
}

async fn settle_record_in<D: Dialect + RecordStatements>(
    tx: &mut WriteTx<D>,
    scope: &Scope,
    lease_version: i64,
    record_status: &str,
    response: &StoredResponse,
    provider_reference: &str,
) -> Result<bool, StoreError> {
    let settled = sqlx::query(D::sql(settle_record!()))
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
