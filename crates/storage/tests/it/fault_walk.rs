//! The fault-point walk of the store and of the host deletion / context-reset / reset
//! transactions (RELIABILITY.md, "Fault injection at every step"): every point × every kind,
//! checking the documented outcome — a typed store error, nothing replayed (the inner writes
//! are counted), nothing lost or half-applied, and the key quarantined when the outcome is
//! unknown.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tether_core::HarnessRegistry;
use tether_core::{
    AgentHarness, AgentId, ApplyOutcome, BindingKey, BindingStore, Error, HarnessId, Intent,
    LeaseToken, LeaseWrite, MutationRun, Namespace, QuarantineEntry, QuarantineStore, ResetParams,
    RowTransaction, RowWrite, SessionContextResetHook, SessionContextResetParams,
    SessionDeletionHook, SessionDeletionParams, SessionId, SessionKey, SessionMutation, admit_all,
};
use tether_host::{ActiveRuns, HostSessions, TransactionHooks};
use tether_storage::fault_injection::{
    CasKind, Fault, FaultInjectingStore, FaultKind, FaultPoint, FaultStats, proves_nothing_written,
};
use tether_storage::{NewTranscriptEntry, Store, TranscriptRole};

use crate::conformance::host_cases::{new_session, session_key};
use crate::deletion::harness::{bind, binding_key};
use crate::support::{AnyStore, START, key, memory_backend, sqlite_backend, sqlite_store};

/// The store points a single store call can hit, and the call that hits it.
const STORE_POINTS: [FaultPoint; 8] = [
    FaultPoint::Observe,
    FaultPoint::CompareBefore,
    FaultPoint::CompareAfter,
    FaultPoint::RegisterIfAbsent,
    FaultPoint::DeleteIf,
    FaultPoint::Release,
    FaultPoint::Renewal,
    FaultPoint::Commit,
];

fn leased(value: &str, token: &str, expires_ms: u64) -> RowWrite {
    RowWrite {
        value: value.as_bytes().to_vec(),
        lease: Some(LeaseWrite {
            token: LeaseToken::new(token).unwrap(),
            expires_at: START + std::time::Duration::from_millis(expires_ms),
            holder: None,
        }),
    }
}

fn assert_store_error(error: &Error, context: &str) {
    assert!(
        matches!(error, Error::Store { .. }),
        "{context}: expected a typed store error, got {error:?}"
    );
}

/// Runs the compare-and-apply call (or its observation) that reaches `point` against the row
/// `v0` leased by `owner`.
async fn hit(
    store: &FaultInjectingStore<dyn AnyStore>,
    ns: &Namespace,
    k: &BindingKey,
    point: FaultPoint,
) -> Result<(), Error> {
    let seen = store.observe(ns, k).await?;
    let intent = match point {
        FaultPoint::Release => Intent::Set {
            row: RowWrite {
                value: b"v0".to_vec(),
                lease: None,
            },
            ttl: None,
        },
        FaultPoint::Renewal => Intent::Set {
            row: leased("v0", "owner", 120_000),
            ttl: None,
        },
        _ => Intent::Set {
            row: leased("v1", "owner", 60_000),
            ttl: None,
        },
    };
    match store
        .compare_and_apply(ns, k, &seen.comparison, intent, &admit_all)
        .await?
    {
        ApplyOutcome::Applied { .. } => Ok(()),
        other => Err(Error::other(format!("unexpected outcome {other:?}"))),
    }
}

