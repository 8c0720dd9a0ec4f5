//! The host side of session deletion, context reset and reset, end to end (the contract:
//! `docs/deletion-and-reset.md`).
//!
//! [`HostSessions`] runs one operation over sorted, deduplicated targets:
//!
//! 1. **idle check** against competing admitted work ([`WorkTracker`]), before preparation and
//!    inside every authority check;
//! 2. **owner capture** from the [`HarnessRegistry`]: deletions go to harnesses with a deletion
//!    hook (filtered by the entry's `agent_harness_id` when set), context resets to every harness
//!    with a context-reset hook. Each owner's authority fails with
//!    [`Error::OwnerChanged`] once the operation closed or the registry changed;
//! 3. **nested preparation**: each (owner, target) pair's hook is called with a continuation that
//!    prepares the next pair, so every harness holds its lease across the whole host
//!    transaction; the innermost continuation runs the host transaction;
//! 4. **commit edge** inside one [`HostTransaction`] of the backend: the session row's
//!    `session_id`, `lifecycle_revision` (and for a context reset `previous_session_id`) must
//!    equal the target's; each prepared mutation is pushed onto the rollback list **before**
//!    its `commit` runs (through [`HostTransaction::row_tx`], so binding rows in the same store
//!    change atomically with the session row); then the host's own writes and, when asked, the
//!    removal of unowned binding rows; then the session row changes;
//! 5. **failure before COMMIT**: the transaction rolls back, then the pushed mutations roll
//!    back in reverse order; rollback failures are aggregated into [`Error::RollbackFailed`].
//!    **Nothing is rolled back after COMMIT**;
//! 6. after a deletion every registered harness gets a `reset(reason: Deleted)` notification
//!    through the SDK's reset fan-out (concurrent; it owns nothing; a failure is logged once
//!    per harness per process).
//!
//! A reset (`/new`, `/reset`) is simpler: the session row moves to its next generation in one
//! transaction (with the host's own writes, when given), then every registered harness gets
//! `reset` with the new generation through the same fan-out.
//!
//! Owner authority is the SDK's [`HarnessOwnerAuthority`] (closed when the operation ends,
//! lost when the registry changes or the registration is replaced), plus the operation's own
//! conditions: every rolled-back initialization still current, no competing work.
//!
//! The coordinator is generic over the [`HostBackend`] port, so the same code runs on SQLite,
//! PostgreSQL and the memory store.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tether_core::{
    AgentHarness, AssertCurrent, BindingKey, BoxFuture, Error, HarnessRegistry, HostSessionEntry,
    InitializationHandle, MutationRun, ResetParams, ResetReason, RowTransaction,
    SessionContextResetParams, SessionDeletionParams, SessionId, SessionKey, SessionMutation,
    SettlementOutcome, TranscriptAnchor,
};
use tether_harness_sdk::reset::{HarnessOwnerAuthority, reset_registered_harness_sessions};
use tether_storage::{Cut, CutStatus, HostBackend, HostTransaction, NewHostSession, Store};

use crate::work::WorkTracker;

/// The host's own writes of one operation: called once, inside the transaction, with the
/// sessions it changes (as they were read): for a deletion or a context reset after the
/// harnesses committed and before the session rows change, for a reset after the row moved
/// to its next generation.
type HostWrites<T> = Arc<
    dyn for<'a> Fn(&'a T, &'a [HostSessionEntry]) -> BoxFuture<'a, Result<(), Error>> + Send + Sync,
>;
type AfterMutations<T> =
    Arc<dyn for<'a> Fn(&'a T) -> BoxFuture<'a, Result<(), Error>> + Send + Sync>;
type AfterCommit = Arc<dyn Fn() -> Result<(), Error> + Send + Sync>;

/// Fault injection into the host transaction, for tests and chaos drills (installed with
/// `HostSessions::with_hooks`, feature `test-support`). A host's own writes go through
/// [`HostSessions::delete_sessions_with`] instead; an operator's removal of unowned binding
/// rows through [`DeletionRequest::removing_unowned_bindings`].
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub struct TransactionHooks<T = tether_storage::SqlHostTransaction> {
    after_mutations: Option<AfterMutations<T>>,
    after_commit: Option<AfterCommit>,
}

impl<T> Clone for TransactionHooks<T> {
    fn clone(&self) -> Self {
        Self {
            after_mutations: self.after_mutations.clone(),
            after_commit: self.after_commit.clone(),
        }
    }
}

impl<T> Default for TransactionHooks<T> {
    fn default() -> Self {
        Self {
            after_mutations: None,
            after_commit: None,
        }
    }
}

impl<T> std::fmt::Debug for TransactionHooks<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionHooks")
            .field("after_mutations", &self.after_mutations.is_some())
            .field("after_commit", &self.after_commit.is_some())
            .finish()
    }
}

