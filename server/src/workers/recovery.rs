//! The recovery worker: every interval it looks for unknown outcomes due for another look and
//! for records whose owner died, and resolves each through the engine's one reconciler (the
//! same code a client's retry runs). Several instances may run it: taking a record is one
//! conditional update, so each record has one taker. Records that used up their attempts stay
//! UNKNOWN_REQUIRES_RECOVERY for an operator.

use crate::engine::{PaymentsEngine, Reply};
use crate::store::{PaymentStore, RecordStore};
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct RecoverySettings {
    /// Provider look-ups per record before it is left to an operator.
    pub max_attempts: i32,
    /// Records per pass.
    pub batch: i64,
}

/// What a recovery attempt came to, by its `recovery_attempts_total` `result` label.
const RESULTS: [&str; 2] = ["resolved", "still_unknown"];

/// Makes every `recovery_attempts_total` series exist (at 0 until counted).
pub fn register_metrics() {
    for result in RESULTS {
        metrics::counter!("recovery_attempts_total", "result" => result).increment(0);
    }
}

pub struct Recovery {
    pub engine: Arc<PaymentsEngine>,
    pub records: Arc<dyn RecordStore>,
    pub payments: Arc<dyn PaymentStore>,
    pub settings: RecoverySettings,
}

impl Recovery {
    /// One pass; returns how many records it tried to resolve.
    pub async fn run_once(&self) -> usize {
        let mut attempted = 0;
        // Payments made without a key have no record: they are found by their own state, and
        // left alone for a lease's length after each try.
        match self
            .payments
            .take_stale_unkeyed_payments(self.engine.lease(), self.settings.batch)
            .await
        {
            Ok(payments) => {
                for (tenant_id, payment) in &payments {
                    let answer = self.engine.recover_unkeyed(tenant_id, payment).await;
                    attempted += 1;
                    tracing::info!(payment_id = %payment.id, status = answer.status(), "recovery: payment without a key");
                }
            }
            Err(error) => tracing::warn!(%error, "recovery: cannot list payments without a key"),
        }
        let candidates = match self
            .records
            .recovery_candidates(self.settings.max_attempts, self.settings.batch)
            .await
        {
            Ok(candidates) => candidates,
            Err(error) => {
                tracing::warn!(%error, "recovery: cannot list candidates");
                return attempted;
            }
        };
        for scope in &candidates {
            if let Some(answer) = self.engine.recover(scope).await {
                attempted += 1;
                let result = if matches!(answer.reply, Reply::OutcomeUnknown { .. }) {
                    RESULTS[1]
                } else {
                    RESULTS[0]
                };
                metrics::counter!("recovery_attempts_total", "result" => result).increment(1);
                tracing::info!(tenant_id = %scope.tenant_id, status = answer.status(), "recovery: record resolved or retried");
            }
        }
        attempted
    }
}
