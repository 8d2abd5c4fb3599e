//! The storage trait's behaviour, identical on PostgreSQL and SQLite.

use crate::support::{TestDatabase, Violation, conformance};
use domain::cursor::RecordCursor;
use domain::queue::{Attention, QueueFilter};
use domain::record::RecordStatus;
use idem::store::Readiness;
use idem::store::console::{RecordGauges, RecordQuery};

/// A tenant and one record per listed status; SQL valid in both dialects.
fn records_sql(statuses: &[&str]) -> String {
    let mut sql = String::from("insert into tenants (id, name) values ('ten_1', 'acme');\n");
    for (index, status) in statuses.iter().enumerate() {
        sql.push_str(&format!(
            "insert into idempotency_records (tenant_id, operation_name, idempotency_key, \
             fingerprint_version, request_fingerprint, canonical_command, status, progress_step, \
             created_by, expires_at) values ('ten_1', 'create_payment', 'key-{index}', 1, 'f', '{{}}', \
             '{status}', 'RECEIVED', 'key_1', '2030-01-01T00:00:00.000Z');\n"
        ));
    }
    sql
}

async fn a_fresh_database_is_not_ready_until_migrated(db: TestDatabase) {
    let store = db.store().await;
    match store.readiness().await.expect("database reachable") {
        Readiness::MigrationsPending { applied: 0, expected } => assert!(expected >= 1),
        other => panic!("expected pending migrations, got {other:?}"),
    }
    store.migrate().await.expect("migrate");
    assert_eq!(store.readiness().await.expect("reachable"), Readiness::Ready);
    store.migrate().await.expect("migrating again is a no-op");
    assert_eq!(store.readiness().await.expect("reachable"), Readiness::Ready);
}

conformance!(unmigrated: a_fresh_database_is_not_ready_until_migrated);

async fn console_gauges_and_record_pages_read_what_is_there(db: TestDatabase) {
    let store = db.migrated_store().await;
    assert_eq!(
        store.record_gauges(10).await.expect("gauges"),
        RecordGauges::default()
    );

    db.execute(&records_sql(&[
        "COMPLETED",
        "COMPLETED",
        "UNKNOWN_REQUIRES_RECOVERY",
        "IN_PROGRESS",
        "COMPLETED",
    ]))
    .await
    .expect("arrange records");
    db.execute(
        "update idempotency_records set recovery_attempts = 10 where status = 'UNKNOWN_REQUIRES_RECOVERY'",
    )
    .await
    .expect("the worker gave up on it");
    let gauges = store.record_gauges(10).await.expect("gauges");
    assert_eq!(
        (gauges.in_progress, gauges.unknown, gauges.needs_operator),
        (1, 1, 1)
    );
    assert_eq!(gauges.stale_in_progress, 0, "no lease has run out");

    // Keyset pages: newest first, ties broken by the scoped key, no row twice or lost.
    let mut query = RecordQuery {
        status: Some(RecordStatus::Completed),
        ..RecordQuery::default()
    };
    let mut seen = Vec::new();
    loop {
        let page = store.list_records(&query, 2).await.expect("page");
        seen.extend(page.iter().map(|row| row.record.key.clone()));
        match page.last() {
            Some(last) if page.len() == 2 => {
                query.after = Some(RecordCursor {
                    created_at: last.created_at,
                    tenant_id: last.record.tenant_id.clone(),
                    operation: last.record.operation.clone(),
                    key: last.record.key.clone(),
                });
            }
            _ => break,
        }
    }
    assert_eq!(seen, ["key-4", "key-1", "key-0"]);
    let prefixed = RecordQuery {
        key_prefix: Some("key-3".into()),
        ..RecordQuery::default()
    };
    let rows = store.list_records(&prefixed, 10).await.expect("page");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, RecordStatus::InProgress);
    let found = store.find_records("key-2", 10).await.expect("find");
    assert_eq!(found.len(), 1);
    let queue = store
        .recovery_queue(&QueueFilter::default(), None, 10, 10)
        .await
        .expect("queue");
    assert_eq!((queue.total, queue.rows.len()), (1, 1), "the unknown outcome");
    assert_eq!(queue.rows[0].record.key, "key-2");
    assert_eq!(queue.rows[0].tenant_name, "acme");
    for (attention, total) in [(Attention::NeedsOperator, 1), (Attention::WorkerRetrying, 0)] {
        let filter = QueueFilter {
            attention: Some(attention),
            ..QueueFilter::default()
        };
        let page = store.recovery_queue(&filter, None, 10, 10).await.expect("queue");
        assert_eq!(page.total, total, "{attention:?}");
    }
}

async fn the_schema_rejects_a_status_outside_the_state_machine(db: TestDatabase) {
    db.migrated_store().await;
    // An unknown status must not be stored.
    db.assert_refused(&records_sql(&["DONE"]), Violation::Check).await;
}

async fn the_scoped_key_is_unique(db: TestDatabase) {
    db.migrated_store().await;
    db.execute(&records_sql(&["COMPLETED"]))
        .await
        .expect("first record");
    // A second row for the same scoped key.
    let again = "insert into idempotency_records (tenant_id, operation_name, idempotency_key, \
         fingerprint_version, request_fingerprint, canonical_command, status, progress_step, \
         created_by, expires_at) values ('ten_1', 'create_payment', 'key-0', 1, 'other', '{}', \
         'IN_PROGRESS', 'RECEIVED', 'key_1', '2030-01-01T00:00:00.000Z')";
    db.assert_refused(again, Violation::Unique).await;
}

async fn foreign_keys_are_enforced(db: TestDatabase) {
    db.migrated_store().await;
    // A response without its record.
    let orphan = format!(
        "insert into idempotency_responses (tenant_id, operation_name, idempotency_key, headers, body) \
         values ('ten_x', 'create_payment', 'nope', '{{}}', {})",
        db.blob("00")
    );
    db.assert_refused(&orphan, Violation::ForeignKey).await;
}

async fn a_refund_belongs_to_a_payment_of_its_own_tenant_and_money_names_a_currency_code(db: TestDatabase) {
    db.migrated_store().await;
    db.execute(
        "insert into tenants (id, name) values ('ten_1', 'acme'), ('ten_2', 'globex'); \
         insert into accounts (tenant_id, id, currency, balance_minor) values ('ten_1', 'acc_1', 'EUR', 1000); \
         insert into payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference, channel, status) \
         values ('pay_1', 'ten_1', 'acc_1', 100, 'EUR', 'inv-1', 'web', 'PROCESSING');",
    )
    .await
    .expect("a tenant's payment");
    let refund = |id: &str, tenant: &str, currency: &str| {
        format!(
            "insert into refunds (id, tenant_id, payment_id, amount_minor, currency, reason, reference, status) \
             values ('{id}', '{tenant}', 'pay_1', 10, '{currency}', 'duplicate', '{id}', 'PROCESSING')"
        )
    };
    db.execute(&refund("ref_1", "ten_1", "EUR"))
        .await
        .expect("a refund of its own tenant's payment");
    db.assert_refused(&refund("ref_2", "ten_2", "EUR"), Violation::ForeignKey)
        .await;
    db.assert_refused(&refund("ref_3", "ten_1", "eur"), Violation::Check)
        .await;
    db.assert_refused(&refund("ref_4", "ten_1", "EURO"), Violation::Check)
        .await;
    db.assert_refused(
        "insert into payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference, channel, status) \
         values ('pay_2', 'ten_1', 'acc_1', 100, 'E1R', 'inv-2', 'web', 'PROCESSING')",
        Violation::Check,
    )
    .await;
    db.assert_refused(
        "update payments set currency = 'eu' where id = 'pay_1'",
        Violation::Check,
    )
    .await;
}

