//! The in-process lease owner (see `docs/lifecycle.md`, "The in-process owner"), the handle
//! given to a `with_lease` callback, and the synchronous lease assertion ("Lease assertions").

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tether_core::{
    AssertCurrent, BindingKey, Error, LeaseEpoch, LeaseRenewal, LeaseToken, Observation, Timestamp,
    is_live,
};

use super::shared::Shared;

/// The phase of an in-process lease owner (see `docs/lifecycle.md`, "The in-process owner").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OwnerPhase {
    /// The lease is held: heartbeats run, transacts are allowed.
    Held,
    /// Quiesced for settlement: no heartbeats, no transacts; release still happens at exit.
    Settling,
    /// The binding row was deleted by a committed deletion; a rollback returns to `Held`.
    Deleted,
    /// The settlement outcome is unknown: release is suppressed and the key is blocked.
    Unknown,
    /// The `with_lease` scope has exited.
    Closed,
}

#[derive(Debug)]
struct OwnerInner {
    phase: OwnerPhase,
    failure: Option<Error>,
    /// Whether the store showed that the lease is no longer this owner's (a renewal refused,
    /// a write or a fence check that found the row taken over or its lease revoked). A
    /// renewal that merely failed (the store did not answer) leaves it unset: the lease is
    /// then still this owner's until its known expiry.
    taken: bool,
    epoch: Option<LeaseEpoch>,
    expires_at: Timestamp,
    /// The row as this owner's last write left it, if the store reported it: the starting
    /// observation of the owner's next conditional write (possibly stale; see
    /// [`OwnerState::take_observation`]).
    last_written: Option<Observation>,
    /// This owner's entry of a batched renewal (copies of key and token), built once and
    /// moved into each batch and back (see [`OwnerState::begin_batch_renewal`]), so a
    /// renewal copies no string. `None` before the first batch, and while a batch has it.
    batch_entry: Option<LeaseRenewal>,
}

/// One `with_lease` acquisition's state, shared by the scope, the heartbeat and handles.
pub(crate) struct OwnerState {
    pub(crate) key: BindingKey,
    pub(crate) token: LeaseToken,
    pub(crate) assert_current: Option<AssertCurrent>,
    inner: Mutex<OwnerInner>,
    /// Whether a heartbeat renewal is in flight.
    renewal_pending: AtomicBool,
    /// Tasks in [`OwnerState::join_renewal`]: the end of a renewal wakes
    /// [`OwnerState::renewal_done`] only when there is one, so a renewal nobody waits for
    /// costs two atomic stores.
    renewal_joiners: AtomicUsize,
    /// Woken when a renewal ends while a task is joining it.
    renewal_done: tokio::sync::Notify,
    /// The batched renewal driver's registration id of this owner plus one (0: not
    /// registered); see [`OwnerState::batch_registration`].
    batch_registration: AtomicU64,
    /// Woken whenever a failure is recorded or the phase leaves `Held`.
    changed: tokio::sync::Notify,
}

impl fmt::Debug for OwnerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("OwnerState")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("phase", &inner.phase)
            .field("epoch", &inner.epoch)
            .field("expires_at", &inner.expires_at)
            .field("failure", &inner.failure)
            .finish_non_exhaustive()
    }
}

