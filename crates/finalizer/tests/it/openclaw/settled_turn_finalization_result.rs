//! `src/agents/harness/settled-turn-finalization-result.test.ts`: the narrow result validator
//! and the projection of a full attempt.

use serde_json::{Map, Value, json};
use tether_core::{
    AgentMessage, AttemptTerminal, ContentBlock, MessageRole, ReplayMetadata, ToolMeta,
};
use tether_finalizer::{
    FinalizerError, FullAttemptEvidence, ItemLifecycle,
    project_settled_turn_finalization_attempt_result, validate_settled_turn_finalization_result,
};

/// An assistant as the peer's provider layer builds it (api, provider, model, usage, timestamp).
fn assistant(content: Value, stop: &str) -> Value {
    json!({
        "role": "assistant",
        "content": content,
        "api": "openai-responses",
        "provider": "openai",
        "model": "gpt-5.5",
        "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0},
        "stop_reason": stop,
        "timestamp": 0
    })
}

fn safe_result() -> Value {
    json!({"assistant": assistant(json!([{"type": "text", "text": "done"}]), "stop")})
}

fn message(text: &str) -> AgentMessage {
    let mut meta = Map::new();
    meta.insert("api".into(), json!("openai-responses"));
    meta.insert("provider".into(), json!("openai"));
    meta.insert("model".into(), json!("gpt-5.5"));
    meta.insert("timestamp".into(), json!(0));
    AgentMessage {
        role: MessageRole::Assistant,
        content: vec![ContentBlock::Text { text: text.into() }],
        id: None,
        tool_call_id: None,
        tool_name: None,
        is_error: false,
        stop_reason: Some("stop".into()),
        meta,
    }
}

fn successful_attempt() -> FullAttemptEvidence {
    let mut e = FullAttemptEvidence::default();
    e.attempt.completed_assistant = Some(message("done"));
    e.last_assistant = Some(message("done"));
    e.current_attempt_assistant = Some(message("done"));
    e
}

#[test]
fn openclaw_settled_turn_finalization_result_accepts_one_capability_free_answer() {
    let raw = safe_result();
    let result = validate_settled_turn_finalization_result(&raw).expect("valid");
    assert_eq!(result.to_value(), raw);
}

#[test]
fn openclaw_settled_turn_finalization_result_rejects_a_tool_call() {
    let raw = json!({"assistant": assistant(
        json!([{"type": "toolCall", "id": "call-1", "name": "write", "arguments": {}}]),
        "toolUse"
    )});
    let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
    assert!(err.to_string().contains("returned a tool call"), "{err}");
}

#[test]
fn openclaw_settled_turn_finalization_result_blank_answer_is_empty() {
    let raw = json!({"assistant": assistant(json!([{"type": "text", "text": "  "}]), "stop")});
    let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
    assert!(matches!(err, FinalizerError::Empty { silent: false, .. }));
    assert!(err.to_string().contains("without a visible answer"));
}

#[test]
fn openclaw_settled_turn_finalization_result_silent_answer_is_not_an_exhausted_finalizer() {
    let raw =
        json!({"assistant": assistant(json!([{"type": "text", "text": "NO_REPLY"}]), "stop")});
    let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
    assert!(err.to_string().contains("without a visible answer"));
    // Deliberate difference: OpenClaw throws a plain error here; Tether returns the Empty
    // outcome marked `silent`, carrying the result so the host silence policy can decide.
    assert!(matches!(err, FinalizerError::Empty { silent: true, .. }));
}

#[test]
fn openclaw_settled_turn_finalization_result_unsuccessful_stop_reasons() {
    for stop in ["length", "error", "aborted"] {
        let raw =
            json!({"assistant": assistant(json!([{"type": "text", "text": "partial"}]), stop)});
        let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("unsuccessful stop reason: {stop}")),
            "{err}"
        );
    }
}

#[test]
fn openclaw_settled_turn_finalization_result_invalid_transcript_index() {
    let mut raw = safe_result();
    raw["assistant_message_index"] = json!(-1);
    let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
    assert!(err.to_string().contains("invalid assistant message index"));
}

#[test]
fn openclaw_settled_turn_finalization_result_future_fields_are_rejected() {
    let mut raw = safe_result();
    raw["futureCapabilityEvidence"] = json!(true);
    let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
    assert!(
        err.to_string()
            .contains("unsupported result field: futureCapabilityEvidence")
    );
}

#[test]
fn openclaw_settled_turn_finalization_result_projects_a_successful_attempt() {
    let mut e = successful_attempt();
    e.last_assistant_text_message_index = Some(2);
    let result = project_settled_turn_finalization_attempt_result(&e).expect("projected");
    assert_eq!(result.assistant_message_index, Some(2));
    assert_eq!(result.visible_text(), "done");
    assert_eq!(result.assistant.model(), Some("gpt-5.5"));
}

#[test]
fn openclaw_settled_turn_finalization_result_failed_attempt_with_visible_text() {
    let mut e = successful_attempt();
    e.attempt.terminal = AttemptTerminal::Failed {
        message: "provider failed".into(),
    };
    let err = project_settled_turn_finalization_attempt_result(&e).unwrap_err();
    assert!(err.to_string().contains("did not complete successfully"));
}

#[test]
fn openclaw_settled_turn_finalization_result_capability_free_attempt_without_text() {
    let mut e = successful_attempt();
    e.attempt.completed_assistant = Some(message("  "));
    assert!(matches!(
        project_settled_turn_finalization_attempt_result(&e),
        Err(FinalizerError::Empty { .. })
    ));
}

#[test]
fn openclaw_settled_turn_finalization_result_compacted_attempt() {
    let mut e = successful_attempt();
    e.compaction_count = 1;
    let err = project_settled_turn_finalization_attempt_result(&e).unwrap_err();
    assert!(err.to_string().contains("did not complete successfully"));
}

#[test]
fn openclaw_settled_turn_finalization_result_capability_evidence() {
    let mut e = successful_attempt();
    e.attempt.tool_metas.push(ToolMeta {
        tool_name: "write".into(),
        meta: None,
        is_error: false,
    });
    e.item_lifecycle = ItemLifecycle::new(1, 1, 0);
    let err = project_settled_turn_finalization_attempt_result(&e).unwrap_err();
    assert!(err.to_string().contains("reported capability activity"));
}

#[test]
fn openclaw_settled_turn_finalization_result_replay_unsafe_metadata() {
    let unsafe_replay = ReplayMetadata {
        had_potential_side_effects: false,
        replay_safe: false,
    };
    let mut e = successful_attempt();
    e.attempt.replay = unsafe_replay;
    let err = project_settled_turn_finalization_attempt_result(&e).unwrap_err();
    assert!(err.to_string().contains("reported capability activity"));
    let mut e = successful_attempt();
    e.current_attempt_replay = Some(unsafe_replay);
    let err = project_settled_turn_finalization_attempt_result(&e).unwrap_err();
    assert!(err.to_string().contains("reported capability activity"));
}

#[test]
fn openclaw_settled_turn_finalization_result_partial_or_stale_assistants() {
    let mut e = successful_attempt();
    e.attempt.completed_assistant = None;
    let err = project_settled_turn_finalization_attempt_result(&e).unwrap_err();
    assert!(err.to_string().contains("no completed assistant message"));
}
