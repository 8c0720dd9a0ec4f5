//! `tether demo --codex`: populates a database by driving the real Codex app-server (the
//! pinned binary, found through `TETHER_CODEX_BIN` or the project cache) with the scripted
//! model server of `tether-codex`, so no network and no API key are needed.
//!
//! What it leaves behind, under agent `main` and harness `codex`:
//!
//! - `agent:main:codex-demo-chat`: a plain turn, then a turn that calls the host tool `lookup`;
//! - `agent:main:codex-demo-finalized`: a tool-only turn answered by the settled-turn
//!   finalizer's capability-free Codex run;
//! - `agent:main:codex-demo-reset`: a turn, a `/reset`, and a turn on a fresh Codex thread;
//! - `agent:main:codex-demo-rewind`: two turns, a rewind to before the second, and a turn on a
//!   fork of the thread holding only the first;
//! - `agent:main:codex-demo-deleted`: a turn, then the session's deletion (its binding goes
//!   with it, its Codex thread is deleted after the COMMIT).
//!
//! The Codex threads live in a temporary `CODEX_HOME` removed when the demo ends; the bindings
//! in the database keep their thread ids (shown by the admin API and the dashboard).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use tether_codex::protocol::DynamicToolSpec;
use tether_codex::scripted::{ModelServer, Step};
use tether_codex::{CODEX_BIN_ENV, PINNED_CODEX_VERSION, locate_codex_binary};
use tether_codex::{CodexAppServer, CodexConfig, CodexHarness, ThreadSettings, TurnRequest};
use tether_codex::{HARNESS_ID, TurnOutcome};
use tether_codex::{ToolCall, ToolExecutor, ToolRun};
use tether_core::HarnessRegistry;
use tether_core::{
    AgentId, AttemptParams, Cancellation, FinalizationAttempt, HarnessId, ResetParams, ResetReason,
    RunId, SessionId, SessionKey, SessionTarget, SettledTurnFinalizer as _,
};
use tether_harness_sdk::reset::reset_registered_harness_sessions;
use tether_host::{ActiveRuns, HostSessions};
use tether_storage::{NewHostSession, Store, TranscriptRole};

use tracing::Instrument as _;

use tether_host::SqlCodexTranscript;

/// The demo's steps (for a progress bar).
pub(crate) const STEPS: u64 = 11;

/// The agent of every demo session.
const AGENT: &str = "main";

/// The environment variable the scripted provider's (dummy) key is passed in.
const MODEL_KEY_ENV: &str = "TETHER_DEMO_MODEL_KEY";

/// A model name outside Codex's catalog: Codex attaches no model-family tools to it.
const MODEL: &str = "tether-scripted";

/// Why the Codex demo did not run or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CodexDemoError {
    /// No Codex binary was found.
    #[error(
        "tether demo --codex needs the Codex CLI {PINNED_CODEX_VERSION}: set {CODEX_BIN_ENV} to a `codex` binary{}, or run `cargo xtask codex-install` in the Tether workspace and start the demo there",
        explicit.as_ref().map(|p| format!(" ({} is not a file)", p.display())).unwrap_or_default()
    )]
    CodexMissing {
        /// The path `TETHER_CODEX_BIN` named, when it was set.
        explicit: Option<PathBuf>,
    },
    /// A local resource (temporary directory, loopback socket) could not be set up.
    #[error("the demo cannot set up {what}: {source}")]
    Setup {
        /// What could not be set up.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// A step failed.
    #[error("the demo step `{step}` failed: {detail}")]
    Step {
        /// The step.
        step: &'static str,
        /// What went wrong.
        detail: String,
    },
}

/// What the demo did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodexDemoSummary {
    /// Host sessions created.
    pub(crate) sessions: usize,
    /// Codex turns run.
    pub(crate) turns: usize,
    /// The settled-turn finalizer's answer to the tool-only turn.
    pub(crate) finalized: String,
    /// The reset session's thread before and after the reset.
    pub(crate) reset: (String, String),
    /// The rewound session's thread before the rewind and the fork after it.
    pub(crate) context_reset: (String, String),
    /// The deleted session.
    pub(crate) deleted: String,
}

