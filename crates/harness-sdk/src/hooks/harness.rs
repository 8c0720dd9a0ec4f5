//! [`ThreadBindingHarness`]: the thread-binding backend as an [`AgentHarness`] with deletion,
//! context-reset and reset hooks.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use tether_core::{
    AgentHarness, AssertCurrent, Error, HarnessId, InitializationHandle, MutationRun, ResetParams,
    ResetReason, SessionContextResetHook, SessionContextResetParams, SessionDeletionHook,
    SessionDeletionParams, SessionId, SettledTurnFinalizer, always_current,
};
use tracing::Instrument;

use super::mutation::HookMutation;
use crate::backend::{
    BindingIdentity, ThreadBinding, ThreadBindingRecord, ThreadBindingStore, ThreadGenerationOps,
    TransitionOutcome, WriteOptions,
};
use crate::generation::{
    BindingAuthority, GenerationAuthority, GenerationState, ReclaimPlan, ResolveRequest,
    ResolvedBinding,
};
use crate::initialization::InitializationRollback;
use crate::lifecycle::LeaseGuard;

/// The native side a harness drives: active-work claims and subscriptions.
#[async_trait]
pub trait NativeThreads: Send + Sync + fmt::Debug {
    /// Whether active work claims `thread_id` (a deletion is then refused, before the host's
    /// transaction and again at commit).
    fn is_claimed(&self, thread_id: &str) -> bool;

    /// Releases the native subscription of a thread that no binding row owns any more. Called
    /// after the host transaction committed.
    async fn release_subscription(&self, binding: &ThreadBinding) -> Result<(), Error>;

    /// Releases the physical client that held the deleted binding (always after a committed
    /// deletion of a binding with a client id).
    async fn release_client(&self, client_id: &str) -> Result<(), Error> {
        let _ = client_id;
        Ok(())
    }
}

/// Computes the initialization rollback of a deletion (see
/// [`rollbacks_from_owner`](super::rollbacks_from_owner)): the identity, the host's
/// initialization handle, and the binding about to be deleted.
pub type InitializationRollbacks = Arc<
    dyn Fn(
            &BindingIdentity,
            Option<&Arc<dyn InitializationHandle>>,
            Option<&ThreadBinding>,
        ) -> Result<Option<InitializationRollback>, Error>
        + Send
        + Sync,
>;

/// What the post-commit cleanup needs.
struct PostCommit {
    binding: Option<ThreadBinding>,
    rollback: Option<InitializationRollback>,
    mutation: Arc<HookMutation>,
}

/// A ready harness building block over the thread-binding backend: it binds native threads in a
/// [`ThreadBindingStore`], checks generations against the host's session store through a
/// [`GenerationAuthority`], and takes part in host deletions and context resets.
#[derive(Clone)]
pub struct ThreadBindingHarness {
    id: HarnessId,
    store: ThreadBindingStore,
    generation: GenerationAuthority,
    threads: Option<Arc<dyn NativeThreads>>,
    rollbacks: Option<InitializationRollbacks>,
    finalizer: Option<Arc<dyn SettledTurnFinalizer>>,
}

impl fmt::Debug for ThreadBindingHarness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadBindingHarness")
            .field("id", &self.id)
            .field("store", &self.store)
            .field("threads", &self.threads)
            .field("rollbacks", &self.rollbacks.is_some())
            .field("finalizer", &self.finalizer.is_some())
            .finish_non_exhaustive()
    }
}

impl ThreadBindingHarness {
    /// A harness `id` over `store`, with the host authority `generation`.
    pub fn new(id: HarnessId, store: ThreadBindingStore, generation: GenerationAuthority) -> Self {
        Self {
            id,
            store,
            generation,
            threads: None,
            rollbacks: None,
            finalizer: None,
        }
    }

