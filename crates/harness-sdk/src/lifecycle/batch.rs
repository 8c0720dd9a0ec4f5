//! Batched heartbeats (see `docs/lifecycle.md`, "Batched heartbeats"): one renewal driver per
//! lifecycle instance renews every lease the instance holds through
//! [`BindingStore::renew_leases`](tether_core::BindingStore::renew_leases) — one transaction per
//! batch on SQL stores instead of one renewal transaction per lease.
//!
//! Turned on with
//! [`LifecycleBuilder::batched_heartbeats`](super::LifecycleBuilder::batched_heartbeats). The owner
//! semantics are those of the per-owner heartbeat: only owners in phase `Held` without a failure
//! are renewed; a lease missing at renewal time, or a failed batch, makes the owner's lease lost
//! (sticky); `join_renewal` waits for a batch in flight. The driver task starts with the first
//! registered owner and ends when none is left.
//!
//! Scheduling: a lease is due one renew interval after it was last written (when its expiry is
//! `lease_duration - renew_interval` away), like the per-owner heartbeat. The driver wakes when
//! the earliest lease is due, takes every lease due within a small coalescing window, and
//! renews them nearest expiry first in batches of [`BATCH`] (each with a fresh `now`), at most
//! [`IN_FLIGHT`] batches at once. Leases acquired at different times therefore renew at
//! different times, instead of every held lease in one transaction per tick; when the store
//! falls behind, the leases closest to expiry go first.
//!
//! Each batch logs a `debug` event `lease batch renewed` (fields `leases`, `refused`,
//! `elapsed_us`, `min_slack_ms`: how much of its first, closest lease was left when the batch
//! started); a failed batch logs a `warn` with the same fields and `error`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use tether_core::{LeaseRenewal, Timestamp};
use tracing::Instrument;

use super::owner::{OwnerPhase, OwnerState};
use super::shared::Shared;

/// Owners per `renew_leases` call (one transaction): a few thousand renewals take tens of
/// milliseconds on PostgreSQL, so a batch never holds a connection long and the leases due
/// next are not stuck behind one huge transaction.
const BATCH: usize = 2_000;

/// Batches renewing at the same time (each on its own pooled connection). Two keep the
/// database busy while the driver waits for one commit.
const IN_FLIGHT: usize = 2;

/// Leases due within `renew_interval / COALESCE` of the earliest are renewed with it, so the
/// driver wakes at most about `COALESCE` times per renew interval.
const COALESCE: u32 = 8;

/// The registry of owners renewed by the driver.
#[derive(Debug, Default)]
pub(crate) struct BatchRenewal {
    state: Mutex<State>,
}

/// A registered owner as queued: its registration id and the owner itself (so a pass reads
/// no map). The entry is stale once the registration is dropped
/// ([`OwnerState::batch_registration`] tells).
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    id: u64,
    owner: Arc<OwnerState>,
}

impl Entry {
    /// Whether the entry's registration is still in force.
    fn registered(&self) -> bool {
        self.owner.batch_registration(self.id)
    }
}

#[derive(Debug, Default)]
struct State {
    owners: HashMap<u64, Arc<OwnerState>>,
    /// Registered owners by the expiry they had when queued, earliest first; the owners of
    /// one renewal batch share their new expiry, so they are queued again as one bucket. An
    /// entry may be stale (the owner was released, or its expiry moved since);
    /// [`BatchRenewal::plan`] re-reads the owner when its entry comes up, so a pass touches
    /// the due owners only, not every owner.
    queue: BTreeMap<Timestamp, Vec<Entry>>,
    /// Owners whose entry came up while they were not held (settling, deleted): re-checked on
    /// every pass and queued again once held.
    parked: Vec<Entry>,
    /// An owner's expiry may have moved earlier than its queued entry: rebuild the queue.
    rescan: bool,
    next_id: u64,
    running: bool,
}

impl State {
    fn insert(&mut self, id: u64, owner: Arc<OwnerState>) {
        owner.set_batch_registration(Some(id));
        self.enqueue(
            owner.expires_at(),
            Entry {
                id,
                owner: owner.clone(),
            },
        );
        self.owners.insert(id, owner);
    }

