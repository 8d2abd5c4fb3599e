//! Storage: one trait, a PostgreSQL and a SQLite implementation, one conformance suite
//! (`server/tests/store_conformance.rs`) that runs the same bodies against both.
//!
//! Time comparisons that matter (leases, windows) use the database's clock, never an
//! instance's, so that several `serve` instances agree.

pub mod approvals;
pub mod bulk;
pub mod console;
pub mod events;
pub mod operators;
mod postgres;
pub mod retention;
mod shared;
mod sqlite;

pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

use crate::auth::api_key::{ApiKeyHash, NewApiKey};
use domain::claim::{ClaimOutcome, NewClaim, PaymentCompletion, StoredResponse};
use domain::payment::NewAccount;
use domain::payment::NewPayment;
use domain::record::RecordAt;
use domain::scope::Scope;
use domain::tenant::ApiKeyId;
use domain::tenant::Principal;
use domain::tenant::{TenantId, TenantName};
use sqlx::migrate::Migrator;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Sqlite,
}

/// Which database to use, decided once from `DATABASE_URL` (or its absence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseTarget {
    Postgres {
        url: String,
    },
    Sqlite {
        url: String,
    },
    /// The embedded default: a SQLite file in the data directory.
    EmbeddedSqlite {
        path: PathBuf,
    },
}

impl DatabaseTarget {
    pub const EMBEDDED_FILE_NAME: &'static str = "idem.db";

    pub fn resolve(database_url: Option<&str>, data_dir: &Path) -> Result<Self, StoreError> {
        match database_url.map(str::trim) {
            None | Some("") => Ok(DatabaseTarget::EmbeddedSqlite {
                path: data_dir.join(Self::EMBEDDED_FILE_NAME),
            }),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(DatabaseTarget::Postgres { url: url.to_owned() })
            }
            Some(url) if url.starts_with("sqlite:") => Ok(DatabaseTarget::Sqlite { url: url.to_owned() }),
            Some(_) => Err(StoreError::UnsupportedUrl),
        }
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            DatabaseTarget::Postgres { .. } => Dialect::Postgres,
            DatabaseTarget::Sqlite { .. } | DatabaseTarget::EmbeddedSqlite { .. } => Dialect::Sqlite,
        }
    }

    /// A description safe for logs: never a password.
    pub fn redacted(&self) -> String {
        match self {
            DatabaseTarget::Postgres { url } => redact_password(url),
            DatabaseTarget::Sqlite { url } => url.clone(),
            DatabaseTarget::EmbeddedSqlite { path } => format!("sqlite://{}", path.display()),
        }
    }
}

fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((credentials, host)) => match credentials.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Whether the store can serve traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    MigrationsPending { applied: usize, expected: usize },
}

