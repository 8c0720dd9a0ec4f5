//! The in-memory store: the same contracts as the SQL store, for fast tests and for harness
//! authors.
//!
//! Semantics shared with the SQL store:
//!
//! - a row is invisible as soon as `expires_at <= now` (the injected [`Clock`] decides);
//! - every write takes a new revision from a store-wide counter, so a recreated row never
//!   matches an old comparison;
//! - a write whose lease token differs from the row's current one is a new acquisition and gets
//!   a new lease epoch from a store-wide counter (epochs are never reused, even after the row is
//!   deleted); the same token keeps its epoch and `acquired_at`, and moves `renewed_at`;
//! - capacity `max_entries` with `reject-new` (updates and deletes of existing rows still pass),
//!   a per-namespace value limit, and unknown namespaces refused with typed errors;
//! - a lease event history ([`StoreAdmin::lease_events`]).
//!
//! It also holds host session entries ([`HostSessionStore`](tether_core::HostSessionStore)) for
//! lifecycle tests.
//!
//! `compare_and_apply` runs its admission check while holding the store's lock (so the compare,
//! the check and the write are one atomic step): an admission callback must not call back into
//! the same store.
//!
//! Tests can inject faults with a `StoreHook` (feature `test-support`) and stage transactional
//! deletions with [`MemoryStore::begin`].

// The hook machinery is always compiled (the store calls it), but only a `test-support` build
// can install a hook.
#[cfg_attr(not(feature = "test-support"), allow(dead_code, unreachable_pub))]
mod hook;
mod host;
mod state;
mod transaction;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tether_core::{
    Admission, ApplyOutcome, BindingKey, BindingStore, Clock, Comparison, Error, Intent, Namespace,
    NamespaceConfig, Observation, QuarantineEntry, QuarantineStore, RowPredicate, RowWrite,
    StoredRow, SystemClock, Timestamp,
};

#[cfg(feature = "test-support")]
pub use self::hook::{CompareCall, HookFuture, ReadCall, StoreHook};
#[cfg(not(feature = "test-support"))]
use self::hook::{CompareCall, ReadCall, StoreHook};
pub use self::host::MemoryHostTransaction;
use self::state::State;
pub use self::transaction::MemoryTransaction;
use crate::admin::StoreAdmin;
use crate::events::{LeaseEvent, LeaseEventQuery};
use crate::plan;

/// The in-memory binding store (cheap to clone: clones share the same rows).
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    hook: Mutex<Option<StoreHook>>,
    cas_calls: AtomicU64,
    reads: AtomicU64,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(Arc::new(SystemClock))
    }
}

