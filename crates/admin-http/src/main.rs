//! The `tether` command-line binary. See `tether --help`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use tether_admin_http::{DEFAULT_BIND, DEFAULT_DATABASE_URL, ServeConfig, cli};

/// Tether: native-session bindings for agent harnesses, and their admin service.
#[derive(Debug, Parser)]
#[command(name = "tether", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the admin service (creates and migrates the database on first start).
    Serve {
        /// Database URL: sqlite://PATH, sqlite::memory: or postgres://USER@HOST/DB.
        #[arg(long, env = "TETHER_DATABASE_URL", default_value = DEFAULT_DATABASE_URL)]
        database_url: String,
        /// Address to listen on. Non-loopback addresses need TETHER_ADMIN_TOKEN or TETHER_READ_TOKEN.
        #[arg(long, env = "TETHER_BIND", default_value = DEFAULT_BIND)]
        bind: String,
    },
    /// Print the admin API's OpenAPI document (JSON) and exit.
    Openapi,
    /// Create or upgrade the database schema, then exit.
    Migrate {
        /// Database URL: sqlite://PATH, sqlite::memory: or postgres://USER@HOST/DB.
        #[arg(long, env = "TETHER_DATABASE_URL", default_value = DEFAULT_DATABASE_URL)]
        database_url: String,
    },
}

fn main() -> ExitCode {
    let args = Cli::parse();
    cli::init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return cli::fail(&format!("cannot start the async runtime: {e}")),
    };
    let has_token = std::env::var_os("TETHER_ADMIN_TOKEN").is_some()
        || std::env::var_os("TETHER_READ_TOKEN").is_some();
    let result = match args.command {
        Command::Serve { database_url, bind } => ServeConfig::new(&database_url, &bind, has_token)
            .map_err(|e| e.to_string())
            .and_then(|config| runtime.block_on(cli::serve(config))),
        Command::Openapi => cli::print_openapi(),
        Command::Migrate { database_url } => {
            ServeConfig::new(&database_url, DEFAULT_BIND, has_token)
                .map_err(|e| e.to_string())
                .and_then(|config| runtime.block_on(cli::migrate(config)))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => cli::fail(&message),
    }
}
