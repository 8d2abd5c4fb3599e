//! `idem provider-sim`: a payment provider over HTTP, with provider-side idempotency by key and
//! a control API to make it misbehave on purpose.
//!
//! Test values (like a provider's test card numbers), so that demos and the console can
//! produce every outcome by hand, chosen by the last two digits of the amount's minor units
//! (`10.02` EUR, `1002` JPY):
//!
//! | ends in | the first charge call for that payment (refund call for that refund) |
//! |---|---|
//! | `02` | is declined |
//! | `03` | fails before accepting (503, nothing charged) |
//! | `04` | is accepted, then answered 500 |
//! | `05` | is accepted, then its answer is never sent |
//! | `06` | is answered after 2 s |
//!
//! Refunds (`POST /v1/refunds`) take the same test values and faults (by their `rf_…`
//! reference), and are refused (409) beyond what their charge has left. Repeating a charge or
//! a refund (same key) returns the recorded one, as a real provider does.
//! Everything else succeeds unless a queued fault says otherwise.

use crate::provider::sim::charges::create_charge;
use crate::provider::sim::charges::find_charge;
use crate::provider::sim::refunds::create_refund;
use crate::provider::sim::refunds::find_refund;
mod charges;

pub use charges::{SimCharge, SimCharges};
mod control;

mod refunds;

pub use refunds::{SimRefund, SimRefunds};

use super::{ChargeRequest, RefundRequest};

use crate::supervisor::Worker;

use axum::http::{HeaderMap, StatusCode};

use axum::response::{IntoResponse, Response};

use axum::routing::{get, post};

use axum::{Json, Router};

use control::{
    clear_faults, faults, list_charges, list_refunds, queue_fault, release_held_calls, release_late_charges,
    settle,
};

use domain::money::{Amount, Currency};

use serde::{Deserialize, Serialize};

use serde_json::json;

use std::collections::{BTreeMap, BTreeSet};

use std::sync::{Arc, Mutex, MutexGuard};

use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// How long a `drop_response_after_accept` call is held before the connection is closed: far
/// past any sensible client timeout.
const DROPPED_RESPONSE_HOLD: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultMode {
    Latency,
    FailBeforeAccept,
    DropResponseAfterAccept,
    ErrorAfterAccept,
    Decline,
    LookupsUnavailable,
    /// Answers 503 at once ("nothing was charged") and records the charge `delayMs` later, as
    /// a provider that took the request after its client had given up (with `held`: when
    /// `POST /_sim/late-charges` says so, for a test that waits on its own steps, not a clock).
    AcceptLate,
}

/// `POST /_sim/faults` body: the next `count` matching calls misbehave; or, with `rate`
/// instead, each matching call misbehaves with that probability until the faults are cleared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultRequest {
    pub mode: FaultMode,
    #[serde(default)]
    pub count: u32,
    /// A standing fault's probability, in (0, 1].
    #[serde(default)]
    pub rate: Option<f64>,
    #[serde(default)]
    pub reference: Option<String>,
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// `accept_late`: hold the late charge until `POST /_sim/late-charges`. `latency`: hold
    /// the call, instead of `delayMs`, until `POST /_sim/held-calls` (for a test that waits on
    /// its own steps, not a clock).
    #[serde(default)]
    pub held: bool,
}

/// A charge the provider takes late, recorded when it is run.
type LateCharge = Box<dyn FnOnce(&Simulator) + Send>;

#[derive(Default)]
struct Ledger {
    charges: BTreeMap<String, SimCharge>,
    refunds: BTreeMap<String, SimRefund>,
    next_refund: u64,
    /// Every key a create call arrived with, accepted or not (test values act on the first).
    seen_keys: BTreeSet<String>,
    faults: Vec<FaultRequest>,
    /// Faults that met a call, since the simulator started.
    faults_applied: u64,
    /// Late charges held until a test releases them.
    held_late: Vec<LateCharge>,
    /// Calls held (`latency` with `held`) until a test lets them go on.
    held_calls: Vec<oneshot::Sender<()>>,
    next_charge: u64,
}

#[derive(Clone, Default)]
pub struct Simulator {
    ledger: Arc<Mutex<Ledger>>,
}

impl Simulator {
    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // A panic while holding the lock cannot leave a half-written charge behind (every
        // update is a single insert or field write), so a poisoned lock is still usable.
        self.ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes one use of the first queued fault of these modes that matches the reference (a
    /// standing fault matches with its rate's probability, and is not used up).
    fn take_fault(&self, modes: &[FaultMode], reference: Option<&str>) -> Option<FaultRequest> {
        let mut ledger = self.ledger();
        let index = ledger.faults.iter().position(|fault| {
            let applies = match fault.rate {
                Some(rate) => chance() < rate,
                None => fault.count > 0,
            };
            modes.contains(&fault.mode)
                && applies
                && match (&fault.reference, reference) {
                    (Some(wanted), Some(actual)) => wanted == actual,
                    (Some(_), None) => false,
                    (None, _) => true,
                }
        })?;
        ledger.faults_applied += 1;
        if ledger.faults[index].rate.is_some() {
            return Some(ledger.faults[index].clone());
        }
        let fault = &mut ledger.faults[index];
        fault.count -= 1;
        let taken = fault.clone();
        if fault.count == 0 {
            ledger.faults.remove(index);
        }
        Some(taken)
    }
}

/// The simulator served from inside `idem serve` when no provider is configured, on a free
/// loopback port, as one of its workers (so that a fresh checkout runs with nothing else
/// started).
pub struct InProcessSimulator {
    listener: std::net::TcpListener,
    simulator: Simulator,
}

impl InProcessSimulator {
    pub async fn bind() -> std::io::Result<InProcessSimulator> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await?
            .into_std()?;
        Ok(InProcessSimulator {
            listener,
            simulator: Simulator::default(),
        })
    }

