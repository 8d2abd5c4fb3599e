//! A record's whole story, as the console's record page tells it: the record, every change of
//! its status, step or lease, the payments it made and released (or the refund it made),
//! the payment's refunds, their events, and every request that arrived with its key.

use super::console::RecordName;
use super::dialect::{Dialect, SqlStore};
use super::error::StoreError;
use chrono::{DateTime, Utc};
use domain::record::{ClaimedAs, ProgressStep, RecordStatus};
use domain::recovery::{EvidenceKind, ProviderEvidence, UnknownCause};
use domain::representation::PaymentStatus;
use domain::scope::{Operation, Scope};

/// Everything the record page shows, but its audit trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHistory {
    pub record: RecordName,
    pub status: RecordStatus,
    pub step: ProgressStep,
    /// The outcome an EXPIRED tombstone settled with.
    pub settled_status: Option<RecordStatus>,
    pub fingerprint_version: i32,
    pub fingerprint: String,
    /// Empty once the record expired (purged with the body).
    pub canonical_command: String,
    pub resource_id: Option<String>,
    pub provider_reference: Option<String>,
    pub response_status_code: Option<i32>,
    pub lease_owner: Option<String>,
    pub lease_version: i64,
    pub locked_until: Option<DateTime<Utc>>,
    pub recovery_attempts: i32,
    pub next_recovery_at: Option<DateTime<Utc>>,
    /// Why the outcome is (or was) unknown: the failed send's cause.
    pub unknown_cause: Option<UnknownCause>,
    /// The latest provider failure in words, and when.
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
    pub expired_retries: i32,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub expires_at: DateTime<Utc>,
    pub claimed_as: ClaimedAs,
    /// Every change of status, step or lease, oldest first.
    pub steps: Vec<StepRow>,
    /// Payments this key made earlier that an operator released, oldest first.
    pub released_payments: Vec<ReleasedPayment>,
    /// The record's payment: the one it made, or the one its refund refunds.
    pub payment: Option<PaymentSummary>,
    /// The refund a create_refund record made.
    pub refund: Option<RefundSummary>,
    /// Every refund of the record's payment, oldest first.
    pub refunds: Vec<RefundSummary>,
    pub events: Vec<EventRow>,
    /// Requests that arrived with the key, oldest first, but its replays.
    pub journal: Vec<JournalRow>,
    /// The key's replays, counted (none: `None`).
    pub replays: Option<Replays>,
    /// What the provider said when last asked for an operator, and when.
    pub evidence: Option<(ProviderEvidence, DateTime<Utc>)>,
}

/// One change of a record's status, step or lease, as it committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRow {
    pub at: DateTime<Utc>,
    pub status: RecordStatus,
    pub step: ProgressStep,
    pub lease_version: i64,
    pub lease_owner: Option<String>,
    /// Why, for a step that made the outcome unknown: the provider failure in words.
    pub note: Option<String>,
}

/// A payment an operator released, and what became of a charge that showed up after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleasedPayment {
    pub id: String,
    pub released_at: DateTime<Utc>,
    pub late_charge_id: Option<String>,
    pub late_charge_resolution: Option<LateChargeResolution>,
}

/// An operator's word that a late charge was refunded at the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateChargeResolution {
    pub at: DateTime<Utc>,
    pub by: String,
    pub reference: String,
}

/// The record's payment as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentSummary {
    pub id: String,
    pub account_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub merchant_reference: String,
    pub status: PaymentStatus,
    pub provider_charge_id: Option<String>,
}

/// A refund as the console shows it (a row of [`SELECT_REFUNDS`]).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RefundSummary {
    pub id: String,
    pub payment_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub reason: String,
    pub reference: String,
    pub status: String,
    pub provider_refund_id: Option<String>,
    /// The key it was made under (its record's), when it had one.
    pub idempotency_key: Option<String>,
    pub created_at: DateTime<Utc>,
}

