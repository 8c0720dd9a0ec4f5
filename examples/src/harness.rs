//! The example harness: native threads of a [`SimulatedRuntime`] bound to host sessions through
//! the SDK's thread-binding backend. A turn holds the session's lease (renewed by heartbeats)
//! while it runs; it mirrors the user turn with its typed metadata, feeds every tool call's
//! terminal outcome to the terminal-outcome accumulator, logs sanitized tool arguments, and
//! finalizes a tool turn through `tether-finalizer`'s orchestration with the SQL fallback
//! transcript. Deletion and context reset go through the host's transactional path.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tether_core::{
    AgentHarness, AgentId, AgentMessage, ApplyOutcome, AttemptResult, BindingStore as _,
    ContentBlock, Error, FinalizationAttempt, HarnessId, HarnessRegistry, HostSessionEntry, Intent,
    LeaseConfig, LeaseToken, LeaseWrite, MessageRole, Namespace, RowWrite, RunId, SessionId,
    SessionKey, SessionTarget, SettledTurnFinalizer, ToolErrorSummary, admit_all, always_current,
};
use tether_finalizer::{
    DiagnosticEvent, FinalizationInput, FinalizationOutcome, RunSignal, ToolCallMeta, TurnFacts,
    prepare_terminal_with_settled_turn_finalization,
};
use tether_harness_sdk::backend::{
    BindingIdentity, ThreadBinding, ThreadBindingStore, WriteOptions,
};
use tether_harness_sdk::generation::{BindingAuthority, GenerationAuthority};
use tether_harness_sdk::hooks::ThreadBindingHarness;
use tether_harness_sdk::lifecycle::LeaseGuard;
use tether_harness_sdk::results::mirror::{
    MetaKey, UserTurnEntry, UserTurnMeta, UserTurnTranscriptRecorder,
};
use tether_harness_sdk::results::sanitize::sanitize_tool_args;
use tether_harness_sdk::results::terminal::{
    FingerprintIdentity, ToolTerminalObservation, terminal_outcome_accumulator,
};
use tether_host::{ActiveRuns, Host, HostSessions, SqlFallbackTranscript};
use tether_storage::{CutStatus, NewHostSession, NewTranscriptEntry, Store, TranscriptRole};

use crate::runtime::{SimulatedRuntime, ToolOutcome, ToolRun};

/// The binding namespace of the example harness.
pub const NAMESPACE: &str = "example-threads";

/// The harness id recorded on its sessions.
pub const HARNESS_ID: &str = "example";

/// The working directory its native threads run in.
pub const CWD: &str = "/srv/example";

/// A credential-shaped value the example passes in every tool call's arguments, so the logs
/// show it masked by `sanitize_tool_args` (it is never logged as it is).
pub const EXAMPLE_API_KEY: &str = "sk-example-not-a-real-key-0000";

/// Prefix of the transcript entries recording finalization outcomes.
pub const FINALIZATION_PREFIX: &str = tether_storage::FINALIZATION_PREFIX;

/// The host's fallback answer when finalization fails (written by the orchestration through
/// the SQL fallback transcript).
pub const FALLBACK_TEXT: &str = tether_finalizer::FALLBACK_TEXT;

/// What one turn did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnReport {
    /// The native thread that ran it.
    pub thread_id: String,
    /// Whether the thread was started for this turn.
    pub started_thread: bool,
    /// The lease epoch held while the turn ran.
    pub lease_epoch: u64,
    /// Whether this turn's user message was freshly appended to the transcript (the persisted
    /// marker's "original input committed"); `false` when a replay found it already there.
    pub user_turn_announced: bool,
    /// The owner flag of the user turn as stored in the transcript (the host's, whatever the
    /// runtime hook wrote).
    pub sender_is_owner: Option<bool>,
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

/// The harness's finalizer: the capability-free replay of the session's bound native thread.
/// Its raw result goes to the orchestration, which validates it (a result with any tool
/// field is refused).
#[derive(Debug)]
struct ReplayFinalizer {
    bindings: ThreadBindingStore,
    runtime: Arc<SimulatedRuntime>,
}

