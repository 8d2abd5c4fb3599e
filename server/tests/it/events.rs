//! Events happen once, whatever the delivery does: each event delivered 2 to 5 times, at once,
//! by two publishers; a crash between publishing and marking published; a crash in a consumer
//! between its side effect and its inbox row; a crash between sending a receipt and marking it
//! sent. Every authorised payment ends with exactly one ledger pair and one receipt, the
//! ledger sums to zero, nothing is left unpublished.

use crate::support::{
    AN_HOUR, DialectName, Serve, TestApp, TestDatabase, conformance, ms, secs, unused_port,
};
use domain::event::EventMessage;
use futures_util::future::join_all;
use idem::events::consumers::{
    Consumer, ConsumerError, Handled, Ledger, ReceiptSender, ReceiptSink, Receipts,
};
use idem::events::nats::{NatsJetStream, NatsSettings};
use idem::events::publisher::{PublishReport, Publisher, PublisherSettings};
use idem::events::transport::{InProcess, Transport, TransportError};
use idem::store::{EventStore, Store};
use idem::supervisor::Supervisor;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Authorised payments per test, and declined ones (whose events the consumers ignore).
const AUTHORISED: usize = 12;
const DECLINED: usize = 2;

/// Delivers every message 2 to 5 times, all at once, to the real in-process consumers.
struct Duplicating {
    inner: InProcess,
    seed: AtomicU64,
    deliveries: AtomicU64,
}

#[async_trait::async_trait]
impl Transport for Duplicating {
    async fn publish(&self, messages: &[EventMessage]) -> Vec<Result<(), TransportError>> {
        // xorshift: a different spread of duplicates per batch, reproducible per run.
        let mut x = self.seed.fetch_add(0x9E37_79B9, Ordering::Relaxed) | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let copies = 2 + x % 4;
        self.deliveries
            .fetch_add(copies * messages.len() as u64, Ordering::Relaxed);
        let deliveries = join_all((0..copies).map(|_| self.inner.publish(messages))).await;
        // A message is delivered when every copy of it was.
        let mut results: Vec<Result<(), TransportError>> = messages.iter().map(|_| Ok(())).collect();
        for delivery in deliveries {
            for (result, copy) in results.iter_mut().zip(delivery) {
                if result.is_ok() {
                    *result = copy;
                }
            }
        }
        results
    }
}

async fn make_payments(app: &TestApp) {
    for n in 0..AUTHORISED + DECLINED {
        // The simulator declines amounts ending in 02.
        let amount = if n < AUTHORISED { "10.00" } else { "10.02" };
        let body = format!(
            r#"{{"accountId":"acc_1","amount":"{amount}","currency":"EUR","merchantReference":"evt-{n}"}}"#
        );
        let response = app.pay(&format!("evt-{n}"), body).await;
        assert!(
            matches!(response.status().as_u16(), 201 | 402),
            "{}",
            response.status()
        );
    }
}

/// An instance on `db` whose recovery is quick.
fn recovering(db: TestDatabase) -> crate::support::Setup {
    TestApp::on_database(db).tenant("acme", "10000.00").recovering()
}

/// The payments of `make_payments`, made by an instance whose publisher stayed idle (its
/// events wait in the outbox); the instance is stopped.
async fn payments_with_idle_publisher(db: TestDatabase) -> TestApp {
    let mut app = recovering(db).with(Serve::OutboxEvery(AN_HOUR)).process().await;
    make_payments(&app).await;
    app.stop();
    app
}

/// Two publishers over the same outbox and `transport`, in small batches, each making one
/// pass at the same time; what each published.
async fn publish_twice_at_once(
    store: &Arc<dyn Store>,
    transport: Arc<dyn Transport>,
) -> (PublishReport, PublishReport) {
    let settings = PublisherSettings {
        batch: 3,
        claim: Duration::from_secs(30),
        max_attempts: 10,
    };
    let first = Publisher::new(store.clone(), transport.clone(), settings.clone());
    let second = Publisher::new(store.clone(), transport, settings);
    tokio::join!(first.run_once(), second.run_once())
}

