//! The Codex side of deletion, context reset and reset: which threads active turns claim, and
//! the native cleanup (`thread/delete`, `thread/archive`) that runs only after the host's
//! transaction committed, outside it.
//!
//! Codex lets one live process write a thread. The cleanup therefore runs on the process that
//! can write it: this host's shared app-server (which still holds the threads its turns ran),
//! or, with `process_per_turn`, a process started for the cleanup and stopped after it (the
//! turn's writer ended with its own process). A thread another live process still holds is
//! refused by Codex; the cleanup is then logged and kept for [`CodexThreads::retry_pending`],
//! and nothing is ever restored.
//!
//! Durable records. What waits for later lives in the host's [`BindingStore`], so a host
//! process that restarts (or another host process over the same database) finds it:
//!
//! - [`CLEANUP_NAMESPACE`]: one row per Codex thread whose cleanup is due (key
//!   `conversation:<thread id>`). It is written before the native call and removed once the
//!   call succeeded; a failure leaves it with the error, for [`CodexThreads::retry_pending`]
//!   (and the next reset) to run again.
//! - [`CONTINUATION_NAMESPACE`]: one row per session (under the session's binding key) whose
//!   native context was reset by a committed rewind or branch switch: the next turn continues
//!   on a fork of the kept turns instead of a fresh thread (see `crate::context`). A reset or
//!   a deletion of the session removes it.
//! - [`ARCHIVE_NAMESPACE`]: one row per session (under the session's binding key) listing the
//!   Codex threads a reset or a context reset of the session archived. They keep the
//!   session's earlier conversation; a deletion of the session deletes them
//!   ([`NativeCleanup::Delete`], each through its cleanup record) and removes the row. A thread
//!   is listed before it is archived, so a process that stops in between leaves it listed.
//! - [`INJECTION_NAMESPACE`]: one row per session (under the session's binding key) with the
//!   items due into its bound thread (the settled-turn finalizer's answers): the next turn that
//!   resumes the thread injects them; a new thread, a fork, a reset or a deletion drops them.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether_core::{
    ApplyOutcome, AssertCurrent, BindingId, BindingKey, BindingStore, Error, Intent, Namespace,
    NamespaceConfig, RowWrite, StoreErrorKind,
};
use tether_core::{RecordCodec as _, RowTransaction};
use tether_harness_sdk::backend::{ThreadBinding, ThreadBindingCodec};
use tether_harness_sdk::hooks::NativeThreads;
use tracing::Instrument as _;

use crate::client::{CodexAppServer, CodexClient};
use crate::error::CodexError;
use crate::protocol::{ThreadRefParams, ThreadUnsubscribeParams, method};

/// The namespace of the Codex cleanups that are due (see the module documentation).
pub const CLEANUP_NAMESPACE: &str = "codex-cleanups";

/// The namespace of the context-reset continuations (see the module documentation).
pub const CONTINUATION_NAMESPACE: &str = "codex-continuations";

/// The namespace of the threads archived for each session (see the module documentation).
pub const ARCHIVE_NAMESPACE: &str = "codex-archives";

/// The namespace of the items due into each session's bound thread before its next turn: the
/// answers the settled-turn finalizer gave on its own (capability-free) thread, which the
/// session's thread would otherwise never see.
pub const INJECTION_NAMESPACE: &str = "codex-injections";

/// How many live rows one scan of the cleanup namespace reads.
const SCAN_PAGE: usize = 100;

/// How often a record write re-reads a row that moved under it before giving up.
const WRITE_ATTEMPTS: usize = 8;

/// What happens to a Codex thread no binding owns any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NativeCleanup {
    /// `thread/delete`: the session was deleted; the thread's history goes with it.
    Delete,
    /// `thread/archive`: the session continues on a new thread (reset, context reset); the old
    /// history is kept out of the way, not destroyed.
    Archive,
}

impl NativeCleanup {
    fn method(self) -> &'static str {
        match self {
            Self::Delete => method::THREAD_DELETE,
            Self::Archive => method::THREAD_ARCHIVE,
        }
    }
}

/// The operation a post-commit release belongs to, set around the SDK's hook.
#[derive(Clone)]
pub(crate) struct CleanupScope {
    pub(crate) action: NativeCleanup,
    pub(crate) assert_current: AssertCurrent,
    /// The session's binding key, whose continuation record a context reset's release sets.
    pub(crate) session: BindingKey,
    /// Whether a context reset's release records a continuation (the next turn forks the kept
    /// turns): not when the released binding is one whose context already ended (the recorded
    /// predecessor's, after a reset or a cut no harness was told of).
    pub(crate) continue_kept_turns: bool,
}

