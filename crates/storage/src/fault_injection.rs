//! A fault-injecting store wrapper for failure-point walks and chaos drills.
//!
//! [`FaultInjectingStore`] wraps any [`BindingStore`] (and passes [`QuarantineStore`] through) and
//! fails, times out, or reports an unknown outcome at a named [`FaultPoint`]. It counts every
//! call and every write the wrapped store actually applied, so a test can prove that a failed
//! write was never replayed and that nothing was lost. [`FaultRowTransaction`] does the same for
//! the row operations of a host transaction, and [`FaultInjectingStore::host_transaction_faults`]
//! hands the commit-edge and after-COMMIT points to the host layer's transaction hooks
//! (`tether_host::TransactionHooks::injecting`).
//!
//! Where the write stands after a fault:
//!
//! | point | [`FaultKind::Fail`] / [`FaultKind::Timeout`] | [`FaultKind::Unknown`] |
//! |---|---|---|
//! | [`Observe`](FaultPoint::Observe) | nothing read | nothing read |
//! | [`CompareBefore`](FaultPoint::CompareBefore) | not applied | not applied |
//! | [`CompareAfter`](FaultPoint::CompareAfter) | applied | applied |
//! | [`RegisterIfAbsent`](FaultPoint::RegisterIfAbsent), [`DeleteIf`](FaultPoint::DeleteIf), [`Release`](FaultPoint::Release), [`Renewal`](FaultPoint::Renewal) | not applied | applied |
//! | [`Commit`](FaultPoint::Commit) | not applied, reported unknown | applied, reported unknown |
//! | [`CommitEdge`](FaultPoint::CommitEdge) | transaction rolled back | transaction rolled back |
//! | [`AfterCommit`](FaultPoint::AfterCommit) | committed | committed |
//!
//! A read that fails never wrote anything, so it always fails with
//! [`StoreErrorKind::Unavailable`]; a write fails with `Unavailable` only when refused before
//! anything happened ([`FaultKind::Fail`] at a point that did not apply), and with
//! [`StoreErrorKind::Backend`] — outcome unknown to the caller — otherwise
//! ([`proves_nothing_written`]).
//!
//! [`Commit`](FaultPoint::Commit) is the COMMIT of a keyed write's own transaction failing:
//! whether it fails before the write was saved ([`FaultKind::Fail`], [`FaultKind::Timeout`]) or
//! after ([`FaultKind::Unknown`]), the caller is told the same thing — the outcome is unknown
//! ([`Error::OutcomeUnknown`] for the key, from [`StoreErrorKind::CommitFailed`]) — exactly as
//! the SQL store reports a failed COMMIT.
//!
//! `Release` and `Renewal` are the compare-and-apply calls a lifecycle makes to release and renew
//! a lease; the wrapper recognizes them from the last row it saw for the key ([`CasKind`]), and a
//! test can narrow any fault further with a predicate over the call ([`Fault::when`]).
//!
//! ```
//! use std::sync::Arc;
//! use tether_core::{
//!     AgentId, BindingKey, BindingStore, Error, Intent, Namespace, NamespaceConfig, RowWrite,
//!     SessionId, admit_all,
//! };
//! use tether_storage::MemoryStore;
//! use tether_storage::fault_injection::{Fault, FaultInjectingStore, FaultKind, FaultPoint};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let store = FaultInjectingStore::new(Arc::new(MemoryStore::default()));
//! let ns = Namespace::new("faults")?;
//! store.register_namespace(NamespaceConfig::new(ns.clone())).await?;
//! let key = BindingKey::physical(&AgentId::new("main")?, &SessionId::new("s-1")?);
//!
//! // The write is applied, then the call fails: the outcome is unknown to the caller.
//! store.arm(Fault::new(FaultPoint::CompareAfter, FaultKind::Unknown));
//! let seen = store.observe(&ns, &key).await?;
//! let row = RowWrite { value: b"{}".to_vec(), lease: None };
//! let err = store
//!     .compare_and_apply(&ns, &key, &seen.comparison, Intent::Set { row, ttl: None }, &admit_all)
//!     .await
//!     .unwrap_err();
//! assert!(matches!(err, Error::Store { .. }));
//! assert_eq!(store.stats().writes_applied, 1);
//! assert!(store.lookup(&ns, &key).await?.is_some(), "the write stands");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tether_core::{
    Admission, ApplyOutcome, BindingKey, BindingStore, Comparison, Error, Intent, Namespace,
    NamespaceConfig, Observation, ObservedOutcome, QuarantineEntry, QuarantineStore, RowPredicate,
    RowTransaction, RowWrite, StoreErrorKind, StoredRow,
};

