//! Fault injection for the in-memory store (feature `test-support`).
//!
//! A [`StoreHook`] lets a test run its own async code around the store's operations:
//!
//! - [`StoreHook::before_compare`] runs before `compare_and_apply` reads the row, so a test can
//!   replace the row first (the write then conflicts), pause the call on a test-controlled
//!   future, or fail the call before anything happens;
//! - [`StoreHook::after_apply`] runs after `compare_and_apply` finished (the write, if any, is
//!   done); returning an error makes the call fail although it applied (an unknown outcome), and
//!   awaiting pauses the caller after the write;
//! - [`StoreHook::before_read`] runs before `lookup` / `observe`.
//!
//! Hooks receive an owned [`MemoryStore`] handle, so they can call the store themselves. They run
//! outside the store's lock.
//!
//! ```
//! use std::sync::Arc;
//! use tether_core::{Error, FakeClock, Timestamp};
//! use tether_storage::{MemoryStore, StoreHook};
//!
//! let store = MemoryStore::new(Arc::new(FakeClock::new(Timestamp::EPOCH)));
//! // Every compare-and-apply after the first applies and then reports an unknown outcome.
//! store.set_hook(StoreHook::new().after_apply(|call, _outcome| {
//!     Box::pin(async move {
//!         if call.seq > 1 {
//!             return Err(Error::other("storage outcome unknown"));
//!         }
//!         Ok(())
//!     })
//! }));
//! ```

use std::fmt;
use std::sync::Arc;

use tether_core::{ApplyOutcome, BindingKey, BoxFuture, Error, Intent, Namespace};

use super::MemoryStore;

/// The future a hook returns. An error fails the store call with that error.
pub type HookFuture = BoxFuture<'static, Result<(), Error>>;

/// One `compare_and_apply` call, as a hook sees it.
#[derive(Debug, Clone)]
pub struct CompareCall {
    /// A handle to the store (shared state).
    pub store: MemoryStore,
    /// The namespace written.
    pub namespace: Namespace,
    /// The key written.
    pub key: BindingKey,
    /// The intent of the call.
    pub intent: Intent,
    /// 1 for the store's first `compare_and_apply` call since the hook was set, 2 for the next…
    pub seq: u64,
}

/// One `lookup` / `observe` call, as a hook sees it.
#[derive(Debug, Clone)]
pub struct ReadCall {
    /// A handle to the store (shared state).
    pub store: MemoryStore,
    /// The namespace read.
    pub namespace: Namespace,
    /// The key read.
    pub key: BindingKey,
    /// 1 for the store's first read since the hook was set, 2 for the next…
    pub seq: u64,
}

type BeforeCompare = Arc<dyn Fn(CompareCall) -> HookFuture + Send + Sync>;
type AfterApply = Arc<dyn Fn(CompareCall, ApplyOutcome) -> HookFuture + Send + Sync>;
type BeforeRead = Arc<dyn Fn(ReadCall) -> HookFuture + Send + Sync>;

/// Test code run around store operations (see the module documentation).
#[derive(Clone, Default)]
pub struct StoreHook {
    pub(crate) before_compare: Option<BeforeCompare>,
    pub(crate) after_apply: Option<AfterApply>,
    pub(crate) before_read: Option<BeforeRead>,
}

impl StoreHook {
    /// A hook that does nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `f` before each `compare_and_apply` compares. An error fails the call before it
    /// read or wrote anything.
    #[must_use]
    pub fn before_compare(
        mut self,
        f: impl Fn(CompareCall) -> HookFuture + Send + Sync + 'static,
    ) -> Self {
        self.before_compare = Some(Arc::new(f));
        self
    }

    /// Runs `f` after each `compare_and_apply` finished, with its outcome. An error fails the
    /// call even though the outcome stands (an uncertain write).
    #[must_use]
    pub fn after_apply(
        mut self,
        f: impl Fn(CompareCall, ApplyOutcome) -> HookFuture + Send + Sync + 'static,
    ) -> Self {
        self.after_apply = Some(Arc::new(f));
        self
    }

    /// Runs `f` before each `lookup` / `observe`. An error fails the read.
    #[must_use]
    pub fn before_read(
        mut self,
        f: impl Fn(ReadCall) -> HookFuture + Send + Sync + 'static,
    ) -> Self {
        self.before_read = Some(Arc::new(f));
        self
    }
}

impl fmt::Debug for StoreHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreHook")
            .field("before_compare", &self.before_compare.is_some())
            .field("after_apply", &self.after_apply.is_some())
            .field("before_read", &self.before_read.is_some())
            .finish()
    }
}
