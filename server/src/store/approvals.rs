//! Overrides awaiting a second admin: the request (written with its audit entry), the list,
//! and the decision, taken once by a conditional update before anything is applied, so two
//! approvers cannot both apply it and the requester can never decide their own. One body for
//! both dialects; the statement that differs is in [`ApprovalSql`].

use crate::store::StoreError;
use app::dto::{OverrideRequestView, RecordRef};
use chrono::{DateTime, Utc};
use domain::operator::AuditEntry;
use domain::recovery::{OverrideOutcome, OverrideState};
use std::time::Duration;

/// How long a request waits for a second admin. Evidence a day old is not the evidence the
/// approver would be looking at, so after that the request is rejected and must be made again.
pub const OVERRIDE_DECISION_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// An admin's request, bound to the record's version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOverrideRequest {
    pub id: String,
    pub record: RecordRef,
    pub record_version: i64,
    pub outcome: OverrideOutcome,
    pub requested_by: String,
    pub reason: String,
}

pub fn new_override_id() -> String {
    format!("ovr_{}", domain::random::random_hex(12))
}

#[async_trait::async_trait]
pub trait ApprovalStore {
    /// `Err(AlreadyExists)` when the record has a pending request already. Requests older
    /// than `window` are expired first, so that one of those does not block a new one.
    async fn request_override(
        &self,
        request: &NewOverrideRequest,
        audit: &AuditEntry,
        window: Duration,
    ) -> Result<(), StoreError>;

    /// Pending requests first, then the newest decided ones; `limit` rows at most.
    async fn override_requests(&self, limit: i64) -> Result<Vec<OverrideRequestView>, StoreError>;

    async fn override_request(&self, id: &str) -> Result<Option<OverrideRequestView>, StoreError>;

    /// Takes the decision (`Approved` or `Rejected`) on a pending request for `decided_by`,
    /// with `audit` in the same transaction when given. `false` (nothing written) when the
    /// request is not pending any more, is older than `window`, or `decided_by` made it.
    async fn decide_override(
        &self,
        id: &str,
        decision: OverrideState,
        decided_by: &str,
        reason: &str,
        audit: Option<&AuditEntry>,
        window: Duration,
    ) -> Result<bool, StoreError>;

    /// Rejects every request still pending after `window`, each with an audit entry in the
    /// same transaction (the cleanup worker's); returns how many.
    async fn expire_override_requests(&self, window: Duration) -> Result<u64, StoreError>;

    /// What applying an approved request did (`Applied` or `Failed`).
    async fn finish_override(&self, id: &str, state: OverrideState, result: &str) -> Result<(), StoreError>;
}

pub(super) struct ApprovalSql {
    /// `$1` id, `$2` state, `$3` decided by, `$4` reason, `$5` window (seconds): pending and
    /// younger than the window -> decided, stamped now.
    pub decide_override: &'static str,
    /// `$1` window (seconds), `$2` reason: pending and older -> rejected by nobody; returns
    /// each one's id and record (tenant, operation, key).
    pub expire_overrides: &'static str,
}

/// Why the worker rejected a request, as its decision reason and audit details say.
pub(super) fn expiry_reason(window: Duration) -> String {
    format!(
        "expired: no second admin decided within {} h",
        window.as_secs() / 3600
    )
}

/// The actor of the audit entries the cleanup worker writes.
pub(super) const EXPIRY_ACTOR: &str = "worker:cleanup";

pub(super) const INSERT_OVERRIDE: &str = "insert into override_requests (id, tenant_id, operation_name, \
     idempotency_key, record_version, outcome, provider_charge_id, requested_by, reason) \
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
macro_rules! select_overrides {
    ($rest:literal) => {
        concat!(
            "select id, tenant_id, operation_name, idempotency_key, record_version, outcome, ",
            "provider_charge_id, requested_by, reason, requested_at, state, decided_by, decision_reason, ",
            "decided_at, result from override_requests ",
            $rest
        )
    };
}
pub(super) const LIST_OVERRIDES: &str =
    select_overrides!("order by case when state = 'pending' then 0 else 1 end, requested_at desc limit $1");
pub(super) const ONE_OVERRIDE: &str = select_overrides!("where id = $1");
pub(super) const FINISH_OVERRIDE: &str =
    "update override_requests set state = $2, result = $3 where id = $1 and state = 'approved'";

/// A row of `select_overrides!`.
pub(super) type OverrideRow = (
    String,
    String,
    String,
    String,
    i64,
    String,
    Option<String>,
    String,
    String,
    DateTime<Utc>,
    String,
    Option<String>,
    Option<String>,
    Option<DateTime<Utc>>,
    Option<String>,
);

/// The stored name and charge id of an outcome.
pub(super) fn stored_outcome(outcome: &OverrideOutcome) -> (&'static str, Option<&str>) {
    match outcome {
        OverrideOutcome::Charged { charge_id } => ("charged", Some(charge_id)),
        OverrideOutcome::Declined { charge_id } => ("declined", Some(charge_id)),
        OverrideOutcome::NotCharged => ("not_charged", None),
    }
}

