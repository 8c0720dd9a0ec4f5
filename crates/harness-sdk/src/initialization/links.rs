//! Session upstream links: the host's record that a session is backed by an external agent
//! harness session.

use std::fmt;

use async_trait::async_trait;
use tether_core::{AgentId, AssertCurrent, Error, HarnessId, SessionKey, Timestamp};

/// What an initialization asks to link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamLinkInput {
    /// The host session.
    pub session_key: SessionKey,
    /// Its agent.
    pub agent_id: AgentId,
    /// The harness that owns the upstream session.
    pub harness_id: HarnessId,
    /// The upstream (native) session id.
    pub upstream_id: String,
}

/// A stored upstream link: the input plus its timestamps. Rollback deletes a link only when the
/// stored one still equals the recorded one in every field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamLink {
    /// The host session.
    pub session_key: SessionKey,
    /// Its agent.
    pub agent_id: AgentId,
    /// The harness that owns the upstream session.
    pub harness_id: HarnessId,
    /// The upstream (native) session id.
    pub upstream_id: String,
    /// When the link was created.
    pub created_at: Timestamp,
    /// When the link was last written.
    pub updated_at: Timestamp,
}

impl UpstreamLink {
    /// The link for `input`, created and updated at `now`.
    pub fn new(input: UpstreamLinkInput, now: Timestamp) -> Self {
        Self {
            session_key: input.session_key,
            agent_id: input.agent_id,
            harness_id: input.harness_id,
            upstream_id: input.upstream_id,
            created_at: now,
            updated_at: now,
        }
    }
}

/// The outcome of an expected-value link deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkDeleteOutcome {
    /// The stored link equalled the expected one and was deleted.
    Deleted,
    /// No link was stored.
    Absent,
    /// Another link is stored; nothing was deleted.
    Changed,
}

/// The host store's upstream links, as the initialization owner needs them. The host session
/// store implements it; `assert_commit` must be checked inside the write, right before it
/// commits (a refusal writes nothing).
#[async_trait]
pub trait UpstreamLinks: Send + Sync + fmt::Debug {
    /// Stores `link` only if the session has no link yet. Returns whether it was stored.
    async fn insert_link_if_absent(
        &self,
        link: &UpstreamLink,
        assert_commit: &AssertCurrent,
    ) -> Result<bool, Error>;

    /// Deletes the session's link only if it still equals `expected`.
    async fn delete_link_if_unchanged(
        &self,
        expected: &UpstreamLink,
        assert_commit: &AssertCurrent,
    ) -> Result<LinkDeleteOutcome, Error>;
}
