//! The `tether` command-line binary. See `tether --help`.

mod chat;
mod cli;
mod client;
mod codex_demo;
mod commands;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use commands::{CommandError, ListArgs};
use tether_admin_http::auth::Tokens;
use tether_admin_http::{DEFAULT_BIND, DEFAULT_DATABASE_URL, ServeConfig, ServeLimits};

/// Tether: native-session bindings for agent harnesses, and their admin service.
///
/// Exit codes: 0 success, 1 failure, 2 bad usage or configuration, 3 not found, 4 blocked by a
/// live lease or a concurrent change, 5 database unreachable, 6 database unusable (read-only,
/// corrupt).
#[derive(Debug, Parser)]
#[command(name = "tether", version, about)]
struct Cli {
    /// Log lines on stderr as human-readable text or one JSON object per line.
    #[arg(long, global = true, env = "TETHER_LOG_FORMAT", value_enum, default_value_t = cli::LogFormat::Text)]
    log_format: cli::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Args)]
struct Db {
    /// Database URL: sqlite://PATH, sqlite::memory: or postgres://USER@HOST/DB.
    #[arg(
        long,
        env = "TETHER_DATABASE_URL",
        hide_env_values = true,
        default_value = DEFAULT_DATABASE_URL
    )]
    database_url: String,
}

/// How a command prints its result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    /// Human-readable lines.
    #[default]
    Table,
    /// JSON (sanitized, like the API).
    Json,
}

#[derive(Debug, Clone, Args)]
struct OutputArg {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Same as `--output json`.
    #[arg(long, hide = true)]
    json: bool,
}

impl OutputArg {
    fn json(&self) -> bool {
        self.json || self.output == Output::Json
    }
}

/// Confirmation of a destructive command.
#[derive(Debug, Clone, Args)]
struct Confirm {
    /// Do not ask for confirmation (needed when stdin is not a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the admin service (creates and migrates the database on first start).
    Serve {
        #[command(flatten)]
        db: Db,
        /// Address to listen on. Non-loopback addresses need TETHER_ADMIN_TOKEN or TETHER_READ_TOKEN.
        #[arg(long, env = "TETHER_BIND", default_value = DEFAULT_BIND)]
        bind: String,
        /// Most client connections served at once, 1 to 1048576 (lowered to the open-file
        /// limit less 128); past it idle connections are closed first, then new ones answered
        /// 503.
        #[arg(long, env = "TETHER_MAX_CONNECTIONS", default_value_t = 1024,
              value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
        max_connections: u64,
        /// Seconds a connection may take to send its request headers (also the keep-alive idle
        /// limit); 1 to 86400.
        #[arg(long, env = "TETHER_HEADER_TIMEOUT", default_value_t = 15,
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        header_timeout: u64,
    },
    /// Print the admin API's OpenAPI document (JSON) and exit.
    Openapi,
    /// Create or upgrade the database schema, then exit.
    Migrate {
        #[command(flatten)]
        db: Db,
    },
    /// Populate the database by driving the example harness through the real APIs; with
    /// `--codex`, by driving the real Codex app-server with a scripted model.
    Demo {
        #[command(flatten)]
        db: Db,
        /// Drive the real Codex app-server (TETHER_CODEX_BIN, or `cargo xtask codex-install`
        /// here) with the scripted model server instead of the example harness.
        #[arg(long)]
        codex: bool,
    },
    /// Run one turn of a host session on a real Codex app-server; print the reply and the
    /// tool outcomes. Needs OPENAI_API_KEY (any value for a local scripted model server).
    Chat {
        #[command(flatten)]
        db: Db,
        /// The host session key (created for agent `main` when absent).
        #[arg(long)]
        session: String,
        /// A Responses-API base URL, e.g. http://127.0.0.1:PORT/v1 (default: OpenAI's).
        #[arg(long)]
        model_provider_url: Option<String>,
        /// The codex binary (default: .tether-cache/ from `cargo xtask codex-install`).
        #[arg(long, env = "TETHER_CODEX_BIN")]
        codex_bin: Option<std::path::PathBuf>,
        /// CODEX_HOME, where Codex keeps its threads (default: tether-data/codex-home).
        #[arg(long)]
        codex_home: Option<std::path::PathBuf>,
        /// The thread's working directory (default: the current directory).
        #[arg(long)]
        cwd: Option<String>,
        /// The model, when pinned.
        #[arg(long)]
        model: Option<String>,
        /// The user message.
        message: String,
    },
    /// Host sessions: list, show, delete.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Binding leases: list, force-expire.
    #[command(subcommand)]
    Leases(LeasesCommand),
    /// Quarantined keys: list, release.
    #[command(subcommand)]
    Quarantine(QuarantineCommand),
    /// The operators' audit trail: list.
    #[command(subcommand)]
    Audit(AuditCommand),
}

