//! The real binary: first run, configuration errors, migrations, graceful shutdown.

use crate::support::{Dialect, IdemProcess, TestDatabase, idem_command};
use idem::store::Readiness;
use sqlx::Connection;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn first_run_creates_the_embedded_database_in_wal_mode() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let data_dir = dir.path().join("fresh/data");
    let mut idem = IdemProcess::serve(&data_dir, None).await;

    let ready = reqwest::get(format!("http://{}/readyz", idem.address))
        .await
        .expect("GET /readyz");
    assert_eq!(ready.status(), 200);
    let db_file = data_dir.join("idem.db");
    assert!(db_file.exists(), "{} created", db_file.display());

    idem.signal("TERM");
    let status = tokio::time::timeout(Duration::from_secs(10), idem.child.wait())
        .await
        .expect("exits after SIGTERM")
        .expect("wait");
    assert!(status.success(), "clean exit: {status:?}");

    let mut connection = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db_file.display()))
        .await
        .expect("open the file");
    let mode: String = sqlx::query_scalar("pragma journal_mode")
        .fetch_one(&mut connection)
        .await
        .expect("pragma");
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_request_finish() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut idem = IdemProcess::serve(dir.path(), None).await;

    // A request whose body is still arriving when the signal comes: it is in flight.
    let mut stream = TcpStream::connect(idem.address).await.expect("connect");
    let body = "&&&&&&&&";
    stream
        .write_all(
            format!(
                "POST /api/console/overview HTTP/1.1\r\nhost: idem\r\n\
                 content-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\r\n&&",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .expect("send the head");
    tokio::time::sleep(Duration::from_millis(300)).await;
    idem.signal("TERM");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        idem.child.try_wait().expect("poll").is_none(),
        "still serving the in-flight request"
    );

    stream
        .write_all(&body.as_bytes()[2..])
        .await
        .expect("finish the body");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("read the response");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"counts\""), "{response}");

    let status = tokio::time::timeout(Duration::from_secs(10), idem.child.wait())
        .await
        .expect("exits once the request is done")
        .expect("wait");
    assert!(status.success(), "clean exit: {status:?}");
    assert!(
        TcpStream::connect(idem.address).await.is_err(),
        "no longer accepting connections"
    );
}

#[tokio::test]
async fn migrate_applies_the_postgres_schema() {
    let db = TestDatabase::create(Dialect::Postgres).await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let output = idem_command(dir.path())
        .arg("migrate")
        .env("DATABASE_URL", db.url())
        .output()
        .await
        .expect("run idem migrate");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.starts_with("migrations applied to postgres://"),
        "{stdout}"
    );
    assert_eq!(
        db.store().await.readiness().await.expect("reachable"),
        Readiness::Ready
    );
}

#[tokio::test]
async fn an_unsupported_database_url_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let output = idem_command(dir.path())
        .arg("migrate")
        .env("DATABASE_URL", "mysql://root@localhost/idem")
        .output()
        .await
        .expect("run idem migrate");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unsupported database URL"), "{stderr}");
}

#[tokio::test]
async fn an_unreachable_postgres_fails_the_start_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("temporary directory");
    // Port 1 on loopback: nothing listens there, the connection is refused at once.
    let output = idem_command(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("DATABASE_URL", "postgres://idem:secret@127.0.0.1:1/idem")
        .output()
        .await
        .expect("run idem serve");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("database unavailable"), "{stderr}");
    assert!(!stderr.contains("secret"), "no password in the output: {stderr}");
}

#[tokio::test]
async fn json_logs_carry_the_request_id_on_every_request_line() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut command = idem_command(dir.path());
    command
        .env("IDEM_LOG_FORMAT", "json")
        .env("IDEM_LOG", "info")
        .stderr(std::process::Stdio::piped());
    let idem = IdemProcess::serve_with(command).await;

    let response = reqwest::Client::new()
        .get(format!("http://{}/healthz?token=do-not-log-me", idem.address))
        .header("x-request-id", "probe-123")
        .send()
        .await
        .expect("GET /healthz");
    assert_eq!(response.status(), 200);
    idem.signal("TERM");
    let output = tokio::time::timeout(Duration::from_secs(10), idem.child.wait_with_output())
        .await
        .expect("exits after SIGTERM")
        .expect("collect output");
    assert!(output.status.success());

    let stderr = String::from_utf8(output.stderr).expect("UTF-8 logs");
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    let request_lines: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|line| line["span"]["request_id"] == "probe-123")
        .collect();
    assert!(!request_lines.is_empty(), "a line for the request: {stderr}");
    assert!(
        request_lines
            .iter()
            .all(|line| line["span"]["path"] == "/healthz")
    );
    assert!(
        !stderr.contains("do-not-log-me"),
        "query strings stay out of logs: {stderr}"
    );
}

#[tokio::test]
async fn a_lease_shorter_than_the_provider_timeout_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let output = idem_command(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("IDEM_LEASE_SECS", "2")
        .env("IDEM_PROVIDER_TIMEOUT_MS", "5000")
        .output()
        .await
        .expect("run idem serve");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("must be longer than the provider timeout"),
        "{stderr}"
    );
}
