//! The console backend port: what the console needs from the server, as a trait the `server`
//! crate implements and hands to Leptos through context. Keeping it here is what lets `app`
//! render on the server without ever depending on sqlx or on `server`.

use crate::dto::Overview;
use leptos::prelude::*;
use std::sync::Arc;

/// A failure of the backend, phrased for an operator; details stay in the server's logs.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConsoleError {
    #[error("the idempotency store is unavailable; try again shortly")]
    StoreUnavailable,
}

#[async_trait::async_trait]
pub trait ConsoleBackend: Send + Sync + 'static {
    /// Counts of idempotency records per status, every status present.
    async fn overview(&self) -> Result<Overview, ConsoleError>;
}

/// The handle the server provides as Leptos context for every request.
#[derive(Clone)]
pub struct Backend(pub Arc<dyn ConsoleBackend>);

/// The backend of the current request; an error (not a panic) when the server forgot to
/// provide it, so that a wiring mistake shows up as a failed server function.
pub fn backend() -> Result<Arc<dyn ConsoleBackend>, ServerFnError> {
    use_context::<Backend>()
        .map(|Backend(backend)| backend)
        .ok_or_else(|| ServerFnError::new("console backend missing from the request context"))
}
