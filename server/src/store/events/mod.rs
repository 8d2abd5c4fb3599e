//! The outbox's delivery and the consumers' durable state: claims, publication marks, backoff
//! and dead letters; consumer inboxes with the ledger and receipts written in the same
//! transaction.

use crate::store::events::ledger::book_payments;
use crate::store::events::ledger::book_refund;
use crate::store::events::ledger::record_receipts;
mod ledger;

use super::dialect::{Dialect, RowsAffected, SqlStore, WriteTx};

use super::error::StoreError;

use super::operators::insert_audit;

use crate::crash::{CrashPoint, crash_point};

use chrono::{DateTime, Utc};

use domain::event::EventMessage;

use domain::operator::AuditEntry;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// A receipt recorded and not yet sent (a row of `receipts`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PendingReceipt {
    /// `receipt_payment_<paymentId>`: also the message id the sink is given.
    pub dedupe_key: String,
    pub payment_id: String,
    pub body: String,
}

/// An event the publisher gave up on.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DeadLetter {
    #[sqlx(rename = "id")]
    pub event_id: String,
    pub event_type: String,
    pub payment_id: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    /// Also its version: a re-drive applies only while it is still dead since then.
    pub dead_at: DateTime<Utc>,
}

/// Events not yet published, and the age of the oldest (the row of
/// [`EventStatements::OUTBOX_BACKLOG`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, sqlx::FromRow)]
pub struct OutboxBacklog {
    pub unpublished: i64,
    pub oldest_unpublished_age_seconds: f64,
}

#[async_trait::async_trait]
pub trait EventStore: Send + Sync {
    /// Events not yet published, and the age of the oldest.
    async fn outbox_backlog(&self) -> Result<OutboxBacklog, StoreError>;

    /// How many published events of `event_type` from the last `window` `consumer` has not
    /// processed.
    async fn consumer_lag(
        &self,
        consumer: &str,
        event_type: &str,
        window: Duration,
    ) -> Result<i64, StoreError>;

    /// Dead-lettered events, oldest first.
    async fn dead_letters(&self, limit: i64) -> Result<Vec<DeadLetter>, StoreError>;

