//! Part C: message-delivery facts (vectors 40–74).

use serde_json::{Value, json};
use tether_core::DeliveryState;
use tether_harness_sdk::results::delivery::{
    CurrentSource, DeliveryStatus, MessageDeliveryFact, MessagingToolCall, MessagingToolResult,
    MessagingToolSend, SourceReplyQuery, attach_message_delivery_fact,
    classify_core_conversation_result, extract_messaging_tool_send,
    extract_messaging_tool_source_reply_payload, is_delivered_message_tool_only_source_reply,
    is_delivered_messaging_tool_result, is_delivered_messaging_tool_send_to_current_source,
    middleware_failure_fallback, project_plugin_message_delivery_fact, read_message_delivery_fact,
    read_result_delivery_fact, record_messaging_tool_delivery,
};

fn read(v: Value) -> Option<MessageDeliveryFact> {
    read_message_delivery_fact(&v)
}

fn project(v: Value) -> Option<MessageDeliveryFact> {
    project_plugin_message_delivery_fact(&v)
}

fn status(v: Value) -> Option<DeliveryStatus> {
    project(v).map(|f| f.status())
}

fn delivered(result: Value) -> bool {
    is_delivered_messaging_tool_result(&MessagingToolResult {
        result: Some(&result),
        ..Default::default()
    })
}

fn delivered_with(args: Value, result: Value) -> bool {
    is_delivered_messaging_tool_result(&MessagingToolResult {
        args: Some(&args),
        result: Some(&result),
        ..Default::default()
    })
}

#[test]
fn tool_results_040_strict_reader_minimal_settled() {
    let f = read(json!({"status": "settled", "partialDelivery": false, "createdThreadIds": []}))
        .expect("fact");
    assert_eq!(f.status(), DeliveryStatus::Settled);
    assert!(!f.partial_delivery());
    assert!(f.created_thread_ids().is_empty());
    assert_eq!(f.primary_platform_message_id(), None);
    assert!(!f.source_reply_delivered());
}

#[test]
fn tool_results_041_source_reply_delivered_only_on_complete_settled() {
    let base = json!({"status": "settled", "partialDelivery": false, "createdThreadIds": [], "sourceReplyDelivered": true});
    assert!(read(base.clone()).expect("fact").source_reply_delivered());
    let mut partial = base.clone();
    partial["partialDelivery"] = json!(true);
    assert!(!read(partial).expect("fact").source_reply_delivered());
    let mut suppressed = base;
    suppressed["status"] = json!("suppressed");
    assert!(!read(suppressed).expect("fact").source_reply_delivered());
}

#[test]
fn tool_results_042_unknown_or_miscased_status_rejected() {
    assert!(
        read(json!({"status": "sent", "partialDelivery": false, "createdThreadIds": []})).is_none()
    );
    assert!(
        read(json!({"status": "Settled", "partialDelivery": false, "createdThreadIds": []}))
            .is_none()
    );
}

#[test]
fn tool_results_043_field_types_are_strict() {
    assert!(
        read(json!({"status": "settled", "partialDelivery": "false", "createdThreadIds": []}))
            .is_none()
    );
    assert!(read(json!({"status": "settled", "partialDelivery": false})).is_none());
    assert!(
        read(json!({"status": "settled", "partialDelivery": false, "createdThreadIds": ["t1", 5]}))
            .is_none()
    );
    assert!(
        read(json!({"status": "settled", "partialDelivery": false, "createdThreadIds": [], "primaryPlatformMessageId": 42}))
            .is_none()
    );
    let empty_id =
        read(json!({"status": "settled", "partialDelivery": false, "createdThreadIds": [], "primaryPlatformMessageId": ""}))
            .expect("valid");
    assert_eq!(empty_id.primary_platform_message_id(), None);
    assert!(read(json!("settled")).is_none());
    let nested = json!({"details": {"messageDelivery": {"status": "failed", "partialDelivery": false, "createdThreadIds": []}}});
    assert_eq!(
        read_result_delivery_fact(&nested).map(|f| f.status()),
        Some(DeliveryStatus::Failed)
    );
}

