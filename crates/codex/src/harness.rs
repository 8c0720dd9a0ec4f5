//! The Codex harness: host sessions bound to Codex threads through the SDK's thread-binding
//! backend, one turn at a time under the binding's fenced lease.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tether_core::TerminalDiagnostic;
use tether_core::{
    AgentHarness, AgentMessage, AppendOutcome, AssertCurrent, AttemptParams, AttemptResult,
    AttemptTerminal, BindingStore, Clock, ContentBlock, Error, HarnessId, HostSessionRead,
    HostSessionStore, LeaseConfig, MessageRole, MutationRun, Namespace, QuarantineStore,
    ResetParams, ResetReason, SessionContextResetHook, SessionContextResetParams,
    SessionDeletionHook, SessionDeletionParams, SessionKey, SettledTurnFinalizer, ToolMeta, Usage,
};
use tether_harness_sdk::backend::{
    BindingIdentity, ThreadBinding, ThreadBindingRecord, ThreadBindingStore, ThreadPin,
    WriteOptions,
};
use tether_harness_sdk::generation::{BindingAuthority, GenerationAuthority};
use tether_harness_sdk::hooks::ThreadBindingHarness;
use tether_harness_sdk::lifecycle::LeaseAssertion;
use tether_harness_sdk::results::mirror::{
    OriginalInputCommit, UserTurnTranscriptRecorder, restore_prepared_user_turn_meta,
};
use tether_harness_sdk::results::terminal::{
    FingerprintIdentity, MutationFacts, OwnerMutation, TerminalObserver, ToolFailure, ToolOutcome,
    ToolTerminalObservation, is_read_only_command, terminal_outcome_accumulator,
};
use tokio::sync::{mpsc, watch};
use tracing::Instrument as _;

use crate::client::{CodexAppServer, CodexClient, ServerEvent, ServerRequest};
use crate::error::CodexError;
use crate::finalize::CodexFinalizerRuntime;
use crate::host::{
    AdmissionGuard, ApprovalDecision, ApprovalKind, ApprovalPolicy, ApprovalRequest,
    HostTranscript, MirrorEntry, NoTools, RefuseAll, RunAdmission, ToolCall, ToolExecutor,
};
use crate::ids::{ThreadId, TurnId};
use crate::native::{CLEANUP, CleanupScope, CodexThreads, NativeCleanup, PendingCleanup};
use crate::protocol::{
    ApprovalRequestParams, DynamicToolCallParams, DynamicToolCallResponse, ItemNotification,
    ListedTurn, ThreadForkParams, ThreadItem, ThreadRefParams, ThreadResponse, ThreadResumeParams,
    ThreadStartParams, ThreadTurnsListParams, ThreadTurnsListResponse, ThreadUnsubscribeParams,
    TokenUsageNotification, ToolContentItem, TurnInterruptParams, TurnNotification,
    TurnStartParams, TurnStartResponse, UserInput, method,
};
use tether_finalizer::BoundedTurnFinalizer;

/// The binding namespace of the Codex harness.
pub const NAMESPACE: &str = "codex-threads";

/// The harness id.
pub const HARNESS_ID: &str = "codex";

/// How long an interrupted turn may take to report `turn/completed`.
const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

/// The longest wait a deadline stands for: a caller's timeout above it (`Duration::MAX` as
/// "no limit", say) waits this long instead of overflowing the clock.
const LONGEST_WAIT: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// The instant `wait` from now, with `wait` capped at [`LONGEST_WAIT`]: adding any duration a
/// caller passes never panics.
fn deadline_after(wait: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + wait.min(LONGEST_WAIT)
}

/// How new Codex threads are configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSettings {
    /// Working directory (absolute).
    pub cwd: String,
    /// Model, when pinned.
    pub model: Option<String>,
    /// Sandbox mode: `read-only` (default), `workspace-write` or `danger-full-access`.
    pub sandbox: String,
    /// When Codex asks for approval: `on-request` (default; the host policy answers),
    /// `untrusted` or `never`.
    pub approval_policy: String,
    /// Extra developer instructions.
    pub developer_instructions: Option<String>,
}

impl ThreadSettings {
    /// Defaults for `cwd`: read-only sandbox, approvals on request.
    pub fn new(cwd: impl Into<String>) -> Self {
        Self {
            cwd: cwd.into(),
            model: None,
            sandbox: "read-only".to_owned(),
            approval_policy: "on-request".to_owned(),
            developer_instructions: None,
        }
    }
}

/// Cancels a turn.
///
/// Cancelled before the turn started in Codex (before [`CodexHarness::run_turn`] took the
/// session's lease, while it waited for it, or while it resolved the session's thread), the
/// turn never starts: `run_turn` fails with [`CodexError::CancelledBeforeStart`]. Cancelled
/// once it started, the turn is interrupted (`turn/interrupt`) and ends
/// [`AttemptTerminal::Aborted`].
#[derive(Debug, Clone)]
pub struct TurnCancel {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for TurnCancel {
    fn default() -> Self {
        Self::new()
    }
}

impl TurnCancel {
    /// A fresh, not cancelled handle.
    pub fn new() -> Self {
        Self {
            tx: Arc::new(watch::channel(false).0),
        }
    }

    /// Requests cancellation.
    pub fn cancel(&self) {
        self.tx.send_replace(true);
    }

    /// Whether cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        *self.tx.borrow()
    }

    /// Resolves once cancellation is requested (at once when it was already).
    async fn cancelled(&self) {
        // The sender lives as long as `self`, so the wait cannot fail; if it did, the turn
        // would simply not be cancelled here.
        if self.subscribe().wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// [`CodexError::CancelledBeforeStart`] when cancellation was requested; `stage` says
    /// where the turn was, for the log.
    fn refuse_start(&self, stage: &str) -> Result<(), CodexError> {
        if self.is_cancelled() {
            return Err(not_started(stage));
        }
        Ok(())
    }

    fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}

/// The error of a turn cancelled before it started, logged with `stage` (where it was).
fn not_started(stage: &str) -> CodexError {
    tracing::info!(
        stage,
        "the codex turn was cancelled before it started; turn/start is not sent"
    );
    CodexError::CancelledBeforeStart
}

/// Cancels a turn whose caller dropped [`CodexHarness::run_turn`]'s future; disarmed (`None`)
/// once the turn's task answered.
struct CancelOnDrop(Option<TurnCancel>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(cancel) = self.0.take() {
            tracing::info!("the caller stopped waiting for the codex turn; cancelling it");
            cancel.cancel();
        }
    }
}

/// One turn to run.
#[derive(Clone)]
pub struct TurnRequest {
    /// The attempt (run id, session target with its key, prompt, timeout).
    pub params: AttemptParams,
    /// The host's prepared user message (with its operational metadata), restored onto the
    /// mirrored user item.
    pub prepared_user_message: Option<Value>,
    /// Cancellation: before the turn started in Codex it never starts
    /// ([`CodexError::CancelledBeforeStart`]); after, it is interrupted (see [`TurnCancel`]).
    pub cancel: Option<TurnCancel>,
    /// The host authority (checked by the lifecycle around its writes).
    pub assert_current: Option<AssertCurrent>,
}

impl fmt::Debug for TurnRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TurnRequest")
            .field("params", &self.params)
            .field("prepared_user_message", &self.prepared_user_message)
            .finish_non_exhaustive()
    }
}

impl TurnRequest {
    /// A request for `params` with nothing else.
    pub fn new(params: AttemptParams) -> Self {
        Self {
            params,
            prepared_user_message: None,
            cancel: None,
            assert_current: None,
        }
    }
}

/// The terminal report of one host tool call, as the accumulator resolved it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolReport {
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The arguments Codex sent.
    pub arguments: Value,
    /// The arguments that actually executed (host-adjusted when the host recorded so).
    pub executed_arguments: Option<serde_json::Map<String, Value>>,
    /// Whether the implementation may have started.
    pub execution_started: bool,
    /// Success or failure.
    pub outcome: ToolOutcome,
    /// Whether the call may have had side effects.
    pub side_effect_evidence: bool,
    /// The error text of a failure.
    pub error: Option<String>,
    /// `true` for Codex's own command and file-change items (native mutations).
    pub native: bool,
}

/// One mirrored item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorReport {
    /// The native item id.
    pub item_id: String,
    /// The role it was mirrored as.
    pub role: MessageRole,
    /// `false` when the entry already existed (a repeat).
    pub appended: bool,
}

/// One answered approval request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalReport {
    /// The protocol method.
    pub method: String,
    /// The decision sent.
    pub decision: ApprovalDecision,
}

/// What one turn did.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    /// The Codex thread the session is bound to.
    pub thread_id: ThreadId,
    /// The turn.
    pub turn_id: TurnId,
    /// A thread was started (and bound) for this turn.
    pub started_thread: bool,
    /// The thread the session was bound to when Codex no longer had it (`thread/resume`
    /// answered "no rollout found": the thread was deleted, or the app-server runs over
    /// another `CODEX_HOME` than the one that ran it). Its binding was cleared and this turn
    /// runs on a new thread (`started_thread`), without that thread's native history (the
    /// host transcript still has it). `None` otherwise.
    pub lost_thread: Option<ThreadId>,
    /// When the new thread is a fork carrying the session's kept turns (after a context
    /// reset): the thread they came from.
    pub continued_from: Option<ThreadId>,
    /// The bound thread was loaded with `thread/resume` (every turn after the first: the
    /// thread is unloaded when a turn ends, so whichever host holds the lease next resumes it).
    pub resumed_thread: bool,
    /// The lease epoch held while the turn ran (the fencing token).
    pub lease_epoch: u64,
    /// The attempt result (terminal, texts, messages, tool metas, media, `last_tool_error`).
    pub attempt: AttemptResult,
    /// Terminal reports of every tool and native mutation, in order.
    pub tools: Vec<ToolReport>,
    /// Every mirrored item, in order.
    pub mirrored: Vec<MirrorReport>,
    /// Every answered approval request.
    pub approvals: Vec<ApprovalReport>,
    /// The "original input committed" notification: set only when the user item was freshly
    /// appended (never for a repeat) and the message is an external user's visible input.
    pub original_input_committed: Option<OriginalInputCommit>,
    /// Codex's own `error` notifications during the turn, in order (a repeat of the one
    /// before it is kept once, at most [`CODEX_ERRORS_KEPT`], the newest): why a turn failed
    /// or, when Codex kept retrying (a model provider it cannot reach: "Reconnecting…"), why
    /// it timed out. Empty when Codex reported none.
    pub codex_errors: Vec<String>,
}

/// How many of Codex's error notifications a [`TurnOutcome`] keeps (the newest).
pub const CODEX_ERRORS_KEPT: usize = 20;

impl TurnOutcome {
    /// The last assistant text of the turn.
    pub fn reply(&self) -> Option<&str> {
        self.attempt.assistant_texts.last().map(String::as_str)
    }

