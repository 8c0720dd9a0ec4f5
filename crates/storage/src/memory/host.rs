//! Host session entries on the memory store (tri-state reads, generation rotation).

use async_trait::async_trait;
use tether_core::{
    Error, HostSessionEntry, HostSessionRead, HostSessionStore, SessionId, SessionKey,
};

use super::MemoryStore;

impl MemoryStore {
    /// Creates or replaces the host session entry of `entry.session_key`.
    pub fn put_host_session(&self, entry: HostSessionEntry) {
        self.state()
            .host_sessions
            .insert(entry.session_key.clone(), entry);
    }

    /// Removes the entry of `key`, returning it.
    pub fn remove_host_session(&self, key: &SessionKey) -> Option<HostSessionEntry> {
        self.state().host_sessions.remove(key)
    }

    /// Moves the entry of `key` to a new generation: `previous_session_id` becomes the current
    /// id, `session_id` becomes `next`, the lifecycle revision is bumped and `updated_at` set.
    /// Returns the new entry, or `None` when there is no entry.
    pub fn rotate_host_session(
        &self,
        key: &SessionKey,
        next: SessionId,
    ) -> Option<HostSessionEntry> {
        let now = self.now();
        let mut state = self.state();
        let entry = state.host_sessions.get_mut(key)?;
        entry.previous_session_id = Some(std::mem::replace(&mut entry.session_id, next));
        entry.lifecycle_revision = entry.lifecycle_revision.next();
        entry.updated_at = now;
        Some(entry.clone())
    }

    /// Makes every host session read fail with `error` (`None` restores normal reads), to test
    /// the "failed read" authority state.
    pub fn fail_host_session_reads(&self, error: Option<Error>) {
        self.state().host_read_failure = error;
    }
}

#[async_trait]
impl HostSessionStore for MemoryStore {
    async fn read_session(&self, key: &SessionKey) -> HostSessionRead {
        let state = self.state();
        if let Some(error) = &state.host_read_failure {
            return HostSessionRead::Failed(error.clone());
        }
        match state.host_sessions.get(key) {
            Some(entry) => HostSessionRead::Current(entry.clone()),
            None => HostSessionRead::Missing,
        }
    }
}
