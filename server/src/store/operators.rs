//! Console operators, their server-side sessions, and the audit log.

use super::dialect::{Dialect, RowsAffected, SqlStore, WriteTx, rfc3339_millis};
use super::error::StoreError;
use chrono::{DateTime, Utc};
use domain::cursor::AuditCursor;
use domain::operator::{AuditEntry, OperatorRole};
use sqlx::Database;
use sqlx::query::Query;

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

/// An audit entry as read back: its id and time, and what was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedAudit {
    pub id: String,
    pub at: DateTime<Utc>,
    pub entry: AuditEntry,
}

#[async_trait::async_trait]
pub trait OperatorStore: Send + Sync {
    /// Creates the operator and writes `audit`, in one transaction; `Err(AlreadyExists)` when
    /// the username is taken.
    async fn create_operator(&self, operator: &StoredOperator, audit: &AuditEntry) -> Result<(), StoreError>;

    /// Applies `change` to the operator named `username` and writes `audit`, in one
    /// transaction; `false` (nothing written) when there is no such operator, and
    /// `Err(LastAdmin)` (nothing written) when it would leave no enabled admin.
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

    /// Deletes up to `limit` expired sessions (the session expiry worker's); returns how many.
    async fn delete_expired_sessions(&self, limit: i64) -> Result<u64, StoreError>;

    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError>;

    /// Every entry of `entries`, in one transaction (one commit for a batch of summaries).
    async fn append_audit_entries(&self, entries: &[AuditEntry]) -> Result<(), StoreError>;

    /// Newest first, older than `before` when given.
    async fn audit_page(
        &self,
        before: Option<&AuditCursor>,
        limit: i64,
    ) -> Result<Vec<LoggedAudit>, StoreError>;

    /// The newest entries about one target (a record's audit trail).
    async fn audit_of_target(&self, target: &str, limit: i64) -> Result<Vec<LoggedAudit>, StoreError>;
}

/// Operator statements that differ by dialect.
pub trait OperatorStatements {
    /// `$1` limit: expired sessions, by their physical row id.
    const DELETE_EXPIRED_SESSIONS: &'static str;
}

/// `$1` id hash, `$2` data, `$3` expiry (RFC 3339 text): upsert.
const SAVE_SESSION: &str = "insert into operator_sessions (id_hash, data, expires_at) values ($1, $2, {time($3)}) on \
     conflict (id_hash) do update set data = excluded.data, expires_at = excluded.expires_at";

/// `$1` id hash, `$2` data, `$3` expiry (RFC 3339 text): insert, or nothing on a collision.
const CREATE_SESSION: &str = "insert into operator_sessions (id_hash, data, expires_at) values ($1, $2, {time($3)}) on \
     conflict (id_hash) do nothing";

/// `$1` cursor time (RFC 3339 text), `$2` cursor id, `$3` limit: `audit_log` rows, newest first.
const AUDIT_PAGE: &str = "select id, at, actor, action, target, reason, result, details from audit_log where (at, id) \
     < ({time($1)}, $2) order by at desc, id desc limit $3";

/// The usernames of the enabled admins, locked until the transaction ends, so that two
/// admins who disable or demote each other at once are taken one after the other.
/// On SQLite `{for_update}` is nothing: its single writer already takes these transactions
/// one at a time.
const ENABLED_ADMINS_LOCKED: &str =
    "select username from operators where role = 'admin' and disabled_at is null {for_update}";

/// `$1` username: disabled now, unless it already was.
const DISABLE_OPERATOR: &str =
    "update operators set disabled_at = coalesce(disabled_at, {now}) where username = $1";

/// `$1` id hash: data and expiry of an unexpired session.
const LOAD_SESSION: &str =
    "select data, expires_at from operator_sessions where id_hash = $1 and expires_at > {now}";

/// A row of `audit_log`.
#[derive(sqlx::FromRow)]
struct AuditRow {
    id: String,
    at: DateTime<Utc>,
    actor: String,
    action: String,
    target: Option<String>,
    reason: Option<String>,
    result: String,
    details: Option<String>,
}