const SELECT_REFUNDS: &str = "select id, payment_id, amount_minor, currency, reason, reference, status, provider_refund_id, \
     idempotency_key, created_at from refunds where tenant_id = $1";

/// One of the payment's outbox events.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct EventRow {
    pub id: String,
    pub event_type: String,
    pub created_at: DateTime<Utc>,
    pub published_at: Option<DateTime<Utc>>,
}

/// A journal row as read back for the record page.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct JournalRow {
    pub at: DateTime<Utc>,
    pub fingerprint: String,
    /// Only when it differs from the record's command (a conflicting retry).
    pub canonical_command: Option<String>,
    #[sqlx(try_from = "i32")]
    pub status_code: u16,
    pub error_code: Option<String>,
}

/// The replays of a key, summed from their minutes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replays {
    pub count: i64,
    pub first_at: DateTime<Utc>,
    pub last_at: DateTime<Utc>,
    /// The longest time from the key's first request to a replay, in milliseconds.
    pub longest_delay_ms: i64,
}

/// A row of the record's own columns, as [`HistoryStore::record_history`] reads them.
#[derive(sqlx::FromRow)]
struct RecordRow {
    status: String,
    progress_step: String,
    settled_status: Option<String>,
    fingerprint_version: i32,
    request_fingerprint: String,
    canonical_command: String,
    resource_id: Option<String>,
    provider_reference: Option<String>,
    response_status_code: Option<i32>,
    lease_owner: Option<String>,
    lease_version: i64,
    locked_until: Option<DateTime<Utc>>,
    recovery_attempts: i32,
    next_recovery_at: Option<DateTime<Utc>>,
    expired_retries: i32,
    created_by: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    completed_at: Option<DateTime<Utc>>,
    expires_at: DateTime<Utc>,
    claimed_as: String,
    unknown_cause: Option<String>,
    last_error: Option<String>,
    last_error_at: Option<DateTime<Utc>>,
}

impl RecordRow {
    /// The history of `scope`'s record, without the rows read beside it.
    fn into_history(self, scope: &Scope) -> Result<RecordHistory, StoreError> {
        Ok(RecordHistory {
            record: RecordName::from(scope),
            status: StoreError::parse_stored("record status", &self.status)?,
            step: StoreError::parse_stored("progress step", &self.progress_step)?,
            settled_status: self
                .settled_status
                .as_deref()
                .map(|status| StoreError::parse_stored("record status", status))
                .transpose()?,
            fingerprint_version: self.fingerprint_version,
            fingerprint: self.request_fingerprint,
            canonical_command: self.canonical_command,
            resource_id: self.resource_id,
            provider_reference: self.provider_reference,
            response_status_code: self.response_status_code,
            lease_owner: self.lease_owner,
            lease_version: self.lease_version,
            locked_until: self.locked_until,
            recovery_attempts: self.recovery_attempts,
            next_recovery_at: self.next_recovery_at,
            unknown_cause: StoreError::parse_optional("unknown cause", self.unknown_cause)?,
            last_error: self.last_error,
            last_error_at: self.last_error_at,
            expired_retries: self.expired_retries,
            created_by: self.created_by,
            created_at: self.created_at,
            updated_at: self.updated_at,
            completed_at: self.completed_at,
            expires_at: self.expires_at,
            claimed_as: StoreError::parse_stored("claimed_as", &self.claimed_as)?,
            steps: Vec::new(),
            released_payments: Vec::new(),
            payment: None,
            refund: None,
            refunds: Vec::new(),
            events: Vec::new(),
            journal: Vec::new(),
            replays: None,
            evidence: None,
        })
    }
}

/// A row of `record_steps`.
#[derive(sqlx::FromRow)]
struct RecordStepRow {
    at: DateTime<Utc>,
    status: String,
    progress_step: String,
    lease_version: i64,
    lease_owner: Option<String>,
    note: Option<String>,
}

/// A row of `record_evidence`.
#[derive(sqlx::FromRow)]
struct EvidenceRow {
    kind: String,
    detail: String,
    at: DateTime<Utc>,
}

