use super::StoreError;
use super::approvals::{ApprovalSql, impl_approval_store};
use super::bulk::{BulkSql, impl_bulk_store};
use super::console::{ConsoleSql, impl_console_store};
use super::events::{EventSql, impl_event_store};
use super::operators::{OperatorSql, impl_operator_store};
use super::retention::{RetentionSql, impl_retention_store, purge_batch};
use super::shared::{DialectSql, impl_store, renew_released_or_expired_record, select_record};
use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::str::FromStr;
use std::time::Duration;

static MIGRATOR: Migrator = sqlx::migrate!("../migrations/postgres");

const SQL: DialectSql = DialectSql {
    select_record: select_record!("now()"),
    migrations_table_exists: "select count(*) from pg_catalog.pg_tables \
         where tablename = '_sqlx_migrations' and schemaname = current_schema()",
    revoke_api_key: "update api_keys set revoked_at = now() where id = $1 and revoked_at is null",
    claim_record: concat!(
        "insert into idempotency_records (tenant_id, operation_name, idempotency_key, \
         fingerprint_version, request_fingerprint, canonical_command, status, progress_step, \
         resource_type, resource_id, response_schema_version, lease_owner, lease_version, locked_until, \
         created_by, expires_at) \
         values ($1, $2, $3, $4, $5, $6, 'IN_PROGRESS', 'PROVIDER_REQUEST_SENT', 'payment', $7, $8, $9, 1, \
         now() + make_interval(secs => $10), $11, now() + make_interval(secs => $12))",
        renew_released_or_expired_record!("now()")
    ),
    account_for_update: "select currency, balance_minor from accounts where tenant_id = $1 and id = $2 for update",
    hold_amount: "update accounts set balance_minor = balance_minor - $1, updated_at = now() \
         where tenant_id = $2 and id = $3",
    bind_insufficient_funds: "update idempotency_records set status = 'FAILED_REPLAYABLE', \
         progress_step = 'COMPLETED', response_status_code = $1, resource_type = null, resource_id = null, \
         locked_until = null, completed_at = now(), updated_at = now() \
         where tenant_id = $2 and operation_name = $3 and idempotency_key = $4",
    settle_record: "update idempotency_records set status = $1, progress_step = 'COMPLETED', \
         response_status_code = $2, provider_reference = $3, locked_until = null, completed_at = now(), updated_at = now() \
         where tenant_id = $4 and operation_name = $5 and idempotency_key = $6 and lease_version = $7 \
         and status = 'IN_PROGRESS'",
    mark_unknown: "update idempotency_records set status = 'UNKNOWN_REQUIRES_RECOVERY', \
         progress_step = 'UNKNOWN_REQUIRES_RECOVERY', locked_until = null, updated_at = now(), \
         recovery_attempts = recovery_attempts + 1, \
         next_recovery_at = now() + make_interval(secs => 1 << least(recovery_attempts, 8)) \
         where tenant_id = $1 and operation_name = $2 and idempotency_key = $3 and lease_version = $4 \
         and status = 'IN_PROGRESS'",
    set_payment_outcome: "update payments set status = $1, provider_charge_id = $2, updated_at = now() \
         where id = $3 and status = 'PROCESSING'",
    release_hold: "update accounts set balance_minor = balance_minor + $1, updated_at = now() \
         where tenant_id = $2 and id = $3",
    set_default_currency: "update accounts set default_currency = $1, updated_at = now() \
         where tenant_id = $2 and id = $3 and (default_currency is null or default_currency <> $1)",
    take_over: "update idempotency_records set lease_version = lease_version + 1, lease_owner = $1, \
         locked_until = now() + make_interval(secs => $2), status = 'IN_PROGRESS', \
         progress_step = 'PROVIDER_REQUEST_SENT', updated_at = now() \
         where tenant_id = $3 and operation_name = $4 and idempotency_key = $5 and lease_version = $6 \
         and (status = 'UNKNOWN_REQUIRES_RECOVERY' \
              or (status = 'IN_PROGRESS' and (locked_until is null or locked_until <= now()))) \
         returning lease_version, expires_at",
    recovery_candidates: "select tenant_id, operation_name, idempotency_key from idempotency_records \
         where (status = 'UNKNOWN_REQUIRES_RECOVERY' and recovery_attempts < $1 \
                and (next_recovery_at is null or next_recovery_at <= now())) \
            or (status = 'IN_PROGRESS' and locked_until <= now()) \
         order by updated_at limit $2",
    take_stale_unkeyed_payments: "update payments set updated_at = now() where id in ( \
             select id from payments where status = 'PROCESSING' and idempotency_key is null \
             and updated_at <= now() - make_interval(secs => $1) \
             order by updated_at limit $2 for update skip locked) \
         returning tenant_id, id, account_id, amount_minor, currency, merchant_reference, status, created_at",
    in_progress_ages: "select tenant_id, operation_name, \
         cast(extract(epoch from now() - min(created_at)) as double precision) \
         from idempotency_records where status = 'IN_PROGRESS' group by tenant_id, operation_name",
    add_outcome_count: "insert into outcome_buckets (bucket_start, tenant_id, operation_name, outcome, count) \
         values ($1::timestamptz, $2, $3, $4, $5) \
         on conflict (bucket_start, tenant_id, operation_name, outcome) \
         do update set count = outcome_buckets.count + excluded.count",
    outbox_backlog: "select count(*), \
         coalesce(cast(extract(epoch from now() - min(created_at)) as double precision), 0) \
         from outbox_events where published_at is null and dead_at is null",
    take_payments_to_settle: "update payments set updated_at = now() where id in ( \
             select id from payments where status = 'PENDING' \
             and updated_at <= now() - make_interval(secs => $1) \
             order by updated_at limit $2 for update skip locked) returning id",
    settle_payment: "update payments set status = 'SETTLED', updated_at = now() where id = $1 and status = 'PENDING'",
    release_record: "update idempotency_records set status = 'FAILED_RETRYABLE', \
         lease_version = lease_version + 1, locked_until = null, next_recovery_at = null, \
         completed_at = now(), updated_at = now() \
         where tenant_id = $1 and operation_name = $2 and idempotency_key = $3 and lease_version = $4 \
         and (status = 'UNKNOWN_REQUIRES_RECOVERY' \
              or (status = 'IN_PROGRESS' and (locked_until is null or locked_until <= now()))) \
         returning resource_id",
    release_payment: "update payments set status = 'DECLINED', released_at = now(), updated_at = now() \
         where id = $1 and status = 'PROCESSING'",
    take_released_payments_to_watch: "update payments set release_checked_at = now() where id in ( \
             select id from payments where released_at is not null and late_charge_id is null \
             and released_at > now() - make_interval(secs => $1) \
             and (release_checked_at is null or release_checked_at <= now() - make_interval(secs => $2)) \
             order by release_checked_at nulls first limit $3 for update skip locked) \
         returning id",
};

