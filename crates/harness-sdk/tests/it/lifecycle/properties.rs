//! The lifecycle's own properties beyond the numbered scenarios: fencing epochs,
//! re-entrancy, wait budget, acquisition refusal, invalid rows, settlement participants,
//! wrappers, finalizers and release failures.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tether_core::{
    BindingKey, BindingStore, Error, JsonObjectCodec, LeaseWrite, RowTransaction, SessionMutation,
    always_current,
};
use tether_harness_sdk::lifecycle::{
    Applied, CommitFinalizer, DeletionHooks, DeletionOptions, DeletionOutcome,
    DirectRowTransaction, EpochFence, LeaseOptions, Lifecycle, OwnerPhase, TransactOptions,
    is_deletion_unresolved, wrap_deletion_mutation,
};
use tether_storage::StoreHook;

use super::support::{
    Counter, Fixture, Record, STALE, assert_err_contains, config, key, set_value,
};

/// Every acquisition gets a strictly larger epoch; a taken-over owner is fenced by the target
/// and by the store check, the successor is admitted.
#[tokio::test]
async fn lifecycle_epochs_fence_a_taken_over_owner() {
    let f = &Fixture::new().await;
    let k = &key("k");
    let fence = &EpochFence::default();
    let first =
        f.lc.with_lease(k, LeaseOptions::default(), |g| async move {
            assert_eq!(g.verify_fence().await?, g.epoch());
            fence.admit(k, g.epoch())?;
            Ok(g.epoch())
        })
        .await
        .unwrap();
    let result =
        f.lc.with_lease(k, LeaseOptions::default(), |old| async move {
            assert!(old.epoch() > first, "a new acquisition, a larger epoch");
            fence.admit(k, old.epoch())?;
            f.clock.advance(STALE);
            let peer = f.peer();
            let pk = k.clone();
            let successor = tokio::spawn(async move {
                peer.with_lease(&pk, LeaseOptions::default(), |g| async move {
                    g.verify_fence().await?;
                    Ok(g.epoch())
                })
                .await
            });
            let successor = successor.await.unwrap()?;
            assert!(successor > old.epoch());
            fence.admit(k, successor)?;
            assert!(
                fence.admit(k, old.epoch()).is_err(),
                "the stale owner is fenced"
            );
            assert!(old.verify_fence().await.is_err());
            Ok(())
        })
        .await;
    assert_err_contains(result, "Lost binding lease");
}