/// A named place where a fault can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FaultPoint {
    /// `observe` (and `lookup`) of a key.
    Observe,
    /// `compare_and_apply`, before the wrapped store compares: nothing is written.
    CompareBefore,
    /// `compare_and_apply`, after the wrapped store applied: the write stands.
    CompareAfter,
    /// `register_if_absent` (store or row transaction).
    RegisterIfAbsent,
    /// `delete_if` (store or row transaction).
    DeleteIf,
    /// The COMMIT of a keyed write's own transaction (`compare_and_apply`, `apply_observed`,
    /// `register_if_absent`, `delete_if`): reported as an unknown outcome, applied or not by
    /// kind.
    Commit,
    /// The host transaction's commit edge, after every harness commit and before COMMIT.
    CommitEdge,
    /// Right after the host transaction's COMMIT.
    AfterCommit,
    /// A compare-and-apply that releases a lease ([`CasKind::Release`]).
    Release,
    /// A compare-and-apply that renews a lease ([`CasKind::Renew`]).
    Renewal,
}

impl FaultPoint {
    /// Every point, in walk order.
    pub const ALL: [FaultPoint; 10] = [
        Self::Observe,
        Self::CompareBefore,
        Self::CompareAfter,
        Self::RegisterIfAbsent,
        Self::DeleteIf,
        Self::Commit,
        Self::CommitEdge,
        Self::AfterCommit,
        Self::Release,
        Self::Renewal,
    ];

    /// Whether the wrapped operation has taken effect when a fault of `kind` fires here
    /// (see the table in the module documentation).
    pub fn applied_with(self, kind: FaultKind) -> bool {
        match self {
            Self::Observe | Self::CompareBefore | Self::CommitEdge => false,
            Self::CompareAfter | Self::AfterCommit => true,
            Self::RegisterIfAbsent
            | Self::DeleteIf
            | Self::Release
            | Self::Renewal
            | Self::Commit => kind == FaultKind::Unknown,
        }
    }
}

impl fmt::Display for FaultPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::Observe => "observe",
            Self::CompareBefore => "compare-before",
            Self::CompareAfter => "compare-after",
            Self::RegisterIfAbsent => "register-if-absent",
            Self::DeleteIf => "delete-if",
            Self::Commit => "commit",
            Self::CommitEdge => "commit-edge",
            Self::AfterCommit => "after-commit",
            Self::Release => "release",
            Self::Renewal => "renewal",
        };
        f.write_str(name)
    }
}

/// How an injected fault fails the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FaultKind {
    /// The store refuses at once ([`StoreErrorKind::Unavailable`]).
    Fail,
    /// The call stalls for the wrapper's stall time, then fails ([`StoreErrorKind::Backend`]).
    Timeout,
    /// The connection drops around the operation ([`StoreErrorKind::Backend`]); at points that
    /// can apply, the operation applied first.
    Unknown,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 3] = [Self::Fail, Self::Timeout, Self::Unknown];
}

/// What a compare-and-apply call does, judged from the last row the wrapper saw for the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CasKind {
    /// Writes a lease with a token different from the observed row's (an acquisition).
    Acquire,
    /// Writes the observed row's lease token with a later expiry (a heartbeat renewal).
    Renew,
    /// Writes the observed row without its lease (a release).
    Release,
    /// Any other write (including an owner's write that keeps its lease as it is).
    Write,
    /// A delete intent.
    Delete,
    /// A keep intent (no write).
    Keep,
}

/// One compare-and-apply call as a fault predicate sees it.
#[derive(Debug, Clone)]
pub struct CasCall {
    /// The namespace.
    pub namespace: Namespace,
    /// The key.
    pub key: BindingKey,
    /// What the call does.
    pub kind: CasKind,
    /// The 1-based number of this call among all compare-and-apply calls of the wrapper.
    pub seq: u64,
}

/// A predicate narrowing a fault to particular compare-and-apply calls.
pub type CasPredicate = Arc<dyn Fn(&CasCall) -> bool + Send + Sync>;

