//! Two jobs over payments at the provider: settlement (authorised payments become SETTLED
//! when the provider reports the money moved, each with its PaymentSettled event; `GET
//! /payments/{id}` then shows SETTLED, while a replay of the creating request still returns
//! the answer it was given), and the release watch (a payment an operator released as not
//! charged is asked about for a day, in case the provider took it after all).

use crate::engine::PaymentsEngine;
use crate::supervisor::Periodic;
use std::sync::Arc;
use std::time::Duration;

/// How long after its release a payment's provider key is still asked about.
pub const RELEASE_WATCH: Duration = Duration::from_secs(24 * 3600);

/// Payments looked at per pass.
const BATCH: i64 = 100;

pub struct Settlement {
    pub engine: Arc<PaymentsEngine>,
    /// Also how long a payment waits before it is looked at again.
    pub interval: Duration,
}

#[async_trait::async_trait]
impl Periodic for Settlement {
    fn name(&self) -> &'static str {
        "settlement"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    async fn pass(&self) {
        let settled = self.engine.settle_pending(self.interval, BATCH).await;
        if settled > 0 {
            tracing::info!(settled, "settlement pass");
        }
    }
}

pub struct ReleaseWatch {
    pub engine: Arc<PaymentsEngine>,
    /// Also how long a released payment waits before it is asked about again.
    pub interval: Duration,
}

#[async_trait::async_trait]
impl Periodic for ReleaseWatch {
    fn name(&self) -> &'static str {
        "release watch"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    async fn pass(&self) {
        self.engine
            .watch_released(RELEASE_WATCH, self.interval, BATCH)
            .await;
    }
}