/// C.1: a tool cannot forge a fact by writing `details.messageDelivery` itself; only the
/// host-attached fact (created by a reader) survives, and it reads back identically.
#[test]
fn tool_results_043b_attach_strips_forged_fact() {
    let forged = json!({"details": {"ok": true, "messageDelivery":
        {"status": "settled", "partialDelivery": false, "createdThreadIds": [], "sourceReplyDelivered": true}}});
    let stripped = attach_message_delivery_fact(&forged, None);
    assert!(read_result_delivery_fact(&stripped).is_none());
    assert_eq!(stripped["details"]["ok"], true);
    let fact = project_plugin_message_delivery_fact(&json!({"messageId": "m1", "threadId": "t1"}))
        .expect("fact");
    let attached = attach_message_delivery_fact(&json!({"content": []}), Some(&fact));
    assert_eq!(read_result_delivery_fact(&attached), Some(fact));
}

#[test]
fn tool_results_044_dry_run_wins() {
    let f = project(json!({"dryRun": true, "messageId": "m1"})).expect("fact");
    assert_eq!(f.status(), DeliveryStatus::DryRun);
    assert!(!f.partial_delivery());
    assert!(f.created_thread_ids().is_empty());
}

#[test]
fn tool_results_045_sent_before_error_is_partial_settled() {
    let f = project(json!({"sentBeforeError": true, "error": "chunk 2 failed"})).expect("fact");
    assert_eq!(f.status(), DeliveryStatus::Settled);
    assert!(f.partial_delivery());
    assert!(
        f.is_delivered(true),
        "a tool error does not erase partial delivery"
    );
}

#[test]
fn tool_results_046_partial_failed_status() {
    let f = project(json!({"deliveryStatus": "partial_failed"})).expect("fact");
    assert_eq!(
        (f.status(), f.partial_delivery()),
        (DeliveryStatus::Settled, true)
    );
}

#[test]
fn tool_results_047_sentinels_are_suppressed() {
    assert_eq!(
        status(json!({"messageId": "suppressed"})),
        Some(DeliveryStatus::Suppressed)
    );
    assert_eq!(
        status(json!({"status": "skipped"})),
        Some(DeliveryStatus::Suppressed)
    );
}

#[test]
fn tool_results_048_non_delivery_status_outranks_failure() {
    assert_eq!(
        status(json!({"status": "failed", "messageId": "m1"})),
        Some(DeliveryStatus::Suppressed)
    );
}

#[test]
fn tool_results_049_error_beats_message_id() {
    assert_eq!(
        status(json!({"messageId": "m1", "error": "boom"})),
        Some(DeliveryStatus::Failed)
    );
}

#[test]
fn tool_results_050_no_op_is_failed() {
    assert_eq!(
        status(json!({"ok": true, "removed": 0})),
        Some(DeliveryStatus::Failed)
    );
}

#[test]
fn tool_results_051_identity_and_threads() {
    let f = project(json!({"messageId": "m1", "threadId": 99})).expect("fact");
    assert_eq!(f.status(), DeliveryStatus::Settled);
    assert_eq!(f.primary_platform_message_id(), Some("m1"));
    assert_eq!(f.created_thread_ids(), ["99".to_owned()]);
    assert!(!f.partial_delivery());
}

#[test]
fn tool_results_052_json_text_content() {
    let f = project(json!({"content": [{"type": "text", "text": "{\"messageId\":\"m2\"}"}]}))
        .expect("fact");
    assert_eq!(f.status(), DeliveryStatus::Settled);
    assert_eq!(f.primary_platform_message_id(), Some("m2"));
}

fn wrap(n: usize) -> Value {
    let mut v = json!({"messageId": "x"});
    for _ in 0..n {
        v = json!({"result": v});
    }
    v
}