/// The invariants after quiescing.
async fn assert_once(db: &TestDatabase) {
    let count = |sql: &'static str| db.query_i64(sql);
    assert_eq!(
        count("select count(*) from ledger_transactions").await,
        AUTHORISED as i64
    );
    assert_eq!(
        count("select count(*) from (select transaction_id from ledger_postings group by transaction_id having count(*) = 2) pairs").await,
        AUTHORISED as i64,
        "one pair per payment"
    );
    assert_eq!(
        count("select cast(coalesce(sum(amount_minor), 0) as bigint) from ledger_postings").await,
        0,
        "the ledger sums to zero"
    );
    assert_eq!(count("select count(*) from receipts").await, AUTHORISED as i64);
    assert_eq!(
        count("select count(*) from outbox_events where published_at is null").await,
        0,
        "nothing left unpublished"
    );
    assert_eq!(
        count("select count(*) from outbox_events where dead_at is not null").await,
        0
    );
}

async fn duplicated_deliveries_by_two_publishers_apply_each_event_once(db: TestDatabase) {
    // The instance's own publisher is kept out of the way: the two below do the work.
    let app = payments_with_idle_publisher(db).await;
    let db = &app.db;
    let store = db.store().await;
    let transport = Arc::new(Duplicating {
        inner: InProcess::new(vec![
            Arc::new(Ledger::new(store.clone())) as Arc<dyn Consumer>,
            Arc::new(Receipts::new(store.clone())),
        ]),
        seed: AtomicU64::new(0x2545_F491_4F6C_DD1D),
        deliveries: AtomicU64::new(0),
    });
    let (a, b) = publish_twice_at_once(&store, transport.clone()).await;
    assert_eq!(a.failed + b.failed, 0);
    assert_eq!(
        a.published + b.published,
        2 * (AUTHORISED + DECLINED),
        "each event published once: {a:?} {b:?}"
    );
    assert!(transport.deliveries.load(Ordering::Relaxed) >= 2 * 2 * (AUTHORISED + DECLINED) as u64);
    assert_once(db).await;
    assert_eq!(
        db.query_i64("select count(*) from consumer_inbox").await,
        2 * AUTHORISED as i64,
        "one inbox row per consumer and authorised payment"
    );
}

conformance!(duplicated_deliveries_by_two_publishers_apply_each_event_once);

/// Consumers take batches, one transaction each: a message handled before, one repeated in
/// the batch and events they ignore are told apart; a message that fails (its payment does not
/// exist) holds back only itself, and everything else is applied exactly once.
async fn a_batch_applies_each_new_message_once_and_a_bad_message_holds_back_only_itself(db: TestDatabase) {
    let app = payments_with_idle_publisher(db).await;
    let db = &app.db;
    let store = db.store().await;
    let claimed = store
        .claim_events(100, Duration::from_secs(60))
        .await
        .expect("claim the outbox");
    assert_eq!(claimed.len(), 2 * (AUTHORISED + DECLINED));
    let authorised: Vec<EventMessage> = claimed
        .iter()
        .filter(|message| message.event_type == "PaymentAuthorized")
        .cloned()
        .collect();
    assert_eq!(authorised.len(), AUTHORISED);

    let ledger = Ledger::new(store.clone());
    assert_eq!(
        ledger.handle(&authorised[..1]).await.expect("one message"),
        vec![Handled::Applied]
    );
    let mut batch = claimed.clone();
    batch.push(authorised[1].clone());
    let handled = ledger.handle(&batch).await.expect("the batch");
    assert_eq!(handled.len(), batch.len());
    for (message, handled) in batch.iter().zip(&handled) {
        if message.event_type != "PaymentAuthorized" {
            assert_eq!(*handled, Handled::Ignored, "{message:?}");
        }
    }
    let count = |what: Handled| handled.iter().filter(|handled| **handled == what).count();
    assert_eq!(count(Handled::Applied), AUTHORISED - 1, "{handled:?}");
    assert_eq!(
        count(Handled::Duplicate),
        2,
        "handled before, and repeated in the batch: {handled:?}"
    );
    assert_eq!(
        handled[batch.len() - 1],
        Handled::Duplicate,
        "the repeat inside the batch"
    );

    let transport = InProcess::new(vec![
        Arc::new(Ledger::new(store.clone())) as Arc<dyn Consumer>,
        Arc::new(Receipts::new(store.clone())),
    ]);
    let mut poisoned = authorised.clone();
    poisoned.insert(
        3,
        EventMessage {
            event_id: "evt_for_a_missing_payment".into(),
            event_type: "PaymentAuthorized".into(),
            payment_id: "pay_missing".into(),
            payload: "{}".into(),
        },
    );
    let results = transport.publish(&poisoned).await;
    for (position, result) in results.iter().enumerate() {
        assert_eq!(result.is_err(), position == 3, "{position}: {result:?}");
    }
    let ids: Vec<String> = claimed.iter().map(|message| message.event_id.clone()).collect();
    store.mark_events_published(&ids).await.expect("mark published");
    assert_once(db).await;
    assert_eq!(
        db.query_i64("select count(*) from consumer_inbox").await,
        2 * AUTHORISED as i64,
        "no inbox row for the failed message"
    );
}

