//! The two real consumers. Each keeps an inbox row per (consumer, message id), written in the
//! same transaction as its side effect: a duplicate delivery finds the row and does nothing;
//! a crash before the commit leaves neither, and the redelivery does the work once.
//!
//! - ledger: a double-entry transaction for each authorised payment
//!   (`ledger_payment_<paymentId>`, unique per entry type and payment): the customer's account
//!   is debited, the provider clearing account credited; all postings sum to zero.
//! - receipts: a receipt row for each authorised payment (`receipt_payment_<paymentId>`,
//!   unique dedupe key), inserted *before* anything is sent; [`ReceiptSender`] delivers pending
//!   rows and marks them sent. A crash between sending and marking sends again with the same
//!   message id (at-least-once; the mail system deduplicates on the id).

use super::EventMessage;
use crate::store::Store;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("receipt sink: {0}")]
    Sink(#[from] std::io::Error),
}

/// Whether a delivery did the work or found it done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    Applied,
    Duplicate,
    /// Not an event this consumer acts on.
    Ignored,
}

#[async_trait::async_trait]
pub trait Consumer: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    async fn handle(&self, message: &EventMessage) -> Result<Handled, ConsumerError>;
}

pub const LEDGER: &str = "ledger";
pub const RECEIPTS: &str = "receipts";

fn handled(applied: bool) -> Handled {
    if applied {
        Handled::Applied
    } else {
        Handled::Duplicate
    }
}

pub struct Ledger {
    store: Arc<dyn Store>,
}

impl Ledger {
    pub fn new(store: Arc<dyn Store>) -> Ledger {
        Ledger { store }
    }
}

#[async_trait::async_trait]
impl Consumer for Ledger {
    fn name(&self) -> &'static str {
        LEDGER
    }

    async fn handle(&self, message: &EventMessage) -> Result<Handled, ConsumerError> {
        if message.event_type != "PaymentAuthorized" {
            return Ok(Handled::Ignored);
        }
        Ok(handled(
            self.store
                .consume_into_ledger(LEDGER, &message.event_id, &message.payment_id)
                .await?,
        ))
    }
}

pub struct Receipts {
    store: Arc<dyn Store>,
}

impl Receipts {
    pub fn new(store: Arc<dyn Store>) -> Receipts {
        Receipts { store }
    }
}

#[async_trait::async_trait]
impl Consumer for Receipts {
    fn name(&self) -> &'static str {
        RECEIPTS
    }

    async fn handle(&self, message: &EventMessage) -> Result<Handled, ConsumerError> {
        if message.event_type != "PaymentAuthorized" {
            return Ok(Handled::Ignored);
        }
        Ok(handled(
            self.store
                .consume_into_receipts(RECEIPTS, &message.event_id, &message.payment_id)
                .await?,
        ))
    }
}

/// Delivers pending receipts to a sink (a JSON-lines file by default; each line carries the
/// receipt's stable message id) and marks them sent.
pub struct ReceiptSender {
    store: Arc<dyn Store>,
    sink: PathBuf,
}

impl ReceiptSender {
    pub fn new(store: Arc<dyn Store>, sink: PathBuf) -> ReceiptSender {
        ReceiptSender { store, sink }
    }

    /// Sends what is pending; returns how many were sent.
    pub async fn send_pending(&self, batch: i64) -> Result<usize, ConsumerError> {
        let pending = self.store.pending_receipts(batch).await?;
        for receipt in &pending {
            let line = serde_json::json!({
                "messageId": receipt.dedupe_key,
                "paymentId": receipt.payment_id,
                "body": receipt.body,
            });
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.sink)?;
            writeln!(file, "{line}")?;
            file.sync_data()?;
            crate::crash::crash_point(crate::crash::CrashPoint::ReceiptSentBeforeMarked);
            self.store.mark_receipt_sent(&receipt.dedupe_key).await?;
        }
        Ok(pending.len())
    }
}

pub fn spawn_receipt_sender(sender: ReceiptSender, interval: Duration) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Err(error) = sender.send_pending(100).await {
                tracing::warn!(%error, "receipts: sending failed; pending receipts stay pending");
            }
        }
    });
}
