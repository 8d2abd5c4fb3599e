//! The `Store` implementation both dialects share. Every method body is written once, in
//! `impl_store!`; what differs between PostgreSQL and SQLite is the pool type, the migrator
//! and the statements in [`DialectSql`] (time arithmetic, row locks, catalog look-ups).
//!
//! Every write runs in an explicit transaction, even a single statement: a connection that
//! came back to the pool in a broken state (a cancelled `begin`, see sqlx#4385) can then never
//! swallow an autocommit write and answer success.

/// One write statement in its own transaction (see above for why), with its bind values in
/// order; evaluates to a future of the rows it affected.
macro_rules! write_one {
    ($pool:expr, $sql:expr $(, $arg:expr)* $(,)?) => {
        async {
            let mut tx = $pool.begin().await?;
            let affected = sqlx::query($sql)$(.bind($arg))*.execute(&mut *tx).await?.rows_affected();
            tx.commit().await?;
            Ok::<u64, $crate::store::StoreError>(affected)
        }
    };
}
pub(super) use write_one;

/// One statement that takes rows and returns their ids (`update … returning id`), in its own
/// transaction like [`write_one!`]; evaluates to a future of the ids.
macro_rules! take_ids {
    ($pool:expr, $sql:expr $(, $arg:expr)* $(,)?) => {
        async {
            let mut tx = $pool.begin().await?;
            let ids: Vec<String> = sqlx::query_scalar($sql)$(.bind($arg))*.fetch_all(&mut *tx).await?;
            tx.commit().await?;
            Ok::<Vec<String>, $crate::store::StoreError>(ids)
        }
    };
}
pub(super) use take_ids;

/// Statements that differ by dialect. Placeholders are `$1`, `$2`, … in order of first use,
/// which both PostgreSQL and SQLite bind positionally.
pub(super) struct DialectSql {
    /// `select count(*)` of the migrations table (0 or 1).
    pub migrations_table_exists: &'static str,
    /// `$1`..`$3` scope: the record and the database's current time (see `select_record!`).
    pub select_record: &'static str,
    /// `$1` api key id.
    pub revoke_api_key: &'static str,
    /// The claim: `$1`..`$6` scope and fingerprint, `$7` payment id, `$8` response schema
    /// version, `$9` lease owner, `$10` lease seconds, `$11` created by, `$12` window seconds,
    /// `$13` whether a settled record past its window is renewed (`new_operation`).
    pub claim_record: &'static str,
    /// `$1` tenant, `$2` account: the account's currency and balance, locked for the
    /// transaction where the dialect has row locks.
    pub account_for_update: &'static str,
    /// `$1` amount, `$2` tenant, `$3` account.
    pub hold_amount: &'static str,
    /// `$1` response status, `$2`..`$4` scope.
    pub bind_insufficient_funds: &'static str,
    /// `$1` status, `$2` response status, `$3` provider reference, `$4`..`$6` scope, `$7`
    /// lease version.
    pub settle_record: &'static str,
    /// `$1`..`$3` scope, `$4` lease version.
    pub mark_unknown: &'static str,
    /// `$1` payment status, `$2` charge id, `$3` payment id.
    pub set_payment_outcome: &'static str,
    /// `$1` amount, `$2` tenant, `$3` account.
    pub release_hold: &'static str,
    /// `$1` currency, `$2` tenant, `$3` account: changes only a different value.
    pub set_default_currency: &'static str,
    /// `$1` new owner, `$2` lease seconds, `$3`..`$5` scope, `$6` the stale lease version:
    /// takes an expired lease, bumping its version; returns the new version and the expiry.
    pub take_over: &'static str,
    /// `$1` attempt limit, `$2` batch size: unknown outcomes due for another look, and
    /// in-progress records whose owner's lease ran out.
    pub recovery_candidates: &'static str,
    /// `$1` stale seconds, `$2` batch size: payments made without a key that are still
    /// PROCESSING and untouched for that long, each taken (its `updated_at` bumped, which
    /// keeps other workers off it for as long) and returned as a payment row plus tenant.
    pub take_stale_unkeyed_payments: &'static str,
    /// Per tenant and operation: IN_PROGRESS records and the age in seconds (float) of the
    /// oldest.
    pub in_progress_ages: &'static str,
    /// `$1` bucket start (RFC 3339 text), `$2` tenant, `$3` operation, `$4` outcome,
    /// `$5` count to add.
    pub add_outcome_count: &'static str,
    /// Unpublished events and the age in seconds (float, 0 when none) of the oldest.
    pub outbox_backlog: &'static str,
    /// `$1` recheck seconds, `$2` limit: takes PENDING payments, returns their ids.
    pub take_payments_to_settle: &'static str,
    /// `$1` payment id: PENDING -> SETTLED.
    pub settle_payment: &'static str,
    /// `$1`..`$3` scope, `$4` the previewed lease version: a record that still needs an
    /// operator becomes FAILED_RETRYABLE (lease version bumped, so no owner can write);
    /// returns its payment id.
    pub release_record: &'static str,
    /// `$1` payment id: PROCESSING -> DECLINED, released (its merchant reference freed).
    pub release_payment: &'static str,
    /// `$1` watch seconds, `$2` recheck seconds, `$3` limit: released payments to ask the
    /// provider about again, each taken by stamping `release_checked_at`; returns ids.
    pub take_released_payments_to_watch: &'static str,
}

