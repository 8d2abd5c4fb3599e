//! The two real consumers. Each keeps an inbox row per (consumer, message id), written in the
//! same transaction as its side effect: a duplicate delivery finds the row and does nothing;
//! a crash before the commit leaves neither, and the redelivery does the work once.
//!
//! - ledger: a double-entry transaction for each authorised payment
//!   (`ledger_payment_<paymentId>`, unique per entry type and payment): the customer's account
//!   is debited, the provider clearing account credited; all postings sum to zero.
//! - receipts: a receipt row for each authorised payment (`receipt_payment_<paymentId>`,
//!   unique dedupe key), inserted *before* anything is sent; [`ReceiptSender`] delivers pending
//!   rows (SMTP when configured, a JSON-lines file by default) and marks them sent. A crash
//!   between sending and marking sends again with the same message id (at-least-once; the
//!   mail system deduplicates on the id).

use crate::store::EventStore;
use crate::store::events::PendingReceipt;
use domain::event::EventMessage;
use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("receipt sink: {0}")]
    Sink(#[from] std::io::Error),
    #[error("receipt mail: {0}")]
    Mail(String),
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
    store: Arc<dyn EventStore>,
}

impl Ledger {
    pub fn new(store: Arc<dyn EventStore>) -> Ledger {
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
    store: Arc<dyn EventStore>,
}

impl Receipts {
    pub fn new(store: Arc<dyn EventStore>) -> Receipts {
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

/// Where receipts go. Each carries its stable message id (`receipt_payment_<paymentId>`), so
/// that a receipt sent twice (a crash between sending and marking) can be recognised.
pub enum ReceiptSink {
    /// JSON lines appended to a file: the embedded default.
    File(PathBuf),
    /// E-mail through an SMTP server (`smtp://`, `smtps://`; credentials in the URL), with
    /// `Message-ID: <receipt_payment_…@idem>`.
    Smtp(Box<SmtpSink>),
}

pub struct SmtpSink {
    mailer: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    to: Mailbox,
}

impl ReceiptSink {
    pub fn smtp(url: &str, from: &str, to: &str) -> Result<ReceiptSink, String> {
        Ok(ReceiptSink::Smtp(Box::new(SmtpSink {
            mailer: AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
                .map_err(|error| format!("SMTP URL: {error}"))?
                .build(),
            from: from
                .parse()
                .map_err(|error| format!("SMTP sender {from:?}: {error}"))?,
            to: to
                .parse()
                .map_err(|error| format!("SMTP recipient {to:?}: {error}"))?,
        })))
    }

    async fn deliver(&self, receipt: &PendingReceipt) -> Result<(), ConsumerError> {
        match self {
            ReceiptSink::File(path) => {
                let line = serde_json::json!({
                    "messageId": receipt.dedupe_key,
                    "paymentId": receipt.payment_id,
                    "body": receipt.body,
                });
                let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
                writeln!(file, "{line}")?;
                file.sync_data()?;
            }
            ReceiptSink::Smtp(smtp) => {
                let message = Message::builder()
                    .message_id(Some(format!("<{}@idem>", receipt.dedupe_key)))
                    .from(smtp.from.clone())
                    .to(smtp.to.clone())
                    .subject(format!("Payment {} authorised", receipt.payment_id))
                    .header(ContentType::TEXT_PLAIN)
                    .body(receipt.body.clone())
                    .map_err(|error| ConsumerError::Mail(error.to_string()))?;
                smtp.mailer
                    .send(message)
                    .await
                    .map_err(|error| ConsumerError::Mail(error.to_string()))?;
            }
        }
        Ok(())
    }
}

/// Delivers pending receipts to the sink and marks them sent.
pub struct ReceiptSender {
    store: Arc<dyn EventStore>,
    sink: ReceiptSink,
}

impl ReceiptSender {
    pub fn new(store: Arc<dyn EventStore>, sink: ReceiptSink) -> ReceiptSender {
        ReceiptSender { store, sink }
    }

    /// Sends what is pending; returns how many were sent.
    pub async fn send_pending(&self, batch: i64) -> Result<usize, ConsumerError> {
        let pending = self.store.pending_receipts(batch).await?;
        for receipt in &pending {
            self.sink.deliver(receipt).await?;
            crate::crash::crash_point(crate::crash::CrashPoint::ReceiptSentBeforeMarked);
            self.store.mark_receipt_sent(&receipt.dedupe_key).await?;
        }
        Ok(pending.len())
    }
}
