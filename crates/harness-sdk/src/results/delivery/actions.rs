//! Which tools are messaging tools and which of their actions send, give target evidence or
//! deliver — core actions and the ones channel plugins declare.

use serde_json::Value;

use super::*;

/// What the host knows about channel plugins that expose messaging tools (the plugin side of
/// the messaging action predicates). Every method defaults to "nothing".
pub trait MessagingPlugins {
    /// Whether `tool` is a channel plugin's messaging tool.
    fn is_messaging_tool(&self, _tool: &str) -> bool {
        false
    }

    /// The target a plugin tool call sends to, when the call is an outbound send.
    fn send_target(&self, _tool: &str, _args: &Value) -> Option<String> {
        None
    }

    /// Whether the plugin declares the call a delivery action (an edit or delete of a visible
    /// message, for example).
    fn is_delivery_action(&self, _tool: &str, _args: &Value) -> bool {
        false
    }
}

/// No channel plugins: only the core messaging tools count.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMessagingPlugins;

impl MessagingPlugins for NoMessagingPlugins {}

/// `message` actions that send or upload visible content (compared exactly).
const MESSAGE_SEND_ACTIONS: &[&str] = &[
    "send",
    "thread-reply",
    "sendWithEffect",
    "sendAttachment",
    "upload-file",
];

/// `message` actions whose one target is worth recording as delivery evidence.
const MESSAGE_TARGET_EVIDENCE_ACTIONS: &[&str] = &[
    "send",
    "poll",
    "reply",
    "sendWithEffect",
    "sendAttachment",
    "upload-file",
    "thread-reply",
    "sticker",
];

fn trimmed_action(args: &Value) -> &str {
    args.get("action")
        .and_then(Value::as_str)
        .map_or("", str::trim)
}

fn is_conversation_create(action: &str) -> bool {
    CONVERSATION_CREATE_ACTIONS.contains(&action.to_ascii_lowercase().as_str())
}

/// Whether `tool` is a messaging tool: `sessions_send`, `conversations_send`,
/// `conversations_turn`, `message`, or a channel plugin's messaging tool.
pub fn is_messaging_tool(tool: &str, plugins: &dyn MessagingPlugins) -> bool {
    matches!(
        tool,
        "sessions_send" | "conversations_send" | "conversations_turn" | "message"
    ) || plugins.is_messaging_tool(tool)
}

/// Whether the call is an outbound send: the session and conversation send tools always;
/// `message` with a send action (`send`, `thread-reply`, `sendWithEffect`, `sendAttachment`,
/// `upload-file`); a plugin tool when the plugin names its send target.
pub fn is_messaging_tool_send_action(
    tool: &str,
    args: &Value,
    plugins: &dyn MessagingPlugins,
) -> bool {
    match tool {
        "sessions_send" | "conversations_send" | "conversations_turn" => true,
        "message" => MESSAGE_SEND_ACTIONS.contains(&trimmed_action(args)),
        _ => plugins.send_target(tool, args).is_some(),
    }
}

/// Whether the call's one target is worth recording as delivery evidence: conversation
/// sends; `message` sends, polls, replies, stickers and conversation creation; otherwise any
/// send.
pub fn is_messaging_tool_target_evidence_action(
    tool: &str,
    args: &Value,
    plugins: &dyn MessagingPlugins,
) -> bool {
    match tool {
        "conversations_send" | "conversations_turn" => true,
        "message" => {
            let action = trimmed_action(args);
            MESSAGE_TARGET_EVIDENCE_ACTIONS.contains(&action) || is_conversation_create(action)
        }
        _ => is_messaging_tool_send_action(tool, args, plugins),
    }
}

/// Whether the call can create visible outbound delivery: conversation sends; any `message`
/// action that is not a read (`read`, `reactions`, `channel-list`, …) or a conversation
/// creation; a plugin-declared delivery action; otherwise any send.
pub fn is_messaging_tool_delivery_action(
    tool: &str,
    args: &Value,
    plugins: &dyn MessagingPlugins,
) -> bool {
    match tool {
        "conversations_send" | "conversations_turn" => true,
        "message" => {
            let action = trimmed_action(args);
            (!action.is_empty() && !READ_ONLY_MESSAGE_ACTIONS.contains(&action))
                || is_conversation_create(action)
        }
        _ => {
            plugins.is_delivery_action(tool, args)
                || is_messaging_tool_send_action(tool, args, plugins)
        }
    }
}
