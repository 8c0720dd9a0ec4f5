//! Part G: the terminal-outcome accumulator (vectors 116–135).
//!
//! Tether implements the action-identity design (`docs/tool-results.md`, 'The terminal-outcome accumulator') with a
//! pluggable identity; vectors tagged D2 (the "same tool name" design) are checked with
//! [`ToolNameIdentity`] where the identity is what differs, and otherwise test our behavior.

use std::sync::Arc;

use serde_json::{Value, json};
use tether_core::TerminalDiagnostic;
use tether_harness_sdk::results::terminal::{
    EffectReceipt, FingerprintIdentity, HostToolFacts, MutationFacts, OwnerMutation,
    TerminalObserver, ToolFailure, ToolNameIdentity, ToolRecovery, ToolResult,
    ToolTerminalObservation, render_tool_recovery, render_tool_warning,
    terminal_outcome_accumulator, tool_warning_payload,
};

fn fingerprint() -> (TerminalObserver, HostToolFacts) {
    terminal_outcome_accumulator("run-1", Arc::new(FingerprintIdentity))
}

fn by_name() -> (TerminalObserver, HostToolFacts) {
    terminal_outcome_accumulator("run-1", Arc::new(ToolNameIdentity))
}

fn ok(tool: &str, args: Value) -> ToolTerminalObservation {
    ToolTerminalObservation::success(tool, args)
}

fn fail(tool: &str, args: Value, error: &str) -> ToolTerminalObservation {
    ToolTerminalObservation::failure(tool, args, error)
}

fn send_to(target: &str) -> Value {
    json!({"action": "send", "to": target, "message": "hello"})
}

fn error_text(obs: &TerminalObserver) -> Option<String> {
    obs.last_tool_error().and_then(|e| e.error)
}

#[test]
fn tool_results_116_fresh_read_success() {
    let (mut obs, _host) = fingerprint();
    let r = obs.observe(&ok("read", json!({})));
    assert!(r.last_tool_error.is_none());
    assert!(r.execution_started);
    assert!(!r.side_effect_evidence);
    assert_eq!(r.effect_receipt, EffectReceipt::ReadCompleted);
}

#[test]
fn tool_results_117_unrelated_success_keeps_newest_failure() {
    for (mut obs, _host) in [fingerprint(), by_name()] {
        obs.observe(&fail("message", send_to("channel:a"), "A failed"));
        obs.observe(&fail("message", send_to("channel:b"), "B failed"));
        let r = obs.observe(&ok("read", json!({"path": "/scratch/x"})));
        assert_eq!(
            r.last_tool_error.and_then(|e| e.error).as_deref(),
            Some("B failed")
        );
        let warnings: Vec<String> = tool_warning_payload(obs.last_tool_error().as_ref(), false)
            .into_iter()
            .collect();
        assert_eq!(warnings, vec!["⚠️ Message failed".to_owned()]);
    }
}

/// D1 (our default): only the same action clears; D2 is the selectable name-only identity.
#[test]
fn tool_results_118_same_action_clears_with_recovery_receipt() {
    let (mut obs, _host) = fingerprint();
    obs.observe(&fail("message", send_to("channel:a"), "A failed"));
    obs.observe(&fail("message", send_to("channel:b"), "B failed"));
    let r = obs.observe(&ok("message", send_to("channel:b")));
    assert_eq!(
        r.last_tool_error.and_then(|e| e.error).as_deref(),
        Some("A failed")
    );
    assert_eq!(
        r.last_tool_recovery,
        Some(ToolRecovery {
            tool_name: "message".into()
        })
    );
    obs.observe(&ok("heartbeat_respond", json!({})));
    assert_eq!(error_text(&obs).as_deref(), Some("A failed"));
    obs.observe(&ok("message", send_to("channel:a")));
    assert!(obs.last_tool_error().is_none());

    let (mut named, _host) = by_name();
    named.observe(&fail("message", send_to("channel:a"), "A failed"));
    named.observe(&fail("message", send_to("channel:b"), "B failed"));
    named.observe(&ok("message", send_to("channel:b")));
    assert!(
        named.last_tool_error().is_none(),
        "name-only identity clears on any message success"
    );
}

