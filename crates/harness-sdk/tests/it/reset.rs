//! Reset fan-out (scenario 67; `docs/deletion-and-reset.md`, "Reset fan-out") and the harness
//! registry.
//!
//! The "logged once" set is process-global, so every test uses its own harness ids.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tether_core::{AgentHarness, AgentId, Error, HarnessId, ResetParams, ResetReason, SessionId};
use tether_harness_sdk::reset::{
    HarnessOwnerAuthority, HarnessRegistry, reset_failure_logged, reset_registered_harness_sessions,
};
use tokio::sync::Barrier;

#[derive(Debug)]
struct Probe {
    id: HarnessId,
    fails: bool,
    calls: AtomicUsize,
    reasons: Mutex<Vec<ResetReason>>,
    barrier: Option<Arc<Barrier>>,
}

impl Probe {
    fn new(id: &str, fails: bool) -> Arc<Self> {
        Arc::new(Self {
            id: HarnessId::new(id).unwrap(),
            fails,
            calls: AtomicUsize::new(0),
            reasons: Mutex::new(Vec::new()),
            barrier: None,
        })
    }

    fn meeting(id: &str, barrier: Arc<Barrier>) -> Arc<Self> {
        Arc::new(Self {
            id: HarnessId::new(id).unwrap(),
            fails: false,
            calls: AtomicUsize::new(0),
            reasons: Mutex::new(Vec::new()),
            barrier: Some(barrier),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl AgentHarness for Probe {
    fn id(&self) -> &HarnessId {
        &self.id
    }

    async fn reset(&self, params: ResetParams) -> Result<(), Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.reasons.lock().unwrap().push(params.reason);
        if let Some(barrier) = &self.barrier {
            barrier.wait().await;
        }
        if self.fails {
            Err(Error::other(format!("{} reset exploded", self.id)))
        } else {
            Ok(())
        }
    }
}

fn params(reason: ResetReason) -> ResetParams {
    ResetParams::new(
        AgentId::new("main").unwrap(),
        SessionId::new("s-1").unwrap(),
        None,
        reason,
    )
}

/// Scenario 67: A's reset throws and B's succeeds. The fan-out completes, B is reset, and A's
/// failure is logged once. A second failing reset of A — even after a registry reload with a
/// new A object — logs nothing, but A's hook is invoked again.
#[tokio::test]
async fn lifecycle_scenario_67_reset_fanout_isolates_failures() {
    let a = Probe::new("s67-harness-a", true);
    let b = Probe::new("s67-harness-b", false);
    let registry = HarnessRegistry::new();
    registry.register(a.clone());
    registry.register(b.clone());
    assert!(!reset_failure_logged(&a.id));

    let report = reset_registered_harness_sessions(&[&registry], &params(ResetReason::Reset)).await;
    assert_eq!(report.outcomes().len(), 2);
    assert_eq!((a.calls(), b.calls()), (1, 1));
    let failures: Vec<_> = report.failures().collect();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].harness_id, a.id);
    assert!(failures[0].logged, "first failure of A is logged");
    assert_eq!(
        failures[0].error.as_ref().unwrap().to_string(),
        "s67-harness-a reset exploded"
    );
    assert!(reset_failure_logged(&a.id));
    assert!(!reset_failure_logged(&b.id));

    // Same registry again: A invoked again, not logged again.
    let report = reset_registered_harness_sessions(&[&registry], &params(ResetReason::New)).await;
    assert_eq!((a.calls(), b.calls()), (2, 2));
    assert!(!report.failures().next().unwrap().logged);

    // Registry reload: a new registry with a new A object under the same id.
    let reloaded_a = Probe::new("s67-harness-a", true);
    let reloaded = HarnessRegistry::new();
    reloaded.register(reloaded_a.clone());
    reloaded.register(b.clone());
    let report =
        reset_registered_harness_sessions(&[&reloaded], &params(ResetReason::Deleted)).await;
    assert_eq!(
        reloaded_a.calls(),
        1,
        "the hook is still invoked after a reload"
    );
    assert_eq!(b.calls(), 3);
    let failure = report.failures().next().unwrap();
    assert_eq!(failure.harness_id, reloaded_a.id);
    assert!(!failure.logged, "logged once per harness id per process");
    assert_eq!(
        *reloaded_a.reasons.lock().unwrap(),
        vec![ResetReason::Deleted]
    );
}

/// Resets run concurrently: two harnesses that each wait for the other can only finish if
/// both hooks are in flight at once.
#[tokio::test]
async fn reset_fanout_runs_hooks_concurrently() {
    let barrier = Arc::new(Barrier::new(2));
    let a = Probe::meeting("concurrent-a", barrier.clone());
    let b = Probe::meeting("concurrent-b", barrier);
    let registry = HarnessRegistry::new();
    registry.register(a.clone());
    registry.register(b.clone());
    let report = tokio::time::timeout(
        Duration::from_secs(10),
        reset_registered_harness_sessions(&[&registry], &params(ResetReason::Reset)),
    )
    .await
    .expect("sequential resets would wait forever at the barrier");
    assert_eq!(report.outcomes().len(), 2);
    assert_eq!((a.calls(), b.calls()), (1, 1));
}

/// Each harness object is reset at most once per call, even when several registries (an
/// execution registry and the current one) hold it; distinct objects are each reset.
#[tokio::test]
async fn reset_fanout_resets_each_harness_object_once() {
    let shared = Probe::new("once-shared", false);
    let other_object_same_id = Probe::new("once-shared", false);
    let execution = HarnessRegistry::new();
    execution.register(shared.clone());
    let current = HarnessRegistry::new();
    current.register(shared.clone());
    let third = HarnessRegistry::new();
    third.register(other_object_same_id.clone());

    let report = reset_registered_harness_sessions(
        &[&execution, &current, &execution],
        &params(ResetReason::Reset),
    )
    .await;
    assert_eq!(shared.calls(), 1);
    assert_eq!(report.outcomes().len(), 1);

    reset_registered_harness_sessions(&[&execution, &third], &params(ResetReason::Reset)).await;
    assert_eq!(shared.calls(), 2);
    assert_eq!(other_object_same_id.calls(), 1);

    let empty = reset_registered_harness_sessions(&[], &params(ResetReason::Reset)).await;
    assert!(empty.outcomes().is_empty());
}

/// The registry's generation moves on every change, so a captured generation detects a
/// changed registry; `is_registered` detects a replaced registration.
#[test]
fn registry_generation_moves_on_every_change() {
    let registry = HarnessRegistry::new();
    let g0 = registry.generation();
    let first: Arc<dyn AgentHarness> = Probe::new("registry-x", false);
    assert!(registry.register(first.clone()).is_none());
    let g1 = registry.generation();
    assert_ne!(g0, g1);
    assert!(registry.is_registered(&first));
    assert_eq!(registry.ids(), vec![HarnessId::new("registry-x").unwrap()]);
    assert_eq!(registry.len(), 1);

    let replacement: Arc<dyn AgentHarness> = Probe::new("registry-x", false);
    let replaced = registry.register(replacement.clone()).unwrap();
    assert!(Arc::ptr_eq(&replaced, &first));
    let g2 = registry.generation();
    assert_ne!(g1, g2);
    assert!(!registry.is_registered(&first), "hook owner replaced");
    assert!(registry.is_registered(&replacement));
    assert!(Arc::ptr_eq(
        &registry.get(replacement.id()).unwrap(),
        &replacement
    ));

    assert!(registry.unregister(replacement.id()).is_some());
    assert_ne!(registry.generation(), g2);
    assert!(registry.get(replacement.id()).is_none());
    let g3 = registry.generation();
    assert!(registry.unregister(replacement.id()).is_none());
    assert_eq!(registry.generation(), g3, "no change, same generation");

    let reloaded = HarnessRegistry::new();
    assert!(![g0, g1, g2, g3].contains(&reloaded.generation()));
}

fn owner_changed(err: &Error, id: &str) -> bool {
    matches!(err, Error::OwnerChanged { owner, .. } if owner == id)
        && err.to_string() == format!("Session deletion harness owner changed: {id}")
}

/// Scenario 66 (the registry side of it): an operation's owner authority stops authorizing
/// when the registration is replaced (the hook replaced), the registry changes, the
/// registration is removed, the plugin lifecycle authority is lost, or the operation closes —
/// and a callback retained past the operation keeps failing. The host's deletion commit and
/// rollback run this check first (`docs/deletion-and-reset.md`, step 3 "Owners").
#[test]
fn lifecycle_scenario_66_harness_owner_replaced_mid_operation() {
    let registry = Arc::new(HarnessRegistry::new());
    let a: Arc<dyn AgentHarness> = Probe::new("s66-a", false);
    registry.register(a.clone());

    // Hook replaced: a new object registered under the same id.
    let owner = HarnessOwnerAuthority::capture(&registry, &a, None).unwrap();
    let check = owner.assert_current_fn();
    check().unwrap();
    let replacement: Arc<dyn AgentHarness> = Probe::new("s66-a", false);
    registry.register(replacement.clone());
    assert!(owner_changed(&check().unwrap_err(), "s66-a"));
    let err = HarnessOwnerAuthority::capture(&registry, &a, None).unwrap_err();
    assert!(
        owner_changed(&err, "s66-a"),
        "a replaced owner cannot be captured"
    );

    // Registry changed: another harness registered.
    let owner = HarnessOwnerAuthority::capture(&registry, &replacement, None).unwrap();
    owner.assert_current().unwrap();
    registry.register(Probe::new("s66-b", false));
    assert!(owner_changed(&owner.assert_current().unwrap_err(), "s66-a"));

    // Operation closed: a retained callback keeps failing.
    let owner = HarnessOwnerAuthority::capture(&registry, &replacement, None).unwrap();
    let retained = owner.assert_current_fn();
    owner.close();
    assert!(owner_changed(&retained().unwrap_err(), "s66-a"));

    // Lifecycle authority lost.
    let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flag = alive.clone();
    let owner = HarnessOwnerAuthority::capture(
        &registry,
        &replacement,
        Some(Arc::new(move || {
            if flag.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err(Error::revoked("plugin unloaded"))
            }
        })),
    )
    .unwrap()
    .with_owner_changed_text("Session mutation harness owner changed: {harness_id}");
    owner.assert_current().unwrap();
    alive.store(false, Ordering::SeqCst);
    assert_eq!(
        owner.assert_current().unwrap_err().to_string(),
        "Session mutation harness owner changed: s66-a"
    );

    // Registration removed.
    let owner = HarnessOwnerAuthority::capture(&registry, &replacement, None).unwrap();
    registry.unregister(replacement.id());
    assert!(owner_changed(&owner.assert_current().unwrap_err(), "s66-a"));
    assert!(Arc::ptr_eq(owner.harness(), &replacement));
}
