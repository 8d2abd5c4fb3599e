//! The simulator's charges: `POST /v1/charges` and its look-up by key.

use crate::provider::sim::FindByKey;
use crate::provider::sim::KeyReused;
use crate::provider::sim::NotRecorded;
use crate::provider::sim::Simulator;
use crate::provider::sim::look_up;
use crate::provider::sim::read_and_answer_create;
use crate::provider::{Charge, ChargeRequest, ChargeStatus};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use domain::money::Amount;
use serde::{Deserialize, Serialize};

/// One charge as `GET /_sim/charges` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimCharge {
    pub charge_id: String,
    pub idempotency_key: String,
    pub reference: String,
    pub amount: String,
    pub currency: String,
    pub status: ChargeStatus,
    /// How many `POST /v1/charges` arrived with this key.
    pub create_calls: u32,
    /// Settled through `POST /_sim/settle`.
    #[serde(default)]
    pub settled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimCharges {
    pub charges: Vec<SimCharge>,
}

pub(super) async fn create_charge(
    State(sim): State<Simulator>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    read_and_answer_create(
        &sim,
        &headers,
        &body,
        |sim, key, amount, request: ChargeRequest, declined| {
            record_charge(sim, key, amount, request.reference, declined)
                .map(|charge| public_charge(&charge))
                .map_err(|KeyReused| NotRecorded::KeyReused)
        },
    )
    .await
}

/// Records a charge under its idempotency key, or counts one more call for the charge the key
/// already has.
pub(super) fn record_charge(
    sim: &Simulator,
    key: String,
    amount: Amount,
    reference: String,
    declined: bool,
) -> Result<SimCharge, KeyReused> {
    let mut ledger = sim.ledger();
    if let Some(existing) = ledger.charges.get_mut(&key) {
        existing.create_calls += 1;
        let same_request = existing.amount == amount.to_string()
            && existing.currency == amount.currency().code()
            && existing.reference == reference;
        if !same_request {
            return Err(KeyReused);
        }
        return Ok(existing.clone());
    }
    ledger.next_charge += 1;
    let charge = SimCharge {
        charge_id: format!("ch_{:06}", ledger.next_charge),
        idempotency_key: key.clone(),
        reference,
        amount: amount.to_string(),
        currency: amount.currency().code().to_owned(),
        status: if declined {
            ChargeStatus::Declined
        } else {
            ChargeStatus::Succeeded
        },
        create_calls: 1,
        settled: false,
    };
    ledger.charges.insert(key, charge.clone());
    Ok(charge)
}

pub(super) fn public_charge(charge: &SimCharge) -> Charge {
    Charge {
        charge_id: charge.charge_id.clone(),
        status: charge.status,
        reference: charge.reference.clone(),
        settled: charge.settled,
    }
}

pub(super) async fn find_charge(State(sim): State<Simulator>, Query(query): Query<FindByKey>) -> Response {
    let found = sim
        .ledger()
        .charges
        .get(&query.idempotency_key)
        .map(|charge| (charge.reference.clone(), public_charge(charge)));
    look_up(&sim, found)
}
