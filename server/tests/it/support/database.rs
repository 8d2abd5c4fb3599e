use idem::store::{self, DatabaseTarget, DialectName, Store};
use sha2::{Digest, Sha256};
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
use sqlx::{ConnectOptions, Connection};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use tempfile::TempDir;

/// The PostgreSQL server the tests create their databases on. `scripts/test` sets it (from
/// `DATABASE_URL`, the local server, or a throwaway cluster it starts).
fn postgres_admin_url() -> String {
    std::env::var("IDEM_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

async fn admin_connection(admin_url: &str) -> sqlx::PgConnection {
    sqlx::PgConnection::connect(admin_url)
        .await
        .unwrap_or_else(|error| {
            panic!(
                "cannot reach the test PostgreSQL at {admin_url} ({error}); run the tests with scripts/test"
            )
        })
}

/// The URL of the database `name` on the server `admin_url` names.
fn database_url(admin_url: &str, name: &str) -> String {
    PgConnectOptions::from_str(admin_url)
        .expect("valid admin URL")
        .database(name)
        .to_url_lossy()
        .to_string()
}

/// The migrated database that [`TestDatabase::migrated`] copies on the server `admin_url`
/// names: made by the first test that needs it, under an advisory lock that the others wait on,
/// once per server and set of migrations (its name carries their digest; a template of an
/// older set is left to the server, one small database, and goes with the test command's own
/// cluster). Why: PostgreSQL was a third of the suite's CPU (`perf record -a` over a nextest
/// run, 2026-12-07), and a copy costs about a quarter of migrating an empty database (0.09 s
/// against 0.33 s each in psql, the same day). Migrated by Idem's own `migrate`, as an
/// instance does; every test that copies it still runs `migrate`, which then checks the
/// applied migrations against the binary's and applies any it lacks.
async fn migrated_template(admin_url: &str) -> String {
    const TEMPLATE_LOCK: i64 = 0x1de3_7e57_0001;
    let name = format!("idem_test_template_{}", migrations_digest("postgres"));
    let mut admin = admin_connection(admin_url).await;
    sqlx::query("select pg_advisory_lock($1)")
        .bind(TEMPLATE_LOCK)
        .execute(&mut admin)
        .await
        .expect("the template's lock");
    let made: bool = sqlx::query_scalar("select exists (select from pg_database where datname = $1)")
        .bind(&name)
        .fetch_one(&mut admin)
        .await
        .expect("look for the template");
    if !made {
        // Made under another name and renamed when complete: a test killed halfway leaves
        // nothing that looks like a finished template.
        let partial = format!("{name}_partial");
        for statement in [
            format!("drop database if exists {partial}"),
            format!("create database {partial}"),
        ] {
            sqlx::query(&statement)
                .execute(&mut admin)
                .await
                .expect("make the template");
        }
        let target = DatabaseTarget::Postgres {
            url: database_url(admin_url, &partial),
        };
        let store = store::open(&target, 1).await.expect("open the template");
        store.migrate().await.expect("migrate the template");
        // A database with sessions on it can be neither renamed nor copied.
        store.close().await;
        sqlx::query(&format!("alter database {partial} rename to {name}"))
            .execute(&mut admin)
            .await
            .expect("finish the template");
    }
    admin
        .close()
        .await
        .expect("close the admin connection (and its lock)");
    name
}

/// The migrated SQLite file [`TestDatabase::migrated`] copies, made once per set of migrations
/// in the system's temporary directory (a file of about 400 kB each, left there). Tests that race
/// to make it each migrate a file of their own and rename it into place: the last rename wins,
/// and every one of them is complete.
async fn migrated_sqlite_template() -> PathBuf {
    let directory = std::env::temp_dir().join("idem-test-templates");
    let template = directory.join(format!("sqlite-{}.db", migrations_digest("sqlite")));
    if template.exists() {
        return template;
    }
    std::fs::create_dir_all(&directory).expect("the templates' directory");
    let partial = tempfile::tempdir_in(&directory).expect("a directory for the template");
    let path = partial.path().join("idem.db");
    let store = store::open(&DatabaseTarget::EmbeddedSqlite { path: path.clone() }, 1)
        .await
        .expect("open the template");
    store.migrate().await.expect("migrate the template");
    store.close().await;
    // The file alone may lack part of the schema: SQLite moves the write-ahead log into the
    // file when its last connection closes, and the store's close returned once before that had
    // happened (a run on 2026-12-07 found the log still full). VACUUM INTO writes the database
    // as SQLite sees it, log included, into one file of its own.
    let whole = partial.path().join("whole.db");
    let mut connection = SqliteConnectOptions::new()
        .filename(&path)
        .connect()
        .await
        .expect("open the migrated file");
    sqlx::query("vacuum into ?")
        .bind(whole.to_str().expect("a UTF-8 temporary path"))
        .execute(&mut connection)
        .await
        .expect("write the template whole");
    connection.close().await.expect("close the migrated file");
    std::fs::rename(&whole, &template).expect("finish the template");
    template
}

/// The first 16 hex digits of a SHA-256 over one dialect's migrations (names and contents).
fn migrations_digest(dialect: &str) -> String {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrations")
        .join(dialect);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&directory)
        .expect("the migrations directory")
        .map(|entry| entry.expect("a migration").path())
        .collect();
    files.sort();
    let mut digest = Sha256::new();
    for file in files {
        digest.update(file.file_name().expect("a file name").as_encoded_bytes());
        digest.update(std::fs::read(&file).expect("a migration's text"));
    }
    hex::encode(&digest.finalize()[..8])
}

/// A database that exists only for one test: a fresh PostgreSQL database (dropped when the
/// test ends, pass or fail) or a fresh SQLite file in a temporary directory.
pub struct TestDatabase {
    pub target: DatabaseTarget,
    /// The PostgreSQL database's name and the server's admin URL, to drop it.
    postgres_name: Option<(String, String)>,
    _dir: Option<TempDir>,
}

impl TestDatabase {
    pub async fn create(dialect: DialectName) -> Self {
        match dialect {
            DialectName::Postgres => TestDatabase::create_on(&postgres_admin_url()).await,
            DialectName::Sqlite => TestDatabase::create_sqlite(None),
        }
    }

    /// A database with every migration applied, for the tests that are not about migrating:
    /// a copy of a migrated template ([`migrated_template`], [`migrated_sqlite_template`]).
    pub async fn migrated(dialect: DialectName) -> Self {
        match dialect {
            DialectName::Postgres => {
                let admin_url = postgres_admin_url();
                let template = migrated_template(&admin_url).await;
                TestDatabase::create_postgres(&admin_url, Some(&template)).await
            }
            DialectName::Sqlite => TestDatabase::create_sqlite(Some(&migrated_sqlite_template().await)),
        }
    }

    /// A fresh PostgreSQL database on the server `admin_url` names (the shared test server, or
    /// a cluster of the test's own).
    pub async fn create_on(admin_url: &str) -> Self {
        TestDatabase::create_postgres(admin_url, None).await
    }

    /// An empty PostgreSQL database, or a copy of `template`.
    async fn create_postgres(admin_url: &str, template: Option<&str>) -> Self {
        let name = format!("idem_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = admin_connection(admin_url).await;
        let copied_from = template
            .map(|template| format!(" template {template}"))
            .unwrap_or_default();
        sqlx::query(&format!("create database {name}{copied_from}"))
            .execute(&mut admin)
            .await
            .expect("create the test database");
        admin.close().await.expect("close the admin connection");
        TestDatabase {
            target: DatabaseTarget::Postgres {
                url: database_url(admin_url, &name),
            },
            postgres_name: Some((name, admin_url.to_owned())),
            _dir: None,
        }
    }

    /// A SQLite file in a temporary directory of its own: none yet, or a copy of `template`.
    fn create_sqlite(template: Option<&Path>) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("idem.db");
        if let Some(template) = template {
            std::fs::copy(template, &path).expect("copy the template");
        }
        TestDatabase {
            target: DatabaseTarget::EmbeddedSqlite { path },
            postgres_name: None,
            _dir: Some(dir),
        }
    }

    /// The database URL a child `idem` process is given.
    pub fn url(&self) -> String {
        match &self.target {
            DatabaseTarget::Postgres { url } | DatabaseTarget::Sqlite { url } => url.clone(),
            DatabaseTarget::EmbeddedSqlite { path } => format!("sqlite://{}", path.display()),
        }
    }

    pub async fn store(&self) -> Arc<dyn Store> {
        store::open(&self.target, idem::cli::DEFAULT_DATABASE_MAX_CONNECTIONS)
            .await
            .expect("open the store")
    }

    pub async fn migrated_store(&self) -> Arc<dyn Store> {
        let store = self.store().await;
        store.migrate().await.expect("migrate");
        store
    }

    /// Runs SQL written to be valid in both dialects, bypassing the store: for arranging rows
    /// that the store cannot create yet, and for checking what the schema itself enforces.
    pub async fn execute(&self, sql: &str) -> Result<u64, sqlx::Error> {
        match &self.target {
            DatabaseTarget::Postgres { url } => {
                let pool = PgPool::connect(url).await?;
                let result = sqlx::raw_sql(sql).execute(&pool).await;
                pool.close().await;
                Ok(result?.rows_affected())
            }
            _ => {
                let options = SqliteConnectOptions::from_str(&self.url())?.foreign_keys(true);
                let pool = SqlitePool::connect_with(options).await?;
                let result = sqlx::raw_sql(sql).execute(&pool).await;
                pool.close().await;
                Ok(result?.rows_affected())
            }
        }
    }

    /// Runs `sql` (as [`execute`](Self::execute)) and asserts that the schema refuses it with
    /// `violation` itself: an error of any other kind (a type mismatch, a syntax error) would
    /// make the check pass without proving the constraint.
    pub async fn assert_refused(&self, sql: &str, violation: Violation) {
        let refused = match self.execute(sql).await {
            Ok(rows) => panic!("{violation:?} expected, but {rows} row(s) written: {sql}"),
            Err(sqlx::Error::Database(refused)) => refused,
            Err(other) => panic!("{violation:?} expected, got {other}: {sql}"),
        };
        let matches = match &self.target {
            DatabaseTarget::Postgres { .. } => refused.code().as_deref() == Some(violation.sqlstate()),
            _ => refused.message().starts_with(violation.sqlite_message()),
        };
        assert!(
            matches,
            "{violation:?} expected, got {:?} {}: {sql}",
            refused.code(),
            refused.message()
        );
    }

    /// A blob literal of `hex` in this database's own spelling.
    pub fn blob(&self, hex: &str) -> String {
        match &self.target {
            DatabaseTarget::Postgres { .. } => format!("decode('{hex}', 'hex')"),
            _ => format!("x'{hex}'"),
        }
    }

    /// Runs a query that returns one integer (a count, a balance), bypassing the store.
    pub async fn query_i64(&self, sql: &str) -> i64 {
        self.query_one(sql).await
    }

    /// Asserts that `sql`, a query of one integer, answers `expected`; `what` says why.
    pub async fn expect_i64(&self, sql: &str, expected: i64, what: &str) {
        assert_eq!(self.query_i64(sql).await, expected, "{what}: {sql}");
    }

    /// Runs a query that returns one value, bypassing the store.
    pub async fn query_one<T>(&self, sql: &str) -> T
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres>
            + sqlx::Type<sqlx::Postgres>
            + for<'r> sqlx::Decode<'r, sqlx::Sqlite>
            + sqlx::Type<sqlx::Sqlite>
            + Send
            + Unpin,
    {
        match &self.target {
            DatabaseTarget::Postgres { url } => {
                let pool = PgPool::connect(url).await.expect("connect");
                let value = sqlx::query_scalar(sql).fetch_one(&pool).await.expect("query");
                pool.close().await;
                value
            }
            _ => {
                let pool = SqlitePool::connect(&self.url()).await.expect("connect");
                let value = sqlx::query_scalar(sql).fetch_one(&pool).await.expect("query");
                pool.close().await;
                value
            }
        }
    }

    /// Runs a query that returns rows (tuples), bypassing the store.
    pub async fn query_all<T>(&self, sql: &str) -> Vec<T>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
            + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
            + Send
            + Unpin,
    {
        match &self.target {
            DatabaseTarget::Postgres { url } => {
                let pool = PgPool::connect(url).await.expect("connect");
                let rows = sqlx::query_as(sql).fetch_all(&pool).await.expect("query");
                pool.close().await;
                rows
            }
            _ => {
                let pool = SqlitePool::connect(&self.url()).await.expect("connect");
                let rows = sqlx::query_as(sql).fetch_all(&pool).await.expect("query");
                pool.close().await;
                rows
            }
        }
    }

    /// Polls `query_i64(sql)` until `wanted` holds (workers run on their own schedule);
    /// panics naming `what` after 60 s.
    pub async fn eventually_i64(&self, sql: &str, wanted: impl Fn(i64) -> bool, what: &str) -> i64 {
        super::eventually(what, || self.query_i64(sql), |value| wanted(*value)).await
    }

    /// [`eventually_i64`](Self::eventually_i64) until `query_i64(sql)` is `wanted`.
    pub async fn eventually_equals(&self, sql: &str, wanted: i64, what: &str) -> i64 {
        self.eventually_i64(sql, |value| value == wanted, what).await
    }

    /// Waits until the database's own clock has passed `column` in every row of `table` that
    /// `filter` selects: a window or a lease a test made short ends in the database's time,
    /// which is the time the store compares with.
    pub async fn until_passed(&self, table: &str, column: &str, filter: &str) {
        let passed = match &self.target {
            DatabaseTarget::Postgres { .. } => format!("{column} < now()"),
            _ => format!("julianday({column}) < julianday('now')"),
        };
        let selected = format!("select count(*) from {table} where {filter}");
        let rows = self.query_i64(&selected).await;
        self.eventually_equals(
            &format!("{selected} and {passed}"),
            rows,
            &format!("{table}.{column} passed where {filter}"),
        )
        .await;
    }

    /// Makes the database disappear under a running store (PostgreSQL only).
    pub async fn drop_now(&self) {
        let (name, admin_url) = self
            .postgres_name
            .as_ref()
            .expect("drop_now is for PostgreSQL databases");
        drop_postgres_database(name, admin_url).await;
    }
}

async fn drop_postgres_database(name: &str, admin_url: &str) {
    let mut admin = admin_connection(admin_url).await;
    sqlx::query(&format!("drop database if exists {name} with (force)"))
        .execute(&mut admin)
        .await
        .expect("drop the test database");
    admin.close().await.expect("close the admin connection");
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // Drop cannot await; a short-lived runtime on its own thread drops the database even
        // when the test panicked, so that test runs do not leave databases behind.
        if let Some((name, admin_url)) = self.postgres_name.take() {
            let dropped = std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("cleanup runtime")
                    .block_on(drop_postgres_database(&name, &admin_url));
            })
            .join();
            if dropped.is_err() && !std::thread::panicking() {
                panic!("could not drop the test database");
            }
        }
    }
}

/// A constraint the schema enforces.
#[derive(Debug, Clone, Copy)]
pub enum Violation {
    ForeignKey,
    Unique,
    Check,
}

impl Violation {
    fn sqlstate(self) -> &'static str {
        match self {
            Violation::ForeignKey => "23503",
            Violation::Unique => "23505",
            Violation::Check => "23514",
        }
    }

    fn sqlite_message(self) -> &'static str {
        match self {
            Violation::ForeignKey => "FOREIGN KEY constraint failed",
            Violation::Unique => "UNIQUE constraint failed",
            Violation::Check => "CHECK constraint failed",
        }
    }
}

/// Counts the audit entries of `action` by `actor` with `result`.
pub fn audited(action: &str, actor: &str, result: &str) -> String {
    format!(
        "select count(*) from audit_log where action = '{action}' and actor = '{actor}' \
         and result = '{result}'"
    )
}

/// [`audited`], of the entries whose reason names `mark` (a ticket, say).
pub fn audited_for(action: &str, actor: &str, result: &str, mark: &str) -> String {
    format!("{} and reason like '%{mark}%'", audited(action, actor, result))
}