#[test]
fn tool_results_053_envelope_depth_cap_four() {
    assert!(project(wrap(5)).is_none());
    assert_eq!(
        project(wrap(4)).map(|f| f.status()),
        Some(DeliveryStatus::Settled)
    );
}

#[test]
fn tool_results_054_empty_ok_and_text_sent() {
    assert!(project(json!({})).is_none());
    let ok = project(json!({"ok": true})).expect("fact");
    assert_eq!(
        (ok.status(), ok.primary_platform_message_id()),
        (DeliveryStatus::Settled, None)
    );
    assert_eq!(
        status(json!({"text": "SENT"})),
        Some(DeliveryStatus::Settled)
    );
}

#[test]
fn tool_results_055_nested_receipts_deliver() {
    assert!(delivered(
        json!([{"type": "text", "text": "{\"result\":{\"messageId\":\"msg-1\"}}"}])
    ));
    assert!(delivered(json!({"content": [{"text": "sent"}]})));
    assert!(delivered(json!({"status": "sent"})));
}

#[test]
fn tool_results_056_bare_ok_is_not_delivery() {
    assert!(!delivered(json!({"ok": true, "to": "spaces/AAA"})));
}

#[test]
fn tool_results_057_delivery_actions_with_ok() {
    assert!(delivered_with(
        json!({"action": "poll"}),
        json!({"ok": true})
    ));
    assert!(delivered_with(
        json!({"action": "sticker"}),
        json!([{"type": "text", "text": "{\"ok\":true}"}])
    ));
    assert!(delivered_with(
        json!({"action": "channel-create"}),
        json!({"ok": true})
    ));
    assert!(
        !delivered_with(json!({"action": "read"}), json!({"ok": true})),
        "read-only action"
    );
}

#[test]
fn tool_results_058_no_ops_never_deliver() {
    for result in [
        json!({"ok": true, "removed": null}),
        json!({"ok": true, "removed": 0}),
        json!({"ok": true, "removed": []}),
        json!({"ok": true, "changed": false}),
        json!({"content": [{"text": "sent"}], "details": {"sent": false}}),
    ] {
        assert!(
            !delivered_with(json!({"action": "react"}), result.clone()),
            "{result}"
        );
    }
}

#[test]
fn tool_results_059_poll_id_delivers() {
    assert!(delivered(json!({"pollId": "poll-1"})));
}

#[test]
fn tool_results_060_conversation_create_outranks_error() {
    assert!(delivered_with(
        json!({"action": "thread-create"}),
        json!({"ok": true, "thread": {"id": "thread-1"}})
    ));
    let args = json!({"action": "topic-create"});
    let result = json!({"topicId": 43, "error": "post-create metadata update failed"});
    assert!(is_delivered_messaging_tool_result(&MessagingToolResult {
        args: Some(&args),
        result: Some(&result),
        is_error: true,
        ..Default::default()
    }));
}

#[test]
fn tool_results_061_broadcast_results() {
    let r = json!({"results": [{"ok": true, "messageId": "message-1"}]});
    assert!(is_delivered_messaging_tool_result(&MessagingToolResult {
        tool_name: Some("message"),
        result: Some(&r),
        ..Default::default()
    }));
    let b = json!({"action": "broadcast"});
    assert!(delivered_with(
        b.clone(),
        json!({"results": [{"channel": "telegram", "to": "chat-1", "ok": true, "payload": {"ok": true, "messageId": "gateway-message-1"}}]})
    ));
    assert!(!delivered_with(
        b.clone(),
        json!({"results": [{"channel": "googlechat", "to": "space-1", "ok": true}]})
    ));
    assert!(delivered_with(
        b,
        json!({"results": [{"channel": "googlechat", "to": "space-1", "ok": true, "payload": {"ok": true, "to": "spaces/AAA"}}]})
    ));
}

