//! The fault-point walk of the lifecycle (RELIABILITY.md, "Fault injection at every step"): for
//! `transact`,
//! `with_lease` (acquire, renew, release), `with_deletion` (commit, rollback) and the host
//! deletion transaction, every fault point × every kind of
//! [`FaultInjectingStore`](tether_storage::fault_injection::FaultInjectingStore), on the
//! in-memory store and on SQLite. Each case checks the documented outcome: a typed error,
//! nothing replayed (the wrapped store's writes are counted), nothing lost, and the key
//! quarantined when the outcome is unknown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tether_core::HarnessRegistry;
use tether_core::{
    AgentHarness, AgentId, BindingKey, BindingStore, Error, FakeClock, HarnessId, JsonObjectCodec,
    LeaseConfig, LeaseWrite, MutationRun, Namespace, NamespaceConfig, QuarantineStore, ResetParams,
    RowTransaction, RowWrite, SequentialTokens, SessionDeletionHook, SessionDeletionParams,
    SessionId, SessionKey, SessionMutation, StoredRow, Timestamp, always_current,
};
use tether_harness_sdk::lifecycle::{
    Applied, DeletionMutation, DeletionOptions, DeletionOutcome, DirectRowTransaction,
    LeaseOptions, Lifecycle, ManualTimer, TransactOptions,
};
use tether_host::{ActiveRuns, HostSessions, TransactionHooks};
use tether_storage::fault_injection::{
    CasKind, Fault, FaultInjectingStore, FaultKind, FaultPoint, proves_nothing_written,
};
use tether_storage::{MemoryStore, NewHostSession, Store, StoreOptions};

type Record = Map<String, Value>;
type Lc = Lifecycle<JsonObjectCodec>;

const START: Timestamp = Timestamp::from_millis(1_700_000_000_000);
const STALE: Duration = Duration::from_secs(65);
const RENEW: Duration = Duration::from_millis(21_666);

/// Both store contracts, so one wrapper serves the lifecycle and its quarantine.
trait Backing: BindingStore + QuarantineStore {}
impl<T: BindingStore + QuarantineStore> Backing for T {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Memory,
    Sqlite,
}

/// One backend wrapped in the fault injector, with a fake clock and a manual timer.
struct Walk {
    clock: FakeClock,
    timer: Arc<ManualTimer>,
    faulty: Arc<FaultInjectingStore<dyn Backing>>,
    inner: Arc<dyn Backing>,
    sql: Option<Store>,
    _dir: Option<tempfile::TempDir>,
    next: AtomicUsize,
}

/// One case: a fresh namespace and lifecycle instance.
struct Case {
    ns: Namespace,
    lc: Lc,
    peer: Lc,
    release_failures: Arc<AtomicUsize>,
    context: String,
}

