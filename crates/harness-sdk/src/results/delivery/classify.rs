//! Whether a messaging tool result is a delivery: sends, broadcast receipts and the core
//! conversation results.

use serde_json::Value;

use super::*;

/// The inputs of [`is_delivered_messaging_tool_result`].
#[derive(Debug, Clone, Copy, Default)]
pub struct MessagingToolResult<'a> {
    /// The canonical tool name (`message` when absent).
    pub tool_name: Option<&'a str>,
    /// The executed arguments.
    pub args: Option<&'a Value>,
    /// The original (pre-middleware) result.
    pub result: Option<&'a Value>,
    /// The result after `after_tool_call` hooks, if different.
    pub hook_result: Option<&'a Value>,
    /// Whether the tool reported an error.
    pub is_error: bool,
    /// Require a platform delivery id (`messageId`, `pollId`, `message.id`) for plugin tools.
    pub require_plugin_delivery_id: bool,
    /// Channel plugin ids that expose messaging actions (besides `message`).
    pub plugin_messaging_tools: &'a [&'a str],
}

pub(super) const READ_ONLY_MESSAGE_ACTIONS: &[&str] = &[
    "read",
    "reactions",
    "list-pins",
    "permissions",
    "thread-list",
    "search",
    "sticker-search",
    "member-info",
    "role-info",
    "emoji-list",
    "channel-info",
    "channel-list",
    "voice-status",
    "event-list",
    "download-file",
];

pub(super) const CONVERSATION_CREATE_ACTIONS: &[&str] = &[
    "thread-create",
    "topic-create",
    "threadcreate",
    "createforumtopic",
];

pub(super) fn normalize_tool_name(name: &str) -> String {
    name.trim().to_ascii_lowercase()
}

pub(super) fn action_of(args: Option<&Value>) -> Option<String> {
    args?
        .get("action")?
        .as_str()
        .map(|a| a.trim().to_ascii_lowercase())
        .filter(|a| !a.is_empty())
}

fn details_status(result: Option<&Value>) -> Option<String> {
    result?
        .get("details")?
        .get("status")?
        .as_str()
        .map(|s| s.trim().to_ascii_lowercase())
}

fn is_tool_result_error(value: Option<&Value>) -> bool {
    value.is_some_and(|v| v.get("isError") == Some(&Value::Bool(true)))
}

/// Whether a messaging tool's result confirms a delivery. Use it only when no
/// [`MessageDeliveryFact`] exists.
///
/// Core conversation tools decide by `details.status` alone (`conversations_send`: `sent`;
/// `conversations_turn`: `sent`, `replied`, `timeout`; `queued`, `suppressed` and `unknown` never
/// confirm, even with a message id). Other tools count only when they are plugin-native
/// messaging tools; then dry runs never count, partial delivery always counts, errors outrank
/// message ids, and no-ops or suppressions never count.
pub fn is_delivered_messaging_tool_result(q: &MessagingToolResult<'_>) -> bool {
    if q.args.and_then(|a| a.get("dryRun")) == Some(&Value::Bool(true)) {
        return false;
    }
    let tool = normalize_tool_name(q.tool_name.unwrap_or("message"));
    match tool.as_str() {
        "conversations_send" => return details_status(q.result).as_deref() == Some("sent"),
        "conversations_turn" => {
            return matches!(
                details_status(q.result).as_deref(),
                Some("sent" | "replied" | "timeout")
            );
        }
        _ => {}
    }
    let plugin_native = tool == "message"
        || q.plugin_messaging_tools
            .iter()
            .any(|t| normalize_tool_name(t) == tool);
    if !plugin_native {
        return false;
    }
    let result_signals = q.result.map(scan).unwrap_or_default();
    let hook_signals = q.hook_result.map(scan).unwrap_or_default();
    let any = |f: fn(&Signals) -> bool| f(&result_signals) || f(&hook_signals);
    if any(|s| s.dry_run) {
        return false;
    }
    if q.require_plugin_delivery_id && !any(|s| s.delivery_id.is_some()) {
        return false;
    }
    if any(|s| s.partial) {
        return true;
    }
    let action = action_of(q.args);
    let action = action.as_deref();
    if action.is_some_and(|a| CONVERSATION_CREATE_ACTIONS.contains(&a)) && any(|s| s.conversation) {
        return true;
    }
    if action == Some("broadcast")
        && [q.result, q.hook_result]
            .into_iter()
            .flatten()
            .any(broadcast_delivered)
    {
        return true;
    }
    if q.is_error
        || is_tool_result_error(q.result)
        || is_tool_result_error(q.hook_result)
        || any(|s| s.failure)
    {
        return false;
    }
    let blocked = any(|s| s.non_delivery) || any(|s| s.no_op);
    if blocked {
        return false;
    }
    let delivery_action =
        action.is_some_and(|a| a != "broadcast" && !READ_ONLY_MESSAGE_ACTIONS.contains(&a));
    if delivery_action && any(|s| s.ok) {
        return true;
    }
    any(|s| s.delivery)
}

