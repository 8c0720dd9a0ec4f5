//! What the `tether` binary does: logging set-up, `serve` and `openapi` (the operator
//! commands are in [`crate::commands`]).

use tracing_subscriber::EnvFilter;

use crate::config::ServeConfig;
use crate::database::open_database;
use crate::openapi::app;
use crate::state::AppState;

/// Initialises `tracing` output on stderr (`RUST_LOG`, default `info`).
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Prints a user-facing error and returns the failure exit code.
#[allow(clippy::print_stderr)]
pub fn fail(message: &str) -> std::process::ExitCode {
    eprintln!("tether: error: {message}");
    std::process::ExitCode::FAILURE
}

/// User-facing output.
#[allow(clippy::print_stdout)]
fn say(line: &str) {
    println!("{line}");
}

/// Opens (creating and migrating) the database, then serves until Ctrl-C.
pub async fn serve(config: ServeConfig) -> Result<(), String> {
    let database = open_database(&config).await?;
    let state = AppState::from_database(database, crate::auth::Tokens::from_env());
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.bind))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    tracing::info!(%addr, database = %config.database_url, "tether admin service listening");
    say(&format!("Tether admin dashboard: http://{addr}/"));
    say(&format!("API docs (Swagger UI): http://{addr}/docs/"));
    say(&format!(
        "OpenAPI document: http://{addr}/api-docs/openapi.json"
    ));
    say("Press Ctrl-C to stop.");
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| format!("server error: {e}"))?;
    tracing::info!("tether admin service stopped");
    Ok(())
}

/// Prints the OpenAPI document, pretty JSON with a trailing newline.
pub fn print_openapi() -> Result<(), String> {
    let doc = crate::openapi::openapi()
        .to_pretty_json()
        .map_err(|e| format!("cannot render the OpenAPI document: {e}"))?;
    say(&doc);
    Ok(())
}

async fn shutdown_signal() {
    if let Err(e) = tokio::signal::ctrl_c().await {
        tracing::warn!(error = %e, "cannot listen for Ctrl-C; stop the process to shut down");
        std::future::pending::<()>().await;
    }
    tracing::info!("Ctrl-C received, shutting down");
}