    fn enqueue(&mut self, expires_at: Timestamp, entry: Entry) {
        self.queue.entry(expires_at).or_default().push(entry);
    }
}

/// Removes its owner from the driver's registry when dropped.
pub(crate) struct Registration {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(batch) = &self.shared.batch {
            let mut state = batch.lock();
            if let Some(owner) = state.owners.remove(&self.id) {
                owner.set_batch_registration(None);
            }
        }
    }
}

/// What the driver does next: renew `due` (nearest expiry first), then wake at `next` (the
/// earliest due time of the other owners, if any).
struct Plan {
    due: Vec<Entry>,
    next: Option<Timestamp>,
}

impl BatchRenewal {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `owner` for renewal, starting the driver when it is not running.
    pub(crate) fn register(&self, shared: &Arc<Shared>, owner: Arc<OwnerState>) -> Registration {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.insert(id, owner);
        if !state.running {
            state.running = true;
            tokio::spawn(drive(Arc::downgrade(shared)));
        }
        Registration {
            shared: shared.clone(),
            id,
        }
    }

    /// Asks the next pass to rebuild the renewal queue from every registered owner: an owner's
    /// recorded expiry may have moved earlier than its queued entry (a deletion rollback
    /// restored the row).
    pub(crate) fn reschedule(&self) {
        self.lock().rescan = true;
    }

    /// The held owners whose lease expires at or before `horizon`, nearest expiry first (in
    /// queue order among equal expiries), and the earliest queued expiry of the others
    /// (possibly earlier than any live owner's: the driver then merely wakes early); `None`
    /// (and the driver stops) when no owner is registered.
    ///
    /// Only queue entries due by `horizon` are looked at: an entry whose owner is gone or has
    /// failed (failures are sticky) is dropped, one whose owner was renewed past `horizon`
    /// is queued again with its new expiry, and one whose owner is not held is parked until
    /// it is held again.
    fn plan(&self, horizon: Timestamp) -> Option<(Vec<Entry>, Option<Timestamp>)> {
        let mut due: Vec<(Timestamp, Entry)> = Vec::new();
        let next;
        {
            let mut guard = self.lock();
            let state = &mut *guard;
            if state.owners.is_empty() {
                state.running = false;
                state.queue.clear();
                state.parked.clear();
                return None;
            }
            if std::mem::take(&mut state.rescan) {
                state.parked.clear();
                let mut queue: BTreeMap<Timestamp, Vec<Entry>> = BTreeMap::new();
                for (id, owner) in &state.owners {
                    queue.entry(owner.expires_at()).or_default().push(Entry {
                        id: *id,
                        owner: owner.clone(),
                    });
                }
                state.queue = queue;
            }
            let parked = std::mem::take(&mut state.parked);
            for entry in parked {
                if !entry.registered() {
                    continue;
                }
                match entry.owner.schedule() {
                    (_, true, _) => {}
                    (OwnerPhase::Held, false, expires_at) => state.enqueue(expires_at, entry),
                    _ => state.parked.push(entry),
                }
            }
            while let Some(bucket) = state.queue.first_entry() {
                if *bucket.key() > horizon {
                    break;
                }
                for entry in bucket.remove() {
                    if !entry.registered() {
                        continue;
                    }
                    match entry.owner.schedule() {
                        (_, true, _) => {}
                        (OwnerPhase::Held, false, expires_at) if expires_at <= horizon => {
                            due.push((expires_at, entry));
                        }
                        (OwnerPhase::Held, false, expires_at) => state.enqueue(expires_at, entry),
                        _ => state.parked.push(entry),
                    }
                }
            }
            next = state.queue.first_key_value().map(|(at, _)| *at);
        }
        // Stable: buckets come out in expiry order already, so this is one pass unless an
        // entry was stale.
        due.sort_by_key(|(expires_at, _)| *expires_at);
        Some((due.into_iter().map(|(_, entry)| entry).collect(), next))
    }