#[cfg_attr(not(feature = "test-support"), allow(dead_code, unreachable_pub))]
impl<T> TransactionHooks<T> {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs inside the SQL transaction after every harness `commit` and before the session row
    /// changes. An error fails the transaction before COMMIT.
    #[must_use]
    pub fn after_mutations(
        mut self,
        f: impl for<'a> Fn(&'a T) -> BoxFuture<'a, Result<(), Error>> + Send + Sync + 'static,
    ) -> Self {
        self.after_mutations = Some(Arc::new(f));
        self
    }

    /// Hooks that inject the commit-edge and after-commit faults armed on a
    /// `FaultInjectingStore` (`faults` from its `host_transaction_faults`).
    #[cfg(feature = "test-support")]
    #[must_use]
    pub fn injecting(faults: tether_storage::fault_injection::HostTransactionFaults) -> Self {
        let after = faults.clone();
        Self::new()
            .after_mutations(move |_| {
                let fired = faults.commit_edge();
                Box::pin(async move { fired })
            })
            .after_commit(move || after.after_commit())
    }

    /// Runs right after COMMIT (the publication step). An error is returned to the caller but
    /// rolls nothing back.
    #[must_use]
    pub fn after_commit(
        mut self,
        f: impl Fn() -> Result<(), Error> + Send + Sync + 'static,
    ) -> Self {
        self.after_commit = Some(Arc::new(f));
        self
    }
}

/// One session to delete, with its options.
#[derive(Clone)]
pub struct DeletionRequest {
    /// The session to delete.
    pub session_key: SessionKey,
    /// The initialization this deletion rolls back: handed to the harnesses in
    /// [`SessionDeletionParams::initialization`], and every owner's authority also requires
    /// [`InitializationHandle::assert_rollback_current`] to pass.
    pub initialization: Option<Arc<dyn InitializationHandle>>,
    /// Also remove, in the same transaction, the session's binding rows that no registered
    /// harness owns (an operator's deletion: rows left by a harness that is not running in
    /// this process). Refused, changing nothing, while one of them holds a live lease.
    pub unowned_bindings: bool,
}

impl std::fmt::Debug for DeletionRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeletionRequest")
            .field("session_key", &self.session_key)
            .field("initialization", &self.initialization)
            .field("unowned_bindings", &self.unowned_bindings)
            .finish()
    }
}

impl DeletionRequest {
    /// A plain deletion of `session_key`.
    pub fn new(session_key: SessionKey) -> Self {
        Self {
            session_key,
            initialization: None,
            unowned_bindings: false,
        }
    }

    /// Marks the deletion as the rollback of `initialization`.
    #[must_use]
    pub fn with_initialization(mut self, initialization: Arc<dyn InitializationHandle>) -> Self {
        self.initialization = Some(initialization);
        self
    }

    /// Also removes the session's binding rows no harness owns (see
    /// [`unowned_bindings`](Self::unowned_bindings)).
    #[must_use]
    pub fn removing_unowned_bindings(mut self) -> Self {
        self.unowned_bindings = true;
        self
    }
}

type Initializations = Vec<Option<Arc<dyn InitializationHandle>>>;

/// Which operation runs.
#[derive(Debug, Clone)]
enum Operation {
    Delete,
    ContextReset { cut: Cut, next: SessionId },
}

impl Operation {
    fn is_delete(&self) -> bool {
        matches!(self, Self::Delete)
    }

    fn owner_changed_text(&self) -> &'static str {
        if self.is_delete() {
            "Session deletion harness owner changed: {harness_id}"
        } else {
            "Session mutation harness owner changed: {harness_id}"
        }
    }

    fn owner_changed(&self, owner: &str) -> Error {
        Error::OwnerChanged {
            owner: owner.to_owned(),
            message: self.owner_changed_text().replace("{harness_id}", owner),
        }
    }

    fn competing(&self, key: &SessionKey) -> Error {
        competing_work(if self.is_delete() { "delete" } else { "mutate" }, key)
    }
}

/// Refuses to `verb` the session of `key` while a run of it is in flight.
fn competing_work(verb: &str, key: &SessionKey) -> Error {
    Error::CompetingWork {
        session: key.to_string(),
        message: format!(
            "Cannot {verb} session while competing work is in flight for {key}; retry after the run completes"
        ),
    }
}

/// A harness's lease wait that timed out names the binding key (hashed); the operation knows
/// which of its sessions that key belongs to, and says so.
fn naming_the_session(err: Error, targets: &[HostSessionEntry]) -> Error {
    match err {
        Error::LeaseTimeout { key, message } => {
            let session = targets
                .iter()
                .find(|t| tether_storage::session_binding_keys(t).contains(&key));
            Error::LeaseTimeout {
                message: match session {
                    Some(t) => format!("{message} (host session {})", t.session_key),
                    None => message,
                },
                key,
            }
        }
        other => other,
    }
}

fn session_changed(key: &SessionKey, session_id: &SessionId) -> Error {
    Error::SupersededGeneration {
        session_id: session_id.to_string(),
        message: format!("Session changed before deletion: {key}"),
    }
}

fn external_harness(key: &SessionKey, upstream: &str) -> Error {
    Error::Revoked {
        message: format!(
            "Cannot change the context of session {key}: it is driven by an external agent harness ({upstream})"
        ),
    }
}

/// A harness mutation whose `commit` and `rollback` check the owner's authority first.
struct GuardedMutation {
    inner: Arc<dyn SessionMutation>,
    assert_current: AssertCurrent,
}

