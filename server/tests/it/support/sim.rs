//! The payment provider simulator a test talks to: the real `idem provider-sim` process, or the
//! same router served in this process.

use super::process::IdemProcess;
use idem::provider::sim::{self, SimCharge, SimCharges, SimRefund, SimRefunds};
use serde_json::Value;
use std::net::SocketAddr;

pub struct Sim {
    pub address: SocketAddr,
    /// The process, when it runs in one (killed when the test ends).
    _process: Option<IdemProcess>,
}

impl Sim {
    /// `idem provider-sim` on a random port.
    pub async fn process() -> Sim {
        let process = IdemProcess::provider_sim().await;
        Sim {
            address: process.address,
            _process: Some(process),
        }
    }

    /// The simulator's router served on a random port of this process.
    pub async fn in_process() -> Sim {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("local address");
        tokio::spawn(async move { axum::serve(listener, sim::router(sim::Simulator::default())).await });
        Sim {
            address,
            _process: None,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Every charge the simulator recorded.
    pub async fn charges(&self) -> Vec<SimCharge> {
        let list: SimCharges = reqwest::get(format!("{}/_sim/charges", self.url()))
            .await
            .expect("list charges")
            .json()
            .await
            .expect("charges json");
        list.charges
    }

    /// Every refund the simulator recorded.
    pub async fn refunds(&self) -> Vec<SimRefund> {
        let list: SimRefunds = reqwest::get(format!("{}/_sim/refunds", self.url()))
            .await
            .expect("list refunds")
            .json()
            .await
            .expect("refunds json");
        list.refunds
    }

    /// Queues a fault (see `provider::sim`).
    pub async fn fault(&self, fault: &Value) {
        let queued = reqwest::Client::new()
            .post(format!("{}/_sim/faults", self.url()))
            .json(fault)
            .send()
            .await
            .expect("queue fault");
        assert_eq!(queued.status(), 201, "{fault}");
    }

    /// Records the late charges held so far (`accept_late` with `held`); how many.
    pub async fn release_late_charges(&self) -> u64 {
        let released: Value = reqwest::Client::new()
            .post(format!("{}/_sim/late-charges", self.url()))
            .send()
            .await
            .expect("release late charges")
            .json()
            .await
            .expect("json");
        released["released"].as_u64().expect("a count")
    }

    /// Lets every call held so far (`latency` with `held`) go on; how many.
    pub async fn release_held_calls(&self) -> u64 {
        let released: Value = reqwest::Client::new()
            .post(format!("{}/_sim/held-calls", self.url()))
            .send()
            .await
            .expect("release held calls")
            .json()
            .await
            .expect("json");
        released["released"].as_u64().expect("a count")
    }

    /// Polls until `wanted` calls met a fault (a test's owner is then at the provider).
    pub async fn until_faults_applied(&self, wanted: u64) {
        super::eventually(
            &format!("{wanted} faults applied"),
            || self.faults_applied(),
            |applied| *applied >= wanted,
        )
        .await;
    }

    /// How many calls met a fault so far.
    pub async fn faults_applied(&self) -> u64 {
        let faults: Value = reqwest::get(format!("{}/_sim/faults", self.url()))
            .await
            .expect("faults")
            .json()
            .await
            .expect("json");
        faults["applied"].as_u64().expect("a count")
    }

    /// Settles every succeeded charge, as the provider does when the money moves.
    pub async fn settle(&self) {
        let settled = reqwest::Client::new()
            .post(format!("{}/_sim/settle", self.url()))
            .send()
            .await
            .expect("settle at the provider");
        assert_eq!(settled.status(), 200);
    }
}
