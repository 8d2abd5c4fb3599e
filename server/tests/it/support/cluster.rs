//! PostgreSQL clusters of a test's own, for what must not be done to the shared test server:
//! restarting it under load, killing it, failing over to a synchronous standby. Each is a real
//! `initdb` + `pg_ctl` cluster in a temporary directory on free ports (as the `postgres` user
//! when the tests run as root, since PostgreSQL refuses to run as root), stopped and removed
//! when dropped. A [`Forwarder`] stands for the address clients are given (a virtual IP, a
//! proxy): failing over moves it to the promoted standby.

use super::ports::unused_port;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

/// The standby's name in `synchronous_standby_names`.
const STANDBY: &str = "standby";

pub struct Cluster {
    bin: PathBuf,
    dir: TempDir,
    pub port: u16,
    /// The server settings it was started with, to start it again with.
    settings: Vec<String>,
}

impl Cluster {
    /// A new primary, ready to stream to a synchronous standby once one connects (until then a
    /// commit waits for it, so [`Cluster::standby_of`] comes before any load).
    pub fn primary() -> Cluster {
        Cluster::initialised(&[
            "-c wal_level=replica",
            "-c max_wal_senders=4",
            &format!("-c synchronous_standby_names={STANDBY}"),
        ])
    }

    /// A primary with no standby: commits wait for nobody.
    pub fn single() -> Cluster {
        Cluster::initialised(&[])
    }

    /// A primary with no standby that counts every statement by its text
    /// (`pg_stat_statements`, once a database has the extension).
    pub fn counting_statements() -> Cluster {
        Cluster::initialised(&[
            "-c shared_preload_libraries=pg_stat_statements",
            "-c pg_stat_statements.track=all",
        ])
    }