    /// Queues the owners of a finished batch again: the renewed ones (`renewed[i]`) with the
    /// batch's expiry `expires_at`, the others with the expiry they have (the next pass drops
    /// the failed ones and parks those not held). Owners released meanwhile are skipped.
    fn requeue(&self, entries: &[Entry], renewed: &[bool], expires_at: Timestamp) {
        let mut state = self.lock();
        let mut bucket = Vec::with_capacity(entries.len());
        for (entry, renewed) in entries.iter().zip(renewed) {
            if !entry.registered() {
                continue;
            }
            if *renewed {
                bucket.push(entry.clone());
            } else {
                state.enqueue(entry.owner.expires_at(), entry.clone());
            }
        }
        if !bucket.is_empty() {
            let queued = state.queue.entry(expires_at).or_default();
            if queued.is_empty() {
                *queued = bucket;
            } else {
                queued.append(&mut bucket);
            }
        }
    }
}

/// The driver: renew what is due, sleep until the next lease is due (at most one renew
/// interval, so owners registered meanwhile are never late), repeat.
async fn drive(shared: Weak<Shared>) {
    // The first owner registered just now: nothing is due before one renew interval.
    let mut wait = match shared.upgrade() {
        Some(s) => s.lease.renew_interval,
        None => return,
    };
    loop {
        if !wait.is_zero() {
            let tick = match shared.upgrade() {
                Some(s) => s.timer.sleep(wait),
                None => return,
            };
            tick.await;
        }
        let Some(s) = shared.upgrade() else { return };
        let Some(plan) = s.plan_renewals() else {
            return;
        };
        let renewed = !plan.due.is_empty();
        let plan_next = plan.next;
        let shared_ref = &*s;
        futures::stream::iter(plan.due.chunks(BATCH))
            .for_each_concurrent(IN_FLIGHT, |chunk| shared_ref.renew_batch(chunk))
            .await;
        drop(plan);
        let interval = s.lease.renew_interval;
        let now = s.clock.now();
        wait = match plan_next {
            // Due now or already late: go again at once when this pass made progress.
            Some(next) if next <= now && renewed => Duration::ZERO,
            Some(next) => next
                .saturating_since(now)
                .clamp(interval / COALESCE, interval),
            None => interval,
        };
        if wait.is_zero() {
            tokio::task::yield_now().await;
        }
    }
}

impl Shared {
    /// The renewal plan at the current time: the owners due now (within the coalescing
    /// window), and when the next one is due.
    fn plan_renewals(&self) -> Option<Plan> {
        let batch = self.batch.as_ref()?;
        let interval = self.lease.renew_interval;
        // A lease is due when less than `lease_duration - renew_interval` of it is left.
        let ahead = self.lease.lease_duration.saturating_sub(interval);
        let now = self.clock.now();
        let (due, next_expiry) = batch.plan(now + ahead + interval / COALESCE)?;
        Some(Plan {
            due,
            next: next_expiry.map(|at| at - ahead),
        })
    }

    /// One batched renewal of `entries`, which are then queued again. Never fails: failures
    /// are recorded on the owners.
    async fn renew_batch(&self, entries: &[Entry]) {
        let span = tracing::debug_span!("lifecycle.renew_batch", leases = entries.len());
        let (renewed, expires_at) = self.renew_batch_inner(entries).instrument(span).await;
        if let Some(batch) = &self.batch {
            batch.requeue(entries, &renewed, expires_at);
        }
    }

