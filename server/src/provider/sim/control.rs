//! The simulator's control API (`/_sim/…`), which tests and demos use to make it misbehave and
//! to see what it recorded; a real provider has none.

use super::{FaultRequest, SimCharges, SimRefunds, Simulator, error};
use crate::provider::ChargeStatus;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

/// `POST /_sim/settle`: settles every succeeded charge (or the one with `reference`).
pub(super) async fn settle(State(sim): State<Simulator>, body: axum::body::Bytes) -> Response {
    #[derive(Deserialize)]
    struct Settle {
        #[serde(default)]
        reference: Option<String>,
    }
    let settle: Settle = if body.is_empty() {
        Settle { reference: None }
    } else {
        match serde_json::from_slice(&body) {
            Ok(settle) => settle,
            Err(problem) => return error(StatusCode::BAD_REQUEST, "invalid_settle", &problem.to_string()),
        }
    };
    let mut settled = 0;
    for charge in sim.ledger().charges.values_mut() {
        let chosen = settle
            .reference
            .as_deref()
            .is_none_or(|reference| reference == charge.reference);
        if chosen && charge.status == ChargeStatus::Succeeded && !charge.settled {
            charge.settled = true;
            settled += 1;
        }
    }
    Json(serde_json::json!({ "settled": settled })).into_response()
}

pub(super) async fn queue_fault(State(sim): State<Simulator>, body: axum::body::Bytes) -> Response {
    match serde_json::from_slice::<FaultRequest>(&body) {
        Ok(fault)
            if match fault.rate {
                Some(rate) => fault.count == 0 && rate > 0.0 && rate <= 1.0,
                None => fault.count > 0,
            } =>
        {
            sim.ledger().faults.push(fault.clone());
            (StatusCode::CREATED, Json(fault)).into_response()
        }
        Ok(_) => error(
            StatusCode::BAD_REQUEST,
            "invalid_fault",
            "give either count (at least 1) or rate (above 0, at most 1).",
        ),
        Err(problem) => error(StatusCode::BAD_REQUEST, "invalid_fault", &problem.to_string()),
    }
}

/// `GET /_sim/faults`: the faults queued or standing, and how many calls met one so far.
pub(super) async fn faults(State(sim): State<Simulator>) -> Json<serde_json::Value> {
    let ledger = sim.ledger();
    Json(serde_json::json!({ "queued": ledger.faults, "applied": ledger.faults_applied }))
}

pub(super) async fn clear_faults(State(sim): State<Simulator>) -> StatusCode {
    sim.ledger().faults.clear();
    StatusCode::NO_CONTENT
}

/// `POST /_sim/late-charges`: records every late charge held so far (`accept_late` with
/// `held`); how many.
pub(super) async fn release_late_charges(State(sim): State<Simulator>) -> Json<serde_json::Value> {
    let held = std::mem::take(&mut sim.ledger().held_late);
    let released = held.len();
    for late in held {
        late(&sim);
    }
    Json(serde_json::json!({ "released": released }))
}

/// `POST /_sim/held-calls`: lets every call held so far (`latency` with `held`) go on; how
/// many.
pub(super) async fn release_held_calls(State(sim): State<Simulator>) -> Json<serde_json::Value> {
    let held = std::mem::take(&mut sim.ledger().held_calls);
    let released = held.len();
    for call in held {
        // A call whose client went away has nothing left to let go.
        let _ = call.send(());
    }
    Json(serde_json::json!({ "released": released }))
}

pub(super) async fn list_charges(State(sim): State<Simulator>) -> Json<SimCharges> {
    Json(SimCharges {
        charges: sim.ledger().charges.values().cloned().collect(),
    })
}

pub(super) async fn list_refunds(State(sim): State<Simulator>) -> Json<SimRefunds> {
    Json(SimRefunds {
        refunds: sim.ledger().refunds.values().cloned().collect(),
    })
}
