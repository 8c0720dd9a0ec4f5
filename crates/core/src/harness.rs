//! The harness contract: the [`AgentHarness`] trait, its optional capabilities, and the
//! prepared `commit` / `rollback` mutations that harnesses hand the host during a deletion or
//! context reset.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::attempt::AttemptResult;
use crate::error::Error;
use crate::finalization::FinalizationAttempt;
use crate::ids::{AgentId, HarnessId, Namespace, SessionId, SessionKey};
use crate::keys::BindingKey;
use crate::lease::LifecycleRevision;
use crate::store::{RowPredicate, RowWrite, StoredRow};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A host authority check: returns an error once the authority it stands for has ended
/// (operation closed, registry changed, generation moved, caller cancelled). Retaining the
/// callback grants nothing: it keeps failing once closed.
pub type AssertCurrent = Arc<dyn Fn() -> Result<(), Error> + Send + Sync>;

/// An [`AssertCurrent`] that always passes.
pub fn always_current() -> AssertCurrent {
    Arc::new(|| Ok(()))
}

/// Why a harness reset hook is called.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResetReason {
    /// `/reset`: in-place reset keeping the session key.
    Reset,
    /// `/new`: a new session under the same key.
    New,
    /// Post-deletion notification (owns nothing durable).
    Deleted,
    /// Any other host-defined reason.
    Other(String),
}

/// Parameters of [`AgentHarness::reset`].
///
/// Two kinds of reset reach a harness:
///
/// - **in place** ([`ResetParams::new`]): `session_id` keeps its id and whatever it has bound
///   is cleared;
/// - **to a new generation** ([`ResetParams::replacing`], what `/new` and `/reset` of a Tether
///   host send): the host moved the session from `previous_session_id` to `session_id` in a
///   transaction that has committed. What the reset ends is what the previous generation
///   bound; a binding `session_id` owns was made by a turn that ran after the COMMIT (the
///   notification runs after it and may be late) and is kept.
///
/// ```
/// use tether_core::{AgentId, ResetParams, ResetReason, SessionId, SessionKey};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let params = ResetParams::new(
///     AgentId::new("main")?,
///     SessionId::new("gen-2")?,
///     Some(SessionKey::new("agent:main:direct:alice")?),
///     ResetReason::New,
/// )
/// .replacing(SessionId::new("gen-1")?);
/// assert_eq!(params.previous_session_id.as_ref().map(SessionId::as_str), Some("gen-1"));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ResetParams {
    /// The agent.
    pub agent_id: AgentId,
    /// The physical session being reset: after a reset to a new generation, the new one.
    pub session_id: SessionId,
    /// The logical key, when the session has one.
    pub session_key: Option<SessionKey>,
    /// Why.
    pub reason: ResetReason,
    /// The host lifecycle revision at the time of the reset, when known.
    pub lifecycle_revision: Option<LifecycleRevision>,
    /// The generation the reset replaced, when it moved the session to `session_id`; `None`
    /// for an in-place reset of `session_id`.
    pub previous_session_id: Option<SessionId>,
}

impl ResetParams {
    /// An in-place reset of `session_id` (no lifecycle revision, no predecessor).
    pub fn new(
        agent_id: AgentId,
        session_id: SessionId,
        session_key: Option<SessionKey>,
        reason: ResetReason,
    ) -> Self {
        Self {
            agent_id,
            session_id,
            session_key,
            reason,
            lifecycle_revision: None,
            previous_session_id: None,
        }
    }

    /// The notification of the change that left `entry` (the session row as it is now): the
    /// reset of `entry`'s generation, replacing its recorded predecessor when the row says the
    /// generation began with a [`GenerationChange::Reset`](crate::GenerationChange::Reset)
    /// (so a late or repeated notification keeps what a turn bound since), in place otherwise;
    /// with the row's lifecycle revision. This is what a host sends again after a crash
    /// between a reset's COMMIT and its notification.
    pub fn of_entry(entry: &crate::HostSessionEntry, reason: ResetReason) -> Self {
        let params = Self::new(
            entry.agent_id.clone(),
            entry.session_id.clone(),
            Some(entry.session_key.clone()),
            reason,
        )
        .with_lifecycle_revision(entry.lifecycle_revision);
        match (&entry.previous_session_id, entry.previous_change) {
            (Some(previous), Some(crate::GenerationChange::Reset)) => {
                params.replacing(previous.clone())
            }
            _ => params,
        }
    }

    /// With the host's lifecycle revision at the time of the reset.
    #[must_use]
    pub fn with_lifecycle_revision(mut self, revision: LifecycleRevision) -> Self {
        self.lifecycle_revision = Some(revision);
        self
    }

    /// A reset that moved the session from `previous` to `session_id` (see the type's docs).
    /// `previous` equal to `session_id` is an in-place reset.
    #[must_use]
    pub fn replacing(mut self, previous: SessionId) -> Self {
        self.previous_session_id = (previous != self.session_id).then_some(previous);
        self
    }