tokio::task_local! {
    /// The operation whose post-commit cleanup is running on this task.
    pub(crate) static CLEANUP: CleanupScope;
}

/// One cleanup that is due: not yet run, or failed and waiting for a retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingCleanup {
    /// The Codex thread.
    pub thread_id: String,
    /// What is to be done with it.
    pub action: NativeCleanup,
    /// The last error; `None` while the first try has not reported.
    pub error: Option<String>,
}

/// The continuation record of a session whose context was reset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Continuation {
    /// The thread the session was bound to when its context was reset.
    thread_id: String,
}

/// The items due into one session's bound thread.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct PendingInjections {
    items: Vec<Value>,
}

/// The threads archived for one session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArchivedThreads {
    thread_ids: Vec<String>,
}

/// Active-work claims, native cleanup and the durable records of both for the SDK's
/// thread-binding hooks.
pub struct CodexThreads {
    server: Arc<CodexAppServer>,
    process_per_turn: bool,
    claims: Mutex<HashMap<String, usize>>,
    store: Arc<dyn BindingStore>,
    cleanups: Namespace,
    continuations: Namespace,
    archives: Namespace,
    injections: Namespace,
}

impl fmt::Debug for CodexThreads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodexThreads")
            .field("process_per_turn", &self.process_per_turn)
            .field("cleanups", &self.cleanups)
            .finish_non_exhaustive()
    }
}

/// A running turn's claim on its thread; released when dropped.
pub(crate) struct Claim {
    threads: Arc<CodexThreads>,
    thread_id: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut claims = self
            .threads
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = claims.get_mut(&self.thread_id) {
            *count -= 1;
            if *count == 0 {
                claims.remove(&self.thread_id);
            }
        }
    }
}

impl CodexThreads {
    /// Registers the record namespaces on `store`.
    pub(crate) async fn new(
        server: Arc<CodexAppServer>,
        process_per_turn: bool,
        store: Arc<dyn BindingStore>,
    ) -> Result<Self, Error> {
        let cleanups = Namespace::new(CLEANUP_NAMESPACE)?;
        let continuations = Namespace::new(CONTINUATION_NAMESPACE)?;
        let archives = Namespace::new(ARCHIVE_NAMESPACE)?;
        let injections = Namespace::new(INJECTION_NAMESPACE)?;
        for ns in [&cleanups, &continuations, &archives, &injections] {
            store
                .register_namespace(NamespaceConfig::new(ns.clone()))
                .await?;
        }
        Ok(Self {
            server,
            process_per_turn,
            claims: Mutex::new(HashMap::new()),
            store,
            cleanups,
            continuations,
            archives,
            injections,
        })
    }

    /// Records `item` (a Responses API item) as due into `session`'s bound thread before its
    /// next turn, after the ones already due.
    pub(crate) async fn record_injection(
        &self,
        session: &BindingKey,
        item: Value,
    ) -> Result<(), Error> {
        self.update(&self.injections, session, |current| {
            let mut due = current
                .and_then(|value| serde_json::from_slice::<PendingInjections>(value).ok())
                .unwrap_or_default();
            due.items.push(item.clone());
            encode(&due).map(Some)
        })
        .await
    }

    /// The items due into `session`'s bound thread (an unreadable record has none, logged).
    pub(crate) async fn injections(&self, session: &BindingKey) -> Result<Vec<Value>, Error> {
        Ok(self
            .read::<PendingInjections>(&self.injections, session, "codex injection record")
            .await?
            .map(|due| due.items)
            .unwrap_or_default())
    }

    /// Removes `session`'s due items (injected, or the thread they were for is gone).
    pub(crate) async fn clear_injections(&self, session: &BindingKey) -> Result<(), Error> {
        self.store
            .delete_if(&self.injections, session, &|_| true)
            .await?;
        Ok(())
    }

    /// Claims `thread_id` for a running turn (a deletion is refused while it is claimed).
    pub(crate) fn claim(self: &Arc<Self>, thread_id: &str) -> Claim {
        *self
            .claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(thread_id.to_owned())
            .or_default() += 1;
        Claim {
            threads: Arc::clone(self),
            thread_id: thread_id.to_owned(),
        }
    }

