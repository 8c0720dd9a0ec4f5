//! Projection of a full attempt result into a narrow finalization result (see `docs/finalization.md`), for
//! harnesses that reuse their ordinary attempt engine behind a restricted allow-list.

use serde_json::{Map, Value};
use tether_core::{AgentMessage, AttemptResult, AttemptTerminal, ContentBlock, MessageRole};

use crate::error::{FinalizerError, TerminalStatus};
use crate::evidence::{ItemLifecycle, TimeoutKind};
use crate::result::{
    DiagnosticTrace, FinalAssistant, MAX_RESULT_DEPTH, SettledTurnFinalizationResult, depth_within,
    validate_settled_turn_finalization_result,
};

/// Everything a full attempt engine reports, beyond what [`AttemptResult`] carries, that the
/// projection must inspect. All fields default to "nothing happened".
#[derive(Debug, Clone, Default)]
pub struct FullAttemptEvidence {
    /// The attempt result (terminal, completed assistant, tool metas, media, spawns, tool error,
    /// replay, delivery, usage, yield).
    pub attempt: AttemptResult,
    /// For a timed-out terminal: which timeout.
    pub timeout_kind: Option<TimeoutKind>,
    /// Compactions performed during the attempt.
    pub compaction_count: u32,
    /// A prompt-timeout outcome was recorded.
    pub prompt_timeout_outcome: bool,
    /// A preflight recovery ran.
    pub preflight_recovery: bool,
    /// A `before_agent_finalize` revision was requested.
    pub before_agent_finalize_revision_reason: Option<String>,
    /// The native runtime reported a failure.
    pub native_runtime_failure: bool,
    /// The provider reported a format error.
    pub provider_format_error: bool,
    /// Tool item lifecycle counts.
    pub item_lifecycle: ItemLifecycle,
    /// Replay metadata of the current attempt only, when tracked separately.
    pub current_attempt_replay: Option<tether_core::ReplayMetadata>,
    /// Client tool calls handed back to the caller.
    pub client_tool_calls: Vec<String>,
    /// A deterministic approval prompt was sent.
    pub did_send_deterministic_approval_prompt: bool,
    /// A heartbeat tool response was produced.
    pub heartbeat_tool_response: bool,
    /// Tool audio is to be sent as voice.
    pub tool_audio_as_voice: bool,
    /// Tools produced trusted local media.
    pub tool_trusted_local_media: bool,
    /// A tool media block reply exists.
    pub has_tool_media_block_reply: bool,
    /// Cron jobs added successfully.
    pub successful_cron_adds: u32,
    /// The last assistant seen (possibly stale; never accepted as the answer).
    pub last_assistant: Option<AgentMessage>,
    /// The current attempt's possibly partial assistant (never accepted as the answer).
    pub current_attempt_assistant: Option<AgentMessage>,
    /// The engine persisted the assistant into the application transcript itself.
    pub assistant_transcript_owned: bool,
    /// The idempotency key of that row.
    pub assistant_transcript_idempotency_key: Option<String>,
    /// Index of the last assistant text message in the stream.
    pub last_assistant_text_message_index: Option<u64>,
    /// Diagnostic trace context.
    pub diagnostic_trace: Option<DiagnosticTrace>,
}

fn block_to_json(block: &ContentBlock) -> Option<Value> {
    Some(match block {
        ContentBlock::Text { text } => serde_json::json!({"type": "text", "text": text}),
        ContentBlock::Thinking { text } => serde_json::json!({"type": "thinking", "text": text}),
        ContentBlock::ToolCall {
            id,
            name,
            arguments,
        } => {
            serde_json::json!({"type": "toolCall", "id": id, "name": name, "arguments": arguments})
        }
        ContentBlock::Image { mime_type, data } => {
            serde_json::json!({"type": "image", "mime_type": mime_type, "data": data})
        }
        _ => return None,
    })
}