impl OwnerState {
    pub(crate) fn new(
        key: BindingKey,
        token: LeaseToken,
        assert_current: Option<AssertCurrent>,
    ) -> Self {
        Self {
            key,
            token,
            assert_current,
            inner: Mutex::new(OwnerInner {
                phase: OwnerPhase::Held,
                failure: None,
                taken: false,
                epoch: None,
                expires_at: Timestamp::EPOCH,
                last_written: None,
                batch_entry: None,
            }),
            renewal_pending: AtomicBool::new(false),
            renewal_joiners: AtomicUsize::new(0),
            renewal_done: tokio::sync::Notify::new(),
            batch_registration: AtomicU64::new(0),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, OwnerInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn phase(&self) -> OwnerPhase {
        self.lock().phase
    }

    pub(crate) fn set_phase(&self, phase: OwnerPhase) {
        self.lock().phase = phase;
        self.changed.notify_waiters();
    }

    /// Moves `from` to `to` only when the phase is `from`. Returns whether it moved.
    pub(crate) fn transition(&self, from: OwnerPhase, to: OwnerPhase) -> bool {
        let mut inner = self.lock();
        if inner.phase == from {
            inner.phase = to;
            drop(inner);
            self.changed.notify_waiters();
            true
        } else {
            false
        }
    }

    pub(crate) fn failure(&self) -> Option<Error> {
        self.lock().failure.clone()
    }

    /// Records a sticky failure (the first one wins).
    pub(crate) fn fail(&self, error: Error) {
        let mut inner = self.lock();
        if inner.failure.is_none() {
            inner.failure = Some(error);
        }
        drop(inner);
        self.changed.notify_waiters();
    }

    /// Records a failure only while the phase is still `Held`.
    pub(crate) fn fail_if_held(&self, error: Error) {
        let mut inner = self.lock();
        if inner.phase == OwnerPhase::Held && inner.failure.is_none() {
            inner.failure = Some(error);
        }
        drop(inner);
        self.changed.notify_waiters();
    }

    /// Records that the store showed the lease is no longer this owner's (the failure only
    /// while the phase is still `Held`, like [`OwnerState::fail_if_held`]): from then on a
    /// [`LeaseAssertion`] fails at once instead of at the lease's known expiry.
    pub(crate) fn lose_if_held(&self, error: Error) {
        let mut inner = self.lock();
        if inner.phase == OwnerPhase::Held {
            inner.taken = true;
            if inner.failure.is_none() {
                inner.failure = Some(error);
            }
        }
        drop(inner);
        self.changed.notify_waiters();
    }

    /// Records a sticky failure like [`OwnerState::fail`], for a loss the store showed (see
    /// [`OwnerState::lose_if_held`]).
    pub(crate) fn lose(&self, error: Error) {
        let mut inner = self.lock();
        inner.taken = true;
        if inner.failure.is_none() {
            inner.failure = Some(error);
        }
        drop(inner);
        self.changed.notify_waiters();
    }

    /// Whether a [`LeaseAssertion`] passes at `now`: held, not shown taken, not expired.
    fn asserts_at(&self, now: Timestamp) -> bool {
        let inner = self.lock();
        inner.phase == OwnerPhase::Held && !inner.taken && is_live(inner.expires_at, now)
    }

    pub(crate) fn block(&self, error: Error) {
        let mut inner = self.lock();
        inner.phase = OwnerPhase::Unknown;
        inner.failure = Some(error);
        drop(inner);
        self.changed.notify_waiters();
    }

    pub(crate) fn epoch(&self) -> Option<LeaseEpoch> {
        self.lock().epoch
    }

    pub(crate) fn expires_at(&self) -> Timestamp {
        self.lock().expires_at
    }

    /// Phase, whether a failure is recorded, and lease expiry, read under one lock (the
    /// batched renewal driver's view of an owner).
    pub(crate) fn schedule(&self) -> (OwnerPhase, bool, Timestamp) {
        let inner = self.lock();
        (inner.phase, inner.failure.is_some(), inner.expires_at)
    }

    /// Records a written lease (acquisition, renewal or rollback re-registration).
    pub(crate) fn record_lease(&self, expires_at: Timestamp, epoch: Option<LeaseEpoch>) {
        let mut inner = self.lock();
        inner.expires_at = expires_at;
        if epoch.is_some() {
            inner.epoch = epoch;
        }
    }

    /// Takes the row as this owner's last write left it. It saves the read before the next
    /// conditional write, but it may be stale (a batched renewal, an operator, or a successor
    /// wrote since): the store's comparison refuses a stale one, and a caller must confirm any
    /// decision not to write (busy, lost lease) with a fresh read.
    pub(crate) fn take_observation(&self) -> Option<Observation> {
        self.lock().last_written.take()
    }

    /// Keeps `written` as the owner's last write when it carries this owner's lease.
    pub(crate) fn remember_observation(&self, written: Observation) {
        let ours = written
            .row
            .as_ref()
            .and_then(|r| r.lease.as_ref())
            .is_some_and(|l| l.token == self.token);
        self.lock().last_written = ours.then_some(written);
    }

    /// `failure`, or a fresh lost-lease error.
    pub(crate) fn failure_or_lost(&self, shared: &Shared) -> Error {
        self.failure()
            .unwrap_or_else(|| shared.texts.lost_lease(&self.key, None))
    }

    /// Fails unless the phase is held and no failure is recorded.
    pub(crate) fn assert_held(&self, shared: &Shared) -> Result<(), Error> {
        let inner = self.lock();
        if let Some(failure) = &inner.failure {
            return Err(failure.clone());
        }
        if inner.phase != OwnerPhase::Held {
            return Err(shared.texts.lost_lease(&self.key, None));
        }
        Ok(())
    }

    pub(crate) fn set_renewal_pending(&self, pending: bool) {
        // SeqCst on both sides (with `join_renewal`): either the joiner's count is seen here
        // and it is woken, or its later read of the flag sees this store.
        self.renewal_pending.store(pending, Ordering::SeqCst);
        if !pending && self.renewal_joiners.load(Ordering::SeqCst) > 0 {
            self.renewal_done.notify_waiters();
        }
    }

    pub(crate) fn renewal_pending(&self) -> bool {
        self.renewal_pending.load(Ordering::SeqCst)
    }

    pub(crate) async fn join_renewal(&self) {
        /// Counts a joiner for its lifetime (also when the wait is cancelled).
        struct Joining<'a>(&'a AtomicUsize);
        impl Drop for Joining<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.renewal_joiners.fetch_add(1, Ordering::SeqCst);
        let _joining = Joining(&self.renewal_joiners);
        loop {
            let done = self.renewal_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if !self.renewal_pending() {
                return;
            }
            done.await;
        }
    }

    /// Records `id` as this owner's registration with the batched renewal driver.
    pub(crate) fn set_batch_registration(&self, id: Option<u64>) {
        self.batch_registration
            .store(id.map_or(0, |id| id + 1), Ordering::Release);
    }

    /// Whether this owner is registered with the batched renewal driver under `id` (a queued
    /// entry of a registration dropped since is stale).
    pub(crate) fn batch_registration(&self, id: u64) -> bool {
        self.batch_registration.load(Ordering::Acquire) == id + 1
    }

    /// Starts a heartbeat renewal: marks it pending and returns `true` when the phase is held
    /// without a failure, checked and marked under one lock (see [`OwnerState::quiesce`]).
    pub(crate) fn begin_renewal(&self) -> bool {
        let inner = self.lock();
        if inner.failure.is_some() || inner.phase != OwnerPhase::Held {
            return false;
        }
        self.set_renewal_pending(true);
        true
    }

    /// Moves a held owner with no failure and no renewal in flight to `Settling`; else fails
    /// with the sticky failure or a lost lease. The renewal paths check the phase and mark a
    /// renewal pending under the same lock ([`OwnerState::begin_renewal`],
    /// [`OwnerState::begin_batch_renewal`]), so either a renewal was marked first and this
    /// fails, or the phase moved first and no renewal starts: no renewal goes out while the
    /// owner settles.
    pub(crate) fn quiesce(&self, shared: &Shared) -> Result<(), Error> {
        let mut inner = self.lock();
        if self.renewal_pending() || inner.failure.is_some() || inner.phase != OwnerPhase::Held {
            drop(inner);
            return Err(self.failure_or_lost(shared));
        }
        inner.phase = OwnerPhase::Settling;
        drop(inner);
        self.changed.notify_waiters();
        Ok(())
    }

    /// Starts this owner's part of a batched renewal to `expires_at`: fails unless the phase
    /// is held without a failure (one lock), else marks the renewal pending and returns the
    /// owner's batch entry (moved out, built on the first batch).
    pub(crate) fn begin_batch_renewal(
        &self,
        shared: &Shared,
        expires_at: Timestamp,
    ) -> Result<LeaseRenewal, Error> {
        let mut inner = self.lock();
        if let Some(failure) = &inner.failure {
            return Err(failure.clone());
        }
        if inner.phase != OwnerPhase::Held {
            return Err(shared.texts.lost_lease(&self.key, None));
        }
        let mut entry = inner.batch_entry.take().unwrap_or_else(|| LeaseRenewal {
            key: self.key.clone(),
            token: self.token.clone(),
            expires_at,
        });
        // Marked under the lock that checked the phase (see `OwnerState::quiesce`).
        self.set_renewal_pending(true);
        drop(inner);
        entry.expires_at = expires_at;
        Ok(entry)
    }

    /// Ends this owner's part of a batched renewal: gives the batch entry back and, when
    /// `renewed`, records the entry's expiry as this owner's (the renewal moved the row's
    /// revision on, so the remembered observation is dropped). The caller ends the pending
    /// renewal ([`OwnerState::set_renewal_pending`]) after recording any failure.
    pub(crate) fn end_batch_renewal(&self, entry: LeaseRenewal, renewed: bool) {
        let mut inner = self.lock();
        if renewed {
            inner.expires_at = entry.expires_at;
            inner.last_written = None;
        }
        inner.batch_entry = Some(entry);
    }
}

/// The handle a `with_lease` callback receives: the owner's token, its fencing epoch, and the
/// settlement hooks (see `docs/lifecycle.md`, "Settlement hooks and blocked keys").
#[derive(Clone)]
pub struct LeaseGuard {
    pub(crate) owner: Arc<OwnerState>,
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl LeaseGuard {
    pub(crate) fn new(owner: Arc<OwnerState>, shared: Arc<Shared>) -> Self {
        Self { owner, shared }
    }

    /// The binding key.
    pub fn key(&self) -> &BindingKey {
        &self.owner.key
    }

    /// The exact lease token of this acquisition.
    pub fn token(&self) -> &LeaseToken {
        &self.owner.token
    }

    /// The fencing epoch the store assigned to this acquisition (see `docs/lifecycle.md`,
    /// "Fencing native side effects"). Pass it to native side effects so a target can reject a
    /// stale writer (see [`EpochFence`](super::EpochFence)).
    ///
    /// Numbering: every acquisition of a key gets a strictly greater epoch than any earlier
    /// one, also across a deletion and re-creation of the row. The SQL store starts each row
    /// lifetime at a fresh base `n << 32` (from a store-wide counter) and adds one per
    /// acquisition, so epochs are large numbers (`12884901891` is base 3, acquisition 3);
    /// compare them, never do arithmetic on them.
    pub fn epoch(&self) -> LeaseEpoch {
        self.owner.epoch().unwrap_or(LeaseEpoch::INITIAL)
    }

    /// The owner's phase.
    pub fn phase(&self) -> OwnerPhase {
        self.owner.phase()
    }

    /// The lease expiry this owner last wrote.
    pub fn expires_at(&self) -> Timestamp {
        self.owner.expires_at()
    }

    /// The sticky failure, if the lease was lost.
    pub fn failure(&self) -> Option<Error> {
        self.owner.failure()
    }

    /// Runs `fut` inside this owner's scope, in whatever task polls it: writes of the same
    /// lifecycle instance to this key inside `fut` are made under this lease, exactly as in
    /// the `with_lease` callback. For work spawned from the callback
    /// (`tokio::spawn(guard.in_scope(work))`), which otherwise has no scope. The lease is
    /// still released when the callback returns; spawned work should finish first.
    pub fn in_scope<F: std::future::Future>(
        &self,
        fut: F,
    ) -> impl std::future::Future<Output = F::Output> + use<F> {
        let (instance, key, owner) = (self.shared.id, self.owner.key.clone(), self.owner.clone());
        super::scope::with_owner(instance, key, owner, fut)
    }

    /// Completes with the error once this lease is lost — a failed renewal, a write that found
    /// the row taken over, a fence check that failed, an expiry passed without renewal (by the
    /// lifecycle's clock) — or once the scope closed. Pending while the lease is held, so a
    /// holder can `select!` its work against it:
    ///
    /// ```ignore
    /// tokio::select! {
    ///     result = work() => result,
    ///     lost = guard.lost() => Err(lost),
    /// }
    /// ```
    pub async fn lost(&self) -> Error {
        loop {
            let changed = self.owner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Err(error) = self.owner.assert_held(&self.shared) {
                return error;
            }
            let now = self.shared.clock.now();
            let expires_at = self.owner.expires_at();
            if expires_at <= now {
                let error = self.shared.lost(&self.owner.key);
                self.owner.fail_if_held(error.clone());
                return self.owner.failure().unwrap_or(error);
            }
            let until_expiry = expires_at.saturating_since(now);
            tokio::select! {
                () = &mut changed => {}
                () = self.shared.timer.sleep(until_expiry) => {}
            }
        }
    }

    /// A synchronous check of phase and lease liveness (see [`LeaseAssertion`]). Fails at once
    /// when the check already fails.
    pub fn capture_lease_assertion(&self) -> Result<LeaseAssertion, Error> {
        let assertion = LeaseAssertion {
            owner: self.owner.clone(),
            shared: self.shared.clone(),
        };
        assertion.check()?;
        Ok(assertion)
    }

    /// Checks this owner's fencing epoch against the store: the row must still carry this
    /// exact token at this epoch, live. Returns the epoch. A failed check records the lost
    /// lease on the owner (sticky, reported at scope exit).
    pub async fn verify_fence(&self) -> Result<LeaseEpoch, Error> {
        verify_fence(&self.owner, &self.shared).await
    }

    /// Whether a heartbeat renewal is in flight.
    pub fn renewal_pending(&self) -> bool {
        self.owner.renewal_pending()
    }

    /// Waits for the in-flight renewal, if any.
    pub async fn join_renewal(&self) {
        self.owner.join_renewal().await;
    }

    /// Stops heartbeats and refuses new transacts, for settlement. Fails with
    /// the sticky failure (or a lost lease) when a renewal is pending, the phase is not held,
    /// or the lease was lost. Release still happens at scope exit.
    pub fn quiesce(&self) -> Result<(), Error> {
        self.owner.quiesce(&self.shared)?;
        tracing::debug!(key = %self.owner.key, token = self.owner.token.prefix(), "lease quiesced");
        Ok(())
    }

    /// Records an unknown settlement outcome: the phase becomes unknown, `error` becomes the
    /// sticky failure, release is suppressed (the lease is left to expire), and the key is
    /// blocked in this lifecycle instance and quarantined durably when a quarantine store is
    /// configured (see `docs/storage.md`, "Unknown outcomes").
    ///
    /// The in-process block is in force when this returns, whatever the result; an error means
    /// only that the durable quarantine record could not be written.
    pub async fn block(&self, error: Error, custody: Option<String>) -> Result<(), Error> {
        self.owner.block(error.clone());
        self.shared.block_key(&self.owner.key, error, custody).await
    }
}

/// [`LeaseGuard::verify_fence`] and [`LeaseAssertion::verify_fence`]: one read of the row.
async fn verify_fence(owner: &OwnerState, shared: &Shared) -> Result<LeaseEpoch, Error> {
    owner.assert_held(shared)?;
    let row = shared.store.lookup(&shared.namespace, &owner.key).await?;
    let now = shared.clock.now();
    let epoch = owner.epoch();
    match row.as_ref().and_then(|r| r.lease.as_ref()) {
        Some(lease)
            if lease.token == owner.token && Some(lease.epoch) == epoch && lease.is_live(now) =>
        {
            Ok(lease.epoch)
        }
        _ => {
            // A discovered loss is sticky like any other.
            owner.lose(shared.lost(&owner.key));
            Err(owner.failure_or_lost(shared))
        }
    }
}

/// A synchronous lease check captured inside a `with_lease` scope (see `docs/lifecycle.md`,
/// "Lease assertions").
///
/// [`LeaseAssertion::check`] looks only at the owner: its phase, whether the store already
/// showed the lease taken (a refused renewal, a write or a fence check that found another
/// owner or a revoked lease), and its known lease expiry against the clock; it does not
/// consult host authority and reads no store. A renewal that merely failed (the store did not
/// answer) does not fail it before the expiry: no other owner can take the lease until then.
/// It keeps working after the host run is retired and heartbeats stopped, until the lease
/// expires or the scope closes. [`LeaseAssertion::verify_fence`] adds one read of the row. On
/// failure both return the owner's sticky failure when there is one (for example a renewal
/// failure with its cause), else a lost lease.
#[derive(Clone)]
pub struct LeaseAssertion {
    owner: Arc<OwnerState>,
    shared: Arc<Shared>,
}

impl fmt::Debug for LeaseAssertion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseAssertion")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl LeaseAssertion {
    /// Fails once the phase is no longer held, the store showed the lease taken (a refused
    /// renewal, a write or fence check that found another owner or a revoked lease), or the
    /// known lease has expired.
    pub fn check(&self) -> Result<(), Error> {
        if !self.owner.asserts_at(self.shared.clock.now()) {
            return Err(self.owner.failure_or_lost(&self.shared));
        }
        Ok(())
    }

