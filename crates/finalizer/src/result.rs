//! The narrow finalization result and its validator (see `docs/finalization.md`).
//!
//! A harness returns its result as JSON; [`validate_settled_turn_finalization_result`] turns it
//! into a typed [`SettledTurnFinalizationResult`] or fails closed, running the checks in the
//! reference's order: unknown field, not an assistant, tool call, stop reason, message index,
//! then visible text.

use std::sync::Arc;

use serde_json::{Map, Value};
use tether_core::{AgentMessage, ContentBlock, MessageRole, Usage};

use crate::error::FinalizerError;

/// The allowed result fields, exactly.
pub const ALLOWED_RESULT_FIELDS: [&str; 6] = [
    "assistant",
    "usage",
    "assistant_transcript_owned",
    "assistant_transcript_idempotency_key",
    "assistant_message_index",
    "diagnostic_trace",
];

/// The silent reply token.
pub const SILENT_REPLY_TOKEN: &str = "NO_REPLY";

/// Largest safe integer (2^53 - 1), as in the reference.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Whether `text` is the silent reply token (trimmed, case-insensitive).
pub fn is_silent_reply_text(text: &str) -> bool {
    text.trim().eq_ignore_ascii_case(SILENT_REPLY_TOKEN)
}

/// The assistant fields an answer may carry, exactly. Anything else (a chat-style
/// `tool_calls`, a `function_call`, a provider's unknown extension) is refused with its name,
/// so no tool call can hide outside the content blocks.
pub const ALLOWED_ASSISTANT_FIELDS: [&str; 10] = [
    "role",
    "content",
    "stop_reason",
    "provider",
    "model",
    "api",
    "usage",
    "timestamp",
    "id",
    "response_id",
];

/// The content block types an answer may contain, exactly. Every other type is refused: a
/// type that reads like a tool call (see [`is_tool_call_block_type`]) as
/// [`FinalizerError::ToolCall`], any other as [`FinalizerError::UnsupportedContentBlock`].
pub const ALLOWED_CONTENT_BLOCK_TYPES: [&str; 4] =
    ["text", "thinking", "redacted_thinking", "image"];

/// How deep (arrays and objects) a raw result or a projected attempt may nest. Deeper input
/// is refused with [`FinalizerError::TooDeep`] before anything copies or walks it
/// recursively.
pub const MAX_RESULT_DEPTH: usize = 64;

/// Whether a content block type names a tool call in any provider's spelling (`toolCall`,
/// `tool_use`, `functionCall`, `server_tool_use`, `mcp_tool_use`, `tool-call`, …): compared
/// case-insensitively without `_` and `-`, it contains `tool` or `function`, or names a
/// server-side `call`.
pub fn is_tool_call_block_type(block_type: &str) -> bool {
    let compact: String = block_type
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    compact.contains("tool") || compact.contains("function") || compact.ends_with("call")
}

/// Whether no array or object in `value` nests deeper than `limit` levels (a scalar has
/// depth 0, `[1]` depth 1). Walks with an explicit stack, never on the call stack.
pub fn depth_within(value: &Value, limit: usize) -> bool {
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((node, depth)) = stack.pop() {
        match node {
            Value::Array(items) => {
                if depth >= limit {
                    return false;
                }
                stack.extend(items.iter().map(|child| (child, depth + 1)));
            }
            Value::Object(map) => {
                if depth >= limit {
                    return false;
                }
                stack.extend(map.values().map(|child| (child, depth + 1)));
            }
            _ => {}
        }
    }
    true
}

/// [`FinalizerError::TooDeep`] unless `value` nests at most [`MAX_RESULT_DEPTH`] levels.
pub(crate) fn check_depth(value: &Value) -> Result<(), FinalizerError> {
    if depth_within(value, MAX_RESULT_DEPTH) {
        Ok(())
    } else {
        Err(FinalizerError::TooDeep {
            limit: MAX_RESULT_DEPTH,
        })
    }
}

/// The single completed assistant message of a finalization, frozen (shared, read-only).
#[derive(Debug, Clone, PartialEq)]
pub struct FinalAssistant {
    raw: Arc<Map<String, Value>>,
}

impl FinalAssistant {
    /// Builds an assistant from its JSON object without validating it. Use
    /// [`validate_settled_turn_finalization_result`] to check it.
    pub fn from_json(raw: Map<String, Value>) -> Self {
        Self { raw: Arc::new(raw) }
    }

    /// A completed text answer (`role: assistant`, one text block, `stop_reason: stop`) with the
    /// given attribution.
    pub fn text(text: &str, provider: Option<&str>, model: Option<&str>) -> Self {
        let mut raw = Map::new();
        raw.insert("role".into(), Value::from("assistant"));
        raw.insert(
            "content".into(),
            serde_json::json!([{ "type": "text", "text": text }]),
        );
        raw.insert("stop_reason".into(), Value::from("stop"));
        if let Some(provider) = provider {
            raw.insert("provider".into(), Value::from(provider));
        }
        if let Some(model) = model {
            raw.insert("model".into(), Value::from(model));
        }
        Self::from_json(raw)
    }