/// The claim's answer to a scoped key that already has a record. It is taken for the new
/// operation in the same statement, with a higher lease version, when it is a settled record
/// past its window under the `new_operation` expiry policy (`$13`), or a record an operator
/// released (FAILED_RETRYABLE) that this retry repeats exactly (same fingerprint, same
/// fingerprint version); any other record is left alone (nothing returned). `claimed_as`
/// says which.
macro_rules! renew_released_or_expired_record {
    ($now:expr) => {
        concat!(
            " on conflict (tenant_id, operation_name, idempotency_key) do update set ",
            "fingerprint_version = excluded.fingerprint_version, ",
            "request_fingerprint = excluded.request_fingerprint, ",
            "canonical_command = excluded.canonical_command, status = 'IN_PROGRESS', ",
            "progress_step = 'PROVIDER_REQUEST_SENT', resource_type = 'payment', ",
            "resource_id = excluded.resource_id, provider_reference = null, response_status_code = null, ",
            "response_schema_version = excluded.response_schema_version, lease_owner = excluded.lease_owner, ",
            "lease_version = idempotency_records.lease_version + 1, locked_until = excluded.locked_until, ",
            "created_by = excluded.created_by, created_at = ",
            $now,
            ", updated_at = ",
            $now,
            ", completed_at = null, expires_at = excluded.expires_at, settled_status = null, ",
            "purged_at = null, recovery_attempts = 0, next_recovery_at = null, ",
            "claimed_as = case when idempotency_records.expires_at <= ",
            $now,
            " then 'after_expiry' else 'after_release' end, ",
            "expired_retries = idempotency_records.expired_retries + case when idempotency_records.expires_at <= ",
            $now,
            " then 1 else 0 end ",
            "where (idempotency_records.status = 'FAILED_RETRYABLE' and idempotency_records.expires_at > ",
            $now,
            " and idempotency_records.fingerprint_version = excluded.fingerprint_version",
            " and idempotency_records.request_fingerprint = excluded.request_fingerprint) ",
            "or ($13 and idempotency_records.expires_at <= ",
            $now,
            " and idempotency_records.status in ",
            "('COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE', 'EXPIRED')) ",
            "returning lease_version, expires_at, claimed_as"
        )
    };
}
pub(super) use renew_released_or_expired_record;

/// The record columns `decide` needs, then the database's clock.
macro_rules! select_record {
    ($now:expr) => {
        concat!(
            "select status, progress_step, cast(fingerprint_version as integer), request_fingerprint, ",
            "lease_version, locked_until, expires_at, resource_id, response_schema_version, ",
            "next_recovery_at, ",
            $now,
            " from idempotency_records where tenant_id = $1 and operation_name = $2 and idempotency_key = $3"
        )
    };
}
pub(super) use select_record;
pub(super) const SELECT_RESPONSE: &str = "select r.response_status_code, s.headers, s.body \
     from idempotency_records r join idempotency_responses s \
     on s.tenant_id = r.tenant_id and s.operation_name = r.operation_name and s.idempotency_key = r.idempotency_key \
     where r.tenant_id = $1 and r.operation_name = $2 and r.idempotency_key = $3";
pub(super) const DELETE_RESPONSE: &str = "delete from idempotency_responses \
     where tenant_id = $1 and operation_name = $2 and idempotency_key = $3";
pub(super) const INSERT_RESPONSE: &str = "insert into idempotency_responses \
     (tenant_id, operation_name, idempotency_key, headers, body) values ($1, $2, $3, $4, $5)";
pub(super) const INSERT_PAYMENT: &str = "insert into payments (id, tenant_id, account_id, amount_minor, currency, \
     merchant_reference, channel, status, idempotency_key) values ($1, $2, $3, $4, $5, $6, $7, 'PROCESSING', $8) \
     returning created_at";
pub(super) const PAYMENT_BY_MERCHANT_REFERENCE: &str = "select id from payments where tenant_id = $1 and account_id = $2 and merchant_reference = $3 \
     and released_at is null";
pub(super) const NOTE_LATE_CHARGE: &str = "update payments set late_charge_id = $2 where id = $1 and released_at is not null and late_charge_id is null";
pub(super) const PAYMENT_HOLD: &str =
    "select tenant_id, account_id, amount_minor from payments where id = $1";
pub(super) const SELECT_PAYMENT: &str = "select id, account_id, amount_minor, currency, merchant_reference, \
     status, created_at from payments where tenant_id = $1 and id = $2";
pub(super) const ACCOUNT_EXISTS: &str = "select count(*) from accounts where tenant_id = $1 and id = $2";
pub(super) const INSERT_ACCOUNT_AUDIT: &str = "insert into account_audit \
     (id, tenant_id, account_id, setting, new_value, changed_by) values ($1, $2, $3, $4, $5, $6)";
