//! The console's own background jobs: console sessions past their expiry are deleted (they
//! are refused already), override requests nobody decided in time are rejected (each audited),
//! and bulk reconciliations whose runner died are resumed.

use crate::console::{OVERRIDE_DECISION_WINDOW, StoreConsole};
use crate::store::{ApprovalStore, OperatorStore};
use crate::supervisor::Periodic;
use std::sync::Arc;
use std::time::Duration;

/// Sessions deleted per pass at most.
const SESSIONS_PER_PASS: i64 = 1_000;

pub struct SessionExpiry {
    pub operators: Arc<dyn OperatorStore>,
    pub interval: Duration,
}

#[async_trait::async_trait]
impl Periodic for SessionExpiry {
    fn name(&self) -> &'static str {
        "session expiry"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    async fn pass(&self) {
        if let Err(error) = self.operators.delete_expired_sessions(SESSIONS_PER_PASS).await {
            tracing::warn!(%error, "expired sessions not deleted");
        }
    }
}

pub struct OverrideExpiry {
    pub approvals: Arc<dyn ApprovalStore>,
    pub interval: Duration,
}

#[async_trait::async_trait]
impl Periodic for OverrideExpiry {
    fn name(&self) -> &'static str {
        "override expiry"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    async fn pass(&self) {
        match self
            .approvals
            .expire_override_requests(OVERRIDE_DECISION_WINDOW)
            .await
        {
            Ok(0) => {}
            Ok(expired) => tracing::info!(expired, "override requests expired"),
            Err(error) => tracing::warn!(%error, "override requests not expired"),
        }
    }
}

pub struct BulkResumer {
    pub console: StoreConsole,
    pub interval: Duration,
}

#[async_trait::async_trait]
impl Periodic for BulkResumer {
    fn name(&self) -> &'static str {
        "bulk resumer"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    async fn pass(&self) {
        self.console.resume_bulk_jobs().await;
    }
}
