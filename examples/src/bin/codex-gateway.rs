//! `codex-gateway`: a chat gateway on the real Codex harness
//! ([`tether_example_harness::codex_gateway`]): creates a host session, runs two turns on one
//! Codex thread, resets it (`/new`), runs one more turn on a fresh thread and deletes the
//! session, printing a line on stdout for each step as it happens.
//!
//! ```text
//! codex-gateway [--database-url URL] [--model-provider-url URL] [--session KEY]
//!               [--codex-home DIR] [--cwd DIR] [--model NAME]
//! ```
//!
//! - `--database-url`: `sqlite://PATH` (default `sqlite://tether-data/codex-gateway.db`, its
//!   folder created) or `postgres://USER@HOST/DB`; created and migrated on first use.
//! - `--model-provider-url`: a Responses-API base URL (default OpenAI's,
//!   `https://api.openai.com/v1`). Codex reads the provider's key from `OPENAI_API_KEY`, which
//!   must be set (any value for a local scripted model server).
//! - The Codex binary: `TETHER_CODEX_BIN`, else the cache `cargo xtask codex-install` writes
//!   under the current directory (`.tether-cache/codex/<version>/bin/codex`), found by
//!   [`tether_codex::locate_codex_binary`] as `tether chat` finds it.
//! - `--codex-home`: Codex's own state (default `tether-data/codex-home`); `--cwd`: the
//!   threads' working directory (default the current one); `--model`: a pinned model.
//! - `--session`: the host session to create, drive and delete (default
//!   `agent:main:direct:codex-gateway`; it must not exist yet).
//!
//! Logs go to stderr (`RUST_LOG`, default `info`). Exit codes: 0 done, 1 failed, 2 bad usage
//! or configuration (an unknown option, no Codex binary, no key).

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use tether_codex::{CODEX_BIN_ENV, CodexConfig, locate_codex_binary};
use tether_core::{Error, SessionKey};
use tether_example_harness::cli::Options;
use tether_example_harness::codex_gateway::{
    self, API_KEY_ENV, DEFAULT_PROVIDER_URL, GatewayConfig,
};
use tether_host::Host;

/// The options this binary takes.
const OPTIONS: &[&str] = &[
    "database-url",
    "model-provider-url",
    "session",
    "codex-home",
    "cwd",
    "model",
];

/// The folder of the defaults, under the current directory.
const DATA_DIR: &str = "tether-data";

/// The database without `--database-url` (under [`DATA_DIR`]).
const DEFAULT_DATABASE_URL: &str = "sqlite://tether-data/codex-gateway.db";

/// The session without `--session`.
const DEFAULT_SESSION: &str = "agent:main:direct:codex-gateway";

/// What the command line and the environment configure.
struct Setup {
    database_url: String,
    gateway: GatewayConfig,
}

/// Reads the configuration; an error is a usage or configuration problem (exit code 2).
fn setup(options: &Options) -> Result<Setup, String> {
    options.only(OPTIONS)?;
    if std::env::var_os(API_KEY_ENV).is_none() {
        return Err(format!(
            "set {API_KEY_ENV} (your provider's key; any value for a local scripted model server)"
        ));
    }
    let here = std::env::current_dir().map_err(|e| format!("no current directory: {e}"))?;
    let binary = locate_codex_binary(Some(&here)).ok_or_else(|| {
        format!("no codex binary: run `cargo xtask codex-install` here, or set {CODEX_BIN_ENV}")
    })?;
    let database_url = match options.get("database-url") {
        Some(url) => url.to_owned(),
        None => {
            create_dir(&here.join(DATA_DIR))?;
            DEFAULT_DATABASE_URL.to_owned()
        }
    };
    let codex_home = options.get("codex-home").map_or_else(
        || here.join(DATA_DIR).join("codex-home"),
        |dir| here.join(dir),
    );
    create_dir(&codex_home)?;
    let provider = options
        .get("model-provider-url")
        .unwrap_or(DEFAULT_PROVIDER_URL);
    let codex = CodexConfig::new(binary, codex_home).with_responses_provider(provider, API_KEY_ENV);
    let cwd = options
        .get("cwd")
        .map_or_else(|| here.clone(), |dir| here.join(dir));
    let session = SessionKey::new(options.get("session").unwrap_or(DEFAULT_SESSION))
        .map_err(|e| format!("--session: {e}"))?;
    let mut gateway = GatewayConfig::new(codex, cwd.display().to_string(), session);
    gateway.model = options.get("model").map(str::to_owned);
    Ok(Setup {
        database_url,
        gateway,
    })
}

fn create_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// Prints one line at once.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout only loses the report; the gateway goes on.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

async fn run(setup: Setup) -> Result<(), Error> {
    let host = Host::open(setup.database_url).await?;
    let result = codex_gateway::run(&host, setup.gateway, |step| say(&step.to_string())).await;
    host.close().await?;
    result.map(|_| ())
}

fn main() -> ExitCode {
    tether_example_harness::cli::init_logging();
    let setup = match Options::parse(std::env::args().skip(1)).and_then(|o| setup(&o)) {
        Ok(setup) => setup,
        Err(usage) => {
            tracing::error!(%usage, "bad usage or configuration");
            return ExitCode::from(2);
        }
    };
    let Ok(runtime) = tether_example_harness::cli::runtime() else {
        return ExitCode::FAILURE;
    };
    runtime.block_on(async {
        match run(setup).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(%error, "the gateway failed");
                ExitCode::FAILURE
            }
        }
    })
}