conformance!(a_batch_applies_each_new_message_once_and_a_bad_message_holds_back_only_itself);

/// Makes the payments with the publisher idle and their PaymentCreated events out of the way,
/// so that the next instance's first publication is a PaymentAuthorized the consumers act on.
async fn payments_awaiting_publication() -> TestApp {
    let app = payments_with_idle_publisher(TestDatabase::migrated(DialectName::Postgres).await).await;
    app.db
        .execute("update outbox_events set published_at = created_at where event_type <> 'PaymentAuthorized'")
        .await
        .expect("only authorisations left");
    app
}

async fn crash_then_restart(crash_point: &str) -> TestApp {
    crash_then_restart_with(crash_point, &[]).await
}

/// `transport`: environment for both instances (e.g. NATS settings).
async fn crash_then_restart_with(crash_point: &str, transport: &[(&str, &str)]) -> TestApp {
    let mut app = payments_awaiting_publication().await;
    app.set(Serve::OutboxEvery(ms(50)));
    // A crashed publisher's claims lapse soon, for the restarted one.
    app.set(Serve::OutboxClaim(secs(1)));
    let mut crashing = transport.to_vec();
    crashing.push(("IDEM_CRASH_POINT", crash_point));
    app.restart(&crashing).await;
    let status = app.server().ended().await;
    assert!(!status.success(), "aborted at {crash_point}");

    app.restart(transport).await;
    app.db
        .eventually_equals(
            "select count(*) from outbox_events where published_at is null",
            0,
            "everything published after the restart",
        )
        .await;
    app.db
        .eventually_equals(
            "select count(*) from receipts where sent_at is not null",
            AUTHORISED as i64,
            "every receipt recorded and sent",
        )
        .await;
    // Each consumer has its own subscription: the ledger's redelivery (after the broker's ack
    // wait) can come after the receipts are all sent.
    app.db
        .eventually_equals(
            "select count(*) from ledger_transactions",
            AUTHORISED as i64,
            "every payment in the ledger",
        )
        .await;
    assert_once(&app.db).await;
    app
}

#[tokio::test]
async fn a_crash_between_publishing_and_marking_publishes_again_and_applies_once() {
    crash_then_restart("published_before_marked").await;
}

#[tokio::test]
async fn a_crash_between_a_consumers_side_effect_and_its_inbox_row_applies_once() {
    crash_then_restart("consumer_after_side_effect").await;
}

