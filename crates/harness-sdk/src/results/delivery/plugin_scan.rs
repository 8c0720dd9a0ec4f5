//! The plugin envelope scan: a channel plugin's tool result projected into a delivery fact
//! ([`project_plugin_message_delivery_fact`]), envelopes read at most [`MAX_ENVELOPE_DEPTH`] deep.

use serde_json::{Map, Value};

use super::*;

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
pub(super) struct Signals {
    pub(super) dry_run: bool,
    pub(super) failure: bool,
    pub(super) partial: bool,
    pub(super) conversation: bool,
    pub(super) non_delivery: bool,
    pub(super) no_op: bool,
    pub(super) delivery_id: Option<String>,
    pub(super) delivery: bool,
    pub(super) ok: bool,
    pub(super) thread_ids: Vec<String>,
}

pub(super) fn normalized_status(obj: &Map<String, Value>) -> Option<String> {
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

pub(super) fn scan(value: &Value) -> Signals {
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
