//! A chat gateway on the real Codex harness (what the `codex-gateway` binary runs), built only
//! on public APIs: a [`tether_host::Host`] hands out the Codex harness already wired to its
//! store ([`Host::codex_harness`]), and the gateway drives one host session through the life a
//! chat has:
//!
//! 1. the host session is created (generation `gen-1`, driven by the `codex` harness);
//! 2. a first turn binds a new Codex thread to it;
//! 3. a second turn resumes that thread (the model sees the first turn);
//! 4. `/new` resets the session ([`HostSessions::reset`](tether_host::HostSessions::reset)) to
//!    generation `gen-2`: the harness clears the binding and archives the old thread;
//! 5. a third turn starts a fresh thread (the model no longer sees the first two turns);
//! 6. the session is deleted with its transcript and binding in one transaction, and its Codex
//!    threads (the bound one and the archived one) are deleted after the commit.
//!
//! Each step is reported to the caller as a [`Step`] as it happens, and the whole run as a
//! [`GatewayReport`]. The harness admits each turn in the host's record of runs in flight
//! itself, so a reset or deletion racing a turn is refused instead of run; nothing here wraps
//! a turn in `host.runs().start(...)`.
//!
//! ```no_run
//! use tether_codex::{CodexConfig, locate_codex_binary};
//! use tether_core::SessionKey;
//! use tether_example_harness::codex_gateway::{self, API_KEY_ENV, GatewayConfig};
//! use tether_host::Host;
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let here = std::env::current_dir()?;
//! let binary = locate_codex_binary(Some(&here)).expect("run `cargo xtask codex-install`");
//! let codex = CodexConfig::new(binary, here.join("tether-data/codex-home"))
//!     .with_responses_provider("https://api.openai.com/v1", API_KEY_ENV);
//! let host = Host::open("sqlite://tether-data/codex-gateway.db").await?;
//! let session = SessionKey::new("agent:main:direct:me")?;
//! let config = GatewayConfig::new(codex, here.display().to_string(), session);
//! let report = codex_gateway::run(&host, config, |step| tracing::info!(%step, "gateway")).await?;
//! assert_eq!(report.second.thread_id, report.first.thread_id);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tether_codex::{
    CodexAppServer, CodexConfig, CodexHarness, ThreadId, ThreadSettings, TurnOutcome, TurnRequest,
};
use tether_core::{
    AgentId, AttemptParams, AttemptTerminal, Error, HarnessId, HostErrorKind, HostSessionEntry,
    ResetReason, RunId, SessionId, SessionKey, SessionTarget,
};
use tether_host::Host;
use tether_storage::NewHostSession;
use tracing::Instrument as _;

/// The environment variable Codex reads the model provider's key from (never logged; any
/// value for a local scripted model server).
pub const API_KEY_ENV: &str = "OPENAI_API_KEY";

/// The model provider without `--model-provider-url`.
pub const DEFAULT_PROVIDER_URL: &str = "https://api.openai.com/v1";

/// What the user says in each of the three turns: the first sets a fact, the second asks for
/// it on the same thread, the third asks again after `/new`, on a fresh thread.
pub const PROMPTS: [&str; 3] = [
    "Remember this word for me: heron.",
    "Which word did I ask you to remember?",
    "Which word did I ask you to remember?",
];

/// The generations the gateway moves the session through.
const FIRST_GENERATION: &str = "gen-1";
const NEXT_GENERATION: &str = "gen-2";

/// What the gateway runs with.
#[derive(Debug)]
pub struct GatewayConfig {
    /// The Codex app-server: its binary, its `CODEX_HOME` and its model provider.
    pub codex: CodexConfig,
    /// The working directory of the Codex threads (absolute).
    pub cwd: String,
    /// The model, when pinned (default: Codex's own).
    pub model: Option<String>,
    /// The host session the gateway creates, drives and deletes (it must not exist yet).
    pub session: SessionKey,
    /// How long one turn may run before it is interrupted.
    pub turn_timeout: Duration,
}

impl GatewayConfig {
    /// A gateway on `codex` for `session`, its threads working in `cwd`, Codex's default model
    /// and 10 minutes per turn.
    pub fn new(codex: CodexConfig, cwd: impl Into<String>, session: SessionKey) -> Self {
        Self {
            codex,
            cwd: cwd.into(),
            model: None,
            session,
            turn_timeout: Duration::from_secs(600),
        }
    }
}