/// One point × kind on one backend: the row `v0` leased by `owner` until START+60 s.
async fn walk_store_point(
    name: &str,
    inner: Arc<dyn AnyStore>,
    ns: &Namespace,
    point: FaultPoint,
    kind: FaultKind,
    n: usize,
) {
    let context = format!("{name} {point} {kind:?}");
    let store =
        FaultInjectingStore::new(inner.clone()).with_stall(std::time::Duration::from_millis(1));
    let k = key(&format!("walk-{n}"));
    assert!(
        store
            .register_if_absent(ns, &k, leased("v0", "owner", 60_000), None)
            .await
            .unwrap()
    );
    store.reset_stats();
    store.arm(Fault::new(point, kind).for_key(k.clone()));
    let before = inner.lookup(ns, &k).await.unwrap().unwrap();

    let result = match point {
        FaultPoint::RegisterIfAbsent => {
            // The key must be absent for a create: delete it first (no fault on delete).
            inner.delete_if(ns, &k, &|_| true).await.unwrap();
            store
                .register_if_absent(ns, &k, leased("v1", "owner", 60_000), None)
                .await
                .map(|_| ())
        }
        FaultPoint::DeleteIf => store.delete_if(ns, &k, &|_| true).await.map(|_| ()),
        _ => hit(&store, ns, &k, point).await,
    };
    let error = result.expect_err(&context);
    if point == FaultPoint::Commit {
        // A failed COMMIT is an unknown outcome for the key, whether or not the write stands.
        assert!(
            matches!(&error, Error::OutcomeUnknown { key, .. } if *key == k),
            "{context}: expected an unknown outcome for {k}, got {error:?}"
        );
    } else {
        assert_store_error(&error, &context);
    }
    let stats: FaultStats = store.stats();
    assert_eq!(stats.fired.len(), 1, "{context}: exactly one fault fired");
    let applied = point.applied_with(kind);
    assert_eq!(
        stats.writes_applied,
        u64::from(applied),
        "{context}: the inner store applied the write at most once, never replayed"
    );
    assert!(
        stats.cas_total() <= 1 && stats.registers <= 1 && stats.deletes <= 1,
        "{context}: one call, no retry: {stats:?}"
    );
    let after = inner.lookup(ns, &k).await.unwrap();
    match point {
        FaultPoint::Observe | FaultPoint::CompareBefore => {
            assert_eq!(after.as_ref(), Some(&before), "{context}: nothing changed");
        }
        FaultPoint::CompareAfter => {
            assert_eq!(after.unwrap().value, b"v1", "{context}: the write stands");
        }
        FaultPoint::Commit => {
            let stands = after.unwrap().value == b"v1";
            assert_eq!(
                stands, applied,
                "{context}: the write stands iff COMMIT happened"
            );
        }
        FaultPoint::RegisterIfAbsent => {
            assert_eq!(after.is_some(), applied, "{context}: created iff applied");
        }
        FaultPoint::DeleteIf => {
            assert_eq!(after.is_none(), applied, "{context}: deleted iff applied");
        }
        FaultPoint::Release => {
            let after = after.unwrap();
            assert_eq!(after.value, b"v0", "{context}: the value is never lost");
            assert_eq!(after.lease.is_none(), applied, "{context}");
            assert_eq!(stats.cas_of(CasKind::Release), 1, "{context}");
        }
        FaultPoint::Renewal => {
            let after = after.unwrap();
            let lease = after.lease.unwrap();
            assert_eq!(after.value, b"v0", "{context}");
            assert_eq!(
                lease.epoch,
                before.lease.unwrap().epoch,
                "{context}: same epoch"
            );
            assert_eq!(
                lease.expires_at > START + std::time::Duration::from_secs(60),
                applied,
                "{context}"
            );
            assert_eq!(stats.cas_of(CasKind::Renew), 1, "{context}");
        }
        _ => unreachable!(),
    }
    // Only a refusal before the write proves nothing happened; any other outcome is unknown to
    // the caller, which quarantines the key (never replays); the store keeps the record.
    assert_eq!(
        proves_nothing_written(&error),
        (kind == FaultKind::Fail && !applied && point != FaultPoint::Commit)
            || point == FaultPoint::Observe,
        "{context}: {error}"
    );
    if !proves_nothing_written(&error) {
        store
            .quarantine(QuarantineEntry {
                namespace: ns.clone(),
                key: k.clone(),
                reason: error.to_string(),
                custody: Some(context.clone()),
                quarantined_at: START,
            })
            .await
            .unwrap();
        let entry = inner
            .quarantined(ns, &k)
            .await
            .unwrap()
            .expect("quarantined");
        assert!(entry.reason.contains("injected fault"), "{context}");
    }
}