    /// Gives the harness a settled-turn finalizer: [`AgentHarness::settled_turn_finalizer`]
    /// then returns it, so the host's orchestration can finalize this harness's tool-only
    /// turns. Without one the harness has no finalization capability and the host falls back.
    #[must_use]
    pub fn with_finalizer(mut self, finalizer: Arc<dyn SettledTurnFinalizer>) -> Self {
        self.finalizer = Some(finalizer);
        self
    }

    /// Sets the native side (claims and subscriptions).
    #[must_use]
    pub fn with_threads(mut self, threads: Arc<dyn NativeThreads>) -> Self {
        self.threads = Some(threads);
        self
    }

    /// Sets how initialization rollbacks are computed at deletion.
    #[must_use]
    pub fn with_initialization_rollbacks(mut self, rollbacks: InitializationRollbacks) -> Self {
        self.rollbacks = Some(rollbacks);
        self
    }

    /// The binding store.
    pub fn store(&self) -> &ThreadBindingStore {
        &self.store
    }

    /// The host generation authority.
    pub fn generation(&self) -> &GenerationAuthority {
        &self.generation
    }

    /// Holds the session's lease for a turn under the host's generation authority, the way
    /// every turn that writes a binding should (see `docs/generation.md`, "Driving a turn"):
    ///
    /// - the host's entry is read first; a session key the host has no entry for (deleted, or
    ///   never created) is refused as
    ///   [`HostErrorKind::SessionNotFound`](tether_core::HostErrorKind::SessionNotFound), and
    ///   an entry naming another generation (the session was reset or rotated) as
    ///   [`Error::SupersededGeneration`]: `run` never starts;
    /// - the lease is acquired with that authority, so a deletion or context reset that
    ///   committed while this call waited for the lease refuses it too;
    /// - under the lease, a binding left by the recorded predecessor is adopted when the
    ///   generation began with a transfer (a compaction) and cleared when it began with a cut
    ///   or a reset ([`tether_core::GenerationChange`]), then `run` gets the lease and the
    ///   authority. Write with
    ///   `WriteOptions::checked(authority.assert_current_fn())` and call
    ///   [`BindingAuthority::verify`] after long waits: a host change that bypasses the
    ///   harness hooks (a rotation) then refuses the write instead of binding a stale
    ///   generation.
    ///
    /// A plain [`ThreadBindingStore::with_lease`] with no assertion fences other leases only:
    /// a writer holding an identity of a deleted or reset generation would bind it again.
    #[tracing::instrument(name = "thread_harness.with_turn_lease", skip_all, fields(harness = %self.id, key = %identity.key()))]
    pub async fn with_turn_lease<T, F, Fut>(
        &self,
        identity: &BindingIdentity,
        caller: &BindingAuthority,
        run: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(LeaseGuard, BindingAuthority) -> Fut + Send,
        Fut: Future<Output = Result<T, Error>> + Send,
    {
        self.store
            .reclaimed_lease(identity, &self.generation, caller, false, true, run)
            .await
    }

    /// Resolves `identity`'s binding under the host generation: a readable binding never
    /// bypasses the fence, and a binding left under the same key by the verified, recorded
    /// predecessor is **adopted** when the generation began with a transfer (ordinary
    /// compaction, never a context reset) and cleared when it began with a cut or a reset.
    pub async fn resolve(
        &self,
        identity: &BindingIdentity,
        caller: &BindingAuthority,
    ) -> Result<ResolvedBinding<ThreadBinding>, Error> {
        let target = identity.generation_target().ok_or_else(|| {
            Error::invalid_argument(format!(
                "resolution requires a session identity: {}",
                identity.key()
            ))
        })?;
        let ops = ThreadGenerationOps::new(self.store.clone(), identity.clone());
        self.generation
            .resolve_binding(ResolveRequest {
                target: &target,
                caller,
                reader: &ops,
                generation: Some(&ops),
                reclaim_stale: false,
                assert_binding: None,
            })
            .await
    }

    /// The identity whose binding a deletion or context reset removes: the exact recorded
    /// predecessor's when the row is still owned by it, else the current generation's.
    async fn deletion_target(
        &self,
        current: BindingIdentity,
        recorded_previous: Option<SessionId>,
    ) -> Result<BindingIdentity, Error> {
        Ok(match self.store.prepare_reclaim(&current).await? {
            ReclaimPlan::Verify { expected_previous }
                if recorded_previous.as_ref() == Some(&expected_previous) =>
            {
                current.with_session_id(expected_previous)
            }
            _ => current,
        })
    }

    /// The deletion path shared by deletion and context reset (see `docs/deletion-and-reset.md`,
    /// "The harness side").
    async fn delete_binding(
        &self,
        identity: BindingIdentity,
        assert_current: AssertCurrent,
        initialization: Option<Arc<dyn InitializationHandle>>,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        let committed = Arc::new(AtomicBool::new(false));
        let post: Arc<Mutex<Option<PostCommit>>> = Arc::new(Mutex::new(None));
        let result = {
            let committed = Arc::clone(&committed);
            let post = Arc::clone(&post);
            let identity = &identity;
            self.store
                .with_session_deletion(identity, assert_current, |record, mutation| async move {
                    let binding = record.as_ref().and_then(|r| r.binding().cloned());
                    let rollback = match &self.rollbacks {
                        Some(rollbacks) => {
                            rollbacks(identity, initialization.as_ref(), binding.as_ref())?
                        }
                        None => None,
                    };
                    let texts = self.store.texts();
                    if binding.as_ref().is_some_and(ThreadBinding::is_supervision)
                        && rollback.is_none()
                    {
                        return Err(texts.supervision());
                    }
                    let thread_id = binding.as_ref().map(|b| b.thread_id.clone());
                    if let (Some(threads), Some(thread_id)) = (&self.threads, &thread_id)
                        && threads.is_claimed(thread_id)
                    {
                        return Err(texts.claimed(thread_id));
                    }
                    let hook = Arc::new(HookMutation::new(
                        mutation,
                        self.threads.clone(),
                        thread_id,
                        texts.clone(),
                        committed,
                    ));
                    *post.lock().unwrap_or_else(PoisonError::into_inner) = Some(PostCommit {
                        binding,
                        rollback,
                        mutation: Arc::clone(&hook),
                    });
                    run(hook).await
                })
                .await
        };
        let post = post.lock().unwrap_or_else(PoisonError::into_inner).take();
        if committed.load(Ordering::SeqCst)
            && let Some(post) = post
        {
            self.after_commit(&identity, post).await;
        }
        result
    }

    /// Post-commit cleanup, after the host transaction: never restores anything; failures are
    /// logged.
    async fn after_commit(&self, identity: &BindingIdentity, post: PostCommit) {
        if tether_core::SessionMutation::is_unresolved(&*post.mutation) {
            tracing::warn!(key = %identity.key(), "deletion outcome unresolved; post-commit cleanup skipped");
            return;
        }
        // A host whose transaction failed after our commit but never called our rollback
        // (its owner authority refused it) leaves the binding restored by its own rollback:
        // cleaning up then would release a thread that is still bound.
        if let Some(binding) = &post.binding {
            match self.store.record(identity).await {
                Ok(Some(record))
                    if identity.owns(record.session_id.as_ref())
                        && record.binding().map(|b| &b.thread_id) == Some(&binding.thread_id) =>
                {
                    tracing::warn!(key = %identity.key(), "the binding is still stored after a reported commit; post-commit cleanup skipped");
                    return;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(key = %identity.key(), %error, "cannot confirm the committed deletion; post-commit cleanup skipped");
                    return;
                }
            }
        }
        if let Some(rollback) = &post.rollback
            && let Err(error) = rollback.run().await
        {
            tracing::warn!(key = %identity.key(), %error, "Session deletion committed, but the initialization rollback failed");
        }
        let (Some(binding), Some(threads)) = (&post.binding, &self.threads) else {
            return;
        };
        match self
            .store
            .has_other_thread_owner(identity.key(), &binding.thread_id)
            .await
        {
            Ok(false) => {
                if let Err(error) = threads.release_subscription(binding).await {
                    tracing::warn!(key = %identity.key(), %error, "Session deletion committed, but releasing the native subscription failed");
                }
            }
            Ok(true) => {
                tracing::debug!(key = %identity.key(), "another binding owns the thread; subscription kept");
            }
            Err(error) => {
                tracing::warn!(key = %identity.key(), %error, "thread owner scan failed; subscription kept");
            }
        }
        if let Some(client_id) = &binding.client_id
            && let Err(error) = threads.release_client(client_id).await
        {
            tracing::warn!(key = %identity.key(), %error, "Session deletion committed, but releasing the client failed");
        }
    }

    /// The reset hook's work (see [`AgentHarness::reset`] on this type).
    async fn reset_session(&self, params: ResetParams) -> Result<(), Error> {
        let identity = BindingIdentity::session(
            params.agent_id.clone(),
            params.session_id.clone(),
            params.session_key.clone(),
        );
        if params.reason == ResetReason::Deleted {
            // A notification: the deletion removed the row at its commit edge; whatever is
            // left of this generation is retired (no tombstone without a binding).
            self.store
                .retire(&identity, WriteOptions::default())
                .await?;
            return Ok(());
        }
        if params.replaced_generation().is_some() {
            let record = self.store.record(&identity).await?;
            if record.as_ref().is_some_and(|r| r.session_id.is_some()) {
                // A reset to a new generation: what it ends is the replaced generation's
                // binding, cleared by `reset_conflict` when the host records it as the
                // predecessor. A binding the new generation owns was made by a turn after the
                // host's COMMIT (this notification may be late) and is kept: the new
                // generation's row is never cleared here (a retired fence of it is repaired
                // as before). A legacy row with no owner is cleared in place, as before.
                return self.reset_conflict(&identity, record).await;
            }
        }
        match self.store.reset(&identity, WriteOptions::default()).await? {
            TransitionOutcome::Absent | TransitionOutcome::Applied => Ok(()),
            TransitionOutcome::Conflict => {
                let record = self.store.record(&identity).await?;
                self.reset_conflict(&identity, record).await
            }
        }
    }

    /// A reset met its own retirement fence (repaired only through the host-store reclaim), or
    /// a row of another generation (cleared only when it is the exact recorded predecessor's,
    /// or when the current generation began with a reset or a cut, which ended every earlier
    /// context). A live row of the reset generation itself is kept (supervision, or a binding
    /// a turn made after a reset to a new generation). `record` is the row as just read.
    async fn reset_conflict(
        &self,
        identity: &BindingIdentity,
        record: Option<ThreadBindingRecord>,
    ) -> Result<(), Error> {
        let Some(record) = record else {
            return Ok(());
        };
        let Some(target) = identity.generation_target() else {
            return Ok(());
        };
        let caller = BindingAuthority::caller(always_current());
        if identity.owns(record.session_id.as_ref()) {
            if !record.is_retired() {
                // Supervision keeps its binding, and so does a turn of a new generation.
                return Ok(());
            }
            let ops = ThreadGenerationOps::new(self.store.clone(), identity.clone());
            let repaired = self
                .generation
                .reclaim_generation(&target, &caller, &ops, true)
                .await?;
            if repaired
                && !self
                    .store
                    .record(identity)
                    .await?
                    .is_some_and(|r| r.is_retired())
            {
                tracing::info!(key = %identity.key(), "in-place reset repaired a same-id retirement fence");
                return Ok(());
            }
            return Err(Error::SupersededGeneration {
                session_id: target.session_id.to_string(),
                message: format!(
                    "Native thread binding generation was retired and the host session store does not prove {} is current: {}",
                    target.session_id,
                    identity.key()
                ),
            });
        }
        let capture = self.generation.capture(&target, &caller).await?;
        if capture.state() == GenerationState::Current
            && let Some(owner) = record.session_id.as_ref()
            && (capture.previous_session_id() == Some(owner) || capture.began_afresh())
        {
            // The recorded predecessor's binding; or, when the current generation began with
            // a reset or a cut, one an earlier generation left (a compaction, then `/new`,
            // with no turn between them): that context ended too.
            let owner_identity = identity.with_session_id(owner.clone());
            let options = WriteOptions::checked(capture.authority().assert_current_fn());
            let outcome = self.store.reset(&owner_identity, options).await?;
            tracing::info!(key = %identity.key(), %owner, ?outcome, "reset cleared a binding an earlier generation left");
        }
        Ok(())
    }
}

#[async_trait]
impl AgentHarness for ThreadBindingHarness {
    fn id(&self) -> &HarnessId {
        &self.id
    }