/// A nested `with_lease` for the same key reuses the owner (no new token, no new epoch);
/// other keys nest; another task does not see the owner.
#[tokio::test]
async fn lifecycle_with_lease_is_reentrant_in_its_own_scope_only() {
    let f = &Fixture::new().await;
    let (k, other) = (&key("k"), &key("other"));
    f.lc.with_lease(k, LeaseOptions::default(), |outer| async move {
        let outer_token = outer.token().clone();
        f.lc.with_lease(k, LeaseOptions::default(), |inner| async move {
            assert_eq!(inner.token(), &outer_token);
            assert_eq!(inner.epoch(), outer.epoch());
            f.lc.with_lease(other, LeaseOptions::default(), |o| async move {
                assert_ne!(o.token(), &outer_token);
                assert!(f.lc.has_lease(k) && f.lc.has_lease(other));
                set_value(&f.lc, k, "nested").await?;
                set_value(&f.lc, other, "nested").await
            })
            .await
        })
        .await?;
        assert!(!f.lc.has_lease(other), "the nested scope closed");
        let lc = f.lc.clone();
        let k2 = k.clone();
        let elsewhere = tokio::spawn(async move { lc.has_lease(&k2) });
        assert!(!elsewhere.await.unwrap(), "another task has no owner");
        let lc = f.lc.clone();
        let k2 = k.clone();
        let blocked = tokio::spawn(async move { set_value(&lc, &k2, "outside").await });
        f.timer.settle().await;
        assert!(!blocked.is_finished(), "another task waits like a peer");
        blocked.abort();
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(f.unleased(k).await, Some(json!({"value": "nested"})));
    assert_eq!(f.unleased(other).await, Some(json!({"value": "nested"})));
    assert_eq!(f.row(k).await.unwrap().0["value"], "nested");
    assert!(!f.lc.has_lease(k));
}

/// A peer waiting behind a live lease gives up after the wait budget.
#[tokio::test]
async fn lifecycle_wait_budget_ends_in_lease_timeout() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(
        k,
        json!({}),
        Some(("foreign", f.now() + Duration::from_secs(600))),
    )
    .await;
    let waiting = {
        let lc = f.lc.clone();
        let k = k.clone();
        tokio::spawn(async move { set_value(&lc, &k, "never").await })
    };
    f.timer.advance(Duration::from_secs(69)).await;
    assert!(!waiting.is_finished());
    f.timer.advance(Duration::from_secs(1)).await;
    let error = assert_err_contains(waiting.await.unwrap(), "Binding lease timed out");
    assert!(matches!(error, Error::LeaseTimeout { .. }));
}

/// A lease policy refusal is an acquisition rejection; nothing is written and run never starts.
#[tokio::test]
async fn lifecycle_prepare_lease_refusal_is_acquisition_rejected() {
    let f = &Fixture::new().await;
    let k = &key("retired");
    f.put(k, json!({"retired": true}), None).await;
    let runs = Counter::default();
    let options = LeaseOptions {
        assert_current: None,
        prepare_lease: Some(Arc::new(
            |current: Option<&Record>, _: &LeaseWrite| match current {
                Some(r) if r.get("retired") == Some(&json!(true)) => None,
                other => Some(other.cloned().unwrap_or_default()),
            },
        )),
        wait_budget: None,
    };
    let before = f.store.lookup(&f.ns, k).await.unwrap();
    let result =
        f.lc.with_lease(k, options, |_| async {
            runs.bump();
            Ok(())
        })
        .await;
    let error = assert_err_contains(result, "Binding lease rejected");
    assert!(matches!(error, Error::AcquisitionRejected { .. }));
    assert_eq!(runs.get(), 0);
    assert_eq!(f.store.lookup(&f.ns, k).await.unwrap(), before);
}

/// A present row that does not decode fails closed: never treated as absent, never written.
#[tokio::test]
async fn lifecycle_invalid_row_fails_closed() {
    let f = &Fixture::new().await;
    let k = &key("broken");
    let seen = f.store.observe(&f.ns, k).await.unwrap();
    f.store
        .compare_and_apply(
            &f.ns,
            k,
            &seen.comparison,
            tether_core::Intent::Set {
                row: tether_core::RowWrite {
                    value: b"not json".to_vec(),
                    lease: None,
                },
                ttl: None,
            },
            &tether_core::admit_all,
        )
        .await
        .unwrap();
    let applies = Counter::default();
    let result =
        f.lc.transact(k, TransactOptions::default(), |current, _| {
            applies.bump();
            Ok(Applied::write(current.cloned().unwrap_or_default(), ()))
        })
        .await;
    assert!(matches!(result, Err(Error::InvalidRow { .. })));
    assert_eq!(applies.get(), 0);
    assert!(matches!(f.lc.read(k).await, Err(Error::InvalidRow { .. })));
    assert_eq!(f.mem().raw_row(&f.ns, k).unwrap().value, b"not json");
}

/// A release failure goes to the callback and is swallowed; the lease then expires.
#[tokio::test]
async fn lifecycle_release_failure_is_reported_and_swallowed() {
    let f = &Fixture::new().await;
    let k = &key("k");
    let reported: Arc<Mutex<Vec<(BindingKey, String)>>> = Arc::default();
    let sink = reported.clone();
    let lc = Lifecycle::builder(
        f.store.clone(),
        f.ns.clone(),
        JsonObjectCodec,
        Arc::new(|c: Option<&Record>, _: &LeaseWrite| Some(c.cloned().unwrap_or_default())),
    )
    .lease_config(config())
    .clock(Arc::new(f.clock.clone()))
    .timer(f.timer.clone())
    .on_release_failure(Arc::new(move |key, error| {
        sink.lock().unwrap().push((key.clone(), error.to_string()));
    }))
    .build()
    .unwrap();
    let value = lc
        .with_lease(k, LeaseOptions::default(), |_| async {
            f.mem().set_hook(
                StoreHook::new().before_read(|_| {
                    Box::pin(async { Err(Error::other("store down at release")) })
                }),
            );
            Ok(7)
        })
        .await
        .unwrap();
    assert_eq!(value, 7);
    f.mem().clear_hook();
    let reported = reported.lock().unwrap().clone();
    assert_eq!(
        reported,
        vec![(k.clone(), "store down at release".to_owned())]
    );
    assert!(f.row(k).await.unwrap().1.is_some(), "left to expire");
    f.clock.advance(STALE);
    set_value(&f.lc, k, "after expiry").await.unwrap();
}

/// The lease assertion needs a held owner in scope and dies with the scope.
#[tokio::test]
async fn lifecycle_lease_assertion_requires_a_held_owner_and_closes_with_the_scope() {
    let f = &Fixture::new().await;
    let k = &key("k");
    assert_err_contains(f.lc.capture_lease_assertion(k), "Lost binding lease");
    let assertion =
        f.lc.with_lease(k, LeaseOptions::default(), |g| async move {
            let a = g.capture_lease_assertion()?;
            a.check()?;
            assert_eq!(a.epoch(), g.epoch());
            Ok(a)
        })
        .await
        .unwrap();
    assert_err_contains(assertion.check(), "Lost binding lease");
}

/// An unknown settlement blocks the key (durably too), leaves the lease unreleased, and marks
/// the deletion unresolved; a wrapper proxies the flag and calls no hook for unknown.
#[tokio::test]
async fn lifecycle_deletion_settled_unknown_blocks_the_key() {
    let f = &Fixture::new().await;
    let k = &key("run");
    f.put(k, json!({"value": "run"}), None).await;
    let committed = Arc::new(AtomicUsize::new(0));
    let hooks = DeletionHooks {
        assert_current: None,
        committed: Some({
            let committed = committed.clone();
            Arc::new(move || {
                committed.fetch_add(1, Ordering::SeqCst);
            })
        }),
        rolled_back: None,
    };
    let result: Result<(), Error> =
        f.lc.with_deletion(
            k,
            DeletionOptions::new(always_current()),
            |_, m| async move {
                let wrapped = wrap_deletion_mutation(Arc::new(m.clone()), hooks);
                let tx = f.mem().begin();
                wrapped.commit(&tx).await?;
                // The host lost its connection during COMMIT: nobody knows.
                wrapped
                    .settle_outcome(DeletionOutcome::Unknown, None)
                    .await?;
                assert!(is_deletion_unresolved(&*wrapped));
                assert!(is_deletion_unresolved(&m));
                assert_eq!(m.lease().unwrap().phase(), OwnerPhase::Unknown);
                Err(m.lease().unwrap().failure().unwrap())
            },
        )
        .await;
    assert!(result.unwrap_err().is_outcome_unknown());
    assert_eq!(committed.load(Ordering::SeqCst), 0);
    assert!(f.lc.is_blocked(k));
    assert!(f.row(k).await.unwrap().1.is_some(), "not released");
    assert!(f.quarantine.quarantined(&f.ns, k).await.unwrap().is_some());
    assert!(
        set_value(&f.lc, k, "x")
            .await
            .unwrap_err()
            .is_outcome_unknown()
    );
    // Another instance (another process) is refused by the durable quarantine.
    assert!(
        set_value(&f.peer(), k, "x")
            .await
            .unwrap_err()
            .is_outcome_unknown()
    );
    // After an operator released it, an explicit unblock lifts the in-process block.
    f.quarantine
        .release_quarantine(&f.ns, k, "checked by operator")
        .await
        .unwrap();
    assert!(f.lc.unblock(k));
    f.clock.advance(STALE);
    set_value(&f.lc, k, "recovered").await.unwrap();
}

/// Settling committed / rolled back moves the owner phase and calls the wrapper hooks; an
/// absent-row deletion settled unknown blocks the key without an owner.
#[tokio::test]
async fn lifecycle_deletion_settlement_and_wrapper_hooks() {
    let f = &Fixture::new().await;
    let k = &key("run");
    f.put(k, json!({"value": "run"}), None).await;
    let calls: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let hooks = DeletionHooks {
        assert_current: None,
        committed: Some({
            let calls = calls.clone();
            Arc::new(move || calls.lock().unwrap().push("committed"))
        }),
        rolled_back: Some({
            let calls = calls.clone();
            Arc::new(move || calls.lock().unwrap().push("rolled-back"))
        }),
    };
    f.lc.with_deletion(
        k,
        DeletionOptions::new(always_current()),
        |_, m| async move {
            let wrapped = wrap_deletion_mutation(Arc::new(m.clone()), hooks);
            let guard = m.lease().unwrap();
            let tx = f.mem().begin();
            wrapped.commit(&tx).await?;
            tx.rollback();
            wrapped
                .settle_outcome(DeletionOutcome::RolledBack, None)
                .await?;
            assert_eq!(guard.phase(), OwnerPhase::Held);
            let tx = f.mem().begin();
            wrapped.commit(&tx).await?;
            tx.commit()?;
            wrapped
                .settle_outcome(DeletionOutcome::Committed, None)
                .await?;
            assert_eq!(guard.phase(), OwnerPhase::Deleted);
            assert!(!is_deletion_unresolved(&*wrapped));
            Ok(())
        },
    )
    .await
    .unwrap();
    assert_eq!(*calls.lock().unwrap(), vec!["rolled-back", "committed"]);
    assert!(f.row(k).await.is_none());

    let absent = &key("absent");
    f.lc.with_deletion(
        absent,
        DeletionOptions::new(always_current()),
        |_, m| async move {
            m.commit(&DirectRowTransaction::new(f.store.clone()))
                .await?;
            m.settle_outcome(DeletionOutcome::Unknown, None).await
        },
    )
    .await
    .unwrap();
    assert!(f.lc.is_blocked(absent));
}

/// A storage-less mutation recording its calls.
#[derive(Default)]
struct Recorder {
    commits: AtomicUsize,
    rollbacks: AtomicUsize,
}

#[async_trait::async_trait]
impl SessionMutation for Recorder {
    async fn commit(&self, tx: &dyn RowTransaction) -> Result<(), Error> {
        assert!(
            tx.lookup(&tether_core::Namespace::new("x")?, &key("x"))
                .await
                .is_err()
        );
        self.commits.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    async fn rollback(&self) -> Result<(), Error> {
        self.rollbacks.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A commit finalizer does nothing inside the host transaction and runs the inner commit or
/// rollback only when settled; unknown runs neither.
#[tokio::test]
async fn lifecycle_commit_finalizer_runs_only_when_settled() {
    let direct = DirectRowTransaction::new(Arc::new(tether_storage::MemoryStore::default()));
    for (outcome, commits, rollbacks, unresolved) in [
        (DeletionOutcome::Committed, 1, 0, false),
        (DeletionOutcome::RolledBack, 0, 1, false),
        (DeletionOutcome::Unknown, 0, 0, true),
    ] {
        let inner = Arc::new(Recorder::default());
        let finalizer = CommitFinalizer::new(inner.clone());
        finalizer.commit(&direct).await.unwrap();
        finalizer.rollback().await.unwrap();
        assert_eq!(inner.commits.load(Ordering::SeqCst), 0);
        assert_eq!(inner.rollbacks.load(Ordering::SeqCst), 0);
        finalizer.settle_outcome(outcome, None).await.unwrap();
        assert_eq!(inner.commits.load(Ordering::SeqCst), commits, "{outcome:?}");
        assert_eq!(
            inner.rollbacks.load(Ordering::SeqCst),
            rollbacks,
            "{outcome:?}"
        );
        assert_eq!(is_deletion_unresolved(&*finalizer), unresolved);
    }
}

/// The record-level generation check runs under the lease before `run`, and a refusal
/// releases the lease untouched.
#[tokio::test]
async fn lifecycle_deletion_checks_the_record_generation_before_run() {
    let f = &Fixture::new().await;
    let k = &key("run");
    f.put(k, json!({"sessionId": "other"}), None).await;
    let runs = Counter::default();
    let mut options = DeletionOptions::new(always_current());
    options.assert_record_current = Some(Arc::new(|record: Option<&Record>| {
        match record.and_then(|r| r.get("sessionId")) {
            Some(id) if id == "mine" => Ok(()),
            _ => Err(Error::other(
                "Codex binding generation changed before session deletion",
            )),
        }
    }));
    let result =
        f.lc.with_deletion(k, options, |_, _| async {
            runs.bump();
            Ok(())
        })
        .await;
    assert_err_contains(result, "generation changed before session deletion");
    assert_eq!(runs.get(), 0);
    assert_eq!(f.unleased(k).await, Some(json!({"sessionId": "other"})));
}

/// Exclusive operations run one at a time, in the order they were requested.
#[tokio::test]
async fn lifecycle_exclusive_operations_run_in_fifo_order() {
    let f = &Fixture::new().await;
    let order: Arc<Mutex<Vec<usize>>> = Arc::default();
    let (in_tx, in_rx) = tokio::sync::oneshot::channel();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let mutation = {
        let lc = f.lc.clone();
        tokio::spawn(async move {
            lc.with_mutation(|| async {
                in_tx.send(()).unwrap();
                go_rx.await.unwrap();
                Ok(())
            })
            .await
        })
    };
    in_rx.await.unwrap();
    let mut exclusive = Vec::new();
    for n in 0..3 {
        let lc = f.lc.clone();
        let order = order.clone();
        let timer = f.timer.clone();
        exclusive.push(tokio::spawn(async move {
            lc.with_exclusive_mutation_fence(|| async {
                order.lock().unwrap().push(n);
                // Give the others every chance to overtake while this one runs.
                timer.settle().await;
                order.lock().unwrap().push(n);
                Ok(())
            })
            .await
        }));
        f.timer.settle().await;
    }
    assert!(
        order.lock().unwrap().is_empty(),
        "all wait for the mutation"
    );
    go_tx.send(()).unwrap();
    mutation.await.unwrap().unwrap();
    for handle in exclusive {
        handle.await.unwrap().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 0, 1, 1, 2, 2]);
}

/// A captured lease assertion does not consult host authority: it keeps passing after the
/// acquirer's authority is retired, until the lease expires.
#[tokio::test]
async fn lifecycle_lease_assertion_outlives_retired_host_authority() {
    let f = &Fixture::new().await;
    let k = &key("k");
    let retired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = retired.clone();
    let options = LeaseOptions {
        assert_current: Some(Arc::new(move || {
            if flag.load(Ordering::SeqCst) {
                Err(Error::revoked("host run retired"))
            } else {
                Ok(())
            }
        })),
        prepare_lease: None,
        wait_budget: None,
    };
    let result: Result<(), Error> =
        f.lc.with_lease(k, options, |guard| async move {
            let assertion = guard.capture_lease_assertion()?;
            retired.store(true, Ordering::SeqCst);
            assertion.check().expect("host retirement does not matter");
            f.clock.set(guard.expires_at() - Duration::from_millis(1));
            assertion.check().expect("live until expiry");
            f.clock.set(guard.expires_at());
            assert_err_contains(assertion.check(), "Lost binding lease");
            Err(Error::other("cleanup done"))
        })
        .await;
    assert_err_contains(result, "cleanup done");
}

/// Two instances in one task do not share owners: the second waits like a peer.
#[tokio::test]
async fn lifecycle_instances_do_not_share_owners() {
    let f = &Fixture::new().await;
    let k = &key("k");
    let peer = f.peer();
    let result =
        f.lc.with_lease(k, LeaseOptions::default(), |_| async {
            assert!(f.lc.has_lease(k));
            assert!(!peer.has_lease(k));
            let waiting = std::pin::pin!(set_value(&peer, k, "peer"));
            let raced = tokio::time::timeout(Duration::from_millis(0), waiting).await;
            assert!(raced.is_err(), "the other instance waits behind the lease");
            Ok(())
        })
        .await;
    result.unwrap();
}

/// The heartbeat is single-flight: while a renewal is held, later ticks start none; the
/// running work is never cancelled.
#[tokio::test]
async fn lifecycle_heartbeat_is_single_flight_and_never_cancels_work() {
    let f = &Fixture::new().await;
    let k = &key("k");
    let gate = super::support::Gate::new();
    let cas_calls = Counter::default();
    let value =
        f.lc.with_lease(k, LeaseOptions::default(), |guard| async move {
            let calls = cas_calls.clone();
            let hold = gate.clone();
            f.mem()
                .set_hook(StoreHook::new().before_compare(move |call| {
                    calls.bump();
                    let hold = hold.clone();
                    Box::pin(async move {
                        if call.seq == 1 {
                            hold.wait().await;
                        }
                        Ok(())
                    })
                }));
            f.timer.advance(super::support::RENEW * 2).await;
            assert!(guard.renewal_pending());
            assert_eq!(cas_calls.get(), 1, "one renewal in flight, no second one");
            gate.open();
            guard.join_renewal().await;
            f.timer.advance(super::support::RENEW).await;
            assert_eq!(cas_calls.get(), 2, "the next tick renews again");
            assert!(guard.failure().is_none());
            Ok("the work ran to its end")
        })
        .await
        .unwrap();
    assert_eq!(value, "the work ran to its end");
}

/// An exclusive fence requested from inside a mutation would wait for itself: it is refused at
/// once; a mutation or a fence nested inside a fence runs.
#[tokio::test]
async fn lifecycle_exclusive_fence_inside_a_mutation_is_refused_not_deadlocked() {
    let f = &Fixture::new().await;
    let refused =
        f.lc.with_mutation(|| async {
            f.lc.with_exclusive_mutation_fence(|| async { Ok(()) })
                .await
        })
        .await;
    assert!(matches!(refused, Err(Error::MutationBlocked { .. })));
    let nested = f
        .lc
        .with_exclusive_mutation_fence(|| async { f.lc.with_mutation(|| async { Ok(1) }).await })
        .await;
    assert_eq!(nested.unwrap(), 1);
    let fence_in_fence =
        f.lc.with_exclusive_mutation_fence(|| async {
            f.lc.with_exclusive_mutation_fence(|| async { Ok(2) }).await
        })
        .await;
    assert_eq!(fence_in_fence.unwrap(), 2);
}