/// Where an operator command acts.
#[derive(Debug, Clone, Args)]
struct Target {
    #[command(flatten)]
    db: Db,
    /// Act through a running admin service (http://HOST:PORT) instead of on the database: the
    /// service's token scopes, audit actor names and metrics apply. The bearer token is read
    /// from TETHER_TOKEN.
    #[arg(long, env = "TETHER_SERVER")]
    server: Option<String>,
}

impl Target {
    fn backend(self) -> Result<commands::Backend, CommandError> {
        match self.server {
            Some(url) => {
                let token = match std::env::var(client::TOKEN_VAR) {
                    Ok(token) => Some(token),
                    Err(std::env::VarError::NotPresent) => None,
                    Err(std::env::VarError::NotUnicode(_)) => {
                        return Err(CommandError {
                            message: format!("{} is not valid UTF-8", client::TOKEN_VAR),
                            code: commands::EXIT_USAGE,
                        });
                    }
                };
                Ok(commands::Backend::Server(client::ApiClient::new(
                    &url, token,
                )?))
            }
            None => Ok(commands::Backend::Database(self.db.database_url)),
        }
    }
}

/// Paging of a list command.
#[derive(Debug, Clone, Args)]
struct Paging {
    /// Page size (1-200).
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// The cursor printed by the previous page (`more: --cursor …`).
    #[arg(long)]
    cursor: Option<String>,
}

