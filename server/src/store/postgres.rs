//! PostgreSQL, the production database: several `serve` instances share one. What this file
//! holds is what only PostgreSQL says this way: its connection settings, its migrations, and
//! the text of the statements that differ from SQLite's (`now()`, `make_interval`, row locks
//! with `for update skip locked`, physical row ids by `ctid`).

use super::bulk::BulkStatements;
use super::console::ConsoleStatements;
use super::dialect::{Dialect, WriteTx};
use super::error::StoreError;
use super::events::EventStatements;
use super::metrics::{JournalRow, MetricsStatements};
use super::operators::OperatorStatements;
use super::payments::PaymentStatements;
use super::payments::keyed::{AtOnce, KeyedPaymentStatements};
use super::records::{RecordStatements, claim_record, settle_record};
use super::retention::RetentionStatements;
use super::sealing::SealingStatements;
use super::target::DialectName;
use sqlx::Connection;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres};
use std::str::FromStr;
use std::time::Duration;

static MIGRATOR: Migrator = sqlx::migrate!("../migrations/postgres");

/// How long a pooled connection may sit idle before it is checked on its way out.
const CHECK_CONNECTIONS_IDLE_FOR: Duration = Duration::from_secs(1);

/// A pool of at most `max_connections` on the database `url` names.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, StoreError> {
    let options = PgConnectOptions::from_str(url)
        .map_err(StoreError::InvalidUrl)?
        // A connection left inside a transaction (a cancelled caller, a bug) is closed by the
        // server instead of holding locks and swallowing later writes.
        .options([("idle_in_transaction_session_timeout", "30s")])
        // Operators find Idem's sessions in pg_stat_activity by this name.
        .application_name("idem");
    Ok(PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(3))
        // A connection is checked (a round trip) only after it sat idle: one in steady use is
        // known to work, and checking it would double a replay's round trips. One that died
        // meanwhile (a database restart) fails its statement, which the caller answers as
        // 503 with nothing written; the pool then replaces it.
        .test_before_acquire(false)
        .before_acquire(|connection, meta| {
            Box::pin(async move {
                if meta.idle_for >= CHECK_CONNECTIONS_IDLE_FOR {
                    connection.ping().await?;
                }
                Ok(true)
            })
        })
        .connect_with(options)
        .await?)
}

impl Dialect for Postgres {
    const DIALECT: DialectName = DialectName::Postgres;

    fn migrator() -> &'static Migrator {
        &MIGRATOR
    }

    // Two spellings: each database's own catalog.
    const MIGRATIONS_TABLE_EXISTS: &'static str = "select count(*) from pg_catalog.pg_tables where tablename = '_sqlx_migrations' and \
         schemaname = current_schema()";
}

impl RecordStatements for Postgres {
    // Two spellings: the backoff is computed from a column (`make_interval` here, a shifted count
    // of seconds in SQLite's text), not from a parameter.
    const MARK_UNKNOWN: &'static str = "update idempotency_records set status = 'UNKNOWN_REQUIRES_RECOVERY', progress_step = \
         'UNKNOWN_REQUIRES_RECOVERY', locked_until = null, updated_at = now(), recovery_attempts = \
         recovery_attempts + 1, next_recovery_at = now() + make_interval(secs => 1 << \
         least(recovery_attempts, 8)), unknown_cause = coalesce($5, unknown_cause), last_error = \
         $6, last_error_at = now() where tenant_id = $1 and operation_name = $2 and \
         idempotency_key = $3 and lease_version = $4 and status = 'IN_PROGRESS'";
}

