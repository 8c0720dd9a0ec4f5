//! The harness registry the host captures deletion and context-reset owners from.

use std::fmt;
use std::sync::{Arc, Mutex};

use tether_core::{AgentHarness, HarnessId};

/// Registered harnesses with a generation that moves on every change, so an operation can tell
/// that the registry it captured its owners from was replaced.
#[derive(Default)]
pub struct HarnessRegistry {
    state: Mutex<(u64, Vec<Arc<dyn AgentHarness>>)>,
}

impl fmt::Debug for HarnessRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (generation, harnesses) = self.snapshot();
        f.debug_struct("HarnessRegistry")
            .field("generation", &generation)
            .field(
                "harnesses",
                &harnesses.iter().map(|h| h.id().clone()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl HarnessRegistry {
    /// An empty registry.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Vec<Arc<dyn AgentHarness>>)> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers `harness`, replacing any harness with the same id.
    pub fn register(&self, harness: Arc<dyn AgentHarness>) {
        let mut state = self.lock();
        state.1.retain(|h| h.id() != harness.id());
        state.1.push(harness);
        state.0 += 1;
    }

    /// Removes the harness `id`. Returns whether it was registered.
    pub fn unregister(&self, id: &HarnessId) -> bool {
        let mut state = self.lock();
        let before = state.1.len();
        state.1.retain(|h| h.id() != id);
        let removed = state.1.len() != before;
        if removed {
            state.0 += 1;
        }
        removed
    }

    /// The current generation and harnesses, in registration order.
    pub fn snapshot(&self) -> (u64, Vec<Arc<dyn AgentHarness>>) {
        let state = self.lock();
        (state.0, state.1.clone())
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.lock().0
    }
}
