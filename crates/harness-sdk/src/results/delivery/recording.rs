//! The attempt's delivery bookkeeping for one finished messaging tool call.

use serde_json::{Map, Value};

use super::*;

/// One finished messaging tool call, as the attempt's delivery bookkeeping sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct MessagingToolCall<'a> {
    /// The canonical tool name (`message` when absent).
    pub tool_name: Option<&'a str>,
    /// The executed arguments.
    pub args: Option<&'a Value>,
    /// The original (pre-middleware) result.
    pub result: Option<&'a Value>,
    /// Whether the tool reported an error.
    pub is_error: bool,
    /// The fact snapshotted from the original result, if any.
    pub fact: Option<&'a MessageDeliveryFact>,
    /// Whether [`is_delivered_message_tool_only_source_reply`] confirmed the source reply.
    pub source_reply_delivered: bool,
}

fn string_list(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::String(s)) if !s.trim().is_empty() => vec![s.trim().to_owned()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// Records a confirmed messaging delivery into the attempt's [`DeliveryState`](tether_core::DeliveryState); returns
/// whether the call counted as delivered. Undelivered calls leave the state unchanged.
///
/// Delivered = the fact's rule when a fact exists, else [`is_delivered_messaging_tool_result`].
/// The sent text (`message`/`text`), media (`media`, `mediaUrl`, `mediaUrls`, `path`) and target
/// are recorded; core conversation tools record the target
/// `{tool, provider: "conversation", to: <conversationRef>}`.
pub fn record_messaging_tool_delivery(
    state: &mut tether_core::DeliveryState,
    call: &MessagingToolCall<'_>,
) -> bool {
    let tool = normalize_tool_name(call.tool_name.unwrap_or("message"));
    let delivered = match call.fact {
        Some(f) => f.is_delivered(call.is_error),
        None => is_delivered_messaging_tool_result(&MessagingToolResult {
            tool_name: Some(&tool),
            args: call.args,
            result: call.result,
            is_error: call.is_error,
            ..MessagingToolResult::default()
        }),
    };
    if !delivered {
        return false;
    }
    state.did_send_via_messaging_tool = true;
    let empty = Map::new();
    let args = call.args.and_then(Value::as_object).unwrap_or(&empty);
    if let Some(text) = record_str(args, &["message", "text"]) {
        state.messaging_tool_sent_texts.push(text);
    }
    for key in ["media", "mediaUrl", "mediaUrls", "path"] {
        for url in string_list(args.get(key)) {
            if !state.messaging_tool_sent_media_urls.contains(&url) {
                state.messaging_tool_sent_media_urls.push(url);
            }
        }
    }
    let target = if tool.starts_with("conversations_") {
        record_str(args, &["conversationRef", "conversation", "to"])
            .map(|to| serde_json::json!({"tool": tool, "provider": "conversation", "to": to}))
    } else {
        call.args
            .and_then(|a| extract_messaging_tool_send(&tool, a, call.result))
            .map(|send| {
                let mut t = Map::new();
                t.insert("tool".into(), Value::String(send.tool));
                t.insert("provider".into(), Value::String(send.provider));
                if let Some(to) = send.to {
                    t.insert("to".into(), Value::String(to));
                }
                if let Some(account) = send.account_id {
                    t.insert("accountId".into(), Value::String(account));
                }
                if let Some(thread) = send.thread_id {
                    t.insert("threadId".into(), Value::String(thread));
                }
                Value::Object(t)
            })
    };
    if let Some(t) = target {
        state.messaging_tool_sent_targets.push(t);
    }
    if call.source_reply_delivered {
        state.did_deliver_source_reply_via_message_tool = true;
    }
    if let Some(payload) = call
        .result
        .and_then(extract_messaging_tool_source_reply_payload)
    {
        state
            .messaging_tool_source_reply_payloads
            .push(payload.to_json());
    }
    true
}