async fn instances_are_live_while_their_heartbeat_is_recent(db: TestDatabase) {
    use idem::store::sealing::LiveInstance;
    use std::time::Duration;
    let store = db.migrated_store().await;
    let keys = |ids: &[&str]| ids.iter().map(|id| (*id).to_owned()).collect::<Vec<_>>();
    store
        .instance_heartbeat("idem-a", &keys(&["k1"]))
        .await
        .expect("heartbeat");
    store
        .instance_heartbeat("idem-b", &keys(&["k1", "k2"]))
        .await
        .expect("heartbeat");
    // A second heartbeat renews the first, keys and all.
    store
        .instance_heartbeat("idem-a", &keys(&["k1", "k3"]))
        .await
        .expect("heartbeat");
    let live = store.live_instances(Duration::from_secs(5)).await.expect("live");
    assert_eq!(
        live,
        vec![
            LiveInstance {
                instance_id: "idem-a".into(),
                key_ids: keys(&["k1", "k3"]),
            },
            LiveInstance {
                instance_id: "idem-b".into(),
                key_ids: keys(&["k1", "k2"]),
            },
        ]
    );
    let recent = Duration::from_millis(300);
    crate::support::eventually(
        "idem-a's heartbeat older than 300 ms",
        || store.live_instances(recent),
        |live| {
            live.as_ref()
                .is_ok_and(|live| live.iter().all(|instance| instance.instance_id != "idem-a"))
        },
    )
    .await
    .expect("live instances");
    store
        .instance_heartbeat("idem-b", &keys(&["k2"]))
        .await
        .expect("heartbeat");
    let live = store.live_instances(recent).await.expect("live");
    assert_eq!(live.len(), 1, "only the recent heartbeat counts: {live:?}");
    assert_eq!(live[0].instance_id, "idem-b");
    store.forget_instance("idem-b").await.expect("forget");
    assert!(
        store
            .live_instances(Duration::from_secs(5))
            .await
            .expect("live")
            .iter()
            .all(|live| live.instance_id != "idem-b")
    );
}

conformance!(
    instances_are_live_while_their_heartbeat_is_recent,
    console_gauges_and_record_pages_read_what_is_there,
    the_schema_rejects_a_status_outside_the_state_machine,
    the_scoped_key_is_unique,
    foreign_keys_are_enforced,
    a_refund_belongs_to_a_payment_of_its_own_tenant_and_money_names_a_currency_code
);

mod tenants_and_keys {
    use crate::support::{TestDatabase, Violation, conformance};
    use domain::command::AccountId;
    use domain::money::{Balance, Currency};
    use domain::payment::NewAccount;
    use domain::tenant::{ApiKeyId, TenantId, TenantName};
    use idem::auth::api_key::{ApiKeyHash, NewApiKey};
    use idem::store::StoreError;

    fn name(text: &str) -> TenantName {
        TenantName::parse(text).expect("valid name")
    }

    fn account(tenant_id: &TenantId, id: &str, balance: &str) -> NewAccount {
        NewAccount {
            tenant_id: tenant_id.clone(),
            id: AccountId::parse(id).expect("valid id"),
            balance: Balance::parse(balance, Currency::Eur).expect("valid balance"),
        }
    }

    async fn a_tenant_name_is_taken_once(db: TestDatabase) {
        let store = db.migrated_store().await;
        let id = TenantId::generate();
        store
            .create_tenant(&id, &name("acme"), true, &crate::support::test_audit())
            .await
            .expect("create");
        assert!(matches!(
            store
                .create_tenant(
                    &TenantId::generate(),
                    &name("acme"),
                    true,
                    &crate::support::test_audit()
                )
                .await,
            Err(StoreError::AlreadyExists)
        ));
        assert_eq!(
            store.tenant_id_by_name(&name("acme")).await.expect("look up"),
            Some(id)
        );
        assert_eq!(
            store.tenant_id_by_name(&name("other")).await.expect("look up"),
            None
        );
    }

    async fn an_api_key_authenticates_until_revoked(db: TestDatabase) {
        let store = db.migrated_store().await;
        let tenant_id = TenantId::generate();
        store
            .create_tenant(&tenant_id, &name("acme"), true, &crate::support::test_audit())
            .await
            .expect("tenant");
        let key = NewApiKey::generate();
        store
            .create_api_key(&tenant_id, &key, &crate::support::test_audit())
            .await
            .expect("key");

        let principal = store
            .authenticate_api_key(&ApiKeyHash::of(&key.key))
            .await
            .expect("look up")
            .expect("authenticated");
        assert_eq!(principal.tenant_id, tenant_id);
        assert_eq!(principal.api_key_id, key.id);
        assert!(principal.require_idempotency_key, "keys are required by default");
        assert_eq!(principal.pinned_api_version, "2026-05-01");

        let guess = ApiKeyHash::of(&format!("{}A", key.key));
        assert_eq!(store.authenticate_api_key(&guess).await.expect("look up"), None);

        assert!(
            store
                .revoke_api_key(&key.id, &crate::support::test_audit())
                .await
                .expect("revoke")
        );
        assert_eq!(
            store.authenticate_api_key(&key.hash).await.expect("look up"),
            None
        );
        assert!(
            !store
                .revoke_api_key(&key.id, &crate::support::test_audit())
                .await
                .expect("revoke again"),
            "already revoked"
        );
    }

