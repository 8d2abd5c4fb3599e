//! A real Prometheus (Debian's package; `scripts/test` installs it), in a process of its own on
//! a port of its own (`ports.rs`), scraping the instances a test names every second.

use super::ports::unused_port;
use serde_json::Value;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;
use tempfile::TempDir;
use tokio::process::{Child, Command};

pub struct Prometheus {
    address: SocketAddr,
    http: reqwest::Client,
    _child: Child,
    _dir: TempDir,
}

impl Prometheus {
    /// Prometheus started with `config` (its YAML), its scrape interval and timeout forced
    /// to 1 s so that tests need not wait.
    pub async fn with_config(config: &str) -> Prometheus {
        let dir = tempfile::tempdir().expect("prometheus directory");
        let config = config.replace(
            "scrape_interval: 15s",
            "scrape_interval: 1s\n    scrape_timeout: 1s",
        );
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write the configuration");
        let address: SocketAddr = ([127, 0, 0, 1], unused_port()).into();
        let binary = std::env::var("IDEM_PROMETHEUS").unwrap_or_else(|_| "prometheus".to_owned());
        let child = Command::new(&binary)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("start {binary} (scripts/test installs it): {error}"));
        let prometheus = Prometheus {
            address,
            http: reqwest::Client::new(),
            _child: child,
            _dir: dir,
        };
        for _ in 0..100 {
            let ready = prometheus
                .http
                .get(format!("http://{address}/-/ready"))
                .send()
                .await;
            if ready.is_ok_and(|response| response.status().is_success()) {
                return prometheus;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("prometheus did not become ready on {address}");
    }

    /// The instant vector `query` evaluates to now: each sample's labels and value.
    pub async fn query(&self, query: &str) -> Vec<(Value, f64)> {
        let answer: Value = self
            .http
            .get(format!("http://{}/api/v1/query", self.address))
            .query(&[("query", query)])
            .send()
            .await
            .expect("query prometheus")
            .json()
            .await
            .expect("json");
        assert_eq!(answer["status"], "success", "{query}: {answer}");
        answer["data"]["result"]
            .as_array()
            .expect("a vector")
            .iter()
            .map(|sample| {
                let value = sample["value"][1]
                    .as_str()
                    .and_then(|value| value.parse().ok())
                    .expect("a value");
                (sample["metric"].clone(), value)
            })
            .collect()
    }

    /// Polls `query` (up to 20 s) until its samples satisfy `done`; they.
    pub async fn eventually(
        &self,
        query: &str,
        done: impl Fn(&[(Value, f64)]) -> bool,
        what: &str,
    ) -> Vec<(Value, f64)> {
        let mut samples = Vec::new();
        for _ in 0..100 {
            samples = self.query(query).await;
            if done(&samples) {
                return samples;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("{what}: {query} is {samples:?}");
    }
}
