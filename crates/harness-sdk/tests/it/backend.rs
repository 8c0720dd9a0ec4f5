//! The thread-binding backend (`docs/harness-backend.md`): backend parity scenarios 39–52
//! (50, key derivation, is tested in `tether-core`) on the in-memory store with a fake clock.
//! The fixture is shared with the hook and regression tests.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tether_core::{
    AgentId, BindingId, BindingStore, Clock, Error, FakeClock, HarnessId, HostSessionEntry,
    LeaseConfig, Namespace, NamespaceConfig, SequentialTokens, SessionId, SessionKey, Timestamp,
    always_current,
};
use tether_harness_sdk::backend::{
    BindingIdentity, ThreadBinding, ThreadBindingRecord, ThreadBindingStore, ThreadPin,
    TransitionOutcome, WriteOptions,
};
use tether_harness_sdk::generation::{
    AdoptionResult, BindingAuthority, GenerationAuthority, ReclaimPlan,
};
use tether_harness_sdk::hooks::ThreadBindingHarness;
use tether_harness_sdk::lifecycle::ManualTimer;
use tether_storage::MemoryStore;

pub(crate) const SESSION_KEY: &str = "agent:main:telegram:direct:peer";
pub(crate) const START: Timestamp = Timestamp::from_millis(1_700_000_000_000);

pub(crate) fn sid(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

pub(crate) fn skey() -> SessionKey {
    SessionKey::new(SESSION_KEY).unwrap()
}

pub(crate) fn agent() -> AgentId {
    AgentId::new("main").unwrap()
}

pub(crate) fn thread(id: &str) -> ThreadBinding {
    ThreadBinding::new(id, "/work")
}

pub(crate) fn opts() -> WriteOptions {
    WriteOptions::default()
}

pub(crate) fn caller() -> BindingAuthority {
    BindingAuthority::caller(always_current())
}

/// The default lease timing (65 s / 70 s / 1 s / 21.666 s; `docs/lifecycle.md`, "Timing").
pub(crate) fn lease_config() -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_secs(65),
        wait_budget: Duration::from_secs(70),
        retry_interval: Duration::from_secs(1),
        renew_interval: Duration::from_millis(21_666),
    }
}

/// An in-memory store (bindings and host sessions) with a fake clock and a manual timer.
pub(crate) struct Fx {
    pub(crate) clock: FakeClock,
    pub(crate) timer: Arc<ManualTimer>,
    pub(crate) mem: MemoryStore,
    pub(crate) ns: Namespace,
    pub(crate) store: ThreadBindingStore,
}

impl Fx {
    pub(crate) async fn new() -> Self {
        Self::with_capacity(None).await
    }

    /// A fixture whose namespace holds at most `max_entries` rows (reject-new).
    pub(crate) async fn with_capacity(max_entries: Option<u64>) -> Self {
        let clock = FakeClock::new(START);
        let mem = MemoryStore::new(Arc::new(clock.clone()));
        let ns = Namespace::new("thread-bindings").unwrap();
        let config = match max_entries {
            Some(max) => NamespaceConfig::new(ns.clone()).with_max_entries(max),
            None => ThreadBindingStore::namespace_config(ns.clone()),
        };
        mem.register_namespace(config).await.unwrap();
        let timer = Arc::new(ManualTimer::new(clock.clone()));
        let store = Self::instance(&clock, &timer, &mem, &ns, "owner");
        Self {
            clock,
            timer,
            mem,
            ns,
            store,
        }
    }

    fn instance(
        clock: &FakeClock,
        timer: &Arc<ManualTimer>,
        mem: &MemoryStore,
        ns: &Namespace,
        label: &str,
    ) -> ThreadBindingStore {
        ThreadBindingStore::builder(Arc::new(mem.clone()), ns.clone())
            .lease_config(lease_config())
            .clock(Arc::new(clock.clone()))
            .timer(timer.clone())
            .tokens(Arc::new(SequentialTokens::new(label)))
            .holder(label)
            .build()
            .unwrap()
    }

    /// A second store instance on the same rows (another process).
    pub(crate) fn peer(&self) -> ThreadBindingStore {
        Self::instance(&self.clock, &self.timer, &self.mem, &self.ns, "peer")
    }

    /// The stable-key identity of generation `s`.
    pub(crate) fn id(&self, s: &str) -> BindingIdentity {
        BindingIdentity::session(agent(), sid(s), Some(skey()))
    }