#[tokio::test]
async fn a_crash_between_sending_a_receipt_and_marking_it_sends_it_again_with_the_same_id() {
    let app = crash_then_restart("receipt_sent_before_marked").await;
    let sink = std::fs::read_to_string(app.dir.path().join("receipts.jsonl")).expect("the receipts sink");
    let ids: Vec<String> = sink
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line).expect("json")["messageId"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), AUTHORISED, "every receipt delivered");
    // The crash came after a batch was delivered and before it was marked: that batch, the
    // first lines of the sink, was sent again after the restart with the same ids, and
    // nothing else was sent twice.
    let sent_twice: std::collections::BTreeSet<&String> = distinct
        .iter()
        .copied()
        .filter(|id| ids.iter().filter(|other| other == id).count() == 2)
        .collect();
    assert!(
        !sent_twice.is_empty(),
        "the batch sent before the crash was sent again: {ids:?}"
    );
    assert_eq!(
        ids.len(),
        AUTHORISED + sent_twice.len(),
        "nothing sent three times: {ids:?}"
    );
    let before_crash: std::collections::BTreeSet<&String> = ids[..sent_twice.len()].iter().collect();
    assert_eq!(
        before_crash, sent_twice,
        "the batch delivered before the crash: {ids:?}"
    );
}

/// A tenant, an account and one pending payment, for tests that arrange its events by hand.
const ONE_PAYMENT: &str = "insert into tenants (id, name) values ('ten_1', 'acme');
     insert into accounts (tenant_id, id, currency, balance_minor) values ('ten_1', 'acc_1', 'EUR', 100);
     insert into payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference, channel, status)
       values ('pay_1', 'ten_1', 'acc_1', 10, 'EUR', 'r1', 'web', 'PENDING');";

async fn an_event_that_keeps_failing_is_dead_lettered_and_no_longer_claimed(db: TestDatabase) {
    let store = db.migrated_store().await;
    db.execute(&format!(
        "{ONE_PAYMENT}
         insert into outbox_events (id, payment_id, event_type, payload)
           values ('evt_1', 'pay_1', 'PaymentAuthorized', '{{}}')"
    ))
    .await
    .expect("arrange an event");
    let claimed = async || {
        store
            .claim_events(10, Duration::from_secs(30))
            .await
            .expect("claim")
            .len()
    };
    let failed_and_backoff_skipped = async || {
        store
            .mark_event_failed("evt_1", "broker down", 2)
            .await
            .expect("failed");
        let backing_off = db
            .query_i64(
                "select count(*) from outbox_events where dead_at is null and next_attempt_at is not null",
            )
            .await;
        db.execute("update outbox_events set next_attempt_at = null")
            .await
            .expect("skip the backoff");
        backing_off
    };
    assert_eq!(claimed().await, 1);
    assert_eq!(claimed().await, 0, "claimed once");
    assert_eq!(failed_and_backoff_skipped().await, 1, "backing off, not dead");
    assert_eq!(claimed().await, 1, "retried");
    assert_eq!(
        failed_and_backoff_skipped().await,
        0,
        "dead after the second failure"
    );
    assert_eq!(claimed().await, 0, "dead letters stay put");
    assert_eq!(
        db.query_i64(
            "select count(*) from outbox_events where dead_at is not null and last_error = 'broker down'"
        )
        .await,
        1
    );
    assert_eq!(
        store.outbox_backlog().await.expect("backlog").unpublished,
        0,
        "not counted as backlog"
    );
}

conformance!(an_event_that_keeps_failing_is_dead_lettered_and_no_longer_claimed);

/// A backlog of receipts larger than a batch goes out in one pass, each receipt once: one
/// batch a pass capped receipts below the rate payments are made at saturation.
async fn a_backlog_of_receipts_is_sent_in_one_pass(db: TestDatabase) {
    let store: Arc<dyn EventStore> = db.migrated_store().await;
    let receipts: Vec<String> = (0..250)
        .map(|n| format!("('rcpt_{n}', 'pay_1', 'receipt {n}')"))
        .collect();
    db.execute(&format!(
        "{ONE_PAYMENT} insert into receipts (dedupe_key, payment_id, body) values {}",
        receipts.join(", ")
    ))
    .await
    .expect("arrange receipts");
    let dir = tempfile::tempdir().expect("temporary directory");
    let sink = dir.path().join("receipts.jsonl");
    let sender = ReceiptSender::new(store, ReceiptSink::File(sink.clone()));

    assert_eq!(sender.send_all_pending(100).await.expect("sent"), 250);
    let lines = std::fs::read_to_string(&sink).expect("the sink").lines().count();
    assert_eq!(lines, 250, "each receipt once");
    assert_eq!(
        db.query_i64("select count(*) from receipts where sent_at is null")
            .await,
        0,
        "none left pending"
    );
    assert_eq!(sender.send_all_pending(100).await.expect("nothing"), 0);
}

