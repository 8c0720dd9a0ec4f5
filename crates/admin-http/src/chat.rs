//! `tether chat`: one turn of a host session on a real Codex app-server, as a user would try
//! it. The session (agent `main`) is created when absent; its Codex thread is bound on the first
//! turn and resumed on the next ones; the transcript is mirrored into the database.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tether_codex::HARNESS_ID;
use tether_codex::locate_codex_binary;
use tether_codex::{CodexAppServer, CodexConfig, ThreadSettings, TurnRequest};
use tether_core::{AgentId, AttemptParams, HarnessId, RunId, SessionId, SessionKey, SessionTarget};
use tether_host::Host;
use tether_storage::NewHostSession;

use crate::commands::{CommandError, Open, open_error, open_store};

/// The environment variable holding the model provider's API key (read by Codex itself).
pub(crate) const API_KEY_ENV: &str = "OPENAI_API_KEY";

/// The provider used without `--model-provider-url`.
pub(crate) const DEFAULT_PROVIDER_URL: &str = "https://api.openai.com/v1";

/// What `tether chat` needs.
#[derive(Debug, Clone)]
pub(crate) struct ChatArgs {
    /// The database.
    pub(crate) database_url: String,
    /// The host session key.
    pub(crate) session: String,
    /// The user message.
    pub(crate) message: String,
    /// A Responses-API base URL (default: OpenAI).
    pub(crate) model_provider_url: Option<String>,
    /// The `codex` binary (default: `TETHER_CODEX_BIN`, else `.tether-cache/` here).
    pub(crate) codex_bin: Option<PathBuf>,
    /// `CODEX_HOME` (default: `tether-data/codex-home`).
    pub(crate) codex_home: Option<PathBuf>,
    /// The thread's working directory (default: the current directory).
    pub(crate) cwd: Option<String>,
    /// The model, when pinned.
    pub(crate) model: Option<String>,
}

fn say(line: &str) {
    crate::cli::say(line);
}

fn failure(message: impl Into<String>) -> CommandError {
    CommandError::failure(message)
}

/// Runs one turn and prints the reply and the tool outcomes.
pub(crate) async fn chat(args: ChatArgs) -> Result<(), CommandError> {
    if std::env::var_os(API_KEY_ENV).is_none() {
        return Err(failure(format!(
            "set {API_KEY_ENV} (your provider's key; any value for a local scripted model server)"
        )));
    }
    let here =
        std::env::current_dir().map_err(|e| failure(format!("no current directory: {e}")))?;
    let binary = match args.codex_bin {
        Some(path) => path,
        None => locate_codex_binary(Some(&here)).ok_or_else(|| {
            failure("no codex binary: run `cargo xtask codex-install` here, or pass --codex-bin (or TETHER_CODEX_BIN)")
        })?,
    };
    let codex_home = args
        .codex_home
        .unwrap_or_else(|| here.join("tether-data").join("codex-home"));
    std::fs::create_dir_all(&codex_home)
        .map_err(|e| failure(format!("cannot create {}: {e}", codex_home.display())))?;
    let cwd = args.cwd.unwrap_or_else(|| here.display().to_string());
    let key = SessionKey::new(&args.session).map_err(|e| failure(format!("--session: {e}")))?;

    // Created and migrated as by every command (a SQLite file's folder too), then opened as a
    // host: the harness shares the host's binding store, its clock (the database server's on
    // PostgreSQL, as a gateway's host decides leases) and its record of runs in flight.
    open_store(&args.database_url, Open::CreateAndMigrate).await?;
    let host = Host::builder(args.database_url.as_str())
        .holder(format!("tether-chat-{}", std::process::id()))
        .open()
        .await
        .map_err(open_error)?;
    let store = host.store().clone();
    let entry = match store
        .session(&key)
        .await
        .map_err(|e| failure(e.to_string()))?
    {
        Some(entry) => entry,
        None => {
            let millis = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or_default();
            store
                .create_session(NewHostSession {
                    session_key: key.clone(),
                    agent_id: AgentId::new("main").map_err(|e| failure(e.to_string()))?,
                    session_id: SessionId::new(format!("chat-{millis}"))
                        .map_err(|e| failure(e.to_string()))?,
                    agent_harness_id: Some(
                        HarnessId::new(HARNESS_ID).map_err(|e| failure(e.to_string()))?,
                    ),
                })
                .await
                .map_err(|e| failure(e.to_string()))?;
            store
                .session(&key)
                .await
                .map_err(|e| failure(e.to_string()))?
                .ok_or_else(|| failure("the new session vanished"))?
        }
    };

    let provider = args
        .model_provider_url
        .unwrap_or_else(|| DEFAULT_PROVIDER_URL.to_owned());
    let config =
        CodexConfig::new(binary, codex_home).with_responses_provider(&provider, API_KEY_ENV);
    let server = Arc::new(CodexAppServer::new(config));
    let mut settings = ThreadSettings::new(cwd);
    settings.model = args.model;
    let harness = host
        .codex_harness(server.clone())
        .settings(settings)
        .build()
        .await
        .map_err(|e| failure(e.to_string()))?;

    let mut params = AttemptParams::new(
        RunId::new(format!("chat-{}", std::process::id())).map_err(|e| failure(e.to_string()))?,
        SessionTarget::of(&entry),
        args.message,
    );
    params.timeout = Some(Duration::from_secs(600));
    let result = harness.run_turn(TurnRequest::new(params)).await;
    server.shutdown().await;
    if let Err(error) = host.close().await {
        tracing::warn!(%error, "closing the host's database failed");
    }
    let outcome = result.map_err(|e| failure(format!("the Codex turn failed: {e}")))?;

    say(&format!(
        "thread {} ({})",
        outcome.thread_id,
        if outcome.started_thread {
            "new"
        } else {
            "resumed"
        }
    ));
    if let Some(lost) = &outcome.lost_thread {
        say(&format!(
            "the session was bound to thread {lost}, which this Codex home no longer has: its native history is lost (the host transcript keeps it)"
        ));
    }
    for error in &outcome.codex_errors {
        say(&format!("codex error: {error}"));
    }
    for tool in &outcome.tools {
        say(&format!(
            "tool {} {:?}{}{}",
            tool.tool,
            tool.outcome,
            if tool.execution_started {
                ""
            } else {
                " (not started)"
            },
            tool.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ));
    }
    if let Some(error) = &outcome.attempt.last_tool_error {
        say(&format!(
            "unresolved tool error: {} {:?}",
            error.tool_name, error.error
        ));
    }
    say(&format!("terminal: {:?}", outcome.attempt.terminal));
    say(outcome.reply().unwrap_or("(no reply)"));
    Ok(())
}