    /// The physical-key identity of generation `s` (no session key).
    pub(crate) fn physical(&self, s: &str) -> BindingIdentity {
        BindingIdentity::session(agent(), sid(s), None)
    }

    /// Sets the host session row of [`SESSION_KEY`].
    pub(crate) fn host(&self, session: &str, previous: Option<&str>) {
        let entry = HostSessionEntry::new(skey(), agent(), sid(session), START);
        self.mem.put_host_session(match previous {
            Some(previous) => {
                entry.with_predecessor(sid(previous), tether_core::GenerationChange::Transfer)
            }
            None => entry,
        });
    }

    pub(crate) fn generation(&self) -> GenerationAuthority {
        GenerationAuthority::new(Arc::new(self.mem.clone()))
    }

    pub(crate) fn harness(&self) -> ThreadBindingHarness {
        ThreadBindingHarness::new(
            HarnessId::new("threads").unwrap(),
            self.store.clone(),
            self.generation(),
        )
    }

    pub(crate) async fn record(&self, identity: &BindingIdentity) -> Option<ThreadBindingRecord> {
        self.store.record(identity).await.unwrap()
    }

    /// The stored JSON of the row (`None` when absent or expired).
    pub(crate) async fn raw(&self, identity: &BindingIdentity) -> Option<Value> {
        self.mem
            .lookup(&self.ns, identity.key())
            .await
            .unwrap()
            .map(|row| serde_json::from_slice(&row.value).unwrap())
    }

    /// Whether the row holds a lease (live or not).
    pub(crate) async fn leased(&self, identity: &BindingIdentity) -> bool {
        self.mem
            .lookup(&self.ns, identity.key())
            .await
            .unwrap()
            .is_some_and(|row| row.lease.is_some())
    }

    pub(crate) async fn count(&self) -> u64 {
        self.mem.count(&self.ns).await.unwrap()
    }

    pub(crate) async fn read(&self, identity: &BindingIdentity) -> Option<String> {
        self.store
            .read(identity)
            .await
            .unwrap()
            .map(|b| b.thread_id)
    }
}

/// Lets spawned tasks run until they block.
pub(crate) async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn lifecycle_scenario_39_stale_clear_keeps_the_replacement_thread() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    assert!(
        f.store
            .set(&s1, thread("thread-old"), opts())
            .await
            .unwrap()
    );
    assert!(
        f.store
            .set(&s1, thread("thread-new"), opts())
            .await
            .unwrap()
    );
    let stale = ThreadPin::thread("thread-old");
    assert!(!f.store.clear(&s1, Some(&stale), opts()).await.unwrap());
    assert_eq!(f.read(&s1).await.as_deref(), Some("thread-new"));
    let current = ThreadPin::thread("thread-new");
    assert!(f.store.clear(&s1, Some(&current), opts()).await.unwrap());
    assert_eq!(f.read(&s1).await, None);
}

#[tokio::test]
async fn lifecycle_scenario_40_one_row_across_physical_rotation() {
    let f = Fx::new().await;
    let (s1, s2) = (f.id("s1"), f.id("s2"));
    assert_eq!(s1.key(), s2.key());
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    assert_eq!(f.read(&s2).await, None, "another generation reads nothing");

    f.store
        .with_lease(&s2, false, None, |_| async { Ok(()) })
        .await
        .unwrap();
    let record = f.record(&s1).await.unwrap();
    assert_eq!(
        record.session_id,
        Some(sid("s1")),
        "a lease never swaps the generation"
    );

    let adopted = f.store.adopt(&s2, &sid("s1"), &caller()).await.unwrap();
    assert_eq!(adopted, AdoptionResult::Adopted);
    let record = f.record(&s2).await.unwrap();
    assert_eq!(record.session_id, Some(sid("s2")));
    assert_eq!(record.binding().unwrap().thread_id, "thread-1");

    let pin = ThreadPin::thread("thread-1");
    assert!(
        !f.store
            .patch(&s1, &pin, |b| b.model = Some("m".into()), opts())
            .await
            .unwrap()
    );
    assert!(!f.store.clear(&s1, Some(&pin), opts()).await.unwrap());
    assert!(f.store.clear(&s2, Some(&pin), opts()).await.unwrap());
    assert_eq!(f.read(&s2).await, None);
}

