//! The side-effect-aware incomplete-turn warning (see `docs/finalization.md`).

use tether_core::{AttemptResult, AttemptTerminal};

use crate::facts::{PayloadKind, ReplyPayload, TurnFacts};

/// The default incomplete-turn text.
pub const INCOMPLETE_TURN_TEXT: &str = "⚠️ Agent couldn't generate a response. Please try again.";
/// The base of the side-effect-aware variant.
pub const INCOMPLETE_TURN_BASE_TEXT: &str = "⚠️ Agent couldn't generate a response.";
/// Appended when tool actions may already have run.
pub const SIDE_EFFECT_NOTE: &str =
    " Note: some tool actions may have already been executed — please verify before retrying.";
/// The text of a run that timed out before answering.
pub const TIMED_OUT_TEXT: &str = "⚠️ Agent timed out before it could respond.";
/// The error message recorded on the run.
pub const INCOMPLETE_TURN_MESSAGE: &str = "Agent couldn't generate a response.";
/// The error message recorded on a timed-out run.
pub const TIMED_OUT_MESSAGE: &str = "Agent run timed out before producing a response.";

/// The liveness state of a run that ended without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The turn was abandoned (the user may retry).
    Abandoned,
    /// The turn is blocked (a timeout: retrying may repeat work).
    Blocked,
}

/// The recorded incomplete-turn error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncompleteTurnError {
    /// Always `incomplete_turn`.
    pub kind: &'static str,
    /// The error message.
    pub message: &'static str,
    /// Whether model fallback is safe (nothing with side effects ran).
    pub fallback_safe: bool,
}

/// The surfaced incomplete turn.
#[derive(Debug, Clone, PartialEq)]
pub struct IncompleteTurn {
    /// The error payload shown to the user.
    pub payload: ReplyPayload,
    /// The recorded error.
    pub error: IncompleteTurnError,
    /// The liveness state.
    pub liveness: Liveness,
    /// Whether replay is invalid.
    pub replay_invalid: bool,
}

/// Inputs of [`resolve_incomplete_turn`].
#[derive(Debug, Clone, Copy)]
pub struct IncompleteTurnInput<'a> {
    /// The (possibly rebuilt) attempt.
    pub attempt: &'a AttemptResult,
    /// The turn facts.
    pub facts: &'a TurnFacts,
    /// A usable payload exists.
    pub usable_payload: bool,
    /// The assistant is incomplete (so a usable payload does not suffice).
    pub assistant_incomplete: bool,
    /// The run's replay state had potential side effects.
    pub replay_state_side_effects: bool,
    /// A classified prompt-failure copy.
    pub failure_copy: Option<&'a str>,
    /// The batch ended in intentional termination.
    pub intentional_termination: bool,
    /// A tool authored the final source reply.
    pub tool_authored_final_reply: bool,
    /// A spawn expects a completion message.
    pub completion_message_spawn: bool,
    /// The failure was a replay-safe provider refusal.
    pub replay_safe_provider_refusal: bool,
}

/// The incomplete-turn text: the failure copy or the default, with the side-effect note when
/// tool actions may already have run.
pub fn incomplete_turn_text(side_effects: bool, failure_copy: Option<&str>) -> String {
    match (side_effects, failure_copy) {
        (false, Some(copy)) => copy.to_owned(),
        (false, None) => INCOMPLETE_TURN_TEXT.to_owned(),
        (true, copy) => format!(
            "{}{SIDE_EFFECT_NOTE}",
            copy.unwrap_or(INCOMPLETE_TURN_BASE_TEXT)
        ),
    }
}

/// Resolves the incomplete-turn warning, or `None` when it must not be emitted.
pub fn resolve_incomplete_turn(input: &IncompleteTurnInput<'_>) -> Option<IncompleteTurn> {
    let a = input.attempt;
    let f = input.facts;
    let side_effects = input.replay_state_side_effects || a.replay.had_potential_side_effects;
    if (input.usable_payload && !input.assistant_incomplete)
        || f.externally_aborted
        || matches!(a.terminal, AttemptTerminal::Aborted)
        || f.client_tool_calls > 0
        || a.yield_detected
        || f.did_send_deterministic_approval_prompt
        || a.last_tool_error.is_some()
        || input.intentional_termination
        || !a.tool_media_urls.is_empty()
        || f.has_tool_media_block_reply
        || a.delivery.did_deliver_source_reply_via_message_tool
        || input.tool_authored_final_reply
        || input.completion_message_spawn
        || f.async_activity
        || (a
            .completed_assistant
            .as_ref()
            .and_then(|m| m.stop_reason.as_deref())
            == Some("stop")
            && f.item_lifecycle.active > 0)
    {
        return None;
    }
    let timed_out = matches!(a.terminal, AttemptTerminal::TimedOut) || f.timeout_kind.is_some();
    let (text, message, liveness) = if timed_out {
        let text = if side_effects {
            format!("{TIMED_OUT_TEXT}{SIDE_EFFECT_NOTE}")
        } else {
            TIMED_OUT_TEXT.to_owned()
        };
        (text, TIMED_OUT_MESSAGE, Liveness::Blocked)
    } else {
        (
            incomplete_turn_text(side_effects, input.failure_copy),
            INCOMPLETE_TURN_MESSAGE,
            Liveness::Abandoned,
        )
    };
    tracing::warn!(
        stop_reason = a
            .completed_assistant
            .as_ref()
            .and_then(|m| m.stop_reason.as_deref()),
        payloads = f.payloads.len(),
        tools = a.tool_metas.len(),
        replay_safe = a.replay.replay_safe,
        "incomplete turn detected — surfacing error to user"
    );
    Some(IncompleteTurn {
        payload: ReplyPayload::new(PayloadKind::IncompleteTurn, text, true),
        error: IncompleteTurnError {
            kind: "incomplete_turn",
            message,
            fallback_safe: !timed_out && !side_effects,
        },
        liveness,
        replay_invalid: !input.replay_safe_provider_refusal,
    })
}