    /// The cleanups that are due, read from the store (those of every host process sharing
    /// it), in thread-id order.
    pub async fn pending(&self) -> Result<Vec<PendingCleanup>, Error> {
        let mut out = Vec::new();
        let mut after: Option<BindingKey> = None;
        loop {
            let page = self
                .store
                .scan(&self.cleanups, after.as_ref(), SCAN_PAGE)
                .await?;
            let full = page.len() == SCAN_PAGE;
            for (key, row) in page {
                match serde_json::from_slice::<PendingCleanup>(&row.value) {
                    Ok(entry) => out.push(entry),
                    Err(error) => {
                        tracing::warn!(key = %key, %error, "unreadable codex cleanup record; skipped");
                    }
                }
                after = Some(key);
            }
            if !full {
                return Ok(out);
            }
        }
    }

    /// Runs every due cleanup again, in thread-id order; those that fail stay due. A deletion
    /// Codex refused because a fork's history still references the thread runs again once
    /// the others ran (in rounds, while a round deletes something). Returns how many are
    /// left.
    pub async fn retry_pending(&self) -> Result<usize, Error> {
        let mut referenced = Vec::new();
        for entry in self.pending().await? {
            // The failure is recorded (and logged) by `attempt`.
            if let Err(error) = self.attempt(&entry.thread_id, entry.action).await
                && entry.action == NativeCleanup::Delete
                && error.is_referenced_by_fork()
            {
                referenced.push(entry.thread_id);
            }
        }
        self.delete_referenced(referenced).await;
        Ok(usize::try_from(self.store.count(&self.cleanups).await?).unwrap_or(usize::MAX))
    }

    /// Deletes again the threads whose `thread/delete` Codex refused because a fork's history
    /// still referenced them (a fork is deleted after its source when the source came first),
    /// round after round while a round deletes at least one: a fork deleted meanwhile frees
    /// its source. What is still refused when a round deletes nothing stays due, with its
    /// error (a fork this deletion does not own, or one that could not be deleted).
    async fn delete_referenced(&self, mut referenced: Vec<String>) {
        while !referenced.is_empty() {
            let before = referenced.len();
            let mut still = Vec::new();
            for thread_id in referenced {
                // The failure is recorded (and logged) by `attempt`.
                if let Err(error) = self.attempt(&thread_id, NativeCleanup::Delete).await
                    && error.is_referenced_by_fork()
                {
                    still.push(thread_id);
                }
            }
            if still.len() == before {
                return;
            }
            referenced = still;
        }
    }

    /// Runs the cleanup with its durable record: written before the native call, removed
    /// after it succeeded, kept with the error when it failed (and logged).
    pub(crate) async fn cleanup_or_keep(
        &self,
        thread_id: &str,
        action: NativeCleanup,
    ) -> Result<(), CodexError> {
        self.record_cleanup(thread_id, action, None).await;
        self.attempt(thread_id, action).await
    }

    /// Runs a recorded cleanup: removes its record on success, records the error on failure.
    async fn attempt(&self, thread_id: &str, action: NativeCleanup) -> Result<(), CodexError> {
        match self.cleanup(thread_id, action).await {
            Ok(()) => {
                if let Err(error) = self.forget_cleanup(thread_id).await {
                    tracing::warn!(thread_id, %error, "codex thread cleaned up, but its record could not be removed; the next retry finds nothing to do");
                }
                Ok(())
            }
            Err(error) => {
                tracing::warn!(thread_id, ?action, %error, "codex thread cleanup failed; kept for a retry");
                self.record_cleanup(thread_id, action, Some(error.to_string()))
                    .await;
                Err(error)
            }
        }
    }

    /// Writes the cleanup record of `thread_id`; a store failure is logged (the cleanup itself
    /// still runs).
    async fn record_cleanup(&self, thread_id: &str, action: NativeCleanup, error: Option<String>) {
        let entry = PendingCleanup {
            thread_id: thread_id.to_owned(),
            action,
            error,
        };
        let written = match cleanup_key(thread_id) {
            Ok(key) => self.put(&self.cleanups, &key, &entry).await,
            Err(error) => Err(error),
        };
        if let Err(error) = written {
            tracing::warn!(thread_id, ?action, %error, "could not record the codex thread cleanup");
        }
    }