pub(super) fn override_of(row: OverrideRow) -> Result<OverrideRequestView, StoreError> {
    let (
        id,
        tenant_id,
        operation,
        key,
        record_version,
        outcome,
        charge_id,
        requested_by,
        reason,
        requested_at,
        state,
        decided_by,
        decision_reason,
        decided_at,
        result,
    ) = row;
    let outcome = match (outcome.as_str(), charge_id) {
        ("charged", Some(charge_id)) => OverrideOutcome::Charged { charge_id },
        ("declined", Some(charge_id)) => OverrideOutcome::Declined { charge_id },
        ("not_charged", None) => OverrideOutcome::NotCharged,
        (other, _) => return Err(StoreError::Corrupt(format!("override outcome {other}"))),
    };
    Ok(OverrideRequestView {
        record: RecordRef {
            tenant_id,
            operation,
            key,
        },
        record_version,
        outcome,
        requested_by,
        reason,
        requested_at: crate::store::rfc3339_millis(requested_at),
        state: state
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("override state {state}")))?,
        decided_by,
        decision_reason,
        decided_at: decided_at.map(crate::store::rfc3339_millis),
        result,
        id,
    })
}

macro_rules! impl_approval_store {
    ($store:ty, $db:ty, $sql:expr) => {
        impl $store {
            /// Rejects the requests pending longer than `window`, with their audit entries,
            /// inside `tx`; returns how many.
            async fn expire_overrides_in(
                tx: &mut sqlx::Transaction<'static, $db>,
                window: std::time::Duration,
            ) -> Result<u64, $crate::store::StoreError> {
                let why = $crate::store::approvals::expiry_reason(window);
                let expired: Vec<(String, String, String, String)> = sqlx::query_as($sql.expire_overrides)
                    .bind(window.as_secs_f64())
                    .bind(why.as_str())
                    .fetch_all(&mut **tx)
                    .await?;
                for (id, tenant_id, operation, key) in &expired {
                    let record = app::dto::RecordRef {
                        tenant_id: tenant_id.clone(),
                        operation: operation.clone(),
                        key: key.clone(),
                    };
                    let entry = domain::operator::AuditEntry {
                        actor: $crate::store::approvals::EXPIRY_ACTOR.to_owned(),
                        action: "override.expire".to_owned(),
                        target: Some($crate::store::console::audit_target(&record)),
                        reason: None,
                        result: "ok".to_owned(),
                        details: Some(format!("{id}: {why}")),
                    };
                    Self::audit_in(tx, &entry).await?;
                }
                Ok(u64::try_from(expired.len()).unwrap_or(u64::MAX))
            }
        }

        #[async_trait::async_trait]
        impl $crate::store::approvals::ApprovalStore for $store {
            async fn request_override(
                &self,
                request: &$crate::store::approvals::NewOverrideRequest,
                audit: &domain::operator::AuditEntry,
                window: std::time::Duration,
            ) -> Result<(), $crate::store::StoreError> {
                let (outcome, charge_id) = $crate::store::approvals::stored_outcome(&request.outcome);
                let mut tx = self.pool.begin().await?;
                Self::expire_overrides_in(&mut tx, window).await?;
                sqlx::query($crate::store::approvals::INSERT_OVERRIDE)
                    .bind(request.id.as_str())
                    .bind(request.record.tenant_id.as_str())
                    .bind(request.record.operation.as_str())
                    .bind(request.record.key.as_str())
                    .bind(request.record_version)
                    .bind(outcome)
                    .bind(charge_id)
                    .bind(request.requested_by.as_str())
                    .bind(request.reason.as_str())
                    .execute(&mut *tx)
                    .await?;
                Self::audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn override_requests(
                &self,
                limit: i64,
            ) -> Result<Vec<app::dto::OverrideRequestView>, $crate::store::StoreError> {
                let rows: Vec<$crate::store::approvals::OverrideRow> =
                    sqlx::query_as($crate::store::approvals::LIST_OVERRIDES)
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?;
                rows.into_iter()
                    .map($crate::store::approvals::override_of)
                    .collect()
            }

            async fn override_request(
                &self,
                id: &str,
            ) -> Result<Option<app::dto::OverrideRequestView>, $crate::store::StoreError> {
                let row: Option<$crate::store::approvals::OverrideRow> =
                    sqlx::query_as($crate::store::approvals::ONE_OVERRIDE)
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?;
                row.map($crate::store::approvals::override_of).transpose()
            }

            async fn decide_override(
                &self,
                id: &str,
                decision: domain::recovery::OverrideState,
                decided_by: &str,
                reason: &str,
                audit: Option<&domain::operator::AuditEntry>,
                window: std::time::Duration,
            ) -> Result<bool, $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                let decided = sqlx::query($sql.decide_override)
                    .bind(id)
                    .bind(decision.as_str())
                    .bind(decided_by)
                    .bind(reason)
                    .bind(window.as_secs_f64())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    == 1;
                if !decided {
                    tx.rollback().await?;
                    return Ok(false);
                }
                if let Some(audit) = audit {
                    Self::audit_in(&mut tx, audit).await?;
                }
                tx.commit().await?;
                Ok(true)
            }

            async fn expire_override_requests(
                &self,
                window: std::time::Duration,
            ) -> Result<u64, $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                let expired = Self::expire_overrides_in(&mut tx, window).await?;
                tx.commit().await?;
                Ok(expired)
            }

            async fn finish_override(
                &self,
                id: &str,
                state: domain::recovery::OverrideState,
                result: &str,
            ) -> Result<(), $crate::store::StoreError> {
                $crate::store::shared::write_one!(
                    self.pool,
                    $crate::store::approvals::FINISH_OVERRIDE,
                    id,
                    state.as_str(),
                    result
                )
                .await?;
                Ok(())
            }
        }
    };
}
pub(super) use impl_approval_store;