#[async_trait]
impl SessionMutation for GuardedMutation {
    async fn commit(&self, tx: &dyn RowTransaction) -> Result<(), Error> {
        (self.assert_current)()?;
        self.inner.commit(tx).await
    }

    async fn rollback(&self) -> Result<(), Error> {
        (self.assert_current)()?;
        self.inner.rollback().await
    }

    /// Settlement reports what already happened; it needs no authority.
    async fn settle_outcome(
        &self,
        outcome: SettlementOutcome,
        error: Option<Error>,
    ) -> Result<(), Error> {
        self.inner.settle_outcome(outcome, error).await
    }
}

/// One harness taking part in an operation: the SDK's owner authority over its registration,
/// plus the operation's own conditions (initializations still current, no competing work).
struct Owner {
    authority: HarnessOwnerAuthority,
    assert_current: AssertCurrent,
}

struct Prepared {
    target: usize,
    mutation: Arc<dyn SessionMutation>,
}

struct OpContext<T> {
    op: Operation,
    targets: Vec<HostSessionEntry>,
    initializations: Initializations,
    /// Per target: also remove the binding rows no harness owns.
    unowned_bindings: Vec<bool>,
    owners: Vec<Owner>,
    /// (owner index, target index), targets outermost in key order.
    pairs: Vec<(usize, usize)>,
    prepared: Mutex<Vec<Prepared>>,
    host_ran: AtomicBool,
    host_error: Mutex<Option<Error>>,
    host_writes: Option<HostWrites<T>>,
}

/// Host session operations that involve the registered harnesses: deletion and context reset
/// (rewind, branch switch), plus fork (which never touches native context) — one coordinator
/// over any store implementing the [`HostBackend`] port (the SQL [`Store`] by default, or
/// `MemoryStore`).
pub struct HostSessions<B: HostBackend = Store> {
    store: B,
    registry: Arc<HarnessRegistry>,
    work: Arc<dyn WorkTracker>,
    hooks: TransactionHooks<B::Transaction>,
    _backend: PhantomData<fn() -> B>,
}

impl<B: HostBackend> std::fmt::Debug for HostSessions<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSessions")
            .field("store", &self.store)
            .field("registry", &self.registry)
            .field("work", &self.work)
            .field("hooks", &self.hooks)
            .finish()
    }
}

impl<B: HostBackend> HostSessions<B> {
    /// Operations over `store`'s host sessions with owners from `registry`; `work` tells
    /// whether runs are in flight for a session (an operation waits for none and refuses).
    pub fn new(store: B, registry: Arc<HarnessRegistry>, work: Arc<dyn WorkTracker>) -> Self {
        Self {
            store,
            registry,
            work,
            hooks: TransactionHooks::default(),
            _backend: PhantomData,
        }
    }

    /// Installs fault-injection hooks (feature `test-support`).
    #[cfg(feature = "test-support")]
    #[must_use]
    pub fn with_hooks(mut self, hooks: TransactionHooks<B::Transaction>) -> Self {
        self.hooks = hooks;
        self
    }

    /// The store.
    pub fn store(&self) -> &B {
        &self.store
    }

    fn idle(&self, op: &Operation, targets: &[HostSessionEntry]) -> Result<(), Error> {
        for t in targets {
            if self.work.has_competing_work(&t.session_key, &t.session_id) {
                return Err(op.competing(&t.session_key));
            }
        }
        Ok(())
    }

    /// Deletes the sessions of `keys` (deduplicated, sorted; missing keys skipped) together
    /// with their transcripts and, through the harnesses' prepared mutations, their native
    /// bindings. Returns the deleted keys.
    #[tracing::instrument(level = "info", skip(self, keys), fields(count = keys.len()))]
    pub async fn delete_sessions(&self, keys: &[SessionKey]) -> Result<Vec<SessionKey>, Error> {
        let requests: Vec<DeletionRequest> =
            keys.iter().cloned().map(DeletionRequest::new).collect();
        self.delete(&requests, None).await
    }