    /// [`LeaseAssertion::check`], then one read of the row, like
    /// [`LeaseGuard::verify_fence`]: the row must still carry this owner's token at this
    /// epoch, live. Returns the epoch. A lease revoked in the store (`tether leases expire`,
    /// `BindingStore::force_expire_lease`) or taken over fails here at once, where
    /// [`LeaseAssertion::check`] notices it only at the next renewal. Call it before a side
    /// effect that must not run twice (a host tool, an approval); a failure is recorded on
    /// the owner like any lost lease.
    pub async fn verify_fence(&self) -> Result<LeaseEpoch, Error> {
        self.check()?;
        verify_fence(&self.owner, &self.shared).await
    }

    /// The fencing epoch of the asserted lease.
    pub fn epoch(&self) -> LeaseEpoch {
        self.owner.epoch().unwrap_or(LeaseEpoch::INITIAL)
    }

    /// The binding key.
    pub fn key(&self) -> &BindingKey {
        &self.owner.key
    }
}

#[cfg(test)]
mod tests {
    use tether_core::BindingId;

    use super::*;

    fn owner() -> OwnerState {
        let key = BindingKey::conversation(&BindingId::new("k").unwrap());
        OwnerState::new(key, LeaseToken::new("t").unwrap(), None)
    }

    #[test]
    fn first_failure_wins_and_phases_move_only_from_the_expected_phase() {
        let owner = owner();
        assert_eq!(owner.phase(), OwnerPhase::Held);
        owner.fail(Error::other("first"));
        owner.fail(Error::other("second"));
        assert_eq!(owner.failure().unwrap().to_string(), "first");
        assert!(!owner.transition(OwnerPhase::Settling, OwnerPhase::Held));
        assert!(owner.transition(OwnerPhase::Held, OwnerPhase::Deleted));
        owner.fail_if_held(Error::other("ignored"));
        assert_eq!(owner.failure().unwrap().to_string(), "first");
        owner.block(Error::other("unknown"));
        assert_eq!(owner.phase(), OwnerPhase::Unknown);
        assert_eq!(owner.failure().unwrap().to_string(), "unknown");
    }