/// Everything Idem keeps, one concern per supertrait.
#[async_trait::async_trait]
pub trait Store:
    retention::RetentionStore
    + operators::OperatorStore
    + approvals::ApprovalStore
    + bulk::BulkStore
    + console::ConsoleStore
    + events::EventStore
    + Send
    + Sync
    + 'static
{
    fn dialect(&self) -> Dialect;

    /// Applies every pending migration of this dialect.
    async fn migrate(&self) -> Result<(), StoreError>;

    /// `Err(Unavailable)` when the database cannot be reached.
    async fn readiness(&self) -> Result<Readiness, StoreError>;

    /// `Err(AlreadyExists)` when a tenant has this name.
    async fn create_tenant(
        &self,
        id: &TenantId,
        name: &TenantName,
        require_idempotency_key: bool,
    ) -> Result<(), StoreError>;

    async fn tenant_id_by_name(&self, name: &TenantName) -> Result<Option<TenantId>, StoreError>;

    async fn create_api_key(&self, tenant_id: &TenantId, key: &NewApiKey) -> Result<(), StoreError>;

    /// The principal of an active (not revoked) key with this hash. The look-up is by the
    /// hash's exact value, so its time says nothing about how close a guess was.
    async fn authenticate_api_key(&self, hash: &ApiKeyHash) -> Result<Option<Principal>, StoreError>;

    /// `false` when no active key has this id.
    async fn revoke_api_key(&self, id: &ApiKeyId) -> Result<bool, StoreError>;

    /// `Err(AlreadyExists)` when the tenant already has an account with this id.
    async fn create_account(&self, account: &NewAccount) -> Result<(), StoreError>;

    /// The record of a scoped key, if any, with the database's clock at the time of reading.
    async fn load_record(&self, scope: &Scope) -> Result<Option<RecordAt>, StoreError>;

    /// The stored response of a scoped key, if any (settled records only).
    async fn load_response(&self, scope: &Scope) -> Result<Option<StoredResponse>, StoreError>;

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
        release: &domain::claim::KeyRelease,
    ) -> Result<bool, StoreError>;

    /// The local transaction of a create_payment without an idempotency key (tenants that do
    /// not require keys): the same account checks, hold, payment row and event, no record.
    /// The business key still stops a second payment.
    async fn create_payment_without_key(
        &self,
        payment: &NewPayment,
    ) -> Result<domain::claim::UnkeyedOutcome, StoreError>;

    /// The completion of a payment made without a key: status, hold, event.
    async fn settle_payment_without_key(&self, completion: &PaymentCompletion) -> Result<(), StoreError>;

    /// Takes over an IN_PROGRESS record whose lease expired: one conditional update on the
    /// stale lease version, so exactly one taker wins. `Some((new lease version, expiry))`
    /// for the winner, `None` for everyone else.
    async fn take_over(
        &self,
        scope: &Scope,
        stale_lease_version: i64,
        owner: &str,
        lease: std::time::Duration,
    ) -> Result<Option<(i64, chrono::DateTime<chrono::Utc>)>, StoreError>;

    /// Records the worker should try to resolve: unknown outcomes whose backoff has passed
    /// and that have not used up `max_attempts`, and in-progress records whose lease expired.
    async fn recovery_candidates(&self, max_attempts: i32, limit: i64) -> Result<Vec<Scope>, StoreError>;

    /// Marks a claimed record UNKNOWN_REQUIRES_RECOVERY (the provider's answer was lost),
    /// counting the attempt and backing off the next one (1 s, 2 s, 4 s … 256 s).
    /// Conditional on `lease_version`, like every owner's write.
    async fn mark_outcome_unknown(&self, scope: &Scope, lease_version: i64) -> Result<bool, StoreError>;

    /// The current state of a payment of this tenant (`None` for another tenant's).
    async fn payment(
        &self,
        tenant_id: &TenantId,
        payment_id: &str,
    ) -> Result<Option<domain::representation::PaymentView>, StoreError>;

    /// Sets an account's default currency: `None` when the tenant has no such account,
    /// `Some(true)` when it changed (with one audit row), `Some(false)` when it already was
    /// that currency (nothing written: the request is naturally idempotent).
    async fn set_default_currency(
        &self,
        tenant_id: &TenantId,
        account_id: &domain::command::AccountId,
        currency: domain::money::Currency,
        changed_by: &ApiKeyId,
    ) -> Result<Option<bool>, StoreError>;

    /// Adds counted outcomes to their per-minute buckets, all or nothing.
    async fn add_outcome_counts(&self, counts: &[crate::metrics::OutcomeCount]) -> Result<(), StoreError>;

    /// Takes payments made without a key that were left PROCESSING (their provider answer was
    /// lost) and untouched for `stale_after`, for the recovery worker.
    async fn take_stale_unkeyed_payments(
        &self,
        stale_after: std::time::Duration,
        limit: i64,
    ) -> Result<Vec<(TenantId, domain::representation::PaymentView)>, StoreError>;

    /// Live state for `/metrics`: unknown outcomes and the oldest in-progress request, per
    /// tenant and operation (only those with either).
    async fn live_gauges(&self) -> Result<Vec<crate::metrics::prometheus::LiveGauges>, StoreError>;

    /// Takes authorised (PENDING) payments whose settlement was not checked for
    /// `recheck_after`, for the settlement worker (each taken by bumping its `updated_at`;
    /// skip-locked on PostgreSQL). Returns their ids.
    async fn take_payments_to_settle(
        &self,
        recheck_after: std::time::Duration,
        limit: i64,
    ) -> Result<Vec<String>, StoreError>;

    /// Takes released payments of the last `watch` (that showed no late charge yet) not
    /// checked for `recheck_after`, each by stamping its check; returns their ids.
    async fn take_released_payments_to_watch(
        &self,
        watch: std::time::Duration,
        recheck_after: std::time::Duration,
        limit: i64,
    ) -> Result<Vec<String>, StoreError>;

    /// Keeps the charge a released payment showed after all; `false` when one was noted
    /// already.
    async fn note_late_charge(&self, payment_id: &str, charge_id: &str) -> Result<bool, StoreError>;

    /// PENDING -> SETTLED with its PaymentSettled event, in one transaction; `false` when the
    /// payment was not PENDING (nothing written).
    async fn settle_payment(
        &self,
        payment_id: &str,
        event_id: &str,
        payload: &str,
    ) -> Result<bool, StoreError>;

    /// Events not yet published, and the age of the oldest.
    async fn outbox_backlog(&self) -> Result<crate::metrics::prometheus::OutboxBacklog, StoreError>;

    /// Closes the pool, waiting for connections in use to be returned.
    async fn close(&self);
}

