//! Refunds, for the engine and the API: the claim of a create_refund key with the refund's
//! local transaction (its payment locked, the amount counted against what remains), its
//! completion, and the reads. The claim and the settling of the record are the idempotency
//! layer's own (`records/`); only the refund's part is here.

use super::dialect::{Dialect, SqlStore, WriteTx};
use super::error::StoreError;
use super::operators::insert_audit;
use super::payments::PaymentStatements;
use super::payments::local::insert_event_in;
use super::records::{LocalOutcome, RecordStatements, begin_settled, claim_record_in};
use chrono::{DateTime, Utc};
use domain::api_error::ApiError;
use domain::claim::{ClaimOutcome, NewClaim, RefundCompletion, Refusal, StoredResponse};
use domain::money::{Amount, Balance, Currency};
use domain::payment::{PaymentId, new_event_id};
use domain::refund::{NewRefund, RefundId, RefundOf, RefundStatus, RefundView};
use domain::scope::Scope;
use domain::tenant::TenantId;

/// The answer a create_refund key is bound to when its amount is more than the payment has
/// left to refund, given what remains (only known inside the claim's transaction).
pub type ExceedsRemaining<'a> = dyn Fn(&ApiError) -> StoredResponse + Send + Sync + 'a;

/// What a refund needs of its payment before anything is claimed: that it is this tenant's,
/// its currency (the refund's amount is read in it), and the provider's charge to refund.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundablePayment {
    pub id: PaymentId,
    pub currency: Currency,
    /// Absent until the provider authorised the payment.
    pub provider_charge_id: Option<String>,
}

/// A refund as stored, with the provider's charge it refunds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRefund {
    pub view: RefundView,
    pub provider_charge_id: Option<String>,
}

#[async_trait::async_trait]
pub trait RefundStore: Send + Sync {
    /// The payment a refund is asked for, if it is this tenant's.
    async fn refundable_payment(
        &self,
        tenant_id: &TenantId,
        payment_id: &str,
    ) -> Result<Option<RefundablePayment>, StoreError>;

    /// A refund of this tenant (`None` for another tenant's).
    async fn refund(&self, tenant_id: &TenantId, refund_id: &str)
    -> Result<Option<StoredRefund>, StoreError>;

    /// The local transaction of a new create_refund: the insert-first claim of the scoped
    /// key, then, with the payment's row locked, the refund's checks in the contract's order
    /// (the payment exists for this tenant, no refund has this reference, the payment is
    /// refundable, the amount fits in what remains), the amount counted on the payment, the
    /// refund row (PROCESSING) and its RefundCreated event, all committed together. A refund
    /// over what remains binds the key to `exceeds_remaining`'s answer; the other refusals
    /// write nothing.
    async fn claim_create_refund(
        &self,
        claim: &NewClaim,
        refund: &NewRefund,
        exceeds_remaining: &ExceedsRemaining<'_>,
    ) -> Result<ClaimOutcome, StoreError>;

    /// The completion transaction, fenced by `lease_version` (`Ok(false)`: another owner took
    /// over, nothing written): the refund's outcome (a failed refund gives its amount back to
    /// what remains), its event, the record settled with its response, and the operator's
    /// audit entry when there is one.
    async fn complete_create_refund(
        &self,
        scope: &Scope,
        lease_version: i64,
        completion: &RefundCompletion,
    ) -> Result<bool, StoreError>;
}

/// `$1` tenant, `$2` payment: status, when it was released, its late charge, amount and
/// amount refunded or being refunded, locked for the transaction where the dialect has row locks (SQLite:
/// the claim's insert already holds its one write lock).
/// The row lock serialises refunds of one payment across instances: each sees what the previous one
/// counted.
const PAYMENT_FOR_REFUND: &str = "select status, released_at, late_charge_id, amount_minor, refunded_minor from payments where \
     tenant_id = $1 and id = $2 {for_update}";

/// `$1` status, `$2` provider refund id, `$3` refund: PROCESSING -> the outcome; returns
/// the refund's payment and amount.
const SETTLE_REFUND: &str = "update refunds set status = $1, provider_refund_id = $2, updated_at = {now} where id = $3 \
     and status = 'PROCESSING' returning payment_id, amount_minor";

/// A released payment has no charge of its own; the one a refund of it gives back is the
/// charge the provider made late.
const SELECT_REFUND: &str = "select r.id, r.payment_id, r.amount_minor, r.currency, r.reason, r.reference, \
     r.status, r.created_at, coalesce(p.provider_charge_id, p.late_charge_id) as charge_id from refunds r \
     join payments p on p.id = r.payment_id where r.tenant_id = $1 and r.id = $2";