    /// A non-retiring in-place reset (see `docs/harness-backend.md`, "Reset, retire, delete"):
    /// the generation's binding is cleared so
    /// the same physical id can bind a new thread; its own retirement fence is repaired only
    /// through the authoritative host-store reclaim; a binding still owned by the exact
    /// recorded predecessor is cleared too (never adopted), and so is one any earlier
    /// generation left when the current generation began with a reset or a cut. A reset to a
    /// new generation ([`ResetParams::replaced_generation`]) clears only such earlier
    /// generations' bindings and keeps one the new generation owns (a turn made it after the
    /// host's COMMIT). `Deleted` retires what is left.
    async fn reset(&self, params: ResetParams) -> Result<(), Error> {
        let span = tracing::info_span!("thread_harness.reset", harness = %self.id, session_id = %params.session_id, reason = ?params.reason);
        self.reset_session(params).instrument(span).await
    }

    fn session_deletion(&self) -> Option<&dyn SessionDeletionHook> {
        Some(self)
    }

    fn session_context_reset(&self) -> Option<&dyn SessionContextResetHook> {
        Some(self)
    }

    fn settled_turn_finalizer(&self) -> Option<&dyn SettledTurnFinalizer> {
        self.finalizer.as_deref()
    }
}

#[async_trait]
impl SessionDeletionHook for ThreadBindingHarness {
    async fn with_session_deletion(
        &self,
        params: SessionDeletionParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        let span = tracing::info_span!("thread_harness.with_session_deletion", harness = %self.id, session_id = %params.session_id);
        async move {
            let current = BindingIdentity::session(
                params.agent_id,
                params.session_id,
                Some(params.session_key),
            );
            // A binding the host's recorded predecessor left under the key (compaction not
            // yet transferred) is this session's too: it is deleted, never adopted.
            let caller = BindingAuthority::caller(Arc::clone(&params.assert_current));
            let recorded_previous = match current.generation_target() {
                Some(target) => {
                    let capture = self.generation.capture(&target, &caller).await?;
                    (capture.state() == GenerationState::Current)
                        .then(|| capture.previous_session_id().cloned())
                        .flatten()
                }
                None => None,
            };
            let target = self.deletion_target(current, recorded_previous).await?;
            self.delete_binding(target, params.assert_current, params.initialization, run)
                .await
        }
        .instrument(span)
        .await
    }
}

#[async_trait]
impl SessionContextResetHook for ThreadBindingHarness {
    async fn with_session_context_reset(
        &self,
        params: SessionContextResetParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        let span = tracing::info_span!("thread_harness.with_session_context_reset", harness = %self.id, session_id = %params.session_id);
        async move {
            let current = BindingIdentity::session(
                params.agent_id,
                params.session_id,
                Some(params.session_key),
            );
            let target = self
                .deletion_target(current, params.previous_session_id)
                .await?;
            self.delete_binding(target, params.assert_current, None, run)
                .await
        }
        .instrument(span)
        .await
    }
}