impl KeyedPaymentStatements for Postgres {
    const CLAIM_PAYMENT_AT_ONCE: AtOnce = AtOnce::Statement(concat!(
        "with claimed as (",
        claim_record!(returning),
        "), renewed as (\
            delete from idempotency_responses where tenant_id = $1 and operation_name = $2 \
                and idempotency_key = $3 and exists (select 1 from claimed where claimed_as <> 'new')), \
        held as (\
            update accounts set balance_minor = balance_minor - $15, updated_at = now() \
            where tenant_id = $1 and id = $16 and currency = $17 and balance_minor >= $15 \
                and exists (select 1 from claimed) \
            returning 1), \
        payment as (\
            insert into payments (id, tenant_id, account_id, amount_minor, currency, \
                merchant_reference, channel, status, idempotency_key) \
            select $8, $1, $16, $15, $17, $18, $19, 'PROCESSING', $3 from held \
            returning created_at), \
        event as (\
            insert into outbox_events (id, payment_id, event_type, payload) \
            select $20, $8, 'PaymentCreated', $21 from payment) \
        select c.lease_version, c.expires_at, c.claimed_as, p.created_at, case \
            when p.created_at is null then idem_refuse('idem:not_held') end as refused \
        from claimed c left join payment p on true"
    ));
    const COMPLETE_PAYMENT_AT_ONCE: AtOnce = AtOnce::Statement(concat!(
        "with settled as (",
        settle_record!(),
        " returning 1), \
        response as (\
            insert into idempotency_responses (tenant_id, operation_name, idempotency_key, headers, body) \
            select $4, $5, $6, $8, $9 from settled), \
        payment as (\
            update payments set status = $10, provider_charge_id = $3, updated_at = now() \
            where id = $11 and status = 'PROCESSING' and exists (select 1 from settled) \
            returning tenant_id, account_id, amount_minor), \
        released as (\
            update accounts a set balance_minor = a.balance_minor + p.amount_minor, updated_at = now() \
            from payment p where $12 and a.tenant_id = p.tenant_id and a.id = p.account_id), \
        event as (\
            insert into outbox_events (id, payment_id, event_type, payload) \
            select $13, $11, $14, $15 from payment) \
        select (select count(*) from settled) as records, case \
            when exists (select 1 from settled) and not exists (select 1 from payment) \
                then idem_refuse('idem:payment_not_processing') end as refused"
    ));
}

impl PaymentStatements for Postgres {
    // Two spellings: `nulls first`: PostgreSQL sorts nulls last by default, SQLite first.
    const TAKE_RELEASED_PAYMENTS_TO_WATCH: &'static str = "update payments set release_checked_at = now() where id in ( select id from payments where \
         released_at is not null and late_charge_id is null and released_at > now() - \
         make_interval(secs => $1) and (release_checked_at is null or release_checked_at <= now() - \
         make_interval(secs => $2)) order by release_checked_at nulls first limit $3 for update \
         skip locked) returning id";
}

impl EventStatements for Postgres {
    // Two spellings: the backoff is computed from a column (`power` here, a shift in SQLite).
    const MARK_EVENT_FAILED: &'static str = "update outbox_events set claimed_until = null, last_error = $1, dead_at = case when \
         attempts >= $2 then now() else null end, next_attempt_at = now() + make_interval(secs => \
         least(power(2, attempts), 300)) where id = $3";
}