conformance!(a_backlog_of_receipts_is_sent_in_one_pass);

/// Marks name their rows: only the listed events and receipts are marked, and one marked
/// before (a second publisher's late mark, a resend) keeps its first time.
async fn a_mark_touches_only_the_listed_rows_and_keeps_the_first_time(db: TestDatabase) {
    let store = db.migrated_store().await;
    db.execute(&format!(
        "{ONE_PAYMENT}
         insert into outbox_events (id, payment_id, event_type, payload) values
           ('evt_1', 'pay_1', 'PaymentCreated', '{{}}'), ('evt_2', 'pay_1', 'PaymentAuthorized', '{{}}'),
           ('evt_3', 'pay_1', 'PaymentSettled', '{{}}');
         insert into receipts (dedupe_key, payment_id, body) values
           ('rcpt_1', 'pay_1', 'one'), ('rcpt_2', 'pay_1', 'two'), ('rcpt_3', 'pay_1', 'three')"
    ))
    .await
    .expect("arrange events and receipts");
    let ids = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect::<Vec<_>>();

    store.mark_events_published(&ids(&["evt_1"])).await.expect("mark");
    store.mark_receipts_sent(&ids(&["rcpt_1"])).await.expect("mark");
    db.execute(
        "update outbox_events set published_at = '2020-01-01T00:00:00.000Z' where id = 'evt_1';
         update receipts set sent_at = '2020-01-01T00:00:00.000Z' where dedupe_key = 'rcpt_1'",
    )
    .await
    .expect("date the first marks");
    store
        .mark_events_published(&ids(&["evt_1", "evt_2", "evt_unknown"]))
        .await
        .expect("mark again");
    store
        .mark_receipts_sent(&ids(&["rcpt_1", "rcpt_2", "rcpt_unknown"]))
        .await
        .expect("mark again");

    let published = |condition: &'static str| db.query_i64(condition);
    assert_eq!(
        published("select count(*) from outbox_events where id = 'evt_1' and published_at < '2021-01-01'")
            .await,
        1,
        "the first publication time is kept"
    );
    assert_eq!(
        published("select count(*) from outbox_events where id = 'evt_2' and published_at > '2021-01-01'")
            .await,
        1
    );
    assert_eq!(
        published("select count(*) from outbox_events where id = 'evt_3' and published_at is null").await,
        1,
        "an event not listed is left unpublished"
    );
    assert_eq!(
        published("select count(*) from receipts where dedupe_key = 'rcpt_1' and sent_at < '2021-01-01'")
            .await,
        1,
        "the first sending time is kept"
    );
    assert_eq!(
        published("select count(*) from receipts where dedupe_key = 'rcpt_2' and sent_at > '2021-01-01'")
            .await,
        1
    );
    assert_eq!(
        published("select count(*) from receipts where dedupe_key = 'rcpt_3' and sent_at is null").await,
        1,
        "a receipt not listed is left unsent"
    );
    let claimed = store
        .claim_events(10, Duration::from_secs(30))
        .await
        .expect("claim");
    assert_eq!(
        claimed
            .iter()
            .map(|event| event.event_id.as_str())
            .collect::<Vec<_>>(),
        ["evt_3"]
    );
}

conformance!(a_mark_touches_only_the_listed_rows_and_keeps_the_first_time);