/// A released payment's row.
#[derive(sqlx::FromRow)]
struct ReleasedPaymentRow {
    id: String,
    released_at: DateTime<Utc>,
    late_charge_id: Option<String>,
    late_charge_resolved_at: Option<DateTime<Utc>>,
    late_charge_resolved_by: Option<String>,
    late_charge_resolution: Option<String>,
}

/// The record's payment's row.
#[derive(sqlx::FromRow)]
struct PaymentSummaryRow {
    id: String,
    account_id: String,
    amount_minor: i64,
    currency: String,
    merchant_reference: String,
    status: String,
    provider_charge_id: Option<String>,
}

/// [`REPLAYS_OF_KEY`]'s one row (all null without replays).
#[derive(sqlx::FromRow)]
struct ReplaysRow {
    count: Option<i64>,
    first_at: Option<DateTime<Utc>>,
    last_at: Option<DateTime<Utc>>,
    longest_delay_ms: Option<i64>,
}

/// `$1`..`$3` the scope: its replays, summed.
const REPLAYS_OF_KEY: &str = "select cast(sum(replays) as bigint) as count, min(first_at) as first_at, max(last_at) as \
    last_at, cast(max(longest_delay_ms) as bigint) as longest_delay_ms from idempotency_replays where tenant_id = $1 and \
    operation_name = $2 and idempotency_key = $3";

#[async_trait::async_trait]
pub trait HistoryStore: Send + Sync {
    /// The record with its steps, payments, events and journal.
    async fn record_history(&self, scope: &Scope) -> Result<Option<RecordHistory>, StoreError>;
}

