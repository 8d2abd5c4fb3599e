use super::StoreError;
use super::approvals::{ApprovalSql, impl_approval_store};
use super::bulk::{BulkSql, impl_bulk_store};
use super::console::{ConsoleSql, impl_console_store};
use super::events::{EventSql, impl_event_store};
use super::operators::{OperatorSql, impl_operator_store};
use super::retention::{RetentionSql, impl_retention_store, purge_batch};
use super::shared::{DialectSql, impl_store, renew_released_or_expired_record, select_record};
use sqlx::SqlitePool;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

static MIGRATOR: Migrator = sqlx::migrate!("../migrations/sqlite");

/// `now()` in the text form every SQLite timestamp column uses.
macro_rules! now {
    () => {
        "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
    };
    ($seconds:literal) => {
        concat!(
            "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ",
            $seconds,
            " || ' seconds')"
        )
    };
}

const SQL: DialectSql = DialectSql {
    select_record: select_record!(now!()),
    migrations_table_exists: "select count(*) from sqlite_master where type = 'table' and name = '_sqlx_migrations'",
    revoke_api_key: concat!(
        "update api_keys set revoked_at = ",
        now!(),
        " where id = $1 and revoked_at is null"
    ),
    claim_record: concat!(
        "insert into idempotency_records (tenant_id, operation_name, idempotency_key, ",
        "fingerprint_version, request_fingerprint, canonical_command, status, progress_step, ",
        "resource_type, resource_id, response_schema_version, lease_owner, lease_version, locked_until, ",
        "created_by, expires_at) ",
        "values ($1, $2, $3, $4, $5, $6, 'IN_PROGRESS', 'PROVIDER_REQUEST_SENT', 'payment', $7, $8, $9, 1, ",
        now!("$10"),
        ", $11, ",
        now!("$12"),
        ")",
        renew_released_or_expired_record!(now!())
    ),
    // The claim's insert already holds SQLite's single write lock for this transaction.
    account_for_update: "select currency, balance_minor from accounts where tenant_id = $1 and id = $2",
    hold_amount: concat!(
        "update accounts set balance_minor = balance_minor - $1, updated_at = ",
        now!(),
        " where tenant_id = $2 and id = $3"
    ),
    bind_insufficient_funds: concat!(
        "update idempotency_records set status = 'FAILED_REPLAYABLE', ",
        "progress_step = 'COMPLETED', response_status_code = $1, resource_type = null, resource_id = null, ",
        "locked_until = null, completed_at = ",
        now!(),
        ", updated_at = ",
        now!(),
        " where tenant_id = $2 and operation_name = $3 and idempotency_key = $4"
    ),
    settle_record: concat!(
        "update idempotency_records set status = $1, progress_step = 'COMPLETED', ",
        "response_status_code = $2, provider_reference = $3, locked_until = null, completed_at = ",
        now!(),
        ", updated_at = ",
        now!(),
        " where tenant_id = $4 and operation_name = $5 and idempotency_key = $6 and lease_version = $7 ",
        "and status = 'IN_PROGRESS'"
    ),
    mark_unknown: concat!(
        "update idempotency_records set status = 'UNKNOWN_REQUIRES_RECOVERY', ",
        "progress_step = 'UNKNOWN_REQUIRES_RECOVERY', locked_until = null, updated_at = ",
        now!(),
        ", recovery_attempts = recovery_attempts + 1, next_recovery_at = ",
        now!("(1 << min(recovery_attempts, 8))"),
        " where tenant_id = $1 and operation_name = $2 and idempotency_key = $3 and lease_version = $4 ",
        "and status = 'IN_PROGRESS'"
    ),
    set_payment_outcome: concat!(
        "update payments set status = $1, provider_charge_id = $2, updated_at = ",
        now!(),
        " where id = $3 and status = 'PROCESSING'"
    ),
    release_hold: concat!(
        "update accounts set balance_minor = balance_minor + $1, updated_at = ",
        now!(),
        " where tenant_id = $2 and id = $3"
    ),
    set_default_currency: concat!(
        "update accounts set default_currency = $1, updated_at = ",
        now!(),
        " where tenant_id = $2 and id = $3 and (default_currency is null or default_currency <> $1)"
    ),
    take_over: concat!(
        "update idempotency_records set lease_version = lease_version + 1, lease_owner = $1, locked_until = ",
        now!("$2"),
        ", status = 'IN_PROGRESS', progress_step = 'PROVIDER_REQUEST_SENT', updated_at = ",
        now!(),
        " where tenant_id = $3 and operation_name = $4 and idempotency_key = $5 and lease_version = $6 ",
        "and (status = 'UNKNOWN_REQUIRES_RECOVERY' or (status = 'IN_PROGRESS' and (locked_until is null or locked_until <= ",
        now!(),
        "))) returning lease_version, expires_at"
    ),
    recovery_candidates: concat!(
        "select tenant_id, operation_name, idempotency_key from idempotency_records ",
        "where (status = 'UNKNOWN_REQUIRES_RECOVERY' and recovery_attempts < $1 ",
        "and (next_recovery_at is null or next_recovery_at <= ",
        now!(),
        ")) or (status = 'IN_PROGRESS' and locked_until <= ",
        now!(),
        ") order by updated_at limit $2"
    ),
    take_stale_unkeyed_payments: concat!(
        "update payments set updated_at = ",
        now!(),
        " where id in (select id from payments where status = 'PROCESSING' and idempotency_key is null ",
        "and updated_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $1 || ' seconds') ",
        "order by updated_at limit $2) ",
        "returning tenant_id, id, account_id, amount_minor, currency, merchant_reference, status, created_at"
    ),
    in_progress_ages: "select tenant_id, operation_name, \
         (julianday('now') - julianday(min(created_at))) * 86400.0 \
         from idempotency_records where status = 'IN_PROGRESS' group by tenant_id, operation_name",
    add_outcome_count: "insert into outcome_buckets (bucket_start, tenant_id, operation_name, outcome, count) \
         values ($1, $2, $3, $4, $5) \
         on conflict (bucket_start, tenant_id, operation_name, outcome) \
         do update set count = outcome_buckets.count + excluded.count",
    outbox_backlog: "select count(*), \
         coalesce((julianday('now') - julianday(min(created_at))) * 86400.0, 0.0) \
         from outbox_events where published_at is null and dead_at is null",
    take_payments_to_settle: concat!(
        "update payments set updated_at = ",
        now!(),
        " where id in (select id from payments where status = 'PENDING' ",
        "and updated_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $1 || ' seconds') ",
        "order by updated_at limit $2) returning id"
    ),
    settle_payment: concat!(
        "update payments set status = 'SETTLED', updated_at = ",
        now!(),
        " where id = $1 and status = 'PENDING'"
    ),
    release_record: concat!(
        "update idempotency_records set status = 'FAILED_RETRYABLE', ",
        "lease_version = lease_version + 1, locked_until = null, next_recovery_at = null, completed_at = ",
        now!(),
        ", updated_at = ",
        now!(),
        " where tenant_id = $1 and operation_name = $2 and idempotency_key = $3 and lease_version = $4 ",
        "and (status = 'UNKNOWN_REQUIRES_RECOVERY' or (status = 'IN_PROGRESS' and (locked_until is null or locked_until <= ",
        now!(),
        "))) returning resource_id"
    ),
    release_payment: concat!(
        "update payments set status = 'DECLINED', released_at = ",
        now!(),
        ", updated_at = ",
        now!(),
        " where id = $1 and status = 'PROCESSING'"
    ),
    take_released_payments_to_watch: concat!(
        "update payments set release_checked_at = ",
        now!(),
        " where id in (select id from payments where released_at is not null and late_charge_id is null ",
        "and released_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $1 || ' seconds') ",
        "and (release_checked_at is null or release_checked_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $2 || ' seconds')) ",
        "order by release_checked_at limit $3) returning id"
    ),
};