fn logged_audit_of(row: AuditRow) -> LoggedAudit {
    LoggedAudit {
        id: row.id,
        at: row.at,
        entry: AuditEntry {
            actor: row.actor,
            action: row.action,
            target: row.target,
            reason: row.reason,
            result: row.result,
            details: row.details,
        },
    }
}

/// An operator's row, with `disabled` 0 or 1 (`select_operator!`).
#[derive(sqlx::FromRow)]
struct OperatorRow {
    id: String,
    username: String,
    password_hash: String,
    role: String,
    disabled: i32,
}

/// `operators` as [`OperatorRow`]s, a macro so that each look-up is one literal (the session
/// layer reads the operator on every console request: no statement is formatted per call).
macro_rules! select_operator {
    ($filter:literal) => {
        concat!(
            "select id, username, password_hash, role, \
             case when disabled_at is null then 0 else 1 end as disabled from operators where ",
            $filter
        )
    };
}

fn operator_of(row: OperatorRow) -> Result<StoredOperator, StoreError> {
    Ok(StoredOperator {
        id: row.id,
        username: row.username,
        password_hash: row.password_hash,
        role: StoreError::parse_stored("operator role", &row.role)?,
        disabled: row.disabled != 0,
    })
}

/// A row of the operators' list.
#[derive(sqlx::FromRow)]
struct OperatorListingRow {
    username: String,
    role: String,
    disabled: i32,
    created_at: DateTime<Utc>,
}

/// Writes an audit entry inside `tx`, so that it commits or rolls back with the action it
/// records.
pub(super) async fn insert_audit<D: Dialect>(
    tx: &mut WriteTx<D>,
    entry: &AuditEntry,
) -> Result<(), StoreError> {
    sqlx::query(
        "insert into audit_log (id, actor, action, target, reason, result, details) \
         values ($1, $2, $3, $4, $5, $6, $7)",
    )
    // Unique is what matters: pages order by time first.
    .bind(format!("aud_{}", domain::random::random_hex(12)))
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

impl<D: Dialect> SqlStore<D> {
    /// The operator `statement` (a `select_operator!`) finds by `value`.
    async fn operator_where(
        &self,
        statement: &'static str,
        value: &str,
    ) -> Result<Option<StoredOperator>, StoreError> {
        let row: Option<OperatorRow> = sqlx::query_as(statement)
            .bind(value)
            .fetch_optional(&self.pool)
            .await?;
        row.map(operator_of).transpose()
    }
}

impl<D: Dialect> SqlStore<D> {
    /// [`write_one`](Self::write_one) with its audit entry in the same transaction, written
    /// only when the statement changed something.
    pub(super) async fn write_audited<'q>(
        &self,
        statement: Query<'q, D, <D as Database>::Arguments<'q>>,
        audit: &AuditEntry,
    ) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        let affected = statement.execute(&mut *tx).await?.rows_affected();
        if affected > 0 {
            insert_audit(&mut tx, audit).await?;
        }
        tx.commit().await?;
        Ok(affected)
    }
}

