//! Message-delivery facts (see `docs/tool-results.md, 'Message delivery'`).
//!
//! A [`MessageDeliveryFact`] can only be created by the readers in this module
//! ([`read_message_delivery_fact`], [`read_result_delivery_fact`],
//! [`project_plugin_message_delivery_fact`]) from a raw tool result: its fields are private and it
//! has no public constructor and no deserializer, so presentation code cannot forge one.
//! Snapshot the fact from the **original** result before any result middleware runs.

mod actions;
mod classify;
mod plugin_scan;
mod recording;
mod routing;
mod source_reply;

use serde_json::{Map, Value};

pub use self::actions::*;
pub use self::classify::*;
use self::classify::{
    CONVERSATION_CREATE_ACTIONS, READ_ONLY_MESSAGE_ACTIONS, action_of, normalize_tool_name,
};
pub use self::plugin_scan::*;
use self::plugin_scan::{Signals, normalized_status, scan};
pub use self::recording::*;
use self::routing::record_str;
pub use self::routing::*;
pub use self::source_reply::*;
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
