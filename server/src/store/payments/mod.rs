//! Payments and accounts: the local part of a create_payment (used inside the claim, or alone
//! for tenants without keys), its settlement, the payment as the API reads it, the background
//! passes over payments (settlement, the watch over released payments, payments whose answer
//! was lost without a key), and an account's settings.

pub mod keyed;
pub(super) mod local;

use local::{LocalStep, create_payment_in, insert_event_in, refusal, settle_payment_in};

use super::dialect::{Dialect, RowsAffected, SqlStore};

use super::error::StoreError;

use super::operators::insert_audit;

use chrono::{DateTime, Utc};

use domain::claim::{PaymentCompletion, UnkeyedOutcome};

use domain::command::AccountId;

use domain::money::{Amount, Currency};

use domain::operator::AuditEntry;

use domain::payment::NewPayment;

use domain::representation::PaymentView;

use domain::scope::Scope;

use domain::tenant::{ApiKeyId, TenantId};

use std::time::Duration;

/// A late charge refunded: the payment `scope`'s key released, who resolved it, and how
/// (`reference`: the refund's id, or an operator's words).
pub struct LateChargeResolution<'a> {
    pub scope: &'a Scope,
    pub payment_id: &'a str,
    pub by: &'a str,
    pub reference: &'a str,
    pub audit: &'a AuditEntry,
}

#[async_trait::async_trait]
pub trait PaymentStore: Send + Sync {
    /// The current state of a payment of this tenant (`None` for another tenant's).
    async fn payment(
        &self,
        tenant_id: &TenantId,
        payment_id: &str,
    ) -> Result<Option<PaymentView>, StoreError>;

    /// The local transaction of a create_payment without an idempotency key (tenants that do
    /// not require keys): the same account checks, hold, payment row and event, no record.
    /// The business key still stops a second payment.
    async fn create_payment_without_key(&self, payment: &NewPayment) -> Result<UnkeyedOutcome, StoreError>;

    /// The completion of a payment made without a key: status, hold, event.
    async fn settle_payment_without_key(&self, completion: &PaymentCompletion) -> Result<(), StoreError>;

    /// Takes payments made without a key that were left PROCESSING (their provider answer was
    /// lost) and untouched for `stale_after`, for the recovery worker.
    async fn take_stale_unkeyed_payments(
        &self,
        stale_after: Duration,
        limit: i64,
    ) -> Result<Vec<(TenantId, PaymentView)>, StoreError>;

    /// Takes authorised (PENDING) payments whose settlement was not checked for
    /// `recheck_after`, for the settlement worker (each taken by bumping its `updated_at`;
    /// skip-locked on PostgreSQL). Returns their ids.
    async fn take_payments_to_settle(
        &self,
        recheck_after: Duration,
        limit: i64,
    ) -> Result<Vec<String>, StoreError>;

    /// PENDING -> SETTLED with its PaymentSettled event, in one transaction; `false` when the
    /// payment was not PENDING (nothing written).
    async fn settle_payment(
        &self,
        payment_id: &str,
        event_id: &str,
        payload: &str,
    ) -> Result<bool, StoreError>;

    /// Takes released payments of the last `watch` (that showed no late charge yet) not
    /// checked for `recheck_after`, each by stamping its check; returns their ids.
    async fn take_released_payments_to_watch(
        &self,
        watch: Duration,
        recheck_after: Duration,
        limit: i64,
    ) -> Result<Vec<String>, StoreError>;

    /// Keeps the charge a released payment showed after all; `false` when one was noted
    /// already.
    async fn note_late_charge(&self, payment_id: &str, charge_id: &str) -> Result<bool, StoreError>;