#[async_trait::async_trait]
impl<D: Dialect + OperatorStatements> OperatorStore for SqlStore<D> {
    async fn create_operator(&self, operator: &StoredOperator, audit: &AuditEntry) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("insert into operators (id, username, password_hash, role) values ($1, $2, $3, $4)")
            .bind(operator.id.as_str())
            .bind(operator.username.as_str())
            .bind(operator.password_hash.as_str())
            .bind(operator.role.as_str())
            .execute(&mut *tx)
            .await?;
        insert_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn change_operator(
        &self,
        username: &str,
        change: &OperatorChange,
        audit: &AuditEntry,
    ) -> Result<bool, StoreError> {
        let statement = match change {
            OperatorChange::Password(hash) => {
                sqlx::query("update operators set password_hash = $1 where username = $2").bind(hash.as_str())
            }
            OperatorChange::Role(role) => {
                sqlx::query("update operators set role = $1 where username = $2").bind(role.as_str())
            }
            OperatorChange::Disable => sqlx::query(D::sql(DISABLE_OPERATOR)),
            OperatorChange::Enable(hash) => {
                sqlx::query("update operators set disabled_at = null, password_hash = $1 where username = $2")
                    .bind(hash.as_str())
            }
        };
        let mut tx = self.begin().await?;
        if matches!(
            change,
            OperatorChange::Disable | OperatorChange::Role(OperatorRole::Viewer | OperatorRole::Operator)
        ) {
            let admins: Vec<String> = sqlx::query_scalar(D::sql(ENABLED_ADMINS_LOCKED))
                .fetch_all(&mut *tx)
                .await?;
            if admins.iter().all(|admin| admin == username) && !admins.is_empty() {
                return Err(StoreError::LastAdmin);
            }
        }
        if statement.bind(username).execute(&mut *tx).await?.rows_affected() != 1 {
            return Ok(false);
        }
        insert_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn operator_by_username(&self, username: &str) -> Result<Option<StoredOperator>, StoreError> {
        self.operator_where(select_operator!("username = $1"), username)
            .await
    }

    async fn operator_by_id(&self, id: &str) -> Result<Option<StoredOperator>, StoreError> {
        self.operator_where(select_operator!("id = $1"), id).await
    }

    async fn list_operators(&self) -> Result<Vec<OperatorListing>, StoreError> {
        let rows: Vec<OperatorListingRow> = sqlx::query_as(
            "select username, role, case when disabled_at is null then 0 else 1 end as disabled, created_at \
             from operators order by username",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(OperatorListing {
                    role: StoreError::parse_stored("operator role", &row.role)?,
                    username: row.username,
                    disabled: row.disabled != 0,
                    created_at: row.created_at,
                })
            })
            .collect()
    }

    async fn create_session(
        &self,
        id_hash: &str,
        data: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let created = self
            .write_one(
                sqlx::query(D::sql(CREATE_SESSION))
                    .bind(id_hash)
                    .bind(data)
                    .bind(rfc3339_millis(expires_at)),
            )
            .await?;
        Ok(created == 1)
    }

    async fn save_session(
        &self,
        id_hash: &str,
        data: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.write_one(
            sqlx::query(D::sql(SAVE_SESSION))
                .bind(id_hash)
                .bind(data)
                .bind(rfc3339_millis(expires_at)),
        )
        .await?;
        Ok(())
    }

    async fn load_session(&self, id_hash: &str) -> Result<Option<(String, DateTime<Utc>)>, StoreError> {
        let session: Option<SessionRow> = sqlx::query_as(D::sql(LOAD_SESSION))
            .bind(id_hash)
            .fetch_optional(&self.pool)
            .await?;
        Ok(session.map(|session| (session.data, session.expires_at)))
    }

    async fn delete_session(&self, id_hash: &str) -> Result<(), StoreError> {
        self.write_one(sqlx::query("delete from operator_sessions where id_hash = $1").bind(id_hash))
            .await?;
        Ok(())
    }

    async fn delete_expired_sessions(&self, limit: i64) -> Result<u64, StoreError> {
        self.write_one(sqlx::query(D::DELETE_EXPIRED_SESSIONS).bind(limit))
            .await
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.append_audit_entries(std::slice::from_ref(entry)).await
    }

    async fn append_audit_entries(&self, entries: &[AuditEntry]) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        for entry in entries {
            insert_audit(&mut tx, entry).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn audit_page(
        &self,
        before: Option<&AuditCursor>,
        limit: i64,
    ) -> Result<Vec<LoggedAudit>, StoreError> {
        let (at, id) = match before {
            Some(cursor) => (rfc3339_millis(cursor.at), cursor.id.clone()),
            None => ("9999-12-31T23:59:59.999Z".to_owned(), String::new()),
        };
        let rows: Vec<AuditRow> = sqlx::query_as(D::sql(AUDIT_PAGE))
            .bind(at)
            .bind(id)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(logged_audit_of).collect())
    }

    async fn audit_of_target(&self, target: &str, limit: i64) -> Result<Vec<LoggedAudit>, StoreError> {
        let rows: Vec<AuditRow> = sqlx::query_as(
            "select id, at, actor, action, target, reason, result, details from audit_log \
             where target = $1 order by at desc, id desc limit $2",
        )
        .bind(target)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(logged_audit_of).collect())
    }
}

/// A row of [`LOAD_SESSION`].
#[derive(sqlx::FromRow)]
struct SessionRow {
    data: String,
    expires_at: DateTime<Utc>,
}
