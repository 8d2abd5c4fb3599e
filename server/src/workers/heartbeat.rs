//! Keeps this instance's response sealing key marked as in use while it runs, so that an
//! instance started without it refuses to start (see `ResponseSealer::check_against`).

use crate::engine::sealing::ResponseSealer;
use crate::store::RetentionStore;
use crate::supervisor::Periodic;
use std::sync::Arc;
use std::time::Duration;

pub struct KeyHeartbeat {
    pub sealer: Arc<ResponseSealer>,
    pub store: Arc<dyn RetentionStore>,
    pub interval: Duration,
}

#[async_trait::async_trait]
impl Periodic for KeyHeartbeat {
    fn name(&self) -> &'static str {
        "sealing key heartbeat"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    async fn pass(&self) {
        if let Err(error) = self.sealer.note_in_use(self.store.as_ref()).await {
            tracing::warn!(%error, "cannot note the response key as in use");
        }
    }
}