    /// Renews the owners of `entries` that are held, to one common expiry: which were
    /// renewed, and that expiry.
    async fn renew_batch_inner(&self, entries: &[Entry]) -> (Vec<bool>, Timestamp) {
        let now = self.clock.now();
        let expires_at = now + self.lease.lease_duration;
        let mut renewed = vec![false; entries.len()];
        // The positions in `entries` of the owners renewed, and their renewals (each owner's
        // own entry, moved in and handed back after the answer: no string is copied).
        let mut eligible: Vec<usize> = Vec::with_capacity(entries.len());
        let mut renewals: Vec<LeaseRenewal> = Vec::with_capacity(entries.len());
        // Blocked keys are rare: look each key up only when some key is blocked.
        let any_blocked = self.any_unresolved();
        for (i, Entry { owner, .. }) in entries.iter().enumerate() {
            let check = owner
                .assert_current
                .as_ref()
                .map_or(Ok(()), |assert| assert())
                .and_then(|()| {
                    if any_blocked {
                        self.assert_settled(&owner.key)
                    } else {
                        Ok(())
                    }
                })
                .and_then(|()| owner.begin_batch_renewal(self, expires_at));
            match check {
                Ok(renewal) => {
                    eligible.push(i);
                    renewals.push(renewal);
                }
                Err(error) => owner.fail_if_held(error),
            }
        }
        // How much of the closest lease was left when the batch started (diagnostics; the
        // driver's batches come nearest expiry first).
        let nearest = eligible.first().map(|&i| entries[i].owner.expires_at());
        let started = Instant::now();
        let outcome = self
            .store
            .renew_leases(&self.namespace, &renewals, now)
            .await;
        let elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let min_slack_ms = nearest.map_or(0, |at| at.as_millis() - now.as_millis());
        match outcome {
            Ok(answers) if answers.len() == renewals.len() => {
                let mut refused = 0usize;
                for ((&i, renewal), ok) in eligible.iter().zip(renewals).zip(answers) {
                    let owner = &entries[i].owner;
                    // A renewal moved the row's revision on: the row the owner's last write
                    // left is stale now and is forgotten (never patched: only the store knows
                    // the new row).
                    owner.end_batch_renewal(renewal, ok);
                    if ok {
                        renewed[i] = true;
                    } else {
                        refused += 1;
                        owner.lose_if_held(self.lost(&owner.key));
                    }
                    owner.set_renewal_pending(false);
                }
                tracing::debug!(
                    leases = eligible.len(),
                    refused,
                    elapsed_us,
                    min_slack_ms,
                    "lease batch renewed"
                );
            }
            Ok(answers) => {
                let error = tether_core::Error::other(format!(
                    "the store answered {} renewals for {} leases",
                    answers.len(),
                    renewals.len()
                ));
                for (&i, renewal) in eligible.iter().zip(renewals) {
                    let owner = &entries[i].owner;
                    owner.end_batch_renewal(renewal, false);
                    owner.fail_if_held(self.texts.lost_lease(&owner.key, Some(error.clone())));
                    owner.set_renewal_pending(false);
                }
            }
            Err(error) => {
                tracing::warn!(
                    error = %error,
                    leases = eligible.len(),
                    elapsed_us,
                    min_slack_ms,
                    "batched lease renewal failed"
                );
                for (&i, renewal) in eligible.iter().zip(renewals) {
                    let owner = &entries[i].owner;
                    owner.end_batch_renewal(renewal, false);
                    owner.fail_if_held(self.texts.lost_lease(&owner.key, Some(error.clone())));
                    owner.set_renewal_pending(false);
                }
            }
        }
        (renewed, expires_at)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tether_core::{
        BindingId, BindingKey, BindingStore, Clock, Error, FakeClock, JsonObjectCodec, LeaseConfig,
        LeaseToken, Namespace, NamespaceConfig, Timestamp,
    };
    use tether_storage::{MemoryStore, Store};
    use tokio::sync::watch;

    use super::{BatchRenewal, OwnerPhase, OwnerState};
    use crate::lifecycle::{LeaseOptions, Lifecycle, LifecycleBuilder, ManualTimer, PrepareLease};

    type Record = serde_json::Map<String, serde_json::Value>;

    fn key(i: usize) -> BindingKey {
        BindingKey::conversation(&BindingId::new(format!("held-{i}")).unwrap())
    }

    fn lease() -> LeaseConfig {
        LeaseConfig {
            lease_duration: Duration::from_millis(900),
            wait_budget: Duration::from_secs(2),
            retry_interval: Duration::from_millis(50),
            renew_interval: Duration::from_millis(300),
        }
    }

    fn ns() -> Namespace {
        Namespace::new("batch").unwrap()
    }

    /// A batched-heartbeat lifecycle over `store` (namespace registered), to finish building.
    async fn builder(store: Arc<dyn BindingStore>) -> LifecycleBuilder<JsonObjectCodec> {
        store
            .register_namespace(NamespaceConfig::new(ns()))
            .await
            .unwrap();
        let keep: PrepareLease<Record> =
            Arc::new(|current: Option<&Record>, _| Some(current.cloned().unwrap_or_default()));
        Lifecycle::builder(store, ns(), JsonObjectCodec, keep)
            .lease_config(lease())
            .batched_heartbeats(true)
    }

    async fn lifecycle(store: Arc<dyn BindingStore>) -> Lifecycle<JsonObjectCodec> {
        builder(store).await.build().unwrap()
    }

    /// Holds `n` leases for three lease periods; every one must survive.
    async fn hold_many(store: Arc<dyn BindingStore>, n: usize) {
        let lc = lifecycle(store.clone()).await;
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let lc = lc.clone();
                tokio::spawn(async move {
                    let key = key(i);
                    lc.with_lease(&key, LeaseOptions::default(), |guard| async move {
                        tokio::time::sleep(Duration::from_millis(2_700)).await;
                        guard.capture_lease_assertion()?;
                        Ok(guard.epoch())
                    })
                    .await
                })
            })
            .collect();
        for task in tasks {
            task.await
                .unwrap()
                .expect("the lease survived three periods");
        }
        // Released at exit.
        let row = store
            .lookup(lc.namespace(), &key(0))
            .await
            .unwrap()
            .unwrap();
        assert!(row.lease.is_none(), "released: {row:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batched_heartbeats_keep_many_sqlite_leases_alive() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        hold_many(Arc::new(store), 40).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batched_heartbeats_keep_many_memory_leases_alive() {
        hold_many(Arc::new(MemoryStore::default()), 40).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_gone_at_renewal_is_lost_and_the_others_survive() {
        let store: Arc<dyn BindingStore> = Arc::new(Store::open("sqlite::memory:").await.unwrap());
        let lc = lifecycle(store.clone()).await;
        let survivor = {
            let lc = lc.clone();
            tokio::spawn(async move {
                lc.with_lease(&key(1), LeaseOptions::default(), |_| async move {
                    tokio::time::sleep(Duration::from_millis(1_500)).await;
                    Ok(())
                })
                .await
            })
        };
        let store2 = store.clone();
        let ns = lc.namespace().clone();
        let lost = lc
            .with_lease(&key(0), LeaseOptions::default(), |_| async move {
                // Someone else removes the row under the owner.
                let removed = store2.delete_if(&ns, &key(0), &|_| true).await?;
                assert!(removed.is_some());
                tokio::time::sleep(Duration::from_millis(1_000)).await;
                Ok(())
            })
            .await;
        assert!(
            matches!(lost, Err(Error::LostLease { .. })),
            "the batch reports the loss: {lost:?}"
        );
        survivor.await.unwrap().expect("the other lease survived");
    }

    /// An owner of key `i` holding its lease until `expires_at` (ms).
    fn owner_expiring(i: usize, expires_at: i64) -> Arc<OwnerState> {
        let owner = Arc::new(OwnerState::new(
            key(i),
            LeaseToken::new(format!("t-{i}")).unwrap(),
            None,
        ));
        owner.record_lease(Timestamp::from_millis(expires_at), None);
        owner
    }

    #[test]
    fn the_plan_takes_due_owners_nearest_expiry_first() {
        let batch = BatchRenewal::default();
        let owner = owner_expiring;
        let failed = owner(4, 100);
        failed.fail(Error::other("lost"));
        {
            let mut state = batch.lock();
            for (id, o) in [
                owner(0, 700),
                owner(1, 300),
                owner(2, 500),
                owner(3, 900),
                failed,
            ]
            .into_iter()
            .enumerate()
            {
                state.insert(id as u64, o);
            }
        }
        let (due, next) = batch.plan(Timestamp::from_millis(700)).unwrap();
        let keys: Vec<BindingKey> = due.iter().map(|e| e.owner.key.clone()).collect();
        assert_eq!(
            keys,
            vec![key(1), key(2), key(0)],
            "failed owners are skipped"
        );
        assert_eq!(next, Some(Timestamp::from_millis(900)));
        batch.lock().owners.clear();
        assert!(batch.plan(Timestamp::from_millis(700)).is_none());
        assert!(!batch.lock().running, "an empty registry stops the driver");
    }

    #[test]
    fn the_plan_parks_owners_not_held_and_drops_released_ones() {
        let batch = BatchRenewal::default();
        let owner = owner_expiring;
        let (settling, released, held) = (owner(0, 100), owner(1, 100), owner(2, 200));
        {
            let mut state = batch.lock();
            state.insert(0, settling.clone());
            state.insert(1, released.clone());
            state.insert(2, held.clone());
            // What dropping the registration does.
            state.owners.remove(&1);
            released.set_batch_registration(None);
        }
        settling.set_phase(OwnerPhase::Settling);
        let (due, next) = batch.plan(Timestamp::from_millis(500)).unwrap();
        let keys: Vec<BindingKey> = due.iter().map(|e| e.owner.key.clone()).collect();
        assert_eq!(keys, vec![key(2)], "only the held, registered owner is due");
        assert_eq!(next, None, "the settling owner is parked, not queued");
        // Renewed to 900 ms: queued again in the batch's bucket.
        batch.requeue(&due, &[true], Timestamp::from_millis(900));
        settling.set_phase(OwnerPhase::Held);
        let (due, next) = batch.plan(Timestamp::from_millis(500)).unwrap();
        let keys: Vec<BindingKey> = due.iter().map(|e| e.owner.key.clone()).collect();
        assert_eq!(
            keys,
            vec![key(0)],
            "held again: taken from the parked owners"
        );
        assert_eq!(next, Some(Timestamp::from_millis(900)));
    }

    /// Two owners acquired 150 ms apart are each renewed one renew interval after their own
    /// last write (not both at one shared tick), and both survive three lease periods.
    #[tokio::test]
    async fn each_lease_renews_one_interval_after_its_last_write() {
        let clock = FakeClock::new(Timestamp::from_millis(0));
        let timer = Arc::new(ManualTimer::new(clock.clone()));
        let store: Arc<dyn BindingStore> = Arc::new(MemoryStore::new(Arc::new(clock.clone())));
        let ns = ns();
        let lc = builder(store.clone())
            .await
            .clock(Arc::new(clock.clone()))
            .timer(timer.clone())
            .build()
            .unwrap();
        let (stop_tx, stop_rx) = watch::channel(false);
        let hold = |i: usize| {
            let (lc, mut stop) = (lc.clone(), stop_rx.clone());
            tokio::spawn(async move {
                lc.with_lease(&key(i), LeaseOptions::default(), |_| async move {
                    let _ = stop.wait_for(|stopped| *stopped).await;
                    Ok(())
                })
                .await
            })
        };
        let expiry = |i: usize| {
            let (store, ns) = (store.clone(), ns.clone());
            async move {
                let row = store.lookup(&ns, &key(i)).await.unwrap().unwrap();
                row.lease.unwrap().expires_at.as_millis()
            }
        };
        let a = hold(0);
        timer.settle().await;
        timer.advance(Duration::from_millis(150)).await;
        let b = hold(1);
        timer.settle().await;
        assert_eq!((expiry(0).await, expiry(1).await), (900, 1_050));
        timer.advance(Duration::from_millis(150)).await;
        assert_eq!(
            (expiry(0).await, expiry(1).await),
            (1_200, 1_050),
            "at 300 ms only the first lease is due"
        );
        timer.advance(Duration::from_millis(150)).await;
        assert_eq!((expiry(0).await, expiry(1).await), (1_200, 1_350));
        timer.advance(Duration::from_millis(2_700)).await;
        let now = clock.now().as_millis();
        assert!(
            expiry(0).await > now && expiry(1).await > now,
            "both still held"
        );
        stop_tx.send(true).unwrap();
        timer.settle().await;
        a.await.unwrap().expect("the first lease survived");
        b.await.unwrap().expect("the second lease survived");
    }
}