    /// What this turn tells the settled-turn gate of `tether-finalizer`
    /// ([`TurnFacts`](tether_finalizer::TurnFacts)): its tool items, each with its call's
    /// metadata, and the last assistant message of the attempt (the tool-call batch of a
    /// tool-only turn). Every other fact keeps its default; the host sets those it knows
    /// (what triggered the run, whether a reply is expected, how replies are delivered).
    ///
    /// The items counted are those that reported a terminal outcome ([`TurnOutcome::tools`]),
    /// all settled: meant for a turn that completed (`attempt.terminal` is `Ok`). A failed or
    /// interrupted turn may have left items without one, which this cannot count.
    pub fn turn_facts(&self) -> tether_finalizer::TurnFacts {
        tether_finalizer::TurnFacts::settled_tools(
            self.tools
                .iter()
                .map(|tool| tether_finalizer::ToolCallMeta {
                    call_id: Some(tool.call_id.clone()),
                    tool_name: tool.tool.clone(),
                    is_error: tool.outcome == ToolOutcome::Failure,
                    ..tether_finalizer::ToolCallMeta::default()
                })
                .collect(),
            self.attempt
                .messages_snapshot
                .iter()
                .rev()
                .find(|m| m.role == MessageRole::Assistant)
                .cloned(),
        )
    }
}

/// Builds a [`CodexHarness`].
#[derive(Debug)]
pub struct CodexHarnessBuilder {
    server: Arc<CodexAppServer>,
    store: Arc<dyn BindingStore>,
    host_sessions: Arc<dyn HostSessionStore>,
    transcript: Arc<dyn HostTranscript>,
    tools: Arc<dyn ToolExecutor>,
    approvals: Arc<dyn ApprovalPolicy>,
    settings: ThreadSettings,
    holder: Option<String>,
    lease: LeaseConfig,
    clock: Option<Arc<dyn Clock>>,
    quarantine: Option<Arc<dyn QuarantineStore>>,
    bindings: Option<ThreadBindingStore>,
    process_per_turn: bool,
    admission: Option<Arc<dyn RunAdmission>>,
}

impl CodexHarnessBuilder {
    /// The thread-binding store to keep the bindings in (over [`NAMESPACE`], on the builder's
    /// binding store), instead of building one: pass the store the rest of the host writes
    /// this namespace through, so that a write through it inside this harness's turn lease is
    /// the holder's own (two stores over one namespace are two lease owners, and the second
    /// would wait behind the first's lease). Its holder, clock, lease timing and quarantine
    /// then apply: a later [`Self::holder`], [`Self::clock`], [`Self::lease_config`] or
    /// [`Self::quarantine`] drops the store given here (the harness then builds its own, with
    /// those settings: a second lease owner of the namespace). `build` refuses a store of
    /// another namespace.
    #[must_use]
    pub fn bindings(mut self, bindings: ThreadBindingStore) -> Self {
        self.bindings = Some(bindings);
        self
    }

    /// The clock of every lease decision (default: the system clock). Hosts sharing a
    /// database pass the same clock they all use (the database server's, on PostgreSQL).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self.bindings = None;
        self
    }

    /// Records a key whose write outcome is unknown durably, so every process refuses it
    /// until an operator releases it (default: blocked in this process only).
    #[must_use]
    pub fn quarantine(mut self, quarantine: Arc<dyn QuarantineStore>) -> Self {
        self.quarantine = Some(quarantine);
        self.bindings = None;
        self
    }

    /// Runs every turn on its own app-server process, stopped before the lease is released.
    ///
    /// Codex lets one process write a thread and releases that writer only when the process
    /// exits (`thread/unsubscribe` does not). With the shared process (the default) a thread
    /// stays loaded in this host's app-server, so another live host process cannot take the
    /// session over (its `thread/resume` is refused with [`CodexError::WriterHeldElsewhere`]).
    /// Hosts that share sessions through one database turn this on so the native writer
    /// follows the lease.
    #[must_use]
    pub fn process_per_turn(mut self, enabled: bool) -> Self {
        self.process_per_turn = enabled;
        self
    }

    /// The host's record of runs in flight (default: none): every turn of a session, and every
    /// compaction, is admitted there while it runs, so the host's deletions and resets of the
    /// session are refused meanwhile instead of racing it. A turn runs on a task of its own and
    /// stays admitted until that task ended, also when the caller dropped
    /// [`CodexHarness::run_turn`]'s future or the turn failed or panicked; a compaction
    /// ([`CodexHarness::compact`]) also runs on a task of its own and stays admitted until it
    /// ended. Admissions are counted, so a host that
    /// also admits the run around its own `run_turn` call changes nothing (the session is idle
    /// once both ended). `tether_host::Host::codex_harness` sets the host's own.
    #[must_use]
    pub fn admission(mut self, admission: Arc<dyn RunAdmission>) -> Self {
        self.admission = Some(admission);
        self
    }

    /// The host's tools (default: none).
    #[must_use]
    pub fn tools(mut self, tools: Arc<dyn ToolExecutor>) -> Self {
        self.tools = tools;
        self
    }

    /// The approval policy (default: [`RefuseAll`]).
    #[must_use]
    pub fn approvals(mut self, approvals: Arc<dyn ApprovalPolicy>) -> Self {
        self.approvals = approvals;
        self
    }

    /// Thread settings (default: [`ThreadSettings::new`] in the current directory).
    #[must_use]
    pub fn settings(mut self, settings: ThreadSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The label of this host's leases.
    #[must_use]
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self.bindings = None;
        self
    }

    /// Lease timings (default: [`LeaseConfig::default`]).
    #[must_use]
    pub fn lease_config(mut self, lease: LeaseConfig) -> Self {
        self.lease = lease;
        self.bindings = None;
        self
    }

    /// Registers the namespace on the store and builds the harness.
    pub async fn build(self) -> Result<CodexHarness, CodexError> {
        let ns = Namespace::new(NAMESPACE).map_err(Error::from)?;
        self.store
            .register_namespace(ThreadBindingStore::namespace_config(ns.clone()))
            .await?;
        let bindings = match self.bindings {
            Some(bindings) if *bindings.namespace() == ns => bindings,
            Some(bindings) => {
                return Err(Error::invalid_argument(format!(
                    "the codex harness keeps its bindings in namespace {ns}, not {}",
                    bindings.namespace()
                ))
                .into());
            }
            None => {
                let mut bindings =
                    ThreadBindingStore::builder(self.store.clone(), ns).lease_config(self.lease);
                if let Some(holder) = self.holder {
                    bindings = bindings.holder(holder);
                }
                if let Some(clock) = self.clock {
                    bindings = bindings.clock(clock);
                }
                if let Some(quarantine) = self.quarantine {
                    bindings = bindings.quarantine(quarantine);
                }
                bindings.build()?
            }
        };
        let id = HarnessId::new(HARNESS_ID).map_err(Error::from)?;
        let threads = Arc::new(
            CodexThreads::new(
                self.server.clone(),
                self.process_per_turn,
                self.store.clone(),
            )
            .await?,
        );
        let hooks = Arc::new(
            ThreadBindingHarness::new(
                id,
                bindings.clone(),
                GenerationAuthority::new(self.host_sessions.clone()),
            )
            .with_threads(threads.clone()),
        );
        let finalizer = CodexFinalizerRuntime::for_any_session(
            self.server.clone(),
            self.settings.cwd.clone(),
            self.transcript.clone(),
        )
        .recording_answers(threads.clone())
        .into_finalizer();
        Ok(CodexHarness {
            inner: Arc::new(Inner {
                finalizer,
                server: self.server,
                bindings,
                hooks,
                threads,
                host_sessions: self.host_sessions,
                transcript: self.transcript,
                tools: self.tools,
                approvals: self.approvals,
                settings: self.settings,
                process_per_turn: self.process_per_turn,
                admission: self.admission,
            }),
        })
    }
}

#[derive(Debug)]
struct Inner {
    /// What `AgentHarness::settled_turn_finalizer` offers: mirrors into each try's session.
    finalizer: BoundedTurnFinalizer<CodexFinalizerRuntime>,
    server: Arc<CodexAppServer>,
    bindings: ThreadBindingStore,
    hooks: Arc<ThreadBindingHarness>,
    threads: Arc<CodexThreads>,
    /// The host's sessions: a turn is refused for a session the host does not have.
    host_sessions: Arc<dyn HostSessionStore>,
    transcript: Arc<dyn HostTranscript>,
    tools: Arc<dyn ToolExecutor>,
    approvals: Arc<dyn ApprovalPolicy>,
    settings: ThreadSettings,
    process_per_turn: bool,
    /// The host's record of runs in flight, when it gave one.
    admission: Option<Arc<dyn RunAdmission>>,
}

impl Inner {
    /// Admits a run of `session` in the host's record of runs in flight (when the host gave
    /// one and the run names its session).
    fn admit(&self, session: Option<&SessionKey>) -> Option<AdmissionGuard> {
        let admission = self.admission.as_ref()?;
        let session = session?;
        tracing::debug!(session = %session, "run admitted in the host's record of runs");
        Some(admission.admit(session))
    }
}

/// The Codex app-server harness. Cloning shares it.
#[derive(Debug, Clone)]
pub struct CodexHarness {
    inner: Arc<Inner>,
}

impl CodexHarness {
    /// Starts building a harness driving `server`, keeping bindings in `store` (the host's
    /// binding store), reading generations from `host_sessions` and mirroring into
    /// `transcript`.
    pub fn builder(
        server: Arc<CodexAppServer>,
        store: Arc<dyn BindingStore>,
        host_sessions: Arc<dyn HostSessionStore>,
        transcript: Arc<dyn HostTranscript>,
    ) -> CodexHarnessBuilder {
        CodexHarnessBuilder {
            server,
            store,
            host_sessions,
            transcript,
            tools: Arc::new(NoTools),
            approvals: Arc::new(RefuseAll),
            settings: ThreadSettings::new("."),
            holder: None,
            lease: LeaseConfig::default(),
            clock: None,
            quarantine: None,
            bindings: None,
            process_per_turn: false,
            admission: None,
        }
    }

    /// The thread-binding store (binding records live here).
    pub fn bindings(&self) -> &ThreadBindingStore {
        &self.inner.bindings
    }

    /// The supervised app-server.
    pub fn server(&self) -> &Arc<CodexAppServer> {
        &self.inner.server
    }

    /// The settled-turn finalizer of `session_key`: a [`BoundedTurnFinalizer`] answering once
    /// through a capability-free Codex run on a private app-server process (see
    /// [`CodexFinalizerRuntime`](crate::CodexFinalizerRuntime)), mirroring the answer into the host transcript.
    pub fn settled_turn_finalizer(
        &self,
        session_key: SessionKey,
    ) -> BoundedTurnFinalizer<CodexFinalizerRuntime> {
        CodexFinalizerRuntime::new(
            self.inner.server.clone(),
            self.inner.settings.cwd.clone(),
            self.inner.transcript.clone(),
            session_key,
        )
        .recording_answers(self.inner.threads.clone())
        .into_finalizer()
    }

    /// Native cleanups (`thread/delete`, `thread/archive`) that are due after their host
    /// operation committed (failed, or not yet run) and wait for
    /// [`Self::retry_native_cleanup`]. They are read from the host's binding store, so they
    /// outlive this process and are shared by every host process over the same database.
    pub async fn pending_native_cleanup(&self) -> Result<Vec<PendingCleanup>, CodexError> {
        Ok(self.inner.threads.pending().await?)
    }

    /// Runs the due native cleanups again, including those an earlier host process left
    /// (never restoring any binding); returns how many are still due. A deletion Codex refuses
    /// because a fork's history still references the thread runs again in the same call once
    /// the others ran, so one retry deletes a whole chain of forks.
    pub async fn retry_native_cleanup(&self) -> Result<usize, CodexError> {
        let span = tracing::info_span!("codex.retry_native_cleanup");
        Ok(self.inner.threads.retry_pending().instrument(span).await?)
    }

