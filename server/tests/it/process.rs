//! The real binary: first run, configuration errors, migrations, graceful shutdown.

use crate::support::{
    DialectName, IdemProcess, SERVE_ON_FREE_PORTS, Serve, TEST_RESPONSE_KEYS, TestApp, TestDatabase,
    expect_error, expect_replay, idem_command, ms,
};
use idem::store::Readiness;
use sqlx::Connection;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A process manager may stop an instance the moment it has started (a deploy rolled back at
/// once): a SIGTERM right after the addresses are announced, while the application is still
/// being built, stops it cleanly. Its handler used to be installed only when axum first polled
/// the shutdown future, and such a SIGTERM killed the process (exit by signal 15).
#[tokio::test]
async fn a_sigterm_as_soon_as_the_addresses_are_announced_stops_it_cleanly() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut idem = IdemProcess::serve(dir.path()).await;
    idem.signal("TERM");
    let status = idem.ended().await;
    assert!(status.success(), "clean exit: {status:?}");
}

#[tokio::test]
async fn first_run_creates_the_embedded_database_in_wal_mode() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let data_dir = dir.path().join("fresh/data");
    let mut idem = IdemProcess::serve(&data_dir).await;

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

/// Waits until the instance at `address` answers `/readyz` with 200: built and serving.
async fn until_ready(address: std::net::SocketAddr) {
    let http = reqwest::Client::new();
    let ready = async {
        loop {
            let answer = http.get(format!("http://{address}/readyz")).send().await;
            if answer.is_ok_and(|answer| answer.status() == 200) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), ready)
        .await
        .expect("ready");
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_request_finish() {
    let app = TestApp::on(DialectName::Sqlite)
        .tenant("acme", "100.00")
        .seeded()
        .await;
    let mut idem = IdemProcess::start(app.serve_command(&[])).await;
    // The signal handler is installed before the instance says it is ready.
    until_ready(idem.address).await;

    // A payment whose body is still to come when the signal comes: it is in flight. The
    // client asks to be told to go on (`Expect: 100-continue`), and the server says so only
    // once it has read the request's head and its handler waits for the body, so the signal
    // cannot arrive before the server knows of the request (the head alone, unread, raced it).
    let mut stream = TcpStream::connect(idem.address).await.expect("connect");
    let body = r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-term"}"#;
    stream
        .write_all(
            format!(
                "POST /payments HTTP/1.1\r\nhost: idem\r\nauthorization: Bearer {}\r\n\
                 idempotency-key: k-in-flight\r\ncontent-type: application/json\r\n\
                 expect: 100-continue\r\ncontent-length: {}\r\n\r\n",
                app.key("acme"),
                body.len(),
            )
            .as_bytes(),
        )
        .await
        .expect("send the head");
    let go_on = b"HTTP/1.1 100 Continue\r\n\r\n";
    let mut interim = vec![0_u8; go_on.len()];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut interim))
        .await
        .expect("told to go on")
        .expect("read the interim answer");
    assert_eq!(interim, go_on, "{}", String::from_utf8_lossy(&interim));
    idem.signal("TERM");
    // Shutting down: no new connection is accepted, and the instance waits for this request.
    let refused = async {
        while TcpStream::connect(idem.address).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), refused)
        .await
        .expect("the listener closes on SIGTERM");
    assert!(
        idem.child.try_wait().expect("poll").is_none(),
        "still serving the in-flight request"
    );

    stream.write_all(body.as_bytes()).await.expect("send the body");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("read the response");
    assert!(
        response.starts_with("HTTP/1.1 201"),
        "the payment is made: {response}"
    );
    let status = tokio::time::timeout(Duration::from_secs(10), idem.child.wait())
        .await
        .expect("exits once the request is done")
        .expect("wait");
    assert!(status.success(), "clean exit: {status:?}");
    assert_eq!(
        app.db
            .query_i64(
                "select count(*) from payments where merchant_reference = 'inv-term' and status = 'PENDING'"
            )
            .await,
        1,
        "the acknowledged payment is stored"
    );
}

#[tokio::test]
async fn migrate_applies_the_postgres_schema() {
    let db = TestDatabase::create(DialectName::Postgres).await;
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
    let mut command = idem_command(dir.path());
    command.env("DATABASE_URL", "postgres://idem:secret@127.0.0.1:1/idem");
    let stderr = serve_refused(command, "database unavailable").await;
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
    let stderr = idem.stop_and_read_logs().await;
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
    let mut command = idem_command(dir.path());
    command
        .env("IDEM_LEASE_SECS", "2")
        .env("IDEM_PROVIDER_TIMEOUT_MS", "5000");
    serve_refused(command, "must be longer than the provider timeout").await;
}

