//! Attempt parameters and attempt results: what the host hands a harness for one run attempt
//! and what the harness reports back (the fields the seed contract names).

use std::time::Duration;

use crate::finalization::SettledTurnFinalizationContext;
use crate::ids::{AgentId, RunId, SessionId, SessionKey};

/// Who authored a transcript message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MessageRole {
    /// The user (or the host on the user's behalf).
    User,
    /// The assistant.
    Assistant,
    /// A tool result.
    ToolResult,
    /// A system or developer message.
    System,
}

/// One block of message content.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ContentBlock {
    /// Visible text.
    Text {
        /// The text.
        text: String,
    },
    /// Model reasoning (never shown as the answer).
    Thinking {
        /// The reasoning text.
        text: String,
    },
    /// An assistant tool call.
    ToolCall {
        /// Protocol call id.
        id: String,
        /// Canonical tool name.
        name: String,
        /// The arguments as sent.
        arguments: serde_json::Value,
    },
    /// An image reference or inline image.
    Image {
        /// MIME type.
        mime_type: String,
        /// Base64 data or a URL/path.
        data: String,
    },
}

/// A transcript message as the harness runtime sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentMessage {
    /// The author.
    pub role: MessageRole,
    /// The content blocks.
    pub content: Vec<ContentBlock>,
    /// The message id in the host transcript or native protocol, when known.
    pub id: Option<String>,
    /// For tool results: the call this result answers.
    pub tool_call_id: Option<String>,
    /// For tool results: the tool name.
    pub tool_name: Option<String>,
    /// For tool results: whether the tool reported an error.
    pub is_error: bool,
    /// For assistant messages: why generation stopped (`stop`, `toolUse`, `length`, …).
    pub stop_reason: Option<String>,
    /// Host operational metadata (mentions, intent, provenance), as JSON.
    pub meta: serde_json::Map<String, serde_json::Value>,
}

impl AgentMessage {
    /// A message with `role` and a single text block (read it back with
    /// [`AgentMessage::visible_text`]).
    pub fn text(role: MessageRole, text: impl Into<String>) -> Self {
        Self {
            role,
            content: vec![ContentBlock::Text { text: text.into() }],
            id: None,
            tool_call_id: None,
            tool_name: None,
            is_error: false,
            stop_reason: None,
            meta: serde_json::Map::new(),
        }
    }

    /// A tool result for the call `call_id` of `tool_name`, with a single text block.
    pub fn tool_result(
        call_id: impl Into<String>,
        tool_name: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Self::text(MessageRole::ToolResult, text)
            .with_call_id(call_id)
            .with_tool_name(tool_name)
    }

    /// Sets the call this (tool result) message answers.
    #[must_use]
    pub fn with_call_id(mut self, call_id: impl Into<String>) -> Self {
        self.tool_call_id = Some(call_id.into());
        self
    }

    /// Sets the tool name (of a tool result).
    #[must_use]
    pub fn with_tool_name(mut self, tool_name: impl Into<String>) -> Self {
        self.tool_name = Some(tool_name.into());
        self
    }

    /// Sets why generation stopped (of an assistant message: `stop`, `toolUse`, …).
    #[must_use]
    pub fn with_stop_reason(mut self, reason: impl Into<String>) -> Self {
        self.stop_reason = Some(reason.into());
        self
    }

    /// The message's text: its visible text blocks, concatenated (thinking, tool calls and
    /// images left out). The accessor of the text; [`AgentMessage::text`] is the constructor.
    #[doc(alias = "text")]
    pub fn visible_text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }
}

/// Where an attempt runs: the committed session target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionTarget {
    /// The agent.
    pub agent_id: AgentId,
    /// The logical key, when the session has one.
    pub session_key: Option<SessionKey>,
    /// The physical generation.
    pub session_id: SessionId,
}

