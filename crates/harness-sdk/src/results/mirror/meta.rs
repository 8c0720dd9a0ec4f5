//! Typed user-turn metadata and the wire key that carries it on a JSON message.

use std::borrow::Cow;

use serde_json::{Map, Value};
use tether_core::TextError;

use super::super::tree::{deep_clone, deep_equal, drop_deep, is_truthy};

/// OpenClaw's wire key: the message field that holds the host's operational metadata.
pub const META_KEY: &str = "__openclaw";

/// The longest accepted `steerTargetRunId`, in characters.
pub const STEER_TARGET_RUN_ID_MAX_CHARS: usize = 512;

/// The longest accepted wire key, in bytes.
pub const MAX_META_KEY_LEN: usize = 64;

/// The wire names of the typed fields of [`UserTurnMeta`] (OpenClaw's spelling).
pub mod wire {
    /// [`UserTurnMeta::sender_is_owner`](super::UserTurnMeta::sender_is_owner).
    pub const SENDER_IS_OWNER: &str = "senderIsOwner";
    /// [`UserTurnMeta::intent`](super::UserTurnMeta::intent).
    pub const INTENT: &str = "intent";
    /// [`UserTurnMeta::auto_steer`](super::UserTurnMeta::auto_steer).
    pub const AUTO_STEER: &str = "autoSteer";
    /// [`UserTurnMeta::steer_target_run_id`](super::UserTurnMeta::steer_target_run_id).
    pub const STEER_TARGET_RUN_ID: &str = "steerTargetRunId";
    /// [`UserTurnMeta::human_mentions`](super::UserTurnMeta::human_mentions).
    pub const HUMAN_MENTIONS: &str = "humanMentions";
    /// [`UserTurnMeta::late_media`](super::UserTurnMeta::late_media).
    pub const LATE_MEDIA: &str = "lateMedia";
    /// [`UserTurnMeta::before_agent_run_blocked`](super::UserTurnMeta::before_agent_run_blocked).
    pub const BEFORE_AGENT_RUN_BLOCKED: &str = "beforeAgentRunBlocked";
}

/// The host's operational metadata of a user turn, typed. On a JSON message it is one object
/// under the [`MetaKey`] (OpenClaw: `__openclaw`), with the field names of [`wire`].
///
/// Reading is lossless: a known field whose wire value has another type than the typed field
/// (say `"senderIsOwner": "yes"`) stays in [`other`](Self::other) under its wire name, so
/// [`MetaKey::read`] followed by [`MetaKey::write`] gives back the same object. Values of any
/// nesting depth are copied, compared and dropped without recursion.
///
/// ```
/// use serde_json::json;
/// use tether_harness_sdk::results::mirror::{MetaKey, UserTurnMeta};
///
/// let meta = UserTurnMeta::default()
///     .with_sender_is_owner(true)
///     .with_steer_target_run_id("run-7");
/// let mut message = json!({"role": "user", "content": "deploy"});
/// MetaKey::OPENCLAW.write(&mut message, &meta);
/// assert_eq!(message["__openclaw"], json!({"senderIsOwner": true, "steerTargetRunId": "run-7"}));
/// assert_eq!(MetaKey::OPENCLAW.read(&message), Some(meta));
/// ```
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct UserTurnMeta {
    /// `senderIsOwner`: whether the sender owns the agent. Restored only from the host's
    /// prepared snapshot: a hook can neither grant nor keep it.
    pub sender_is_owner: Option<bool>,
    /// `intent`: the host's classification of the turn (any JSON). Restored from the prepared
    /// snapshot when truthy; a hook's is dropped.
    pub intent: Option<Value>,
    /// `autoSteer`: the producer's advice about automatic steering (any JSON). Restored like
    /// `intent`.
    pub auto_steer: Option<Value>,
    /// `steerTargetRunId`: the run this turn steers. Restored from the prepared snapshot when,
    /// trimmed, it is non-empty and at most [`STEER_TARGET_RUN_ID_MAX_CHARS`] characters.
    pub steer_target_run_id: Option<String>,
    /// `humanMentions`: the mentions the user selected in the text (any JSON). Restored from
    /// the prepared snapshot only while the message content is exactly the prepared content.
    pub human_mentions: Option<Value>,
    /// `lateMedia`: `true` on the separate message that holds media resolved after the prompt
    /// reached the provider. Such a message never announces the original input.
    pub late_media: Option<bool>,
    /// `beforeAgentRunBlocked`: present (any JSON) when a before-run hook blocked the turn;
    /// such a message never announces the original input.
    pub before_agent_run_blocked: Option<Value>,
    /// Every other field (for example OpenClaw's `senderId`, `senderName`), kept as it is.
    pub other: Map<String, Value>,
}