/// Runs `idem serve` expecting it to refuse to start (exit code 1) with `reason` on stderr;
/// returns the whole of stderr.
async fn serve_refused(mut command: tokio::process::Command, reason: &str) -> String {
    // An instance that starts after all would run until killed: the command is killed when
    // the timeout drops it.
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        command.args(SERVE_ON_FREE_PORTS).output(),
    )
    .await
    .unwrap_or_else(|_| panic!("idem serve was expected to refuse to start ({reason:?}) but kept running"))
    .expect("run idem serve");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(reason), "expected {reason:?} in: {stderr}");
    stderr
}

#[tokio::test]
async fn instances_sharing_a_database_must_share_response_keys() {
    let db = TestDatabase::create(DialectName::Postgres).await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let other_secret = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    let with_keys = |keys: Option<String>| {
        let mut command = idem_command(dir.path());
        command.env("DATABASE_URL", db.url());
        match keys {
            Some(keys) => command.env("IDEM_RESPONSE_KEYS", keys),
            None => command.env_remove("IDEM_RESPONSE_KEYS"),
        };
        command
    };
    serve_refused(with_keys(None), "pass the same --response-keys").await;

    let first = IdemProcess::serve_with(with_keys(Some(TEST_RESPONSE_KEYS.to_owned()))).await;
    // It prints its address before it joins: the others start once it answers.
    let ready = reqwest::get(format!("http://{}/readyz", first.address))
        .await
        .expect("GET /readyz");
    assert_eq!(ready.status(), 200, "the first instance has joined");
    let test_secret = TEST_RESPONSE_KEYS.split_once(':').expect("id:secret").1;
    serve_refused(
        with_keys(Some(format!("t1:{other_secret}"))),
        "is not the key stored responses were sealed with",
    )
    .await;
    serve_refused(
        with_keys(Some(format!("t2:{other_secret}"))),
        "responses sealed with the key `t1`",
    )
    .await;
    // Rotation while an instance runs: a new sealing key is refused until every live
    // instance holds it (the first one does not).
    let t2_seals = format!("t2:{other_secret},t1:{test_secret}");
    serve_refused(with_keys(Some(t2_seals.clone())), "which the live instance idem-").await;
    // First every instance holds the new key, still sealing with the old one...
    let holding_both =
        IdemProcess::serve_with(with_keys(Some(format!("t1:{test_secret},t2:{other_secret}")))).await;
    let mut first = first;
    first.signal("TERM");
    assert!(
        first.ended().await.success(),
        "a graceful stop leaves the registry"
    );
    // ...then the new key may seal.
    let rotated = IdemProcess::serve_with(with_keys(Some(t2_seals))).await;
    drop((holding_both, rotated));
}

/// Two instances started at once with different secrets under one key id: however their
/// checks and registrations interleave, one starts (and stays ready) and the other refuses.
#[tokio::test]
async fn of_two_instances_started_at_once_with_different_secrets_under_one_key_id_one_refuses() {
    let db = TestDatabase::create(DialectName::Postgres).await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let test_secret = TEST_RESPONSE_KEYS.split_once(':').expect("id:secret").1;
    let start = |secret: &str| {
        let mut command = idem_command(dir.path());
        command
            .env("DATABASE_URL", db.url())
            .env("IDEM_RESPONSE_KEYS", format!("t1:{secret}"))
            .stderr(std::process::Stdio::piped());
        IdemProcess::serve_with(command)
    };
    let (mut one, mut other) = tokio::join!(
        start(test_secret),
        start("AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=")
    );
    let mut started = 0;
    for instance in [&mut one, &mut other] {
        match reqwest::get(format!("http://{}/readyz", instance.address)).await {
            Ok(answer) => {
                assert_eq!(answer.status(), 200, "the instance that started is ready");
                started += 1;
            }
            Err(_) => {
                assert_eq!(instance.ended().await.code(), Some(1), "refused");
                let mut stderr = String::new();
                instance
                    .child
                    .stderr
                    .take()
                    .expect("piped")
                    .read_to_string(&mut stderr)
                    .await
                    .expect("stderr");
                assert!(
                    stderr.contains("is not the key stored responses were sealed with"),
                    "{stderr}"
                );
            }
        }
    }
    assert_eq!(started, 1, "exactly one of the two started");
}

