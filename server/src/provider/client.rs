//! Idem's client of the payment provider. It never guesses: every failure is classified by
//! what it proves about the money.

use super::{Charge, ChargeRequest, ProviderRefund, RefundRequest, provider_key, provider_refund_key};
use domain::money::Amount;
use domain::recovery::{ProviderFailure, UnknownCause};
use reqwest::StatusCode;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The request never reached the provider (connection refused, DNS): nothing was charged.
    #[error("the provider could not be reached: {0}")]
    NotSent(String),
    /// The provider answered and refused the request (4xx): nothing was charged.
    #[error("the provider refused the request with {status}: {body}")]
    Rejected { status: u16, body: String },
    /// The request may have been accepted (timeout after sending, 5xx, unreadable answer):
    /// only asking the provider by the same key can tell.
    #[error("the provider's outcome is unknown: {1}")]
    OutcomeUnknown(UnknownCause, String),
}

impl ProviderError {
    /// What the failure proves, as a record keeps it.
    pub fn cause(&self) -> UnknownCause {
        match self {
            ProviderError::NotSent(_) => UnknownCause::NotSent,
            ProviderError::Rejected { .. } => UnknownCause::Rejected,
            ProviderError::OutcomeUnknown(cause, _) => *cause,
        }
    }

    /// The failure of a call that sends (`call`: "charge request", …) after `took`: its cause
    /// is why the record's outcome is unknown.
    pub fn of_send(&self, call: &str, took: Duration) -> ProviderFailure {
        ProviderFailure {
            cause: Some(self.cause()),
            words: failure_words(call, took, self),
        }
    }

    /// The failure of a look-up after `took`: the outcome stays unknown for the reason it was.
    pub fn of_look_up(&self, call: &str, took: Duration) -> ProviderFailure {
        ProviderFailure {
            cause: None,
            words: failure_words(call, took, self),
        }
    }
}

/// `charge request, after 1.003 s: the provider's outcome is unknown: …`.
fn failure_words(call: &str, took: Duration, error: &ProviderError) -> String {
    format!("{call}, after {:.3} s: {error}", took.as_secs_f64())
}

#[derive(Debug, Clone)]
pub struct ProviderClient {
    http: reqwest::Client,
    base_url: String,
}