pub(super) const UNKNOWN_COUNTS: &str = "select tenant_id, operation_name, count(*) from idempotency_records \
     where status = 'UNKNOWN_REQUIRES_RECOVERY' group by tenant_id, operation_name";
pub(super) const INSERT_EVENT: &str =
    "insert into outbox_events (id, payment_id, event_type, payload) values ($1, $2, $3, $4)";

pub(super) type PaymentRow = (
    String,
    String,
    i64,
    String,
    String,
    String,
    chrono::DateTime<chrono::Utc>,
);

pub(super) fn payment_of(
    (id, account_id, amount_minor, currency, merchant_reference, status, created_at): PaymentRow,
) -> Result<domain::representation::PaymentView, super::StoreError> {
    use super::StoreError::Corrupt;
    use domain::money::{Amount, Currency};
    let currency = Currency::parse(&currency).map_err(|_| Corrupt(format!("payment currency {currency}")))?;
    Ok(domain::representation::PaymentView {
        id,
        account_id,
        amount: Amount::from_minor_units(amount_minor, currency)
            .map_err(|error| Corrupt(error.to_string()))?,
        merchant_reference,
        status: status
            .parse()
            .map_err(|_| Corrupt(format!("payment status {status}")))?,
        created_at,
    })
}

/// A record row as selected by [`SELECT_RECORD`].
pub(super) type RecordRow = (
    String,
    String,
    i32,
    String,
    i64,
    Option<chrono::DateTime<chrono::Utc>>,
    chrono::DateTime<chrono::Utc>,
    Option<String>,
    Option<String>,
    Option<chrono::DateTime<chrono::Utc>>,
    chrono::DateTime<chrono::Utc>,
);

pub(super) fn record_of(
    (
        status,
        step,
        version,
        fingerprint,
        lease_version,
        locked_until,
        expires_at,
        resource_id,
        response_schema_version,
        next_recovery_at,
        now,
    ): RecordRow,
) -> Result<domain::record::RecordAt, super::StoreError> {
    use super::StoreError::Corrupt;
    let record = domain::record::StoredRecord {
        status: status.parse().map_err(|error| Corrupt(format!("{error}")))?,
        progress_step: step.parse().map_err(|error| Corrupt(format!("{error}")))?,
        fingerprint_version: u16::try_from(version)
            .map_err(|_| Corrupt(format!("fingerprint version {version}")))?,
        request_fingerprint: fingerprint,
        lease_version,
        locked_until,
        expires_at,
        resource_id,
        response_schema_version,
        next_recovery_at,
    };
    Ok(domain::record::RecordAt { record, now })
}

/// Where the local part of create_payment got to, inside its transaction.
pub(super) enum LocalStep {
    Created(chrono::DateTime<chrono::Utc>),
    InsufficientFunds,
    Refused(domain::claim::Refusal),
    /// The business key is taken; the transaction must be rolled back before the existing
    /// payment can be named.
    DuplicateMerchantReference,
}

