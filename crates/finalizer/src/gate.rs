//! The request gate (see `docs/finalization.md`): should core finalize a settled turn at all, and with
//! which host prompt.

use tether_core::{AgentMessage, AttemptResult, AttemptTerminal, ContentBlock, MessageRole};

use crate::evidence::{ItemLifecycle, TimeoutKind};
use crate::facts::{PayloadKind, ReplyExpectation, TurnFacts};
use crate::result::is_silent_reply_text;

/// The base host finalization instruction (own words; see `docs/finalization.md`).
pub const SETTLED_TOOL_FINALIZATION_INSTRUCTION: &str = "The previous turn completed its tool calls but gave the user no visible answer. Tools are unavailable now: this is a text-only pass, so reply in plain text and do not attempt any tool call. Continue from the current transcript and give the final user-visible answer now. Do not repeat completed tool calls and do not start over.";

/// Appended when the proven-settled batch has a failed tool.
pub const TOOL_FAILURE_INSTRUCTION: &str =
    "If a tool failed, say so; never claim completion or success.";

/// The settled-batch evidence of the current turn (see `docs/finalization.md`).
#[derive(Debug, Clone, PartialEq)]
pub struct SettledBatchEvidence {
    /// Index of the batch assistant in `messages_snapshot`.
    pub batch_index: usize,
    /// The batch assistant (the attributed tool-call entry).
    pub batch_assistant: AgentMessage,
    /// The requested calls, `(id, name)`.
    pub requested_tool_calls: Vec<(String, String)>,
    /// The batch assistant stopped with `toolUse`.
    pub stopped_for_tool_use: bool,
    /// Every call has an id and name and a later result with the same name.
    pub all_tool_calls_recorded: bool,
    /// Recorded, and the lifecycle is settled (started > 0, completed == started, active 0).
    pub all_tools_proven_settled: bool,
    /// A current call is parked in a suspended code-mode run.
    pub parked_code_mode_run: bool,
    /// Names of current calls whose result is an error.
    pub failed_tool_names: Vec<String>,
    /// `last_tool_error` belongs to an earlier tool.
    pub has_stale_tool_error: bool,
    /// `last_tool_error` is not proven to belong to a settled failure of this batch.
    pub has_unsettled_tool_error: bool,
    /// Every current call ended with a successful `terminate`.
    pub intentional_termination: bool,
}

fn tool_calls_of(message: &AgentMessage) -> Vec<(String, String)> {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolCall { id, name, .. } => Some((id.clone(), name.clone())),
            _ => None,
        })
        .collect()
}