#[test]
fn tool_results_119_host_tracker_not_started_and_adjusted_params() {
    let (mut obs, host) = terminal_outcome_accumulator("run-2", Arc::new(FingerprintIdentity));
    host.record_execution("call-1", false);
    let adjusted = json!({"action": "send", "to": "channel:adjusted"});
    host.record_adjusted_params("call-1", adjusted.clone());
    let observation = ToolTerminalObservation {
        tool_call_id: Some("call-1".into()),
        execution_started: Some(true),
        ..fail(
            "message",
            json!({"action": "send", "to": "channel:original"}),
            "blocked before execution",
        )
    };
    let r = obs.observe(&observation);
    assert!(!r.execution_started);
    assert_eq!(
        r.executed_arguments.map(Value::Object),
        Some(adjusted.clone())
    );
    assert!(!r.side_effect_evidence);
    assert_eq!(
        r.last_tool_error.and_then(|e| e.mutating_action),
        Some(false)
    );
    assert_eq!(
        host.adjusted_params("call-1"),
        Some(adjusted),
        "peeked, not consumed"
    );
    assert!(
        !host.has_execution_record("call-1"),
        "execution record consumed"
    );
}

#[test]
fn tool_results_120_host_started_record_beats_failure_claim() {
    let (mut obs, host) = fingerprint();
    host.record_execution("call-racing-timeout", true);
    let observation = ToolTerminalObservation {
        tool_call_id: Some("call-racing-timeout".into()),
        failure: Some(ToolFailure {
            error: Some("timed out during execution".into()),
            execution_started: Some(false),
            ..ToolFailure::default()
        }),
        ..fail("exec", json!({"command": "sleep 100"}), "")
    };
    let r = obs.observe(&observation);
    assert!(r.execution_started);
    assert!(r.side_effect_evidence);
    let e = r.last_tool_error.expect("error");
    assert_eq!(
        (e.execution_started, e.mutating_action),
        (Some(true), Some(true))
    );
}

#[test]
fn tool_results_121_pre_execution_block_beats_started_claim() {
    let (mut obs, host) = fingerprint();
    host.record_pre_execution_blocked("call-blocked");
    let observation = ToolTerminalObservation {
        tool_call_id: Some("call-blocked".into()),
        execution_started: Some(true),
        ..fail("message", send_to("channel:a"), "blocked")
    };
    let r = obs.observe(&observation);
    assert!(!r.execution_started);
    let e = r.last_tool_error.expect("error");
    assert_eq!(
        (e.execution_started, e.mutating_action),
        (Some(false), Some(false))
    );
}

#[test]
fn tool_results_122_effect_receipts() {
    let (mut obs, host) = fingerprint();
    host.record_pre_execution_blocked("blocked-send");
    let blocked = ToolTerminalObservation {
        tool_call_id: Some("blocked-send".into()),
        ..fail("message", send_to("channel:a"), "blocked")
    };
    let plugin_read = ToolTerminalObservation {
        replay_safe: Some(true),
        ..fail("plugin_read", json!({}), "x")
    };
    let cases = [
        (blocked, EffectReceipt::Uncertain),
        (
            ok("message", json!({"action": "read"})),
            EffectReceipt::ReadCompleted,
        ),
        (
            fail("message", json!({"action": "read"}), "x"),
            EffectReceipt::FailedNoEffect,
        ),
        (
            ok("computer", json!({"action": "list_windows"})),
            EffectReceipt::ReadCompleted,
        ),
        (
            fail("computer", json!({"action": "get_cursor_position"}), "x"),
            EffectReceipt::FailedNoEffect,
        ),
        (plugin_read, EffectReceipt::FailedNoEffect),
        (
            ok("message", send_to("channel:a")),
            EffectReceipt::MutationCommitted,
        ),
        (ok("plugin_unknown", json!({})), EffectReceipt::Uncertain),
        (
            fail("message", send_to("channel:a"), "x"),
            EffectReceipt::Uncertain,
        ),
    ];
    for (observation, expected) in cases {
        assert_eq!(
            obs.observe(&observation).effect_receipt,
            expected,
            "{}",
            observation.tool_name
        );
    }
}