const RETENTION_SQL: RetentionSql = RetentionSql {
    begin: "begin immediate",
    // SQLite has no statement timeout: a batch is bounded by its size alone.
    bound_transaction: &[],
    purge_batch: purge_batch!(now!(), "rowid", " in (", "", ")"),
    delete_tombstones: concat!(
        "delete from idempotency_records where rowid in (",
        "select rowid from idempotency_records ",
        "where status = 'EXPIRED' and expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $1 || ' seconds') ",
        "order by expires_at limit $2)"
    ),
    backlog: concat!(
        "select (select count(*) from idempotency_records ",
        "where status in ('COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE') and expires_at <= ",
        now!(),
        "), (select count(*) from idempotency_records ",
        "where status = 'EXPIRED' and expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $1 || ' seconds'))"
    ),
    note_sealing_key: concat!(
        "insert into response_key_checks (key_id, probe) values ($1, $2) ",
        "on conflict (key_id) do update set last_sealed_at = ",
        now!()
    ),
    note_expired_retry: "update idempotency_records set expired_retries = expired_retries + 1 \
         where tenant_id = $1 and operation_name = $2 and idempotency_key = $3",
};

const OPERATOR_SQL: OperatorSql = OperatorSql {
    create_session: "insert into operator_sessions (id_hash, data, expires_at) values ($1, $2, $3) \
         on conflict (id_hash) do nothing",
    save_session: "insert into operator_sessions (id_hash, data, expires_at) values ($1, $2, $3) \
         on conflict (id_hash) do update set data = excluded.data, expires_at = excluded.expires_at",
    load_session: concat!(
        "select data, expires_at from operator_sessions where id_hash = $1 and expires_at > ",
        now!()
    ),
    audit_page: "select id, at, actor, action, target, reason, result, details from audit_log \
         where (at, id) < ($1, $2) order by at desc, id desc limit $3",
    delete_expired_sessions: concat!(
        "delete from operator_sessions where rowid in (select rowid from operator_sessions where expires_at <= ",
        now!(),
        " limit $1)"
    ),
    disable_operator: concat!(
        "update operators set disabled_at = coalesce(disabled_at, ",
        now!(),
        ") where username = $1"
    ),
};

