//! The record-agnostic part of a lifecycle instance: store access, the compare-and-swap loop
//! (`docs/lifecycle.md`, "`transact`"), heartbeat renewal ("`with_lease`", step 5), blocked
//! keys ("Settlement hooks and blocked keys") and the mutation fence counters ("Mutation
//! fences").

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tether_core::{
    ApplyOutcome, BindingKey, BindingStore, Clock, Error, ErrorTexts, Intent, LeaseConfig,
    LeaseEpoch, LeaseWrite, Namespace, Observation, QuarantineEntry, QuarantineStore, RowWrite,
    Timestamp, TokenSource, is_live,
};
use tokio::sync::watch;
use tracing::Instrument;

use super::batch::BatchRenewal;
use super::owner::{OwnerPhase, OwnerState};
use super::timer::Timer;

/// Called with the key and the error when a release fails (the failure is swallowed).
pub type ReleaseFailureHook = Arc<dyn Fn(&BindingKey, &Error) + Send + Sync>;

/// A key blocked by an unknown settlement outcome.
#[derive(Debug, Clone)]
pub(crate) struct Blocked {
    pub(crate) error: Error,
    /// The custody recorded with the quarantine.
    pub(crate) custody: Option<String>,
    /// Whether the durable quarantine record is written (or no quarantine store is
    /// configured). A record that could not be written (the store was failing, which is often
    /// why the outcome is unknown) is written again at the key's next entry point.
    pub(crate) durable: bool,
}

/// Counts of the mutation fence (see `docs/lifecycle.md`, "Mutation fences").
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FenceCounts {
    pub(crate) active: usize,
    pub(crate) pending_exclusive: usize,
}

/// What one evaluation of a compare-and-swap step decided.
pub(crate) enum Decision<T> {
    /// Another live lease holds the row.
    Busy,
    /// The caller's owned lease is gone from the row.
    LeaseLost,
    /// No write; the comparison is still confirmed with a keep.
    Keep(T),
    /// Write the row.
    Write {
        row: RowWrite,
        ttl: Option<Duration>,
        result: T,
        /// The caller's owned lease expiry as observed: it must still be live at admission.
        owned_expiry: Option<Timestamp>,
        /// A freshly written lease's expiry: it must still be live at admission.
        fresh_expiry: Option<Timestamp>,
    },
}

/// The end of a compare-and-swap loop.
pub(crate) enum CasResult<T> {
    Busy,
    LeaseLost,
    Done {
        result: T,
        epoch: Option<LeaseEpoch>,
        wrote: bool,
    },
}

/// A decision step, re-run on every conflict (it must be pure apart from reading the clock).
pub(crate) type Decide<'a, T> = dyn FnMut(&Observation) -> Result<Decision<T>, Error> + Send + 'a;

/// The record-agnostic state of one lifecycle instance.
pub(crate) struct Shared {
    pub(crate) id: u64,
    pub(crate) store: Arc<dyn BindingStore>,
    pub(crate) namespace: Namespace,
    pub(crate) texts: ErrorTexts,
    pub(crate) lease: LeaseConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) tokens: Arc<dyn TokenSource>,
    pub(crate) timer: Arc<dyn Timer>,
    pub(crate) quarantine: Option<Arc<dyn QuarantineStore>>,
    pub(crate) holder: Option<String>,
    pub(crate) on_release_failure: Option<ReleaseFailureHook>,
    pub(crate) unresolved: Mutex<HashMap<BindingKey, Blocked>>,
    pub(crate) fence: watch::Sender<FenceCounts>,
    pub(crate) exclusive_turn: tokio::sync::Mutex<()>,
    /// The shared renewal driver, when heartbeats are batched.
    pub(crate) batch: Option<BatchRenewal>,
    /// The owners of this instance between acquisition and release, by key.
    pub(crate) live_owners: Mutex<HashMap<BindingKey, std::sync::Weak<OwnerState>>>,
    /// Rows this instance's last write on their key left without a lease (a release, say),
    /// kept as the starting observation of the key's next write here (at most
    /// [`FREE_ROWS_KEPT`]; possibly stale, like an owner's remembered row).
    pub(crate) free_rows: Mutex<HashMap<BindingKey, Observation>>,
}