#[async_trait]
impl SettledTurnFinalizer for ReplayFinalizer {
    async fn finalize_settled_turn(
        &self,
        attempt: FinalizationAttempt,
        _settled: &AttemptResult,
    ) -> Result<Value, Error> {
        let session = attempt.session();
        let identity = BindingIdentity::session(
            session.agent_id.clone(),
            session.session_id.clone(),
            session.session_key.clone(),
        );
        let thread = self
            .bindings
            .read(&identity)
            .await?
            .ok_or_else(|| Error::other("the session has no bound native thread to replay"))?;
        self.runtime
            .finalize(&thread.thread_id)
            .ok_or_else(|| Error::other(format!("native thread {} is gone", thread.thread_id)))
    }
}

/// Where the harness's session operations come from.
#[derive(Debug, Clone)]
enum Wiring {
    /// The host facade ([`Host::sessions`]).
    Host(Host),
    /// A bare store with a registry of its own (what `tether demo` uses).
    Store(Arc<HarnessRegistry>),
}

/// The example harness over a [`SimulatedRuntime`] and the SQL [`Store`].
#[derive(Debug, Clone)]
pub struct ExampleHarness {
    store: Store,
    runtime: Arc<SimulatedRuntime>,
    bindings: ThreadBindingStore,
    hooks: Arc<ThreadBindingHarness>,
    runs: Arc<ActiveRuns>,
    fallback: SqlFallbackTranscript,
    wiring: Wiring,
}

impl ExampleHarness {
    /// The harness on `host`: thread bindings from the facade, on the host's clock, leases
    /// labelled with its holder (`lease`: a lease timing of its own instead of the defaults),
    /// registered in the host's registry with its finalizer.
    pub async fn on_host(
        host: &Host,
        runtime: Arc<SimulatedRuntime>,
        lease: Option<LeaseConfig>,
    ) -> Result<Self, Error> {
        // The facade registers the namespace and wires the host's clock, holder and quarantine.
        let mut bindings = host.thread_bindings(NAMESPACE).await?;
        if let Some(lease) = lease {
            // The same wiring with a lease timing of its own.
            bindings = ThreadBindingStore::builder(
                Arc::new(host.store().clone()),
                bindings.namespace().clone(),
            )
            .clock(Arc::clone(host.clock()))
            .holder(host.holder())
            .quarantine(Arc::new(host.store().clone()))
            .lease_config(lease)
            .build()?;
        }
        let harness = Self::assemble(
            host.store().clone(),
            runtime,
            bindings,
            host.generation(),
            Arc::clone(host.runs()),
            host.fallback_transcript(),
            Wiring::Host(host.clone()),
        )?;
        host.registry().register(harness.agent_harness());
        Ok(harness)
    }