#[test]
fn tool_results_062_broadcast_suppression_wrappers() {
    let b = json!({"action": "broadcast"});
    for result in [
        json!({"results": [{"ok": true, "result": {"messageId": "suppressed"}}]}),
        json!({"results": [{"ok": true, "result": {"deliveryStatus": "suppressed"}}]}),
        json!({"results": [{"ok": true, "payload": {"ok": true, "deliveryStatus": "suppressed"}}]}),
    ] {
        assert!(!delivered_with(b.clone(), result.clone()), "{result}");
    }
}

#[test]
fn tool_results_063_broadcast_partial_delivers() {
    assert!(delivered_with(
        json!({"action": "broadcast"}),
        json!({"results": [{"ok": false, "sentBeforeError": true}]})
    ));
}

#[test]
fn tool_results_064_sentinel_ids() {
    assert!(!delivered(json!({"messageId": "skipped"})));
    assert!(!delivered(json!({"messageId": "suppressed"})));
    assert!(delivered(json!({"messageId": "unknown"})));
}

#[test]
fn tool_results_065_dry_run_suppressed_and_errors() {
    assert!(!delivered_with(
        json!({"dryRun": true}),
        json!({"result": {"messageId": "msg-1"}})
    ));
    assert!(!delivered(json!({"status": "suppressed"})));
    let r = json!({"result": {"messageId": "msg-1"}});
    assert!(!is_delivered_messaging_tool_result(&MessagingToolResult {
        result: Some(&r),
        is_error: true,
        ..Default::default()
    }));
}

#[test]
fn tool_results_066_errors_with_partial_delivery() {
    // A thrown `Error("second chunk failed")` with `sentBeforeError = true`, as its JSON projection.
    let thrown =
        json!({"name": "Error", "message": "second chunk failed", "sentBeforeError": true});
    let partial = json!({"deliveryStatus": "partial_failed"});
    for result in [thrown, partial] {
        assert!(is_delivered_messaging_tool_result(&MessagingToolResult {
            result: Some(&result),
            is_error: true,
            ..Default::default()
        }));
    }
}

#[test]
fn tool_results_067_nested_message_id() {
    let args = json!({"action": "send", "channel": "qa-channel", "target": "qa-a2a-requester", "message": "reply"});
    let result = json!({"content": [{"type": "text", "text": "{\"message\":{\"id\":\"qa-message-242\"}}"}],
        "details": {"message": {"id": "qa-message-242"}}});
    assert!(is_delivered_messaging_tool_result(&MessagingToolResult {
        tool_name: Some("message"),
        args: Some(&args),
        result: Some(&result),
        ..Default::default()
    }));
}

#[test]
fn tool_results_068_require_plugin_delivery_id() {
    let q = |tool: Option<&'static str>, args: Option<Value>, result: Value| {
        is_delivered_messaging_tool_result(&MessagingToolResult {
            tool_name: tool,
            args: args.as_ref(),
            result: Some(&result),
            require_plugin_delivery_id: true,
            ..Default::default()
        })
    };
    assert!(!q(
        None,
        Some(json!({"action": "poll"})),
        json!({"ok": true})
    ));
    assert!(!q(None, None, json!({"status": "sent"})));
    assert!(q(None, None, json!({"messageId": "m1"})));
    assert!(q(
        Some("conversations_send"),
        None,
        json!({"details": {"status": "sent"}})
    ));
}

