//! The long-running commands: `idem serve` (open the store, migrate, build the application,
//! serve) and `idem provider-sim`; both stop gracefully on SIGINT or SIGTERM.

use crate::application::{Application, Listeners, ServeError};
use crate::cli::{ProviderSimArgs, ServeArgs};
use crate::provider;
use crate::store::{self, DatabaseTarget};
use std::net::SocketAddr;
use std::path::Path;
use tokio::net::TcpListener;

pub async fn serve(
    target: DatabaseTarget,
    max_connections: u32,
    data_dir: &Path,
    args: ServeArgs,
) -> Result<(), ServeError> {
    let shutdown = shutdown_signal();
    let store = store::open(&target, max_connections).await?;
    store.migrate().await?;
    tracing::info!(database = %target.redacted(), "database ready, migrations applied");
    let (api, address) = bind(args.listen).await?;
    let console = match args.console_listen {
        Some(console_address) => Some(bind(console_address).await?),
        None => None,
    };
    let (metrics, metrics_address) = bind(args.metrics_listen).await?;
    // Connections queue on the bound sockets until the routers serve them, so the addresses
    // can be announced now, before the workers start (a test may crash one of them at once).
    let console = match console {
        Some((console, console_address)) => {
            announce("Idem API", address);
            announce("Idem console", console_address);
            Some(console)
        }
        None => {
            announce("Idem console", address);
            None
        }
    };
    tracing::info!(address = %metrics_address, "metrics listening");
    println!("Idem metrics: http://{metrics_address}/metrics");
    let listeners = Listeners {
        api,
        console,
        metrics,
    };
    Application::build(listeners, store, data_dir, args)
        .await?
        .run_until_stopped(shutdown)
        .await
}

/// `idem provider-sim`: the simulator on its own port until SIGINT or SIGTERM.
pub async fn provider_sim(args: ProviderSimArgs) -> Result<(), ServeError> {
    let shutdown = shutdown_signal();
    let (listener, address) = bind(args.listen).await?;
    announce("Idem provider simulator", address);
    axum::serve(
        listener,
        provider::sim::router(provider::sim::Simulator::default()),
    )
    .with_graceful_shutdown(shutdown)
    .await
    .map_err(ServeError::Server)
}

async fn bind(address: SocketAddr) -> Result<(TcpListener, SocketAddr), ServeError> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| ServeError::Bind { address, source })?;
    let bound = listener.local_addr().map_err(ServeError::Server)?;
    Ok((listener, bound))
}

/// One line on stdout naming the URL, for people and for scripts that start Idem on port 0.
fn announce(what: &str, address: SocketAddr) {
    tracing::info!(%address, "{what} listening");
    println!("{what}: http://{address}/");
}

/// Resolves on SIGINT or SIGTERM. In-flight requests then run to completion while no new
/// connection is accepted. The handlers are installed by this call, not when the future is
/// first polled: axum polls a shutdown future on a task of its own, which the first requests
/// can precede, and a SIGTERM before that task ran took the default action and killed the
/// process at once (seen: a SIGTERM right after a `/readyz` answered).
fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let interrupt = signal(SignalKind::interrupt());
    let terminate = signal(SignalKind::terminate());
    async move {
        tokio::select! {
            () = received(interrupt, "SIGINT") => tracing::info!("SIGINT received, shutting down"),
            () = received(terminate, "SIGTERM") => tracing::info!("SIGTERM received, shutting down"),
        }
    }
}

/// Resolves when the signal arrives; never, when its handler could not be installed.
async fn received(handler: std::io::Result<tokio::signal::unix::Signal>, name: &str) {
    match handler {
        Ok(mut handler) => {
            handler.recv().await;
        }
        Err(error) => {
            tracing::error!(%error, "cannot listen for {name}");
            std::future::pending::<()>().await;
        }
    }
}
