//! Producers of the settled-turn finalization context (see `docs/finalization.md`).
//!
//! - [`resolve_transcript_finalization_context`]: the built-in transcript producer, which
//!   declares a *failed* settled turn eligible only for a transient failure with the settled
//!   tool evidence intact.
//! - [`capture_settled_turn_context`]: the bounded, provenance-checked capture used by harnesses
//!   that replay a projection of their own history; cancellation and owner liveness are checked
//!   before and after the read, and the reader is consumed and dropped before returning.

use std::sync::Arc;

use tether_core::{
    AgentMessage, AssertCurrent, AttemptTerminal, Cancellation, ContentBlock, MessageRole,
    SettledTurnFinalizationContext,
};

use crate::bounded::{
    BoundedProjection, HistoryReadError, HistorySource, ProvenanceInput, RejectionReason,
    project_settled_turn_history,
};
use crate::evidence::TimeoutKind;

/// Where a run failure came from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureSource {
    /// The model prompt (the only source eligible for finalization).
    Prompt,
    /// A precheck before the prompt.
    Precheck,
    /// Compaction.
    Compaction,
    /// A hook (for example `before_agent_run`).
    Hook(String),
}

/// The facts of a failure, as classified by the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailureFacts {
    /// The error message.
    pub message: String,
    /// A structured error code (`ECONNRESET`, `insufficient_quota`, …).
    pub code: Option<String>,
    /// An HTTP status, when the failure came from a provider response.
    pub status: Option<u16>,
    /// Codes of nested causes.
    pub cause_codes: Vec<String>,
    /// The error's class name (`SyntaxError`, …).
    pub name: Option<String>,
}

impl FailureFacts {
    /// Facts with a message only.
    pub fn message(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            ..Self::default()
        }
    }
}

const TRANSIENT_CODES: [&str; 10] = [
    "ECONNRESET",
    "ECONNREFUSED",
    "ECONNABORTED",
    "ETIMEDOUT",
    "EPIPE",
    "EAI_AGAIN",
    "UND_ERR_SOCKET",
    "UND_ERR_CONNECT_TIMEOUT",
    "ERR_WEBSOCKET_TRANSPORT",
    "ERR_STREAM_PREMATURE_CLOSE",
];
const TRANSIENT_MESSAGES: [&str; 5] = [
    "socket hang up",
    "websocket error",
    "network error",
    "connection reset",
    "fetch failed",
];
const INCOMPLETE_STREAM_MESSAGES: [&str; 3] = [
    "stream ended without finish_reason",
    "premature close",
    "incomplete stream",
];

/// Whether a failure is transient (a network-level failure or an incomplete stream). Auth,
/// quota, policy, and parse failures are not.
pub fn is_transient_failure(facts: &FailureFacts) -> bool {
    if facts.name.as_deref() == Some("SyntaxError") {
        return false;
    }
    if let Some(status) = facts.status
        && !matches!(status, 500 | 502 | 503 | 504 | 529)
    {
        return false;
    }
    let code_hit = facts
        .code
        .iter()
        .chain(facts.cause_codes.iter())
        .any(|c| TRANSIENT_CODES.iter().any(|t| c.eq_ignore_ascii_case(t)));
    let lower = facts.message.to_lowercase();
    let message_hit = TRANSIENT_MESSAGES
        .iter()
        .chain(INCOMPLETE_STREAM_MESSAGES.iter())
        .any(|m| lower.contains(m));
    code_hit || message_hit || facts.status.is_some()
}

/// Inputs of the built-in transcript producer.
#[derive(Debug, Clone, Copy)]
pub struct TranscriptCaptureInput<'a> {
    /// How the attempt ended.
    pub terminal: &'a AttemptTerminal,
    /// A timeout observed during a phase (compaction, tool execution), even without a timeout
    /// terminal.
    pub timeout_observation: Option<TimeoutKind>,
    /// The thrown failure and its source, when one was thrown.
    pub thrown_failure: Option<(&'a FailureSource, &'a FailureFacts)>,
    /// The current attempt's completed assistant (a `stop_reason` of `error` carries
    /// `error_message` and `error_code` in its `meta`).
    pub completed_assistant: Option<&'a AgentMessage>,
    /// The visible assistant texts of the attempt.
    pub assistant_texts: &'a [String],
    /// The attempt's messages.
    pub messages_snapshot: &'a [AgentMessage],
}