impl ConsoleStatements for Postgres {
    // Two spellings: buckets of epoch seconds: `extract(epoch …)` and `to_timestamp` here,
    // `strftime('%s')` and `'unixepoch'` in SQLite.
    const OUTCOME_SERIES: &'static str = "select cast(floor(extract(epoch from bucket_start) / $1::bigint) * $1::bigint as bigint) \
         as bucket, outcome, cast(sum(count) as bigint) as total from outcome_buckets where bucket_start >= \
         to_timestamp($2::bigint) and bucket_start < to_timestamp($3::bigint) and ($4::text = '' or \
         tenant_id = $4) and ($5::text = '' or operation_name = $5) group by 1, outcome order by 1";
    // Two spellings: the sort values are epochs in microseconds (extract here, julianday in
    // SQLite), and PostgreSQL types the parameters compared only with literals.
    const RECOVERY_QUEUE: &'static str = "with matching as (select r.tenant_id, t.name as tenant_name, r.operation_name, \
         r.idempotency_key, r.status, r.resource_id, r.lease_version, r.created_at, r.updated_at, \
         r.recovery_attempts, r.next_recovery_at, r.unknown_cause, r.last_error, r.last_error_at, \
         coalesce(p.amount_minor, f.amount_minor) as amount_minor, coalesce(p.currency, f.currency) \
         as currency, coalesce(p.merchant_reference, f.reference) as merchant_reference, e.kind as \
         evidence, e.detail as evidence_detail, e.at as evidence_at, case $13::text when 'newest' then \
         -cast(extract(epoch from r.created_at) * 1000000 as bigint) when 'largest' then -coalesce(p.amount_minor, f.amount_minor, 0) when \
         'smallest' then coalesce(p.amount_minor, f.amount_minor, 0) else cast(extract(epoch from r.created_at) * 1000000 as bigint) end as \
         sort_value from idempotency_records r join tenants t on t.id = r.tenant_id left join \
         payments p on r.operation_name = 'create_payment' and p.id = r.resource_id left join \
         refunds f on r.operation_name = 'create_refund' and f.id = r.resource_id left join \
         record_evidence e on e.tenant_id = r.tenant_id and e.operation_name = r.operation_name and \
         e.idempotency_key = r.idempotency_key where (r.status = 'UNKNOWN_REQUIRES_RECOVERY' or \
         (r.status = 'IN_PROGRESS' and r.locked_until <= now())) and ($2::text = '' or t.name = $2) \
         and ($3::text = '' or r.operation_name = $3) and ($4::text = '' or ($4 = \
         'needs_operator' and r.status = 'UNKNOWN_REQUIRES_RECOVERY' and r.recovery_attempts >= \
         $1) or ($4 = 'worker_retrying' and r.status = 'UNKNOWN_REQUIRES_RECOVERY' and \
         r.recovery_attempts < $1) or ($4 = 'stale_in_progress' and r.status = 'IN_PROGRESS')) \
         and r.created_at <= $5::timestamptz and r.created_at >= $6::timestamptz and ($7::text = '' or \
         (coalesce(p.currency, f.currency) = $7 and coalesce(p.amount_minor, f.amount_minor) \
         between $8::bigint and $9::bigint)) and ($10::text = '' or r.unknown_cause = $10) and \
         ($11::text = '' or ($11 = 'not_asked' and e.kind is null) or e.kind = $11) and \
         ($12::text = '' or r.idempotency_key = $12 or r.resource_id = $12 or \
         p.merchant_reference = $12 or f.reference = $12)), page as (select * from matching where \
         $14 = 0 or (sort_value, tenant_id, operation_name, idempotency_key) > ($15::bigint, $16, \
         $17, $18) order by sort_value, tenant_id, operation_name, idempotency_key limit $19) \
         select (select count(*) from matching) as total, page.* from (select 1 as one) as one \
         left join page on 1 = 1 order by page.sort_value, page.tenant_id, page.operation_name, \
         page.idempotency_key";
    // Two spellings: buckets of epoch seconds, as `OUTCOME_SERIES`.
    const RETRY_DELAYS: &'static str = "select operation_name, above_ms, cast(sum(retries) as bigint) as retries, \
         cast(max(longest_ms) as bigint) as longest_ms from retry_delay_buckets where bucket_start >= to_timestamp($1::bigint) \
         and bucket_start < to_timestamp($2::bigint) and ($3::text = '' or tenant_id = $3) and ($4::text = '' or \
         operation_name = $4) group by operation_name, above_ms order by operation_name, above_ms";
}

/// The request journal's rows, as [`journal_csv`] writes them.
const COPY_JOURNAL_ENTRIES: &str = "copy idempotency_requests (id, tenant_id, operation_name, idempotency_key, at, \
    fingerprint, canonical_command, status_code, error_code, retry_delay_ms) from stdin with (format csv)";

