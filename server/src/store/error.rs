//! The store's one error type, and how a failed read or write is answered.

use domain::api_error::ApiError;
use std::path::PathBuf;

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
    /// The change would leave no enabled admin (nothing written).
    #[error("it would leave no enabled admin")]
    LastAdmin,
    /// The shared commit that held this write did not happen (SQLite's group commit): nothing
    /// of it was written.
    #[error("not committed: {0}")]
    NotCommitted(String),
}

impl StoreError {
    /// How the contract answers a request this failure stopped: `503 UNAVAILABLE` when the
    /// database is not there (retryable: Idem fails closed and never executes without a durable
    /// record), `500` otherwise. Logged here, once.
    pub fn as_api_error(&self, during: &str) -> ApiError {
        match self {
            StoreError::Unavailable(_) | StoreError::NotCommitted(_) => {
                tracing::warn!(error = %self, during, "store unavailable");
                ApiError::Unavailable
            }
            _ => {
                tracing::error!(error = %self, during, "store failure");
                ApiError::Internal
            }
        }
    }

    /// A stored value this binary cannot read back (a status it does not know, say).
    pub(super) fn corrupt(what: &str, value: impl std::fmt::Display) -> StoreError {
        StoreError::Corrupt(format!("{what} {value}"))
    }

    /// A stored name (a status, a step, a role) read back as its type.
    pub(super) fn parse_stored<T: std::str::FromStr>(what: &str, value: &str) -> Result<T, StoreError> {
        value.parse().map_err(|_| StoreError::corrupt(what, value))
    }

    /// [`parse_stored`](Self::parse_stored) of a value that may be missing.
    pub(super) fn parse_optional<T: std::str::FromStr>(
        what: &str,
        value: Option<String>,
    ) -> Result<Option<T>, StoreError> {
        value
            .map(|value| StoreError::parse_stored(what, &value))
            .transpose()
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