    /// The harness on a bare `store` (what `tether demo` drives): registers its namespace and
    /// builds everything itself; `holder` labels its leases.
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
            .clock(Arc::clone(store.clock()))
            .holder(holder)
            .build()?;
        let registry = HarnessRegistry::shared();
        let harness = Self::assemble(
            store.clone(),
            runtime,
            bindings,
            GenerationAuthority::new(Arc::new(store.clone())),
            Arc::new(ActiveRuns::new()),
            SqlFallbackTranscript::new(store),
            Wiring::Store(Arc::clone(&registry)),
        )?;
        registry.register(harness.agent_harness());
        Ok(harness)
    }

    fn assemble(
        store: Store,
        runtime: Arc<SimulatedRuntime>,
        bindings: ThreadBindingStore,
        generation: GenerationAuthority,
        runs: Arc<ActiveRuns>,
        fallback: SqlFallbackTranscript,
        wiring: Wiring,
    ) -> Result<Self, Error> {
        let finalizer = Arc::new(ReplayFinalizer {
            bindings: bindings.clone(),
            runtime: Arc::clone(&runtime),
        });
        let hooks = Arc::new(
            ThreadBindingHarness::new(HarnessId::new(HARNESS_ID)?, bindings.clone(), generation)
                .with_finalizer(finalizer),
        );
        Ok(Self {
            store,
            runtime,
            bindings,
            hooks,
            runs,
            fallback,
            wiring,
        })
    }

    /// The harness as the host registers it (deletion, context-reset and reset hooks, and its
    /// settled-turn finalizer).
    pub fn agent_harness(&self) -> Arc<dyn AgentHarness> {
        self.hooks.clone()
    }

    /// The thread-binding store.
    pub fn bindings(&self) -> &ThreadBindingStore {
        &self.bindings
    }

    /// The simulated runtime.
    pub fn runtime(&self) -> &Arc<SimulatedRuntime> {
        &self.runtime
    }

    /// The host's session operations with this harness registered.
    pub fn host_sessions(&self) -> HostSessions {
        match &self.wiring {
            Wiring::Host(host) => host.sessions(),
            Wiring::Store(registry) => HostSessions::new(
                self.store.clone(),
                Arc::clone(registry),
                Arc::clone(&self.runs) as Arc<dyn tether_host::WorkTracker>,
            ),
        }
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

    /// The host session entry of `key`.
    pub async fn entry(&self, key: &SessionKey) -> Result<HostSessionEntry, Error> {
        self.store
            .session(key)
            .await?
            .ok_or_else(|| Error::other(format!("no host session `{key}`")))
    }

    /// The binding identity of a host session (its current generation).
    pub fn identity(entry: &HostSessionEntry) -> BindingIdentity {
        BindingIdentity::session(
            entry.agent_id.clone(),
            entry.session_id.clone(),
            Some(entry.session_key.clone()),
        )
    }

    /// Runs one turn: holds the binding's lease for the whole turn (heartbeats renew it),
    /// resumes the bound native thread (binding a new one when none is bound or it is gone),
    /// mirrors the user turn with its metadata, the tool result and the reply into the host
    /// transcript, and finalizes a tool turn.
    #[tracing::instrument(level = "info", name = "example.turn", skip(self, text), fields(session = %key))]
    pub async fn run_turn(
        &self,
        key: &SessionKey,
        turn: u64,
        text: &str,
    ) -> Result<TurnReport, Error> {
        let entry = self.entry(key).await?;
        let identity = Self::identity(&entry);
        self.runs.admit(key);
        // The turn acts for the generation it read: a deletion or context reset of it refuses
        // the turn instead of letting it bind the reset generation again.
        let caller = BindingAuthority::caller(always_current());
        let result = self
            .hooks
            .with_turn_lease(&identity, &caller, |lease, authority| {
                self.turn_under_lease(lease, authority, &entry, &identity, turn, text)
            })
            .await;
        self.runs.finish(key);
        result
    }

    async fn turn_under_lease(
        &self,
        lease: LeaseGuard,
        authority: BindingAuthority,
        entry: &HostSessionEntry,
        identity: &BindingIdentity,
        turn: u64,
        text: &str,
    ) -> Result<TurnReport, Error> {
        let key = &entry.session_key;
        let (thread_id, started_thread) = match self.bindings.read(identity).await? {
            Some(b) if self.runtime.has_thread(&b.thread_id) => (b.thread_id, false),
            _ => {
                let thread = self.runtime.start_thread();
                let binding = ThreadBinding::new(thread.clone(), CWD);
                self.bindings
                    .set(
                        identity,
                        binding,
                        WriteOptions::checked(authority.assert_current_fn()),
                    )
                    .await?;
                (thread, true)
            }
        };
        let (user_turn_announced, sender_is_owner) = self.mirror_user_turn(key, turn, text).await?;
        let reply = self
            .runtime
            .send(&thread_id, text)
            .ok_or_else(|| Error::other(format!("native thread {thread_id} vanished mid-turn")))?;

        // Every tool call's terminal outcome goes to the run's accumulator, which keeps an
        // unresolved failure until a later call resolves it.
        let (mut outcomes, _host_facts) =
            terminal_outcome_accumulator(format!("{key}:{turn}"), Arc::new(FingerprintIdentity));
        let Some(tool) = reply.tool.clone() else {
            self.mirror(
                key,
                turn,
                "assistant",
                TranscriptRole::Assistant,
                &reply.text,
            )
            .await?;
            return Ok(TurnReport {
                thread_id,
                started_thread,
                lease_epoch: lease.epoch().get(),
                user_turn_announced,
                sender_is_owner,
                tool: None,
                last_tool_error: None,
                finalization: None,
                reply: reply.text,
            });
        };
        let arguments = json!({"command": text, "api_key": EXAMPLE_API_KEY});
        let call_id = format!("{thread_id}:{turn}:call");
        let observation = match tool.outcome {
            ToolOutcome::Succeeded => {
                ToolTerminalObservation::success(&tool.name, arguments.clone())
            }
            ToolOutcome::Failed => {
                ToolTerminalObservation::failure(&tool.name, arguments.clone(), &tool.output)
            }
        };
        outcomes.observe(&observation.with_call_id(&call_id));
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
        let last_tool_error = outcomes.last_tool_error();

        let (answer, finalization) = self
            .finalize(&lease, entry, turn, text, &tool, &call_id, arguments)
            .await?;
        Ok(TurnReport {
            thread_id,
            started_thread,
            lease_epoch: lease.epoch().get(),
            user_turn_announced,
            sender_is_owner,
            tool: Some(tool),
            last_tool_error,
            finalization: Some(finalization),
            reply: answer,
        })
    }

    /// The user turn: the host prepares the message with its typed metadata, the runtime's
    /// `before_message_write` hook rewrites it (here: it claims the sender is not the owner and
    /// forges a steer target), the host's metadata is restored onto the hook's message, and
    /// the restored message is appended with its metadata; the append's outcome feeds the
    /// persisted marker. Returns whether the append announced the original input, and the
    /// owner flag as stored.
    async fn mirror_user_turn(
        &self,
        key: &SessionKey,
        turn: u64,
        text: &str,
    ) -> Result<(bool, Option<bool>), Error> {
        let meta_key = MetaKey::OPENCLAW;
        let mut prepared = json!({
            "role": "user",
            "content": text,
            "idempotencyKey": format!("turn-{turn}-user"),
            "provenance": {"kind": "external_user", "sourceChannel": "example"},
        });
        let meta = UserTurnMeta::default()
            .with_sender_is_owner(true)
            .with_intent(json!({"kind": "task"}));
        meta_key.write(&mut prepared, &meta);
        let mut hooked = prepared.clone();
        hooked[meta_key.as_str()] = json!({"senderIsOwner": false, "steerTargetRunId": "forged"});
        let restored = meta_key.restore(&hooked, Some(&prepared)).into_owned();

        let mut recorder = UserTurnTranscriptRecorder::with_meta_key(meta_key.clone());
        let store = &self.store;
        let effects = recorder
            .append_user_turn(&restored, |entry: UserTurnEntry| async move {
                let mut new = NewTranscriptEntry::new(TranscriptRole::User, entry.text.clone())
                    .with_metadata(entry.metadata.clone());
                new.idempotency_key = entry.idempotency_key.clone();
                store.append_transcript(key, new).await
            })
            .await?;
        let announced = effects.original_input_committed.is_some();
        let idempotency_key = format!("turn-{turn}-user");
        let stored = self
            .store
            .active_path(key)
            .await?
            .into_iter()
            .find(|e| e.idempotency_key.as_deref() == Some(idempotency_key.as_str()));
        let owner = stored
            .and_then(|e| e.metadata)
            .and_then(|m| m.get(meta_key.as_str()).cloned())
            .and_then(|wire| wire.as_object().map(UserTurnMeta::from_wire))
            .and_then(|m| m.sender_is_owner);
        Ok((announced, owner))
    }

    /// The settled tool turn's finalization, orchestrated by `tether-finalizer`: the harness's
    /// finalizer replays the native thread without tools; a refused result (twice) falls back
    /// to the host text, which the SQL fallback transcript persists under the run's key. The
    /// outcome is recorded as a `system` entry.
    #[allow(clippy::too_many_arguments)]
    async fn finalize(
        &self,
        lease: &LeaseGuard,
        entry: &HostSessionEntry,
        turn: u64,
        text: &str,
        tool: &ToolRun,
        call_id: &str,
        arguments: Value,
    ) -> Result<(String, Finalization), Error> {
        let key = &entry.session_key;
        let mut batch = AgentMessage::text(MessageRole::Assistant, "").with_stop_reason("toolUse");
        batch.content = vec![ContentBlock::ToolCall {
            id: call_id.to_owned(),
            name: tool.name.clone(),
            arguments,
        }];
        let mut result = AgentMessage::tool_result(call_id, &tool.name, &tool.output);
        result.is_error = tool.outcome == ToolOutcome::Failed;
        let settled = Arc::new(AttemptResult {
            messages_snapshot: vec![
                AgentMessage::text(MessageRole::User, text),
                batch.clone(),
                result,
            ],
            ..AttemptResult::default()
        });
        let facts = TurnFacts::settled_tools(
            vec![ToolCallMeta {
                call_id: Some(call_id.to_owned()),
                tool_name: tool.name.clone(),
                is_error: tool.outcome == ToolOutcome::Failed,
                ..ToolCallMeta::default()
            }],
            Some(batch),
        );
        let signal = RunSignal::new();
        let session = SessionTarget {
            agent_id: entry.agent_id.clone(),
            session_key: Some(key.clone()),
            session_id: entry.session_id.clone(),
        };
        // Each commit edge of the finalization checks that this turn still holds the lease.
        let assertion = lease.capture_lease_assertion()?;
        let input = FinalizationInput::new(
            &*self.hooks,
            RunId::new(format!("{key}:turn-{turn}"))?,
            session,
            settled,
            &facts,
            &signal,
            &self.fallback,
        )
        .with_clock(&**self.store.clock())
        .with_try_timeout(Duration::from_secs(30))
        .with_admission(Arc::new(move || assertion.check()));
        let prepared = prepare_terminal_with_settled_turn_finalization(&input)
            .await
            .map_err(|e| Error::other(format!("finalization failed: {e}")))?;
        let answer = prepared.assistant_texts.join("\n");
        let finalization = match prepared.outcome {
            FinalizationOutcome::Answered => {
                self.mirror(key, turn, "assistant", TranscriptRole::Assistant, &answer)
                    .await?;
                Finalization::Succeeded
            }
            _ => Finalization::FellBack {
                reason: prepared
                    .events
                    .iter()
                    .rev()
                    .find_map(|event| match event {
                        DiagnosticEvent::RunError { message } => Some(message.clone()),
                        _ => None,
                    })
                    .unwrap_or_else(|| prepared.outcome.as_str().to_owned()),
            },
        };
        let record = match &finalization {
            Finalization::Succeeded => format!("{FINALIZATION_PREFIX} succeeded"),
            Finalization::FellBack { reason } => {
                format!("{FINALIZATION_PREFIX} fell back to the host answer ({reason})")
            }
        };
        self.mirror(key, turn, "finalization", TranscriptRole::System, &record)
            .await?;
        let answer = match (&finalization, answer.is_empty()) {
            (Finalization::FellBack { .. }, true) => FALLBACK_TEXT.to_owned(),
            _ => answer,
        };
        Ok((answer, finalization))
    }

    async fn mirror(
        &self,
        key: &SessionKey,
        turn: u64,
        part: &str,
        role: TranscriptRole,
        text: &str,
    ) -> Result<(), Error> {
        let entry =
            NewTranscriptEntry::new(role, text).with_idempotency_key(format!("turn-{turn}-{part}"));
        self.store.append_transcript(key, entry).await.map(|_| ())
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
        let threads = self.bound_threads(keys).await?;
        let deleted = self.host_sessions().delete_sessions(keys).await?;
        for thread in threads {
            self.runtime.close_thread(&thread);
        }
        Ok(deleted)
    }

    /// The native threads bound to `keys`' sessions.
    pub async fn bound_threads(&self, keys: &[SessionKey]) -> Result<Vec<String>, Error> {
        let mut threads = Vec::new();
        for key in keys {
            let entry = self.entry(key).await?;
            if let Some(b) = self.bindings.read(&Self::identity(&entry)).await? {
                threads.push(b.thread_id);
            }
        }
        Ok(threads)
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