    /// Records that a late charge was refunded ([`LateChargeResolution`]), with its audit
    /// entry, in one transaction; `false` (nothing written) when that key released no such
    /// payment, it has no late charge, or it was resolved already.
    async fn resolve_late_charge(&self, resolution: &LateChargeResolution<'_>) -> Result<bool, StoreError>;

    /// Sets an account's default currency: `None` when the tenant has no such account,
    /// `Some(true)` when it changed (with one audit row), `Some(false)` when it already was
    /// that currency (nothing written: the request is naturally idempotent).
    async fn set_default_currency(
        &self,
        tenant_id: &TenantId,
        account_id: &AccountId,
        currency: Currency,
        changed_by: &ApiKeyId,
    ) -> Result<Option<bool>, StoreError>;
}

/// Payment statements that differ by dialect.
pub trait PaymentStatements {
    /// `$1` watch seconds, `$2` recheck seconds, `$3` limit: released payments to ask the
    /// provider about again, each taken by stamping `release_checked_at`; returns ids.
    const TAKE_RELEASED_PAYMENTS_TO_WATCH: &'static str;
}

/// `$1` stale seconds, `$2` batch size: payments made without a key that are still
/// PROCESSING and untouched for that long, each taken (its `updated_at` bumped, which keeps
/// other workers off it for as long) and returned as a payment row plus tenant.
const TAKE_STALE_UNKEYED_PAYMENTS: &str = "update payments set updated_at = {now} where id in (select id from payments where status = \
     'PROCESSING' and idempotency_key is null and updated_at <= {now-$1} order by updated_at \
     limit $2 {skip_locked}) returning tenant_id, id, account_id, amount_minor, currency, \
     merchant_reference, status, created_at";

/// `$1` recheck seconds, `$2` limit: takes PENDING payments, returns their ids.
/// Rows another instance takes are skipped, never waited for.
const TAKE_PAYMENTS_TO_SETTLE: &str = "update payments set updated_at = {now} where id in (select id from payments where status = \
     'PENDING' and updated_at <= {now-$1} order by updated_at limit $2 {skip_locked}) returning \
     id";

/// `$1` currency, `$2` tenant, `$3` account: changes only a different value.
const SET_DEFAULT_CURRENCY: &str = "update accounts set default_currency = $1, updated_at = {now} where tenant_id = $2 and id = \
     $3 and (default_currency is null or default_currency <> $1)";

/// `$1` payment id: PROCESSING -> DECLINED, released (its merchant reference freed).
const RELEASE_PAYMENT: &str = "update payments set status = 'DECLINED', released_at = {now}, updated_at = {now} where id = \
     $1 and status = 'PROCESSING'";

/// `$1` payment id: PENDING -> SETTLED.
const SETTLE_PAYMENT: &str = "update payments set status = 'SETTLED', updated_at = {now} where id = $1 and status = \
     'PENDING'";

/// `$1` payment, `$2` operator, `$3` reference, `$4` tenant, `$5` key: an unresolved late
/// charge of a payment that key released -> resolved now.
const RESOLVE_LATE_CHARGE: &str = "update payments set late_charge_resolved_at = {now}, late_charge_resolved_by = $2, \
     late_charge_resolution = $3 where id = $1 and tenant_id = $4 and idempotency_key = $5 and \
     released_at is not null and late_charge_id is not null and late_charge_resolved_at is null";

/// The payment columns [`PaymentView`] holds.
const SELECT_PAYMENT: &str = "select id, account_id, amount_minor, currency, merchant_reference, \
     status, created_at from payments where tenant_id = $1 and id = $2";

/// A row of [`SELECT_PAYMENT`].
#[derive(sqlx::FromRow)]
struct PaymentRow {
    id: String,
    account_id: String,
    amount_minor: i64,
    currency: String,
    merchant_reference: String,
    status: String,
    created_at: DateTime<Utc>,
}

fn payment_of(row: PaymentRow) -> Result<PaymentView, StoreError> {
    let currency =
        Currency::parse(&row.currency).map_err(|_| StoreError::corrupt("payment currency", &row.currency))?;
    Ok(PaymentView {
        id: row.id,
        account_id: row.account_id,
        amount: Amount::from_minor_units(row.amount_minor, currency)
            .map_err(|error| StoreError::Corrupt(error.to_string()))?,
        merchant_reference: row.merchant_reference,
        status: StoreError::parse_stored("payment status", &row.status)?,
        created_at: row.created_at,
    })
}

/// A row of [`PaymentStatements::TAKE_STALE_UNKEYED_PAYMENTS`]: a payment and its tenant.
#[derive(sqlx::FromRow)]
struct TenantPaymentRow {
    tenant_id: String,
    #[sqlx(flatten)]
    payment: PaymentRow,
}

impl<D: Dialect> SqlStore<D> {
    /// One statement that takes rows and returns their ids (`update … returning id`), in its
    /// own transaction like every write.
    async fn take_ids<'q>(
        &self,
        statement: sqlx::query::QueryScalar<'q, D, String, <D as sqlx::Database>::Arguments<'q>>,
    ) -> Result<Vec<String>, StoreError> {
        let mut tx = self.begin().await?;
        let ids = statement.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(ids)
    }
}