    /// What the administration lists and changes: tenants with their key rule, keys with
    /// their creator, last use and revocation; each change audited with it, none without one.
    async fn tenants_and_keys_are_listed_and_changed_with_their_audit(db: TestDatabase) {
        use domain::operator::AuditEntry;
        let store = db.migrated_store().await;
        let tenant_id = TenantId::generate();
        let by_alice = |action: &str| AuditEntry::new("alice", action);
        store
            .create_tenant(&tenant_id, &name("acme"), true, &by_alice("tenant.create"))
            .await
            .expect("tenant");
        assert!(
            store
                .set_idempotency_key_required(&tenant_id, false, &by_alice("tenant.set_keys"))
                .await
                .expect("set")
        );
        assert!(
            !store
                .set_idempotency_key_required(&TenantId::generate(), false, &by_alice("tenant.set_keys"))
                .await
                .expect("set"),
            "no such tenant"
        );
        let tenants = store.list_tenants().await.expect("tenants");
        assert_eq!(tenants.len(), 1);
        assert_eq!(tenants[0].name, "acme");
        assert!(!tenants[0].require_idempotency_key);

        let (used, unused) = (NewApiKey::generate(), NewApiKey::generate());
        for key in [&used, &unused] {
            store
                .create_api_key(&tenant_id, key, &by_alice("api_key.create"))
                .await
                .expect("key");
        }
        store
            .note_api_keys_used(&[used.id.as_str().to_owned()])
            .await
            .expect("noted");
        assert!(
            store
                .revoke_api_key(&unused.id, &by_alice("api_key.revoke"))
                .await
                .expect("revoke")
        );
        let keys = store.list_api_keys().await.expect("keys");
        assert_eq!(keys.len(), 2);
        assert!(keys.iter().all(|key| key.tenant_id == tenant_id));
        let of = |id: &ApiKeyId| keys.iter().find(|key| &key.id == id).expect("listed");
        assert_eq!(of(&used.id).created_by.as_deref(), Some("alice"));
        assert!(of(&used.id).last_used_at.is_some() && of(&used.id).revoked_at.is_none());
        assert!(of(&unused.id).last_used_at.is_none() && of(&unused.id).revoked_at.is_some());
        assert_eq!(
            db.query_i64("select count(*) from audit_log where actor = 'alice'")
                .await,
            5,
            "create, set keys, two keys, one revocation; nothing for what changed nothing"
        );
    }

    async fn account_ids_are_unique_within_a_tenant(db: TestDatabase) {
        let store = db.migrated_store().await;
        let (acme, globex) = (TenantId::generate(), TenantId::generate());
        store
            .create_tenant(&acme, &name("acme"), true, &crate::support::test_audit())
            .await
            .expect("tenant");
        store
            .create_tenant(&globex, &name("globex"), true, &crate::support::test_audit())
            .await
            .expect("tenant");

        store
            .create_account(&account(&acme, "acc_1", "1000.00"))
            .await
            .expect("create");
        assert!(matches!(
            store.create_account(&account(&acme, "acc_1", "5.00")).await,
            Err(StoreError::AlreadyExists)
        ));
        store
            .create_account(&account(&globex, "acc_1", "0"))
            .await
            .expect("another tenant's acc_1 is another account");
        let negative_balance = format!(
            "insert into accounts (tenant_id, id, currency, balance_minor) values ('{acme}', 'acc_2', 'EUR', -1)"
        );
        // A negative balance is refused by the schema.
        db.assert_refused(&negative_balance, Violation::Check).await;
    }

    conformance!(
        a_tenant_name_is_taken_once,
        an_api_key_authenticates_until_revoked,
        tenants_and_keys_are_listed_and_changed_with_their_audit,
        account_ids_are_unique_within_a_tenant
    );
}

mod account_settings {
    use crate::support::{TestDatabase, conformance};
    use domain::command::AccountId;
    use domain::money::Currency;

    async fn setting_the_default_currency_twice_audits_one_change(db: TestDatabase) {
        let store = db.migrated_store().await;
        let (tenant_id, key) = crate::support::seed_tenant(store.as_ref(), "acme", "1.00").await;
        let account = AccountId::parse("acc_1").expect("id");

        let attempts: Vec<_> = (0..8)
            .map(|_| {
                let (store, tenant_id, account, key_id) =
                    (store.clone(), tenant_id.clone(), account.clone(), key.id.clone());
                tokio::spawn(async move {
                    store
                        .set_default_currency(&tenant_id, &account, Currency::Usd, &key_id)
                        .await
                })
            })
            .collect();
        let mut changed = 0;
        for attempt in attempts {
            match attempt.await.expect("task").expect("set") {
                Some(true) => changed += 1,
                Some(false) => {}
                None => panic!("the account exists"),
            }
        }
        assert_eq!(changed, 1, "eight equal requests, one change");
        assert_eq!(db.query_i64("select count(*) from account_audit").await, 1);

        assert_eq!(
            store
                .set_default_currency(&tenant_id, &account, Currency::Eur, &key.id)
                .await
                .expect("set"),
            Some(true)
        );
        assert_eq!(db.query_i64("select count(*) from account_audit").await, 2);
        let missing = AccountId::parse("acc_9").expect("id");
        assert_eq!(
            store
                .set_default_currency(&tenant_id, &missing, Currency::Eur, &key.id)
                .await
                .expect("set"),
            None
        );
    }

    conformance!(setting_the_default_currency_twice_audits_one_change);
}

mod outcome_buckets {
    use crate::support::{TestDatabase, conformance};
    use chrono::{TimeZone, Utc};
    use domain::outcome::Outcome;
    use idem::store::metrics::OutcomeCount;

    async fn counts_from_several_flushes_add_up_in_their_bucket(db: TestDatabase) {
        let store = db.migrated_store().await;
        let minute = Utc
            .with_ymd_and_hms(2026, 11, 29, 10, 55, 0)
            .single()
            .expect("time");
        let count = |outcome, count| OutcomeCount {
            bucket_start: minute,
            tenant_id: "ten_1".to_owned(),
            operation: domain::scope::Operation::CreatePayment,
            outcome,
            count,
        };
        store
            .add_outcome_counts(&[count(Outcome::Replay, 3), count(Outcome::NewExecution, 1)])
            .await
            .expect("flush");
        store
            .add_outcome_counts(&[count(Outcome::Replay, 2)])
            .await
            .expect("flush");
        assert_eq!(
            db.query_i64("select count from outcome_buckets where outcome = 'replay'")
                .await,
            5
        );
        assert_eq!(db.query_i64("select count(*) from outcome_buckets").await, 2);
    }

    /// A conflicting retry's journal entry, on key `key`.
    fn conflict_entry(key: &str) -> idem::store::metrics::JournalEntry {
        use domain::key::IdempotencyKey;
        use domain::scope::{Operation, Scope};
        use domain::tenant::TenantId;
        idem::store::metrics::JournalEntry {
            scope: Scope {
                tenant_id: TenantId::from_stored("ten_1".to_owned()),
                operation: Operation::CreatePayment,
                key: IdempotencyKey::parse(key.as_bytes()).expect("key"),
            },
            at: Utc::now(),
            fingerprint: "f".repeat(64),
            canonical_command: Some("{}".to_owned()),
            status_code: 409,
            error_code: Some("IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST".to_owned()),
            replayed: false,
            retry_delay: None,
            window: std::time::Duration::from_secs(86_400),
        }
    }

