//! Defects found by translating the peer's own unit tests (issue 18): each test failed before
//! its fix.

use std::sync::Arc;

use serde_json::{Value, json};
use tether_harness_sdk::results::delivery::{
    MessagingToolResult, is_delivered_messaging_tool_result,
};
use tether_harness_sdk::results::terminal::{
    FingerprintIdentity, ToolTerminalObservation, classify_tool_mutation, is_read_only_command,
    terminal_outcome_accumulator,
};

fn with_meta(mut obs: ToolTerminalObservation, meta: &str) -> ToolTerminalObservation {
    obs.meta = Some(meta.to_owned());
    obs
}

#[test]
fn fidelity_spawn_retry_with_adjusted_arguments_clears_the_failure() {
    let (mut observer, _host) = terminal_outcome_accumulator("run", Arc::new(FingerprintIdentity));
    let failed = with_meta(
        ToolTerminalObservation::failure(
            "sessions_spawn",
            json!({"task": "summarize the repo", "model": "big", "runTimeoutSeconds": 30}),
            "spawn rejected: model not allowed",
        ),
        "summarize the repo · model big",
    );
    let after_failure = observer.observe(&failed);
    assert!(after_failure.last_tool_error.is_some());
    let retried = with_meta(
        ToolTerminalObservation::success(
            "sessions_spawn",
            json!({"task": "summarize the repository briefly", "model": "small"}),
        ),
        "summarize the repository briefly · model small",
    );
    let resolution = observer.observe(&retried);
    assert_eq!(
        resolution.last_tool_error, None,
        "the retry resolved the spawn"
    );
    assert!(resolution.last_tool_recovery.is_some());
}

#[test]
fn fidelity_spawn_of_another_agent_does_not_clear_the_failure() {
    let (mut observer, _host) = terminal_outcome_accumulator("run", Arc::new(FingerprintIdentity));
    observer.observe(&ToolTerminalObservation::failure(
        "sessions_spawn",
        json!({"agentId": "coder", "task": "a"}),
        "boom",
    ));
    let other = observer.observe(&ToolTerminalObservation::success(
        "sessions_spawn",
        json!({"agentId": "reviewer", "task": "a"}),
    ));
    assert!(other.last_tool_error.is_some());
}

#[test]
fn fidelity_display_meta_never_splits_one_action() {
    // The same mutating call reported with different display metadata is one action.
    let (mut observer, _host) = terminal_outcome_accumulator("run", Arc::new(FingerprintIdentity));
    observer.observe(&with_meta(
        ToolTerminalObservation::failure("cron", json!({"action": "add"}), "quota"),
        "add · 12 chars",
    ));
    let ok = observer.observe(&with_meta(
        ToolTerminalObservation::success("cron", json!({"action": "add"})),
        "add · 48 chars",
    ));
    assert_eq!(ok.last_tool_error, None);
}

#[test]
fn fidelity_actions_suffix_tools_are_mutating_unless_reading() {
    let args = |v: Value| v.as_object().cloned();
    assert!(classify_tool_mutation("github_actions", None).mutating_action);
    assert!(
        classify_tool_mutation("jira_actions", args(json!({"action": "create"})).as_ref())
            .mutating_action
    );
    for read in ["get", "list", "status", "search", "view", "inspect"] {
        assert!(
            !classify_tool_mutation("jira_actions", args(json!({"action": read})).as_ref())
                .mutating_action,
            "{read}"
        );
    }
}

#[test]
fn fidelity_read_only_binaries_by_absolute_path() {
    assert!(is_read_only_command("/usr/bin/ls -la"));
    assert!(is_read_only_command("/bin/cat notes.txt"));
    let args = json!({"command": "/usr/bin/ls -la"});
    assert!(!classify_tool_mutation("exec", args.as_object()).mutating_action);
    assert!(!is_read_only_command("/usr/bin/rm -rf build"));
}

fn broadcast(result: Value) -> bool {
    let args = json!({"action": "broadcast"});
    is_delivered_messaging_tool_result(&MessagingToolResult {
        args: Some(&args),
        result: Some(&result),
        ..Default::default()
    })
}

#[test]
fn fidelity_broadcast_receipts_nested_under_details_payload() {
    assert!(broadcast(json!({"details": {"payload": {"results": [
        {"channel": "telegram", "to": "chat-1", "result": {"deliveryStatus": "sent", "messageId": "m-1"}}
    ]}}})));
    assert!(broadcast(json!({"details": {"results": [
        {"ok": true, "result": {"messageId": "m-2"}}
    ]}})));
    // No concrete status and no `ok`: not proven; suppression and failures never deliver.
    assert!(!broadcast(json!({"details": {"payload": {"results": [
        {"channel": "telegram", "result": {"messageId": "m-1"}}
    ]}}})));
    assert!(!broadcast(json!({"details": {"payload": {"results": [
        {"result": {"deliveryStatus": "suppressed", "messageId": "m-1"}}
    ]}}})));
    assert!(!broadcast(json!({"details": {"payload": {"results": [
        {"ok": false, "result": {"deliveryStatus": "sent", "messageId": "m-1"}}
    ]}}})));
}
