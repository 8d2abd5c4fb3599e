//! The outbox's delivery and the consumers' durable state: claims, publication marks, backoff
//! and dead letters; consumer inboxes with the ledger and receipts written in the same
//! transaction. One body for both dialects; statements that differ are in [`EventSql`].

use crate::events::EventMessage;
use crate::store::StoreError;
use std::time::Duration;

/// A receipt recorded and not yet sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingReceipt {
    /// `receipt_payment_<paymentId>`: also the message id the sink is given.
    pub dedupe_key: String,
    pub payment_id: String,
    pub body: String,
}

#[async_trait::async_trait]
pub trait EventStore {
    /// Per consumer, how many published events of `event_type` from the last `window` it has
    /// not processed.
    async fn consumer_lag(
        &self,
        consumer: &str,
        event_type: &str,
        window: Duration,
    ) -> Result<i64, StoreError>;

    /// Dead-lettered events, oldest first.
    async fn dead_letters(&self, limit: i64) -> Result<Vec<app::dto::DeadLetter>, StoreError>;

    /// Puts a dead letter back to the publisher, if it is still dead since `dead_at` (the
    /// version the operator saw), with the audit entry in the same transaction.
    async fn redrive_event(
        &self,
        event_id: &str,
        dead_at: &str,
        audit: &domain::operator::AuditEntry,
    ) -> Result<bool, StoreError>;

    /// Claims up to `limit` due, unpublished, live events for `claim` (other publishers skip
    /// them meanwhile), oldest first, counting the attempt.
    async fn claim_events(&self, limit: i64, claim: Duration) -> Result<Vec<EventMessage>, StoreError>;

    async fn mark_event_published(&self, event_id: &str) -> Result<(), StoreError>;

    /// Records a failed publication: backs off (2^attempts seconds, at most 5 min), or
    /// dead-letters the event once it used `max_attempts`.
    async fn mark_event_failed(
        &self,
        event_id: &str,
        error: &str,
        max_attempts: i32,
    ) -> Result<(), StoreError>;

    /// The ledger consumer: the payment's double-entry transaction and the inbox row, in one
    /// transaction. `Ok(false)`: already processed (nothing written twice).
    async fn consume_into_ledger(
        &self,
        consumer: &str,
        message_id: &str,
        payment_id: &str,
    ) -> Result<bool, StoreError>;

    /// The receipts consumer: the pending receipt and the inbox row, in one transaction.
    async fn consume_into_receipts(
        &self,
        consumer: &str,
        message_id: &str,
        payment_id: &str,
    ) -> Result<bool, StoreError>;

    async fn pending_receipts(&self, limit: i64) -> Result<Vec<PendingReceipt>, StoreError>;

    async fn mark_receipt_sent(&self, dedupe_key: &str) -> Result<(), StoreError>;
}

pub(super) struct EventSql {
    /// `$1` consumer, `$2` event type, `$3` window seconds.
    pub consumer_lag: &'static str,
    /// `$1` event id, `$2` dead at (RFC 3339 text).
    pub redrive_event: &'static str,
    /// `$1` claim seconds, `$2` limit: returns id, event type, payment id, payload.
    pub claim_events: &'static str,
    /// `$1` event id.
    pub mark_event_published: &'static str,
    /// `$1` error, `$2` attempt limit, `$3` event id.
    pub mark_event_failed: &'static str,
    /// `$1` dedupe key.
    pub mark_receipt_sent: &'static str,
}

pub(super) const INBOX_INSERT: &str =
    "insert into consumer_inbox (consumer_name, message_id) values ($1, $2) on conflict do nothing";
pub(super) const PAYMENT_FOR_EVENTS: &str =
    "select tenant_id, account_id, amount_minor, currency from payments where id = $1";
pub(super) const INSERT_LEDGER_TRANSACTION: &str = "insert into ledger_transactions (id, entry_type, source_payment_id) \
     values ($1, 'payment_authorized', $2) on conflict do nothing";
pub(super) const INSERT_POSTING: &str =
    "insert into ledger_postings (transaction_id, account, amount_minor, currency) values ($1, $2, $3, $4)";
