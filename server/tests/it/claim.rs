//! The insert-first claim of create_payment, on both databases.

use crate::support::{TestDatabase, conformance, seed_tenant};
use domain::api_error::ApiError;
use domain::claim::{ClaimOutcome, NewClaim, PaymentCompletion, ProviderVerdict, Refusal, StoredResponse};
use domain::command::CreatePayment;
use domain::expiry::AfterExpiry;
use domain::fingerprint::Fingerprint;
use domain::key::IdempotencyKey;
use domain::money::Currency;
use domain::payment::{NewPayment, PaymentId};
use domain::record::{ClaimedAs, ProgressStep, RecordStatus, StoredRecord};
use domain::recovery::{ProviderFailure, UnknownCause};
use domain::scope::Scope;
use domain::tenant::TenantId;
use idem::auth::api_key::NewApiKey;
use idem::store::Store;
use std::sync::Arc;
use std::time::Duration;

struct Fixture {
    store: Arc<dyn Store>,
    tenant_id: TenantId,
    key: NewApiKey,
}

async fn fixture(db: &TestDatabase, balance: &str) -> Fixture {
    let store = db.migrated_store().await;
    let (tenant_id, key) = seed_tenant(store.as_ref(), "acme", balance).await;
    Fixture {
        store,
        tenant_id,
        key,
    }
}

impl Fixture {
    fn attempt(&self, idempotency_key: &str, body: &str) -> (NewClaim, NewPayment) {
        let command = CreatePayment::parse_json(body.as_bytes()).expect("valid command");
        let fingerprint = Fingerprint::compute(&command.fingerprint_input("2026-05-01"));
        let claim = NewClaim {
            scope: Scope {
                tenant_id: self.tenant_id.clone(),
                operation: CreatePayment::OPERATION,
                key: IdempotencyKey::parse(idempotency_key.as_bytes()).expect("key"),
            },
            fingerprint,
            created_by: self.key.id.clone(),
            response_schema_version: "2026-05-01".to_owned(),
            lease_owner: "test-instance".to_owned(),
            lease: Duration::from_secs(30),
            window: Duration::from_secs(24 * 3600),
            after_expiry: AfterExpiry::NewOperation,
        };
        let payment = NewPayment::from_command(PaymentId::generate(), self.tenant_id.clone(), &command);
        (claim, payment)
    }

    async fn claim(&self, idempotency_key: &str, body: &str) -> ClaimOutcome {
        let (claim, payment) = self.attempt(idempotency_key, body);
        self.store
            .claim_create_payment(&claim, &payment, &insufficient_funds())
            .await
            .expect("claim")
    }

    /// The claim and payment of a first request, claimed (and now owned, lease version 1).
    async fn claimed(&self, idempotency_key: &str, body: &str) -> (NewClaim, NewPayment) {
        let (claim, payment) = self.attempt(idempotency_key, body);
        let outcome = self
            .store
            .claim_create_payment(&claim, &payment, &insufficient_funds())
            .await
            .expect("claim");
        assert!(matches!(outcome, ClaimOutcome::Claimed { .. }), "{outcome:?}");
        (claim, payment)
    }

    /// Whether the completion by the owner at `lease_version` was written.
    async fn completes(&self, claim: &NewClaim, lease_version: i64, completion: &PaymentCompletion) -> bool {
        self.store
            .complete_create_payment(&claim.scope, lease_version, completion)
            .await
            .expect("complete")
    }

    /// The record under `scope`, which must exist.
    async fn record(&self, scope: &Scope) -> StoredRecord {
        self.store
            .load_record(scope)
            .await
            .expect("load")
            .expect("record")
            .record
    }
}