    /// The Codex thread bound to the session of `params`, if any.
    pub async fn bound_thread(
        &self,
        params: &AttemptParams,
    ) -> Result<Option<ThreadId>, CodexError> {
        let identity = identity(params);
        Ok(self
            .inner
            .bindings
            .read(&identity)
            .await?
            .map(|b| ThreadId::new(b.thread_id)))
    }

    /// Runs one turn under the session's lease: binds a new Codex thread (or resumes the bound
    /// one), streams the turn, mirrors completed items, runs host tools and answers approvals.
    ///
    /// A turn Codex ran to its end is `Ok`, however it ended: a model or provider failure is
    /// `attempt.terminal` [`AttemptTerminal::Failed`] (with Codex's message), an interrupted
    /// turn [`AttemptTerminal::Aborted`]; the thread goes on. An `Err` means the turn could
    /// not be run or finished as a turn.
    ///
    /// A second host asking for the same session waits behind the lease for the lease wait
    /// budget and then fails with [`tether_core::Error::LeaseTimeout`]: two hosts never drive
    /// one thread. When the app-server dies mid-turn the error is
    /// [`CodexError::ServerExited`]; only whole items and the results of the host tools that
    /// finished were mirrored, the error's [`CodexError::tools_ran`] lists the tools the turn
    /// had run, the binding is unchanged, and the next turn resumes the same thread on a new
    /// process.
    ///
    /// A run whose [`TurnRequest::cancel`] is cancelled before its Codex turn started — already
    /// when `run_turn` is called, while it waits behind another holder's lease on the session,
    /// or while it resolves the session's thread — never starts one: it fails with
    /// [`CodexError::CancelledBeforeStart`] without sending `turn/start`, so nothing reaches the
    /// model and nothing is mirrored into the host transcript; the lease, when it was taken, is
    /// released, and the binding is as it was (only a first turn cancelled while its new
    /// thread was being started leaves that thread bound, with no turn on it). The
    /// cancellation is checked before the lease is taken, while waiting for it, once it is
    /// held, and right before `turn/start`; a cancellation after that interrupts the started
    /// turn, which ends `Ok` with [`AttemptTerminal::Aborted`].
    ///
    /// The turn runs on a task of its own. A caller that stops waiting (drops this future: a
    /// timeout around it, a client that disconnected) cancels it as [`TurnCancel`] does, and
    /// the task still ends it properly: Codex's turn interrupted, whatever completed mirrored
    /// into the host transcript, the session's lease released. A panic of a host tool is that
    /// tool's failure (reported, its effect unknown); the turn goes on.
    ///
    /// With a [`CodexHarnessBuilder::admission`] (the harness `tether_host::Host::codex_harness`
    /// builds has the host's), the turn is admitted in the host's record of runs in flight from
    /// this call until its task ended, however it ended: the host's deletion or reset of the
    /// session is refused meanwhile.
    pub async fn run_turn(&self, mut request: TurnRequest) -> Result<TurnOutcome, CodexError> {
        let span = tracing::info_span!(
            "codex.turn",
            run_id = %request.params.run_id,
            session_id = %request.params.session.session_id,
        );
        let cancel = request.cancel.get_or_insert_with(TurnCancel::new).clone();
        let harness = self.clone();
        // Held by the turn's task, so the turn stays admitted until the task ends, also when
        // this future is dropped or the task panics.
        let admitted = self
            .inner
            .admit(request.params.session.session_key.as_ref());
        let task = tokio::spawn(
            async move {
                let _admitted = admitted;
                harness.run_turn_inner(request).await
            }
            .instrument(span),
        );
        let mut on_drop = CancelOnDrop(Some(cancel));
        let joined = task.await;
        on_drop.0 = None;
        match joined {
            Ok(result) => result,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(join) => Err(CodexError::protocol(format!(
                "the turn's task stopped before it finished: {join}"
            ))),
        }
    }

    async fn run_turn_inner(&self, request: TurnRequest) -> Result<TurnOutcome, CodexError> {
        let Some(session_key) = request.params.session.session_key.clone() else {
            return Err(CodexError::BindingRefused {
                detail: "a Codex turn needs a host session key to mirror into".to_owned(),
            });
        };
        // `run_turn` always sets one.
        let cancel = request.cancel.clone().unwrap_or_default();
        cancel.refuse_start("before the session's lease")?;
        let identity = identity(&request.params);
        let assert_current = request.assert_current.clone();
        let inner = self.inner.clone();
        // Set once the lease is held and the turn runs under it: from then on the turn itself
        // answers a cancellation (before `turn/start`, or with `turn/interrupt`).
        let leased = Arc::new(AtomicBool::new(false));
        let under_lease = leased.clone();
        let scope =
            self.inner
                .bindings
                .with_lease(&identity, false, assert_current.clone(), |lease| {
                    under_lease.store(true, Ordering::SeqCst);
                    let identity = identity.clone();
                    async move {
                        let assertion = lease.capture_lease_assertion()?;
                        Ok(inner
                            .turn_under_lease(&identity, &session_key, request, assertion)
                            .await)
                    }
                });
        tokio::pin!(scope);
        let result = tokio::select! {
            biased;
            result = &mut scope => result,
            () = cancel.cancelled() => {
                if !leased.load(Ordering::SeqCst) {
                    // Still waiting for the lease: the scope is dropped, which ends it (an
                    // acquisition that went through meanwhile is released by its token).
                    return Err(not_started("waiting for the session's lease"));
                }
                scope.await
            }
        };
        match result {
            Ok(inner) => inner,
            Err(error) => Err(CodexError::Lifecycle(error)),
        }
    }
}

impl CodexHarness {
    /// Compacts the bound Codex thread's model-visible history (`thread/compact/start`) under
    /// the session's lease and waits for the compaction turn to end.
    ///
    /// Compaction is a transfer, never a deletion: the binding and the thread stay, no
    /// context-reset hook runs, and when the host moves the session to a new physical session
    /// id under the same key the next turn adopts the recorded predecessor's binding and
    /// resumes the same thread. Fails with [`CodexError::BindingRefused`] when no thread is
    /// bound, and with [`CodexError::TurnFailed`] when Codex reports the compaction failed.
    ///
    /// The compaction runs on a task of its own, as a turn does: a caller that stops waiting
    /// (drops this future) does not stop it. It ends when Codex's compaction turn ends (or its
    /// timeout passes), holding the session's lease until then, and with a
    /// [`CodexHarnessBuilder::admission`] it is admitted in the host's record of runs in flight
    /// for exactly that long.
    pub async fn compact(&self, params: &AttemptParams) -> Result<ThreadId, CodexError> {
        let span = tracing::info_span!("codex.compact", session_id = %params.session.session_id);
        let admitted = self.inner.admit(params.session.session_key.as_ref());
        let inner = self.inner.clone();
        let params = params.clone();
        let task = tokio::spawn(
            async move {
                let _admitted = admitted;
                inner.compact_leased(&params).await
            }
            .instrument(span),
        );
        match task.await {
            Ok(result) => result,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(join) => Err(CodexError::protocol(format!(
                "the compaction's task stopped before it finished: {join}"
            ))),
        }
    }
}

impl Inner {
    /// [`CodexHarness::compact`]'s work on its task: the compaction under the session's lease.
    async fn compact_leased(
        self: &Arc<Self>,
        params: &AttemptParams,
    ) -> Result<ThreadId, CodexError> {
        let identity = identity(params);
        let inner = Arc::clone(self);
        let timeout = params.timeout;
        let result = self
            .bindings
            .with_lease(&identity, false, None, |lease| {
                let identity = identity.clone();
                async move {
                    let assertion = lease.capture_lease_assertion()?;
                    Ok(inner
                        .compact_under_lease(&identity, assertion, timeout)
                        .await)
                }
            })
            .await;
        match result {
            Ok(inner) => inner,
            Err(error) => Err(CodexError::Lifecycle(error)),
        }
    }
}

fn identity(params: &AttemptParams) -> BindingIdentity {
    BindingIdentity::session(
        params.session.agent_id.clone(),
        params.session.session_id.clone(),
        params.session.session_key.clone(),
    )
}

/// The thread a turn runs on.
struct Bound {
    thread_id: String,
    started: bool,
    resumed: bool,
    /// The thread this one was forked from (its kept turns), when it was.
    continued_from: Option<String>,
    /// The bound thread Codex no longer had, replaced by this one.
    lost: Option<String>,
    model: String,
    model_provider: String,
}

/// The state of one running turn.
struct TurnState {
    thread_id: String,
    session_key: SessionKey,
    prepared_user_message: Option<Value>,
    observer: TerminalObserver,
    facts: tether_harness_sdk::results::terminal::HostToolFacts,
    attempt: AttemptResult,
    tools: Vec<ToolReport>,
    mirrored: Vec<MirrorReport>,
    /// The Codex turn of the item being handled (from its `item/completed`), which scopes its
    /// mirror key.
    item_turn: String,
    /// How often each `(turn, item id)` was mirrored in this turn: a repeated id is another
    /// item (a provider numbering its ids per response), mirrored under its own key.
    item_ids: std::collections::HashMap<(String, String), u32>,
    /// The `(turn, call id)` of host tool results mirrored when the tool finished, before
    /// Codex reported their items: the item's own report then writes nothing again.
    tool_results_mirrored: std::collections::HashSet<(String, String)>,
    approvals: Vec<ApprovalReport>,
    usage: Usage,
    /// The turn's lease, checked before every native side effect the host answers for.
    lease: LeaseAssertion,
    /// Set when the lease was found lost mid-turn: nothing more runs, the turn is interrupted.
    lease_lost: Option<Error>,
    /// Decides the one-time "original input committed" notification of the user item.
    recorder: UserTurnTranscriptRecorder,
    original_input_committed: Option<OriginalInputCommit>,
    /// Codex's `error` notifications (see [`TurnOutcome::codex_errors`]).
    codex_errors: Vec<String>,
}

impl Inner {
    async fn turn_under_lease(
        &self,
        identity: &BindingIdentity,
        session_key: &SessionKey,
        request: TurnRequest,
        lease: LeaseAssertion,
    ) -> Result<TurnOutcome, CodexError> {
        // Before any app-server process is started or asked for anything.
        if let Some(cancel) = &request.cancel {
            cancel.refuse_start("holding the session's lease")?;
        }
        self.host_session_exists(session_key).await?;
        if self.process_per_turn {
            let client = Arc::new(self.server.dedicated().await?);
            let result = self
                .turn_on_client(&client, identity, session_key, request, lease.clone())
                .await;
            // The writer is released with the process, before the lease is.
            client.stop();
            client.wait_exit(Duration::from_secs(10)).await;
            return result;
        }
        let client = self.server.client().await?;
        let result = self
            .turn_on_client(&client, identity, session_key, request, lease.clone())
            .await;
        if let Err(CodexError::Timeout { .. }) = &result {
            // A request that never got an answer: the process is hung; replace it.
            self.server.discard(&client).await;
        }
        result
    }

    async fn compact_under_lease(
        &self,
        identity: &BindingIdentity,
        lease: LeaseAssertion,
        timeout: Option<Duration>,
    ) -> Result<ThreadId, CodexError> {
        lease.check()?;
        let caller = BindingAuthority::caller(tether_core::always_current());
        if self
            .resolve_retiring(identity, &caller)
            .await?
            .binding
            .is_none()
        {
            return Err(CodexError::BindingRefused {
                detail: "no Codex thread is bound to this session; nothing to compact".to_owned(),
            });
        }
        let dedicated;
        let client = if self.process_per_turn {
            dedicated = Arc::new(self.server.dedicated().await?);
            dedicated.clone()
        } else {
            self.server.client().await?
        };
        let result = self
            .compact_on_client(&client, identity, &lease, timeout)
            .await;
        if self.process_per_turn {
            client.stop();
            client.wait_exit(Duration::from_secs(10)).await;
        }
        result
    }

