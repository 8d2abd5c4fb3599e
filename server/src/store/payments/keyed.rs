//! create_payment's keyed part of the store, as create_refund's is in `refunds.rs`: the claim
//! of a scoped key with the payment's local transaction, the owner's completion, and an
//! operator's release of a key the provider never charged. Each is one statement that is its
//! own transaction where the dialect can write several tables in one (PostgreSQL), and the
//! record's steps (`records/claim.rs`) with the payment's (`mod.rs`) in one transaction otherwise.

use super::PaymentStatements;
use super::local::{
    LocalStep, create_payment_in, insert_event_in, no_longer_processing, payment_outcome, refusal,
    release_hold_in, settle_payment_in,
};
use crate::crash::{CrashPoint, crash_point};
use crate::store::dialect::{Dialect, RowsAffected, SqlStore};
use crate::store::error::StoreError;
use crate::store::operators::insert_audit;
use crate::store::records::{
    LocalOutcome, RELEASE_RECORD, RecordStatements, begin_settled, bind_claim, claim_record_in,
};
use chrono::{DateTime, Utc};
use domain::api_error::ApiError;
use domain::claim::{ClaimOutcome, KeyRelease, NewClaim, PaymentCompletion, ProviderVerdict, StoredResponse};
use domain::payment::{NewPayment, new_event_id};
use domain::scope::Scope;
use sqlx::Database;
use sqlx::query::QueryAs;

#[async_trait::async_trait]
pub trait KeyedPaymentStore: Send + Sync {
    /// The local transaction of a new create_payment: insert-first claim of the scoped key,
    /// account check, amount held, payment row and its PaymentCreated event, all committed
    /// together (or nothing, when the claim finds an existing record or the command cannot be
    /// executed). `insufficient_funds` is the answer the key is bound to when the balance is
    /// too low.
    async fn claim_create_payment(
        &self,
        claim: &NewClaim,
        payment: &NewPayment,
        insufficient_funds: &StoredResponse,
    ) -> Result<ClaimOutcome, StoreError>;

    /// The completion transaction: payment status and charge id, the hold released when
    /// declined, the outcome's event, and the record settled (COMPLETED for an authorisation,
    /// FAILED_REPLAYABLE for a decline) with its response. Conditional on `lease_version`:
    /// `Ok(false)` means another owner took over and nothing was written.
    async fn complete_create_payment(
        &self,
        scope: &Scope,
        lease_version: i64,
        completion: &PaymentCompletion,
    ) -> Result<bool, StoreError>;

    /// An operator's release of a key whose payment the provider never charged: the record
    /// (still needing an operator, still at `previewed_version`) becomes FAILED_RETRYABLE with
    /// a higher lease version, its payment DECLINED and released (hold returned, merchant
    /// reference freed), with a PaymentDeclined event and the audit entry, in one
    /// transaction. `false` (nothing written) when the record changed since the preview.
    async fn release_key(
        &self,
        scope: &Scope,
        previewed_version: i64,
        release: &KeyRelease,
    ) -> Result<bool, StoreError>;
}

/// create_payment's statements that differ by dialect.
pub trait KeyedPaymentStatements {
    /// create_payment's claim at once: the claim ([`claim_record`](crate::store::records::claim_record)'s
    /// `$1`..`$14`, `$8` the payment id), a renewed record's old response deleted, the hold,
    /// the payment and its PaymentCreated event, each only if the one before it happened.
    /// `$15` amount, `$16` account, `$17` currency, `$18` merchant reference, `$19` channel,
    /// `$20` event id, `$21` event payload. Returns the claim's lease version, expiry and how
    /// it was claimed, with the payment's creation time ([`ClaimedAtOnce`]).
    /// - [`AtOnce::Statement`]: no row means the key's record exists. When no hold can be
    ///   taken (the account refuses, or lacks the funds) it raises `idem:not_held` and writes
    ///   nothing.
    /// - [`AtOnce::Script`]: no row means some step was not written (the record exists, or no
    ///   hold): the transaction is rolled back.
    ///
    /// Either way the claim's steps one by one then decide and name the refusal.
    const CLAIM_PAYMENT_AT_ONCE: AtOnce;
    /// create_payment's completion at once likewise: [`settle_record`](crate::store::records::settle_record)'s
    /// `$1`..`$7`, then the response (`$8` headers, `$9` body), the payment's outcome (`$10`
    /// status, `$11` payment id; `$3` the charge id), its hold given back when `$12` (a
    /// decline), its event (`$13` id, `$14` type, `$15` payload). Returns a count ([`Settled`]).
    /// - [`AtOnce::Statement`]: the records it settled, 0 for an owner fenced out. A record
    ///   settled whose payment is no longer PROCESSING raises `idem:payment_not_processing`
    ///   and writes nothing.
    /// - [`AtOnce::Script`]: 1 when every step was written; 0 otherwise, and the transaction is
    ///   rolled back for the steps one by one to tell a fenced-out owner from a payment no
    ///   longer PROCESSING.
    const COMPLETE_PAYMENT_AT_ONCE: AtOnce;
}