/// The most free rows one lifecycle instance remembers ([`Shared::free_rows`]).
const FREE_ROWS_KEPT: usize = 4096;

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("id", &self.id)
            .field("namespace", &self.namespace)
            .field("lease", &self.lease)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Records `owner` as this instance's live owner of its key (after acquisition).
    pub(crate) fn register_live_owner(&self, owner: &Arc<OwnerState>) {
        self.live_owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(owner.key.clone(), Arc::downgrade(owner));
    }

    /// Forgets `owner` (before its release), unless a later owner replaced it.
    pub(crate) fn forget_live_owner(&self, owner: &Arc<OwnerState>) {
        let mut owners = self
            .live_owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if owners
            .get(&owner.key)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(owner)))
        {
            owners.remove(&owner.key);
        }
    }

    /// Whether this instance holds `key` under a live lease (an owner of its own, held, not
    /// failed, not expired).
    pub(crate) fn holds_live_lease(&self, key: &BindingKey) -> bool {
        self.live_owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .and_then(std::sync::Weak::upgrade)
            .is_some_and(|owner| {
                owner.phase() == OwnerPhase::Held
                    && owner.failure().is_none()
                    && owner.expires_at() > self.clock.now()
            })
    }

    /// Fails with [`Error::HeldOutsideScope`] when this instance holds `key` under a live
    /// lease: a call outside that owner's scope would only wait for its own caller.
    pub(crate) fn refuse_own_live_lease(&self, key: &BindingKey) -> Result<(), Error> {
        if !self.holds_live_lease(key) {
            return Ok(());
        }
        Err(Error::HeldOutsideScope {
            key: key.clone(),
            message: format!(
                "{key} is leased by this lifecycle's own live owner, and this call runs outside its `with_lease` scope (a spawned task does not inherit it): write with `Lifecycle::transact_under(&guard, …)`, or run inside the scope"
            ),
        })
    }

    /// Fails with the stored error when `key` is blocked in this instance.
    pub(crate) fn assert_settled(&self, key: &BindingKey) -> Result<(), Error> {
        let unresolved = self
            .unresolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match unresolved.get(key) {
            Some(blocked) => Err(blocked.error.clone()),
            None => Ok(()),
        }
    }

    /// Whether any key is blocked in this instance (one lock; lets a batch skip the per-key
    /// [`Shared::assert_settled`] lookups when none is).
    pub(crate) fn any_unresolved(&self) -> bool {
        !self
            .unresolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// [`Shared::assert_settled`], plus the durable quarantine record when a quarantine store
    /// is configured (a key quarantined by another process, or before a restart).
    pub(crate) async fn assert_durably_settled(&self, key: &BindingKey) -> Result<(), Error> {
        let pending = self
            .unresolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .filter(|b| !b.durable)
            .cloned();
        if let Some(blocked) = pending
            && let Err(err) = self
                .record_quarantine(key, &blocked.error, blocked.custody.clone())
                .await
        {
            tracing::warn!(key = %key, error = %err, "the quarantine record of a blocked key still cannot be written");
        }
        self.assert_settled(key)?;
        if let Some(quarantine) = &self.quarantine
            && let Some(entry) = quarantine.quarantined(&self.namespace, key).await?
        {
            return Err(Error::OutcomeUnknown {
                key: key.clone(),
                message: entry.reason,
                cause: None,
            });
        }
        Ok(())
    }

    /// Blocks `key` in this instance and records it in the quarantine store, if any.
    pub(crate) async fn block_key(
        &self,
        key: &BindingKey,
        error: Error,
        custody: Option<String>,
    ) -> Result<(), Error> {
        tracing::warn!(key = %key, error = %error, "binding key blocked: settlement outcome unknown");
        let custody = custody.or_else(|| self.holder.clone());
        self.unresolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_insert(Blocked {
                error: error.clone(),
                custody: custody.clone(),
                durable: self.quarantine.is_none(),
            });
        self.record_quarantine(key, &error, custody).await
    }

    /// Writes the durable quarantine record of a blocked key and marks it written.
    async fn record_quarantine(
        &self,
        key: &BindingKey,
        error: &Error,
        custody: Option<String>,
    ) -> Result<(), Error> {
        let Some(quarantine) = &self.quarantine else {
            return Ok(());
        };
        quarantine
            .quarantine(QuarantineEntry {
                namespace: self.namespace.clone(),
                key: key.clone(),
                reason: tether_core::text::to_reason(&error.to_string()),
                custody: custody.as_deref().map(tether_core::text::to_reason),
                quarantined_at: self.clock.now(),
            })
            .await?;
        if let Some(blocked) = self
            .unresolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(key)
        {
            blocked.durable = true;
        }
        Ok(())
    }

    /// Blocks `key` after a write of this instance whose outcome is unknown (its COMMIT
    /// failed, or the store could not tell): the row may hold that write or not, so nothing
    /// of this process touches the key again until an operator checked it. A durable record
    /// that cannot be written now is written at the key's next entry point.
    pub(crate) async fn block_unknown_write(&self, key: &BindingKey, error: &Error) {
        if let Err(err) = self.block_key(key, error.clone(), None).await {
            tracing::warn!(key = %key, error = %err, "key blocked in this process; its quarantine record will be written when the store accepts it");
        }
    }

    pub(crate) fn lost(&self, key: &BindingKey) -> Error {
        self.texts.lost_lease(key, None)
    }

    /// The compare-and-swap loop: observe, decide, apply; re-decide on every
    /// conflict; a store error is returned as is and never replayed.
    ///
    /// `owner` is the lease owner the write runs under (its lease must stay live through
    /// admission; an expiry found there fails it). `memo` is the owner whose last write the
    /// loop may start from instead of reading the row, and which remembers this write: a
    /// remembered observation may be stale, so the store's comparison confirms every write
    /// from it and a decision not to write (busy, lost lease) is re-taken on a fresh read.
    pub(crate) async fn cas_update<T>(
        &self,
        key: &BindingKey,
        base: &(dyn Fn() -> Result<(), Error> + Send + Sync),
        owner: Option<&Arc<OwnerState>>,
        memo: Option<&Arc<OwnerState>>,
        decide: &mut Decide<'_, T>,
    ) -> Result<CasResult<T>, Error> {
        let remembered = memo
            .and_then(|m| m.take_observation())
            .or_else(|| self.take_free_row(key));
        let mut fresh = remembered.is_none();
        let mut observation = match remembered {
            Some(observation) => observation,
            None => self.store.observe(&self.namespace, key).await?,
        };
        loop {
            let decision = decide(&observation)?;
            if !fresh && matches!(decision, Decision::Busy | Decision::LeaseLost) {
                observation = self.store.observe(&self.namespace, key).await?;
                fresh = true;
                continue;
            }
            let (intent, result, owned_expiry, fresh_expiry) = match decision {
                Decision::Busy => return Ok(CasResult::Busy),
                Decision::LeaseLost => return Ok(CasResult::LeaseLost),
                Decision::Keep(result) => (Intent::Keep, result, None, None),
                Decision::Write {
                    row,
                    ttl,
                    result,
                    owned_expiry,
                    fresh_expiry,
                } => (Intent::Set { row, ttl }, result, owned_expiry, fresh_expiry),
            };
            // Set by the latest admission run when it found the owned lease expired: the
            // store may run admission speculatively, so the owner is failed only when the
            // store reports that refusal.
            let owned_expired = AtomicBool::new(false);
            let admission = || -> Result<(), Error> {
                owned_expired.store(false, Ordering::Relaxed);
                base()?;
                let now = self.clock.now();
                if owned_expiry.is_some_and(|at| !is_live(at, now)) {
                    // Row comparison cannot detect elapsed time: the owned lease expired
                    // between observation and commit admission.
                    owned_expired.store(true, Ordering::Relaxed);
                    return Err(self.lost(key));
                }
                if fresh_expiry.is_some_and(|at| !is_live(at, now)) {
                    return Err(self.lost(key));
                }
                Ok(())
            };
            let applied = match self
                .store
                .apply_observed(&self.namespace, key, &observation, intent, &admission)
                .await
            {
                Ok(applied) => applied,
                Err(error) => {
                    if owned_expired.load(Ordering::Relaxed)
                        && let Some(owner) = owner
                    {
                        owner.fail(error.clone());
                    }
                    return Err(error);
                }
            };
            match applied.outcome {
                ApplyOutcome::Applied { epoch, .. } => {
                    if let Some(written) = applied.written {
                        self.remember_written(key, memo, written);
                    }
                    return Ok(CasResult::Done {
                        result,
                        epoch,
                        wrote: true,
                    });
                }
                ApplyOutcome::Unchanged => {
                    if let Some(memo) = memo {
                        // The row is as observed: it stays a good starting point.
                        memo.remember_observation(observation);
                    }
                    return Ok(CasResult::Done {
                        result,
                        epoch: None,
                        wrote: false,
                    });
                }
                ApplyOutcome::Conflict { current } => {
                    observation = current;
                    fresh = true;
                }
                other => {
                    return Err(Error::other(format!(
                        "unexpected compare-and-apply outcome for {key}: {other:?}"
                    )));
                }
            }
        }
    }

    /// Keeps the row a write of this instance left on `key`: as `memo`'s last write when it
    /// carries `memo`'s lease, else as the key's free row when it carries no lease (the next
    /// acquisition here starts from it instead of reading the row).
    fn remember_written(
        &self,
        key: &BindingKey,
        memo: Option<&Arc<OwnerState>>,
        written: Observation,
    ) {
        let leased = written.row.as_ref().is_some_and(|r| r.lease.is_some());
        if leased {
            if let Some(memo) = memo {
                memo.remember_observation(written);
            }
            return;
        }
        let mut rows = self
            .free_rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if rows.len() < FREE_ROWS_KEPT || rows.contains_key(key) {
            rows.insert(key.clone(), written);
        }
    }

    /// The free row remembered for `key` (see [`Shared::free_rows`]), taken out.
    fn take_free_row(&self, key: &BindingKey) -> Option<Observation> {
        self.free_rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
    }

    /// One heartbeat renewal. Never fails: a failure is recorded on the owner. The renewal
    /// stops counting as pending when it ends, also when its future is dropped mid-flight (a
    /// scope dropped by its caller), so the scope's end never waits for it forever.
    pub(crate) async fn renew(&self, owner: &Arc<OwnerState>) {
        /// Ends the pending renewal when dropped (after any failure was recorded).
        struct Pending<'a>(&'a OwnerState);
        impl Drop for Pending<'_> {
            fn drop(&mut self) {
                self.0.set_renewal_pending(false);
            }
        }
        if !owner.begin_renewal() {
            return;
        }
        let _pending = Pending(owner);
        let span =
            tracing::debug_span!("lifecycle.renew", key = %owner.key, token = owner.token.prefix());
        let outcome = self.renew_once(owner).instrument(span).await;
        match outcome {
            Ok(CasResult::Done {
                result: expires_at,
                epoch,
                wrote: true,
            }) => {
                if epoch.is_some() && owner.epoch().is_some() && epoch != owner.epoch() {
                    owner.lose_if_held(self.lost(&owner.key));
                } else {
                    owner.record_lease(expires_at, None);
                }
            }
            Ok(_) => owner.lose_if_held(self.lost(&owner.key)),
            Err(error) => {
                tracing::warn!(key = %owner.key, error = %error, "lease renewal failed");
                owner.fail_if_held(self.texts.lost_lease(&owner.key, Some(error)));
            }
        }
    }

    async fn renew_once(&self, owner: &Arc<OwnerState>) -> Result<CasResult<Timestamp>, Error> {
        let base = || -> Result<(), Error> {
            if let Some(assert) = &owner.assert_current {
                assert()?;
            }
            self.assert_settled(&owner.key)?;
            owner.assert_held(self)
        };
        let mut decide = |observation: &Observation| -> Result<Decision<Timestamp>, Error> {
            let now = self.clock.now();
            let Some(row) = observation.row.as_ref() else {
                return Ok(Decision::LeaseLost);
            };
            match row.lease.as_ref() {
                Some(lease) if lease.token == owner.token && lease.is_live(now) => {
                    let expires_at = now + self.lease.lease_duration;
                    Ok(Decision::Write {
                        row: RowWrite {
                            value: row.value.clone(),
                            lease: Some(LeaseWrite {
                                token: owner.token.clone(),
                                expires_at,
                                holder: lease.holder.clone(),
                            }),
                        },
                        ttl: row.expires_at.map(|at| at.saturating_since(now)),
                        result: expires_at,
                        owned_expiry: Some(lease.expires_at),
                        fresh_expiry: None,
                    })
                }
                _ => Ok(Decision::LeaseLost),
            }
        };
        self.cas_update(&owner.key, &base, Some(owner), Some(owner), &mut decide)
            .await
    }

    /// The heartbeat: every renew interval, renew unless stopped; single-flight because each
    /// renewal is awaited before the next tick is armed. Never touches the running work.
    pub(crate) async fn heartbeat(&self, owner: Arc<OwnerState>, mut stop: watch::Receiver<bool>) {
        loop {
            if *stop.borrow() {
                break;
            }
            let tick = self.timer.sleep(self.lease.renew_interval);
            tokio::select! {
                biased;
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        break;
                    }
                }
                () = tick => {
                    if *stop.borrow() {
                        break;
                    }
                    self.renew(&owner).await;
                }
            }
        }
    }
}