    async fn forget_cleanup(&self, thread_id: &str) -> Result<(), Error> {
        let key = cleanup_key(thread_id)?;
        self.store
            .delete_if(&self.cleanups, &key, &|_| true)
            .await?;
        Ok(())
    }

    /// Records that `session`'s context was reset while it was bound to `thread_id`: its next
    /// turn continues on a fork of the kept turns.
    pub(crate) async fn set_continuation(
        &self,
        session: &BindingKey,
        thread_id: &str,
    ) -> Result<(), Error> {
        let record = Continuation {
            thread_id: thread_id.to_owned(),
        };
        self.put(&self.continuations, session, &record).await
    }

    /// The thread `session` was bound to when its context was last reset, if a continuation is
    /// due.
    pub(crate) async fn continuation(&self, session: &BindingKey) -> Result<Option<String>, Error> {
        Ok(self
            .read::<Continuation>(&self.continuations, session, "codex continuation record")
            .await?
            .map(|record| record.thread_id))
    }

    /// Removes `session`'s continuation record (done, or the session was reset or deleted).
    pub(crate) async fn clear_continuation(&self, session: &BindingKey) -> Result<(), Error> {
        self.store
            .delete_if(&self.continuations, session, &|_| true)
            .await?;
        Ok(())
    }

    /// Archives `thread_id`, a thread `session` no longer runs on (a reset or a context reset
    /// of the session), listing it for the session first, so the session's deletion deletes
    /// it. A failed listing is logged: the thread is still archived.
    pub(crate) async fn archive_for(
        &self,
        session: &BindingKey,
        thread_id: &str,
    ) -> Result<(), CodexError> {
        if let Err(error) = self.list_archived(session, thread_id).await {
            tracing::warn!(thread_id, key = %session, %error, "could not list the archived codex thread for its session; a deletion of the session will not delete it");
        }
        self.cleanup_or_keep(thread_id, NativeCleanup::Archive)
            .await
    }

    /// Adds `thread_id` to `session`'s archived threads.
    async fn list_archived(&self, session: &BindingKey, thread_id: &str) -> Result<(), Error> {
        self.update(&self.archives, session, |current| {
            let mut record = current
                .and_then(|value| serde_json::from_slice::<ArchivedThreads>(value).ok())
                .unwrap_or_default();
            if record.thread_ids.iter().any(|t| t == thread_id) {
                return Ok(None);
            }
            record.thread_ids.push(thread_id.to_owned());
            encode(&record).map(Some)
        })
        .await
    }

    /// The threads archived for `session` (an unreadable record lists none, logged).
    pub(crate) async fn archived(&self, session: &BindingKey) -> Result<Vec<String>, Error> {
        Ok(self
            .read::<ArchivedThreads>(&self.archives, session, "record of archived codex threads")
            .await?
            .map(|record| record.thread_ids)
            .unwrap_or_default())
    }

    /// After a committed deletion of `session` (whose bound thread, the newest, the SDK's hook
    /// deleted already): deletes every thread archived for it, each through its cleanup
    /// record, then removes the list. Newest first: Codex refuses to delete a thread whose
    /// history a fork still references, and each archived thread may be the source of a later
    /// one (a context reset's fork). A deletion refused for that reason all the same runs
    /// again once the others went; any other failure stays due
    /// for [`CodexThreads::retry_pending`].
    pub(crate) async fn delete_archived(&self, session: &BindingKey) -> Result<(), Error> {
        let mut referenced = Vec::new();
        for thread_id in self.archived(session).await?.into_iter().rev() {
            // The failure is recorded (and logged) by `attempt`.
            if let Err(error) = self
                .cleanup_or_keep(&thread_id, NativeCleanup::Delete)
                .await
                && error.is_referenced_by_fork()
            {
                referenced.push(thread_id);
            }
        }
        self.delete_referenced(referenced).await;
        self.store
            .delete_if(&self.archives, session, &|_| true)
            .await?;
        Ok(())
    }

    /// The record of type `T` at `key` in `ns`; an unreadable one (`what`) counts as none,
    /// logged.
    async fn read<T: serde::de::DeserializeOwned>(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        what: &str,
    ) -> Result<Option<T>, Error> {
        let Some(row) = self.store.lookup(ns, key).await? else {
            return Ok(None);
        };
        match serde_json::from_slice::<T>(&row.value) {
            Ok(record) => Ok(Some(record)),
            Err(error) => {
                tracing::warn!(%key, %error, "unreadable {what}; ignored");
                Ok(None)
            }
        }
    }