/// What one turn did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnSummary {
    /// The user's message.
    pub prompt: String,
    /// The Codex thread the session is bound to.
    pub thread_id: ThreadId,
    /// A new thread was started (and bound) for this turn.
    pub started_thread: bool,
    /// The bound thread was resumed.
    pub resumed_thread: bool,
    /// How the turn ended.
    pub terminal: AttemptTerminal,
    /// The last assistant text, if any.
    pub reply: Option<String>,
    /// Codex's own error notifications during the turn (why a turn failed).
    pub codex_errors: Vec<String>,
}

impl TurnSummary {
    fn of(prompt: &str, outcome: &TurnOutcome) -> Self {
        Self {
            prompt: prompt.to_owned(),
            thread_id: outcome.thread_id.clone(),
            started_thread: outcome.started_thread,
            resumed_thread: outcome.resumed_thread,
            terminal: outcome.attempt.terminal.clone(),
            reply: outcome.reply().map(str::to_owned),
            codex_errors: outcome.codex_errors.clone(),
        }
    }
}

/// One step of the gateway, reported as it happens (its `Display` is the line the binary
/// prints).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// The host session was created.
    SessionCreated {
        /// Its key.
        session: SessionKey,
        /// Its generation.
        generation: SessionId,
    },
    /// A turn ran.
    Turn {
        /// Which one (`turn 1`, `turn 2`, `turn after /new`).
        label: &'static str,
        /// What it did.
        turn: TurnSummary,
    },
    /// `/new`: the session moved to a new generation; its thread was released.
    Reset {
        /// The generation the session left.
        from: SessionId,
        /// The generation it is in now.
        to: SessionId,
    },
    /// The session was deleted.
    Deleted {
        /// Its key.
        session: SessionKey,
        /// The host no longer has it.
        gone: bool,
        /// Codex thread cleanups still due (0: every thread of the session was deleted).
        cleanups_pending: usize,
    },
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SessionCreated {
                session,
                generation,
            } => write!(f, "created session {session} (generation {generation})"),
            Self::Turn { label, turn } => {
                let thread = if turn.started_thread {
                    "new thread"
                } else if turn.resumed_thread {
                    "resumed thread"
                } else {
                    "thread"
                };
                write!(
                    f,
                    "{label}: {thread} {}, {:?}; you: {:?}; codex: {:?}",
                    turn.thread_id,
                    turn.terminal,
                    turn.prompt,
                    turn.reply.as_deref().unwrap_or("(no reply)")
                )?;
                for error in &turn.codex_errors {
                    write!(f, "; codex error: {error}")?;
                }
                Ok(())
            }
            Self::Reset { from, to } => write!(
                f,
                "/new: the session moved from generation {from} to {to}; its Codex thread was released"
            ),
            Self::Deleted {
                session,
                gone,
                cleanups_pending,
            } => write!(
                f,
                "deleted session {session}: {}; {cleanups_pending} Codex thread cleanup(s) still due",
                if *gone {
                    "the host no longer has it"
                } else {
                    "the host still has it"
                }
            ),
        }
    }
}

/// What the whole run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayReport {
    /// The session it drove.
    pub session: SessionKey,
    /// The first turn (a new thread).
    pub first: TurnSummary,
    /// The second turn (the same thread, resumed).
    pub second: TurnSummary,
    /// The generation `/new` moved the session to.
    pub reset_to: SessionId,
    /// The turn after `/new` (a fresh thread).
    pub after_reset: TurnSummary,
    /// The host no longer has the session after its deletion.
    pub session_gone: bool,
    /// Codex thread cleanups still due after the deletion.
    pub cleanups_pending: usize,
}

