//! `extensions/codex/src/app-server/settled-turn-projection.test.ts`: the projection of the
//! current turn's evidence into response items (Tether's `project_current_evidence`).

use serde_json::{Value, json};
use tether_core::{AgentMessage, ContentBlock, MessageRole};
use tether_finalizer::{
    BoundedProjection, ProjectedItem, ProjectionLimits, RejectionReason, project_current_evidence,
};
use tether_finalizer::{MAX_FIELD_BYTES, META_UPSTREAM_TEXT};

use crate::bounded::{GuardedSource, call, ok_source};
use crate::support::{tool_result, user};

/// An over-length call id (83 characters).
fn overlength_call_id(last: char) -> String {
    format!("{}{last}", "a".repeat(82))
}

/// The fixture's tool call: private reasoning, then a `message` call.
fn tool_call(id: &str) -> AgentMessage {
    let mut m = call(id, "message", json!({"action": "send"}));
    m.content.insert(
        0,
        ContentBlock::Thinking {
            text: "private reasoning".into(),
        },
    );
    m
}

fn sent(id: &str) -> AgentMessage {
    tool_result(id, "message", "Message sent.", false)
}

fn project(messages: Vec<AgentMessage>) -> Result<BoundedProjection, RejectionReason> {
    project_current_evidence(ok_source(messages), ProjectionLimits::default())
}

