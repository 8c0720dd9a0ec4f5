//! The one error enum of the finalizer crate boundary.

use std::fmt;

use crate::result::SettledTurnFinalizationResult;

/// How a finalizer-owned terminal outcome ended (see
/// [`FinalizerError::TerminalOutcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TerminalStatus {
    /// The finalization attempt timed out.
    Timeout,
    /// The finalization attempt was cancelled.
    Cancelled,
}

impl fmt::Display for TerminalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
        })
    }
}

/// Everything that can go wrong while validating, projecting or orchestrating a settled-turn
/// finalization. Variants are stable and matchable; the messages follow the reference texts.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum FinalizerError {
    /// The result carried a field outside the allowed set (a present `null` counts).
    #[error("Settled-turn finalization returned unsupported result field: {field}")]
    UnsupportedResultField {
        /// The first offending field name.
        field: String,
    },
    /// The assistant carried a field outside
    /// [`ALLOWED_ASSISTANT_FIELDS`](crate::result::ALLOWED_ASSISTANT_FIELDS) (for example a
    /// chat-style `tool_calls`), or a `content` that is neither a string nor an array.
    #[error("Settled-turn finalization returned unsupported assistant field: {field}")]
    UnsupportedAssistantField {
        /// The first offending field name (in key order).
        field: String,
    },
    /// A content block is not an object with a type of
    /// [`ALLOWED_CONTENT_BLOCK_TYPES`](crate::result::ALLOWED_CONTENT_BLOCK_TYPES).
    #[error("Settled-turn finalization returned unsupported content block {field} (type {})", block_type.as_deref().unwrap_or("missing"))]
    UnsupportedContentBlock {
        /// Where the block is (`content[2]`).
        field: String,
        /// Its `type`, when it has a string one.
        block_type: Option<String>,
    },
    /// The input nests deeper than the limit; nothing was copied or walked recursively.
    #[error("Settled-turn finalization input nests deeper than {limit} levels")]
    TooDeep {
        /// The nesting limit ([`MAX_RESULT_DEPTH`](crate::result::MAX_RESULT_DEPTH)).
        limit: usize,
    },
    /// `assistant` is missing or is not an assistant message.
    #[error("Settled-turn finalization did not return an assistant message")]
    NotAssistant,
    /// The assistant stopped for a tool call or carries a tool-call block.
    #[error("Settled-turn finalization returned a tool call")]
    ToolCall {
        /// Names of the tool-call blocks found (may be empty for a bare `toolUse` stop).
        tool_names: Vec<String>,
    },
    /// The assistant stopped for a reason other than `stop`.
    #[error("Settled-turn finalization returned unsuccessful stop reason: {reason}")]
    UnsuccessfulStopReason {
        /// The stop reason (`missing` when absent).
        reason: String,
    },
    /// `assistant_message_index` is present and not a safe integer ≥ 0.
    #[error("Settled-turn finalization returned an invalid assistant message index")]
    InvalidMessageIndex,
    /// An allowed field has the wrong shape (usage, ownership flag, key, trace).
    #[error("Settled-turn finalization returned an invalid {field}")]
    InvalidField {
        /// The allowed field whose value is malformed.
        field: &'static str,
    },
    /// The answer has no visible text, or is the silent token. Carries the result so the host
    /// silence policy can decide.
    #[error("Settled-turn finalization completed without a visible answer")]
    Empty {
        /// The offending (otherwise valid) result.
        result: Box<SettledTurnFinalizationResult>,
        /// Whether the text was the silent token (`NO_REPLY`) rather than blank.
        silent: bool,
    },
    /// The projected full attempt did not complete successfully.
    #[error("Settled-turn finalization attempt did not complete successfully")]
    AttemptUnsuccessful,
    /// The projected full attempt reported tool, delivery, replay or lifecycle activity.
    #[error("Settled-turn finalization attempt reported capability activity")]
    CapabilityActivity {
        /// Which evidence was found first (for diagnostics).
        evidence: &'static str,
    },
    /// The projected full attempt has no completed assistant of its own.
    #[error("Settled-turn finalization returned no completed assistant message")]
    NoCompletedAssistant,
    /// A finalizer-owned timeout or cancellation, classified as a canonical terminal outcome.
    #[error("{message}")]
    TerminalOutcome {
        /// Timeout or cancellation.
        status: TerminalStatus,
        /// The closed reason (`hard_timeout`, `idle_timeout`, `aborted`).
        reason: &'static str,
        /// Human text.
        message: String,
    },
    /// The harness has no settled-turn finalizer.
    #[error("Agent harness {harness} cannot safely finalize a settled tool turn.")]
    CannotFinalize {
        /// The harness id.
        harness: String,
    },
    /// The finalizer received a context it cannot open (unavailable, transcript, or forged).
    #[error("{label} settled-turn finalization context is unavailable")]
    ContextUnavailable {
        /// The finalizer's label (for example `Codex`).
        label: String,
    },
    /// A bounded finalizer rejected its native turn (provider missing, unexpected item,
    /// attestation mismatch, …).
    #[error("{label} settled-turn finalization {reason}")]
    BoundedTurnRejected {
        /// The finalizer's label.
        label: String,
        /// What was wrong, in the reference's words.
        reason: String,
    },
    /// An operator model policy is configured but the harness cannot run exactly the bound
    /// model.
    #[error(
        "operator model policy requires exact native model policy support; agent harness {harness} does not provide it"
    )]
    ModelPolicyPreflight {
        /// The harness id.
        harness: String,
    },
    /// The run's admitted authority ended before finalization.
    #[error("admitted run authority is no longer active")]
    AdmissionInactive,
    /// The run (or a finalization stage) was cancelled.
    #[error("settled-turn finalization was cancelled: {reason}")]
    Cancelled {
        /// The abort reason.
        reason: String,
    },
    /// The session transcript writer was rebound: the fallback must not be written elsewhere.
    #[error("session transcript writer claim was rebound: {message}")]
    WriterRebound {
        /// What the transcript reported.
        message: String,
    },
    /// The harness failed.
    #[error("{0}")]
    Harness(#[source] tether_core::Error),
}

impl FinalizerError {
    /// Whether this is the empty (or silent) outcome, which the lifecycle maps to `empty`.
    pub fn is_empty(&self) -> bool {
        matches!(self, Self::Empty { .. })
    }
}

impl From<tether_core::Error> for FinalizerError {
    fn from(err: tether_core::Error) -> Self {
        Self::Harness(err)
    }
}