fn assistant_failure(message: &AgentMessage) -> Option<FailureFacts> {
    if message.stop_reason.as_deref() != Some("error") {
        return None;
    }
    let text = |key: &str| {
        message
            .meta
            .get(key)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    Some(FailureFacts {
        message: text("error_message").unwrap_or_default(),
        code: text("error_code"),
        ..FailureFacts::default()
    })
}

fn has_tool_call(message: &AgentMessage) -> bool {
    message
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolCall { .. }))
}

/// Whether visible text was composed after the settled tools (pre-tool commentary inside a
/// tool-call assistant does not count; text that cannot be attributed to it does).
fn composed_after_tools(input: &TranscriptCaptureInput<'_>, boundary: usize) -> bool {
    let commentary: Vec<String> = input
        .messages_snapshot
        .iter()
        .filter(|m| m.role == MessageRole::Assistant && has_tool_call(m))
        .map(AgentMessage::visible_text)
        .filter(|t| !t.trim().is_empty())
        .collect();
    let after = input.messages_snapshot[boundary + 1..]
        .iter()
        .any(|m| m.role == MessageRole::Assistant && !m.visible_text().trim().is_empty());
    let unattributed = input
        .assistant_texts
        .iter()
        .chain(
            input
                .completed_assistant
                .map(AgentMessage::visible_text)
                .as_ref(),
        )
        .filter(|t| !t.trim().is_empty())
        .any(|t| !commentary.iter().any(|c| c.trim() == t.trim()));
    after || unattributed
}

/// The built-in producer (see `docs/finalization.md`): a frozen `Transcript` context for a failed settled
/// turn whose failure is transient, or `None`.
pub fn resolve_transcript_finalization_context(
    input: &TranscriptCaptureInput<'_>,
) -> Option<SettledTurnFinalizationContext> {
    if matches!(
        input.terminal,
        AttemptTerminal::Aborted | AttemptTerminal::TimedOut
    ) || matches!(
        input.timeout_observation,
        Some(TimeoutKind::Compaction | TimeoutKind::ToolExecution)
    ) {
        return None;
    }
    let failure = match input.thrown_failure {
        Some((FailureSource::Prompt, facts)) => Some(facts.clone()),
        Some(_) => return None,
        None => input.completed_assistant.and_then(assistant_failure),
    }?;
    if !is_transient_failure(&failure) {
        return None;
    }
    let boundary = input
        .messages_snapshot
        .iter()
        .rposition(|m| m.role == MessageRole::ToolResult)?;
    if composed_after_tools(input, boundary) {
        return None;
    }
    Some(SettledTurnFinalizationContext::Transcript(Arc::from(
        input.messages_snapshot.to_vec(),
    )))
}

/// The model selection recorded with a captured context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSelection {
    /// The model that ran the settled turn.
    pub model: String,
    /// Its provider.
    pub model_provider: Option<String>,
    /// The auth profile used.
    pub auth_profile_id: Option<String>,
}

/// A captured, frozen finalization context: the bounded projection plus the model selection.
/// Cloning shares it; nothing in it can be changed or holds a reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedTurnContext {
    projection: BoundedProjection,
    selection: Arc<ModelSelection>,
}

impl CapturedTurnContext {
    /// The projection.
    pub fn projection(&self) -> &BoundedProjection {
        &self.projection
    }

    /// The model selection.
    pub fn selection(&self) -> &ModelSelection {
        &self.selection
    }
}

