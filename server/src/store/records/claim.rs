//! The claim of a scoped key and the settling of its record, written inside the transaction
//! of the operation's store (`payments/keyed.rs`, `refunds.rs`): the two statements every
//! keyed operation starts and ends with, the refusal bound to a key, and the stored response.

use super::RecordStatements;
use crate::crash::{CrashPoint, crash_point};
use crate::store::dialect::{Dialect, RowsAffected, SqlStore, WriteTx};
use crate::store::error::StoreError;
use chrono::{DateTime, Utc};
use domain::api_error::ApiError;
use domain::claim::{NewClaim, StoredResponse};
use domain::expiry::AfterExpiry;
use domain::record::ClaimedAs;
use domain::scope::Scope;
use sqlx::Database;
use sqlx::query::QueryAs;

/// The claim, one statement: `insert … on conflict (scope) do update … where … returning`.
/// `$1`..`$6` scope and fingerprint (version, hex, canonical), `$7` resource type, `$8`
/// resource id, `$9` response schema version, `$10` lease owner, `$11` lease seconds, `$12`
/// created by, `$13` window seconds, `$14` whether a settled record past its window is renewed
/// (`new_operation`). An existing record is taken for the new operation in the same
/// statement, with a higher lease version, only when it is settled and past its window
/// under `new_operation`, or was released by an operator (FAILED_RETRYABLE) and this retry
/// repeats it exactly (same fingerprint, same version); any other record is left alone and
/// nothing is returned. `claim_record!(returning)` returns the lease version, the expiry and
/// how it was claimed (`new`, `after_expiry`, `after_release`).
///
/// A template (`store/sql.rs`), and a macro: create_payment's claim at once
/// (`KeyedPaymentStatements::CLAIM_PAYMENT_AT_ONCE`) starts with the same text in both
/// dialects, and `concat!` takes literals.
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
                        ('COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE', 'EXPIRED'))"
    };
    (returning) => {
        concat!(claim_record!(), " returning lease_version, expires_at, claimed_as")
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

pub(in crate::store) use {claim_record, settle_record};
/// `$1` response status, `$2`..`$4` scope: the record is bound to a stored refusal (a 422).
const BIND_STORED_ERROR: &str = "update idempotency_records set status = 'FAILED_REPLAYABLE', progress_step = 'COMPLETED', \
     response_status_code = $1, resource_type = null, resource_id = null, locked_until = null, \
     completed_at = {now}, updated_at = {now} where tenant_id = $2 and operation_name = $3 and \
     idempotency_key = $4";

/// A row of [`claim_record`]'s statement.
#[derive(sqlx::FromRow)]
struct ClaimedRecord {
    lease_version: i64,
    expires_at: DateTime<Utc>,
    claimed_as: String,
}

/// A record this request claimed: its lease version, its window's end and how it was claimed.
pub(in crate::store) struct Claimed {
    pub(super) lease_version: i64,
    pub(super) expires_at: DateTime<Utc>,
    pub(super) claimed_as: ClaimedAs,
}

/// Where an operation's local step, run in its claim's transaction, got to.
pub(in crate::store) enum LocalOutcome<R> {
    /// The operation's resource was written, at this time.
    Created(DateTime<Utc>),
    /// A refusal the key is bound to: `response` is stored with the claim and replayed.
    Bound {
        error: ApiError,
        response: StoredResponse,
    },
    /// A refusal that keeps nothing: the claim is rolled back, then `R` is named.
    Refused(R),
}

/// Writes a record's response inside `tx`: its status, its headers (JSON) and its body.
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
pub(in crate::store) async fn claim_record_in<D: Dialect + RecordStatements>(
    tx: &mut WriteTx<D>,
    claim: &NewClaim,
    resource_type: &str,
    resource_id: &str,
) -> Result<Option<Claimed>, StoreError> {
    let scope = &claim.scope;
    let inserted: Option<ClaimedRecord> = bind_claim(
        sqlx::query_as(D::sql(claim_record!(returning))),
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
    Ok(Some(Claimed {
        lease_version,
        expires_at,
        claimed_as,
    }))
}

/// [`claim_record`]'s parameters, `$1`..`$14`.
pub(in crate::store) fn bind_claim<'q, D: Dialect, O>(
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
pub(in crate::store) async fn begin_settled<D: Dialect + RecordStatements>(
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