/// Runs the gateway on `host`: creates `config.session`, runs two turns, resets it, runs one
/// more turn and deletes it, reporting each step to `on_step` as it happens. The app-server is
/// stopped before this returns, also on an error.
pub async fn run(
    host: &Host,
    config: GatewayConfig,
    mut on_step: impl FnMut(&Step),
) -> Result<GatewayReport, Error> {
    let span = tracing::info_span!("codex_gateway", session = %config.session);
    async move {
        let server = Arc::new(CodexAppServer::new(config.codex));
        let mut settings = ThreadSettings::new(config.cwd);
        settings.model = config.model;
        let harness = host
            .codex_harness(server.clone())
            .settings(settings)
            .build()
            .await?;
        // Registered, so the host's reset and deletion reach the session's Codex thread.
        host.registry().register(Arc::new(harness.clone()));
        let gateway = Gateway {
            host,
            harness,
            turn_timeout: config.turn_timeout,
        };
        let report = gateway.drive(&config.session, &mut on_step).await;
        server.shutdown().await;
        report
    }
    .instrument(span)
    .await
}

/// The host and its Codex harness.
struct Gateway<'a> {
    host: &'a Host,
    harness: CodexHarness,
    turn_timeout: Duration,
}

impl Gateway<'_> {
    async fn drive(
        &self,
        key: &SessionKey,
        on_step: &mut impl FnMut(&Step),
    ) -> Result<GatewayReport, Error> {
        let entry = self.create_session(key).await?;
        on_step(&Step::SessionCreated {
            session: key.clone(),
            generation: entry.session_id.clone(),
        });

        let first = self.turn(&entry, 1, PROMPTS[0]).await?;
        on_step(&Step::Turn {
            label: "turn 1",
            turn: first.clone(),
        });
        let second = self.turn(&entry, 2, PROMPTS[1]).await?;
        on_step(&Step::Turn {
            label: "turn 2",
            turn: second.clone(),
        });

        // `/new`: the session's next generation, in the host's transaction; the registered
        // harness then clears the binding and archives the thread.
        let reset = self
            .host
            .sessions()
            .reset(key, SessionId::new(NEXT_GENERATION)?, ResetReason::New)
            .await?;
        on_step(&Step::Reset {
            from: entry.session_id.clone(),
            to: reset.session_id.clone(),
        });
        let after_reset = self.turn(&reset, 3, PROMPTS[2]).await?;
        on_step(&Step::Turn {
            label: "turn after /new",
            turn: after_reset.clone(),
        });

        // The session row, its transcript and its binding go in one transaction; the harness
        // deletes the Codex threads after the commit.
        self.host
            .sessions()
            .delete_sessions(std::slice::from_ref(key))
            .await?;
        let session_gone = self.host.store().session(key).await?.is_none();
        let cleanups_pending = self.harness.pending_native_cleanup().await?.len();
        on_step(&Step::Deleted {
            session: key.clone(),
            gone: session_gone,
            cleanups_pending,
        });
        Ok(GatewayReport {
            session: key.clone(),
            first,
            second,
            reset_to: reset.session_id,
            after_reset,
            session_gone,
            cleanups_pending,
        })
    }

    /// Creates the host session `key` for the Codex harness; a session already under `key` is
    /// someone else's, never taken over (the gateway ends by deleting its session).
    async fn create_session(&self, key: &SessionKey) -> Result<HostSessionEntry, Error> {
        let created = self
            .host
            .store()
            .create_session(NewHostSession {
                session_key: key.clone(),
                agent_id: AgentId::new("main")?,
                session_id: SessionId::new(FIRST_GENERATION)?,
                agent_harness_id: Some(HarnessId::new(tether_codex::HARNESS_ID)?),
            })
            .await?;
        if !created {
            return Err(HostErrorKind::SessionExists {
                key: format!("{key} (pass another --session)"),
            }
            .into());
        }
        self.host
            .store()
            .session(key)
            .await?
            .ok_or_else(|| Error::session_not_found(key))
    }

    /// Runs turn `n` of the session's current generation (`entry`).
    async fn turn(
        &self,
        entry: &HostSessionEntry,
        n: u32,
        prompt: &str,
    ) -> Result<TurnSummary, Error> {
        let mut params = AttemptParams::new(
            RunId::new(format!("codex-gateway-{n}"))?,
            SessionTarget::of(entry),
            prompt,
        );
        params.timeout = Some(self.turn_timeout);
        let outcome = self.harness.run_turn(TurnRequest::new(params)).await?;
        Ok(TurnSummary::of(prompt, &outcome))
    }
}