#[tokio::test]
async fn lifecycle_scenario_41_delayed_adoption_after_a_newer_generation() {
    let f = Fx::new().await;
    let (s1, s2, s3) = (f.id("s1"), f.id("s2"), f.id("s3"));
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    let c = caller();
    assert_eq!(
        f.store.adopt(&s2, &sid("s1"), &c).await.unwrap(),
        AdoptionResult::Adopted
    );
    assert_eq!(
        f.store.adopt(&s3, &sid("s2"), &c).await.unwrap(),
        AdoptionResult::Adopted
    );
    assert_eq!(
        f.store.adopt(&s3, &sid("s2"), &c).await.unwrap(),
        AdoptionResult::Current
    );
    assert_eq!(
        f.store.adopt(&s2, &sid("s1"), &c).await.unwrap(),
        AdoptionResult::Conflict,
        "a delayed admission cannot move the binding back"
    );
    assert_eq!(
        f.store.retire(&s2, opts()).await.unwrap(),
        TransitionOutcome::Conflict
    );
    assert_eq!(f.read(&s2).await, None);
    assert_eq!(f.read(&s3).await.as_deref(), Some("thread-1"));
}

#[tokio::test]
async fn lifecycle_scenario_42_reclaim_loses_to_a_concurrent_adoption() {
    let f = Fx::new().await;
    let (s1, s2, s3) = (f.id("s1"), f.id("s2"), f.id("s3"));
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    assert_eq!(
        f.store.prepare_reclaim(&s2).await.unwrap(),
        ReclaimPlan::Verify {
            expected_previous: sid("s1")
        }
    );
    assert_eq!(
        f.store.adopt(&s3, &sid("s1"), &caller()).await.unwrap(),
        AdoptionResult::Adopted
    );
    assert!(
        !f.store
            .reclaim_generation(&s2, &sid("s1"), &caller())
            .await
            .unwrap()
    );
    assert_eq!(f.read(&s3).await.as_deref(), Some("thread-1"));
}

#[tokio::test]
async fn lifecycle_scenario_43_no_tombstone_without_a_binding() {
    let f = Fx::new().await;
    assert_eq!(
        f.store.retire(&f.id("s1"), opts()).await.unwrap(),
        TransitionOutcome::Absent
    );
    assert_eq!(
        f.store.retire(&f.physical("s1"), opts()).await.unwrap(),
        TransitionOutcome::Absent
    );
    assert_eq!(f.count().await, 0);
}

#[tokio::test]
async fn lifecycle_scenario_44_physical_fences_expire_stable_fences_stay() {
    let f = Fx::new().await;
    let (physical, stable) = (f.physical("s1"), f.id("s1"));
    for identity in [&physical, &stable] {
        assert!(
            f.store
                .set(identity, thread("thread-1"), opts())
                .await
                .unwrap()
        );
        assert_eq!(
            f.store.retire(identity, opts()).await.unwrap(),
            TransitionOutcome::Applied
        );
    }
    f.clock.advance(Duration::from_secs(69));
    assert!(
        f.raw(&physical).await.is_some(),
        "kept while stale work drains"
    );
    f.clock.advance(Duration::from_secs(51));
    assert_eq!(f.raw(&physical).await, None, "the physical fence expired");
    assert_eq!(
        f.raw(&stable).await,
        Some(json!({"version": 1, "state": "cleared", "retired": true, "sessionId": "s1"}))
    );
}

#[tokio::test]
async fn lifecycle_scenario_45_claim_a_cleared_row_once() {
    let f = Fx::new().await;
    let (s1, s2) = (f.id("s1"), f.id("s2"));
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    assert!(
        !f.store
            .set_if_absent(&s2, thread("thread-2"), opts())
            .await
            .unwrap(),
        "an active binding exists"
    );
    assert!(f.store.clear(&s1, None, opts()).await.unwrap());
    // The fake clock does not move: the cleared tombstone (1 ms TTL) is still there.
    assert!(
        !f.store
            .set_if_absent(&s2, thread("thread-2"), opts())
            .await
            .unwrap(),
        "a cleared row of another generation still exists"
    );
    assert!(
        f.store
            .reclaim_generation(&s2, &sid("s1"), &caller())
            .await
            .unwrap()
    );
    assert!(
        f.store
            .set_if_absent(&s2, thread("thread-2"), opts())
            .await
            .unwrap()
    );
    assert!(
        !f.store
            .set_if_absent(&s1, thread("thread-1"), opts())
            .await
            .unwrap()
    );
    assert!(!f.store.clear(&s1, None, opts()).await.unwrap());
    assert_eq!(f.count().await, 1, "exactly one row");
    assert_eq!(f.read(&s2).await.as_deref(), Some("thread-2"));
}

