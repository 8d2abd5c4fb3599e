//! SQLite, the embedded default: one file, WAL so that readers never wait for the writer,
//! every commit synced to disk before it returns (`synchronous=FULL`: a claim or a completion
//! that answered must survive a power loss, or the retry would make a second payment and a
//! second charge), a busy timeout so that writers queue instead of failing, foreign keys
//! enforced. What this
//! file holds is what only SQLite says this way: its connection settings, its migrations, and
//! the text of the statements that differ from PostgreSQL's. Timestamps are stored as RFC 3339
//! text with milliseconds, which compares correctly as text; `strftime('%Y-%m-%dT%H:%M:%fZ',
//! 'now')` is "now" in that form, and its third argument (`$n || ' seconds'`) moves it. There
//! are no row locks: a writing transaction holds the database's one write lock.

use super::bulk::BulkStatements;
use super::console::ConsoleStatements;
use super::dialect::{Dialect, SqlStore, WriteTx};
use super::error::StoreError;
use super::events::EventStatements;
use super::metrics::{JournalRow, MetricsStatements, insert_as_json};
use super::operators::OperatorStatements;
use super::payments::PaymentStatements;
use super::payments::keyed::{AtOnce, KeyedPaymentStatements};
use super::records::{RecordStatements, claim_record, settle_record};
use super::retention::RetentionStatements;
use super::sealing::SealingStatements;
use super::target::DialectName;
use sqlx::Sqlite;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

static MIGRATOR: Migrator = sqlx::migrate!("../migrations/sqlite");

/// The store on the database a `sqlite:` URL names.
pub async fn connect_url(url: &str) -> Result<SqlStore<Sqlite>, StoreError> {
    let options = SqliteConnectOptions::from_str(url).map_err(StoreError::InvalidUrl)?;
    connect(options, RESTART_WAL_AT).await
}

/// The store on the file at `path`, created with its directory on first use.
pub async fn open_file(path: &Path) -> Result<SqlStore<Sqlite>, StoreError> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        crate::files::create_private_dir(dir).map_err(|source| StoreError::DataDir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    connect(SqliteConnectOptions::new().filename(path), RESTART_WAL_AT).await
}

/// How long a connection waits for a lock another holds (`group_commit/`'s restart of the WAL
/// sets it back to this, in milliseconds, after its own shorter wait).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The WAL's length, in frames of a page (4 KiB) each, past which the writer starts it over:
/// 64 MiB on disk at most, give or take what is written while the checkpointer notices
/// (`group_commit/`). Each start over holds the writer while it copies the last frames the
/// checkpointer did not and syncs the file, so not at every 1,000 frames as SQLite's own
/// automatic checkpoint would.
const RESTART_WAL_AT: i64 = 16_384;

/// Readers never wait for the writer (WAL), and every transaction goes through one
/// connection: writers queue for it in order, instead of several connections contending for
/// SQLite's one write lock and retrying on `SQLITE_BUSY`, and share its commits
/// (`group_commit/`).
async fn connect(options: SqliteConnectOptions, restart_wal_at: i64) -> Result<SqlStore<Sqlite>, StoreError> {
    let options = options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(BUSY_TIMEOUT)
        .foreign_keys(true);
    // A connection to a local file does not go stale; checking one on its way out of the
    // pool would only add a round trip to its worker thread.
    //
    // The writer's temporary storage is memory: each caller of a shared commit runs in a
    // savepoint (`group_commit/`), and SQLite copies every page a savepoint changes into a
    // statement journal, which goes to a temporary file past 64 KiB unless temporary storage
    // is in memory (`openSubJournal` in sqlite3.c; libsqlite3-sys builds with
    // `SQLITE_TEMP_STORE=1`, files unless asked). That file took half of what a fresh create
    // wrote (docs/performance.md). The readers keep files, for the console's large sorts.
    //
    // The writer never checkpoints but to start the WAL over: a reader's connection does
    // (`group_commit/`'s checkpointer).
    let writer = SqlitePoolOptions::new()
        .test_before_acquire(false)
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(
            options
                .clone()
                .pragma("temp_store", "memory")
                .pragma("wal_autocheckpoint", "0"),
        )
        .await?;
    let readers = SqlitePoolOptions::new()
        .test_before_acquire(false)
        .max_connections(8)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options)
        .await?;
    Ok(SqlStore::with_group_writer(readers, writer, restart_wal_at))
}

