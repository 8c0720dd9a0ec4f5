//! `src/agents/tool-mutation.test.ts`: mutation classification and action fingerprints.

use serde_json::{Value, json};
use tether_harness_sdk::results::terminal::{
    ActionCall, ActionIdentity, ActionRecord, FingerprintIdentity, classify_tool_mutation,
};

fn mutating(tool: &str, args: Value) -> bool {
    classify_tool_mutation(tool, args.as_object()).mutating_action
}

fn fingerprint(tool: &str, args: Value, meta: Option<&str>) -> Option<String> {
    let args = args.as_object().cloned();
    let facts = classify_tool_mutation(tool, args.as_ref());
    FingerprintIdentity
        .describe(&ActionCall {
            tool_name: tool,
            arguments: args.as_ref(),
            meta,
            mutating: facts.mutating_action,
            owner_key: None,
        })
        .fingerprint
}

#[test]
fn openclaw_tool_mutation_session_status_mutates_only_with_a_model_override() {
    assert!(!mutating(
        "session_status",
        json!({"sessionKey": "agent:main:main"})
    ));
    assert!(mutating(
        "session_status",
        json!({"sessionKey": "agent:main:main", "model": "openai/gpt-4o"})
    ));
}

#[test]
fn openclaw_tool_mutation_stable_fingerprints_and_none_for_reads() {
    let write = fingerprint(
        "write",
        json!({"path": "/tmp/demo.txt", "id": 42}),
        Some("write /tmp/demo.txt"),
    )
    .unwrap_or_default();
    assert!(write.contains("tool=write"), "{write}");
    assert!(write.contains("path=/tmp/demo.txt"), "{write}");
    assert!(write.contains("id=42"), "{write}");
    assert!(!write.contains("meta="), "{write}");
    // Deliberate difference: OpenClaw fingerprints `exec ls -la` as `tool=exec|meta=ls -la`.
    // Tether classifies a plain read-only command as not mutating (no fingerprint), and display
    // metadata is never part of an identity, even for a mutating command.
    assert_eq!(
        fingerprint("exec", json!({"command": "ls -la"}), Some("ls -la")),
        None
    );
    assert_eq!(
        fingerprint(
            "exec",
            json!({"command": "rm -rf build"}),
            Some("rm -rf build")
        )
        .as_deref(),
        Some("tool=exec")
    );
    assert_eq!(
        fingerprint("read", json!({"path": "/tmp/demo.txt"}), None),
        None
    );
}

#[test]
fn openclaw_tool_mutation_path_aliases_are_one_target() {
    let a = fingerprint(
        "edit",
        json!({"file_path": "/tmp/demo.txt", "old_string": "before", "new_string": "after"}),
        None,
    );
    let b = fingerprint(
        "edit",
        json!({"file": "/tmp/demo.txt", "oldText": "before", "newText": "after again"}),
        None,
    );
    assert_eq!(a.as_deref(), Some("tool=edit|path=/tmp/demo.txt"));
    assert_eq!(b.as_deref(), Some("tool=edit|path=/tmp/demo.txt"));
}

#[test]
fn openclaw_tool_mutation_state_for_payload_rendering() {
    assert!(mutating(
        "message",
        json!({"action": "send", "to": "telegram:1"})
    ));
    assert!(!mutating("browser", json!({"action": "list"})));
}

#[test]
fn openclaw_tool_mutation_fingerprint_match_fails_closed_on_asymmetry() {
    let record = |fp: Option<&str>| ActionRecord {
        tool_name: "write".into(),
        fingerprint: fp.map(str::to_owned),
        ..ActionRecord::default()
    };
    let a = record(Some("tool=write|path=/tmp/a"));
    assert!(FingerprintIdentity.same_action(&a, &record(Some("tool=write|path=/tmp/a"))));
    assert!(!FingerprintIdentity.same_action(&a, &record(Some("tool=write|path=/tmp/b"))));
    assert!(!FingerprintIdentity.same_action(&a, &record(None)));
}

#[test]
fn openclaw_tool_mutation_name_only_heuristics() {
    for tool in [
        "sessions_spawn",
        "sessions_send",
        "browser_actions",
        "message_slack",
    ] {
        assert!(classify_tool_mutation(tool, None).mutating_action, "{tool}");
    }
    assert!(!classify_tool_mutation("browser", None).mutating_action);
}
