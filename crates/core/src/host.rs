//! The host session contract: entries, tri-state reads, transcript append results and the
//! quarantine registry.

use std::fmt;

use async_trait::async_trait;

use crate::error::Error;
use crate::ids::{AgentId, HarnessId, Namespace, SessionId, SessionKey};
use crate::keys::BindingKey;
use crate::lease::LifecycleRevision;
use crate::time::Timestamp;

/// One host session entry (a row of the host's session store, keyed by session key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSessionEntry {
    /// The logical key.
    pub session_key: SessionKey,
    /// The agent that owns the session.
    pub agent_id: AgentId,
    /// The current physical generation.
    pub session_id: SessionId,
    /// The generation this one replaced, if any.
    pub previous_session_id: Option<SessionId>,
    /// How this generation replaced `previous_session_id`: `Some` exactly when there is a
    /// predecessor. Only a [`GenerationChange::Transfer`] lets a harness adopt the
    /// predecessor's native binding.
    pub previous_change: Option<GenerationChange>,
    /// Bumped on every generation change.
    pub lifecycle_revision: LifecycleRevision,
    /// The harness that drives the session, if one is selected.
    pub agent_harness_id: Option<HarnessId>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last update time.
    pub updated_at: Timestamp,
}

/// How a generation replaced its predecessor, recorded with the predecessor so that the
/// decision whether the predecessor's native context continues does not depend on a
/// notification that may never run (see `docs/generation.md`, "How a generation began").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GenerationChange {
    /// A rotation that keeps the conversation (a compaction, the host's own rotation): the
    /// predecessor's native binding is adopted and its thread continues.
    Transfer,
    /// A context reset (a rewind or a branch switch): the transcript was cut, so the
    /// predecessor's native context holds turns the session no longer has; it is never
    /// adopted.
    Cut,
    /// A reset (`/new`, `/reset`): the session starts over; the predecessor's native context
    /// is never adopted.
    Reset,
}

impl GenerationChange {
    /// Whether the predecessor's native context continues into this generation (only a
    /// [`Self::Transfer`]).
    pub fn continues_native_context(self) -> bool {
        matches!(self, Self::Transfer)
    }

    /// The stored and displayed name: `transfer`, `cut` or `reset`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transfer => "transfer",
            Self::Cut => "cut",
            Self::Reset => "reset",
        }
    }

    /// Parses a name of [`Self::as_str`].
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "transfer" => Some(Self::Transfer),
            "cut" => Some(Self::Cut),
            "reset" => Some(Self::Reset),
            _ => None,
        }
    }
}

impl fmt::Display for GenerationChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A host session read, tri-state for authority decisions.
///
/// - `Current(entry)`: the row exists; compare its generation.
/// - `Missing`: no row for the key; the session is ephemeral and authority is the caller's.
/// - `Failed(error)`: the read failed; it can never authorize a durable binding (superseded).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum HostSessionRead {
    /// The entry.
    Current(HostSessionEntry),
    /// No entry under this key.
    Missing,
    /// The read failed.
    Failed(Error),
}

impl HostSessionRead {
    /// The entry, when present.
    pub fn entry(&self) -> Option<&HostSessionEntry> {
        match self {
            Self::Current(entry) => Some(entry),
            _ => None,
        }
    }
}

/// Read access to host sessions, as the lifecycle and generation authority need it.
#[async_trait]
pub trait HostSessionStore: Send + Sync + fmt::Debug {
    /// Reads the entry for `key`. Never returns an error: failures become
    /// [`HostSessionRead::Failed`].
    async fn read_session(&self, key: &SessionKey) -> HostSessionRead;
}

/// A transcript entry's anchor (its id in the session's transcript tree).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TranscriptAnchor(pub i64);

/// The result of an idempotent transcript append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendOutcome {
    /// `true` when a new entry was written; `false` when the idempotency key already existed.
    pub appended: bool,
    /// The entry (new or existing) the append resolved to.
    pub anchor: TranscriptAnchor,
}

/// A key blocked because a settlement outcome is unknown, recorded durably (see
/// `docs/storage.md`, "Unknown outcomes").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineEntry {
    /// The binding namespace.
    pub namespace: Namespace,
    /// The blocked key.
    pub key: BindingKey,
    /// Why it was blocked (the error text).
    pub reason: String,
    /// Who blocked it (holder label, process).
    pub custody: Option<String>,
    /// When it was blocked.
    pub quarantined_at: Timestamp,
}

/// Durable record of quarantined keys.
#[async_trait]
pub trait QuarantineStore: Send + Sync + fmt::Debug {
    /// Records a quarantined key (idempotent: a second record keeps the first time).
    async fn quarantine(&self, entry: QuarantineEntry) -> Result<(), Error>;

    /// Whether the key is quarantined.
    async fn quarantined(
        &self,
        ns: &Namespace,
        key: &BindingKey,
    ) -> Result<Option<QuarantineEntry>, Error>;

    /// Releases a quarantined key after an operator checked it. Returns whether it was quarantined.
    async fn release_quarantine(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        operator_reason: &str,
    ) -> Result<bool, Error>;
}