    pub fn url(&self) -> String {
        match self.listener.local_addr() {
            Ok(address) => format!("http://{address}"),
            Err(_) => "http://127.0.0.1:0".to_owned(),
        }
    }
}

#[async_trait::async_trait]
impl Worker for InProcessSimulator {
    fn name(&self) -> &'static str {
        "provider simulator"
    }

    async fn run(&self, stop: CancellationToken) {
        let served = match self
            .listener
            .try_clone()
            .and_then(tokio::net::TcpListener::from_std)
        {
            Ok(listener) => {
                axum::serve(listener, router(self.simulator.clone()))
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
            }
            Err(error) => Err(error),
        };
        if let Err(error) = served {
            tracing::error!(%error, "in-process provider simulator stopped");
        }
    }
}

pub fn router(simulator: Simulator) -> Router {
    Router::new()
        .route("/v1/charges", post(create_charge).get(find_charge))
        .route("/_sim/faults", get(faults).post(queue_fault).delete(clear_faults))
        .route("/_sim/charges", get(list_charges))
        .route("/_sim/late-charges", post(release_late_charges))
        .route("/_sim/held-calls", post(release_held_calls))
        .route("/v1/refunds", post(create_refund).get(find_refund))
        .route("/_sim/refunds", get(list_refunds))
        .route("/_sim/settle", post(settle))
        .with_state(simulator)
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({ "error": code, "message": message }))).into_response()
}

/// A request the simulator refuses, as it answers it.
struct Refused {
    status: StatusCode,
    code: &'static str,
    message: &'static str,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        error(self.status, self.code, self.message)
    }
}

/// The `Idempotency-Key` of a create call, when it has one.
fn idempotency_key(headers: &HeaderMap) -> Result<String, Refused> {
    headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .filter(|key| !key.is_empty())
        .map(str::to_owned)
        .ok_or(Refused {
            status: StatusCode::BAD_REQUEST,
            code: "idempotency_key_missing",
            message: "Idempotency-Key is required.",
        })
}

fn amount_of(amount: &str, currency: &str) -> Result<Amount, Refused> {
    Currency::parse(currency)
        .ok()
        .and_then(|currency| Amount::parse(amount, currency).ok())
        .ok_or(Refused {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_amount",
            message: "Amount or currency is not valid.",
        })
}

/// The body of a create call (a charge or a refund).
trait CreateBody: serde::de::DeserializeOwned {
    /// What a malformed body is told.
    const SHAPE: &'static str;

    /// The amount and its currency, as sent.
    fn amount(&self) -> (&str, &str);

    /// The caller's reference, which faults are queued for.
    fn reference(&self) -> &str;
}

impl CreateBody for ChargeRequest {
    const SHAPE: &'static str = "Body must be {amount, currency, reference}.";

    fn amount(&self) -> (&str, &str) {
        (&self.amount, &self.currency)
    }

    fn reference(&self) -> &str {
        &self.reference
    }
}

impl CreateBody for RefundRequest {
    const SHAPE: &'static str = "Body must be {chargeId, amount, currency, reference}.";

    fn amount(&self) -> (&str, &str) {
        (&self.amount, &self.currency)
    }

    fn reference(&self) -> &str {
        &self.reference
    }
}

/// A create call's idempotency key, body and amount, or why it is refused.
fn read_create<B: CreateBody>(headers: &HeaderMap, body: &[u8]) -> Result<(String, B, Amount), Refused> {
    let key = idempotency_key(headers)?;
    let request = serde_json::from_slice::<B>(body).map_err(|_| Refused {
        status: StatusCode::BAD_REQUEST,
        code: "invalid_request",
        message: B::SHAPE,
    })?;
    let (amount, currency) = request.amount();
    let amount = amount_of(amount, currency)?;
    Ok((key, request, amount))
}

/// What went wrong when recording a create call.
enum NotRecorded {
    /// The idempotency key already names something else.
    KeyReused,
    /// The provider refuses the request itself (a refund over what its charge has left, a
    /// charge it does not know): nothing was recorded.
    Refused(Refused),
}

