//! The recovery worker: every interval it looks for unknown outcomes due for another look and
//! for records whose owner died, and resolves each through the engine's one reconciler (the
//! same code a client's retry runs). Several instances may run it: taking a record is one
//! conditional update, so each record has one taker. Records that used up their attempts stay
//! UNKNOWN_REQUIRES_RECOVERY for an operator.

use crate::payments::engine::PaymentsEngine;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct RecoverySettings {
    pub interval: Duration,
    /// Provider look-ups per record before it is left to an operator.
    pub max_attempts: i32,
    /// Records per pass.
    pub batch: i64,
}

/// One pass; returns how many records it tried to resolve.
pub async fn run_once(engine: &PaymentsEngine, store: &dyn Store, settings: &RecoverySettings) -> usize {
    let candidates = match store
        .recovery_candidates(settings.max_attempts, settings.batch)
        .await
    {
        Ok(candidates) => candidates,
        Err(error) => {
            tracing::warn!(%error, "recovery: cannot list candidates");
            return 0;
        }
    };
    let mut attempted = 0;
    // Payments made without a key have no record: they are found by their own state, and
    // left alone for a lease's length after each try.
    match store
        .take_stale_unkeyed_payments(engine.lease(), settings.batch)
        .await
    {
        Ok(payments) => {
            for (tenant_id, payment) in &payments {
                let answer = engine.recover_unkeyed(tenant_id, payment).await;
                attempted += 1;
                tracing::info!(payment_id = %payment.id, status = answer.response.status, "recovery: payment without a key");
            }
        }
        Err(error) => tracing::warn!(%error, "recovery: cannot list payments without a key"),
    }
    for scope in &candidates {
        if let Some(answer) = engine.recover(scope).await {
            attempted += 1;
            let result = if answer.response.status == 202 {
                "still_unknown"
            } else {
                "resolved"
            };
            metrics::counter!("recovery_attempts_total", "result" => result).increment(1);
            tracing::info!(
                tenant_id = %scope.tenant_id,
                status = answer.response.status,
                "recovery: record resolved or retried"
            );
        }
    }
    attempted
}

pub fn spawn_worker(engine: Arc<PaymentsEngine>, store: Arc<dyn Store>, settings: RecoverySettings) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(settings.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            run_once(&engine, store.as_ref(), &settings).await;
        }
    });
}