/// Opens the target's database (creating the embedded SQLite file and its directory on
/// first run). Migrations are not applied here: see [`Store::migrate`].
pub async fn open(target: &DatabaseTarget) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match target {
        DatabaseTarget::Postgres { url } => Arc::new(PostgresStore::connect(url).await?),
        DatabaseTarget::Sqlite { url } => Arc::new(SqliteStore::connect_url(url).await?),
        DatabaseTarget::EmbeddedSqlite { path } => Arc::new(SqliteStore::open_file(path).await?),
    })
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unsupported database URL: expected postgres://… or sqlite://…")]
    UnsupportedUrl,
    #[error("invalid database URL: {0}")]
    InvalidUrl(#[source] sqlx::Error),
    #[error("cannot create the data directory {path}: {source}")]
    DataDir { path: PathBuf, source: std::io::Error },
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    #[error("migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    #[error("unexpected data in the database: {0}")]
    Corrupt(String),
    #[error("already exists")]
    AlreadyExists,
}

impl StoreError {
    /// How the contract answers a request this failure stopped: `503 UNAVAILABLE` when the
    /// database is not there (retryable: Idem fails closed and never executes without a durable
    /// record), `500` otherwise. Logged here, once.
    pub fn as_api_error(&self, during: &str) -> domain::api_error::ApiError {
        use domain::api_error::ApiError;
        match self {
            StoreError::Unavailable(_) => {
                tracing::warn!(error = %self, during, "store unavailable");
                ApiError::Unavailable
            }
            _ => {
                tracing::error!(error = %self, during, "store failure");
                ApiError::Internal
            }
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db_error) = &error
            && db_error.is_unique_violation()
        {
            return StoreError::AlreadyExists;
        }
        if is_unavailability(&error) {
            StoreError::Unavailable(error)
        } else {
            StoreError::Database(error)
        }
    }
}

/// Errors that say "the database is not there right now" rather than "this query is wrong":
/// callers fail closed on them with a retryable answer.
fn is_unavailability(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db_error) => db_error.code().is_some_and(|code| {
            // PostgreSQL: connection exceptions (08…), shutdown / cannot connect now (57P0…),
            // database dropped (3D000). SQLite: SQLITE_BUSY (5), SQLITE_LOCKED (6).
            code.starts_with("08")
                || code.starts_with("57P0")
                || code == "3D000"
                || code == "5"
                || code == "6"
        }),
        _ => false,
    }
}

