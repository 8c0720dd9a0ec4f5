//! Message-delivery facts (see `docs/tool-results.md, 'Message delivery'`).
//!
//! A [`MessageDeliveryFact`] can only be created by the readers in this module
//! ([`read_message_delivery_fact`], [`read_result_delivery_fact`],
//! [`project_plugin_message_delivery_fact`]) from a raw tool result: its fields are private and it
//! has no public constructor and no deserializer, so presentation code cannot forge one.
//! Snapshot the fact from the **original** result before any result middleware runs.

use serde_json::{Map, Value};

use super::tree::{deep_clone, drop_deep, is_truthy};

/// The state of a message send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeliveryStatus {
    /// The message was sent (the only status that means delivered).
    Settled,
    /// The send was a handled omission (suppressed or skipped).
    Suppressed,
    /// A dry run: nothing was sent.
    DryRun,
    /// The send failed or was a no-op.
    Failed,
}

impl DeliveryStatus {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "settled" => Some(Self::Settled),
            "suppressed" => Some(Self::Suppressed),
            "dryRun" => Some(Self::DryRun),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// Proof of what a messaging tool delivered. Only this module's readers create it.
///
/// Presentation code cannot forge one:
///
/// ```compile_fail
/// use tether_harness_sdk::results::delivery::{DeliveryStatus, MessageDeliveryFact};
/// let forged = MessageDeliveryFact {
///     status: DeliveryStatus::Settled,
///     partial_delivery: false,
///     created_thread_ids: Vec::new(),
///     primary_platform_message_id: None,
///     source_reply_delivered: true,
/// };
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageDeliveryFact {
    status: DeliveryStatus,
    partial_delivery: bool,
    created_thread_ids: Vec<String>,
    primary_platform_message_id: Option<String>,
    source_reply_delivered: bool,
}

impl MessageDeliveryFact {
    fn new(status: DeliveryStatus) -> Self {
        Self {
            status,
            partial_delivery: false,
            created_thread_ids: Vec::new(),
            primary_platform_message_id: None,
            source_reply_delivered: false,
        }
    }

    /// The status.
    pub fn status(&self) -> DeliveryStatus {
        self.status
    }

    /// Whether part of the message was delivered before an error.
    pub fn partial_delivery(&self) -> bool {
        self.partial_delivery
    }

    /// Threads or topics the send created.
    pub fn created_thread_ids(&self) -> &[String] {
        &self.created_thread_ids
    }

    /// The platform id of the first delivered message.
    pub fn primary_platform_message_id(&self) -> Option<&str> {
        self.primary_platform_message_id.as_deref()
    }

    /// Whether the send delivered the current source reply (settled, complete sends only).
    pub fn source_reply_delivered(&self) -> bool {
        self.source_reply_delivered
    }

