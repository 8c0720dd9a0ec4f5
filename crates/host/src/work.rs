//! Competing admitted work: the idle check of deletions and context resets.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

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

    /// Records a run admitted for `key`.
    pub fn admit(&self, key: &SessionKey) {
        *self.lock().entry(key.clone()).or_default() += 1;
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
