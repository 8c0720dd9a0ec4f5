//! The harness registry and the reset fan-out (the contract: `docs/deletion-and-reset.md`,
//! "Reset fan-out").
//!
//! [`reset_registered_harness_sessions`] calls every registered harness's
//! [`AgentHarness::reset`] **concurrently**, each harness object at most once per call even when
//! it is registered in several registries. A failing harness never blocks the others or the
//! host's reset: its error is kept in the [`ResetReport`] and logged at `warn` — **once per
//! harness id per process**. The set of already-logged ids is process-global and lives outside
//! every [`HarnessRegistry`], so it survives registry reloads; the hook is still invoked on every
//! later reset so the harness can recover.
//!
//! The [`HarnessRegistry`] also backs operation-scoped owner checks: a
//! [`HarnessOwnerAuthority`] stops authorizing once its operation closed, the registry changed,
//! or the harness registration was removed or replaced.
//!
//! ```
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use tether_core::{AgentHarness, AgentId, Error, HarnessId, ResetParams, ResetReason, SessionId};
//! use tether_harness_sdk::reset::{HarnessRegistry, reset_registered_harness_sessions};
//!
//! #[derive(Debug)]
//! struct Quiet(HarnessId);
//! #[async_trait]
//! impl AgentHarness for Quiet {
//!     fn id(&self) -> &HarnessId { &self.0 }
//!     async fn reset(&self, _params: ResetParams) -> Result<(), Error> { Ok(()) }
//! }
//!
//! let registry = HarnessRegistry::new();
//! let before = registry.generation();
//! registry.register(Arc::new(Quiet(HarnessId::new("doc-quiet")?)));
//! assert_ne!(registry.generation(), before, "every change moves the generation");
//!
//! let params = ResetParams::new(
//!     AgentId::new("main")?,
//!     SessionId::new("s-1")?,
//!     None,
//!     ResetReason::Reset,
//! );
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let report = reset_registered_harness_sessions(&[&registry], &params).await;
//! assert_eq!(report.outcomes().len(), 1);
//! assert!(report.failures().next().is_none());
//! # });
//! # Ok::<(), tether_core::IdError>(())
//! ```

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use futures::future::join_all;
use tether_core::{AgentHarness, AssertCurrent, Error, HarnessId, ResetParams};
use tracing::Instrument as _;

pub use tether_core::HarnessRegistry;

/// The default text of the owner-changed error (`{harness_id}` is replaced).
pub const OWNER_CHANGED_TEXT: &str = "Session deletion harness owner changed: {harness_id}";

struct OwnerInner {
    registry: Arc<HarnessRegistry>,
    harness: Arc<dyn AgentHarness>,
    generation: u64,
    closed: AtomicBool,
    lifecycle: Option<AssertCurrent>,
    text: String,
}

/// An operation's authority over one harness registration (see `docs/deletion-and-reset.md`,
/// "Owners"): it fails
/// with [`Error::OwnerChanged`] once the operation closed, the plugin lifecycle authority was
/// lost, the registry changed, or the registration was removed or replaced (in Rust the hooks
/// are the harness object's, so a replaced hook is a replaced registration).
///
/// Retaining the callback grants nothing: after [`Self::close`] it keeps failing.
#[derive(Clone)]
pub struct HarnessOwnerAuthority {
    inner: Arc<OwnerInner>,
}

impl fmt::Debug for HarnessOwnerAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarnessOwnerAuthority")
            .field("harness_id", self.inner.harness.id())
            .field("generation", &self.inner.generation)
            .field("closed", &self.inner.closed.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl HarnessOwnerAuthority {
    /// Captures the authority of `harness`, which must be the current registration under its
    /// id in `registry`. `lifecycle` is the plugin lifecycle authority, when there is one.
    pub fn capture(
        registry: &Arc<HarnessRegistry>,
        harness: &Arc<dyn AgentHarness>,
        lifecycle: Option<AssertCurrent>,
    ) -> Result<Self, Error> {
        let authority = Self {
            inner: Arc::new(OwnerInner {
                registry: Arc::clone(registry),
                harness: Arc::clone(harness),
                generation: registry.generation(),
                closed: AtomicBool::new(false),
                lifecycle,
                text: OWNER_CHANGED_TEXT.to_owned(),
            }),
        };
        authority.assert_current()?;
        Ok(authority)
    }

    /// The same authority with another owner-changed text (`{harness_id}` is replaced), for
    /// example "Session mutation harness owner changed: {harness_id}". Call it right after
    /// [`Self::capture`], before sharing: the result is a separate authority with its own
    /// close flag.
    #[must_use]
    pub fn with_owner_changed_text(self, text: impl Into<String>) -> Self {
        let inner = &self.inner;
        Self {
            inner: Arc::new(OwnerInner {
                registry: Arc::clone(&inner.registry),
                harness: Arc::clone(&inner.harness),
                generation: inner.generation,
                closed: AtomicBool::new(inner.closed.load(Ordering::SeqCst)),
                lifecycle: inner.lifecycle.clone(),
                text: text.into(),
            }),
        }
    }

    /// The harness this authority is for.
    pub fn harness(&self) -> &Arc<dyn AgentHarness> {
        &self.inner.harness
    }

    /// Fails once the operation closed, the lifecycle authority was lost, the registry changed,
    /// or the registration was removed or replaced.
    pub fn assert_current(&self) -> Result<(), Error> {
        let inner = &self.inner;
        let current = !inner.closed.load(Ordering::SeqCst)
            && inner
                .lifecycle
                .as_ref()
                .is_none_or(|lifecycle| lifecycle().is_ok())
            && inner.registry.generation() == inner.generation
            && inner.registry.is_registered(&inner.harness);
        if current {
            Ok(())
        } else {
            let id = inner.harness.id();
            Err(Error::OwnerChanged {
                owner: id.as_str().to_owned(),
                message: inner.text.replace("{harness_id}", id.as_str()),
            })
        }
    }

    /// [`Self::assert_current`] as an [`AssertCurrent`] to hand to the harness.
    pub fn assert_current_fn(&self) -> AssertCurrent {
        let this = self.clone();
        Arc::new(move || this.assert_current())
    }

    /// Closes the operation: every later check fails.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::SeqCst);
    }
}