/// Resolves the settled-batch evidence from `messages_snapshot` (see `docs/finalization.md`). `None` when
/// no assistant with tool calls follows the latest user message.
pub fn resolve_settled_tool_batch_evidence(
    settled: &AttemptResult,
    facts: &TurnFacts,
) -> Option<SettledBatchEvidence> {
    let snapshot = &settled.messages_snapshot;
    let after_user = snapshot
        .iter()
        .rposition(|m| m.role == MessageRole::User)
        .map_or(0, |i| i + 1);
    let has_calls =
        |m: &AgentMessage| m.role == MessageRole::Assistant && !tool_calls_of(m).is_empty();
    let current = facts.current_attempt_assistant.as_ref();
    let batch_index = current
        .and_then(|cur| {
            snapshot[after_user..]
                .iter()
                .rposition(|m| m == cur && has_calls(m))
                .map(|i| i + after_user)
        })
        .or_else(|| {
            snapshot[after_user..]
                .iter()
                .rposition(has_calls)
                .map(|i| i + after_user)
        })?;
    let batch_assistant = snapshot[batch_index].clone();
    let requested = tool_calls_of(&batch_assistant);
    let results: Vec<&AgentMessage> = snapshot[batch_index + 1..]
        .iter()
        .filter(|m| m.role == MessageRole::ToolResult && m.tool_call_id.is_some())
        .collect();
    let result_for = |id: &str, name: &str| {
        results
            .iter()
            .rev()
            .find(|r| r.tool_call_id.as_deref() == Some(id) && r.tool_name.as_deref() == Some(name))
            .copied()
    };
    let all_recorded = requested
        .iter()
        .all(|(id, name)| !id.is_empty() && !name.is_empty() && result_for(id, name).is_some());
    let lifecycle: ItemLifecycle = facts.item_lifecycle;
    let settled_all = all_recorded && lifecycle.settled();
    let is_current = |call_id: &Option<String>, name: &str| {
        requested
            .iter()
            .any(|(id, n)| call_id.as_deref() == Some(id.as_str()) && n == name)
    };
    let parked = facts
        .tool_call_metas
        .iter()
        .any(|m| m.code_mode_suspended && is_current(&m.call_id, &m.tool_name));
    let failed_tool_names: Vec<String> = requested
        .iter()
        .filter(|(id, name)| result_for(id, name).is_some_and(|r| r.is_error))
        .map(|(_, name)| name.clone())
        .collect();
    let tool_use = batch_assistant.stop_reason.as_deref() == Some("toolUse");
    let (stale, unsettled) = match &settled.last_tool_error {
        None => (false, false),
        Some(err) => {
            let stale = tool_use && settled_all && failed_tool_names.is_empty();
            let same_name_calls = requested
                .iter()
                .filter(|(_, n)| *n == err.tool_name)
                .count();
            let same_name_failed = failed_tool_names
                .iter()
                .filter(|n| **n == err.tool_name)
                .count();
            let unsettled = !stale
                && (!tool_use
                    || !settled_all
                    || same_name_failed == 0
                    // Ownership is by name: an ambiguous same-name batch stays unsettled.
                    || same_name_calls > same_name_failed);
            (stale, unsettled)
        }
    };
    let any_async = facts
        .tool_call_metas
        .iter()
        .any(|m| m.async_started && is_current(&m.call_id, &m.tool_name));
    let intentional = tool_use
        && settled_all
        && failed_tool_names.is_empty()
        && !unsettled
        && !any_async
        && !requested.is_empty()
        && requested.iter().all(|(id, name)| {
            facts
                .tool_call_metas
                .iter()
                .rev()
                .find(|m| m.call_id.as_deref() == Some(id.as_str()) && m.tool_name == *name)
                .is_some_and(|m| m.terminate && !m.is_error)
        });
    Some(SettledBatchEvidence {
        batch_index,
        batch_assistant,
        requested_tool_calls: requested,
        stopped_for_tool_use: tool_use,
        all_tool_calls_recorded: all_recorded,
        all_tools_proven_settled: settled_all,
        parked_code_mode_run: parked,
        failed_tool_names,
        has_stale_tool_error: stale,
        has_unsettled_tool_error: unsettled,
        intentional_termination: intentional,
    })
}

/// What the gate decided: finalize with this prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct FinalizationRequest {
    /// The host finalization prompt.
    pub prompt: String,
    /// The settled-batch evidence the decision rests on.
    pub batch: SettledBatchEvidence,
}

/// Whether the source reply was already delivered (a `source_reply_final: false` send is
/// progress and does not count; `true` or a legacy unmarked send does).
pub fn source_reply_delivered(settled: &AttemptResult, facts: &TurnFacts) -> bool {
    settled.delivery.did_deliver_source_reply_via_message_tool
        || facts
            .message_tool_sends
            .iter()
            .any(|s| s.source_reply_final != Some(false))
}

/// Whether an empty (or silent) reply may be treated as silence (protects heartbeat
/// `NO_REPLY`; see `docs/finalization.md`).
pub fn should_treat_empty_reply_as_silent(settled: &AttemptResult, facts: &TurnFacts) -> bool {
    let current = facts
        .current_attempt_assistant
        .as_ref()
        .or(settled.completed_assistant.as_ref());
    // Only a completed stop reply can be silence (a tool-call entry is not a reply).
    let eligible = current.is_some_and(|m| {
        let text = m.visible_text();
        m.stop_reason.as_deref() == Some("stop")
            && (text.trim().is_empty() || is_silent_reply_text(&text))
    });
    facts.reply_expectation == ReplyExpectation::Optional
        && facts.allow_empty_assistant_reply_as_silent
        && facts.item_lifecycle.active == 0
        && !facts.async_activity
        && !source_reply_delivered(settled, facts)
        && eligible
}

/// The number of payloads that count as an answer (synthetic error payloads and pre-tool
/// commentary do not; a silent cron tool result counts as one).
pub fn usable_payload_count(settled: &AttemptResult, facts: &TurnFacts) -> usize {
    let failed_with_context = matches!(settled.terminal, AttemptTerminal::Failed { .. })
        && settled.settled_turn_finalization_context.is_some();
    facts
        .payloads
        .iter()
        .filter(|p| match p.kind {
            PayloadKind::ToolErrorWarning | PayloadKind::PreToolCommentary => false,
            PayloadKind::ProviderError => !failed_with_context,
            _ => true,
        })
        .count()
}