/// One armed fault: fires at the `nth` matching call of its point, once (or on every match
/// with [`Fault::repeat`]).
#[derive(Clone)]
pub struct Fault {
    /// Where.
    pub point: FaultPoint,
    /// How.
    pub kind: FaultKind,
    /// Skip this many matching calls first.
    pub skip: u64,
    /// Fire on every matching call after `skip` instead of once.
    pub repeat: bool,
    /// Only these keys, when set.
    pub key: Option<BindingKey>,
    /// Only compare-and-apply calls accepted by this predicate, when set.
    pub when: Option<CasPredicate>,
}

impl fmt::Debug for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fault")
            .field("point", &self.point)
            .field("kind", &self.kind)
            .field("skip", &self.skip)
            .field("repeat", &self.repeat)
            .field("key", &self.key)
            .field("when", &self.when.is_some())
            .finish()
    }
}

impl Fault {
    /// A fault firing once at the first call of `point`.
    pub fn new(point: FaultPoint, kind: FaultKind) -> Self {
        Self {
            point,
            kind,
            skip: 0,
            repeat: false,
            key: None,
            when: None,
        }
    }

    /// Fires at the call after `skip` matching calls.
    #[must_use]
    pub fn after(mut self, skip: u64) -> Self {
        self.skip = skip;
        self
    }

    /// Fires on every matching call (after the skipped ones).
    #[must_use]
    pub fn repeat(mut self) -> Self {
        self.repeat = true;
        self
    }

    /// Fires only for `key`.
    #[must_use]
    pub fn for_key(mut self, key: BindingKey) -> Self {
        self.key = Some(key);
        self
    }

    /// Fires only for compare-and-apply calls accepted by `predicate`.
    #[must_use]
    pub fn when(mut self, predicate: impl Fn(&CasCall) -> bool + Send + Sync + 'static) -> Self {
        self.when = Some(Arc::new(predicate));
        self
    }
}

/// A fault that fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiredFault {
    /// Where.
    pub point: FaultPoint,
    /// How.
    pub kind: FaultKind,
    /// The key, when the point has one.
    pub key: Option<BindingKey>,
}

/// Counters of the calls that went through the wrapper.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// `observe` and `lookup` calls.
    pub reads: u64,
    /// `compare_and_apply` calls, by kind (counted before any fault).
    pub cas: HashMap<CasKind, u64>,
    /// `register_if_absent` calls (store and row transaction).
    pub registers: u64,
    /// `delete_if` calls (store and row transaction).
    pub deletes: u64,
    /// Writes the wrapped store actually applied (an `Applied` outcome, a created row, a
    /// removed row), including those whose caller then got an injected error.
    pub writes_applied: u64,
    /// The faults that fired, in order.
    pub fired: Vec<FiredFault>,
}

impl FaultStats {
    /// Compare-and-apply calls of `kind`.
    pub fn cas_of(&self, kind: CasKind) -> u64 {
        self.cas.get(&kind).copied().unwrap_or(0)
    }

    /// Every compare-and-apply call.
    pub fn cas_total(&self) -> u64 {
        self.cas.values().sum()
    }
}

#[derive(Default)]
struct State {
    armed: Vec<(Fault, u64)>,
    stats: FaultStats,
    cas_seq: u64,
    /// Quarantine writes still to refuse.
    quarantine_failures: u64,
    /// The last row seen per key (from observe, lookup, conflicts and applied writes).
    seen: HashMap<(Namespace, BindingKey), Option<StoredRow>>,
}

/// Test code run with the wrapped store before a compare-and-apply reaches it
/// ([`FaultInjectingStore::before_compare`]).
pub type BeforeCompare<S> = Arc<
    dyn Fn(Arc<S>, CasCall) -> tether_core::BoxFuture<'static, Result<(), Error>> + Send + Sync,
>;

/// The faults of a [`FaultInjectingStore`] that fire inside a host transaction (from
/// [`FaultInjectingStore::host_transaction_faults`]); each call consumes the armed fault.
#[derive(Clone)]
pub struct HostTransactionFaults {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for HostTransactionFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostTransactionFaults")
            .finish_non_exhaustive()
    }
}

impl HostTransactionFaults {
    /// The fault armed at the commit edge, before COMMIT ([`FaultPoint::CommitEdge`]).
    pub fn commit_edge(&self) -> Result<(), Error> {
        take(&self.state, FaultPoint::CommitEdge, None, None)
            .map_or(Ok(()), |kind| Err(injected(kind, false)))
    }

    /// The fault armed right after COMMIT ([`FaultPoint::AfterCommit`]; nothing is rolled
    /// back).
    pub fn after_commit(&self) -> Result<(), Error> {
        take(&self.state, FaultPoint::AfterCommit, None, None)
            .map_or(Ok(()), |kind| Err(injected(kind, true)))
    }
}