    async fn compact_on_client(
        &self,
        client: &Arc<CodexClient>,
        identity: &BindingIdentity,
        lease: &LeaseAssertion,
        timeout: Option<Duration>,
    ) -> Result<ThreadId, CodexError> {
        let thread_id = self
            .bind_thread(client, identity, WriteOptions::default())
            .await?
            .thread_id;
        let _claim = self.threads.claim(&thread_id);
        lease.check()?;
        let mut events = client.subscribe(&thread_id);
        let result = self
            .await_compaction(client, &mut events, &thread_id, timeout)
            .await;
        client.unsubscribe(&thread_id);
        self.release_thread(client, &thread_id).await;
        result.map(|()| ThreadId::new(thread_id))
    }

    async fn await_compaction(
        &self,
        client: &CodexClient,
        events: &mut mpsc::Receiver<ServerEvent>,
        thread_id: &str,
        timeout: Option<Duration>,
    ) -> Result<(), CodexError> {
        let _: Value = client
            .request(
                method::THREAD_COMPACT_START,
                &ThreadRefParams {
                    thread_id: thread_id.to_owned(),
                },
            )
            .await?;
        let limit = timeout.unwrap_or(Duration::from_secs(300));
        let deadline = deadline_after(limit);
        loop {
            let event = tokio::time::timeout_at(deadline, events.recv())
                .await
                .map_err(|_| CodexError::timeout(method::THREAD_COMPACT_START, limit))?;
            let Some(event) = event else {
                return Err(client.lost());
            };
            match event {
                ServerEvent::Notification { method, params } => {
                    if method == method::TURN_COMPLETED {
                        let n: TurnNotification = parse(&method, params)?;
                        if n.turn.status == "completed" {
                            tracing::info!(thread_id, "codex thread compacted");
                            return Ok(());
                        }
                        return Err(CodexError::TurnFailed {
                            message: n
                                .turn
                                .error
                                .map(|e| e.message)
                                .unwrap_or_else(|| format!("compaction ended `{}`", n.turn.status)),
                        });
                    }
                    tracing::trace!(method, "codex notification during compaction");
                }
                ServerEvent::Request(request) => {
                    // A compaction grants nothing: no tool, approval or question is answered.
                    client
                        .reply_error(
                            &request,
                            -32000,
                            "compaction runs no tools and grants nothing",
                        )
                        .await?;
                }
            }
        }
    }

    async fn bind_thread(
        &self,
        client: &CodexClient,
        identity: &BindingIdentity,
        options: WriteOptions,
    ) -> Result<Bound, CodexError> {
        let settings = &self.settings;
        // Resolved under the host generation: a binding the verified, recorded predecessor
        // left under the same key (a compaction changed the physical session id) is adopted,
        // so the Codex thread continues; it is never treated as a context reset.
        let caller = BindingAuthority::caller(
            options
                .assert_current
                .clone()
                .unwrap_or_else(tether_core::always_current),
        );
        let resolved = self.resolve_retiring(identity, &caller).await?;
        let mut lost = None;
        if let Some(bound) = resolved.binding {
            let resumed: Result<ThreadResponse, CodexError> = client
                .request(
                    method::THREAD_RESUME,
                    &ThreadResumeParams {
                        thread_id: bound.thread_id.clone(),
                        cwd: bound.cwd.clone(),
                        approval_policy: settings.approval_policy.clone(),
                        sandbox: settings.sandbox.clone(),
                        exclude_turns: true,
                    },
                )
                .await;
            match resumed {
                Ok(response) => {
                    tracing::info!(thread_id = %bound.thread_id, "resumed the bound codex thread");
                    self.inject_due(client, identity, &bound.thread_id).await;
                    return Ok(Bound {
                        thread_id: bound.thread_id,
                        started: false,
                        resumed: true,
                        continued_from: None,
                        lost: None,
                        model: response.model,
                        model_provider: response.model_provider,
                    });
                }
                Err(CodexError::Rpc { message, .. }) if message.contains("active writer") => {
                    return Err(CodexError::WriterHeldElsewhere {
                        thread_id: bound.thread_id,
                    });
                }
                Err(error) if error.is_no_rollout() => {
                    self.clear_lost_binding(identity, &bound.thread_id, &options)
                        .await?;
                    lost = Some(bound.thread_id);
                }
                Err(other) => return Err(other),
            }
        }
        let mut continuation = self.threads.continuation(identity.key()).await?;
        if continuation.is_some()
            && resolved.previous_change == Some(tether_core::GenerationChange::Reset)
        {
            // The session was reset after its context reset and before any turn: the kept
            // turns are not this generation's (the reset's notification, which drops the
            // record, did not run: a crash after the host's COMMIT).
            tracing::info!(
                "a reset followed the session's context reset: its codex continuation is dropped"
            );
            continuation = None;
            self.finish_continuation(identity).await;
        }
        if let Some(previous) = &continuation
            && let Some(session_key) = identity.session_key()
            && let Some(bound) = self
                .continue_kept_turns(client, identity, session_key, previous, &options)
                .await?
        {
            self.finish_continuation(identity).await;
            self.drop_due(identity).await;
            return Ok(Bound { lost, ..bound });
        }
        let started: ThreadResponse = client
            .request(
                method::THREAD_START,
                &ThreadStartParams {
                    cwd: settings.cwd.clone(),
                    model: settings.model.clone(),
                    approval_policy: settings.approval_policy.clone(),
                    sandbox: settings.sandbox.clone(),
                    developer_instructions: settings.developer_instructions.clone(),
                    dynamic_tools: self.tools.tools(),
                },
            )
            .await?;
        let bound = self
            .record_binding(identity, started, None, options)
            .await?;
        tracing::info!(thread_id = %bound.thread_id, "bound a new codex thread");
        self.drop_due(identity).await;
        if continuation.is_some() {
            self.finish_continuation(identity).await;
        }
        Ok(Bound { lost, ..bound })
    }

    /// Clears the binding of `thread_id`, a thread Codex no longer has (its `thread/resume`
    /// answered "no rollout found"), with the turn's generation check, pinned to that thread,
    /// so the turn can start a new one. Refused when the session's generation no longer owns
    /// the row.
    async fn clear_lost_binding(
        &self,
        identity: &BindingIdentity,
        thread_id: &str,
        options: &WriteOptions,
    ) -> Result<(), CodexError> {
        tracing::warn!(
            thread_id,
            "codex has no rollout of the session's bound thread (deleted, or another CODEX_HOME): its native history is lost; the binding is cleared and the turn starts a new thread"
        );
        let pin = ThreadPin::thread(thread_id);
        if self
            .bindings
            .clear(identity, Some(&pin), options.clone())
            .await?
        {
            return Ok(());
        }
        Err(CodexError::BindingRefused {
            detail: format!(
                "codex no longer has the bound thread {thread_id}, but the session's generation refused to clear its binding"
            ),
        })
    }

    /// Resolves `identity`'s binding (the SDK's generation rules), and archives the thread of a
    /// binding another generation left under the key when the resolution cleared it — after a
    /// reset or a cut whose notification never ran (the host's process died after its COMMIT)
    /// — as the notification would have. A binding the resolution kept (a supervision binding,
    /// a row of a generation other than the recorded predecessor) is never archived.
    async fn resolve_retiring(
        &self,
        identity: &BindingIdentity,
        caller: &BindingAuthority,
    ) -> Result<tether_harness_sdk::generation::ResolvedBinding<ThreadBinding>, Error> {
        let bound_thread = |record: Option<ThreadBindingRecord>| {
            record
                .and_then(|record| record.binding().cloned())
                .map(|binding| binding.thread_id)
        };
        let left = self
            .bindings
            .record(identity)
            .await?
            .filter(|record| !identity.owns(record.session_id.as_ref()));
        let left = bound_thread(left);
        let resolved = self.hooks.resolve(identity, caller).await?;
        if let Some(left) = left
            && resolved
                .previous_change
                .is_some_and(|change| !change.continues_native_context())
            && bound_thread(self.bindings.record(identity).await?).as_deref() != Some(&left)
        {
            self.retire_left_thread(identity, &left).await;
        }
        Ok(resolved)
    }