/// A row of [`SELECT_REFUND`].
#[derive(sqlx::FromRow)]
struct RefundRow {
    id: String,
    payment_id: String,
    amount_minor: i64,
    currency: String,
    reason: String,
    reference: String,
    status: String,
    created_at: DateTime<Utc>,
    charge_id: Option<String>,
}

fn refund_of(row: RefundRow) -> Result<StoredRefund, StoreError> {
    let currency =
        Currency::parse(&row.currency).map_err(|_| StoreError::corrupt("refund currency", &row.currency))?;
    Ok(StoredRefund {
        view: RefundView {
            id: row.id,
            payment_id: row.payment_id,
            amount: Amount::from_minor_units(row.amount_minor, currency)
                .map_err(|error| StoreError::Corrupt(error.to_string()))?,
            reason: StoreError::parse_stored("refund reason", &row.reason)?,
            reference: row.reference,
            status: StoreError::parse_stored("refund status", &row.status)?,
            created_at: row.created_at,
        },
        provider_charge_id: row.charge_id,
    })
}

/// Where the refund's local part got to, inside its transaction.
enum RefundStep {
    Created(DateTime<Utc>),
    ExceedsRemaining(Balance),
    Refused(Refusal),
}

/// A row of [`PAYMENT_FOR_REFUND`].
#[derive(sqlx::FromRow)]
struct PaymentForRefund {
    status: String,
    released_at: Option<DateTime<Utc>>,
    late_charge_id: Option<String>,
    amount_minor: i64,
    refunded_minor: i64,
}

/// A row of [`SETTLE_REFUND`]: what the refund took from its payment.
#[derive(sqlx::FromRow)]
struct SettledRefund {
    payment_id: String,
    amount_minor: i64,
}

/// The payment a refund is asked for, as the refund needs it.
#[derive(sqlx::FromRow)]
struct RefundablePaymentRow {
    id: String,
    currency: String,
    provider_charge_id: Option<String>,
}