// Each statement here differs from PostgreSQL's in more than the spellings `store/sql.rs` fills
// in; why is written above its PostgreSQL form in `postgres.rs`.
impl Dialect for Sqlite {
    const DIALECT: DialectName = DialectName::Sqlite;

    fn migrator() -> &'static Migrator {
        &MIGRATOR
    }

    const MIGRATIONS_TABLE_EXISTS: &'static str =
        "select count(*) from sqlite_master where type = 'table' and name = '_sqlx_migrations'";
}

impl RecordStatements for Sqlite {
    const MARK_UNKNOWN: &'static str = "update idempotency_records set status = 'UNKNOWN_REQUIRES_RECOVERY', progress_step = \
         'UNKNOWN_REQUIRES_RECOVERY', locked_until = null, updated_at = \
         strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), recovery_attempts = recovery_attempts + 1, \
         next_recovery_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', (1 << min(recovery_attempts, 8)) \
         || ' seconds'), unknown_cause = coalesce($5, unknown_cause), last_error = $6, \
         last_error_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') where tenant_id = $1 and operation_name = $2 and idempotency_key = $3 and \
         lease_version = $4 and status = 'IN_PROGRESS'";
    // One writer at a time and no round trips: the steps one by one cost SQLite nothing more.
}

// Scripts, not statements: SQLite has no data-modifying `with` and raises only in triggers, so
// each step is a statement of its own, guarded by the one before it: `changes()` is the rows
// the statement before wrote, and the claimed record is the one naming this request's new
// payment id (`$8`). The last statement returns the row only when every step was written.
impl KeyedPaymentStatements for Sqlite {
    const CLAIM_PAYMENT_AT_ONCE: AtOnce = AtOnce::Script(concat!(
        claim_record!(),
        "; delete from idempotency_responses where tenant_id = $1 and operation_name = $2 \
            and idempotency_key = $3 and exists (select 1 from idempotency_records \
                where tenant_id = $1 and operation_name = $2 and idempotency_key = $3 \
                and resource_id = $8 and claimed_as <> 'new'); \
        update accounts set balance_minor = balance_minor - $15, updated_at = {now} \
            where tenant_id = $1 and id = $16 and currency = $17 and balance_minor >= $15 \
            and exists (select 1 from idempotency_records where tenant_id = $1 \
                and operation_name = $2 and idempotency_key = $3 and resource_id = $8 \
                and status = 'IN_PROGRESS'); \
        insert into payments (id, tenant_id, account_id, amount_minor, currency, \
                merchant_reference, channel, status, idempotency_key) \
            select $8, $1, $16, $15, $17, $18, $19, 'PROCESSING', $3 where changes() = 1; \
        insert into outbox_events (id, payment_id, event_type, payload) \
            select $20, $8, 'PaymentCreated', $21 where changes() = 1; \
        select r.lease_version, r.expires_at, r.claimed_as, p.created_at \
            from idempotency_records r join payments p on p.id = $8 join outbox_events e on e.id = $20 \
            where r.tenant_id = $1 and r.operation_name = $2 and r.idempotency_key = $3 \
                and r.resource_id = $8"
    ));
    const COMPLETE_PAYMENT_AT_ONCE: AtOnce = AtOnce::Script(concat!(
        settle_record!(),
        "; insert into idempotency_responses (tenant_id, operation_name, idempotency_key, headers, body) \
            select $4, $5, $6, $8, $9 where changes() = 1; \
        update payments set status = $10, provider_charge_id = $3, updated_at = {now} \
            where id = $11 and status = 'PROCESSING' and changes() = 1; \
        insert into outbox_events (id, payment_id, event_type, payload) \
            select $13, $11, $14, $15 where changes() = 1; \
        update accounts set balance_minor = balance_minor \
                + (select amount_minor from payments where id = $11), updated_at = {now} \
            where $12 and changes() = 1 and tenant_id = (select tenant_id from payments where id = $11) \
                and id = (select account_id from payments where id = $11); \
        select count(*) as records from outbox_events where id = $13"
    ));
}

