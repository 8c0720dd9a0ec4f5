//! `src/agents/tool-terminal-outcome.test.ts`: the terminal-outcome observer (the host's
//! execution records are Tether's `HostToolFacts`; OpenClaw's `buildPayloads` warning is
//! `tool_warning_payload` / `render_tool_warning`).

use std::sync::Arc;

use serde_json::{Value, json};
use tether_harness_sdk::results::display::{DetailMode, infer_tool_meta_from_args};
use tether_harness_sdk::results::terminal::{
    EffectReceipt, FingerprintIdentity, HostToolFacts, OwnerMutation, TerminalObserver,
    ToolFailure, ToolResult, ToolTerminalObservation, render_tool_warning,
    terminal_outcome_accumulator, tool_warning_payload,
};

fn accumulator() -> (TerminalObserver, HostToolFacts) {
    terminal_outcome_accumulator("run", Arc::new(FingerprintIdentity))
}

fn ok(tool: &str, args: Value) -> ToolTerminalObservation {
    ToolTerminalObservation::success(tool, args)
}

fn fail(tool: &str, args: Value, error: &str) -> ToolTerminalObservation {
    ToolTerminalObservation::failure(tool, args, error)
}

fn with_call(mut obs: ToolTerminalObservation, call: &str) -> ToolTerminalObservation {
    obs.tool_call_id = Some(call.into());
    obs
}

#[test]
fn openclaw_tool_terminal_outcome_failure_survives_suppression_until_a_real_send() {
    let (mut obs, _host) = accumulator();
    let suppressed = ToolTerminalObservation {
        result: Some(ToolResult::new(json!({"details": {
            "status": "suppressed", "reason": "cancelled_by_message_sending_hook"
        }}))),
        ..ok(
            "message",
            json!({"action": "send", "target": "123", "message": "omitted"}),
        )
    };
    assert_eq!(obs.observe(&suppressed).last_tool_error, None);
    obs.observe(&fail(
        "message",
        json!({"action": "send", "target": "123", "message": "failed"}),
        "Telegram transport failed",
    ));
    let after = obs.observe(&suppressed);
    let error = after.last_tool_error.expect("still unresolved");
    assert_eq!(error.error.as_deref(), Some("Telegram transport failed"));
    assert!(tool_warning_payload(Some(&error), true).is_some());
    let delivered = ToolTerminalObservation {
        result: Some(ToolResult::new(
            json!({"details": {"ok": true, "messageId": "sent-1"}}),
        )),
        ..ok(
            "message",
            json!({"action": "send", "target": "123", "message": "delivered"}),
        )
    };
    assert_eq!(obs.observe(&delivered).last_tool_error, None);
}

#[test]
fn openclaw_tool_terminal_outcome_latest_failure_survives_another_tool_success() {
    let (mut obs, _host) = accumulator();
    obs.observe(&fail(
        "message",
        json!({"action": "send", "to": "channel:a", "message": "A"}),
        "A failed",
    ));
    obs.observe(&fail(
        "message",
        json!({"action": "send", "to": "channel:b", "message": "B"}),
        "B failed",
    ));
    let after_read = obs.observe(&ok("read", json!({})));
    let error = after_read.last_tool_error.expect("unresolved");
    assert_eq!(error.error.as_deref(), Some("B failed"));
    assert!(tool_warning_payload(Some(&error), true).is_some());
}

#[test]
fn openclaw_tool_terminal_outcome_host_execution_and_adjusted_arguments_win() {
    let (mut obs, host) = accumulator();
    host.record_execution("call-1", false);
    host.record_adjusted_params(
        "call-1",
        json!({"action": "send", "to": "channel:adjusted"}),
    );
    let resolution = obs.observe(&with_call(
        ToolTerminalObservation {
            execution_started: Some(true),
            ..fail(
                "message",
                json!({"action": "send", "to": "channel:original"}),
                "blocked before execution",
            )
        },
        "call-1",
    ));
    assert!(!resolution.execution_started);
    assert_eq!(
        resolution.executed_arguments.map(Value::Object),
        Some(json!({"action": "send", "to": "channel:adjusted"}))
    );
    assert!(!resolution.side_effect_evidence);
    assert_eq!(
        resolution.last_tool_error.and_then(|e| e.mutating_action),
        Some(false)
    );
    assert_eq!(
        host.adjusted_params("call-1"),
        Some(json!({"action": "send", "to": "channel:adjusted"}))
    );
}

