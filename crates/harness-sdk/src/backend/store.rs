//! The thread-binding store: every write goes through the binding lifecycle.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tether_core::{
    AssertCurrent, BindingKey, BindingStore, Clock, Error, ErrorTexts, LeaseConfig, Namespace,
    NamespaceConfig, QuarantineStore, SessionId, TokenSource, decode_row,
};

use super::identity::BindingIdentity;
use super::policy::{
    BackendTexts, CLEARED_TTL, DEFAULT_MAX_ENTRIES, PHYSICAL_RETIRE_TTL, default_error_texts,
    prepare_lease, release_ttl_policy,
};
use super::record::{ThreadBinding, ThreadBindingCodec, ThreadBindingRecord};
use crate::generation::{
    AdoptionResult, BindingAuthority, GenerationAuthority, GenerationState, ReclaimPlan,
};
use crate::lifecycle::{
    Applied, DeletionMutation, DeletionOptions, LeaseGuard, LeaseOptions, Lifecycle,
    LifecycleBuilder, Timer, TransactOptions,
};

/// The lifecycle over thread-binding records.
pub type ThreadLifecycle = Lifecycle<ThreadBindingCodec>;

/// Options of a single write.
#[derive(Clone, Default)]
pub struct WriteOptions {
    /// The caller's authority, checked before the write and at its commit admission.
    pub assert_current: Option<AssertCurrent>,
    /// Outside every lease scope, refuse at once with [`Error::HeldOutsideScope`] when this
    /// store's own lifecycle holds the row under a live lease, instead of waiting behind it
    /// (see [`TransactOptions::fail_if_held_here`]).
    pub fail_if_held_here: bool,
}

impl WriteOptions {
    /// Options checking `assert_current`.
    pub fn checked(assert_current: AssertCurrent) -> Self {
        Self {
            assert_current: Some(assert_current),
            fail_if_held_here: false,
        }
    }

    /// Sets [`WriteOptions::fail_if_held_here`].
    #[must_use]
    pub fn failing_if_held_here(mut self) -> Self {
        self.fail_if_held_here = true;
        self
    }
}

impl fmt::Debug for WriteOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteOptions")
            .field("assert_current", &self.assert_current.is_some())
            .field("fail_if_held_here", &self.fail_if_held_here)
            .finish()
    }
}

/// The native thread (and client, when given) a patch or clear is pinned to: a writer that
/// saw an older thread can never touch its replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadPin {
    /// The thread the writer saw.
    pub thread_id: String,
    /// The client the writer saw; pinned only when present.
    pub client_id: Option<String>,
}

impl ThreadPin {
    /// A pin on `thread_id` only.
    pub fn thread(thread_id: impl Into<String>) -> Self {
        Self {
            thread_id: thread_id.into(),
            client_id: None,
        }
    }

    /// Also pins the client.
    #[must_use]
    pub fn with_client(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = Some(client_id.into());
        self
    }

    /// Whether `binding` is still the pinned thread (and client).
    pub fn matches(&self, binding: &ThreadBinding) -> bool {
        binding.thread_id == self.thread_id
            && self
                .client_id
                .as_ref()
                .is_none_or(|c| binding.client_id.as_ref() == Some(c))
    }
}

/// The generation transition of [`ThreadBindingStore::transition_session_generation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GenerationTransition {
    /// Non-retiring in-place reset (`/reset`, `/new` keeping the physical id): the row is
    /// cleared and can be bound again by the same generation.
    Reset,
    /// Permanent retirement: a durable fence against late writers of the generation
    /// (permanent for stable keys, [`PHYSICAL_RETIRE_TTL`] for physical keys).
    Retire,
}

/// The result of a generation transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransitionOutcome {
    /// There is no row (no tombstone is written without a binding).
    Absent,
    /// The row belongs to another generation, is protected by supervision, or (reset) is the
    /// generation's own retirement fence, which only the authoritative host-store reclaim can
    /// lift.
    Conflict,
    /// The transition stands.
    Applied,
}

/// Builds a [`ThreadBindingStore`]: a [`LifecycleBuilder`] for thread-binding records, preset
/// with the backend's lease policy and release TTL, plus the backend's own texts. Every
/// lifecycle option is set on that builder (the setters here forward to it;
/// [`ThreadBindingStoreBuilder::lifecycle`] reaches the rest).
pub struct ThreadBindingStoreBuilder {
    lifecycle: LifecycleBuilder<ThreadBindingCodec>,
    texts: BackendTexts,
}