    /// The raw JSON object.
    pub fn as_json(&self) -> &Map<String, Value> {
        &self.raw
    }

    /// The `role` field, when it is a string.
    pub fn role(&self) -> Option<&str> {
        self.raw.get("role").and_then(Value::as_str)
    }

    /// The `stop_reason` field, when it is a string.
    pub fn stop_reason(&self) -> Option<&str> {
        self.raw.get("stop_reason").and_then(Value::as_str)
    }

    /// The `provider` attribution.
    pub fn provider(&self) -> Option<&str> {
        self.raw.get("provider").and_then(Value::as_str)
    }

    /// The `model` attribution.
    pub fn model(&self) -> Option<&str> {
        self.raw.get("model").and_then(Value::as_str)
    }

    fn blocks(&self) -> &[Value] {
        match self.raw.get("content") {
            Some(Value::Array(blocks)) => blocks,
            _ => &[],
        }
    }

    /// Names of the tool-call blocks, in any spelling ([`is_tool_call_block_type`]); a block
    /// without a string name reports `""`.
    pub fn tool_call_names(&self) -> Vec<String> {
        self.blocks()
            .iter()
            .filter_map(Value::as_object)
            .filter(|block| {
                block
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(is_tool_call_block_type)
            })
            .map(|block| {
                block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }

    /// The visible text: a string `content`, or the concatenated `text` blocks.
    pub fn visible_text(&self) -> String {
        match self.raw.get("content") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(blocks)) => {
                let mut out = String::new();
                for block in blocks.iter().filter_map(Value::as_object) {
                    if block.get("type").and_then(Value::as_str) == Some("text")
                        && let Some(text) = block.get("text").and_then(Value::as_str)
                    {
                        out.push_str(text);
                    }
                }
                out
            }
            _ => String::new(),
        }
    }

    /// The assistant as a transcript message. Text and thinking blocks are kept; the
    /// attribution fields of [`ALLOWED_ASSISTANT_FIELDS`] (never anything else) go to `meta`.
    pub fn to_agent_message(&self) -> AgentMessage {
        let mut content = Vec::new();
        match self.raw.get("content") {
            Some(Value::String(text)) => content.push(ContentBlock::Text { text: text.clone() }),
            Some(Value::Array(blocks)) => {
                for block in blocks.iter().filter_map(Value::as_object) {
                    let text = || {
                        block
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned()
                    };
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => content.push(ContentBlock::Text { text: text() }),
                        Some("thinking") => content.push(ContentBlock::Thinking { text: text() }),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        let mut meta = Map::new();
        for (key, value) in self.raw.iter() {
            if !matches!(key.as_str(), "role" | "content" | "stop_reason")
                && ALLOWED_ASSISTANT_FIELDS.contains(&key.as_str())
            {
                meta.insert(key.clone(), value.clone());
            }
        }
        AgentMessage {
            role: MessageRole::Assistant,
            content,
            id: None,
            tool_call_id: None,
            tool_name: None,
            is_error: false,
            stop_reason: self.stop_reason().map(str::to_owned),
            meta,
        }
    }
}

/// Diagnostic trace context of a finalization (an opaque JSON object).
#[derive(Debug, Clone, PartialEq)]
pub struct DiagnosticTrace(pub Map<String, Value>);

/// A validated narrow finalization result: exactly the six allowed fields.
#[derive(Debug, Clone, PartialEq)]
pub struct SettledTurnFinalizationResult {
    /// The single completed assistant message of the isolated operation.
    pub assistant: FinalAssistant,
    /// Usage of the finalization model call only.
    pub usage: Option<Usage>,
    /// The harness already persisted the assistant into the application transcript.
    pub assistant_transcript_owned: Option<bool>,
    /// The idempotency key of that harness-owned row.
    pub assistant_transcript_idempotency_key: Option<String>,
    /// Assistant stream index used to correlate final reply delivery.
    pub assistant_message_index: Option<u64>,
    /// Diagnostic trace context (filled by the lifecycle when absent).
    pub diagnostic_trace: Option<DiagnosticTrace>,
}

impl SettledTurnFinalizationResult {
    /// A result carrying only `assistant`.
    pub fn answer(assistant: FinalAssistant) -> Self {
        Self {
            assistant,
            usage: None,
            assistant_transcript_owned: None,
            assistant_transcript_idempotency_key: None,
            assistant_message_index: None,
            diagnostic_trace: None,
        }
    }

    /// The visible text of the answer.
    pub fn visible_text(&self) -> String {
        self.assistant.visible_text()
    }

    /// The result as JSON (the inverse of validation for valid results).
    pub fn to_value(&self) -> Value {
        let mut out = Map::new();
        out.insert(
            "assistant".into(),
            Value::Object(self.assistant.as_json().clone()),
        );
        if let Some(usage) = self.usage {
            out.insert(
                "usage".into(),
                serde_json::json!({
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                }),
            );
        }
        if let Some(owned) = self.assistant_transcript_owned {
            out.insert("assistant_transcript_owned".into(), Value::Bool(owned));
        }
        if let Some(key) = &self.assistant_transcript_idempotency_key {
            out.insert(
                "assistant_transcript_idempotency_key".into(),
                Value::from(key.as_str()),
            );
        }
        if let Some(index) = self.assistant_message_index {
            out.insert("assistant_message_index".into(), Value::from(index));
        }
        if let Some(trace) = &self.diagnostic_trace {
            out.insert("diagnostic_trace".into(), Value::Object(trace.0.clone()));
        }
        Value::Object(out)
    }
}

/// Every block of an array `content` is an object whose `type` is in
/// [`ALLOWED_CONTENT_BLOCK_TYPES`]; a string `content` is plain text; any other `content`
/// shape is refused as `content`.
fn check_content_blocks(assistant: &FinalAssistant) -> Result<(), FinalizerError> {
    match assistant.as_json().get("content") {
        None | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(blocks)) => {
            for (index, block) in blocks.iter().enumerate() {
                let block_type = block.get("type").and_then(Value::as_str);
                if !block_type.is_some_and(|t| ALLOWED_CONTENT_BLOCK_TYPES.contains(&t)) {
                    return Err(FinalizerError::UnsupportedContentBlock {
                        field: format!("content[{index}]"),
                        block_type: block_type.map(str::to_owned),
                    });
                }
            }
            Ok(())
        }
        Some(_) => Err(FinalizerError::UnsupportedAssistantField {
            field: "content".to_owned(),
        }),
    }
}

fn parse_index(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                (u <= MAX_SAFE_INTEGER).then_some(u)
            } else if let Some(f) = n.as_f64() {
                // A float with no fractional part is a safe integer in the reference.
                let ok =
                    f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_991.0;
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                ok.then_some(f as u64)
            } else {
                None
            }
        }
        _ => None,
    }
}