#[derive(Debug, Subcommand)]
enum SessionsCommand {
    /// List sessions (filters and cursor paging like GET /v1/sessions).
    List {
        #[command(flatten)]
        target: Target,
        /// Only this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only this harness.
        #[arg(long)]
        harness: Option<String>,
        /// Only sessions with (true) or without (false) a live lease.
        #[arg(long)]
        has_lease: Option<bool>,
        /// Only sessions with (true) or without (false) a quarantined key.
        #[arg(long)]
        quarantined: Option<bool>,
        /// Only sessions whose key contains this text (any case).
        #[arg(long)]
        search: Option<String>,
        #[command(flatten)]
        paging: Paging,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Show one session (sanitized): a human summary, or everything with `--output json`.
    Show {
        #[command(flatten)]
        target: Target,
        /// The session key.
        key: String,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Delete a session, its transcript and its binding rows (refused under a live lease).
    Delete {
        #[command(flatten)]
        target: Target,
        /// The session key.
        key: String,
        /// Why (required; recorded in the audit trail).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        confirm: Confirm,
        #[command(flatten)]
        output: OutputArg,
    },
}

#[derive(Debug, Subcommand)]
enum LeasesCommand {
    /// List live leases (or every binding row with --all), each with its host session.
    List {
        #[command(flatten)]
        target: Target,
        /// Only this namespace.
        #[arg(long)]
        namespace: Option<String>,
        /// Every live binding row, leased or not.
        #[arg(long)]
        all: bool,
        /// Only rows held by exactly this holder ("what does worker X hold?").
        #[arg(long)]
        holder: Option<String>,
        /// Only rows whose namespace, key or holder contains this text (any case).
        #[arg(long)]
        search: Option<String>,
        #[command(flatten)]
        paging: Paging,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Force-expire a lease: the holder is fenced and the epoch bumped.
    Expire {
        #[command(flatten)]
        target: Target,
        /// The binding namespace.
        #[arg(long)]
        namespace: String,
        /// The binding key.
        #[arg(long)]
        key: String,
        /// Why (required; recorded in the audit trail).
        #[arg(long)]
        reason: String,
        /// Only expire the lease with this epoch.
        #[arg(long)]
        epoch: Option<u64>,
        #[command(flatten)]
        confirm: Confirm,
        #[command(flatten)]
        output: OutputArg,
    },
}

#[derive(Debug, Subcommand)]
enum QuarantineCommand {
    /// List quarantined keys, oldest first.
    List {
        #[command(flatten)]
        target: Target,
        /// Only keys whose namespace, key or reason contains this text (any case).
        #[arg(long)]
        search: Option<String>,
        #[command(flatten)]
        paging: Paging,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Release a quarantined key.
    Release {
        #[command(flatten)]
        target: Target,
        /// The binding namespace.
        #[arg(long)]
        namespace: String,
        /// The quarantined key.
        #[arg(long)]
        key: String,
        /// Why (required; recorded in the audit trail).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        confirm: Confirm,
        #[command(flatten)]
        output: OutputArg,
    },
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// List the operators' actions, newest first.
    List {
        #[command(flatten)]
        target: Target,
        /// Only actions by this actor (a token's name, `cli` or `anonymous`).
        #[arg(long)]
        actor: Option<String>,
        /// Only this action (delete_session, expire_lease, release_quarantine).
        #[arg(long)]
        action: Option<String>,
        /// Only this outcome (succeeded, refused, failed, started).
        #[arg(long)]
        outcome: Option<String>,
        #[command(flatten)]
        paging: Paging,
        #[command(flatten)]
        output: OutputArg,
    },
}

impl Command {
    /// Whether the command asked for `--output json`: its errors are then JSON on stdout too.
    fn wants_json(&self) -> bool {
        let output = match self {
            Self::Sessions(
                SessionsCommand::List { output, .. }
                | SessionsCommand::Show { output, .. }
                | SessionsCommand::Delete { output, .. },
            )
            | Self::Leases(
                LeasesCommand::List { output, .. } | LeasesCommand::Expire { output, .. },
            )
            | Self::Quarantine(
                QuarantineCommand::List { output, .. } | QuarantineCommand::Release { output, .. },
            )
            | Self::Audit(AuditCommand::List { output, .. }) => output,
            Self::Serve { .. }
            | Self::Openapi
            | Self::Migrate { .. }
            | Self::Demo { .. }
            | Self::Chat { .. } => return false,
        };
        output.json()
    }
}

fn main() -> ExitCode {
    let args = Cli::parse();
    // The demo's output is its summary: its steps' info lines would bury it (RUST_LOG still
    // asks for them).
    let default_filter = match &args.command {
        Command::Demo { .. } => "warn",
        _ => "info",
    };
    cli::init_logging(args.log_format, default_filter);
    let json_errors = args.command.wants_json();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return cli::fail(&format!("cannot start the async runtime: {e}")),
    };
    let result: Result<(), CommandError> = runtime.block_on(async move {
        match args.command {
            Command::Serve {
                db,
                bind,
                max_connections,
                header_timeout,
            } => {
                let usage = |e: tether_admin_http::ConfigError| CommandError {
                    message: e.to_string(),
                    code: commands::EXIT_USAGE,
                };
                let tokens = Tokens::from_env().map_err(usage)?;
                let config = ServeConfig::new(&db.database_url, &bind, &tokens).map_err(usage)?;
                let limits = ServeLimits::default()
                    .max_connections(usize::try_from(max_connections).unwrap_or(usize::MAX))
                    .header_read_timeout(Duration::from_secs(header_timeout));
                cli::serve(config, tokens, limits).await
            }
            Command::Openapi => cli::print_openapi().map_err(CommandError::failure),
            Command::Migrate { db } => commands::migrate(&db.database_url).await,
            Command::Demo { db, codex: false } => commands::demo(&db.database_url).await,
            Command::Demo { db, codex: true } => commands::demo_codex(&db.database_url).await,
            Command::Chat {
                db,
                session,
                model_provider_url,
                codex_bin,
                codex_home,
                cwd,
                model,
                message,
            } => {
                chat::chat(chat::ChatArgs {
                    database_url: db.database_url,
                    session,
                    message,
                    model_provider_url,
                    codex_bin,
                    codex_home,
                    cwd,
                    model,
                })
                .await
            }
            Command::Sessions(SessionsCommand::List {
                target,
                agent,
                harness,
                has_lease,
                quarantined,
                search,
                paging,
                output,
            }) => {
                let args = ListArgs {
                    agent,
                    harness,
                    has_lease,
                    quarantined,
                    search,
                    limit: paging.limit,
                    cursor: paging.cursor,
                    json: output.json(),
                };
                commands::sessions_list(&target.backend()?, args).await
            }
            Command::Sessions(SessionsCommand::Show {
                target,
                key,
                output,
            }) => commands::sessions_show(&target.backend()?, &key, output.json()).await,
            Command::Sessions(SessionsCommand::Delete {
                target,
                key,
                reason,
                confirm,
                output,
            }) => {
                let backend = target.backend()?;
                commands::confirm(confirm.yes, &format!("delete session {key}"))?;
                commands::sessions_delete(&backend, &key, &reason, output.json()).await
            }
            Command::Leases(LeasesCommand::List {
                target,
                namespace,
                all,
                holder,
                search,
                paging,
                output,
            }) => {
                let args = commands::LeaseListArgs {
                    namespace,
                    all,
                    holder,
                    search,
                    limit: paging.limit,
                    cursor: paging.cursor,
                    json: output.json(),
                };
                commands::leases_list(&target.backend()?, args).await
            }
            Command::Leases(LeasesCommand::Expire {
                target,
                namespace,
                key,
                reason,
                epoch,
                confirm,
                output,
            }) => {
                let backend = target.backend()?;
                commands::confirm(
                    confirm.yes,
                    &format!("force-expire the lease on {namespace}/{key}"),
                )?;
                commands::leases_expire(&backend, &namespace, &key, &reason, epoch, output.json())
                    .await
            }
            Command::Quarantine(QuarantineCommand::List {
                target,
                search,
                paging,
                output,
            }) => {
                commands::quarantine_list(
                    &target.backend()?,
                    search,
                    paging.limit,
                    paging.cursor,
                    output.json(),
                )
                .await
            }
            Command::Quarantine(QuarantineCommand::Release {
                target,
                namespace,
                key,
                reason,
                confirm,
                output,
            }) => {
                let backend = target.backend()?;
                commands::confirm(confirm.yes, &format!("release {namespace}/{key}"))?;
                commands::quarantine_release(&backend, &namespace, &key, &reason, output.json())
                    .await
            }
            Command::Audit(AuditCommand::List {
                target,
                actor,
                action,
                outcome,
                paging,
                output,
            }) => {
                let args = commands::AuditListArgs {
                    actor,
                    action,
                    outcome,
                    limit: paging.limit,
                    cursor: paging.cursor,
                    json: output.json(),
                };
                commands::audit_list(&target.backend()?, args).await
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if json_errors {
                cli::say(&err.to_json());
            }
            cli::fail(&err.message);
            err.exit_code()
        }
    }
}