/// A [`BindingStore`] wrapper that injects faults at named points (module documentation).
pub struct FaultInjectingStore<S: ?Sized> {
    inner: Arc<S>,
    state: Arc<Mutex<State>>,
    stall: Duration,
    before_compare: Arc<Mutex<Option<BeforeCompare<S>>>>,
}

impl<S: fmt::Debug + ?Sized> fmt::Debug for FaultInjectingStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultInjectingStore")
            .field("inner", &self.inner)
            .field("stall", &self.stall)
            .finish_non_exhaustive()
    }
}

impl<S: ?Sized> FaultInjectingStore<S> {
    /// Wraps `inner` with no faults armed; a timeout stalls 20 ms.
    pub fn new(inner: Arc<S>) -> Self {
        Self {
            inner,
            state: Arc::new(Mutex::new(State::default())),
            stall: Duration::from_millis(20),
            before_compare: Arc::new(Mutex::new(None)),
        }
    }

    /// Runs `f` with the wrapped store before every compare-and-apply reaches it (after the
    /// wrapper's own `CompareBefore` point): a test can interleave another writer there (the
    /// call then conflicts), pause the caller, or fail the call before anything was written.
    pub fn before_compare(
        &self,
        f: impl Fn(Arc<S>, CasCall) -> tether_core::BoxFuture<'static, Result<(), Error>>
        + Send
        + Sync
        + 'static,
    ) {
        *self
            .before_compare
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(f));
    }

    /// Sets how long a [`FaultKind::Timeout`] stalls before failing.
    #[must_use]
    pub fn with_stall(mut self, stall: Duration) -> Self {
        self.stall = stall;
        self
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Arms `fault` (faults are checked in the order they were armed).
    pub fn arm(&self, fault: Fault) {
        self.state().armed.push((fault, 0));
    }

    /// Removes every armed fault.
    pub fn disarm(&self) {
        let mut state = self.state();
        state.armed.clear();
        state.quarantine_failures = 0;
    }

    /// Refuses the next `n` quarantine writes ([`StoreErrorKind::Unavailable`]), as a failing
    /// store would.
    pub fn fail_quarantine_writes(&self, n: u64) {
        self.state().quarantine_failures = n;
    }

    /// The counters so far.
    pub fn stats(&self) -> FaultStats {
        self.state().stats.clone()
    }

    /// Resets the counters (armed faults stay).
    pub fn reset_stats(&self) {
        self.state().stats = FaultStats::default();
    }

    /// This wrapper's faults of the host transaction ([`FaultPoint::CommitEdge`],
    /// [`FaultPoint::AfterCommit`]), for the host layer's transaction hooks.
    pub fn host_transaction_faults(&self) -> HostTransactionFaults {
        HostTransactionFaults {
            state: Arc::clone(&self.state),
        }
    }

    /// Wraps a host transaction's row operations with this wrapper's `DeleteIf`,
    /// `RegisterIfAbsent` and `Observe` faults and counters.
    pub fn row_transaction<'a>(&self, tx: &'a dyn RowTransaction) -> FaultRowTransaction<'a> {
        FaultRowTransaction {
            tx,
            state: Arc::clone(&self.state),
            stall: self.stall,
        }
    }

    fn check(
        &self,
        point: FaultPoint,
        key: &BindingKey,
        cas: Option<&CasCall>,
    ) -> Option<FaultKind> {
        take(&self.state, point, Some(key), cas)
    }

    fn remember(&self, ns: &Namespace, key: &BindingKey, row: Option<StoredRow>) {
        self.state().seen.insert((ns.clone(), key.clone()), row);
    }

    fn classify(&self, ns: &Namespace, key: &BindingKey, intent: &Intent) -> CasKind {
        let state = self.state();
        let seen = state
            .seen
            .get(&(ns.clone(), key.clone()))
            .and_then(|row| row.as_ref());
        classify(seen, intent)
    }
}

/// Classifies a compare-and-apply intent against the row last seen for its key.
pub fn classify(seen: Option<&StoredRow>, intent: &Intent) -> CasKind {
    match intent {
        Intent::Set { row, .. } => {
            let old = seen.and_then(|r| r.lease.as_ref());
            match (&row.lease, old) {
                (Some(new), Some(old)) if new.token == old.token => {
                    if new.expires_at > old.expires_at {
                        CasKind::Renew
                    } else {
                        CasKind::Write
                    }
                }
                (Some(_), _) => CasKind::Acquire,
                (None, Some(_)) if seen.is_some_and(|r| r.value == row.value) => CasKind::Release,
                (None, _) => CasKind::Write,
            }
        }
        Intent::Delete => CasKind::Delete,
        _ => CasKind::Keep,
    }
}