impl FinalAssistant {
    /// The JSON form of a transcript assistant message (`meta` fields are kept as attribution).
    pub fn from_agent_message(message: &AgentMessage) -> Self {
        let mut raw: Map<String, Value> = message.meta.clone();
        let role = match message.role {
            MessageRole::Assistant => "assistant",
            MessageRole::User => "user",
            MessageRole::ToolResult => "toolResult",
            _ => "system",
        };
        raw.insert("role".into(), Value::from(role));
        raw.insert(
            "content".into(),
            Value::Array(message.content.iter().filter_map(block_to_json).collect()),
        );
        match &message.stop_reason {
            Some(reason) => {
                raw.insert("stop_reason".into(), Value::from(reason.as_str()));
            }
            None => {
                raw.remove("stop_reason");
            }
        }
        Self::from_json(raw)
    }
}

fn non_empty<T>(items: &[T]) -> bool {
    !items.is_empty()
}

/// The first capability-activity evidence found, if any.
fn capability_activity(evidence: &FullAttemptEvidence) -> Option<&'static str> {
    let a = &evidence.attempt;
    let d = &a.delivery;
    let replay_dirty =
        |r: &tether_core::ReplayMetadata| r.had_potential_side_effects || !r.replay_safe;
    let checks: [(bool, &'static str); 22] = [
        (non_empty(&a.tool_metas), "tool_metas"),
        (evidence.item_lifecycle.any(), "item_lifecycle"),
        (replay_dirty(&a.replay), "replay_metadata"),
        (
            evidence
                .current_attempt_replay
                .as_ref()
                .is_some_and(replay_dirty),
            "current_attempt_replay_metadata",
        ),
        (non_empty(&evidence.client_tool_calls), "client_tool_calls"),
        (
            non_empty(&a.accepted_session_spawns),
            "accepted_session_spawns",
        ),
        (d.did_send_via_messaging_tool, "did_send_via_messaging_tool"),
        (
            d.did_deliver_source_reply_via_message_tool,
            "did_deliver_source_reply_via_message_tool",
        ),
        (
            evidence.did_send_deterministic_approval_prompt,
            "did_send_deterministic_approval_prompt",
        ),
        (
            non_empty(&d.messaging_tool_sent_texts),
            "messaging_tool_sent_texts",
        ),
        (
            non_empty(&d.messaging_tool_sent_media_urls),
            "messaging_tool_sent_media_urls",
        ),
        (
            non_empty(&d.messaging_tool_sent_targets),
            "messaging_tool_sent_targets",
        ),
        (
            non_empty(&d.messaging_tool_source_reply_payloads),
            "messaging_tool_source_reply_payloads",
        ),
        (evidence.heartbeat_tool_response, "heartbeat_tool_response"),
        (non_empty(&a.tool_media_urls), "tool_media_urls"),
        (
            non_empty(&a.host_owned_tool_media_urls),
            "host_owned_tool_media_urls",
        ),
        (evidence.tool_audio_as_voice, "tool_audio_as_voice"),
        (
            evidence.tool_trusted_local_media,
            "tool_trusted_local_media",
        ),
        (
            evidence.has_tool_media_block_reply,
            "has_tool_media_block_reply",
        ),
        (a.last_tool_error.is_some(), "last_tool_error"),
        (evidence.successful_cron_adds > 0, "successful_cron_adds"),
        (a.yield_detected, "yield_detected"),
    ];
    checks.iter().find(|(hit, _)| *hit).map(|(_, name)| *name)
}