    /// The generation this reset replaced, when it moved the session to a new one.
    pub fn replaced_generation(&self) -> Option<&SessionId> {
        self.previous_session_id
            .as_ref()
            .filter(|previous| **previous != self.session_id)
    }
}

/// Binding-row operations bound to the host's open SQL transaction.
///
/// When the binding rows live in the same database as the host sessions, a harness's deletion
/// `commit` runs through this view so the binding row and the session row disappear atomically
/// (the decision in `docs/deletion-and-reset.md`). Participants whose state lives elsewhere
/// ignore it.
#[async_trait]
pub trait RowTransaction: Send + Sync {
    /// Reads a live row inside the transaction.
    async fn lookup(&self, ns: &Namespace, key: &BindingKey) -> Result<Option<StoredRow>, Error>;

    /// Deletes the live row only if `predicate` accepts it, returning the removed row.
    async fn delete_if(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error>;

    /// Creates the row only if no live row exists.
    async fn register_if_absent(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        row: RowWrite,
        ttl: Option<Duration>,
    ) -> Result<bool, Error>;
}

/// How the host's transaction ended for a prepared mutation. A closed set: a transaction
/// commits, fails before COMMIT, or ends with an unknown outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SettlementOutcome {
    /// The transaction committed: the mutation stands.
    Committed,
    /// The transaction failed before COMMIT and the rollback list ran.
    RolledBack,
    /// Nobody knows whether COMMIT happened: the owner must block the key and quarantine it (see
    /// `docs/storage.md`, "Unknown outcomes").
    Unknown,
}

/// A prepared harness mutation inside a host deletion or context reset.
///
/// The host pushes the mutation onto its rollback list **before** calling `commit`, so
/// `rollback` must tolerate a commit that failed part-way or never applied. `rollback` runs only
/// when the host transaction failed before COMMIT (rows deleted through the
/// [`RowTransaction`] are already restored by then); nothing is rolled back after COMMIT.
#[async_trait]
pub trait SessionMutation: Send + Sync {
    /// Commits the mutation at the host's commit edge, inside its transaction.
    async fn commit(&self, tx: &dyn RowTransaction) -> Result<(), Error>;

    /// Undoes the mutation after a failed transaction. Never overwrites a successor.
    async fn rollback(&self) -> Result<(), Error>;

    /// Tells the mutation how the host transaction ended: `Committed` after COMMIT,
    /// `RolledBack` after the rollback list ran, `Unknown` when the COMMIT itself failed and its
    /// outcome cannot be known (then nothing is rolled back and the owner blocks the key).
    ///
    /// Owners without post-transaction work keep the default, which does nothing.
    async fn settle_outcome(
        &self,
        outcome: SettlementOutcome,
        error: Option<Error>,
    ) -> Result<(), Error> {
        let _ = (outcome, error);
        Ok(())
    }

    /// Whether the mutation was settled as [`SettlementOutcome::Unknown`]: its post-commit
    /// cleanup must then be skipped. Owners that do not track it keep the default, `false`.
    fn is_unresolved(&self) -> bool {
        false
    }
}

/// The host's continuation inside a harness hook: it receives the harness's prepared mutation
/// and runs the rest of the operation (further harnesses, then the host transaction).
pub type MutationRun<'a> =
    Box<dyn FnOnce(Arc<dyn SessionMutation>) -> BoxFuture<'a, Result<(), Error>> + Send + 'a>;

/// A handle to the host's session initialization, for initialization rollbacks.
pub trait InitializationHandle: Send + Sync + fmt::Debug {
    /// Fails once the initialization can no longer be rolled back by this operation.
    fn assert_rollback_current(&self) -> Result<(), Error>;

    /// A stable identity of the handle (exact-handle comparisons).
    fn handle_id(&self) -> u64;
}

/// Parameters of [`SessionDeletionHook::with_session_deletion`].
#[derive(Clone)]
pub struct SessionDeletionParams {
    /// The agent.
    pub agent_id: AgentId,
    /// The key being deleted.
    pub session_key: SessionKey,
    /// The generation being deleted.
    pub session_id: SessionId,
    /// The host entry's lifecycle revision at preparation.
    pub lifecycle_revision: Option<LifecycleRevision>,
    /// The initialization being rolled back, when the deletion undoes a failed creation.
    pub initialization: Option<Arc<dyn InitializationHandle>>,
    /// The host authority for this operation.
    pub assert_current: AssertCurrent,
}

impl fmt::Debug for SessionDeletionParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionDeletionParams")
            .field("agent_id", &self.agent_id)
            .field("session_key", &self.session_key)
            .field("session_id", &self.session_id)
            .field("lifecycle_revision", &self.lifecycle_revision)
            .field("initialization", &self.initialization)
            .finish_non_exhaustive()
    }
}

/// Parameters of [`SessionContextResetHook::with_session_context_reset`].
#[derive(Clone)]
pub struct SessionContextResetParams {
    /// The agent.
    pub agent_id: AgentId,
    /// The key whose native context is invalidated (kept, with its history).
    pub session_key: SessionKey,
    /// The current generation.
    pub session_id: SessionId,
    /// The recorded predecessor, when the entry has one.
    pub previous_session_id: Option<SessionId>,
    /// The host entry's lifecycle revision at preparation.
    pub lifecycle_revision: Option<LifecycleRevision>,
    /// The host authority for this operation.
    pub assert_current: AssertCurrent,
}

