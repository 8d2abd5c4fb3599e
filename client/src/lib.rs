//! A client for Idem's payments API that retries the way the contract asks, so that a caller
//! cannot get it wrong: one idempotency key per logical operation, reused by every retry;
//! exponential backoff with full jitter on the answers that say "again" (`409` in progress,
//! `202` unknown outcome, `429`, `500` before any side effect, `503`, timeouts and connection
//! errors), never below the server's `Retry-After`; `Prefer: wait=N` when the caller allows it;
//! never a retry of a decision (`400`, `401`, `402`, `404`, the other `409`s, `413`, `422`); and
//! after a lost answer, the look-up by key (`GET /payments?idempotencyKey=K`) before anything is
//! sent again.
//!
//! Written by hand rather than generated from `/openapi.json`: the document describes shapes,
//! and what this crate is for is the policy between the shapes (which answers to retry, how
//! long to pause, when to ask by key), which no generator derives. The surface is small: two
//! keyed POSTs and their look-ups, with answers in `Api-Version: 2026-05-01`.
//!
//! ```no_run
//! # async fn run() -> Result<(), idem_client::Error> {
//! use idem_client::{Client, NewPayment, RetryPolicy};
//! let client = Client::new("http://127.0.0.1:3000", "idem_key_…", RetryPolicy::default().waiting(10));
//! let key = Client::new_key();
//! let payment = client
//!     .create_payment(&key, &NewPayment::new("acc_1", "10.00", "EUR", "invoice-7781"))
//!     .await?;
//! println!("{} {} (replayed: {})", payment.resource.payment_id, payment.resource.status, payment.replayed);
//! # Ok(()) }
//! ```

use domain::key::IdempotencyKey;
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// The representation this client reads (the contract's first version).
const API_VERSION: &str = "2026-05-01";

/// How a logical operation is retried.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// How long one logical operation may take, every retry included.
    pub deadline: Duration,
    /// The first pause's upper bound; each retry doubles it, up to `longest_backoff`.
    pub first_backoff: Duration,
    pub longest_backoff: Duration,
    /// How long one attempt may take before it counts as a lost answer.
    pub attempt_timeout: Duration,
    /// `Prefer: wait=N` on every attempt: the server holds a retry that meets its first request
    /// still running for up to N seconds (1 to 10) instead of answering `409` at once.
    pub wait_secs: Option<u8>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            deadline: Duration::from_secs(60),
            first_backoff: Duration::from_millis(100),
            longest_backoff: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(20),
            wait_secs: None,
        }
    }
}

impl RetryPolicy {
    /// This policy, asking the server to hold a retry up to `secs` seconds.
    pub fn waiting(self, secs: u8) -> RetryPolicy {
        RetryPolicy {
            wait_secs: Some(secs),
            ..self
        }
    }

    /// The pause before retry number `retry` (0 for the first): a random duration up to the
    /// doubled backoff (full jitter, so that clients that failed together do not come back
    /// together), and never less than the server's `Retry-After`.
    fn pause(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let ceiling = self
            .first_backoff
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.longest_backoff);
        let jittered = ceiling.mul_f64(fastrand::f64());
        jittered.max(retry_after.unwrap_or_default())
    }
}

/// `POST /payments`'s body.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewPayment {
    pub account_id: String,
    /// A decimal string in the currency's major unit ("10.00").
    pub amount: String,
    pub currency: String,
    pub merchant_reference: String,
}

impl NewPayment {
    pub fn new(account_id: &str, amount: &str, currency: &str, merchant_reference: &str) -> NewPayment {
        NewPayment {
            account_id: account_id.to_owned(),
            amount: amount.to_owned(),
            currency: currency.to_owned(),
            merchant_reference: merchant_reference.to_owned(),
        }
    }
}

/// A payment, as the API represents it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Payment {
    pub payment_id: String,
    /// `PROCESSING`, `PENDING`, `SETTLED` or `DECLINED`.
    pub status: String,
    pub account_id: String,
    pub amount: String,
    pub currency: String,
    pub merchant_reference: String,
}

