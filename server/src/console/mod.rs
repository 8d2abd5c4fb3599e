//! The server's side of the console: access (operators, sessions, the gate), and the console
//! backend port (`app::backend::ConsoleBackend`) implemented over the store.

pub mod access;
pub mod sessions;

use crate::store::Store;
use app::backend::{ConsoleBackend, ConsoleError};
use app::dto::Overview;
use chrono::{SecondsFormat, Utc};
use std::sync::Arc;

pub struct StoreConsole {
    store: Arc<dyn Store>,
}

impl StoreConsole {
    pub fn new(store: Arc<dyn Store>) -> Self {
        StoreConsole { store }
    }
}

#[async_trait::async_trait]
impl ConsoleBackend for StoreConsole {
    async fn overview(&self) -> Result<Overview, ConsoleError> {
        let counts = self.store.count_records_by_status().await.map_err(|error| {
            tracing::error!(%error, "console overview: reading record counts failed");
            ConsoleError::StoreUnavailable
        })?;
        Ok(Overview {
            counts,
            read_at: Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true),
        })
    }
}
