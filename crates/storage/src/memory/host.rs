//! Host sessions on the memory store: entries (tri-state reads, generation rotation),
//! transcripts, upstream links, and the host port ([`MemoryHostTransaction`]).

use std::sync::Mutex;

use async_trait::async_trait;
use tether_core::{
    AppendOutcome, Error, GenerationChange, HostErrorKind, HostSessionEntry, HostSessionRead,
    HostSessionStore, RowTransaction, SessionId, SessionKey, TranscriptAnchor,
};

use super::state::{State, Transcript};
use super::{MemoryStore, MemoryTransaction};
use crate::port::{HostBackend, HostTransaction};
use crate::transcript::{
    Cut, CutStatus, NewHostSession, NewTranscriptEntry, TranscriptEntry, TranscriptRole, path_to,
    plan_cut,
};

impl MemoryStore {
    /// Creates or replaces the host session entry of `entry.session_key`.
    pub fn put_host_session(&self, entry: HostSessionEntry) {
        self.state()
            .host_sessions
            .insert(entry.session_key.clone(), entry);
    }

    /// The entry of `key`, if any.
    pub fn session(&self, key: &SessionKey) -> Option<HostSessionEntry> {
        self.state().host_sessions.get(key).cloned()
    }

    /// Removes the entry of `key` (and its transcript and upstream link), returning it.
    pub fn remove_host_session(&self, key: &SessionKey) -> Option<HostSessionEntry> {
        let mut state = self.state();
        state.transcripts.remove(key);
        state.upstream_links.remove(key);
        state.host_sessions.remove(key)
    }

    /// Creates a host session at lifecycle revision 1, like
    /// [`Store::create_session`](crate::Store::create_session). Returns `false` when the key
    /// exists.
    pub fn create_session(&self, new: NewHostSession) -> bool {
        let now = self.now();
        let mut state = self.state();
        if state.host_sessions.contains_key(&new.session_key) {
            return false;
        }
        state.host_sessions.insert(
            new.session_key.clone(),
            HostSessionEntry::new(new.session_key, new.agent_id, new.session_id, now)
                .with_harness(new.agent_harness_id),
        );
        true
    }

    /// Appends to the session's transcript as a child of the active leaf, like
    /// [`Store::append_transcript`](crate::Store::append_transcript): an idempotency-key hit
    /// appends nothing and returns the existing entry.
    pub fn append_transcript(
        &self,
        key: &SessionKey,
        entry: NewTranscriptEntry,
    ) -> Result<AppendOutcome, Error> {
        entry.check()?;
        let now = self.now();
        let mut state = self.state();
        if !state.host_sessions.contains_key(key) {
            return Err(Error::session_not_found(key));
        }
        let id = state.last_entry + 1;
        let transcript = state.transcripts.entry(key.clone()).or_default();
        if let Some(idem) = &entry.idempotency_key
            && let Some(found) = transcript
                .entries
                .values()
                .find(|e| e.idempotency_key.as_ref() == Some(idem))
        {
            return Ok(AppendOutcome {
                appended: false,
                anchor: found.anchor,
            });
        }
        transcript.entries.insert(
            id,
            TranscriptEntry {
                anchor: TranscriptAnchor(id),
                session_key: key.clone(),
                parent: transcript.active_leaf.map(TranscriptAnchor),
                role: entry.role,
                content: entry.content,
                idempotency_key: entry.idempotency_key,
                metadata: entry.metadata,
                created_at: now,
            },
        );
        transcript.active_leaf = Some(id);
        state.last_entry = id;
        Ok(AppendOutcome {
            appended: true,
            anchor: TranscriptAnchor(id),
        })
    }

    /// The active path of the session's transcript, root first.
    pub fn active_path(&self, key: &SessionKey) -> Vec<TranscriptEntry> {
        let state = self.state();
        state
            .transcripts
            .get(key)
            .map(|t| path_to(&t.entries, t.active_leaf))
            .unwrap_or_default()
    }

    /// The active leaf of the session's transcript.
    pub fn active_leaf(&self, key: &SessionKey) -> Option<TranscriptAnchor> {
        self.state()
            .transcripts
            .get(key)
            .and_then(|t| t.active_leaf.map(TranscriptAnchor))
    }

