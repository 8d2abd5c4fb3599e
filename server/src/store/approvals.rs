//! Overrides awaiting a second admin: the request (written with its audit entry), the list,
//! and the decision, taken once by a conditional update before anything is applied, so two
//! approvers cannot both apply it and the requester can never decide their own.

use super::console::RecordName;
use super::dialect::{Dialect, RowsAffected, SqlStore, WriteTx};
use super::error::StoreError;
use super::operators::insert_audit;
use chrono::{DateTime, Utc};
use domain::operator::AuditEntry;
use domain::recovery::{OverrideOutcome, OverrideState};
use domain::scope::Scope;
use std::time::Duration;

/// An admin's request, bound to the record's version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOverrideRequest {
    pub id: String,
    pub scope: Scope,
    pub record_version: i64,
    pub outcome: OverrideOutcome,
    pub requested_by: String,
    pub reason: String,
}

/// A request as stored, with its decision once taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverrideRequest {
    pub id: String,
    pub record: RecordName,
    pub record_version: i64,
    pub outcome: OverrideOutcome,
    pub requested_by: String,
    pub reason: String,
    pub requested_at: DateTime<Utc>,
    pub state: OverrideState,
    pub decided_by: Option<String>,
    pub decision_reason: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    /// What applying it did, once approved.
    pub result: Option<String>,
}

/// An admin's decision on a pending override request.
pub struct OverrideDecision<'a> {
    pub id: &'a str,
    /// `Approved` or `Rejected`.
    pub state: OverrideState,
    pub decided_by: &'a str,
    pub reason: &'a str,
    /// Written in the decision's transaction when given.
    pub audit: Option<&'a AuditEntry>,
    /// How old a request may be and still be decided.
    pub window: Duration,
}

#[async_trait::async_trait]
pub trait ApprovalStore: Send + Sync {
    /// `Err(AlreadyExists)` when the record has a pending request already. Requests older
    /// than `window` are expired first, so that one of those does not block a new one.
    async fn request_override(
        &self,
        request: &NewOverrideRequest,
        audit: &AuditEntry,
        window: Duration,
    ) -> Result<(), StoreError>;

    /// Pending requests first, then the newest decided ones; `limit` rows at most.
    async fn override_requests(&self, limit: i64) -> Result<Vec<OverrideRequest>, StoreError>;

    async fn override_request(&self, id: &str) -> Result<Option<OverrideRequest>, StoreError>;