impl fmt::Debug for ThreadBindingStoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadBindingStoreBuilder")
            .field("lifecycle", &self.lifecycle)
            .finish_non_exhaustive()
    }
}

impl ThreadBindingStoreBuilder {
    /// Adjusts the lifecycle builder (heartbeat batching, a release-failure hook, …). The
    /// backend's lease policy and release TTL stay the backend's.
    #[must_use]
    pub fn lifecycle(
        mut self,
        adjust: impl FnOnce(
            LifecycleBuilder<ThreadBindingCodec>,
        ) -> LifecycleBuilder<ThreadBindingCodec>,
    ) -> Self {
        self.lifecycle = adjust(self.lifecycle);
        self
    }

    /// Sets the lease timing.
    #[must_use]
    pub fn lease_config(self, lease: LeaseConfig) -> Self {
        self.lifecycle(|b| b.lease_config(lease))
    }

    /// Sets the clock (it must be the store's clock for expiry to agree).
    #[must_use]
    pub fn clock(self, clock: Arc<dyn Clock>) -> Self {
        self.lifecycle(|b| b.clock(clock))
    }

    /// Sets the lease token source.
    #[must_use]
    pub fn tokens(self, tokens: Arc<dyn TokenSource>) -> Self {
        self.lifecycle(|b| b.tokens(tokens))
    }

    /// Sets the timer of busy retries and heartbeats.
    #[must_use]
    pub fn timer(self, timer: Arc<dyn Timer>) -> Self {
        self.lifecycle(|b| b.timer(timer))
    }

    /// Records blocked keys durably.
    #[must_use]
    pub fn quarantine(self, quarantine: Arc<dyn QuarantineStore>) -> Self {
        self.lifecycle(|b| b.quarantine(quarantine))
    }

    /// Sets the holder label of leases.
    #[must_use]
    pub fn holder(self, holder: impl Into<String>) -> Self {
        let holder = holder.into();
        self.lifecycle(|b| b.holder(holder))
    }

    /// Sets the lifecycle error texts.
    #[must_use]
    pub fn errors(self, errors: ErrorTexts) -> Self {
        self.lifecycle(|b| b.errors(errors))
    }

    /// Sets the backend's own texts.
    #[must_use]
    pub fn texts(mut self, texts: BackendTexts) -> Self {
        self.texts = texts;
        self
    }

    /// Builds the store (the namespace must be registered with the binding store).
    pub fn build(self) -> Result<ThreadBindingStore, Error> {
        let lifecycle = self.lifecycle.release_ttl(release_ttl_policy()).build()?;
        Ok(ThreadBindingStore {
            clock: Arc::clone(lifecycle.clock()),
            store: Arc::clone(lifecycle.store()),
            namespace: lifecycle.namespace().clone(),
            lifecycle,
            texts: Arc::new(self.texts),
        })
    }
}

/// The thread-binding backend: a binding store for harnesses that bind a native thread, with
/// generation fences (a stale generation's writes are refused and its lease acquisition too).
/// The rules: `docs/harness-backend.md`, "Thread-binding backend".
///
/// Every write is a pure decision run through [`Lifecycle::transact`] (inside a lease scope it
/// keeps and is fenced by the owner's exact lease; outside it waits behind a live lease), so
/// nothing is ever written blind. Cloning shares the lifecycle instance.
#[derive(Clone)]
pub struct ThreadBindingStore {
    lifecycle: ThreadLifecycle,
    clock: Arc<dyn Clock>,
    store: Arc<dyn BindingStore>,
    namespace: Namespace,
    texts: Arc<BackendTexts>,
}

impl fmt::Debug for ThreadBindingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadBindingStore")
            .field("namespace", &self.namespace)
            .field("lifecycle", &self.lifecycle)
            .finish_non_exhaustive()
    }
}

/// Pagination size of the thread-owner scan.
const SCAN_PAGE: usize = 256;

impl ThreadBindingStore {
    /// Starts building a store over `store`'s `namespace`.
    pub fn builder(
        store: Arc<dyn BindingStore>,
        namespace: Namespace,
    ) -> ThreadBindingStoreBuilder {
        ThreadBindingStoreBuilder {
            lifecycle: Lifecycle::builder(
                store,
                namespace,
                ThreadBindingCodec,
                // Used only by direct lifecycle callers: every backend acquisition names its
                // own identity's policy. Without an identity, a retired fence is never leased.
                Arc::new(|current: Option<&ThreadBindingRecord>, _| match current {
                    Some(record) if record.is_retired() => None,
                    Some(record) => Some(record.clone()),
                    None => Some(ThreadBindingRecord::cleared(None, false)),
                }),
            )
            .errors(default_error_texts()),
            texts: BackendTexts::default(),
        }
    }

