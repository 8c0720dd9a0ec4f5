//! The bounded projection of a settled turn's history, with limits enforced while reading
//! (see `docs/finalization.md`).
//!
//! The history is consumed one message at a time from a [`HistorySource`]. The current turn's
//! evidence (the host prompt through the settled tool-result boundary) is projected in *reject*
//! mode: the first limit hit returns a closed [`RejectionReason`] and nothing further is read.
//! Older context is projected in *omit* mode: it is grouped at user messages (a user message
//! while a tool call is pending stays in the same group), an over-size group is dropped whole
//! with everything older, the oldest groups are trimmed until everything fits, and a fixed
//! notice says that earlier conversation was omitted. The projection owns no reader: the
//! source is consumed and dropped before the result is returned.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::io;
use std::sync::Arc;

use crate::result::{MAX_RESULT_DEPTH, depth_within};
use serde_json::{Value, json};
use tether_core::{AgentMessage, ContentBlock, MessageRole};

/// Default item limit.
pub const MAX_ITEMS: usize = 200;
/// Default aggregate limit: 512 KiB of UTF-8 JSON.
pub const MAX_TOTAL_BYTES: usize = 512 * 1024;
/// Default per-text-field limit: 64 KiB of UTF-8.
pub const MAX_FIELD_BYTES: usize = 64 * 1024;
/// Longest tool name, in characters.
pub const MAX_TOOL_NAME_CHARS: usize = 128;
/// Call ids longer than this are rewritten to a deterministic `call_…` id.
pub const MAX_CALL_ID_CHARS: usize = 64;

/// Prefix of a failed tool result's output (not charged against the field limit).
pub const TOOL_ERROR_PREFIX: &str = "[Tool result status: error]\n";
/// Output of a successful tool result with no text.
pub const TOOL_COMPLETED_WITHOUT_TEXT: &str = "Tool completed without textual output.";
/// Output of a failed tool result with no text.
pub const TOOL_FAILED_WITHOUT_TEXT: &str = "Tool failed without textual output.";
/// The notice prepended when earlier conversation was omitted.
pub const OMITTED_CONTEXT_NOTICE: &str = "Earlier conversation was omitted to fit the finalization context. The current turn's evidence below is complete; do not infer facts that are not shown.";

/// `meta` key holding the undecorated upstream user text (preferred over the decorated text).
pub const META_UPSTREAM_TEXT: &str = "upstream_text";
/// `meta` flag marking a system/custom message as excluded from model context.
pub const META_EXCLUDE_FROM_CONTEXT: &str = "exclude_from_context";
/// `meta` flag marking a transient runtime-context carrier.
pub const META_TRANSIENT_RUNTIME_CONTEXT: &str = "transient_runtime_context";

/// The projection limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProjectionLimits {
    /// Most items.
    pub max_items: usize,
    /// Most aggregate UTF-8 JSON bytes.
    pub max_total_bytes: usize,
    /// Most UTF-8 bytes of one text field (and of one tool result's text).
    pub max_field_bytes: usize,
}

impl Default for ProjectionLimits {
    fn default() -> Self {
        Self {
            max_items: MAX_ITEMS,
            max_total_bytes: MAX_TOTAL_BYTES,
            max_field_bytes: MAX_FIELD_BYTES,
        }
    }
}

/// The closed reasons a projection or capture is rejected (never exception text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectionReason {
    /// More than the item limit in the current evidence.
    ItemLimit,
    /// More than the aggregate byte limit in the current evidence.
    ByteLimit,
    /// A text field over its limit in the current evidence.
    FieldLimit,
    /// A user message with an image.
    UnsupportedUserImage,
    /// A content part or role the projection does not support.
    UnsupportedContent,
    /// A message without usable content, or a malformed call/result.
    InvalidContent,
    /// An orphan result, duplicate call id or name mismatch.
    InvalidPairing,
    /// A call without result, or no completed result in the current evidence.
    IncompletePairing,
    /// The identity and provenance proof failed.
    ProvenanceRejected,
    /// The stored history header was malformed.
    MalformedHeader,
    /// The reader refused access.
    AccessRejected,
    /// The history changed under the read.
    SnapshotInvalidated,
    /// The capture was cancelled.
    Cancelled,
    /// No model was recorded for the turn.
    ModelUnavailable,
    /// The read failed (including an owner closure).
    HistoryReadFailed,
}