#[tokio::test]
async fn an_instance_missing_a_key_in_use_turns_unready_and_answers_its_replays_503() {
    let mut app = TestApp::on(DialectName::Postgres)
        .tenant("acme", "100.00")
        .with(Serve::InstanceHeartbeat(ms(300)))
        .process()
        .await;
    // The running instance holds only t1. Paused (a stalled VM), it drops out of the live
    // instances, so a new instance may start sealing with a key it lacks.
    let mut ready = false;
    for _ in 0..100 {
        ready = app.get("/readyz").await.status() == 200;
        if ready {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "the first instance is up");
    app.server().signal("STOP");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let test_secret = TEST_RESPONSE_KEYS.split_once(':').expect("id:secret").1;
    let rotated = app
        .spawn_server(&[(
            "IDEM_RESPONSE_KEYS",
            &format!("t2:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=,t1:{test_secret}"),
        )])
        .await;
    let body = r#"{"accountId":"acc_1","amount":"10.00","currency":"EUR","merchantReference":"inv-keys"}"#;
    let sealed_with_t2 = app.pay_at(rotated.address, "k-t2", body).await;
    assert_eq!(sealed_with_t2.status(), 201);
    let first_body = sealed_with_t2.bytes().await.expect("body");

    app.server().signal("CONT");
    let mut readiness = serde_json::Value::Null;
    for _ in 0..50 {
        let answer = app.get("/readyz").await;
        if answer.status() == 503 {
            readiness = answer.json().await.expect("json");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The reason only: which keys and files are missing is for the log, not for anyone who
    // can reach the port.
    assert_eq!(
        readiness,
        serde_json::json!({ "status": "not_ready", "reason": "response_key_missing" })
    );
    // A replay it cannot open is a retryable 503, never a 500; the other instance replays it.
    let refused = app.pay("k-t2", body).await;
    assert!(refused.headers().contains_key("retry-after"));
    let refused = expect_error(refused, 503, "UNAVAILABLE").await;
    assert_eq!(refused["retryable"], true);
    let replayed = app.pay_at(rotated.address, "k-t2", body).await;
    expect_replay(replayed, &first_body, "replayed where the key is held").await;
    assert_eq!(app.sim.charges().await.len(), 1);
}

#[tokio::test]
async fn logs_never_carry_api_keys_bodies_or_credentials() {
    let app = TestApp::on(DialectName::Sqlite)
        .tenant("acme", "100.00")
        .seeded()
        .await;
    let api_key = app.key("acme").to_owned();
    let mut command = app.serve_command(&[("IDEM_LOG_FORMAT", "json"), ("IDEM_LOG", "trace")]);
    command.stderr(std::process::Stdio::piped());
    let idem = IdemProcess::start(command).await;

    let http = reqwest::Client::new();
    let url = format!("http://{}/payments", idem.address);
    let pay = |key: &str, body: String, api_key: String| {
        http.post(&url)
            .bearer_auth(api_key)
            .header("idempotency-key", key.to_owned())
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let body = |amount: &str| {
        format!(
            r#"{{"accountId":"acc_1","amount":"{amount}","currency":"EUR","merchantReference":"canary-body-7f3a"}}"#
        )
    };
    let created = pay("k-log", body("10.00"), api_key.clone()).await.expect("POST");
    assert_eq!(created.status(), 201);
    let payment: serde_json::Value = created.json().await.expect("json");
    assert_eq!(
        pay("k-log", body("10.00"), api_key.clone())
            .await
            .expect("POST")
            .status(),
        201
    );
    assert_eq!(
        pay("k-log", body("99.00"), api_key.clone())
            .await
            .expect("POST")
            .status(),
        409
    );
    let invalid = pay(
        "k-bad",
        r#"{"canary-invalid-9c1d": tru"#.to_owned(),
        api_key.clone(),
    );
    assert_eq!(invalid.await.expect("POST").status(), 400);
    let guessed = format!("{api_key}x");
    assert_eq!(
        pay("k-401", body("1.00"), guessed).await.expect("POST").status(),
        401
    );
    let fetched = http
        .get(format!(
            "http://{}/payments/{}",
            idem.address,
            payment["paymentId"].as_str().expect("id")
        ))
        .bearer_auth(&api_key)
        .send()
        .await
        .expect("GET");
    assert_eq!(fetched.status(), 200);

    let logs = idem.stop_and_read_logs().await;
    assert!(logs.lines().count() > 20, "trace logging was on: {logs}");
    // `idem_key_<hex id>_<secret>`: the secret is all after the id (base64url may hold `_`).
    let secret = api_key
        .strip_prefix("idem_key_")
        .and_then(|rest| rest.split_once('_'))
        .map(|(_, secret)| secret)
        .expect("key secret");
    assert_eq!(secret.len(), 43, "the whole secret: {secret}");
    for (leak, what) in [
        (api_key.as_str(), "an API key"),
        (secret, "an API key's secret"),
        ("canary-body-7f3a", "a request or response body"),
        ("canary-invalid-9c1d", "an invalid body"),
        ("Bearer", "an Authorization header"),
        (TEST_RESPONSE_KEYS, "the response key"),
    ] {
        assert!(!logs.contains(leak), "{what} leaked into the logs");
    }
}

#[tokio::test]
async fn the_data_directory_is_its_owners_and_a_shared_key_file_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().expect("temp dir");
    let data_dir = root.path().join("data");
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777;
    // The embedded default: the database and the response sealing key in the data directory.
    let embedded = || {
        let mut command = idem_command(&data_dir);
        command.env_remove("IDEM_RESPONSE_KEYS");
        command
    };
    let mut first = embedded();
    first.stderr(std::process::Stdio::inherit());
    let mut idem = IdemProcess::serve_with(first).await;
    until_ready(idem.address).await;
    let key_file = data_dir.join("response-keys");
    assert_eq!(
        mode(&data_dir),
        0o700,
        "the data directory is made for its owner only"
    );
    assert_eq!(mode(&key_file), 0o600);
    idem.signal("TERM");
    assert!(idem.ended().await.success());

    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut shared = embedded();
    shared.stderr(std::process::Stdio::piped());
    let idem = IdemProcess::serve_with(shared).await;
    until_ready(idem.address).await;
    let logs = idem.stop_and_read_logs().await;
    assert!(logs.contains("readable by other accounts"), "{logs}");
    assert!(logs.contains("response-keys"), "{logs}");
}

#[tokio::test]
async fn the_console_can_be_kept_off_the_payments_port() {
    let app = TestApp::on(DialectName::Sqlite)
        .tenant("acme", "100.00")
        .seeded()
        .await;
    let mut command = app.serve_command(&[]);
    command.args(["--console-listen", "127.0.0.1:0"]);
    let idem = IdemProcess::start(command).await;
    let console = idem.console_address.expect("a console listener of its own");
    assert_ne!(console, idem.address);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let get = async |address: std::net::SocketAddr, path: &str| {
        http.get(format!("http://{address}{path}"))
            .send()
            .await
            .expect("GET")
            .status()
            .as_u16()
    };
    // The payments port: the API, its docs, nothing of the console.
    assert_eq!(get(idem.address, "/healthz").await, 200);
    assert_eq!(get(idem.address, "/openapi.json").await, 200);
    for console_path in ["/sign-in", "/", "/records", "/pkg/idem.css"] {
        let answer = http
            .get(format!("http://{}{console_path}", idem.address))
            .send()
            .await
            .expect("GET");
        expect_error(answer, 404, "NOT_FOUND").await;
    }
    let sign_in = http
        .post(format!("http://{}/sign-in", idem.address))
        .header("origin", format!("http://{}", idem.address))
        .form(&[("username", "admin"), ("password", "a guess at it")])
        .send()
        .await
        .expect("POST");
    expect_error(sign_in, 404, "NOT_FOUND").await;
    let paid = http
        .post(format!("http://{}/payments", idem.address))
        .bearer_auth(app.key("acme"))
        .header("idempotency-key", "k-apart")
        .json(&serde_json::json!({"accountId": "acc_1", "amount": "1.00", "currency": "EUR", "merchantReference": "inv-apart"}))
        .send()
        .await
        .expect("POST");
    assert_eq!(paid.status(), 201);
    // The console's port: the console, not the API.
    assert_eq!(get(console, "/sign-in").await, 200);
    assert_eq!(get(console, "/").await, 303, "to sign in");
    let api_on_console = http
        .get(format!("http://{console}/payments/pay_0000000000000000"))
        .bearer_auth(app.key("acme"))
        .send()
        .await
        .expect("GET");
    assert_ne!(api_on_console.status(), 200);
    assert!(
        !api_on_console
            .text()
            .await
            .expect("text")
            .contains("PAYMENT_NOT_FOUND"),
        "the API is not served on the console's port"
    );
}