impl ProviderClient {
    pub fn new(
        base_url: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Self, ProviderError> {
        let http = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .timeout(request_timeout)
            .build()
            .map_err(|error| ProviderError::NotSent(error.to_string()))?;
        Ok(ProviderClient {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
        })
    }

    /// Charges for a payment with the payment's provider key: repeating it with the same
    /// payment id can never charge twice.
    pub async fn create_charge(&self, payment_id: &str, amount: Amount) -> Result<Charge, ProviderError> {
        let request = ChargeRequest {
            amount: amount.to_string(),
            currency: amount.currency().code().to_owned(),
            reference: payment_id.to_owned(),
        };
        counted(
            CALLS[0],
            self.send("charges", &provider_key(payment_id), &request).await,
        )
    }

    /// What the provider knows of a payment's charge: `None` when it never accepted the key.
    pub async fn find_charge(&self, payment_id: &str) -> Result<Option<Charge>, ProviderError> {
        counted(CALLS[1], self.look_up("charges", &provider_key(payment_id)).await)
    }

    /// Refunds (part of) a charge with the refund's provider key: repeating it with the same
    /// refund id can never refund twice.
    pub async fn create_refund(
        &self,
        refund_id: &str,
        charge_id: &str,
        amount: Amount,
    ) -> Result<ProviderRefund, ProviderError> {
        let request = RefundRequest {
            charge_id: charge_id.to_owned(),
            amount: amount.to_string(),
            currency: amount.currency().code().to_owned(),
            reference: refund_id.to_owned(),
        };
        counted(
            CALLS[2],
            self.send("refunds", &provider_refund_key(refund_id), &request)
                .await,
        )
    }

    /// What the provider knows of a refund: `None` when it never accepted the key.
    pub async fn find_refund(&self, refund_id: &str) -> Result<Option<ProviderRefund>, ProviderError> {
        counted(
            CALLS[3],
            self.look_up("refunds", &provider_refund_key(refund_id)).await,
        )
    }

    /// `POST /v1/<collection>` with the provider key `key`: what the provider made.
    async fn send<T: DeserializeOwned>(
        &self,
        collection: &str,
        key: &str,
        request: &impl Serialize,
    ) -> Result<T, ProviderError> {
        let response = self
            .http
            .post(format!("{}/v1/{collection}", self.base_url))
            .header("idempotency-key", key)
            .json(request)
            .send()
            .await
            .map_err(classify_transport)?;
        match response.status() {
            StatusCode::CREATED | StatusCode::OK => read_answer(response).await,
            status => Err(classify_status(status, response).await),
        }
    }

    /// `GET /v1/<collection>?idempotency_key=<key>`: what the provider made under the key, if
    /// it ever accepted it.
    async fn look_up<T: DeserializeOwned>(
        &self,
        collection: &str,
        key: &str,
    ) -> Result<Option<T>, ProviderError> {
        let response = self
            .http
            .get(format!("{}/v1/{collection}", self.base_url))
            .query(&[("idempotency_key", key)])
            .send()
            .await
            .map_err(classify_transport)?;
        match response.status() {
            StatusCode::OK => read_answer(response).await.map(Some),
            StatusCode::NOT_FOUND => Ok(None),
            status => Err(classify_status(status, response).await),
        }
    }
}

/// The provider calls, by their `call` label.
const CALLS: [&str; 4] = ["create", "find", "create_refund", "find_refund"];
/// What a call's result proves, by its `result` label.
const RESULTS: [&str; 4] = ["answered", "not_sent", "rejected", "outcome_unknown"];

/// Makes every `provider_calls_total` series exist (at 0 until counted).
pub fn register_metrics() {
    for call in CALLS {
        for result in RESULTS {
            metrics::counter!("provider_calls_total", "call" => call, "result" => result).increment(0);
        }
    }
}

/// Counts provider calls by kind and by what their result proves.
fn counted<T>(call: &'static str, result: Result<T, ProviderError>) -> Result<T, ProviderError> {
    let outcome = match &result {
        Ok(_) => RESULTS[0],
        Err(ProviderError::NotSent(_)) => RESULTS[1],
        Err(ProviderError::Rejected { .. }) => RESULTS[2],
        Err(ProviderError::OutcomeUnknown(..)) => RESULTS[3],
    };
    metrics::counter!("provider_calls_total", "call" => call, "result" => outcome).increment(1);
    result
}

async fn read_answer<T: DeserializeOwned>(response: reqwest::Response) -> Result<T, ProviderError> {
    response.json::<T>().await.map_err(|error| {
        ProviderError::OutcomeUnknown(
            UnknownCause::UnreadableAnswer,
            format!("unreadable answer: {error}"),
        )
    })
}

fn classify_transport(error: reqwest::Error) -> ProviderError {
    if error.is_connect() {
        ProviderError::NotSent(error.to_string())
    } else if error.is_timeout() {
        ProviderError::OutcomeUnknown(UnknownCause::TimedOut, format!("timed out: {error}"))
    } else {
        ProviderError::OutcomeUnknown(UnknownCause::ConnectionLost, error.to_string())
    }
}

async fn classify_status(status: StatusCode, response: reqwest::Response) -> ProviderError {
    let body = response.text().await.unwrap_or_default();
    if status.is_client_error() {
        ProviderError::Rejected {
            status: status.as_u16(),
            body,
        }
    } else {
        ProviderError::OutcomeUnknown(UnknownCause::ErrorAnswer, format!("{status}: {body}"))
    }
}