impl Walk {
    async fn new(backend: Backend) -> Self {
        let clock = FakeClock::new(START);
        let (inner, sql, dir): (Arc<dyn Backing>, _, _) = match backend {
            Backend::Memory => (
                Arc::new(MemoryStore::new(Arc::new(clock.clone()))),
                None,
                None,
            ),
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}/tether.db", dir.path().display());
                let store = Store::open_with(
                    StoreOptions::new(url)
                        .clock(Arc::new(clock.clone()))
                        .synchronous_normal(true),
                )
                .await
                .unwrap();
                (Arc::new(store.clone()), Some(store), Some(dir))
            }
        };
        let faulty: Arc<FaultInjectingStore<dyn Backing>> =
            Arc::new(FaultInjectingStore::new(inner.clone()).with_stall(Duration::from_millis(1)));
        Self {
            timer: Arc::new(ManualTimer::new(clock.clone())),
            clock,
            faulty,
            inner,
            sql,
            _dir: dir,
            next: AtomicUsize::new(0),
        }
    }

    fn lifecycle(&self, ns: &Namespace, name: &str, failures: &Arc<AtomicUsize>) -> Lc {
        let failures = failures.clone();
        Lifecycle::builder(
            self.faulty.clone(),
            ns.clone(),
            JsonObjectCodec,
            Arc::new(|current: Option<&Record>, _lease: &LeaseWrite| {
                Some(current.cloned().unwrap_or_default())
            }),
        )
        .lease_config(LeaseConfig {
            lease_duration: STALE,
            wait_budget: Duration::from_secs(70),
            retry_interval: Duration::from_secs(1),
            renew_interval: RENEW,
        })
        .clock(Arc::new(self.clock.clone()))
        .tokens(Arc::new(SequentialTokens::new(name)))
        .timer(self.timer.clone())
        .quarantine(self.faulty.clone())
        .holder(name)
        .on_release_failure(Arc::new(move |_, _| {
            failures.fetch_add(1, Ordering::SeqCst);
        }))
        .build()
        .unwrap()
    }

    async fn case(&self, op: &str, point: FaultPoint, kind: FaultKind) -> Case {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let ns = Namespace::new(format!("walk-{n}")).unwrap();
        self.inner
            .register_namespace(NamespaceConfig::new(ns.clone()))
            .await
            .unwrap();
        self.faulty.disarm();
        let release_failures = Arc::new(AtomicUsize::new(0));
        Case {
            lc: self.lifecycle(&ns, &format!("owner-{n}"), &release_failures),
            peer: self.lifecycle(&ns, &format!("peer-{n}"), &Arc::new(AtomicUsize::new(0))),
            ns,
            release_failures,
            context: format!("{op} {point} {kind:?}"),
        }
    }

    /// Writes `{"v": value}` directly to the wrapped store.
    async fn put(&self, case: &Case, key: &BindingKey, value: &str) {
        let row = RowWrite {
            value: serde_json::to_vec(&json!({ "v": value })).unwrap(),
            lease: None,
        };
        assert!(
            self.inner
                .register_if_absent(&case.ns, key, row, None)
                .await
                .unwrap()
        );
    }

    async fn raw(&self, case: &Case, key: &BindingKey) -> Option<StoredRow> {
        self.inner.lookup(&case.ns, key).await.unwrap()
    }

    async fn value(&self, case: &Case, key: &BindingKey) -> Option<String> {
        self.raw(case, key).await.map(|row| {
            let v: Value = serde_json::from_slice(&row.value).unwrap();
            v["v"].as_str().unwrap().to_owned()
        })
    }

    /// Arms `fault` for `key` and starts counting afresh.
    fn arm(&self, fault: Fault, key: &BindingKey) {
        self.faulty.reset_stats();
        self.faulty.arm(fault.for_key(key.clone()));
    }

    /// The durable quarantine record and the refusal of every instance.
    async fn assert_quarantined(&self, case: &Case, key: &BindingKey) {
        let c = &case.context;
        assert!(
            self.inner
                .quarantined(&case.ns, key)
                .await
                .unwrap()
                .is_some(),
            "{c}: the key is quarantined durably"
        );
        let writes = self.faulty.stats().writes_applied;
        for lc in [&case.lc, &case.peer] {
            let refused = set(lc, key, "after").await.unwrap_err();
            assert!(refused.is_outcome_unknown(), "{c}: refused: {refused:?}");
        }
        assert_eq!(
            self.faulty.stats().writes_applied,
            writes,
            "{c}: nothing written"
        );
    }

    async fn assert_not_quarantined(&self, case: &Case, key: &BindingKey) {
        assert!(
            self.inner
                .quarantined(&case.ns, key)
                .await
                .unwrap()
                .is_none(),
            "{}: not quarantined",
            case.context
        );
    }
}

fn key(name: &str) -> BindingKey {
    BindingKey::conversation(&tether_core::BindingId::new(name).unwrap())
}

