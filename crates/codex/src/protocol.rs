//! Typed messages of the Codex app-server protocol: the subset this crate sends and reads.
//!
//! Field names follow the wire (camelCase). Every outgoing type and every type parsed from the
//! server is checked against the JSON Schema the pinned binary prints
//! (`codex app-server generate-json-schema --experimental`) by the integration tests, so a
//! version bump that changes the protocol fails loudly.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Method names used by this crate.
pub mod method {
    /// Client → server: the handshake request.
    pub const INITIALIZE: &str = "initialize";
    /// Client → server: the handshake's closing notification.
    pub const INITIALIZED: &str = "initialized";
    /// Client → server: start a thread.
    pub const THREAD_START: &str = "thread/start";
    /// Client → server: load a persisted thread into this app-server.
    pub const THREAD_RESUME: &str = "thread/resume";
    /// Client → server: unload a thread from this connection.
    pub const THREAD_UNSUBSCRIBE: &str = "thread/unsubscribe";
    /// Client → server: delete a persisted thread.
    pub const THREAD_DELETE: &str = "thread/delete";
    /// Client → server: archive a persisted thread.
    pub const THREAD_ARCHIVE: &str = "thread/archive";
    /// Client → server: bring an archived thread back.
    pub const THREAD_UNARCHIVE: &str = "thread/unarchive";
    /// Client → server: read a thread's metadata (and, optionally, its turns).
    pub const THREAD_READ: &str = "thread/read";
    /// Client → server: copy a persisted thread (up to one of its turns) into a new thread.
    pub const THREAD_FORK: &str = "thread/fork";
    /// Client → server: page through a persisted thread's turns.
    pub const THREAD_TURNS_LIST: &str = "thread/turns/list";
    /// Client → server: compact a thread's model-visible history.
    pub const THREAD_COMPACT_START: &str = "thread/compact/start";
    /// Client → server: append raw Responses API items to a thread's model-visible history.
    pub const THREAD_INJECT_ITEMS: &str = "thread/inject_items";
    /// Client → server: start a turn.
    pub const TURN_START: &str = "turn/start";
    /// Client → server: interrupt the running turn.
    pub const TURN_INTERRUPT: &str = "turn/interrupt";
    /// Server → client notification: an item started.
    pub const ITEM_STARTED: &str = "item/started";
    /// Server → client notification: an item completed.
    pub const ITEM_COMPLETED: &str = "item/completed";
    /// Server → client notification: a turn started.
    pub const TURN_STARTED: &str = "turn/started";
    /// Server → client notification: a turn ended.
    pub const TURN_COMPLETED: &str = "turn/completed";
    /// Server → client notification: token usage changed.
    pub const TOKEN_USAGE_UPDATED: &str = "thread/tokenUsage/updated";
    /// Server → client notification: an error during a turn.
    pub const ERROR: &str = "error";
    /// Server → client request: run a dynamic (host) tool.
    pub const TOOL_CALL: &str = "item/tool/call";
    /// Server → client request: approve a command.
    pub const COMMAND_APPROVAL: &str = "item/commandExecution/requestApproval";
    /// Server → client request: approve a file change.
    pub const FILE_CHANGE_APPROVAL: &str = "item/fileChange/requestApproval";
    /// Server → client request: grant extra permissions.
    pub const PERMISSIONS_APPROVAL: &str = "item/permissions/requestApproval";
    /// Server → client request: ask the user a question.
    pub const USER_INPUT: &str = "item/tool/requestUserInput";
    /// Server → client request: an MCP server asks the user for input.
    pub const MCP_ELICITATION: &str = "mcpServer/elicitation/request";
    /// Server → client request (legacy): approve a command.
    pub const EXEC_COMMAND_APPROVAL: &str = "execCommandApproval";
    /// Server → client request (legacy): approve a patch.
    pub const APPLY_PATCH_APPROVAL: &str = "applyPatchApproval";
}

/// `initialize` parameters.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// Who is connecting.
    pub client_info: ClientInfo,
    /// Negotiated capabilities.
    pub capabilities: InitializeCapabilities,
}

/// The client's name and version.
#[derive(Debug, Clone, Serialize)]
pub struct ClientInfo {
    /// Client name.
    pub name: String,
    /// Client version.
    pub version: String,
}

/// Client capabilities.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeCapabilities {
    /// Opt into experimental methods and fields (`dynamicTools` needs it).
    pub experimental_api: bool,
}

/// `initialize` result (the fields this crate reads).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResponse {
    /// The server's user agent (carries its version).
    pub user_agent: String,
    /// The server's `CODEX_HOME`.
    pub codex_home: String,
}

/// A host tool offered to the model as a Codex dynamic tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicToolSpec {
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The tool name the model calls.
    pub name: String,
    /// What the tool does (shown to the model).
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
}

