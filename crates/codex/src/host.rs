//! What the host supplies to the harness: its transcript, its tools, its approval policy and
//! its record of runs in flight.

use std::fmt;

use async_trait::async_trait;
use serde_json::Value;
use tether_core::{AppendOutcome, MessageRole, SessionKey};
use tether_harness_sdk::results::terminal::{HostToolFacts, ToolFailure, ToolOutcome, ToolResult};

use crate::protocol::{DynamicToolSpec, ToolContentItem};

/// One mirrored transcript entry: a completed Codex item, keyed by its native item id.
#[derive(Debug, Clone, PartialEq)]
pub struct MirrorEntry {
    /// Who wrote it (`User`, `Assistant` or `ToolResult`).
    pub role: MessageRole,
    /// The searchable text.
    pub text: String,
    /// `codex:<thread id>:<turn id>:<item id>`: a repeat of the same item resolves to the same
    /// entry.
    pub idempotency_key: String,
    /// The structured message (for the user message: with the host's prepared metadata
    /// restored).
    pub message: Value,
}

/// The host transcript, canonical for the session: the harness mirrors every completed user,
/// assistant and tool item into it with an idempotent append.
#[async_trait]
pub trait HostTranscript: Send + Sync + fmt::Debug {
    /// Appends `entry` to `session`'s transcript unless an entry with the same idempotency key
    /// exists (then `appended: false`). The append is atomic: an entry is written whole or not
    /// at all.
    async fn append(
        &self,
        session: &SessionKey,
        entry: MirrorEntry,
    ) -> Result<AppendOutcome, tether_core::Error>;

    /// The idempotency keys of the entries on `session`'s active transcript path, oldest
    /// first (entries appended without a key are left out).
    ///
    /// Read when a session has no bound thread: after a context reset (rewind, branch switch)
    /// the harness carries the turns the path still holds into the session's next Codex
    /// thread (a fork of the thread they came from), and never the cut ones.
    async fn active_idempotency_keys(
        &self,
        session: &SessionKey,
    ) -> Result<Vec<String>, tether_core::Error>;
}

/// One `item/tool/call` as the host tool executor receives it.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The model's call id.
    pub call_id: String,
    /// The tool name.
    pub tool: String,
    /// The arguments exactly as Codex sent them.
    pub arguments: Value,
    /// The attempt's host execution facts: record here whether the implementation started
    /// ([`HostToolFacts::record_execution`]), a guard's refusal before dispatch
    /// ([`HostToolFacts::record_pre_execution_blocked`]) and adjusted parameters
    /// ([`HostToolFacts::record_adjusted_params`]). Host facts outrank the harness's claims.
    pub facts: HostToolFacts,
}

/// How a host tool call ended.
#[derive(Debug, Clone)]
pub struct ToolRun {
    /// Success or failure.
    pub outcome: ToolOutcome,
    /// The raw result (or thrown error) as the host saw it.
    pub result: ToolResult,
    /// What the model gets back.
    pub content: Vec<ToolContentItem>,
    /// Structured failure fields.
    pub failure: Option<ToolFailure>,
    /// Media the tool produced (URLs or paths). Reported in `tool_media_urls`; never counted as
    /// host-owned (the tool, not the runtime, made them).
    pub media_urls: Vec<String>,
    /// The host's declaration that this call changed nothing outside (a read: running it
    /// again is safe), which outranks the classification by tool name; `None`: classified by
    /// name and arguments. See [`ToolRun::read_only`].
    pub replay_safe: Option<bool>,
}

impl ToolRun {
    /// A successful call returning `text`.
    pub fn success(text: impl Into<String>) -> Self {
        let text = text.into();
        Self {
            outcome: ToolOutcome::Success,
            result: ToolResult::new(Value::String(text.clone())),
            content: vec![ToolContentItem::InputText { text }],
            failure: None,
            media_urls: Vec::new(),
            replay_safe: None,
        }
    }

    /// A call that ran and failed with `error`.
    pub fn failure(error: impl Into<String>) -> Self {
        let error = error.into();
        Self {
            outcome: ToolOutcome::Failure,
            result: ToolResult::new(serde_json::json!({ "error": error })),
            content: vec![ToolContentItem::InputText {
                text: format!("error: {error}"),
            }],
            failure: Some(ToolFailure {
                error: Some(error),
                ..ToolFailure::default()
            }),
            media_urls: Vec::new(),
            replay_safe: None,
        }
    }