fn completion(payment: &NewPayment, verdict: ProviderVerdict) -> PaymentCompletion {
    PaymentCompletion {
        audit: None,
        payment_id: payment.id.clone(),
        verdict,
        provider_charge_id: "ch_000001".to_owned(),
        event_id: domain::payment::new_event_id(),
        event_payload: "{}".to_owned(),
        response: StoredResponse {
            status: if verdict == ProviderVerdict::Authorized {
                201
            } else {
                402
            },
            headers: vec![("location".into(), format!("/payments/{}", payment.id))],
            body: format!(r#"{{"paymentId":"{}"}}"#, payment.id).into_bytes(),
        },
    }
}

fn insufficient_funds() -> StoredResponse {
    StoredResponse {
        status: 422,
        headers: vec![("content-type".into(), "application/json".into())],
        body: br#"{"errorCode":"INSUFFICIENT_FUNDS"}"#.to_vec(),
    }
}

fn request_body(amount: &str, reference: &str) -> String {
    format!(
        r#"{{"accountId":"acc_1","amount":"{amount}","currency":"EUR","merchantReference":"{reference}"}}"#
    )
}

async fn balance(db: &TestDatabase, fixture: &Fixture) -> i64 {
    let sql = format!(
        "select balance_minor from accounts where tenant_id = '{}' and id = 'acc_1'",
        fixture.tenant_id
    );
    db.query_i64(&sql).await
}

async fn the_winner_commits_record_payment_hold_and_event_together(db: TestDatabase) {
    let fixture = fixture(&db, "100.00").await;
    assert!(matches!(
        fixture.claim("k1", &request_body("10.00", "inv-1")).await,
        ClaimOutcome::Claimed { lease_version: 1, .. }
    ));
    let record = fixture
        .record(&fixture.attempt("k1", &request_body("10.00", "inv-1")).0.scope)
        .await;
    assert_eq!(record.status, RecordStatus::InProgress);
    assert_eq!(record.progress_step, ProgressStep::ProviderRequestSent);
    assert_eq!(record.lease_version, 1);
    assert!(
        record
            .locked_until
            .is_some_and(|until| until > record.expires_at - chrono::Duration::hours(24))
    );
    assert_eq!(balance(&db, &fixture).await, 9_000, "the amount is held");
    assert_eq!(
        db.query_i64("select count(*) from payments where status = 'PROCESSING'")
            .await,
        1
    );
    assert_eq!(
        db.query_i64("select count(*) from outbox_events where event_type = 'PaymentCreated'")
            .await,
        1
    );
}

async fn a_second_claim_finds_the_first_and_writes_nothing(db: TestDatabase) {
    let fixture = fixture(&db, "100.00").await;
    fixture.claim("k1", &request_body("10.00", "inv-1")).await;
    match fixture.claim("k1", &request_body("10.00", "inv-1")).await {
        ClaimOutcome::Existing(found) => assert_eq!(found.record.status, RecordStatus::InProgress),
        other => panic!("expected the existing record, got {other:?}"),
    }
    assert_eq!(db.query_i64("select count(*) from payments").await, 1);
    assert_eq!(balance(&db, &fixture).await, 9_000, "held once");
}

async fn concurrent_claims_of_one_key_have_exactly_one_winner(db: TestDatabase) {
    let fixture = Arc::new(fixture(&db, "1000.00").await);
    let attempts: Vec<_> = (0..16)
        .map(|_| {
            let fixture = fixture.clone();
            tokio::spawn(async move { fixture.claim("storm", &request_body("10.00", "inv-storm")).await })
        })
        .collect();
    let mut winners = 0;
    for attempt in attempts {
        match attempt.await.expect("task") {
            ClaimOutcome::Claimed { .. } => winners += 1,
            ClaimOutcome::Existing(_) => {}
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(winners, 1);
    assert_eq!(db.query_i64("select count(*) from payments").await, 1);
    assert_eq!(db.query_i64("select count(*) from outbox_events").await, 1);
    assert_eq!(balance(&db, &fixture).await, 99_000);
}

async fn insufficient_funds_binds_the_key_to_its_answer(db: TestDatabase) {
    let fixture = fixture(&db, "5.00").await;
    assert!(matches!(
        fixture.claim("k1", &request_body("10.00", "inv-1")).await,
        ClaimOutcome::Bound {
            error: ApiError::InsufficientFunds,
            ..
        }
    ));
    let scope = fixture.attempt("k1", &request_body("10.00", "inv-1")).0.scope;
    let record = fixture.record(&scope).await;
    assert_eq!(record.status, RecordStatus::FailedReplayable);
    assert_eq!(
        fixture.store.load_response(&scope).await.expect("load"),
        Some(insufficient_funds())
    );
    assert_eq!(balance(&db, &fixture).await, 500, "nothing held");
    assert_eq!(db.query_i64("select count(*) from payments").await, 0);
    assert_eq!(db.query_i64("select count(*) from outbox_events").await, 0);
}

async fn a_refused_command_leaves_no_record(db: TestDatabase) {
    let fixture = fixture(&db, "100.00").await;
    let unknown_account = r#"{"accountId":"acc_9","amount":"1.00","currency":"EUR","merchantReference":"r"}"#;
    assert_eq!(
        fixture.claim("k1", unknown_account).await,
        ClaimOutcome::Refused {
            refusal: Refusal::AccountNotFound,
            claimed_as: ClaimedAs::New
        }
    );
    let wrong_currency = r#"{"accountId":"acc_1","amount":"1.00","currency":"USD","merchantReference":"r"}"#;
    assert_eq!(
        fixture.claim("k2", wrong_currency).await,
        ClaimOutcome::Refused {
            refusal: Refusal::CurrencyMismatch {
                account_currency: Currency::Eur
            },
            claimed_as: ClaimedAs::New
        }
    );
    assert_eq!(db.query_i64("select count(*) from idempotency_records").await, 0);
    assert_eq!(balance(&db, &fixture).await, 10_000);
}

async fn the_merchant_reference_stops_a_second_payment_under_another_key(db: TestDatabase) {
    let fixture = fixture(&db, "100.00").await;
    let (first_claim, first_payment) = fixture.attempt("k1", &request_body("10.00", "inv-7781"));
    fixture
        .store
        .claim_create_payment(&first_claim, &first_payment, &insufficient_funds())
        .await
        .expect("claim");
    assert_eq!(
        fixture
            .claim("k2-new-random-key", &request_body("10.00", "inv-7781"))
            .await,
        ClaimOutcome::Refused {
            refusal: Refusal::DuplicateMerchantReference {
                payment_id: first_payment.id.clone()
            },
            claimed_as: ClaimedAs::New
        }
    );
    assert_eq!(
        db.query_i64("select count(*) from idempotency_records").await,
        1,
        "k2 left no record"
    );
    assert_eq!(balance(&db, &fixture).await, 9_000, "held once");
}

async fn the_same_key_in_another_tenant_is_another_operation(db: TestDatabase) {
    let fixture = fixture(&db, "100.00").await;
    assert!(matches!(
        fixture.claim("shared-key", &request_body("10.00", "inv-1")).await,
        ClaimOutcome::Claimed { .. }
    ));
    let (tenant_id, key) = seed_tenant(fixture.store.as_ref(), "globex", "100.00").await;
    let globex = Fixture {
        store: fixture.store.clone(),
        tenant_id,
        key,
    };
    assert!(matches!(
        globex.claim("shared-key", &request_body("10.00", "inv-1")).await,
        ClaimOutcome::Claimed { .. }
    ));
    assert_eq!(
        db.query_i64(
            "select count(distinct tenant_id) from idempotency_records where idempotency_key = 'shared-key'"
        )
        .await,
        2,
        "one record per tenant"
    );
    assert_eq!(
        db.query_i64("select count(distinct tenant_id) from payments")
            .await,
        2,
        "one payment each"
    );
}

conformance!(
    the_winner_commits_record_payment_hold_and_event_together,
    a_second_claim_finds_the_first_and_writes_nothing,
    concurrent_claims_of_one_key_have_exactly_one_winner,
    insufficient_funds_binds_the_key_to_its_answer,
    a_refused_command_leaves_no_record,
    the_merchant_reference_stops_a_second_payment_under_another_key,
    the_same_key_in_another_tenant_is_another_operation
);

async fn an_authorisation_completes_the_record_with_its_response(db: TestDatabase) {
    let fixture = fixture(&db, "100.00").await;
    let (claim, payment) = fixture.claimed("k1", &request_body("10.00", "inv-1")).await;
    let done = completion(&payment, ProviderVerdict::Authorized);
    assert!(fixture.completes(&claim, 1, &done).await);

    let record = fixture.record(&claim.scope).await;
    assert_eq!(record.status, RecordStatus::Completed);
    assert_eq!(record.progress_step, ProgressStep::Completed);
    assert_eq!(
        fixture.store.load_response(&claim.scope).await.expect("load"),
        Some(done.response.clone())
    );
    assert_eq!(
        db.query_i64(
            "select count(*) from payments where status = 'PENDING' and provider_charge_id = 'ch_000001'"
        )
        .await,
        1
    );
    assert_eq!(
        db.query_i64("select count(*) from outbox_events where event_type = 'PaymentAuthorized'")
            .await,
        1
    );
    assert_eq!(balance(&db, &fixture).await, 9_000, "the amount stays taken");
}

async fn a_decline_is_replayable_and_releases_the_hold(db: TestDatabase) {
    let fixture = fixture(&db, "100.00").await;
    let (claim, payment) = fixture.claimed("k1", &request_body("10.00", "inv-1")).await;
    let declined = completion(&payment, ProviderVerdict::Declined);
    assert!(fixture.completes(&claim, 1, &declined).await);
    let record = fixture.record(&claim.scope).await;
    assert_eq!(record.status, RecordStatus::FailedReplayable);
    assert_eq!(
        db.query_i64("select count(*) from payments where status = 'DECLINED'")
            .await,
        1
    );
    assert_eq!(
        db.query_i64("select count(*) from outbox_events where event_type = 'PaymentDeclined'")
            .await,
        1
    );
    assert_eq!(balance(&db, &fixture).await, 10_000, "the hold is released");
}

async fn an_owner_without_the_lease_writes_nothing(db: TestDatabase) {
    let fixture = fixture(&db, "100.00").await;
    let (claim, payment) = fixture.claimed("k1", &request_body("10.00", "inv-1")).await;
    let stale = completion(&payment, ProviderVerdict::Declined);
    assert!(
        !fixture
            .store
            .complete_create_payment(&claim.scope, 2, &stale)
            .await
            .expect("fenced")
    );
    assert!(
        !fixture
            .store
            .mark_outcome_unknown(&claim.scope, 2, &timed_out())
            .await
            .expect("fenced")
    );
    let record = fixture.record(&claim.scope).await;
    assert_eq!(record.status, RecordStatus::InProgress);
    assert_eq!(
        fixture.store.load_response(&claim.scope).await.expect("load"),
        None
    );
    assert_eq!(
        db.query_i64("select count(*) from outbox_events").await,
        1,
        "PaymentCreated only"
    );
    assert_eq!(balance(&db, &fixture).await, 9_000);
}

/// A charge request that timed out, as the engine notes it.
fn timed_out() -> ProviderFailure {
    ProviderFailure {
        cause: Some(UnknownCause::TimedOut),
        words: "charge request: timed out".to_owned(),
    }
}

async fn a_lost_answer_leaves_the_outcome_unknown_until_recovery(db: TestDatabase) {
    let fixture = fixture(&db, "100.00").await;
    let (claim, payment) = fixture.claimed("k1", &request_body("10.00", "inv-1")).await;
    assert!(
        fixture
            .store
            .mark_outcome_unknown(&claim.scope, 1, &timed_out())
            .await
            .expect("mark")
    );
    let record = fixture.record(&claim.scope).await;
    assert_eq!(record.status, RecordStatus::UnknownRequiresRecovery);
    assert_eq!(record.locked_until, None);
    let why = "select unknown_cause || ' / ' || last_error from idempotency_records \
               where last_error_at is not null";
    assert_eq!(
        db.query_one::<String>(why).await,
        "timed_out / charge request: timed out"
    );
    let done = completion(&payment, ProviderVerdict::Authorized);
    assert!(
        !fixture
            .store
            .complete_create_payment(&claim.scope, 1, &done)
            .await
            .expect("complete"),
        "only an IN_PROGRESS record is completed by its owner; recovery resolves unknown ones"
    );
    assert_eq!(
        db.query_i64("select count(*) from payments where status = 'PROCESSING'")
            .await,
        1
    );
}

async fn a_refused_retry_after_the_window_is_still_noted_on_its_record(db: TestDatabase) {
    let fixture = fixture(&db, "100.00").await;
    let body = request_body("10.00", "inv-1");
    let (mut claim, payment) = fixture.attempt("k1", &body);
    claim.window = Duration::from_millis(200);
    fixture
        .store
        .claim_create_payment(&claim, &payment, &insufficient_funds())
        .await
        .expect("claim");
    let done = completion(&payment, ProviderVerdict::Authorized);
    assert!(fixture.completes(&claim, 1, &done).await);
    db.until_passed("idempotency_records", "expires_at", "idempotency_key = 'k1'")
        .await;

    // The same command after the window: renewed, then stopped by its own merchant reference.
    assert_eq!(
        fixture.claim("k1", &body).await,
        ClaimOutcome::Refused {
            refusal: Refusal::DuplicateMerchantReference {
                payment_id: payment.id.clone()
            },
            claimed_as: ClaimedAs::AfterExpiry
        }
    );
    let record = fixture.record(&claim.scope).await;
    assert_eq!(record.status, RecordStatus::Completed, "the renewal rolled back");
    assert_eq!(
        db.query_i64("select cast(expired_retries as bigint) from idempotency_records")
            .await,
        1,
        "the expired retry is noted all the same"
    );
}

conformance!(
    an_authorisation_completes_the_record_with_its_response,
    a_decline_is_replayable_and_releases_the_hold,
    an_owner_without_the_lease_writes_nothing,
    a_lost_answer_leaves_the_outcome_unknown_until_recovery,
    a_refused_retry_after_the_window_is_still_noted_on_its_record
);

async fn a_stale_owner_is_fenced_out_by_the_one_taker(db: TestDatabase) {
    let fixture = fixture(&db, "100.00").await;
    let (mut claim, payment) = fixture.attempt("k1", &request_body("10.00", "inv-1"));
    claim.lease = Duration::from_millis(200);
    fixture
        .store
        .claim_create_payment(&claim, &payment, &insufficient_funds())
        .await
        .expect("claim");
    assert_eq!(
        fixture
            .store
            .take_over(&claim.scope, 1, "taker", Duration::from_secs(30))
            .await
            .expect("try"),
        None,
        "a live lease is not taken"
    );
    db.until_passed("idempotency_records", "locked_until", "idempotency_key = 'k1'")
        .await;

    // Many takers at once: exactly one wins.
    let store = fixture.store.clone();
    let takers: Vec<_> = (0..8)
        .map(|index| {
            let (store, scope) = (store.clone(), claim.scope.clone());
            tokio::spawn(async move {
                store
                    .take_over(&scope, 1, &format!("taker-{index}"), Duration::from_secs(30))
                    .await
            })
        })
        .collect();
    let mut winners = Vec::new();
    for taker in takers {
        if let Some((version, _)) = taker.await.expect("task").expect("take over") {
            winners.push(version);
        }
    }
    assert_eq!(winners, vec![2], "one taker, with the next lease version");

    // The paused first owner wakes up: none of its writes land.
    let stale = completion(&payment, ProviderVerdict::Declined);
    assert!(
        !fixture
            .store
            .complete_create_payment(&claim.scope, 1, &stale)
            .await
            .expect("fenced")
    );
    assert!(
        !fixture
            .store
            .mark_outcome_unknown(&claim.scope, 1, &timed_out())
            .await
            .expect("fenced")
    );
    let done = completion(&payment, ProviderVerdict::Authorized);
    assert!(
        fixture
            .store
            .complete_create_payment(&claim.scope, 2, &done)
            .await
            .expect("complete")
    );
    let record = fixture.record(&claim.scope).await;
    assert_eq!(record.status, RecordStatus::Completed);
    assert_eq!(record.lease_version, 2);
    assert_eq!(
        db.query_i64("select count(*) from payments where status = 'PENDING'")
            .await,
        1
    );
}

conformance!(a_stale_owner_is_fenced_out_by_the_one_taker);

/// Nothing the store allows changes a final record (COMPLETED, or FAILED_REPLAYABLE) before
/// its window ends, which is what lets an instance answer its retries from memory
/// (`engine::final_answers`). Every write a record can meet is tried on one, and the look-up
/// finds the same record and the same stored response after each. (create_refund's claim
/// and completion are the same statements, `CLAIM_RECORD` and `SETTLE_RECORD`.)
async fn a_final_record_cannot_change_before_its_window_ends(db: TestDatabase) {
    let fixture = fixture(&db, "100.00").await;
    let store = &fixture.store;
    for (key, verdict, status) in [
        ("k-final", ProviderVerdict::Authorized, RecordStatus::Completed),
        (
            "k-declined",
            ProviderVerdict::Declined,
            RecordStatus::FailedReplayable,
        ),
    ] {
        let body = request_body("10.00", &format!("inv-{key}"));
        let (claim, payment) = fixture.claimed(key, &body).await;
        assert!(fixture.completes(&claim, 1, &completion(&payment, verdict)).await);
        let scope = &claim.scope;
        let look = async || {
            let found = store.look_up(scope).await.expect("look up").expect("the record");
            (found.at.record, found.response)
        };
        let before = look().await;
        assert_eq!(before.0.status, status);
        assert!(before.1.is_some(), "a final record has its response");

        // The claim again, with the same command and with another.
        for body in [body.clone(), request_body("99.00", &format!("inv-{key}-other"))] {
            let (again, again_payment) = fixture.attempt(key, &body);
            let outcome = store
                .claim_create_payment(&again, &again_payment, &insufficient_funds())
                .await
                .expect("claim");
            assert!(matches!(outcome, ClaimOutcome::Existing(_)), "{key}: {outcome:?}");
        }
        // Every owner's and operator's write, at the record's lease version and the next.
        for lease_version in [1, 2] {
            let other = completion(&payment, ProviderVerdict::Authorized);
            assert!(!fixture.completes(&claim, lease_version, &other).await, "{key}");
            assert!(
                !store
                    .mark_outcome_unknown(scope, lease_version, &timed_out())
                    .await
                    .expect("mark"),
                "{key}"
            );
            let taken = store
                .take_over(scope, lease_version, "taker", Duration::from_secs(30))
                .await
                .expect("take over");
            assert_eq!(taken, None, "{key}");
            let release = domain::claim::KeyRelease {
                payment_id: payment.id.clone(),
                event_id: domain::payment::new_event_id(),
                event_payload: "{}".to_owned(),
                audit: crate::support::test_audit(),
            };
            assert!(
                !store
                    .release_key(scope, lease_version, &release)
                    .await
                    .expect("release"),
                "{key}"
            );
        }
        // The cleanup, and the note of a retry after the window (a counter beside the record).
        store
            .purge_expired(1_000, Duration::from_secs(5))
            .await
            .expect("purge");
        store.note_expired_retry(scope).await.expect("note");
        assert_eq!(look().await, before, "{key}: unchanged");
    }
}

conformance!(a_final_record_cannot_change_before_its_window_ends);
