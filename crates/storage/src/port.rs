//! The host port: what the host layer's deletion and context-reset coordinator needs of a
//! store, apart from any implementation (the contract: `docs/deletion-and-reset.md`).
//!
//! The coordinator (`tether_host::HostSessions`) is generic over a [`HostBackend`]. It opens
//! one [`HostTransaction`] per operation, lets every harness commit its prepared mutation
//! through [`HostTransaction::row_tx`], runs the host's own writes, changes the session rows,
//! and ends the transaction with [`commit`](HostTransaction::commit) or
//! [`rollback`](HostTransaction::rollback). Both [`Store`](crate::Store) (SQLite, PostgreSQL)
//! and [`MemoryStore`](crate::MemoryStore) implement the port, so the same coordinator and the
//! same scenarios run on all three.
//!
//! Architecture Invariant: nothing in this module names a database driver type; a backend's
//! own transaction type may offer more (the SQL one runs the host's SQL), but the coordinator
//! only uses what is here.

use std::fmt;

use async_trait::async_trait;
use tether_core::{
    Error, GenerationChange, HostSessionEntry, RowTransaction, SessionId, SessionKey,
    TranscriptAnchor,
};

use crate::transcript::{Cut, CutStatus, NewHostSession};

/// One open host transaction: the session rows, the transcript cut, and the binding rows of the
/// same store change together or not at all.
///
/// Reads see the transaction's own writes. Nothing is visible to others before
/// [`commit`](Self::commit); dropping the transaction rolls it back.
#[async_trait]
pub trait HostTransaction: Send + Sync {
    /// The session entry of `key` as this transaction sees it.
    async fn session(&self, key: &SessionKey) -> Result<Option<HostSessionEntry>, Error>;

    /// Checks `cut` against the session's transcript as this transaction sees it: `Ok(())`
    /// when it applies, the refusal otherwise ([`CutStatus::MissingEntry`] when the session
    /// does not exist).
    async fn check_cut(&self, key: &SessionKey, cut: &Cut) -> Result<Result<(), CutStatus>, Error>;

    /// The upstream (external harness) session `key` is linked to, if any.
    async fn upstream_link(&self, key: &SessionKey) -> Result<Option<String>, Error>;

    /// Deletes the session of `entry` and its transcript, guarded on its generation and
    /// lifecycle revision. `false` when the session moved on or is gone (nothing changed).
    async fn delete_session(&self, entry: &HostSessionEntry) -> Result<bool, Error>;

    /// Applies `cut` to the session of `entry` and moves it to generation `next`, guarded on
    /// its generation and lifecycle revision. `false` when the session moved on, is gone, or
    /// the cut no longer applies (nothing changed).
    async fn apply_cut(
        &self,
        entry: &HostSessionEntry,
        cut: &Cut,
        next: &SessionId,
    ) -> Result<bool, Error>;

    /// Moves the session of `entry` to generation `next` (the predecessor recorded with how it
    /// was replaced, `change`, the lifecycle revision bumped, the transcript and its active
    /// leaf kept), guarded on its generation and lifecycle revision; the session as it is
    /// then. `None` when the session moved on or is gone (nothing changed). A `/new` or
    /// `/reset` is [`GenerationChange::Reset`](tether_core::GenerationChange::Reset): no
    /// harness adopts the predecessor's native binding afterwards, whether or not the reset's
    /// notification ran.
    async fn rotate_session(
        &self,
        entry: &HostSessionEntry,
        next: &SessionId,
        change: GenerationChange,
    ) -> Result<Option<HostSessionEntry>, Error>;

    /// Removes the binding rows of `entry` (both key shapes, every namespace) that no harness
    /// owns, for an operator's deletion. Refused, changing nothing, with
    /// [`Error::MutationBlocked`] while one of them holds a live lease, and with
    /// [`HostErrorKind::BindingQuarantined`](tether_core::HostErrorKind::BindingQuarantined)
    /// while one of their keys is quarantined. Returns how many rows were removed.
    async fn delete_unowned_bindings(&self, entry: &HostSessionEntry) -> Result<usize, Error>;

    /// The binding rows of the same store, inside this transaction: a harness's prepared
    /// mutation commits through it.
    fn row_tx(&self) -> &dyn RowTransaction;

    /// Commits. A failure means the outcome is unknown: the caller must not roll anything
    /// back.
    async fn commit(self) -> Result<(), Error>
    where
        Self: Sized;

    /// Rolls back: nothing of the transaction is kept.
    async fn rollback(self) -> Result<(), Error>
    where
        Self: Sized;
}

/// A store whose host sessions the coordinator deletes, rewinds and forks.
#[async_trait]
pub trait HostBackend: Clone + Send + Sync + fmt::Debug + 'static {
    /// The backend's transaction. It may offer more than the port (the SQL one runs the
    /// host's own statements); the host's writes of a deletion receive it.
    type Transaction: HostTransaction + 'static;

    /// Opens a host transaction.
    async fn begin_host(&self) -> Result<Self::Transaction, Error>;

    /// The session entry of `key`, read outside any transaction.
    async fn host_session(&self, key: &SessionKey) -> Result<Option<HostSessionEntry>, Error>;

    /// Checks `cut` outside any transaction: the session's entry when it applies, the refusal
    /// otherwise; a session that does not exist is
    /// [`HostErrorKind::SessionNotFound`](tether_core::HostErrorKind::SessionNotFound).
    async fn check_host_cut(
        &self,
        key: &SessionKey,
        cut: &Cut,
    ) -> Result<Result<HostSessionEntry, CutStatus>, Error>;

    /// The upstream link of `key`, read outside any transaction.
    async fn host_upstream_link(&self, key: &SessionKey) -> Result<Option<String>, Error>;

    /// Forks `source` at the user message `at` into the new session `new` (the source is not
    /// touched).
    async fn fork_host_session(
        &self,
        source: &SessionKey,
        at: &TranscriptAnchor,
        new: NewHostSession,
    ) -> Result<CutStatus, Error>;
}