async fn set(lc: &Lc, key: &BindingKey, value: &str) -> Result<(), Error> {
    let value = value.to_owned();
    lc.transact(key, TransactOptions::default(), move |current, _| {
        let mut next = current.cloned().unwrap_or_default();
        next.insert("v".into(), json!(value));
        Ok(Applied::write(next, ()))
    })
    .await
}

fn unknown(key: &BindingKey, cause: Error) -> Error {
    Error::OutcomeUnknown {
        key: key.clone(),
        message: format!("binding write outcome unknown: {cause}"),
        cause: Some(Arc::new(cause)),
    }
}

#[track_caller]
fn assert_store_error(error: &Error, context: &str) {
    assert!(
        matches!(error, Error::Store { .. }),
        "{context}: typed store error, got {error:?}"
    );
}

/// A compare-and-apply fault narrowed to the acquisition.
fn acquisition(point: FaultPoint, kind: FaultKind) -> Fault {
    let fault = Fault::new(point, kind);
    if point == FaultPoint::Observe {
        fault
    } else {
        fault.when(|call| call.kind == CasKind::Acquire)
    }
}

const CAS_POINTS: [FaultPoint; 3] = [
    FaultPoint::Observe,
    FaultPoint::CompareBefore,
    FaultPoint::CompareAfter,
];

/// `transact`: the write fails; it is never replayed; an unknown outcome is quarantined by the
/// caller and refused by every instance.
async fn transact_case(w: &Walk, point: FaultPoint, kind: FaultKind) {
    let case = w.case("transact", point, kind).await;
    let c = &case.context;
    let k = key("t");
    w.put(&case, &k, "v0").await;
    w.arm(Fault::new(point, kind), &k);
    let error = set(&case.lc, &k, "v1").await.unwrap_err();
    assert_store_error(&error, c);
    let stats = w.faulty.stats();
    let applied = point.applied_with(kind);
    assert_eq!(stats.fired.len(), 1, "{c}");
    assert!(stats.cas_total() <= 1, "{c}: never replayed: {stats:?}");
    assert_eq!(stats.writes_applied, u64::from(applied), "{c}");
    let expected = if applied { "v1" } else { "v0" };
    assert_eq!(
        w.value(&case, &k).await.as_deref(),
        Some(expected),
        "{c}: nothing lost"
    );
    if proves_nothing_written(&error) {
        w.assert_not_quarantined(&case, &k).await;
        set(&case.lc, &k, "v2").await.unwrap();
        assert_eq!(w.value(&case, &k).await.as_deref(), Some("v2"), "{c}");
    } else {
        case.lc.block(&k, unknown(&k, error), None).await.unwrap();
        w.assert_quarantined(&case, &k).await;
    }
}

/// `with_lease` acquisition: `run` never starts and the acquisition is never replayed; an
/// acquisition that applied but was reported failed is released by its exact token at exit;
/// another owner then takes the key with the value intact.
async fn acquire_case(w: &Walk, point: FaultPoint, kind: FaultKind) {
    let case = w.case("acquire", point, kind).await;
    let c = &case.context;
    let k = key("a");
    w.put(&case, &k, "v0").await;
    w.arm(acquisition(point, kind), &k);
    let ran = AtomicBool::new(false);
    let error = case
        .lc
        .with_lease(&k, LeaseOptions::default(), |_| async {
            ran.store(true, Ordering::SeqCst);
            Ok(())
        })
        .await
        .unwrap_err();
    assert_store_error(&error, c);
    assert!(!ran.load(Ordering::SeqCst), "{c}: run never started");
    let stats = w.faulty.stats();
    let applied = point.applied_with(kind);
    assert_eq!(stats.fired.len(), 1, "{c}");
    assert_eq!(
        stats.cas_of(CasKind::Acquire),
        u64::from(point != FaultPoint::Observe),
        "{c}"
    );
    // An acquisition that applied although it failed carries the owner's exact token, which
    // the scope's exit releases (one release, never a retry of the acquisition).
    assert_eq!(stats.cas_of(CasKind::Release), u64::from(applied), "{c}");
    assert_eq!(stats.writes_applied, 2 * u64::from(applied), "{c}");
    let row = w.raw(&case, &k).await.unwrap();
    assert!(row.lease.is_none(), "{c}: no lease left behind");
    assert_eq!(w.value(&case, &k).await.as_deref(), Some("v0"), "{c}");
    case.peer
        .with_lease(&k, LeaseOptions::default(), |_| async { Ok(()) })
        .await
        .unwrap_or_else(|e| panic!("{c}: another owner takes the key: {e}"));
    assert_eq!(
        w.value(&case, &k).await.as_deref(),
        Some("v0"),
        "{c}: nothing lost"
    );
}