#[test]
fn tool_results_069_core_conversation_tools() {
    let c = |tool: &str, details: Value| {
        classify_core_conversation_result(tool, &json!({"details": details})).expect("core tool")
    };
    let sent = c("conversations_send", json!({"status": "sent"}));
    assert!(sent.delivered && !sent.tool_failed);
    let sent_id = c(
        "conversations_send",
        json!({"status": "sent", "messageId": "outbound-1"}),
    );
    assert!(sent_id.delivered && !sent_id.tool_failed);
    for s in ["queued", "suppressed", "unknown"] {
        let o = c(
            "conversations_send",
            json!({"status": s, "messageId": "outbound-1"}),
        );
        assert!(!o.delivered && !o.tool_failed, "{s}");
        let e = c("conversations_turn", json!({"status": s, "error": "boom"}));
        assert!(!e.delivered && e.tool_failed, "{s}");
    }
    let replied = c("conversations_turn", json!({"status": "replied"}));
    assert!(replied.delivered && !replied.tool_failed);
    let timeout = c(
        "conversations_turn",
        json!({"status": "timeout", "correlationPersisted": true}),
    );
    assert!(timeout.delivered && timeout.tool_failed);
    let waiter = c(
        "conversations_turn",
        json!({"status": "sent", "error": "No process-local reply waiter remains."}),
    );
    assert!(waiter.delivered && waiter.tool_failed);
    assert!(classify_core_conversation_result("message", &json!({})).is_none());
}

/// Vector 69, telemetry clause: a delivered core conversation send records the sent text and the
/// target `{tool, provider: "conversation", to}`; an undelivered one records nothing.
#[test]
fn tool_results_069b_delivery_state_bookkeeping() {
    let mut state = DeliveryState::default();
    let args = json!({"conversationRef": "conv-7", "message": "hello there"});
    let sent = json!({"details": {"status": "sent"}});
    assert!(record_messaging_tool_delivery(
        &mut state,
        &MessagingToolCall {
            tool_name: Some("conversations_send"),
            args: Some(&args),
            result: Some(&sent),
            ..Default::default()
        }
    ));
    assert!(state.did_send_via_messaging_tool);
    assert_eq!(
        state.messaging_tool_sent_texts,
        vec!["hello there".to_owned()]
    );
    assert_eq!(
        state.messaging_tool_sent_targets,
        vec![json!({"tool": "conversations_send", "provider": "conversation", "to": "conv-7"})]
    );
    let queued = json!({"details": {"status": "queued", "messageId": "outbound-1"}});
    let mut untouched = DeliveryState::default();
    assert!(!record_messaging_tool_delivery(
        &mut untouched,
        &MessagingToolCall {
            tool_name: Some("conversations_send"),
            args: Some(&args),
            result: Some(&queued),
            ..Default::default()
        }
    ));
    assert_eq!(untouched, DeliveryState::default());
    // A message-tool send with a source reply to the internal UI sink.
    let args = json!({"action": "send", "channel": "telegram", "target": "chat-1", "message": "hi", "media": "/scratch/a.png"});
    let result = json!({"messageId": "m1", "details": {"sourceReplySink": "internal-ui", "message": "hi",
        "sourceReplyTranscriptOwner": true}});
    let mut state = DeliveryState::default();
    assert!(record_messaging_tool_delivery(
        &mut state,
        &MessagingToolCall {
            args: Some(&args),
            result: Some(&result),
            source_reply_delivered: true,
            ..Default::default()
        }
    ));
    assert!(state.did_deliver_source_reply_via_message_tool);
    assert_eq!(
        state.messaging_tool_sent_media_urls,
        vec!["/scratch/a.png".to_owned()]
    );
    assert_eq!(
        state.messaging_tool_sent_targets,
        vec![json!({"tool": "message", "provider": "telegram", "to": "chat-1"})]
    );
    assert_eq!(
        state.messaging_tool_source_reply_payloads,
        vec![json!({"text": "hi", "transcriptOwner": true})]
    );
    // A suppressed fact outranks the legacy envelope.
    let fact =
        project_plugin_message_delivery_fact(&json!({"status": "suppressed"})).expect("fact");
    let mut state = DeliveryState::default();
    assert!(!record_messaging_tool_delivery(
        &mut state,
        &MessagingToolCall {
            args: Some(&args),
            result: Some(&result),
            fact: Some(&fact),
            ..Default::default()
        }
    ));
}

#[test]
fn tool_results_070_sessions_send_is_not_a_receipt() {
    let r = json!({"status": "accepted"});
    assert!(!is_delivered_messaging_tool_result(&MessagingToolResult {
        tool_name: Some("sessions_send"),
        result: Some(&r),
        ..Default::default()
    }));
}