    /// The consumer rule: delivered ⇔ settled and (no tool error, or partial delivery proven).
    /// A tool error never erases partial-delivery evidence.
    pub fn is_delivered(&self, is_error: bool) -> bool {
        self.status == DeliveryStatus::Settled && (!is_error || self.partial_delivery)
    }
}

/// The strict reader of a serialized fact (the value of `details.messageDelivery`).
///
/// Valid only when: an object; `status` exactly one of `settled`, `suppressed`, `dryRun`,
/// `failed`; `partialDelivery` a boolean; `createdThreadIds` an array of strings;
/// `primaryPlatformMessageId` absent or a string (kept when non-empty). `sourceReplyDelivered`
/// survives only on a complete settled send. Every other key is dropped.
pub fn read_message_delivery_fact(value: &Value) -> Option<MessageDeliveryFact> {
    let obj = value.as_object()?;
    let status = DeliveryStatus::parse(obj.get("status")?.as_str()?)?;
    let partial_delivery = obj.get("partialDelivery")?.as_bool()?;
    let ids = obj.get("createdThreadIds")?.as_array()?;
    let mut created_thread_ids = Vec::with_capacity(ids.len());
    for id in ids {
        created_thread_ids.push(id.as_str()?.to_owned());
    }
    let primary_platform_message_id = match obj.get("primaryPlatformMessageId") {
        None => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return None,
    };
    let source_reply_delivered = status == DeliveryStatus::Settled
        && !partial_delivery
        && obj.get("sourceReplyDelivered") == Some(&Value::Bool(true));
    Some(MessageDeliveryFact {
        status,
        partial_delivery,
        created_thread_ids,
        primary_platform_message_id,
        source_reply_delivered,
    })
}

/// Reads the fact a core message tool attached at `result.details.messageDelivery`.
pub fn read_result_delivery_fact(result: &Value) -> Option<MessageDeliveryFact> {
    read_message_delivery_fact(result.get("details")?.get("messageDelivery")?)
}

impl MessageDeliveryFact {
    /// The serialized form read back by [`read_message_delivery_fact`].
    pub fn to_json(&self) -> Value {
        let status = match self.status {
            DeliveryStatus::Settled => "settled",
            DeliveryStatus::Suppressed => "suppressed",
            DeliveryStatus::DryRun => "dryRun",
            DeliveryStatus::Failed => "failed",
        };
        let mut out = Map::new();
        out.insert("status".into(), Value::from(status));
        out.insert("partialDelivery".into(), Value::Bool(self.partial_delivery));
        out.insert(
            "createdThreadIds".into(),
            Value::Array(
                self.created_thread_ids
                    .iter()
                    .cloned()
                    .map(Value::String)
                    .collect(),
            ),
        );
        if let Some(id) = &self.primary_platform_message_id {
            out.insert("primaryPlatformMessageId".into(), Value::String(id.clone()));
        }
        if self.source_reply_delivered {
            out.insert("sourceReplyDelivered".into(), Value::Bool(true));
        }
        Value::Object(out)
    }
}

/// Returns a copy of a core message-tool result with `details.messageDelivery` set to `fact`,
/// or — without a fact — with any pre-existing `details.messageDelivery` removed, so a tool
/// cannot forge one. Non-object results are returned unchanged.
pub fn attach_message_delivery_fact(result: &Value, fact: Option<&MessageDeliveryFact>) -> Value {
    let Some(obj) = result.as_object() else {
        return deep_clone(result);
    };
    let mut out: Map<String, Value> = obj
        .iter()
        .map(|(k, v)| (k.clone(), deep_clone(v)))
        .collect();
    let details = out.get_mut("details").and_then(Value::as_object_mut);
    match (details, fact) {
        (Some(d), Some(f)) => {
            if let Some(old) = d.insert("messageDelivery".into(), f.to_json()) {
                drop_deep(old);
            }
        }
        (Some(d), None) => {
            if let Some(old) = d.remove("messageDelivery") {
                drop_deep(old);
            }
        }
        (None, Some(f)) => {
            let mut d = Map::new();
            d.insert("messageDelivery".into(), f.to_json());
            if let Some(old) = out.insert("details".into(), Value::Object(d)) {
                drop_deep(old);
            }
        }
        (None, None) => {}
    }
    Value::Object(out)
}

/// Plugin envelopes are scanned at most this deep.
pub const MAX_ENVELOPE_DEPTH: usize = 4;

const NESTED_KEYS: &[&str] = &[
    "details",
    "payload",
    "result",
    "results",
    "sendResult",
    "toolResult",
];

/// What a plugin result envelope signals (any node matching counts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Signals {
    dry_run: bool,
    failure: bool,
    partial: bool,
    conversation: bool,
    non_delivery: bool,
    no_op: bool,
    delivery_id: Option<String>,
    delivery: bool,
    ok: bool,
    thread_ids: Vec<String>,
}

fn normalized_status(obj: &Map<String, Value>) -> Option<String> {
    let norm = |k: &str| {
        obj.get(k)
            .and_then(Value::as_str)
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty())
    };
    norm("deliveryStatus").or_else(|| norm("status"))
}

fn id_string(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.trim().to_owned()).filter(|s| !s.is_empty()),
        Value::Number(n) => n.as_f64().filter(|f| f.is_finite()).map(|_| n.to_string()),
        _ => None,
    }
}

fn is_sentinel_id(id: &str) -> bool {
    matches!(id.to_ascii_lowercase().as_str(), "skipped" | "suppressed")
}

fn scan(value: &Value) -> Signals {
    let mut signals = Signals::default();
    visit(value, 0, &mut signals);
    signals
}

fn visit(value: &Value, depth: usize, s: &mut Signals) {
    if depth > MAX_ENVELOPE_DEPTH {
        return;
    }
    match value {
        Value::Array(items) => {
            for item in items {
                visit(item, depth + 1, s);
            }
        }
        Value::Object(obj) => {
            visit_record(obj, depth, s);
        }
        _ => {}
    }
}