pub(super) const INSERT_RECEIPT: &str =
    "insert into receipts (dedupe_key, payment_id, body) values ($1, $2, $3) on conflict do nothing";
pub(super) const DEAD_LETTERS: &str = "select id, event_type, payment_id, attempts, last_error, dead_at \
     from outbox_events where dead_at is not null order by dead_at, id limit $1";
pub(super) const PENDING_RECEIPTS: &str =
    "select dedupe_key, payment_id, body from receipts where sent_at is null order by created_at limit $1";

macro_rules! impl_event_store {
    ($store:ty, $db:ty, $sql:expr) => {
        impl $store {
            /// Starts a consumer's transaction with its inbox row: `None` when the message was
            /// processed before (nothing written). Writing first also takes SQLite's write lock
            /// at once, so two deliveries queue instead of failing to upgrade a read.
            async fn inbox_claim(
                &self,
                consumer: &str,
                message_id: &str,
            ) -> Result<Option<sqlx::Transaction<'static, $db>>, $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                let fresh = sqlx::query($crate::store::events::INBOX_INSERT)
                    .bind(consumer)
                    .bind(message_id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    == 1;
                if fresh {
                    Ok(Some(tx))
                } else {
                    tx.rollback().await?;
                    Ok(None)
                }
            }

            /// The inbox row and the side effect are written: commit them together (a crash
            /// before this rolls both back, and the redelivery does the work once).
            async fn inbox_commit(
                tx: sqlx::Transaction<'static, $db>,
            ) -> Result<(), $crate::store::StoreError> {
                $crate::crash::crash_point($crate::crash::CrashPoint::ConsumerAfterSideEffect);
                tx.commit().await?;
                Ok(())
            }

            async fn payment_for_events(
                tx: &mut sqlx::Transaction<'static, $db>,
                payment_id: &str,
            ) -> Result<(String, String, i64, String), $crate::store::StoreError> {
                sqlx::query_as($crate::store::events::PAYMENT_FOR_EVENTS)
                    .bind(payment_id)
                    .fetch_optional(&mut **tx)
                    .await?
                    .ok_or_else(|| {
                        $crate::store::StoreError::Corrupt(format!("event for unknown payment {payment_id}"))
                    })
            }
        }

        #[async_trait::async_trait]
        impl $crate::store::events::EventStore for $store {
            async fn consumer_lag(
                &self,
                consumer: &str,
                event_type: &str,
                window: std::time::Duration,
            ) -> Result<i64, $crate::store::StoreError> {
                Ok(sqlx::query_scalar($sql.consumer_lag)
                    .bind(consumer)
                    .bind(event_type)
                    .bind(window.as_secs_f64())
                    .fetch_one(&self.pool)
                    .await?)
            }

            async fn dead_letters(
                &self,
                limit: i64,
            ) -> Result<Vec<app::dto::DeadLetter>, $crate::store::StoreError> {
                let rows: Vec<(
                    String,
                    String,
                    String,
                    i32,
                    Option<String>,
                    chrono::DateTime<chrono::Utc>,
                )> = sqlx::query_as($crate::store::events::DEAD_LETTERS)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows
                    .into_iter()
                    .map(
                        |(event_id, event_type, payment_id, attempts, last_error, dead_at)| {
                            app::dto::DeadLetter {
                                event_id,
                                event_type,
                                payment_id,
                                attempts,
                                last_error,
                                // Microseconds: the re-drive compares it with the stored value.
                                dead_at: dead_at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
                            }
                        },
                    )
                    .collect())
            }

            async fn redrive_event(
                &self,
                event_id: &str,
                dead_at: &str,
                audit: &domain::operator::AuditEntry,
            ) -> Result<bool, $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                let redriven = sqlx::query($sql.redrive_event)
                    .bind(event_id)
                    .bind(dead_at)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    == 1;
                if redriven {
                    Self::audit_in(&mut tx, audit).await?;
                }
                tx.commit().await?;
                Ok(redriven)
            }

            async fn claim_events(
                &self,
                limit: i64,
                claim: std::time::Duration,
            ) -> Result<Vec<$crate::events::EventMessage>, $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                let rows: Vec<(String, String, String, String)> = sqlx::query_as($sql.claim_events)
                    .bind(claim.as_secs_f64())
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(rows
                    .into_iter()
                    .map(
                        |(event_id, event_type, payment_id, payload)| $crate::events::EventMessage {
                            event_id,
                            event_type,
                            payment_id,
                            payload,
                        },
                    )
                    .collect())
            }

            async fn mark_event_published(&self, event_id: &str) -> Result<(), $crate::store::StoreError> {
                $crate::store::shared::write_one!(self.pool, $sql.mark_event_published, event_id).await?;
                Ok(())
            }

            async fn mark_event_failed(
                &self,
                event_id: &str,
                error: &str,
                max_attempts: i32,
            ) -> Result<(), $crate::store::StoreError> {
                $crate::store::shared::write_one!(
                    self.pool,
                    $sql.mark_event_failed,
                    error,
                    max_attempts,
                    event_id
                )
                .await?;
                Ok(())
            }

            async fn consume_into_ledger(
                &self,
                consumer: &str,
                message_id: &str,
                payment_id: &str,
            ) -> Result<bool, $crate::store::StoreError> {
                let Some(mut tx) = self.inbox_claim(consumer, message_id).await? else {
                    return Ok(false);
                };
                let (tenant_id, account_id, amount, currency) =
                    Self::payment_for_events(&mut tx, payment_id).await?;
                let transaction_id = format!("ledger_payment_{payment_id}");
                let created = sqlx::query($crate::store::events::INSERT_LEDGER_TRANSACTION)
                    .bind(transaction_id.as_str())
                    .bind(payment_id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    == 1;
                if created {
                    // Debit the customer's account, credit the provider's clearing account.
                    for (account, signed) in [
                        (format!("customer:{tenant_id}:{account_id}"), -amount),
                        (format!("provider_clearing:{currency}"), amount),
                    ] {
                        sqlx::query($crate::store::events::INSERT_POSTING)
                            .bind(transaction_id.as_str())
                            .bind(account)
                            .bind(signed)
                            .bind(currency.as_str())
                            .execute(&mut *tx)
                            .await?;
                    }
                }
                Self::inbox_commit(tx).await?;
                Ok(created)
            }

            async fn consume_into_receipts(
                &self,
                consumer: &str,
                message_id: &str,
                payment_id: &str,
            ) -> Result<bool, $crate::store::StoreError> {
                let Some(mut tx) = self.inbox_claim(consumer, message_id).await? else {
                    return Ok(false);
                };
                let (_, account_id, amount, currency) = Self::payment_for_events(&mut tx, payment_id).await?;
                let body = format!(
                    "Payment {payment_id} of {} {currency} from account {account_id} was authorised.",
                    $crate::store::console::minor_to_decimal(amount, &currency)
                );
                let created = sqlx::query($crate::store::events::INSERT_RECEIPT)
                    .bind(format!("receipt_payment_{payment_id}"))
                    .bind(payment_id)
                    .bind(body)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    == 1;
                Self::inbox_commit(tx).await?;
                Ok(created)
            }

            async fn pending_receipts(
                &self,
                limit: i64,
            ) -> Result<Vec<$crate::store::events::PendingReceipt>, $crate::store::StoreError> {
                let rows: Vec<(String, String, String)> =
                    sqlx::query_as($crate::store::events::PENDING_RECEIPTS)
                        .bind(limit)
                        .fetch_all(&self.pool)
                        .await?;
                Ok(rows
                    .into_iter()
                    .map(
                        |(dedupe_key, payment_id, body)| $crate::store::events::PendingReceipt {
                            dedupe_key,
                            payment_id,
                            body,
                        },
                    )
                    .collect())
            }

            async fn mark_receipt_sent(&self, dedupe_key: &str) -> Result<(), $crate::store::StoreError> {
                $crate::store::shared::write_one!(self.pool, $sql.mark_receipt_sent, dedupe_key).await?;
                Ok(())
            }
        }
    };
}
pub(super) use impl_event_store;