#[tokio::test]
async fn lifecycle_scenario_46_reclaim_needs_the_exact_predecessor() {
    let f = Fx::new().await;
    let (s1, s2) = (f.id("s1"), f.id("s2"));
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    assert!(
        !f.store
            .reclaim_generation(&s2, &sid("other-session"), &caller())
            .await
            .unwrap()
    );
    assert_eq!(f.read(&s1).await.as_deref(), Some("thread-1"));
    assert!(
        f.store
            .reclaim_generation(&s2, &sid("s1"), &caller())
            .await
            .unwrap()
    );
    assert_eq!(
        f.raw(&s2).await,
        Some(json!({"version": 1, "state": "cleared", "sessionId": "s2"}))
    );
    assert!(!f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    assert!(
        !f.store
            .reclaim_generation(&s1, &sid("s1"), &caller())
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn lifecycle_scenario_47_stale_supervision_binding_is_preserved() {
    let f = Fx::new().await;
    let (s1, s2) = (f.id("s1"), f.id("s2"));
    let supervision = thread("thread-sup").supervised();
    assert!(f.store.set(&s1, supervision.clone(), opts()).await.unwrap());
    assert!(!f.store.set(&s1, thread("thread-2"), opts()).await.unwrap());
    assert!(!f.store.clear(&s1, None, opts()).await.unwrap());
    assert!(
        !f.store
            .reclaim_generation(&s2, &sid("s1"), &caller())
            .await
            .unwrap()
    );
    assert_eq!(
        f.store.reset(&s1, opts()).await.unwrap(),
        TransitionOutcome::Conflict
    );
    let record = f.record(&s1).await.unwrap();
    assert!(record.is_supervision());
    assert_eq!(record.session_id, Some(sid("s1")));
    assert_eq!(f.read(&s2).await, None);
    // The same supervision owner may rewrite its own binding.
    let mut renewed = supervision;
    renewed.model = Some("m2".into());
    assert!(f.store.set(&s1, renewed, opts()).await.unwrap());
}

#[tokio::test]
async fn lifecycle_scenario_48_retired_generation_fenced_until_the_successor_claims() {
    let f = Fx::new().await;
    let (s1, s2) = (f.id("s1"), f.id("s2"));
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    assert_eq!(
        f.store.retire(&s1, opts()).await.unwrap(),
        TransitionOutcome::Applied
    );
    let fence = json!({"version": 1, "state": "cleared", "retired": true, "sessionId": "s1"});
    assert!(f.store.clear(&s1, None, opts()).await.unwrap());
    assert_eq!(f.raw(&s1).await, Some(fence.clone()), "clear wrote nothing");
    assert!(!f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    let err = f
        .store
        .with_lease(&s1, false, None, |_| async { Ok(()) })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AcquisitionRejected { .. }), "{err:?}");
    assert!(err.to_string().contains("generation was retired"), "{err}");

    f.store
        .with_lease(&s2, false, None, |_| async { Ok(()) })
        .await
        .unwrap();
    assert_eq!(
        f.raw(&s1).await,
        Some(fence),
        "the successor may lease, not write"
    );
    assert!(!f.leased(&s1).await);
    assert!(
        f.store
            .reclaim_generation(&s2, &sid("s1"), &caller())
            .await
            .unwrap()
    );
    assert!(f.store.set(&s2, thread("thread-2"), opts()).await.unwrap());
}

#[tokio::test]
async fn lifecycle_scenario_49_clear_tombstones_expire_except_legacy_provenance() {
    let f = Fx::new().await;
    let normal = BindingIdentity::conversation(&BindingId::new("normal-1").unwrap());
    let legacy = BindingIdentity::conversation(&BindingId::new("legacy-source-1").unwrap());
    for identity in [&normal, &legacy] {
        assert!(
            f.store
                .set(identity, thread("thread-1"), opts())
                .await
                .unwrap()
        );
        assert!(f.store.clear(identity, None, opts()).await.unwrap());
    }
    f.clock.advance(Duration::from_millis(10));
    assert_eq!(f.raw(&normal).await, None);
    assert_eq!(
        f.raw(&legacy).await,
        Some(json!({"version": 1, "state": "cleared"}))
    );
}

#[tokio::test]
async fn lifecycle_scenario_51_patch_pins_the_thread_and_absent_only_writes_refuse() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    assert!(
        f.store
            .set(&s1, thread("thread-new").with_client("client-a"), opts())
            .await
            .unwrap()
    );
    let old = ThreadPin::thread("thread-old");
    assert!(
        !f.store
            .patch(&s1, &old, |b| b.model = Some("m".into()), opts())
            .await
            .unwrap()
    );
    assert!(
        !f.store
            .set_if_absent(&s1, thread("thread-x"), opts())
            .await
            .unwrap()
    );
    let other_client = ThreadPin::thread("thread-new").with_client("client-b");
    assert!(
        !f.store
            .patch(&s1, &other_client, |b| b.model = Some("m".into()), opts())
            .await
            .unwrap()
    );
    let pin = ThreadPin::thread("thread-new").with_client("client-a");
    assert!(
        f.store
            .patch(
                &s1,
                &pin,
                |b| {
                    b.model = Some("m".into());
                    b.thread_id = "hijacked".into();
                },
                opts()
            )
            .await
            .unwrap()
    );
    let binding = f.store.read(&s1).await.unwrap().unwrap();
    assert_eq!(binding.model.as_deref(), Some("m"));
    assert_eq!(
        binding.thread_id, "thread-new",
        "a patch never moves the thread"
    );
}

/// Scenario 52, part 1 (as scenario 1): a peer's write waits behind the owner's lease, and
/// its set-if-absent then sees the owner's binding.
#[tokio::test]
async fn lifecycle_scenario_52_peer_facade_waits_behind_a_lease() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    let peer = f.peer();
    let owner = &f.store;
    let handle = {
        let (peer, s1) = (peer.clone(), s1.clone());
        let start = tokio::sync::Notify::new();
        let start = Arc::new(start);
        let go = start.clone();
        let task = tokio::spawn(async move {
            go.notified().await;
            peer.set_if_absent(&s1, thread("thread-peer"), opts()).await
        });
        (task, start)
    };
    let (task, start) = handle;
    owner
        .with_lease(&s1, false, None, |_| async {
            start.notify_one();
            settle().await;
            assert!(!task.is_finished(), "the peer waits behind the live lease");
            assert!(owner.set(&s1, thread("thread-owner"), opts()).await?);
            settle().await;
            assert!(!task.is_finished());
            Ok(())
        })
        .await
        .unwrap();
    f.timer.advance(Duration::from_secs(1)).await;
    settle().await;
    assert!(!task.await.unwrap().unwrap(), "the owner's binding stands");
    assert_eq!(f.read(&s1).await.as_deref(), Some("thread-owner"));
    assert!(!f.leased(&s1).await, "released");
}