#[test]
fn tool_results_123_not_started_proof_only_from_host() {
    let (mut obs, host) = fingerprint();
    let proof = host.not_started_proof(Some("call-9"));
    let observation = ToolTerminalObservation {
        execution_started: Some(true),
        result: Some(ToolResult::with_not_started_proof(
            json!({"details": {"status": "blocked"}}),
            proof,
        )),
        ..fail("message", send_to("channel:a"), "never ran")
    };
    let r = obs.observe(&observation);
    assert!(!r.execution_started);
    assert_eq!(r.effect_receipt, EffectReceipt::NotStarted);
    // Serialized look-alike fields prove nothing.
    let forged = ToolTerminalObservation {
        execution_started: Some(true),
        result: Some(ToolResult::new(
            json!({"notStarted": true, "effectReceipt": {"state": "not_started"}}),
        )),
        ..fail("message", send_to("channel:a"), "x")
    };
    let r = obs.observe(&forged);
    assert!(r.execution_started);
    assert_eq!(r.effect_receipt, EffectReceipt::Uncertain);
}

#[test]
fn tool_results_124_memory_search_is_side_effect_evidence() {
    let (mut obs, _host) = fingerprint();
    let r = obs.observe(&ok("memory_search", json!({"query": "recall"})));
    assert!(r.execution_started && r.side_effect_evidence);
    let r = obs.observe(&ok("memory_get", json!({"path": "memory/notes.md"})));
    assert!(!r.side_effect_evidence);
}

fn memory_timeout(details: Value) -> ToolTerminalObservation {
    ToolTerminalObservation {
        result: Some(ToolResult::new(json!({"details": details}))),
        ..fail(
            "memory_search",
            json!({"query": "q"}),
            "provider exploded: secret internal text",
        )
    }
}

/// Tagged D2 in the reference; timeout diagnostics do not depend on the identity design.
#[test]
fn tool_results_125_timeout_diagnostics() {
    let cases = [
        (
            json!({"timedOut": true, "timeoutMs": 30000, "partial": true, "results": [1, 2]}),
            Some(TerminalDiagnostic::Timeout {
                timeout_ms: 30000,
                partial_results: Some(2),
            }),
            "⚠️ Memory Search timed out after 30s; 2 partial results are available.",
        ),
        (
            json!({"timedOut": true, "timeoutMs": 30000, "partial": true, "results": [1]}),
            Some(TerminalDiagnostic::Timeout {
                timeout_ms: 30000,
                partial_results: Some(1),
            }),
            "⚠️ Memory Search timed out after 30s; 1 partial result is available.",
        ),
        (
            json!({"timedOut": true, "timeoutMs": 30000, "partial": true, "results": []}),
            Some(TerminalDiagnostic::Timeout {
                timeout_ms: 30000,
                partial_results: None,
            }),
            "⚠️ Memory Search timed out after 30s.",
        ),
        (
            json!({"timedOut": false, "timeoutMs": 30000}),
            None,
            "⚠️ Memory Search failed",
        ),
        (
            json!({"timedOut": true, "timeoutMs": -1}),
            None,
            "⚠️ Memory Search failed",
        ),
    ];
    for (details, diagnostic, line) in cases {
        let (mut obs, _host) = fingerprint();
        let r = obs.observe(&memory_timeout(details));
        assert!(r.side_effect_evidence);
        let e = r.last_tool_error.expect("error");
        assert_eq!(e.terminal_diagnostic, diagnostic);
        let rendered = render_tool_warning(&e);
        assert_eq!(rendered, line);
        assert!(!rendered.contains("secret internal text"));
    }
}

