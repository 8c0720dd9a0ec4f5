//! Stack safety: every public entry point that walks caller-supplied JSON gets 100,000 nesting
//! levels on a thread with a 2 MiB stack. The deep inputs are built in a loop and dismantled
//! with `drop_deep` (a `serde_json::Value`'s own drop recurses once per level), so each test
//! measures the entry point alone.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tether_core::{JsonObjectCodec, RecordCodec};
use tether_harness_sdk::backend::ThreadBindingCodec;
use tether_harness_sdk::results::delivery::{
    MessagingToolResult, attach_message_delivery_fact, classify_core_conversation_result,
    extract_messaging_tool_send, extract_messaging_tool_source_reply_payload,
    is_delivered_messaging_tool_result, project_plugin_message_delivery_fact,
    read_message_delivery_fact, read_result_delivery_fact,
};
use tether_harness_sdk::results::display::{DetailMode, infer_tool_meta_from_args};
use tether_harness_sdk::results::mirror::{
    FallbackPlan, Persistence, TranscriptReceipt, UserTurnTranscriptRecorder,
    restore_prepared_user_turn_meta,
};
use tether_harness_sdk::results::sanitize::{
    redact_structured, sanitize_tool_args, sanitize_tool_result,
};
use tether_harness_sdk::results::shared::{
    SharedValue, redact_shared_structured, sanitize_shared_tool_args,
};
use tether_harness_sdk::results::spawn::{
    normalize_accepted_session_spawn_result, read_collected_run_ids,
};
use tether_harness_sdk::results::terminal::{
    FingerprintIdentity, OwnerMutation, ToolResult, ToolTerminalObservation,
    terminal_outcome_accumulator,
};
use tether_harness_sdk::results::{deep_clone, drop_deep};

const LEVELS: usize = 100_000;

/// An object whose `key` holds `LEVELS` alternating arrays and objects around a secret.
fn deep_under(key: &str) -> Value {
    let mut v = json!({"token": "hunter2-hunter2-hunter2"});
    for i in 0..LEVELS {
        v = if i % 2 == 0 {
            Value::Array(vec![v])
        } else {
            let mut m = Map::new();
            if i % 5 == 1 {
                m.insert("details".into(), json!({"status": "sent"}));
            }
            m.insert("result".into(), v);
            Value::Object(m)
        };
    }
    let mut root = Map::new();
    root.insert(key.into(), v);
    Value::Object(root)
}

/// Runs `f` on a 2 MiB stack; a stack overflow would abort the whole test binary.
fn on_small_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("the entry point returned on a 2 MiB stack");
}

#[test]
fn stack_safety_sanitize_tool_args() {
    on_small_stack(|| {
        let v = deep_under("args");
        let out = sanitize_tool_args(&v);
        // The secret at the bottom is masked.
        let mut node = &out["args"];
        while let Some(next) = node.get(0).or_else(|| node.get("result")) {
            node = next;
        }
        assert_eq!(node["token"], json!("hunter…ter2"));
        drop_deep(out);
        drop_deep(v);
    });
}

#[test]
fn stack_safety_sanitize_tool_result() {
    on_small_stack(|| {
        let v = deep_under("details");
        drop_deep(sanitize_tool_result(&v));
        drop_deep(v);
    });
}

#[test]
fn stack_safety_redact_structured() {
    on_small_stack(|| {
        let v = deep_under("content");
        drop_deep(redact_structured(&v));
        drop_deep(v);
    });
}

#[test]
fn stack_safety_shared_graph_sanitize() {
    on_small_stack(|| {
        let v = deep_under("args");
        let shared = SharedValue::from_json(&v);
        drop_deep(sanitize_shared_tool_args(&shared));
        drop_deep(v);
        unlink_shared(shared);
    });
}

#[test]
fn stack_safety_shared_graph_redact_structured() {
    on_small_stack(|| {
        let v = deep_under("result");
        let shared = SharedValue::from_json(&v);
        let out = redact_shared_structured(&shared);
        // The secret at the bottom is masked.
        let mut node = &out["result"];
        while let Some(next) = node.get(0).or_else(|| node.get("result")) {
            node = next;
        }
        assert_eq!(node["token"], json!("hunter…ter2"));
        drop_deep(out);
        drop_deep(v);
        unlink_shared(shared);
    });
}