impl Clone for UserTurnMeta {
    fn clone(&self) -> Self {
        Self {
            sender_is_owner: self.sender_is_owner,
            intent: self.intent.as_ref().map(deep_clone),
            auto_steer: self.auto_steer.as_ref().map(deep_clone),
            steer_target_run_id: self.steer_target_run_id.clone(),
            human_mentions: self.human_mentions.as_ref().map(deep_clone),
            late_media: self.late_media,
            before_agent_run_blocked: self.before_agent_run_blocked.as_ref().map(deep_clone),
            other: clone_map(&self.other),
        }
    }
}

impl PartialEq for UserTurnMeta {
    fn eq(&self, other: &Self) -> bool {
        let same = |a: &Option<Value>, b: &Option<Value>| match (a, b) {
            (Some(a), Some(b)) => deep_equal(a, b),
            (None, None) => true,
            _ => false,
        };
        self.sender_is_owner == other.sender_is_owner
            && same(&self.intent, &other.intent)
            && same(&self.auto_steer, &other.auto_steer)
            && self.steer_target_run_id == other.steer_target_run_id
            && same(&self.human_mentions, &other.human_mentions)
            && self.late_media == other.late_media
            && same(
                &self.before_agent_run_blocked,
                &other.before_agent_run_blocked,
            )
            && self.other.len() == other.other.len()
            && self
                .other
                .iter()
                .all(|(k, v)| other.other.get(k).is_some_and(|w| deep_equal(v, w)))
    }
}

impl Drop for UserTurnMeta {
    fn drop(&mut self) {
        for value in [
            self.intent.take(),
            self.auto_steer.take(),
            self.human_mentions.take(),
            self.before_agent_run_blocked.take(),
        ]
        .into_iter()
        .flatten()
        {
            drop_deep(value);
        }
        std::mem::take(&mut self.other)
            .into_iter()
            .for_each(|(_, v)| drop_deep(v));
    }
}

fn clone_map(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .map(|(k, v)| (k.clone(), deep_clone(v)))
        .collect()
}

/// Replaces `slot` with `value`, dropping the old value without recursion.
fn replace_value(slot: &mut Option<Value>, value: Option<Value>) {
    if let Some(old) = std::mem::replace(slot, value) {
        drop_deep(old);
    }
}

/// `value` when it is truthy; otherwise it is dropped without recursion.
fn truthy(value: Option<Value>) -> Option<Value> {
    match value {
        Some(v) if is_truthy(&v) => Some(v),
        Some(v) => {
            drop_deep(v);
            None
        }
        None => None,
    }
}

impl UserTurnMeta {
    /// Sets [`sender_is_owner`](Self::sender_is_owner).
    #[must_use]
    pub fn with_sender_is_owner(mut self, owner: bool) -> Self {
        self.sender_is_owner = Some(owner);
        self
    }

    /// Sets [`intent`](Self::intent).
    #[must_use]
    pub fn with_intent(mut self, intent: Value) -> Self {
        replace_value(&mut self.intent, Some(intent));
        self
    }

    /// Sets [`auto_steer`](Self::auto_steer).
    #[must_use]
    pub fn with_auto_steer(mut self, advice: Value) -> Self {
        replace_value(&mut self.auto_steer, Some(advice));
        self
    }

