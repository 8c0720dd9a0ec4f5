//! The harness registry: the registered [`AgentHarness`]es of one host registry, by id, with a
//! generation that changes on every change.
//!
//! The host captures deletion and context-reset owners from it, and the reset fan-out iterates
//! it. Generations are drawn from one process-wide counter, so two registries (for example
//! before and after a plugin reload) never share a generation number and an operation that
//! captured one can always tell that "the registry changed".
//!
//! ```
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use tether_core::{AgentHarness, Error, HarnessId, HarnessRegistry, ResetParams};
//!
//! #[derive(Debug)]
//! struct Quiet(HarnessId);
//! #[async_trait]
//! impl AgentHarness for Quiet {
//!     fn id(&self) -> &HarnessId { &self.0 }
//!     async fn reset(&self, _params: ResetParams) -> Result<(), Error> { Ok(()) }
//! }
//!
//! let registry = HarnessRegistry::shared();
//! let before = registry.generation();
//! registry.register(Arc::new(Quiet(HarnessId::new("quiet")?)));
//! assert_ne!(registry.generation(), before);
//! let (generation, harnesses) = registry.snapshot();
//! assert_eq!((generation, harnesses.len()), (registry.generation(), 1));
//! # Ok::<(), tether_core::IdError>(())
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use crate::harness::AgentHarness;
use crate::ids::HarnessId;

/// Registry generations are drawn from one process-wide counter, so two registries (for
/// example before and after a reload) never share a generation number.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

fn next_generation() -> u64 {
    NEXT_GENERATION.fetch_add(1, Ordering::Relaxed)
}

#[derive(Debug)]
struct RegistryState {
    generation: u64,
    harnesses: BTreeMap<HarnessId, Arc<dyn AgentHarness>>,
}

/// The registered harnesses of one plugin registry, by id.
///
/// Every change (register, replace, unregister) moves [`Self::generation`] to a value never
/// used before in this process, so an operation that captured the generation can detect that
/// "the registry changed".
#[derive(Debug)]
pub struct HarnessRegistry {
    state: RwLock<RegistryState>,
}

impl Default for HarnessRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl HarnessRegistry {
    /// An empty registry shared behind an `Arc` (what hosts hand to their operations).
    pub fn shared() -> Arc<Self> {
        Arc::new(Self::new())
    }

    /// An empty registry with a fresh generation.
    pub fn new() -> Self {
        Self {
            state: RwLock::new(RegistryState {
                generation: next_generation(),
                harnesses: BTreeMap::new(),
            }),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, RegistryState> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, RegistryState> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `harness` under its id, returning the registration it replaced.
    pub fn register(&self, harness: Arc<dyn AgentHarness>) -> Option<Arc<dyn AgentHarness>> {
        let mut state = self.write();
        state.generation = next_generation();
        state.harnesses.insert(harness.id().clone(), harness)
    }

    /// Removes the harness registered under `id`, returning it.
    pub fn unregister(&self, id: &HarnessId) -> Option<Arc<dyn AgentHarness>> {
        let mut state = self.write();
        let removed = state.harnesses.remove(id);
        if removed.is_some() {
            state.generation = next_generation();
        }
        removed
    }

    /// The harness registered under `id`.
    pub fn get(&self, id: &HarnessId) -> Option<Arc<dyn AgentHarness>> {
        self.read().harnesses.get(id).cloned()
    }

    /// Whether `harness` (this exact object) is still the registration under its id.
    pub fn is_registered(&self, harness: &Arc<dyn AgentHarness>) -> bool {
        self.read()
            .harnesses
            .get(harness.id())
            .is_some_and(|current| same_harness(current, harness))
    }

    /// A snapshot of the registered harnesses, in id order.
    pub fn harnesses(&self) -> Vec<Arc<dyn AgentHarness>> {
        self.read().harnesses.values().cloned().collect()
    }

    /// The registered ids, in order.
    pub fn ids(&self) -> Vec<HarnessId> {
        self.read().harnesses.keys().cloned().collect()
    }

    /// How many harnesses are registered.
    pub fn len(&self) -> usize {
        self.read().harnesses.len()
    }

    /// Whether no harness is registered.
    pub fn is_empty(&self) -> bool {
        self.read().harnesses.is_empty()
    }

    /// The current generation; it changes on every change to the registry.
    pub fn generation(&self) -> u64 {
        self.read().generation
    }

    /// The generation and the registered harnesses (in id order), read together.
    pub fn snapshot(&self) -> (u64, Vec<Arc<dyn AgentHarness>>) {
        let state = self.read();
        (
            state.generation,
            state.harnesses.values().cloned().collect(),
        )
    }
}

/// Whether two handles point at the same harness object (data pointer identity).
pub fn same_harness(a: &Arc<dyn AgentHarness>, b: &Arc<dyn AgentHarness>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}