    /// The default namespace settings: `max_entries` 50,000, reject-new (see
    /// `docs/harness-backend.md`, "Record, keys and capacity").
    pub fn namespace_config(namespace: Namespace) -> NamespaceConfig {
        NamespaceConfig::new(namespace).with_max_entries(DEFAULT_MAX_ENTRIES)
    }

    /// The lifecycle every write goes through.
    pub fn lifecycle(&self) -> &ThreadLifecycle {
        &self.lifecycle
    }

    /// The namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The backend texts.
    pub fn texts(&self) -> &BackendTexts {
        &self.texts
    }

    /// Reads the row of `identity` as stored (any generation). A present row that does not
    /// decode is [`Error::InvalidRow`].
    pub async fn record(
        &self,
        identity: &BindingIdentity,
    ) -> Result<Option<ThreadBindingRecord>, Error> {
        self.lifecycle.read(identity.key()).await
    }

    /// The binding of `identity`'s generation: the active binding of a row it owns. Reading
    /// never adopts a predecessor's binding.
    pub async fn read(&self, identity: &BindingIdentity) -> Result<Option<ThreadBinding>, Error> {
        Ok(self
            .record(identity)
            .await?
            .filter(|r| identity.owns(r.session_id.as_ref()))
            .and_then(|r| r.binding().cloned()))
    }