const RETENTION_SQL: RetentionSql = RetentionSql {
    // Row locks are taken by the statements themselves (and bounded by the timeouts below).
    begin: "begin",
    bound_transaction: &[
        "select set_config('statement_timeout', $1, true)",
        "select set_config('lock_timeout', $1, true)",
    ],
    // Rows a request holds are skipped, never waited for: cleanup yields to traffic.
    purge_batch: purge_batch!("now()", "ctid", " = any(array(", " for update skip locked", "))"),
    delete_tombstones: "delete from idempotency_records where ctid = any(array( \
             select ctid from idempotency_records \
             where status = 'EXPIRED' and expires_at <= now() - make_interval(secs => $1) \
             order by expires_at limit $2 for update skip locked))",
    backlog: "select (select count(*) from idempotency_records \
             where status in ('COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE') and expires_at <= now()), \
         (select count(*) from idempotency_records \
             where status = 'EXPIRED' and expires_at <= now() - make_interval(secs => $1))",
    note_sealing_key: "insert into response_key_checks (key_id, probe) values ($1, $2) \
         on conflict (key_id) do update set last_sealed_at = now()",
    note_expired_retry: "update idempotency_records set expired_retries = expired_retries + 1 \
         where tenant_id = $1 and operation_name = $2 and idempotency_key = $3",
};

