//! The example harness: native threads bound to host sessions through the SDK's
//! thread-binding backend, leases held while a turn runs, the transcript mirrored into the host
//! store, tool outcomes reported, deletion and context reset through the host's transactional
//! path.

use std::sync::Arc;
use std::time::Duration;

use tether_core::HarnessRegistry;
use tether_core::{
    AgentHarness, AgentId, ApplyOutcome, BindingStore as _, Error, HarnessId, HostSessionEntry,
    Intent, LeaseToken, LeaseWrite, Namespace, RowWrite, SessionId, SessionKey, ToolErrorSummary,
    admit_all,
};
use tether_harness_sdk::backend::{
    BindingIdentity, ThreadBinding, ThreadBindingStore, WriteOptions,
};
use tether_harness_sdk::generation::GenerationAuthority;
use tether_harness_sdk::hooks::ThreadBindingHarness;
use tether_harness_sdk::results::sanitize::sanitize_tool_args;
use tether_harness_sdk::results::terminal::{
    FingerprintIdentity, ToolTerminalObservation, terminal_outcome_accumulator,
};
use tether_host::{ActiveRuns, HostSessions};
use tether_storage::{CutStatus, NewHostSession, NewTranscriptEntry, Store, TranscriptRole};

use crate::runtime::{SimulatedRuntime, ToolOutcome, ToolRun};

/// The binding namespace of the example harness.
pub const NAMESPACE: &str = "example-threads";

/// The harness id recorded on its sessions.
pub const HARNESS_ID: &str = "example";

/// The working directory its native threads run in.
pub const CWD: &str = "/srv/example";

/// What one turn did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnReport {
    /// The native thread that ran it.
    pub thread_id: String,
    /// Whether the thread was started for this turn.
    pub started_thread: bool,
    /// The lease epoch held while the turn ran.
    pub lease_epoch: u64,
    /// The tool the turn ran, with its terminal outcome.
    pub tool: Option<ToolRun>,
    /// The turn's unresolved tool failure, as the SDK's terminal-outcome accumulator reports
    /// it (what a host puts into the attempt result's `last_tool_error`).
    pub last_tool_error: Option<ToolErrorSummary>,
    /// For a turn that ran a tool: how its settled-turn finalization ended.
    pub finalization: Option<Finalization>,
    /// The assistant's reply.
    pub reply: String,
}

/// How a settled turn's finalization ended (recorded in the transcript as a `system` entry
/// starting with [`FINALIZATION_PREFIX`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finalization {
    /// The capability-free replay produced a valid final answer.
    Succeeded,
    /// The replay's result was refused; the host fallback answer was used.
    FellBack {
        /// Why the result was refused.
        reason: String,
    },
}

/// Prefix of the transcript entries recording finalization outcomes.
pub const FINALIZATION_PREFIX: &str = "finalization:";

/// The host's fallback answer when finalization fails.
pub const FALLBACK_TEXT: &str =
    "The work finished, but I could not write a final answer; see the tool results above.";

/// The example harness over a [`SimulatedRuntime`] and a SQL [`Store`].
#[derive(Debug, Clone)]
pub struct ExampleHarness {
    store: Store,
    runtime: Arc<SimulatedRuntime>,
    bindings: ThreadBindingStore,
    hooks: Arc<ThreadBindingHarness>,
    runs: Arc<ActiveRuns>,
}

impl ExampleHarness {
    /// Registers the harness's namespace on `store` and builds it; `holder` labels its leases.
    pub async fn new(
        store: Store,
        runtime: Arc<SimulatedRuntime>,
        holder: &str,
    ) -> Result<Self, Error> {
        let ns = Namespace::new(NAMESPACE)?;
        store
            .register_namespace(ThreadBindingStore::namespace_config(ns.clone()))
            .await?;
        let bindings = ThreadBindingStore::builder(Arc::new(store.clone()), ns)
            .holder(holder)
            .build()?;
        let hooks = Arc::new(ThreadBindingHarness::new(
            HarnessId::new(HARNESS_ID)?,
            bindings.clone(),
            GenerationAuthority::new(Arc::new(store.clone())),
        ));
        Ok(Self {
            store,
            runtime,
            bindings,
            hooks,
            runs: Arc::new(ActiveRuns::new()),
        })
    }

    /// The harness as the host registers it (deletion and context-reset hooks).
    pub fn agent_harness(&self) -> Arc<dyn AgentHarness> {
        self.hooks.clone()
    }

