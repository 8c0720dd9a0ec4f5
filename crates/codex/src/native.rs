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

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tether_core::{AssertCurrent, Error};
use tether_harness_sdk::backend::ThreadBinding;
use tether_harness_sdk::hooks::NativeThreads;
use tracing::Instrument as _;

use crate::client::{CodexAppServer, CodexClient};
use crate::error::CodexError;
use crate::protocol::{ThreadRefParams, ThreadUnsubscribeParams, method};

/// What happens to a Codex thread no binding owns any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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
}

tokio::task_local! {
    /// The operation whose post-commit cleanup is running on this task.
    pub(crate) static CLEANUP: CleanupScope;
}

/// One cleanup that failed and waits for a retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCleanup {
    /// The Codex thread.
    pub thread_id: String,
    /// What was to be done with it.
    pub action: NativeCleanup,
    /// The last error.
    pub error: String,
}

/// Active-work claims and native cleanup for the SDK's thread-binding hooks.
pub struct CodexThreads {
    server: Arc<CodexAppServer>,
    process_per_turn: bool,
    claims: Mutex<HashMap<String, usize>>,
    pending: Mutex<BTreeMap<String, PendingCleanup>>,
}

impl fmt::Debug for CodexThreads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodexThreads")
            .field("process_per_turn", &self.process_per_turn)
            .field("pending", &self.pending())
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
    pub(crate) fn new(server: Arc<CodexAppServer>, process_per_turn: bool) -> Self {
        Self {
            server,
            process_per_turn,
            claims: Mutex::new(HashMap::new()),
            pending: Mutex::new(BTreeMap::new()),
        }
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

    /// The cleanups that failed and wait for [`Self::retry_pending`].
    pub fn pending(&self) -> Vec<PendingCleanup> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Runs every pending cleanup again; those that fail stay pending. Returns how many are
    /// left.
    pub async fn retry_pending(&self) -> usize {
        for entry in self.pending() {
            // The failure is kept (and logged) by `cleanup_or_keep`.
            let _ = self.cleanup_or_keep(&entry.thread_id, entry.action).await;
        }
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Runs the cleanup; on failure logs it and keeps it pending.
    pub(crate) async fn cleanup_or_keep(
        &self,
        thread_id: &str,
        action: NativeCleanup,
    ) -> Result<(), CodexError> {
        match self.cleanup(thread_id, action).await {
            Ok(()) => {
                self.pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(thread_id);
                Ok(())
            }
            Err(error) => {
                tracing::warn!(thread_id, ?action, %error, "codex thread cleanup failed; kept for a retry");
                self.pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(
                        thread_id.to_owned(),
                        PendingCleanup {
                            thread_id: thread_id.to_owned(),
                            action,
                            error: error.to_string(),
                        },
                    );
                Err(error)
            }
        }
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
            Err(other) => Err(other),
        }
    }
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
        // The operation must still be current before native state changes.
        if let Some(scope) = &scope
            && let Err(error) = (scope.assert_current)()
        {
            tracing::warn!(thread_id = %binding.thread_id, %error, "operation no longer current; codex thread cleanup kept for a retry");
            self.pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(
                    binding.thread_id.clone(),
                    PendingCleanup {
                        thread_id: binding.thread_id.clone(),
                        action,
                        error: error.to_string(),
                    },
                );
            return Err(error);
        }
        self.cleanup_or_keep(&binding.thread_id, action)
            .await
            .map_err(|error| Error::other(error.to_string()))
    }
}