/// How a dialect sends create_payment's claim or its completion in one go: the hot path's two
/// writes, which the steps one by one (`create_payment_in`, `settle_payment_in`) would send as
/// five to seven statements.
pub enum AtOnce {
    /// One statement that is its own transaction (PostgreSQL's data-modifying `with`): one
    /// round trip, without BEGIN or COMMIT.
    Statement(&'static str),
    /// Statements in one string, inside a write transaction (SQLite): sqlx runs them all in one
    /// command to the connection's worker thread and binds each statement's numbered
    /// parameters from the same arguments, so the transaction is one hand-off (the script, with
    /// its savepoint's opening in front: `SqlStore::begin_with`) instead of seven.
    Script(&'static str),
}

/// A row of [`KeyedPaymentStatements::CLAIM_PAYMENT_AT_ONCE`].
#[derive(sqlx::FromRow)]
struct ClaimedAtOnce {
    lease_version: i64,
    expires_at: DateTime<Utc>,
    claimed_as: String,
    created_at: DateTime<Utc>,
}

/// A row of [`KeyedPaymentStatements::COMPLETE_PAYMENT_AT_ONCE`].
#[derive(sqlx::FromRow)]
struct Settled {
    records: i64,
}

/// Why a statement that is its own transaction refused its whole work (it raised
/// `idem:<reason>`, so it wrote nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AtOnceRefusal {
    /// The claim could take no hold: the steps one by one name the refusal.
    NotHeld,
    /// The completion settled a record whose payment is no longer PROCESSING.
    PaymentNotProcessing,
}

impl AtOnceRefusal {
    fn of(error: &sqlx::Error) -> Option<AtOnceRefusal> {
        let sqlx::Error::Database(error) = error else {
            return None;
        };
        // PL/pgSQL's `raise exception` (`idem_refuse`, migration 0025).
        if error.code().as_deref() != Some("P0001") {
            return None;
        }
        match error.message() {
            "idem:not_held" => Some(AtOnceRefusal::NotHeld),
            "idem:payment_not_processing" => Some(AtOnceRefusal::PaymentNotProcessing),
            _ => None,
        }
    }
}

impl From<AtOnceRefusal> for StoreError {
    fn from(refusal: AtOnceRefusal) -> Self {
        StoreError::Corrupt(format!("a statement refused its work: {refusal:?}"))
    }
}

impl ClaimedAtOnce {
    fn outcome(self) -> Result<ClaimOutcome, StoreError> {
        Ok(ClaimOutcome::Claimed {
            lease_version: self.lease_version,
            expires_at: self.expires_at,
            created_at: self.created_at,
            claimed_as: StoreError::parse_stored("claimed_as", &self.claimed_as)?,
        })
    }
}

/// [`KeyedPaymentStatements::CLAIM_PAYMENT_AT_ONCE`]'s parameters.
fn bind_claim_payment<'q, D: Dialect, O>(
    query: QueryAs<'q, D, O, <D as Database>::Arguments<'q>>,
    claim: &'q NewClaim,
    payment: &'q NewPayment,
    event_id: &'q str,
    event: &'q str,
) -> QueryAs<'q, D, O, <D as Database>::Arguments<'q>> {
    bind_claim(query, claim, "payment", payment.id.as_str())
        .bind(payment.amount.minor_units())
        .bind(payment.account_id.as_str())
        .bind(payment.amount.currency().code())
        .bind(payment.merchant_reference.as_str())
        .bind(payment.channel.as_str())
        .bind(event_id)
        .bind(event)
}

