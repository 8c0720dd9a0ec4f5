//! Transactional deletion and deletion settlement (see `docs/lifecycle.md`, "`with_deletion`",
//! and `docs/deletion-and-reset.md`).
//!
//! [`Lifecycle::with_deletion`] prepares a [`DeletionMutation`] for one key. The host pushes it
//! onto its rollback list, then calls [`SessionMutation::commit`] at its commit edge with its own
//! open SQL transaction (the decision in `docs/deletion-and-reset.md`): the binding row is deleted
//! through that [`RowTransaction`] with an exact-token, exact-value predicate, so it disappears
//! atomically with the host's session row. After the transaction the host settles the mutation:
//! committed, rolled back, or unknown ([`SessionMutation::settle_outcome`](tether_core::SessionMutation::settle_outcome)).

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tether_core::{
    AssertCurrent, BindingKey, BindingStore, Error, LeaseWrite, Namespace, RecordCodec,
    RowPredicate, RowTransaction, RowWrite, SessionMutation, StoredRow, decode_row,
};
use tracing::Instrument;

use super::instance::{LeaseOptions, Lifecycle, PrepareLease};
use super::owner::{LeaseGuard, OwnerPhase, OwnerState};
use super::shared::Shared;

/// The backend's generation check of the stored record before a deletion (Codex: "binding
/// generation changed before session deletion").
pub type RecordAssertion<R> = Arc<dyn Fn(Option<&R>) -> Result<(), Error> + Send + Sync>;

/// What [`Lifecycle::with_deletion`] needs from the caller.
pub struct DeletionOptions<R> {
    /// The host operation's authority (closed operation, changed registry, moved generation).
    pub assert_current: AssertCurrent,
    /// The backend's check of the stored record, run under the lease before `run`.
    pub assert_record_current: Option<RecordAssertion<R>>,
    /// Overrides the lease policy for the deletion's acquisition.
    pub prepare_lease: Option<PrepareLease<R>>,
    /// Leases the key even when it has no row (the lease policy writes the row it starts
    /// from), so that no one can write the key until the deletion ends: the deletion then
    /// removes that row like any other (a rolled-back one leaves it, released, as any
    /// `with_lease` would). Without it (the default) an absent row is not
    /// leased, and the commit only proves that the key is still absent, which does not stop
    /// a writer that creates the row after that proof and before the host's COMMIT.
    pub lease_absent_row: bool,
}

impl<R> DeletionOptions<R> {
    /// Options with only the host authority.
    pub fn new(assert_current: AssertCurrent) -> Self {
        Self {
            assert_current,
            assert_record_current: None,
            prepare_lease: None,
            lease_absent_row: false,
        }
    }
}

impl<R> Clone for DeletionOptions<R> {
    fn clone(&self) -> Self {
        Self {
            assert_current: self.assert_current.clone(),
            assert_record_current: self.assert_record_current.clone(),
            prepare_lease: self.prepare_lease.clone(),
            lease_absent_row: self.lease_absent_row,
        }
    }
}

impl<R> fmt::Debug for DeletionOptions<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeletionOptions")
            .field(
                "assert_record_current",
                &self.assert_record_current.is_some(),
            )
            .field("prepare_lease", &self.prepare_lease.is_some())
            .finish_non_exhaustive()
    }
}

/// How the host's transaction ended for a prepared deletion (the core
/// [`SettlementOutcome`](tether_core::SettlementOutcome)).
pub use tether_core::SettlementOutcome as DeletionOutcome;

/// Whether a prepared deletion was settled as unknown (post-commit cleanup must be skipped).
pub fn is_deletion_unresolved(mutation: &dyn SessionMutation) -> bool {
    mutation.is_unresolved()
}

enum Target {
    /// No row at preparation: commit proves the key is still absent.
    Absent,
    /// A leased row: commit deletes exactly it.
    Leased {
        owner: Arc<OwnerState>,
        expected_value: Vec<u8>,
    },
}

#[derive(Debug, Default)]
struct DeletionState {
    closed: bool,
    deleted: Option<StoredRow>,
    unknown: bool,
}

struct DeletionInner {
    shared: Arc<Shared>,
    key: BindingKey,
    assert_current: AssertCurrent,
    target: Target,
    state: Mutex<DeletionState>,
}

