//! The two real consumers. Each keeps an inbox row per (consumer, message id), written in the
//! same transaction as its side effect: a duplicate delivery finds the row and does nothing;
//! a crash before the commit leaves neither, and the redelivery does the work once. Messages
//! come in batches, each handled in one transaction (one commit for many payments); a batch
//! that fails is handled again one message at a time ([`handle_isolating`]), so that one bad
//! message holds back only itself.
//!
//! - ledger: a double-entry transaction for each authorised payment
//!   (`ledger_payment_<paymentId>`, unique per entry type and payment): the customer's account
//!   is debited, the provider clearing account credited; and one for each succeeded refund
//!   (`ledger_refund_<refundId>`, unique per entry type and refund), the other way round. All
//!   postings sum to zero.
//! - receipts: a receipt row for each authorised payment (`receipt_payment_<paymentId>`,
//!   unique dedupe key), inserted *before* anything is sent; [`ReceiptSender`] delivers pending
//!   rows (SMTP when configured, a JSON-lines file by default) and marks them sent. A crash
//!   between sending and marking sends again with the same message id (at-least-once; the
//!   mail system deduplicates on the id).

use crate::store::events::PendingReceipt;
use crate::store::{EventStore, StoreError};
use domain::event::EventMessage;
use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::io::Write;
use std::path::{Path, PathBuf};
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
    /// Handles a batch of deliveries in one transaction; per message, what was done. An error
    /// means that nothing of the batch was written.
    async fn handle(&self, messages: &[EventMessage]) -> Result<Vec<Handled>, ConsumerError>;
}

/// Handles `messages` as one batch; if the batch fails, each message alone, so that the others
/// are handled and only the failing ones are retried. Per message, the error that stopped it.
pub async fn handle_isolating(
    consumer: &dyn Consumer,
    messages: &[EventMessage],
) -> Vec<Option<ConsumerError>> {
    let batch_error = match consumer.handle(messages).await {
        Ok(_) => return messages.iter().map(|_| None).collect(),
        Err(error) => error,
    };
    if messages.len() == 1 {
        return vec![Some(batch_error)];
    }
    let mut errors = Vec::with_capacity(messages.len());
    for message in messages {
        errors.push(consumer.handle(std::slice::from_ref(message)).await.err());
    }
    errors
}

pub const LEDGER: &str = "ledger";
pub const RECEIPTS: &str = "receipts";
const PAYMENT_AUTHORIZED: &str = "PaymentAuthorized";
const REFUND_SUCCEEDED: &str = "RefundSucceeded";

/// Passes the batch's messages of the `wanted` types (the only ones the consumer acts on) to
/// `apply`, and says per message what was done.
async fn on_events<'m, Apply>(
    messages: &'m [EventMessage],
    wanted: &[&str],
    apply: impl FnOnce(Vec<&'m EventMessage>) -> Apply,
) -> Result<Vec<Handled>, ConsumerError>
where
    Apply: Future<Output = Result<Vec<bool>, StoreError>>,
{
    let is_wanted = |message: &EventMessage| wanted.contains(&message.event_type.as_str());
    let chosen: Vec<&EventMessage> = messages.iter().filter(|message| is_wanted(message)).collect();
    let mut applied = if chosen.is_empty() {
        Vec::new()
    } else {
        apply(chosen).await?
    }
    .into_iter();
    Ok(messages
        .iter()
        .map(|message| {
            if !is_wanted(message) {
                Handled::Ignored
            } else if applied.next() == Some(true) {
                Handled::Applied
            } else {
                Handled::Duplicate
            }
        })
        .collect())
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

    async fn handle(&self, messages: &[EventMessage]) -> Result<Vec<Handled>, ConsumerError> {
        on_events(
            messages,
            &[PAYMENT_AUTHORIZED, REFUND_SUCCEEDED],
            |booked| async move { self.store.consume_into_ledger(LEDGER, &booked).await },
        )
        .await
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

    async fn handle(&self, messages: &[EventMessage]) -> Result<Vec<Handled>, ConsumerError> {
        on_events(messages, &[PAYMENT_AUTHORIZED], |authorised| async move {
            self.store.consume_into_receipts(RECEIPTS, &authorised).await
        })
        .await
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

    /// Delivers `receipts` in order: how many were delivered, and the error that stopped the
    /// rest. The file gets every line and then one flush to disk, so none of them counts as
    /// delivered before that flush.
    async fn deliver(&self, receipts: &[PendingReceipt]) -> (usize, Option<ConsumerError>) {
        match self {
            ReceiptSink::File(path) => match append_lines(path, receipts) {
                Ok(()) => (receipts.len(), None),
                Err(error) => (0, Some(error.into())),
            },
            ReceiptSink::Smtp(smtp) => {
                for (sent, receipt) in receipts.iter().enumerate() {
                    if let Err(error) = smtp.send(receipt).await {
                        return (sent, Some(error));
                    }
                }
                (receipts.len(), None)
            }
        }
    }
}

fn append_lines(path: &Path, receipts: &[PendingReceipt]) -> std::io::Result<()> {
    let mut lines = String::new();
    for receipt in receipts {
        let line = serde_json::json!({
            "messageId": receipt.dedupe_key,
            "paymentId": receipt.payment_id,
            "body": receipt.body,
        });
        lines.push_str(&format!("{line}\n"));
    }
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(lines.as_bytes())?;
    file.sync_data()
}

impl SmtpSink {
    async fn send(&self, receipt: &PendingReceipt) -> Result<(), ConsumerError> {
        let message = Message::builder()
            .message_id(Some(format!("<{}@idem>", receipt.dedupe_key)))
            .from(self.from.clone())
            .to(self.to.clone())
            .subject(format!("Payment {} authorised", receipt.payment_id))
            .header(ContentType::TEXT_PLAIN)
            .body(receipt.body.clone())
            .map_err(|error| ConsumerError::Mail(error.to_string()))?;
        self.mailer
            .send(message)
            .await
            .map_err(|error| ConsumerError::Mail(error.to_string()))?;
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

    /// Sends what is pending, `batch` at a time, until less than a batch was left; returns how
    /// many were sent. One batch a pass capped receipts at 100 an outbox interval (200 a
    /// second by default), below the rate payments are made at saturation: the backlog grew
    /// for as long as the load lasted, and took minutes to drain after (docs/performance.md).
    pub async fn send_all_pending(&self, batch: i64) -> Result<usize, ConsumerError> {
        let mut sent = 0;
        loop {
            let delivered = self.send_pending(batch).await?;
            sent += delivered;
            if i64::try_from(delivered).unwrap_or(i64::MAX) < batch {
                return Ok(sent);
            }
        }
    }

    /// Sends one batch of what is pending, then marks what was sent in one statement; returns
    /// how many were sent.
    async fn send_pending(&self, batch: i64) -> Result<usize, ConsumerError> {
        let pending = self.store.pending_receipts(batch).await?;
        let (delivered, failure) = self.sink.deliver(&pending).await;
        if delivered > 0 {
            crate::crash::crash_point(crate::crash::CrashPoint::ReceiptSentBeforeMarked);
            let sent: Vec<String> = pending[..delivered]
                .iter()
                .map(|receipt| receipt.dedupe_key.clone())
                .collect();
            self.store.mark_receipts_sent(&sent).await?;
        }
        match failure {
            Some(error) => Err(error),
            None => Ok(delivered),
        }
    }
}