/// The COMMIT of a `transact` write under a lease, or of an acquisition, fails: the outcome is
/// unknown whether or not the write was saved, so the owner stops, the key is blocked in the
/// instance and quarantined durably without any call of the host, and every instance refuses
/// it; the write is never replayed.
async fn commit_case(w: &Walk, op: &str, kind: FaultKind) {
    let case = w.case(op, FaultPoint::Commit, kind).await;
    let c = &case.context;
    let k = key("c");
    w.put(&case, &k, "v0").await;
    let applied = FaultPoint::Commit.applied_with(kind);
    let ran = AtomicBool::new(false);
    let error = if op == "commit-acquire" {
        w.arm(acquisition(FaultPoint::Commit, kind), &k);
        case.lc
            .with_lease(&k, LeaseOptions::default(), |_| async {
                ran.store(true, Ordering::SeqCst);
                Ok(())
            })
            .await
            .unwrap_err()
    } else {
        let lc = &case.lc;
        let (k, ran) = (&k, &ran);
        case.lc
            .with_lease(k, LeaseOptions::default(), |guard| async move {
                ran.store(true, Ordering::SeqCst);
                w.arm(Fault::new(FaultPoint::Commit, kind), k);
                let error = set(lc, k, "v1").await.unwrap_err();
                assert!(
                    guard.failure().is_some_and(|f| f.is_outcome_unknown()),
                    "{c}: the owner stops"
                );
                Err::<(), _>(error)
            })
            .await
            .unwrap_err()
    };
    assert!(error.is_outcome_unknown(), "{c}: {error:?}");
    assert_eq!(ran.load(Ordering::SeqCst), op != "commit-acquire", "{c}");
    let stats = w.faulty.stats();
    assert_eq!(stats.fired.len(), 1, "{c}");
    let wanted = if op == "commit-acquire" {
        CasKind::Acquire
    } else {
        CasKind::Write
    };
    assert_eq!(stats.cas_of(wanted), 1, "{c}: never replayed: {stats:?}");
    if op != "commit-acquire" {
        let expected = if applied { "v1" } else { "v0" };
        assert_eq!(w.value(&case, &k).await.as_deref(), Some(expected), "{c}");
    }
    assert!(case.lc.is_blocked(&k), "{c}: blocked in the instance");
    w.assert_quarantined(&case, &k).await;
}

/// A quarantine record that cannot be written when the key is blocked (the store is failing,
/// which is often why the outcome is unknown) is written at the key's next entry point.
async fn commit_quarantine_retry_case(w: &Walk) {
    let case = w
        .case(
            "commit-quarantine-retry",
            FaultPoint::Commit,
            FaultKind::Fail,
        )
        .await;
    let c = &case.context;
    let k = key("q");
    w.put(&case, &k, "v0").await;
    w.arm(Fault::new(FaultPoint::Commit, FaultKind::Fail), &k);
    w.faulty.fail_quarantine_writes(1);
    let error = set(&case.lc, &k, "v1").await.unwrap_err();
    assert!(error.is_outcome_unknown(), "{c}: {error:?}");
    assert!(
        case.lc.is_blocked(&k),
        "{c}: blocked in the instance at once"
    );
    w.assert_not_quarantined(&case, &k).await;
    let again = set(&case.lc, &k, "v2").await.unwrap_err();
    assert!(again.is_outcome_unknown(), "{c}: still refused: {again:?}");
    w.assert_quarantined(&case, &k).await;
    assert_eq!(w.value(&case, &k).await.as_deref(), Some("v0"), "{c}");
}

