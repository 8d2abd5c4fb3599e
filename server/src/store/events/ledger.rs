//! What a consumer's batch writes: the ledger's postings for a payment, a refund or a late charge, and a receipt to send.

use crate::store::dialect::{Dialect, RowsAffected, WriteTx};
use crate::store::error::StoreError;
use crate::store::events::EventPayment;
use crate::store::events::json_array;
use crate::store::events::payment_for_events;
use crate::store::events::payments_for_events;
use crate::store::payments::minor_to_decimal;
use domain::event::EventMessage;
use std::collections::HashSet;

/// `$1` payment ids (a JSON array): each payment's double-entry transaction, unless it was
/// booked before; returns the payments booked now. In id order, for the reason given at
/// `TAKE_INTO_INBOX`.
const BOOK_PAYMENTS: &str = "insert into ledger_transactions (id, entry_type, source_payment_id) \
     select 'ledger_payment_' || id, 'payment_authorized', id from payments \
     where id in (select value from {json_strings($1)}) order by id \
     on conflict do nothing returning source_payment_id";

/// `$1` payment ids (a JSON array), each booked by [`BOOK_PAYMENTS`] just now: its two
/// postings, the customer's account debited and the provider clearing account of its currency
/// credited.
const POST_PAYMENTS: &str = "insert into ledger_postings (transaction_id, account, amount_minor, currency) \
     select 'ledger_payment_' || id, 'customer:' || tenant_id || ':' || account_id, -amount_minor, currency \
     from payments where id in (select value from {json_strings($1)}) \
     union all \
     select 'ledger_payment_' || id, 'provider_clearing:' || currency, amount_minor, currency \
     from payments where id in (select value from {json_strings($1)})";

/// The ledger's side of authorised payments, in three statements whatever their number: for
/// each, its double-entry transaction, the customer's account debited and the provider's
/// clearing account credited (`ledger_payment_<id>`, unique, so a payment is booked once).
/// Returns the payments booked now; one booked before is not among them.
pub(super) async fn book_payments<D: Dialect>(
    tx: &mut WriteTx<D>,
    payment_ids: &[&str],
) -> Result<HashSet<String>, StoreError> {
    // Their payments exist, or the batch is corrupt.
    payments_for_events(tx, payment_ids).await?;
    if payment_ids.is_empty() {
        return Ok(HashSet::new());
    }
    let booked: Vec<String> = sqlx::query_scalar(D::sql(BOOK_PAYMENTS))
        .bind(json_array(payment_ids)?)
        .fetch_all(&mut **tx)
        .await?;
    if !booked.is_empty() {
        let booked: Vec<&str> = booked.iter().map(String::as_str).collect();
        sqlx::query(D::sql(POST_PAYMENTS))
            .bind(json_array(&booked)?)
            .execute(&mut **tx)
            .await?;
    }
    Ok(booked.into_iter().collect())
}

/// A succeeded refund in the ledger, once (`ledger_refund_<refundId>`): the provider clearing
/// account pays the customer's account back. `false`: it was booked before.
pub(super) async fn book_refund<D: Dialect>(
    tx: &mut WriteTx<D>,
    message: &EventMessage,
) -> Result<bool, StoreError> {
    let payload: serde_json::Value = serde_json::from_str(&message.payload)
        .map_err(|error| StoreError::Corrupt(format!("event {}: {error}", message.event_id)))?;
    let refund_id = payload["refundId"]
        .as_str()
        .ok_or_else(|| StoreError::corrupt("refund event without a refund", &message.event_id))?;
    let EventPayment {
        tenant_id,
        account_id,
        currency,
        ..
    } = payment_for_events(tx, &message.payment_id).await?;
    let amount: i64 =
        sqlx::query_scalar("select amount_minor from refunds where id = $1 and payment_id = $2")
            .bind(refund_id)
            .bind(message.payment_id.as_str())
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| StoreError::corrupt("event for unknown refund", refund_id))?;
    let customer = format!("customer:{tenant_id}:{account_id}");
    book_late_charge(tx, &message.payment_id, &customer, &currency).await?;
    let transaction_id = format!("ledger_refund_{refund_id}");
    let created = sqlx::query(
        "insert into ledger_transactions (id, entry_type, source_payment_id, source_refund_id) \
         values ($1, 'refund_succeeded', $2, $3) on conflict do nothing",
    )
    .bind(transaction_id.as_str())
    .bind(message.payment_id.as_str())
    .bind(refund_id)
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    if created {
        post_in(tx, &transaction_id, &customer, amount, &currency).await?;
    }
    Ok(created)
}