    /// Archives `thread_id`, the thread of a binding the session's recorded predecessor left
    /// and the resolution cleared (a reset or a cut no harness was told of), unless another
    /// binding still runs on it. A failure is logged: the archive is then listed as a pending
    /// cleanup and retried like the reset's own.
    async fn retire_left_thread(&self, identity: &BindingIdentity, thread_id: &str) {
        match self
            .bindings
            .has_other_thread_owner(identity.key(), thread_id)
            .await
        {
            Ok(true) => return,
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(thread_id, %error, "could not check the left codex thread's other owners; it is not archived");
                return;
            }
        }
        tracing::info!(
            thread_id,
            "archiving the codex thread a reset generation no longer runs on (its reset's notification never ran)"
        );
        if let Err(error) = self.threads.archive_for(identity.key(), thread_id).await {
            tracing::warn!(thread_id, %error, "could not archive the codex thread a reset left; kept for a retry");
        }
    }

    /// Injects the items due into `thread_id`, the session's resumed thread, before the turn
    /// starts (an answer the settled-turn finalizer gave on its own thread, which this thread
    /// never saw); they are then no longer due. A failure is logged and they stay due for the
    /// next turn.
    async fn inject_due(&self, client: &CodexClient, identity: &BindingIdentity, thread_id: &str) {
        let items = match self.threads.injections(identity.key()).await {
            Ok(items) if !items.is_empty() => items,
            Ok(_) => return,
            Err(error) => {
                tracing::warn!(%error, "could not read the items due into the codex thread");
                return;
            }
        };
        let count = items.len();
        match client
            .request_value(
                method::THREAD_INJECT_ITEMS,
                &serde_json::json!({ "threadId": thread_id, "items": items }),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(
                    thread_id,
                    count,
                    "injected the finalized answers the codex thread had not seen"
                );
                if let Err(error) = self.threads.clear_injections(identity.key()).await {
                    tracing::warn!(%error, "could not remove the injected items' record; they may be injected again");
                }
            }
            Err(error) => {
                tracing::warn!(thread_id, %error, "could not inject the finalized answers into the codex thread; kept for the next turn");
            }
        }
    }

    /// Drops the items due into the session's previous thread: the session now runs on a
    /// thread of its own making (a new one, or a fork of the kept turns).
    async fn drop_due(&self, identity: &BindingIdentity) {
        if let Err(error) = self.threads.clear_injections(identity.key()).await {
            tracing::warn!(%error, "could not remove the items due into the previous codex thread");
        }
    }

    /// Removes the session's continuation record once its next thread is bound; a failure is
    /// logged (the record is then read again by a later unbound turn, which finds the session
    /// bound and never gets there).
    async fn finish_continuation(&self, identity: &BindingIdentity) {
        if let Err(error) = self.threads.clear_continuation(identity.key()).await {
            tracing::warn!(%error, "could not remove the session's codex continuation record");
        }
    }

    /// Writes the binding of a thread this turn started (or forked); refused when the
    /// session's generation no longer owns the row.
    async fn record_binding(
        &self,
        identity: &BindingIdentity,
        started: ThreadResponse,
        continued_from: Option<String>,
        options: WriteOptions,
    ) -> Result<Bound, CodexError> {
        let thread_id = started.thread.id;
        let mut binding = ThreadBinding::new(thread_id.clone(), self.settings.cwd.clone());
        binding.model = Some(started.model.clone());
        binding.model_provider = Some(started.model_provider.clone());
        if !self.bindings.set(identity, binding, options).await? {
            return Err(CodexError::BindingRefused {
                detail: format!(
                    "thread {thread_id} was started but the session's generation refused the binding"
                ),
            });
        }
        Ok(Bound {
            thread_id,
            started: true,
            resumed: false,
            continued_from,
            lost: None,
            model: started.model,
            model_provider: started.model_provider,
        })
    }

    /// A session whose context was reset (its binding invalidated by a committed rewind or
    /// branch switch, `previous` the thread it was bound to): the host transcript's active path
    /// says what is kept. Continues on a fork of the thread the newest kept entries came from,
    /// through the last turn the path keeps whole. `None` when there is nothing to carry over
    /// (a new thread is started).
    async fn continue_kept_turns(
        &self,
        client: &CodexClient,
        identity: &BindingIdentity,
        session_key: &SessionKey,
        previous: &str,
        options: &WriteOptions,
    ) -> Result<Option<Bound>, CodexError> {
        let keys = self.transcript.active_idempotency_keys(session_key).await?;
        let Some(kept) = crate::context::kept_items(keys.iter().map(String::as_str)) else {
            tracing::info!(
                previous_thread = previous,
                "the context reset kept no codex turn; starting a new thread"
            );
            return Ok(None);
        };
        let source = kept.thread_id.clone();
        let turns = match self.list_turns(client, &source).await {
            Ok(turns) => turns,
            Err(CodexError::Rpc { message, .. }) => {
                tracing::warn!(source_thread = %source, %message, "the codex thread of the kept turns cannot be read; starting a new thread without them");
                return Ok(None);
            }
            Err(other) => return Err(other),
        };
        let last_turn = match crate::context::last_kept_turn(&turns, &kept) {
            Ok(turn) => turn.to_owned(),
            Err(reason) => {
                tracing::warn!(source_thread = %source, ?reason, "no whole codex turn is kept; starting a new thread");
                return Ok(None);
            }
        };
        let settings = &self.settings;
        let params = ThreadForkParams {
            thread_id: source.clone(),
            last_turn_id: last_turn.clone(),
            cwd: settings.cwd.clone(),
            model: settings.model.clone(),
            approval_policy: settings.approval_policy.clone(),
            sandbox: settings.sandbox.clone(),
            developer_instructions: settings.developer_instructions.clone(),
            exclude_turns: true,
        };
        let forked: ThreadResponse = match client.request(method::THREAD_FORK, &params).await {
            Ok(forked) => forked,
            // The context reset archived the old thread after its COMMIT, and Codex forks no
            // archived thread: bring it back for the fork, then archive it again.
            Err(CodexError::Rpc { message, .. }) if message.contains("is archived") => {
                let _: Value = client
                    .request(
                        method::THREAD_UNARCHIVE,
                        &ThreadRefParams {
                            thread_id: source.clone(),
                        },
                    )
                    .await?;
                let forked = client.request(method::THREAD_FORK, &params).await;
                // A failed re-archive is logged and kept for a retry by `cleanup_or_keep`.
                let _ = self
                    .threads
                    .cleanup_or_keep(&source, NativeCleanup::Archive)
                    .await;
                forked?
            }
            Err(other) => return Err(other),
        };
        let bound = self
            .record_binding(identity, forked, Some(source.clone()), options.clone())
            .await?;
        tracing::info!(thread_id = %bound.thread_id, source_thread = %source, last_turn, "continued the session on a fork of its kept codex turns");
        Ok(Some(bound))
    }

    /// Every turn of `thread_id` with its items, oldest first.
    async fn list_turns(
        &self,
        client: &CodexClient,
        thread_id: &str,
    ) -> Result<Vec<ListedTurn>, CodexError> {
        let mut turns = Vec::new();
        let mut cursor = None;
        loop {
            let page: ThreadTurnsListResponse = client
                .request(
                    method::THREAD_TURNS_LIST,
                    &ThreadTurnsListParams {
                        thread_id: thread_id.to_owned(),
                        cursor: cursor.take(),
                        limit: 100,
                        sort_direction: "asc",
                        items_view: "full",
                    },
                )
                .await?;
            turns.extend(page.data);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(turns),
            }
        }
    }

    /// Refuses a turn for a session the host does not have (deleted, or never created), before
    /// Codex is asked for anything. Every turn is mirrored into its host session's transcript,
    /// and the mirror would refuse it too, but only once Codex reports the user's message: by
    /// then the turn has started and its request is on its way to the model. Checked under the
    /// session's lease, which a deletion of the session waits for.
    async fn host_session_exists(&self, session_key: &SessionKey) -> Result<(), CodexError> {
        match self.host_sessions.read_session(session_key).await {
            HostSessionRead::Current(_) => Ok(()),
            HostSessionRead::Missing => {
                Err(CodexError::Lifecycle(Error::session_not_found(session_key)))
            }
            HostSessionRead::Failed(error) => Err(CodexError::Lifecycle(error)),
            // A read this crate does not know yet: the mirror decides, as before.
            _ => Ok(()),
        }
    }

    async fn turn_on_client(
        &self,
        client: &Arc<CodexClient>,
        identity: &BindingIdentity,
        session_key: &SessionKey,
        request: TurnRequest,
        lease: LeaseAssertion,
    ) -> Result<TurnOutcome, CodexError> {
        let lease_epoch = lease.epoch().get();
        lease.check()?;
        let options = match &request.assert_current {
            Some(check) => WriteOptions::checked(check.clone()),
            None => WriteOptions::default(),
        };
        let Bound {
            thread_id,
            started: started_thread,
            resumed: resumed_thread,
            continued_from,
            lost: lost_thread,
            model,
            model_provider,
        } = self.bind_thread(client, identity, options).await?;
        // While the turn runs, a deletion of this thread is refused (before the host's
        // transaction and again at its commit).
        let _claim = self.threads.claim(&thread_id);
        let (observer, facts) = terminal_outcome_accumulator(
            request.params.run_id.to_string(),
            Arc::new(FingerprintIdentity),
        );
        let mut state = TurnState {
            thread_id: thread_id.clone(),
            session_key: session_key.clone(),
            prepared_user_message: request.prepared_user_message.clone(),
            observer,
            facts,
            attempt: AttemptResult {
                session_id_used: Some(request.params.session.session_id.clone()),
                ..AttemptResult::default()
            },
            tools: Vec::new(),
            mirrored: Vec::new(),
            item_turn: String::new(),
            item_ids: std::collections::HashMap::new(),
            tool_results_mirrored: std::collections::HashSet::new(),
            approvals: Vec::new(),
            usage: Usage::default(),
            lease,
            lease_lost: None,
            recorder: UserTurnTranscriptRecorder::new(),
            original_input_committed: None,
            codex_errors: Vec::new(),
        };
        // The binding may have taken a while; the lease must still be ours to start the turn.
        state.lease.check()?;
        // Nor may the run have been cancelled meanwhile: a cancelled run starts no turn.
        if let Some(Err(cancelled)) = request
            .cancel
            .as_ref()
            .map(|cancel| cancel.refuse_start("binding the session's thread"))
        {
            self.release_thread(client, &thread_id).await;
            return Err(cancelled);
        }
        let mut events = client.subscribe(&thread_id);
        let result = self
            .drive_turn(client, &mut events, &mut state, &request)
            .await;
        client.unsubscribe(&thread_id);
        self.release_thread(client, &thread_id).await;
        // A turn lost to the app-server says which tools it had run: their effects happened.
        let turn_id = result.map_err(|e| e.with_tools_ran(&state.tools))?;
        if state.attempt.terminal == AttemptTerminal::TimedOut
            && let Some(last) = state.codex_errors.last()
        {
            tracing::warn!(codex_error = %last, "the codex turn timed out; codex's last error");
        }
        if let Some(lost) = state.lease_lost.take() {
            return Err(CodexError::Lifecycle(lost));
        }
        state.attempt.last_tool_error = state.observer.last_tool_error();
        state.attempt.usage = Some(state.usage);
        state.attempt.replay.had_potential_side_effects =
            state.tools.iter().any(|t| t.side_effect_evidence);
        state.attempt.replay.replay_safe = !state.attempt.replay.had_potential_side_effects;
        // A settled turn that ran tools and said nothing: capture the frozen evidence for the
        // host's settled-turn finalizer (a capability-free Codex run, see `finalize`).
        if state.attempt.terminal == AttemptTerminal::Ok
            && !state.attempt.tool_metas.is_empty()
            && state.attempt.assistant_texts.is_empty()
        {
            let lease = state.lease.clone();
            state.attempt.settled_turn_finalization_context = crate::finalize::capture(
                self.hooks.id(),
                &turn_id,
                &state.attempt.messages_snapshot,
                Some(&model),
                Some(&model_provider),
                Arc::new(move || lease.check()),
            );
        }
        Ok(TurnOutcome {
            thread_id: ThreadId::new(thread_id),
            turn_id: TurnId::new(turn_id),
            started_thread,
            lost_thread: lost_thread.map(ThreadId::new),
            continued_from: continued_from.map(ThreadId::new),
            resumed_thread,
            lease_epoch,
            attempt: state.attempt,
            tools: state.tools,
            mirrored: state.mirrored,
            approvals: state.approvals,
            original_input_committed: state.original_input_committed,
            codex_errors: state.codex_errors,
        })
    }

    /// Starts the turn and consumes its events until `turn/completed`. Returns the turn id.
    async fn drive_turn(
        &self,
        client: &Arc<CodexClient>,
        events: &mut mpsc::Receiver<ServerEvent>,
        state: &mut TurnState,
        request: &TurnRequest,
    ) -> Result<String, CodexError> {
        let params = TurnStartParams {
            thread_id: state.thread_id.clone(),
            input: vec![UserInput::Text {
                text: request.params.prompt.clone(),
            }],
        };
        let start = client.request::<_, TurnStartResponse>(method::TURN_START, &params);
        tokio::pin!(start);
        let mut started = false;
        let mut turn_id: Option<String> = None;
        let mut cancel = request.cancel.as_ref().map(TurnCancel::subscribe);
        let deadline = request.params.timeout.map(deadline_after);
        let mut interrupted: Option<AttemptTerminal> = None;
        let mut interrupt_deadline: Option<tokio::time::Instant> = None;
        // An interrupt asked for before the turn id was known, sent once it is.
        let mut interrupt_pending = false;
        loop {
            if state.lease_lost.is_some() && interrupted.is_none() {
                interrupted = Some(AttemptTerminal::Aborted);
                interrupt_deadline = Some(tokio::time::Instant::now() + INTERRUPT_GRACE);
                interrupt_pending = true;
            }
            if interrupt_pending && let Some(turn) = turn_id.as_deref() {
                interrupt_pending = false;
                self.interrupt(client, &state.thread_id, turn).await?;
            }
            let cancelled = async {
                match cancel.as_mut() {
                    Some(rx) => {
                        if rx.wait_for(|c| *c).await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let timer = async {
                match interrupt_deadline.or(deadline) {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                response = &mut start, if !started => {
                    started = true;
                    let response = response?;
                    turn_id.get_or_insert(response.turn.id);
                }
                event = events.recv() => {
                    let Some(event) = event else {
                        return Err(client.lost());
                    };
                    if let Some(done) = self.on_event(client, state, event, &mut turn_id).await? {
                        if let Some(terminal) = interrupted.take() {
                            state.attempt.terminal = terminal;
                        }
                        return Ok(done);
                    }
                }
                () = cancelled, if interrupted.is_none() => {
                    interrupted = Some(AttemptTerminal::Aborted);
                    interrupt_deadline = Some(tokio::time::Instant::now() + INTERRUPT_GRACE);
                    interrupt_pending = true;
                }
                () = timer => {
                    if interrupted.is_some() {
                        return Err(CodexError::timeout(method::TURN_INTERRUPT, INTERRUPT_GRACE));
                    }
                    interrupted = Some(AttemptTerminal::TimedOut);
                    interrupt_deadline = Some(tokio::time::Instant::now() + INTERRUPT_GRACE);
                    interrupt_pending = true;
                }
            }
        }
    }

    /// Unsubscribes this connection from the thread when the turn ends; the next turn loads it
    /// again with `thread/resume`. This does not release Codex's writer on the thread (only the
    /// process exit does; see [`CodexHarnessBuilder::process_per_turn`]).
    async fn release_thread(&self, client: &CodexClient, thread_id: &str) {
        if !client.is_alive() {
            return;
        }
        let released: Result<Value, CodexError> = client
            .request(
                method::THREAD_UNSUBSCRIBE,
                &ThreadUnsubscribeParams {
                    thread_id: thread_id.to_owned(),
                },
            )
            .await;
        if let Err(error) = released {
            tracing::warn!(thread_id, %error, "could not unload the codex thread");
        }
    }

    async fn interrupt(
        &self,
        client: &CodexClient,
        thread_id: &str,
        turn_id: &str,
    ) -> Result<(), CodexError> {
        tracing::info!(turn_id, "interrupting the codex turn");
        let _: Value = client
            .request(
                method::TURN_INTERRUPT,
                &TurnInterruptParams {
                    thread_id: thread_id.to_owned(),
                    turn_id: turn_id.to_owned(),
                },
            )
            .await?;
        Ok(())
    }

    /// Handles one event; returns the turn id once the turn completed.
    async fn on_event(
        &self,
        client: &CodexClient,
        state: &mut TurnState,
        event: ServerEvent,
        turn_id: &mut Option<String>,
    ) -> Result<Option<String>, CodexError> {
        match event {
            ServerEvent::Notification { method, params } => match method.as_str() {
                method::TURN_STARTED => {
                    let n: TurnNotification = parse(&method, params)?;
                    turn_id.get_or_insert(n.turn.id);
                }
                method::ITEM_COMPLETED => {
                    let n: ItemNotification = parse(&method, params)?;
                    state.item_turn = n.turn_id;
                    self.on_item(state, n.item).await?;
                }
                method::ERROR => {
                    // `{error: {message, codexErrorInfo?, …}, willRetry?, …}`: read leniently,
                    // it only explains what the turn's end will say.
                    let message = params["error"]["message"]
                        .as_str()
                        .map_or_else(|| params.to_string(), str::to_owned);
                    let message = if params["willRetry"].as_bool() == Some(true) {
                        format!("{message} (codex retries)")
                    } else {
                        message
                    };
                    tracing::info!(codex_error = %message, "codex reported an error");
                    if state.codex_errors.last() != Some(&message) {
                        if state.codex_errors.len() == CODEX_ERRORS_KEPT {
                            state.codex_errors.remove(0);
                        }
                        state.codex_errors.push(message);
                    }
                }
                method::TOKEN_USAGE_UPDATED => {
                    let n: TokenUsageNotification = parse(&method, params)?;
                    // Counts come from Codex; a huge one saturates instead of wrapping.
                    let last = &n.token_usage.last;
                    state.usage.input_tokens =
                        state.usage.input_tokens.saturating_add(last.input_tokens);
                    state.usage.output_tokens =
                        state.usage.output_tokens.saturating_add(last.output_tokens);
                }
                method::TURN_COMPLETED => {
                    let n: TurnNotification = parse(&method, params)?;
                    if turn_id.as_deref().is_some_and(|t| t != n.turn.id) {
                        tracing::debug!(turn = %n.turn.id, "completion of another turn");
                        return Ok(None);
                    }
                    state.attempt.terminal = match n.turn.status.as_str() {
                        "completed" => AttemptTerminal::Ok,
                        "interrupted" => AttemptTerminal::Aborted,
                        _ => AttemptTerminal::Failed {
                            message: n
                                .turn
                                .error
                                .map(|e| e.message)
                                .unwrap_or_else(|| format!("turn ended `{}`", n.turn.status)),
                        },
                    };
                    return Ok(Some(n.turn.id));
                }
                _ => tracing::trace!(method, "codex notification"),
            },
            ServerEvent::Request(request) => self.on_request(client, state, request).await?,
        }
        Ok(None)
    }

    /// Mirrors an item of the Codex turn being handled (`state.item_turn`).
    async fn mirror(
        &self,
        state: &mut TurnState,
        item_id: &str,
        role: MessageRole,
        text: String,
        message: Value,
    ) -> Result<AppendOutcome, CodexError> {
        let turn = state.item_turn.clone();
        self.mirror_in(state, &turn, item_id, role, text, message)
            .await
    }

    /// Mirrors item `item_id` of Codex turn `turn`.
    async fn mirror_in(
        &self,
        state: &mut TurnState,
        turn: &str,
        item_id: &str,
        role: MessageRole,
        text: String,
        message: Value,
    ) -> Result<AppendOutcome, CodexError> {
        let occurrence = state
            .item_ids
            .entry((turn.to_owned(), item_id.to_owned()))
            .or_default();
        *occurrence += 1;
        let idempotency_key =
            crate::context::mirror_key(&state.thread_id, turn, item_id, *occurrence);
        let outcome = self
            .transcript
            .append(
                &state.session_key,
                MirrorEntry {
                    role,
                    text,
                    idempotency_key,
                    message,
                },
            )
            .await?;
        state.mirrored.push(MirrorReport {
            item_id: item_id.to_owned(),
            role,
            appended: outcome.appended,
        });
        Ok(outcome)
    }

    async fn on_item(&self, state: &mut TurnState, item: ThreadItem) -> Result<(), CodexError> {
        match item {
            ThreadItem::UserMessage { id, content } => {
                let text = content
                    .iter()
                    .filter_map(|c| c.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n");
                let runtime = json!({ "role": "user", "content": text });
                let message =
                    restore_prepared_user_turn_meta(&runtime, state.prepared_user_message.as_ref())
                        .into_owned();
                let appended = self
                    .mirror(state, &id, MessageRole::User, text.clone(), message.clone())
                    .await?;
                // "Original input committed" fires only for a fresh append, at most once.
                let effects = state
                    .recorder
                    .mark_runtime_persisted_from_append(&message, &appended);
                if let Some(commit) = effects.original_input_committed {
                    state.original_input_committed.get_or_insert(commit);
                }
                let mut msg = AgentMessage::text(MessageRole::User, text);
                msg.id = Some(id);
                state.attempt.messages_snapshot.push(msg);
            }
            ThreadItem::AgentMessage { id, text } => {
                let message = json!({ "role": "assistant", "content": text });
                self.mirror(state, &id, MessageRole::Assistant, text.clone(), message)
                    .await?;
                let mut msg = AgentMessage::text(MessageRole::Assistant, text.clone());
                msg.id = Some(id);
                msg.stop_reason = Some("stop".to_owned());
                state.attempt.assistant_texts.push(text);
                state.attempt.completed_assistant = Some(msg.clone());
                state.attempt.messages_snapshot.push(msg);
            }
            ThreadItem::DynamicToolCall {
                id,
                tool,
                arguments,
                status,
                success,
                content_items,
            } => {
                let output = content_items
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|c| c.get("text").and_then(Value::as_str).map(str::to_owned))
                    .collect::<Vec<_>>()
                    .join("\n");
                let ok = success == Some(true) && status == "completed";
                let (text, message) = tool_result_entry(&id, &tool, &arguments, ok, &output);
                // A host tool's result was mirrored when the tool finished (the item's id is
                // its call id); otherwise it is mirrored now.
                if !state
                    .tool_results_mirrored
                    .remove(&(state.item_turn.clone(), id.clone()))
                {
                    self.mirror(state, &id, MessageRole::ToolResult, text, message)
                        .await?;
                }
                let mut call = AgentMessage::text(MessageRole::Assistant, "");
                call.content = vec![ContentBlock::ToolCall {
                    id: id.clone(),
                    name: tool.clone(),
                    arguments,
                }];
                call.stop_reason = Some("toolUse".to_owned());
                state.attempt.messages_snapshot.push(call);
                let mut result = AgentMessage::text(MessageRole::ToolResult, output);
                result.tool_call_id = Some(id);
                result.tool_name = Some(tool.clone());
                result.is_error = !ok;
                state.attempt.messages_snapshot.push(result);
                state.attempt.tool_metas.push(ToolMeta {
                    tool_name: tool,
                    meta: None,
                    is_error: !ok,
                });
            }
            ThreadItem::CommandExecution {
                id,
                command,
                cwd,
                status,
                exit_code,
                aggregated_output,
            } => {
                let read_only = is_read_only_command(&command);
                let meta = command.clone();
                let arguments = json!({ "command": command, "cwd": cwd });
                let reason = match (status.as_str(), exit_code) {
                    ("completed", Some(0)) => None,
                    (_, Some(code)) => Some(format!("exit {code}")),
                    (other, None) => Some(other.to_owned()),
                };
                let output = aggregated_output.unwrap_or_default();
                self.native_mutation(
                    state,
                    NativeItem {
                        id,
                        tool: "exec_command",
                        meta,
                        arguments,
                        facts: MutationFacts {
                            mutating_action: !read_only,
                            replay_safe: read_only,
                        },
                        declined: status == "declined",
                        failure: reason,
                        output,
                    },
                )
                .await?;
            }
            ThreadItem::FileChange {
                id,
                changes,
                status,
            } => {
                let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
                let arguments = json!({ "paths": paths });
                let failure = (status != "completed").then(|| status.clone());
                self.native_mutation(
                    state,
                    NativeItem {
                        id,
                        tool: "apply_patch",
                        meta: paths.join(" "),
                        arguments,
                        facts: MutationFacts {
                            mutating_action: true,
                            replay_safe: false,
                        },
                        declined: status == "declined",
                        failure,
                        output: paths.join("\n"),
                    },
                )
                .await?;
            }
            item @ ThreadItem::ImageGeneration { .. } => {
                if let Some(path) = runtime_owned_media(&item) {
                    state.attempt.tool_media_urls.push(path.clone());
                    state.attempt.host_owned_tool_media_urls.push(path);
                }
            }
            ThreadItem::Other => {}
        }
        Ok(())
    }

    /// Reports one of Codex's own command or file-change items as a native mutation and
    /// mirrors it.
    async fn native_mutation(
        &self,
        state: &mut TurnState,
        item: NativeItem,
    ) -> Result<(), CodexError> {
        let outcome = if item.failure.is_some() {
            ToolOutcome::Failure
        } else {
            ToolOutcome::Success
        };
        let mut observation = ToolTerminalObservation::success(item.tool, item.arguments.clone());
        observation.tool_call_id = Some(item.id.clone());
        // The command line (or the changed paths) is the display metadata. The accumulator's
        // action identity never reads display metadata, so a mutating native action is declared
        // as an owner mutation: its identity is the canonical form of its arguments (command and
        // working directory, or the changed paths). A later success of another command never
        // resolves this one's failure; a retry of the same command does.
        observation.meta = Some(item.meta.clone());
        observation.outcome = outcome;
        observation.native_mutation = Some(item.facts);
        if item.facts.mutating_action {
            observation.owner_mutation = Some(OwnerMutation {
                owner_key: format!("codex:{}", item.tool),
            });
        }
        observation.replay_safe = Some(item.facts.replay_safe);
        if item.declined {
            observation.execution_started = Some(false);
        }
        observation.failure = item.failure.as_ref().map(|reason| ToolFailure {
            execution_started: item.declined.then_some(false),
            error: Some(reason.clone()),
            terminal_diagnostic: (item.tool == "exec_command" && !item.declined).then(|| {
                TerminalDiagnostic::Process {
                    session_id: item.id.clone(),
                    reason: reason.clone(),
                }
            }),
            ..ToolFailure::default()
        });
        let resolution = state.observer.observe(&observation);
        state.tools.push(ToolReport {
            call_id: item.id.clone(),
            tool: item.tool.to_owned(),
            arguments: item.arguments.clone(),
            executed_arguments: resolution.executed_arguments,
            execution_started: resolution.execution_started,
            outcome,
            side_effect_evidence: resolution.side_effect_evidence,
            error: item.failure.clone(),
            native: true,
        });
        state.attempt.tool_metas.push(ToolMeta {
            tool_name: item.tool.to_owned(),
            meta: Some(item.meta.clone()),
            is_error: outcome == ToolOutcome::Failure,
        });
        let text = format!(
            "{} {}: {}",
            item.tool,
            item.failure.as_deref().unwrap_or("succeeded"),
            item.output
        );
        let message = json!({
            "role": "toolResult", "toolCallId": item.id, "toolName": item.tool,
            "arguments": item.arguments, "isError": outcome == ToolOutcome::Failure,
            "content": item.output,
        });
        self.mirror(state, &item.id, MessageRole::ToolResult, text, message)
            .await
            .map(|_| ())
    }

    async fn on_request(
        &self,
        client: &CodexClient,
        state: &mut TurnState,
        request: ServerRequest,
    ) -> Result<(), CodexError> {
        // Every request asks for a side effect (a host tool) or a grant (an approval): the
        // lease is confirmed against the store first, so a lease an operator revoked or
        // another host took over is refused at once, not at the next renewal. A store that
        // cannot answer cannot confirm it either: refused the same way.
        if let Err(lost) = state.lease.verify_fence().await {
            // A stale owner runs nothing and grants nothing.
            tracing::warn!(method = request.method, error = %lost, "lease lost mid-turn: refusing");
            state.lease_lost.get_or_insert(lost);
            let answer = match request.method.as_str() {
                method::TOOL_CALL => serde_json::to_value(DynamicToolCallResponse {
                    content_items: vec![ToolContentItem::InputText {
                        text: "refused: this host no longer owns the session".to_owned(),
                    }],
                    success: false,
                })
                .unwrap_or(Value::Null),
                other => approval_response(other, ApprovalDecision::Refuse),
            };
            return if answer.is_null() {
                client
                    .reply_error(&request, -32000, "this host no longer owns the session")
                    .await
            } else {
                client.reply(&request, answer).await
            };
        }
        match request.method.as_str() {
            method::TOOL_CALL => {
                let params: DynamicToolCallParams = parse(&request.method, request.params.clone())?;
                let response = self.run_tool(state, params).await;
                let value = serde_json::to_value(&response).map_err(|e| {
                    CodexError::protocol(format!("cannot encode a tool result: {e}"))
                })?;
                client.reply(&request, value).await
            }
            method::COMMAND_APPROVAL
            | method::FILE_CHANGE_APPROVAL
            | method::EXEC_COMMAND_APPROVAL
            | method::APPLY_PATCH_APPROVAL => {
                let params: ApprovalRequestParams = parse(&request.method, request.params.clone())?;
                let kind = match request.method.as_str() {
                    method::COMMAND_APPROVAL | method::EXEC_COMMAND_APPROVAL => {
                        ApprovalKind::Command
                    }
                    _ => ApprovalKind::FileChange,
                };
                let decision = self.approvals.decide(&ApprovalRequest {
                    kind,
                    method: request.method.clone(),
                    thread_id: params.thread().map(str::to_owned),
                    params: request.params.clone(),
                });
                tracing::info!(method = request.method, ?decision, reason = ?params.reason, "codex approval request answered");
                state.approvals.push(ApprovalReport {
                    method: request.method.clone(),
                    decision,
                });
                client
                    .reply(&request, approval_response(&request.method, decision))
                    .await
            }
            method::PERMISSIONS_APPROVAL | method::USER_INPUT | method::MCP_ELICITATION => {
                // Nothing beyond the thread's sandbox is granted and a harness turn has no
                // user to ask: always the refusing answer.
                state.approvals.push(ApprovalReport {
                    method: request.method.clone(),
                    decision: ApprovalDecision::Refuse,
                });
                client
                    .reply(
                        &request,
                        approval_response(&request.method, ApprovalDecision::Refuse),
                    )
                    .await
            }
            other => {
                tracing::warn!(method = other, "unsupported codex server request refused");
                client
                    .reply_error(&request, -32601, "method not supported by this client")
                    .await
            }
        }
    }

    async fn run_tool(
        &self,
        state: &mut TurnState,
        params: DynamicToolCallParams,
    ) -> DynamicToolCallResponse {
        let call = ToolCall {
            call_id: params.call_id.clone(),
            tool: params.tool.clone(),
            arguments: params.arguments.clone(),
            facts: state.facts.clone(),
        };
        // On a task of its own, so a panicking host tool is this tool's failure (its effect
        // unknown: it started) instead of the end of the turn, its lease and its mirroring.
        let tools = self.tools.clone();
        let run = match tokio::spawn(async move { tools.execute(call).await }).await {
            Ok(run) => run,
            Err(join) => {
                let error = match join.try_into_panic() {
                    Ok(panic) => format!(
                        "the host tool `{}` panicked: {}",
                        params.tool,
                        panic_message(panic.as_ref())
                    ),
                    Err(join) => format!("the host tool `{}` stopped: {join}", params.tool),
                };
                tracing::error!(tool = params.tool, call_id = params.call_id, %error, "host tool failed without an answer");
                let mut run = crate::ToolRun::failure(error);
                if let Some(failure) = run.failure.as_mut() {
                    // It ran: whatever it did before it panicked may have happened.
                    failure.execution_started = Some(true);
                }
                run
            }
        };
        let mut observation =
            ToolTerminalObservation::success(params.tool.clone(), params.arguments.clone());
        observation.tool_call_id = Some(params.call_id.clone());
        observation.outcome = run.outcome;
        observation.failure = run.failure.clone();
        observation.execution_started = run.failure.as_ref().and_then(|f| f.execution_started);
        observation.result = Some(run.result.clone());
        observation.replay_safe = run.replay_safe;
        let resolution = state.observer.observe(&observation);
        tracing::info!(
            tool = params.tool,
            call_id = params.call_id,
            outcome = ?run.outcome,
            execution_started = resolution.execution_started,
            "host tool finished"
        );
        let (turn_id, call_id, tool, arguments) = (
            params.turn_id,
            params.call_id.clone(),
            params.tool.clone(),
            params.arguments.clone(),
        );
        state.tools.push(ToolReport {
            call_id: params.call_id,
            tool: params.tool,
            arguments: params.arguments,
            executed_arguments: resolution.executed_arguments,
            execution_started: resolution.execution_started,
            outcome: run.outcome,
            side_effect_evidence: resolution.side_effect_evidence,
            error: run.failure.and_then(|f| f.error),
            native: false,
        });
        state.attempt.tool_media_urls.extend(run.media_urls);
        let response = DynamicToolCallResponse {
            content_items: run.content,
            success: run.outcome == ToolOutcome::Success,
        };
        self.mirror_tool_result(state, &turn_id, &call_id, &tool, &arguments, &response)
            .await;
        response
    }

    /// Mirrors a host tool's result as soon as the tool finished, with the key Codex's
    /// `dynamicToolCall` item would get: a tool that ran is in the host transcript even when
    /// the app-server dies before reporting the item (the item's report then writes nothing
    /// again). A refused append is logged; the item's report tries again.
    async fn mirror_tool_result(
        &self,
        state: &mut TurnState,
        turn: &str,
        call_id: &str,
        tool: &str,
        arguments: &Value,
        response: &DynamicToolCallResponse,
    ) {
        let output = response
            .content_items
            .iter()
            .filter_map(|item| match item {
                ToolContentItem::InputText { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let (text, message) =
            tool_result_entry(call_id, tool, arguments, response.success, &output);
        match self
            .mirror_in(state, turn, call_id, MessageRole::ToolResult, text, message)
            .await
        {
            Ok(_) => {
                state
                    .tool_results_mirrored
                    .insert((turn.to_owned(), call_id.to_owned()));
            }
            Err(error) => {
                // The occurrence counted for the failed try is given back: the item's report
                // mirrors under the same key.
                if let Some(n) = state
                    .item_ids
                    .get_mut(&(turn.to_owned(), call_id.to_owned()))
                {
                    *n = n.saturating_sub(1);
                }
                tracing::warn!(call_id, tool, %error, "could not mirror the host tool's result when it finished; its item will");
            }
        }
    }
}

/// The mirrored entry of a host tool's result: its searchable text and structured message
/// (the same whether mirrored when the tool finished or when Codex reported the item).
fn tool_result_entry(
    call_id: &str,
    tool: &str,
    arguments: &Value,
    ok: bool,
    output: &str,
) -> (String, Value) {
    let text = format!(
        "{tool} {}: {output}",
        if ok { "succeeded" } else { "failed" }
    );
    let message = json!({
        "role": "toolResult", "toolCallId": call_id, "toolName": tool,
        "arguments": arguments, "isError": !ok, "content": output,
    });
    (text, message)
}

/// A media file the runtime itself created and persisted (a completed, saved image
/// generation): the only media the harness counts as host-owned.
fn runtime_owned_media(item: &ThreadItem) -> Option<String> {
    match item {
        ThreadItem::ImageGeneration {
            status,
            saved_path: Some(path),
            ..
        } if status == "completed" && !path.trim().is_empty() => Some(path.clone()),
        _ => None,
    }
}

struct NativeItem {
    id: String,
    tool: &'static str,
    meta: String,
    arguments: Value,
    facts: MutationFacts,
    declined: bool,
    failure: Option<String>,
    output: String,
}

/// The method-specific answer for an approval decision.
pub fn approval_response(method_name: &str, decision: ApprovalDecision) -> Value {
    let approve = decision == ApprovalDecision::Approve;
    match method_name {
        method::COMMAND_APPROVAL | method::FILE_CHANGE_APPROVAL => {
            json!({ "decision": if approve { "accept" } else { "decline" } })
        }
        method::EXEC_COMMAND_APPROVAL | method::APPLY_PATCH_APPROVAL => {
            if approve {
                json!({ "decision": "approved" })
            } else {
                json!({ "decision": { "denied": { "rejection": "refused by the host's approval policy" } } })
            }
        }
        method::PERMISSIONS_APPROVAL => json!({ "permissions": {} }),
        method::USER_INPUT => json!({ "answers": {} }),
        method::MCP_ELICITATION => json!({ "action": "decline" }),
        _ => Value::Null,
    }
}

/// The text of a panic's payload (a `&str` or a `String`; anything else is named as such).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

fn parse<T: serde::de::DeserializeOwned>(method: &str, params: Value) -> Result<T, CodexError> {
    serde_json::from_value(params)
        .map_err(|e| CodexError::protocol(format!("unexpected `{method}` parameters: {e}")))
}

#[async_trait]
impl AgentHarness for CodexHarness {
    fn id(&self) -> &HarnessId {
        self.inner.hooks.id()
    }

    /// `/new` and `/reset`: the backend's in-place reset clears the binding (the next turn
    /// starts a fresh Codex thread for the same session key), then the retired thread is
    /// archived. A failure (of the backend or of the archive) fails the hook; the caller's
    /// fan-out logs it once per harness per process, and the next reset runs the hook again,
    /// retrying the cleanups left pending first. After a reset to a new generation
    /// ([`ResetParams::replaced_generation`]) whose notification comes late, a thread the new
    /// generation's first turn already bound is kept, with its due items. `Deleted` is only a
    /// notification.
    async fn reset(&self, params: ResetParams) -> Result<(), Error> {
        let span = tracing::info_span!("codex.reset", session_id = %params.session_id, reason = ?params.reason);
        self.reset_session(params).instrument(span).await
    }

    /// Deletion: the SDK's thread-binding hook takes the lease before `run` and removes the
    /// binding in the host's transaction; after the COMMIT the Codex thread is deleted
    /// (`thread/delete`).
    fn session_deletion(&self) -> Option<&dyn SessionDeletionHook> {
        Some(self)
    }

    /// Context reset (rewind, branch switch): the binding is invalidated with the same
    /// prepared commit and rollback; after the COMMIT a continuation is recorded and the old
    /// Codex thread archived, and the next turn runs on a fork of it through the last turn the
    /// host transcript still keeps whole (none of the cut turns).
    fn session_context_reset(&self) -> Option<&dyn SessionContextResetHook> {
        Some(self)
    }

    /// A tool-only turn's final answer: the capability-free Codex run of
    /// [`CodexHarness::settled_turn_finalizer`], mirrored into the transcript of the session
    /// each try names, so a host finalizing through the registry
    /// (`FinalizationInput::new(&harness, …)`) gets it without wiring a finalizer itself.
    fn settled_turn_finalizer(&self) -> Option<&dyn SettledTurnFinalizer> {
        Some(&self.inner.finalizer)
    }
}

#[async_trait]
impl SessionDeletionHook for CodexHarness {
    async fn with_session_deletion(
        &self,
        params: SessionDeletionParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        let span = tracing::info_span!("codex.session_deletion", session_id = %params.session_id);
        let session = BindingIdentity::session(
            params.agent_id.clone(),
            params.session_id.clone(),
            Some(params.session_key.clone()),
        )
        .key()
        .clone();
        let scope = CleanupScope {
            action: NativeCleanup::Delete,
            assert_current: params.assert_current.clone(),
            session: session.clone(),
            continue_kept_turns: false,
        };
        let session_key = params.session_key.clone();
        async {
            let result = CLEANUP
                .scope(scope, self.inner.hooks.with_session_deletion(params, run))
                .await;
            // Committed: `Ok`, or an error after the COMMIT (a native cleanup that failed and
            // stays due), which the host no longer having the session tells apart from a
            // rollback.
            let committed = result.is_ok()
                || matches!(
                    self.inner.host_sessions.read_session(&session_key).await,
                    HostSessionRead::Missing
                );
            if committed {
                // A continuation left by an earlier context reset (with no turn since, so no
                // binding to release) has nothing left to continue.
                if let Err(error) = self.inner.threads.clear_continuation(&session).await {
                    tracing::warn!(%error, "could not remove the deleted session's codex continuation");
                }
                if let Err(error) = self.inner.threads.clear_injections(&session).await {
                    tracing::warn!(%error, "could not remove the deleted session's due codex items");
                }
                // The threads earlier resets archived keep the session's conversation: they
                // go with it.
                if let Err(error) = self.inner.threads.delete_archived(&session).await {
                    tracing::warn!(%error, "could not delete the deleted session's archived codex threads");
                }
            }
            result
        }
        .instrument(span)
        .await
    }
}

#[async_trait]
impl SessionContextResetHook for CodexHarness {
    async fn with_session_context_reset(
        &self,
        params: SessionContextResetParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        let span =
            tracing::info_span!("codex.session_context_reset", session_id = %params.session_id);
        let identity = BindingIdentity::session(
            params.agent_id.clone(),
            params.session_id.clone(),
            Some(params.session_key.clone()),
        );
        let scope = CleanupScope {
            action: NativeCleanup::Archive,
            assert_current: params.assert_current.clone(),
            session: identity.key().clone(),
            continue_kept_turns: self.continues_kept_turns(&identity, &params).await?,
        };
        CLEANUP
            .scope(
                scope,
                self.inner.hooks.with_session_context_reset(params, run),
            )
            .instrument(span)
            .await
    }
}

impl CodexHarness {
    /// Whether a context reset of `params` continues the kept turns of the thread it releases:
    /// not when that thread is bound to the recorded predecessor and the session left it by a
    /// reset or a cut (its notification never ran) — that context ended before this one began.
    async fn continues_kept_turns(
        &self,
        identity: &BindingIdentity,
        params: &SessionContextResetParams,
    ) -> Result<bool, Error> {
        let owner = self
            .inner
            .bindings
            .record(identity)
            .await?
            .filter(|record| record.is_active())
            .and_then(|record| record.session_id);
        let Some(owner) = owner.filter(|owner| *owner != params.session_id) else {
            return Ok(true);
        };
        Ok(
            match self
                .inner
                .host_sessions
                .read_session(&params.session_key)
                .await
            {
                tether_core::HostSessionRead::Current(entry) => {
                    !(entry.previous_session_id.as_ref() == Some(&owner)
                        && entry
                            .previous_change
                            .is_some_and(|change| !change.continues_native_context()))
                }
                _ => true,
            },
        )
    }

    async fn reset_session(&self, params: ResetParams) -> Result<(), Error> {
        if params.reason == ResetReason::Deleted {
            return self.inner.hooks.reset(params).await;
        }
        // Cleanups an earlier reset or deletion left behind (in this process or another one
        // over the same store) get another chance.
        if let Err(error) = self.inner.threads.retry_pending().await {
            tracing::warn!(%error, "could not read the due codex thread cleanups");
        }
        let identity = BindingIdentity::session(
            params.agent_id.clone(),
            params.session_id.clone(),
            params.session_key.clone(),
        );
        let record = self.inner.bindings.record(&identity).await?;
        if params.replaced_generation().is_some()
            && record
                .as_ref()
                .is_some_and(|r| r.is_active() && r.session_id.as_ref() == Some(&params.session_id))
        {
            // A late notification of a reset to a new generation: a turn of the new
            // generation already bound its fresh thread (and cleared what the reset ended).
            // That thread, its continuation and its due items are the new generation's.
            tracing::info!(session_id = %params.session_id, "the new generation bound a thread before this reset's notification; nothing left to reset");
            return Ok(());
        }
        // A reset starts the session afresh: a pending context-reset continuation is dropped,
        // and so are the items due into the old thread.
        self.inner
            .threads
            .clear_continuation(identity.key())
            .await?;
        self.inner.threads.clear_injections(identity.key()).await?;
        // The row's binding whatever generation owns it: a reset in the new generation also
        // clears a binding its recorded predecessor still owns (a `/new` after the host moved
        // the session to a new id), and that thread is retired like the generation's own.
        let row_binding =
            |record: Option<ThreadBindingRecord>| record.and_then(|r| r.binding().cloned());
        let previous = row_binding(record);
        self.inner.hooks.reset(params).await?;
        let Some(previous) = previous else {
            return Ok(());
        };
        if row_binding(self.inner.bindings.record(&identity).await?)
            .is_some_and(|now| now.thread_id == previous.thread_id)
        {
            // The backend kept the binding (supervision, or a generation the reset may not
            // clear): the thread stays.
            return Ok(());
        }
        if self
            .inner
            .bindings
            .has_other_thread_owner(identity.key(), &previous.thread_id)
            .await?
        {
            return Ok(());
        }
        self.inner
            .threads
            .archive_for(identity.key(), &previous.thread_id)
            .await
            .map_err(|error| {
                error.into_core_in(&format!(
                    "the session was reset, but archiving its codex thread {} failed",
                    previous.thread_id
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_of_any_length_makes_a_deadline() {
        let now = tokio::time::Instant::now();
        let far = deadline_after(Duration::MAX);
        assert!(far >= now + Duration::from_secs(99 * 365 * 24 * 60 * 60));
        let near = deadline_after(Duration::from_secs(5));
        assert!(near > now && near <= tokio::time::Instant::now() + Duration::from_secs(5));
    }

    #[test]
    fn refusals_never_grant_anything() {
        let refuse = |m: &str| approval_response(m, ApprovalDecision::Refuse);
        assert_eq!(
            refuse(method::COMMAND_APPROVAL),
            json!({ "decision": "decline" })
        );
        assert_eq!(
            refuse(method::FILE_CHANGE_APPROVAL),
            json!({ "decision": "decline" })
        );
        assert!(refuse(method::EXEC_COMMAND_APPROVAL)["decision"]["denied"].is_object());
        assert!(refuse(method::APPLY_PATCH_APPROVAL)["decision"]["denied"].is_object());
        assert_eq!(
            refuse(method::PERMISSIONS_APPROVAL),
            json!({ "permissions": {} })
        );
        // Even an approving policy grants no extra permissions and answers no questions.
        let approve = |m: &str| approval_response(m, ApprovalDecision::Approve);
        assert_eq!(
            approve(method::PERMISSIONS_APPROVAL),
            json!({ "permissions": {} })
        );
        assert_eq!(
            approve(method::MCP_ELICITATION),
            json!({ "action": "decline" })
        );
        assert_eq!(
            approve(method::COMMAND_APPROVAL),
            json!({ "decision": "accept" })
        );
    }

    #[test]
    fn only_saved_runtime_images_are_host_owned() {
        let image = |status: &str, saved: Option<&str>| ThreadItem::ImageGeneration {
            id: "img".to_owned(),
            status: status.to_owned(),
            saved_path: saved.map(str::to_owned),
        };
        assert_eq!(
            runtime_owned_media(&image("completed", Some("/w/out.png"))).as_deref(),
            Some("/w/out.png")
        );
        assert_eq!(runtime_owned_media(&image("completed", None)), None);
        assert_eq!(
            runtime_owned_media(&image("failed", Some("/w/x.png"))),
            None
        );
        assert_eq!(runtime_owned_media(&ThreadItem::Other), None);
    }

    #[test]
    fn the_default_policy_refuses() {
        let request = ApprovalRequest {
            kind: ApprovalKind::Command,
            method: method::COMMAND_APPROVAL.to_owned(),
            thread_id: None,
            params: json!({}),
        };
        assert_eq!(RefuseAll.decide(&request), ApprovalDecision::Refuse);
    }
}