    /// Puts a dead letter back to the publisher, if it is still dead since `dead_at` (the
    /// version the operator saw, RFC 3339 with microseconds), with the audit entry in the same
    /// transaction.
    async fn redrive_event(
        &self,
        event_id: &str,
        dead_at: &str,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;

    /// Claims up to `limit` due, unpublished, live events for `claim` (other publishers skip
    /// them meanwhile), oldest first, counting the attempt.
    async fn claim_events(&self, limit: i64, claim: Duration) -> Result<Vec<EventMessage>, StoreError>;

    /// Marks the events published, in one statement; an event marked before keeps its first
    /// publication time.
    async fn mark_events_published(&self, event_ids: &[String]) -> Result<(), StoreError>;

    /// Records a failed publication: backs off (2^attempts seconds, at most 5 min), or
    /// dead-letters the event once it used `max_attempts`.
    async fn mark_event_failed(
        &self,
        event_id: &str,
        error: &str,
        max_attempts: i32,
    ) -> Result<(), StoreError>;

    /// The ledger consumer over a batch of PaymentAuthorized messages, in one transaction: for
    /// each message not processed before, its inbox row and the payment's double-entry
    /// transaction. Per message, whether it was applied (`false`: processed before, nothing
    /// written twice).
    async fn consume_into_ledger(
        &self,
        consumer: &str,
        messages: &[&EventMessage],
    ) -> Result<Vec<bool>, StoreError>;

    /// The receipts consumer over a batch, in one transaction: for each message not processed
    /// before, its inbox row and the pending receipt. Per message, whether it was applied.
    async fn consume_into_receipts(
        &self,
        consumer: &str,
        messages: &[&EventMessage],
    ) -> Result<Vec<bool>, StoreError>;

    async fn pending_receipts(&self, limit: i64) -> Result<Vec<PendingReceipt>, StoreError>;

    /// Marks the receipts sent, in one statement; a receipt marked before keeps its first time.
    async fn mark_receipts_sent(&self, dedupe_keys: &[String]) -> Result<(), StoreError>;
}

/// Event statements that differ by dialect.
pub trait EventStatements {
    /// `$1` error, `$2` attempt limit, `$3` event id.
    const MARK_EVENT_FAILED: &'static str;
}

/// `$1` the event ids, a JSON array of strings. A mark probes the primary key once per id, and
/// a second mark keeps the first time. With `published_at is null` in its condition instead,
/// PostgreSQL's planner read the partial index of unpublished events, which under load is
/// mostly entries of rows published since the last vacuum, and read all of it
/// (docs/performance.md has the plans and the times).
const MARK_EVENTS_PUBLISHED: &str = "update outbox_events set published_at = coalesce(published_at, {now}), \
     claimed_until = null, last_error = null where id in (select value from {json_strings($1)})";

/// `$1` the dedupe keys, a JSON array of strings; by the primary key, for the reason given at
/// [`MARK_EVENTS_PUBLISHED`].
const MARK_RECEIPTS_SENT: &str = "update receipts set sent_at = coalesce(sent_at, {now}) \
     where dedupe_key in (select value from {json_strings($1)})";

/// `$1` event id, `$2` dead at (RFC 3339 text).
const REDRIVE_EVENT: &str = "update outbox_events set dead_at = null, attempts = 0, next_attempt_at = null, claimed_until \
     = null where id = $1 and dead_at = {time($2)}";

/// Unpublished events and the age in seconds (float, 0 when none) of the oldest.
const OUTBOX_BACKLOG: &str = "select count(*) as unpublished, coalesce({seconds_since(min(created_at))}, 0.0) as \
     oldest_unpublished_age_seconds from outbox_events where published_at is null and dead_at is \
     null";

/// `$1` claim seconds, `$2` limit: returns id, event type, payment id, payload.
/// Rows another publisher holds are skipped, never waited for.
const CLAIM_EVENTS: &str = "update outbox_events set claimed_until = {now+$1}, attempts = attempts + 1 where id in \
     (select id from outbox_events where published_at is null and dead_at is null and \
     (next_attempt_at is null or next_attempt_at <= {now}) and (claimed_until is null or \
     claimed_until <= {now}) order by created_at limit $2 {skip_locked}) returning id, \
     event_type, payment_id, payload";

/// `$1` consumer, `$2` event type, `$3` window seconds.
const CONSUMER_LAG: &str = "select count(*) from outbox_events e where not exists (select 1 from consumer_inbox i where \
     i.consumer_name = $1 and i.message_id = e.id) and e.event_type = $2 and e.created_at >= \
     {now-$3} and e.published_at is not null";

/// `$1` consumer, `$2` the batch's message ids (a JSON array): the inbox rows written, one per
/// message the consumer had not processed; returns their ids. In id order, so that two batches
/// sharing messages lock their inbox rows in the same order and never deadlock.
const TAKE_INTO_INBOX: &str = "insert into consumer_inbox (consumer_name, message_id) \
     select $1, value from {json_strings($2)} where true order by value \
     on conflict do nothing returning message_id";

/// `$1` payment ids (a JSON array): what the consumers book of each.
const PAYMENTS_FOR_EVENTS: &str = "select id, tenant_id, account_id, amount_minor, currency from payments \
     where id in (select value from {json_strings($1)})";

/// Writes the batch's inbox rows for `consumer`, in one statement; per message, whether it is
/// new to the consumer. Its side effects go in the same transaction: a duplicate delivery (in
/// this batch or before) finds the row and does nothing; a crash before the commit leaves
/// neither, and the redelivery does the work once. Writing first also takes SQLite's write
/// lock at once, so two deliveries queue instead of failing to upgrade a read.
///
/// One statement a batch, not one a message: on SQLite each statement is a hand-off to the
/// writer's worker thread and back, and the consumers' statements one by one took a third of
/// the writer's time under fresh creates (docs/performance.md).
async fn take_into_inbox<D: Dialect>(
    tx: &mut WriteTx<D>,
    consumer: &str,
    messages: &[&EventMessage],
) -> Result<Vec<bool>, StoreError> {
    let ids: Vec<&str> = messages.iter().map(|message| message.event_id.as_str()).collect();
    let taken: Vec<String> = sqlx::query_scalar(D::sql(TAKE_INTO_INBOX))
        .bind(consumer)
        .bind(json_array(&ids)?)
        .fetch_all(&mut **tx)
        .await?;
    let mut taken: HashSet<String> = taken.into_iter().collect();
    // The same message twice in a batch: its first delivery is the new one.
    Ok(messages
        .iter()
        .map(|message| taken.remove(&message.event_id))
        .collect())
}

/// A batch as one JSON parameter (read by `{json_strings($N)}` or `{json_rows($N)}`).
fn json_array<T: serde::Serialize + ?Sized>(items: &T) -> Result<String, StoreError> {
    serde_json::to_string(items).map_err(|error| StoreError::Corrupt(error.to_string()))
}

/// What the consumers book of an event's payment.
#[derive(sqlx::FromRow)]
struct EventPayment {
    id: String,
    tenant_id: String,
    account_id: String,
    amount_minor: i64,
    currency: String,
}

/// The payments of `payment_ids` by id, in one statement. An event whose payment is missing
/// is corrupt, and fails its batch.
async fn payments_for_events<D: Dialect>(
    tx: &mut WriteTx<D>,
    payment_ids: &[&str],
) -> Result<HashMap<String, EventPayment>, StoreError> {
    if payment_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let found: Vec<EventPayment> = sqlx::query_as(D::sql(PAYMENTS_FOR_EVENTS))
        .bind(json_array(payment_ids)?)
        .fetch_all(&mut **tx)
        .await?;
    let found: HashMap<String, EventPayment> = found
        .into_iter()
        .map(|payment| (payment.id.clone(), payment))
        .collect();
    match payment_ids.iter().find(|id| !found.contains_key(**id)) {
        Some(missing) => Err(StoreError::corrupt("event for unknown payment", missing)),
        None => Ok(found),
    }
}

/// The payment of one event.
async fn payment_for_events<D: Dialect>(
    tx: &mut WriteTx<D>,
    payment_id: &str,
) -> Result<EventPayment, StoreError> {
    payments_for_events(tx, &[payment_id])
        .await?
        .remove(payment_id)
        .ok_or_else(|| StoreError::corrupt("event for unknown payment", payment_id))
}

/// A row of [`EventStatements::CLAIM_EVENTS`].
#[derive(sqlx::FromRow)]
struct ClaimedEvent {
    id: String,
    event_type: String,
    payment_id: String,
    payload: String,
}

#[async_trait::async_trait]
impl<D: Dialect + EventStatements> EventStore for SqlStore<D> {
    async fn outbox_backlog(&self) -> Result<OutboxBacklog, StoreError> {
        Ok(sqlx::query_as(D::sql(OUTBOX_BACKLOG))
            .fetch_one(&self.pool)
            .await?)
    }