#[test]
fn tool_results_126_suppressed_send_never_clears_a_failure() {
    let suppressed = |args: Value| ToolTerminalObservation {
        result: Some(ToolResult::new(
            json!({"details": {"status": "suppressed", "reason": "cancelled_by_message_sending_hook"}}),
        )),
        ..ok("message", args)
    };
    let (mut obs, _host) = fingerprint();
    assert!(
        obs.observe(&suppressed(send_to("telegram:1")))
            .last_tool_error
            .is_none()
    );
    obs.observe(&fail(
        "message",
        send_to("telegram:1"),
        "Telegram transport failed",
    ));
    let r = obs.observe(&suppressed(send_to("telegram:1")));
    assert_eq!(
        r.last_tool_error.as_ref().and_then(|e| e.error.as_deref()),
        Some("Telegram transport failed")
    );
    assert!(tool_warning_payload(r.last_tool_error.as_ref(), false).is_some());
    let real = ToolTerminalObservation {
        result: Some(ToolResult::new(
            json!({"details": {"ok": true, "messageId": "sent-1"}}),
        )),
        ..ok("message", send_to("telegram:1"))
    };
    assert!(obs.observe(&real).last_tool_error.is_none());
}

#[test]
fn tool_results_127_spawn_retry_recovers() {
    let (mut obs, _host) = fingerprint();
    obs.observe(&fail(
        "sessions_spawn",
        json!({"task": "Investigate", "label": "Investigate", "cwd": "/outside"}),
        "cwd is outside the workspace",
    ));
    let r = obs.observe(&ok(
        "sessions_spawn",
        json!({"task": "Investigate in repo scope"}),
    ));
    assert!(r.last_tool_error.is_none());
    assert!(tool_warning_payload(None, true).is_none());
    let recovery = r.last_tool_recovery.expect("recovery");
    assert_eq!(
        render_tool_recovery(&recovery),
        "✅ 🧑‍🔧 Sub-agent succeeded after retry."
    );
}

#[test]
fn tool_results_128_cross_tool_file_recovery() {
    let (mut obs, _host) = fingerprint();
    obs.observe(&fail(
        "edit",
        json!({"path": "/scratch/demo.txt", "oldText": "a", "newText": "b"}),
        "no match",
    ));
    let r = obs.observe(&ok(
        "write",
        json!({"path": "/scratch/demo.txt", "content": "b"}),
    ));
    assert!(r.last_tool_error.is_none());
    assert_eq!(
        r.last_tool_recovery,
        Some(ToolRecovery {
            tool_name: "write".into()
        })
    );
    obs.observe(&ok("read", json!({"path": "/scratch/demo.txt"})));
    assert!(obs.last_tool_recovery().is_some());
    obs.observe(&fail("message", send_to("channel:a"), "send failed"));
    assert_eq!(error_text(&obs).as_deref(), Some("send failed"));
    assert!(
        obs.last_tool_recovery().is_some(),
        "unrelated failures keep the receipt"
    );
    obs.observe(&fail(
        "edit",
        json!({"path": "/scratch/demo.txt"}),
        "no match again",
    ));
    assert!(obs.last_tool_recovery().is_none());
}

#[test]
fn tool_results_129_unowned_memory_store_is_not_mutating() {
    let (mut obs, _host) = fingerprint();
    let r = obs.observe(&fail(
        "memory_store",
        json!({"text": "pref"}),
        "store unavailable",
    ));
    assert_eq!(
        r.last_tool_error.and_then(|e| e.mutating_action),
        Some(false)
    );
}

fn owned_store(text: &str, failed: bool) -> ToolTerminalObservation {
    let base = if failed {
        fail(
            "memory_store",
            json!({"text": text}),
            "429 insufficient_quota",
        )
    } else {
        ok("memory_store", json!({"text": text}))
    };
    ToolTerminalObservation {
        owner_mutation: Some(OwnerMutation {
            owner_key: r#"["memory-lancedb","memory_store"]"#.into(),
        }),
        ..base
    }
}