/// [`KeyedPaymentStatements::COMPLETE_PAYMENT_AT_ONCE`]'s parameters.
fn bind_completion<'q, D: Dialect, O>(
    query: QueryAs<'q, D, O, <D as Database>::Arguments<'q>>,
    scope: &'q Scope,
    lease_version: i64,
    record_status: &'q str,
    completion: &'q PaymentCompletion,
) -> QueryAs<'q, D, O, <D as Database>::Arguments<'q>> {
    let (payment_status, event_type) = payment_outcome(completion.verdict);
    query
        .bind(record_status)
        .bind(i32::from(completion.response.status))
        .bind(completion.provider_charge_id.as_str())
        .bind(scope.tenant_id.as_str())
        .bind(scope.operation.as_str())
        .bind(scope.key.as_str())
        .bind(lease_version)
        .bind(completion.response.headers_json())
        .bind(completion.response.body.as_slice())
        .bind(payment_status)
        .bind(completion.payment_id.as_str())
        .bind(completion.verdict == ProviderVerdict::Declined)
        .bind(completion.event_id.as_str())
        .bind(event_type)
        .bind(completion.event_payload.as_str())
}

impl<D: Dialect + RecordStatements + PaymentStatements + KeyedPaymentStatements> SqlStore<D> {
    /// create_payment's claim at once ([`KeyedPaymentStatements::CLAIM_PAYMENT_AT_ONCE`]), for
    /// the common case: the key is free and the account takes the hold. `None` when it is not
    /// that case and nothing was written: the claim's steps one by one then decide and name
    /// the refusal.
    async fn claim_payment_at_once(
        &self,
        claim: &NewClaim,
        payment: &NewPayment,
    ) -> Result<Option<ClaimOutcome>, StoreError> {
        let event_id = new_event_id();
        let event = payment.created_event(&event_id);
        let query = |sql| bind_claim_payment(sqlx::query_as(sql), claim, payment, &event_id, &event);
        match D::CLAIM_PAYMENT_AT_ONCE {
            AtOnce::Statement(statement) => {
                // A crash here or while the statement runs leaves nothing, as inside a
                // transaction: the statement is one.
                crash_point(CrashPoint::InsideLocalTransaction);
                let claimed = query(D::sql(statement)).fetch_optional(&self.writer).await;
                let claimed: Option<ClaimedAtOnce> = match claimed {
                    Ok(claimed) => claimed,
                    Err(error) => match AtOnceRefusal::of(&error) {
                        Some(AtOnceRefusal::NotHeld) => return Ok(None),
                        Some(refusal) => return Err(refusal.into()),
                        None => match StoreError::from(error) {
                            // The merchant reference is taken by another payment.
                            StoreError::AlreadyExists => return Ok(None),
                            error => return Err(error),
                        },
                    },
                };
                match claimed {
                    Some(claimed) => claimed.outcome().map(Some),
                    None => self.existing_record(&claim.scope).await.map(Some),
                }
            }
            AtOnce::Script(script) => {
                let (mut tx, script) = self.begin_with(D::sql(script)).await?;
                let claimed: Option<ClaimedAtOnce> = match query(script).fetch_optional(&mut *tx).await {
                    Ok(claimed) => claimed,
                    Err(error) => match StoreError::from(error) {
                        // The merchant reference is taken by another payment.
                        StoreError::AlreadyExists => None,
                        error => return Err(error),
                    },
                };
                crash_point(CrashPoint::InsideLocalTransaction);
                let Some(claimed) = claimed else {
                    tx.rollback().await?;
                    return Ok(None);
                };
                tx.commit().await?;
                claimed.outcome().map(Some)
            }
        }
    }

    /// create_payment's completion at once ([`KeyedPaymentStatements::COMPLETE_PAYMENT_AT_ONCE`]),
    /// with an operator's audit entry beside it in one transaction. `None` when a script wrote
    /// nothing: the steps one by one then tell why.
    async fn complete_payment_at_once(
        &self,
        scope: &Scope,
        lease_version: i64,
        record_status: &str,
        completion: &PaymentCompletion,
    ) -> Result<Option<bool>, StoreError> {
        // What a completion that wrote nothing means: a statement's fence held this owner
        // out; a script leaves it to the steps one by one to say why.
        let (sql, nothing_written) = match D::COMPLETE_PAYMENT_AT_ONCE {
            AtOnce::Statement(statement) => (D::sql(statement), Some(false)),
            AtOnce::Script(script) => (D::sql(script), None),
        };
        let query = |sql| {
            bind_completion(
                sqlx::query_as(sql),
                scope,
                lease_version,
                record_status,
                completion,
            )
        };
        let refused = |error: sqlx::Error| match AtOnceRefusal::of(&error) {
            Some(AtOnceRefusal::PaymentNotProcessing) => no_longer_processing(&completion.payment_id),
            Some(refusal) => refusal.into(),
            None => StoreError::from(error),
        };
        // A statement is its own transaction; a script, or an audit entry beside the
        // statement, needs one.
        if matches!(D::COMPLETE_PAYMENT_AT_ONCE, AtOnce::Statement(_)) && completion.audit.is_none() {
            let settled: Settled = query(sql).fetch_one(&self.writer).await.map_err(refused)?;
            return Ok(if settled.records > 0 {
                Some(true)
            } else {
                nothing_written
            });
        }
        let (mut tx, sql) = self.begin_with(sql).await?;
        let settled: Settled = query(sql).fetch_one(&mut *tx).await.map_err(refused)?;
        if settled.records == 0 {
            tx.rollback().await?;
            return Ok(nothing_written);
        }
        if let Some(audit) = &completion.audit {
            insert_audit(&mut tx, audit).await?;
        }
        tx.commit().await?;
        Ok(Some(true))
    }
}