/// A create call's request read (its key, body and amount), then answered as [`create_call`]
/// does, `record` taking the key, the amount, the body and whether it is declined.
async fn read_and_answer_create<B: CreateBody + Send + 'static, T: Serialize>(
    sim: &Simulator,
    headers: &HeaderMap,
    body: &[u8],
    record: impl FnOnce(&Simulator, String, Amount, B, bool) -> Result<T, NotRecorded> + Send + 'static,
) -> Response {
    let (key, request, amount) = match read_create::<B>(headers, body) {
        Ok(read) => read,
        Err(refused) => return refused.into_response(),
    };
    let reference = request.reference().to_owned();
    create_call(sim, key.clone(), &reference, amount, move |sim, declined| {
        record(sim, key, amount, request, declined)
    })
    .await
}

/// A create call (a charge or a refund) as the simulator answers it: a queued fault for its
/// reference, or its amount's test value on the key's first call, decides how it misbehaves;
/// `record` records it (declined or not) and gives its public answer, or why it was not.
async fn create_call<T: Serialize>(
    sim: &Simulator,
    key: String,
    reference: &str,
    amount: Amount,
    record: impl FnOnce(&Simulator, bool) -> Result<T, NotRecorded> + Send + 'static,
) -> Response {
    let fault = sim.take_fault(
        &[
            FaultMode::Latency,
            FaultMode::FailBeforeAccept,
            FaultMode::DropResponseAfterAccept,
            FaultMode::ErrorAfterAccept,
            FaultMode::Decline,
            FaultMode::AcceptLate,
        ],
        Some(reference),
    );
    let first_call = sim.ledger().seen_keys.insert(key);
    let mode = fault
        .as_ref()
        .map(|fault| fault.mode)
        .or_else(|| first_call.then(|| test_value_fault(amount)).flatten());
    let delay = Duration::from_millis(fault.as_ref().and_then(|fault| fault.delay_ms).unwrap_or(2_000));
    if mode == Some(FaultMode::Latency) {
        if fault.as_ref().is_some_and(|fault| fault.held) {
            let (release, released) = oneshot::channel();
            sim.ledger().held_calls.push(release);
            // A simulator dropped with the call held lets it go on too.
            let _ = released.await;
        } else {
            tokio::time::sleep(delay).await;
        }
    }
    if mode == Some(FaultMode::AcceptLate) {
        // Whatever a retry did meanwhile under the same key stands.
        let late = move |sim: &Simulator| drop(record(sim, false));
        if fault.as_ref().is_some_and(|fault| fault.held) {
            sim.ledger().held_late.push(Box::new(late));
        } else {
            let sim = sim.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                late(&sim);
            });
        }
        return nothing_charged();
    }
    if mode == Some(FaultMode::FailBeforeAccept) {
        return nothing_charged();
    }
    let answer = match record(sim, mode == Some(FaultMode::Decline)) {
        Ok(answer) => answer,
        Err(NotRecorded::KeyReused) => {
            return error(
                StatusCode::CONFLICT,
                "idempotency_key_reused",
                "This idempotency key was used for a different request.",
            );
        }
        Err(NotRecorded::Refused(refused)) => return refused.into_response(),
    };
    match mode {
        Some(FaultMode::DropResponseAfterAccept) => {
            // Accepted and recorded; the answer never comes. The client's timeout ends this
            // (dropping the connection drops this future).
            tokio::time::sleep(DROPPED_RESPONSE_HOLD).await;
            error(
                StatusCode::GATEWAY_TIMEOUT,
                "dropped",
                "This answer was meant to be lost.",
            )
        }
        Some(FaultMode::ErrorAfterAccept) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "Something failed after accepting.",
        ),
        _ => (StatusCode::CREATED, Json(answer)).into_response(),
    }
}

fn nothing_charged() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "Try again later; nothing was charged.",
    )
}

/// The idempotency key already names a charge for something else.
struct KeyReused;

/// A number drawn uniformly from [0, 1).
fn chance() -> f64 {
    f64::from(getrandom::u32().unwrap_or(u32::MAX)) / (f64::from(u32::MAX) + 1.0)
}

/// The fault a test value asks for (see the module's table).
fn test_value_fault(amount: Amount) -> Option<FaultMode> {
    match amount.minor_units() % 100 {
        2 => Some(FaultMode::Decline),
        3 => Some(FaultMode::FailBeforeAccept),
        4 => Some(FaultMode::ErrorAfterAccept),
        5 => Some(FaultMode::DropResponseAfterAccept),
        6 => Some(FaultMode::Latency),
        _ => None,
    }
}

#[derive(Deserialize)]
struct FindByKey {
    idempotency_key: String,
}

/// A look-up by idempotency key (`GET /v1/charges`, `GET /v1/refunds`): what was accepted
/// under it, or 404; a queued `lookups_unavailable` for its reference answers 503.
fn look_up<T: Serialize>(sim: &Simulator, found: Option<(String, T)>) -> Response {
    let reference = found.as_ref().map(|(reference, _)| reference.as_str());
    if sim
        .take_fault(&[FaultMode::LookupsUnavailable], reference)
        .is_some()
    {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Look-ups are unavailable.",
        );
    }
    match found {
        Some((_, answer)) => Json(answer).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "not_found",
            "Nothing was accepted with this key.",
        ),
    }
}
