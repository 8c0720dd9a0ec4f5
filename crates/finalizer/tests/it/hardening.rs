//! Fail-closed allow-lists, idle-timeout ordering and stack safety of every entry point that
//! walks caller-supplied JSON (100,000 nesting levels on a 2 MiB thread stack).

use serde_json::{Map, Value, json};
use tether_core::{AgentMessage, AttemptTerminal, ContentBlock, MessageRole, ToolMeta};
use tether_finalizer::{
    ALLOWED_ASSISTANT_FIELDS, FinalizerError, FullAttemptEvidence, MAX_RESULT_DEPTH,
    ProjectionLimits, RejectionReason, TimeoutKind, project_current_evidence,
    project_settled_turn_finalization_attempt_result, validate_settled_turn_finalization_result,
};

use crate::support::{assistant, user};

const LEVELS: usize = 100_000;

/// `LEVELS` nested arrays around a string, built without recursion.
fn deep() -> Value {
    let mut v = json!("leaf");
    for i in 0..LEVELS {
        v = if i % 2 == 0 {
            Value::Array(vec![v])
        } else {
            let mut m = Map::new();
            m.insert("k".into(), v);
            Value::Object(m)
        };
    }
    v
}

/// Dismantles a value of any depth without recursion (`Value`'s own drop recurses).
fn dismantle(value: Value) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

/// Takes the deep value back out of an object field (so it can be dismantled).
fn take(map: &mut Map<String, Value>, key: &str) -> Value {
    map.remove(key).unwrap_or(Value::Null)
}

/// Runs `f` on a thread with a 2 MiB stack; a stack overflow aborts the test binary.
fn on_small_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("the entry point returned on a 2 MiB stack");
}

fn answer() -> Map<String, Value> {
    json!({"role": "assistant", "content": [{"type": "text", "text": "done"}], "stop_reason": "stop"})
        .as_object()
        .cloned()
        .unwrap_or_default()
}

fn validate_err(raw: &Value) -> FinalizerError {
    validate_settled_turn_finalization_result(raw).expect_err("refused")
}

#[test]
fn hardening_tool_call_blocks_in_any_spelling_fail_closed() {
    for block_type in [
        "functionCall",
        "server_tool_use",
        "mcp_tool_use",
        "tool-call",
        "ToolUse",
        "custom_tool_call",
        "web_search_call",
    ] {
        let mut a = answer();
        a["content"] =
            json!([{"type": "text", "text": "ok"}, {"type": block_type, "name": "exec"}]);
        let err = validate_err(&json!({ "assistant": a }));
        assert!(
            matches!(&err, FinalizerError::ToolCall { tool_names } if tool_names == &["exec"]),
            "{block_type}: {err:?}"
        );
    }
}

#[test]
fn hardening_unknown_content_blocks_are_refused_with_their_position() {
    for (block, expected_type) in [
        (json!({"type": "document", "source": "x"}), Some("document")),
        (json!({"text": "untyped"}), None),
        (json!("bare string"), None),
    ] {
        let mut a = answer();
        a["content"] = json!([{"type": "text", "text": "ok"}, block]);
        let err = validate_err(&json!({ "assistant": a }));
        match &err {
            FinalizerError::UnsupportedContentBlock { field, block_type } => {
                assert_eq!(field, "content[1]");
                assert_eq!(block_type.as_deref(), expected_type);
            }
            other => panic!("expected UnsupportedContentBlock, got {other:?}"),
        }
        assert!(err.to_string().contains("content[1]"), "{err}");
    }
    // Thinking and images are answer blocks.
    let mut a = answer();
    a["content"] = json!([{"type": "thinking", "text": "t"}, {"type": "text", "text": "ok"}]);
    assert!(validate_settled_turn_finalization_result(&json!({ "assistant": a })).is_ok());
}

#[test]
fn hardening_chat_style_tool_calls_field_is_refused_by_name_and_never_copied() {
    let mut a = answer();
    a.insert(
        "tool_calls".into(),
        json!([{"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{}"}}]),
    );
    let err = validate_err(&json!({ "assistant": a }));
    assert!(
        matches!(&err, FinalizerError::UnsupportedAssistantField { field } if field == "tool_calls"),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .ends_with("unsupported assistant field: tool_calls")
    );
    for field in ["function_call", "tools", "refusal"] {
        let mut a = answer();
        a.insert(field.into(), json!(null));
        assert!(matches!(
            validate_err(&json!({ "assistant": a })),
            FinalizerError::UnsupportedAssistantField { field: f } if f == field
        ));
    }
    // Every allowed field passes; the projection never copies anything else into `meta`.
    let mut a = answer();
    for field in ALLOWED_ASSISTANT_FIELDS {
        if !a.contains_key(field) {
            a.insert(field.into(), json!("x"));
        }
    }
    let ok = validate_settled_turn_finalization_result(&json!({ "assistant": a })).unwrap();
    let message = ok.assistant.to_agent_message();
    assert!(
        message
            .meta
            .keys()
            .all(|k| ALLOWED_ASSISTANT_FIELDS.contains(&k.as_str()))
    );
    // A projected assistant carrying `tool_calls` in its metadata is refused, by name.
    let mut e = FullAttemptEvidence::default();
    let mut completed = assistant("final", "stop");
    completed
        .meta
        .insert("tool_calls".into(), json!([{"id": "c1"}]));
    e.attempt.completed_assistant = Some(completed);
    assert!(matches!(
        project_settled_turn_finalization_attempt_result(&e),
        Err(FinalizerError::UnsupportedAssistantField { field }) if field == "tool_calls"
    ));
}

