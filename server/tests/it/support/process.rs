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
    /// The API's address (and the console's, unless it has its own).
    pub address: SocketAddr,
    /// `idem serve`'s console listener, when apart from the API's (`--console-listen`).
    pub console_address: Option<SocketAddr>,
    /// `idem serve`'s metrics listener.
    pub metrics_address: Option<SocketAddr>,
}

/// `idem serve` on free ports for the API and the metrics.
pub const SERVE_ON_FREE_PORTS: [&str; 5] = [
    "serve",
    "--listen",
    "127.0.0.1:0",
    "--metrics-listen",
    "127.0.0.1:0",
];

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
    /// `idem serve` on a random port, with the embedded database in `data_dir` unless the
    /// command says otherwise.
    pub async fn serve(data_dir: &Path) -> IdemProcess {
        let mut command = idem_command(data_dir);
        command.stderr(Stdio::inherit());
        Self::serve_with(command).await
    }

    /// Starts `idem serve` from a prepared command on a random port.
    pub async fn serve_with(mut command: Command) -> IdemProcess {
        command.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ]);
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

    /// Spawns the command and waits for the line naming its address, and for `idem serve`
    /// the next one naming its metrics listener (its stdout is taken over here).
    pub async fn start(mut command: Command) -> IdemProcess {
        command.stdout(Stdio::piped());
        let mut child = command.spawn().expect("start idem");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut next_address = async || {
            let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
                .await
                .expect("idem printed its address in time")
                .expect("read stdout")
                .expect("a line on stdout");
            let address: SocketAddr = line
                .split_once("http://")
                .and_then(|(_, rest)| rest.split_once('/'))
                .unwrap_or_else(|| panic!("unexpected line: {line:?}"))
                .0
                .parse()
                .expect("a socket address");
            (line, address)
        };
        let (first, address) = next_address().await;
        // `idem serve` names the API (when the console has a listener of its own), the
        // console, then its metrics listener.
        let console_address = match first.starts_with("Idem API") {
            true => Some(next_address().await.1),
            false => None,
        };
        let metrics_address = match first.starts_with("Idem console") || console_address.is_some() {
            true => Some(next_address().await.1),
            false => None,
        };
        IdemProcess {
            child,
            address,
            console_address,
            metrics_address,
        }
    }

    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("running").to_string();
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Stops the process with SIGTERM, checks that it exited cleanly, and returns what it
    /// logged (its stderr, when the command piped it).
    pub async fn stop_and_read_logs(self) -> String {
        self.signal("TERM");
        let output = tokio::time::timeout(Duration::from_secs(10), self.child.wait_with_output())
            .await
            .expect("exits after SIGTERM")
            .expect("collect output");
        assert!(output.status.success(), "a clean exit: {:?}", output.status);
        String::from_utf8(output.stderr).expect("UTF-8 logs")
    }

    /// Waits for the process to end by itself (a crash point, a signal); its exit status.
    pub async fn ended(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("the process ends")
            .expect("wait")
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