    /// Declares the call read-only (it changed nothing outside, whatever its outcome): a failed
    /// read is then no possible side effect (`side_effect_evidence: false`, the turn stays
    /// replay-safe), where a tool's name alone would leave it uncertain.
    #[must_use]
    pub fn read_only(mut self) -> Self {
        self.replay_safe = Some(true);
        self
    }

    /// A call a host guard refused before dispatch: records the block in `call.facts` and
    /// attaches the host's "not started" proof, so the accumulator reports
    /// `execution_started: false`.
    pub fn refused(call: &ToolCall, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        call.facts.record_pre_execution_blocked(&call.call_id);
        let proof = call.facts.not_started_proof(Some(&call.call_id));
        Self {
            outcome: ToolOutcome::Failure,
            result: ToolResult::with_not_started_proof(
                serde_json::json!({ "error": reason, "blocked": true }),
                proof,
            ),
            content: vec![ToolContentItem::InputText {
                text: format!("refused: {reason}"),
            }],
            failure: Some(ToolFailure {
                execution_started: Some(false),
                error: Some(reason),
                ..ToolFailure::default()
            }),
            media_urls: Vec::new(),
            replay_safe: None,
        }
    }
}

/// The host's tools, offered to Codex as dynamic tools and executed on `item/tool/call`.
#[async_trait]
pub trait ToolExecutor: Send + Sync + fmt::Debug {
    /// The tools to offer when a thread is started.
    fn tools(&self) -> Vec<DynamicToolSpec>;

    /// Runs one call. The executor is host code: it applies its guards and records its
    /// execution facts in `call.facts`.
    async fn execute(&self, call: ToolCall) -> ToolRun;
}

/// A host without tools.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTools;

#[async_trait]
impl ToolExecutor for NoTools {
    fn tools(&self) -> Vec<DynamicToolSpec> {
        Vec::new()
    }

    async fn execute(&self, call: ToolCall) -> ToolRun {
        ToolRun::refused(&call, format!("no host tool named `{}`", call.tool))
    }
}

/// What an approval request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalKind {
    /// Run a command (including the legacy `execCommandApproval`).
    Command,
    /// Apply a file change (including the legacy `applyPatchApproval`).
    FileChange,
}

/// One approval request from Codex.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    /// What is asked.
    pub kind: ApprovalKind,
    /// The protocol method.
    pub method: String,
    /// The thread.
    pub thread_id: Option<String>,
    /// The request as sent.
    pub params: Value,
}

/// The host's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalDecision {
    /// Allow this one request.
    Approve,
    /// Refuse it (the turn goes on without it).
    Refuse,
}

/// Decides Codex's approval requests. Requests for extra permissions, user input and MCP
/// elicitations are always refused by the harness (a harness turn has no user channel and
/// grants nothing beyond the thread's sandbox).
pub trait ApprovalPolicy: Send + Sync + fmt::Debug {
    /// The decision for `request`.
    fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision;
}

/// The default policy: refuses everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct RefuseAll;

impl ApprovalPolicy for RefuseAll {
    fn decide(&self, _request: &ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::Refuse
    }
}

/// The host's record of runs in flight, which its deletions and resets consult (they are
/// refused while a run of the session is in flight): the harness admits each turn of a
/// session ([`CodexHarness::run_turn`](crate::CodexHarness::run_turn)), and each compaction
/// ([`CodexHarness::compact`](crate::CodexHarness::compact)), for as long as it runs, however it
/// ends. Set with [`CodexHarnessBuilder::admission`](crate::CodexHarnessBuilder::admission);
/// `tether_host::Host::codex_harness` sets the host's own.
pub trait RunAdmission: Send + Sync + fmt::Debug {
    /// Admits a run of `session`; the run stays admitted until the returned guard is dropped.
    ///
    /// Admissions are counted: a host that also admits the same run itself (around its
    /// `run_turn` call) admits it twice, and the session is idle again once both ended.
    fn admit(&self, session: &SessionKey) -> AdmissionGuard;
}

/// A run admitted by [`RunAdmission::admit`]: the run is admitted until this is dropped.
#[must_use = "the run's admission ends as soon as the guard is dropped"]
pub struct AdmissionGuard {
    /// Held, never read: dropping it ends the admission.
    _guard: Box<dyn std::any::Any + Send>,
}

impl AdmissionGuard {
    /// Wraps the host's own guard (dropping it ends the admission).
    pub fn new(guard: impl Send + 'static) -> Self {
        Self {
            _guard: Box::new(guard),
        }
    }
}

impl fmt::Debug for AdmissionGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmissionGuard").finish_non_exhaustive()
    }
}