    /// Writes `record` at `key`, whatever the row held.
    async fn put<T: Serialize>(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        record: &T,
    ) -> Result<(), Error> {
        let value = encode(record)?;
        self.update(ns, key, |_| Ok(Some(value.clone()))).await
    }

    /// Writes at `key` what `next` makes of the row's current value (`None`: nothing to
    /// write), with a compare-and-swap: a row that changed meanwhile is read and decided again.
    async fn update(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        next: impl Fn(Option<&[u8]>) -> Result<Option<Vec<u8>>, Error>,
    ) -> Result<(), Error> {
        for _ in 0..WRITE_ATTEMPTS {
            let observed = self.store.observe(ns, key).await?;
            let Some(value) = next(observed.row.as_ref().map(|row| row.value.as_slice()))? else {
                return Ok(());
            };
            let intent = Intent::Set {
                row: RowWrite { value, lease: None },
                ttl: None,
            };
            match self
                .store
                .compare_and_apply(ns, key, &observed.comparison, intent, &|| Ok(()))
                .await?
            {
                ApplyOutcome::Conflict { .. } => continue,
                _ => return Ok(()),
            }
        }
        // Nothing was written: other writers kept the row busy. Retryable.
        Err(Error::store(StoreErrorKind::Unavailable {
            message: format!(
                "the record at {key} kept changing under {WRITE_ATTEMPTS} writes (other writers are busy with it); nothing was written; retry"
            ),
            cause: None,
        }))
    }

    /// Deletes or archives `thread_id` on a process that can write it.
    async fn cleanup(&self, thread_id: &str, action: NativeCleanup) -> Result<(), CodexError> {
        let span = tracing::info_span!("codex.native_cleanup", thread_id, ?action);
        async {
            if self.process_per_turn {
                let client = self.server.dedicated().await?;
                let result = Self::cleanup_on(&client, thread_id, action).await;
                client.stop();
                client.wait_exit(Duration::from_secs(10)).await;
                return result;
            }
            let client = self.server.client().await?;
            Self::cleanup_on(&client, thread_id, action).await
        }
        .instrument(span)
        .await
    }

    async fn cleanup_on(
        client: &CodexClient,
        thread_id: &str,
        action: NativeCleanup,
    ) -> Result<(), CodexError> {
        // The turn that ran the thread already unsubscribed; a repeat is harmless and its
        // failure (the thread is not loaded here) says nothing about the cleanup.
        let _ = client
            .request::<_, Value>(
                method::THREAD_UNSUBSCRIBE,
                &ThreadUnsubscribeParams {
                    thread_id: thread_id.to_owned(),
                },
            )
            .await;
        let result = client
            .request::<_, Value>(
                action.method(),
                &ThreadRefParams {
                    thread_id: thread_id.to_owned(),
                },
            )
            .await;
        match result {
            Ok(_) => {
                tracing::info!(thread_id, ?action, "codex thread cleaned up");
                Ok(())
            }
            Err(CodexError::Rpc { message, .. }) if message.contains("active writer") => {
                Err(CodexError::WriterHeldElsewhere {
                    thread_id: thread_id.to_owned(),
                })
            }
            // Codex keeps no active history of the thread: it was deleted or archived already
            // (by an earlier try whose answer was lost, or by another host process).
            Err(error) if error.is_no_rollout() => {
                tracing::info!(thread_id, ?action, "codex thread already cleaned up");
                Ok(())
            }
            Err(other) => Err(other),
        }
    }
}

/// The JSON of a durable record.
fn encode<T: Serialize>(record: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(record).map_err(|e| Error::other(e.to_string()))
}

/// The cleanup record key of `thread_id`.
fn cleanup_key(thread_id: &str) -> Result<BindingKey, Error> {
    Ok(BindingKey::conversation(&BindingId::new(thread_id)?))
}