fn call_ids(p: &BoundedProjection) -> Vec<String> {
    p.items()
        .iter()
        .filter_map(|item| match item {
            ProjectedItem::FunctionCall { call_id, .. }
            | ProjectedItem::FunctionCallOutput { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect()
}

fn last_output(p: &BoundedProjection) -> String {
    match p.items().last() {
        Some(ProjectedItem::FunctionCallOutput { output, .. }) => output.clone(),
        other => panic!("not a tool output: {other:?}"),
    }
}

fn upstream_user(decorated: &str, upstream: &str) -> AgentMessage {
    let mut m = user(decorated);
    m.meta
        .insert(META_UPSTREAM_TEXT.into(), Value::from(upstream.to_owned()));
    m
}

#[test]
fn openclaw_settled_turn_projection_canonical_exchange_without_reasoning() {
    let p = project(vec![
        user("Send the update."),
        AgentMessage::text(MessageRole::Assistant, "I’ll send it now."),
        tool_call("call-1"),
        sent("call-1"),
    ])
    .unwrap();
    assert_eq!(
        p.to_json(),
        json!([
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Send the update."}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "I’ll send it now."}]},
            {"type": "function_call", "call_id": "call-1", "name": "message", "arguments": "{\"action\":\"send\"}"},
            {"type": "function_call_output", "call_id": "call-1", "output": "Message sent."}
        ])
    );
    assert!(!p.to_json().to_string().contains("private reasoning"));
}

#[test]
fn openclaw_settled_turn_projection_enriched_mirrored_tool_result_block() {
    // Tether's content model has no separate enriched tool-result block: the producer
    // flattens it into the result's text, which becomes the output as is.
    let p = project(vec![
        tool_call("call-1"),
        tool_result("call-1", "message", "Telegram delivery complete.", false),
    ])
    .unwrap();
    assert!(
        matches!(&p.items()[0], ProjectedItem::FunctionCall { call_id, .. } if call_id == "call-1")
    );
    assert_eq!(last_output(&p), "Telegram delivery complete.");
}

#[test]
fn openclaw_settled_turn_projection_overlength_call_ids_are_rewritten_deterministically() {
    let id = overlength_call_id('1');
    assert_eq!(id.chars().count(), 83);
    let first = call_ids(&project(vec![tool_call(&id), sent(&id)]).unwrap());
    let second = call_ids(&project(vec![tool_call(&id), sent(&id)]).unwrap());
    assert_eq!(first.len(), 2);
    let rewritten = &first[0];
    let rest = rewritten.strip_prefix("call_").expect("call_ prefix");
    assert!((1..=59).contains(&rest.len()), "{rewritten}");
    assert!(
        rest.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    );
    assert!(rewritten.len() <= 64);
    assert_eq!(first[1], first[0], "call and result share the id");
    assert_eq!(second, first, "deterministic across projections");
}

#[test]
fn openclaw_settled_turn_projection_distinct_overlength_ids_do_not_collide() {
    let (a, b) = (overlength_call_id('1'), overlength_call_id('2'));
    let ids = call_ids(&project(vec![tool_call(&a), sent(&a), tool_call(&b), sent(&b)]).unwrap());
    assert_eq!(ids.len(), 4);
    assert_eq!(ids[0], ids[1]);
    assert_eq!(ids[2], ids[3]);
    assert_ne!(ids[0], ids[2]);
}

#[test]
fn openclaw_settled_turn_projection_dotted_namespaced_tool_names() {
    let name = "codex_apps.slack.slack_send";
    let p = project(vec![
        call("call-1", name, json!({"channel": "C1"})),
        tool_result("call-1", name, "Sent.", false),
    ])
    .unwrap();
    assert_eq!(
        p.to_json(),
        json!([
            {"type": "function_call", "call_id": "call-1", "name": name, "arguments": "{\"channel\":\"C1\"}"},
            {"type": "function_call_output", "call_id": "call-1", "output": "Sent."}
        ])
    );
}

#[test]
fn openclaw_settled_turn_projection_invalid_tool_names_are_rejected_without_text() {
    let err = project(vec![
        call("call-1", "bad tool", json!({})),
        tool_result("call-1", "bad tool", "failed", false),
    ])
    .unwrap_err();
    assert_eq!(err, RejectionReason::InvalidContent);
    // The rejection is a closed code: no transcript text can be carried in it.
    assert_eq!(err.to_string(), "invalid_content");
}

#[test]
fn openclaw_settled_turn_projection_failed_result_status_is_preserved() {
    let p = project(vec![
        tool_call("call-1"),
        tool_result("call-1", "message", "Delivery failed.", true),
    ])
    .unwrap();
    assert_eq!(
        p.to_json().as_array().unwrap().last().unwrap(),
        &json!({"type": "function_call_output", "call_id": "call-1", "output": "[Tool result status: error]\nDelivery failed."})
    );
}

#[test]
fn openclaw_settled_turn_projection_empty_failed_result_is_failure_evidence() {
    let mut failed = tool_result("call-1", "message", "", true);
    failed.content.clear();
    let p = project(vec![tool_call("call-1"), failed]).unwrap();
    assert_eq!(
        last_output(&p),
        "[Tool result status: error]\nTool failed without textual output."
    );
}

#[test]
fn openclaw_settled_turn_projection_failure_marker_is_not_charged_against_the_text_limit() {
    let text = "x".repeat(MAX_FIELD_BYTES);
    let p = project(vec![
        tool_call("call-1"),
        tool_result("call-1", "message", &text, true),
    ])
    .unwrap();
    assert_eq!(
        last_output(&p),
        format!("[Tool result status: error]\n{text}")
    );
}

#[test]
fn openclaw_settled_turn_projection_exact_whitespace_is_preserved() {
    let p = project(vec![
        user("  user input\n"),
        AgentMessage::text(MessageRole::Assistant, "\tassistant output\n"),
        tool_call("call-1"),
        tool_result("call-1", "message", "  tool output\n", false),
    ])
    .unwrap();
    let json = p.to_json();
    assert_eq!(
        json[0],
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "  user input\n"}]})
    );
    assert_eq!(
        json[1],
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "\tassistant output\n"}]})
    );
    assert_eq!(json[2]["type"], "function_call");
    assert_eq!(json[3]["output"], "  tool output\n");
}

#[test]
fn openclaw_settled_turn_projection_stops_acquiring_later_payloads_after_a_limit() {
    for (count, text, expected) in [
        (205, "old".to_owned(), RejectionReason::ItemLimit),
        (9, "x".repeat(60 * 1024), RejectionReason::ByteLimit),
    ] {
        let mut messages: Vec<AgentMessage> = (0..count).map(|_| user(&text)).collect();
        messages.push(user("must not acquire this later payload"));
        messages.push(tool_call("call-1"));
        messages.push(sent("call-1"));
        // Every message from the later payload on fails (and is counted) when read.
        let (source, later_reads) = GuardedSource::new(messages, count);
        assert_eq!(
            project_current_evidence(source, ProjectionLimits::default()).unwrap_err(),
            expected
        );
        assert_eq!(later_reads.get(), 0, "{expected}");
    }
}