fn visit_record(obj: &Map<String, Value>, depth: usize, s: &mut Signals) {
    let status = normalized_status(obj);
    let status = status.as_deref();
    let is = |k: &str, b: bool| obj.get(k) == Some(&Value::Bool(b));
    let text = obj
        .get("text")
        .and_then(Value::as_str)
        .map(|t| t.trim().to_ascii_lowercase());

    if is("dryRun", true) || status == Some("dry_run") {
        s.dry_run = true;
    }
    if is("ok", false)
        || is("success", false)
        || is("isError", true)
        || is("delivered", false)
        || is("complete", false)
        || obj.get("error").is_some_and(is_truthy)
        || matches!(
            status,
            Some(
                "error"
                    | "incomplete"
                    | "partial_failed"
                    | "dry_run"
                    | "failed"
                    | "skipped"
                    | "suppressed"
            )
        )
    {
        s.failure = true;
    }
    if is("sentBeforeError", true)
        || is("visibleReplySent", true)
        || status == Some("partial_failed")
    {
        s.partial = true;
    }
    let thread_id_of = |v: Option<&Value>| id_string(v);
    let mut threads = Vec::new();
    for k in ["topicId", "threadId", "messageThreadId"] {
        threads.extend(thread_id_of(obj.get(k)));
    }
    threads.extend(thread_id_of(obj.get("thread").and_then(|t| t.get("id"))));
    if !threads.is_empty() {
        s.conversation = true;
    }
    if let Some(receipt) = obj.get("receipt").and_then(Value::as_object) {
        threads.extend(thread_id_of(receipt.get("threadId")));
        if let Some(parts) = receipt.get("parts").and_then(Value::as_array) {
            threads.extend(parts.iter().filter_map(|p| thread_id_of(p.get("threadId"))));
        }
    }
    for t in threads {
        if !s.thread_ids.contains(&t) {
            s.thread_ids.push(t);
        }
    }
    let message_id = id_string(obj.get("messageId"));
    if message_id.as_deref().is_some_and(is_sentinel_id)
        || matches!(status, Some("failed" | "skipped" | "suppressed"))
    {
        s.non_delivery = true;
    }
    let removed_noop = match obj.get("removed") {
        Some(Value::Null | Value::Bool(false)) => true,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    };
    if removed_noop
        || [
            "applied", "changed", "created", "deleted", "sent", "updated",
        ]
        .iter()
        .any(|k| is(k, false))
        || matches!(status, Some("noop" | "no_op" | "not_found"))
    {
        s.no_op = true;
    }
    let id = [
        message_id,
        id_string(obj.get("pollId")),
        id_string(obj.get("message").and_then(|m| m.get("id"))),
    ]
    .into_iter()
    .flatten()
    .find(|id| !is_sentinel_id(id));
    if let Some(id) = id {
        s.delivery = true;
        if s.delivery_id.is_none() {
            s.delivery_id = Some(id);
        }
    }
    if status == Some("sent") || text.as_deref() == Some("sent") {
        s.delivery = true;
    }
    if is("ok", true) || text.as_deref() == Some("ok") {
        s.ok = true;
    }
    // Nested envelopes.
    if let Some(raw) = obj.get("text").and_then(Value::as_str)
        && raw.trim().starts_with('{')
        && let Ok(parsed @ Value::Object(_)) = serde_json::from_str::<Value>(raw.trim())
    {
        visit(&parsed, depth + 1, s);
    }
    if let Some(Value::Array(items)) = obj.get("content") {
        for item in items {
            visit(item, depth + 1, s);
        }
    }
    for key in NESTED_KEYS {
        if let Some(child) = obj.get(*key) {
            visit(child, depth + 1, s);
        }
    }
}