/// Where a broadcast envelope keeps its per-target `results`: at the top, or under `details`,
/// `payload` or `details.payload` (the Gateway wraps the channel receipts).
const BROADCAST_RESULT_PATHS: &[&[&str]] = &[
    &["results"],
    &["details", "results"],
    &["payload", "results"],
    &["details", "payload", "results"],
];

/// Whether a receipt states a concrete delivery (`deliveryStatus` or `status` of `sent` or
/// `delivered`).
fn concrete_delivery_status(receipt: &Value) -> bool {
    matches!(
        receipt.as_object().and_then(normalized_status).as_deref(),
        Some("sent" | "delivered")
    )
}

/// A broadcast delivered when some per-target entry is not a failure, carries no
/// non-delivery signal, and has a receipt (`payload`, `toolResult` or `result`) that projects
/// to a settled delivery; the entry must say `ok: true` unless the receipt itself states a
/// concrete delivery status.
fn broadcast_delivered(envelope: &Value) -> bool {
    BROADCAST_RESULT_PATHS
        .iter()
        .filter_map(|path| {
            path.iter()
                .try_fold(envelope, |node, key| node.get(*key))
                .and_then(Value::as_array)
        })
        .flatten()
        .any(|entry| {
            let ok = entry.get("ok");
            ok != Some(&Value::Bool(false))
                && !scan(entry).non_delivery
                && ["payload", "toolResult", "result"].iter().any(|k| {
                    entry.get(*k).is_some_and(|receipt| {
                        (ok == Some(&Value::Bool(true)) || concrete_delivery_status(receipt))
                            && project_plugin_message_delivery_fact(receipt)
                                .is_some_and(|f| f.status == DeliveryStatus::Settled)
                    })
                })
        })
}

/// The verdict on a core conversation tool result (`conversations_send`, `conversations_turn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreConversationOutcome {
    /// The message reached the conversation.
    pub delivered: bool,
    /// The tool call itself counts as failed (a reply `timeout`, or any `error` field).
    pub tool_failed: bool,
}

/// Classifies a core conversation tool result by its Gateway receipt (`result.details`).
/// `None` for any other tool.
pub fn classify_core_conversation_result(
    tool_name: &str,
    result: &Value,
) -> Option<CoreConversationOutcome> {
    let tool = normalize_tool_name(tool_name);
    if tool != "conversations_send" && tool != "conversations_turn" {
        return None;
    }
    let delivered = is_delivered_messaging_tool_result(&MessagingToolResult {
        tool_name: Some(&tool),
        result: Some(result),
        ..MessagingToolResult::default()
    });
    let details = result.get("details");
    let status = details_status(Some(result));
    let tool_failed = details.and_then(|d| d.get("error")).is_some_and(is_truthy)
        || status.as_deref() == Some("timeout");
    Some(CoreConversationOutcome {
        delivered,
        tool_failed,
    })
}
