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
        .run_until_stopped(shutdown_signal())
        .await
}

/// `idem provider-sim`: the simulator on its own port until SIGINT or SIGTERM.
pub async fn provider_sim(args: ProviderSimArgs) -> Result<(), ServeError> {
    let (listener, address) = bind(args.listen).await?;
    announce("Idem provider simulator", address);
    axum::serve(
        listener,
        provider::sim::router(provider::sim::Simulator::default()),
    )
    .with_graceful_shutdown(shutdown_signal())
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
/// connection is accepted.
async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = interrupt => tracing::info!("SIGINT received, shutting down"),
        () = terminate => tracing::info!("SIGTERM received, shutting down"),
    }
}
