//! The harness's prepared mutation: the lifecycle deletion plus the active-claim check.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use tether_core::{Error, RowTransaction, SessionMutation};

use super::harness::NativeThreads;
use crate::backend::BackendTexts;
use crate::lifecycle::{DeletionMutation, DeletionOutcome};

/// The mutation a [`ThreadBindingHarness`](super::ThreadBindingHarness) hands the host:
/// `commit` refuses a thread claimed by active work, then commits the lifecycle deletion and
/// records that it committed; `rollback` undoes the lifecycle deletion (tolerating an unapplied
/// commit) and records that nothing stands.
pub struct HookMutation {
    inner: DeletionMutation,
    threads: Option<Arc<dyn NativeThreads>>,
    thread_id: Option<String>,
    texts: BackendTexts,
    committed: Arc<AtomicBool>,
}

impl fmt::Debug for HookMutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookMutation")
            .field("inner", &self.inner)
            .field("thread_id", &self.thread_id)
            .field("committed", &self.is_committed())
            .finish_non_exhaustive()
    }
}

impl HookMutation {
    pub(super) fn new(
        inner: DeletionMutation,
        threads: Option<Arc<dyn NativeThreads>>,
        thread_id: Option<String>,
        texts: BackendTexts,
        committed: Arc<AtomicBool>,
    ) -> Self {
        Self {
            inner,
            threads,
            thread_id,
            texts,
            committed,
        }
    }

    /// The lifecycle deletion inside.
    pub fn deletion(&self) -> &DeletionMutation {
        &self.inner
    }

    /// Whether the deletion committed and was not rolled back.
    pub fn is_committed(&self) -> bool {
        self.committed.load(Ordering::SeqCst)
    }

    fn assert_unclaimed(&self) -> Result<(), Error> {
        if let (Some(threads), Some(thread_id)) = (&self.threads, &self.thread_id)
            && threads.is_claimed(thread_id)
        {
            return Err(self.texts.claimed(thread_id));
        }
        Ok(())
    }
}

#[async_trait]
impl SessionMutation for HookMutation {
    async fn commit(&self, tx: &dyn RowTransaction) -> Result<(), Error> {
        self.assert_unclaimed()?;
        self.inner.commit(tx).await?;
        self.committed.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn rollback(&self) -> Result<(), Error> {
        self.inner.rollback().await?;
        self.committed.store(false, Ordering::SeqCst);
        Ok(())
    }

    async fn settle_outcome(
        &self,
        outcome: DeletionOutcome,
        error: Option<Error>,
    ) -> Result<(), Error> {
        self.inner.settle_outcome(outcome, error).await?;
        if outcome == DeletionOutcome::RolledBack {
            self.committed.store(false, Ordering::SeqCst);
        }
        Ok(())
    }

    fn is_unresolved(&self) -> bool {
        self.inner.is_unresolved()
    }
}