    async fn consumer_lag(
        &self,
        consumer: &str,
        event_type: &str,
        window: Duration,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(D::sql(CONSUMER_LAG))
            .bind(consumer)
            .bind(event_type)
            .bind(window.as_secs_f64())
            .fetch_one(&self.pool)
            .await?)
    }

    async fn dead_letters(&self, limit: i64) -> Result<Vec<DeadLetter>, StoreError> {
        Ok(sqlx::query_as(
            "select id, event_type, payment_id, attempts, last_error, dead_at \
             from outbox_events where dead_at is not null order by dead_at, id limit $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn redrive_event(
        &self,
        event_id: &str,
        dead_at: &str,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let redriven = sqlx::query(D::sql(REDRIVE_EVENT))
            .bind(event_id)
            .bind(dead_at)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        if redriven {
            insert_audit(&mut tx, audit).await?;
        }
        tx.commit().await?;
        Ok(redriven)
    }

    async fn claim_events(&self, limit: i64, claim: Duration) -> Result<Vec<EventMessage>, StoreError> {
        let mut tx = self.begin().await?;
        let rows: Vec<ClaimedEvent> = sqlx::query_as(D::sql(CLAIM_EVENTS))
            .bind(claim.as_secs_f64())
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(rows
            .into_iter()
            .map(|row| EventMessage {
                event_id: row.id,
                event_type: row.event_type,
                payment_id: row.payment_id,
                payload: row.payload,
            })
            .collect())
    }

    async fn mark_events_published(&self, event_ids: &[String]) -> Result<(), StoreError> {
        if event_ids.is_empty() {
            return Ok(());
        }
        self.write_one(sqlx::query(D::sql(MARK_EVENTS_PUBLISHED)).bind(json_array(event_ids)?))
            .await?;
        Ok(())
    }

    async fn mark_event_failed(
        &self,
        event_id: &str,
        error: &str,
        max_attempts: i32,
    ) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(D::MARK_EVENT_FAILED)
                .bind(error)
                .bind(max_attempts)
                .bind(event_id),
        )
        .await?;
        Ok(())
    }

