//! The console's upkeep, run by workers: sessions past their expiry are deleted (they are
//! refused already), and override requests nobody decided in time are rejected (each
//! audited). Bulk jobs whose runner died are resumed by `bulk.rs`.

use super::{OVERRIDE_DECISION_WINDOW, StoreConsole};

/// Sessions deleted per pass at most.
const SESSIONS_PER_PASS: i64 = 1_000;

impl StoreConsole {
    pub async fn delete_expired_sessions(&self) {
        if let Err(error) = self.store.delete_expired_sessions(SESSIONS_PER_PASS).await {
            tracing::warn!(%error, "expired sessions not deleted");
        }
    }

    pub async fn expire_override_requests(&self) {
        match self
            .store
            .expire_override_requests(OVERRIDE_DECISION_WINDOW)
            .await
        {
            Ok(0) => {}
            Ok(expired) => tracing::info!(expired, "override requests expired"),
            Err(error) => tracing::warn!(%error, "override requests not expired"),
        }
    }
}
