//! The host's facts about a settled turn that the gate and the orchestration read, beyond the
//! attempt result itself.

use tether_core::{AgentMessage, LifecycleRevision};

use crate::capture::ModelSelection;
use crate::evidence::{ItemLifecycle, TimeoutKind};

/// Whether the turn must end with a visible reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplyExpectation {
    /// A visible reply is required (direct user turns).
    #[default]
    Required,
    /// Silence is acceptable (heartbeats, some background turns).
    Optional,
}

/// What started the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RunTrigger {
    /// A user message.
    #[default]
    User,
    /// A heartbeat.
    Heartbeat,
    /// A scheduled (cron) job.
    Cron,
    /// Another background trigger.
    Background,
}

/// The route's source-reply delivery mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SourceReplyMode {
    /// Final replies are delivered automatically.
    #[default]
    Automatic,
    /// Only the message tool delivers to the source; other replies stay private unless marked.
    MessageToolOnly,
}

/// Per-call tool metadata (with the call id that core's `ToolMeta` lacks).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolCallMeta {
    /// The call id, when known.
    pub call_id: Option<String>,
    /// The tool name.
    pub tool_name: String,
    /// The call errored.
    pub is_error: bool,
    /// The tool requested intentional termination of the turn.
    pub terminate: bool,
    /// The tool started asynchronous work.
    pub async_started: bool,
    /// The call is parked in a suspended code-mode run.
    pub code_mode_suspended: bool,
}

/// A message-tool send receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MessageToolSend {
    /// `Some(false)`: progress; `Some(true)` or `None` (legacy): the final source reply.
    pub source_reply_final: Option<bool>,
}

/// What a prepared reply payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PayloadKind {
    /// An ordinary answer.
    Answer,
    /// A synthetic tool-error warning card.
    ToolErrorWarning,
    /// A synthetic provider-error payload.
    ProviderError,
    /// Pre-tool commentary.
    PreToolCommentary,
    /// A silent cron tool result (counts as one answer).
    SilentCronToolResult,
    /// A payload recovered after a prompt timeout.
    RecoveredAfterPromptTimeout,
    /// The finalization answer (host-owned recovery output).
    FinalizationAnswer,
    /// The host fallback text.
    HostFallback,
    /// The incomplete-turn warning.
    IncompleteTurn,
    /// The `message_tool_only` recovery notice.
    RecoveryNotice,
}

/// The writer delivery authority attached to host-owned payloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterDeliveryAuthority {
    /// The agent.
    pub agent_id: tether_core::AgentId,
    /// The session key.
    pub session_key: tether_core::SessionKey,
    /// The session generation.
    pub session_id: tether_core::SessionId,
    /// The writer fence.
    pub fence: WriterFence,
    /// The idempotency key of the persisted row, when persisted.
    pub idempotency_key: Option<String>,
}

/// The committed writer fence of the session transcript.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WriterFence {
    /// Expected lifecycle revision of the host session entry.
    pub expected_lifecycle_revision: Option<LifecycleRevision>,
    /// Expected writer run id.
    pub expected_writer_run_id: Option<String>,
}

impl WriterFence {
    /// Whether the fence constrains anything.
    pub fn is_set(&self) -> bool {
        self.expected_lifecycle_revision.is_some() || self.expected_writer_run_id.is_some()
    }
}

/// One prepared reply payload.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplyPayload {
    /// The text.
    pub text: String,
    /// An error payload.
    pub is_error: bool,
    /// What it is.
    pub kind: PayloadKind,
    /// Deliver even when source replies are suppressed (`message_tool_only`).
    pub deliver_despite_source_suppression: bool,
    /// The payload mirrors a transcript row written elsewhere.
    pub transcript_mirror: bool,
    /// The writer delivery authority, for host-owned output.
    pub writer_authority: Option<WriterDeliveryAuthority>,
}

impl ReplyPayload {
    /// A plain payload of `kind`.
    pub fn new(kind: PayloadKind, text: impl Into<String>, is_error: bool) -> Self {
        Self {
            text: text.into(),
            is_error,
            kind,
            deliver_despite_source_suppression: false,
            transcript_mirror: false,
            writer_authority: None,
        }
    }

    /// The text visible to the source under `mode` (`message_tool_only` keeps unmarked payloads
    /// private).
    pub fn visible_text(&self, mode: SourceReplyMode) -> &str {
        match mode {
            SourceReplyMode::MessageToolOnly if !self.deliver_despite_source_suppression => "",
            _ => &self.text,
        }
    }
}

/// A classified failure signal of the prepared terminal (kept across finalization so an honest
/// answer cannot turn a denial into success).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureSignal {
    /// The signal kind (for example `execution_denied`).
    pub kind: String,
    /// A structured code.
    pub code: Option<String>,
    /// Whether the failure is fatal for a cron run.
    pub fatal_for_cron: bool,
}

/// The terminal tool failure of the prepared terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalToolFailure {
    /// The tool.
    pub tool_name: String,
    /// A structured code (for example `UNKNOWN_TOOL_ID`).
    pub code: Option<String>,
}

/// Settled facts carried onto a rebuilt terminal (see `docs/finalization.md`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CarriedFacts {
    /// The native runtime model selection (never replaced by the finalizer's model).
    pub runtime_model_selection: Option<ModelSelection>,
    /// Context window tokens.
    pub context_tokens: Option<u64>,
    /// The credential source of the run.
    pub credential_source: Option<String>,
    /// Successful nested tool names.
    pub successful_nested_tool_names: Vec<String>,
    /// Whether code mode was engaged.
    pub code_mode_engaged: bool,
    /// Successful cron adds.
    pub successful_cron_adds: u32,
    /// The MCP view of the run (opaque JSON).
    pub mcp_view: Option<serde_json::Value>,
    /// The model attempt from the prepared plan.
    pub model_attempt: Option<u32>,
}