    /// Sets [`steer_target_run_id`](Self::steer_target_run_id).
    #[must_use]
    pub fn with_steer_target_run_id(mut self, run_id: impl Into<String>) -> Self {
        self.steer_target_run_id = Some(run_id.into());
        self
    }

    /// Sets [`human_mentions`](Self::human_mentions).
    #[must_use]
    pub fn with_human_mentions(mut self, mentions: Value) -> Self {
        replace_value(&mut self.human_mentions, Some(mentions));
        self
    }

    /// Sets a field this type does not interpret ([`other`](Self::other)).
    #[must_use]
    pub fn with_other(mut self, name: impl Into<String>, value: Value) -> Self {
        if let Some(old) = self.other.insert(name.into(), value) {
            drop_deep(old);
        }
        self
    }

    /// Whether no field is set (such metadata is not written at all).
    pub fn is_empty(&self) -> bool {
        self.sender_is_owner.is_none()
            && self.intent.is_none()
            && self.auto_steer.is_none()
            && self.steer_target_run_id.is_none()
            && self.human_mentions.is_none()
            && self.late_media.is_none()
            && self.before_agent_run_blocked.is_none()
            && self.other.is_empty()
    }

    /// The typed view of a wire object (copied; `wire` is not changed).
    pub fn from_wire(wire: &Map<String, Value>) -> Self {
        let mut meta = Self::default();
        for (name, value) in wire {
            let value = deep_clone(value);
            match (name.as_str(), value) {
                (wire::SENDER_IS_OWNER, Value::Bool(b)) => meta.sender_is_owner = Some(b),
                (wire::INTENT, v) => meta.intent = Some(v),
                (wire::AUTO_STEER, v) => meta.auto_steer = Some(v),
                (wire::STEER_TARGET_RUN_ID, Value::String(s)) => {
                    meta.steer_target_run_id = Some(s);
                }
                (wire::HUMAN_MENTIONS, v) => meta.human_mentions = Some(v),
                (wire::LATE_MEDIA, Value::Bool(b)) => meta.late_media = Some(b),
                (wire::BEFORE_AGENT_RUN_BLOCKED, v) => meta.before_agent_run_blocked = Some(v),
                (_, v) => {
                    meta.other.insert(name.clone(), v);
                }
            }
        }
        meta
    }

    /// The wire object (a copy).
    pub fn to_wire(&self) -> Map<String, Value> {
        self.clone().into_wire()
    }

    /// The wire object, consuming the metadata.
    pub fn into_wire(mut self) -> Map<String, Value> {
        let mut out = std::mem::take(&mut self.other);
        let mut put = |name: &str, value: Option<Value>| {
            if let Some(v) = value
                && let Some(old) = out.insert(name.to_owned(), v)
            {
                drop_deep(old);
            }
        };
        put(wire::SENDER_IS_OWNER, self.sender_is_owner.map(Value::Bool));
        put(wire::INTENT, self.intent.take());
        put(wire::AUTO_STEER, self.auto_steer.take());
        put(
            wire::STEER_TARGET_RUN_ID,
            self.steer_target_run_id.take().map(Value::String),
        );
        put(wire::HUMAN_MENTIONS, self.human_mentions.take());
        put(wire::LATE_MEDIA, self.late_media.map(Value::Bool));
        put(
            wire::BEFORE_AGENT_RUN_BLOCKED,
            self.before_agent_run_blocked.take(),
        );
        out
    }

    /// Restores the host-owned fields from `prepared` onto this (runtime) metadata, by the
    /// rules of [`MetaKey::restore`]; `same_content` says whether the runtime message's
    /// content is exactly the prepared content.
    fn restore_from(&mut self, mut prepared: Self, same_content: bool) {
        replace_value(&mut self.intent, truthy(prepared.intent.take()));
        replace_value(&mut self.auto_steer, truthy(prepared.auto_steer.take()));
        self.steer_target_run_id = prepared
            .steer_target_run_id
            .as_deref()
            .map(str::trim)
            .filter(|id| !id.is_empty() && id.chars().count() <= STEER_TARGET_RUN_ID_MAX_CHARS)
            .map(str::to_owned);
        self.sender_is_owner = prepared.sender_is_owner;
        let mentions = prepared.human_mentions.take().filter(|_| same_content);
        replace_value(&mut self.human_mentions, mentions);
        // A runtime value of another type than the typed field (kept in `other`) is the
        // runtime's too, and goes the same way.
        for name in [wire::SENDER_IS_OWNER, wire::STEER_TARGET_RUN_ID] {
            if let Some(old) = self.other.remove(name) {
                drop_deep(old);
            }
        }
    }
}