impl DynamicToolSpec {
    /// A function tool.
    pub fn function(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        Self {
            kind: "function",
            name: name.into(),
            description: description.into(),
            input_schema,
        }
    }
}

/// `thread/start` parameters.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStartParams {
    /// Working directory.
    pub cwd: String,
    /// Model override.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Approval policy (`untrusted`, `on-request`, `never`).
    pub approval_policy: String,
    /// Sandbox mode (`read-only`, `workspace-write`, `danger-full-access`).
    pub sandbox: String,
    /// Extra developer instructions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub developer_instructions: Option<String>,
    /// Host tools.
    pub dynamic_tools: Vec<DynamicToolSpec>,
}

/// `thread/resume` parameters.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadResumeParams {
    /// The thread to load.
    pub thread_id: String,
    /// Working directory.
    pub cwd: String,
    /// Approval policy.
    pub approval_policy: String,
    /// Sandbox mode.
    pub sandbox: String,
    /// Return only metadata, not past turns.
    pub exclude_turns: bool,
}

/// `thread/fork` parameters: a new thread holding the source's turns up to and including
/// `last_turn_id`, configured like a new thread of the harness.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadForkParams {
    /// The source thread.
    pub thread_id: String,
    /// The last turn copied into the fork (every later turn is left out).
    pub last_turn_id: String,
    /// Working directory.
    pub cwd: String,
    /// Model override.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Approval policy.
    pub approval_policy: String,
    /// Sandbox mode.
    pub sandbox: String,
    /// Extra developer instructions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub developer_instructions: Option<String>,
    /// Return only metadata, not the copied turns.
    pub exclude_turns: bool,
}

/// `thread/turns/list` parameters.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadTurnsListParams {
    /// The thread.
    pub thread_id: String,
    /// The cursor of the previous page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size.
    pub limit: u32,
    /// `asc` (oldest first) or `desc`.
    pub sort_direction: &'static str,
    /// `full`: every item of each turn.
    pub items_view: &'static str,
}

/// `thread/turns/list` result (the fields this crate reads).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadTurnsListResponse {
    /// The page's turns.
    pub data: Vec<ListedTurn>,
    /// The cursor of the next page; `None` on the last one.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// One listed turn with its items.
#[derive(Debug, Clone, Deserialize)]
pub struct ListedTurn {
    /// Turn id.
    pub id: String,
    /// The turn's items, each with its `type` and `id`.
    #[serde(default)]
    pub items: Vec<Value>,
}

/// `thread/unsubscribe` parameters.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadUnsubscribeParams {
    /// The thread to unload.
    pub thread_id: String,
}

/// Parameters naming one thread: `thread/delete`, `thread/archive`, `thread/compact/start`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadRefParams {
    /// The thread.
    pub thread_id: String,
}

/// `thread/read` parameters.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadReadParams {
    /// The thread.
    pub thread_id: String,
    /// Whether to include the turns and their items.
    pub include_turns: bool,
}

/// The result of `thread/start` and `thread/resume` (the fields this crate reads).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadResponse {
    /// The thread.
    pub thread: ThreadInfo,
    /// The model in use.
    pub model: String,
    /// The model provider in use.
    pub model_provider: String,
}

/// A thread as the server describes it.
#[derive(Debug, Clone, Deserialize)]
pub struct ThreadInfo {
    /// Thread id.
    pub id: String,
}

/// One user input element.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum UserInput {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
}

/// `turn/start` parameters.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStartParams {
    /// The thread.
    pub thread_id: String,
    /// The user's input.
    pub input: Vec<UserInput>,
}

/// `turn/start` result.
#[derive(Debug, Clone, Deserialize)]
pub struct TurnStartResponse {
    /// The new turn.
    pub turn: TurnInfo,
}

/// A turn as the server describes it.
#[derive(Debug, Clone, Deserialize)]
pub struct TurnInfo {
    /// Turn id.
    pub id: String,
    /// `completed`, `interrupted`, `failed` or `inProgress`.
    pub status: String,
    /// The error of a failed or interrupted turn.
    #[serde(default)]
    pub error: Option<TurnErrorInfo>,
}

/// A turn error.
#[derive(Debug, Clone, Deserialize)]
pub struct TurnErrorInfo {
    /// What went wrong.
    pub message: String,
}

/// `turn/interrupt` parameters.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnInterruptParams {
    /// The thread.
    pub thread_id: String,
    /// The turn to interrupt.
    pub turn_id: String,
}

/// `turn/started` and `turn/completed` notification parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnNotification {
    /// The thread.
    pub thread_id: String,
    /// The turn.
    pub turn: TurnInfo,
}

/// `item/started` and `item/completed` notification parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemNotification {
    /// The thread.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// The item.
    pub item: ThreadItem,
}