impl MemoryStore {
    /// An empty store reading time from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: Arc::new(Inner {
                clock,
                state: Mutex::new(State::default()),
                hook: Mutex::new(None),
                cas_calls: AtomicU64::new(0),
                reads: AtomicU64::new(0),
            }),
        }
    }

    /// The clock the store decides expiry with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied write: every write is
        // computed first and inserted last.
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Installs a fault-injection hook (replacing any previous one) and restarts its call
    /// counters at 1 (feature `test-support`).
    #[cfg(feature = "test-support")]
    pub fn set_hook(&self, hook: StoreHook) {
        self.inner.cas_calls.store(0, Ordering::SeqCst);
        self.inner.reads.store(0, Ordering::SeqCst);
        *self.hook_slot() = Some(hook);
    }

    /// Removes the fault-injection hook (feature `test-support`).
    #[cfg(feature = "test-support")]
    pub fn clear_hook(&self) {
        *self.hook_slot() = None;
    }

    fn hook_slot(&self) -> MutexGuard<'_, Option<StoreHook>> {
        self.inner
            .hook
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn hook(&self) -> Option<StoreHook> {
        self.hook_slot().clone()
    }

    /// The stored row exactly as held, even when expired (for tests and diagnostics).
    pub fn raw_row(&self, ns: &Namespace, key: &BindingKey) -> Option<StoredRow> {
        self.state().rows.get(ns).and_then(|r| r.get(key)).cloned()
    }

    /// Replaces a row exactly as given, bypassing every check, revision and event (for tests:
    /// corrupted values, foreign leases). The namespace must be registered.
    pub fn put_raw(&self, ns: &Namespace, key: &BindingKey, row: StoredRow) -> Result<(), Error> {
        let mut state = self.state();
        state.config(ns)?;
        state.last_revision = state.last_revision.max(row.revision.get());
        if let Some(lease) = &row.lease {
            state.last_epoch = state.last_epoch.max(lease.epoch.get());
        }
        state
            .rows
            .entry(ns.clone())
            .or_default()
            .insert(key.clone(), row);
        Ok(())
    }

    /// Starts a staged transaction over the binding rows (see [`MemoryTransaction`]).
    pub fn begin(&self) -> MemoryTransaction {
        MemoryTransaction::new(self.clone())
    }

    fn apply_locked(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        comparison: &Comparison,
        intent: Intent,
        admission: Admission<'_>,
    ) -> Result<ApplyOutcome, Error> {
        let now = self.now();
        let mut state = self.state();
        let config = state.config(ns)?.clone();
        if let Intent::Set { row, .. } = &intent {
            plan::check_write(&config, row)?;
        }
        let current = state.live(ns, key, now).cloned();
        if Comparison::for_row(current.as_ref()) != *comparison {
            if let Intent::Set { row, .. } = &intent {
                let fenced = plan::fenced_event(current.as_ref(), row);
                state.push_event(ns, key, now, fenced);
            }
            return Ok(ApplyOutcome::Conflict {
                current: Observation::new(current),
            });
        }
        admission()?;
        match intent {
            Intent::Set { row, ttl } => {
                let (revision, epoch) = state.set(ns, key, row, ttl, now)?;
                Ok(ApplyOutcome::Applied {
                    revision: Some(revision),
                    epoch,
                })
            }
            Intent::Delete => {
                state.delete(ns, key, now);
                Ok(ApplyOutcome::Applied {
                    revision: None,
                    epoch: None,
                })
            }
            Intent::Keep | Intent::KeepOnDelete => Ok(ApplyOutcome::Unchanged),
            // `Intent` is non-exhaustive: refuse what this store does not know.
            #[allow(unreachable_patterns)]
            other => Err(Error::other(format!(
                "unsupported compare-and-apply intent {other:?}"
            ))),
        }
    }
}

#[async_trait]
impl BindingStore for MemoryStore {
    async fn register_namespace(&self, config: NamespaceConfig) -> Result<(), Error> {
        self.state()
            .namespaces
            .insert(config.namespace.clone(), config);
        Ok(())
    }

    async fn lookup(&self, ns: &Namespace, key: &BindingKey) -> Result<Option<StoredRow>, Error> {
        if let Some(before) = self.hook().and_then(|h| h.before_read) {
            let seq = self.inner.reads.fetch_add(1, Ordering::SeqCst) + 1;
            before(ReadCall {
                store: self.clone(),
                namespace: ns.clone(),
                key: key.clone(),
                seq,
            })
            .await?;
        }
        let now = self.now();
        let state = self.state();
        state.config(ns)?;
        Ok(state.live(ns, key, now).cloned())
    }

