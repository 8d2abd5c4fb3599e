//! Console operators, their server-side sessions, and the audit log. One body for both
//! dialects, like `impl_store!`; the statements that differ are in [`OperatorSql`].

use crate::store::StoreError;
use app::dto::AuditEntryView;
use chrono::{DateTime, Utc};
pub use domain::operator::AuditEntry;
use domain::operator::OperatorRole;

/// An operator as stored (the password only as its Argon2 hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredOperator {
    pub id: String,
    pub username: String,
    pub password_hash: String,
    pub role: OperatorRole,
    pub disabled: bool,
}

/// An operator as `idem operator list` shows them (never their password hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorListing {
    pub username: String,
    pub role: OperatorRole,
    pub disabled: bool,
    pub created_at: DateTime<Utc>,
}

/// A change to an existing operator, made from the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorChange {
    /// A new Argon2 hash; sessions started with the old password stop working.
    Password(String),
    /// Takes effect on the operator's next request (their role is read on every request).
    Role(OperatorRole),
    /// Their sessions stop working at once; nothing of theirs is deleted.
    Disable,
    /// Enabled again with a new Argon2 hash, so that sessions from before the disabling stay
    /// ended (they are bound to the old hash).
    Enable(String),
}

/// Where an audit page starts: strictly older than this entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditCursor {
    pub at: DateTime<Utc>,
    pub id: String,
}

#[async_trait::async_trait]
pub trait OperatorStore {
    /// Creates the operator and writes `audit`, in one transaction; `Err(AlreadyExists)` when
    /// the username is taken.
    async fn create_operator(&self, operator: &StoredOperator, audit: &AuditEntry) -> Result<(), StoreError>;