    /// Links `key` to an upstream (external harness) session. Returns `false` when a link
    /// already exists or the session does not.
    pub fn link_upstream(&self, key: &SessionKey, upstream: &str) -> bool {
        let mut state = self.state();
        if !state.host_sessions.contains_key(key) || state.upstream_links.contains_key(key) {
            return false;
        }
        state
            .upstream_links
            .insert(key.clone(), upstream.to_owned());
        true
    }

    /// Removes the upstream link of `key` if it is still `expected`.
    pub fn unlink_upstream(&self, key: &SessionKey, expected: &str) -> bool {
        let mut state = self.state();
        if state.upstream_links.get(key).map(String::as_str) != Some(expected) {
            return false;
        }
        state.upstream_links.remove(key);
        true
    }

    /// The upstream link of `key`, if any.
    pub fn upstream_link(&self, key: &SessionKey) -> Option<String> {
        self.state().upstream_links.get(key).cloned()
    }

    /// Applies a transcript cut without any harness taking part, like
    /// [`Store::cut_transcript`](crate::Store::cut_transcript): moves the active leaf and
    /// rotates the session to `next`.
    pub fn cut_transcript(&self, key: &SessionKey, cut: &Cut, next: SessionId) -> CutStatus {
        let now = self.now();
        let mut state = self.state();
        let leaf = match check_cut_in(&state, key, cut) {
            Ok(leaf) => leaf,
            Err(status) => return status,
        };
        let Some(entry) = state.host_sessions.get(key).cloned() else {
            return CutStatus::MissingEntry;
        };
        state.host_sessions.insert(
            key.clone(),
            entry.rotated(next.clone(), GenerationChange::Cut, now),
        );
        state
            .transcripts
            .entry(key.clone())
            .or_default()
            .active_leaf = leaf;
        CutStatus::Created
    }

    fn read_entry(&self, key: &SessionKey) -> Result<Option<HostSessionEntry>, Error> {
        let state = self.state();
        if let Some(error) = &state.host_read_failure {
            return Err(error.clone());
        }
        Ok(state.host_sessions.get(key).cloned())
    }

