//! `src/agents/tool-error-state.test.ts`: unresolved mutating failures, through the
//! terminal-outcome accumulator.

use std::sync::Arc;

use serde_json::json;
use tether_harness_sdk::results::terminal::{
    FingerprintIdentity, TerminalObserver, ToolTerminalObservation, terminal_outcome_accumulator,
};

fn observer() -> TerminalObserver {
    terminal_outcome_accumulator("run", Arc::new(FingerprintIdentity)).0
}

fn send(to: &str) -> serde_json::Value {
    json!({"action": "send", "to": to, "message": "hi"})
}

fn error(obs: &TerminalObserver) -> Option<String> {
    obs.last_tool_error().and_then(|e| e.error)
}

#[test]
fn openclaw_tool_error_state_retains_a_after_b_fails_then_succeeds() {
    let mut obs = observer();
    obs.observe(&ToolTerminalObservation::failure(
        "message",
        send("channel:a"),
        "send A failed",
    ));
    obs.observe(&ToolTerminalObservation::failure(
        "message",
        send("channel:b"),
        "send B failed",
    ));
    assert_eq!(error(&obs).as_deref(), Some("send B failed"));
    obs.observe(&ToolTerminalObservation::success(
        "message",
        send("channel:b"),
    ));
    assert_eq!(error(&obs).as_deref(), Some("send A failed"));
    obs.observe(&ToolTerminalObservation::success(
        "message",
        send("channel:a"),
    ));
    assert_eq!(error(&obs), None);
}

#[test]
fn openclaw_tool_error_state_repeated_failures_update_one_entry() {
    let mut obs = observer();
    let args = json!({"path": "/tmp/a", "content": "x"});
    obs.observe(&ToolTerminalObservation::failure(
        "write",
        args.clone(),
        "first failure",
    ));
    obs.observe(&ToolTerminalObservation::failure(
        "write",
        args.clone(),
        "latest failure",
    ));
    assert_eq!(error(&obs).as_deref(), Some("latest failure"));
    // One success resolves it: the first failure was not kept as a second entry.
    obs.observe(&ToolTerminalObservation::success("write", args));
    assert_eq!(error(&obs), None);
}

#[test]
fn openclaw_tool_error_state_repeated_failure_moves_to_the_latest_position() {
    let mut obs = observer();
    obs.observe(&ToolTerminalObservation::failure(
        "message",
        send("channel:a"),
        "A failed",
    ));
    obs.observe(&ToolTerminalObservation::failure(
        "message",
        send("channel:b"),
        "B failed",
    ));
    obs.observe(&ToolTerminalObservation::failure(
        "message",
        send("channel:a"),
        "A failed again",
    ));
    assert_eq!(error(&obs).as_deref(), Some("A failed again"));
    obs.observe(&ToolTerminalObservation::success(
        "message",
        send("channel:a"),
    ));
    assert_eq!(error(&obs).as_deref(), Some("B failed"));
}
