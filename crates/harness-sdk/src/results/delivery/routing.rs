//! The send a messaging tool call made, and whether it went to the current source
//! conversation.

use serde_json::{Map, Value};

use super::*;

/// A messaging send reconstructed from a tool call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessagingToolSend {
    /// The tool.
    pub tool: String,
    /// The provider (channel plugin) id.
    pub provider: String,
    /// The account, if any.
    pub account_id: Option<String>,
    /// The target, if any.
    pub to: Option<String>,
    /// The thread, if any (provider-reported thread fields replace pending ones as a unit).
    pub thread_id: Option<String>,
    /// The thread was inherited implicitly.
    pub thread_implicit: bool,
    /// The send was forced to the top level.
    pub thread_suppressed: bool,
}

pub(super) fn record_str(obj: &Map<String, Value>, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| match obj.get(*k) {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

/// Reconstructs the send of a `message` (or channel plugin) tool call from its arguments
/// (`channel`/`provider`, `accountId`, `target`/`to`, `threadId`, `topLevel`), then reconciles
/// it with the result: thread fields the provider reported (`threadId`, `messageThreadId`,
/// `topLevel`, at the top level or under `details`) replace the pending ones as a unit.
/// `None` when no provider is named.
pub fn extract_messaging_tool_send(
    tool_name: &str,
    args: &Value,
    result: Option<&Value>,
) -> Option<MessagingToolSend> {
    let args = args.as_object()?;
    let mut send = MessagingToolSend {
        tool: normalize_tool_name(tool_name),
        provider: record_str(args, &["channel", "provider"])?,
        account_id: record_str(args, &["accountId", "account_id"]),
        to: record_str(args, &["target", "to"]),
        thread_id: record_str(args, &["threadId", "thread_id"]),
        thread_implicit: false,
        thread_suppressed: args.get("topLevel") == Some(&Value::Bool(true)),
    };
    send.thread_implicit = send.thread_id.is_none() && !send.thread_suppressed;
    let reported = result.and_then(|r| {
        [Some(r), r.get("details")]
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .find(|o| {
                o.contains_key("threadId")
                    || o.contains_key("messageThreadId")
                    || o.contains_key("topLevel")
            })
    });
    if let Some(r) = reported {
        send.thread_id = record_str(r, &["threadId", "messageThreadId"]);
        send.thread_suppressed = r.get("topLevel") == Some(&Value::Bool(true));
        send.thread_implicit = false;
    }
    Some(send)
}

/// The current source conversation of the run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CurrentSource {
    /// The provider.
    pub provider: Option<String>,
    /// The account.
    pub account_id: Option<String>,
    /// The channel id.
    pub channel_id: Option<String>,
    /// The messaging target (e.g. `channel:C1`).
    pub messaging_target: Option<String>,
    /// The thread, if the source is threaded.
    pub thread_id: Option<String>,
}

fn norm_target(s: &str) -> String {
    s.trim().to_ascii_lowercase()
}

/// Whether `send` went to the exact current source conversation and `delivered_payload` (the
/// send's result) shows no explicit delivery failure. Use the answer as
/// `allow_explicit_source_route` of [`is_delivered_message_tool_only_source_reply`].
pub fn is_delivered_messaging_tool_send_to_current_source(
    send: &MessagingToolSend,
    current: &CurrentSource,
    delivered_payload: Option<&Value>,
) -> bool {
    let Some(to) = send
        .to
        .as_deref()
        .map(norm_target)
        .filter(|t| !t.is_empty())
    else {
        return false;
    };
    if let Some(payload) = delivered_payload {
        let fact = read_result_delivery_fact(payload)
            .or_else(|| project_plugin_message_delivery_fact(payload));
        if fact.is_some_and(|f| f.status != DeliveryStatus::Settled) || scan(payload).failure {
            return false;
        }
    }
    let Some(provider) = current.provider.as_deref() else {
        return false;
    };
    if !provider.trim().eq_ignore_ascii_case(send.provider.trim()) {
        return false;
    }
    if let (Some(a), Some(b)) = (send.account_id.as_deref(), current.account_id.as_deref())
        && a.trim() != b.trim()
    {
        return false;
    }
    let thread_ok = if send.thread_suppressed {
        current.thread_id.is_none()
    } else {
        match send.thread_id.as_deref() {
            Some(t) => current.thread_id.as_deref().map(str::trim) == Some(t.trim()),
            None => true,
        }
    };
    thread_ok
        && [
            current.channel_id.as_deref(),
            current.messaging_target.as_deref(),
        ]
        .into_iter()
        .flatten()
        .any(|c| norm_target(c) == to)
}