#[async_trait::async_trait]
impl<D: Dialect + RecordStatements + PaymentStatements + KeyedPaymentStatements> KeyedPaymentStore
    for SqlStore<D>
{
    async fn claim_create_payment(
        &self,
        claim: &NewClaim,
        payment: &NewPayment,
        insufficient_funds: &StoredResponse,
    ) -> Result<ClaimOutcome, StoreError> {
        if let Some(outcome) = self.claim_payment_at_once(claim, payment).await? {
            return Ok(outcome);
        }
        let scope = &claim.scope;
        let mut tx = self.begin().await?;
        let Some(claimed) = claim_record_in(&mut tx, claim, "payment", payment.id.as_str()).await? else {
            return self.existing(tx, scope).await;
        };
        let local = match create_payment_in(&mut tx, payment, Some(scope.key.as_str())).await? {
            LocalStep::Created(created_at) => LocalOutcome::Created(created_at),
            LocalStep::InsufficientFunds => LocalOutcome::Bound {
                error: ApiError::InsufficientFunds,
                response: insufficient_funds.clone(),
            },
            refused => LocalOutcome::Refused(refused),
        };
        self.finish_claim(tx, scope, claimed, local, |refused| {
            refusal(&self.pool, refused, payment)
        })
        .await
    }

    async fn complete_create_payment(
        &self,
        scope: &Scope,
        lease_version: i64,
        completion: &PaymentCompletion,
    ) -> Result<bool, StoreError> {
        let record_status = match completion.verdict {
            ProviderVerdict::Authorized => "COMPLETED",
            ProviderVerdict::Declined => "FAILED_REPLAYABLE",
        };
        if let Some(settled) = self
            .complete_payment_at_once(scope, lease_version, record_status, completion)
            .await?
        {
            return Ok(settled);
        }
        let Some(mut tx) = begin_settled(
            self,
            scope,
            lease_version,
            record_status,
            &completion.response,
            &completion.provider_charge_id,
        )
        .await?
        else {
            return Ok(false);
        };
        settle_payment_in(&mut tx, completion).await?;
        if let Some(audit) = &completion.audit {
            insert_audit(&mut tx, audit).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    async fn release_key(
        &self,
        scope: &Scope,
        previewed_version: i64,
        release: &KeyRelease,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let released: Option<Option<String>> = sqlx::query_scalar(D::sql(RELEASE_RECORD))
            .bind(scope.tenant_id.as_str())
            .bind(scope.operation.as_str())
            .bind(scope.key.as_str())
            .bind(previewed_version)
            .fetch_optional(&mut *tx)
            .await?;
        match released {
            None => {
                tx.rollback().await?;
                return Ok(false);
            }
            Some(payment_id) if payment_id.as_deref() != Some(release.payment_id.as_str()) => {
                return Err(StoreError::Corrupt(format!(
                    "record's payment {payment_id:?} is not {}",
                    release.payment_id
                )));
            }
            Some(_) => {}
        }
        let declined = sqlx::query(D::sql(super::RELEASE_PAYMENT))
            .bind(release.payment_id.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if declined == 0 {
            return Err(StoreError::Corrupt(format!(
                "payment {} is no longer PROCESSING",
                release.payment_id
            )));
        }
        release_hold_in(&mut tx, release.payment_id.as_str()).await?;
        insert_event_in(
            &mut tx,
            &release.event_id,
            release.payment_id.as_str(),
            "PaymentDeclined",
            &release.event_payload,
        )
        .await?;
        insert_audit(&mut tx, &release.audit).await?;
        tx.commit().await?;
        Ok(true)
    }
}
