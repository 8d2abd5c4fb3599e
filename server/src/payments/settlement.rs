//! The settlement worker: authorised payments become SETTLED when the provider reports the
//! money moved, each with its PaymentSettled event. `GET /payments/{id}` then shows SETTLED,
//! while a replay of the creating request still returns the answer it was given. The same
//! pass watches released payments for a charge that arrives after all.

use super::engine::PaymentsEngine;
use std::sync::Arc;
use std::time::Duration;

/// How long after its release a payment's provider key is still asked about.
pub const RELEASE_WATCH: Duration = Duration::from_secs(24 * 3600);

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
            engine.watch_released(RELEASE_WATCH, interval, 100).await;
        }
    });
}
