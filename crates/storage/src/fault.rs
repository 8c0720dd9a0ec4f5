//! Fault injection around any [`BindingStore`]: the memory store's [`StoreHook`](crate::StoreHook)
//! idea as a wrapper, so the same fault tests run against the SQL store.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tether_core::{
    Admission, ApplyOutcome, BindingKey, BindingStore, Comparison, Error, Intent, Namespace,
    NamespaceConfig, Observation, RowPredicate, RowWrite, StoredRow,
};

use crate::memory::HookFuture;

type Before<S> = Arc<dyn Fn(Arc<S>, u64) -> HookFuture + Send + Sync>;
type After<S> = Arc<dyn Fn(Arc<S>, ApplyOutcome, u64) -> HookFuture + Send + Sync>;

/// A [`BindingStore`] wrapper that runs test code around `compare_and_apply`:
///
/// - [`before_compare`](Self::before_compare) runs before the wrapped store compares (it can
///   write through the store it receives, pause, or fail the call before anything happened);
/// - [`after_apply`](Self::after_apply) runs after the wrapped call returned an outcome; an
///   error makes the call fail although the write stands (an uncertain outcome).
///
/// Hooks receive the wrapped store and the 1-based number of the call.
pub struct FaultyStore<S: ?Sized> {
    inner: Arc<S>,
    before: Mutex<Option<Before<S>>>,
    after: Mutex<Option<After<S>>>,
    calls: AtomicU64,
}

impl<S: ?Sized + fmt::Debug> fmt::Debug for FaultyStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStore")
            .field("inner", &self.inner)
            .field("calls", &self.calls.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl<S: ?Sized> FaultyStore<S> {
    /// Wraps `inner` with no faults.
    pub fn new(inner: Arc<S>) -> Self {
        Self {
            inner,
            before: Mutex::new(None),
            after: Mutex::new(None),
            calls: AtomicU64::new(0),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// Sets the hook run before each compare.
    pub fn before_compare(&self, f: impl Fn(Arc<S>, u64) -> HookFuture + Send + Sync + 'static) {
        *self
            .before
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(f));
    }

    /// Sets the hook run after each apply.
    pub fn after_apply(
        &self,
        f: impl Fn(Arc<S>, ApplyOutcome, u64) -> HookFuture + Send + Sync + 'static,
    ) {
        *self
            .after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(f));
    }

    /// Removes both hooks.
    pub fn clear(&self) {
        *self
            .before
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        *self
            .after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    /// How many `compare_and_apply` calls went through the wrapper.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl<S: BindingStore + ?Sized + 'static> BindingStore for FaultyStore<S> {
    async fn register_namespace(&self, config: NamespaceConfig) -> Result<(), Error> {
        self.inner.register_namespace(config).await
    }

    async fn lookup(&self, ns: &Namespace, key: &BindingKey) -> Result<Option<StoredRow>, Error> {
        self.inner.lookup(ns, key).await
    }

    async fn observe(&self, ns: &Namespace, key: &BindingKey) -> Result<Observation, Error> {
        self.inner.observe(ns, key).await
    }

    async fn compare_and_apply(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        comparison: &Comparison,
        intent: Intent,
        admission: Admission<'_>,
    ) -> Result<ApplyOutcome, Error> {
        let seq = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let before = self
            .before
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(before) = before {
            before(Arc::clone(&self.inner), seq).await?;
        }
        let outcome = self
            .inner
            .compare_and_apply(ns, key, comparison, intent, admission)
            .await?;
        let after = self
            .after
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(after) = after {
            after(Arc::clone(&self.inner), outcome.clone(), seq).await?;
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
        self.inner.register_if_absent(ns, key, row, ttl).await
    }

    async fn delete_if(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error> {
        self.inner.delete_if(ns, key, predicate).await
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