async fn walk_store(name: &str, inner: Arc<dyn AnyStore>) {
    let ns = Namespace::new(format!("fault-walk-{name}-{}", std::process::id())).unwrap();
    inner
        .register_namespace(tether_core::NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let mut n = 0;
    for point in STORE_POINTS {
        for kind in FaultKind::ALL {
            n += 1;
            walk_store_point(name, inner.clone(), &ns, point, kind, n).await;
        }
    }
    assert_eq!(n, STORE_POINTS.len() * 3);
}

#[tokio::test]
async fn fault_walk_every_store_point_on_memory() {
    let backend = memory_backend();
    walk_store(backend.name, backend.store.clone()).await;
}

#[tokio::test]
async fn fault_walk_every_store_point_on_sqlite() {
    let backend = sqlite_backend().await;
    walk_store(backend.name, backend.store.clone()).await;
}

// ---------------------------------------------------------------------------------------------
// The host deletion / context-reset transaction.

/// A harness whose prepared mutation checks and deletes its binding row through the faulty
/// row transaction, and whose rollback re-registers a removed row only if the key is absent.
struct FaultHarness {
    id: HarnessId,
    ns: Namespace,
    store: Arc<FaultInjectingStore<Store>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl std::fmt::Debug for FaultHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultHarness")
            .field("id", &self.id)
            .finish()
    }
}

struct FaultMutation {
    key: BindingKey,
    ns: Namespace,
    store: Arc<FaultInjectingStore<Store>>,
    log: Arc<Mutex<Vec<String>>>,
    removed: Mutex<Option<tether_core::StoredRow>>,
}

#[async_trait]
impl SessionMutation for FaultMutation {
    async fn commit(&self, tx: &dyn RowTransaction) -> Result<(), Error> {
        self.log
            .lock()
            .unwrap()
            .push(format!("commit:{}", self.key));
        let tx = self.store.row_transaction(tx);
        if tx.lookup(&self.ns, &self.key).await?.is_none() {
            return Err(Error::other("binding missing at commit"));
        }
        let removed = tx.delete_if(&self.ns, &self.key, &|_| true).await?;
        *self.removed.lock().unwrap() = removed;
        Ok(())
    }

    async fn rollback(&self) -> Result<(), Error> {
        self.log
            .lock()
            .unwrap()
            .push(format!("rollback:{}", self.key));
        let removed = self.removed.lock().unwrap().take();
        if let Some(row) = removed
            && self.store.lookup(&self.ns, &self.key).await?.is_none()
        {
            self.store
                .register_if_absent(&self.ns, &self.key, row.to_write(), None)
                .await?;
        }
        Ok(())
    }
}

impl FaultHarness {
    async fn prepare(
        &self,
        agent: &AgentId,
        session: &SessionKey,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        let mutation = Arc::new(FaultMutation {
            key: binding_key(agent, session),
            ns: self.ns.clone(),
            store: self.store.clone(),
            log: self.log.clone(),
            removed: Mutex::new(None),
        });
        run(mutation).await
    }
}

#[async_trait]
impl SessionDeletionHook for FaultHarness {
    async fn with_session_deletion(
        &self,
        params: SessionDeletionParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        self.prepare(&params.agent_id, &params.session_key, run)
            .await
    }
}

#[async_trait]
impl SessionContextResetHook for FaultHarness {
    async fn with_session_context_reset(
        &self,
        params: SessionContextResetParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        self.prepare(&params.agent_id, &params.session_key, run)
            .await
    }
}

#[async_trait]
impl AgentHarness for FaultHarness {
    fn id(&self) -> &HarnessId {
        &self.id
    }

    /// Clears the session's binding through the faulty store, as a harness's reset clears the
    /// binding the predecessor still owns (`Deleted` is only a notification).
    async fn reset(&self, params: ResetParams) -> Result<(), Error> {
        let Some(session) = &params.session_key else {
            return Ok(());
        };
        if params.reason == tether_core::ResetReason::Deleted {
            return Ok(());
        }
        let key = binding_key(&params.agent_id, session);
        self.log
            .lock()
            .unwrap()
            .push(format!("reset:{key}:{}", params.session_id));
        self.store.delete_if(&self.ns, &key, &|_| true).await?;
        Ok(())
    }

    fn session_deletion(&self) -> Option<&dyn SessionDeletionHook> {
        Some(self)
    }