impl PaymentStatements for Sqlite {
    const TAKE_RELEASED_PAYMENTS_TO_WATCH: &'static str = "update payments set release_checked_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') where id in \
         (select id from payments where released_at is not null and late_charge_id is null and \
         released_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $1 || ' seconds') and \
         (release_checked_at is null or release_checked_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', \
         '-' || $2 || ' seconds')) order by release_checked_at limit $3) returning id";
}

impl EventStatements for Sqlite {
    const MARK_EVENT_FAILED: &'static str = "update outbox_events set claimed_until = null, last_error = $1, dead_at = case when \
         attempts >= $2 then strftime('%Y-%m-%dT%H:%M:%fZ', 'now') else null end, next_attempt_at = \
         strftime('%Y-%m-%dT%H:%M:%fZ', 'now', min(1 << attempts, 300) || ' seconds') where id = $3";
}

impl ConsoleStatements for Sqlite {
    const OUTCOME_SERIES: &'static str = "select (cast(strftime('%s', bucket_start) as integer) / $1) * $1 as bucket, outcome, \
         sum(count) as total from \
         outcome_buckets where bucket_start >= strftime('%Y-%m-%dT%H:%M:%fZ', $2, 'unixepoch') and \
         bucket_start < strftime('%Y-%m-%dT%H:%M:%fZ', $3, 'unixepoch') and ($4 = '' or tenant_id = \
         $4) and ($5 = '' or operation_name = $5) group by 1, outcome order by 1";
    const RECOVERY_QUEUE: &'static str = "with matching as (select r.tenant_id, t.name as tenant_name, r.operation_name, \
         r.idempotency_key, r.status, r.resource_id, r.lease_version, r.created_at, r.updated_at, \
         r.recovery_attempts, r.next_recovery_at, r.unknown_cause, r.last_error, r.last_error_at, \
         coalesce(p.amount_minor, f.amount_minor) as amount_minor, coalesce(p.currency, f.currency) \
         as currency, coalesce(p.merchant_reference, f.reference) as merchant_reference, e.kind as \
         evidence, e.detail as evidence_detail, e.at as evidence_at, case $13 when 'newest' then \
         -(cast(round((julianday(r.created_at) - 2440587.5) * 86400000.0) as integer) * 1000) when 'largest' then -coalesce(p.amount_minor, f.amount_minor, 0) when \
         'smallest' then coalesce(p.amount_minor, f.amount_minor, 0) else (cast(round((julianday(r.created_at) - 2440587.5) * 86400000.0) as integer) * 1000) end as \
         sort_value from idempotency_records r join tenants t on t.id = r.tenant_id left join \
         payments p on r.operation_name = 'create_payment' and p.id = r.resource_id left join \
         refunds f on r.operation_name = 'create_refund' and f.id = r.resource_id left join \
         record_evidence e on e.tenant_id = r.tenant_id and e.operation_name = r.operation_name and \
         e.idempotency_key = r.idempotency_key where (r.status = 'UNKNOWN_REQUIRES_RECOVERY' or \
         (r.status = 'IN_PROGRESS' and r.locked_until <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))) and ($2 = '' or t.name = $2) \
         and ($3 = '' or r.operation_name = $3) and ($4 = '' or ($4 = \
         'needs_operator' and r.status = 'UNKNOWN_REQUIRES_RECOVERY' and r.recovery_attempts >= \
         $1) or ($4 = 'worker_retrying' and r.status = 'UNKNOWN_REQUIRES_RECOVERY' and \
         r.recovery_attempts < $1) or ($4 = 'stale_in_progress' and r.status = 'IN_PROGRESS')) \
         and r.created_at <= $5 and r.created_at >= $6 and ($7 = '' or \
         (coalesce(p.currency, f.currency) = $7 and coalesce(p.amount_minor, f.amount_minor) \
         between $8 and $9)) and ($10 = '' or r.unknown_cause = $10) and \
         ($11 = '' or ($11 = 'not_asked' and e.kind is null) or e.kind = $11) and \
         ($12 = '' or r.idempotency_key = $12 or r.resource_id = $12 or \
         p.merchant_reference = $12 or f.reference = $12)), page as (select * from matching where \
         $14 = 0 or (sort_value, tenant_id, operation_name, idempotency_key) > ($15, $16, \
         $17, $18) order by sort_value, tenant_id, operation_name, idempotency_key limit $19) \
         select (select count(*) from matching) as total, page.* from (select 1 as one) as one \
         left join page on 1 = 1 order by page.sort_value, page.tenant_id, page.operation_name, \
         page.idempotency_key";
    const RETRY_DELAYS: &'static str = "select operation_name, above_ms, cast(sum(retries) as bigint) as retries, \
         cast(max(longest_ms) as bigint) as longest_ms from retry_delay_buckets where bucket_start >= strftime('%Y-%m-%dT%H:%M:%fZ', $1, 'unixepoch') \
         and bucket_start < strftime('%Y-%m-%dT%H:%M:%fZ', $2, 'unixepoch') and ($3 = '' or tenant_id = $3) and ($4 = '' or \
         operation_name = $4) group by operation_name, above_ms order by operation_name, above_ms";
}