/// A charge the provider made after its payment was released never went through the ledger
/// (the payment was declined); it is booked, once (`ledger_late_charge_<paymentId>`), with
/// the refund that gives it back, so that the customer's account nets to what really moved.
pub(super) async fn book_late_charge<D: Dialect>(
    tx: &mut WriteTx<D>,
    payment_id: &str,
    customer: &str,
    currency: &str,
) -> Result<(), StoreError> {
    let late: Option<i64> = sqlx::query_scalar(
        "select amount_minor from payments where id = $1 and released_at is not null \
         and late_charge_id is not null",
    )
    .bind(payment_id)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(amount) = late else {
        return Ok(());
    };
    let transaction_id = format!("ledger_late_charge_{payment_id}");
    let created = sqlx::query(
        "insert into ledger_transactions (id, entry_type, source_payment_id) \
         values ($1, 'late_charge', $2) on conflict do nothing",
    )
    .bind(transaction_id.as_str())
    .bind(payment_id)
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    if created {
        post_in(tx, &transaction_id, customer, -amount, currency).await?;
    }
    Ok(())
}

/// A ledger transaction's two postings: `customer_amount` to the customer's account and its
/// opposite to the provider clearing account of the currency, so that they sum to zero.
pub(super) async fn post_in<D: Dialect>(
    tx: &mut WriteTx<D>,
    transaction_id: &str,
    customer: &str,
    customer_amount: i64,
    currency: &str,
) -> Result<(), StoreError> {
    for (account, signed) in [
        (customer.to_owned(), customer_amount),
        (format!("provider_clearing:{currency}"), -customer_amount),
    ] {
        sqlx::query(
            "insert into ledger_postings (transaction_id, account, amount_minor, currency) \
             values ($1, $2, $3, $4)",
        )
        .bind(transaction_id)
        .bind(account)
        .bind(signed)
        .bind(currency)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// `$1` the receipts, a JSON array of `[dedupe key, payment id, body]`: each recorded unless it
/// was before; returns the payments recorded now.
const RECORD_RECEIPTS: &str = "insert into receipts (dedupe_key, payment_id, body) \
     select value->>0, value->>1, value->>2 from {json_rows($1)} where true order by 1 \
     on conflict do nothing returning payment_id";

/// The receipts of authorised payments, pending until the sender delivers them
/// (`receipt_payment_<id>`, unique), in one statement. Returns the payments whose receipt was
/// recorded now; one recorded before is not among them.
pub(super) async fn record_receipts<D: Dialect>(
    tx: &mut WriteTx<D>,
    payments: &[&EventPayment],
) -> Result<HashSet<String>, StoreError> {
    if payments.is_empty() {
        return Ok(HashSet::new());
    }
    let receipts: Vec<[String; 3]> = payments
        .iter()
        .map(|payment| {
            let EventPayment {
                id,
                account_id,
                amount_minor,
                currency,
                ..
            } = payment;
            [
                format!("receipt_payment_{id}"),
                id.clone(),
                format!(
                    "Payment {id} of {} {currency} from account {account_id} was authorised.",
                    minor_to_decimal(*amount_minor, currency)
                ),
            ]
        })
        .collect();
    let recorded: Vec<String> = sqlx::query_scalar(D::sql(RECORD_RECEIPTS))
        .bind(json_array(&receipts)?)
        .fetch_all(&mut **tx)
        .await?;
    Ok(recorded.into_iter().collect())
}
