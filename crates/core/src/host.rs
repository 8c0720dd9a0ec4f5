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
///
/// Built by a store with [`HostSessionEntry::new`] (a first generation), the `with_*` methods
/// (a row read back) and [`HostSessionEntry::rotated`] (a generation change).
///
/// ```
/// use tether_core::{AgentId, GenerationChange, HostSessionEntry, SessionId, SessionKey, Timestamp};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let created = HostSessionEntry::new(
///     SessionKey::new("agent:main:direct:alice")?,
///     AgentId::new("main")?,
///     SessionId::new("gen-1")?,
///     Timestamp::from_millis(1_000),
/// );
/// let reset = created.rotated(
///     SessionId::new("gen-2")?,
///     GenerationChange::Reset,
///     Timestamp::from_millis(2_000),
/// );
/// assert_eq!(reset.previous_session_id, Some(created.session_id.clone()));
/// assert_eq!(reset.previous_change, Some(GenerationChange::Reset));
/// assert_eq!(reset.lifecycle_revision, created.lifecycle_revision.next());
/// assert_eq!(reset.created_at, created.created_at);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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

impl HostSessionEntry {
    /// A session's first generation: no predecessor, [`LifecycleRevision::INITIAL`], no
    /// harness, created and updated at `now`.
    pub fn new(
        session_key: SessionKey,
        agent_id: AgentId,
        session_id: SessionId,
        now: Timestamp,
    ) -> Self {
        Self {
            session_key,
            agent_id,
            session_id,
            previous_session_id: None,
            previous_change: None,
            lifecycle_revision: LifecycleRevision::INITIAL,
            agent_harness_id: None,
            created_at: now,
            updated_at: now,
        }
    }

    /// With the harness that drives the session (`None`: none selected).
    #[must_use]
    pub fn with_harness(mut self, harness: Option<HarnessId>) -> Self {
        self.agent_harness_id = harness;
        self
    }

    /// With a recorded predecessor and how this generation replaced it (the two are always
    /// set together).
    #[must_use]
    pub fn with_predecessor(mut self, previous: SessionId, change: GenerationChange) -> Self {
        self.previous_session_id = Some(previous);
        self.previous_change = Some(change);
        self
    }

    /// With a lifecycle revision.
    #[must_use]
    pub fn with_lifecycle_revision(mut self, revision: LifecycleRevision) -> Self {
        self.lifecycle_revision = revision;
        self
    }

    /// With its creation and last update times.
    #[must_use]
    pub fn with_times(mut self, created_at: Timestamp, updated_at: Timestamp) -> Self {
        self.created_at = created_at;
        self.updated_at = updated_at;
        self
    }

    /// The row after this generation moved to `next` by `change` at `now`: this generation
    /// recorded as the predecessor, the lifecycle revision bumped, the rest kept.
    #[must_use]
    pub fn rotated(&self, next: SessionId, change: GenerationChange, now: Timestamp) -> Self {
        Self {
            session_id: next,
            previous_session_id: Some(self.session_id.clone()),
            previous_change: Some(change),
            lifecycle_revision: self.lifecycle_revision.next(),
            updated_at: now,
            ..self.clone()
        }
    }
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