/// `POST /payments/{paymentId}/refunds`'s body.
#[derive(Debug, Clone, Serialize)]
pub struct NewRefund {
    pub amount: String,
    /// `requested_by_customer`, `duplicate` or `fraudulent`.
    pub reason: String,
    pub reference: String,
}

/// A refund, as the API represents it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refund {
    pub refund_id: String,
    pub payment_id: String,
    pub amount: String,
    pub currency: String,
    pub reason: String,
    pub reference: String,
    /// `PROCESSING`, `SUCCEEDED` or `DECLINED`.
    pub status: String,
}

/// What a keyed POST makes, as its look-up by key tells it.
trait Resource: DeserializeOwned {
    /// Whether the operation that made it has its outcome (a retry would get the replay).
    fn settled(&self) -> bool;
    /// The decline a settled resource stands for: the `402` its key answers.
    fn declined(&self) -> Option<ErrorBody>;
}

impl Resource for Payment {
    fn settled(&self) -> bool {
        self.status != "PROCESSING"
    }

    fn declined(&self) -> Option<ErrorBody> {
        (self.status == "DECLINED")
            .then(|| ErrorBody::declined("PAYMENT_DECLINED", "paymentId", &self.payment_id))
    }
}

impl Resource for Refund {
    fn settled(&self) -> bool {
        self.status != "PROCESSING"
    }

    fn declined(&self) -> Option<ErrorBody> {
        (self.status == "DECLINED")
            .then(|| ErrorBody::declined("REFUND_DECLINED", "refundId", &self.refund_id))
    }
}

/// A resource its key made, and how the client came by it.
#[derive(Debug, Clone)]
pub struct Created<T> {
    pub resource: T,
    /// `Idempotent-Replayed: true`: an earlier attempt (this client's, or another's with the
    /// same key) made it, and this is its stored answer.
    pub replayed: bool,
    /// Found through the look-up by key after an answer was lost, not answered by a POST.
    pub found_by_key: bool,
    /// How many POSTs were sent.
    pub attempts: u32,
}

/// A contract error body, with its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorBody {
    pub status: u16,
    /// The contract's `errorCode` (`IDEMPOTENCY_KEY_REUSED_WITH_DIFFERENT_REQUEST`, …).
    pub code: String,
    pub message: String,
    pub details: Value,
}

impl ErrorBody {
    fn read(status: StatusCode, body: &[u8]) -> ErrorBody {
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let text = |field: &str| body[field].as_str().unwrap_or_default().to_owned();
        ErrorBody {
            status: status.as_u16(),
            code: text("errorCode"),
            message: text("message"),
            details: body["details"].clone(),
        }
    }

    fn declined(code: &str, id_field: &str, id: &str) -> ErrorBody {
        ErrorBody {
            status: 402,
            code: code.to_owned(),
            message: "declined by the provider (found by the idempotency key)".to_owned(),
            details: serde_json::json!({ id_field: id }),
        }
    }
}

/// Why the last attempt before the deadline did not answer.
#[derive(Debug, Clone)]
pub enum LastAttempt {
    /// `409 IDEMPOTENCY_REQUEST_IN_PROGRESS`, `429`, `500` or `503`.
    Again(ErrorBody),
    /// `202`: the provider's answer was lost; recovery will settle it, and the same key then
    /// gets the answer.
    OutcomeUnknown { resource_id: String },
    /// No answer: a timeout, a refused or broken connection.
    Lost(String),
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API decided, and a retry would decide the same: a different command under the key,
    /// validation, a decline, insufficient funds, an unknown account, an expired key under the
    /// `reject` policy, bad credentials.
    #[error("{} {}: {}", .0.status, .0.code, .0.message)]
    Refused(ErrorBody),
    /// The deadline passed before a final answer. The key may still make its resource: call
    /// again with the same key, or look it up.
    #[error("no final answer for key {key} after {attempts} attempts: {last:?}")]
    GaveUp {
        key: String,
        attempts: u32,
        last: LastAttempt,
    },
}

