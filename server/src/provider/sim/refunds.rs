//! The simulator's refunds: `POST /v1/refunds` and its look-up by key, against what the
//! charge has left.

use super::Refused;
use crate::provider::sim::FindByKey;
use crate::provider::sim::NotRecorded;
use crate::provider::sim::Simulator;
use crate::provider::sim::amount_of;
use crate::provider::sim::look_up;
use crate::provider::sim::read_and_answer_create;
use crate::provider::{ChargeStatus, ProviderRefund, RefundRequest};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use domain::money::Amount;
use serde::{Deserialize, Serialize};

/// One refund as `GET /_sim/refunds` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimRefund {
    pub provider_refund_id: String,
    pub idempotency_key: String,
    pub charge_id: String,
    /// The refund's id (`rf_…`).
    pub reference: String,
    pub amount: String,
    pub currency: String,
    pub status: ChargeStatus,
    /// How many `POST /v1/refunds` arrived with this key.
    pub create_calls: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimRefunds {
    pub refunds: Vec<SimRefund>,
}

/// `POST /v1/refunds`: refunds part of a succeeded charge, at most what the charge has left
/// (succeeded refunds count; declined ones do not).
pub(super) async fn create_refund(
    State(sim): State<Simulator>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    read_and_answer_create(
        &sim,
        &headers,
        &body,
        |sim, key, amount, request: RefundRequest, declined| {
            record_refund(sim, key, amount, request, declined).map(|refund| public_refund(&refund))
        },
    )
    .await
}

/// Records a refund under its idempotency key, or counts one more call for the refund the key
/// already has.
pub(super) fn record_refund(
    sim: &Simulator,
    key: String,
    amount: Amount,
    request: RefundRequest,
    declined: bool,
) -> Result<SimRefund, NotRecorded> {
    let mut ledger = sim.ledger();
    if let Some(existing) = ledger.refunds.get_mut(&key) {
        existing.create_calls += 1;
        let same_request = existing.charge_id == request.charge_id
            && existing.amount == amount.to_string()
            && existing.currency == amount.currency().code()
            && existing.reference == request.reference;
        if !same_request {
            return Err(NotRecorded::KeyReused);
        }
        return Ok(existing.clone());
    }
    let Some(charge) = ledger
        .charges
        .values()
        .find(|charge| charge.charge_id == request.charge_id)
    else {
        return Err(NotRecorded::Refused(Refused {
            status: StatusCode::NOT_FOUND,
            code: "charge_not_found",
            message: "No such charge.",
        }));
    };
    let charged = amount_of(&charge.amount, &charge.currency)
        .map(Amount::minor_units)
        .unwrap_or_default();
    let refunded: i64 = ledger
        .refunds
        .values()
        .filter(|refund| refund.charge_id == request.charge_id && refund.status == ChargeStatus::Succeeded)
        .filter_map(|refund| amount_of(&refund.amount, &refund.currency).ok())
        .map(Amount::minor_units)
        .sum();
    if charge.status != ChargeStatus::Succeeded
        || charge.currency != amount.currency().code()
        || (!declined && refunded + amount.minor_units() > charged)
    {
        return Err(NotRecorded::Refused(Refused {
            status: StatusCode::CONFLICT,
            code: "refund_exceeds_charge",
            message: "The charge cannot be refunded by this amount.",
        }));
    }
    ledger.next_refund += 1;
    let refund = SimRefund {
        provider_refund_id: format!("re_{:06}", ledger.next_refund),
        idempotency_key: key.clone(),
        charge_id: request.charge_id,
        reference: request.reference,
        amount: amount.to_string(),
        currency: amount.currency().code().to_owned(),
        status: if declined {
            ChargeStatus::Declined
        } else {
            ChargeStatus::Succeeded
        },
        create_calls: 1,
    };
    ledger.refunds.insert(key, refund.clone());
    Ok(refund)
}

pub(super) fn public_refund(refund: &SimRefund) -> ProviderRefund {
    ProviderRefund {
        provider_refund_id: refund.provider_refund_id.clone(),
        status: refund.status,
        reference: refund.reference.clone(),
    }
}

pub(super) async fn find_refund(State(sim): State<Simulator>, Query(query): Query<FindByKey>) -> Response {
    let found = sim
        .ledger()
        .refunds
        .get(&query.idempotency_key)
        .map(|refund| (refund.reference.clone(), public_refund(refund)));
    look_up(&sim, found)
}