/// The prepared deletion of one binding key, handed to the `run` of
/// [`Lifecycle::with_deletion`]. Cloning shares it.
///
/// - `commit(tx)` deletes, through the host's transaction, only the exact row leased at
///   preparation (same token, live, same value); a changed row is
///   [`Error::DeletionChanged`]. After a commit the owner's phase is deleted, so a queued
///   renewal cannot recreate the row. An absent-row deletion's commit proves the key is still
///   absent.
/// - `rollback()` returns quietly when nothing was deleted (a failed or unapplied commit);
///   accepts the row restored by the host's own transaction rollback; otherwise re-registers
///   the removed row under the owner's token only if the key is absent, and never overwrites a
///   successor ([`Error::RollbackChanged`]).
/// - Both fail with the lease error once the `with_deletion` scope has closed.
#[derive(Clone)]
pub struct DeletionMutation {
    inner: Arc<DeletionInner>,
}

impl fmt::Debug for DeletionMutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeletionMutation")
            .field("key", &self.inner.key)
            .field("state", &*self.state())
            .finish_non_exhaustive()
    }
}

impl DeletionMutation {
    fn new(
        shared: Arc<Shared>,
        key: BindingKey,
        assert_current: AssertCurrent,
        target: Target,
    ) -> Self {
        Self {
            inner: Arc::new(DeletionInner {
                shared,
                key,
                assert_current,
                target,
                state: Mutex::new(DeletionState::default()),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, DeletionState> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn close(&self) {
        self.state().closed = true;
    }

    /// The binding key.
    pub fn key(&self) -> &BindingKey {
        &self.inner.key
    }

    /// Whether the row was absent at preparation.
    pub fn is_absent_row(&self) -> bool {
        matches!(self.inner.target, Target::Absent)
    }

    /// Whether a commit removed the row (and no rollback restored it).
    pub fn is_deleted(&self) -> bool {
        self.state().deleted.is_some()
    }

    /// The lease owner's handle (none for an absent-row deletion).
    pub fn lease(&self) -> Option<LeaseGuard> {
        match &self.inner.target {
            Target::Leased { owner, .. } => {
                Some(LeaseGuard::new(owner.clone(), self.inner.shared.clone()))
            }
            Target::Absent => None,
        }
    }

    /// The participant check: host authority, open operation, owner not closed and not
    /// failed.
    pub fn assert_current(&self) -> Result<(), Error> {
        let shared = &self.inner.shared;
        (self.inner.assert_current)()?;
        let closed = self.state().closed;
        match &self.inner.target {
            Target::Absent => {
                if closed {
                    return Err(shared.texts.deletion_changed(&self.inner.key));
                }
            }
            Target::Leased { owner, .. } => {
                if closed || owner.phase() == OwnerPhase::Closed || owner.failure().is_some() {
                    return Err(owner.failure_or_lost(shared));
                }
            }
        }
        Ok(())
    }

    async fn commit_leased(
        &self,
        tx: &dyn RowTransaction,
        owner: &Arc<OwnerState>,
        expected_value: &[u8],
    ) -> Result<(), Error> {
        let shared = &self.inner.shared;
        let key = &self.inner.key;
        self.assert_current()?;
        if self.state().deleted.is_some() {
            return Ok(());
        }
        // Stop renewals before the delete: a renewal racing the host transaction would change
        // the row under it (and must never recreate it afterwards).
        let previous = owner.phase();
        if !owner.transition(OwnerPhase::Held, OwnerPhase::Deleted) {
            return Err(owner.failure_or_lost(shared));
        }
        let now = shared.clock.now();
        let token = owner.token.clone();
        let predicate = |row: &StoredRow| {
            row.lease
                .as_ref()
                .is_some_and(|l| l.token == token && l.is_live(now))
                && row.value == expected_value
        };
        let predicate: RowPredicate<'_> = &predicate;
        match tx.delete_if(&shared.namespace, key, predicate).await {
            Ok(Some(removed)) => {
                self.state().deleted = Some(removed);
                tracing::debug!(key = %key, token = owner.token.prefix(), "binding deletion committed");
                Ok(())
            }
            Ok(None) => {
                owner.transition(OwnerPhase::Deleted, previous);
                Err(shared.texts.deletion_changed(key))
            }
            Err(error) => {
                owner.transition(OwnerPhase::Deleted, previous);
                Err(error)
            }
        }
    }

    async fn rollback_leased(&self, owner: &Arc<OwnerState>) -> Result<(), Error> {
        let shared = &self.inner.shared;
        let key = &self.inner.key;
        self.assert_current()?;
        let Some(deleted) = self.state().deleted.clone() else {
            // Nothing was deleted: a failed or unapplied commit needs no undo.
            return Ok(());
        };
        let store: &dyn BindingStore = &*shared.store;
        match store.lookup(&shared.namespace, key).await? {
            Some(row) => {
                let ours = row.lease.as_ref().is_some_and(|l| l.token == owner.token);
                if ours && row.value == deleted.value {
                    // The host's transaction rollback already restored the exact row.
                    if let Some(lease) = &row.lease {
                        owner.record_lease(lease.expires_at, Some(lease.epoch));
                    }
                    self.restored(owner);
                    return Ok(());
                }
                Err(shared.texts.rollback_changed(key))
            }
            None => {
                let now = shared.clock.now();
                let expires_at = now + shared.lease.lease_duration;
                let row = RowWrite {
                    value: deleted.value.clone(),
                    lease: Some(LeaseWrite {
                        token: owner.token.clone(),
                        expires_at,
                        holder: shared.holder.clone(),
                    }),
                };
                let ttl = deleted.expires_at.map(|at| at.saturating_since(now));
                if !store
                    .register_if_absent(&shared.namespace, key, row, ttl)
                    .await?
                {
                    return Err(shared.texts.rollback_changed(key));
                }
                let epoch = store
                    .lookup(&shared.namespace, key)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|r| r.lease)
                    .filter(|l| l.token == owner.token)
                    .map(|l| l.epoch);
                owner.record_lease(expires_at, epoch);
                self.restored(owner);
                Ok(())
            }
        }
    }

    fn restored(&self, owner: &Arc<OwnerState>) {
        self.state().deleted = None;
        owner.transition(OwnerPhase::Deleted, OwnerPhase::Held);
        if let Some(batch) = &self.inner.shared.batch {
            // The restored expiry may be earlier than the owner's queued renewal.
            batch.reschedule();
        }
        tracing::debug!(key = %self.inner.key, "binding deletion rolled back");
    }
}

#[async_trait]
impl SessionMutation for DeletionMutation {
    async fn commit(&self, tx: &dyn RowTransaction) -> Result<(), Error> {
        match &self.inner.target {
            Target::Absent => {
                self.assert_current()?;
                let shared = &self.inner.shared;
                if tx
                    .lookup(&shared.namespace, &self.inner.key)
                    .await?
                    .is_some()
                {
                    return Err(shared.texts.deletion_changed(&self.inner.key));
                }
                Ok(())
            }
            Target::Leased {
                owner,
                expected_value,
            } => self.commit_leased(tx, owner, expected_value).await,
        }
    }

    async fn rollback(&self) -> Result<(), Error> {
        match &self.inner.target {
            Target::Absent => Ok(()),
            Target::Leased { owner, .. } => self.rollback_leased(owner).await,
        }
    }

    async fn settle_outcome(
        &self,
        outcome: DeletionOutcome,
        error: Option<Error>,
    ) -> Result<(), Error> {
        let shared = &self.inner.shared;
        let key = &self.inner.key;
        match outcome {
            DeletionOutcome::Unknown => {
                self.state().unknown = true;
                let error = error.unwrap_or_else(|| Error::OutcomeUnknown {
                    key: key.clone(),
                    message: format!("Native session binding deletion outcome is unknown: {key}"),
                    cause: None,
                });
                match &self.inner.target {
                    Target::Leased { owner, .. } => {
                        LeaseGuard::new(owner.clone(), shared.clone())
                            .block(error, None)
                            .await
                    }
                    Target::Absent => shared.block_key(key, error, None).await,
                }
            }
            DeletionOutcome::Committed => {
                if let Target::Leased { owner, .. } = &self.inner.target {
                    owner.transition(OwnerPhase::Held, OwnerPhase::Deleted);
                }
                Ok(())
            }
            DeletionOutcome::RolledBack => {
                if let Target::Leased { owner, .. } = &self.inner.target {
                    self.state().deleted = None;
                    owner.transition(OwnerPhase::Deleted, OwnerPhase::Held);
                }
                Ok(())
            }
        }
    }

    fn is_unresolved(&self) -> bool {
        self.state().unknown
    }
}

/// Callbacks of [`wrap_deletion_mutation`].
#[derive(Clone, Default)]
pub struct DeletionHooks {
    /// An extra check run before the inner commit (the harness's own authority).
    pub assert_current: Option<AssertCurrent>,
    /// Called after the deletion settled as committed (post-commit work such as retiring an
    /// executor).
    pub committed: Option<Arc<dyn Fn() + Send + Sync>>,
    /// Called after the deletion settled as rolled back.
    pub rolled_back: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl fmt::Debug for DeletionHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeletionHooks")
            .field("assert_current", &self.assert_current.is_some())
            .field("committed", &self.committed.is_some())
            .field("rolled_back", &self.rolled_back.is_some())
            .finish()
    }
}

/// A deletion wrapped with a harness's own check and settlement callbacks
/// ([`wrap_deletion_mutation`]).
pub struct WrappedDeletion {
    inner: Arc<dyn SessionMutation>,
    hooks: DeletionHooks,
}

impl fmt::Debug for WrappedDeletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WrappedDeletion")
            .field("hooks", &self.hooks)
            .field("unresolved", &self.inner.is_unresolved())
            .finish_non_exhaustive()
    }
}