/// Seconds (float) since the oldest `created_at` of the rows a query selects.
macro_rules! age_of_oldest {
    () => {
        "coalesce((julianday('now') - julianday(min(created_at))) * 86400.0, 0.0)"
    };
}

const CONSOLE_SQL: ConsoleSql = ConsoleSql {
    outcome_series: "select (cast(strftime('%s', bucket_start) as integer) / $1) * $1, outcome, sum(count) \
         from outcome_buckets \
         where bucket_start >= strftime('%Y-%m-%dT%H:%M:%fZ', $2, 'unixepoch') \
         and bucket_start < strftime('%Y-%m-%dT%H:%M:%fZ', $3, 'unixepoch') \
         and ($4 = '' or tenant_id = $4) and ($5 = '' or operation_name = $5) \
         group by 1, outcome order by 1",
    record_gauges: concat!(
        "select (select count(*) from idempotency_records where status = 'IN_PROGRESS'), ",
        "(select count(*) from idempotency_records where status = 'IN_PROGRESS' and locked_until <= ",
        now!(),
        "), (select ",
        age_of_oldest!(),
        " from idempotency_records where status = 'IN_PROGRESS' and locked_until <= ",
        now!(),
        "), (select count(*) from idempotency_records where status = 'UNKNOWN_REQUIRES_RECOVERY'), ",
        "(select ",
        age_of_oldest!(),
        " from idempotency_records where status = 'UNKNOWN_REQUIRES_RECOVERY'), ",
        "(select count(*) from idempotency_records ",
        "where status = 'UNKNOWN_REQUIRES_RECOVERY' and recovery_attempts >= $1)"
    ),
    list_records: "select tenant_id, operation_name, idempotency_key, status, progress_step, resource_id, \
         provider_reference, created_at, updated_at, recovery_attempts from idempotency_records \
         where ($1 = '' or status = $1) and ($2 = '' or progress_step = $2) \
         and ($3 = '' or tenant_id = $3) and ($4 = '' or operation_name = $4) \
         and ($5 = '' or substr(idempotency_key, 1, length($5)) = $5) \
         and created_at >= $6 and created_at < $7 \
         and (created_at, tenant_id, operation_name, idempotency_key) \
             < (strftime('%Y-%m-%dT%H:%M:%fZ', $8), $9, $10, $11) \
         order by created_at desc, tenant_id desc, operation_name desc, idempotency_key desc limit $12",
    recovery_queue: concat!(
        "select tenant_id, operation_name, idempotency_key, status, progress_step, resource_id, ",
        "provider_reference, created_at, updated_at, recovery_attempts from idempotency_records ",
        "where status = 'UNKNOWN_REQUIRES_RECOVERY' or (status = 'IN_PROGRESS' and locked_until <= ",
        now!(),
        ") order by created_at limit $1"
    ),
    resolve_late_charge: concat!(
        "update payments set late_charge_resolved_at = ",
        now!(),
        ", late_charge_resolved_by = $2, late_charge_resolution = $3 where id = $1 and tenant_id = $4 ",
        "and idempotency_key = $5 and released_at is not null and late_charge_id is not null ",
        "and late_charge_resolved_at is null"
    ),
    insert_journal: "insert into idempotency_requests (id, tenant_id, operation_name, idempotency_key, at, \
         fingerprint, canonical_command, status_code, error_code, replayed) \
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
};