    fn session_context_reset(&self) -> Option<&dyn SessionContextResetHook> {
        Some(self)
    }
}

/// The host points of one operation: the row transaction's read and delete, the commit edge
/// and after COMMIT.
const HOST_POINTS: [FaultPoint; 4] = [
    FaultPoint::Observe,
    FaultPoint::DeleteIf,
    FaultPoint::CommitEdge,
    FaultPoint::AfterCommit,
];

#[derive(Clone, Copy, Debug)]
enum HostOp {
    Delete,
    Rewind,
}

/// A host walk's fixture: a fresh SQLite file, the fault-injecting wrapper over it, and a
/// registry holding one [`FaultHarness`] that logs to `log`.
struct HostWalk {
    store: Store,
    _dir: tempfile::TempDir,
    ns: Namespace,
    agent: AgentId,
    faulty: Arc<FaultInjectingStore<Store>>,
    log: Arc<Mutex<Vec<String>>>,
    registry: Arc<HarnessRegistry>,
}

async fn host_walk() -> HostWalk {
    let (store, dir) = sqlite_store().await;
    let ns = Namespace::new("host-fault-walk").unwrap();
    let faulty = Arc::new(
        FaultInjectingStore::new(Arc::new(store.clone()))
            .with_stall(std::time::Duration::from_millis(1)),
    );
    let log = Arc::new(Mutex::new(Vec::new()));
    let registry = HarnessRegistry::shared();
    registry.register(Arc::new(FaultHarness {
        id: HarnessId::new("fault-harness").unwrap(),
        ns: ns.clone(),
        store: faulty.clone(),
        log: log.clone(),
    }));
    HostWalk {
        store,
        _dir: dir,
        ns,
        agent: AgentId::new("main").unwrap(),
        faulty,
        log,
        registry,
    }
}