#[async_trait::async_trait]
impl<D: Dialect> HistoryStore for SqlStore<D> {
    async fn record_history(&self, scope: &Scope) -> Result<Option<RecordHistory>, StoreError> {
        let (tenant, operation, key) = (
            scope.tenant_id.as_str(),
            scope.operation.as_str(),
            scope.key.as_str(),
        );
        let Some(row): Option<RecordRow> = sqlx::query_as(
            "select status, progress_step, settled_status, \
             cast(fingerprint_version as integer) as fingerprint_version, request_fingerprint, \
             canonical_command, resource_id, provider_reference, response_status_code, lease_owner, \
             lease_version, locked_until, recovery_attempts, next_recovery_at, expired_retries, \
             created_by, created_at, updated_at, completed_at, expires_at, claimed_as, unknown_cause, \
             last_error, last_error_at \
             from idempotency_records where tenant_id = $1 and operation_name = $2 and idempotency_key = $3",
        )
        .bind(tenant)
        .bind(operation)
        .bind(key)
        .fetch_optional(&self.pool)
        .await?
        else {
            return Ok(None);
        };
        let resource_id = row.resource_id.clone();
        let mut history = row.into_history(scope)?;
        let steps: Vec<RecordStepRow> = sqlx::query_as(
            "select at, status, progress_step, lease_version, lease_owner, note from record_steps \
             where tenant_id = $1 and operation_name = $2 and idempotency_key = $3 \
             order by at, lease_version limit 200",
        )
        .bind(tenant)
        .bind(operation)
        .bind(key)
        .fetch_all(&self.pool)
        .await?;
        history.steps = steps
            .into_iter()
            .map(|row| {
                Ok(StepRow {
                    at: row.at,
                    status: StoreError::parse_stored("record status", &row.status)?,
                    step: StoreError::parse_stored("progress step", &row.progress_step)?,
                    lease_version: row.lease_version,
                    lease_owner: row.lease_owner,
                    note: row.note,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        let evidence: Option<EvidenceRow> = sqlx::query_as(
            "select kind, detail, at from record_evidence \
             where tenant_id = $1 and operation_name = $2 and idempotency_key = $3",
        )
        .bind(tenant)
        .bind(operation)
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        history.evidence = evidence
            .map(|row| {
                let kind: EvidenceKind = StoreError::parse_stored("evidence", &row.kind)?;
                Ok::<_, StoreError>((ProviderEvidence::from_kept(kind, row.detail), row.at))
            })
            .transpose()?;
        let released: Vec<ReleasedPaymentRow> = sqlx::query_as(
            "select id, released_at, late_charge_id, late_charge_resolved_at, late_charge_resolved_by, \
             late_charge_resolution from payments \
             where tenant_id = $1 and idempotency_key = $2 and released_at is not null order by released_at",
        )
        .bind(tenant)
        .bind(key)
        .fetch_all(&self.pool)
        .await?;
        history.released_payments = released
            .into_iter()
            .map(|row| ReleasedPayment {
                id: row.id,
                released_at: row.released_at,
                late_charge_id: row.late_charge_id,
                late_charge_resolution: row.late_charge_resolved_at.map(|at| LateChargeResolution {
                    at,
                    by: row.late_charge_resolved_by.unwrap_or_default(),
                    reference: row.late_charge_resolution.unwrap_or_default(),
                }),
            })
            .collect();
        let payment_id = match (scope.operation, resource_id) {
            (Operation::CreatePayment, resource_id) => resource_id,
            (Operation::CreateRefund, Some(refund_id)) => {
                history.refund = sqlx::query_as(&format!("{SELECT_REFUNDS} and id = $2"))
                    .bind(tenant)
                    .bind(&refund_id)
                    .fetch_optional(&self.pool)
                    .await?;
                history.refund.as_ref().map(|refund| refund.payment_id.clone())
            }
            (Operation::CreateRefund, None) => None,
        };
        if let Some(payment_id) = payment_id.as_deref() {
            history.refunds = sqlx::query_as(&format!(
                "{SELECT_REFUNDS} and payment_id = $2 order by created_at, id"
            ))
            .bind(tenant)
            .bind(payment_id)
            .fetch_all(&self.pool)
            .await?;
            let payment: Option<PaymentSummaryRow> = sqlx::query_as(
                "select id, account_id, amount_minor, currency, merchant_reference, status, provider_charge_id \
                 from payments where tenant_id = $1 and id = $2",
            )
            .bind(tenant)
            .bind(payment_id)
            .fetch_optional(&self.pool)
            .await?;
            history.payment = payment
                .map(|row| {
                    Ok::<_, StoreError>(PaymentSummary {
                        id: row.id,
                        account_id: row.account_id,
                        amount_minor: row.amount_minor,
                        currency: row.currency,
                        merchant_reference: row.merchant_reference,
                        status: StoreError::parse_stored("payment status", &row.status)?,
                        provider_charge_id: row.provider_charge_id,
                    })
                })
                .transpose()?;
            history.events = sqlx::query_as(
                "select id, event_type, created_at, published_at from outbox_events \
                 where payment_id = $1 order by created_at, id",
            )
            .bind(payment_id)
            .fetch_all(&self.pool)
            .await?;
        }
        history.journal = sqlx::query_as(
            "select at, fingerprint, canonical_command, status_code, error_code \
             from idempotency_requests where tenant_id = $1 and operation_name = $2 and idempotency_key = $3 \
             order by at, id limit 500",
        )
        .bind(tenant)
        .bind(operation)
        .bind(key)
        .fetch_all(&self.pool)
        .await?;
        let replays: ReplaysRow = sqlx::query_as(REPLAYS_OF_KEY)
            .bind(tenant)
            .bind(operation)
            .bind(key)
            .fetch_one(&self.pool)
            .await?;
        history.replays = match replays {
            ReplaysRow {
                count: Some(count),
                first_at: Some(first_at),
                last_at: Some(last_at),
                longest_delay_ms,
            } => Some(Replays {
                count,
                first_at,
                last_at,
                longest_delay_ms: longest_delay_ms.unwrap_or(0),
            }),
            _ => None,
        };
        Ok(Some(history))
    }
}