/// What one attempt came to.
enum Attempt {
    Created {
        body: Vec<u8>,
        replayed: bool,
    },
    Refused(ErrorBody),
    Again {
        retry_after: Option<Duration>,
        last: LastAttempt,
    },
}

/// The payments API, for one tenant's API key.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    api_key: String,
    policy: RetryPolicy,
}

impl Client {
    /// A client of the API at `base` (`http://host:port`), authenticated with `api_key`.
    pub fn new(base: &str, api_key: &str, policy: RetryPolicy) -> Client {
        let http = reqwest::Client::builder()
            .timeout(policy.attempt_timeout)
            .build()
            .unwrap_or_default();
        Client {
            http,
            base: base.trim_end_matches('/').to_owned(),
            api_key: api_key.to_owned(),
            policy,
        }
    }

    /// A key for a new logical operation: keep it with the operation, and pass it again to
    /// every call for the same operation (after a crash too).
    pub fn new_key() -> IdempotencyKey {
        IdempotencyKey::parse(uuid::Uuid::new_v4().to_string().as_bytes())
            .unwrap_or_else(|_| unreachable!("a UUID is a valid idempotency key"))
    }

    /// `POST /payments` under `key`, retried until a final answer or the deadline.
    pub async fn create_payment(
        &self,
        key: &IdempotencyKey,
        payment: &NewPayment,
    ) -> Result<Created<Payment>, Error> {
        self.keyed("/payments", "/payments", key, payment).await
    }

    /// `POST /payments/{payment_id}/refunds` under `key`, retried until a final answer or the
    /// deadline.
    pub async fn create_refund(
        &self,
        key: &IdempotencyKey,
        payment_id: &str,
        refund: &NewRefund,
    ) -> Result<Created<Refund>, Error> {
        self.keyed(
            &format!("/payments/{payment_id}/refunds"),
            "/refunds",
            key,
            refund,
        )
        .await
    }

    /// The payment `key` made, as it is now, if it made one.
    pub async fn payment_by_key(&self, key: &IdempotencyKey) -> Result<Option<Payment>, Error> {
        self.found("/payments", key).await
    }

    /// The refund `key` made, as it is now, if it made one.
    pub async fn refund_by_key(&self, key: &IdempotencyKey) -> Result<Option<Refund>, Error> {
        self.found("/refunds", key).await
    }