    async fn mutate<T, F>(
        &self,
        identity: &BindingIdentity,
        options: WriteOptions,
        mut decide: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnMut(Option<&ThreadBindingRecord>, bool) -> Applied<ThreadBindingRecord, T> + Send,
    {
        self.lifecycle
            .transact(
                identity.key(),
                TransactOptions {
                    assert_current: options.assert_current,
                    fail_if_held_here: options.fail_if_held_here,
                    ..TransactOptions::default()
                },
                |current, owned| Ok(decide(current, owned.is_some())),
            )
            .await
    }

    /// Binds `identity`'s generation to `binding` (a pinned write, see `docs/harness-backend.md`,
    /// "Thread-binding backend"). Refused (`false`)
    /// on a row of another generation, on the generation's own retired fence, and on an active
    /// supervision binding unless the new binding is the same supervision owner (same scope
    /// and thread).
    #[tracing::instrument(name = "thread_binding.set", skip_all, fields(key = %identity.key()))]
    pub async fn set(
        &self,
        identity: &BindingIdentity,
        binding: ThreadBinding,
        options: WriteOptions,
    ) -> Result<bool, Error> {
        self.write_binding(identity, binding, false, options).await
    }

    /// [`Self::set`] only when no active binding exists (set-if-absent). A cleared row of
    /// another generation still refuses: it must be reclaimed first.
    #[tracing::instrument(name = "thread_binding.set_if_absent", skip_all, fields(key = %identity.key()))]
    pub async fn set_if_absent(
        &self,
        identity: &BindingIdentity,
        binding: ThreadBinding,
        options: WriteOptions,
    ) -> Result<bool, Error> {
        self.write_binding(identity, binding, true, options).await
    }

    async fn write_binding(
        &self,
        identity: &BindingIdentity,
        binding: ThreadBinding,
        if_absent: bool,
        options: WriteOptions,
    ) -> Result<bool, Error> {
        self.mutate(identity, options, |current, _| {
            let task_import = match current {
                None => None,
                Some(record) => {
                    let refused = (if_absent && record.is_active())
                        || !identity.owns(record.session_id.as_ref())
                        || record.is_retired()
                        || record.binding().is_some_and(|b| {
                            b.is_supervision()
                                && !(binding.is_supervision() && binding.thread_id == b.thread_id)
                        });
                    if refused {
                        return Applied::keep(false);
                    }
                    record.task_import.clone()
                }
            };
            let next = ThreadBindingRecord {
                task_import,
                ..ThreadBindingRecord::active(binding.clone(), identity.session_id().cloned())
            };
            Applied::write(next, true)
        })
        .await
    }

    /// Changes the binding of `identity`'s generation, pinned to `pin` (a pinned write).
    /// `false` when the row is not active, belongs to another generation, or the
    /// pinned thread (or client) no longer matches. `patch` must be pure (it may run more than
    /// once); a change of the thread id is undone (a new thread is a new `set`).
    #[tracing::instrument(name = "thread_binding.patch", skip_all, fields(key = %identity.key()))]
    pub async fn patch<P>(
        &self,
        identity: &BindingIdentity,
        pin: &ThreadPin,
        patch: P,
        options: WriteOptions,
    ) -> Result<bool, Error>
    where
        P: Fn(&mut ThreadBinding) + Send + Sync,
    {
        self.mutate(identity, options, |current, _| {
            let Some(record) = current else {
                return Applied::keep(false);
            };
            let Some(binding) = record.binding() else {
                return Applied::keep(false);
            };
            if !identity.owns(record.session_id.as_ref()) || !pin.matches(binding) {
                return Applied::keep(false);
            }
            let mut patched = binding.clone();
            patch(&mut patched);
            patched.thread_id.clone_from(&binding.thread_id);
            let next = ThreadBindingRecord {
                state: super::record::BindingState::Active(patched),
                ..record.clone()
            };
            Applied::write(next, true)
        })
        .await
    }

    /// Clears the binding of `identity`'s generation (a pinned write), pinned to
    /// `pin` when given. `true` when nothing of this generation is bound afterwards (absent,
    /// already cleared, or its own retired fence, none of which writes); `false` on another
    /// generation's row, an active supervision binding, or a pin mismatch. Outside a lease the
    /// cleared row expires at once ([`CLEARED_TTL`]) unless it keeps a task import or legacy
    /// provenance (`conversation:legacy-*`).
    #[tracing::instrument(name = "thread_binding.clear", skip_all, fields(key = %identity.key()))]
    pub async fn clear(
        &self,
        identity: &BindingIdentity,
        pin: Option<&ThreadPin>,
        options: WriteOptions,
    ) -> Result<bool, Error> {
        self.mutate(identity, options, |current, in_lease| {
            let Some(record) = current else {
                return Applied::keep(true);
            };
            if !identity.owns(record.session_id.as_ref()) {
                return Applied::keep(false);
            }
            let Some(binding) = record.binding() else {
                return Applied::keep(true);
            };
            if binding.is_supervision() || pin.is_some_and(|p| !p.matches(binding)) {
                return Applied::keep(false);
            }
            let next = record.clone().into_cleared(false);
            let keep = in_lease || next.task_import.is_some() || identity.is_legacy_conversation();
            Applied::write(next, true).with_ttl((!keep).then_some(CLEARED_TTL))
        })
        .await
    }

    /// Transfers the active binding of `expected_previous` to `identity`'s generation
    /// (adoption, see `docs/generation.md`, "Adopt a verified predecessor before reclaiming"):
    /// `Absent` when nothing is active, `Current`
    /// when it already belongs to `identity`, `Conflict` when it belongs to anyone but the
    /// expected predecessor, else `Adopted`. Only the recorded predecessor can transfer, so a
    /// delayed admission can never move a binding back.
    ///
    /// `authority` is verified before the write and asserted at its commit admission.
    #[tracing::instrument(name = "thread_binding.adopt", skip_all, fields(key = %identity.key(), expected = %expected_previous))]
    pub async fn adopt(
        &self,
        identity: &BindingIdentity,
        expected_previous: &SessionId,
        authority: &BindingAuthority,
    ) -> Result<AdoptionResult, Error> {
        let Some(target) = identity.session_id().cloned() else {
            return Err(Error::invalid_argument(format!(
                "adoption requires a session identity: {}",
                identity.key()
            )));
        };
        authority.verify().await?;
        let options = WriteOptions::checked(authority.assert_current_fn());
        self.mutate(identity, options, |current, _| {
            let Some(record) = current.filter(|r| r.is_active()) else {
                return Applied::keep(AdoptionResult::Absent);
            };
            match &record.session_id {
                Some(owner) if *owner == target => Applied::keep(AdoptionResult::Current),
                Some(owner) if owner == expected_previous => {
                    let next = ThreadBindingRecord {
                        session_id: Some(target.clone()),
                        ..record.clone()
                    };
                    Applied::write(next, AdoptionResult::Adopted)
                }
                _ => Applied::keep(AdoptionResult::Conflict),
            }
        })
        .await
    }

    /// Resets or retires `identity`'s generation (see `docs/harness-backend.md`, "Reset, retire,
    /// delete").
    ///
    /// | row | result |
    /// |---|---|
    /// | absent | `Absent` (no tombstone without a binding) |
    /// | another generation's, or active supervision | `Conflict` |
    /// | own retired fence | retire: `Applied` (idempotent); reset: `Conflict` |
    /// | otherwise | cleared (retire adds the fence), owned lease kept |
    ///
    /// TTLs outside a lease: reset [`CLEARED_TTL`]; retire none for stable and conversation
    /// keys, [`PHYSICAL_RETIRE_TTL`] for physical keys; rows with a task import none. Inside a
    /// lease the release applies the same policy.
    #[tracing::instrument(name = "thread_binding.transition", skip_all, fields(key = %identity.key(), ?transition))]
    pub async fn transition_session_generation(
        &self,
        identity: &BindingIdentity,
        transition: GenerationTransition,
        options: WriteOptions,
    ) -> Result<TransitionOutcome, Error> {
        let retire = transition == GenerationTransition::Retire;
        let physical = identity.key().kind() == tether_core::BindingKeyKind::Physical;
        self.mutate(identity, options, |current, in_lease| {
            let Some(record) = current else {
                return Applied::keep(TransitionOutcome::Absent);
            };
            if !identity.owns(record.session_id.as_ref()) || record.is_supervision() {
                return Applied::keep(TransitionOutcome::Conflict);
            }
            if record.is_retired() {
                return Applied::keep(if retire {
                    TransitionOutcome::Applied
                } else {
                    TransitionOutcome::Conflict
                });
            }
            let next = ThreadBindingRecord {
                session_id: record
                    .session_id
                    .clone()
                    .or_else(|| identity.session_id().cloned()),
                ..record.clone().into_cleared(retire)
            };
            let ttl = if in_lease || next.task_import.is_some() {
                None
            } else if retire {
                physical.then_some(PHYSICAL_RETIRE_TTL)
            } else {
                Some(CLEARED_TTL)
            };
            Applied::write(next, TransitionOutcome::Applied).with_ttl(ttl)
        })
        .await
    }

    /// [`Self::transition_session_generation`] with [`GenerationTransition::Reset`].
    pub async fn reset(
        &self,
        identity: &BindingIdentity,
        options: WriteOptions,
    ) -> Result<TransitionOutcome, Error> {
        self.transition_session_generation(identity, GenerationTransition::Reset, options)
            .await
    }

    /// [`Self::transition_session_generation`] with [`GenerationTransition::Retire`].
    pub async fn retire(
        &self,
        identity: &BindingIdentity,
        options: WriteOptions,
    ) -> Result<TransitionOutcome, Error> {
        self.transition_session_generation(identity, GenerationTransition::Retire, options)
            .await
    }

    /// The reclaim plan of `identity` (see `docs/generation.md`, "Adopt a verified predecessor
    /// before reclaiming"):
    /// absent → resolved `true`; no owner → resolved unless retired; own row → verify the same
    /// id when it is a retired fence, else resolved `true`; another owner → verify it. An
    /// invalid row is an error.
    pub async fn prepare_reclaim(&self, identity: &BindingIdentity) -> Result<ReclaimPlan, Error> {
        let Some(record) = self.record(identity).await? else {
            return Ok(ReclaimPlan::Resolved(true));
        };
        Ok(match (&record.session_id, identity.session_id()) {
            (None, _) => ReclaimPlan::Resolved(!record.is_retired()),
            (Some(owner), Some(own)) if owner == own => {
                if record.is_retired() {
                    ReclaimPlan::Verify {
                        expected_previous: owner.clone(),
                    }
                } else {
                    ReclaimPlan::Resolved(true)
                }
            }
            (Some(owner), _) => ReclaimPlan::Verify {
                expected_previous: owner.clone(),
            },
        })
    }

    /// Reclaims the row for `identity`'s generation (a `reclaim` of `docs/harness-backend.md`):
    ///
    /// - not a stable session identity → `false`; absent → `true` (no write);
    /// - owned by this generation → `true` unless it is a retired fence. A retired fence of the
    ///   **same** id equal to `expected_previous` is repaired (cleared, not retired) only when
    ///   `authority` carries the host lineage proving this generation is current (the
    ///   authoritative host-store path); a caller-only authority never lifts it;
    /// - another generation's row → `false` unless it is exactly `expected_previous` and not an
    ///   active supervision binding; then it becomes a cleared row of this generation, keeping
    ///   an owned lease and the task import.
    ///
    /// `authority` is verified before the write and asserted at its commit admission.
    #[tracing::instrument(name = "thread_binding.reclaim", skip_all, fields(key = %identity.key(), expected = %expected_previous))]
    pub async fn reclaim_generation(
        &self,
        identity: &BindingIdentity,
        expected_previous: &SessionId,
        authority: &BindingAuthority,
    ) -> Result<bool, Error> {
        let Some(own) = identity
            .session_id()
            .cloned()
            .filter(|_| identity.is_stable())
        else {
            return Ok(false);
        };
        authority.verify().await?;
        let host_proves_same_id = authority.lineage().iter().any(|entry| {
            entry.session_id == own && identity.session_key() == Some(&entry.session_key)
        });
        let options = WriteOptions::checked(authority.assert_current_fn());
        self.mutate(identity, options, |current, _| {
            let Some(record) = current else {
                return Applied::keep(true);
            };
            let cleared_for_us = || ThreadBindingRecord {
                session_id: Some(own.clone()),
                ..record.clone().into_cleared(false)
            };
            if identity.owns(record.session_id.as_ref()) {
                let same_id_fence =
                    record.is_retired() && record.session_id.as_ref() == Some(expected_previous);
                if same_id_fence && host_proves_same_id {
                    return Applied::write(cleared_for_us(), true);
                }
                return Applied::keep(!record.is_retired());
            }
            if record.session_id.as_ref() != Some(expected_previous) || record.is_supervision() {
                return Applied::keep(false);
            }
            Applied::write(cleared_for_us(), true)
        })
        .await
    }

    /// Holds `identity`'s row lease while `run` executes, with the backend's lease policy
    /// ([`prepare_lease`]): the generation's own retired fence refuses the acquisition
    /// ("generation was retired") unless `allow_retired`.
    pub async fn with_lease<T, F, Fut>(
        &self,
        identity: &BindingIdentity,
        allow_retired: bool,
        assert_current: Option<AssertCurrent>,
        run: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(LeaseGuard) -> Fut + Send,
        Fut: Future<Output = Result<T, Error>> + Send,
    {
        let options = lease_options(identity, allow_retired, assert_current);
        self.lifecycle
            .with_lease(identity.key(), options, run)
            .await
    }

    /// [`Self::with_lease`] without waiting: when a live lease of another owner holds the row,
    /// the call fails at once with [`Error::LeaseTimeout`] (`is_busy()`) and `run` never
    /// starts (see [`Lifecycle::try_with_lease`]).
    pub async fn try_with_lease<T, F, Fut>(
        &self,
        identity: &BindingIdentity,
        allow_retired: bool,
        assert_current: Option<AssertCurrent>,
        run: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(LeaseGuard) -> Fut + Send,
        Fut: Future<Output = Result<T, Error>> + Send,
    {
        let options = lease_options(identity, allow_retired, assert_current);
        self.lifecycle
            .try_with_lease(identity.key(), options, run)
            .await
    }

    /// Reclaims and leases as **one** owner-boundary transition (see `docs/harness-backend.md`,
    /// "Reclaim and lease are one step"): the host
    /// generation is captured, the row lease is acquired, and only then — under that lease —
    /// the backend's generation is reclaimed through [`GenerationAuthority::reclaim_prepared`]
    /// (adopting a verified predecessor first, repairing a same-id fence only when the host
    /// row proves it). No concurrent lifecycle can take the recovered row between the reclaim
    /// and the lease. `run` receives the lease and the lineage authority to re-check after its
    /// waits. An unreclaimable row is the superseded error; `run` is then never called.
    #[tracing::instrument(name = "thread_binding.with_reclaimed_lease", skip_all, fields(key = %identity.key()))]
    pub async fn with_reclaimed_lease<T, F, Fut>(
        &self,
        identity: &BindingIdentity,
        generation: &GenerationAuthority,
        caller: &BindingAuthority,
        reclaim_stale: bool,
        run: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(LeaseGuard, BindingAuthority) -> Fut + Send,
        Fut: Future<Output = Result<T, Error>> + Send,
    {
        self.reclaimed_lease(identity, generation, caller, reclaim_stale, false, run)
            .await
    }

    /// Why a generation may not take its binding key: superseded, or — when the host names
    /// this generation — a row of an earlier generation than the recorded predecessor that no
    /// rule may adopt or clear (two changes without a turn, the last a transfer). Still
    /// [`Error::SupersededGeneration`], with a message that says what blocks and what frees it.
    async fn unreclaimed_error(
        &self,
        identity: &BindingIdentity,
        capture: &crate::generation::GenerationCapture,
    ) -> Error {
        let superseded = capture.superseded_error();
        if capture.state() != GenerationState::Current {
            return superseded;
        }
        let owner = match self.record(identity).await {
            Ok(record) => record.and_then(|r| r.session_id),
            Err(_) => None,
        };
        let (
            Some(owner),
            Error::SupersededGeneration {
                session_id,
                message,
            },
        ) = (owner, superseded)
        else {
            return capture.superseded_error();
        };
        let previous = capture
            .previous_session_id()
            .map_or_else(|| "none".to_owned(), ToString::to_string);
        Error::SupersededGeneration {
            message: format!(
                "{message} (the host names {session_id} current, but its binding belongs to \
                 generation {owner}, which is not its recorded predecessor {previous}: the \
                 session changed twice without a turn between, and whether {owner}'s native \
                 context continues is unknown; reset the session to start it afresh)"
            ),
            session_id,
        }
    }

    /// [`Self::with_reclaimed_lease`]; with `require_host_session`, a session key the host has
    /// no entry for (deleted, or never created) is refused as
    /// [`HostErrorKind::SessionNotFound`](tether_core::HostErrorKind::SessionNotFound)
    /// instead of authorizing as ephemeral.
    pub(crate) async fn reclaimed_lease<T, F, Fut>(
        &self,
        identity: &BindingIdentity,
        generation: &GenerationAuthority,
        caller: &BindingAuthority,
        reclaim_stale: bool,
        require_host_session: bool,
        run: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(LeaseGuard, BindingAuthority) -> Fut + Send,
        Fut: Future<Output = Result<T, Error>> + Send,
    {
        let Some(target) = identity.generation_target() else {
            let authority = caller.clone();
            return self
                .with_lease(identity, false, Some(caller.assert_current_fn()), |guard| {
                    run(guard, authority)
                })
                .await;
        };
        let capture = generation.capture(&target, caller).await?;
        if require_host_session
            && capture.state() == GenerationState::Ephemeral
            && let Some(key) = &target.session_key
        {
            return Err(Error::session_not_found(key));
        }
        let authority = capture.authority().clone();
        // Only a host row naming this generation may lease (and then repair) its own fence.
        let allow_retired = capture.state() == GenerationState::Current;
        let ops = super::generation::ThreadGenerationOps::new(self.clone(), identity.clone());
        let session_key = target.session_key.clone();
        let store = self.clone();
        self.with_lease(
            identity,
            allow_retired,
            Some(authority.assert_current_fn()),
            |guard| async move {
                if target.session_key.is_some() {
                    let reclaimed = generation
                        .reclaim_prepared(&capture, &ops, reclaim_stale)
                        .await?;
                    if !reclaimed {
                        return Err(store.unreclaimed_error(identity, &capture).await);
                    }
                }
                authority.verify().await?;
                run(guard, authority).await
            },
        )
        .await
        .map_err(|error| match (error, session_key) {
            // The binding key names the session only by a hash: say which host session's
            // turn waited for it (an operator looks sessions up by that key).
            (Error::LeaseTimeout { key, message }, Some(session)) if key == *identity.key() => {
                Error::LeaseTimeout {
                    message: format!("{message} (host session {session})"),
                    key,
                }
            }
            (error, _) => error,
        })
    }

    /// The backend's deletion (the first step of `with_session_deletion`, see
    /// `docs/deletion-and-reset.md`, "The harness side"): [`Lifecycle::with_deletion`] with the
    /// lease policy allowing the generation's own retired fence and the generation check of
    /// the record. A row of another generation vetoes the deletion only while it is active; a
    /// cleared (or retired) row of another generation holds no native thread and never vetoes
    /// (otherwise a predecessor's tombstone would make a rotated session undeletable). The key
    /// is leased even without a row ([`DeletionOptions::lease_absent_row`]), so no turn binds
    /// a first thread while the deletion runs.
    pub async fn with_session_deletion<T, F, Fut>(
        &self,
        identity: &BindingIdentity,
        assert_current: AssertCurrent,
        run: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(Option<ThreadBindingRecord>, DeletionMutation) -> Fut + Send,
        Fut: Future<Output = Result<T, Error>> + Send,
    {
        let check_identity = identity.clone();
        let texts = Arc::clone(&self.texts);
        let key = identity.key().clone();
        let options = DeletionOptions {
            assert_current,
            assert_record_current: Some(Arc::new(move |record: Option<&ThreadBindingRecord>| {
                match record {
                    Some(r) if r.is_active() && !check_identity.owns(r.session_id.as_ref()) => {
                        Err(texts.generation_changed(&key))
                    }
                    _ => Ok(()),
                }
            })),
            prepare_lease: Some(prepare_lease(identity, true)),
            // A session without a binding row is leased too: a turn that would bind its
            // first thread waits for the deletion, then finds its session gone.
            lease_absent_row: true,
        };
        self.lifecycle
            .with_deletion(identity.key(), options, run)
            .await
    }

    /// Whether a live row other than `except` holds an active binding of `thread_id` (the
    /// subscription of a thread that another row still owns must survive a deletion).
    pub async fn has_other_thread_owner(
        &self,
        except: &BindingKey,
        thread_id: &str,
    ) -> Result<bool, Error> {
        let codec = ThreadBindingCodec;
        let texts = ErrorTexts::default();
        let mut after: Option<BindingKey> = None;
        loop {
            let page = self
                .store
                .scan(&self.namespace, after.as_ref(), SCAN_PAGE)
                .await?;
            for (key, row) in &page {
                if key == except {
                    continue;
                }
                // An undecodable row cannot prove ownership; it is skipped, never trusted.
                let record = decode_row(&codec, &texts, key, Some(row)).ok().flatten();
                if record
                    .as_ref()
                    .and_then(ThreadBindingRecord::binding)
                    .is_some_and(|b| b.thread_id == thread_id)
                {
                    return Ok(true);
                }
            }
            if page.len() < SCAN_PAGE {
                return Ok(false);
            }
            after = page.last().map(|(key, _)| key.clone());
        }
    }

    /// Sheds up to `limit` **disposable** rows: cleared, not retired, without a live lease, a
    /// task import or legacy provenance (there is no store-level eviction; only rows that carry
    /// nothing are shed, by the backend that knows what they mean — see
    /// `docs/harness-backend.md`, "Record, keys and capacity"). Each row is deleted only
    /// if it is still exactly the row that was judged disposable (same revision, no live lease
    /// at the delete). Returns how many rows were removed.
    #[tracing::instrument(name = "thread_binding.shed_disposable", skip(self))]
    pub async fn shed_disposable(&self, limit: usize) -> Result<usize, Error> {
        let codec = ThreadBindingCodec;
        let texts = ErrorTexts::default();
        let mut shed = 0;
        let mut after: Option<BindingKey> = None;
        while shed < limit {
            let page = self
                .store
                .scan(&self.namespace, after.as_ref(), SCAN_PAGE)
                .await?;
            for (key, row) in &page {
                if shed >= limit {
                    break;
                }
                let now = self.clock.now();
                let Ok(Some(record)) = decode_row(&codec, &texts, key, Some(row)) else {
                    continue;
                };
                let legacy = key.as_str().starts_with("conversation:legacy-");
                let disposable = !record.is_active()
                    && !record.is_retired()
                    && record.task_import.is_none()
                    && !legacy
                    && row.live_lease(now).is_none();
                if !disposable {
                    continue;
                }
                let revision = row.revision;
                let clock = Arc::clone(&self.clock);
                let unchanged = move |current: &tether_core::StoredRow| {
                    current.revision == revision && current.live_lease(clock.now()).is_none()
                };
                if self
                    .store
                    .delete_if(&self.namespace, key, &unchanged)
                    .await?
                    .is_some()
                {
                    shed += 1;
                }
            }
            if page.len() < SCAN_PAGE {
                break;
            }
            after = page.last().map(|(key, _)| key.clone());
        }
        Ok(shed)
    }

    /// The TTL this backend gives a retired physical fence (for operators and tests).
    pub fn physical_retire_ttl(&self) -> Duration {
        PHYSICAL_RETIRE_TTL
    }
}

/// The options of the thread-binding lease of `identity`: the backend's lease policy
/// ([`prepare_lease`]) and the caller's assertion.
fn lease_options(
    identity: &BindingIdentity,
    allow_retired: bool,
    assert_current: Option<AssertCurrent>,
) -> LeaseOptions<ThreadBindingRecord> {
    LeaseOptions {
        assert_current,
        prepare_lease: Some(prepare_lease(identity, allow_retired)),
        ..LeaseOptions::default()
    }
}