/// A heartbeat renewal fails: the lease is lost (sticky), `run` is never cancelled, the
/// renewal is not replayed, and the exact token is still released at exit.
async fn renewal_case(w: &Walk, kind: FaultKind) {
    let case = w.case("renewal", FaultPoint::Renewal, kind).await;
    let c = &case.context;
    let k = key("r");
    w.put(&case, &k, "v0").await;
    w.arm(Fault::new(FaultPoint::Renewal, kind), &k);
    let finished = &AtomicBool::new(false);
    let error = case
        .lc
        .with_lease(&k, LeaseOptions::default(), |guard| async move {
            w.timer.advance(RENEW).await;
            guard.join_renewal().await;
            assert!(
                guard.failure().is_some(),
                "{c}: the renewal failure is recorded"
            );
            finished.store(true, Ordering::SeqCst);
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(error.is_lost_lease(), "{c}: {error:?}");
    let cause = std::error::Error::source(&error).expect("the renewal cause is kept");
    assert!(cause.to_string().contains("injected fault"), "{c}: {cause}");
    assert!(
        finished.load(Ordering::SeqCst),
        "{c}: run was not cancelled"
    );
    let stats = w.faulty.stats();
    assert_eq!(stats.fired.len(), 1, "{c}");
    assert_eq!(
        stats.cas_of(CasKind::Renew),
        1,
        "{c}: the renewal is not replayed"
    );
    assert_eq!(
        stats.cas_of(CasKind::Release),
        1,
        "{c}: the exact token is released"
    );
    let row = w.raw(&case, &k).await.unwrap();
    assert!(row.lease.is_none(), "{c}: released");
    assert_eq!(
        w.value(&case, &k).await.as_deref(),
        Some("v0"),
        "{c}: nothing lost"
    );
}

/// The release fails: the scope still succeeds, the failure is reported once, the release is
/// not replayed, and the value is intact (a stranded lease expires).
async fn release_case(w: &Walk, kind: FaultKind) {
    let case = w.case("release", FaultPoint::Release, kind).await;
    let c = &case.context;
    let k = key("l");
    w.put(&case, &k, "v0").await;
    w.arm(Fault::new(FaultPoint::Release, kind), &k);
    case.lc
        .with_lease(&k, LeaseOptions::default(), |_| async { Ok(()) })
        .await
        .unwrap();
    let stats = w.faulty.stats();
    let applied = FaultPoint::Release.applied_with(kind);
    assert_eq!(stats.fired.len(), 1, "{c}");
    assert_eq!(stats.cas_of(CasKind::Release), 1, "{c}: not replayed");
    assert_eq!(
        case.release_failures.load(Ordering::SeqCst),
        1,
        "{c}: reported"
    );
    let row = w.raw(&case, &k).await.unwrap();
    assert_eq!(row.lease.is_none(), applied, "{c}");
    w.clock.advance(STALE);
    set(&case.peer, &k, "v1").await.unwrap();
    assert_eq!(w.value(&case, &k).await.as_deref(), Some("v1"), "{c}");
}

/// The host's settlement after a failed commit: a refusal proves nothing happened (roll back);
/// anything else is unknown (quarantine).
async fn settle_failed_commit(m: &DeletionMutation, key: &BindingKey, error: &Error) {
    if proves_nothing_written(error) {
        m.rollback().await.unwrap();
        m.settle_outcome(DeletionOutcome::RolledBack, None)
            .await
            .unwrap();
    } else {
        m.settle_outcome(DeletionOutcome::Unknown, Some(unknown(key, error.clone())))
            .await
            .unwrap();
    }
}

/// `with_deletion` commit through a row transaction whose delete fails.
async fn deletion_commit_case(w: &Walk, kind: FaultKind) {
    let case = w.case("deletion-commit", FaultPoint::DeleteIf, kind).await;
    let c = &case.context;
    let k = key("d");
    w.put(&case, &k, "v0").await;
    w.arm(Fault::new(FaultPoint::DeleteIf, kind), &k);
    let tx = DirectRowTransaction::new(w.faulty.clone());
    let (kr, txr) = (&k, &tx);
    let seen = &std::sync::Mutex::new(None);
    let scope = case
        .lc
        .with_deletion(
            &k,
            DeletionOptions::new(always_current()),
            |_, m| async move {
                let error = m.commit(txr).await.unwrap_err();
                settle_failed_commit(&m, kr, &error).await;
                *seen.lock().unwrap() = Some(error);
                Ok(())
            },
        )
        .await;
    let error = seen.lock().unwrap().take().expect("the commit ran");
    assert_store_error(&error, c);
    // A deletion settled as unknown reports the sticky unknown outcome at scope exit.
    assert_eq!(
        scope.as_ref().err().is_some_and(Error::is_outcome_unknown),
        !proves_nothing_written(&error),
        "{c}: {scope:?}"
    );
    let stats = w.faulty.stats();
    let applied = FaultPoint::DeleteIf.applied_with(kind);
    assert_eq!(stats.fired.len(), 1, "{c}");
    assert_eq!(stats.deletes, 1, "{c}: the delete is not replayed");
    assert_eq!(stats.registers, 0, "{c}: nothing resurrected");
    let row = w.raw(&case, &k).await;
    assert_eq!(row.is_none(), applied, "{c}: deleted only when applied");
    if proves_nothing_written(&error) {
        assert!(
            row.unwrap().lease.is_none(),
            "{c}: rolled back and released"
        );
        assert_eq!(stats.cas_of(CasKind::Release), 1, "{c}");
        w.assert_not_quarantined(&case, &k).await;
    } else {
        assert_eq!(stats.cas_of(CasKind::Release), 0, "{c}: release suppressed");
        w.assert_quarantined(&case, &k).await;
        assert_eq!(
            w.raw(&case, &k).await.is_none(),
            applied,
            "{c}: nothing resurrected"
        );
    }
}

/// `with_deletion` rollback after a committed delete, when the host transaction failed: the
/// rollback's read or re-registration fails; it is not replayed and the key is quarantined.
async fn deletion_rollback_case(w: &Walk, point: FaultPoint, kind: FaultKind) {
    let case = w.case("deletion-rollback", point, kind).await;
    let c = &case.context;
    let k = key("b");
    w.put(&case, &k, "v0").await;
    let tx = DirectRowTransaction::new(w.faulty.clone());
    let (kr, txr) = (&k, &tx);
    let seen = &std::sync::Mutex::new(None);
    let scope = case
        .lc
        .with_deletion(
            &k,
            DeletionOptions::new(always_current()),
            |_, m| async move {
                m.commit(txr).await.unwrap();
                assert!(m.is_deleted());
                w.arm(Fault::new(point, kind), kr);
                let error = m.rollback().await.unwrap_err();
                // A failed rollback leaves the binding's state unknown to the host.
                m.settle_outcome(DeletionOutcome::Unknown, Some(unknown(kr, error.clone())))
                    .await
                    .unwrap();
                *seen.lock().unwrap() = Some(error);
                Ok(())
            },
        )
        .await;
    let error = seen.lock().unwrap().take().expect("the rollback ran");
    assert_store_error(&error, c);
    assert!(
        scope.as_ref().err().is_some_and(Error::is_outcome_unknown),
        "{c}: the sticky unknown outcome at scope exit: {scope:?}"
    );
    let stats = w.faulty.stats();
    let applied = point.applied_with(kind);
    assert_eq!(stats.fired.len(), 1, "{c}");
    assert_eq!(
        stats.registers,
        u64::from(point == FaultPoint::RegisterIfAbsent),
        "{c}: the re-registration is not replayed"
    );
    assert_eq!(stats.cas_of(CasKind::Release), 0, "{c}: release suppressed");
    let row = w.raw(&case, &k).await;
    assert_eq!(row.is_some(), applied, "{c}: restored only when applied");
    if let Some(row) = row {
        assert_eq!(w.value(&case, &k).await.as_deref(), Some("v0"), "{c}");
        assert!(row.lease.is_some(), "{c}: restored under the owner's token");
    }
    w.assert_quarantined(&case, &k).await;
}

async fn walk_lifecycle(backend: Backend) {
    let w = &Walk::new(backend).await;
    let mut cases = 0;
    for kind in FaultKind::ALL {
        for point in CAS_POINTS {
            transact_case(w, point, kind).await;
            acquire_case(w, point, kind).await;
            cases += 2;
        }
        commit_case(w, "commit-transact", kind).await;
        commit_case(w, "commit-acquire", kind).await;
        cases += 2;
        renewal_case(w, kind).await;
        release_case(w, kind).await;
        deletion_commit_case(w, kind).await;
        for point in [FaultPoint::Observe, FaultPoint::RegisterIfAbsent] {
            deletion_rollback_case(w, point, kind).await;
            cases += 1;
        }
        cases += 3;
    }
    commit_quarantine_retry_case(w).await;
    assert_eq!(cases, 39);
}

#[tokio::test]
async fn fault_walk_lifecycle_every_point_on_memory() {
    walk_lifecycle(Backend::Memory).await;
}

#[tokio::test]
async fn fault_walk_lifecycle_every_point_on_sqlite() {
    walk_lifecycle(Backend::Sqlite).await;
}

// ---------------------------------------------------------------------------------------------
// `with_deletion` inside the host's SQL transaction (`HostSessions::delete_sessions`).

/// A prepared deletion whose commit runs through the fault injector's row transaction.
struct FaultyCommit {
    inner: DeletionMutation,
    faulty: Arc<FaultInjectingStore<dyn Backing>>,
}

#[async_trait]
impl SessionMutation for FaultyCommit {
    async fn commit(&self, tx: &dyn RowTransaction) -> Result<(), Error> {
        self.inner.commit(&self.faulty.row_transaction(tx)).await
    }

    async fn rollback(&self) -> Result<(), Error> {
        self.inner.rollback().await
    }
}

/// A harness on the lifecycle that settles its deletion after the host transaction: committed
/// on success; unknown when the row was deleted but the host reported a failure (COMMIT may
/// have happened); rolled back otherwise.
struct BindingHarness {
    id: HarnessId,
    lc: Lc,
    faulty: Arc<FaultInjectingStore<dyn Backing>>,
}

impl std::fmt::Debug for BindingHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BindingHarness")
            .field("id", &self.id)
            .finish()
    }
}

