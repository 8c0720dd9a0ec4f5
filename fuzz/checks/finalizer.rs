//! Checks shared by the finalizer fuzz targets (`fuzz/fuzz_targets/`) and their proptest twins
//! (`crates/finalizer/tests/it/fuzz_twins.rs`): the narrow result validator and the full
//! attempt projection take any input without panicking, deterministically, failing closed.

use serde_json::Value;
use tether_core::{AgentMessage, AttemptTerminal, MessageRole};
use tether_finalizer::{
    FullAttemptEvidence, project_settled_turn_finalization_attempt_result,
    validate_settled_turn_finalization_result,
};

/// The validator: deterministic, input unchanged; an accepted result was an object with an
/// assistant and no field outside the allow-list.
pub fn check_finalization_result(data: &[u8]) {
    let Ok(raw) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let before = raw.clone();
    let first = validate_settled_turn_finalization_result(&raw);
    assert_eq!(raw, before, "the validator changed its input");
    let second = validate_settled_turn_finalization_result(&raw);
    assert_eq!(format!("{first:?}"), format!("{second:?}"), "deterministic");
    if first.is_ok() {
        let obj = raw.as_object().expect("an accepted result is an object");
        assert!(
            obj.contains_key("assistant"),
            "accepted without an assistant"
        );
    }
}

/// Builds attempt evidence from bytes: the terminal, a few flags, and the completed
/// assistant's text, stop reason and tool call.
pub fn evidence(data: &[u8]) -> FullAttemptEvidence {
    let byte = |i: usize| data.get(i).copied().unwrap_or(0);
    let text = String::from_utf8_lossy(data.get(4..).unwrap_or_default()).into_owned();
    let mut evidence = FullAttemptEvidence::default();
    evidence.attempt.terminal = match byte(0) % 4 {
        0 => AttemptTerminal::Ok,
        1 => AttemptTerminal::Failed {
            message: text.clone(),
        },
        2 => AttemptTerminal::Aborted,
        _ => AttemptTerminal::TimedOut,
    };
    let flags = byte(1);
    evidence.compaction_count = u32::from(flags & 1);
    evidence.prompt_timeout_outcome = flags & 2 != 0;
    evidence.preflight_recovery = flags & 4 != 0;
    evidence.native_runtime_failure = flags & 8 != 0;
    evidence.provider_format_error = flags & 16 != 0;
    evidence.heartbeat_tool_response = flags & 32 != 0;
    evidence.attempt.yield_detected = flags & 64 != 0;
    if byte(2) % 3 != 0 {
        let mut assistant = AgentMessage::text(MessageRole::Assistant, text);
        assistant.stop_reason = match byte(3) % 4 {
            0 => None,
            1 => Some("stop".into()),
            2 => Some("toolUse".into()),
            _ => Some("length".into()),
        };
        evidence.attempt.completed_assistant = Some(assistant);
    }
    evidence
}

/// The projection: deterministic; a failed, aborted or timed-out attempt never projects to an
/// accepted answer.
pub fn check_finalization_projection(data: &[u8]) {
    let evidence = evidence(data);
    let first = project_settled_turn_finalization_attempt_result(&evidence);
    let second = project_settled_turn_finalization_attempt_result(&evidence);
    assert_eq!(format!("{first:?}"), format!("{second:?}"), "deterministic");
    if !matches!(evidence.attempt.terminal, AttemptTerminal::Ok) {
        assert!(
            first.is_err(),
            "a {:?} attempt was accepted",
            evidence.attempt.terminal
        );
    }
}