/// [`FinalizerError::TooDeep`] when any caller-supplied JSON the projection copies (the
/// completed assistant's `meta` values and tool-call arguments, the diagnostic trace) nests
/// deeper than [`MAX_RESULT_DEPTH`]; checked without recursion, before any copy.
fn check_projection_depth(evidence: &FullAttemptEvidence) -> Result<(), FinalizerError> {
    let limit = MAX_RESULT_DEPTH - 2;
    let too_deep = || FinalizerError::TooDeep {
        limit: MAX_RESULT_DEPTH,
    };
    if let Some(message) = &evidence.attempt.completed_assistant {
        if !message.meta.values().all(|v| depth_within(v, limit)) {
            return Err(too_deep());
        }
        for block in &message.content {
            if let ContentBlock::ToolCall { arguments, .. } = block
                && !depth_within(arguments, limit)
            {
                return Err(too_deep());
            }
        }
    }
    if let Some(trace) = &evidence.diagnostic_trace
        && !trace.0.values().all(|v| depth_within(v, limit))
    {
        return Err(too_deep());
    }
    Ok(())
}

/// Projects a full attempt result into a narrow result (see `docs/finalization.md`), in order: input
/// depth ([`FinalizerError::TooDeep`]), an idle timeout that reported capability activity
/// (as [`FinalizerError::CapabilityActivity`]), terminal timeout/cancellation as a canonical
/// terminal outcome, unsuccessful run, capability activity, completed assistant, build, then
/// the narrow validator.
pub fn project_settled_turn_finalization_attempt_result(
    evidence: &FullAttemptEvidence,
) -> Result<SettledTurnFinalizationResult, FinalizerError> {
    let a = &evidence.attempt;
    check_projection_depth(evidence)?;
    // An idle timeout after capability activity reports the activity: the timeout must not
    // hide tool, delivery or replay evidence.
    if matches!(a.terminal, AttemptTerminal::TimedOut)
        && evidence.timeout_kind == Some(TimeoutKind::IdlePrompt)
        && let Some(found) = capability_activity(evidence)
    {
        return Err(FinalizerError::CapabilityActivity { evidence: found });
    }
    match &a.terminal {
        AttemptTerminal::TimedOut => {
            let (reason, message) = match evidence.timeout_kind {
                Some(TimeoutKind::IdlePrompt) => (
                    "idle_timeout",
                    "Settled-turn finalization model stream timed out waiting for output",
                ),
                _ => (
                    "hard_timeout",
                    "Settled-turn finalization attempt timed out",
                ),
            };
            return Err(FinalizerError::TerminalOutcome {
                status: TerminalStatus::Timeout,
                reason,
                message: message.to_owned(),
            });
        }
        AttemptTerminal::Aborted => {
            return Err(FinalizerError::TerminalOutcome {
                status: TerminalStatus::Cancelled,
                reason: "aborted",
                message: "Settled-turn finalization attempt was cancelled".to_owned(),
            });
        }
        _ => {}
    }
    let unsuccessful = !matches!(a.terminal, AttemptTerminal::Ok)
        || evidence.compaction_count > 0
        || evidence.prompt_timeout_outcome
        || evidence.preflight_recovery
        || evidence.before_agent_finalize_revision_reason.is_some()
        || evidence.native_runtime_failure
        || evidence.provider_format_error;
    if unsuccessful {
        return Err(FinalizerError::AttemptUnsuccessful);
    }
    if let Some(evidence) = capability_activity(evidence) {
        return Err(FinalizerError::CapabilityActivity { evidence });
    }
    let completed = a
        .completed_assistant
        .as_ref()
        .filter(|m| m.role == MessageRole::Assistant)
        .ok_or(FinalizerError::NoCompletedAssistant)?;
    let mut result =
        SettledTurnFinalizationResult::answer(FinalAssistant::from_agent_message(completed));
    result.usage = a.usage;
    if evidence.assistant_transcript_owned {
        result.assistant_transcript_owned = Some(true);
        result
            .assistant_transcript_idempotency_key
            .clone_from(&evidence.assistant_transcript_idempotency_key);
    } else {
        result.assistant_message_index = evidence.last_assistant_text_message_index;
    }
    result
        .diagnostic_trace
        .clone_from(&evidence.diagnostic_trace);
    validate_settled_turn_finalization_result(&result.to_value())
}
