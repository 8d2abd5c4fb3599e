use clap::Parser;
use idem::cli::{Cli, Command};
use idem::{serve, store, telemetry};
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(error) = telemetry::init(cli.global.log_format, &cli.global.log_filter) {
        eprintln!("idem: {error}");
        return ExitCode::from(2);
    }
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "idem stopped");
            eprintln!("idem: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), serve::ServeError> {
    let target = store::DatabaseTarget::resolve(cli.global.database_url.as_deref(), &cli.global.data_dir)?;
    match cli.command {
        Command::Serve(args) => serve::serve(target, args).await,
        Command::Migrate => {
            let store = store::open(&target).await?;
            store.migrate().await?;
            println!("migrations applied to {}", target.redacted());
            store.close().await;
            Ok(())
        }
    }
}