impl SessionTarget {
    /// The generation `session_id` of the session `session_key` of `agent_id`.
    pub fn new(agent_id: AgentId, session_key: Option<SessionKey>, session_id: SessionId) -> Self {
        Self {
            agent_id,
            session_key,
            session_id,
        }
    }

    /// The current generation of a host session, read from its entry (an attempt must name
    /// the generation the host row names now: a stale one is refused as superseded).
    pub fn of(entry: &crate::HostSessionEntry) -> Self {
        Self {
            agent_id: entry.agent_id.clone(),
            session_key: Some(entry.session_key.clone()),
            session_id: entry.session_id.clone(),
        }
    }
}

/// Parameters of one attempt.
#[derive(Debug, Clone)]
pub struct AttemptParams {
    /// The host run this attempt belongs to.
    pub run_id: RunId,
    /// Where the attempt runs.
    pub session: SessionTarget,
    /// The user prompt.
    pub prompt: String,
    /// The attempt timeout (`None`: no limit).
    pub timeout: Option<Duration>,
    /// The route's source-reply delivery mode (for example `message_tool_only`).
    pub source_reply_delivery_mode: Option<String>,
}

impl AttemptParams {
    /// An attempt of run `run_id` at `session` with `prompt`: no timeout, no source-reply
    /// delivery mode (set the fields to change them).
    pub fn new(run_id: RunId, session: SessionTarget, prompt: impl Into<String>) -> Self {
        Self {
            run_id,
            session,
            prompt: prompt.into(),
            timeout: None,
            source_reply_delivery_mode: None,
        }
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AttemptTerminal {
    /// The native turn completed.
    #[default]
    Ok,
    /// The attempt failed.
    Failed {
        /// What failed.
        message: String,
    },
    /// The attempt was cancelled.
    Aborted,
    /// The attempt timed out.
    TimedOut,
}

/// A structured diagnostic attached to a failed tool.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TerminalDiagnostic {
    /// A process the tool ran ended abnormally.
    Process {
        /// The process session id.
        session_id: String,
        /// How it ended, as text (`exit 1`, `signal SIGKILL`, `timeout`).
        reason: String,
    },
    /// The tool timed out.
    Timeout {
        /// The timeout in milliseconds.
        timeout_ms: u64,
        /// How many partial results came back, if partial.
        partial_results: Option<u64>,
    },
}

/// The summary of the last unresolved tool failure, carried into the attempt result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolErrorSummary {
    /// Canonical tool name.
    pub tool_name: String,
    /// Whether the tool implementation may have started.
    pub execution_started: Option<bool>,
    /// Display metadata.
    pub meta: Option<String>,
    /// A structured error code.
    pub error_code: Option<String>,
    /// The error text.
    pub error: Option<String>,
    /// A validation error summary.
    pub validation_error_summary: Option<String>,
    /// Whether the tool timed out.
    pub timed_out: Option<bool>,
    /// Whether the failure came from middleware.
    pub middleware_error: Option<bool>,
    /// Whether the failed call was a mutating action.
    pub mutating_action: Option<bool>,
    /// Structured diagnostic.
    pub terminal_diagnostic: Option<TerminalDiagnostic>,
}

/// An accepted `sessions_spawn` receipt (see `docs/tool-results.md`, "Spawn receipts").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedSessionSpawn {
    /// The child run id.
    pub run_id: String,
    /// The child session key.
    pub child_session_key: String,
    /// An `http(s)` URL of the child session, if given.
    pub session_url: Option<String>,
    /// Whether the child session is publicly readable.
    pub public_read: bool,
    /// A label.
    pub label: Option<String>,
    /// True only when the raw result said literally `true`.
    pub expects_completion_message: bool,
    /// Whether the child's completion was collected.
    pub collected: bool,
}

/// Replay metadata of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayMetadata {
    /// Whether anything that may have had side effects ran.
    pub had_potential_side_effects: bool,
    /// Whether replaying the attempt is safe.
    pub replay_safe: bool,
}