    /// A flood's entries are written a chunk at a time, each chunk a transaction of its own, so
    /// that on SQLite a payment's claim waits for one chunk at most, not for the whole flush.
    async fn the_journal_writes_a_flood_in_bounded_transactions(db: TestDatabase) {
        use idem::metrics::Buffered;
        use idem::metrics::journal::{ENTRIES_PER_WRITE, RequestJournal};
        let store = db.migrated_store().await;
        let journal = RequestJournal::default();
        for index in 0..1_000 {
            journal.record(conflict_entry(&format!("k-{index}")));
        }
        journal.flush(store.as_ref()).await;
        assert_eq!(
            db.query_i64("select count(*) from idempotency_requests").await,
            1_000
        );
        // A row's id carries its write's random tag: `req_`, 12 hex digits of time, the 12 of
        // the write, 6 of the position.
        assert_eq!(ENTRIES_PER_WRITE, 256);
        assert_eq!(
            db.query_i64("select count(distinct substr(id, 17, 12)) from idempotency_requests")
                .await,
            4,
            "1,000 entries in writes of 256, 256, 256 and 232"
        );
        assert_eq!(
            db.query_i64(
                "select max(rows_written) from (select count(*) as rows_written from \
                 idempotency_requests group by substr(id, 17, 12)) per_write"
            )
            .await,
            256
        );
    }

    /// A chunk the database refuses stays queued with every entry after it, and a later flush
    /// writes them; the chunk written before it is not written again.
    async fn a_refused_chunk_and_the_rest_wait_for_the_next_flush(db: TestDatabase) {
        use idem::metrics::Buffered;
        use idem::metrics::journal::RequestJournal;
        let store = db.migrated_store().await;
        let journal = RequestJournal::default();
        // Refuses the second chunk (entries 256 to 511), which repeats the first entry's key.
        db.execute("create unique index refuse_a_key_twice on idempotency_requests (idempotency_key)")
            .await
            .expect("index");
        for index in 0..600 {
            let key = if index == 300 { 0 } else { index };
            journal.record(conflict_entry(&format!("k-{key}")));
        }
        journal.flush(store.as_ref()).await;
        assert_eq!(
            db.query_i64("select count(*) from idempotency_requests").await,
            256,
            "the first chunk only"
        );
        db.execute("drop index refuse_a_key_twice").await.expect("drop");
        journal.flush(store.as_ref()).await;
        assert_eq!(
            db.query_i64("select count(*) from idempotency_requests").await,
            600
        );
        assert_eq!(
            db.query_i64("select count(distinct idempotency_key) from idempotency_requests")
                .await,
            599,
            "every entry once, `k-0` twice"
        );
    }

    /// More rows than one statement carries: every one is written, in one transaction.
    async fn a_large_flush_writes_every_row(db: TestDatabase) {
        use domain::key::IdempotencyKey;
        use domain::scope::{Operation, Scope};
        use domain::tenant::TenantId;
        use idem::store::metrics::JournalEntry;
        let store = db.migrated_store().await;
        let start = Utc
            .with_ymd_and_hms(2026, 11, 29, 0, 0, 0)
            .single()
            .expect("time");
        let counts: Vec<OutcomeCount> = (0..1_234)
            .map(|minute| OutcomeCount {
                bucket_start: start + chrono::Duration::minutes(minute),
                tenant_id: "ten_1".to_owned(),
                operation: Operation::CreatePayment,
                outcome: Outcome::Replay,
                count: 2,
            })
            .collect();
        store.add_outcome_counts(&counts).await.expect("flush");
        assert_eq!(
            db.query_i64("select cast(sum(count) as bigint) from outcome_buckets")
                .await,
            2 * 1_234
        );
        db.execute("insert into tenants (id, name) values ('ten_1', 'acme')")
            .await
            .expect("tenant");
        let entries: Vec<JournalEntry> = (0..1_111)
            .map(|index| JournalEntry {
                scope: Scope {
                    tenant_id: TenantId::from_stored("ten_1".to_owned()),
                    operation: Operation::CreatePayment,
                    key: IdempotencyKey::parse(format!("k-{index}").as_bytes()).expect("key"),
                },
                at: start,
                fingerprint: "f".repeat(64),
                canonical_command: (index % 2 == 0).then(|| "{}".to_owned()),
                status_code: 201,
                error_code: None,
                replayed: index % 3 == 0,
                retry_delay: (index % 5 == 0).then(|| chrono::Duration::milliseconds(index)),
                window: std::time::Duration::from_secs(86_400),
            })
            .collect();
        store.add_journal_entries(&entries).await.expect("flush");
        // 371 replays (every third) are counted per key and minute; the other 740 get a row.
        assert_eq!(
            db.query_i64("select count(*) from idempotency_requests").await,
            740
        );
        assert_eq!(
            db.query_i64("select count(*) from idempotency_replays").await,
            371
        );
        assert_eq!(
            db.query_i64("select cast(sum(replays) as bigint) from idempotency_replays")
                .await,
            371
        );
        // Retries (every fifth): 148 rows that are not replays keep their delay, and all 223
        // are in the delay buckets.
        assert_eq!(
            db.query_i64("select count(*) from idempotency_requests where retry_delay_ms is not null")
                .await,
            148
        );
        assert_eq!(
            db.query_i64("select cast(sum(retries) as bigint) from retry_delay_buckets")
                .await,
            223
        );
        assert_eq!(
            db.query_i64("select cast(max(longest_ms) as bigint) from retry_delay_buckets")
                .await,
            1_110
        );
        assert_eq!(
            db.query_i64("select cast(max(longest_delay_ms) as bigint) from idempotency_replays")
                .await,
            1_110
        );
    }