/// The request gate (see `docs/finalization.md`): `Some(request)` when core should run settled-turn
/// finalization, `None` for "not attempted".
pub fn resolve_settled_turn_finalization_request(
    settled: &AttemptResult,
    facts: &TurnFacts,
    has_finalizer: bool,
) -> Option<FinalizationRequest> {
    let context = settled.settled_turn_finalization_context.is_some();
    // Candidate stage.
    if !has_finalizer && !context {
        return None;
    }
    let current = facts
        .current_attempt_assistant
        .as_ref()
        .or(settled.completed_assistant.as_ref());
    if current.is_some_and(|m| m.stop_reason.as_deref() == Some("error")) && !context {
        return None;
    }
    // Never prefer an older batch over a truncated current assistant.
    if current.is_some_and(|m| m.stop_reason.as_deref() == Some("length")) {
        return None;
    }
    if source_reply_delivered(settled, facts) || should_treat_empty_reply_as_silent(settled, facts)
    {
        return None;
    }
    // Continuation stage.
    if usable_payload_count(settled, facts) != 0
        || facts.terminal_tool_presentation
        || facts.externally_aborted
        || matches!(settled.terminal, AttemptTerminal::Aborted)
    {
        return None;
    }
    let timed_out =
        matches!(settled.terminal, AttemptTerminal::TimedOut) || facts.timeout_kind.is_some();
    if timed_out
        && !(facts.timeout_kind == Some(TimeoutKind::IdlePrompt)
            && settled.replay.had_potential_side_effects)
    {
        return None;
    }
    if matches!(settled.terminal, AttemptTerminal::Failed { .. }) && !context {
        return None;
    }
    let batch = resolve_settled_tool_batch_evidence(settled, facts)?;
    if batch.stopped_for_tool_use {
        if !batch.all_tools_proven_settled {
            return None;
        }
    } else if !empty_stop_after_settled_tools(settled, facts) {
        return None;
    }
    // A turn classified silent (an explicit `NO_REPLY` after the tools) is continued only for a
    // required reply without a settled tool failure; otherwise the failure card stands.
    let explicit_silent = current.is_some_and(|m| {
        m.stop_reason.as_deref() == Some("stop") && is_silent_reply_text(&m.visible_text())
    });
    if explicit_silent
        && (facts.reply_expectation != ReplyExpectation::Required
            || !batch.failed_tool_names.is_empty())
    {
        return None;
    }
    if batch.intentional_termination
        || batch.has_unsettled_tool_error
        || batch.parked_code_mode_run
        || facts.async_activity
        || facts.tool_call_metas.iter().any(|m| m.async_started)
        || !settled.accepted_session_spawns.is_empty()
        || facts.client_tool_calls > 0
        || settled.yield_detected
        || facts.did_send_deterministic_approval_prompt
        || facts.has_tool_media_block_reply
        || !facts.provider_eligible
    {
        return None;
    }
    let mut prompt = SETTLED_TOOL_FINALIZATION_INSTRUCTION.to_owned();
    if !batch.failed_tool_names.is_empty() {
        prompt.push('\n');
        prompt.push_str(TOOL_FAILURE_INSTRUCTION);
    }
    Some(FinalizationRequest { prompt, batch })
}

/// The "empty stop after settled tools" case (see `docs/finalization.md`).
fn empty_stop_after_settled_tools(settled: &AttemptResult, facts: &TurnFacts) -> bool {
    let current = facts
        .current_attempt_assistant
        .as_ref()
        .or(settled.completed_assistant.as_ref());
    facts.empty_stop_continuation_allowed
        && facts.reply_expectation == ReplyExpectation::Required
        && current.is_some_and(|m| {
            m.stop_reason.as_deref() == Some("stop") && m.visible_text().trim().is_empty()
        })
        && !facts.tool_call_metas.is_empty()
        && facts
            .tool_call_metas
            .iter()
            .all(|m| !m.is_error && !m.async_started)
        && facts.item_lifecycle.settled()
        && settled.accepted_session_spawns.is_empty()
}