#[test]
fn openclaw_tool_terminal_outcome_active_host_record_beats_a_racing_claim() {
    let (mut obs, host) = accumulator();
    host.record_execution("call-racing", true);
    host.record_adjusted_params(
        "call-racing",
        json!({"action": "send", "to": "channel:adjusted"}),
    );
    let observation = ToolTerminalObservation {
        failure: Some(ToolFailure {
            error: Some("timed out during execution".into()),
            execution_started: Some(false),
            ..ToolFailure::default()
        }),
        ..fail(
            "message",
            json!({"action": "send", "to": "channel:original"}),
            "x",
        )
    };
    let resolution = obs.observe(&with_call(observation, "call-racing"));
    assert!(resolution.execution_started);
    assert_eq!(
        resolution.executed_arguments.map(Value::Object),
        Some(json!({"action": "send", "to": "channel:adjusted"}))
    );
    assert!(resolution.side_effect_evidence);
    let error = resolution.last_tool_error.expect("error");
    assert_eq!(error.execution_started, Some(true));
    assert_eq!(error.mutating_action, Some(true));
}

#[test]
fn openclaw_tool_terminal_outcome_pre_execution_block_is_settled_evidence() {
    let (mut obs, host) = accumulator();
    host.record_pre_execution_blocked("call-blocked");
    let resolution = obs.observe(&with_call(
        ToolTerminalObservation {
            execution_started: Some(true),
            ..fail(
                "message",
                json!({"action": "send", "to": "channel:blocked"}),
                "blocked",
            )
        },
        "call-blocked",
    ));
    assert!(!resolution.execution_started);
    assert!(!resolution.side_effect_evidence);
    let error = resolution.last_tool_error.expect("error");
    assert_eq!(error.execution_started, Some(false));
    assert_eq!(error.mutating_action, Some(false));
}

#[test]
fn openclaw_tool_terminal_outcome_host_owned_effect_receipts() {
    let cases: Vec<(&str, ToolTerminalObservation, EffectReceipt)> = vec![
        (
            "pre-execution rejection",
            ToolTerminalObservation {
                execution_started: Some(false),
                ..fail("message", json!({"action": "send"}), "blocked")
            },
            EffectReceipt::Uncertain,
        ),
        (
            "completed read",
            ok("message", json!({"action": "read"})),
            EffectReceipt::ReadCompleted,
        ),
        (
            "failed read",
            fail("message", json!({"action": "read"}), "read failed"),
            EffectReceipt::FailedNoEffect,
        ),
        (
            "completed computer observation",
            ok("computer", json!({"action": "list_windows"})),
            EffectReceipt::ReadCompleted,
        ),
        (
            "failed computer observation",
            fail(
                "computer",
                json!({"action": "get_cursor_position"}),
                "observation unavailable",
            ),
            EffectReceipt::FailedNoEffect,
        ),
        (
            "owner-declared replay-safe failure",
            ToolTerminalObservation {
                replay_safe: Some(true),
                ..fail("plugin_read", json!({}), "read failed")
            },
            EffectReceipt::FailedNoEffect,
        ),
        (
            "completed mutation",
            ok("message", json!({"action": "send"})),
            EffectReceipt::MutationCommitted,
        ),
        (
            "completed unknown operation",
            ok("plugin_unknown", json!({})),
            EffectReceipt::Uncertain,
        ),
        (
            "failed mutation",
            fail("message", json!({"action": "send"}), "send failed"),
            EffectReceipt::Uncertain,
        ),
    ];
    for (name, observation, expected) in cases {
        let (mut obs, _host) = accumulator();
        assert_eq!(obs.observe(&observation).effect_receipt, expected, "{name}");
    }
}

#[test]
fn openclaw_tool_terminal_outcome_spawn_retry_with_adjusted_arguments_clears() {
    let (mut obs, _host) = accumulator();
    let failed_args = json!({
        "task": "Investigate the flaky gateway test",
        "label": "Investigate",
        "cwd": "/outside/workspace"
    });
    let retry_args = json!({"task": "Investigate the flaky gateway test in repo scope"});
    let meta = |args: &Value| infer_tool_meta_from_args("sessions_spawn", args, DetailMode::Raw);
    obs.observe(&ToolTerminalObservation {
        meta: meta(&failed_args),
        ..fail(
            "sessions_spawn",
            failed_args.clone(),
            "cwd is outside the workspace",
        )
    });
    let after = obs.observe(&ToolTerminalObservation {
        meta: meta(&retry_args),
        ..ok("sessions_spawn", retry_args.clone())
    });
    assert_eq!(after.last_tool_error, None);
    assert_eq!(
        tool_warning_payload(after.last_tool_error.as_ref(), false),
        None
    );
}