    /// Applies `change` to the operator named `username` and writes `audit`, in one
    /// transaction; `false` (nothing written) when there is no such operator.
    async fn change_operator(
        &self,
        username: &str,
        change: &OperatorChange,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError>;

    async fn operator_by_username(&self, username: &str) -> Result<Option<StoredOperator>, StoreError>;

    async fn operator_by_id(&self, id: &str) -> Result<Option<StoredOperator>, StoreError>;

    /// Every operator, by username.
    async fn list_operators(&self) -> Result<Vec<OperatorListing>, StoreError>;

    /// `false` when a session with this id already exists (nothing written).
    async fn create_session(
        &self,
        id_hash: &str,
        data: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    async fn save_session(
        &self,
        id_hash: &str,
        data: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// The data and expiry of a session that has not expired.
    async fn load_session(&self, id_hash: &str) -> Result<Option<(String, DateTime<Utc>)>, StoreError>;

    async fn delete_session(&self, id_hash: &str) -> Result<(), StoreError>;

    /// Deletes up to `limit` expired sessions (the cleanup worker's); returns how many.
    async fn delete_expired_sessions(&self, limit: i64) -> Result<u64, StoreError>;

    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError>;

    /// Newest first, older than `before` when given.
    async fn audit_page(
        &self,
        before: Option<&AuditCursor>,
        limit: i64,
    ) -> Result<Vec<AuditEntryView>, StoreError>;
}

/// Operator statements that differ by dialect.
pub(super) struct OperatorSql {
    /// `$1` id hash, `$2` data, `$3` expiry (RFC 3339 text): insert, or nothing on a collision.
    pub create_session: &'static str,
    /// `$1` id hash, `$2` data, `$3` expiry (RFC 3339 text): upsert.
    pub save_session: &'static str,
    /// `$1` id hash: data and expiry of an unexpired session.
    pub load_session: &'static str,
    /// `$1` cursor time (RFC 3339 text), `$2` cursor id, `$3` limit.
    pub audit_page: &'static str,
    /// `$1` limit: expired sessions, by their physical row id.
    pub delete_expired_sessions: &'static str,
    /// `$1` username: disabled now, unless it already was.
    pub disable_operator: &'static str,
}

pub(super) const INSERT_OPERATOR: &str =
    "insert into operators (id, username, password_hash, role) values ($1, $2, $3, $4)";
pub(super) const SET_OPERATOR_PASSWORD: &str = "update operators set password_hash = $1 where username = $2";
pub(super) const SET_OPERATOR_ROLE: &str = "update operators set role = $1 where username = $2";
pub(super) const ENABLE_OPERATOR: &str =
    "update operators set disabled_at = null, password_hash = $1 where username = $2";
pub(super) const OPERATOR_BY_USERNAME: &str = "select id, username, password_hash, role, \
     case when disabled_at is null then 0 else 1 end from operators where username = $1";
pub(super) const OPERATOR_BY_ID: &str = "select id, username, password_hash, role, \
     case when disabled_at is null then 0 else 1 end from operators where id = $1";
pub(super) const LIST_OPERATORS: &str = "select username, role, \
     case when disabled_at is null then 0 else 1 end, created_at from operators order by username";
pub(super) const DELETE_SESSION: &str = "delete from operator_sessions where id_hash = $1";
pub(super) const INSERT_AUDIT: &str = "insert into audit_log (id, actor, action, target, reason, result, details) \
     values ($1, $2, $3, $4, $5, $6, $7)";

pub(super) type OperatorRow = (String, String, String, String, i32);

pub(super) fn operator_of(
    (id, username, password_hash, role, disabled): OperatorRow,
) -> Result<StoredOperator, StoreError> {
    Ok(StoredOperator {
        id,
        username,
        password_hash,
        role: role
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("operator role {role}")))?,
        disabled: disabled != 0,
    })
}

pub(super) type AuditRow = (
    String,
    DateTime<Utc>,
    String,
    String,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
);

pub(super) fn audit_of((id, at, actor, action, target, reason, result, details): AuditRow) -> AuditEntryView {
    AuditEntryView {
        id,
        at: crate::store::rfc3339_millis(at),
        actor,
        action,
        target,
        reason,
        result,
        details,
    }
}

/// A new audit entry's id: time-ordered within a millisecond is not needed (pages order by
/// time first), unique is.
pub(super) fn new_audit_id() -> String {
    format!("aud_{}", domain::random::random_hex(12))
}

macro_rules! impl_operator_store {
    ($store:ty, $db:ty, $sql:expr) => {
        impl $store {
            /// Writes an audit entry inside `tx`, so that it commits or rolls back with the
            /// action it records.
            pub(super) async fn audit_in(
                tx: &mut sqlx::Transaction<'static, $db>,
                entry: &domain::operator::AuditEntry,
            ) -> Result<(), $crate::store::StoreError> {
                sqlx::query($crate::store::operators::INSERT_AUDIT)
                    .bind($crate::store::operators::new_audit_id())
                    .bind(entry.actor.as_str())
                    .bind(entry.action.as_str())
                    .bind(entry.target.as_deref())
                    .bind(entry.reason.as_deref())
                    .bind(entry.result.as_str())
                    .bind(entry.details.as_deref())
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            }
        }

        #[async_trait::async_trait]
        impl $crate::store::operators::OperatorStore for $store {
            async fn create_operator(
                &self,
                operator: &$crate::store::operators::StoredOperator,
                audit: &domain::operator::AuditEntry,
            ) -> Result<(), $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                sqlx::query($crate::store::operators::INSERT_OPERATOR)
                    .bind(operator.id.as_str())
                    .bind(operator.username.as_str())
                    .bind(operator.password_hash.as_str())
                    .bind(operator.role.as_str())
                    .execute(&mut *tx)
                    .await?;
                Self::audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn change_operator(
                &self,
                username: &str,
                change: &$crate::store::operators::OperatorChange,
                audit: &domain::operator::AuditEntry,
            ) -> Result<bool, $crate::store::StoreError> {
                use $crate::store::operators::{
                    ENABLE_OPERATOR, OperatorChange, SET_OPERATOR_PASSWORD, SET_OPERATOR_ROLE,
                };
                let statement = match change {
                    OperatorChange::Password(hash) => sqlx::query(SET_OPERATOR_PASSWORD).bind(hash.as_str()),
                    OperatorChange::Role(role) => sqlx::query(SET_OPERATOR_ROLE).bind(role.as_str()),
                    OperatorChange::Disable => sqlx::query($sql.disable_operator),
                    OperatorChange::Enable(hash) => sqlx::query(ENABLE_OPERATOR).bind(hash.as_str()),
                };
                let mut tx = self.pool.begin().await?;
                if statement
                    .bind(username)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    != 1
                {
                    return Ok(false);
                }
                Self::audit_in(&mut tx, audit).await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn operator_by_username(
                &self,
                username: &str,
            ) -> Result<Option<$crate::store::operators::StoredOperator>, $crate::store::StoreError> {
                let row: Option<$crate::store::operators::OperatorRow> =
                    sqlx::query_as($crate::store::operators::OPERATOR_BY_USERNAME)
                        .bind(username)
                        .fetch_optional(&self.pool)
                        .await?;
                row.map($crate::store::operators::operator_of).transpose()
            }

            async fn operator_by_id(
                &self,
                id: &str,
            ) -> Result<Option<$crate::store::operators::StoredOperator>, $crate::store::StoreError> {
                let row: Option<$crate::store::operators::OperatorRow> =
                    sqlx::query_as($crate::store::operators::OPERATOR_BY_ID)
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?;
                row.map($crate::store::operators::operator_of).transpose()
            }

            async fn list_operators(
                &self,
            ) -> Result<Vec<$crate::store::operators::OperatorListing>, $crate::store::StoreError> {
                let rows: Vec<(String, String, i32, chrono::DateTime<chrono::Utc>)> =
                    sqlx::query_as($crate::store::operators::LIST_OPERATORS)
                        .fetch_all(&self.pool)
                        .await?;
                rows.into_iter()
                    .map(|(username, role, disabled, created_at)| {
                        Ok($crate::store::operators::OperatorListing {
                            role: role.parse().map_err(|_| {
                                $crate::store::StoreError::Corrupt(format!("operator role {role}"))
                            })?,
                            username,
                            disabled: disabled != 0,
                            created_at,
                        })
                    })
                    .collect()
            }

            async fn create_session(
                &self,
                id_hash: &str,
                data: &str,
                expires_at: chrono::DateTime<chrono::Utc>,
            ) -> Result<bool, $crate::store::StoreError> {
                Ok($crate::store::shared::write_one!(
                    self.pool,
                    $sql.create_session,
                    id_hash,
                    data,
                    $crate::store::rfc3339_millis(expires_at)
                )
                .await?
                    == 1)
            }

            async fn save_session(
                &self,
                id_hash: &str,
                data: &str,
                expires_at: chrono::DateTime<chrono::Utc>,
            ) -> Result<(), $crate::store::StoreError> {
                $crate::store::shared::write_one!(
                    self.pool,
                    $sql.save_session,
                    id_hash,
                    data,
                    $crate::store::rfc3339_millis(expires_at)
                )
                .await?;
                Ok(())
            }

            async fn load_session(
                &self,
                id_hash: &str,
            ) -> Result<Option<(String, chrono::DateTime<chrono::Utc>)>, $crate::store::StoreError> {
                Ok(sqlx::query_as($sql.load_session)
                    .bind(id_hash)
                    .fetch_optional(&self.pool)
                    .await?)
            }

            async fn delete_session(&self, id_hash: &str) -> Result<(), $crate::store::StoreError> {
                $crate::store::shared::write_one!(
                    self.pool,
                    $crate::store::operators::DELETE_SESSION,
                    id_hash
                )
                .await?;
                Ok(())
            }

            async fn delete_expired_sessions(&self, limit: i64) -> Result<u64, $crate::store::StoreError> {
                $crate::store::shared::write_one!(self.pool, $sql.delete_expired_sessions, limit).await
            }

            async fn append_audit(
                &self,
                entry: &domain::operator::AuditEntry,
            ) -> Result<(), $crate::store::StoreError> {
                let mut tx = self.pool.begin().await?;
                Self::audit_in(&mut tx, entry).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn audit_page(
                &self,
                before: Option<&$crate::store::operators::AuditCursor>,
                limit: i64,
            ) -> Result<Vec<app::dto::AuditEntryView>, $crate::store::StoreError> {
                let (at, id) = match before {
                    Some(cursor) => ($crate::store::rfc3339_millis(cursor.at), cursor.id.clone()),
                    None => ("9999-12-31T23:59:59.999Z".to_owned(), String::new()),
                };
                let rows: Vec<$crate::store::operators::AuditRow> = sqlx::query_as($sql.audit_page)
                    .bind(at)
                    .bind(id)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows
                    .into_iter()
                    .map($crate::store::operators::audit_of)
                    .collect())
            }
        }
    };
}
pub(super) use impl_operator_store;
