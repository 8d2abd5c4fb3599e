//! The settlement worker: authorised payments become SETTLED when the provider reports the
//! money moved, each with its PaymentSettled event. `GET /payments/{id}` then shows SETTLED,
//! while a replay of the creating request still returns the answer it was given.

use super::engine::PaymentsEngine;
use std::sync::Arc;
use std::time::Duration;

pub fn spawn_worker(engine: Arc<PaymentsEngine>, interval: Duration) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // A payment is looked at again only after an interval.
            let settled = engine.settle_pending(interval, 100).await;
            if settled > 0 {
                tracing::info!(settled, "settlement pass");
            }
        }
    });
}
