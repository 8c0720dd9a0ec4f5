//! Transcript and host-session value types shared by the host operations.

use std::fmt;
use std::str::FromStr;

use tether_core::{AgentId, HarnessId, SessionId, SessionKey, Timestamp, TranscriptAnchor};

/// Who wrote a transcript entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TranscriptRole {
    /// The user.
    User,
    /// The assistant.
    Assistant,
    /// A system message.
    System,
    /// A tool result.
    Tool,
}

impl TranscriptRole {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::System => "system",
            Self::Tool => "tool",
        }
    }
}

impl fmt::Display for TranscriptRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TranscriptRole {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "user" => Ok(Self::User),
            "assistant" => Ok(Self::Assistant),
            "system" => Ok(Self::System),
            "tool" => Ok(Self::Tool),
            other => Err(format!("unknown transcript role `{other}`")),
        }
    }
}

/// What a transcript append expects of its session when it writes
/// ([`Store::append_transcript_expecting`](crate::Store::append_transcript_expecting)): the
/// writer's fence. An empty expectation expects nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionExpectation {
    /// The session's current generation must be this one.
    pub session_id: Option<tether_core::SessionId>,
    /// The session's lifecycle revision must be this one.
    pub lifecycle_revision: Option<tether_core::LifecycleRevision>,
}

impl SessionExpectation {
    /// Expects the session's current generation to be `session_id`.
    #[must_use]
    pub fn with_session_id(mut self, session_id: tether_core::SessionId) -> Self {
        self.session_id = Some(session_id);
        self
    }

    /// Expects the session's lifecycle revision to be `revision`.
    #[must_use]
    pub fn with_lifecycle_revision(mut self, revision: tether_core::LifecycleRevision) -> Self {
        self.lifecycle_revision = Some(revision);
        self
    }

    /// Whether `entry` is what this expects.
    pub fn holds_for(&self, entry: &tether_core::HostSessionEntry) -> bool {
        self.session_id
            .as_ref()
            .is_none_or(|id| *id == entry.session_id)
            && self
                .lifecycle_revision
                .is_none_or(|rev| rev == entry.lifecycle_revision)
    }
}

/// The metadata of a transcript entry: a JSON object of the writer's own (for a mirrored user
/// turn: the restored message's fields other than its text, such as its provenance and its
/// user-turn metadata), stored beside the entry and returned with it.
pub type TranscriptMetadata = serde_json::Map<String, serde_json::Value>;

/// How deep [`TranscriptMetadata`] may nest (arrays and objects count one level each).
pub const MAX_METADATA_DEPTH: usize = 64;

/// A transcript entry to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTranscriptEntry {
    /// Who wrote it.
    pub role: TranscriptRole,
    /// The text (searchable).
    pub content: String,
    /// A caller-chosen key making the append idempotent within the session.
    pub idempotency_key: Option<String>,
    /// The entry's metadata, stored as JSON (not searched). An idempotent hit keeps the
    /// first entry's metadata.
    pub metadata: Option<TranscriptMetadata>,
}

impl NewTranscriptEntry {
    /// An entry of `role` saying `content`, without idempotency key or metadata.
    pub fn new(role: TranscriptRole, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            idempotency_key: None,
            metadata: None,
        }
    }

    /// Makes the append idempotent under `key` within the session.
    #[must_use]
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Stores `metadata` with the entry.
    #[must_use]
    pub fn with_metadata(mut self, metadata: TranscriptMetadata) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Checks the entry against the rules of [`tether_core::text`] before anything is written:
    /// content without NUL within [`MAX_CONTENT_LEN`](tether_core::text::MAX_CONTENT_LEN)
    /// bytes, an idempotency key following the id rule, metadata nested at most
    /// [`MAX_METADATA_DEPTH`] levels whose JSON is within `MAX_CONTENT_LEN` bytes.
    pub fn check(&self) -> Result<(), tether_core::TextError> {
        tether_core::text::check_content("transcript content", &self.content)?;
        if let Some(key) = &self.idempotency_key {
            tether_core::text::check_token_like("idempotency key", key, tether_core::MAX_ID_LEN)?;
        }
        if let Some(metadata) = &self.metadata {
            encode_metadata(metadata)?;
        }
        Ok(())
    }
}

/// The stored JSON text of `metadata`, checked: nested at most [`MAX_METADATA_DEPTH`] levels
/// (so it always reads back), within [`MAX_CONTENT_LEN`](tether_core::text::MAX_CONTENT_LEN)
/// bytes. A NUL inside a string is written as the escape `\u0000`, which every backend stores.
pub(crate) fn encode_metadata(
    metadata: &TranscriptMetadata,
) -> Result<String, tether_core::TextError> {
    const FIELD: &str = "transcript metadata";
    let mut stack: Vec<(&serde_json::Value, usize)> = metadata.values().map(|v| (v, 2)).collect();
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &serde_json::Value>> = match value {
            serde_json::Value::Array(items) => Box::new(items.iter()),
            serde_json::Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        if depth > MAX_METADATA_DEPTH {
            return Err(tether_core::TextError::TooDeep {
                field: FIELD,
                limit: MAX_METADATA_DEPTH,
            });
        }
        stack.extend(children.map(|child| (child, depth + 1)));
    }
    let text = String::from_utf8_lossy(&tether_core::RecordCodec::encode(
        &tether_core::JsonObjectCodec,
        metadata,
    ))
    .into_owned();
    if text.len() > tether_core::text::MAX_CONTENT_LEN {
        return Err(tether_core::TextError::TooLong {
            field: FIELD,
            len: text.len(),
            limit: tether_core::text::MAX_CONTENT_LEN,
        });
    }
    Ok(text)
}