fn object_addr(harness: &Arc<dyn AgentHarness>) -> usize {
    Arc::as_ptr(harness).cast::<()>().addr()
}

/// Harness ids whose reset failure was already logged in this process. Deliberately outside
/// every registry: it survives registry reloads.
static LOGGED_RESET_FAILURES: OnceLock<Mutex<HashSet<HarnessId>>> = OnceLock::new();

fn logged_failures() -> std::sync::MutexGuard<'static, HashSet<HarnessId>> {
    LOGGED_RESET_FAILURES
        .get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Records a reset failure of `id`; returns `true` when this is the first failure of that id in
/// this process (the one that is logged).
pub fn note_reset_failure(id: &HarnessId) -> bool {
    logged_failures().insert(id.clone())
}

/// Whether a reset failure of `id` has already been logged in this process.
pub fn reset_failure_logged(id: &HarnessId) -> bool {
    logged_failures().contains(id)
}

/// What one harness's reset did.
#[derive(Debug, Clone)]
pub struct HarnessResetOutcome {
    /// The harness.
    pub harness_id: HarnessId,
    /// The hook's error, when it failed.
    pub error: Option<Error>,
    /// Whether this failure was logged (the first failure of this id in the process).
    pub logged: bool,
}

/// The outcome of one fan-out: one entry per harness object reset, in registry order.
#[derive(Debug, Clone, Default)]
pub struct ResetReport {
    outcomes: Vec<HarnessResetOutcome>,
}

impl ResetReport {
    /// Every harness reset by the call.
    pub fn outcomes(&self) -> &[HarnessResetOutcome] {
        &self.outcomes
    }

    /// The failed resets.
    pub fn failures(&self) -> impl Iterator<Item = &HarnessResetOutcome> {
        self.outcomes.iter().filter(|o| o.error.is_some())
    }
}

/// Resets every harness of `registries` concurrently with `params`.
///
/// Each harness object is reset at most once per call (a harness registered in several
/// registries, or under several ids, is called once). Failures are isolated: they are
/// collected in the report and logged at `warn` the first time each harness id fails in this
/// process; the call itself never fails.
pub async fn reset_registered_harness_sessions(
    registries: &[&HarnessRegistry],
    params: &ResetParams,
) -> ResetReport {
    let span = tracing::info_span!(
        "harness.reset_fanout",
        session_id = %params.session_id,
        reason = ?params.reason,
    );
    async {
        let mut visited = HashSet::new();
        let mut harnesses = Vec::new();
        for registry in registries {
            for harness in registry.harnesses() {
                if visited.insert(object_addr(&harness)) {
                    harnesses.push(harness);
                }
            }
        }
        let resets = harnesses.iter().map(|harness| {
            let params = params.clone();
            async move {
                let harness_id = harness.id().clone();
                match harness.reset(params).await {
                    Ok(()) => HarnessResetOutcome {
                        harness_id,
                        error: None,
                        logged: false,
                    },
                    Err(error) => {
                        let logged = note_reset_failure(&harness_id);
                        if logged {
                            tracing::warn!(
                                harness_id = %harness_id,
                                %error,
                                "agent harness session reset hook failed"
                            );
                        }
                        HarnessResetOutcome {
                            harness_id,
                            error: Some(error),
                            logged,
                        }
                    }
                }
            }
        });
        ResetReport {
            outcomes: join_all(resets).await,
        }
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_noted_once_per_id() {
        let id = HarnessId::new("unit-note-once").unwrap();
        assert!(!reset_failure_logged(&id));
        assert!(note_reset_failure(&id));
        assert!(!note_reset_failure(&id));
        assert!(reset_failure_logged(&id));
    }

    #[test]
    fn generations_are_unique_across_registries() {
        let a = HarnessRegistry::new();
        let b = HarnessRegistry::default();
        assert_ne!(a.generation(), b.generation());
        assert!(a.is_empty());
        let removed = a.unregister(&HarnessId::new("absent").unwrap());
        assert!(removed.is_none());
    }
}