/// Scenario 52, part 2 (as scenario 4): a stale owner whose lease expired and was taken over
/// cannot write, and reports the backend's lost-lease text.
#[tokio::test]
async fn lifecycle_scenario_52_peer_facade_fences_a_stale_owner() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    let peer = f.peer();
    let owner = &f.store;
    let err = owner
        .with_lease(&s1, false, None, |_| async {
            f.clock.advance(Duration::from_secs(66));
            peer.with_lease(&s1, false, None, |_| async {
                assert!(peer.set(&s1, thread("thread-peer"), opts()).await?);
                Ok(())
            })
            .await?;
            owner.set(&s1, thread("thread-stale"), opts()).await
        })
        .await
        .unwrap_err();
    assert!(err.is_lost_lease(), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("Lost native thread binding lease"),
        "{err}"
    );
    assert_eq!(f.read(&s1).await.as_deref(), Some("thread-peer"));
}

/// Scenario 52, part 3 (as scenarios 2 and 3): heartbeats keep the owner's lease across a
/// request longer than the lease; a failed callback still releases, and the peer then writes.
#[tokio::test]
async fn lifecycle_scenario_52_peer_facade_renewed_lease_and_release_after_failure() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    let (inside_tx, inside_rx) = tokio::sync::oneshot::channel();
    let (exit_tx, exit_rx) = tokio::sync::oneshot::channel::<()>();
    let owner = {
        let (store, s1) = (f.store.clone(), s1.clone());
        tokio::spawn(async move {
            store
                .with_lease(&s1, false, None, |_| async {
                    inside_tx.send(()).unwrap();
                    exit_rx.await.unwrap();
                    Err::<(), _>(Error::other("owner failed"))
                })
                .await
        })
    };
    inside_rx.await.unwrap();
    let peer = {
        let (peer, s1) = (f.peer(), s1.clone());
        tokio::spawn(async move { peer.set(&s1, thread("thread-peer"), opts()).await })
    };
    f.timer.advance(Duration::from_secs(66)).await;
    assert!(
        !peer.is_finished(),
        "heartbeats renewed the lease past its lifetime"
    );
    exit_tx.send(()).unwrap();
    let err = owner.await.unwrap().unwrap_err();
    assert_eq!(err.to_string(), "owner failed");
    f.timer.advance(Duration::from_secs(1)).await;
    assert!(peer.await.unwrap().unwrap());
    assert_eq!(f.read(&s1).await.as_deref(), Some("thread-peer"));
    assert!(!f.leased(&s1).await);
}

