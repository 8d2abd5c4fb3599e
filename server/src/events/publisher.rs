//! The outbox publisher. Each pass claims a small batch of due events (PostgreSQL: `FOR
//! UPDATE SKIP LOCKED`, so instances never wait on each other; both dialects: a claim lease,
//! so an event a dead instance claimed is taken again after it), publishes each, marks it
//! published, or backs off; after `max_attempts` failures the event is dead-lettered for an
//! operator. A crash between publishing and marking publishes again: consumers deduplicate.

use super::transport::Transport;
use crate::store::EventStore;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct PublisherSettings {
    pub batch: i64,
    /// How long a claim keeps other publishers off an event.
    pub claim: Duration,
    pub max_attempts: i32,
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublishReport {
    pub published: usize,
    pub failed: usize,
}

pub struct Publisher {
    store: Arc<dyn EventStore>,
    transport: Arc<dyn Transport>,
    settings: PublisherSettings,
}

impl Publisher {
    pub fn new(
        store: Arc<dyn EventStore>,
        transport: Arc<dyn Transport>,
        settings: PublisherSettings,
    ) -> Publisher {
        Publisher {
            store,
            transport,
            settings,
        }
    }

    /// Claims and publishes batches until none is due.
    pub async fn run_once(&self) -> PublishReport {
        let mut report = PublishReport::default();
        loop {
            let claimed = match self
                .store
                .claim_events(self.settings.batch, self.settings.claim)
                .await
            {
                Ok(claimed) => claimed,
                Err(error) => {
                    tracing::warn!(%error, "outbox: cannot claim events");
                    return report;
                }
            };
            if claimed.is_empty() {
                return report;
            }
            // The batch goes to the transport at once, and the published events are marked
            // together, in one statement; a crash before that publishes them again (consumers
            // deduplicate by event id).
            let results = self.transport.publish(&claimed).await;
            let mut published = Vec::with_capacity(claimed.len());
            for (message, result) in claimed.iter().zip(results) {
                let error = match result {
                    Ok(()) => {
                        published.push(message.event_id.clone());
                        continue;
                    }
                    Err(error) => error,
                };
                report.failed += 1;
                metrics::counter!("outbox_publish_failures_total").increment(1);
                tracing::warn!(%error, event_id = %message.event_id, "outbox: publish failed; backing off");
                if let Err(error) = self
                    .store
                    .mark_event_failed(&message.event_id, &error.to_string(), self.settings.max_attempts)
                    .await
                {
                    tracing::warn!(%error, "outbox: failure not recorded; the claim lease will expire");
                }
            }
            if !published.is_empty() {
                crate::crash::crash_point(crate::crash::CrashPoint::PublishedBeforeMarked);
            }
            match self.store.mark_events_published(&published).await {
                Ok(()) => {
                    report.published += published.len();
                    metrics::counter!("outbox_published_total").increment(published.len() as u64);
                }
                Err(error) => {
                    tracing::warn!(%error, events = published.len(), "outbox: published but not marked; they will be published again");
                }
            }
            if report.failed > 0 {
                return report;
            }
        }
    }
}