/// `$1` a JSON array of journal entries, with the table's column names: inserted.
const ADD_JOURNAL_ENTRIES: &str = "insert into idempotency_requests (id, tenant_id, operation_name, idempotency_key, at, \
    fingerprint, canonical_command, status_code, error_code, retry_delay_ms) select value ->> 'id', \
    value ->> 'tenant_id', value ->> 'operation_name', value ->> 'idempotency_key', value ->> 'at', \
    value ->> 'fingerprint', value ->> 'canonical_command', value ->> 'status_code', value ->> 'error_code', \
    value ->> 'retry_delay_ms' from json_each($1)";

impl MetricsStatements for Sqlite {
    // `where true`: an upsert's `select` needs a `where` before `on conflict` in SQLite.
    const ADD_OUTCOME_COUNTS: &'static str = "insert into outcome_buckets (bucket_start, tenant_id, operation_name, outcome, count) \
         select value ->> 'bucket_start', value ->> 'tenant_id', value ->> 'operation_name', value ->> 'outcome', \
         value ->> 'count' from json_each($1) where true on conflict (bucket_start, tenant_id, operation_name, outcome) \
         do update set count = outcome_buckets.count + excluded.count";
    const NOTE_API_KEYS_USED: &'static str = "update api_keys set last_used_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') where id in \
         (select value from json_each($1))";
    // Times are RFC 3339 text in UTC with milliseconds: `min` and `max` of two order them as
    // times.
    const ADD_REPLAYS: &'static str = "insert into idempotency_replays (tenant_id, operation_name, idempotency_key, minute, \
         replays, first_at, last_at, longest_delay_ms, status_code) select value ->> 'tenant_id', value ->> \
         'operation_name', value ->> 'idempotency_key', value ->> 'minute', value ->> 'replays', value ->> 'first_at', \
         value ->> 'last_at', value ->> 'longest_delay_ms', value ->> 'status_code' from json_each($1) where true on \
         conflict (tenant_id, operation_name, idempotency_key, minute) do update set replays = \
         idempotency_replays.replays + excluded.replays, first_at = min(idempotency_replays.first_at, excluded.first_at), \
         last_at = max(idempotency_replays.last_at, excluded.last_at), longest_delay_ms = \
         max(idempotency_replays.longest_delay_ms, excluded.longest_delay_ms), status_code = case when \
         excluded.last_at >= idempotency_replays.last_at then excluded.status_code else idempotency_replays.status_code end";
    const ADD_RETRY_DELAYS: &'static str = "insert into retry_delay_buckets (bucket_start, tenant_id, operation_name, above_ms, \
         retries, longest_ms) select value ->> 'bucket_start', value ->> 'tenant_id', value ->> 'operation_name', value \
         ->> 'above_ms', value ->> 'retries', value ->> 'longest_ms' from json_each($1) where true on conflict \
         (bucket_start, tenant_id, operation_name, above_ms) do update set retries = retry_delay_buckets.retries + \
         excluded.retries, longest_ms = max(retry_delay_buckets.longest_ms, excluded.longest_ms)";

    /// One statement per chunk of rows, each chunk bound as a JSON array.
    async fn append_journal(tx: &mut WriteTx<Sqlite>, rows: &[JournalRow<'_>]) -> Result<(), StoreError> {
        insert_as_json(tx, ADD_JOURNAL_ENTRIES, rows).await
    }
}