/// The host's facts about the settled turn.
#[derive(Debug, Clone)]
pub struct TurnFacts {
    /// Reply expectation.
    pub reply_expectation: ReplyExpectation,
    /// Whether an empty reply may be accepted as silence.
    pub allow_empty_assistant_reply_as_silent: bool,
    /// What started the run.
    pub trigger: RunTrigger,
    /// A helper run whose output is expected to be silent.
    pub silent_expected: bool,
    /// Whether the "empty stop after settled tools" continuation is allowed for this trigger.
    pub empty_stop_continuation_allowed: bool,
    /// Tool item lifecycle counts.
    pub item_lifecycle: ItemLifecycle,
    /// Per-call tool metadata.
    pub tool_call_metas: Vec<ToolCallMeta>,
    /// The current attempt's assistant (possibly partial or a tool-call entry).
    pub current_attempt_assistant: Option<AgentMessage>,
    /// The last assistant seen (possibly from a prior turn).
    pub last_assistant: Option<AgentMessage>,
    /// Message-tool send receipts.
    pub message_tool_sends: Vec<MessageToolSend>,
    /// The prepared payloads of the original terminal.
    pub payloads: Vec<ReplyPayload>,
    /// A terminal tool presentation exists.
    pub terminal_tool_presentation: bool,
    /// The run was aborted from outside.
    pub externally_aborted: bool,
    /// Which timeout was observed, if any.
    pub timeout_kind: Option<TimeoutKind>,
    /// Pending client tool calls.
    pub client_tool_calls: usize,
    /// A deterministic approval prompt was sent.
    pub did_send_deterministic_approval_prompt: bool,
    /// A tool media block reply exists.
    pub has_tool_media_block_reply: bool,
    /// Asynchronous tool activity is outstanding.
    pub async_activity: bool,
    /// The provider/model is eligible for the non-visible-turn guard.
    pub provider_eligible: bool,
    /// The route's source-reply mode.
    pub source_reply_mode: SourceReplyMode,
    /// The prepared terminal's failure signal.
    pub failure_signal: Option<FailureSignal>,
    /// The prepared terminal's tool failure.
    pub terminal_tool_failure: Option<TerminalToolFailure>,
    /// The classified provider-failure copy of a failed original terminal (G4).
    pub provider_failure_copy: Option<String>,
    /// Assistant turns of the settled run so far.
    pub assistant_turns: u32,
    /// Facts carried onto a rebuilt terminal.
    pub carried: CarriedFacts,
    /// Opt-in: in `message_tool_only` mode, deliver a fixed recovery notice across source
    /// suppression when the private fallback is used (see `docs/finalization.md`).
    pub message_tool_only_recovery_notice: bool,
    /// The input came from the internal system (no notice).
    pub internal_system_input: bool,
    /// The run answers an ambient room event (no notice).
    pub ambient_room_event: bool,
}

impl TurnFacts {
    /// The facts of a turn whose tool calls `tools` (in order) all reported a terminal outcome,
    /// `batch_assistant` being the attempt's last assistant message (for a tool-only turn, the
    /// one carrying the tool calls): what the settled-turn gate needs to recognise a settled
    /// tool-only turn. Every other fact keeps its default: a user's turn that requires a reply,
    /// delivered automatically, with no timeout, abort or delivery so far; set those the host
    /// knows otherwise.
    ///
    /// ```
    /// use tether_finalizer::{ToolCallMeta, TurnFacts};
    /// let facts = TurnFacts::settled_tools(
    ///     vec![ToolCallMeta {
    ///         call_id: Some("call-1".into()),
    ///         tool_name: "exec".into(),
    ///         ..ToolCallMeta::default()
    ///     }],
    ///     None,
    /// );
    /// assert!(facts.item_lifecycle.settled());
    /// ```
    pub fn settled_tools(tools: Vec<ToolCallMeta>, batch_assistant: Option<AgentMessage>) -> Self {
        let items = u32::try_from(tools.len()).unwrap_or(u32::MAX);
        Self {
            item_lifecycle: ItemLifecycle::new(items, items, 0),
            tool_call_metas: tools,
            current_attempt_assistant: batch_assistant,
            ..Self::default()
        }
    }
}

impl Default for TurnFacts {
    fn default() -> Self {
        Self {
            reply_expectation: ReplyExpectation::Required,
            allow_empty_assistant_reply_as_silent: false,
            trigger: RunTrigger::User,
            silent_expected: false,
            empty_stop_continuation_allowed: true,
            item_lifecycle: ItemLifecycle::default(),
            tool_call_metas: Vec::new(),
            current_attempt_assistant: None,
            last_assistant: None,
            message_tool_sends: Vec::new(),
            payloads: Vec::new(),
            terminal_tool_presentation: false,
            externally_aborted: false,
            timeout_kind: None,
            client_tool_calls: 0,
            did_send_deterministic_approval_prompt: false,
            has_tool_media_block_reply: false,
            async_activity: false,
            provider_eligible: true,
            source_reply_mode: SourceReplyMode::Automatic,
            failure_signal: None,
            terminal_tool_failure: None,
            provider_failure_copy: None,
            assistant_turns: 1,
            carried: CarriedFacts::default(),
            message_tool_only_recovery_notice: false,
            internal_system_input: false,
            ambient_room_event: false,
        }
    }
}