    /// Moves the entry of `key` to a new generation by a transfer (a compaction), like
    /// [`Store::rotate_generation`](crate::Store::rotate_generation): `previous_session_id`
    /// becomes the current id ([`GenerationChange::Transfer`]), `session_id` becomes `next`,
    /// the lifecycle revision is bumped and `updated_at` set. Returns the new entry, or `None`
    /// when there is no entry.
    pub fn rotate_host_session(
        &self,
        key: &SessionKey,
        next: SessionId,
    ) -> Option<HostSessionEntry> {
        let now = self.now();
        let mut state = self.state();
        let entry = state.host_sessions.get_mut(key)?;
        entry.previous_session_id = Some(std::mem::replace(&mut entry.session_id, next));
        entry.previous_change = Some(GenerationChange::Transfer);
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

fn check_cut_in(state: &State, key: &SessionKey, cut: &Cut) -> Result<Option<i64>, CutStatus> {
    if !state.host_sessions.contains_key(key) {
        return Err(CutStatus::MissingEntry);
    }
    let empty = Transcript::default();
    let transcript = state.transcripts.get(key).unwrap_or(&empty);
    plan_cut(&transcript.entries, transcript.active_leaf, cut)
}

/// A staged change of a host session, applied at commit.
#[derive(Debug)]
enum HostOp {
    Delete(HostSessionEntry),
    Cut {
        entry: HostSessionEntry,
        leaf: Option<i64>,
        next: SessionId,
    },
    /// A new generation, the transcript and its active leaf kept.
    Rotate {
        entry: HostSessionEntry,
        next: SessionId,
        change: GenerationChange,
    },
}

impl HostOp {
    fn entry(&self) -> &HostSessionEntry {
        match self {
            Self::Delete(entry) | Self::Cut { entry, .. } | Self::Rotate { entry, .. } => entry,
        }
    }
}

/// The memory store's host transaction: binding rows staged in a [`MemoryTransaction`] and
/// session changes staged beside them, applied together at [`commit`](HostTransaction::commit)
/// — or not at all when a row or a session changed since the transaction read it.
#[derive(Debug)]
pub struct MemoryHostTransaction {
    store: MemoryStore,
    rows: MemoryTransaction,
    staged: Mutex<Vec<HostOp>>,
}

impl MemoryHostTransaction {
    fn staged(&self) -> std::sync::MutexGuard<'_, Vec<HostOp>> {
        self.staged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The entry of `key` as this transaction sees it (its staged changes applied).
    fn view(&self, key: &SessionKey) -> Result<Option<HostSessionEntry>, Error> {
        let mut entry = self.store.read_entry(key)?;
        for op in self
            .staged()
            .iter()
            .filter(|op| op.entry().session_key == *key)
        {
            entry = match op {
                HostOp::Delete(_) => None,
                HostOp::Cut { entry, next, .. } => {
                    Some(entry.rotated(next.clone(), GenerationChange::Cut, entry.updated_at))
                }
                HostOp::Rotate {
                    entry,
                    next,
                    change,
                } => Some(entry.rotated(next.clone(), *change, entry.updated_at)),
            };
        }
        Ok(entry)
    }

    fn is_current(&self, entry: &HostSessionEntry) -> Result<bool, Error> {
        Ok(self.view(&entry.session_key)?.is_some_and(|current| {
            current.session_id == entry.session_id
                && current.lifecycle_revision == entry.lifecycle_revision
        }))
    }
}

#[async_trait]
impl HostTransaction for MemoryHostTransaction {
    async fn session(&self, key: &SessionKey) -> Result<Option<HostSessionEntry>, Error> {
        self.view(key)
    }

    async fn check_cut(&self, key: &SessionKey, cut: &Cut) -> Result<Result<(), CutStatus>, Error> {
        if self.view(key)?.is_none() {
            return Ok(Err(CutStatus::MissingEntry));
        }
        Ok(check_cut_in(&self.store.state(), key, cut).map(|_| ()))
    }

    async fn upstream_link(&self, key: &SessionKey) -> Result<Option<String>, Error> {
        Ok(self.store.upstream_link(key))
    }

    async fn delete_session(&self, entry: &HostSessionEntry) -> Result<bool, Error> {
        if !self.is_current(entry)? {
            return Ok(false);
        }
        self.staged().push(HostOp::Delete(entry.clone()));
        Ok(true)
    }

    async fn apply_cut(
        &self,
        entry: &HostSessionEntry,
        cut: &Cut,
        next: &SessionId,
    ) -> Result<bool, Error> {
        if !self.is_current(entry)? {
            return Ok(false);
        }
        let Ok(leaf) = check_cut_in(&self.store.state(), &entry.session_key, cut) else {
            return Ok(false);
        };
        self.staged().push(HostOp::Cut {
            entry: entry.clone(),
            leaf,
            next: next.clone(),
        });
        Ok(true)
    }

    async fn rotate_session(
        &self,
        entry: &HostSessionEntry,
        next: &SessionId,
        change: GenerationChange,
    ) -> Result<Option<HostSessionEntry>, Error> {
        if !self.is_current(entry)? {
            return Ok(None);
        }
        self.staged().push(HostOp::Rotate {
            entry: entry.clone(),
            next: next.clone(),
            change,
        });
        Ok(Some(entry.rotated(next.clone(), change, self.store.now())))
    }

    async fn delete_unowned_bindings(&self, entry: &HostSessionEntry) -> Result<usize, Error> {
        let now = self.store.now();
        let keys = crate::sql::session_binding_keys(entry);
        let namespaces: Vec<_> = self.store.state().rows.keys().cloned().collect();
        let quarantined = self
            .store
            .state()
            .quarantine
            .values()
            .filter(|q| keys.contains(&q.key))
            .min_by(|a, b| (&a.namespace, &a.key).cmp(&(&b.namespace, &b.key)))
            .cloned();
        if let Some(q) = quarantined {
            return Err(crate::plan::quarantine_refusal(
                &q.namespace,
                &q.key,
                &entry.session_key,
                &q.reason,
            ));
        }
        let mut found = Vec::new();
        for ns in &namespaces {
            for key in &keys {
                if let Some(row) = self.rows.lookup(ns, key).await? {
                    if let Some(lease) = row.lease.as_ref().filter(|l| l.is_live(now)) {
                        return Err(crate::plan::live_lease_refusal(
                            ns,
                            key,
                            &entry.session_key,
                            lease,
                        ));
                    }
                    found.push((ns.clone(), key.clone()));
                }
            }
        }
        let mut removed = 0;
        for (ns, key) in found {
            if self.rows.delete_if(&ns, &key, &|_| true).await?.is_some() {
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn row_tx(&self) -> &dyn RowTransaction {
        &self.rows
    }

    async fn commit(self) -> Result<(), Error> {
        let staged = self
            .staged
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.rows.commit_with(move |state, now| {
            for op in staged {
                let expected = op.entry();
                let key = &expected.session_key;
                let current = state.host_sessions.get(key).is_some_and(|e| {
                    e.session_id == expected.session_id
                        && e.lifecycle_revision == expected.lifecycle_revision
                });
                if !current {
                    return Err(HostErrorKind::SessionChanged {
                        key: key.to_string(),
                    }
                    .into());
                }
                match op {
                    HostOp::Delete(entry) => {
                        state.host_sessions.remove(&entry.session_key);
                        state.transcripts.remove(&entry.session_key);
                        state.upstream_links.remove(&entry.session_key);
                    }
                    HostOp::Cut { entry, leaf, next } => {
                        state.host_sessions.insert(
                            entry.session_key.clone(),
                            entry.rotated(next.clone(), GenerationChange::Cut, now),
                        );
                        state
                            .transcripts
                            .entry(entry.session_key.clone())
                            .or_default()
                            .active_leaf = leaf;
                    }
                    HostOp::Rotate {
                        entry,
                        next,
                        change,
                    } => {
                        state.host_sessions.insert(
                            entry.session_key.clone(),
                            entry.rotated(next.clone(), change, now),
                        );
                    }
                }
            }
            Ok(())
        })
    }

    async fn rollback(self) -> Result<(), Error> {
        self.rows.rollback();
        Ok(())
    }
}

#[async_trait]
impl HostBackend for MemoryStore {
    type Transaction = MemoryHostTransaction;

    async fn begin_host(&self) -> Result<MemoryHostTransaction, Error> {
        Ok(MemoryHostTransaction {
            store: self.clone(),
            rows: MemoryTransaction::new(self.clone()),
            staged: Mutex::new(Vec::new()),
        })
    }

    async fn host_session(&self, key: &SessionKey) -> Result<Option<HostSessionEntry>, Error> {
        self.read_entry(key)
    }

    async fn check_host_cut(
        &self,
        key: &SessionKey,
        cut: &Cut,
    ) -> Result<Result<HostSessionEntry, CutStatus>, Error> {
        let Some(entry) = self.read_entry(key)? else {
            return Err(Error::session_not_found(key));
        };
        Ok(check_cut_in(&self.state(), key, cut).map(|_| entry))
    }

    async fn host_upstream_link(&self, key: &SessionKey) -> Result<Option<String>, Error> {
        Ok(self.upstream_link(key))
    }

    async fn fork_host_session(
        &self,
        source: &SessionKey,
        at: &TranscriptAnchor,
        new: NewHostSession,
    ) -> Result<CutStatus, Error> {
        let path = {
            let state = self.state();
            if !state.host_sessions.contains_key(source) {
                return Err(Error::session_not_found(source));
            }
            let empty = Transcript::default();
            let transcript = state.transcripts.get(source).unwrap_or(&empty);
            let Some(target) = transcript.entries.get(&at.0) else {
                return Ok(CutStatus::MissingEntry);
            };
            if target.role != TranscriptRole::User {
                return Ok(CutStatus::NotUserMessage);
            }
            path_to(&transcript.entries, target.parent.as_ref().map(|p| p.0))
        };
        let key = new.session_key.clone();
        if !self.create_session(new) {
            return Err(HostErrorKind::SessionExists {
                key: key.to_string(),
            }
            .into());
        }
        for entry in path {
            self.append_transcript(
                &key,
                NewTranscriptEntry {
                    role: entry.role,
                    content: entry.content,
                    idempotency_key: entry.idempotency_key,
                    metadata: entry.metadata,
                },
            )?;
        }
        Ok(CutStatus::Created)
    }
}