/// `thread/tokenUsage/updated` parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsageNotification {
    /// The thread.
    pub thread_id: String,
    /// The usage.
    pub token_usage: ThreadTokenUsage,
}

/// Token usage of a thread.
#[derive(Debug, Clone, Deserialize)]
pub struct ThreadTokenUsage {
    /// Usage of the last model call.
    pub last: TokenCounts,
}

/// Token counts.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenCounts {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

/// A thread item (the kinds this crate acts on; the rest are kept as [`ThreadItem::Other`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ThreadItem {
    /// The user's message.
    UserMessage {
        /// Item id.
        id: String,
        /// The input elements.
        content: Vec<Value>,
    },
    /// An assistant message.
    AgentMessage {
        /// Item id.
        id: String,
        /// The text.
        text: String,
    },
    /// A dynamic (host) tool call.
    #[serde(rename_all = "camelCase")]
    DynamicToolCall {
        /// Item id (the model's call id).
        id: String,
        /// The tool.
        tool: String,
        /// The arguments.
        arguments: Value,
        /// `inProgress`, `completed` or `failed`.
        status: String,
        /// Whether the tool reported success.
        #[serde(default)]
        success: Option<bool>,
        /// What the tool returned.
        #[serde(default)]
        content_items: Option<Vec<Value>>,
    },
    /// A command Codex ran itself.
    #[serde(rename_all = "camelCase")]
    CommandExecution {
        /// Item id.
        id: String,
        /// The command line.
        command: String,
        /// Where it ran.
        cwd: String,
        /// `inProgress`, `completed`, `failed` or `declined`.
        status: String,
        /// Exit code, when it finished.
        #[serde(default)]
        exit_code: Option<i64>,
        /// Output.
        #[serde(default)]
        aggregated_output: Option<String>,
    },
    /// A patch Codex applied itself.
    FileChange {
        /// Item id.
        id: String,
        /// The changed files.
        changes: Vec<FileChangeEntry>,
        /// `inProgress`, `completed`, `failed` or `declined`.
        status: String,
    },
    /// An image Codex generated and saved.
    #[serde(rename_all = "camelCase")]
    ImageGeneration {
        /// Item id.
        id: String,
        /// Status.
        status: String,
        /// Where the runtime saved the image, when it did.
        #[serde(default)]
        saved_path: Option<String>,
    },
    /// Any other item kind.
    #[serde(other)]
    Other,
}

/// One file of a file change.
#[derive(Debug, Clone, Deserialize)]
pub struct FileChangeEntry {
    /// The path.
    pub path: String,
}

/// `item/tool/call` request parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicToolCallParams {
    /// The thread.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// The call id.
    pub call_id: String,
    /// The tool name.
    pub tool: String,
    /// The arguments as the model produced them.
    pub arguments: Value,
}

/// `item/tool/call` response.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicToolCallResponse {
    /// What the tool returned.
    pub content_items: Vec<ToolContentItem>,
    /// Whether the tool succeeded.
    pub success: bool,
}

/// One element of a dynamic tool's output.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ToolContentItem {
    /// Text.
    InputText {
        /// The text.
        text: String,
    },
    /// An image by URL (or data URL).
    #[serde(rename_all = "camelCase")]
    InputImage {
        /// The image URL.
        image_url: String,
    },
}

/// The parameters of an approval request, as far as this crate reads them.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequestParams {
    /// The thread, when the request names one (the legacy methods use `conversationId`).
    #[serde(default)]
    pub thread_id: Option<String>,
    /// The legacy thread field.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// The command, for command approvals.
    #[serde(default)]
    pub command: Option<Value>,
    /// Why the server asks.
    #[serde(default)]
    pub reason: Option<String>,
}

impl ApprovalRequestParams {
    /// The thread the request belongs to.
    pub fn thread(&self) -> Option<&str> {
        self.thread_id
            .as_deref()
            .or(self.conversation_id.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_item_kinds_are_kept_as_other() {
        let item: ThreadItem =
            serde_json::from_value(json!({ "type": "webSearch", "id": "w", "query": "q" }))
                .unwrap();
        assert!(matches!(item, ThreadItem::Other));
        let item: ThreadItem = serde_json::from_value(json!({
            "type": "commandExecution", "id": "c", "command": "ls", "cwd": "/w",
            "commandActions": [], "status": "completed", "exitCode": 0
        }))
        .unwrap();
        assert!(matches!(
            item,
            ThreadItem::CommandExecution {
                exit_code: Some(0),
                ..
            }
        ));
    }

    #[test]
    fn dynamic_tools_serialize_as_function_specs() {
        let spec = DynamicToolSpec::function("lookup", "Looks up.", json!({ "type": "object" }));
        assert_eq!(
            serde_json::to_value(spec).unwrap(),
            json!({
                "type": "function", "name": "lookup", "description": "Looks up.",
                "inputSchema": { "type": "object" }
            })
        );
    }
}