impl OperatorStatements for Sqlite {
    const DELETE_EXPIRED_SESSIONS: &'static str = "delete from operator_sessions where rowid in (select rowid from operator_sessions where \
         expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now') limit $1)";
}

impl BulkStatements for Sqlite {
    const ABORT_ITEMS: &'static str = "update bulk_job_items set ok = 0, message = $2, done_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') where \
         job_id = $1 and included and done_at is null";
}

impl RetentionStatements for Sqlite {
    // SQLite has no statement timeout: a batch is bounded by its size alone.
    const BOUND_CLEANUP: &'static [&'static str] = &[];
    const PURGE_BATCH: &'static str = "update idempotency_records set settled_status = status, status = 'EXPIRED', \
         canonical_command = '', lease_owner = null, locked_until = null, purged_at = \
         strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') \
         where rowid in (select rowid from idempotency_records where status in ('COMPLETED', \
         'FAILED_REPLAYABLE', 'FAILED_RETRYABLE') and expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', \
         'now') order by expires_at limit $1)";
    const DELETE_TOMBSTONES: &'static str = "delete from idempotency_records where rowid in (select rowid from idempotency_records \
         where status = 'EXPIRED' and expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $1 \
         || ' seconds') order by expires_at limit $2)";
    const DELETE_JOURNAL: &'static str = "delete from idempotency_requests where rowid in (select rowid from \
         idempotency_requests where at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $1 || ' seconds') \
         order by at limit $2)";
    const DELETE_REPLAYS: &'static str = "delete from idempotency_replays where rowid in (select rowid from \
         idempotency_replays where minute <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || $1 || ' seconds') \
         order by minute limit $2)";
}

