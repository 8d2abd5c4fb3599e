//! What a consumer's batch writes: the ledger's postings for a payment, a refund or a late charge, and a receipt to send.

use crate::store::dialect::{Dialect, RowsAffected, WriteTx};
use crate::store::error::StoreError;
use crate::store::events::EventPayment;
use crate::store::events::payment_for_events;
use crate::store::payments::minor_to_decimal;
use domain::event::EventMessage;

/// The ledger's side of an authorised payment: its double-entry transaction, the customer's
/// account debited and the provider's clearing account credited (`ledger_payment_<id>`,
/// unique, so a payment is booked once). `false`: it was booked before.
pub(super) async fn book_payment<D: Dialect>(
    tx: &mut WriteTx<D>,
    payment_id: &str,
) -> Result<bool, StoreError> {
    let EventPayment {
        tenant_id,
        account_id,
        amount_minor: amount,
        currency,
    } = payment_for_events(tx, payment_id).await?;
    let created = sqlx::query(
        "insert into ledger_transactions (id, entry_type, source_payment_id) \
         values ($1, 'payment_authorized', $2) on conflict do nothing",
    )
    .bind(format!("ledger_payment_{payment_id}"))
    .bind(payment_id)
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    if created {
        let customer = format!("customer:{tenant_id}:{account_id}");
        post_in(
            tx,
            &format!("ledger_payment_{payment_id}"),
            &customer,
            -amount,
            &currency,
        )
        .await?;
    }
    Ok(created)
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

/// The receipt of an authorised payment, pending until the sender delivers it
/// (`receipt_payment_<id>`, unique). `false`: it was recorded before.
pub(super) async fn record_receipt<D: Dialect>(
    tx: &mut WriteTx<D>,
    payment_id: &str,
) -> Result<bool, StoreError> {
    let EventPayment {
        account_id,
        amount_minor: amount,
        currency,
        ..
    } = payment_for_events(tx, payment_id).await?;
    let body = format!(
        "Payment {payment_id} of {} {currency} from account {account_id} was authorised.",
        minor_to_decimal(amount, &currency)
    );
    Ok(sqlx::query(
        "insert into receipts (dedupe_key, payment_id, body) values ($1, $2, $3) on conflict do nothing",
    )
    .bind(format!("receipt_payment_{payment_id}"))
    .bind(payment_id)
    .bind(body)
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1)
}
