use super::TestDatabase;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The real `idem` binary, in its own process, with a clean environment.
pub struct IdemProcess {
    pub child: Child,
    pub address: SocketAddr,
}

/// The response sealing key every test instance shares, as instances of one deployment do.
pub const TEST_RESPONSE_KEYS: &str = "t1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// An `idem` command with no inherited Idem configuration, so that the caller's
/// `DATABASE_URL` or `IDEM_*` never leaks into a test.
pub fn idem_command(data_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idem"));
    for (name, _) in std::env::vars() {
        if name == "DATABASE_URL" || name.starts_with("IDEM_") {
            command.env_remove(name);
        }
    }
    command
        .env("IDEM_DATA_DIR", data_dir)
        .env("IDEM_LOG", "warn")
        .env("IDEM_RESPONSE_KEYS", TEST_RESPONSE_KEYS)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

impl IdemProcess {
    /// Starts `idem serve` on a random port and waits for the line that names its address.
    pub async fn serve(data_dir: &Path, database_url: Option<&str>) -> IdemProcess {
        let mut command = idem_command(data_dir);
        command.stderr(Stdio::inherit());
        if let Some(url) = database_url {
            command.env("DATABASE_URL", url);
        }
        Self::serve_with(command).await
    }

    /// Starts `idem serve` from a prepared command (its stdout is taken over here).
    pub async fn serve_with(mut command: Command) -> IdemProcess {
        command.args(["serve", "--listen", "127.0.0.1:0"]);
        Self::start(command).await
    }

    /// Starts `idem provider-sim` on a random port.
    pub async fn provider_sim() -> IdemProcess {
        let mut command = idem_command(&std::env::temp_dir());
        command
            .args(["provider-sim", "--listen", "127.0.0.1:0"])
            .stderr(Stdio::inherit());
        Self::start(command).await
    }

    /// Spawns the command and waits for its first line, which names its address.
    async fn start(mut command: Command) -> IdemProcess {
        command.stdout(Stdio::piped());
        let mut child = command.spawn().expect("start idem");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("idem printed its address in time")
            .expect("read stdout")
            .expect("a line on stdout");
        let address = line
            .split_once("http://")
            .and_then(|(_, rest)| rest.strip_suffix('/'))
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .parse()
            .expect("a socket address");
        IdemProcess { child, address }
    }

    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("running").to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }
}

/// Runs an `idem` administrative command against `db`; its standard output, trimmed.
pub async fn admin(data_dir: &Path, db: &TestDatabase, args: &[&str]) -> String {
    let output = idem_command(data_dir)
        .args(args)
        .env("DATABASE_URL", db.url())
        .output()
        .await
        .expect("run idem");
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .trim_end()
        .to_owned()
}

/// A tenant with an API key and an EUR account `acc_1` holding `balance`; returns the key.
pub async fn seed_tenant(data_dir: &Path, db: &TestDatabase, tenant: &str, balance: &str) -> String {
    seed_tenant_with(data_dir, db, tenant, balance, &[]).await
}

/// `seed_tenant`, with extra flags for `tenant create` (e.g. `--optional-idempotency-key`).
pub async fn seed_tenant_with(
    data_dir: &Path,
    db: &TestDatabase,
    tenant: &str,
    balance: &str,
    create_flags: &[&str],
) -> String {
    let mut create = vec!["tenant", "create", tenant];
    create.extend_from_slice(create_flags);
    admin(data_dir, db, &create).await;
    let api_key = admin(data_dir, db, &["api-key", "create", "--tenant", tenant]).await;
    admin(
        data_dir,
        db,
        &[
            "account",
            "create",
            "--tenant",
            tenant,
            "--id",
            "acc_1",
            "--currency",
            "EUR",
            "--balance",
            balance,
        ],
    )
    .await;
    api_key
}

impl IdemProcess {
    /// Every charge a `provider-sim` process recorded.
    pub async fn sim_charges(&self) -> Vec<idem::provider::sim::SimCharge> {
        let list: idem::provider::sim::SimCharges =
            reqwest::get(format!("http://{}/_sim/charges", self.address))
                .await
                .expect("list charges")
                .json()
                .await
                .expect("charges json");
        list.charges
    }

    /// Queues a fault on a `provider-sim` process.
    pub async fn sim_fault(&self, fault: &serde_json::Value) {
        let queued = reqwest::Client::new()
            .post(format!("http://{}/_sim/faults", self.address))
            .json(fault)
            .send()
            .await
            .expect("queue fault");
        assert_eq!(queued.status(), 201, "{fault}");
    }
}

/// `idem serve` on `db` with a provider-sim, tuned for recovery tests: 1 s lease, 800 ms
/// provider timeout, worker every 200 ms, no rate limit. `env` entries come last and win.
pub async fn serve_recovering(
    data_dir: &Path,
    db: &TestDatabase,
    sim: &IdemProcess,
    env: &[(&str, &str)],
) -> IdemProcess {
    let mut command = idem_command(data_dir);
    command
        .env("DATABASE_URL", db.url())
        .env("IDEM_PROVIDER_URL", format!("http://{}", sim.address))
        .env("IDEM_LEASE_SECS", "1")
        .env("IDEM_PROVIDER_TIMEOUT_MS", "800")
        .env("IDEM_RECOVERY_INTERVAL_MS", "200")
        .env("IDEM_RATE_LIMIT_PER_SEC", "0")
        .stderr(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    IdemProcess::serve_with(command).await
}