/// One host operation × point × kind on a fresh SQLite file.
async fn walk_host_point(op: HostOp, point: FaultPoint, kind: FaultKind) {
    let context = format!("{op:?} {point} {kind:?}");
    let HostWalk {
        store,
        _dir,
        ns,
        agent,
        faulty,
        log,
        registry,
    } = host_walk().await;
    // Two sessions with a binding each and a transcript `u1 → a1 → u2 → a2`.
    let mut sessions = Vec::new();
    let mut rewind_to = None;
    for label in ["fw-a", "fw-b"] {
        let session = session_key(label);
        assert!(
            store
                .create_session(new_session(&session, "s-1"))
                .await
                .unwrap()
        );
        for (i, role) in [
            TranscriptRole::User,
            TranscriptRole::Assistant,
            TranscriptRole::User,
            TranscriptRole::Assistant,
        ]
        .into_iter()
        .enumerate()
        {
            let entry = NewTranscriptEntry {
                role,
                content: format!("turn {i}"),
                idempotency_key: None,
                metadata: None,
            };
            let anchor = store
                .append_transcript(&session, entry)
                .await
                .unwrap()
                .anchor;
            if i == 2 && rewind_to.is_none() {
                rewind_to = Some(anchor);
            }
        }
        bind(&store, &ns, &session).await;
        sessions.push(session);
    }
    let targets: Vec<SessionKey> = match op {
        HostOp::Delete => sessions.clone(),
        HostOp::Rewind => vec![sessions[0].clone()],
    };
    // Row-transaction faults hit the last target, so earlier commits have already run.
    let last = binding_key(&agent, targets.last().unwrap());
    let fault = Fault::new(point, kind);
    faulty.arm(match point {
        FaultPoint::Observe | FaultPoint::DeleteIf => fault.for_key(last.clone()),
        _ => fault,
    });
    faulty.reset_stats();
    let hosts = HostSessions::new(store.clone(), registry, Arc::new(ActiveRuns::new())).with_hooks(
        TransactionHooks::injecting(faulty.host_transaction_faults()),
    );

    let result = match op {
        HostOp::Delete => hosts.delete_sessions(&targets).await.map(|_| ()),
        HostOp::Rewind => hosts
            .rewind(
                &targets[0],
                rewind_to.unwrap(),
                SessionId::new("s-2").unwrap(),
            )
            .await
            .map(|_| ()),
    };
    let error = result.expect_err(&context);
    assert_store_error(&error, &context);
    let stats = faulty.stats();
    assert_eq!(stats.fired.len(), 1, "{context}: {stats:?}");
    assert_eq!(
        stats.deletes,
        (if point == FaultPoint::Observe {
            targets.len() - 1
        } else {
            targets.len()
        }) as u64,
        "{context}: every commit ran at most once (nothing replayed)"
    );
    assert_eq!(
        stats.registers, 0,
        "{context}: no rollback re-registered a row"
    );
    let committed = point == FaultPoint::AfterCommit;
    let events = log.lock().unwrap().clone();
    let rollbacks: Vec<&String> = events
        .iter()
        .filter(|e| e.starts_with("rollback:"))
        .collect();
    if committed {
        assert!(
            rollbacks.is_empty(),
            "{context}: nothing rolled back after COMMIT: {events:?}"
        );
    } else {
        // Every pushed mutation rolls back, in reverse order.
        let commits: Vec<String> = events
            .iter()
            .filter_map(|e| e.strip_prefix("commit:").map(str::to_owned))
            .collect();
        let mut expected: Vec<String> = commits
            .iter()
            .rev()
            .map(|k| format!("rollback:{k}"))
            .collect();
        expected.dedup();
        let got: Vec<String> = rollbacks.iter().map(|s| (*s).clone()).collect();
        assert_eq!(
            got, expected,
            "{context}: reverse rollback of every pushed mutation"
        );
    }
    // Nothing half-applied: the session rows and the binding rows moved together.
    for session in &targets {
        let entry = store.session(session).await.unwrap();
        let binding = store
            .lookup(&ns, &binding_key(&agent, session))
            .await
            .unwrap();
        match (op, committed) {
            (HostOp::Delete, true) => {
                assert!(
                    entry.is_none() && binding.is_none(),
                    "{context}: deleted together"
                );
            }
            (HostOp::Rewind, true) => {
                assert_eq!(entry.unwrap().session_id.as_str(), "s-2", "{context}");
                assert!(binding.is_none(), "{context}: native context retired");
            }
            (_, false) => {
                let entry = entry.expect("session kept");
                assert_eq!(
                    entry.session_id.as_str(),
                    "s-1",
                    "{context}: generation kept"
                );
                assert!(binding.is_some(), "{context}: binding kept (nothing lost)");
            }
        }
    }
    // The untouched session (rewind) keeps everything.
    if let HostOp::Rewind = op {
        assert!(store.session(&sessions[1]).await.unwrap().is_some());
        assert!(
            store
                .lookup(&ns, &binding_key(&agent, &sessions[1]))
                .await
                .unwrap()
                .is_some()
        );
    }
    // After COMMIT the caller cannot know the outcome: it quarantines the binding keys; a
    // later reader finds the state committed and the quarantine explained.
    if committed {
        for session in &targets {
            let k = binding_key(&agent, session);
            faulty
                .quarantine(QuarantineEntry {
                    namespace: ns.clone(),
                    key: k.clone(),
                    reason: format!("host transaction outcome unknown: {error}"),
                    custody: Some(context.clone()),
                    quarantined_at: START,
                })
                .await
                .unwrap();
            assert!(
                store.quarantined(&ns, &k).await.unwrap().is_some(),
                "{context}"
            );
        }
    }
}

#[tokio::test]
async fn fault_walk_host_deletion_every_point_on_sqlite() {
    for point in HOST_POINTS {
        for kind in FaultKind::ALL {
            walk_host_point(HostOp::Delete, point, kind).await;
        }
    }
}

#[tokio::test]
async fn fault_walk_host_context_reset_every_point_on_sqlite() {
    for point in HOST_POINTS {
        for kind in FaultKind::ALL {
            walk_host_point(HostOp::Rewind, point, kind).await;
        }
    }
}