    /// Like [`delete_sessions`](Self::delete_sessions), with the host's own writes in the same
    /// transaction: `host_writes` runs once, after every harness committed its prepared
    /// mutation and before the session rows are removed, with the backend's transaction (on
    /// the SQL store a [`SqlHostTransaction`](tether_storage::SqlHostTransaction), which runs
    /// the host's statements) and the sessions being deleted. If it fails, nothing commits:
    /// the transaction rolls back and the harness mutations roll back newest first. It is not
    /// called when none of `keys` exists.
    ///
    /// ```no_run
    /// # async fn demo(hosts: tether_host::HostSessions, key: tether_core::SessionKey) -> Result<(), tether_core::Error> {
    /// hosts
    ///     .delete_sessions_with(&[key], |tx, deleted| {
    ///         Box::pin(async move {
    ///             for entry in deleted {
    ///                 tx.execute(
    ///                     "DELETE FROM my_chat_threads WHERE session_key = $1",
    ///                     vec![entry.session_key.as_str().into()],
    ///                 )
    ///                 .await?;
    ///             }
    ///             Ok(())
    ///         })
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(level = "info", skip(self, keys, host_writes), fields(count = keys.len()))]
    pub async fn delete_sessions_with<F>(
        &self,
        keys: &[SessionKey],
        host_writes: F,
    ) -> Result<Vec<SessionKey>, Error>
    where
        F: for<'a> Fn(
                &'a B::Transaction,
                &'a [HostSessionEntry],
            ) -> BoxFuture<'a, Result<(), Error>>
            + Send
            + Sync
            + 'static,
    {
        let requests: Vec<DeletionRequest> =
            keys.iter().cloned().map(DeletionRequest::new).collect();
        self.delete_requests_with(&requests, host_writes).await
    }

    /// Like [`delete_requests`](Self::delete_requests), with the host's own writes in the same
    /// transaction, as [`delete_sessions_with`](Self::delete_sessions_with) runs them (before
    /// the removal of unowned binding rows, which they can still read).
    #[tracing::instrument(level = "info", skip(self, requests, host_writes), fields(count = requests.len()))]
    pub async fn delete_requests_with<F>(
        &self,
        requests: &[DeletionRequest],
        host_writes: F,
    ) -> Result<Vec<SessionKey>, Error>
    where
        F: for<'a> Fn(
                &'a B::Transaction,
                &'a [HostSessionEntry],
            ) -> BoxFuture<'a, Result<(), Error>>
            + Send
            + Sync
            + 'static,
    {
        self.delete(requests, Some(Arc::new(host_writes))).await
    }

    /// Like [`delete_sessions`](Self::delete_sessions), with per-session options (the
    /// initialization a deletion rolls back, the removal of unowned binding rows). For a key
    /// requested twice the first request wins.
    #[tracing::instrument(level = "info", skip(self, requests), fields(count = requests.len()))]
    pub async fn delete_requests(
        &self,
        requests: &[DeletionRequest],
    ) -> Result<Vec<SessionKey>, Error> {
        self.delete(requests, None).await
    }

    async fn delete(
        &self,
        requests: &[DeletionRequest],
        host_writes: Option<HostWrites<B::Transaction>>,
    ) -> Result<Vec<SessionKey>, Error> {
        let mut requests: Vec<DeletionRequest> = requests.to_vec();
        requests.sort_by(|a, b| a.session_key.cmp(&b.session_key));
        requests.dedup_by(|later, first| later.session_key == first.session_key);
        let mut targets = Vec::new();
        let mut initializations = Vec::new();
        let mut unowned = Vec::new();
        for request in &requests {
            if let Some(entry) = self.store.host_session(&request.session_key).await? {
                targets.push(entry);
                initializations.push(request.initialization.clone());
                unowned.push(request.unowned_bindings);
            }
        }
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        self.run(
            Operation::Delete,
            targets.clone(),
            initializations,
            unowned,
            host_writes,
        )
        .await?;
        for t in &targets {
            self.notify_deleted(t).await;
        }
        Ok(targets.into_iter().map(|t| t.session_key).collect())
    }

    /// Deletes a session outside a prepared deletion: refused ([`Error::InvalidArgument`], never
    /// retryable) while any registered harness implements the deletion hook (its native binding
    /// would be abandoned): use [`delete_sessions`](Self::delete_sessions) then.
    #[tracing::instrument(level = "info", skip(self))]
    pub async fn delete_without_harnesses(&self, key: &SessionKey) -> Result<bool, Error> {
        let (_, harnesses) = self.registry.snapshot();
        if harnesses.iter().any(|h| h.session_deletion().is_some()) {
            return Err(Error::invalid_argument(format!(
                "Session deletion requires prepared harness ownership: {key}"
            )));
        }
        let Some(entry) = self.store.host_session(key).await? else {
            return Ok(false);
        };
        let tx = self.store.begin_host().await?;
        match tx.delete_session(&entry).await {
            Ok(true) => tx.commit().await.map(|()| true),
            Ok(false) => {
                rollback_quietly(tx).await;
                Ok(false)
            }
            Err(err) => {
                rollback_quietly(tx).await;
                Err(err)
            }
        }
    }

    /// Rewinds the session to just before the user message `to`, invalidating native context
    /// through every harness with a context-reset hook, and moves it to generation `next`.
    /// A session that does not exist is
    /// [`HostErrorKind::SessionNotFound`](tether_core::HostErrorKind::SessionNotFound); a
    /// refused cut (a missing entry, not a user message, …) is its [`CutStatus`] and changes
    /// nothing.
    #[tracing::instrument(level = "info", skip(self))]
    pub async fn rewind(
        &self,
        key: &SessionKey,
        to: TranscriptAnchor,
        next: SessionId,
    ) -> Result<CutStatus, Error> {
        self.context_reset(key, Cut::Rewind { to }, next, None)
            .await
    }

    /// Like [`rewind`](Self::rewind), with the host's own writes in the same transaction:
    /// `host_writes` runs once, after every harness committed its prepared invalidation and
    /// before the cut is applied, with the backend's transaction and the session (as it was
    /// read, before the cut). If it fails, nothing commits, as for
    /// [`delete_sessions_with`](Self::delete_sessions_with). It is not called when the cut is
    /// refused.
    #[tracing::instrument(level = "info", skip(self, host_writes))]
    pub async fn rewind_with<F>(
        &self,
        key: &SessionKey,
        to: TranscriptAnchor,
        next: SessionId,
        host_writes: F,
    ) -> Result<CutStatus, Error>
    where
        F: for<'a> Fn(
                &'a B::Transaction,
                &'a [HostSessionEntry],
            ) -> BoxFuture<'a, Result<(), Error>>
            + Send
            + Sync
            + 'static,
    {
        self.context_reset(key, Cut::Rewind { to }, next, Some(Arc::new(host_writes)))
            .await
    }

    /// Makes the branch tip `to` the active leaf, invalidating native context, and moves the
    /// session to generation `next`. A missing session and a refused switch are answered as
    /// by [`rewind`](Self::rewind).
    #[tracing::instrument(level = "info", skip(self))]
    pub async fn switch_branch(
        &self,
        key: &SessionKey,
        to: TranscriptAnchor,
        next: SessionId,
    ) -> Result<CutStatus, Error> {
        self.context_reset(key, Cut::SwitchBranch { to }, next, None)
            .await
    }

    /// Like [`switch_branch`](Self::switch_branch), with the host's own writes in the same
    /// transaction, run as for [`rewind_with`](Self::rewind_with).
    #[tracing::instrument(level = "info", skip(self, host_writes))]
    pub async fn switch_branch_with<F>(
        &self,
        key: &SessionKey,
        to: TranscriptAnchor,
        next: SessionId,
        host_writes: F,
    ) -> Result<CutStatus, Error>
    where
        F: for<'a> Fn(
                &'a B::Transaction,
                &'a [HostSessionEntry],
            ) -> BoxFuture<'a, Result<(), Error>>
            + Send
            + Sync
            + 'static,
    {
        self.context_reset(
            key,
            Cut::SwitchBranch { to },
            next,
            Some(Arc::new(host_writes)),
        )
        .await
    }

    /// Resets the session (`/new`, `/reset`): its row moves to generation `next` in one
    /// transaction (the predecessor recorded as replaced by a
    /// [`GenerationChange::Reset`](tether_core::GenerationChange::Reset), the lifecycle
    /// revision bumped, the transcript kept), then every registered harness is told (`reset`
    /// with `reason` and the new generation), which clears the binding the predecessor still
    /// owns and cleans up native state. Returns the session as it is now.
    ///
    /// The notification runs after the COMMIT, on a task of its own (it finishes even when the
    /// caller stops waiting) and also when the COMMIT's outcome is unknown. A process that
    /// dies between the COMMIT and the notification leaves the predecessor's binding in place,
    /// but the row says the generation began with a reset, so the next turn clears that
    /// binding instead of continuing it (the Codex harness also archives the old thread when
    /// its turn or compaction clears it). Still call the harnesses again
    /// (`reset_registered_harness_sessions` with
    /// [`ResetParams::of_entry`](tether_core::ResetParams::of_entry)) when a host restarts
    /// after such a crash: a harness may clean up native state only in its `reset`, and a
    /// compaction before any turn leaves the old binding to it. The notification names the
    /// generation it replaced, so a harness keeps a thread the new generation's first turn
    /// bound before a late notification ran.
    ///
    /// Refused, nothing changed: while a run of the session is in flight
    /// ([`Error::CompetingWork`]), for a session driven by an external agent harness, for
    /// `next` equal to the current generation ([`Error::InvalidArgument`]); a missing session
    /// is [`HostErrorKind::SessionNotFound`](tether_core::HostErrorKind::SessionNotFound), a
    /// session another writer moved on meanwhile
    /// [`HostErrorKind::SessionChanged`](tether_core::HostErrorKind::SessionChanged).
    #[tracing::instrument(level = "info", skip(self))]
    pub async fn reset(
        &self,
        key: &SessionKey,
        next: SessionId,
        reason: ResetReason,
    ) -> Result<HostSessionEntry, Error> {
        self.reset_in(key, next, reason, None).await
    }

    /// Like [`reset`](Self::reset), with the host's own writes in the same transaction:
    /// `host_writes` runs once, after the session moved to `next` and before the COMMIT, with
    /// the backend's transaction and the session as it was read (its old generation). If it
    /// fails, nothing commits and no harness is told.
    ///
    /// ```no_run
    /// # async fn demo(hosts: tether_host::HostSessions, key: tether_core::SessionKey) -> Result<(), tether_core::Error> {
    /// use tether_core::{ResetReason, SessionId};
    /// hosts
    ///     .reset_with(&key, SessionId::new("gen-2")?, ResetReason::New, |tx, reset| {
    ///         Box::pin(async move {
    ///             tx.execute(
    ///                 "UPDATE my_chat_threads SET title = 'New chat' WHERE session_key = $1",
    ///                 vec![reset[0].session_key.as_str().into()],
    ///             )
    ///             .await?;
    ///             Ok(())
    ///         })
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(level = "info", skip(self, host_writes))]
    pub async fn reset_with<F>(
        &self,
        key: &SessionKey,
        next: SessionId,
        reason: ResetReason,
        host_writes: F,
    ) -> Result<HostSessionEntry, Error>
    where
        F: for<'a> Fn(
                &'a B::Transaction,
                &'a [HostSessionEntry],
            ) -> BoxFuture<'a, Result<(), Error>>
            + Send
            + Sync
            + 'static,
    {
        self.reset_in(key, next, reason, Some(Arc::new(host_writes)))
            .await
    }

    async fn reset_in(
        &self,
        key: &SessionKey,
        next: SessionId,
        reason: ResetReason,
        host_writes: Option<HostWrites<B::Transaction>>,
    ) -> Result<HostSessionEntry, Error> {
        let entry = self
            .store
            .host_session(key)
            .await?
            .ok_or_else(|| Error::session_not_found(key))?;
        if entry.session_id == next {
            return Err(Error::invalid_argument(format!(
                "session {key} is at generation {next} already; a reset moves it to a new one"
            )));
        }
        if let Some(upstream) = self.store.host_upstream_link(key).await? {
            return Err(external_harness(key, &upstream));
        }
        self.reset_idle(&entry)?;
        let tx = self.store.begin_host().await?;
        let written = async {
            let Some(now) = tx
                .rotate_session(&entry, &next, tether_core::GenerationChange::Reset)
                .await?
            else {
                return Err(Error::from(tether_core::HostErrorKind::SessionChanged {
                    key: key.to_string(),
                }));
            };
            if let Some(writes) = &host_writes {
                writes(&tx, std::slice::from_ref(&entry)).await?;
            }
            if let Some(after) = &self.hooks.after_mutations {
                after(&tx).await?;
            }
            // A run admitted while the transaction waited for its write lock is refused too.
            self.reset_idle(&entry)?;
            Ok(now)
        }
        .await;
        let now = match written {
            Ok(now) => now,
            Err(err) => {
                rollback_quietly(tx).await;
                return Err(err);
            }
        };
        let committed = tx.commit().await;
        // The harnesses are told on a task of their own, so a caller that stops waiting does
        // not leave the predecessor's binding in place; and also when the COMMIT's answer was
        // lost (its outcome unknown): a reset that did not commit finds its new generation
        // not current, and its hooks change nothing.
        let registry = Arc::clone(&self.registry);
        // For the new generation, replacing the old one: a turn that binds the new generation
        // before this (late) notification runs keeps its thread.
        let params = ResetParams::of_entry(&now, reason);
        let told = tokio::spawn(async move {
            reset_registered_harness_sessions(&[&registry], &params).await;
        });
        committed?;
        if let Some(after) = &self.hooks.after_commit {
            after()?;
        }
        if let Err(join) = told.await {
            tracing::warn!(error = %join, "the reset's harness notification did not finish");
        }
        Ok(now)
    }

    fn reset_idle(&self, entry: &HostSessionEntry) -> Result<(), Error> {
        if self
            .work
            .has_competing_work(&entry.session_key, &entry.session_id)
        {
            return Err(competing_work("reset", &entry.session_key));
        }
        Ok(())
    }

    /// Forks at a user message into a new session. The source and its native context are not
    /// touched.
    #[tracing::instrument(level = "info", skip(self, new), fields(new = %new.session_key))]
    pub async fn fork(
        &self,
        source: &SessionKey,
        at: &TranscriptAnchor,
        new: NewHostSession,
    ) -> Result<CutStatus, Error> {
        self.store.fork_host_session(source, at, new).await
    }

    async fn context_reset(
        &self,
        key: &SessionKey,
        cut: Cut,
        next: SessionId,
        host_writes: Option<HostWrites<B::Transaction>>,
    ) -> Result<CutStatus, Error> {
        let entry = match self.store.check_host_cut(key, &cut).await? {
            Ok(entry) => entry,
            Err(status) => return Ok(status),
        };
        if let Some(upstream) = self.store.host_upstream_link(key).await? {
            return Err(external_harness(key, &upstream));
        }
        self.run(
            Operation::ContextReset { cut, next },
            vec![entry],
            vec![None],
            vec![false],
            host_writes,
        )
        .await?;
        Ok(CutStatus::Created)
    }

    /// The owners of an operation: every harness with the operation's hook (a deletion's
    /// filtered by the entries' `agent_harness_id` when set), each with the SDK's owner
    /// authority over its registration and the operation's own conditions.
    fn owners(
        &self,
        op: &Operation,
        targets: &[HostSessionEntry],
        initializations: &Initializations,
    ) -> Result<Vec<Owner>, Error> {
        let (_, harnesses) = self.registry.snapshot();
        let mut owners = Vec::new();
        for harness in harnesses {
            let has_hook = if op.is_delete() {
                harness.session_deletion().is_some()
            } else {
                harness.session_context_reset().is_some()
            };
            if !has_hook {
                continue;
            }
            let authority = HarnessOwnerAuthority::capture(&self.registry, &harness, None)?
                .with_owner_changed_text(op.owner_changed_text());
            let (check, work, op2, keys, inits) = (
                authority.clone(),
                Arc::clone(&self.work),
                op.clone(),
                targets.to_vec(),
                initializations.clone(),
            );
            let assert_current: AssertCurrent = Arc::new(move || {
                check.assert_current()?;
                for init in inits.iter().flatten() {
                    init.assert_rollback_current()?;
                }
                for t in &keys {
                    if work.has_competing_work(&t.session_key, &t.session_id) {
                        return Err(op2.competing(&t.session_key));
                    }
                }
                Ok(())
            });
            owners.push(Owner {
                authority,
                assert_current,
            });
        }
        Ok(owners)
    }

    async fn run(
        &self,
        op: Operation,
        targets: Vec<HostSessionEntry>,
        initializations: Initializations,
        unowned_bindings: Vec<bool>,
        host_writes: Option<HostWrites<B::Transaction>>,
    ) -> Result<(), Error> {
        self.idle(&op, &targets)?;
        let owners = self.owners(&op, &targets, &initializations)?;
        let mut pairs = Vec::new();
        for (ti, target) in targets.iter().enumerate() {
            for (oi, owner) in owners.iter().enumerate() {
                let harness = owner.authority.harness();
                let filtered_out = op.is_delete()
                    && target
                        .agent_harness_id
                        .as_ref()
                        .is_some_and(|wanted| wanted != harness.id());
                if !filtered_out {
                    pairs.push((oi, ti));
                }
            }
        }
        let ctx = OpContext {
            op,
            targets,
            initializations,
            unowned_bindings,
            owners,
            pairs,
            prepared: Mutex::new(Vec::new()),
            host_ran: AtomicBool::new(false),
            host_error: Mutex::new(None),
            host_writes,
        };
        let chain = self.prepare(&ctx, 0).await;
        for owner in &ctx.owners {
            owner.authority.close();
        }
        let host_error = ctx
            .host_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        match (host_error, chain) {
            (Some(host), _) => Err(host),
            (None, Err(err)) => Err(naming_the_session(err, &ctx.targets)),
            (None, Ok(())) if !ctx.host_ran.load(Ordering::SeqCst) => Err(Error::MutationBlocked {
                message: "a harness returned from its deletion hook without running the host operation; nothing was changed".into(),
            }),
            (None, Ok(())) => Ok(()),
        }
    }

    fn prepare<'a>(
        &'a self,
        ctx: &'a OpContext<B::Transaction>,
        idx: usize,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let Some(&(oi, ti)) = ctx.pairs.get(idx) else {
                ctx.host_ran.store(true, Ordering::SeqCst);
                let result = self.host_transaction(ctx).await;
                if let Err(err) = &result {
                    *ctx.host_error
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(err.clone());
                }
                return result;
            };
            let owner = &ctx.owners[oi];
            let target = &ctx.targets[ti];
            let run: MutationRun<'a> = Box::new(move |mutation| {
                Box::pin(async move {
                    ctx.prepared
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(Prepared {
                            target: ti,
                            mutation: Arc::new(GuardedMutation {
                                inner: mutation,
                                assert_current: Arc::clone(&owner.assert_current),
                            }),
                        });
                    self.prepare(ctx, idx + 1).await
                })
            });
            let harness: &Arc<dyn AgentHarness> = owner.authority.harness();
            let id = harness.id().to_string();
            match &ctx.op {
                Operation::Delete => {
                    let hook = harness
                        .session_deletion()
                        .ok_or_else(|| ctx.op.owner_changed(&id))?;
                    let params = SessionDeletionParams {
                        agent_id: target.agent_id.clone(),
                        session_key: target.session_key.clone(),
                        session_id: target.session_id.clone(),
                        lifecycle_revision: Some(target.lifecycle_revision),
                        initialization: ctx.initializations.get(ti).cloned().flatten(),
                        assert_current: Arc::clone(&owner.assert_current),
                    };
                    hook.with_session_deletion(params, run).await
                }
                Operation::ContextReset { .. } => {
                    let hook = harness
                        .session_context_reset()
                        .ok_or_else(|| ctx.op.owner_changed(&id))?;
                    let params = SessionContextResetParams {
                        agent_id: target.agent_id.clone(),
                        session_key: target.session_key.clone(),
                        session_id: target.session_id.clone(),
                        previous_session_id: target.previous_session_id.clone(),
                        lifecycle_revision: Some(target.lifecycle_revision),
                        assert_current: Arc::clone(&owner.assert_current),
                    };
                    hook.with_session_context_reset(params, run).await
                }
            }
        })
    }

    async fn host_transaction(&self, ctx: &OpContext<B::Transaction>) -> Result<(), Error> {
        let tx = self.store.begin_host().await?;
        let mut pushed: Vec<Arc<dyn SessionMutation>> = Vec::new();
        if let Err(original) = self.commit_edge(ctx, &tx, &mut pushed).await {
            // Failed before COMMIT: the rollback restores the rows deleted through the
            // transaction; the harnesses undo what they hold elsewhere, newest first.
            rollback_quietly(tx).await;
            return Err(Self::roll_back(&pushed, original).await);
        }
        if let Err(err) = tx.commit().await {
            // The COMMIT itself failed: whether it happened cannot be known, so nothing is
            // rolled back (that could resurrect committed deletions); every owner blocks its key.
            // The error names the first target's physical binding key; the message names all.
            let Some(first) = ctx.targets.first() else {
                return Err(err);
            };
            let keys: Vec<&str> = ctx.targets.iter().map(|t| t.session_key.as_str()).collect();
            let error = Error::OutcomeUnknown {
                key: BindingKey::physical(&first.agent_id, &first.session_id),
                message: format!(
                    "the host transaction's COMMIT for {} failed and its outcome is unknown: {err}; the affected keys are quarantined until an operator checks them",
                    keys.join(", ")
                ),
                cause: Some(Arc::new(err)),
            };
            for mutation in &pushed {
                if let Err(settle) = mutation
                    .settle_outcome(SettlementOutcome::Unknown, Some(error.clone()))
                    .await
                {
                    tracing::warn!(error = %settle, "settling an unknown deletion outcome failed");
                }
            }
            return Err(error);
        }
        // Committed: from here on nothing is undone.
        for mutation in &pushed {
            if let Err(err) = mutation
                .settle_outcome(SettlementOutcome::Committed, None)
                .await
            {
                tracing::warn!(error = %err, "session mutation committed, but its post-commit settlement failed");
            }
        }
        if let Some(after) = &self.hooks.after_commit {
            after()?;
        }
        Ok(())
    }

    /// Runs the rollback list newest first, settling each rolled-back mutation, and aggregates
    /// failures with the original error.
    async fn roll_back(pushed: &[Arc<dyn SessionMutation>], original: Error) -> Error {
        let mut failures = Vec::new();
        for mutation in pushed.iter().rev() {
            match mutation.rollback().await {
                Ok(()) => {
                    if let Err(err) = mutation
                        .settle_outcome(SettlementOutcome::RolledBack, None)
                        .await
                    {
                        failures.push(err);
                    }
                }
                Err(err) => failures.push(err),
            }
        }
        if failures.is_empty() {
            original
        } else {
            Error::RollbackFailed {
                original: Arc::new(original),
                failures,
            }
        }
    }

    async fn check_links(
        ctx: &OpContext<B::Transaction>,
        tx: &B::Transaction,
    ) -> Result<(), Error> {
        if !ctx.op.is_delete() {
            for t in &ctx.targets {
                if let Some(upstream) = tx.upstream_link(&t.session_key).await? {
                    return Err(external_harness(&t.session_key, &upstream));
                }
            }
        }
        Ok(())
    }

    async fn commit_edge(
        &self,
        ctx: &OpContext<B::Transaction>,
        tx: &B::Transaction,
        pushed: &mut Vec<Arc<dyn SessionMutation>>,
    ) -> Result<(), Error> {
        for target in &ctx.targets {
            tx.session(&target.session_key)
                .await?
                .filter(|current| {
                    current.session_id == target.session_id
                        && current.lifecycle_revision == target.lifecycle_revision
                        && (ctx.op.is_delete()
                            || current.previous_session_id == target.previous_session_id)
                })
                .ok_or_else(|| session_changed(&target.session_key, &target.session_id))?;
        }
        Self::check_links(ctx, tx).await?;
        self.idle(&ctx.op, &ctx.targets)?;
        let prepared: Vec<(usize, Arc<dyn SessionMutation>)> = ctx
            .prepared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|p| (p.target, Arc::clone(&p.mutation)))
            .collect();
        for (ti, target) in ctx.targets.iter().enumerate() {
            let has_owner = ctx.pairs.iter().any(|&(_, t)| t == ti);
            if has_owner && !prepared.iter().any(|(t, _)| *t == ti) {
                return Err(Error::MutationBlocked {
                    message: format!(
                        "Session deletion requires prepared harness ownership: {}",
                        target.session_key
                    ),
                });
            }
        }
        for (_, mutation) in prepared {
            pushed.push(Arc::clone(&mutation));
            mutation.commit(tx.row_tx()).await?;
        }
        // The host's writes first: they may read the rows the removal below deletes.
        if let Some(writes) = &ctx.host_writes {
            writes(tx, &ctx.targets).await?;
        }
        for (target, unowned) in ctx.targets.iter().zip(&ctx.unowned_bindings) {
            if *unowned {
                tx.delete_unowned_bindings(target).await?;
            }
        }
        if let Some(after) = &self.hooks.after_mutations {
            after(tx).await?;
        }
        Self::check_links(ctx, tx).await?;
        for target in &ctx.targets {
            let applied = match &ctx.op {
                Operation::Delete => tx.delete_session(target).await?,
                Operation::ContextReset { cut, next } => tx.apply_cut(target, cut, next).await?,
            };
            if !applied {
                return Err(session_changed(&target.session_key, &target.session_id));
            }
        }
        Ok(())
    }

    /// After a deletion every registered harness is told (`reset` with reason `Deleted`): the
    /// SDK's fan-out, concurrent, failures logged once per harness per process.
    async fn notify_deleted(&self, target: &HostSessionEntry) {
        let params = ResetParams::new(
            target.agent_id.clone(),
            target.session_id.clone(),
            Some(target.session_key.clone()),
            ResetReason::Deleted,
        )
        .with_lifecycle_revision(target.lifecycle_revision);
        reset_registered_harness_sessions(&[&self.registry], &params).await;
    }
}

/// Rolls back a transaction whose failure is already being reported; a rollback failure is
/// logged, never returned in place of the original error.
async fn rollback_quietly<T: HostTransaction>(tx: T) {
    if let Err(err) = tx.rollback().await {
        tracing::warn!(error = %err, "host transaction rollback failed");
    }
}