#[test]
fn hardening_idle_timeout_with_capability_activity_reports_the_activity() {
    let mut e = FullAttemptEvidence::default();
    e.attempt.completed_assistant = Some(assistant("final", "stop"));
    e.attempt.terminal = AttemptTerminal::TimedOut;
    e.timeout_kind = Some(TimeoutKind::IdlePrompt);
    // Without activity: the idle timeout.
    assert!(matches!(
        project_settled_turn_finalization_attempt_result(&e),
        Err(FinalizerError::TerminalOutcome {
            reason: "idle_timeout",
            ..
        })
    ));
    e.attempt.tool_metas.push(ToolMeta {
        tool_name: "write".into(),
        meta: None,
        is_error: false,
    });
    assert!(matches!(
        project_settled_turn_finalization_attempt_result(&e),
        Err(FinalizerError::CapabilityActivity {
            evidence: "tool_metas"
        })
    ));
    // A hard timeout stays a canonical terminal outcome.
    e.timeout_kind = Some(TimeoutKind::RunBudget);
    assert!(matches!(
        project_settled_turn_finalization_attempt_result(&e),
        Err(FinalizerError::TerminalOutcome {
            reason: "hard_timeout",
            ..
        })
    ));
}

#[test]
fn hardening_depth_limit_is_exact() {
    let mut nested = json!("x");
    for _ in 0..MAX_RESULT_DEPTH - 2 {
        nested = json!([nested]);
    }
    // The root object and the assistant are two levels: with 62 arrays inside an assistant
    // field the input nests exactly 64 levels and passes; one more array is refused.
    let mut a = answer();
    a.insert("usage".into(), nested.clone());
    let ok = validate_settled_turn_finalization_result(&json!({ "assistant": a }));
    assert!(ok.is_ok(), "{ok:?}");
    let mut a = answer();
    a.insert("usage".into(), json!([nested]));
    assert!(matches!(
        validate_settled_turn_finalization_result(&json!({ "assistant": a })),
        Err(FinalizerError::TooDeep {
            limit: MAX_RESULT_DEPTH
        })
    ));
}

#[test]
fn stack_safety_validation_of_a_deep_root() {
    on_small_stack(|| {
        let raw = deep();
        assert!(matches!(
            validate_settled_turn_finalization_result(&raw),
            Err(FinalizerError::TooDeep { .. })
        ));
        dismantle(raw);
    });
}

#[test]
fn stack_safety_validation_of_deep_assistant_fields_and_blocks() {
    on_small_stack(|| {
        for place in ["field", "block", "trace"] {
            let mut a = answer();
            let mut raw = Map::new();
            match place {
                "field" => {
                    a.insert("usage".into(), deep());
                }
                "block" => {
                    a.insert("content".into(), json!([{"type": "text", "text": "x"}]));
                    if let Some(Value::Array(blocks)) = a.get_mut("content")
                        && let Some(Value::Object(block)) = blocks.get_mut(0)
                    {
                        block.insert("extra".into(), deep());
                    }
                }
                _ => {
                    raw.insert("diagnostic_trace".into(), json!({}));
                    if let Some(Value::Object(trace)) = raw.get_mut("diagnostic_trace") {
                        trace.insert("deep".into(), deep());
                    }
                }
            }
            raw.insert("assistant".into(), Value::Object(a));
            let raw = Value::Object(raw);
            assert!(
                matches!(
                    validate_settled_turn_finalization_result(&raw),
                    Err(FinalizerError::TooDeep { .. })
                ),
                "{place}"
            );
            dismantle(raw);
        }
    });
}

#[test]
fn stack_safety_projection_of_deep_metadata_arguments_and_trace() {
    on_small_stack(|| {
        for place in ["meta", "arguments", "trace"] {
            let mut e = FullAttemptEvidence::default();
            let mut completed = assistant("final", "stop");
            match place {
                "meta" => {
                    completed.meta.insert("usage".into(), deep());
                }
                "arguments" => completed.content.push(ContentBlock::ToolCall {
                    id: "c1".into(),
                    name: "exec".into(),
                    arguments: deep(),
                }),
                _ => {
                    let mut trace = Map::new();
                    trace.insert("deep".into(), deep());
                    e.diagnostic_trace = Some(tether_finalizer::DiagnosticTrace(trace));
                }
            }
            e.attempt.completed_assistant = Some(completed);
            assert!(
                matches!(
                    project_settled_turn_finalization_attempt_result(&e),
                    Err(FinalizerError::TooDeep { .. })
                ),
                "{place}"
            );
            if let Some(mut m) = e.attempt.completed_assistant.take() {
                dismantle(take(&mut m.meta, "usage"));
                for block in m.content.drain(..) {
                    if let ContentBlock::ToolCall { arguments, .. } = block {
                        dismantle(arguments);
                    }
                }
            }
            if let Some(mut trace) = e.diagnostic_trace.take() {
                dismantle(take(&mut trace.0, "deep"));
            }
        }
    });
}

#[test]
fn stack_safety_bounded_projection_of_deep_tool_arguments() {
    on_small_stack(|| {
        let call = AgentMessage {
            role: MessageRole::Assistant,
            content: vec![ContentBlock::ToolCall {
                id: "c1".into(),
                name: "exec".into(),
                arguments: {
                    let mut m = Map::new();
                    m.insert("deep".into(), deep());
                    Value::Object(m)
                },
            }],
            id: None,
            tool_call_id: None,
            tool_name: None,
            is_error: false,
            stop_reason: Some("toolUse".into()),
            meta: Map::new(),
        };
        let mut messages = vec![user("go"), call];
        let out = project_current_evidence(
            std::mem::take(&mut messages).into_iter().map(Ok),
            ProjectionLimits::default(),
        );
        assert_eq!(out.unwrap_err(), RejectionReason::InvalidContent);
    });
}