/// The refund's local part inside `tx`, after its key was claimed.
async fn create_refund_in<D: Dialect>(
    tx: &mut WriteTx<D>,
    refund: &NewRefund,
    idempotency_key: &str,
) -> Result<RefundStep, StoreError> {
    let command = &refund.command;
    let payment: Option<PaymentForRefund> = sqlx::query_as(D::sql(PAYMENT_FOR_REFUND))
        .bind(refund.tenant_id.as_str())
        .bind(command.payment_id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    let Some(PaymentForRefund {
        status,
        released_at,
        late_charge_id,
        amount_minor,
        refunded_minor,
    }) = payment
    else {
        return Ok(RefundStep::Refused(Refusal::PaymentNotFound));
    };
    if let Some(refund_id) = refund_with_reference(tx, refund).await? {
        return Ok(RefundStep::Refused(Refusal::DuplicateRefundReference {
            refund_id,
        }));
    }
    let refundable = match refund.of {
        RefundOf::Payment => matches!(status.as_str(), "PENDING" | "SETTLED") && released_at.is_none(),
        RefundOf::LateCharge => released_at.is_some() && late_charge_id.is_some(),
    };
    if !refundable {
        return Ok(RefundStep::Refused(Refusal::PaymentNotRefundable {
            payment_status: status,
        }));
    }
    let remaining = amount_minor - refunded_minor;
    if command.amount.minor_units() > remaining {
        return Ok(RefundStep::ExceedsRemaining(Balance {
            minor_units: remaining,
            currency: command.amount.currency(),
        }));
    }
    sqlx::query("update payments set refunded_minor = refunded_minor + $1 where id = $2")
        .bind(command.amount.minor_units())
        .bind(command.payment_id.as_str())
        .execute(&mut **tx)
        .await?;
    let created_at: DateTime<Utc> = sqlx::query_scalar(
        "insert into refunds (id, tenant_id, payment_id, amount_minor, currency, reason, reference, \
         status, idempotency_key) values ($1, $2, $3, $4, $5, $6, $7, 'PROCESSING', $8) returning created_at",
    )
    .bind(refund.id.as_str())
    .bind(refund.tenant_id.as_str())
    .bind(command.payment_id.as_str())
    .bind(command.amount.minor_units())
    .bind(command.amount.currency().code())
    .bind(command.reason.as_str())
    .bind(command.reference.as_str())
    .bind(idempotency_key)
    .fetch_one(&mut **tx)
    .await?;
    let event_id = new_event_id();
    insert_event_in(
        tx,
        &event_id,
        command.payment_id.as_str(),
        "RefundCreated",
        &refund.created_event(&event_id),
    )
    .await?;
    Ok(RefundStep::Created(created_at))
}

/// The refund of the same payment with the same reference, if there is one.
async fn refund_with_reference<D: Dialect>(
    tx: &mut WriteTx<D>,
    refund: &NewRefund,
) -> Result<Option<RefundId>, StoreError> {
    let existing: Option<String> =
        sqlx::query_scalar("select id from refunds where payment_id = $1 and reference = $2")
            .bind(refund.command.payment_id.as_str())
            .bind(refund.command.reference.as_str())
            .fetch_optional(&mut **tx)
            .await?;
    Ok(existing.map(RefundId::from_stored))
}

#[async_trait::async_trait]
impl<D: Dialect + RecordStatements + PaymentStatements> RefundStore for SqlStore<D> {
    async fn refundable_payment(
        &self,
        tenant_id: &TenantId,
        payment_id: &str,
    ) -> Result<Option<RefundablePayment>, StoreError> {
        let row: Option<RefundablePaymentRow> = sqlx::query_as(
            "select id, currency, provider_charge_id from payments where tenant_id = $1 and id = $2",
        )
        .bind(tenant_id.as_str())
        .bind(payment_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(RefundablePayment {
                id: PaymentId::from_stored(row.id),
                currency: Currency::parse(&row.currency)
                    .map_err(|_| StoreError::corrupt("payment currency", &row.currency))?,
                provider_charge_id: row.provider_charge_id,
            })
        })
        .transpose()
    }

    async fn refund(
        &self,
        tenant_id: &TenantId,
        refund_id: &str,
    ) -> Result<Option<StoredRefund>, StoreError> {
        let row: Option<RefundRow> = sqlx::query_as(SELECT_REFUND)
            .bind(tenant_id.as_str())
            .bind(refund_id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(refund_of).transpose()
    }

    async fn claim_create_refund(
        &self,
        claim: &NewClaim,
        refund: &NewRefund,
        exceeds_remaining: &ExceedsRemaining<'_>,
    ) -> Result<ClaimOutcome, StoreError> {
        let scope = &claim.scope;
        let mut tx = self.begin().await?;
        let Some(claimed) = claim_record_in(&mut tx, claim, "refund", refund.id.as_str()).await? else {
            return self.existing(tx, scope).await;
        };
        let local = match create_refund_in(&mut tx, refund, scope.key.as_str()).await? {
            RefundStep::Created(created_at) => LocalOutcome::Created(created_at),
            RefundStep::ExceedsRemaining(remaining) => {
                let error = ApiError::RefundExceedsRemaining {
                    remaining: remaining.to_string(),
                };
                LocalOutcome::Bound {
                    response: exceeds_remaining(&error),
                    error,
                }
            }
            RefundStep::Refused(refusal) => LocalOutcome::Refused(refusal),
        };
        self.finish_claim(tx, scope, claimed, local, |refusal| {
            std::future::ready(Ok(refusal))
        })
        .await
    }

    async fn complete_create_refund(
        &self,
        scope: &Scope,
        lease_version: i64,
        completion: &RefundCompletion,
    ) -> Result<bool, StoreError> {
        let (record_status, event_type) = match completion.status {
            RefundStatus::Succeeded => ("COMPLETED", "RefundSucceeded"),
            _ => ("FAILED_REPLAYABLE", "RefundFailed"),
        };
        let Some(mut tx) = begin_settled(
            self,
            scope,
            lease_version,
            record_status,
            &completion.response,
            &completion.provider_refund_id,
        )
        .await?
        else {
            return Ok(false);
        };
        let refund: Option<SettledRefund> = sqlx::query_as(D::sql(SETTLE_REFUND))
            .bind(completion.status.as_str())
            .bind(completion.provider_refund_id.as_str())
            .bind(completion.refund_id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(SettledRefund {
            payment_id,
            amount_minor,
        }) = refund
        else {
            return Err(StoreError::Corrupt(format!(
                "refund {} is no longer PROCESSING",
                completion.refund_id
            )));
        };
        if completion.status != RefundStatus::Succeeded {
            sqlx::query("update payments set refunded_minor = refunded_minor - $1 where id = $2")
                .bind(amount_minor)
                .bind(payment_id.as_str())
                .execute(&mut *tx)
                .await?;
        }
        insert_event_in(
            &mut tx,
            &completion.event_id,
            &payment_id,
            event_type,
            &completion.event_payload,
        )
        .await?;
        if let Some(audit) = &completion.audit {
            insert_audit(&mut tx, audit).await?;
        }
        tx.commit().await?;
        Ok(true)
    }
}