fn source_reply(mode: Option<&str>, args: Value, result: Value, allow: bool) -> bool {
    is_delivered_message_tool_only_source_reply(&SourceReplyQuery {
        source_reply_delivery_mode: mode,
        tool_name: Some("message"),
        args: Some(&args),
        result: Some(&result),
        allow_explicit_source_route: allow,
        ..Default::default()
    })
}

#[test]
fn tool_results_071_message_tool_only_send() {
    let mode = Some("message_tool_only");
    assert!(source_reply(
        mode,
        json!({"action": "send", "message": "reply"}),
        json!({"deliveryStatus": "sent"}),
        false
    ));
    assert!(!source_reply(
        mode,
        json!({"action": "send", "message": "reply", "target": "elsewhere"}),
        json!({"deliveryStatus": "sent"}),
        false
    ));
}

#[test]
fn tool_results_072_explicit_route_needs_proven_source() {
    let mode = Some("message_tool_only");
    let args = json!({"action": "reply", "channel": "imessage", "target": "+12069106512"});
    let result = json!({"ok": true, "messageId": "imessage-853"});
    assert!(!source_reply(mode, args.clone(), result.clone(), false));
    assert!(source_reply(mode, args, result.clone(), true));
    let react = json!({"action": "react", "channel": "imessage", "target": "+12069106512"});
    assert!(!source_reply(mode, react, result, true));
    // The route proof itself: the send went to the current source conversation.
    let send = MessagingToolSend {
        tool: "message".into(),
        provider: "imessage".into(),
        to: Some("+12069106512".into()),
        ..Default::default()
    };
    let current = CurrentSource {
        provider: Some("imessage".into()),
        messaging_target: Some("+12069106512".into()),
        ..Default::default()
    };
    assert!(is_delivered_messaging_tool_send_to_current_source(
        &send, &current, None
    ));
    let failed = json!({"ok": false, "error": "boom"});
    assert!(!is_delivered_messaging_tool_send_to_current_source(
        &send,
        &current,
        Some(&failed)
    ));
    let elsewhere = MessagingToolSend {
        to: Some("+1999".into()),
        ..send.clone()
    };
    assert!(!is_delivered_messaging_tool_send_to_current_source(
        &elsewhere, &current, None
    ));
    let threaded = MessagingToolSend {
        thread_id: Some("t1".into()),
        ..send
    };
    assert!(!is_delivered_messaging_tool_send_to_current_source(
        &threaded, &current, None
    ));
}

/// C.6: the send is reconstructed from the call, provider-reported thread fields replace the
/// pending ones as a unit, and only the exact current conversation counts.
#[test]
fn tool_results_072b_send_reconstruction_and_thread_placement() {
    let args =
        json!({"action": "send", "channel": "telegram", "target": "chat-1", "message": "hi"});
    let send = extract_messaging_tool_send("message", &args, None).expect("send");
    assert_eq!(send.provider, "telegram");
    assert_eq!(send.to.as_deref(), Some("chat-1"));
    assert!(send.thread_implicit && send.thread_id.is_none());
    let in_thread = CurrentSource {
        provider: Some("telegram".into()),
        channel_id: Some("chat-1".into()),
        thread_id: Some("77".into()),
        ..Default::default()
    };
    assert!(
        is_delivered_messaging_tool_send_to_current_source(&send, &in_thread, None),
        "implicit thread"
    );
    let reported = extract_messaging_tool_send(
        "message",
        &args,
        Some(&json!({"details": {"topLevel": true}})),
    )
    .expect("send");
    assert!(reported.thread_suppressed && !reported.thread_implicit);
    assert!(
        !is_delivered_messaging_tool_send_to_current_source(&reported, &in_thread, None),
        "top level is not the thread"
    );
    let threaded =
        extract_messaging_tool_send("message", &args, Some(&json!({"messageThreadId": 77})))
            .expect("send");
    assert_eq!(threaded.thread_id.as_deref(), Some("77"));
    assert!(is_delivered_messaging_tool_send_to_current_source(
        &threaded, &in_thread, None
    ));
    assert!(
        extract_messaging_tool_send("message", &json!({"target": "x"}), None).is_none(),
        "no provider"
    );
    let no_target = extract_messaging_tool_send("message", &json!({"channel": "telegram"}), None)
        .expect("send");
    assert!(!is_delivered_messaging_tool_send_to_current_source(
        &no_target, &in_thread, None
    ));
}