#[tokio::test]
async fn invalid_rows_fail_closed_for_every_operation() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    f.mem
        .register_if_absent(
            &f.ns,
            s1.key(),
            tether_core::RowWrite {
                value: br#"{"version":9}"#.to_vec(),
                lease: None,
            },
            None,
        )
        .await
        .unwrap();
    assert!(matches!(
        f.store.read(&s1).await,
        Err(Error::InvalidRow { .. })
    ));
    assert!(f.store.prepare_reclaim(&s1).await.is_err());
    assert!(matches!(
        f.store.set(&s1, thread("t"), opts()).await,
        Err(Error::InvalidRow { .. })
    ));
    assert!(f.store.retire(&s1, opts()).await.is_err());
    assert_eq!(
        f.raw(&s1).await,
        Some(json!({"version": 9})),
        "the original state is retained"
    );
}

#[tokio::test]
async fn writes_refused_by_the_caller_authority_change_nothing() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    let revoked = WriteOptions::checked(Arc::new(|| Err(Error::revoked("caller closed"))));
    let err = f.store.set(&s1, thread("t"), revoked).await.unwrap_err();
    assert_eq!(err.to_string(), "caller closed");
    assert_eq!(f.count().await, 0);
}

#[tokio::test]
async fn reset_and_retire_inside_a_lease_keep_the_lease_and_apply_the_release_ttl() {
    let f = Fx::new().await;
    let (stable, physical) = (f.id("s1"), f.physical("s1"));
    for identity in [&stable, &physical] {
        assert!(
            f.store
                .set(identity, thread("thread-1"), opts())
                .await
                .unwrap()
        );
    }
    let store = &f.store;
    store
        .with_lease(&stable, false, None, |_| async {
            assert_eq!(
                store.reset(&stable, opts()).await?,
                TransitionOutcome::Applied
            );
            assert!(f.leased(&stable).await, "the own lease is kept");
            Ok(())
        })
        .await
        .unwrap();
    store
        .with_lease(&physical, false, None, |_| async {
            assert_eq!(
                store.retire(&physical, opts()).await?,
                TransitionOutcome::Applied
            );
            Ok(())
        })
        .await
        .unwrap();
    f.clock.advance(Duration::from_millis(5));
    assert_eq!(
        f.raw(&stable).await,
        None,
        "a released cleared row vanishes"
    );
    assert!(f.raw(&physical).await.is_some());
    f.clock.advance(store.physical_retire_ttl());
    assert_eq!(f.raw(&physical).await, None);
    let _ = f.clock.now();
}

#[tokio::test]
async fn thread_owner_scan_pages_through_the_namespace() {
    let f = Fx::new().await;
    for i in 0..300 {
        let identity = f.physical(&format!("p-{i:03}"));
        let thread_id = if i == 299 {
            "thread-last"
        } else {
            "thread-other"
        };
        assert!(
            f.store
                .set(&identity, thread(thread_id), opts())
                .await
                .unwrap()
        );
    }
    let first = f.physical("p-000");
    let last = f.physical("p-299");
    assert!(
        f.store
            .has_other_thread_owner(first.key(), "thread-last")
            .await
            .unwrap(),
        "found past the first page"
    );
    assert!(
        !f.store
            .has_other_thread_owner(last.key(), "thread-last")
            .await
            .unwrap(),
        "the excepted row does not count"
    );
    assert!(
        !f.store
            .has_other_thread_owner(first.key(), "thread-none")
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn concurrent_set_if_absent_binds_exactly_once() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (store, s1) = (
            if i % 2 == 0 {
                f.store.clone()
            } else {
                f.peer()
            },
            s1.clone(),
        );
        tasks.push(tokio::spawn(async move {
            store
                .set_if_absent(&s1, thread(&format!("thread-{i}")), opts())
                .await
        }));
    }
    let mut won = 0;
    for task in tasks {
        if task.await.unwrap().unwrap() {
            won += 1;
        }
    }
    assert_eq!(won, 1);
    assert_eq!(f.count().await, 1);
}

