//! The lifecycle instance: construction, `transact`, `with_lease`, release, blocking and the
//! mutation fences (the contract: `docs/lifecycle.md`).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tether_core::{
    AssertCurrent, BindingKey, BindingStore, Clock, Error, ErrorTexts, LeaseConfig, LeaseEpoch,
    LeaseToken, LeaseWrite, Namespace, Observation, QuarantineStore, RecordCodec, RowWrite,
    SystemClock, Timestamp, TokenSource, decode_row,
};
use tokio::sync::watch;
use tracing::Instrument;

use super::batch::BatchRenewal;
use super::owner::{LeaseAssertion, LeaseGuard, OwnerPhase, OwnerState};
use super::scope;
use super::shared::{CasResult, Decision, FenceCounts, ReleaseFailureHook, Shared};
use super::timer::{Timer, TokioTimer};

/// The backend's lease policy: given the current record (or `None` when absent) and the lease
/// about to be written, the record to write with it, or `None` to refuse the acquisition.
pub type PrepareLease<R> = Arc<dyn Fn(Option<&R>, &LeaseWrite) -> Option<R> + Send + Sync>;

/// The backend's TTL for a record written back at release (`None`: namespace default).
pub type ReleaseTtl<R> = Arc<dyn Fn(&BindingKey, &R) -> Option<Duration> + Send + Sync>;

/// What a `transact` step decided: the record to write (or none) and the caller's result.
#[derive(Debug, Clone)]
pub struct Applied<R, T> {
    /// The record to write; `None` writes nothing.
    pub next: Option<R>,
    /// The row TTL of the write (`None`: namespace default).
    pub ttl: Option<Duration>,
    /// The caller's result.
    pub result: T,
}

impl<R, T> Applied<R, T> {
    /// Write `next`, returning `result`.
    pub fn write(next: R, result: T) -> Self {
        Self {
            next: Some(next),
            ttl: None,
            result,
        }
    }

    /// Write nothing, returning `result`.
    pub fn keep(result: T) -> Self {
        Self {
            next: None,
            ttl: None,
            result,
        }
    }

    /// Sets the row TTL of the write.
    #[must_use]
    pub fn with_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.ttl = ttl;
        self
    }
}

/// Options of [`Lifecycle::transact`].
#[derive(Clone, Default)]
pub struct TransactOptions {
    /// The caller's authority, checked before the update and at commit admission.
    pub assert_current: Option<AssertCurrent>,
    /// How long this call may wait behind a live foreign lease; `None` uses the lifecycle's
    /// [`LeaseConfig::wait_budget`](tether_core::LeaseConfig). Zero fails at once when busy.
    pub wait_budget: Option<Duration>,
    /// Outside every `with_lease` scope, refuse at once with [`Error::HeldOutsideScope`] when
    /// this lifecycle instance itself holds `key` under a live lease, instead of waiting like
    /// a peer. For work spawned from inside a scope, which would otherwise wait for its own
    /// parent until the wait budget ran out.
    pub fail_if_held_here: bool,
}

impl TransactOptions {
    /// Sets [`TransactOptions::fail_if_held_here`].
    #[must_use]
    pub fn failing_if_held_here(mut self) -> Self {
        self.fail_if_held_here = true;
        self
    }

    /// This call's wait budget (see [`TransactOptions::wait_budget`]).
    #[must_use]
    pub fn with_wait_budget(mut self, budget: Duration) -> Self {
        self.wait_budget = Some(budget);
        self
    }
}

impl fmt::Debug for TransactOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransactOptions")
            .field("assert_current", &self.assert_current.is_some())
            .field("wait_budget", &self.wait_budget)
            .field("fail_if_held_here", &self.fail_if_held_here)
            .finish()
    }
}

/// Options of [`Lifecycle::with_lease`].
pub struct LeaseOptions<R> {
    /// The acquirer's authority: checked before and after acquisition, at every admission of
    /// the owner's writes and renewals, and after the callback. Never used by release.
    pub assert_current: Option<AssertCurrent>,
    /// Overrides the lifecycle's lease policy for this acquisition (for example a deletion
    /// allowed to lease a retired row).
    pub prepare_lease: Option<PrepareLease<R>>,
    /// How long this acquisition may wait behind a live foreign lease; `None` uses the
    /// lifecycle's [`LeaseConfig::wait_budget`](tether_core::LeaseConfig). Zero fails at once
    /// when busy (see [`Lifecycle::try_with_lease`]).
    pub wait_budget: Option<Duration>,
}

impl<R> LeaseOptions<R> {
    /// This acquisition's wait budget (see [`LeaseOptions::wait_budget`]).
    #[must_use]
    pub fn with_wait_budget(mut self, budget: Duration) -> Self {
        self.wait_budget = Some(budget);
        self
    }
}