const OPERATOR_SQL: OperatorSql = OperatorSql {
    create_session: "insert into operator_sessions (id_hash, data, expires_at) values ($1, $2, $3::timestamptz) \
         on conflict (id_hash) do nothing",
    save_session: "insert into operator_sessions (id_hash, data, expires_at) values ($1, $2, $3::timestamptz) \
         on conflict (id_hash) do update set data = excluded.data, expires_at = excluded.expires_at",
    load_session: "select data, expires_at from operator_sessions where id_hash = $1 and expires_at > now()",
    audit_page: "select id, at, actor, action, target, reason, result, details from audit_log \
         where (at, id) < ($1::timestamptz, $2) order by at desc, id desc limit $3",
    delete_expired_sessions: "delete from operator_sessions where ctid = any(array( \
         select ctid from operator_sessions where expires_at <= now() limit $1))",
    disable_operator: "update operators set disabled_at = coalesce(disabled_at, now()) where username = $1",
};

const CONSOLE_SQL: ConsoleSql = ConsoleSql {
    outcome_series: "select cast(floor(extract(epoch from bucket_start) / $1::bigint) * $1::bigint as bigint), \
         outcome, cast(sum(count) as bigint) from outcome_buckets \
         where bucket_start >= to_timestamp($2::bigint) and bucket_start < to_timestamp($3::bigint) \
         and ($4::text = '' or tenant_id = $4) and ($5::text = '' or operation_name = $5) \
         group by 1, outcome order by 1",
    record_gauges: "select \
         (select count(*) from idempotency_records where status = 'IN_PROGRESS'), \
         (select count(*) from idempotency_records where status = 'IN_PROGRESS' and locked_until <= now()), \
         (select coalesce(cast(extract(epoch from now() - min(created_at)) as double precision), 0) \
             from idempotency_records where status = 'IN_PROGRESS' and locked_until <= now()), \
         (select count(*) from idempotency_records where status = 'UNKNOWN_REQUIRES_RECOVERY'), \
         (select coalesce(cast(extract(epoch from now() - min(created_at)) as double precision), 0) \
             from idempotency_records where status = 'UNKNOWN_REQUIRES_RECOVERY'), \
         (select count(*) from idempotency_records \
             where status = 'UNKNOWN_REQUIRES_RECOVERY' and recovery_attempts >= $1)",
    list_records: "select tenant_id, operation_name, idempotency_key, status, progress_step, resource_id, \
         provider_reference, created_at, updated_at, recovery_attempts from idempotency_records \
         where ($1::text = '' or status = $1) and ($2::text = '' or progress_step = $2) \
         and ($3::text = '' or tenant_id = $3) and ($4::text = '' or operation_name = $4) \
         and ($5::text = '' or substr(idempotency_key, 1, length($5)) = $5) \
         and created_at >= $6::timestamptz and created_at < $7::timestamptz \
         and (created_at, tenant_id, operation_name, idempotency_key) < ($8::timestamptz, $9, $10, $11) \
         order by created_at desc, tenant_id desc, operation_name desc, idempotency_key desc limit $12",
    recovery_queue: "select tenant_id, operation_name, idempotency_key, status, progress_step, resource_id, \
         provider_reference, created_at, updated_at, recovery_attempts from idempotency_records \
         where status = 'UNKNOWN_REQUIRES_RECOVERY' or (status = 'IN_PROGRESS' and locked_until <= now()) \
         order by created_at limit $1",
    resolve_late_charge: "update payments set late_charge_resolved_at = now(), late_charge_resolved_by = $2, \
         late_charge_resolution = $3 where id = $1 and tenant_id = $4 and idempotency_key = $5 \
         and released_at is not null and late_charge_id is not null and late_charge_resolved_at is null",
    insert_journal: "insert into idempotency_requests (id, tenant_id, operation_name, idempotency_key, at, \
         fingerprint, canonical_command, status_code, error_code, replayed) \
         values ($1, $2, $3, $4, $5::timestamptz, $6, $7, $8, $9, $10)",
};