/// The host tool of the demo: `lookup` answers with a canned definition.
#[derive(Debug)]
struct DemoTools;

#[async_trait]
impl ToolExecutor for DemoTools {
    fn tools(&self) -> Vec<DynamicToolSpec> {
        vec![DynamicToolSpec::function(
            "lookup",
            "Looks a word up.",
            json!({ "type": "object", "properties": { "q": { "type": "string" } } }),
        )]
    }

    async fn execute(&self, call: ToolCall) -> ToolRun {
        call.facts.record_execution(&call.call_id, true);
        let word = call.arguments["q"].as_str().unwrap_or("?").to_owned();
        ToolRun::success(format!("definition of {word}"))
    }
}

/// The script of every model request the demo makes, in order.
fn script() -> Vec<Step> {
    vec![
        // codex-demo-chat
        Step::Reply("Hello from Codex."),
        Step::Calls(vec![("call-heron", "lookup", json!({ "q": "heron" }))]),
        Step::Reply("A heron is a wading bird."),
        // codex-demo-finalized: tools, no text; then the finalization run answers.
        Step::Calls(vec![("call-tide", "lookup", json!({ "q": "tide" }))]),
        Step::Silent,
        Step::Reply("Tides follow the moon."),
        // codex-demo-reset
        Step::Reply("Before the reset."),
        Step::Reply("After the reset, on a fresh thread."),
        // codex-demo-rewind
        Step::Reply("First answer."),
        Step::Reply("Second answer (rewound away)."),
        Step::Reply("Answer after the rewind: only the first turn is known."),
        // codex-demo-deleted
        Step::Reply("This session will be deleted."),
    ]
}

fn step(step: &'static str) -> impl Fn(String) -> CodexDemoError {
    move |detail| CodexDemoError::Step { step, detail }
}

/// Finds the Codex binary: `TETHER_CODEX_BIN`, else the cache under `workspace`.
pub(crate) fn find_codex(workspace: &Path) -> Result<PathBuf, CodexDemoError> {
    locate_codex_binary(Some(workspace)).ok_or_else(|| CodexDemoError::CodexMissing {
        explicit: std::env::var_os(CODEX_BIN_ENV).map(PathBuf::from),
    })
}

/// The demo host: the store, the harness on a scripted model, the host's session operations.
struct DemoHost {
    store: Store,
    server: Arc<CodexAppServer>,
    harness: CodexHarness,
    registry: Arc<HarnessRegistry>,
    sessions: HostSessions,
    turns: usize,
}

impl DemoHost {
    async fn create(&self, key: &SessionKey, generation: &str) -> Result<(), CodexDemoError> {
        let fail = step("create a session");
        let created = self
            .store
            .create_session(NewHostSession {
                session_key: key.clone(),
                agent_id: AgentId::new(AGENT).map_err(|e| fail(e.to_string()))?,
                session_id: SessionId::new(generation).map_err(|e| fail(e.to_string()))?,
                agent_harness_id: Some(
                    HarnessId::new(HARNESS_ID).map_err(|e| fail(e.to_string()))?,
                ),
            })
            .await
            .map_err(|e| fail(e.to_string()))?;
        if !created {
            return Err(fail(format!("{key} exists already")));
        }
        Ok(())
    }

    async fn turn(
        &mut self,
        key: &SessionKey,
        generation: &str,
        run: &str,
        prompt: &str,
    ) -> Result<TurnOutcome, CodexDemoError> {
        let fail = step("a Codex turn");
        let params = attempt(key, generation, run, prompt).map_err(&fail)?;
        let outcome = self
            .harness
            .run_turn(TurnRequest::new(params))
            .await
            .map_err(|e| fail(e.to_string()))?;
        self.turns += 1;
        Ok(outcome)
    }
}

fn attempt(
    key: &SessionKey,
    generation: &str,
    run: &str,
    prompt: &str,
) -> Result<AttemptParams, String> {
    let mut params = AttemptParams::new(
        RunId::new(run).map_err(|e| e.to_string())?,
        SessionTarget::new(
            AgentId::new(AGENT).map_err(|e| e.to_string())?,
            Some(key.clone()),
            SessionId::new(generation).map_err(|e| e.to_string())?,
        ),
        prompt,
    );
    params.timeout = Some(Duration::from_secs(120));
    Ok(params)
}