/// One reset (`/new`) × point × kind on a fresh SQLite file, the session bound and its
/// harness registered:
///
/// - a fault at the commit edge: a typed store error, nothing changed (generation, binding),
///   no harness told;
/// - a fault after the COMMIT: reported to the caller, the reset stays committed and recorded
///   as a reset (so no later turn continues the old context), the harnesses are still told;
/// - a fault in the harness's own `reset` (its binding delete): isolated, the reset succeeds
///   and stays recorded as a reset, whatever the delete did.
///
/// Never a second generation change and never a second notification (nothing replayed).
async fn walk_reset_point(point: FaultPoint, kind: FaultKind) {
    use tether_core::{GenerationChange, ResetReason};

    let context = format!("Reset {point} {kind:?}");
    let HostWalk {
        store,
        _dir,
        ns,
        agent,
        faulty,
        log,
        registry,
    } = host_walk().await;
    let session = session_key("fw-reset");
    assert!(
        store
            .create_session(new_session(&session, "s-1"))
            .await
            .unwrap()
    );
    bind(&store, &ns, &session).await;
    let binding = binding_key(&agent, &session);
    let fault = Fault::new(point, kind);
    faulty.arm(match point {
        FaultPoint::DeleteIf => fault.for_key(binding.clone()),
        _ => fault,
    });
    faulty.reset_stats();
    let hosts = HostSessions::new(store.clone(), registry, Arc::new(ActiveRuns::new())).with_hooks(
        TransactionHooks::injecting(faulty.host_transaction_faults()),
    );

    let result = hosts
        .reset(&session, SessionId::new("s-2").unwrap(), ResetReason::New)
        .await;
    let resets = || {
        log.lock()
            .unwrap()
            .iter()
            .filter(|e| e.starts_with("reset:"))
            .cloned()
            .collect::<Vec<_>>()
    };
    let entry = store
        .session(&session)
        .await
        .unwrap()
        .expect("session kept");
    let bound = store.lookup(&ns, &binding).await.unwrap();
    match point {
        FaultPoint::CommitEdge => {
            let error = result.expect_err(&context);
            assert_store_error(&error, &context);
            assert_eq!(
                entry.session_id.as_str(),
                "s-1",
                "{context}: nothing committed"
            );
            assert_eq!(entry.previous_change, None, "{context}");
            assert!(bound.is_some(), "{context}: binding kept (nothing lost)");
            assert!(resets().is_empty(), "{context}: no harness told");
        }
        FaultPoint::AfterCommit => {
            let error = result.expect_err(&context);
            assert_store_error(&error, &context);
            assert_eq!(entry.session_id.as_str(), "s-2", "{context}: committed");
            assert_eq!(
                entry.previous_change,
                Some(GenerationChange::Reset),
                "{context}"
            );
            // The notification runs on its own task, even though the caller got an error.
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
            while resets().is_empty() || store.lookup(&ns, &binding).await.unwrap().is_some() {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{context}: the harnesses were not told: {:?}",
                    log.lock().unwrap()
                );
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
        FaultPoint::DeleteIf => {
            let now = result.unwrap_or_else(|e| panic!("{context}: {e:?}"));
            assert_eq!(now, entry, "{context}");
            assert_eq!(entry.session_id.as_str(), "s-2", "{context}: committed");
            assert_eq!(
                entry.previous_change,
                Some(GenerationChange::Reset),
                "{context}"
            );
            assert_eq!(faulty.stats().fired.len(), 1, "{context}");
            // The harness's delete was refused (`Fail`, `Timeout`) or applied with its answer
            // lost (`Unknown`); the row records the reset either way.
            assert_eq!(
                bound.is_none(),
                kind == FaultKind::Unknown,
                "{context}: {bound:?}"
            );
        }
        other => unreachable!("{other}"),
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let told = resets();
    assert!(
        told.len() <= 1 && told.iter().all(|e| e.ends_with(":s-2")),
        "{context}: one notification at most, for the new generation: {told:?}"
    );
    let stats = faulty.stats();
    assert!(stats.deletes <= 1, "{context}: nothing replayed: {stats:?}");
    assert_eq!(stats.registers, 0, "{context}: {stats:?}");
}

#[tokio::test]
async fn fault_walk_host_reset_every_point_on_sqlite() {
    for point in [
        FaultPoint::CommitEdge,
        FaultPoint::AfterCommit,
        FaultPoint::DeleteIf,
    ] {
        for kind in FaultKind::ALL {
            walk_reset_point(point, kind).await;
        }
    }
}