/// Projects a legacy plugin envelope onto a fact (first rule wins): dry run → `dryRun`;
/// partial delivery → settled + partial; non-delivery → `suppressed`; no-op or failure →
/// `failed`; neither a delivery nor an `ok` signal → `None`; else `settled` with the first
/// platform message id and the created thread ids. An error beats a message id unless
/// partial delivery is proven.
pub fn project_plugin_message_delivery_fact(value: &Value) -> Option<MessageDeliveryFact> {
    let s = scan(value);
    let fact = if s.dry_run {
        MessageDeliveryFact::new(DeliveryStatus::DryRun)
    } else if s.partial {
        let mut f = MessageDeliveryFact::new(DeliveryStatus::Settled);
        f.partial_delivery = true;
        f
    } else if s.non_delivery {
        MessageDeliveryFact::new(DeliveryStatus::Suppressed)
    } else if s.no_op || s.failure {
        MessageDeliveryFact::new(DeliveryStatus::Failed)
    } else if !(s.delivery || s.ok) {
        return None;
    } else {
        let mut f = MessageDeliveryFact::new(DeliveryStatus::Settled);
        f.primary_platform_message_id = s.delivery_id;
        f.created_thread_ids = s.thread_ids;
        f
    };
    Some(fact)
}

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

const READ_ONLY_MESSAGE_ACTIONS: &[&str] = &[
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

const CONVERSATION_CREATE_ACTIONS: &[&str] = &[
    "thread-create",
    "topic-create",
    "threadcreate",
    "createforumtopic",
];

fn normalize_tool_name(name: &str) -> String {
    name.trim().to_ascii_lowercase()
}

fn action_of(args: Option<&Value>) -> Option<String> {
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

fn record_str(obj: &Map<String, Value>, keys: &[&str]) -> Option<String> {
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

/// The inputs of [`is_delivered_message_tool_only_source_reply`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceReplyQuery<'a> {
    /// The route's source-reply delivery mode (`message_tool_only`).
    pub source_reply_delivery_mode: Option<&'a str>,
    /// The tool name.
    pub tool_name: Option<&'a str>,
    /// The executed arguments.
    pub args: Option<&'a Value>,
    /// The original result.
    pub result: Option<&'a Value>,
    /// The hook-adjusted result.
    pub hook_result: Option<&'a Value>,
    /// Whether the tool reported an error.
    pub is_error: bool,
    /// The delivery fact snapshotted before middleware.
    pub fact: Option<&'a MessageDeliveryFact>,
    /// The send was proven to target the current source (see
    /// [`is_delivered_messaging_tool_send_to_current_source`]).
    pub allow_explicit_source_route: bool,
    /// An explicit confirmation from the caller, which wins over everything else.
    pub delivery_confirmed: Option<bool>,
}

const SOURCE_SEND_ACTIONS: &[&str] = &[
    "send",
    "thread-reply",
    "sendwitheffect",
    "sendattachment",
    "upload-file",
];
const EXPLICIT_ROUTE_ACTIONS: &[&str] = &["reply", "thread-reply", "poll"];
const EXPLICIT_ROUTE_KEYS: &[&str] = &["channel", "target", "to", "channelId", "provider"];

fn current_source_route_marker(value: Option<&Value>) -> bool {
    value
        .and_then(|v| v.get("details"))
        .and_then(|d| d.get("sourceReplyRoute"))
        .and_then(Value::as_str)
        == Some("current-source")
}

/// Whether a `message` tool call delivered the run's source reply (so the final assistant
/// reply must not be sent again).
pub fn is_delivered_message_tool_only_source_reply(q: &SourceReplyQuery<'_>) -> bool {
    let confirmed_route = q
        .fact
        .is_some_and(MessageDeliveryFact::source_reply_delivered)
        || current_source_route_marker(q.result)
        || current_source_route_marker(q.hook_result);
    if q.source_reply_delivery_mode != Some("message_tool_only") && !confirmed_route {
        return false;
    }
    if normalize_tool_name(q.tool_name.unwrap_or("message")) != "message" {
        return false;
    }
    let explicit_ok = q.allow_explicit_source_route || confirmed_route;
    let Some(action) = action_of(q.args) else {
        return false;
    };
    let action_ok = SOURCE_SEND_ACTIONS.contains(&action.as_str())
        || (explicit_ok && EXPLICIT_ROUTE_ACTIONS.contains(&action.as_str()));
    if !action_ok {
        return false;
    }
    let has_explicit_route = q.args.and_then(Value::as_object).is_some_and(|a| {
        EXPLICIT_ROUTE_KEYS.iter().any(|k| {
            a.get(*k)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.trim().is_empty())
        }) || a
            .get("targets")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty())
    });
    if has_explicit_route && !explicit_ok {
        return false;
    }
    if let Some(confirmed) = q.delivery_confirmed {
        return confirmed;
    }
    if let Some(fact) = q.fact {
        return fact.is_delivered(q.is_error);
    }
    is_delivered_messaging_tool_result(&MessagingToolResult {
        tool_name: Some("message"),
        args: q.args,
        result: q.result,
        hook_result: q.hook_result,
        is_error: q.is_error,
        ..MessagingToolResult::default()
    })
}

