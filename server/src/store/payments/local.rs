//! create_payment's local writes inside a transaction: the account's hold and the payment
//! (or the refusal that names why not), the payment's settlement, and the outbox event of each.

use crate::store::dialect::{Dialect, RowsAffected, WriteTx};
use crate::store::error::StoreError;
use crate::store::payments::PaymentStatements;
use chrono::{DateTime, Utc};
use domain::claim::{PaymentCompletion, ProviderVerdict, Refusal};
use domain::money::Currency;
use domain::payment::{NewPayment, PaymentId, new_event_id};
use sqlx::Pool;

/// `$1` tenant, `$2` account: the account's currency and balance, locked for the
/// transaction where the dialect has row locks (SQLite: the claim's insert already holds
/// its one write lock).
/// On SQLite `{for_update}` is nothing: the claim's insert already holds its one write lock
/// for this transaction.
const ACCOUNT_FOR_UPDATE: &str =
    "select currency, balance_minor from accounts where tenant_id = $1 and id = $2 {for_update}";

/// `$1` payment status, `$2` charge id, `$3` payment id: PROCESSING -> the outcome.
const SET_PAYMENT_OUTCOME: &str = "update payments set status = $1, provider_charge_id = $2, updated_at = {now} where id = $3 \
     and status = 'PROCESSING'";

/// `$1` amount, `$2` tenant, `$3` account.
const RELEASE_HOLD: &str = "update accounts set balance_minor = balance_minor + $1, updated_at = {now} where tenant_id = \
     $2 and id = $3";

/// `$1` amount, `$2` tenant, `$3` account.
const HOLD_AMOUNT: &str = "update accounts set balance_minor = balance_minor - $1, updated_at = {now} where tenant_id = \
     $2 and id = $3";

/// A row of [`PaymentStatements::ACCOUNT_FOR_UPDATE`].
#[derive(sqlx::FromRow)]
struct AccountRow {
    currency: String,
    balance_minor: i64,
}

/// The account a payment's amount is held on, and the amount.
#[derive(sqlx::FromRow)]
struct HoldRow {
    tenant_id: String,
    account_id: String,
    amount_minor: i64,
}

/// Where the local part of create_payment got to, inside its transaction.
pub(super) enum LocalStep {
    Created(DateTime<Utc>),
    InsufficientFunds,
    Refused(Refusal),
    /// The business key is taken; the transaction must be rolled back before the existing
    /// payment can be named.
    DuplicateMerchantReference,
}

