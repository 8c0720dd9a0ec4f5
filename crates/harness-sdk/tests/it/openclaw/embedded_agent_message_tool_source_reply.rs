//! `src/agents/embedded-agent-message-tool-source-reply.test.ts`: messaging action predicates,
//! delivery classification of messaging tool results, and message-tool-only source replies.

use serde_json::{Value, json};
use tether_harness_sdk::results::delivery::{
    MessagingPlugins, MessagingToolResult, NoMessagingPlugins, SourceReplyQuery,
    is_delivered_message_tool_only_source_reply, is_delivered_messaging_tool_result,
    is_messaging_tool_delivery_action, is_messaging_tool_send_action,
    is_messaging_tool_target_evidence_action,
};

/// A channel plugin whose edits and deletes are delivery actions.
struct NativeMessaging;

impl MessagingPlugins for NativeMessaging {
    fn is_messaging_tool(&self, tool: &str) -> bool {
        tool == "native-messaging"
    }

    fn is_delivery_action(&self, tool: &str, args: &Value) -> bool {
        tool == "native-messaging"
            && matches!(
                args.get("action").and_then(Value::as_str),
                Some("editMessage" | "deleteMessage")
            )
    }
}

fn action(a: &str) -> Value {
    json!({ "action": a })
}

fn delivered(tool: Option<&str>, args: Option<Value>, result: Value, is_error: bool) -> bool {
    is_delivered_messaging_tool_result(&MessagingToolResult {
        tool_name: tool,
        args: args.as_ref(),
        result: Some(&result),
        is_error,
        ..Default::default()
    })
}