    /// The thread-binding store.
    pub fn bindings(&self) -> &ThreadBindingStore {
        &self.bindings
    }

    /// The host's session operations with this harness registered.
    pub fn host_sessions(&self) -> HostSessions {
        let registry = HarnessRegistry::shared();
        registry.register(self.agent_harness());
        HostSessions::new(self.store.clone(), registry, self.runs.clone())
    }

    /// Creates a host session driven by this harness (idempotent).
    pub async fn start_session(
        &self,
        key: &SessionKey,
        agent: &AgentId,
        session_id: &SessionId,
    ) -> Result<HostSessionEntry, Error> {
        self.store
            .create_session(NewHostSession {
                session_key: key.clone(),
                agent_id: agent.clone(),
                session_id: session_id.clone(),
                agent_harness_id: Some(HarnessId::new(HARNESS_ID)?),
            })
            .await?;
        self.entry(key).await
    }

    async fn entry(&self, key: &SessionKey) -> Result<HostSessionEntry, Error> {
        self.store
            .session(key)
            .await?
            .ok_or_else(|| Error::other(format!("no host session `{key}`")))
    }

    fn identity(entry: &HostSessionEntry) -> BindingIdentity {
        BindingIdentity::session(
            entry.agent_id.clone(),
            entry.session_id.clone(),
            Some(entry.session_key.clone()),
        )
    }

    /// Runs one turn: holds the binding's lease for the whole turn, resumes the bound native
    /// thread (binding a new one when none is bound or it is gone), mirrors the user message,
    /// the tool result with its terminal outcome and the reply into the host transcript.
    #[tracing::instrument(level = "info", skip(self, text), fields(session = %key))]
    pub async fn run_turn(
        &self,
        key: &SessionKey,
        turn: u64,
        text: &str,
    ) -> Result<TurnReport, Error> {
        let entry = self.entry(key).await?;
        let identity = Self::identity(&entry);
        let inner = identity.clone();
        let identity = &inner;
        self.runs.admit(key);
        let result = self
            .bindings
            .with_lease(identity, false, None, |lease| async move {
                let bound = self.bindings.read(identity).await?;
                let (thread_id, started_thread) = match bound {
                    Some(b) if self.runtime.has_thread(&b.thread_id) => (b.thread_id, false),
                    _ => {
                        let thread = self.runtime.start_thread();
                        self.bindings
                            .set(
                                identity,
                                ThreadBinding::new(thread.clone(), CWD),
                                WriteOptions::default(),
                            )
                            .await?;
                        (thread, true)
                    }
                };
                self.mirror(key, turn, "user", TranscriptRole::User, text)
                    .await?;
                let reply = self.runtime.send(&thread_id, text).ok_or_else(|| {
                    Error::other(format!("native thread {thread_id} vanished mid-turn"))
                })?;
                let mut answer = reply.text.clone();
                let mut finalization = None;
                // Every tool call's terminal outcome goes to the run's accumulator, which
                // keeps an unresolved failure until a later call resolves it.
                let (mut outcomes, _host_facts) = terminal_outcome_accumulator(
                    format!("{key}:{turn}"),
                    Arc::new(FingerprintIdentity),
                );
                if let Some(tool) = &reply.tool {
                    let arguments = serde_json::json!({"command": text});
                    let call_id = format!("{thread_id}:{turn}:call");
                    let observation = match tool.outcome {
                        ToolOutcome::Succeeded => {
                            ToolTerminalObservation::success(&tool.name, arguments.clone())
                        }
                        ToolOutcome::Failed => ToolTerminalObservation::failure(
                            &tool.name,
                            arguments.clone(),
                            &tool.output,
                        ),
                    };
                    outcomes.observe(&observation.with_call_id(call_id));
                    tracing::info!(
                        tool = %tool.name,
                        outcome = tool.outcome.as_str(),
                        arguments = %sanitize_tool_args(&arguments),
                        "tool call settled"
                    );
                    let report = format!(
                        "tool {} {}: {}",
                        tool.name,
                        tool.outcome.as_str(),
                        tool.output
                    );
                    self.mirror(key, turn, "tool", TranscriptRole::Tool, &report)
                        .await?;
                    let (text, outcome) = self.finalize(&thread_id);
                    let record = match &outcome {
                        Finalization::Succeeded => format!("{FINALIZATION_PREFIX} succeeded"),
                        Finalization::FellBack { reason } => {
                            format!("{FINALIZATION_PREFIX} fell back to the host answer ({reason})")
                        }
                    };
                    self.mirror(key, turn, "finalization", TranscriptRole::System, &record)
                        .await?;
                    answer = text;
                    finalization = Some(outcome);
                }
                self.mirror(key, turn, "assistant", TranscriptRole::Assistant, &answer)
                    .await?;
                Ok(TurnReport {
                    thread_id,
                    started_thread,
                    lease_epoch: lease.epoch().get(),
                    tool: reply.tool,
                    last_tool_error: outcomes.last_tool_error(),
                    finalization,
                    reply: answer,
                })
            })
            .await;
        self.runs.finish(key);
        result
    }