/// The local part of create_payment, inside `tx`: the tenant's account, its currency and
/// balance, the hold, the payment row (PROCESSING) and its PaymentCreated event. Writes
/// nothing when it refuses.
pub(super) async fn create_payment_in<D: Dialect + PaymentStatements>(
    tx: &mut WriteTx<D>,
    payment: &NewPayment,
    idempotency_key: Option<&str>,
) -> Result<LocalStep, StoreError> {
    let account: Option<AccountRow> = sqlx::query_as(D::sql(ACCOUNT_FOR_UPDATE))
        .bind(payment.tenant_id.as_str())
        .bind(payment.account_id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    let Some(AccountRow {
        currency: account_currency,
        balance_minor: balance,
    }) = account
    else {
        return Ok(LocalStep::Refused(Refusal::AccountNotFound));
    };
    let currency = payment.amount.currency();
    if account_currency != currency.code() {
        let account_currency = Currency::parse(&account_currency)
            .map_err(|_| StoreError::corrupt("account currency", &account_currency))?;
        return Ok(LocalStep::Refused(Refusal::CurrencyMismatch { account_currency }));
    }
    if balance < payment.amount.minor_units() {
        return Ok(LocalStep::InsufficientFunds);
    }
    sqlx::query(D::sql(HOLD_AMOUNT))
        .bind(payment.amount.minor_units())
        .bind(payment.tenant_id.as_str())
        .bind(payment.account_id.as_str())
        .execute(&mut **tx)
        .await?;
    let created: Result<DateTime<Utc>, sqlx::Error> = sqlx::query_scalar(
        "insert into payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference, \
         channel, status, idempotency_key) values ($1, $2, $3, $4, $5, $6, $7, 'PROCESSING', $8) \
         returning created_at",
    )
    .bind(payment.id.as_str())
    .bind(payment.tenant_id.as_str())
    .bind(payment.account_id.as_str())
    .bind(payment.amount.minor_units())
    .bind(currency.code())
    .bind(payment.merchant_reference.as_str())
    .bind(payment.channel.as_str())
    .bind(idempotency_key)
    .fetch_one(&mut **tx)
    .await;
    let payment_created_at = match created.map_err(StoreError::from) {
        Ok(created_at) => created_at,
        Err(StoreError::AlreadyExists) => return Ok(LocalStep::DuplicateMerchantReference),
        Err(error) => return Err(error),
    };
    let event_id = new_event_id();
    insert_event_in(
        tx,
        &event_id,
        payment.id.as_str(),
        "PaymentCreated",
        &payment.created_event(&event_id),
    )
    .await?;
    Ok(LocalStep::Created(payment_created_at))
}

/// Names the refusal, once the transaction was rolled back.
pub(super) async fn refusal<D: Dialect>(
    pool: &Pool<D>,
    step: LocalStep,
    payment: &NewPayment,
) -> Result<Refusal, StoreError> {
    match step {
        LocalStep::Refused(refusal) => Ok(refusal),
        LocalStep::DuplicateMerchantReference => {
            let existing: String = sqlx::query_scalar(
                "select id from payments where tenant_id = $1 and account_id = $2 \
                 and merchant_reference = $3 and released_at is null",
            )
            .bind(payment.tenant_id.as_str())
            .bind(payment.account_id.as_str())
            .bind(payment.merchant_reference.as_str())
            .fetch_one(pool)
            .await?;
            Ok(Refusal::DuplicateMerchantReference {
                payment_id: PaymentId::from_stored(existing),
            })
        }
        LocalStep::Created(_) | LocalStep::InsufficientFunds => {
            Err(StoreError::Corrupt("not a refusal".into()))
        }
    }
}

/// The payment's outcome inside `tx`: status and charge id, the hold released on a decline,
/// and the outcome's event.
pub(super) async fn settle_payment_in<D: Dialect + PaymentStatements>(
    tx: &mut WriteTx<D>,
    completion: &PaymentCompletion,
) -> Result<(), StoreError> {
    let (payment_status, event_type) = payment_outcome(completion.verdict);
    let settled = sqlx::query(D::sql(SET_PAYMENT_OUTCOME))
        .bind(payment_status)
        .bind(completion.provider_charge_id.as_str())
        .bind(completion.payment_id.as_str())
        .execute(&mut **tx)
        .await?
        .rows_affected();
    if settled == 0 {
        return Err(no_longer_processing(&completion.payment_id));
    }
    if completion.verdict == ProviderVerdict::Declined {
        release_hold_in(tx, completion.payment_id.as_str()).await?;
    }
    insert_event_in(
        tx,
        &completion.event_id,
        completion.payment_id.as_str(),
        event_type,
        &completion.event_payload,
    )
    .await
}

/// The payment's status and its event's type for the provider's verdict.
pub(super) fn payment_outcome(verdict: ProviderVerdict) -> (&'static str, &'static str) {
    match verdict {
        ProviderVerdict::Authorized => ("PENDING", "PaymentAuthorized"),
        ProviderVerdict::Declined => ("DECLINED", "PaymentDeclined"),
    }
}

/// A completion found its payment settled already (by another owner of a payment without a
/// record): its hold and event must not be applied twice.
pub(super) fn no_longer_processing(payment_id: &PaymentId) -> StoreError {
    StoreError::Corrupt(format!("payment {payment_id} is no longer PROCESSING"))
}

/// Gives a payment's held amount back to its account, inside `tx`.
pub(super) async fn release_hold_in<D: Dialect + PaymentStatements>(
    tx: &mut WriteTx<D>,
    payment_id: &str,
) -> Result<(), StoreError> {
    let hold: HoldRow =
        sqlx::query_as("select tenant_id, account_id, amount_minor from payments where id = $1")
            .bind(payment_id)
            .fetch_one(&mut **tx)
            .await?;
    sqlx::query(D::sql(RELEASE_HOLD))
        .bind(hold.amount_minor)
        .bind(hold.tenant_id)
        .bind(hold.account_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A payment's event in the outbox, inside the transaction of the change it announces.
pub(in crate::store) async fn insert_event_in<D: Dialect>(
    tx: &mut WriteTx<D>,
    event_id: &str,
    payment_id: &str,
    event_type: &str,
    payload: &str,
) -> Result<(), StoreError> {
    sqlx::query("insert into outbox_events (id, payment_id, event_type, payload) values ($1, $2, $3, $4)")
        .bind(event_id)
        .bind(payment_id)
        .bind(event_type)
        .bind(payload)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