/// D1 behavior (ours): an owner-declared mutation failure is reported even after a reply, and
/// only the same canonical arguments clear it. D2's name-only rule is the selectable identity.
#[test]
fn tool_results_130_owner_mutation_identity() {
    let (mut obs, _host) = fingerprint();
    obs.observe(&owned_store("likes tea", true));
    let warning = tool_warning_payload(obs.last_tool_error().as_ref(), true)
        .expect("correction after a reply");
    assert!(!warning.contains("memory-lancedb"), "{warning}");
    assert_eq!(warning, "⚠️ Memory Store failed");
    obs.observe(&owned_store("likes coffee", false));
    assert!(
        obs.last_tool_error().is_some(),
        "different arguments are a different action"
    );
    obs.observe(&owned_store("likes tea", false));
    assert!(obs.last_tool_error().is_none());

    let (mut named, _host) = by_name();
    named.observe(&owned_store("likes tea", true));
    named.observe(&owned_store("likes coffee", false));
    assert!(named.last_tool_error().is_none());
}

#[test]
fn tool_results_131_public_state_hides_the_internal_list() {
    let (mut obs, _host) = fingerprint();
    obs.observe(&fail("message", send_to("channel:a"), "A failed"));
    let r = obs.observe(&fail("message", send_to("channel:b"), "B failed"));
    assert_eq!(
        r.last_tool_error.as_ref().and_then(|e| e.error.as_deref()),
        Some("B failed")
    );
    assert!(!format!("{:?}", r.last_tool_error).contains("A failed"));
    let r = obs.observe(&ok("message", send_to("channel:b")));
    assert_eq!(
        r.last_tool_error.and_then(|e| e.error).as_deref(),
        Some("A failed")
    );
    assert!(
        obs.observe(&ok("message", send_to("channel:a")))
            .last_tool_error
            .is_none()
    );
}

#[test]
fn tool_results_132_repeated_failure_replaces_entry() {
    let (mut obs, _host) = fingerprint();
    let a = json!({"path": "/scratch/a", "content": "x"});
    let b = json!({"path": "/scratch/b", "content": "y"});
    obs.observe(&fail("write", a.clone(), "first"));
    let r = obs.observe(&fail("write", a.clone(), "second"));
    assert_eq!(
        r.last_tool_error.and_then(|e| e.error).as_deref(),
        Some("second")
    );
    obs.observe(&ok("write", a.clone()));
    assert!(
        obs.last_tool_error().is_none(),
        "no duplicate entry survives"
    );
    obs.observe(&fail("write", a.clone(), "A failed"));
    obs.observe(&fail("write", b, "B failed"));
    obs.observe(&fail("write", a.clone(), "A failed again"));
    assert_eq!(error_text(&obs).as_deref(), Some("A failed again"));
    obs.observe(&ok("write", a));
    assert_eq!(error_text(&obs).as_deref(), Some("B failed"));
}

fn exec_denied(details: Value, started: bool) -> ToolTerminalObservation {
    ToolTerminalObservation {
        execution_started: Some(started),
        result: Some(ToolResult::new(json!({"details": details}))),
        ..fail("exec", json!({"command": "rm -rf build"}), "denied")
    }
}

/// Tagged D2 (open PR #149051); we adopt it: a steering skip that never started is not a failure.
#[test]
fn tool_results_133_steering_skip_is_not_a_failure() {
    let (mut obs, _host) = fingerprint();
    let r = obs.observe(&exec_denied(
        json!({"status": "skipped", "deniedReason": "steering"}),
        false,
    ));
    assert!(r.last_tool_error.is_none());
    for details in [
        json!({"status": "blocked", "deniedReason": "tool-admission"}),
        json!({"status": "skipped", "deniedReason": "policy"}),
    ] {
        let (mut obs, _host) = fingerprint();
        let e = obs
            .observe(&exec_denied(details, false))
            .last_tool_error
            .expect("failure");
        assert_eq!(render_tool_warning(&e), "⚠️ Exec blocked");
    }
    let (mut obs, _host) = fingerprint();
    let e = obs
        .observe(&exec_denied(
            json!({"status": "skipped", "deniedReason": "steering"}),
            true,
        ))
        .last_tool_error
        .expect("executed look-alike is a failure");
    assert_eq!(render_tool_warning(&e), "⚠️ Exec failed");
}

#[test]
fn tool_results_134_non_object_arguments_are_omitted() {
    for args in [json!(["send"]), json!("send")] {
        let (mut obs, _host) = fingerprint();
        let r = obs.observe(&fail("message", args, "x"));
        assert!(r.executed_arguments.is_none());
        assert_eq!(
            r.last_tool_error.and_then(|e| e.mutating_action),
            Some(true),
            "no action → mutating"
        );
    }
}