impl<R> Default for LeaseOptions<R> {
    fn default() -> Self {
        Self {
            assert_current: None,
            prepare_lease: None,
            wait_budget: None,
        }
    }
}

impl<R> Clone for LeaseOptions<R> {
    fn clone(&self) -> Self {
        Self {
            assert_current: self.assert_current.clone(),
            prepare_lease: self.prepare_lease.clone(),
            wait_budget: self.wait_budget,
        }
    }
}

impl<R> fmt::Debug for LeaseOptions<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseOptions")
            .field("assert_current", &self.assert_current.is_some())
            .field("prepare_lease", &self.prepare_lease.is_some())
            .field("wait_budget", &self.wait_budget)
            .finish()
    }
}

/// Fresh random lease tokens (UUID v4).
#[derive(Debug, Clone, Copy, Default)]
pub struct UuidTokens;

impl TokenSource for UuidTokens {
    fn next_token(&self) -> LeaseToken {
        LeaseToken::new(uuid::Uuid::new_v4().to_string())
            .unwrap_or_else(|_| unreachable!("a UUID is a valid token"))
    }
}

static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

/// Builds a [`Lifecycle`]. Required: the store, the namespace, the codec and the lease policy;
/// everything else has defaults (lease 65 s, wait 70 s, retry 1 s, renew every lease/3, the
/// default error texts, the system clock, UUID tokens, tokio timers, no release TTL).
pub struct LifecycleBuilder<C: RecordCodec> {
    store: Arc<dyn BindingStore>,
    namespace: Namespace,
    codec: Arc<C>,
    prepare_lease: PrepareLease<C::Record>,
    release_ttl: Option<ReleaseTtl<C::Record>>,
    texts: ErrorTexts,
    lease: LeaseConfig,
    clock: Arc<dyn Clock>,
    tokens: Arc<dyn TokenSource>,
    timer: Arc<dyn Timer>,
    quarantine: Option<Arc<dyn QuarantineStore>>,
    holder: Option<String>,
    on_release_failure: Option<ReleaseFailureHook>,
    batched_heartbeats: bool,
}

impl<C: RecordCodec> fmt::Debug for LifecycleBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LifecycleBuilder")
            .field("namespace", &self.namespace)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl<C: RecordCodec + 'static> LifecycleBuilder<C> {
    /// Sets the backend's error texts.
    #[must_use]
    pub fn errors(mut self, texts: ErrorTexts) -> Self {
        self.texts = texts;
        self
    }

    /// Sets the lease timing.
    #[must_use]
    pub fn lease_config(mut self, lease: LeaseConfig) -> Self {
        self.lease = lease;
        self
    }

    /// Sets the clock.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the token source.
    #[must_use]
    pub fn tokens(mut self, tokens: Arc<dyn TokenSource>) -> Self {
        self.tokens = tokens;
        self
    }

    /// Sets the timer used for busy retries and heartbeats.
    #[must_use]
    pub fn timer(mut self, timer: Arc<dyn Timer>) -> Self {
        self.timer = timer;
        self
    }

    /// Sets the release TTL policy.
    #[must_use]
    pub fn release_ttl(mut self, release_ttl: ReleaseTtl<C::Record>) -> Self {
        self.release_ttl = Some(release_ttl);
        self
    }

    /// Records blocked keys durably and refuses keys quarantined there (see `docs/lifecycle.md`,
    /// "Settlement hooks and blocked keys").
    #[must_use]
    pub fn quarantine(mut self, quarantine: Arc<dyn QuarantineStore>) -> Self {
        self.quarantine = Some(quarantine);
        self
    }

    /// Sets the holder label written with every lease (for operators). It follows the label
    /// rule of [`tether_core::text`] (1–256 bytes, no control or invisible formatting character,
    /// no surrounding whitespace); [`build`](Self::build) refuses one that does not.
    #[must_use]
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// Sets the release failure callback (release failures are always swallowed).
    #[must_use]
    pub fn on_release_failure(mut self, hook: ReleaseFailureHook) -> Self {
        self.on_release_failure = Some(hook);
        self
    }

    /// Batches heartbeats (see `docs/lifecycle.md`, "Batched heartbeats"): instead of one renewal
    /// per lease, one driver task renews every lease this instance holds each renew interval
    /// through [`BindingStore::renew_leases`](tether_core::BindingStore::renew_leases) (one
    /// transaction per batch on SQL stores). For processes holding many leases. Owner semantics are
    /// unchanged: a lease missing at renewal, or a failed batch, is a lost lease (sticky). Requires
    /// a tokio runtime (the driver is a spawned task).
    #[must_use]
    pub fn batched_heartbeats(mut self, yes: bool) -> Self {
        self.batched_heartbeats = yes;
        self
    }

    /// Builds the lifecycle, checking the lease timing ([`Error::InvalidArgument`] when it
    /// cannot work: see [`LeaseConfig::validate`]) and the holder label.
    pub fn build(self) -> Result<Lifecycle<C>, Error> {
        self.lease.validate().map_err(|reason| {
            Error::invalid_argument(format!("invalid lifecycle lease configuration: {reason}"))
        })?;
        if let Some(holder) = &self.holder {
            // Refused here, not at the first acquisition of every key.
            tether_core::text::check_label("lease holder label", holder)?;
        }
        let shared = Shared {
            id: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            store: self.store,
            namespace: self.namespace,
            texts: self.texts,
            lease: self.lease,
            clock: self.clock,
            tokens: self.tokens,
            timer: self.timer,
            quarantine: self.quarantine,
            holder: self.holder,
            on_release_failure: self.on_release_failure,
            unresolved: Mutex::new(HashMap::new()),
            fence: watch::channel(FenceCounts::default()).0,
            exclusive_turn: tokio::sync::Mutex::new(()),
            batch: self.batched_heartbeats.then(BatchRenewal::default),
            live_owners: Mutex::new(HashMap::new()),
            free_rows: Mutex::new(HashMap::new()),
        };
        Ok(Lifecycle {
            shared: Arc::new(shared),
            codec: self.codec,
            prepare_lease: self.prepare_lease,
            release_ttl: self.release_ttl,
        })
    }
}