impl Default for ReplayMetadata {
    fn default() -> Self {
        Self {
            had_potential_side_effects: false,
            replay_safe: true,
        }
    }
}

/// Messaging-delivery facts of an attempt.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeliveryState {
    /// A messaging tool confirmed a send.
    pub did_send_via_messaging_tool: bool,
    /// A messaging tool delivered the source reply.
    pub did_deliver_source_reply_via_message_tool: bool,
    /// Texts confirmed sent by messaging tools.
    pub messaging_tool_sent_texts: Vec<String>,
    /// Media confirmed sent by messaging tools.
    pub messaging_tool_sent_media_urls: Vec<String>,
    /// Targets messaging tools sent to (JSON descriptions).
    pub messaging_tool_sent_targets: Vec<serde_json::Value>,
    /// Source reply payloads extracted from messaging tools.
    pub messaging_tool_source_reply_payloads: Vec<serde_json::Value>,
}

/// Token usage of a model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

/// Display metadata of one tool call in the attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolMeta {
    /// Tool name.
    pub tool_name: String,
    /// Compact display metadata.
    pub meta: Option<String>,
    /// Whether the call errored.
    pub is_error: bool,
}

/// The result of one attempt.
#[derive(Debug, Clone, Default)]
pub struct AttemptResult {
    /// How the attempt ended.
    pub terminal: AttemptTerminal,
    /// The physical session the attempt actually used.
    pub session_id_used: Option<SessionId>,
    /// Visible assistant texts of the attempt.
    pub assistant_texts: Vec<String>,
    /// The messages of the attempt (settled-batch evidence for finalization).
    pub messages_snapshot: Vec<AgentMessage>,
    /// The completed assistant message of the current attempt, if any.
    pub completed_assistant: Option<AgentMessage>,
    /// Display metadata of the attempt's tool calls.
    pub tool_metas: Vec<ToolMeta>,
    /// All media produced by tools.
    pub tool_media_urls: Vec<String>,
    /// The subset of `tool_media_urls` the trusted harness runtime created and persisted itself.
    pub host_owned_tool_media_urls: Vec<String>,
    /// Accepted `sessions_spawn` receipts.
    pub accepted_session_spawns: Vec<AcceptedSessionSpawn>,
    /// The last unresolved tool failure, from the terminal-outcome accumulator.
    pub last_tool_error: Option<ToolErrorSummary>,
    /// Eligibility and evidence for settled-turn finalization; absent = not eligible.
    pub settled_turn_finalization_context: Option<SettledTurnFinalizationContext>,
    /// Replay metadata.
    pub replay: ReplayMetadata,
    /// Messaging delivery facts.
    pub delivery: DeliveryState,
    /// Usage of the attempt's model calls.
    pub usage: Option<Usage>,
    /// Whether the model yielded to a spawned child.
    pub yield_detected: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_names_the_generation_its_host_row_names() {
        let entry = crate::HostSessionEntry::new(
            SessionKey::new("agent:main:direct:alice").unwrap(),
            AgentId::new("main").unwrap(),
            SessionId::new("gen-1").unwrap(),
            crate::Timestamp::from_millis(0),
        )
        .rotated(
            SessionId::new("gen-2").unwrap(),
            crate::GenerationChange::Reset,
            crate::Timestamp::from_millis(0),
        );
        let target = SessionTarget::of(&entry);
        assert_eq!(
            target,
            SessionTarget::new(
                entry.agent_id.clone(),
                Some(entry.session_key.clone()),
                entry.session_id.clone()
            )
        );
        let params = AttemptParams::new(RunId::new("run-1").unwrap(), target.clone(), "hello");
        assert_eq!(params.session, target);
        assert_eq!(params.prompt, "hello");
        assert_eq!(params.timeout, None);
        assert_eq!(params.source_reply_delivery_mode, None);
    }
}