impl SealingStatements for Sqlite {
    const LIVE_INSTANCES: &'static str = "select instance_id, key_ids from sealing_instances where heartbeat_at > \
         strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', $1 / 1000.0)) order by \
         instance_id";
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn only_the_writer_keeps_its_temporary_storage_in_memory() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = super::open_file(&dir.path().join("idem.db")).await.expect("open");
        let temp_store = |pool| async move {
            sqlx::query_scalar::<_, i64>("pragma temp_store")
                .fetch_one(pool)
                .await
                .expect("temp_store")
        };
        assert_eq!(
            temp_store(&store.writer).await,
            2,
            "the writer's savepoint journals in memory"
        );
        assert_eq!(
            temp_store(&store.pool).await,
            0,
            "the readers' sorts as the build decides"
        );
    }

    /// The writer never checkpoints (a checkpoint inside its commit held every caller of the
    /// group); the checkpointer, on a reader's connection, copies what it committed into the
    /// file. The WAL index's shared memory shows it: its `nBackfill` (the frames copied, at
    /// byte 96) reaches its `mxFrame` (the frames committed, at byte 16), as laid out in
    /// sqlite3's `wal.c`. A commit far below the 1,000 pages of an automatic checkpoint is
    /// copied only if the checkpointer runs.
    #[tokio::test]
    async fn the_checkpointer_not_the_writer_copies_commits_into_the_file() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = super::open_file(&dir.path().join("idem.db")).await.expect("open");
        let autocheckpoint: i64 = sqlx::query_scalar("pragma wal_autocheckpoint")
            .fetch_one(&store.writer)
            .await
            .expect("wal_autocheckpoint");
        assert_eq!(autocheckpoint, 0, "the writer never checkpoints");
        store
            .write_one(sqlx::query("create table written (n integer)"))
            .await
            .expect("a commit");
        let shared = dir.path().join("idem.db-shm");
        let frames = |at: usize| -> u32 {
            let bytes = std::fs::read(&shared).expect("the WAL index");
            u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while frames(96) != frames(16) {
            assert!(
                std::time::Instant::now() < deadline,
                "{} of {} frames copied into the file after 10 s",
                frames(96),
                frames(16)
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(frames(16) > 0, "the commit is in the WAL");
    }

    /// Writes that never stop, from several callers at once, while readers keep reading: the
    /// writer starts the WAL over each time it passes its mark, where a passive checkpoint
    /// alone, one group behind, let it grow for as long as the writes went on (6.7 GB in one
    /// round of `scripts/bench`). A WAL file keeps the largest size it ever had, so its size
    /// at the end bounds it throughout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_is_started_over_while_writes_never_stop() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        const MARK: i64 = 64;
        const ROWS: usize = 6_000;
        const ROW_BYTES: usize = 16 * 1024;
        let dir = tempfile::tempdir().expect("temporary directory");
        let options = sqlx::sqlite::SqliteConnectOptions::new().filename(dir.path().join("idem.db"));
        let store = Arc::new(super::connect(options, MARK).await.expect("open"));
        store
            .write_one(sqlx::query("create table written (n integer, padding blob)"))
            .await
            .expect("a table");
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        sqlx::query("select max(n) from written")
                            .execute(&store.pool)
                            .await
                            .expect("a read");
                    }
                })
            })
            .collect();
        let writers: Vec<_> = (0..4)
            .map(|writer| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    for n in (writer..ROWS).step_by(4) {
                        let row = sqlx::query("insert into written values ($1, zeroblob($2))")
                            .bind(i64::try_from(n).expect("n"))
                            .bind(i64::try_from(ROW_BYTES).expect("bytes"));
                        store.write_one(row).await.expect("a write");
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.expect("writer");
        }
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            reader.await.expect("reader");
        }
        let wal_path = dir.path().join("idem.db-wal");
        let wal = std::fs::metadata(&wal_path).expect("the WAL").len();
        // The WAL header's checkpoint sequence number (bytes 12 to 15, big-endian): SQLite
        // counts one each time the WAL is started over.
        let mut header = [0_u8; 16];
        std::io::Read::read_exact(&mut std::fs::File::open(&wal_path).expect("the WAL"), &mut header)
            .expect("a WAL header");
        let restarts = u32::from_be_bytes([header[12], header[13], header[14], header[15]]);
        let written = ROWS * ROW_BYTES;
        assert!(
            wal < u64::try_from(written / 4).expect("bytes"),
            "the WAL reached {wal} bytes for {written} bytes written, started over {restarts} times"
        );
        let mut tx = store.begin().await.expect("the writer");
        let busy_timeout: i64 = sqlx::query_scalar("pragma busy_timeout")
            .fetch_one(&mut *tx)
            .await
            .expect("busy_timeout");
        tx.commit().await.expect("commit");
        assert_eq!(
            u128::try_from(busy_timeout).expect("ms"),
            super::BUSY_TIMEOUT.as_millis(),
            "the writer waits for locks as long as every connection after starting the WAL over"
        );
    }

    #[tokio::test]
    async fn every_commit_reaches_the_disk_before_it_returns() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = super::open_file(&dir.path().join("idem.db")).await.expect("open");
        // The writer commits; readers share its WAL file.
        for pool in [&store.writer, &store.pool] {
            let (journal, synchronous): (String, i64) = (
                sqlx::query_scalar("pragma journal_mode")
                    .fetch_one(pool)
                    .await
                    .expect("journal mode"),
                sqlx::query_scalar("pragma synchronous")
                    .fetch_one(pool)
                    .await
                    .expect("synchronous"),
            );
            assert_eq!(
                (journal.as_str(), synchronous),
                ("wal", 2),
                "WAL with synchronous=FULL"
            );
        }
    }
}