impl fmt::Debug for SessionContextResetParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionContextResetParams")
            .field("agent_id", &self.agent_id)
            .field("session_key", &self.session_key)
            .field("session_id", &self.session_id)
            .field("previous_session_id", &self.previous_session_id)
            .field("lifecycle_revision", &self.lifecycle_revision)
            .finish_non_exhaustive()
    }
}

/// Optional capability: take part in session deletion.
#[async_trait]
pub trait SessionDeletionHook: Send + Sync {
    /// Acquires the native owner's lease, prepares the mutation and calls `run` with it. Work
    /// after `run` returns (subscription cleanup) happens after the host transaction.
    async fn with_session_deletion(
        &self,
        params: SessionDeletionParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error>;
}

/// Optional capability: invalidate the native context on a rewind or branch switch.
#[async_trait]
pub trait SessionContextResetHook: Send + Sync {
    /// Same prepared `commit` / `rollback` contract as deletion; keeps the key and history.
    async fn with_session_context_reset(
        &self,
        params: SessionContextResetParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error>;
}

/// Optional capability: produce one final answer after a tool-only settled turn.
///
/// The `attempt` type can carry no tool surface, permission grant, user-input channel or native
/// exec hook; see [`FinalizationAttempt`]. `settled` is the settled attempt, which must not be
/// changed (it is shared, read-only).
#[async_trait]
pub trait SettledTurnFinalizer: Send + Sync {
    /// Runs one capability-free finalization try. Returns the raw narrow result, which the host
    /// validates (unknown fields and tool calls fail closed).
    async fn finalize_settled_turn(
        &self,
        attempt: FinalizationAttempt,
        settled: &AttemptResult,
    ) -> Result<serde_json::Value, Error>;
}

/// A native agent runtime driven by the host.
#[async_trait]
pub trait AgentHarness: Send + Sync + fmt::Debug {
    /// The harness id (registry key).
    fn id(&self) -> &HarnessId;

    /// A session reset (and the post-deletion notification, [`ResetReason::Deleted`]).
    ///
    /// In place, the generation's binding is cleared. After a reset to a new generation
    /// ([`ResetParams::replaced_generation`]) the binding the replaced generation left is
    /// cleared and one the new generation owns is kept: it was bound by a turn after the
    /// host's COMMIT, and this notification may be late. Called again with the same
    /// parameters, a reset changes nothing more.
    async fn reset(&self, params: ResetParams) -> Result<(), Error>;

    /// The deletion capability, when the harness binds native sessions.
    fn session_deletion(&self) -> Option<&dyn SessionDeletionHook> {
        None
    }

    /// The context-reset capability.
    fn session_context_reset(&self) -> Option<&dyn SessionContextResetHook> {
        None
    }

    /// The settled-turn finalization capability.
    fn settled_turn_finalizer(&self) -> Option<&dyn SettledTurnFinalizer> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GenerationChange, HostSessionEntry, Timestamp};

    fn entry(previous: Option<(&str, GenerationChange)>) -> HostSessionEntry {
        let entry = HostSessionEntry::new(
            SessionKey::new("agent:main:direct:a").unwrap(),
            AgentId::new("main").unwrap(),
            SessionId::new("gen-2").unwrap(),
            Timestamp::from_millis(0),
        )
        .with_lifecycle_revision(LifecycleRevision::new(7));
        match previous {
            Some((id, change)) => entry.with_predecessor(SessionId::new(id).unwrap(), change),
            None => entry,
        }
    }

    #[test]
    fn a_reset_of_an_entry_replaces_only_a_predecessor_the_row_says_it_reset() {
        let reset = ResetParams::of_entry(
            &entry(Some(("gen-1", GenerationChange::Reset))),
            ResetReason::New,
        );
        assert_eq!(reset.session_id.as_str(), "gen-2");
        assert_eq!(
            reset.replaced_generation().map(SessionId::as_str),
            Some("gen-1")
        );
        assert_eq!(reset.lifecycle_revision, Some(LifecycleRevision::new(7)));
        for change in [GenerationChange::Transfer, GenerationChange::Cut] {
            let in_place =
                ResetParams::of_entry(&entry(Some(("gen-1", change))), ResetReason::Reset);
            assert_eq!(in_place.replaced_generation(), None, "{change:?}");
        }
        assert_eq!(
            ResetParams::of_entry(&entry(None), ResetReason::Reset).replaced_generation(),
            None
        );
        let same = ResetParams::new(
            AgentId::new("main").unwrap(),
            SessionId::new("gen-2").unwrap(),
            None,
            ResetReason::Reset,
        )
        .replacing(SessionId::new("gen-2").unwrap());
        assert_eq!(same.replaced_generation(), None, "the same id is in place");
    }
}