    /// Takes the decision on a pending request ([`OverrideDecision`]). `false` (nothing
    /// written) when the request is not pending any more, is older than the decision's window,
    /// or its decider made it.
    async fn decide_override(&self, decision: &OverrideDecision<'_>) -> Result<bool, StoreError>;

    /// Rejects every request still pending after `window`, each with an audit entry (by
    /// [`OVERRIDE_EXPIRY_ACTOR`]) in the same transaction; returns how many.
    async fn expire_override_requests(&self, window: Duration) -> Result<u64, StoreError>;

    /// What applying an approved request did (`Applied` or `Failed`).
    async fn finish_override(&self, id: &str, state: OverrideState, result: &str) -> Result<(), StoreError>;

    /// Whether the requester of request `id` has, since making it, given `approver` the
    /// credentials or the standing to decide it: created them, reset or renewed their password,
    /// or changed their role (read from the audit log, which records each of those in the
    /// change's own transaction).
    async fn vouched_for_since_request(&self, id: &str, approver: &str) -> Result<bool, StoreError>;
}

/// Who the audit log says rejected a request nobody decided in time.
pub const OVERRIDE_EXPIRY_ACTOR: &str = "worker:override_expiry";

/// `$1` window (seconds), `$2` reason: pending and older -> rejected by nobody; returns
/// each one's id and record (tenant, operation, key).
const EXPIRE_OVERRIDES: &str = "update override_requests set state = 'rejected', decision_reason = $2, decided_at = {now} \
     where state = 'pending' and requested_at <= {now-$1} returning id, tenant_id, \
     operation_name, idempotency_key";

/// `$1` id, `$2` state, `$3` decided by, `$4` reason, `$5` window (seconds): pending and
/// younger than the window -> decided, stamped now.
const DECIDE_OVERRIDE: &str = "update override_requests set state = $2, decided_by = $3, decision_reason = $4, decided_at = \
     {now} where id = $1 and state = 'pending' and requested_by <> $3 and requested_at > {now-$5}";

/// A row of `override_requests` ([`SELECT_OVERRIDES`]).
#[derive(sqlx::FromRow)]
struct OverrideRow {
    id: String,
    tenant_id: String,
    operation_name: String,
    idempotency_key: String,
    record_version: i64,
    outcome: String,
    provider_charge_id: Option<String>,
    requested_by: String,
    reason: String,
    requested_at: DateTime<Utc>,
    state: String,
    decided_by: Option<String>,
    decision_reason: Option<String>,
    decided_at: Option<DateTime<Utc>>,
    result: Option<String>,
}

/// Every column of [`OverrideRow`], from `override_requests`.
const SELECT_OVERRIDES: &str = "select id, tenant_id, operation_name, idempotency_key, record_version, outcome, \
     provider_charge_id, requested_by, reason, requested_at, state, decided_by, decision_reason, decided_at, \
     result from override_requests";

/// A row of [`EXPIRE_OVERRIDES`]: an expired request and its record.
#[derive(sqlx::FromRow)]
struct ExpiredOverride {
    id: String,
    tenant_id: String,
    operation_name: String,
    idempotency_key: String,
}

/// The stored name and charge id of an outcome.
fn stored_outcome(outcome: &OverrideOutcome) -> (&'static str, Option<&str>) {
    match outcome {
        OverrideOutcome::Charged { charge_id } => ("charged", Some(charge_id)),
        OverrideOutcome::Declined { charge_id } => ("declined", Some(charge_id)),
        OverrideOutcome::NotCharged => ("not_charged", None),
    }
}

fn override_of(row: OverrideRow) -> Result<OverrideRequest, StoreError> {
    let outcome = match (row.outcome.as_str(), row.provider_charge_id) {
        ("charged", Some(charge_id)) => OverrideOutcome::Charged { charge_id },
        ("declined", Some(charge_id)) => OverrideOutcome::Declined { charge_id },
        ("not_charged", None) => OverrideOutcome::NotCharged,
        (other, _) => return Err(StoreError::corrupt("override outcome", other)),
    };
    Ok(OverrideRequest {
        id: row.id,
        record: RecordName {
            tenant_id: row.tenant_id,
            operation: row.operation_name,
            key: row.idempotency_key,
        },
        record_version: row.record_version,
        outcome,
        requested_by: row.requested_by,
        reason: row.reason,
        requested_at: row.requested_at,
        state: StoreError::parse_stored("override state", &row.state)?,
        decided_by: row.decided_by,
        decision_reason: row.decision_reason,
        decided_at: row.decided_at,
        result: row.result,
    })
}

/// Rejects the requests pending longer than `window`, with their audit entries, inside `tx`;
/// returns how many.
async fn expire_overrides_in<D: Dialect>(tx: &mut WriteTx<D>, window: Duration) -> Result<u64, StoreError> {
    let why = format!(
        "expired: no second admin decided within {} h",
        window.as_secs() / 3600
    );
    let expired: Vec<ExpiredOverride> = sqlx::query_as(D::sql(EXPIRE_OVERRIDES))
        .bind(window.as_secs_f64())
        .bind(why.as_str())
        .fetch_all(&mut **tx)
        .await?;
    for expired in &expired {
        let entry = AuditEntry::new(OVERRIDE_EXPIRY_ACTOR, "override.expire")
            .on(domain::scope::audit_target(
                &expired.tenant_id,
                &expired.operation_name,
                &expired.idempotency_key,
            ))
            .details(format!("{}: {why}", expired.id));
        insert_audit(tx, &entry).await?;
    }
    Ok(u64::try_from(expired.len()).unwrap_or(u64::MAX))
}

#[async_trait::async_trait]
impl<D: Dialect> ApprovalStore for SqlStore<D> {
    async fn request_override(
        &self,
        request: &NewOverrideRequest,
        audit: &AuditEntry,
        window: Duration,
    ) -> Result<(), StoreError> {
        let (outcome, charge_id) = stored_outcome(&request.outcome);
        let mut tx = self.begin().await?;
        expire_overrides_in(&mut tx, window).await?;
        sqlx::query(
            "insert into override_requests (id, tenant_id, operation_name, idempotency_key, record_version, \
             outcome, provider_charge_id, requested_by, reason) values ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(request.id.as_str())
        .bind(request.scope.tenant_id.as_str())
        .bind(request.scope.operation.as_str())
        .bind(request.scope.key.as_str())
        .bind(request.record_version)
        .bind(outcome)
        .bind(charge_id)
        .bind(request.requested_by.as_str())
        .bind(request.reason.as_str())
        .execute(&mut *tx)
        .await?;
        insert_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn override_requests(&self, limit: i64) -> Result<Vec<OverrideRequest>, StoreError> {
        let rows: Vec<OverrideRow> = sqlx::query_as(&format!(
            "{SELECT_OVERRIDES} order by case when state = 'pending' then 0 else 1 end, requested_at desc limit $1"
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(override_of).collect()
    }

    async fn override_request(&self, id: &str) -> Result<Option<OverrideRequest>, StoreError> {
        let row: Option<OverrideRow> = sqlx::query_as(&format!("{SELECT_OVERRIDES} where id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(override_of).transpose()
    }

    async fn decide_override(&self, decision: &OverrideDecision<'_>) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let decided = sqlx::query(D::sql(DECIDE_OVERRIDE))
            .bind(decision.id)
            .bind(decision.state.as_str())
            .bind(decision.decided_by)
            .bind(decision.reason)
            .bind(decision.window.as_secs_f64())
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        if !decided {
            tx.rollback().await?;
            return Ok(false);
        }
        if let Some(audit) = decision.audit {
            insert_audit(&mut tx, audit).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn expire_override_requests(&self, window: Duration) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        let expired = expire_overrides_in(&mut tx, window).await?;
        tx.commit().await?;
        Ok(expired)
    }

    async fn finish_override(&self, id: &str, state: OverrideState, result: &str) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(
                "update override_requests set state = $2, result = $3 where id = $1 and state = 'approved'",
            )
            .bind(id)
            .bind(state.as_str())
            .bind(result),
        )
        .await?;
        Ok(())
    }

    async fn vouched_for_since_request(&self, id: &str, approver: &str) -> Result<bool, StoreError> {
        let vouched: i64 = sqlx::query_scalar(
            "select count(*) from audit_log a join override_requests r on r.id = $1 \
             where a.actor = r.requested_by and a.target = 'operator ' || $2 and a.result = 'ok' \
             and a.action in ('operator.create', 'operator.reset_password', 'operator.enable', 'operator.set_role') \
             and a.at >= r.requested_at",
        )
        .bind(id)
        .bind(approver)
        .fetch_one(&self.pool)
        .await?;
        Ok(vouched > 0)
    }
}
