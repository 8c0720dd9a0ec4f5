//! What the `tether` binary does: logging set-up, `serve` and `openapi` (the operator
//! commands are in [`crate::commands`]).

use tracing_subscriber::EnvFilter;

use crate::commands::CommandError;
use tether_admin_http::AppState;
use tether_admin_http::ServeConfig;
use tether_admin_http::ServeLimits;
use tether_admin_http::app;
use tether_admin_http::auth::Tokens;
use tether_admin_http::database::open_database;

/// How log lines are written on stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines; coloured only when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object per line (for log collectors), never coloured.
    Json,
}

/// Initialises `tracing` output on stderr (`RUST_LOG`, default `default_filter`) in `format`.
/// Terminal colour codes are written only when stderr is a terminal: a log file or a collector
/// reading a pipe gets plain text.
pub(crate) fn init_logging(format: LogFormat, default_filter: &str) {
    use std::io::IsTerminal as _;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .with_current_span(true)
            .try_init(),
    };
}

/// Prints a user-facing error and returns the failure exit code.
#[allow(clippy::print_stderr)]
pub(crate) fn fail(message: &str) -> std::process::ExitCode {
    eprintln!("tether: error: {message}");
    std::process::ExitCode::FAILURE
}

/// User-facing output on stdout. A closed pipe (`tether openapi | head`) is not an error:
/// the reader has what it wanted, so the rest is dropped instead of panicking as `println!`
/// would; the process exits normally.
pub(crate) fn say(line: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        tracing::warn!(error = %e, "cannot write to stdout");
    }
}

/// Opens (creating and migrating) the database, then serves with `limits` until Ctrl-C or
/// SIGTERM, and drains in-flight requests before returning.
pub(crate) async fn serve(
    config: ServeConfig,
    tokens: Tokens,
    limits: ServeLimits,
) -> Result<(), CommandError> {
    // Classified like every other command's open: 2 configuration, 5 unreachable, 6 unusable.
    let database = open_database(&config).await.map_err(|e| {
        let mut err = crate::commands::open_error(e);
        err.message = format!("cannot open the database: {}", err.message);
        err
    })?;
    let state = AppState::from_database(database, tokens);
    // Listen for the signals before announcing the address: a supervisor that reads the address
    // and sends SIGTERM at once must get a graceful stop, not the default action.
    let shutdown = shutdown_signal();
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .map_err(|e| CommandError::failure(format!("cannot listen on {}: {e}", config.bind)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CommandError::failure(format!("cannot read the bound address: {e}")))?;
    tracing::info!(
        %addr,
        database = %tether_storage::redact_url(&config.database_url),
        "tether admin service listening"
    );
    say(&format!("Tether admin dashboard: http://{addr}/"));
    say(&format!("API docs (Swagger UI): http://{addr}/docs/"));
    say(&format!(
        "OpenAPI document: http://{addr}/api-docs/openapi.json"
    ));
    say("Press Ctrl-C to stop.");
    tether_admin_http::serve(listener, app(state), limits, shutdown)
        .await
        .map_err(|e| CommandError::failure(format!("server error: {e}")))?;
    tracing::info!("tether admin service stopped");
    Ok(())
}

/// Prints the OpenAPI document, pretty JSON with a trailing newline.
pub(crate) fn print_openapi() -> Result<(), String> {
    let doc = tether_admin_http::openapi()
        .to_pretty_json()
        .map_err(|e| format!("cannot render the OpenAPI document: {e}"))?;
    say(&doc);
    Ok(())
}

/// A future completing on Ctrl-C (SIGINT) or, on Unix, SIGTERM (what an orchestrator sends).
/// The SIGTERM handler is installed when this is called, not when the future is first polled.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| tracing::warn!(error = %e, "cannot listen for SIGTERM"))
        .ok();
    async move {
        let ctrl_c = async {
            if let Err(e) = tokio::signal::ctrl_c().await {
                tracing::warn!(error = %e, "cannot listen for Ctrl-C");
                std::future::pending::<()>().await;
            }
        };
        #[cfg(unix)]
        let term = async move {
            match term {
                Some(mut signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            () = ctrl_c => tracing::info!("Ctrl-C received, shutting down"),
            () = term => tracing::info!("SIGTERM received, shutting down"),
        }
    }
}