/// Wraps a prepared deletion so a harness learns how it settled: `commit`
/// runs the harness check then the inner commit; `settle` settles the inner deletion, then
/// calls the matching hook; the unresolved flag is the inner one.
pub fn wrap_deletion_mutation(
    inner: Arc<dyn SessionMutation>,
    hooks: DeletionHooks,
) -> Arc<WrappedDeletion> {
    Arc::new(WrappedDeletion { inner, hooks })
}

#[async_trait]
impl SessionMutation for WrappedDeletion {
    async fn commit(&self, tx: &dyn RowTransaction) -> Result<(), Error> {
        if let Some(assert) = &self.hooks.assert_current {
            assert()?;
        }
        self.inner.commit(tx).await
    }

    async fn rollback(&self) -> Result<(), Error> {
        self.inner.rollback().await
    }

    async fn settle_outcome(
        &self,
        outcome: DeletionOutcome,
        error: Option<Error>,
    ) -> Result<(), Error> {
        self.inner.settle_outcome(outcome, error).await?;
        let hook = match outcome {
            DeletionOutcome::Committed => self.hooks.committed.as_ref(),
            DeletionOutcome::RolledBack => self.hooks.rolled_back.as_ref(),
            DeletionOutcome::Unknown => None,
        };
        if let Some(hook) = hook {
            hook();
        }
        Ok(())
    }