const BULK_SQL: BulkSql = BulkSql {
    claim_job: concat!(
        "update bulk_jobs set runner_until = ",
        now!("$1"),
        " where id in (select id from bulk_jobs where finished_at is null ",
        "and (runner_until is null or runner_until <= ",
        now!(),
        ") and ($2 = '' or id = $2) order by created_at limit 1) returning id, requested_by, reason"
    ),
    renew_job: concat!(
        "update bulk_jobs set runner_until = ",
        now!("$2"),
        " where id = $1"
    ),
    finish_item: concat!(
        "update bulk_job_items set ok = $3, message = $4, record_status = $5, done_at = ",
        now!(),
        " where job_id = $1 and position = $2"
    ),
    finish_job: concat!(
        "update bulk_jobs set finished_at = ",
        now!(),
        ", runner_until = null where id = $1"
    ),
};

const APPROVAL_SQL: ApprovalSql = ApprovalSql {
    decide_override: concat!(
        "update override_requests set state = $2, decided_by = $3, decision_reason = $4, decided_at = ",
        now!(),
        " where id = $1 and state = 'pending' and requested_by <> $3 and requested_at > ",
        now!("-$5")
    ),
    expire_overrides: concat!(
        "update override_requests set state = 'rejected', decision_reason = $2, decided_at = ",
        now!(),
        " where state = 'pending' and requested_at <= ",
        now!("-$1"),
        " returning id, tenant_id, operation_name, idempotency_key"
    ),
};

const EVENT_SQL: EventSql = EventSql {
    consumer_lag: "select count(*) from outbox_events e \
         where not exists (select 1 from consumer_inbox i where i.consumer_name = $1 and i.message_id = e.id) \
         and e.event_type = $2 \
         and e.created_at >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $3 || ' seconds') \
         and e.published_at is not null",
    redrive_event: "update outbox_events set dead_at = null, attempts = 0, next_attempt_at = null, \
         claimed_until = null where id = $1 and dead_at = strftime('%Y-%m-%dT%H:%M:%fZ', $2)",
    claim_events: concat!(
        "update outbox_events set claimed_until = ",
        now!("$1"),
        ", attempts = attempts + 1 where id in (",
        "select id from outbox_events where published_at is null and dead_at is null ",
        "and (next_attempt_at is null or next_attempt_at <= ",
        now!(),
        ") and (claimed_until is null or claimed_until <= ",
        now!(),
        ") order by created_at limit $2) returning id, event_type, payment_id, payload"
    ),
    mark_event_published: concat!(
        "update outbox_events set published_at = ",
        now!(),
        ", claimed_until = null, last_error = null where id = $1 and published_at is null"
    ),
    mark_event_failed: concat!(
        "update outbox_events set claimed_until = null, last_error = $1, dead_at = case when attempts >= $2 then ",
        now!(),
        " else null end, next_attempt_at = ",
        now!("min(1 << attempts, 300)"),
        " where id = $3"
    ),
    mark_receipt_sent: concat!(
        "update receipts set sent_at = ",
        now!(),
        " where dedupe_key = $1 and sent_at is null"
    ),
};

/// The embedded store: one file, WAL so that readers never wait for the writer, a busy
/// timeout so that writers queue instead of failing, foreign keys enforced.
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    pub async fn connect_url(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url).map_err(StoreError::InvalidUrl)?;
        Self::connect(options).await
    }

    pub async fn open_file(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::DataDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        Self::connect(SqliteConnectOptions::new().filename(path)).await
    }

    async fn connect(options: SqliteConnectOptions) -> Result<Self, StoreError> {
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(5))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await?;
        Ok(SqliteStore { pool })
    }
}

impl_store!(SqliteStore, sqlx::Sqlite, super::Dialect::Sqlite, MIGRATOR, SQL);
impl_retention_store!(SqliteStore, sqlx::Sqlite, RETENTION_SQL);
impl_operator_store!(SqliteStore, sqlx::Sqlite, OPERATOR_SQL);
impl_console_store!(SqliteStore, sqlx::Sqlite, CONSOLE_SQL);
impl_approval_store!(SqliteStore, sqlx::Sqlite, APPROVAL_SQL);
impl_bulk_store!(SqliteStore, BULK_SQL);
impl_event_store!(SqliteStore, sqlx::Sqlite, EVENT_SQL);