/// Finds and consumes the first armed fault matching the call.
fn take(
    state: &Mutex<State>,
    point: FaultPoint,
    key: Option<&BindingKey>,
    cas: Option<&CasCall>,
) -> Option<FaultKind> {
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    let mut hit = None;
    for (index, (fault, matched)) in state.armed.iter_mut().enumerate() {
        if fault.point != point {
            continue;
        }
        if fault.key.as_ref().is_some_and(|k| Some(k) != key) {
            continue;
        }
        if let Some(when) = &fault.when {
            match cas {
                Some(call) if when(call) => {}
                _ => continue,
            }
        }
        *matched += 1;
        if *matched > fault.skip {
            hit = Some((index, fault.kind, fault.repeat));
            break;
        }
    }
    let (index, kind, repeat) = hit?;
    if !repeat {
        state.armed.remove(index);
    }
    state.stats.fired.push(FiredFault {
        point,
        kind,
        key: key.cloned(),
    });
    tracing::debug!(%point, ?kind, "injected store fault");
    Some(kind)
}

/// The error an injected fault returns: a refusal before anything happened is
/// [`StoreErrorKind::Unavailable`] (nothing was written, the caller knows it); a timeout, a
/// dropped connection, or any fault after the wrapped call applied is
/// [`StoreErrorKind::Backend`] (the caller cannot know whether the write stands).
fn injected(kind: FaultKind, applied: bool) -> Error {
    Error::store(match (kind, applied) {
        (FaultKind::Fail, false) => StoreErrorKind::Unavailable {
            message: "injected fault: the store refused the call".into(),
            cause: None,
        },
        (FaultKind::Timeout, _) => StoreErrorKind::Backend {
            message: "injected fault: the store call timed out".into(),
            cause: None,
        },
        _ => StoreErrorKind::Backend {
            message: "injected fault: the connection dropped; the outcome is unknown".into(),
            cause: None,
        },
    })
}

/// Whether a store error proves that nothing was written ([`StoreErrorKind::Unavailable`]);
/// any other error from a write leaves its outcome unknown, so the caller must quarantine the
/// key instead of replaying the write.
pub fn proves_nothing_written(error: &Error) -> bool {
    matches!(
        error,
        Error::Store {
            kind: StoreErrorKind::Unavailable { .. }
        }
    )
}

async fn fail(kind: FaultKind, stall: Duration, applied: bool) -> Error {
    if kind == FaultKind::Timeout && !stall.is_zero() {
        tokio::time::sleep(stall).await;
    }
    injected(kind, applied)
}

/// A failed read: whatever the kind, nothing was written.
async fn fail_read(kind: FaultKind, stall: Duration) -> Error {
    if kind == FaultKind::Timeout && !stall.is_zero() {
        tokio::time::sleep(stall).await;
    }
    Error::store(StoreErrorKind::Unavailable {
        message: format!("injected fault: the read failed ({kind:?})"),
        cause: None,
    })
}

fn count_write(state: &Mutex<State>, applied: bool) {
    if applied {
        state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats
            .writes_applied += 1;
    }
}

impl<S: BindingStore + ?Sized> FaultInjectingStore<S> {
    /// Runs a keyed write-like call with its own point and the [`FaultPoint::Commit`] point:
    /// before or after the wrapped call by kind.
    async fn single<T>(
        &self,
        point: FaultPoint,
        key: &BindingKey,
        call: impl std::future::Future<Output = Result<T, Error>>,
        applied: impl Fn(&T) -> bool,
    ) -> Result<T, Error> {
        let fault = self
            .check(point, key, None)
            .map(|kind| (point, kind))
            .or_else(|| {
                self.check(FaultPoint::Commit, key, None)
                    .map(|kind| (FaultPoint::Commit, kind))
            });
        if let Some((point, kind)) = fault
            && !point.applied_with(kind)
        {
            return Err(self.fail_at(point, kind, key, false).await);
        }
        let result = call.await?;
        count_write(&self.state, applied(&result));
        match fault {
            Some((point, kind)) => Err(self.fail_at(point, kind, key, true).await),
            None => Ok(result),
        }
    }