    async fn keyed<T: Resource>(
        &self,
        path: &str,
        look_up_path: &str,
        key: &IdempotencyKey,
        body: &impl Serialize,
    ) -> Result<Created<T>, Error> {
        let deadline = Instant::now() + self.policy.deadline;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (retry_after, last) = match self.attempt(path, key, body).await {
                Attempt::Created { body, replayed } => {
                    let resource =
                        serde_json::from_slice(&body).map_err(|error| Error::Refused(unreadable(&error)))?;
                    return Ok(Created {
                        resource,
                        replayed,
                        found_by_key: false,
                        attempts,
                    });
                }
                Attempt::Refused(error) => return Err(Error::Refused(error)),
                Attempt::Again {
                    retry_after,
                    last: LastAttempt::Lost(reason),
                } => {
                    // The answer was lost: the key's look-up says whether it made its resource
                    // and has its outcome, which then needs nothing sent again.
                    match self.found::<T>(look_up_path, key).await {
                        Ok(Some(resource)) if resource.settled() => {
                            return match resource.declined() {
                                Some(declined) => Err(Error::Refused(declined)),
                                None => Ok(Created {
                                    resource,
                                    replayed: true,
                                    found_by_key: true,
                                    attempts,
                                }),
                            };
                        }
                        _ => (retry_after, LastAttempt::Lost(reason)),
                    }
                }
                Attempt::Again { retry_after, last } => (retry_after, last),
            };
            let pause = self.policy.pause(attempts - 1, retry_after);
            if Instant::now() + pause >= deadline {
                return Err(Error::GaveUp {
                    key: key.as_str().to_owned(),
                    attempts,
                    last,
                });
            }
            tokio::time::sleep(pause).await;
        }
    }

    async fn attempt(&self, path: &str, key: &IdempotencyKey, body: &impl Serialize) -> Attempt {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.api_key)
            .header("idempotency-key", key.as_str())
            .header("api-version", API_VERSION)
            .json(body);
        if let Some(secs) = self.policy.wait_secs {
            request = request.header("prefer", format!("wait={secs}"));
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => return lost(&error),
        };
        let status = response.status();
        let replayed = response.headers().contains_key("idempotent-replayed");
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = match response.bytes().await {
            Ok(body) => body.to_vec(),
            Err(error) => return lost(&error),
        };
        match status.as_u16() {
            201 => Attempt::Created { body, replayed },
            202 => {
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let resource_id = ["paymentId", "refundId"]
                    .iter()
                    .find_map(|field| body[field].as_str())
                    .unwrap_or_default()
                    .to_owned();
                Attempt::Again {
                    retry_after,
                    last: LastAttempt::OutcomeUnknown { resource_id },
                }
            }
            409 | 429 | 500 | 503 => {
                let error = ErrorBody::read(status, &body);
                // Of the 409s only "in progress" is a moment; the others are decisions.
                if status == StatusCode::CONFLICT && error.code != "IDEMPOTENCY_REQUEST_IN_PROGRESS" {
                    return Attempt::Refused(error);
                }
                Attempt::Again {
                    retry_after,
                    last: LastAttempt::Again(error),
                }
            }
            _ => Attempt::Refused(ErrorBody::read(status, &body)),
        }
    }

    /// The look-up by key: the resource `key` made under `path`, if any.
    async fn found<T: DeserializeOwned>(&self, path: &str, key: &IdempotencyKey) -> Result<Option<T>, Error> {
        #[derive(Deserialize)]
        struct Found<T> {
            data: Vec<T>,
        }
        let gave_up = |reason: String| Error::GaveUp {
            key: key.as_str().to_owned(),
            attempts: 0,
            last: LastAttempt::Lost(reason),
        };
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .query(&[("idempotencyKey", key.as_str())])
            .bearer_auth(&self.api_key)
            .header("api-version", API_VERSION)
            .send()
            .await
            .map_err(|error| gave_up(error.to_string()))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|error| gave_up(error.to_string()))?;
        if status != StatusCode::OK {
            return Err(Error::Refused(ErrorBody::read(status, &body)));
        }
        let found: Found<T> =
            serde_json::from_slice(&body).map_err(|error| Error::Refused(unreadable(&error)))?;
        Ok(found.data.into_iter().next())
    }
}

fn lost(error: &reqwest::Error) -> Attempt {
    Attempt::Again {
        retry_after: None,
        last: LastAttempt::Lost(error.to_string()),
    }
}

/// A success body this client cannot read: a server of another contract.
fn unreadable(error: &serde_json::Error) -> ErrorBody {
    ErrorBody {
        status: 200,
        code: "UNREADABLE_ANSWER".to_owned(),
        message: error.to_string(),
        details: Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::RetryPolicy;
    use std::time::Duration;

    #[test]
    fn pauses_double_up_to_the_longest_with_jitter_and_never_undercut_retry_after() {
        let policy = RetryPolicy::default();
        for retry in 0..12 {
            let ceiling = (Duration::from_millis(100) * 2u32.pow(retry)).min(Duration::from_secs(5));
            for _ in 0..50 {
                assert!(policy.pause(retry, None) <= ceiling, "retry {retry}");
            }
            assert!(policy.pause(retry, Some(Duration::from_secs(7))) >= Duration::from_secs(7));
        }
        let spread: std::collections::BTreeSet<_> = (0..20).map(|_| policy.pause(3, None)).collect();
        assert!(spread.len() > 1, "jittered");
    }

    #[test]
    fn every_new_key_is_valid_and_new() {
        let (first, second) = (super::Client::new_key(), super::Client::new_key());
        assert_ne!(first, second);
        assert_eq!(first.as_str().len(), 36);
    }
}