    #[tracing::instrument(
        level = "debug",
        skip(self, intent, admission),
        fields(store = "memory")
    )]
    async fn compare_and_apply(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        comparison: &Comparison,
        intent: Intent,
        admission: Admission<'_>,
    ) -> Result<ApplyOutcome, Error> {
        let hook = self.hook();
        let call = hook.as_ref().map(|_| CompareCall {
            store: self.clone(),
            namespace: ns.clone(),
            key: key.clone(),
            intent: intent.clone(),
            seq: self.inner.cas_calls.fetch_add(1, Ordering::SeqCst) + 1,
        });
        if let (Some(before), Some(call)) =
            (hook.as_ref().and_then(|h| h.before_compare.clone()), &call)
        {
            before(call.clone()).await?;
        }
        let outcome = self.apply_locked(ns, key, comparison, intent, admission)?;
        if let (Some(after), Some(call)) = (hook.and_then(|h| h.after_apply), call) {
            after(call, outcome.clone()).await?;
        }
        Ok(outcome)
    }

    async fn register_if_absent(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        row: RowWrite,
        ttl: Option<Duration>,
    ) -> Result<bool, Error> {
        let now = self.now();
        let mut state = self.state();
        let config = state.config(ns)?.clone();
        plan::check_write(&config, &row)?;
        if state.live(ns, key, now).is_some() {
            return Ok(false);
        }
        state.set(ns, key, row, ttl, now)?;
        Ok(true)
    }

    async fn delete_if(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error> {
        let now = self.now();
        let mut state = self.state();
        state.config(ns)?;
        match state.live(ns, key, now) {
            Some(row) if predicate(row) => Ok(state.delete(ns, key, now)),
            _ => Ok(None),
        }
    }

    async fn scan(
        &self,
        ns: &Namespace,
        after: Option<&BindingKey>,
        limit: usize,
    ) -> Result<Vec<(BindingKey, StoredRow)>, Error> {
        let now = self.now();
        let state = self.state();
        state.config(ns)?;
        let Some(rows) = state.rows.get(ns) else {
            return Ok(Vec::new());
        };
        Ok(rows
            .iter()
            .filter(|(k, _)| after.is_none_or(|a| *k > a))
            .filter(|(_, r)| plan::row_is_live(r, now))
            .take(limit)
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect())
    }

    async fn count(&self, ns: &Namespace) -> Result<u64, Error> {
        let now = self.now();
        let state = self.state();
        state.config(ns)?;
        Ok(state.live_count(ns, now))
    }
}

#[async_trait]
impl QuarantineStore for MemoryStore {
    async fn quarantine(&self, entry: QuarantineEntry) -> Result<(), Error> {
        plan::check_quarantine(&entry)?;
        self.state()
            .quarantine
            .entry((entry.namespace.clone(), entry.key.clone()))
            .or_insert(entry);
        Ok(())
    }

    async fn quarantined(
        &self,
        ns: &Namespace,
        key: &BindingKey,
    ) -> Result<Option<QuarantineEntry>, Error> {
        Ok(self
            .state()
            .quarantine
            .get(&(ns.clone(), key.clone()))
            .cloned())
    }

    async fn release_quarantine(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        operator_reason: &str,
    ) -> Result<bool, Error> {
        tether_core::text::check_reason("operator reason", operator_reason)?;
        let released = self
            .state()
            .quarantine
            .remove(&(ns.clone(), key.clone()))
            .is_some();
        tracing::info!(namespace = %ns, key = %key, operator_reason, released, "quarantine released");
        Ok(released)
    }
}

#[async_trait]
impl StoreAdmin for MemoryStore {
    /// The memory store keeps the newest 10,000 events.
    async fn lease_events(&self, query: &LeaseEventQuery) -> Result<Vec<LeaseEvent>, Error> {
        Ok(self.state().events(query))
    }

    async fn sweep_expired(&self, limit: usize) -> Result<usize, Error> {
        let now = self.now();
        Ok(self.state().sweep(now, limit))
    }

    async fn prune_lease_events(&self, before: Timestamp) -> Result<u64, Error> {
        let mut state = self.state();
        let len = state.events.len();
        state.events.retain(|e| e.at >= before);
        Ok((len - state.events.len()) as u64)
    }

    async fn quarantined_keys(&self, limit: usize) -> Result<Vec<QuarantineEntry>, Error> {
        let mut all: Vec<_> = self.state().quarantine.values().cloned().collect();
        all.sort_by_key(|e| e.quarantined_at);
        all.truncate(limit);
        Ok(all)
    }
}