    fn is_unresolved(&self) -> bool {
        self.inner.is_unresolved()
    }
}

/// A commit finalizer for owners without reversible storage: nothing happens inside the host
/// transaction; settling as committed runs the inner `commit`, as rolled back the inner `rollback`;
/// unknown runs neither and marks the finalizer unresolved.
pub struct CommitFinalizer {
    inner: Arc<dyn SessionMutation>,
    unknown: Mutex<bool>,
}

impl fmt::Debug for CommitFinalizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommitFinalizer")
            .field("unknown", &self.is_unresolved())
            .finish_non_exhaustive()
    }
}

impl CommitFinalizer {
    /// Adapts `inner` into a finalizer.
    pub fn new(inner: Arc<dyn SessionMutation>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            unknown: Mutex::new(false),
        })
    }
}

#[async_trait]
impl SessionMutation for CommitFinalizer {
    async fn commit(&self, _tx: &dyn RowTransaction) -> Result<(), Error> {
        Ok(())
    }

    async fn rollback(&self) -> Result<(), Error> {
        Ok(())
    }

    async fn settle_outcome(
        &self,
        outcome: DeletionOutcome,
        _error: Option<Error>,
    ) -> Result<(), Error> {
        match outcome {
            DeletionOutcome::Committed => self.inner.commit(&NoRowTransaction).await,
            DeletionOutcome::RolledBack => self.inner.rollback().await,
            DeletionOutcome::Unknown => {
                *self.unknown.lock().unwrap_or_else(PoisonError::into_inner) = true;
                Ok(())
            }
        }
    }