/// Journal rows per chunk of `COPY` data: the server holds one chunk's text at a time, even
/// for the backlog an outage of the database leaves.
const JOURNAL_ROWS_PER_CHUNK: usize = 1_000;

/// `rows` as `COPY ... with (format csv)` reads them: every text quoted (a quote inside
/// doubled), a missing value as an empty unquoted field, which CSV reads as null.
fn journal_csv(rows: &[JournalRow<'_>]) -> String {
    fn text(csv: &mut String, value: &str) {
        csv.push('"');
        for (position, part) in value.split('"').enumerate() {
            if position > 0 {
                csv.push_str("\"\"");
            }
            csv.push_str(part);
        }
        csv.push('"');
    }
    let mut csv = String::with_capacity(rows.len() * 256);
    for row in rows {
        for value in [
            &row.id,
            row.tenant_id,
            row.operation_name,
            row.idempotency_key,
            &row.at,
            row.fingerprint,
        ] {
            text(&mut csv, value);
            csv.push(',');
        }
        if let Some(command) = row.canonical_command {
            text(&mut csv, command);
        }
        csv.push(',');
        csv.push_str(&row.status_code.to_string());
        csv.push(',');
        if let Some(code) = row.error_code {
            text(&mut csv, code);
        }
        csv.push(',');
        if let Some(delay) = row.retry_delay_ms {
            csv.push_str(&delay.to_string());
        }
        csv.push('\n');
    }
    csv
}

impl MetricsStatements for Postgres {
    // Two spellings: rows from a JSON parameter: `jsonb_to_recordset` here, `json_each` in SQLite.
    const ADD_OUTCOME_COUNTS: &'static str = "insert into outcome_buckets (bucket_start, tenant_id, operation_name, outcome, count) \
         select bucket_start, tenant_id, operation_name, outcome, count from jsonb_to_recordset(cast($1 as jsonb)) \
         as bucket (bucket_start timestamptz, tenant_id text, operation_name text, outcome text, count integer) \
         on conflict (bucket_start, tenant_id, operation_name, outcome) \
         do update set count = outcome_buckets.count + excluded.count";
    // Two spellings: a JSON array parameter, as `MARK_EVENTS_PUBLISHED`.
    const NOTE_API_KEYS_USED: &'static str = "update api_keys set last_used_at = now() where id in \
         (select jsonb_array_elements_text(cast($1 as jsonb)))";
    // Two spellings: rows from a JSON parameter, as `ADD_OUTCOME_COUNTS`.
    const ADD_REPLAYS: &'static str = "insert into idempotency_replays (tenant_id, operation_name, idempotency_key, minute, \
         replays, first_at, last_at, longest_delay_ms, status_code) select tenant_id, operation_name, idempotency_key, \
         minute, replays, first_at, last_at, longest_delay_ms, status_code from jsonb_to_recordset(cast($1 as jsonb)) as \
         replay (tenant_id text, operation_name text, idempotency_key text, minute timestamptz, replays bigint, first_at \
         timestamptz, last_at timestamptz, longest_delay_ms bigint, status_code integer) on conflict (tenant_id, \
         operation_name, idempotency_key, minute) do update set replays = idempotency_replays.replays + excluded.replays, \
         first_at = least(idempotency_replays.first_at, excluded.first_at), last_at = \
         greatest(idempotency_replays.last_at, excluded.last_at), longest_delay_ms = \
         greatest(idempotency_replays.longest_delay_ms, excluded.longest_delay_ms), status_code = case when \
         excluded.last_at >= idempotency_replays.last_at then excluded.status_code else idempotency_replays.status_code end";
    // Two spellings: rows from a JSON parameter, as `ADD_OUTCOME_COUNTS`.
    const ADD_RETRY_DELAYS: &'static str = "insert into retry_delay_buckets (bucket_start, tenant_id, operation_name, above_ms, \
         retries, longest_ms) select bucket_start, tenant_id, operation_name, above_ms, retries, longest_ms from \
         jsonb_to_recordset(cast($1 as jsonb)) as bucket (bucket_start timestamptz, tenant_id text, operation_name text, \
         above_ms bigint, retries bigint, longest_ms bigint) on conflict (bucket_start, tenant_id, operation_name, above_ms) \
         do update set retries = retry_delay_buckets.retries + excluded.retries, longest_ms = \
         greatest(retry_delay_buckets.longest_ms, excluded.longest_ms)";

    /// One `COPY` in CSV: PostgreSQL parses no JSON document per row, which took about 40 % of
    /// a batch's time as an `insert ... select from jsonb_to_recordset` (docs/performance.md).
    async fn append_journal(tx: &mut WriteTx<Postgres>, rows: &[JournalRow<'_>]) -> Result<(), StoreError> {
        let mut copy = tx.copy_in_raw(COPY_JOURNAL_ENTRIES).await?;
        for chunk in rows.chunks(JOURNAL_ROWS_PER_CHUNK) {
            copy.send(journal_csv(chunk).into_bytes()).await?;
        }
        copy.finish().await?;
        Ok(())
    }
}

impl OperatorStatements for Postgres {
    // Two spellings: a bounded delete: neither database has `delete … limit`, so rows go by their
    // physical id (`ctid` here, `rowid` in SQLite).
    const DELETE_EXPIRED_SESSIONS: &'static str = "delete from operator_sessions where ctid = any(array( select ctid from operator_sessions \
         where expires_at <= now() limit $1))";
}

impl BulkStatements for Postgres {
    // Two spellings: a boolean literal (SQLite stores 0 and 1).
    const ABORT_ITEMS: &'static str = "update bulk_job_items set ok = false, message = $2, done_at = now() where job_id = $1 and \
         included and done_at is null";
}

impl RetentionStatements for Postgres {
    // Row locks are taken by the statements themselves, bounded by the timeouts below.
    const BOUND_CLEANUP: &'static [&'static str] = &[
        "select set_config('statement_timeout', $1, true)",
        "select set_config('lock_timeout', $1, true)",
    ];
    // Rows a request holds are skipped, never waited for: cleanup yields to traffic.
    // Two spellings: a bounded update by physical id, as `DELETE_EXPIRED_SESSIONS`.
    const PURGE_BATCH: &'static str = "update idempotency_records set settled_status = status, status = 'EXPIRED', \
         canonical_command = '', lease_owner = null, locked_until = null, purged_at = now(), \
         updated_at = now() where ctid = any(array(select ctid from idempotency_records where \
         status in ('COMPLETED', 'FAILED_REPLAYABLE', 'FAILED_RETRYABLE') and expires_at <= now() \
         order by expires_at limit $1 for update skip locked))";
    // Two spellings: a bounded delete by physical id, as `DELETE_EXPIRED_SESSIONS`.
    const DELETE_TOMBSTONES: &'static str = "delete from idempotency_records where ctid = any(array( select ctid from \
         idempotency_records where status = 'EXPIRED' and expires_at <= now() - make_interval(secs \
         => $1) order by expires_at limit $2 for update skip locked))";
    // Two spellings: a bounded delete by physical id, as `DELETE_EXPIRED_SESSIONS`.
    const DELETE_JOURNAL: &'static str = "delete from idempotency_requests where ctid = any(array(select ctid from \
         idempotency_requests where at <= now() - make_interval(secs => $1) order by at limit $2))";
    // Two spellings: a bounded delete by physical id, as `DELETE_EXPIRED_SESSIONS`.
    const DELETE_REPLAYS: &'static str = "delete from idempotency_replays where ctid = any(array(select ctid from \
         idempotency_replays where minute <= now() - make_interval(secs => $1) order by minute limit $2))";
}

impl SealingStatements for Postgres {
    // Two spellings: an age in milliseconds: an interval here, a formatted shift in SQLite.
    const LIVE_INSTANCES: &'static str = "select instance_id, key_ids from sealing_instances where heartbeat_at > now() - $1 * \
         interval '1 millisecond' order by instance_id";
}