/// A stored transcript entry (a node of the session's transcript tree).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscriptEntry {
    /// The entry id.
    pub anchor: TranscriptAnchor,
    /// The session it belongs to.
    pub session_key: SessionKey,
    /// Its parent in the tree (`None` for a root).
    pub parent: Option<TranscriptAnchor>,
    /// Who wrote it.
    pub role: TranscriptRole,
    /// The text.
    pub content: String,
    /// The idempotency key it was appended with.
    pub idempotency_key: Option<String>,
    /// The metadata it was appended with (`None` for entries written without, and for every
    /// entry stored before metadata existed).
    pub metadata: Option<TranscriptMetadata>,
    /// When it was appended.
    pub created_at: Timestamp,
}

/// A transcript search hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscriptHit {
    /// The session.
    pub session_key: SessionKey,
    /// The entry.
    pub anchor: TranscriptAnchor,
    /// Who wrote it.
    pub role: TranscriptRole,
    /// The text.
    pub content: String,
}

/// A host session to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewHostSession {
    /// The logical key.
    pub session_key: SessionKey,
    /// The owning agent.
    pub agent_id: AgentId,
    /// The first physical generation.
    pub session_id: SessionId,
    /// The harness driving the session, if any.
    pub agent_harness_id: Option<HarnessId>,
}

/// A transcript cut: what a rewind, branch switch or fork asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cut {
    /// Rewind to just before a user message on the active path.
    Rewind {
        /// The user message.
        to: TranscriptAnchor,
    },
    /// Make another branch tip the active leaf.
    SwitchBranch {
        /// The branch tip.
        to: TranscriptAnchor,
    },
}

/// The result of a cut or fork. Every status but `Created` changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CutStatus {
    /// The cut was applied (a new generation was created).
    Created,
    /// The target entry does not exist in this session.
    MissingEntry,
    /// A rewind or fork target is not a user message.
    NotUserMessage,
    /// A rewind target is not on the active path.
    OffActivePath,
    /// A switch target has children.
    NotBranchTip,
    /// A switch target is already the active leaf.
    AlreadyActive,
}

impl CutStatus {
    /// The status name (`created`, `missing-entry`, `not-user-message`, `off-active-path`,
    /// `not-branch-tip`, `already-active`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::MissingEntry => "missing-entry",
            Self::NotUserMessage => "not-user-message",
            Self::OffActivePath => "off-active-path",
            Self::NotBranchTip => "not-branch-tip",
            Self::AlreadyActive => "already-active",
        }
    }
}

impl fmt::Display for CutStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Prefix of the `system` transcript entries that record how a settled turn's finalization
/// ended (`finalization: succeeded`, `finalization: fell back …`).
pub const FINALIZATION_PREFIX: &str = "finalization:";

/// How a recorded finalization ended, read from its transcript entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizationOutcome {
    /// The finalization turn produced the visible answer.
    Succeeded,
    /// The host's fallback answer was used.
    FellBack,
}

impl FinalizationOutcome {
    /// The outcome recorded by a transcript entry, when the entry is a finalization record (a
    /// `system` entry starting with [`FINALIZATION_PREFIX`]).
    pub fn of_entry(role: TranscriptRole, content: &str) -> Option<Self> {
        let rest = content.strip_prefix(FINALIZATION_PREFIX)?;
        if role != TranscriptRole::System {
            return None;
        }
        Some(if rest.starts_with(" succeeded") {
            Self::Succeeded
        } else {
            Self::FellBack
        })
    }

    /// The name of the store counter of this outcome.
    pub(crate) fn counter(self) -> &'static str {
        match self {
            Self::Succeeded => "finalizations_succeeded",
            Self::FellBack => "finalizations_fell_back",
        }
    }
}

/// The path from the root to `leaf` in `entries`, root first (a cycle in corrupted data stops
/// the walk rather than looping).
pub(crate) fn path_to(
    entries: &std::collections::HashMap<i64, TranscriptEntry>,
    leaf: Option<i64>,
) -> Vec<TranscriptEntry> {
    let mut path = Vec::new();
    let mut next = leaf;
    while let Some(id) = next {
        let Some(entry) = entries.get(&id) else { break };
        if path.len() > entries.len() {
            break;
        }
        next = entry.parent.as_ref().map(|p| p.0);
        path.push(entry.clone());
    }
    path.reverse();
    path
}

/// Validates `cut` against a session's transcript (`entries`, with the active leaf
/// `active_leaf`): the new active leaf, or the refusal. One rule for every backend.
pub(crate) fn plan_cut(
    entries: &std::collections::HashMap<i64, TranscriptEntry>,
    active_leaf: Option<i64>,
    cut: &Cut,
) -> Result<Option<i64>, CutStatus> {
    match cut {
        Cut::Rewind { to } => match entries.get(&to.0) {
            None => Err(CutStatus::MissingEntry),
            Some(e) if e.role != TranscriptRole::User => Err(CutStatus::NotUserMessage),
            Some(_)
                if !path_to(entries, active_leaf)
                    .iter()
                    .any(|e| e.anchor.0 == to.0) =>
            {
                Err(CutStatus::OffActivePath)
            }
            Some(e) => Ok(e.parent.as_ref().map(|p| p.0)),
        },
        Cut::SwitchBranch { to } => match entries.get(&to.0) {
            None => Err(CutStatus::MissingEntry),
            Some(_) if active_leaf == Some(to.0) => Err(CutStatus::AlreadyActive),
            Some(_) if entries.values().any(|e| e.parent.as_ref() == Some(to)) => {
                Err(CutStatus::NotBranchTip)
            }
            Some(_) => Ok(Some(to.0)),
        },
    }
}
