//! Shared builders for the integration tests.

#![allow(dead_code)]

use serde_json::{Map, Value, json};
use tether_core::{AgentMessage, ContentBlock, MessageRole};

/// A user message.
pub(crate) fn user(text: &str) -> AgentMessage {
    AgentMessage::text(MessageRole::User, text)
}

/// A completed assistant text message with attribution.
pub(crate) fn assistant(text: &str, stop: &str) -> AgentMessage {
    let mut m = AgentMessage::text(MessageRole::Assistant, text);
    m.stop_reason = Some(stop.to_owned());
    m.meta.insert("provider".into(), Value::from("prov"));
    m.meta.insert("model".into(), Value::from("model-1"));
    m
}

/// An assistant stopping with `toolUse` for the given (id, name) calls, with optional
/// commentary text.
pub(crate) fn tool_calls(commentary: Option<&str>, calls: &[(&str, &str)]) -> AgentMessage {
    let mut content = Vec::new();
    if let Some(text) = commentary {
        content.push(ContentBlock::Text { text: text.into() });
    }
    for (id, name) in calls {
        content.push(ContentBlock::ToolCall {
            id: (*id).into(),
            name: (*name).into(),
            arguments: json!({"action": "send"}),
        });
    }
    let mut meta = Map::new();
    meta.insert("provider".into(), Value::from("tool-prov"));
    meta.insert("model".into(), Value::from("tool-model"));
    AgentMessage {
        role: MessageRole::Assistant,
        content,
        id: None,
        tool_call_id: None,
        tool_name: None,
        is_error: false,
        stop_reason: Some("toolUse".into()),
        meta,
    }
}

/// A tool result.
pub(crate) fn tool_result(id: &str, name: &str, text: &str, is_error: bool) -> AgentMessage {
    let mut m = AgentMessage::text(MessageRole::ToolResult, text);
    m.tool_call_id = Some(id.into());
    m.tool_name = Some(name.into());
    m.is_error = is_error;
    m
}

/// Sets the mirror identity (`id`).
pub(crate) fn with_id(mut m: AgentMessage, id: &str) -> AgentMessage {
    m.id = Some(id.into());
    m
}

/// A narrow result JSON with one text block.
pub(crate) fn answer_json(text: &str) -> Value {
    json!({"assistant": {"role": "assistant", "content": [{"type": "text", "text": text}], "stop_reason": "stop", "provider": "fin-prov", "model": "fin-model"}})
}

/// The native-runtime kind of `error` (`None` for any other error).
pub(crate) fn runtime_kind(error: &tether_core::Error) -> Option<tether_core::RuntimeErrorKind> {
    match error {
        tether_core::Error::Runtime { kind, .. } => Some(*kind),
        _ => None,
    }
}