/// Records, inside the transaction of a session deletion the Codex harness takes no part in
/// (an operator's deletion from a process where no harness runs: `tether sessions delete`, the
/// admin API), a due `thread/delete` for every Codex thread of the session: the thread bound
/// under each of `keys` (the session's binding keys) in [`NAMESPACE`](crate::NAMESPACE), and
/// the threads listed as archived for them. `tx` is the deletion's row transaction; call this
/// before the session's binding rows are removed (the host's writes of a deletion run first).
/// The [`CLEANUP_NAMESPACE`] must be registered on the store.
///
/// The Codex harness of any host process over the same database then deletes those threads at
/// its next [`CodexHarness::retry_native_cleanup`](crate::CodexHarness::retry_native_cleanup)
/// or reset, and lists them meanwhile in
/// [`CodexHarness::pending_native_cleanup`](crate::CodexHarness::pending_native_cleanup):
/// without this the deletion leaves the conversation in `CODEX_HOME` with no record of it.
/// A row that does not decode is skipped and logged. Returns the thread ids recorded.
pub async fn record_deleted_session_threads(
    tx: &dyn RowTransaction,
    keys: &[BindingKey],
    reason: &str,
) -> Result<Vec<String>, Error> {
    let bindings = Namespace::new(crate::NAMESPACE)?;
    let archives = Namespace::new(ARCHIVE_NAMESPACE)?;
    let cleanups = Namespace::new(CLEANUP_NAMESPACE)?;
    let mut threads: Vec<String> = Vec::new();
    for key in keys {
        if let Some(row) = tx.lookup(&bindings, key).await? {
            match ThreadBindingCodec.decode(&row.value) {
                Some(record) => threads.extend(record.binding().map(|b| b.thread_id.clone())),
                None => {
                    tracing::warn!(key = %key, "undecodable codex binding row; its thread is not recorded for deletion")
                }
            }
        }
        if let Some(row) = tx.lookup(&archives, key).await? {
            match serde_json::from_slice::<ArchivedThreads>(&row.value) {
                // Newest first: a fork is deleted before the thread it was forked from.
                Ok(listed) => threads.extend(listed.thread_ids.into_iter().rev()),
                Err(error) => {
                    tracing::warn!(key = %key, %error, "undecodable codex archive list; its threads are not recorded for deletion")
                }
            }
        }
    }
    let mut recorded = Vec::new();
    for thread_id in threads {
        if recorded.contains(&thread_id) {
            continue;
        }
        let key = cleanup_key(&thread_id)?;
        let value = encode(&PendingCleanup {
            thread_id: thread_id.clone(),
            action: NativeCleanup::Delete,
            error: Some(format!(
                "the session was deleted without the codex harness ({reason}); not yet run"
            )),
        })?;
        // A cleanup already due for the thread (an archive) becomes its deletion.
        tx.delete_if(&cleanups, &key, &|_| true).await?;
        tx.register_if_absent(&cleanups, &key, RowWrite { value, lease: None }, None)
            .await?;
        recorded.push(thread_id);
    }
    Ok(recorded)
}

#[async_trait]
impl NativeThreads for CodexThreads {
    fn is_claimed(&self, thread_id: &str) -> bool {
        self.claims
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(thread_id)
    }

    /// Called by the SDK after the host transaction committed, outside it. Never restores the
    /// binding: a failure is logged and kept for a retry.
    async fn release_subscription(&self, binding: &ThreadBinding) -> Result<(), Error> {
        let scope = CLEANUP.try_with(CleanupScope::clone).ok();
        let action = scope
            .as_ref()
            .map_or(NativeCleanup::Archive, |scope| scope.action);
        if let Some(scope) = &scope {
            // A committed context reset continues on the kept turns (a deletion removes the
            // session's continuation once its hook returns).
            if scope.action == NativeCleanup::Archive
                && scope.continue_kept_turns
                && let Err(error) = self
                    .set_continuation(&scope.session, &binding.thread_id)
                    .await
            {
                tracing::warn!(thread_id = %binding.thread_id, %error, "could not record the session's codex continuation");
            }
            // The operation must still be current before native state changes.
            if let Err(error) = (scope.assert_current)() {
                tracing::warn!(thread_id = %binding.thread_id, %error, "operation no longer current; codex thread cleanup kept for a retry");
                self.record_cleanup(&binding.thread_id, action, Some(error.to_string()))
                    .await;
                return Err(error);
            }
        }
        match &scope {
            Some(scope) if action == NativeCleanup::Archive => {
                self.archive_for(&scope.session, &binding.thread_id).await
            }
            _ => self.cleanup_or_keep(&binding.thread_id, action).await,
        }
        .map_err(Error::from)
    }
}