/// A timestamp in the one text form both dialects compare correctly (SQLite stores this text;
/// PostgreSQL casts it).
pub fn rfc3339_millis(at: chrono::DateTime<chrono::Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// Compares what the database says it applied with what this binary carries.
fn readiness_of(applied_versions: &[i64], migrator: &Migrator) -> Readiness {
    let expected: Vec<i64> = migrator.iter().map(|migration| migration.version).collect();
    let applied = expected
        .iter()
        .filter(|version| applied_versions.contains(version))
        .count();
    if applied == expected.len() {
        Readiness::Ready
    } else {
        Readiness::MigrationsPending {
            applied,
            expected: expected.len(),
        }
    }
}

/// Principal rows: (api key id, tenant id, require_idempotency_key, pinned_api_version).
type PrincipalRow = (String, String, bool, String);

fn principal_of(
    (api_key_id, tenant_id, require_idempotency_key, pinned_api_version): PrincipalRow,
) -> Principal {
    Principal {
        tenant_id: TenantId::from_stored(tenant_id),
        api_key_id: ApiKeyId::from_stored(api_key_id),
        require_idempotency_key,
        pinned_api_version,
    }
}

// Statements written once for both dialects (each placeholder used once, in order, which is
// what SQLite's numbered parameters need).
const INSERT_TENANT: &str = "insert into tenants (id, name, require_idempotency_key) values ($1, $2, $3)";
const TENANT_ID_BY_NAME: &str = "select id from tenants where name = $1";
const INSERT_API_KEY: &str = "insert into api_keys (id, tenant_id, key_hash) values ($1, $2, $3)";
const AUTHENTICATE_API_KEY: &str = "select k.id, k.tenant_id, t.require_idempotency_key, t.pinned_api_version \
     from api_keys k join tenants t on t.id = k.tenant_id \
     where k.key_hash = $1 and k.revoked_at is null";
const INSERT_ACCOUNT: &str =
    "insert into accounts (tenant_id, id, currency, balance_minor) values ($1, $2, $3, $4)";
const APPLIED_MIGRATIONS: &str = "select version from _sqlx_migrations where success";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_empty_database_url_means_the_embedded_sqlite_file() {
        for url in [None, Some(""), Some("  ")] {
            assert_eq!(
                DatabaseTarget::resolve(url, Path::new("/var/idem")).expect("resolves"),
                DatabaseTarget::EmbeddedSqlite {
                    path: PathBuf::from("/var/idem/idem.db")
                }
            );
        }
    }

    #[test]
    fn the_scheme_chooses_the_dialect() {
        let dir = Path::new("data");
        let pg = DatabaseTarget::resolve(Some("postgresql://u@h/db"), dir).expect("postgres");
        assert_eq!(pg.dialect(), Dialect::Postgres);
        let lite = DatabaseTarget::resolve(Some("sqlite://x.db"), dir).expect("sqlite");
        assert_eq!(lite.dialect(), Dialect::Sqlite);
        assert!(matches!(
            DatabaseTarget::resolve(Some("mysql://u@h/db"), dir),
            Err(StoreError::UnsupportedUrl)
        ));
    }

    #[test]
    fn passwords_never_reach_a_log_line() {
        let target = DatabaseTarget::Postgres {
            url: "postgres://idem:s3cr3t@db.internal:5432/idem?sslmode=require".into(),
        };
        assert_eq!(
            target.redacted(),
            "postgres://idem:***@db.internal:5432/idem?sslmode=require"
        );
        let no_password = DatabaseTarget::Postgres {
            url: "postgres://idem@db/idem".into(),
        };
        assert_eq!(no_password.redacted(), "postgres://idem@db/idem");
    }
}