#[async_trait]
impl AgentHarness for BindingHarness {
    fn id(&self) -> &HarnessId {
        &self.id
    }

    async fn reset(&self, _params: ResetParams) -> Result<(), Error> {
        Ok(())
    }

    fn session_deletion(&self) -> Option<&dyn SessionDeletionHook> {
        Some(self)
    }
}

#[async_trait]
impl SessionDeletionHook for BindingHarness {
    async fn with_session_deletion(
        &self,
        params: SessionDeletionParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        let key = BindingKey::physical(&params.agent_id, &params.session_id);
        let faulty = self.faulty.clone();
        let kr = &key;
        self.lc
            .with_deletion(
                &key,
                DeletionOptions::new(params.assert_current.clone()),
                |_, m| async move {
                    let result = run(Arc::new(FaultyCommit {
                        inner: m.clone(),
                        faulty,
                    }))
                    .await;
                    match &result {
                        Ok(()) => m.settle_outcome(DeletionOutcome::Committed, None).await?,
                        Err(error) if m.is_deleted() => {
                            m.settle_outcome(
                                DeletionOutcome::Unknown,
                                Some(unknown(kr, error.clone())),
                            )
                            .await?;
                        }
                        Err(_) => m.settle_outcome(DeletionOutcome::RolledBack, None).await?,
                    }
                    result
                },
            )
            .await
    }
}

