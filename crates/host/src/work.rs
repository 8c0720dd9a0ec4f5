//! Competing admitted work: the idle check of deletions and context resets.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tether_core::{SessionId, SessionKey};

/// Tells whether admitted work (a run) is in flight for a session.
pub trait WorkTracker: Send + Sync + fmt::Debug {
    /// Whether work is in flight for the key or the physical session.
    fn has_competing_work(&self, key: &SessionKey, session_id: &SessionId) -> bool;
}

/// A simple in-process [`WorkTracker`]: runs are admitted and finished by the host.
#[derive(Debug, Default)]
pub struct ActiveRuns {
    runs: Mutex<HashMap<SessionKey, usize>>,
}

impl ActiveRuns {
    /// No runs in flight.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionKey, usize>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a run admitted for `key`; [`ActiveRuns::finish`] must follow on every path.
    /// Prefer [`ActiveRuns::start`], whose guard finishes the run however it ends.
    pub fn admit(&self, key: &SessionKey) {
        *self.lock().entry(key.clone()).or_default() += 1;
    }

    /// Admits a run for `key` and returns its guard: the run is finished when the guard is
    /// dropped, so an early return, a panic or a cancelled task never leaves the session
    /// looking busy (which would refuse every later deletion and reset of it).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tether_core::{SessionId, SessionKey};
    /// use tether_host::{ActiveRuns, WorkTracker as _};
    ///
    /// let runs = Arc::new(ActiveRuns::new());
    /// let key = SessionKey::new("agent:main:alice").unwrap();
    /// let id = SessionId::new("s-1").unwrap();
    /// {
    ///     let _run = runs.start(&key);
    ///     assert!(runs.has_competing_work(&key, &id));
    /// }
    /// assert!(!runs.has_competing_work(&key, &id));
    /// ```
    pub fn start(self: &Arc<Self>, key: &SessionKey) -> AdmittedRun {
        self.admit(key);
        AdmittedRun {
            runs: Arc::clone(self),
            key: key.clone(),
        }
    }

    /// Records the end of one run for `key`.
    pub fn finish(&self, key: &SessionKey) {
        let mut runs = self.lock();
        if let Some(n) = runs.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                runs.remove(key);
            }
        }
    }
}

impl WorkTracker for ActiveRuns {
    fn has_competing_work(&self, key: &SessionKey, _session_id: &SessionId) -> bool {
        self.lock().contains_key(key)
    }
}

/// A run admitted by [`ActiveRuns::start`]; dropping it finishes the run.
#[derive(Debug)]
#[must_use = "the run is finished as soon as the guard is dropped"]
pub struct AdmittedRun {
    runs: Arc<ActiveRuns>,
    key: SessionKey,
}

impl Drop for AdmittedRun {
    fn drop(&mut self) {
        self.runs.finish(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guarded_run_finishes_on_every_path() {
        let runs = Arc::new(ActiveRuns::new());
        let key = SessionKey::new("agent:main:alice").unwrap();
        let id = SessionId::new("s-1").unwrap();
        let first = runs.start(&key);
        let second = runs.start(&key);
        drop(first);
        assert!(
            runs.has_competing_work(&key, &id),
            "one run is still in flight"
        );
        // A run that panics is finished by the unwinding.
        let shared = Arc::clone(&runs);
        let moved = key.clone();
        let panicked = std::thread::spawn(move || {
            let _run = shared.start(&moved);
            panic!("the run failed");
        })
        .join();
        assert!(panicked.is_err());
        drop(second);
        assert!(!runs.has_competing_work(&key, &id));
    }
}