impl RejectionReason {
    /// The closed reason code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ItemLimit => "item_limit",
            Self::ByteLimit => "byte_limit",
            Self::FieldLimit => "field_limit",
            Self::UnsupportedUserImage => "unsupported_user_image",
            Self::UnsupportedContent => "unsupported_content",
            Self::InvalidContent => "invalid_content",
            Self::InvalidPairing => "invalid_pairing",
            Self::IncompletePairing => "incomplete_pairing",
            Self::ProvenanceRejected => "provenance_rejected",
            Self::MalformedHeader => "malformed_header",
            Self::AccessRejected => "access_rejected",
            Self::SnapshotInvalidated => "snapshot_invalidated",
            Self::Cancelled => "cancelled",
            Self::ModelUnavailable => "model_unavailable",
            Self::HistoryReadFailed => "history_read_failed",
        }
    }
}

impl fmt::Display for RejectionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed history read. Only an owning rejection site supplies a closed reason; any other
/// failure becomes [`RejectionReason::HistoryReadFailed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryReadError {
    /// The closed reason, when the reader owns one.
    pub reason: Option<RejectionReason>,
    /// What happened (logged, never used as a reason).
    pub message: String,
}

impl HistoryReadError {
    /// A failure without a closed reason.
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            reason: None,
            message: message.into(),
        }
    }

    fn reason(&self) -> RejectionReason {
        self.reason.unwrap_or(RejectionReason::HistoryReadFailed)
    }
}

/// A lazily read history (the active branch, oldest first).
pub trait HistorySource {
    /// The next message, `None` at the end.
    fn next_message(&mut self) -> Option<Result<AgentMessage, HistoryReadError>>;
}

impl<I> HistorySource for I
where
    I: Iterator<Item = Result<AgentMessage, HistoryReadError>>,
{
    fn next_message(&mut self) -> Option<Result<AgentMessage, HistoryReadError>> {
        self.next()
    }
}

/// One projected response item.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProjectedItem {
    /// A user message (`input_text` parts).
    User {
        /// The text parts, whitespace preserved.
        parts: Vec<String>,
    },
    /// An assistant text message (`output_text`).
    Assistant {
        /// The text, whitespace preserved.
        text: String,
    },
    /// A tool call.
    FunctionCall {
        /// The (possibly rewritten) call id.
        call_id: String,
        /// The tool name.
        name: String,
        /// The arguments, a JSON object serialized to a string.
        arguments: String,
    },
    /// A tool result.
    FunctionCallOutput {
        /// The (possibly rewritten) call id.
        call_id: String,
        /// The output text.
        output: String,
    },
}