    /// The error of a fault of `kind` at `point` for `key`.
    async fn fail_at(
        &self,
        point: FaultPoint,
        kind: FaultKind,
        key: &BindingKey,
        applied: bool,
    ) -> Error {
        let error = fail(kind, self.stall, applied).await;
        if point == FaultPoint::Commit {
            crate::sql::for_key(
                key,
                crate::sql::commit_failed(&format_args!(
                    "injected fault at COMMIT ({kind:?}, {})",
                    if applied { "saved" } else { "not saved" }
                )),
            )
        } else {
            error
        }
    }
    /// A conditional write (`compare_and_apply` or `apply_observed`, run by `write`) with its
    /// fault points: [`FaultPoint::CompareBefore`] (and the release or renewal point of that
    /// kind of write) before it reaches the store, [`FaultPoint::CompareAfter`] after it
    /// applied.
    async fn faulted_write<F, Fut>(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        intent: Intent,
        write: F,
    ) -> Result<ObservedOutcome, Error>
    where
        F: FnOnce(Intent) -> Fut + Send,
        Fut: std::future::Future<Output = Result<ObservedOutcome, Error>> + Send,
    {
        let kind = self.classify(ns, key, &intent);
        let call = {
            let mut state = self.state();
            state.cas_seq += 1;
            *state.stats.cas.entry(kind).or_insert(0) += 1;
            CasCall {
                namespace: ns.clone(),
                key: key.clone(),
                kind,
                seq: state.cas_seq,
            }
        };
        let lease_point = match kind {
            CasKind::Release => Some(FaultPoint::Release),
            CasKind::Renew => Some(FaultPoint::Renewal),
            _ => None,
        };
        let mut before = self
            .check(FaultPoint::CompareBefore, key, Some(&call))
            .map(|kind| (FaultPoint::CompareBefore, kind));
        let mut after = None;
        for point in lease_point.into_iter().chain([FaultPoint::Commit]) {
            if before.is_some() || after.is_some() {
                break;
            }
            if let Some(fault) = self.check(point, key, Some(&call)) {
                if point.applied_with(fault) {
                    after = Some((point, fault));
                } else {
                    before = Some((point, fault));
                }
            }
        }
        if let Some((point, kind)) = before {
            return Err(self.fail_at(point, kind, key, false).await);
        }
        let interleave = self
            .before_compare
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(interleave) = interleave {
            interleave(Arc::clone(&self.inner), call.clone()).await?;
        }
        let written = matches!(intent, Intent::Set { .. });
        let observed = write(intent).await?;
        match &observed.outcome {
            ApplyOutcome::Applied { .. } => {
                count_write(&self.state, true);
                // The next classification must see the row as it is now.
                let row = if written {
                    self.inner.lookup(ns, key).await.ok().flatten()
                } else {
                    None
                };
                self.remember(ns, key, row);
            }
            ApplyOutcome::Conflict { current } => self.remember(ns, key, current.row.clone()),
            _ => {}
        }
        let after = after.or_else(|| {
            self.check(FaultPoint::CompareAfter, key, Some(&call))
                .map(|kind| (FaultPoint::CompareAfter, kind))
        });
        match after {
            Some((point, kind)) => Err(self.fail_at(point, kind, key, true).await),
            None => Ok(observed),
        }
    }
}