macro_rules! impl_store {
    ($store:ty, $db:ty, $dialect:expr, $migrator:expr, $sql:expr) => {
        impl $store {
            /// The local part of create_payment, inside `tx`: the tenant's account, its
            /// currency and balance, the hold, the payment row (PROCESSING) and its
            /// PaymentCreated event. Writes nothing when it refuses.
            async fn create_payment_in(
                &self,
                tx: &mut sqlx::Transaction<'static, $db>,
                payment: &domain::payment::NewPayment,
                idempotency_key: Option<&str>,
            ) -> Result<$crate::store::shared::LocalStep, $crate::store::StoreError> {
                use domain::claim::Refusal;
                use $crate::store::shared::LocalStep;
                let account: Option<(String, i64)> = sqlx::query_as($sql.account_for_update)
                    .bind(payment.tenant_id.as_str())
                    .bind(payment.account_id.as_str())
                    .fetch_optional(&mut **tx)
                    .await?;
                let Some((account_currency, balance)) = account else {
                    return Ok(LocalStep::Refused(Refusal::AccountNotFound));
                };
                let currency = payment.amount.currency();
                if account_currency != currency.code() {
                    let account_currency =
                        domain::money::Currency::parse(&account_currency).map_err(|_| {
                            $crate::store::StoreError::Corrupt(format!("account currency {account_currency}"))
                        })?;
                    return Ok(LocalStep::Refused(Refusal::CurrencyMismatch {
                        account_currency,
                    }));
                }
                if balance < payment.amount.minor_units() {
                    return Ok(LocalStep::InsufficientFunds);
                }

                sqlx::query($sql.hold_amount)
                    .bind(payment.amount.minor_units())
                    .bind(payment.tenant_id.as_str())
                    .bind(payment.account_id.as_str())
                    .execute(&mut **tx)
                    .await?;
                let created: Result<chrono::DateTime<chrono::Utc>, sqlx::Error> =
                    sqlx::query_scalar($crate::store::shared::INSERT_PAYMENT)
                        .bind(payment.id.as_str())
                        .bind(payment.tenant_id.as_str())
                        .bind(payment.account_id.as_str())
                        .bind(payment.amount.minor_units())
                        .bind(currency.code())
                        .bind(payment.merchant_reference.as_str())
                        .bind(payment.channel.as_str())
                        .bind(idempotency_key)
                        .fetch_one(&mut **tx)
                        .await;
                let payment_created_at = match created.map_err($crate::store::StoreError::from) {
                    Ok(created_at) => created_at,
                    Err($crate::store::StoreError::AlreadyExists) => {
                        return Ok(LocalStep::DuplicateMerchantReference);
                    }
                    Err(error) => return Err(error),
                };
                let event_id = domain::payment::new_event_id();
                Self::insert_event_in(
                    tx,
                    &event_id,
                    payment.id.as_str(),
                    "PaymentCreated",
                    &payment.created_event(&event_id),
                )
                .await?;
                Ok(LocalStep::Created(payment_created_at))
            }

            /// Names the refusal, once the transaction was rolled back.
            async fn refusal(
                &self,
                step: $crate::store::shared::LocalStep,
                payment: &domain::payment::NewPayment,
            ) -> Result<domain::claim::Refusal, $crate::store::StoreError> {
                use domain::claim::Refusal;
                use $crate::store::shared::LocalStep;
                match step {
                    LocalStep::Refused(refusal) => Ok(refusal),
                    LocalStep::DuplicateMerchantReference => {
                        let existing: String =
                            sqlx::query_scalar($crate::store::shared::PAYMENT_BY_MERCHANT_REFERENCE)
                                .bind(payment.tenant_id.as_str())
                                .bind(payment.account_id.as_str())
                                .bind(payment.merchant_reference.as_str())
                                .fetch_one(&self.pool)
                                .await?;
                        Ok(Refusal::DuplicateMerchantReference {
                            payment_id: domain::payment::PaymentId::from_stored(existing),
                        })
                    }
                    LocalStep::Created(_) | LocalStep::InsufficientFunds => {
                        Err($crate::store::StoreError::Corrupt("not a refusal".into()))
                    }
                }
            }

            /// The payment's outcome inside `tx`: status and charge id, the hold released on
            /// a decline, and the outcome's event.
            async fn settle_payment_in(
                &self,
                tx: &mut sqlx::Transaction<'static, $db>,
                completion: &domain::claim::PaymentCompletion,
            ) -> Result<(), $crate::store::StoreError> {
                use domain::claim::ProviderVerdict;
                let (payment_status, event_type) = match completion.verdict {
                    ProviderVerdict::Authorized => ("PENDING", "PaymentAuthorized"),
                    ProviderVerdict::Declined => ("DECLINED", "PaymentDeclined"),
                };
                let settled = sqlx::query($sql.set_payment_outcome)
                    .bind(payment_status)
                    .bind(completion.provider_charge_id.as_str())
                    .bind(completion.payment_id.as_str())
                    .execute(&mut **tx)
                    .await?
                    .rows_affected();
                if settled == 0 {
                    // Settled already (by another owner of a payment without a record): its
                    // hold and event must not be applied twice.
                    return Err($crate::store::StoreError::Corrupt(format!(
                        "payment {} is no longer PROCESSING",
                        completion.payment_id
                    )));
                }
                if completion.verdict == ProviderVerdict::Declined {
                    Self::release_hold_in(tx, completion.payment_id.as_str()).await?;
                }
                Self::insert_event_in(
                    tx,
                    &completion.event_id,
                    completion.payment_id.as_str(),
                    event_type,
                    &completion.event_payload,
                )
                .await
            }

            /// Gives a payment's held amount back to its account, inside `tx`.
            async fn release_hold_in(
                tx: &mut sqlx::Transaction<'static, $db>,
                payment_id: &str,
            ) -> Result<(), $crate::store::StoreError> {
                let (tenant_id, account_id, amount): (String, String, i64) =
                    sqlx::query_as($crate::store::shared::PAYMENT_HOLD)
                        .bind(payment_id)
                        .fetch_one(&mut **tx)
                        .await?;
                sqlx::query($sql.release_hold)
                    .bind(amount)
                    .bind(tenant_id)
                    .bind(account_id)
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }

            /// A payment's event in the outbox, inside the transaction of the change it announces.
            async fn insert_event_in(
                tx: &mut sqlx::Transaction<'static, $db>,
                event_id: &str,
                payment_id: &str,
                event_type: &str,
                payload: &str,
            ) -> Result<(), $crate::store::StoreError> {
                sqlx::query($crate::store::shared::INSERT_EVENT)
                    .bind(event_id)
                    .bind(payment_id)
                    .bind(event_type)
                    .bind(payload)
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }
        }

        #[async_trait::async_trait]
        impl $crate::store::Store for $store {
            fn dialect(&self) -> $crate::store::Dialect {
                $dialect
            }

            async fn migrate(&self) -> Result<(), $crate::store::StoreError> {
                // On PostgreSQL the migrator holds an advisory lock: instances starting
                // together take turns.
                Ok($migrator.run(&self.pool).await?)
            }

            async fn readiness(&self) -> Result<$crate::store::Readiness, $crate::store::StoreError> {
                let tables: i64 = sqlx::query_scalar($sql.migrations_table_exists)
                    .fetch_one(&self.pool)
                    .await?;
                let applied: Vec<i64> = if tables > 0 {
                    sqlx::query_scalar($crate::store::APPLIED_MIGRATIONS)
                        .fetch_all(&self.pool)
                        .await?
                } else {
                    Vec::new()
                };
                Ok($crate::store::readiness_of(&applied, &$migrator))
            }

            async fn create_tenant(
                &self,
                id: &domain::tenant::TenantId,
                name: &domain::tenant::TenantName,
                require_idempotency_key: bool,
            ) -> Result<(), $crate::store::StoreError> {
                $crate::store::shared::write_one!(
                    self.pool,
                    $crate::store::INSERT_TENANT,
                    id.as_str(),
                    name.as_str(),
                    require_idempotency_key
                )
                .await?;
                Ok(())
            }

            async fn tenant_id_by_name(
                &self,
                name: &domain::tenant::TenantName,
            ) -> Result<Option<domain::tenant::TenantId>, $crate::store::StoreError> {
                let id: Option<String> = sqlx::query_scalar($crate::store::TENANT_ID_BY_NAME)
                    .bind(name.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(id.map(domain::tenant::TenantId::from_stored))
            }

            async fn create_api_key(
                &self,
                tenant_id: &domain::tenant::TenantId,
                key: &$crate::auth::api_key::NewApiKey,
            ) -> Result<(), $crate::store::StoreError> {
                $crate::store::shared::write_one!(
                    self.pool,
                    $crate::store::INSERT_API_KEY,
                    key.id.as_str(),
                    tenant_id.as_str(),
                    key.hash.as_str()
                )
                .await?;
                Ok(())
            }

            async fn authenticate_api_key(
                &self,
                hash: &$crate::auth::api_key::ApiKeyHash,
            ) -> Result<Option<domain::tenant::Principal>, $crate::store::StoreError> {
                let row: Option<$crate::store::PrincipalRow> =
                    sqlx::query_as($crate::store::AUTHENTICATE_API_KEY)
                        .bind(hash.as_str())
                        .fetch_optional(&self.pool)
                        .await?;
                Ok(row.map($crate::store::principal_of))
            }

            async fn revoke_api_key(
                &self,
                id: &domain::tenant::ApiKeyId,
            ) -> Result<bool, $crate::store::StoreError> {
                Ok(
                    $crate::store::shared::write_one!(self.pool, $sql.revoke_api_key, id.as_str()).await?
                        == 1,
                )
            }

            async fn create_account(
                &self,
                account: &domain::payment::NewAccount,
            ) -> Result<(), $crate::store::StoreError> {
                $crate::store::shared::write_one!(
                    self.pool,
                    $crate::store::INSERT_ACCOUNT,
                    account.tenant_id.as_str(),
                    account.id.as_str(),
                    account.balance.currency.code(),
                    account.balance.minor_units
                )
                .await?;
                Ok(())
            }

            async fn load_record(
                &self,
                scope: &domain::scope::Scope,
            ) -> Result<Option<domain::record::RecordAt>, $crate::store::StoreError> {
                let row: Option<$crate::store::shared::RecordRow> = sqlx::query_as($sql.select_record)
                    .bind(scope.tenant_id.as_str())
                    .bind(scope.operation.as_str())
                    .bind(scope.key.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                row.map($crate::store::shared::record_of).transpose()
            }

            async fn load_response(
                &self,
                scope: &domain::scope::Scope,
            ) -> Result<Option<domain::claim::StoredResponse>, $crate::store::StoreError> {
                let row: Option<(Option<i32>, String, Vec<u8>)> =
                    sqlx::query_as($crate::store::shared::SELECT_RESPONSE)
                        .bind(scope.tenant_id.as_str())
                        .bind(scope.operation.as_str())
                        .bind(scope.key.as_str())
                        .fetch_optional(&self.pool)
                        .await?;
                row.map(|(status, headers, body)| {
                    let status = status
                        .and_then(|status| u16::try_from(status).ok())
                        .ok_or_else(|| {
                            $crate::store::StoreError::Corrupt("response without a status".into())
                        })?;
                    domain::claim::StoredResponse::from_stored(status, &headers, body)
                        .map_err($crate::store::StoreError::Corrupt)
                })
                .transpose()
            }

            async fn claim_create_payment(
                &self,
                claim: &domain::claim::NewClaim,
                payment: &domain::payment::NewPayment,
                insufficient_funds: &domain::claim::StoredResponse,
            ) -> Result<domain::claim::ClaimOutcome, $crate::store::StoreError> {
                use domain::claim::ClaimOutcome;
                use $crate::store::shared::LocalStep;
                let scope = &claim.scope;
                let mut tx = self.pool.begin().await?;

                // Insert first: exactly one request wins the scoped key; the others wait for
                // its transaction and then find its row.
                let inserted: Option<(i64, chrono::DateTime<chrono::Utc>, String)> =
                    sqlx::query_as($sql.claim_record)
                        .bind(scope.tenant_id.as_str())
                        .bind(scope.operation.as_str())
                        .bind(scope.key.as_str())
                        .bind(i16::try_from(claim.fingerprint.version.0).unwrap_or(i16::MAX))
                        .bind(claim.fingerprint.sha256_hex.as_str())
                        .bind(claim.fingerprint.canonical.as_str())
                        .bind(payment.id.as_str())
                        .bind(claim.response_schema_version.as_str())
                        .bind(claim.lease_owner.as_str())
                        .bind(claim.lease.as_secs_f64())
                        .bind(claim.created_by.as_str())
                        .bind(claim.window.as_secs_f64())
                        .bind(claim.after_expiry == domain::expiry::AfterExpiry::NewOperation)
                        .fetch_optional(&mut *tx)
                        .await?;
                let Some((lease_version, expires_at, claimed_as)) = inserted else {
                    tx.rollback().await?;
                    return match self.load_record(scope).await? {
                        Some(found) => Ok(ClaimOutcome::Existing(found)),
                        // Gone between the insert and the read (deleted by cleanup): the
                        // caller may simply try again.
                        None => Err($crate::store::StoreError::Corrupt(
                            "claimed record vanished".into(),
                        )),
                    };
                };

                $crate::crash::crash_point($crate::crash::CrashPoint::InsideLocalTransaction);
                let claimed_as: domain::record::ClaimedAs = claimed_as
                    .parse()
                    .map_err(|_| $crate::store::StoreError::Corrupt(format!("claimed_as {claimed_as}")))?;
                // A renewed record: its old answer is not this operation's.
                if claimed_as != domain::record::ClaimedAs::New {
                    sqlx::query($crate::store::shared::DELETE_RESPONSE)
                        .bind(scope.tenant_id.as_str())
                        .bind(scope.operation.as_str())
                        .bind(scope.key.as_str())
                        .execute(&mut *tx)
                        .await?;
                }
                let payment_created_at = match self
                    .create_payment_in(&mut tx, payment, Some(scope.key.as_str()))
                    .await?
                {
                    LocalStep::Created(payment_created_at) => payment_created_at,
                    LocalStep::InsufficientFunds => {
                        sqlx::query($sql.bind_insufficient_funds)
                            .bind(i32::from(insufficient_funds.status))
                            .bind(scope.tenant_id.as_str())
                            .bind(scope.operation.as_str())
                            .bind(scope.key.as_str())
                            .execute(&mut *tx)
                            .await?;
                        sqlx::query($crate::store::shared::INSERT_RESPONSE)
                            .bind(scope.tenant_id.as_str())
                            .bind(scope.operation.as_str())
                            .bind(scope.key.as_str())
                            .bind(insufficient_funds.headers_json())
                            .bind(insufficient_funds.body.as_slice())
                            .execute(&mut *tx)
                            .await?;
                        tx.commit().await?;
                        return Ok(ClaimOutcome::InsufficientFunds { expires_at });
                    }
                    refused => {
                        tx.rollback().await?;
                        return self
                            .refusal(refused, payment)
                            .await
                            .map(ClaimOutcome::Refused);
                    }
                };
                tx.commit().await?;
                Ok(ClaimOutcome::Claimed {
                    lease_version,
                    expires_at,
                    payment_created_at,
                    claimed_as,
                })
            }

            async fn complete_create_payment(
                &self,
                scope: &domain::scope::Scope,
                lease_version: i64,
                completion: &domain::claim::PaymentCompletion,
            ) -> Result<bool, $crate::store::StoreError> {
                use domain::claim::ProviderVerdict;
                let record_status = match completion.verdict {
                    ProviderVerdict::Authorized => "COMPLETED",
                    ProviderVerdict::Declined => "FAILED_REPLAYABLE",
                };
                let mut tx = self.pool.begin().await?;
                // The fence first: an owner that lost its lease writes nothing at all.
                let settled = sqlx::query($sql.settle_record)
                    .bind(record_status)
                    .bind(i32::from(completion.response.status))
                    .bind(completion.provider_charge_id.as_str())
                    .bind(scope.tenant_id.as_str())
                    .bind(scope.operation.as_str())
                    .bind(scope.key.as_str())
                    .bind(lease_version)
                    .execute(&mut *tx)
                    .await?;
                if settled.rows_affected() == 0 {
                    tx.rollback().await?;
                    return Ok(false);
                }
                sqlx::query($crate::store::shared::INSERT_RESPONSE)
                    .bind(scope.tenant_id.as_str())
                    .bind(scope.operation.as_str())
                    .bind(scope.key.as_str())
                    .bind(completion.response.headers_json())
                    .bind(completion.response.body.as_slice())
                    .execute(&mut *tx)
                    .await?;
                self.settle_payment_in(&mut tx, completion).await?;
                if let Some(audit) = &completion.audit {
                    Self::audit_in(&mut tx, audit).await?;
                }
                tx.commit().await?;
                Ok(true)
            }

            async fn release_key(
                &self,
                scope: &domain::scope::Scope,
                previewed_version: i64,
                release: &domain::claim::KeyRelease,
            ) -> Result<bool, $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                let released: Option<Option<String>> = sqlx::query_scalar($sql.release_record)
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
                        return Err($crate::store::StoreError::Corrupt(format!(
                            "record's payment {payment_id:?} is not {}",
                            release.payment_id
                        )));
                    }
                    Some(_) => {}
                }
                let declined = sqlx::query($sql.release_payment)
                    .bind(release.payment_id.as_str())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if declined == 0 {
                    return Err($crate::store::StoreError::Corrupt(format!(
                        "payment {} is no longer PROCESSING",
                        release.payment_id
                    )));
                }
                Self::release_hold_in(&mut tx, release.payment_id.as_str()).await?;
                Self::insert_event_in(
                    &mut tx,
                    &release.event_id,
                    release.payment_id.as_str(),
                    "PaymentDeclined",
                    &release.event_payload,
                )
                .await?;
                Self::audit_in(&mut tx, &release.audit).await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn create_payment_without_key(
                &self,
                payment: &domain::payment::NewPayment,
            ) -> Result<domain::claim::UnkeyedOutcome, $crate::store::StoreError> {
                use domain::claim::UnkeyedOutcome;
                use $crate::store::shared::LocalStep;
                let mut tx = self.pool.begin().await?;
                match self.create_payment_in(&mut tx, payment, None).await? {
                    LocalStep::Created(payment_created_at) => {
                        tx.commit().await?;
                        Ok(UnkeyedOutcome::Created { payment_created_at })
                    }
                    LocalStep::InsufficientFunds => {
                        tx.rollback().await?;
                        Ok(UnkeyedOutcome::InsufficientFunds)
                    }
                    refused => {
                        tx.rollback().await?;
                        self.refusal(refused, payment)
                            .await
                            .map(UnkeyedOutcome::Refused)
                    }
                }
            }

            async fn settle_payment_without_key(
                &self,
                completion: &domain::claim::PaymentCompletion,
            ) -> Result<(), $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                self.settle_payment_in(&mut tx, completion).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn take_over(
                &self,
                scope: &domain::scope::Scope,
                stale_lease_version: i64,
                owner: &str,
                lease: std::time::Duration,
            ) -> Result<Option<(i64, chrono::DateTime<chrono::Utc>)>, $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                let taken: Option<(i64, chrono::DateTime<chrono::Utc>)> = sqlx::query_as($sql.take_over)
                    .bind(owner)
                    .bind(lease.as_secs_f64())
                    .bind(scope.tenant_id.as_str())
                    .bind(scope.operation.as_str())
                    .bind(scope.key.as_str())
                    .bind(stale_lease_version)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(taken)
            }

            async fn recovery_candidates(
                &self,
                max_attempts: i32,
                limit: i64,
            ) -> Result<Vec<domain::scope::Scope>, $crate::store::StoreError> {
                let rows: Vec<(String, String, String)> = sqlx::query_as($sql.recovery_candidates)
                    .bind(max_attempts)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows
                    .into_iter()
                    .filter_map(|(tenant_id, operation, key)| {
                        // Only operations this binary knows can be recovered by it.
                        let operation: domain::scope::Operation = operation.parse().ok()?;
                        let key = domain::key::IdempotencyKey::parse(key.as_bytes()).ok()?;
                        Some(domain::scope::Scope {
                            tenant_id: domain::tenant::TenantId::from_stored(tenant_id),
                            operation,
                            key,
                        })
                    })
                    .collect())
            }

            async fn mark_outcome_unknown(
                &self,
                scope: &domain::scope::Scope,
                lease_version: i64,
            ) -> Result<bool, $crate::store::StoreError> {
                Ok($crate::store::shared::write_one!(
                    self.pool,
                    $sql.mark_unknown,
                    scope.tenant_id.as_str(),
                    scope.operation.as_str(),
                    scope.key.as_str(),
                    lease_version
                )
                .await?
                    == 1)
            }

            async fn payment(
                &self,
                tenant_id: &domain::tenant::TenantId,
                payment_id: &str,
            ) -> Result<Option<domain::representation::PaymentView>, $crate::store::StoreError> {
                let row: Option<$crate::store::shared::PaymentRow> =
                    sqlx::query_as($crate::store::shared::SELECT_PAYMENT)
                        .bind(tenant_id.as_str())
                        .bind(payment_id)
                        .fetch_optional(&self.pool)
                        .await?;
                row.map($crate::store::shared::payment_of).transpose()
            }

            async fn set_default_currency(
                &self,
                tenant_id: &domain::tenant::TenantId,
                account_id: &domain::command::AccountId,
                currency: domain::money::Currency,
                changed_by: &domain::tenant::ApiKeyId,
            ) -> Result<Option<bool>, $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                // The write comes first: it takes the row (or SQLite's) lock, so two equal
                // requests at once cannot both see "changed".
                let changed = sqlx::query($sql.set_default_currency)
                    .bind(currency.code())
                    .bind(tenant_id.as_str())
                    .bind(account_id.as_str())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    == 1;
                if changed {
                    sqlx::query($crate::store::shared::INSERT_ACCOUNT_AUDIT)
                        .bind(format!("aud_{}", domain::random::random_hex(8)))
                        .bind(tenant_id.as_str())
                        .bind(account_id.as_str())
                        .bind("default_currency")
                        .bind(currency.code())
                        .bind(changed_by.as_str())
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    return Ok(Some(true));
                }
                let exists: i64 = sqlx::query_scalar($crate::store::shared::ACCOUNT_EXISTS)
                    .bind(tenant_id.as_str())
                    .bind(account_id.as_str())
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok((exists > 0).then_some(false))
            }

            async fn add_outcome_counts(
                &self,
                counts: &[$crate::metrics::OutcomeCount],
            ) -> Result<(), $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                for count in counts {
                    sqlx::query($sql.add_outcome_count)
                        .bind($crate::store::rfc3339_millis(count.bucket_start))
                        .bind(count.tenant_id.as_str())
                        .bind(count.operation.as_str())
                        .bind(count.outcome.as_str())
                        .bind(count.count)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn live_gauges(
                &self,
            ) -> Result<Vec<$crate::metrics::prometheus::LiveGauges>, $crate::store::StoreError> {
                use std::collections::BTreeMap;
                let unknown: Vec<(String, String, i64)> =
                    sqlx::query_as($crate::store::shared::UNKNOWN_COUNTS)
                        .fetch_all(&self.pool)
                        .await?;
                let ages: Vec<(String, String, f64)> = sqlx::query_as($sql.in_progress_ages)
                    .fetch_all(&self.pool)
                    .await?;
                let mut gauges: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
                for (tenant, operation, count) in unknown {
                    gauges.entry((tenant, operation)).or_default().0 = count;
                }
                for (tenant, operation, age) in ages {
                    gauges.entry((tenant, operation)).or_default().1 = age.max(0.0);
                }
                Ok(gauges
                    .into_iter()
                    .map(|((tenant_id, operation), (unknown_count, age))| {
                        $crate::metrics::prometheus::LiveGauges {
                            tenant_id,
                            operation,
                            unknown_count,
                            in_progress_age_max_seconds: age,
                        }
                    })
                    .collect())
            }

            async fn take_stale_unkeyed_payments(
                &self,
                stale_after: std::time::Duration,
                limit: i64,
            ) -> Result<
                Vec<(
                    domain::tenant::TenantId,
                    domain::representation::PaymentView,
                )>,
                $crate::store::StoreError,
            > {
                let mut tx = self.pool.begin().await?;
                let rows: Vec<(
                    String,
                    String,
                    String,
                    i64,
                    String,
                    String,
                    String,
                    chrono::DateTime<chrono::Utc>,
                )> = sqlx::query_as($sql.take_stale_unkeyed_payments)
                    .bind(stale_after.as_secs_f64())
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await?;
                tx.commit().await?;
                rows.into_iter()
                    .map(
                        |(tenant_id, id, account_id, amount, currency, reference, status, created_at)| {
                            let payment = $crate::store::shared::payment_of((
                                id, account_id, amount, currency, reference, status, created_at,
                            ))?;
                            Ok((domain::tenant::TenantId::from_stored(tenant_id), payment))
                        },
                    )
                    .collect()
            }

            async fn take_payments_to_settle(
                &self,
                recheck_after: std::time::Duration,
                limit: i64,
            ) -> Result<Vec<String>, $crate::store::StoreError> {
                $crate::store::shared::take_ids!(
                    self.pool,
                    $sql.take_payments_to_settle,
                    recheck_after.as_secs_f64(),
                    limit
                )
                .await
            }

            async fn take_released_payments_to_watch(
                &self,
                watch: std::time::Duration,
                recheck_after: std::time::Duration,
                limit: i64,
            ) -> Result<Vec<String>, $crate::store::StoreError> {
                $crate::store::shared::take_ids!(
                    self.pool,
                    $sql.take_released_payments_to_watch,
                    watch.as_secs_f64(),
                    recheck_after.as_secs_f64(),
                    limit
                )
                .await
            }

            async fn note_late_charge(
                &self,
                payment_id: &str,
                charge_id: &str,
            ) -> Result<bool, $crate::store::StoreError> {
                Ok($crate::store::shared::write_one!(
                    self.pool,
                    $crate::store::shared::NOTE_LATE_CHARGE,
                    payment_id,
                    charge_id
                )
                .await?
                    == 1)
            }

            async fn settle_payment(
                &self,
                payment_id: &str,
                event_id: &str,
                payload: &str,
            ) -> Result<bool, $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                let settled = sqlx::query($sql.settle_payment)
                    .bind(payment_id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    == 1;
                if settled {
                    Self::insert_event_in(&mut tx, event_id, payment_id, "PaymentSettled", payload).await?;
                }
                tx.commit().await?;
                Ok(settled)
            }

            async fn outbox_backlog(
                &self,
            ) -> Result<$crate::metrics::prometheus::OutboxBacklog, $crate::store::StoreError> {
                let (unpublished, oldest_unpublished_age_seconds): (i64, f64) =
                    sqlx::query_as($sql.outbox_backlog)
                        .fetch_one(&self.pool)
                        .await?;
                Ok($crate::metrics::prometheus::OutboxBacklog {
                    unpublished,
                    oldest_unpublished_age_seconds,
                })
            }

            async fn close(&self) {
                self.pool.close().await;
            }
        }
    };
}

pub(super) use impl_store;