/// A full namespace is relieved only by shedding rows that carry nothing
/// (cleared, not retired, unleased, no task import, no legacy provenance).
#[tokio::test]
async fn shedding_removes_only_disposable_rows() {
    let f = Fx::with_capacity(Some(5)).await;
    let (cleared, fence, active, leased) = (
        f.physical("cleared"),
        f.id("fenced"),
        f.physical("active"),
        f.physical("leased"),
    );
    let legacy = BindingIdentity::conversation(&BindingId::new("legacy-import").unwrap());
    for identity in [&cleared, &fence, &active, &leased, &legacy] {
        assert!(f.store.set(identity, thread("t"), opts()).await.unwrap());
    }
    // Cleared inside a lease: no 1 ms TTL, the row stays until released.
    let store = &f.store;
    store
        .with_lease(&cleared, false, None, |_| async {
            assert!(store.clear(&cleared, None, opts()).await?);
            Ok(())
        })
        .await
        .unwrap();
    f.store.retire(&fence, opts()).await.unwrap();
    f.store.clear(&legacy, None, opts()).await.unwrap();
    let overflow = f.physical("overflow");
    assert!(
        f.store.set(&overflow, thread("t"), opts()).await.is_err(),
        "full"
    );

    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (held_tx, held_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = {
        let (store, leased) = (f.store.clone(), leased.clone());
        tokio::spawn(async move {
            let (inner, id) = (store.clone(), leased.clone());
            store
                .with_lease(&leased, false, None, |_| async move {
                    assert!(inner.clear(&id, None, opts()).await?);
                    held_tx.send(()).unwrap();
                    rx.await.unwrap();
                    Ok(())
                })
                .await
        })
    };
    held_rx.await.unwrap();
    // `cleared` was released with the 1 ms TTL; keep the clock still so it is still there.
    assert_eq!(f.store.shed_disposable(10).await.unwrap(), 1);
    assert_eq!(f.raw(&cleared).await, None);
    assert!(
        f.raw(&fence).await.is_some(),
        "a retired fence is never shed"
    );
    assert!(f.raw(&active).await.is_some());
    assert!(f.raw(&leased).await.is_some(), "a leased row is never shed");
    assert!(f.raw(&legacy).await.is_some(), "legacy provenance is kept");
    assert!(f.store.set(&overflow, thread("t"), opts()).await.unwrap());
    tx.send(()).unwrap();
    holder.await.unwrap().unwrap();
}

/// The builder's options land on its lifecycle: the clock, the holder label (also through the
/// general `lifecycle` adjuster), and the backend's own release TTL stays.
#[tokio::test]
async fn backend_builder_options_reach_the_lifecycle() {
    let clock = FakeClock::new(START);
    let mem = MemoryStore::new(Arc::new(clock.clone()));
    let ns = Namespace::new("builder-options").unwrap();
    mem.register_namespace(ThreadBindingStore::namespace_config(ns.clone()))
        .await
        .unwrap();
    let store = ThreadBindingStore::builder(Arc::new(mem.clone()), ns.clone())
        .clock(Arc::new(clock.clone()))
        .lifecycle(|b| b.holder("worker-7").batched_heartbeats(false))
        .build()
        .unwrap();
    assert_eq!(store.lifecycle().clock().now(), START, "the clock given");
    let identity = BindingIdentity::session(agent(), sid("gen-1"), Some(skey()));
    let holder = store
        .with_lease(&identity, false, None, |_| {
            let (mem, ns, key) = (mem.clone(), ns.clone(), identity.key().clone());
            async move {
                let row = mem.lookup(&ns, &key).await?.expect("leased row");
                Ok::<_, Error>(row.lease.and_then(|l| l.holder))
            }
        })
        .await
        .unwrap();
    assert_eq!(holder.as_deref(), Some("worker-7"));
}