#[async_trait]
impl<S: BindingStore + ?Sized + 'static> BindingStore for FaultInjectingStore<S> {
    async fn register_namespace(&self, config: NamespaceConfig) -> Result<(), Error> {
        self.inner.register_namespace(config).await
    }

    async fn lookup(&self, ns: &Namespace, key: &BindingKey) -> Result<Option<StoredRow>, Error> {
        self.state().stats.reads += 1;
        if let Some(kind) = self.check(FaultPoint::Observe, key, None) {
            return Err(fail_read(kind, self.stall).await);
        }
        let row = self.inner.lookup(ns, key).await?;
        self.remember(ns, key, row.clone());
        Ok(row)
    }

    async fn observe(&self, ns: &Namespace, key: &BindingKey) -> Result<Observation, Error> {
        self.state().stats.reads += 1;
        if let Some(kind) = self.check(FaultPoint::Observe, key, None) {
            return Err(fail_read(kind, self.stall).await);
        }
        let observation = self.inner.observe(ns, key).await?;
        self.remember(ns, key, observation.row.clone());
        Ok(observation)
    }

    async fn compare_and_apply(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        comparison: &Comparison,
        intent: Intent,
        admission: Admission<'_>,
    ) -> Result<ApplyOutcome, Error> {
        let inner = &self.inner;
        self.faulted_write(ns, key, intent, |intent| async move {
            let outcome = inner
                .compare_and_apply(ns, key, comparison, intent, admission)
                .await?;
            Ok(ObservedOutcome::unreported(outcome))
        })
        .await
        .map(|observed| observed.outcome)
    }

    async fn apply_observed(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        observed: &Observation,
        intent: Intent,
        admission: Admission<'_>,
    ) -> Result<ObservedOutcome, Error> {
        let inner = &self.inner;
        self.faulted_write(ns, key, intent, |intent| {
            inner.apply_observed(ns, key, observed, intent, admission)
        })
        .await
    }

    async fn register_if_absent(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        row: RowWrite,
        ttl: Option<Duration>,
    ) -> Result<bool, Error> {
        self.state().stats.registers += 1;
        self.single(
            FaultPoint::RegisterIfAbsent,
            key,
            self.inner.register_if_absent(ns, key, row, ttl),
            |created| *created,
        )
        .await
    }

    async fn delete_if(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error> {
        self.state().stats.deletes += 1;
        self.single(
            FaultPoint::DeleteIf,
            key,
            self.inner.delete_if(ns, key, predicate),
            Option::is_some,
        )
        .await
    }

    async fn scan(
        &self,
        ns: &Namespace,
        after: Option<&BindingKey>,
        limit: usize,
    ) -> Result<Vec<(BindingKey, StoredRow)>, Error> {
        self.inner.scan(ns, after, limit).await
    }

    async fn count(&self, ns: &Namespace) -> Result<u64, Error> {
        self.inner.count(ns).await
    }
}

#[async_trait]
impl<S: QuarantineStore + ?Sized + 'static> QuarantineStore for FaultInjectingStore<S> {
    async fn quarantine(&self, entry: QuarantineEntry) -> Result<(), Error> {
        {
            let mut state = self.state();
            if state.quarantine_failures > 0 {
                state.quarantine_failures -= 1;
                return Err(Error::store(StoreErrorKind::Unavailable {
                    message: "injected fault: the quarantine write was refused".into(),
                    cause: None,
                }));
            }
        }
        self.inner.quarantine(entry).await
    }

    async fn quarantined(
        &self,
        ns: &Namespace,
        key: &BindingKey,
    ) -> Result<Option<QuarantineEntry>, Error> {
        self.inner.quarantined(ns, key).await
    }

    async fn release_quarantine(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        operator_reason: &str,
    ) -> Result<bool, Error> {
        self.inner
            .release_quarantine(ns, key, operator_reason)
            .await
    }
}

/// A host transaction's row operations with the faults and counters of a
/// [`FaultInjectingStore`] ([`FaultInjectingStore::row_transaction`]).
pub struct FaultRowTransaction<'a> {
    tx: &'a dyn RowTransaction,
    state: Arc<Mutex<State>>,
    stall: Duration,
}

impl fmt::Debug for FaultRowTransaction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultRowTransaction")
            .field("stall", &self.stall)
            .finish_non_exhaustive()
    }
}

impl FaultRowTransaction<'_> {
    async fn single<T>(
        &self,
        point: FaultPoint,
        key: &BindingKey,
        call: impl std::future::Future<Output = Result<T, Error>>,
        applied: impl Fn(&T) -> bool,
    ) -> Result<T, Error> {
        let fault = take(&self.state, point, Some(key), None);
        if let Some(kind) = fault
            && !point.applied_with(kind)
        {
            return Err(if point == FaultPoint::Observe {
                fail_read(kind, self.stall).await
            } else {
                fail(kind, self.stall, false).await
            });
        }
        let result = call.await?;
        count_write(&self.state, applied(&result));
        match fault {
            Some(kind) => Err(fail(kind, self.stall, true).await),
            None => Ok(result),
        }
    }
}