/// The fixed result that replaces a confirmed send whose result middleware failed; `None`
/// when the send is not confirmed (settled fact, or without a fact a delivery with a platform id).
pub fn middleware_failure_fallback(
    fact: Option<&MessageDeliveryFact>,
    original: &MessagingToolResult<'_>,
) -> Option<Value> {
    let confirmed = match fact {
        Some(f) => f.status == DeliveryStatus::Settled,
        None => is_delivered_messaging_tool_result(&MessagingToolResult {
            require_plugin_delivery_id: true,
            ..*original
        }),
    };
    confirmed.then(|| {
        serde_json::json!({
            "content": [{"type": "text", "text": "Message delivered, but result post-processing failed."}],
            "details": {"ok": true, "deliveryStatus": "sent", "middlewareWarning": "post-processing failed"},
        })
    })
}

/// One attachment of a source reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceReplyAttachment {
    /// A local path.
    pub path: Option<String>,
    /// A URL.
    pub url: Option<String>,
    /// A media URL.
    pub media_url: Option<String>,
    /// A file path.
    pub file_path: Option<String>,
    /// The MIME type.
    pub mime_type: Option<String>,
    /// A display name.
    pub name: Option<String>,
    /// Whether the media is trusted local media.
    pub trusted_local_media: Option<bool>,
    /// Duration in milliseconds.
    pub duration_ms: Option<f64>,
    /// Width in pixels.
    pub width: Option<f64>,
    /// Height in pixels.
    pub height: Option<f64>,
}

/// A source reply a messaging tool delivered to an internal UI sink. Only
/// [`extract_messaging_tool_source_reply_payload`] creates it, so
/// [`SourceReplyPayload::transcript_owner`] cannot be forged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceReplyPayload {
    /// The text.
    pub text: Option<String>,
    /// The first media URL.
    pub media_url: Option<String>,
    /// All media URLs (strings only).
    pub media_urls: Vec<String>,
    /// Attachments with their metadata.
    pub attachments: Vec<SourceReplyAttachment>,
    /// Whether the media is trusted local media.
    pub trusted_local_media: Option<bool>,
    /// Whether audio is sent as a voice note.
    pub audio_as_voice: bool,
    /// Rich presentation, as given.
    pub presentation: Option<Value>,
    /// Legacy interactive payload.
    pub interactive: Option<Value>,
    /// Channel-specific data (shallow copy).
    pub channel_data: Option<Map<String, Value>>,
    /// The idempotency key.
    pub idempotency_key: Option<String>,
    transcript_owner: bool,
}

impl SourceReplyPayload {
    /// The JSON form recorded in `DeliveryState::messaging_tool_source_reply_payloads`.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                out.insert(k.to_owned(), v);
            }
        };
        put("text", self.text.clone().map(Value::String));
        put("mediaUrl", self.media_url.clone().map(Value::String));
        put(
            "mediaUrls",
            (!self.media_urls.is_empty()).then(|| {
                Value::Array(self.media_urls.iter().cloned().map(Value::String).collect())
            }),
        );
        put(
            "attachments",
            (!self.attachments.is_empty()).then(|| {
                Value::Array(
                    self.attachments
                        .iter()
                        .map(|a| {
                            let mut m = Map::new();
                            for (k, v) in [
                                ("path", &a.path),
                                ("url", &a.url),
                                ("mediaUrl", &a.media_url),
                                ("filePath", &a.file_path),
                                ("mimeType", &a.mime_type),
                                ("name", &a.name),
                            ] {
                                if let Some(v) = v {
                                    m.insert(k.into(), Value::String(v.clone()));
                                }
                            }
                            if let Some(t) = a.trusted_local_media {
                                m.insert("trustedLocalMedia".into(), Value::Bool(t));
                            }
                            for (k, v) in [
                                ("durationMs", a.duration_ms),
                                ("width", a.width),
                                ("height", a.height),
                            ] {
                                if let Some(n) = v.and_then(serde_json::Number::from_f64) {
                                    m.insert(k.into(), Value::Number(n));
                                }
                            }
                            Value::Object(m)
                        })
                        .collect(),
                )
            }),
        );
        put(
            "trustedLocalMedia",
            self.trusted_local_media.map(Value::Bool),
        );
        put(
            "audioAsVoice",
            self.audio_as_voice.then_some(Value::Bool(true)),
        );
        put("presentation", self.presentation.clone());
        put("interactive", self.interactive.clone());
        put("channelData", self.channel_data.clone().map(Value::Object));
        put(
            "idempotencyKey",
            self.idempotency_key.clone().map(Value::String),
        );
        put(
            "transcriptOwner",
            self.transcript_owner.then_some(Value::Bool(true)),
        );
        Value::Object(out)
    }

    /// Whether the tool confirmed it owns the transcript entry of this reply
    /// (`details.sourceReplyTranscriptOwner === true` on the raw result).
    pub fn transcript_owner(&self) -> bool {
        self.transcript_owner
    }

    fn is_empty(&self) -> bool {
        self.text.is_none()
            && self.media_url.is_none()
            && self.media_urls.is_empty()
            && self.attachments.is_empty()
            && self.trusted_local_media.is_none()
            && !self.audio_as_voice
            && self.presentation.is_none()
            && self.interactive.is_none()
            && self.channel_data.is_none()
            && self.idempotency_key.is_none()
            && !self.transcript_owner
    }
}