/// Unlinks a shared graph's own nodes (`Arc`s) level by level.
fn unlink_shared(shared: SharedValue) {
    let mut stack = vec![shared];
    while let Some(node) = stack.pop() {
        match node {
            SharedValue::Array(a) => stack.extend(a.items()),
            SharedValue::Object(o) => stack.extend(o.entries().into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

#[test]
fn stack_safety_legacy_session_conversion() {
    use tether_harness_sdk::acpx::{LEGACY_SESSION_SCHEMA, convert_legacy_session};
    on_small_stack(|| {
        let mut record = json!({
            "schema": LEGACY_SESSION_SCHEMA,
            "acpxRecordId": "r1",
            "acpSessionId": "s1",
            "agentCommand": "codex",
            "cwd": "/w",
            "createdAt": "2026-01-01T00:00:00Z",
            "lastUsedAt": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
            "lastSeq": 3,
        });
        for field in ["messages", "eventLog", "agentCapabilities", "acpx"] {
            let deep = deep_under("x");
            let value = if field == "messages" {
                Value::Array(vec![deep])
            } else {
                deep
            };
            record[field] = value;
        }
        let converted = convert_legacy_session(&record)
            .expect("a valid legacy record")
            .expect("converted");
        for field in ["messages", "eventLog", "agentCapabilities", "acpx"] {
            assert!(
                converted.get(field).is_some_and(|v| !v.is_null()),
                "{field} kept"
            );
        }
        drop_deep(converted);
        drop_deep(record);
    });
}

#[test]
fn stack_safety_display_metadata() {
    on_small_stack(|| {
        for tool in [
            "exec",
            "read",
            "message",
            "sessions_spawn",
            "web_fetch",
            "other",
        ] {
            for key in ["command", "path", "task", "message", "url", "x"] {
                let v = deep_under(key);
                let _ = infer_tool_meta_from_args(tool, &v, DetailMode::Raw);
                drop_deep(v);
            }
        }
    });
}

#[test]
fn stack_safety_delivery_readers() {
    on_small_stack(|| {
        for key in ["details", "result", "payload", "content", "results"] {
            let v = deep_under(key);
            let _ = read_message_delivery_fact(&v);
            let _ = read_result_delivery_fact(&v);
            let _ = project_plugin_message_delivery_fact(&v);
            let _ = extract_messaging_tool_source_reply_payload(&v);
            let _ = classify_core_conversation_result("conversations_send", &v);
            let _ = extract_messaging_tool_send("message", &v, Some(&v));
            let args = json!({"action": "broadcast", "channel": "slack"});
            let _ = is_delivered_messaging_tool_result(&MessagingToolResult {
                args: Some(&args),
                result: Some(&v),
                hook_result: Some(&v),
                ..Default::default()
            });
            drop_deep(attach_message_delivery_fact(&v, None));
            drop_deep(v);
        }
    });
}

#[test]
fn stack_safety_spawn_receipts() {
    on_small_stack(|| {
        for key in ["details", "result", "status", "childSessionKey"] {
            let v = deep_under(key);
            assert_eq!(normalize_accepted_session_spawn_result(&v), None);
            let _ = read_collected_run_ids(&v);
            drop_deep(v);
        }
    });
}

#[test]
fn stack_safety_transcript_mirroring() {
    on_small_stack(|| {
        let mut runtime = deep_under("content");
        runtime["role"] = json!("user");
        let mut prepared = deep_under("content");
        prepared["role"] = json!("user");
        let restored = restore_prepared_user_turn_meta(&runtime, Some(&prepared)).into_owned();
        drop_deep(restored);
        drop_deep(runtime);
        drop_deep(prepared);
    });
}

/// Drops whatever a fallback plan holds without recursion.
fn drop_plan(plan: FallbackPlan) {
    match plan {
        FallbackPlan::Append(v) => drop_deep(v),
        FallbackPlan::LateMedia {
            admitted,
            late_media,
        } => {
            admitted.into_iter().for_each(drop_deep);
            drop_deep(late_media);
        }
        _ => {}
    }
}

#[test]
fn stack_safety_transcript_recorder() {
    on_small_stack(|| {
        let deep_user = || {
            let mut m = deep_under("content");
            m["role"] = json!("user");
            m
        };
        // Late media: a resolved turn whose content holds a deep block.
        let mut resolved = deep_user();
        let block = resolved["content"].take();
        let mut image = Map::new();
        image.insert("type".into(), json!("image"));
        image.insert("data".into(), block);
        resolved["content"] = Value::Array(vec![Value::Object(image)]);
        let message = deep_user();
        let mut rec = UserTurnTranscriptRecorder::new();
        rec.add_collected_source(deep_clone(&message["content"]), true);
        rec.mark_runtime_persistence_pending();
        rec.record_resolved_input(deep_clone(&resolved));
        rec.mark_sent_to_provider();
        drop_plan(rec.plan_fallback(&message));
        let effects = rec.mark_runtime_persisted(
            Some(&message),
            Some(TranscriptReceipt::Anchor(tether_core::TranscriptAnchor(1))),
            Some(Persistence { appended: true }),
        );
        if let Some(commit) = effects.original_input_committed {
            drop_deep(commit.message);
        }
        effects.message_persisted.into_iter().for_each(drop_deep);
        drop_plan(rec.plan_fallback(&message));
        rec.persist_fallback(&message, true)
            .into_iter()
            .for_each(drop_deep);
        let copy = rec.clone();
        drop(copy);
        drop(rec);
        drop_deep(message);
        drop_deep(resolved);
    });
}

#[test]
fn stack_safety_terminal_reports() {
    on_small_stack(|| {
        let (mut observer, host) =
            terminal_outcome_accumulator("run", Arc::new(FingerprintIdentity));
        host.record_adjusted_params("call-1", deep_under("path"));
        for (tool, owner) in [("write", false), ("memory_store", true), ("message", false)] {
            let observation = ToolTerminalObservation {
                tool_call_id: Some("call-1".into()),
                result: Some(ToolResult::new(deep_under("details"))),
                owner_mutation: owner.then(|| OwnerMutation {
                    owner_key: "owner".into(),
                }),
                ..ToolTerminalObservation::failure(tool, deep_under("path"), "boom")
            };
            let resolution = observer.observe(&observation);
            if let Some(args) = resolution.executed_arguments {
                drop_deep(Value::Object(args));
            }
            if let Some(args) = observation.arguments {
                drop_deep(args);
            }
            if let Some(result) = observation.result {
                drop_deep(result.into_value());
            }
        }
        if let Some(adjusted) = host.adjusted_params("call-1") {
            drop_deep(adjusted);
        }
        // Dropping the accumulator and the host facts (which keep the adjusted parameters)
        // must not recurse either.
        drop(observer);
        drop(host);
        let original = deep_under("x");
        let copy = deep_clone(&original);
        drop_deep(copy);
        drop_deep(original);
    });
}

#[test]
fn stack_safety_codecs() {
    on_small_stack(|| {
        // 100,000 levels as bytes: parsing stops at its own limit and reports "not a record".
        let mut bytes = Vec::with_capacity(2 * LEVELS + 16);
        bytes.extend_from_slice(b"{\"a\":");
        bytes.extend(std::iter::repeat_n(b'[', LEVELS));
        bytes.extend(std::iter::repeat_n(b']', LEVELS));
        bytes.push(b'}');
        assert!(JsonObjectCodec.decode(&bytes).is_none());
        assert!(ThreadBindingCodec.decode(&bytes).is_none());
    });
}

#[test]
fn stack_safety_tool_result_errors() {
    use tether_harness_sdk::results::errors::{
        extract_tool_error_code, extract_tool_error_message, extract_tool_result_text,
        is_tool_result_error, tool_result_failure_kind,
    };
    on_small_stack(|| {
        for key in ["details", "content", "error", "x"] {
            let v = deep_under(key);
            let _ = is_tool_result_error(&v);
            let _ = tool_result_failure_kind(&v);
            let _ = extract_tool_error_message(&v);
            let _ = extract_tool_error_code(&v);
            let _ = extract_tool_result_text(&v);
            drop_deep(v);
        }
    });
}

#[test]
fn stack_safety_json_codec_encodes_deep_records() {
    on_small_stack(|| {
        let mut deep = Map::new();
        deep.insert("deep".into(), deep_under("x"));
        let bytes = JsonObjectCodec.encode(&deep);
        assert!(bytes.starts_with(b"{\"deep\":{\"x\":"));
        // Deeper than the parser's own limit: the row reads back as "not a record", never
        // as a crash.
        assert!(JsonObjectCodec.decode(&bytes).is_none());
        if let Some(v) = deep.remove("deep") {
            drop_deep(v);
        }
    });
}