fn parse_usage(value: &Value) -> Option<Usage> {
    let obj = value.as_object()?;
    let mut usage = Usage::default();
    for (key, value) in obj {
        let n = value.as_u64()?;
        match key.as_str() {
            "input_tokens" => usage.input_tokens = n,
            "output_tokens" => usage.output_tokens = n,
            _ => return None,
        }
    }
    Some(usage)
}

/// Validates a raw finalization result (see `docs/finalization.md`), in the reference's order.
///
/// Input nested deeper than [`MAX_RESULT_DEPTH`] is refused first ([`FinalizerError::TooDeep`],
/// checked without recursion). Unknown fields (including a present `null`) and tool calls fail
/// closed; with several unknown fields the first in key order is reported (`serde_json` maps
/// are ordered by key, not by insertion). The assistant may carry only
/// [`ALLOWED_ASSISTANT_FIELDS`] and content blocks of [`ALLOWED_CONTENT_BLOCK_TYPES`]: a
/// tool-call block in any spelling is [`FinalizerError::ToolCall`], another unknown block
/// [`FinalizerError::UnsupportedContentBlock`], another field
/// [`FinalizerError::UnsupportedAssistantField`]. An answer whose
/// visible text is blank or the silent token yields [`FinalizerError::Empty`] carrying the
/// result, so the host silence policy can decide.
pub fn validate_settled_turn_finalization_result(
    raw: &Value,
) -> Result<SettledTurnFinalizationResult, FinalizerError> {
    check_depth(raw)?;
    let empty = Map::new();
    let obj = raw.as_object().unwrap_or(&empty);
    // 1. Unknown key (own keys, present-null counts).
    if let Some(field) = obj
        .keys()
        .find(|key| !ALLOWED_RESULT_FIELDS.contains(&key.as_str()))
    {
        return Err(FinalizerError::UnsupportedResultField {
            field: field.clone(),
        });
    }
    // 2. Assistant.
    let assistant = match obj.get("assistant") {
        Some(Value::Object(a)) if a.get("role").and_then(Value::as_str) == Some("assistant") => {
            FinalAssistant::from_json(a.clone())
        }
        _ => return Err(FinalizerError::NotAssistant),
    };
    // 3. Tool call (before the stop reason), in any block spelling.
    let tool_names = assistant.tool_call_names();
    if assistant.stop_reason() == Some("toolUse") || !tool_names.is_empty() {
        return Err(FinalizerError::ToolCall { tool_names });
    }
    // 3b. Allow-lists: assistant fields, then content blocks.
    if let Some(field) = assistant
        .as_json()
        .keys()
        .find(|key| !ALLOWED_ASSISTANT_FIELDS.contains(&key.as_str()))
    {
        return Err(FinalizerError::UnsupportedAssistantField {
            field: field.clone(),
        });
    }
    check_content_blocks(&assistant)?;
    // 4. Stop reason.
    if assistant.stop_reason() != Some("stop") {
        let reason = match assistant.as_json().get("stop_reason") {
            None | Some(Value::Null) => "missing".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        return Err(FinalizerError::UnsuccessfulStopReason { reason });
    }
    // 5. Index.
    let assistant_message_index = match obj.get("assistant_message_index") {
        None => None,
        Some(v) => Some(parse_index(v).ok_or(FinalizerError::InvalidMessageIndex)?),
    };
    // Shapes of the remaining allowed fields (fail closed).
    let usage = match obj.get("usage") {
        None => None,
        Some(v) => Some(parse_usage(v).ok_or(FinalizerError::InvalidField { field: "usage" })?),
    };
    let assistant_transcript_owned = match obj.get("assistant_transcript_owned") {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => {
            return Err(FinalizerError::InvalidField {
                field: "assistant_transcript_owned",
            });
        }
    };
    let assistant_transcript_idempotency_key = match obj.get("assistant_transcript_idempotency_key")
    {
        None => None,
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        Some(_) => {
            return Err(FinalizerError::InvalidField {
                field: "assistant_transcript_idempotency_key",
            });
        }
    };
    let diagnostic_trace = match obj.get("diagnostic_trace") {
        None => None,
        Some(Value::Object(t)) => Some(DiagnosticTrace(t.clone())),
        Some(_) => {
            return Err(FinalizerError::InvalidField {
                field: "diagnostic_trace",
            });
        }
    };
    let result = SettledTurnFinalizationResult {
        assistant,
        usage,
        assistant_transcript_owned,
        assistant_transcript_idempotency_key,
        assistant_message_index,
        diagnostic_trace,
    };
    // 6. Visible text.
    let text = result.visible_text();
    if text.trim().is_empty() {
        return Err(FinalizerError::Empty {
            result: Box::new(result),
            silent: false,
        });
    }
    if is_silent_reply_text(&text) {
        return Err(FinalizerError::Empty {
            result: Box::new(result),
            silent: true,
        });
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_a_full_result() {
        let raw = json!({
            "assistant": {"role": "assistant", "content": [{"type": "text", "text": "done"}], "stop_reason": "stop", "provider": "p"},
            "usage": {"input_tokens": 3, "output_tokens": 4},
            "assistant_transcript_owned": true,
            "assistant_transcript_idempotency_key": "k",
            "assistant_message_index": 2,
            "diagnostic_trace": {"trace_id": "t"}
        });
        let result = validate_settled_turn_finalization_result(&raw).unwrap();
        assert_eq!(result.to_value(), raw);
        assert_eq!(result.usage.unwrap().output_tokens, 4);
        assert_eq!(result.assistant.provider(), Some("p"));
    }

    #[test]
    fn string_content_is_visible_text() {
        let raw =
            json!({"assistant": {"role": "assistant", "content": "hi", "stop_reason": "stop"}});
        let result = validate_settled_turn_finalization_result(&raw).unwrap();
        assert_eq!(result.visible_text(), "hi");
        assert_eq!(result.assistant.to_agent_message().visible_text(), "hi");
    }

    #[test]
    fn float_index_without_fraction_is_accepted_and_fraction_rejected() {
        let ok = json!({"assistant": {"role": "assistant", "content": "a", "stop_reason": "stop"}, "assistant_message_index": 3.0});
        assert_eq!(
            validate_settled_turn_finalization_result(&ok)
                .unwrap()
                .assistant_message_index,
            Some(3)
        );
        let bad = json!({"assistant": {"role": "assistant", "content": "a", "stop_reason": "stop"}, "assistant_message_index": 3.5});
        assert!(matches!(
            validate_settled_turn_finalization_result(&bad),
            Err(FinalizerError::InvalidMessageIndex)
        ));
        let huge = json!({"assistant": {"role": "assistant", "content": "a", "stop_reason": "stop"}, "assistant_message_index": 9_007_199_254_740_992_u64});
        assert!(matches!(
            validate_settled_turn_finalization_result(&huge),
            Err(FinalizerError::InvalidMessageIndex)
        ));
    }

    #[test]
    fn silent_token_is_case_insensitive_and_trimmed() {
        assert!(is_silent_reply_text(" NO_REPLY\n"));
        assert!(is_silent_reply_text("no_reply"));
        assert!(!is_silent_reply_text("NO_REPLY please"));
    }
}