/// A JetStream stream of this test's own on the NATS server the test scripts provide.
struct NatsStream {
    url: String,
    stream: String,
    prefix: String,
}

impl NatsStream {
    fn new() -> NatsStream {
        let id = uuid::Uuid::new_v4().simple().to_string();
        NatsStream {
            url: std::env::var("IDEM_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned()),
            stream: format!("IDEM_TEST_{id}"),
            prefix: format!("idem_test_{id}"),
        }
    }

    fn settings(&self) -> NatsSettings {
        NatsSettings {
            url: self.url.clone(),
            stream: self.stream.clone(),
            subject_prefix: self.prefix.clone(),
            ack_wait: Duration::from_secs(1),
        }
    }

    fn env(&self) -> Vec<(&str, &str)> {
        vec![
            ("IDEM_NATS_URL", self.url.as_str()),
            ("IDEM_NATS_STREAM", self.stream.as_str()),
            ("IDEM_NATS_SUBJECT_PREFIX", self.prefix.as_str()),
            ("IDEM_NATS_ACK_WAIT_SECS", "1"),
        ]
    }

    async fn delete(&self) {
        if let Ok(client) = async_nats::connect(&self.url).await {
            let _ = async_nats::jetstream::new(client)
                .delete_stream(&self.stream)
                .await;
        }
    }
}

/// Publishes every event 2 to 5 times through NATS under *different* broker message ids, so
/// that the broker's de-duplication cannot help: only the consumers' inboxes can.
struct DuplicatingNats {
    nats: NatsJetStream,
    messages: AtomicU64,
    /// Copies the broker accepted.
    published: AtomicU64,
}

#[async_trait::async_trait]
impl Transport for DuplicatingNats {
    async fn publish(&self, messages: &[EventMessage]) -> Vec<Result<(), TransportError>> {
        let mut results = Vec::with_capacity(messages.len());
        for message in messages {
            results.push(self.publish_copies(message).await);
        }
        results
    }
}

impl DuplicatingNats {
    async fn publish_copies(&self, message: &EventMessage) -> Result<(), TransportError> {
        let copies = 2 + self.messages.fetch_add(1, Ordering::Relaxed) % 4;
        for copy in 0..copies {
            self.nats
                .publish_as(message, &format!("{}~{copy}", message.event_id))
                .await?;
            self.published.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// A consumer that counts every delivery it handled (applied, duplicate or ignored).
struct Counting {
    inner: Arc<dyn Consumer>,
    handled: Arc<AtomicU64>,
}

#[async_trait::async_trait]
impl Consumer for Counting {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn handle(&self, messages: &[EventMessage]) -> Result<Vec<Handled>, ConsumerError> {
        let handled = self.inner.handle(messages).await;
        if let Ok(handled) = &handled {
            self.handled.fetch_add(handled.len() as u64, Ordering::Relaxed);
        }
        handled
    }
}

#[tokio::test]
async fn over_nats_duplicated_deliveries_by_two_publishers_apply_each_event_once() {
    let app = payments_with_idle_publisher(TestDatabase::migrated(DialectName::Postgres).await).await;
    let db = &app.db;

    let stream = NatsStream::new();
    let nats = NatsJetStream::connect(stream.settings())
        .await
        .expect("NATS JetStream (scripts/test starts one)");
    let store = db.store().await;
    let mut consumers = Supervisor::default();
    let handled = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    for (consumer, handled) in [
        Arc::new(Ledger::new(store.clone())) as Arc<dyn Consumer>,
        Arc::new(Receipts::new(store.clone())),
    ]
    .into_iter()
    .zip(&handled)
    {
        let counting = Arc::new(Counting {
            inner: consumer,
            handled: handled.clone(),
        });
        consumers.spawn(Arc::new(nats.consumer(counting).await.expect("consumer")));
    }
    let transport = Arc::new(DuplicatingNats {
        nats,
        messages: AtomicU64::new(0),
        published: AtomicU64::new(0),
    });
    let (a, b) = publish_twice_at_once(&store, transport.clone()).await;
    assert_eq!(
        a.published + b.published,
        2 * (AUTHORISED + DECLINED),
        "{a:?} {b:?}"
    );
    db.eventually_equals(
        "select count(*) from consumer_inbox",
        2 * AUTHORISED as i64,
        "both consumers processed every authorisation",
    )
    .await;
    // Every copy reaches both consumers, and changes nothing.
    let published = transport.published.load(Ordering::Relaxed);
    assert!(published >= 2 * 2 * (AUTHORISED + DECLINED) as u64);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while handled
        .iter()
        .any(|count| count.load(Ordering::Relaxed) < published)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "copies handled: {handled:?} of {published}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_once(db).await;
    stream.delete().await;
}

#[tokio::test]
async fn over_nats_a_crash_between_publishing_and_marking_applies_once() {
    let stream = NatsStream::new();
    crash_then_restart_with("published_before_marked", &stream.env()).await;
    stream.delete().await;
}

#[tokio::test]
async fn over_nats_a_crash_in_a_consumer_before_its_commit_is_redelivered_and_applies_once() {
    let stream = NatsStream::new();
    crash_then_restart_with("consumer_after_side_effect", &stream.env()).await;
    stream.delete().await;
}

/// A real SMTP server (aiosmtpd, installed by scripts/test) delivering into a maildir.
struct SmtpServer {
    child: tokio::process::Child,
    port: u16,
    maildir: tempfile::TempDir,
}

impl SmtpServer {
    async fn start() -> SmtpServer {
        let port = unused_port();
        let maildir = tempfile::tempdir().expect("maildir");
        let child = tokio::process::Command::new("python3")
            .args([
                "-m",
                "aiosmtpd",
                "-n",
                "-l",
                &format!("127.0.0.1:{port}"),
                "-c",
                "aiosmtpd.handlers.Mailbox",
            ])
            .arg(maildir.path().join("mail"))
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 -m aiosmtpd (scripts/test installs it)");
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return SmtpServer { child, port, maildir };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("aiosmtpd did not listen on {port}");
    }

    /// Every delivered message, as text.
    fn messages(&self) -> Vec<String> {
        let new = self.maildir.path().join("mail/new");
        std::fs::read_dir(&new)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[tokio::test]
async fn receipts_are_mailed_through_smtp_with_their_stable_message_ids() {
    let smtp = SmtpServer::start().await;
    let url = format!("smtp://127.0.0.1:{}", smtp.port);
    let app = recovering(TestDatabase::migrated(DialectName::Postgres).await)
        .with(Serve::OutboxEvery(ms(100)))
        .with(Serve::SmtpUrl(url.clone()))
        .with(Serve::SmtpTo("Receipts <receipts@merchant.example>".to_owned()))
        .process()
        .await;
    make_payments(&app).await;
    app.db
        .eventually_equals(
            "select count(*) from receipts where sent_at is not null",
            AUTHORISED as i64,
            "every receipt mailed",
        )
        .await;
    let messages = smtp.messages();
    assert_eq!(messages.len(), AUTHORISED, "one mail per authorised payment");
    let ids: std::collections::BTreeSet<String> = messages
        .iter()
        .filter_map(|mail| {
            mail.lines()
                .find(|line| line.to_ascii_lowercase().starts_with("message-id:"))
                .map(|line| line.split_once(':').expect("header").1.trim().to_owned())
        })
        .collect();
    assert_eq!(ids.len(), AUTHORISED, "{ids:?}");
    assert!(
        ids.iter()
            .all(|id| id.starts_with("<receipt_payment_pay_") && id.ends_with("@idem>")),
        "{ids:?}"
    );
    // A body line longer than 76 characters (a payment id is 32) goes quoted-printable, broken
    // by soft line breaks: the text a recipient reads is the one with them taken out.
    assert!(
        messages.iter().all(|mail| mail
            .replace("=\r\n", "")
            .replace("=\n", "")
            .contains("was authorised")),
        "{messages:?}"
    );
    drop(smtp.child);
}