fn key(name: &str) -> Result<SessionKey, CodexDemoError> {
    SessionKey::new(format!("agent:{AGENT}:{name}"))
        .map_err(|e| step("name a session")(e.to_string()))
}

/// Runs the demo against `store` with the Codex binary `codex`; `progress` is called once per
/// step with its label.
pub(crate) async fn populate(
    store: Store,
    codex: &Path,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<CodexDemoSummary, CodexDemoError> {
    Box::pin(populate_in(store, codex, progress))
        .instrument(tracing::info_span!("tether.demo_codex"))
        .await
}

async fn populate_in(
    store: Store,
    codex: &Path,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<CodexDemoSummary, CodexDemoError> {
    let dir = tempfile::tempdir().map_err(|source| CodexDemoError::Setup {
        what: "a temporary CODEX_HOME",
        source,
    })?;
    let codex_home = dir.path().join("codex-home");
    let work = dir.path().join("work");
    for path in [&codex_home, &work] {
        std::fs::create_dir_all(path).map_err(|source| CodexDemoError::Setup {
            what: "the demo's directories",
            source,
        })?;
    }
    let model = ModelServer::start(script())
        .await
        .map_err(|source| CodexDemoError::Setup {
            what: "the scripted model server",
            source,
        })?;
    let config = CodexConfig::new(codex, &codex_home)
        .with_responses_provider(&model.base_url(), MODEL_KEY_ENV)
        .with_env(MODEL_KEY_ENV, "scripted-demo")
        .with_config("model_providers.tether.request_max_retries=0")
        .with_config("model_providers.tether.stream_max_retries=0");
    let server = Arc::new(CodexAppServer::new(config));
    let mut settings = ThreadSettings::new(work.display().to_string());
    settings.model = Some(MODEL.to_owned());
    let harness = CodexHarness::builder(
        server.clone(),
        Arc::new(store.clone()),
        Arc::new(store.clone()),
        Arc::new(SqlCodexTranscript::new(store.clone())),
    )
    .tools(Arc::new(DemoTools))
    .settings(settings)
    .holder(format!("tether-demo-{}", std::process::id()))
    .build()
    .await
    .map_err(|e| step("build the Codex harness")(e.to_string()))?;
    let registry = Arc::new(HarnessRegistry::new());
    registry.register(Arc::new(harness.clone()));
    let sessions = HostSessions::new(store.clone(), registry.clone(), Arc::new(ActiveRuns::new()));
    let mut host = DemoHost {
        store,
        server,
        harness,
        registry,
        sessions,
        turns: 0,
    };
    let result = Box::pin(run(&mut host, progress)).await;
    host.server.shutdown().await;
    result
}

async fn run(
    host: &mut DemoHost,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<CodexDemoSummary, CodexDemoError> {
    // A plain turn, then a tool turn.
    let chat = key("codex-demo-chat")?;
    host.create(&chat, "chat-g1").await?;
    progress("codex-demo-chat: a plain turn");
    host.turn(&chat, "chat-g1", "demo-chat-1", "Say hello.")
        .await?;
    progress("codex-demo-chat: a tool turn");
    host.turn(&chat, "chat-g1", "demo-chat-2", "What is a heron?")
        .await?;

    // A tool-only turn, answered by the settled-turn finalizer.
    let finalized_key = key("codex-demo-finalized")?;
    host.create(&finalized_key, "finalized-g1").await?;
    progress("codex-demo-finalized: a tool-only turn");
    let settled = host
        .turn(
            &finalized_key,
            "finalized-g1",
            "demo-finalized-1",
            "What makes the tide?",
        )
        .await?;
    progress("codex-demo-finalized: the finalization run");
    let finalized = finalize(host, &finalized_key, &settled).await?;

    // A reset: the next turn runs on a fresh thread.
    let reset_key = key("codex-demo-reset")?;
    host.create(&reset_key, "reset-g1").await?;
    progress("codex-demo-reset: a turn");
    let before = host
        .turn(&reset_key, "reset-g1", "demo-reset-1", "Remember this.")
        .await?;
    progress("codex-demo-reset: /reset");
    let fail = step("reset a session");
    let report = reset_registered_harness_sessions(
        &[&*host.registry],
        &ResetParams::new(
            AgentId::new(AGENT).map_err(|e| fail(e.to_string()))?,
            SessionId::new("reset-g1").map_err(|e| fail(e.to_string()))?,
            Some(reset_key.clone()),
            ResetReason::Reset,
        ),
    )
    .await;
    if let Some(failure) = report.failures().next() {
        return Err(fail(format!("{failure:?}")));
    }
    progress("codex-demo-reset: a turn on a fresh thread");
    let after = host
        .turn(&reset_key, "reset-g1", "demo-reset-2", "Do you remember?")
        .await?;

    // A context reset: a rewind to before the second user message.
    let rewind_key = key("codex-demo-rewind")?;
    host.create(&rewind_key, "rewind-g1").await?;
    progress("codex-demo-rewind: two turns");
    let first = host
        .turn(&rewind_key, "rewind-g1", "demo-rewind-1", "First question.")
        .await?;
    host.turn(
        &rewind_key,
        "rewind-g1",
        "demo-rewind-2",
        "Second question.",
    )
    .await?;
    progress("codex-demo-rewind: rewind");
    let fail = step("rewind a session");
    let path = host
        .store
        .active_path(&rewind_key)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let second = path
        .iter()
        .filter(|e| e.role == TranscriptRole::User)
        .nth(1)
        .ok_or_else(|| fail("the second user message is missing".to_owned()))?;
    host.sessions
        .rewind(
            &rewind_key,
            second.anchor,
            SessionId::new("rewind-g2").map_err(|e| fail(e.to_string()))?,
        )
        .await
        .map_err(|e| fail(e.to_string()))?;
    progress("codex-demo-rewind: a turn on the kept turns");
    let forked = host
        .turn(
            &rewind_key,
            "rewind-g2",
            "demo-rewind-3",
            "What did I ask first?",
        )
        .await?;

    // A deletion.
    let deleted_key = key("codex-demo-deleted")?;
    host.create(&deleted_key, "deleted-g1").await?;
    progress("codex-demo-deleted: a turn, then the deletion");
    host.turn(&deleted_key, "deleted-g1", "demo-deleted-1", "Goodbye.")
        .await?;
    host.sessions
        .delete_sessions(std::slice::from_ref(&deleted_key))
        .await
        .map_err(|e| step("delete a session")(e.to_string()))?;

    Ok(CodexDemoSummary {
        sessions: 5,
        turns: host.turns,
        finalized,
        reset: (before.thread_id.to_string(), after.thread_id.to_string()),
        context_reset: (first.thread_id.to_string(), forked.thread_id.to_string()),
        deleted: deleted_key.to_string(),
    })
}

/// One try of the settled-turn finalizer on `settled` (which mirrors its answer into the
/// transcript); returns the answer.
async fn finalize(
    host: &DemoHost,
    key: &SessionKey,
    settled: &TurnOutcome,
) -> Result<String, CodexDemoError> {
    let fail = step("finalize the tool-only turn");
    let target = attempt(key, "finalized-g1", "demo-finalized-1", "").map_err(&fail)?;
    let finalizer = host.harness.settled_turn_finalizer(key.clone());
    let answer = finalizer
        .finalize_settled_turn(
            FinalizationAttempt::new(
                target.run_id,
                "Give the user the final answer from the tool results.".to_owned(),
                target.session,
                Cancellation::new(),
                None,
                1,
            ),
            &settled.attempt,
        )
        .await
        .map_err(|e| fail(e.to_string()))?;
    let text: Vec<&str> = answer["assistant"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|block| block["type"] == "text")
        .filter_map(|block| block["text"].as_str())
        .collect();
    if text.is_empty() {
        return Err(fail(format!("the finalizer gave no text: {answer}")));
    }
    Ok(text.join("\n"))
}