/// The native-session binding lifecycle over one store namespace (the contract:
/// `docs/lifecycle.md`).
///
/// Cloning shares the instance (its blocked keys, fences and owners). Two instances over the
/// same store behave like two processes: they see each other only through the rows.
pub struct Lifecycle<C: RecordCodec> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) codec: Arc<C>,
    prepare_lease: PrepareLease<C::Record>,
    release_ttl: Option<ReleaseTtl<C::Record>>,
}

/// Ends a lease scope whose future was dropped before it ended (see
/// [`Lifecycle::with_lease`]): the release runs on a task of its own on the current runtime.
/// Disarmed (`lifecycle: None`) once the scope ends normally; it borrows, and clones what the
/// task needs only when it fires.
struct ScopeEndOnDrop<'a, C: RecordCodec + 'static> {
    lifecycle: Option<&'a Lifecycle<C>>,
    key: &'a BindingKey,
    owner: &'a Arc<OwnerState>,
}

impl<C: RecordCodec + 'static> Drop for ScopeEndOnDrop<'_, C> {
    fn drop(&mut self) {
        let Some(lifecycle) = self.lifecycle.take() else {
            return;
        };
        let (lifecycle, key, owner) = (lifecycle.clone(), self.key.clone(), self.owner.clone());
        tracing::info!(key = %key, token = owner.token.prefix(), "lease scope dropped before it ended; releasing its lease");
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { lifecycle.end_scope(&key, &owner).await });
            }
            Err(_) => {
                tracing::warn!(key = %key, "lease scope dropped outside a runtime; the lease will expire");
            }
        }
    }
}

impl<C: RecordCodec> Clone for Lifecycle<C> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            codec: self.codec.clone(),
            prepare_lease: self.prepare_lease.clone(),
            release_ttl: self.release_ttl.clone(),
        }
    }
}

impl<C: RecordCodec> fmt::Debug for Lifecycle<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lifecycle")
            .field("shared", &self.shared)
            .field("codec", &self.codec)
            .finish_non_exhaustive()
    }
}

/// The internal apply step: current record, owned token, and the lease being acquired.
pub(crate) type ApplyStep<'a, R, T> = dyn FnMut(Option<&R>, Option<&LeaseToken>, Option<&LeaseWrite>) -> Result<Applied<R, T>, Error>
    + Send
    + 'a;

/// A plain write's decision: `apply(current, owned_token)`.
type WriteStep<'a, R, T> =
    dyn FnMut(Option<&R>, Option<&LeaseToken>) -> Result<Applied<R, T>, Error> + Send + 'a;