    async fn consume_into_ledger(
        &self,
        consumer: &str,
        messages: &[&EventMessage],
    ) -> Result<Vec<bool>, StoreError> {
        let mut tx = self.begin().await?;
        let fresh = take_into_inbox(&mut tx, consumer, messages).await?;
        let (refunds, payments): (Vec<usize>, Vec<usize>) = (0..messages.len())
            .filter(|&index| fresh[index])
            .partition(|&index| messages[index].event_type == "RefundSucceeded");
        let payment_ids: Vec<&str> = payments
            .iter()
            .map(|&index| messages[index].payment_id.as_str())
            .collect();
        let mut booked = book_payments(&mut tx, &payment_ids).await?;
        let mut applied = vec![false; messages.len()];
        for index in payments {
            // A payment is booked once, by the first of its events.
            applied[index] = booked.remove(&messages[index].payment_id);
        }
        for index in refunds {
            applied[index] = book_refund(&mut tx, messages[index]).await?;
        }
        crash_point(CrashPoint::ConsumerAfterSideEffect);
        tx.commit().await?;
        Ok(applied)
    }

    async fn consume_into_receipts(
        &self,
        consumer: &str,
        messages: &[&EventMessage],
    ) -> Result<Vec<bool>, StoreError> {
        let mut tx = self.begin().await?;
        let fresh = take_into_inbox(&mut tx, consumer, messages).await?;
        let payment_ids: Vec<&str> = (0..messages.len())
            .filter(|&index| fresh[index])
            .map(|index| messages[index].payment_id.as_str())
            .collect();
        let payments = payments_for_events(&mut tx, &payment_ids).await?;
        let payments: Vec<&EventPayment> = payments.values().collect();
        let mut recorded = record_receipts(&mut tx, &payments).await?;
        let applied = (0..messages.len())
            // A receipt is recorded once, by the first of its payment's events.
            .map(|index| fresh[index] && recorded.remove(&messages[index].payment_id))
            .collect();
        crash_point(CrashPoint::ConsumerAfterSideEffect);
        tx.commit().await?;
        Ok(applied)
    }

    async fn pending_receipts(&self, limit: i64) -> Result<Vec<PendingReceipt>, StoreError> {
        Ok(sqlx::query_as(
            "select dedupe_key, payment_id, body from receipts where sent_at is null order by created_at limit $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    async fn mark_receipts_sent(&self, dedupe_keys: &[String]) -> Result<(), StoreError> {
        if dedupe_keys.is_empty() {
            return Ok(());
        }
        self.write_one(sqlx::query(D::sql(MARK_RECEIPTS_SENT)).bind(json_array(dedupe_keys)?))
            .await?;
        Ok(())
    }
}