/// The message field that carries the [`UserTurnMeta`] object: OpenClaw's `__openclaw`
/// ([`MetaKey::OPENCLAW`], the default) or a key of the host's own.
///
/// Every mirroring helper reads and writes the metadata under this key; the free functions
/// and [`UserTurnTranscriptRecorder::new`](super::UserTurnTranscriptRecorder::new) use
/// OpenClaw's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MetaKey(Cow<'static, str>);

impl Default for MetaKey {
    fn default() -> Self {
        Self::OPENCLAW
    }
}

impl std::fmt::Display for MetaKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl MetaKey {
    /// OpenClaw's key, `__openclaw` (compatible with messages OpenClaw writes and reads).
    pub const OPENCLAW: Self = Self(Cow::Borrowed(META_KEY));

    /// A key of the host's own. It follows the id rule (printable, not blank, no surrounding
    /// whitespace, at most [`MAX_META_KEY_LEN`] bytes) and must not be a message field the
    /// helpers read (`role`, `content`, `provenance`, `display`, `idempotencyKey`, …).
    pub fn new(key: impl Into<String>) -> Result<Self, TextError> {
        let key = key.into();
        tether_core::text::check_token_like("user-turn metadata key", &key, MAX_META_KEY_LEN)?;
        Ok(Self(Cow::Owned(key)))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The typed metadata of `message`, or `None` when it carries no object under this key.
    pub fn read(&self, message: &Value) -> Option<UserTurnMeta> {
        self.wire_of(message).map(UserTurnMeta::from_wire)
    }

    /// The wire object of `message` under this key, if it is an object.
    pub(crate) fn wire_of<'a>(&self, message: &'a Value) -> Option<&'a Map<String, Value>> {
        message.get(self.as_str()).and_then(Value::as_object)
    }

    /// Writes `meta` onto `message` under this key (removing the key when `meta` is empty).
    /// A `message` that is not a JSON object is left as it is.
    pub fn write(&self, message: &mut Value, meta: &UserTurnMeta) {
        let Some(fields) = message.as_object_mut() else {
            return;
        };
        let old = if meta.is_empty() {
            fields.remove(self.as_str())
        } else {
            fields.insert(self.0.to_string(), Value::Object(meta.to_wire()))
        };
        if let Some(old) = old {
            drop_deep(old);
        }
    }

    /// Restores the prepared user-turn metadata onto `runtime` (the message after
    /// `before_message_write` hooks ran), reading and writing it under this key.
    ///
    /// * No `prepared` snapshot, or a runtime message whose `role` is not `"user"`: the runtime
    ///   message is returned as is ([`Cow::Borrowed`]).
    /// * `provenance` comes from the prepared message when it is valid (an object with a
    ///   non-empty string `kind`); `display: false` on the prepared message is forced.
    /// * [`intent`](UserTurnMeta::intent) and [`auto_steer`](UserTurnMeta::auto_steer): the
    ///   runtime's are dropped, the prepared ones (when truthy) restored.
    /// * [`steer_target_run_id`](UserTurnMeta::steer_target_run_id): the runtime's is dropped;
    ///   the prepared one is restored, trimmed, when it is non-empty and at most
    ///   [`STEER_TARGET_RUN_ID_MAX_CHARS`] characters.
    /// * [`sender_is_owner`](UserTurnMeta::sender_is_owner): the prepared boolean wins.
    ///   **Decision** (test `tool_results_011`): when the prepared snapshot has none, the
    ///   runtime's value is dropped too — a hook cannot grant owner status (OpenClaw keeps
    ///   the hook's value; we close that gap).
    /// * [`human_mentions`](UserTurnMeta::human_mentions): the runtime's are always dropped;
    ///   the prepared ones are kept only when the runtime `content` deep-equals the prepared
    ///   `content`.
    /// * Every other field passes through from the runtime message; the metadata object is
    ///   attached only when it has at least one field.
    ///
    /// Neither input is mutated; `prepared` should be a snapshot taken before hooks ran.
    pub fn restore<'a>(&self, runtime: &'a Value, prepared: Option<&Value>) -> Cow<'a, Value> {
        let Some(prepared) = prepared else {
            return Cow::Borrowed(runtime);
        };
        let Some(runtime_obj) = runtime.as_object() else {
            return Cow::Borrowed(runtime);
        };
        if runtime_obj.get("role").and_then(Value::as_str) != Some("user") {
            return Cow::Borrowed(runtime);
        }
        let key = self.as_str();
        let prepared_obj = prepared.as_object();
        let mut out = Map::new();
        for (k, v) in runtime_obj {
            if k != key {
                out.insert(k.clone(), deep_clone(v));
            }
        }
        if let Some(provenance) = prepared_obj
            .and_then(|p| p.get("provenance"))
            .filter(|p| is_valid_provenance(p))
        {
            out.insert("provenance".into(), deep_clone(provenance));
        }
        if prepared_obj.and_then(|p| p.get("display")) == Some(&Value::Bool(false)) {
            out.insert("display".into(), Value::Bool(false));
        }
        let same_content = match (
            runtime_obj.get("content"),
            prepared_obj.and_then(|p| p.get("content")),
        ) {
            (Some(a), Some(b)) => deep_equal(a, b),
            (None, None) => true,
            _ => false,
        };
        let mut meta = self.read(runtime).unwrap_or_default();
        meta.restore_from(self.read(prepared).unwrap_or_default(), same_content);
        if !meta.is_empty() {
            out.insert(key.to_owned(), Value::Object(meta.into_wire()));
        }
        Cow::Owned(Value::Object(out))
    }
}

