//! What a request with an idempotency key (or an operation without one) came to: the
//! outcomes the metrics count and the dashboard draws.

use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr, VariantArray};

/// In the order dashboards show them ([`Outcome::VARIANTS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[derive(Serialize, Deserialize)]
#[derive(EnumString, IntoStaticStr, VariantArray)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Outcome {
    NewExecution,
    Replay,
    ConflictDifferentRequest,
    InProgress,
    ExpiredRetry,
    OutcomeUnknown,
    ProviderError,
    Takeover,
}

impl Outcome {
    /// Its name in metrics (`idempotency_<name>_total`) and in the outcome buckets.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}