    #[test]
    fn fail_if_held_records_only_while_held() {
        let owner = owner();
        owner.set_phase(OwnerPhase::Closed);
        owner.fail_if_held(Error::other("late renewal"));
        assert!(owner.failure().is_none());
        owner.set_phase(OwnerPhase::Held);
        owner.fail_if_held(Error::other("renewal failed"));
        assert!(owner.failure().is_some());
    }

    fn shared() -> Arc<Shared> {
        let keep: crate::lifecycle::PrepareLease<serde_json::Map<String, serde_json::Value>> =
            Arc::new(|current, _| current.cloned());
        crate::lifecycle::Lifecycle::builder(
            Arc::new(tether_storage::MemoryStore::default()),
            tether_core::Namespace::new("owner").unwrap(),
            tether_core::JsonObjectCodec,
            keep,
        )
        .build()
        .unwrap()
        .shared
    }

    #[test]
    fn a_batch_entry_is_handed_back_and_records_the_expiry_only_when_renewed() {
        let owner = owner();
        let shared = shared();
        let entry = owner
            .begin_batch_renewal(&shared, Timestamp::from_millis(5_000))
            .unwrap();
        assert_eq!(
            (entry.key.clone(), entry.token.clone()),
            (owner.key.clone(), owner.token.clone())
        );
        assert!(owner.renewal_pending());
        owner.end_batch_renewal(entry, false);
        owner.set_renewal_pending(false);
        assert_eq!(owner.expires_at(), Timestamp::EPOCH, "refused: expiry kept");
        let entry = owner
            .begin_batch_renewal(&shared, Timestamp::from_millis(7_000))
            .unwrap();
        assert_eq!(entry.expires_at, Timestamp::from_millis(7_000));
        owner.end_batch_renewal(entry, true);
        owner.set_renewal_pending(false);
        assert_eq!(owner.expires_at(), Timestamp::from_millis(7_000));
        assert!(!owner.renewal_pending());
        owner.set_phase(OwnerPhase::Settling);
        assert!(
            owner
                .begin_batch_renewal(&shared, Timestamp::from_millis(9_000))
                .is_err(),
            "only held owners renew"
        );
        assert!(!owner.renewal_pending());
    }