    fn initialised(settings: &[&str]) -> Cluster {
        let mut cluster = Cluster::empty();
        let data = cluster.data();
        cluster.run_as_owner(
            "initdb",
            &["-D", &data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        );
        cluster.settings = settings.iter().map(|setting| setting.to_string()).collect();
        cluster.start();
        cluster
    }

    /// A streaming standby of `primary` (a base backup), the one its commits wait for; returns
    /// once the primary reports it synchronous.
    pub async fn standby_of(primary: &Cluster) -> Cluster {
        let mut standby = Cluster::empty();
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres application_name={STANDBY}",
            primary.port
        );
        standby.run_as_owner(
            "pg_basebackup",
            &["-d", &conninfo, "-D", &standby.data(), "-R", "-X", "stream"],
        );
        // -R names the primary without the application name the primary waits for.
        let auto_conf = Path::new(&standby.data()).join("postgresql.auto.conf");
        let mut settings = std::fs::read_to_string(&auto_conf).expect("postgresql.auto.conf");
        settings.push_str(&format!("primary_conninfo = '{conninfo}'\n"));
        std::fs::write(&auto_conf, settings).expect("postgresql.auto.conf");
        standby.settings = vec!["-c hot_standby=on".to_owned()];
        standby.start();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = primary
                .query(&format!(
                    "select sync_state from pg_stat_replication where application_name = '{STANDBY}'"
                ))
                .await;
            if state.as_deref() == Some("sync") {
                return standby;
            }
            assert!(Instant::now() < deadline, "the standby became synchronous");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The admin URL of this cluster at `port` (its own, or a forwarder's in front of it).
    pub fn url_via(port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
    }

    /// Stops at once, as a crash does: no checkpoint, clients cut off.
    pub fn kill(&self) {
        self.pg_ctl(&["-m", "immediate", "stop"]);
    }

    /// Killed as by a crash and started again: it recovers from its WAL. (Not `pg_ctl
    /// restart`, whose new server would keep this process's output pipe open.)
    pub fn crash_restart(&self) {
        self.kill();
        self.start();
    }

    /// The standby becomes a primary (and takes writes) once promoted.
    pub fn promote(&self) {
        self.pg_ctl(&["-w", "promote"]);
    }

    fn empty() -> Cluster {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's server programs in /usr/lib/postgresql (scripts/test installs them)")
            .filter_map(|entry| entry.ok().map(|entry| entry.path().join("bin")))
            .filter(|bin| bin.join("initdb").exists())
            .max()
            .expect("an initdb under /usr/lib/postgresql");
        let dir = tempfile::tempdir().expect("a directory for the cluster");
        let cluster = Cluster {
            bin,
            dir,
            port: unused_port(),
            settings: Vec::new(),
        };
        if running_as_root() {
            let owned = Command::new("chown")
                .args(["postgres", &cluster.dir.path().display().to_string()])
                .status()
                .expect("chown");
            assert!(owned.success(), "the cluster's directory is the postgres user's");
        }
        cluster
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn start(&self) {
        let options = format!(
            "-c port={} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} {}",
            self.port,
            self.dir.path().display(),
            self.settings.join(" ")
        );
        let log = self.dir.path().join("log").display().to_string();
        self.pg_ctl(&["-l", &log, "-o", &options, "-w", "start"]);
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data();
        let mut all = vec!["-D", data.as_str()];
        all.extend_from_slice(args);
        self.run_as_owner("pg_ctl", &all);
    }

    /// Runs one of PostgreSQL's programs as the cluster's owner; its failure fails the test
    /// with what it printed.
    fn run_as_owner(&self, program: &str, args: &[&str]) {
        let output = self
            .as_owner(program)
            .args(args)
            .output()
            .expect("run a PostgreSQL program");
        assert!(
            output.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn as_owner(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        let mut command = if running_as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.current_dir(self.dir.path());
        command
    }

    async fn query(&self, sql: &str) -> Option<String> {
        let pool = sqlx::PgPool::connect(&Cluster::url_via(self.port)).await.ok()?;
        let value = sqlx::query_scalar(sql).fetch_optional(&pool).await.ok().flatten();
        pool.close().await;
        value
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Already stopped (killed) is fine: the directory goes either way.
        let data = self.data();
        let _ = self
            .as_owner("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "stop"])
            .output();
    }
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|process| process.uid() == 0)
}

/// A TCP forwarder standing for a server's address (a database's, an instance's): every
/// connection is relayed to the port it currently points at; the next connections it is told
/// to lose answers on carry the request but lose the answer, as a network that fails after the
/// server did the work.
pub struct Forwarder {
    pub address: SocketAddr,
    target: Arc<AtomicU16>,
    answers_to_lose: Arc<AtomicU16>,
    task: tokio::task::JoinHandle<()>,
}

impl Forwarder {
    pub async fn to(port: u16) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the forwarder");
        let address = listener.local_addr().expect("the forwarder's address");
        let target = Arc::new(AtomicU16::new(port));
        let answers_to_lose = Arc::new(AtomicU16::new(0));
        let task = tokio::spawn({
            let (target, answers_to_lose) = (target.clone(), answers_to_lose.clone());
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let port = target.load(Ordering::SeqCst);
                    let lose_answer = answers_to_lose
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| left.checked_sub(1))
                        .is_ok();
                    tokio::spawn(async move {
                        let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await else {
                            return;
                        };
                        if !lose_answer {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            return;
                        }
                        // The request goes through; once the server starts answering, the
                        // client's connection is closed with nothing of the answer.
                        let (mut from_client, to_client) = client.into_split();
                        let (mut from_server, mut to_server) = server.into_split();
                        let relay = tokio::spawn(async move {
                            let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
                        });
                        let mut first = [0_u8; 1];
                        let _ = from_server.read(&mut first).await;
                        relay.abort();
                        drop(to_client);
                    });
                }
            }
        });
        Forwarder {
            address,
            target,
            answers_to_lose,
            task,
        }
    }

    /// The next `connections` carry their requests but lose their answers.
    pub fn lose_answers(&self, connections: u16) {
        self.answers_to_lose.store(connections, Ordering::SeqCst);
    }

    /// New connections go to `port` from now on.
    pub fn point_to(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