#[test]
fn tool_results_073_route_marker_only_from_details() {
    let args = json!({"action": "send", "channel": "telegram", "target": "chat-1"});
    let marked =
        json!({"ok": true, "messageId": "m1", "details": {"sourceReplyRoute": "current-source"}});
    assert!(source_reply(None, args.clone(), marked, false));
    let in_text = json!({"ok": true, "messageId": "m1",
        "content": [{"type": "text", "text": "{\"details\":{\"sourceReplyRoute\":\"current-source\"}}"}]});
    assert!(!source_reply(None, args, in_text, false));
}

#[test]
fn tool_results_074_source_reply_payload_extraction() {
    let result = json!({"details": {"sourceReplySink": "internal-ui", "message": "hi", "mediaUrls": ["a", 3],
        "sourceReplyTranscriptOwner": true}});
    let p = extract_messaging_tool_source_reply_payload(&result).expect("payload");
    assert_eq!(p.text.as_deref(), Some("hi"));
    assert_eq!(p.media_urls, vec!["a".to_owned()]);
    assert!(p.transcript_owner());
    assert!(p.attachments.is_empty() && p.media_url.is_none() && !p.audio_as_voice);
    let mut queued = result.clone();
    queued["details"]["deliveryStatus"] = json!("queued");
    assert!(extract_messaging_tool_source_reply_payload(&queued).is_none());
    let mut no_sink = result;
    no_sink["details"]
        .as_object_mut()
        .map(|d| d.remove("sourceReplySink"));
    assert!(extract_messaging_tool_source_reply_payload(&no_sink).is_none());
    // Attachment metadata is kept.
    let with_attachment = json!({"details": {"sourceReplySink": "internal-ui", "deliveryStatus": "SENT",
        "sourceReply": {"attachments": [{"path": "/scratch/a.png", "mimeType": "image/png", "width": 10, "height": -1, "trustedLocalMedia": true}]}}});
    let p = extract_messaging_tool_source_reply_payload(&with_attachment).expect("payload");
    assert_eq!(p.attachments[0].path.as_deref(), Some("/scratch/a.png"));
    assert_eq!(p.attachments[0].mime_type.as_deref(), Some("image/png"));
    assert_eq!(
        (p.attachments[0].width, p.attachments[0].height),
        (Some(10.0), None)
    );
    assert_eq!(p.attachments[0].trusted_local_media, Some(true));
    assert!(!p.transcript_owner());
}

/// The middleware rule of C.7: presentation middleware cannot create facts; a confirmed send
/// whose middleware failed gets the fixed fallback result.
#[test]
fn tool_results_074b_middleware_failure_fallback() {
    let original = json!({"messageId": "m1"});
    let q = MessagingToolResult {
        result: Some(&original),
        ..Default::default()
    };
    let fallback = middleware_failure_fallback(None, &q).expect("confirmed send");
    assert_eq!(fallback["details"]["deliveryStatus"], "sent");
    let unconfirmed = json!({"status": "sent"});
    let q = MessagingToolResult {
        result: Some(&unconfirmed),
        ..Default::default()
    };
    assert!(
        middleware_failure_fallback(None, &q).is_none(),
        "no platform id"
    );
    let fact = project_plugin_message_delivery_fact(&json!({"status": "skipped"})).expect("fact");
    assert!(middleware_failure_fallback(Some(&fact), &q).is_none());
}