#[test]
fn openclaw_tool_terminal_outcome_memory_recall_side_effect_evidence() {
    let (mut obs, _host) = accumulator();
    let search = obs.observe(&ok("memory_search", json!({"query": "recall"})));
    assert!(search.execution_started && search.side_effect_evidence);
    let get = obs.observe(&ok("memory_get", json!({"path": "memory/notes.md"})));
    assert!(get.execution_started && !get.side_effect_evidence);
}

#[test]
fn openclaw_tool_terminal_outcome_memory_search_timeout_warnings() {
    let cases = [
        (
            true,
            30_000,
            2,
            "⚠️ Memory Search timed out after 30s; 2 partial results are available.",
        ),
        (
            true,
            30_000,
            1,
            "⚠️ Memory Search timed out after 30s; 1 partial result is available.",
        ),
        (true, 30_000, 0, "⚠️ Memory Search timed out after 30s."),
        (false, 30_000, 0, "⚠️ Memory Search failed"),
        (true, -1, 0, "⚠️ Memory Search failed"),
    ];
    for (timed_out, timeout_ms, results, expected) in cases {
        let (mut obs, _host) = accumulator();
        let results: Vec<Value> = (0..results)
            .map(|i| json!({"path": format!("memory/{i}.md")}))
            .collect();
        let error_text = "memory_search timed out after 30s: PRIVATE_PROVIDER_DIAGNOSTIC";
        let resolution = obs.observe(&ToolTerminalObservation {
            result: Some(ToolResult::new(json!({"details": {
                "timedOut": timed_out, "timeoutMs": timeout_ms, "partial": true,
                "results": results, "error": error_text
            }}))),
            ..fail(
                "memory_search",
                json!({"query": "project notes"}),
                error_text,
            )
        });
        let error = resolution.last_tool_error.expect("error");
        assert_eq!(render_tool_warning(&error), expected);
        assert_eq!(
            tool_warning_payload(Some(&error), false).as_deref(),
            Some(expected)
        );
        assert!(resolution.side_effect_evidence);
    }
}

#[test]
fn openclaw_tool_terminal_outcome_failed_persistence_with_an_assistant_reply() {
    let (mut obs, _host) = accumulator();
    let resolution = obs.observe(&ToolTerminalObservation {
        execution_started: Some(true),
        owner_mutation: Some(OwnerMutation {
            owner_key: r#"["memory-lancedb","memory_store"]"#.into(),
        }),
        ..fail(
            "memory_store",
            json!({"text": "The user prefers metric units."}),
            "429 insufficient_quota",
        )
    });
    // Deliberate difference: OpenClaw lets the assistant's "I've saved that preference" reply
    // stand alone; Tether always warns about an unresolved mutating failure, since that reply
    // claims an effect that did not happen. The owner key never reaches the warning.
    let warning = tool_warning_payload(resolution.last_tool_error.as_ref(), true);
    assert_eq!(warning.as_deref(), Some("⚠️ Memory Store failed"));
    assert!(!warning.unwrap_or_default().contains("memory-lancedb"));
}

#[test]
fn openclaw_tool_terminal_outcome_unowned_same_name_tool_is_not_a_persistence_mutation() {
    let (mut obs, _host) = accumulator();
    let resolution = obs.observe(&ToolTerminalObservation {
        execution_started: Some(true),
        ..fail(
            "memory_store",
            json!({"text": "The user prefers metric units."}),
            "store unavailable",
        )
    });
    assert_eq!(
        resolution.last_tool_error.and_then(|e| e.mutating_action),
        Some(false)
    );
}

#[test]
fn openclaw_tool_terminal_outcome_persistence_retry_of_the_same_tool() {
    let (mut obs, _host) = accumulator();
    let owner = || {
        Some(OwnerMutation {
            owner_key: r#"["memory-lancedb","memory_store"]"#.into(),
        })
    };
    obs.observe(&ToolTerminalObservation {
        owner_mutation: owner(),
        ..fail(
            "memory_store",
            json!({"text": "The user prefers metric units."}),
            "store unavailable",
        )
    });
    // Deliberate difference (see `docs/compatibility.md`): an owner-declared mutation's identity includes its
    // arguments, so storing a different fact does not resolve the failed store (OpenClaw
    // clears on any success of the same owner tool). The same arguments do resolve it.
    let other = obs.observe(&ToolTerminalObservation {
        owner_mutation: owner(),
        ..ok(
            "memory_store",
            json!({"text": "The user prefers imperial units."}),
        )
    });
    assert!(other.last_tool_error.is_some());
    let same = obs.observe(&ToolTerminalObservation {
        owner_mutation: owner(),
        ..ok(
            "memory_store",
            json!({"text": "The user prefers metric units."}),
        )
    });
    assert_eq!(same.last_tool_error, None);
}