    /// Journal rows come back exactly as they went in, whatever their text holds: quotes,
    /// commas, backslashes, line breaks, tabs, a literal `\N`, letters beyond ASCII, and an
    /// empty text apart from a missing one.
    async fn journal_rows_keep_their_text_exactly(db: TestDatabase) {
        use domain::key::IdempotencyKey;
        use domain::scope::{Operation, Scope};
        use domain::tenant::TenantId;
        use idem::store::metrics::JournalEntry;
        let store = db.migrated_store().await;
        db.execute("insert into tenants (id, name) values ('ten_1', 'acme')")
            .await
            .expect("tenant");
        let command = "{\"note\":\"a \\\"quoted\\\", comma\\nline\ttab\r\\\\N \u{e9}\u{20ac}\"}\n\"\",";
        type Sent<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<i64>);
        let sent: [Sent<'_>; 4] = [
            (r#"a"1,\x"#, Some(command), Some("IDEMPOTENCY_KEY_REUSED"), None),
            ("b", None, Some(""), Some(0)),
            (r"c\N", Some(""), None, Some(123_456_789_012)),
            ("d", Some(r"\N"), Some(r#"""#), Some(-1)),
        ];
        let at = Utc
            .with_ymd_and_hms(2026, 11, 29, 0, 0, 0)
            .single()
            .expect("time");
        let entries: Vec<JournalEntry> = sent
            .iter()
            .map(|(key, command, error_code, delay)| JournalEntry {
                scope: Scope {
                    tenant_id: TenantId::from_stored("ten_1".to_owned()),
                    operation: Operation::CreatePayment,
                    key: IdempotencyKey::parse(key.as_bytes()).expect("key"),
                },
                at,
                fingerprint: format!("f,\"{key}"),
                canonical_command: command.map(str::to_owned),
                status_code: 422,
                error_code: error_code.map(str::to_owned),
                replayed: false,
                retry_delay: delay.map(chrono::Duration::milliseconds),
                window: std::time::Duration::from_secs(86_400),
            })
            .collect();
        store.add_journal_entries(&entries).await.expect("flush");
        type Stored = (String, String, Option<String>, i32, Option<String>, Option<i64>);
        let stored: Vec<Stored> = db
            .query_all(
                "select idempotency_key, fingerprint, canonical_command, status_code, error_code, \
                 retry_delay_ms from idempotency_requests order by idempotency_key",
            )
            .await;
        let expected: Vec<Stored> = sent
            .iter()
            .map(|(key, command, error_code, delay)| {
                (
                    (*key).to_owned(),
                    format!("f,\"{key}"),
                    command.map(str::to_owned),
                    422,
                    error_code.map(str::to_owned),
                    *delay,
                )
            })
            .collect();
        assert_eq!(stored, expected);
        assert_eq!(
            db.query_i64(
                "select count(*) from idempotency_requests where at = (select min(at) from \
                 idempotency_requests) and at = (select max(at) from idempotency_requests)"
            )
            .await,
            4
        );
    }

    /// Retry delays of 5 minutes to about 3.5 days in a range (replays and other retries),
    /// among first requests, another tenant's retries and retries outside the range: the
    /// retries past each window the dashboard compares are exact, each quantile is a delay of
    /// its log bucket (at least the true value, under twice it), the longest is exact, and
    /// only what the filter selects counts.
    async fn retry_delays_are_read_per_operation_against_each_window(db: TestDatabase) {
        use domain::key::IdempotencyKey;
        use domain::retry_delay::{OTHER_WINDOWS, millis};
        use domain::scope::{Operation, Scope};
        use domain::tenant::TenantId;
        use idem::store::console::{COMPARED_WINDOWS, DashboardSelection};
        use idem::store::metrics::JournalEntry;
        use std::time::Duration;
        let store = db.migrated_store().await;
        let start = Utc
            .with_ymd_and_hms(2026, 11, 29, 0, 0, 0)
            .single()
            .expect("time");
        let window = Duration::from_secs(500);
        let entry = |tenant: &str, index: i64, at_minute: i64, delay_secs: Option<i64>| JournalEntry {
            scope: Scope {
                tenant_id: TenantId::from_stored(tenant.to_owned()),
                operation: Operation::CreatePayment,
                key: IdempotencyKey::parse(format!("k-{index}").as_bytes()).expect("key"),
            },
            at: start + chrono::Duration::minutes(at_minute),
            fingerprint: "f".repeat(64),
            canonical_command: None,
            status_code: if index % 2 == 0 { 201 } else { 409 },
            error_code: None,
            // Half of the retries replayed (counted per key and minute), half answered
            // otherwise (a row each): both are retries.
            replayed: delay_secs.is_some() && index % 2 == 0,
            retry_delay: delay_secs.map(chrono::Duration::seconds),
            window,
        };
        let delays_ms: Vec<i64> = (1..=1_000).map(|index| index * 300_000).collect();
        let mut entries: Vec<JournalEntry> = (1..=1_000)
            .map(|index| entry("ten_1", index, index % 50, Some(index * 300)))
            .collect();
        entries.extend((0..100).map(|index| entry("ten_1", index, 10, None)));
        entries.extend((0..10).map(|index| entry("ten_2", index, 10, Some(400_000))));
        entries.extend((0..10).map(|index| entry("ten_1", index, 24 * 60, Some(90_000))));
        // Two flushes: rows of one key, minute and bucket add up.
        let (first, second) = entries.split_at(entries.len() / 3);
        store.add_journal_entries(first).await.expect("flush");
        store.add_journal_entries(second).await.expect("flush");

        let from = start.timestamp();
        let to = from + 3600;
        let mut windows = [window; COMPARED_WINDOWS];
        windows[1..].copy_from_slice(&OTHER_WINDOWS);
        let tenant = store
            .retry_delays(
                &DashboardSelection {
                    from_epoch: from,
                    to_epoch: to,
                    tenant: Some("ten_1"),
                    operation: None,
                },
                windows,
            )
            .await
            .expect("retry delays");
        assert_eq!(tenant.len(), 1, "{tenant:?}");
        assert_eq!(tenant[0].operation, "create_payment");
        let summary = &tenant[0].summary;
        assert_eq!(summary.retries, 1_000);
        assert_eq!(summary.longest_ms, 300_000_000);
        let exact =
            windows.map(|window| delays_ms.iter().filter(|delay| **delay > millis(window)).count() as i64);
        assert_eq!(summary.outside, exact);
        assert_eq!(summary.outside, [999, 988, 928, 856, 712, 424, 136, 0, 0]);
        for (quantile, rank) in summary.quantiles_ms.iter().zip([500, 900, 990, 999]) {
            let true_value = delays_ms[rank - 1];
            assert!(
                *quantile >= true_value && *quantile < 2 * true_value && delays_ms.contains(quantile),
                "quantile of rank {rank}: {quantile} for {true_value}"
            );
        }
        let everyone = store
            .retry_delays(
                &DashboardSelection {
                    from_epoch: from,
                    to_epoch: to,
                    tenant: None,
                    operation: Some("create_payment"),
                },
                windows,
            )
            .await
            .expect("retry delays");
        assert_eq!(everyone[0].summary.retries, 1_010);
        assert_eq!(everyone[0].summary.longest_ms, 400_000_000);
        assert_eq!(
            everyone[0].summary.outside[6], 146,
            "another tenant's retries after three days"
        );
        let none = store
            .retry_delays(
                &DashboardSelection {
                    from_epoch: from,
                    to_epoch: to,
                    tenant: None,
                    operation: Some("create_refund"),
                },
                windows,
            )
            .await
            .expect("retry delays");
        assert!(none.is_empty(), "{none:?}");
    }

    conformance!(
        counts_from_several_flushes_add_up_in_their_bucket,
        a_large_flush_writes_every_row,
        the_journal_writes_a_flood_in_bounded_transactions,
        a_refused_chunk_and_the_rest_wait_for_the_next_flush,
        journal_rows_keep_their_text_exactly,
        retry_delays_are_read_per_operation_against_each_window
    );
}

mod console_jobs {
    use crate::support::{TestDatabase, conformance};
    use domain::key::IdempotencyKey;
    use domain::operator::AuditEntry;
    use domain::record::RecordStatus;
    use domain::recovery::{
        BulkControl, BulkJobState, EvidenceKind, OverrideOutcome, OverrideState, ProviderEvidence,
        ReconcileAction,
    };
    use domain::scope::{Operation, Scope};
    use domain::tenant::TenantId;
    use idem::console::OVERRIDE_DECISION_WINDOW as DAY;
    use idem::store::Store;
    use idem::store::StoreError;
    use idem::store::approvals::{NewOverrideRequest, OverrideDecision, OverrideRequest};
    use idem::store::bulk::{
        BulkItem, BulkItemResult, FrozenItem, GroupChoice, ItemPreview, JobApproval, NewBulkJob,
    };
    use idem::store::console::RecordName;
    use std::time::Duration;

    fn scope(key: &str) -> Scope {
        Scope {
            tenant_id: TenantId::from_stored("ten_1".into()),
            operation: Operation::CreatePayment,
            key: IdempotencyKey::parse(key.as_bytes()).expect("a key"),
        }
    }

    fn record(key: &str) -> RecordName {
        RecordName::from(&scope(key))
    }

    fn audit(actor: &str, action: &str) -> AuditEntry {
        AuditEntry::new(actor, action).because("because")
    }

    async fn a_bulk_job_is_run_by_one_runner_at_a_time_and_resumed_after_its_lease(db: TestDatabase) {
        let store = db.migrated_store().await;
        let job = NewBulkJob {
            id: "blk_1".into(),
            requested_by: "otto".into(),
            selection: "every record needing attention".into(),
        };
        let frozen: Vec<FrozenItem> = ["k-1", "k-2", "k-3"]
            .into_iter()
            .zip(0..)
            .map(|(key, position)| FrozenItem {
                position,
                record: record(key),
                version: 3,
            })
            .collect();
        store.create_bulk_job(&job, &frozen).await.expect("create");
        let lease = Duration::from_millis(300);
        let claimed = store.claim_bulk_job(Some("blk_1"), lease).await.expect("claim");
        assert_eq!(
            claimed.map(|job| (job.requested_by, job.state)),
            Some(("otto".to_owned(), BulkJobState::Previewing))
        );
        assert_eq!(
            store.claim_bulk_job(None, lease).await.expect("claim"),
            None,
            "held"
        );
        let unpreviewed = store.unpreviewed_bulk_items("blk_1").await.expect("items");
        assert_eq!(unpreviewed.len(), 3);
        assert!(
            unpreviewed
                .iter()
                .all(|item| item.action.is_none() && item.version == 3)
        );

        // The preview: a succeeded charge, no charge (the record moved on to version 5 since
        // it was frozen), and a provider that did not answer.
        let previews = [
            (
                0,
                3,
                ProviderEvidence::Charged {
                    charge_id: "ch_1".into(),
                    status: "succeeded".into(),
                },
                Some(ReconcileAction::ApplyProviderResult),
            ),
            (
                1,
                5,
                ProviderEvidence::NoCharge,
                Some(ReconcileAction::RetryCharge),
            ),
            (
                2,
                3,
                ProviderEvidence::Unreachable {
                    problem: "503".into(),
                },
                None,
            ),
        ];
        for (position, version, evidence, proposed) in previews {
            let preview = ItemPreview { evidence, proposed };
            store
                .note_bulk_preview("blk_1", position, version, &preview, lease)
                .await
                .expect("preview");
        }
        store.finish_bulk_preview("blk_1").await.expect("previewed");
        let previewed = store.bulk_job("blk_1").await.expect("read").expect("job");
        assert_eq!(
            (previewed.state, previewed.counts.previewed),
            (BulkJobState::Previewed, 3)
        );
        assert_eq!(
            store.claim_bulk_job(None, lease).await.expect("claim"),
            None,
            "a previewed job waits for an operator"
        );
        let groups = store.bulk_job_groups("blk_1").await.expect("groups");
        assert_eq!(groups.len(), 3, "{groups:?}");
        assert!(groups.iter().all(|group| group.items == 1 && group.included));

        // Applied by another operator: the succeeded group left out, the no-charge one released.
        let approval = JobApproval {
            applied_by: "olga".into(),
            name: "provider outage 3 Dec".into(),
            reason: "OPS-1".into(),
            choices: vec![
                GroupChoice {
                    operation: Operation::CreatePayment,
                    evidence: EvidenceKind::Succeeded,
                    action: None,
                },
                GroupChoice {
                    operation: Operation::CreatePayment,
                    evidence: EvidenceKind::NoCharge,
                    action: Some(ReconcileAction::MarkFailedAndReleaseKey),
                },
            ],
        };
        assert!(store.apply_bulk_job("blk_1", &approval).await.expect("apply"));
        assert!(
            !store.apply_bulk_job("blk_1", &approval).await.expect("apply"),
            "once"
        );
        let pending = vec![BulkItem {
            position: 1,
            record: record("k-2"),
            version: 5,
            action: Some(ReconcileAction::MarkFailedAndReleaseKey),
        }];
        assert_eq!(store.pending_bulk_items("blk_1").await.expect("items"), pending);
        let running = store
            .claim_bulk_job(None, lease)
            .await
            .expect("claim")
            .expect("running");
        assert_eq!(
            (
                running.requested_by.as_str(),
                running.reason.as_str(),
                running.state
            ),
            ("olga", "OPS-1", BulkJobState::Running),
            "applied in the name of the operator who applied it"
        );

        // The runner stopped: after its lease another takes the rest.
        db.until_passed("bulk_jobs", "runner_until", "id = 'blk_1'").await;
        let resumed = store.claim_bulk_job(None, lease).await.expect("claim");
        assert_eq!(resumed.map(|job| job.id), Some("blk_1".to_owned()));
        let done = BulkItemResult {
            ok: true,
            status: Some(RecordStatus::FailedRetryable),
            message: "applied".into(),
        };
        store
            .finish_bulk_item("blk_1", 1, &done, lease)
            .await
            .expect("item");
        store.finish_bulk_job("blk_1").await.expect("finish");
        let finished = store.bulk_job("blk_1").await.expect("read").expect("job");
        assert_eq!(finished.state, BulkJobState::Finished);
        assert!(finished.finished_at.is_some());
        assert_eq!(
            (
                finished.counts.items,
                finished.counts.included,
                finished.counts.done,
                finished.counts.ok
            ),
            (3, 1, 1, 1)
        );
        let reports = store.bulk_job_items("blk_1", 0, 10).await.expect("items");
        assert_eq!(reports.len(), 3);
        assert_eq!(
            (reports[0].included, reports[0].result.clone()),
            (false, None),
            "left out"
        );
        assert_eq!(reports[1].result, Some(done));
        assert_eq!(reports[2].action, None, "nothing to apply");
        db.until_passed(
            "bulk_jobs",
            "runner_until",
            "id = 'blk_1' and runner_until is not null",
        )
        .await;
        assert_eq!(
            store.claim_bulk_job(None, lease).await.expect("claim"),
            None,
            "finished"
        );
        assert!(
            !store
                .control_bulk_job("blk_1", BulkControl::Abort)
                .await
                .expect("abort"),
            "a finished job is not aborted"
        );
        assert_eq!(store.bulk_job("blk_2").await.expect("read"), None);
        assert_eq!(store.bulk_jobs(10).await.expect("jobs").len(), 1);
    }

    async fn a_bulk_job_is_paused_resumed_and_aborted_with_nothing_pending_left_unreported(db: TestDatabase) {
        let store = db.migrated_store().await;
        let job = NewBulkJob {
            id: "blk_1".into(),
            requested_by: "otto".into(),
            selection: "2 records ticked by hand".into(),
        };
        let frozen: Vec<FrozenItem> = ["k-1", "k-2"]
            .into_iter()
            .zip(0..)
            .map(|(key, position)| FrozenItem {
                position,
                record: record(key),
                version: 1,
            })
            .collect();
        store.create_bulk_job(&job, &frozen).await.expect("create");
        assert!(
            !store
                .control_bulk_job("blk_1", BulkControl::Pause)
                .await
                .expect("pause"),
            "only a running job pauses"
        );
        for position in [0, 1] {
            let preview = ItemPreview {
                evidence: ProviderEvidence::NoCharge,
                proposed: Some(ReconcileAction::RetryCharge),
            };
            store
                .note_bulk_preview("blk_1", position, 1, &preview, Duration::from_secs(60))
                .await
                .expect("preview");
        }
        store.finish_bulk_preview("blk_1").await.expect("previewed");
        let approval = JobApproval {
            applied_by: "otto".into(),
            name: "outage".into(),
            reason: "OPS-2".into(),
            choices: Vec::new(),
        };
        assert!(store.apply_bulk_job("blk_1", &approval).await.expect("apply"));
        assert!(
            store
                .control_bulk_job("blk_1", BulkControl::Pause)
                .await
                .expect("pause")
        );
        assert_eq!(
            store
                .claim_bulk_job(None, Duration::from_secs(60))
                .await
                .expect("claim"),
            None,
            "a paused job is not run"
        );
        assert!(
            store
                .control_bulk_job("blk_1", BulkControl::Resume)
                .await
                .expect("resume")
        );
        assert!(
            store
                .claim_bulk_job(None, Duration::from_secs(60))
                .await
                .expect("claim")
                .is_some()
        );
        let done = BulkItemResult {
            ok: true,
            status: Some(RecordStatus::Completed),
            message: "applied".into(),
        };
        store
            .finish_bulk_item("blk_1", 0, &done, Duration::from_secs(60))
            .await
            .expect("item");
        assert!(
            store
                .control_bulk_job("blk_1", BulkControl::Abort)
                .await
                .expect("abort")
        );
        assert!(
            !store
                .control_bulk_job("blk_1", BulkControl::Resume)
                .await
                .expect("resume")
        );
        store.finish_bulk_job("blk_1").await.expect("finish");
        let aborted = store.bulk_job("blk_1").await.expect("read").expect("job");
        assert_eq!(
            aborted.state,
            BulkJobState::Aborted,
            "finishing does not undo an abort"
        );
        assert!(store.pending_bulk_items("blk_1").await.expect("items").is_empty());
        let reports = store.bulk_job_items("blk_1", 0, 10).await.expect("items");
        assert_eq!(reports[0].result, Some(done), "what was applied stays applied");
        assert_eq!(
            reports[1]
                .result
                .as_ref()
                .map(|result| (result.ok, result.message.as_str())),
            Some((false, "not applied: the job was aborted"))
        );
    }

    /// An override request `id` for `k-1` at version 4, by ada.
    fn override_of(id: &str, outcome: OverrideOutcome) -> NewOverrideRequest {
        NewOverrideRequest {
            id: id.into(),
            scope: scope("k-1"),
            record_version: 4,
            outcome,
            requested_by: "ada".into(),
            reason: "statement".into(),
        }
    }

    async fn request(
        store: &dyn Store,
        request: &NewOverrideRequest,
        window: Duration,
    ) -> Result<(), StoreError> {
        let audit = audit("ada", "override.request");
        store.request_override(request, &audit, window).await
    }

    async fn decide(store: &dyn Store, by: &str, state: OverrideState, window: Duration) -> bool {
        store
            .decide_override(&OverrideDecision {
                id: "ovr_1",
                state,
                decided_by: by,
                reason: "checked",
                audit: None,
                window,
            })
            .await
            .expect("decide")
    }

    async fn read(store: &dyn Store, id: &str) -> OverrideRequest {
        store.override_request(id).await.expect("read").expect("request")
    }

    async fn an_override_request_is_decided_once_and_never_by_its_requester(db: TestDatabase) {
        let store = db.migrated_store().await;
        let store = store.as_ref();
        let charged = OverrideOutcome::Charged {
            charge_id: "ch_9".into(),
        };
        let first = override_of("ovr_1", charged.clone());
        request(store, &first, DAY).await.expect("request");
        let second = override_of("ovr_2", charged.clone());
        assert!(matches!(
            request(store, &second, DAY).await,
            Err(StoreError::AlreadyExists)
        ));
        assert!(
            !decide(store, "ada", OverrideState::Approved, DAY).await,
            "its requester"
        );
        assert!(decide(store, "bob", OverrideState::Approved, DAY).await);
        assert!(
            !decide(store, "cy", OverrideState::Rejected, DAY).await,
            "decided once"
        );
        store
            .finish_override("ovr_1", OverrideState::Applied, "settled")
            .await
            .expect("finish");
        let view = read(store, "ovr_1").await;
        assert_eq!(view.state, OverrideState::Applied);
        assert_eq!(view.outcome, charged);
        assert_eq!(view.decided_by.as_deref(), Some("bob"));
        assert_eq!(view.result.as_deref(), Some("settled"));
        // Decided, so the record may have another request now.
        request(store, &second, DAY).await.expect("request");
        let listed = store.override_requests(10).await.expect("list");
        assert_eq!(
            listed
                .iter()
                .map(|request| request.id.as_str())
                .collect::<Vec<_>>(),
            ["ovr_2", "ovr_1"]
        );
        assert_eq!(
            db.query_i64("select count(*) from audit_log where action = 'override.request'")
                .await,
            2,
            "the refused duplicate wrote no audit entry"
        );
    }

    async fn an_override_request_nobody_decided_in_time_expires(db: TestDatabase) {
        let store = db.migrated_store().await;
        let store = store.as_ref();
        request(store, &override_of("ovr_1", OverrideOutcome::NotCharged), DAY)
            .await
            .expect("request");
        let expire = async |window| store.expire_override_requests(window).await.expect("expire");
        assert_eq!(expire(DAY).await, 0, "still young");
        // Past its window: nobody may approve it any more.
        assert!(!decide(store, "bob", OverrideState::Approved, Duration::ZERO).await);
        assert_eq!(expire(Duration::ZERO).await, 1);
        assert_eq!(expire(Duration::ZERO).await, 0, "once");
        let view = read(store, "ovr_1").await;
        assert_eq!(view.state, OverrideState::Rejected);
        assert_eq!(view.decided_by, None, "no admin decided it");
        assert!(
            view.decision_reason
                .as_deref()
                .is_some_and(|why| why.starts_with("expired")),
            "{view:?}"
        );
        assert_eq!(
            db.query_i64(
                "select count(*) from audit_log where action = 'override.expire' \
                 and actor = 'worker:override_expiry' and target like '%k-1'"
            )
            .await,
            1
        );

        // A stale pending request does not block a new one: it is expired first.
        request(store, &override_of("ovr_2", OverrideOutcome::NotCharged), DAY)
            .await
            .expect("request");
        let stale_at_once = Duration::ZERO;
        request(
            store,
            &override_of("ovr_3", OverrideOutcome::NotCharged),
            stale_at_once,
        )
        .await
        .expect("request");
        assert_eq!(read(store, "ovr_2").await.state, OverrideState::Rejected);
        assert_eq!(read(store, "ovr_3").await.state, OverrideState::Pending);
    }

    conformance!(
        a_bulk_job_is_run_by_one_runner_at_a_time_and_resumed_after_its_lease,
        a_bulk_job_is_paused_resumed_and_aborted_with_nothing_pending_left_unreported,
        an_override_request_is_decided_once_and_never_by_its_requester,
        an_override_request_nobody_decided_in_time_expires
    );
}

mod upgrades {
    use crate::support::{TestDatabase, Violation, conformance};
    use idem::store::DatabaseTarget;
    use sqlx::migrate::Migrator;

    /// The migrations an older binary carried: those numbered up to `last`, as files.
    async fn migrations_up_to(target: &DatabaseTarget, last: i64) -> (tempfile::TempDir, Migrator) {
        let dialect = match target {
            DatabaseTarget::Postgres { .. } => "postgres",
            _ => "sqlite",
        };
        let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../migrations")
            .join(dialect);
        let dir = tempfile::tempdir().expect("temporary directory");
        for entry in std::fs::read_dir(source).expect("migrations") {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .expect("name")
                .to_owned();
            let version: i64 = name[..4].parse().expect("numbered");
            if version <= last {
                std::fs::copy(&path, dir.path().join(&name)).expect("copy");
            }
        }
        let migrator = Migrator::new(dir.path()).await.expect("migrator");
        (dir, migrator)
    }

    /// Applies the migrations numbered up to `last` to `db`, as an older binary did.
    async fn migrate_up_to(db: &TestDatabase, last: i64) {
        let (_files, older) = migrations_up_to(&db.target, last).await;
        match &db.target {
            DatabaseTarget::Postgres { url } => {
                let pool = sqlx::PgPool::connect(url).await.expect("connect");
                older.run(&pool).await.expect("older migrations");
                pool.close().await;
            }
            _ => {
                use std::str::FromStr;
                let options = sqlx::sqlite::SqliteConnectOptions::from_str(&db.url())
                    .expect("url")
                    .foreign_keys(true)
                    .create_if_missing(true);
                let pool = sqlx::SqlitePool::connect_with(options).await.expect("connect");
                older.run(&pool).await.expect("older migrations");
                pool.close().await;
            }
        }
    }

    async fn a_database_holding_payments_upgrades_through_the_business_key_change(db: TestDatabase) {
        migrate_up_to(&db, 11).await;
        db.execute(
            "insert into tenants (id, name) values ('ten_1', 'acme'); \
             insert into accounts (tenant_id, id, currency, balance_minor) values ('ten_1', 'acc_1', 'EUR', 1000); \
             insert into payments (id, tenant_id, account_id, amount_minor, currency, merchant_reference, channel, status) \
             values ('pay_1', 'ten_1', 'acc_1', 100, 'EUR', 'inv-1', 'web', 'DECLINED'); \
             insert into outbox_events (id, payment_id, event_type, payload) \
             values ('evt_1', 'pay_1', 'PaymentDeclined', '{}');",
        )
        .await
        .expect("data of the older version");

        db.migrated_store().await;
        assert_eq!(
            db.query_i64("select count(*) from payments where released_at is null")
                .await,
            1
        );
        assert_eq!(
            db.query_i64("select count(*) from outbox_events where payment_id = 'pay_1'")
                .await,
            1
        );
        let same_reference = "insert into payments (id, tenant_id, account_id, amount_minor, currency, \
             merchant_reference, channel, status) values ('pay_2', 'ten_1', 'acc_1', 100, 'EUR', 'inv-1', 'web', 'PROCESSING')";
        // The business key still holds.
        db.assert_refused(same_reference, Violation::Unique).await;
        db.execute("update payments set released_at = '2030-01-01T00:00:00Z' where id = 'pay_1'")
            .await
            .expect("release");
        db.execute(same_reference)
            .await
            .expect("a released payment's reference is free");
        let orphan = db.execute(
            "insert into outbox_events (id, payment_id, event_type, payload) values ('evt_2', 'pay_x', 'PaymentCreated', '{}')",
        );
        assert!(orphan.await.is_err(), "events still need their payment");
    }

    /// A journal written with a row per replay (before migration 0024): its replays become
    /// counts per key and minute, every retry's delay lands in its bucket, and the other rows
    /// stay as they were.
    async fn a_journal_with_a_row_per_replay_upgrades_to_counts(db: TestDatabase) {
        migrate_up_to(&db, 23).await;
        let row = |id: &str, key: &str, second: u32, status: i32, replayed: bool, delay_ms: Option<i64>| {
            format!(
                "insert into idempotency_requests (id, tenant_id, operation_name, idempotency_key, at, \
                 fingerprint, canonical_command, status_code, error_code, replayed, retry_delay_ms) values \
                 ('{id}', 'ten_1', 'create_payment', '{key}', '2026-11-29T00:{:02}:{:02}.000Z', 'f', null, {status}, \
                 null, {replayed}, {});",
                second / 60,
                second % 60,
                delay_ms.map_or("null".to_owned(), |delay| delay.to_string()),
            )
        };
        let rows = [
            row("r1", "k-1", 5, 201, false, None),
            row("r2", "k-1", 15, 201, true, Some(10_000)),
            row("r3", "k-1", 25, 201, true, Some(20_000)),
            row("r4", "k-1", 35, 409, false, Some(30_000)),
            row("r5", "k-1", 75, 201, true, Some(70_000)),
            row("r6", "k-2", 40, 409, false, None),
        ];
        db.execute(&format!(
            "insert into tenants (id, name) values ('ten_1', 'acme'); {}",
            rows.concat()
        ))
        .await
        .expect("journal of the older version");

        db.migrated_store().await;
        let ids: Vec<(String,)> = db
            .query_all("select id from idempotency_requests order by id")
            .await;
        assert_eq!(ids, [("r1",), ("r4",), ("r6",)].map(|(id,)| (id.to_owned(),)));
        type Minute = (String, i64, i64, i32);
        let minutes: Vec<Minute> = db
            .query_all(
                "select idempotency_key, cast(replays as bigint), cast(longest_delay_ms as bigint), status_code \
                 from idempotency_replays order by minute",
            )
            .await;
        assert_eq!(
            minutes,
            vec![
                ("k-1".to_owned(), 2, 20_000, 201),
                ("k-1".to_owned(), 1, 70_000, 201)
            ]
        );
        let buckets: Vec<(i64, i64, i64)> = db
            .query_all(
                "select cast(above_ms as bigint), cast(retries as bigint), cast(longest_ms as bigint) \
                 from retry_delay_buckets order by above_ms",
            )
            .await;
        assert_eq!(
            buckets,
            vec![
                (6_400, 1, 10_000),
                (12_800, 1, 20_000),
                (25_600, 1, 30_000),
                (51_200, 1, 70_000)
            ]
        );
    }

    conformance!(
        unmigrated: a_database_holding_payments_upgrades_through_the_business_key_change,
        a_journal_with_a_row_per_replay_upgrades_to_counts
    );
}