#[async_trait]
impl RowTransaction for FaultRowTransaction<'_> {
    async fn lookup(&self, ns: &Namespace, key: &BindingKey) -> Result<Option<StoredRow>, Error> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats
            .reads += 1;
        self.single(FaultPoint::Observe, key, self.tx.lookup(ns, key), |_| false)
            .await
    }

    async fn delete_if(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats
            .deletes += 1;
        self.single(
            FaultPoint::DeleteIf,
            key,
            self.tx.delete_if(ns, key, predicate),
            Option::is_some,
        )
        .await
    }

    async fn register_if_absent(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        row: RowWrite,
        ttl: Option<Duration>,
    ) -> Result<bool, Error> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats
            .registers += 1;
        self.single(
            FaultPoint::RegisterIfAbsent,
            key,
            self.tx.register_if_absent(ns, key, row, ttl),
            |created| *created,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::{Lease, LeaseEpoch, LeaseToken, LeaseWrite, Revision, Timestamp};

    fn row(token: Option<(&str, i64)>, value: &[u8]) -> StoredRow {
        StoredRow {
            value: value.to_vec(),
            lease: token.map(|(t, at)| Lease {
                token: LeaseToken::new(t).unwrap(),
                epoch: LeaseEpoch::INITIAL,
                expires_at: Timestamp::from_millis(at),
                acquired_at: Timestamp::EPOCH,
                renewed_at: Timestamp::EPOCH,
                holder: None,
            }),
            revision: Revision::INITIAL,
            created_at: Timestamp::EPOCH,
            expires_at: None,
        }
    }

    fn set(token: Option<(&str, i64)>, value: &[u8]) -> Intent {
        Intent::Set {
            row: RowWrite {
                value: value.to_vec(),
                lease: token.map(|(t, at)| LeaseWrite {
                    token: LeaseToken::new(t).unwrap(),
                    expires_at: Timestamp::from_millis(at),
                    holder: None,
                }),
            },
            ttl: None,
        }
    }

    #[test]
    fn classifies_lease_calls_from_the_seen_row() {
        let held = row(Some(("a", 100)), b"v");
        assert_eq!(
            classify(None, &set(Some(("a", 100)), b"v")),
            CasKind::Acquire
        );
        assert_eq!(
            classify(Some(&held), &set(Some(("b", 200)), b"v")),
            CasKind::Acquire
        );
        assert_eq!(
            classify(Some(&held), &set(Some(("a", 200)), b"v")),
            CasKind::Renew
        );
        assert_eq!(
            classify(Some(&held), &set(Some(("a", 100)), b"w")),
            CasKind::Write
        );
        assert_eq!(classify(Some(&held), &set(None, b"v")), CasKind::Release);
        assert_eq!(classify(Some(&held), &set(None, b"w")), CasKind::Write);
        assert_eq!(classify(None, &set(None, b"w")), CasKind::Write);
        assert_eq!(classify(Some(&held), &Intent::Delete), CasKind::Delete);
        assert_eq!(classify(Some(&held), &Intent::Keep), CasKind::Keep);
    }

    #[test]
    fn applied_table_matches_the_documentation() {
        use FaultKind::*;
        use FaultPoint::*;
        for kind in FaultKind::ALL {
            assert!(!Observe.applied_with(kind));
            assert!(!CompareBefore.applied_with(kind));
            assert!(CompareAfter.applied_with(kind));
            assert!(!CommitEdge.applied_with(kind));
            assert!(AfterCommit.applied_with(kind));
        }
        for point in [RegisterIfAbsent, DeleteIf, Release, Renewal] {
            assert!(!point.applied_with(Fail));
            assert!(!point.applied_with(Timeout));
            assert!(point.applied_with(Unknown));
        }
    }

    #[test]
    fn faults_fire_at_the_nth_match_once_or_repeatedly() {
        let state = Mutex::new(State::default());
        let key = BindingKey::conversation(&tether_core::BindingId::new("k").unwrap());
        state.lock().unwrap().armed.push((
            Fault::new(FaultPoint::DeleteIf, FaultKind::Fail).after(1),
            0,
        ));
        assert_eq!(take(&state, FaultPoint::DeleteIf, Some(&key), None), None);
        assert_eq!(take(&state, FaultPoint::Observe, Some(&key), None), None);
        assert_eq!(
            take(&state, FaultPoint::DeleteIf, Some(&key), None),
            Some(FaultKind::Fail)
        );
        assert_eq!(take(&state, FaultPoint::DeleteIf, Some(&key), None), None);
        state.lock().unwrap().armed.push((
            Fault::new(FaultPoint::Observe, FaultKind::Timeout).repeat(),
            0,
        ));
        for _ in 0..3 {
            assert_eq!(
                take(&state, FaultPoint::Observe, Some(&key), None),
                Some(FaultKind::Timeout)
            );
        }
        assert_eq!(state.lock().unwrap().stats.fired.len(), 4);
    }
}