/// Inputs of [`capture_settled_turn_context`].
#[derive(Clone)]
pub struct CaptureRequest<'a> {
    /// Provenance inputs and limits.
    pub provenance: ProvenanceInput<'a>,
    /// The settled turn's model (missing or empty: `model_unavailable`, no read).
    pub model: Option<&'a str>,
    /// The model provider.
    pub model_provider: Option<&'a str>,
    /// The auth profile.
    pub auth_profile_id: Option<&'a str>,
    /// The run's cancellation.
    pub cancellation: &'a Cancellation,
    /// The owner's liveness check (a closed owner fails with `history_read_failed`).
    pub owner_alive: AssertCurrent,
}

impl std::fmt::Debug for CaptureRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureRequest")
            .field("provenance", &self.provenance)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

fn check_live(req: &CaptureRequest<'_>) -> Result<(), RejectionReason> {
    if req.cancellation.is_cancelled() {
        return Err(RejectionReason::Cancelled);
    }
    (req.owner_alive)().map_err(|_| RejectionReason::HistoryReadFailed)
}

struct Guarded<'r, S> {
    inner: S,
    req: &'r CaptureRequest<'r>,
}

impl<S: HistorySource> HistorySource for Guarded<'_, S> {
    fn next_message(&mut self) -> Option<Result<AgentMessage, HistoryReadError>> {
        if let Err(reason) = check_live(self.req) {
            return Some(Err(HistoryReadError {
                reason: Some(reason),
                message: "capture interrupted".into(),
            }));
        }
        self.inner.next_message()
    }
}

/// Captures a bounded, provenance-checked context (see `docs/finalization.md`).
///
/// Checks cancellation and owner liveness before and after the read; a missing model returns
/// `model_unavailable` without opening the reader; any failure is a closed
/// [`RejectionReason`] (cancellation wins over a read failure). The reader returned by `open`
/// is consumed and dropped before this function returns.
pub fn capture_settled_turn_context<S: HistorySource>(
    req: &CaptureRequest<'_>,
    open: impl FnOnce() -> Result<S, HistoryReadError>,
) -> Result<CapturedTurnContext, RejectionReason> {
    let span = tracing::info_span!(
        "settled_turn_context_capture",
        turn_id = req.provenance.turn_id
    );
    let _enter = span.enter();
    let outcome = (|| -> Result<CapturedTurnContext, RejectionReason> {
        check_live(req)?;
        let model = req
            .model
            .filter(|m| !m.trim().is_empty())
            .ok_or(RejectionReason::ModelUnavailable)?;
        let projected = open()
            .map_err(|e| e.reason.unwrap_or(RejectionReason::HistoryReadFailed))
            .and_then(|source| {
                project_settled_turn_history(req.provenance, Guarded { inner: source, req })
            });
        check_live(req)?;
        let projection = projected?;
        Ok(CapturedTurnContext {
            projection,
            selection: Arc::new(ModelSelection {
                model: model.to_owned(),
                model_provider: req.model_provider.map(str::to_owned),
                auth_profile_id: req.auth_profile_id.map(str::to_owned),
            }),
        })
    })();
    if let Err(reason) = &outcome {
        tracing::warn!(
            reason = reason.as_str(),
            "settled-turn finalization context capture failed"
        );
    }
    outcome
}

/// A failed native turn as the harness's event projector saw it (see `docs/finalization.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NativeTurnFailure<'a> {
    /// The native error info of the failed turn (`serverOverloaded`, `usageLimitExceeded`, …).
    pub error_info: Option<&'a str>,
    /// The error info of an error notification that preceded a bare failed turn.
    pub preceding_notification: Option<&'a str>,
    /// The provider refused the request.
    pub provider_refusal: bool,
}

/// Whether a failed native turn may be finalized: only transient server-side failures
/// (overload, an internal server error notification before a bare failure). Auth, usage-limit
/// and refusal failures never are.
pub fn native_failure_finalization_allowed(failure: &NativeTurnFailure<'_>) -> bool {
    if failure.provider_refusal {
        return false;
    }
    match failure.error_info {
        Some(info) => info == "serverOverloaded",
        None => matches!(
            failure.preceding_notification,
            Some("internalServerError" | "serverOverloaded")
        ),
    }
}