#[async_trait::async_trait]
impl<D: Dialect + PaymentStatements> PaymentStore for SqlStore<D> {
    async fn payment(
        &self,
        tenant_id: &TenantId,
        payment_id: &str,
    ) -> Result<Option<PaymentView>, StoreError> {
        let row: Option<PaymentRow> = sqlx::query_as(SELECT_PAYMENT)
            .bind(tenant_id.as_str())
            .bind(payment_id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(payment_of).transpose()
    }

    async fn create_payment_without_key(&self, payment: &NewPayment) -> Result<UnkeyedOutcome, StoreError> {
        let mut tx = self.begin().await?;
        match create_payment_in(&mut tx, payment, None).await? {
            LocalStep::Created(payment_created_at) => {
                tx.commit().await?;
                Ok(UnkeyedOutcome::Created { payment_created_at })
            }
            LocalStep::InsufficientFunds => {
                tx.rollback().await?;
                Ok(UnkeyedOutcome::InsufficientFunds)
            }
            refused => {
                tx.rollback().await?;
                refusal(&self.pool, refused, payment)
                    .await
                    .map(UnkeyedOutcome::Refused)
            }
        }
    }

    async fn settle_payment_without_key(&self, completion: &PaymentCompletion) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        settle_payment_in(&mut tx, completion).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn take_stale_unkeyed_payments(
        &self,
        stale_after: Duration,
        limit: i64,
    ) -> Result<Vec<(TenantId, PaymentView)>, StoreError> {
        let mut tx = self.begin().await?;
        let rows: Vec<TenantPaymentRow> = sqlx::query_as(D::sql(TAKE_STALE_UNKEYED_PAYMENTS))
            .bind(stale_after.as_secs_f64())
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows.into_iter()
            .map(|row| Ok((TenantId::from_stored(row.tenant_id), payment_of(row.payment)?)))
            .collect()
    }

    async fn take_payments_to_settle(
        &self,
        recheck_after: Duration,
        limit: i64,
    ) -> Result<Vec<String>, StoreError> {
        self.take_ids(
            sqlx::query_scalar(D::sql(TAKE_PAYMENTS_TO_SETTLE))
                .bind(recheck_after.as_secs_f64())
                .bind(limit),
        )
        .await
    }

    async fn settle_payment(
        &self,
        payment_id: &str,
        event_id: &str,
        payload: &str,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let settled = sqlx::query(D::sql(SETTLE_PAYMENT))
            .bind(payment_id)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        if settled {
            insert_event_in(&mut tx, event_id, payment_id, "PaymentSettled", payload).await?;
        }
        tx.commit().await?;
        Ok(settled)
    }

    async fn take_released_payments_to_watch(
        &self,
        watch: Duration,
        recheck_after: Duration,
        limit: i64,
    ) -> Result<Vec<String>, StoreError> {
        self.take_ids(
            sqlx::query_scalar(D::TAKE_RELEASED_PAYMENTS_TO_WATCH)
                .bind(watch.as_secs_f64())
                .bind(recheck_after.as_secs_f64())
                .bind(limit),
        )
        .await
    }

    async fn note_late_charge(&self, payment_id: &str, charge_id: &str) -> Result<bool, StoreError> {
        let noted = self
            .write_one(
                sqlx::query(
                    "update payments set late_charge_id = $2 \
                     where id = $1 and released_at is not null and late_charge_id is null",
                )
                .bind(payment_id)
                .bind(charge_id),
            )
            .await?;
        Ok(noted == 1)
    }

    async fn resolve_late_charge(&self, resolution: &LateChargeResolution<'_>) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let resolved = sqlx::query(D::sql(RESOLVE_LATE_CHARGE))
            .bind(resolution.payment_id)
            .bind(resolution.by)
            .bind(resolution.reference)
            .bind(resolution.scope.tenant_id.as_str())
            .bind(resolution.scope.key.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if resolved != 1 {
            return Ok(false);
        }
        insert_audit(&mut tx, resolution.audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn set_default_currency(
        &self,
        tenant_id: &TenantId,
        account_id: &AccountId,
        currency: Currency,
        changed_by: &ApiKeyId,
    ) -> Result<Option<bool>, StoreError> {
        let mut tx = self.begin().await?;
        // The write comes first: it takes the row (or SQLite's) lock, so two equal requests
        // at once cannot both see "changed".
        let changed = sqlx::query(D::sql(SET_DEFAULT_CURRENCY))
            .bind(currency.code())
            .bind(tenant_id.as_str())
            .bind(account_id.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        if changed {
            sqlx::query(
                "insert into account_audit (id, tenant_id, account_id, setting, new_value, changed_by) \
                 values ($1, $2, $3, $4, $5, $6)",
            )
            .bind(format!("aud_{}", domain::random::random_hex(8)))
            .bind(tenant_id.as_str())
            .bind(account_id.as_str())
            .bind("default_currency")
            .bind(currency.code())
            .bind(changed_by.as_str())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            return Ok(Some(true));
        }
        let exists: i64 =
            sqlx::query_scalar("select count(*) from accounts where tenant_id = $1 and id = $2")
                .bind(tenant_id.as_str())
                .bind(account_id.as_str())
                .fetch_one(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok((exists > 0).then_some(false))
    }
}

/// How an amount reads in a receipt or on the console (`"10.00"`), from the stored minor
/// units; what cannot be read says so rather than failing the page.
pub fn minor_to_decimal(minor: i64, currency: &str) -> String {
    Currency::parse(currency)
        .ok()
        .and_then(|currency| Amount::from_minor_units(minor, currency).ok())
        .map_or_else(|| format!("{minor} (minor units)"), |amount| amount.to_string())
}