async fn host_case(w: &Walk, point: FaultPoint, kind: FaultKind, n: usize) {
    let store = w.sql.clone().unwrap();
    let case = w.case("host-deletion", point, kind).await;
    let c = &case.context;
    let harness_id = HarnessId::new("binding-harness").unwrap();
    let registry = HarnessRegistry::shared();
    registry.register(Arc::new(BindingHarness {
        id: harness_id.clone(),
        lc: case.lc.clone(),
        faulty: w.faulty.clone(),
    }));
    let agent = AgentId::new("main").unwrap();
    let session = SessionKey::new(format!("agent:main:walk-{n}")).unwrap();
    let session_id = SessionId::new(format!("s-{n}")).unwrap();
    assert!(
        store
            .create_session(NewHostSession {
                session_key: session.clone(),
                agent_id: agent.clone(),
                session_id: session_id.clone(),
                agent_harness_id: Some(harness_id),
            })
            .await
            .unwrap()
    );
    let k = BindingKey::physical(&agent, &session_id);
    w.put(&case, &k, "v0").await;
    let fault = Fault::new(point, kind);
    w.faulty.reset_stats();
    w.faulty.arm(if point == FaultPoint::DeleteIf {
        fault.for_key(k.clone())
    } else {
        fault
    });
    let hosts = HostSessions::new(store.clone(), registry, Arc::new(ActiveRuns::new())).with_hooks(
        TransactionHooks::injecting(w.faulty.host_transaction_faults()),
    );
    let error = hosts
        .delete_sessions(std::slice::from_ref(&session))
        .await
        .unwrap_err();
    assert_store_error(&error, c);
    let stats = w.faulty.stats();
    assert_eq!(stats.fired.len(), 1, "{c}");
    assert_eq!(stats.deletes, 1, "{c}: the commit ran once");
    assert_eq!(stats.registers, 0, "{c}: nothing re-registered");
    let committed = point == FaultPoint::AfterCommit;
    let entry = store.session(&session).await.unwrap();
    let row = w.raw(&case, &k).await;
    if committed {
        assert!(entry.is_none() && row.is_none(), "{c}: deleted together");
        assert_eq!(
            stats.cas_of(CasKind::Release),
            0,
            "{c}: nothing written after COMMIT"
        );
        w.assert_quarantined(&case, &k).await;
        assert!(w.raw(&case, &k).await.is_none(), "{c}: never resurrected");
    } else {
        assert!(entry.is_some(), "{c}: session kept");
        let row = row.expect("binding kept");
        assert!(row.lease.is_none(), "{c}: rolled back, lease released");
        assert_eq!(
            w.value(&case, &k).await.as_deref(),
            Some("v0"),
            "{c}: nothing lost"
        );
        w.assert_not_quarantined(&case, &k).await;
    }
}

#[tokio::test]
async fn fault_walk_host_deletion_with_lifecycle_every_point_on_sqlite() {
    let w = &Walk::new(Backend::Sqlite).await;
    let mut n = 0;
    for point in [
        FaultPoint::DeleteIf,
        FaultPoint::CommitEdge,
        FaultPoint::AfterCommit,
    ] {
        for kind in FaultKind::ALL {
            n += 1;
            host_case(w, point, kind, n).await;
        }
    }
    assert_eq!(n, 9);
}
