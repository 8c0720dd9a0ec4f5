//! A user message in the shape a host transcript stores it: text, idempotency key, metadata.

use serde_json::{Map, Value};

use super::MetaKey;
use super::UserTurnMeta;
use crate::results::tree::{deep_clone, drop_deep};

/// A (restored) user message split the way a host transcript stores an entry: the visible
/// text, the idempotency key, and the **metadata**: every other field of the message as one
/// JSON object (`provenance`, `display`, `timestamp`, the object under the [`MetaKey`], …).
/// When the content is not a plain string (text and media blocks), `text` is its text blocks
/// joined with newlines and the blocks themselves are kept in the metadata under `content`,
/// so [`UserTurnEntry::to_message`] gives back the message exactly.
///
/// Hand it to the transcript's append through
/// [`UserTurnTranscriptRecorder::append_user_turn`](super::UserTurnTranscriptRecorder::append_user_turn),
/// which feeds the append's outcome to the persisted marker.
///
/// ```
/// use serde_json::json;
/// use tether_harness_sdk::results::mirror::{MetaKey, UserTurnEntry};
///
/// let message = json!({"role": "user", "content": "deploy", "idempotencyKey": "turn-1",
///     "__openclaw": {"senderIsOwner": true}});
/// let entry = UserTurnEntry::from_message(&message);
/// assert_eq!(entry.text, "deploy");
/// assert_eq!(entry.idempotency_key.as_deref(), Some("turn-1"));
/// assert_eq!(entry.meta(&MetaKey::OPENCLAW).unwrap().sender_is_owner, Some(true));
/// assert_eq!(entry.to_message(), message);
/// ```
#[derive(Debug)]
pub struct UserTurnEntry {
    /// The visible text (the entry's searchable content).
    pub text: String,
    /// The message's `idempotencyKey`, when it has a non-empty string one.
    pub idempotency_key: Option<String>,
    /// Every other field of the message (never `role` or `idempotencyKey`; `content` only
    /// when it is not a plain string).
    pub metadata: Map<String, Value>,
}

impl Clone for UserTurnEntry {
    fn clone(&self) -> Self {
        Self {
            text: self.text.clone(),
            idempotency_key: self.idempotency_key.clone(),
            metadata: self
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), deep_clone(v)))
                .collect(),
        }
    }
}

impl Drop for UserTurnEntry {
    fn drop(&mut self) {
        std::mem::take(&mut self.metadata)
            .into_iter()
            .for_each(|(_, v)| drop_deep(v));
    }
}

impl UserTurnEntry {
    /// Splits `message` (copied; a value that is not an object gives an empty entry).
    pub fn from_message(message: &Value) -> Self {
        let mut entry = Self {
            text: String::new(),
            idempotency_key: None,
            metadata: Map::new(),
        };
        let Some(fields) = message.as_object() else {
            return entry;
        };
        for (name, value) in fields {
            match (name.as_str(), value) {
                ("role", _) => {}
                ("content", Value::String(text)) => entry.text.clone_from(text),
                ("content", blocks) => {
                    entry.text = text_of(blocks);
                    entry.metadata.insert(name.clone(), deep_clone(blocks));
                }
                ("idempotencyKey", Value::String(key)) if !key.is_empty() => {
                    entry.idempotency_key = Some(key.clone());
                }
                _ => {
                    entry.metadata.insert(name.clone(), deep_clone(value));
                }
            }
        }
        entry
    }

    /// The typed user-turn metadata under `key`, when the message carried some.
    pub fn meta(&self, key: &MetaKey) -> Option<UserTurnMeta> {
        self.metadata
            .get(key.as_str())
            .and_then(Value::as_object)
            .map(UserTurnMeta::from_wire)
    }

    /// The user message again: `role: "user"`, the content (the kept blocks, or the text), the
    /// idempotency key and the metadata fields.
    pub fn to_message(&self) -> Value {
        Self::message_from(
            &self.text,
            self.idempotency_key.as_deref(),
            Some(&self.metadata),
        )
    }

    /// The user message of a stored transcript entry: its `text`, its idempotency key and its
    /// stored metadata (what [`from_message`](Self::from_message) split off).
    pub fn message_from(
        text: &str,
        idempotency_key: Option<&str>,
        metadata: Option<&Map<String, Value>>,
    ) -> Value {
        let mut out = Map::new();
        out.insert("role".into(), Value::String("user".into()));
        out.insert("content".into(), Value::String(text.to_owned()));
        if let Some(key) = idempotency_key {
            out.insert("idempotencyKey".into(), Value::String(key.to_owned()));
        }
        for (name, value) in metadata.into_iter().flatten() {
            if name != "role" {
                out.insert(name.clone(), deep_clone(value));
            }
        }
        Value::Object(out)
    }
}

/// The text blocks of a content array (`{"type": "text", "text": …}`), joined with newlines.
fn text_of(blocks: &Value) -> String {
    blocks
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn media_content_keeps_its_blocks_in_the_metadata() {
        let message = json!({"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "data": "aGk=", "mimeType": "image/png"},
            {"type": "text", "text": "here"}
        ], "display": false});
        let entry = UserTurnEntry::from_message(&message);
        assert_eq!(entry.text, "look\nhere");
        assert_eq!(entry.idempotency_key, None);
        assert!(entry.metadata.contains_key("content"));
        assert_eq!(entry.to_message(), message);
    }
}