#[test]
fn openclaw_settled_turn_projection_prefers_the_undecorated_upstream_user_text() {
    let p = project(vec![
        upstream_user(
            "[Telegram metadata] decorated prompt",
            "Send the Aurora notice to Erin.",
        ),
        tool_call("call-1"),
        sent("call-1"),
    ])
    .unwrap();
    assert_eq!(
        p.to_json()[0],
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Send the Aurora notice to Erin."}]})
    );
}

#[test]
fn openclaw_settled_turn_projection_upstream_text_above_the_message_limit() {
    let upstream = "x".repeat(64 * 1024 + 1);
    let p = project(vec![
        upstream_user("[Telegram metadata] decorated prompt", &upstream),
        tool_call("call-1"),
        sent("call-1"),
    ])
    .unwrap();
    assert_eq!(p.to_json()[0]["content"][0]["text"], upstream.as_str());
}

#[test]
fn openclaw_settled_turn_projection_upstream_text_above_the_projection_limit() {
    let err = project(vec![
        upstream_user(
            "[Telegram metadata] decorated prompt",
            &"x".repeat(512 * 1024 + 1),
        ),
        tool_call("call-1"),
        sent("call-1"),
    ])
    .unwrap_err();
    assert_eq!(err, RejectionReason::FieldLimit);
}

#[test]
fn openclaw_settled_turn_projection_upstream_text_counts_against_the_aggregate() {
    let err = project(vec![
        upstream_user("decorated", &"x".repeat(400 * 1024)),
        user(&"x".repeat(60 * 1024)),
        user(&"x".repeat(60 * 1024)),
        tool_call("call-1"),
        sent("call-1"),
    ])
    .unwrap_err();
    assert_eq!(err, RejectionReason::ByteLimit);
}

#[test]
fn openclaw_settled_turn_projection_provenance_does_not_hide_user_images() {
    let mut m = upstream_user("Send the notice.", "Send the notice.");
    m.content.push(ContentBlock::Image {
        mime_type: "image/png".into(),
        data: "aGVsbG8=".into(),
    });
    let err = project(vec![m, tool_call("call-1"), sent("call-1")]).unwrap_err();
    assert_eq!(err, RejectionReason::UnsupportedUserImage);
}

#[test]
fn openclaw_settled_turn_projection_fails_closed_for_broken_pairing() {
    let id = overlength_call_id('1');
    let cases = [
        (
            "orphan result",
            vec![sent("call-1")],
            RejectionReason::InvalidPairing,
        ),
        (
            "missing result",
            vec![tool_call(&id)],
            RejectionReason::IncompletePairing,
        ),
        (
            "duplicate call id",
            vec![tool_call(&id), tool_call(&id), sent(&id)],
            RejectionReason::InvalidPairing,
        ),
        (
            "tool-name mismatch",
            vec![tool_call(&id), tool_result(&id, "different", "done", false)],
            RejectionReason::InvalidPairing,
        ),
    ];
    for (name, messages, expected) in cases {
        assert_eq!(project(messages).unwrap_err(), expected, "{name}");
    }
}

#[test]
fn openclaw_settled_turn_projection_image_results_are_bounded_text_evidence() {
    let mut result = tool_result("call-1", "message", "Generated the requested asset.", false);
    result.content.push(ContentBlock::Image {
        mime_type: "image/png".into(),
        data: "aGVsbG8=".into(),
    });
    let p = project(vec![tool_call("call-1"), result]).unwrap();
    assert_eq!(
        last_output(&p),
        "Generated the requested asset.\n[Image tool result: image/png]"
    );
}

#[test]
fn openclaw_settled_turn_projection_oversized_text_is_rejected_not_truncated() {
    let err = project(vec![
        user(&"x".repeat(64 * 1024 + 1)),
        tool_call("call-1"),
        sent("call-1"),
    ])
    .unwrap_err();
    assert_eq!(err, RejectionReason::FieldLimit);
}

#[test]
fn openclaw_settled_turn_projection_complete_transcript_above_the_aggregate_limit() {
    let mut messages: Vec<AgentMessage> = (0..9).map(|_| user(&"x".repeat(60 * 1024))).collect();
    messages.push(tool_call("call-1"));
    messages.push(sent("call-1"));
    assert_eq!(project(messages).unwrap_err(), RejectionReason::ByteLimit);
}