    /// Finalizes a settled tool turn: the runtime's capability-free replay result goes through
    /// `tether-finalizer`'s narrow-result validator; a refused result falls back to the host
    /// answer.
    fn finalize(&self, thread_id: &str) -> (String, Finalization) {
        let Some(raw) = self.runtime.finalize(thread_id) else {
            return (
                FALLBACK_TEXT.to_owned(),
                Finalization::FellBack {
                    reason: format!("native thread {thread_id} is gone"),
                },
            );
        };
        match tether_finalizer::validate_settled_turn_finalization_result(&raw) {
            Ok(result) => (result.visible_text(), Finalization::Succeeded),
            Err(err) => (
                FALLBACK_TEXT.to_owned(),
                Finalization::FellBack {
                    reason: err.to_string(),
                },
            ),
        }
    }

    async fn mirror(
        &self,
        key: &SessionKey,
        turn: u64,
        part: &str,
        role: TranscriptRole,
        text: &str,
    ) -> Result<(), Error> {
        self.store
            .append_transcript(
                key,
                NewTranscriptEntry {
                    role,
                    content: text.to_owned(),
                    idempotency_key: Some(format!("turn-{turn}-{part}")),
                },
            )
            .await
            .map(|_| ())
    }

    /// Context reset: rewinds the session to just before its first user message, moving it to
    /// generation `next`; the harness's hook drops the native binding in the same transaction.
    pub async fn reset_context(
        &self,
        key: &SessionKey,
        next: SessionId,
    ) -> Result<CutStatus, Error> {
        let first_user = self
            .store
            .active_path(key)
            .await?
            .into_iter()
            .find(|e| e.role == TranscriptRole::User)
            .ok_or_else(|| {
                Error::other(format!("session `{key}` has no user message to rewind to"))
            })?;
        self.host_sessions()
            .rewind(key, first_user.anchor, next)
            .await
    }

    /// Deletes sessions through the host's transactional path (the harness's binding goes in
    /// the same transaction) and closes their native threads afterwards.
    pub async fn delete_sessions(&self, keys: &[SessionKey]) -> Result<Vec<SessionKey>, Error> {
        let mut threads = Vec::new();
        for key in keys {
            let entry = self.entry(key).await?;
            if let Some(b) = self.bindings.read(&Self::identity(&entry)).await? {
                threads.push(b.thread_id);
            }
        }
        let deleted = self.host_sessions().delete_sessions(keys).await?;
        for thread in threads {
            self.runtime.close_thread(&thread);
        }
        Ok(deleted)
    }

    /// Simulates a worker that died while holding the session's lease: the binding row gets a
    /// lease held by `holder` for `hold`, which nobody will renew or release.
    pub async fn simulate_stuck_lease(
        &self,
        key: &SessionKey,
        holder: &str,
        hold: Duration,
    ) -> Result<(), Error> {
        let entry = self.entry(key).await?;
        let identity = Self::identity(&entry);
        let ns = self.bindings.namespace().clone();
        let seen = self.store.observe(&ns, identity.key()).await?;
        let row = seen
            .row
            .clone()
            .ok_or_else(|| Error::other(format!("session `{key}` has no binding to hold")))?;
        let now = self.store.clock().now();
        let outcome = self
            .store
            .compare_and_apply(
                &ns,
                identity.key(),
                &seen.comparison,
                Intent::Set {
                    row: RowWrite {
                        value: row.value,
                        lease: Some(LeaseWrite {
                            token: LeaseToken::new(format!("stuck-{}", now.as_millis()))?,
                            expires_at: now + hold,
                            holder: Some(holder.to_owned()),
                        }),
                    },
                    ttl: None,
                },
                &admit_all,
            )
            .await?;
        match outcome {
            ApplyOutcome::Applied { .. } => Ok(()),
            other => Err(Error::other(format!("could not hold the lease: {other:?}"))),
        }
    }
}