const BULK_SQL: BulkSql = BulkSql {
    claim_job: "update bulk_jobs set runner_until = now() + make_interval(secs => $1) where id in ( \
             select id from bulk_jobs where finished_at is null \
             and (runner_until is null or runner_until <= now()) and ($2 = '' or id = $2) \
             order by created_at limit 1 for update skip locked) \
         returning id, requested_by, reason",
    renew_job: "update bulk_jobs set runner_until = now() + make_interval(secs => $2) where id = $1",
    finish_item: "update bulk_job_items set ok = $3, message = $4, record_status = $5, done_at = now() \
         where job_id = $1 and position = $2",
    finish_job: "update bulk_jobs set finished_at = now(), runner_until = null where id = $1",
};

const APPROVAL_SQL: ApprovalSql = ApprovalSql {
    decide_override: "update override_requests set state = $2, decided_by = $3, decision_reason = $4, \
         decided_at = now() where id = $1 and state = 'pending' and requested_by <> $3 \
         and requested_at > now() - make_interval(secs => $5)",
    expire_overrides: "update override_requests set state = 'rejected', decision_reason = $2, \
         decided_at = now() where state = 'pending' and requested_at <= now() - make_interval(secs => $1) \
         returning id, tenant_id, operation_name, idempotency_key",
};

const EVENT_SQL: EventSql = EventSql {
    consumer_lag: "select count(*) from outbox_events e \
         where not exists (select 1 from consumer_inbox i where i.consumer_name = $1 and i.message_id = e.id) \
         and e.event_type = $2 and e.created_at >= now() - make_interval(secs => $3) \
         and e.published_at is not null",
    redrive_event: "update outbox_events set dead_at = null, attempts = 0, next_attempt_at = null, \
         claimed_until = null where id = $1 and dead_at = $2::timestamptz",
    // Rows another publisher holds are skipped, never waited for.
    claim_events: "update outbox_events set claimed_until = now() + make_interval(secs => $1), \
         attempts = attempts + 1 where id in ( \
             select id from outbox_events where published_at is null and dead_at is null \
             and (next_attempt_at is null or next_attempt_at <= now()) \
             and (claimed_until is null or claimed_until <= now()) \
             order by created_at limit $2 for update skip locked) \
         returning id, event_type, payment_id, payload",
    mark_event_published: "update outbox_events set published_at = now(), claimed_until = null, \
         last_error = null where id = $1 and published_at is null",
    mark_event_failed: "update outbox_events set claimed_until = null, last_error = $1, \
         dead_at = case when attempts >= $2 then now() else null end, \
         next_attempt_at = now() + make_interval(secs => least(power(2, attempts), 300)) where id = $3",
    mark_receipt_sent: "update receipts set sent_at = now() where dedupe_key = $1 and sent_at is null",
};

/// The production store: several `serve` instances share one PostgreSQL database.
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(StoreError::InvalidUrl)?
            // A connection left inside a transaction (a cancelled caller, a bug) is closed by
            // the server instead of holding locks and swallowing later writes.
            .options([("idle_in_transaction_session_timeout", "30s")]);
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(3))
            .connect_with(options)
            .await?;
        Ok(PostgresStore { pool })
    }
}

impl_store!(
    PostgresStore,
    sqlx::Postgres,
    super::Dialect::Postgres,
    MIGRATOR,
    SQL
);
impl_retention_store!(PostgresStore, sqlx::Postgres, RETENTION_SQL);
impl_operator_store!(PostgresStore, sqlx::Postgres, OPERATOR_SQL);
impl_console_store!(PostgresStore, sqlx::Postgres, CONSOLE_SQL);
impl_approval_store!(PostgresStore, sqlx::Postgres, APPROVAL_SQL);
impl_bulk_store!(PostgresStore, BULK_SQL);
impl_event_store!(PostgresStore, sqlx::Postgres, EVENT_SQL);