    fn is_unresolved(&self) -> bool {
        *self.unknown.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The row transaction a commit finalizer hands its inner commit: there is none after the host
/// transaction, so every row operation is refused.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRowTransaction;

impl NoRowTransaction {
    fn refused() -> Error {
        Error::invalid_argument(
            "a post-commit finalizer has no row transaction; binding rows must be deleted inside the host transaction",
        )
    }
}

#[async_trait]
impl RowTransaction for NoRowTransaction {
    async fn lookup(&self, _ns: &Namespace, _key: &BindingKey) -> Result<Option<StoredRow>, Error> {
        Err(Self::refused())
    }

    async fn delete_if(
        &self,
        _ns: &Namespace,
        _key: &BindingKey,
        _predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error> {
        Err(Self::refused())
    }

    async fn register_if_absent(
        &self,
        _ns: &Namespace,
        _key: &BindingKey,
        _row: RowWrite,
        _ttl: Option<Duration>,
    ) -> Result<bool, Error> {
        Err(Self::refused())
    }
}

/// Row operations applied directly to a store, for participants whose host keeps no binding
/// rows in its own transaction: a commit through it takes effect at once, and a rollback
/// re-registers the row.
#[derive(Debug, Clone)]
pub struct DirectRowTransaction {
    store: Arc<dyn BindingStore>,
}

impl DirectRowTransaction {
    /// Row operations on `store`.
    pub fn new(store: Arc<dyn BindingStore>) -> Self {
        Self { store }
    }
}

#[async_trait]
impl RowTransaction for DirectRowTransaction {
    async fn lookup(&self, ns: &Namespace, key: &BindingKey) -> Result<Option<StoredRow>, Error> {
        self.store.lookup(ns, key).await
    }

    async fn delete_if(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error> {
        self.store.delete_if(ns, key, predicate).await
    }

    async fn register_if_absent(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        row: RowWrite,
        ttl: Option<Duration>,
    ) -> Result<bool, Error> {
        self.store.register_if_absent(ns, key, row, ttl).await
    }
}

impl<C: RecordCodec + 'static> Lifecycle<C> {
    /// Prepares the deletion of `key` and runs `run(current, mutation)` (see `docs/lifecycle.md`,
    /// "`with_deletion`"),
    /// inside [`Lifecycle::with_mutation`].
    ///
    /// - Absent row: `run(None, m)`; `m.commit` proves the key is still absent, `m.rollback` is
    ///   a no-op. With [`DeletionOptions::lease_absent_row`], an absent row is leased (the
    ///   lease policy writes the row) and deleted like a present one.
    /// - Present row: under `with_lease` (acquisition with the deletion's authority and lease
    ///   policy), the row is read again, the authority and `assert_record_current` checked,
    ///   and `run(Some(record), m)` gets a mutation bound to the exact leased value. At scope
    ///   exit the lease is released (nothing to release when the row was deleted).
    pub async fn with_deletion<T, F, Fut>(
        &self,
        key: &BindingKey,
        deletion: DeletionOptions<C::Record>,
        run: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(Option<C::Record>, DeletionMutation) -> Fut + Send,
        Fut: Future<Output = Result<T, Error>> + Send,
    {
        let span = tracing::debug_span!("lifecycle.with_deletion", key = %key);
        self.with_deletion_inner(key, deletion, run)
            .instrument(span)
            .await
    }

    async fn with_deletion_inner<T, F, Fut>(
        &self,
        key: &BindingKey,
        deletion: DeletionOptions<C::Record>,
        run: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(Option<C::Record>, DeletionMutation) -> Fut + Send,
        Fut: Future<Output = Result<T, Error>> + Send,
    {
        let shared = self.shared.clone();
        shared.assert_durably_settled(key).await?;
        self.with_mutation(|| async {
            (deletion.assert_current)()?;
            let initial = shared.store.lookup(&shared.namespace, key).await?;
            (deletion.assert_current)()?;
            if initial.is_none() && !deletion.lease_absent_row {
                let mutation = DeletionMutation::new(
                    shared.clone(),
                    key.clone(),
                    deletion.assert_current.clone(),
                    Target::Absent,
                );
                let result = run(None, mutation.clone()).await;
                mutation.close();
                return result;
            }
            let options = LeaseOptions {
                assert_current: Some(deletion.assert_current.clone()),
                prepare_lease: deletion.prepare_lease.clone(),
                ..LeaseOptions::default()
            };
            let codec = self.codec.clone();
            self.with_lease(key, options, |guard| async move {
                let row = shared.store.lookup(&shared.namespace, key).await?;
                let stored = decode_row(&*codec, &shared.texts, key, row.as_ref())?;
                (deletion.assert_current)()?;
                if let Some(check) = &deletion.assert_record_current {
                    check(stored.as_ref())?;
                }
                let (Some(record), Some(row)) = (stored, row) else {
                    return Err(shared.texts.deletion_changed(key));
                };
                let mutation = DeletionMutation::new(
                    shared.clone(),
                    key.clone(),
                    deletion.assert_current.clone(),
                    Target::Leased {
                        owner: guard.owner.clone(),
                        expected_value: row.value,
                    },
                );
                let result = run(Some(record), mutation.clone()).await;
                mutation.close();
                result
            })
            .await
        })
        .await
    }
}