impl<C: RecordCodec + 'static> Lifecycle<C> {
    /// Starts building a lifecycle over `store`'s `namespace` (which must be registered with
    /// the store), decoding rows with `codec`, acquiring with `prepare_lease`.
    pub fn builder(
        store: Arc<dyn BindingStore>,
        namespace: Namespace,
        codec: C,
        prepare_lease: PrepareLease<C::Record>,
    ) -> LifecycleBuilder<C> {
        LifecycleBuilder {
            store,
            namespace,
            codec: Arc::new(codec),
            prepare_lease,
            release_ttl: None,
            texts: ErrorTexts::default(),
            lease: LeaseConfig::default(),
            clock: Arc::new(SystemClock),
            tokens: Arc::new(UuidTokens),
            timer: Arc::new(TokioTimer),
            quarantine: None,
            holder: None,
            on_release_failure: None,
            batched_heartbeats: false,
        }
    }

    /// The store namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.shared.namespace
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn BindingStore> {
        &self.shared.store
    }

    /// The clock deciding lease expiry.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    /// The error texts.
    pub fn errors(&self) -> &ErrorTexts {
        &self.shared.texts
    }

    /// The lease timing.
    pub fn lease_config(&self) -> &LeaseConfig {
        &self.shared.lease
    }

    /// The codec.
    pub fn codec(&self) -> &C {
        &self.codec
    }

    /// Reads and decodes `key` (absent stays absent; a present row that fails to decode is
    /// [`Error::InvalidRow`]).
    pub async fn read(&self, key: &BindingKey) -> Result<Option<C::Record>, Error> {
        let row = self
            .shared
            .store
            .lookup(&self.shared.namespace, key)
            .await?;
        decode_row(&*self.codec, &self.shared.texts, key, row.as_ref())
    }

    /// Whether the current task holds `key` in a `with_lease` scope of this instance.
    pub fn has_lease(&self, key: &BindingKey) -> bool {
        scope::current_owner(self.shared.id, key).is_some()
    }

    /// The handle of the current task's owner of `key`, if any.
    pub fn owner(&self, key: &BindingKey) -> Option<LeaseGuard> {
        scope::current_owner(self.shared.id, key).map(|o| LeaseGuard::new(o, self.shared.clone()))
    }

    /// Fails with the stored error when `key` is blocked by an unknown settlement.
    pub fn assert_settled(&self, key: &BindingKey) -> Result<(), Error> {
        self.shared.assert_settled(key)
    }

    /// Whether `key` is blocked in this instance.
    pub fn is_blocked(&self, key: &BindingKey) -> bool {
        self.shared.assert_settled(key).is_err()
    }

    /// Blocks `key` without an owner (see `docs/lifecycle.md`, "Settlement hooks and blocked
    /// keys"): every entry point and
    /// every compare-and-swap admission of this instance refuses it with `error` from now on,
    /// and the key is quarantined durably when a quarantine store is configured. The
    /// in-process block is in force when this returns; an error reports only the durable
    /// record.
    pub async fn block(
        &self,
        key: &BindingKey,
        error: Error,
        custody: Option<String>,
    ) -> Result<(), Error> {
        self.shared.block_key(key, error, custody).await
    }

    /// Lifts the in-process block of `key`, after an operator checked the row and released its
    /// quarantine. Returns whether the key was blocked.
    pub fn unblock(&self, key: &BindingKey) -> bool {
        self.shared
            .unresolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
            .is_some()
    }

    /// A synchronous check of the current task's owner of `key` (see `docs/lifecycle.md`, "Lease
    /// assertions"). Fails at
    /// once with a lost lease when there is no held owner in scope.
    pub fn capture_lease_assertion(&self, key: &BindingKey) -> Result<LeaseAssertion, Error> {
        match self.owner(key) {
            Some(guard) => guard.capture_lease_assertion(),
            None => Err(self.shared.lost(key)),
        }
    }

    /// Reads, decides and conditionally writes `key` (see `docs/lifecycle.md`, "`transact`").
    ///
    /// `apply(current, owned_token)` must be pure: it re-runs on every conflict. It never
    /// writes over a live foreign lease: while another owner holds the key the call waits,
    /// retrying every retry interval until the wait budget is spent ([`Error::LeaseTimeout`];
    /// [`TransactOptions::wait_budget`] sets it per call). Inside a `with_lease` scope for
    /// `key`, the write keeps the owner's lease and happens only while that exact lease is live
    /// on the row; otherwise the owner's lease is lost (sticky). Outside every scope the call
    /// waits like any peer, also behind an owner of this same instance in another task (a
    /// task spawned inside `with_lease` does not inherit the scope: it writes with
    /// [`Lifecycle::transact_under`], runs in [`LeaseGuard::in_scope`], or sets
    /// [`TransactOptions::fail_if_held_here`] to be refused at once with
    /// [`Error::HeldOutsideScope`]). A store error is returned as is and never replayed.
    pub async fn transact<T, F>(
        &self,
        key: &BindingKey,
        options: TransactOptions,
        mut apply: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnMut(Option<&C::Record>, Option<&LeaseToken>) -> Result<Applied<C::Record, T>, Error>
            + Send,
    {
        let span = tracing::debug_span!("lifecycle.transact", key = %key);
        async move {
            self.shared.assert_durably_settled(key).await?;
            let owner = scope::current_owner(self.shared.id, key);
            if owner.is_none() && options.fail_if_held_here {
                self.shared.refuse_own_live_lease(key)?;
            }
            self.write_as(key, owner, options, &mut apply).await
        }
        .instrument(span)
        .await
    }

    /// Like [`transact`](Self::transact) under the lease `guard` holds, from any task: the
    /// write keeps that owner's lease and happens only while its exact lease is live on the
    /// row (a lost lease is sticky on the owner, as inside the scope). `guard` must come from
    /// this lifecycle instance and its scope must still be open.
    pub async fn transact_under<T, F>(
        &self,
        guard: &LeaseGuard,
        options: TransactOptions,
        mut apply: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnMut(Option<&C::Record>, Option<&LeaseToken>) -> Result<Applied<C::Record, T>, Error>
            + Send,
    {
        let key = guard.key().clone();
        let span = tracing::debug_span!("lifecycle.transact_under", key = %key, token = guard.token().prefix());
        async move {
            if !Arc::ptr_eq(&guard.shared, &self.shared) {
                return Err(Error::invalid_argument(format!(
                    "the lease guard of {key} belongs to another lifecycle instance; write through the lifecycle that acquired it"
                )));
            }
            self.shared.assert_durably_settled(&key).await?;
            self.write_as(&key, Some(guard.owner.clone()), options, &mut apply)
                .await
        }
        .instrument(span)
        .await
    }

    /// One plain write (no acquisition) as `owner`, or as no owner.
    async fn write_as<T: Send>(
        &self,
        key: &BindingKey,
        owner: Option<Arc<OwnerState>>,
        options: TransactOptions,
        apply: &mut WriteStep<'_, C::Record, T>,
    ) -> Result<T, Error> {
        let (result, _) = self
            .transact_as(
                key,
                options.assert_current,
                owner,
                None,
                options.wait_budget,
                &mut |current, token, _| apply(current, token),
            )
            .await?;
        Ok(result)
    }

    /// The transact loop shared by `transact` and acquisition.
    async fn transact_as<T: Send>(
        &self,
        key: &BindingKey,
        caller: Option<AssertCurrent>,
        owner: Option<Arc<OwnerState>>,
        acquire: Option<&Arc<OwnerState>>,
        wait_budget: Option<Duration>,
        apply: &mut ApplyStep<'_, C::Record, T>,
    ) -> Result<(T, Option<LeaseEpoch>), Error> {
        let shared = &*self.shared;
        let deadline = shared.clock.now() + wait_budget.unwrap_or(shared.lease.wait_budget);
        // The live lease of another owner this call waits behind (holder, expiry), for the
        // log line when the wait starts and the error when it runs out.
        let mut blocker: Option<(Option<String>, Timestamp)> = None;
        let mut waiting_logged = false;
        loop {
            let assert_owner_current = || -> Result<(), Error> {
                if let Some(caller) = &caller {
                    caller()?;
                }
                shared.assert_settled(key)?;
                if let Some(owner) = &owner {
                    owner.assert_held(shared)?;
                    if let Some(assert) = &owner.assert_current {
                        assert()?;
                    }
                }
                Ok(())
            };
            assert_owner_current()?;
            let owned = owner.as_ref().map(|o| o.token.clone());
            let mut decide = |observation: &Observation| -> Result<Decision<T>, Error> {
                let now = shared.clock.now();
                let row = observation.row.as_ref();
                let record = decode_row(&*self.codec, &shared.texts, key, row)?;
                let lease = row.and_then(|r| r.lease.as_ref());
                if let Some(token) = &owned {
                    match lease {
                        Some(l) if &l.token == token && l.is_live(now) => {}
                        _ => return Ok(Decision::LeaseLost),
                    }
                } else if let Some(l) = lease.filter(|l| l.is_live(now)) {
                    blocker = Some((l.holder.clone(), l.expires_at));
                    return Ok(Decision::Busy);
                }
                let acquiring = acquire.map(|acquirer| LeaseWrite {
                    token: acquirer.token.clone(),
                    expires_at: now + shared.lease.lease_duration,
                    holder: shared.holder.clone(),
                });
                let applied = apply(record.as_ref(), owned.as_ref(), acquiring.as_ref())?;
                let Some(next) = applied.next else {
                    return Ok(Decision::Keep(applied.result));
                };
                let (lease_write, owned_expiry) = match (&acquiring, &owned, lease) {
                    (Some(fresh), _, _) => (Some(fresh.clone()), None),
                    (None, Some(_), Some(l)) => (
                        Some(LeaseWrite {
                            token: l.token.clone(),
                            expires_at: l.expires_at,
                            holder: l.holder.clone(),
                        }),
                        Some(l.expires_at),
                    ),
                    _ => (None, None),
                };
                Ok(Decision::Write {
                    row: RowWrite {
                        value: self.codec.encode(&next),
                        lease: lease_write,
                    },
                    ttl: applied.ttl,
                    result: applied.result,
                    owned_expiry,
                    fresh_expiry: acquiring.map(|l| l.expires_at),
                })
            };
            let outcome = shared
                .cas_update(
                    key,
                    &assert_owner_current,
                    owner.as_ref(),
                    owner.as_ref().or(acquire),
                    &mut decide,
                )
                .await;
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(error) => {
                    if error.is_outcome_unknown() {
                        // The write (an acquisition, or a write under a lease) may stand or
                        // not: the owner stops, and the key is quarantined.
                        if let Some(owner) = &owner {
                            owner.fail(error.clone());
                        }
                        shared.block_unknown_write(key, &error).await;
                    }
                    return Err(error);
                }
            };
            match outcome {
                CasResult::Done { result, epoch, .. } => return Ok((result, epoch)),
                CasResult::LeaseLost => {
                    let error = shared.lost(key);
                    if let Some(owner) = &owner {
                        owner.lose(error.clone());
                        return Err(owner.failure_or_lost(shared));
                    }
                    return Err(error);
                }
                CasResult::Busy => {
                    let now = shared.clock.now();
                    let (holder, expires_at) = blocker
                        .as_ref()
                        .map_or((None, now), |(holder, at)| (holder.as_deref(), *at));
                    let holder = holder.unwrap_or("an unnamed holder");
                    let expires_in_ms = expires_at
                        .as_millis()
                        .saturating_sub(now.as_millis())
                        .max(0);
                    if now >= deadline {
                        // This instance's own label on a lease it does not own: another
                        // lifecycle instance with the same label (usually of this very
                        // process) holds it.
                        let own_label = shared.holder.as_deref() == Some(holder);
                        let hint = if !own_label {
                            ""
                        } else if shared.holds_live_lease(key) {
                            // This instance holds it, in a scope this call is not part of.
                            ": this lifecycle's own live lease, held in a `with_lease` scope \
                             this call runs outside of (a spawned task does not inherit it): \
                             write with `transact_under(&guard, …)` or inside the scope"
                        } else {
                            ": this owner's own holder label, on a lease another lifecycle \
                             instance holds (two instances over one namespace with one label, \
                             often in one process, are two owners; share one)"
                        };
                        return Err(match shared.texts.lease_timeout(key) {
                            Error::LeaseTimeout { key, message } => Error::LeaseTimeout {
                                message: format!(
                                    "{message} (held by {holder}{hint}; its lease runs {expires_in_ms} ms more)"
                                ),
                                key,
                            },
                            other => other,
                        });
                    }
                    if !waiting_logged {
                        // Once per call: a wait of up to the budget is otherwise silent.
                        waiting_logged = true;
                        tracing::info!(
                            key = %key,
                            holder,
                            expires_in_ms,
                            wait_ms = deadline.as_millis().saturating_sub(now.as_millis()).max(0),
                            "waiting behind another owner's live lease"
                        );
                    }
                    tracing::trace!(key = %key, "binding busy; retrying");
                    shared.timer.sleep(shared.lease.retry_interval).await;
                }
            }
        }
    }

    /// Holds `key`'s lease while `run` executes (see `docs/lifecycle.md`, "`with_lease`").
    ///
    /// - Re-entrant: inside a scope of this instance that already holds `key`, `run` gets the
    ///   same owner (no new token, no extra heartbeat). Other keys nest.
    /// - Acquisition writes `prepare_lease(current, lease)` with a fresh exact token, waiting
    ///   behind a live foreign lease up to the wait budget; a refusal is
    ///   [`Error::AcquisitionRejected`]. The store's lease epoch becomes the owner's fencing
    ///   token ([`LeaseGuard::epoch`]).
    /// - A heartbeat renews every renew interval, single-flight, without ever cancelling `run`;
    ///   a lost lease is sticky and reported at the next lease operation, at `quiesce`, or
    ///   here at scope exit, even when `run` swallowed an earlier error. `run`'s own error
    ///   wins over lease errors.
    /// - At exit the pending renewal is joined, then the exact token is released (never a
    ///   successor's), without the caller's authority; release failures go to the release
    ///   failure callback. An owner blocked with an unknown outcome is not released.
    ///
    /// If the returned future is dropped mid-way (a timeout around it, a caller that went
    /// away), `run` stops where it was and the scope still ends: its heartbeat stops and the
    /// exact token is released on a task of its own on the current runtime (outside a runtime
    /// the lease is left to expire).
    pub async fn with_lease<T, F, Fut>(
        &self,
        key: &BindingKey,
        options: LeaseOptions<C::Record>,
        run: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(LeaseGuard) -> Fut + Send,
        Fut: Future<Output = Result<T, Error>> + Send,
    {
        let span = tracing::debug_span!("lifecycle.with_lease", key = %key, token = tracing::field::Empty, epoch = tracing::field::Empty);
        self.with_lease_inner(key, options, run)
            .instrument(span)
            .await
    }

    async fn with_lease_inner<T, F, Fut>(
        &self,
        key: &BindingKey,
        options: LeaseOptions<C::Record>,
        run: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(LeaseGuard) -> Fut + Send,
        Fut: Future<Output = Result<T, Error>> + Send,
    {
        let shared = &self.shared;
        shared.assert_durably_settled(key).await?;
        if let Some(assert) = &options.assert_current {
            assert()?;
        }
        if let Some(owner) = scope::current_owner(shared.id, key) {
            owner.assert_held(shared)?;
            let value = run(LeaseGuard::new(owner.clone(), shared.clone())).await?;
            if let Some(assert) = &options.assert_current {
                assert()?;
            }
            if let Some(failure) = owner.failure() {
                return Err(failure);
            }
            return Ok(value);
        }
        let token = shared.tokens.next_token();
        tracing::Span::current().record("token", token.prefix());
        let owner = Arc::new(OwnerState::new(
            key.clone(),
            token,
            options.assert_current.clone(),
        ));
        // A caller that stops waiting (a timeout, a disconnected client) drops this future
        // mid-scope: the scope's end then runs on a task of its own instead of leaving the key
        // held until the lease expires.
        let mut on_drop = ScopeEndOnDrop {
            lifecycle: Some(self),
            key,
            owner: &owner,
        };
        // Boxed: the callback's future can be large, and scopes nest.
        let result = Box::pin(self.hold(key, &options, &owner, run)).await;
        on_drop.lifecycle = None;
        self.end_scope(key, &owner).await;
        result
    }

    /// The end of a scope (see `docs/lifecycle.md`, "`with_lease`", step 7): closed unless its
    /// outcome is unknown, its renewal joined, then the exact token released (an unknown
    /// outcome leaves the lease to expire).
    async fn end_scope(&self, key: &BindingKey, owner: &Arc<OwnerState>) {
        let unknown = owner.phase() == OwnerPhase::Unknown;
        if !unknown {
            owner.set_phase(OwnerPhase::Closed);
        }
        owner.join_renewal().await;
        self.shared.forget_live_owner(owner);
        if !unknown {
            self.release(key, owner).await;
        }
    }

    /// [`with_lease`](Self::with_lease) without waiting: when a live foreign lease holds `key`
    /// the call fails at once with [`Error::LeaseTimeout`] (`is_busy()`), and `run` never
    /// starts. Any other [`LeaseOptions::wait_budget`] in `options` is replaced by zero.
    pub async fn try_with_lease<T, F, Fut>(
        &self,
        key: &BindingKey,
        options: LeaseOptions<C::Record>,
        run: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(LeaseGuard) -> Fut + Send,
        Fut: Future<Output = Result<T, Error>> + Send,
    {
        self.with_lease(key, options.with_wait_budget(Duration::ZERO), run)
            .await
    }

    /// Acquire, heartbeat and run (everything `with_lease` does before its `finally`).
    async fn hold<T, F, Fut>(
        &self,
        key: &BindingKey,
        options: &LeaseOptions<C::Record>,
        owner: &Arc<OwnerState>,
        run: F,
    ) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(LeaseGuard) -> Fut + Send,
        Fut: Future<Output = Result<T, Error>> + Send,
    {
        let shared = &self.shared;
        let prepare = options
            .prepare_lease
            .clone()
            .unwrap_or_else(|| self.prepare_lease.clone());
        let (written, epoch) = self
            .transact_as(
                key,
                options.assert_current.clone(),
                None,
                Some(owner),
                options.wait_budget,
                &mut |current, _, lease| {
                    let lease = lease.ok_or_else(|| Error::other("acquisition without a lease"))?;
                    Ok(match prepare(current, lease) {
                        Some(next) => Applied::write(next, Some(lease.expires_at)),
                        None => Applied::keep(None::<Timestamp>),
                    })
                },
            )
            .await?;
        if let Some(assert) = &options.assert_current {
            assert()?;
        }
        let Some(expires_at) = written else {
            return Err(shared.texts.acquisition_rejected(key));
        };
        let Some(epoch) = epoch else {
            return Err(Error::other(format!(
                "the store assigned no lease epoch to the acquisition of {key}"
            )));
        };
        owner.record_lease(expires_at, Some(epoch));
        shared.register_live_owner(owner);
        tracing::Span::current().record("epoch", epoch.get());
        tracing::debug!(key = %key, token = owner.token.prefix(), epoch = epoch.get(), "lease acquired");

        let (stop_tx, stop_rx) = watch::channel(false);
        let guard = LeaseGuard::new(owner.clone(), shared.clone());
        let work = async move {
            let result = scope::with_owner(shared.id, key.clone(), owner.clone(), run(guard)).await;
            let _ = stop_tx.send(true);
            result
        };
        let result = match &shared.batch {
            Some(batch) => {
                // The shared driver renews this owner until the registration is dropped.
                let _registration = batch.register(shared, owner.clone());
                drop(stop_rx);
                work.await
            }
            None => {
                let heartbeat = shared.heartbeat(owner.clone(), stop_rx);
                let (result, ()) = tokio::join!(work, heartbeat);
                result
            }
        };
        let value = result?;
        if let Some(assert) = &options.assert_current {
            assert()?;
        }
        if let Some(failure) = owner.failure() {
            return Err(failure);
        }
        Ok(value)
    }

    /// Releases the exact token only, when the scope ends (see `docs/lifecycle.md`,
    /// "`with_lease`", step 7): never the caller's authority,
    /// never a successor; failures are reported and swallowed.
    async fn release(&self, key: &BindingKey, owner: &Arc<OwnerState>) {
        let shared = &*self.shared;
        let base = || shared.assert_settled(key);
        let mut decide = |observation: &Observation| -> Result<Decision<()>, Error> {
            let Some(row) = observation.row.as_ref() else {
                return Ok(Decision::Keep(()));
            };
            if row.lease.as_ref().is_none_or(|l| l.token != owner.token) {
                return Ok(Decision::Keep(()));
            }
            let record = self
                .codec
                .decode(&row.value)
                .ok_or_else(|| shared.texts.invalid_row(key))?;
            let ttl = self.release_ttl.as_ref().and_then(|f| f(key, &record));
            Ok(Decision::Write {
                row: RowWrite {
                    value: row.value.clone(),
                    lease: None,
                },
                ttl,
                result: (),
                owned_expiry: None,
                fresh_expiry: None,
            })
        };
        let outcome = shared
            .cas_update(key, &base, None, Some(owner), &mut decide)
            .await;
        match outcome {
            Ok(_) => {
                tracing::debug!(key = %key, token = owner.token.prefix(), "lease released");
            }
            Err(error) => {
                tracing::warn!(key = %key, error = %error, "lease release failed; the lease will expire");
                if let Some(hook) = &shared.on_release_failure {
                    hook(key, &error);
                }
            }
        }
    }

    /// Runs `run` as a mutation (see `docs/lifecycle.md`, "Mutation fences"): refused at once with
    /// [`Error::MutationBlocked`] while an exclusive operation is pending (no queueing);
    /// inside an exclusive fence's own scope it just runs.
    pub async fn with_mutation<T, F, Fut>(&self, run: F) -> Result<T, Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let shared = &self.shared;
        if scope::in_exclusive(shared.id) {
            return run().await;
        }
        let mut refused = false;
        shared.fence.send_modify(|counts| {
            if counts.pending_exclusive > 0 {
                refused = true;
            } else {
                counts.active += 1;
            }
        });
        if refused {
            return Err(shared.texts.mutation_blocked());
        }
        let _active = ActiveMutation(shared.clone());
        scope::with_mutation(shared.id, run()).await
    }

    /// Runs `run` exclusively (see `docs/lifecycle.md`, "Mutation fences"): new mutations are
    /// refused from the moment this is called; exclusive operations run one at a time in FIFO
    /// order; `run` starts once the in-flight mutations have drained, and mutations nested inside
    /// it are allowed.
    ///
    /// Nested inside an exclusive fence of this instance it just runs. Called from inside a
    /// mutation of this instance it would wait for itself: it is refused at once with
    /// [`Error::MutationBlocked`] instead.
    pub async fn with_exclusive_mutation_fence<T, F, Fut>(&self, run: F) -> Result<T, Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let shared = &self.shared;
        if scope::in_exclusive(shared.id) {
            // Already exclusive: the snapshot is this task's.
            return run().await;
        }
        if scope::in_mutation(shared.id) {
            return Err(Error::MutationBlocked {
                message: "An exclusive binding operation cannot start inside a binding mutation of the same lifecycle (it would wait for itself)".into(),
            });
        }
        shared
            .fence
            .send_modify(|counts| counts.pending_exclusive += 1);
        let _pending = PendingExclusive(shared.clone());
        let _turn = shared.exclusive_turn.lock().await;
        let mut counts = shared.fence.subscribe();
        // The sender lives in `shared`, so waiting cannot fail.
        let _ = counts.wait_for(|c| c.active == 0).await;
        scope::with_exclusive(shared.id, run()).await
    }
}

/// Decrements the active mutation count on drop.
struct ActiveMutation(Arc<Shared>);

impl Drop for ActiveMutation {
    fn drop(&mut self) {
        self.0
            .fence
            .send_modify(|c| c.active = c.active.saturating_sub(1));
    }
}

/// Decrements the pending exclusive count on drop.
struct PendingExclusive(Arc<Shared>);

impl Drop for PendingExclusive {
    fn drop(&mut self) {
        self.0
            .fence
            .send_modify(|c| c.pending_exclusive = c.pending_exclusive.saturating_sub(1));
    }
}