#[test]
fn tool_results_135_native_mutation_bypasses_classifier() {
    let native = Some(MutationFacts {
        mutating_action: false,
        replay_safe: true,
    });
    let (mut obs, _host) = fingerprint();
    let failure = ToolTerminalObservation {
        native_mutation: native,
        ..fail("write", json!({"path": "/a"}), "x")
    };
    assert_eq!(
        obs.observe(&failure)
            .last_tool_error
            .and_then(|e| e.mutating_action),
        Some(false)
    );
    let success = ToolTerminalObservation {
        native_mutation: native,
        ..ok("write", json!({"path": "/a"}))
    };
    let r = obs.observe(&success);
    assert_eq!(r.effect_receipt, EffectReceipt::ReadCompleted);
    assert!(!r.side_effect_evidence);
}

/// The builders set exactly the field they name, and a report built with them is the report
/// built by assigning the fields.
#[test]
fn terminal_observation_builders_set_the_fields_they_name() {
    let built = fail("exec", json!({"command": "rm -rf /tmp/x"}), "denied")
        .with_call_id("call-1")
        .with_meta("rm -rf /tmp/x")
        .with_execution_started(false)
        .with_owner_mutation("shell")
        .with_native_mutation(MutationFacts {
            mutating_action: true,
            replay_safe: false,
        })
        .with_result(ToolResult::new(json!({"status": "denied"})));
    let mut assigned = fail("exec", json!({"command": "rm -rf /tmp/x"}), "denied");
    assigned.tool_call_id = Some("call-1".into());
    assigned.meta = Some("rm -rf /tmp/x".into());
    assigned.execution_started = Some(false);
    assigned.owner_mutation = Some(OwnerMutation {
        owner_key: "shell".into(),
    });
    assigned.native_mutation = Some(MutationFacts {
        mutating_action: true,
        replay_safe: false,
    });
    assigned.result = Some(ToolResult::new(json!({"status": "denied"})));
    assert_eq!(built, assigned);

    // The tool-result message carries its call id and tool name.
    let message = tether_core::AgentMessage::tool_result("call-1", "exec", "denied");
    assert_eq!(message.tool_call_id.as_deref(), Some("call-1"));
    assert_eq!(message.tool_name.as_deref(), Some("exec"));
    assert_eq!(message.role, tether_core::MessageRole::ToolResult);
    assert_eq!(message.visible_text(), "denied");
    let answer = tether_core::AgentMessage::text(tether_core::MessageRole::Assistant, "ok")
        .with_stop_reason("stop");
    assert_eq!(answer.stop_reason.as_deref(), Some("stop"));
}

/// A call whose outcome is unknown (the runtime died while it ran): a mutating one is uncertain
/// and its error is kept until the same action succeeds; a read failed without effect.
#[test]
fn tool_results_outcome_unknown_is_uncertain_for_a_mutation() {
    let (mut obs, _host) = fingerprint();
    let write = json!({"path": "/srv/app.conf", "content": "x"});
    let r = obs.observe(&ToolTerminalObservation::outcome_unknown(
        "write",
        write.clone(),
        "the runtime exited while the tool ran",
    ));
    assert!(r.execution_started);
    assert_eq!(r.effect_receipt, EffectReceipt::Uncertain);
    assert_eq!(
        error_text(&obs).as_deref(),
        Some("the runtime exited while the tool ran")
    );
    let r = obs.observe(&ok("read", json!({"path": "/srv/other"})));
    assert!(
        r.last_tool_error.is_some(),
        "an unrelated read clears nothing"
    );
    obs.observe(&ok("write", write));
    assert!(obs.last_tool_error().is_none(), "the same write succeeded");
    let r = obs.observe(&ToolTerminalObservation::outcome_unknown(
        "read",
        json!({"path": "/srv/app.conf"}),
        "lost",
    ));
    assert_eq!(r.effect_receipt, EffectReceipt::FailedNoEffect);
}