fn result_only(result: Value) -> bool {
    delivered(None, None, result, false)
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_visible_effects_are_broader_than_sends() {
    let p = &NoMessagingPlugins;
    assert!(!is_messaging_tool_send_action(
        "message",
        &action("poll"),
        p
    ));
    for a in [
        "poll",
        "reply",
        "sticker",
        "thread-create",
        "topic-create",
        "threadCreate",
        "createForumTopic",
    ] {
        assert!(
            is_messaging_tool_target_evidence_action("message", &action(a), p),
            "{a}"
        );
    }
    assert!(!is_messaging_tool_target_evidence_action(
        "message",
        &action("edit"),
        p
    ));
    for a in [
        "poll",
        "broadcast",
        "thread-create",
        "topic-create",
        "createForumTopic",
        "channel-create",
        "event-create",
        "react",
    ] {
        assert!(
            is_messaging_tool_delivery_action("message", &action(a), p),
            "{a}"
        );
    }
    for a in ["read", "channel-list"] {
        assert!(
            !is_messaging_tool_delivery_action("message", &action(a), p),
            "{a}"
        );
    }
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_provider_native_mutation_contracts() {
    let p = &NativeMessaging;
    assert!(is_messaging_tool_delivery_action(
        "native-messaging",
        &action("editMessage"),
        p
    ));
    assert!(is_messaging_tool_delivery_action(
        "native-messaging",
        &action("deleteMessage"),
        p
    ));
    assert!(!is_messaging_tool_delivery_action(
        "native-messaging",
        &action("readMessages"),
        p
    ));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_cli_text_block_receipts() {
    assert!(result_only(json!([
        {"type": "text", "text": "{\"result\":{\"messageId\":\"msg-1\"}}"}
    ])));
    assert!(result_only(json!({"content": [{"text": "sent"}]})));
    assert!(result_only(json!({"status": "sent"})));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_bare_success_is_not_delivery() {
    assert!(!result_only(json!({"ok": true, "to": "spaces/AAA"})));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_action_specific_bare_success() {
    assert!(delivered(
        None,
        Some(action("poll")),
        json!({"ok": true}),
        false
    ));
    assert!(delivered(
        None,
        Some(action("sticker")),
        json!([{"type": "text", "text": "{\"ok\":true}"}]),
        false
    ));
    assert!(delivered(
        None,
        Some(action("channel-create")),
        json!({"ok": true}),
        false
    ));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_no_op_mutations() {
    for result in [
        json!({"ok": true, "removed": null}),
        json!({"ok": true, "removed": 0}),
        json!({"ok": true, "removed": []}),
        json!({"ok": true, "changed": false}),
        json!({"content": [{"text": "sent"}], "details": {"sent": false}}),
    ] {
        assert!(
            !delivered(None, Some(action("react")), result.clone(), false),
            "{result}"
        );
    }
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_sessions_send_acknowledgements() {
    // Deliberate difference: this revision of the peer's test counts `sessions_send`
    // acknowledgements as deliveries; the peer's newest classifier (and Tether) never treat
    // session coordination as an external delivery receipt.
    for status in ["accepted", "ok"] {
        assert!(!delivered(
            Some("sessions_send"),
            None,
            json!({ "status": status }),
            false
        ));
    }
    assert!(!delivered(
        Some("message"),
        None,
        json!({"status": "ok"}),
        false
    ));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_sessions_send_post_start_evidence() {
    // Same difference: no `sessions_send` result is a delivery receipt, even with
    // `sentBeforeError`.
    for status in ["timeout", "error"] {
        assert!(!delivered(
            Some("sessions_send"),
            None,
            json!({ "status": status, "sentBeforeError": true }),
            false
        ));
        assert!(!delivered(
            Some("sessions_send"),
            None,
            json!({ "status": status }),
            false
        ));
    }
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_poll_ids() {
    assert!(result_only(json!({"pollId": "poll-1"})));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_thread_and_topic_creation() {
    assert!(delivered(
        None,
        Some(action("thread-create")),
        json!({"ok": true, "thread": {"id": "thread-1"}}),
        false
    ));
    assert!(delivered(
        None,
        Some(action("topic-create")),
        json!({"ok": true, "topicId": 42}),
        false
    ));
    assert!(delivered(
        None,
        Some(action("topic-create")),
        json!({"topicId": 43, "error": "post-create metadata update failed"}),
        true
    ));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_broadcast_needs_concrete_evidence() {
    assert!(delivered(
        Some("message"),
        None,
        json!({"results": [{"ok": true, "messageId": "message-1"}]}),
        false
    ));
    let b = || Some(action("broadcast"));
    assert!(delivered(
        None,
        b(),
        json!({"details": {"payload": {"results": [{
            "channel": "sms", "to": "+15551234567", "ok": true,
            "result": {"messageId": "SM-broadcast", "deliveryStatus": "sent"}
        }]}}}),
        false
    ));
    assert!(delivered(
        None,
        b(),
        json!({"results": [{"channel": "telegram", "to": "chat-1", "ok": true,
            "payload": {"ok": true, "messageId": "gateway-message-1"}}]}),
        false
    ));
    assert!(!delivered(
        None,
        b(),
        json!({"results": [{"channel": "googlechat", "to": "space-1", "ok": true}]}),
        false
    ));
    assert!(delivered(
        None,
        b(),
        json!({"results": [{"channel": "googlechat", "to": "space-1", "ok": true,
            "payload": {"ok": true, "to": "spaces/AAA"}}]}),
        false
    ));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_broadcast_suppression_wrappers() {
    for result in [
        json!({"results": [{"ok": true, "result": {"messageId": "suppressed"}}]}),
        json!({"results": [{"ok": true, "result": {"deliveryStatus": "suppressed"}}]}),
        json!({"results": [{"ok": true, "payload": {"ok": true, "deliveryStatus": "suppressed"}}]}),
        json!({"details": {"payload": {"results": [{"channel": "sms", "ok": true,
            "result": {"dryRun": true, "messageId": "SM-dry-run", "deliveryStatus": "sent"}}]}}}),
    ] {
        assert!(
            !delivered(
                Some("message"),
                Some(action("broadcast")),
                result.clone(),
                false
            ),
            "{result}"
        );
    }
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_partial_broadcast() {
    assert!(delivered(
        None,
        Some(action("broadcast")),
        json!({"results": [{"channel": "telegram", "to": "chat-1", "ok": false, "sentBeforeError": true}]}),
        false
    ));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_message_id_sentinels() {
    assert!(!result_only(json!({"messageId": "skipped"})));
    assert!(!result_only(json!({"messageId": "suppressed"})));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_unknown_message_id() {
    assert!(result_only(json!({"messageId": "unknown"})));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_dry_run_suppressed_errored() {
    assert!(!delivered(
        None,
        Some(json!({"dryRun": true})),
        json!({"result": {"messageId": "msg-1"}}),
        false
    ));
    assert!(!result_only(json!({"status": "suppressed"})));
    assert!(!delivered(
        None,
        None,
        json!({"result": {"messageId": "msg-1"}}),
        true
    ));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_errors_with_partial_delivery() {
    assert!(delivered(
        None,
        None,
        json!({"message": "second chunk failed", "sentBeforeError": true}),
        true
    ));
    assert!(delivered(
        None,
        None,
        json!({"deliveryStatus": "partial_failed"}),
        true
    ));
}

#[test]
fn openclaw_embedded_agent_message_tool_source_reply_only_confirmed_implicit_sends() {
    let query = |args: Value| {
        let result = json!({"deliveryStatus": "sent"});
        is_delivered_message_tool_only_source_reply(&SourceReplyQuery {
            source_reply_delivery_mode: Some("message_tool_only"),
            tool_name: Some("message"),
            args: Some(&args),
            result: Some(&result),
            ..Default::default()
        })
    };
    assert!(query(json!({"action": "send", "message": "reply"})));
    assert!(!query(
        json!({"action": "send", "target": "elsewhere", "message": "reply"})
    ));
}