fn str_field(obj: &Map<String, Value>, key: &str) -> Option<String> {
    obj.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn non_negative(obj: &Map<String, Value>, key: &str) -> Option<f64> {
    obj.get(key)
        .and_then(Value::as_f64)
        .filter(|f| f.is_finite() && *f >= 0.0)
}

/// Extracts the source reply a messaging tool delivered to the internal UI sink
/// (`details.sourceReplySink == "internal-ui"` and `details.deliveryStatus` absent or `sent`).
pub fn extract_messaging_tool_source_reply_payload(result: &Value) -> Option<SourceReplyPayload> {
    let details = result.get("details")?.as_object()?;
    if details.get("sourceReplySink").and_then(Value::as_str) != Some("internal-ui") {
        return None;
    }
    match details.get("deliveryStatus") {
        None => {}
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("sent") => {}
        Some(_) => return None,
    }
    let source = details
        .get("sourceReply")
        .and_then(Value::as_object)
        .unwrap_or(details);
    let from_either = |key: &str| source.get(key).or_else(|| details.get(key));
    let mut payload = SourceReplyPayload {
        text: str_field(source, "text").or_else(|| str_field(details, "message")),
        media_url: from_either("mediaUrl")
            .and_then(Value::as_str)
            .map(str::to_owned),
        ..SourceReplyPayload::default()
    };
    if let Some(urls) = from_either("mediaUrls").and_then(Value::as_array) {
        payload.media_urls = urls
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
    }
    if let Some(items) = source.get("attachments").and_then(Value::as_array) {
        for item in items.iter().filter_map(Value::as_object) {
            payload.attachments.push(SourceReplyAttachment {
                path: str_field(item, "path"),
                url: str_field(item, "url"),
                media_url: str_field(item, "mediaUrl"),
                file_path: str_field(item, "filePath"),
                mime_type: str_field(item, "mimeType"),
                name: str_field(item, "name"),
                trusted_local_media: item.get("trustedLocalMedia").and_then(Value::as_bool),
                duration_ms: non_negative(item, "durationMs"),
                width: non_negative(item, "width"),
                height: non_negative(item, "height"),
            });
        }
    }
    payload.trusted_local_media = source.get("trustedLocalMedia").and_then(Value::as_bool);
    payload.audio_as_voice = [source, details]
        .iter()
        .any(|o| o.get("audioAsVoice") == Some(&Value::Bool(true)));
    payload.presentation = source
        .get("presentation")
        .filter(|p| p.is_object())
        .cloned();
    payload.interactive = source.get("interactive").filter(|p| !p.is_null()).cloned();
    payload.channel_data = source
        .get("channelData")
        .and_then(Value::as_object)
        .cloned();
    payload.idempotency_key = from_either("idempotencyKey")
        .and_then(Value::as_str)
        .map(str::to_owned);
    payload.transcript_owner =
        details.get("sourceReplyTranscriptOwner") == Some(&Value::Bool(true));
    (!payload.is_empty()).then_some(payload)
}

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