impl ProjectedItem {
    /// The Responses-style JSON of the item.
    pub fn to_json(&self) -> Value {
        match self {
            Self::User { parts } => json!({
                "type": "message",
                "role": "user",
                "content": parts.iter().map(|t| json!({"type": "input_text", "text": t})).collect::<Vec<_>>(),
            }),
            Self::Assistant { text } => json!({
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            }),
            Self::FunctionCall {
                call_id,
                name,
                arguments,
            } => {
                json!({"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments})
            }
            Self::FunctionCallOutput { call_id, output } => {
                json!({"type": "function_call_output", "call_id": call_id, "output": output})
            }
        }
    }

    /// The UTF-8 size of the item's JSON, counted without building a buffer.
    pub fn json_size(&self) -> usize {
        struct Counter(usize);
        impl io::Write for Counter {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0 += buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut counter = Counter(0);
        // Writing a `Value` into an infallible writer cannot fail.
        let _ = serde_json::to_writer(&mut counter, &self.to_json());
        counter.0
    }
}

/// A frozen bounded projection: the items, oldest first, and whether older context was
/// omitted. Cloning shares the items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundedProjection {
    items: Arc<[ProjectedItem]>,
    omitted_prior_context: bool,
    current_start: usize,
}

impl BoundedProjection {
    /// The items, oldest first (the omission notice first when present).
    pub fn items(&self) -> &[ProjectedItem] {
        &self.items
    }

    /// The current turn's evidence (prompt through the boundary).
    pub fn current_items(&self) -> &[ProjectedItem] {
        &self.items[self.current_start..]
    }

    /// Whether older context was omitted.
    pub fn omitted_prior_context(&self) -> bool {
        self.omitted_prior_context
    }

    /// The items as a JSON array.
    pub fn to_json(&self) -> Value {
        Value::Array(self.items.iter().map(ProjectedItem::to_json).collect())
    }

    /// Aggregate UTF-8 JSON size of the items.
    pub fn total_bytes(&self) -> usize {
        self.items.iter().map(ProjectedItem::json_size).sum()
    }
}

/// Whether `name` is a valid tool name: 1–128 characters of `[A-Za-z0-9._-]`.
pub fn is_valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_TOOL_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn fnv1a64(bytes: &[u8], basis: u64) -> u64 {
    let mut hash = basis;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The deterministic `call_…` rewrite of an over-length call id (at most 64 characters): a
/// readable prefix of the original plus a 128-bit digest, so distinct ids do not collide.
pub fn rewrite_call_id(id: &str) -> String {
    let digest = format!(
        "{:016x}{:016x}",
        fnv1a64(id.as_bytes(), 0xcbf2_9ce4_8422_2325),
        fnv1a64(id.as_bytes(), 0x6c62_272e_07bb_0142)
    );
    let prefix: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .take(MAX_CALL_ID_CHARS - 5 - digest.len() - 1)
        .collect();
    format!("call_{prefix}_{digest}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Older context: over-size groups are dropped.
    Omit,
    /// Current evidence: any limit rejects.
    Reject,
}

/// Outcome of converting one message: items, or "over-size" (only in omit mode).
enum Converted {
    Items(Vec<ProjectedItem>),
    Oversize,
}

#[derive(Default)]
struct Group {
    items: Vec<ProjectedItem>,
    bytes: usize,
    oversize: bool,
}

/// The incremental projector (pairing state, budgets, groups).
struct Projector {
    limits: ProjectionLimits,
    seen_call_ids: HashSet<String>,
    pending: HashMap<String, String>,
    rewritten: HashMap<String, String>,
    prior: VecDeque<Group>,
    prior_items: usize,
    prior_bytes: usize,
    group: Group,
    omitted: bool,
    current: Vec<ProjectedItem>,
    current_bytes: usize,
    current_results: usize,
}

fn field_ok(text: &str, limit: usize) -> bool {
    text.len() <= limit
}

impl Projector {
    fn new(limits: ProjectionLimits) -> Self {
        Self {
            limits,
            seen_call_ids: HashSet::new(),
            pending: HashMap::new(),
            rewritten: HashMap::new(),
            prior: VecDeque::new(),
            prior_items: 0,
            prior_bytes: 0,
            group: Group::default(),
            omitted: false,
            current: Vec::new(),
            current_bytes: 0,
            current_results: 0,
        }
    }

    fn call_id(&mut self, id: &str) -> String {
        if id.chars().count() <= MAX_CALL_ID_CHARS {
            return id.to_owned();
        }
        self.rewritten
            .entry(id.to_owned())
            .or_insert_with(|| rewrite_call_id(id))
            .clone()
    }

    /// Validates and converts one message. Pairing is always enforced; size limits reject in
    /// reject mode and report over-size in omit mode.
    fn convert(&mut self, msg: &AgentMessage, mode: Mode) -> Result<Converted, RejectionReason> {
        let field = self.limits.max_field_bytes;
        let too_big = |mode: Mode| match mode {
            Mode::Reject => Err(RejectionReason::FieldLimit),
            Mode::Omit => Ok(Converted::Oversize),
        };
        match msg.role {
            MessageRole::User => {
                let mut parts = Vec::new();
                for block in &msg.content {
                    match block {
                        ContentBlock::Text { text } => parts.push(text.clone()),
                        ContentBlock::Image { .. } => {
                            return Err(RejectionReason::UnsupportedUserImage);
                        }
                        _ => return Err(RejectionReason::UnsupportedContent),
                    }
                }
                if let Some(upstream) = msg.meta.get(META_UPSTREAM_TEXT).and_then(Value::as_str) {
                    // The undecorated upstream text may use the whole aggregate budget.
                    if !field_ok(upstream, self.limits.max_total_bytes) {
                        return too_big(mode);
                    }
                    return Ok(Converted::Items(vec![ProjectedItem::User {
                        parts: vec![upstream.to_owned()],
                    }]));
                }
                if parts.is_empty() {
                    return Err(RejectionReason::InvalidContent);
                }
                if parts.iter().any(|p| !field_ok(p, field)) {
                    return too_big(mode);
                }
                Ok(Converted::Items(vec![ProjectedItem::User { parts }]))
            }
            MessageRole::Assistant => {
                let mut items = Vec::new();
                for block in &msg.content {
                    match block {
                        ContentBlock::Text { text } => {
                            if !field_ok(text, field) {
                                return too_big(mode);
                            }
                            items.push(ProjectedItem::Assistant { text: text.clone() });
                        }
                        ContentBlock::Thinking { .. } => {}
                        ContentBlock::ToolCall {
                            id,
                            name,
                            arguments,
                        } => {
                            if id.is_empty() || !is_valid_tool_name(name) {
                                return Err(RejectionReason::InvalidContent);
                            }
                            // Pairing state is updated before any size verdict, so a dropped
                            // group still pairs its calls and results.
                            if !self.seen_call_ids.insert(id.clone()) {
                                return Err(RejectionReason::InvalidPairing);
                            }
                            self.pending.insert(id.clone(), name.clone());
                            if !field_ok(id, field) {
                                return too_big(mode);
                            }
                            // Serializing recurses once per level: deeper arguments are refused
                            // before it.
                            if !depth_within(arguments, MAX_RESULT_DEPTH) {
                                return Err(RejectionReason::InvalidContent);
                            }
                            let arguments = match arguments {
                                Value::Object(_) => arguments.to_string(),
                                Value::String(s) => match serde_json::from_str::<Value>(s) {
                                    Ok(Value::Object(_)) => s.clone(),
                                    _ => return Err(RejectionReason::InvalidContent),
                                },
                                _ => return Err(RejectionReason::InvalidContent),
                            };
                            if !field_ok(&arguments, field) {
                                return too_big(mode);
                            }
                            let call_id = self.call_id(id);
                            items.push(ProjectedItem::FunctionCall {
                                call_id,
                                name: name.clone(),
                                arguments,
                            });
                        }
                        _ => return Err(RejectionReason::UnsupportedContent),
                    }
                }
                Ok(Converted::Items(items))
            }
            MessageRole::ToolResult => {
                let (Some(id), Some(name)) = (&msg.tool_call_id, &msg.tool_name) else {
                    return Err(RejectionReason::InvalidContent);
                };
                if id.is_empty() || !is_valid_tool_name(name) {
                    return Err(RejectionReason::InvalidContent);
                }
                match self.pending.get(id) {
                    Some(pending_name) if pending_name == name => {}
                    _ => return Err(RejectionReason::InvalidPairing),
                }
                self.pending.remove(id);
                let mut texts: Vec<String> = Vec::new();
                let mut charged = 0usize;
                for block in &msg.content {
                    let text = match block {
                        ContentBlock::Text { text } => text.clone(),
                        ContentBlock::Image { mime_type, .. } => {
                            let mime = if mime_type.is_empty() {
                                "unknown type"
                            } else {
                                mime_type.as_str()
                            };
                            format!("[Image tool result: {mime}]")
                        }
                        _ => return Err(RejectionReason::UnsupportedContent),
                    };
                    charged += text.len() + usize::from(!texts.is_empty());
                    if charged > field {
                        return too_big(mode);
                    }
                    texts.push(text);
                }
                let body = if texts.is_empty() {
                    if msg.is_error {
                        TOOL_FAILED_WITHOUT_TEXT.to_owned()
                    } else {
                        TOOL_COMPLETED_WITHOUT_TEXT.to_owned()
                    }
                } else {
                    texts.join("\n")
                };
                let output = if msg.is_error {
                    format!("{TOOL_ERROR_PREFIX}{body}")
                } else {
                    body
                };
                let call_id = self.call_id(id);
                Ok(Converted::Items(vec![ProjectedItem::FunctionCallOutput {
                    call_id,
                    output,
                }]))
            }
            _ => {
                let flag = |key: &str| msg.meta.get(key).and_then(Value::as_bool) == Some(true);
                if flag(META_EXCLUDE_FROM_CONTEXT) || flag(META_TRANSIENT_RUNTIME_CONTEXT) {
                    Ok(Converted::Items(Vec::new()))
                } else {
                    Err(RejectionReason::UnsupportedContent)
                }
            }
        }
    }

    /// Closes the open prior group: keeps it, or drops it with everything older when over-size.
    fn close_group(&mut self) {
        let group = std::mem::take(&mut self.group);
        if group.oversize {
            self.prior.clear();
            self.prior_items = 0;
            self.prior_bytes = 0;
            self.omitted = true;
            return;
        }
        if group.items.is_empty() {
            return;
        }
        self.prior_items += group.items.len();
        self.prior_bytes += group.bytes;
        self.prior.push_back(group);
        // Keep the buffer itself bounded by the limits.
        while self.prior_items > self.limits.max_items
            || self.prior_bytes > self.limits.max_total_bytes
        {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        if let Some(old) = self.prior.pop_front() {
            self.prior_items -= old.items.len();
            self.prior_bytes -= old.bytes;
            self.omitted = true;
        }
    }

    fn push_prior(&mut self, msg: &AgentMessage) -> Result<(), RejectionReason> {
        if msg.role == MessageRole::User && self.pending.is_empty() {
            self.close_group();
        }
        if self.group.oversize {
            // Keep pairing honest even inside a dropped group.
            let _ = self.convert(msg, Mode::Omit)?;
            return Ok(());
        }
        match self.convert(msg, Mode::Omit)? {
            Converted::Oversize => {
                self.group = Group {
                    oversize: true,
                    ..Group::default()
                };
            }
            Converted::Items(items) => {
                for item in items {
                    self.group.bytes += item.json_size();
                    self.group.items.push(item);
                }
                if self.group.items.len() > self.limits.max_items
                    || self.group.bytes > self.limits.max_total_bytes
                {
                    self.group = Group {
                        oversize: true,
                        ..Group::default()
                    };
                }
            }
        }
        Ok(())
    }

    fn start_current(&mut self) -> Result<(), RejectionReason> {
        if !self.pending.is_empty() {
            return Err(RejectionReason::IncompletePairing);
        }
        self.close_group();
        Ok(())
    }

    fn push_current(&mut self, msg: &AgentMessage) -> Result<(), RejectionReason> {
        let Converted::Items(items) = self.convert(msg, Mode::Reject)? else {
            return Err(RejectionReason::FieldLimit);
        };
        if msg.role == MessageRole::ToolResult {
            self.current_results += 1;
        }
        for item in items {
            if self.current.len() + 1 > self.limits.max_items {
                return Err(RejectionReason::ItemLimit);
            }
            let size = item.json_size();
            if self.current_bytes + size > self.limits.max_total_bytes {
                return Err(RejectionReason::ByteLimit);
            }
            self.current_bytes += size;
            self.current.push(item);
        }
        Ok(())
    }

    fn finish(mut self) -> Result<BoundedProjection, RejectionReason> {
        if !self.pending.is_empty() || self.current_results == 0 {
            return Err(RejectionReason::IncompletePairing);
        }
        let notice = ProjectedItem::User {
            parts: vec![OMITTED_CONTEXT_NOTICE.to_owned()],
        };
        let notice_size = notice.json_size();
        let fits = |p: &Self, with_notice: bool| {
            let (n, b) = if with_notice {
                (1, notice_size)
            } else {
                (0, 0)
            };
            p.prior_items + p.current.len() + n <= p.limits.max_items
                && p.prior_bytes + p.current_bytes + b <= p.limits.max_total_bytes
        };
        while !self.prior.is_empty() && !fits(&self, self.omitted) {
            self.drop_oldest();
        }
        let mut items = Vec::with_capacity(self.prior_items + self.current.len() + 1);
        if self.omitted && fits(&self, true) {
            items.push(notice);
        }
        for group in self.prior {
            items.extend(group.items);
        }
        let current_start = items.len();
        items.extend(self.current);
        Ok(BoundedProjection {
            items: items.into(),
            omitted_prior_context: self.omitted,
            current_start,
        })
    }
}

/// Projects a whole message list as current evidence (reject mode): every message counts,
/// nothing is trimmed, and nothing is read after the first limit hit.
pub fn project_current_evidence(
    source: impl HistorySource,
    limits: ProjectionLimits,
) -> Result<BoundedProjection, RejectionReason> {
    let mut source = source;
    let mut projector = Projector::new(limits);
    while let Some(next) = source.next_message() {
        let msg = Released(next.map_err(|e| e.reason())?);
        projector.push_current(&msg)?;
    }
    projector.finish()
}

/// The provenance inputs of [`project_settled_turn_history`] (see `docs/finalization.md`).
#[derive(Debug, Clone, Copy)]
pub struct ProvenanceInput<'a> {
    /// The native turn id.
    pub turn_id: &'a str,
    /// The settled attempt's messages, each carrying its mirror identity in `id`.
    pub settled_messages: &'a [AgentMessage],
    /// What the mirror wrote, with identities.
    pub mirrored_messages: &'a [AgentMessage],
    /// The limits.
    pub limits: ProjectionLimits,
}

/// A message read from a [`HistorySource`], dropped without recursion: its tool-call
/// arguments and metadata values may nest arbitrarily deep, and `Value`'s own drop recurses
/// once per level.
struct Released(AgentMessage);

impl std::ops::Deref for Released {
    type Target = AgentMessage;

    fn deref(&self) -> &AgentMessage {
        &self.0
    }
}

impl Drop for Released {
    fn drop(&mut self) {
        let mut stack: Vec<Value> = std::mem::take(&mut self.0.meta)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        for block in self.0.content.drain(..) {
            if let ContentBlock::ToolCall { arguments, .. } = block {
                stack.push(arguments);
            }
        }
        while let Some(v) = stack.pop() {
            match v {
                Value::Array(items) => stack.extend(items),
                Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
                _ => {}
            }
        }
    }
}

/// The mirror identity of the turn's prompt.
pub fn prompt_identity(turn_id: &str) -> String {
    format!("{turn_id}:prompt")
}

/// Whether two messages carry the same source evidence (role, content, pairing, error flag).
/// Messages whose tool-call arguments nest deeper than [`MAX_RESULT_DEPTH`] are never the same
/// (comparing them would recurse once per level).
fn same_source_evidence(a: &AgentMessage, b: &AgentMessage) -> bool {
    let shallow = |m: &AgentMessage| {
        m.content.iter().all(|block| match block {
            ContentBlock::ToolCall { arguments, .. } => depth_within(arguments, MAX_RESULT_DEPTH),
            _ => true,
        })
    };
    shallow(a)
        && shallow(b)
        && a.role == b.role
        && a.content == b.content
        && a.tool_call_id == b.tool_call_id
        && a.tool_name == b.tool_name
        && a.is_error == b.is_error
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Region {
    Prior,
    Current,
    After,
}

/// Proves the identity and provenance of the current turn while projecting the stored history
/// (see `docs/finalization.md`).
///
/// Every provenance failure is [`RejectionReason::ProvenanceRejected`]; a read error anywhere
/// (including after the boundary) rejects the whole projection.
pub fn project_settled_turn_history(
    input: ProvenanceInput<'_>,
    source: impl HistorySource,
) -> Result<BoundedProjection, RejectionReason> {
    let mut source = source;
    let reject = RejectionReason::ProvenanceRejected;
    let tool_prefix = format!("{}:tool:", input.turn_id);
    let prompt_id = prompt_identity(input.turn_id);
    // 1. The boundary: the last tool result, owned by this turn.
    let boundary = input
        .settled_messages
        .iter()
        .rposition(|m| m.role == MessageRole::ToolResult)
        .ok_or(reject)?;
    let boundary_id = input.settled_messages[boundary]
        .id
        .as_deref()
        .ok_or(reject)?;
    if !boundary_id.starts_with(&tool_prefix) {
        return Err(reject);
    }
    // 2. Required identities: present, unique, including the prompt.
    let mut required: Vec<&str> = Vec::with_capacity(boundary + 1);
    let mut unique = HashSet::new();
    for m in &input.settled_messages[..=boundary] {
        let id = m.id.as_deref().ok_or(reject)?;
        if !unique.insert(id) {
            return Err(reject);
        }
        required.push(id);
    }
    let prompt_pos = required
        .iter()
        .position(|id| *id == prompt_id)
        .ok_or(reject)?;
    // 3. The mirror: unique identities, the required prefix in order.
    let mut mirrored_unique = HashSet::new();
    let mut mirrored_ids = Vec::with_capacity(input.mirrored_messages.len());
    for m in input.mirrored_messages {
        let id = m.id.as_deref().ok_or(reject)?;
        if !mirrored_unique.insert(id) {
            return Err(reject);
        }
        mirrored_ids.push(id);
    }
    if mirrored_ids.iter().position(|id| *id == boundary_id) != Some(required.len() - 1)
        || mirrored_ids[..required.len()] != required[..]
    {
        return Err(reject);
    }
    // 4. Stream the stored history.
    let mut projector = Projector::new(input.limits);
    let mut seen: HashSet<String> = HashSet::new();
    let mut next_required = 0usize;
    let mut region = Region::Prior;
    while let Some(next) = source.next_message() {
        let msg = Released(next.map_err(|e| e.reason())?);
        if let Some(id) = msg.id.as_deref()
            && !seen.insert(id.to_owned())
        {
            return Err(reject);
        }
        if region == Region::After {
            continue;
        }
        let is_next_required =
            next_required < required.len() && msg.id.as_deref() == Some(required[next_required]);
        if !is_next_required {
            if region == Region::Prior && !msg.id.as_deref().is_some_and(|id| unique.contains(id)) {
                projector.push_prior(&msg)?;
                continue;
            }
            // A required identity out of order, or an unproven message in the current turn.
            return Err(reject);
        }
        if !same_source_evidence(&msg, &input.mirrored_messages[next_required]) {
            return Err(reject);
        }
        if next_required < prompt_pos {
            projector.push_prior(&msg)?;
        } else {
            if region == Region::Prior {
                projector.start_current()?;
                region = Region::Current;
            }
            projector.push_current(&msg)?;
        }
        next_required += 1;
        if next_required == required.len() {
            region = Region::After;
        }
    }
    // 5. The boundary must have been passed.
    if region != Region::After {
        return Err(reject);
    }
    projector.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_follow_the_charset() {
        assert!(is_valid_tool_name("codex_apps.slack.slack_send"));
        assert!(is_valid_tool_name(&"a".repeat(128)));
        assert!(!is_valid_tool_name(&"a".repeat(129)));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("bad tool"));
        assert!(!is_valid_tool_name("naïve"));
    }

    #[test]
    fn rewritten_ids_are_bounded_and_distinct() {
        let a = rewrite_call_id(&"x".repeat(83));
        let b = rewrite_call_id(&format!("{}y", "x".repeat(82)));
        assert!(a.starts_with("call_") && a.chars().count() <= 64);
        assert_ne!(a, b);
        assert_eq!(a, rewrite_call_id(&"x".repeat(83)));
    }

    #[test]
    fn json_size_matches_serialization() {
        let item = ProjectedItem::Assistant {
            text: "héllo \"x\"".into(),
        };
        assert_eq!(
            item.json_size(),
            serde_json::to_vec(&item.to_json()).unwrap().len()
        );
    }
}