    /// A heartbeat starting while the holder quiesces: exactly one of them wins, on every
    /// interleaving the threads happen to take. A renewal never goes out while the owner
    /// settles, and quiescing never passes a renewal already marked.
    #[test]
    fn quiesce_and_a_starting_renewal_exclude_each_other() {
        let shared = shared();
        let start = Arc::new(std::sync::Barrier::new(2));
        for round in 0..4_000u32 {
            let owner = Arc::new(owner());
            let renewal = {
                let (owner, shared, start) = (owner.clone(), shared.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    if round % 2 == 0 {
                        owner.begin_renewal()
                    } else {
                        owner
                            .begin_batch_renewal(&shared, Timestamp::from_millis(5_000))
                            .is_ok()
                    }
                })
            };
            start.wait();
            let quiesced = owner.quiesce(&shared).is_ok();
            let renewed = renewal.join().unwrap();
            assert_ne!(
                quiesced, renewed,
                "round {round}: quiesced {quiesced}, renewal started {renewed}"
            );
            assert_eq!(owner.renewal_pending(), renewed, "round {round}");
            let phase = if quiesced {
                OwnerPhase::Settling
            } else {
                OwnerPhase::Held
            };
            assert_eq!(owner.phase(), phase, "round {round}");
        }
    }

    #[test]
    fn quiesce_fails_with_the_sticky_failure_or_a_lost_lease() {
        let shared = shared();
        let owner = owner();
        owner.set_renewal_pending(true);
        assert!(owner.quiesce(&shared).unwrap_err().is_lost_lease());
        owner.set_renewal_pending(false);
        owner.fail(Error::other("renewal refused"));
        assert_eq!(
            owner.quiesce(&shared).unwrap_err().to_string(),
            "renewal refused"
        );
        assert_eq!(
            owner.phase(),
            OwnerPhase::Held,
            "a failed quiesce moves nothing"
        );
    }

    #[tokio::test]
    async fn join_renewal_waits_for_the_pending_renewal() {
        let owner = Arc::new(owner());
        owner.set_renewal_pending(true);
        let joined = {
            let owner = owner.clone();
            tokio::spawn(async move { owner.join_renewal().await })
        };
        tokio::task::yield_now().await;
        assert!(!joined.is_finished());
        owner.set_renewal_pending(false);
        joined.await.unwrap();
        assert!(!owner.renewal_pending());
    }
}