/// Whether `value` is a usable input provenance (an object with a non-empty string `kind`).
fn is_valid_provenance(value: &Value) -> bool {
    value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| !k.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reading_and_writing_is_lossless_also_for_odd_types() {
        let wire = json!({
            "senderIsOwner": "yes",
            "steerTargetRunId": 7,
            "lateMedia": true,
            "intent": null,
            "senderId": "u-1",
        });
        let meta = UserTurnMeta::from_wire(wire.as_object().unwrap());
        assert_eq!(meta.sender_is_owner, None);
        assert_eq!(meta.late_media, Some(true));
        assert_eq!(meta.intent, Some(Value::Null));
        assert_eq!(meta.other.len(), 3, "{meta:?}");
        assert_eq!(Value::Object(meta.into_wire()), wire);
    }

    #[test]
    fn a_key_of_the_hosts_own_carries_the_same_fields() {
        let key = MetaKey::new("__host").unwrap();
        assert!(MetaKey::new(" spaced ").is_err());
        let prepared = json!({"role": "user", "content": "hi", "__host": {"senderIsOwner": true}});
        let runtime = json!({"role": "user", "content": "hi",
            "__host": {"senderIsOwner": false, "steerTargetRunId": "forged"},
            "__openclaw": {"senderIsOwner": true}});
        let out = key.restore(&runtime, Some(&prepared)).into_owned();
        assert_eq!(out["__host"], json!({"senderIsOwner": true}));
        assert_eq!(
            out["__openclaw"],
            json!({"senderIsOwner": true}),
            "another key is an ordinary field and passes through"
        );
        assert_eq!(
            key.read(&out),
            Some(UserTurnMeta::default().with_sender_is_owner(true))
        );
    }

    #[test]
    fn writing_empty_metadata_removes_the_key() {
        let mut message = json!({"role": "user", "__openclaw": {"intent": "x"}});
        MetaKey::OPENCLAW.write(&mut message, &UserTurnMeta::default());
        assert_eq!(message, json!({"role": "user"}));
    }
}
