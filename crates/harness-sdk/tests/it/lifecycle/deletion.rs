//! Scenarios 23–31: lifecycle and deletion (`docs/lifecycle.md`, "`with_deletion`", and
//! `docs/deletion-and-reset.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;
use tether_core::{BindingStore, Error, SessionMutation, always_current};
use tether_harness_sdk::lifecycle::{
    Applied, DeletionMutation, DeletionOptions, DeletionOutcome, DirectRowTransaction,
    LeaseOptions, NoRowTransaction, OwnerPhase, TransactOptions,
};
use tokio::sync::oneshot;

use super::support::{Fixture, Gate, RENEW, assert_err_contains, key, record, set_value};

fn direct(f: &Fixture) -> DirectRowTransaction {
    DirectRowTransaction::new(f.store.clone())
}

fn options() -> DeletionOptions<super::support::Record> {
    DeletionOptions::new(always_current())
}

/// 23. Deletion removes only the requested key; rollback restores it; the release then drops
/// the lease.
#[tokio::test]
async fn lifecycle_scenario_23_delete_only_requested_key_rollback_restores() {
    scenario_23(&Fixture::new().await).await;
}

/// The body of scenario 23, for every backend.
pub(crate) async fn scenario_23(f: &Fixture) {
    let (base, run) = (&key("base"), &key("run"));
    f.put(base, json!({"value": "base"}), None).await;
    f.put(run, json!({"value": "run"}), None).await;
    f.lc.with_deletion(run, options(), |current, m| async move {
        assert_eq!(current, Some(record(json!({"value": "run"}))));
        m.commit(&direct(f)).await?;
        assert!(f.row(run).await.is_none());
        assert_eq!(f.unleased(base).await, Some(json!({"value": "base"})));
        m.rollback().await?;
        let (value, lease) = f.row(run).await.unwrap();
        assert_eq!(value, json!({"value": "run"}));
        assert!(lease.is_some(), "restored under the owner's lease");
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(f.unleased(run).await, Some(json!({"value": "run"})));
    assert_eq!(f.unleased(base).await, Some(json!({"value": "base"})));
}

/// 24. A commit retained past the scope is dead: it fails with the lease error.
#[tokio::test]
async fn lifecycle_scenario_24_retained_commit_dead_after_scope_exit() {
    let f = &Fixture::new().await;
    let (base, run) = (&key("base"), &key("run"));
    f.put(base, json!({"value": "base"}), None).await;
    f.put(run, json!({"value": "run"}), None).await;
    let retained: DeletionMutation =
        f.lc.with_deletion(run, options(), |_, m| async move {
            m.commit(&direct(f)).await?;
            Ok(m)
        })
        .await
        .unwrap();
    assert!(f.row(run).await.is_none());
    assert!(f.row(base).await.is_some());
    assert_err_contains(retained.commit(&direct(f)).await, "lease");
    assert_err_contains(retained.rollback().await, "lease");
    assert!(f.row(run).await.is_none(), "nothing restored");
}

/// 25. A revoked deletion authority refuses the commit; the row stays and the exact-token
/// release still runs (release never borrows the caller's authority).
#[tokio::test]
async fn lifecycle_scenario_25_revoked_deletion_authority() {
    let f = &Fixture::new().await;
    let k = &key("run");
    f.put(k, json!({"value": "owner"}), None).await;
    let current = Arc::new(AtomicBool::new(true));
    let flag = current.clone();
    let deletion = DeletionOptions::new(Arc::new(move || {
        if flag.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Error::revoked("owner revoked"))
        }
    }));
    let result: Result<(), Error> =
        f.lc.with_deletion(k, deletion, |_, m| async move {
            current.store(false, Ordering::SeqCst);
            m.commit(&direct(f)).await
        })
        .await;
    assert_err_contains(result, "owner revoked");
    assert_eq!(f.unleased(k).await, Some(json!({"value": "owner"})));
}

/// 26. Rollback never overwrites a successor.
#[tokio::test]
async fn lifecycle_scenario_26_rollback_never_overwrites_successor() {
    scenario_26(&Fixture::new().await).await;
}

/// The body of scenario 26, for every backend.
pub(crate) async fn scenario_26(f: &Fixture) {
    let k = &key("run");
    f.put(k, json!({"value": "owner"}), None).await;
    f.put(k, json!({"value": "successor"}), None).await;
    let result: Result<(), Error> =
        f.lc.with_deletion(k, options(), |current, m| async move {
            assert_eq!(current, Some(record(json!({"value": "successor"}))));
            m.commit(&direct(f)).await?;
            f.put(k, json!({"value": "successor"}), None).await;
            m.rollback().await
        })
        .await;
    assert_err_contains(result, "changed before session deletion rollback");
    assert_eq!(f.unleased(k).await, Some(json!({"value": "successor"})));
}

/// 27. The exclusive fence drains in-flight mutations, allows nested ones, and refuses late
/// ones at once.
#[tokio::test]
async fn lifecycle_scenario_27_exclusive_fence_drains_and_rejects_late() {
    let f = &Fixture::new().await;
    let (first, late) = (&key("first"), &key("late"));
    let (in_a_tx, in_a_rx) = oneshot::channel();
    let (go_a_tx, go_a_rx) = oneshot::channel::<()>();
    let a = {
        let lc = f.lc.clone();
        let first = first.clone();
        tokio::spawn(async move {
            lc.with_mutation(|| async {
                in_a_tx.send(()).unwrap();
                go_a_rx.await.unwrap();
                set_value(&lc, &first, "before-archive").await
            })
            .await
        })
    };
    in_a_rx.await.unwrap();
    let fence = {
        let lc = f.lc.clone();
        let first = first.clone();
        tokio::spawn(async move {
            lc.with_exclusive_mutation_fence(|| async {
                let seen = lc.read(&first).await?;
                let nested = lc
                    .with_mutation(|| async { set_value(&lc, &first, "updated").await })
                    .await?;
                Ok((seen, nested))
            })
            .await
        })
    };
    f.timer.settle().await;
    assert!(
        !fence.is_finished(),
        "the fence waits for the in-flight mutation"
    );
    let refused =
        f.lc.with_mutation(|| async { set_value(&f.lc, late, "late").await })
            .await;
    let error = assert_err_contains(refused, "native archive is in progress");
    assert!(matches!(error, Error::MutationBlocked { .. }));
    go_a_tx.send(()).unwrap();
    assert!(a.await.unwrap().unwrap());
    let (seen, nested) = fence.await.unwrap().unwrap();
    assert_eq!(seen, Some(record(json!({"value": "before-archive"}))));
    assert!(nested);
    assert_eq!(f.unleased(first).await, Some(json!({"value": "updated"})));
    assert!(f.row(late).await.is_none());
    f.lc.with_mutation(|| async { set_value(&f.lc, late, "after the fence").await })
        .await
        .unwrap();
}

/// 28. A queued renewal cannot recreate a committed deletion.
#[tokio::test]
async fn lifecycle_scenario_28_queued_renewal_cannot_recreate_committed_deletion() {
    scenario_28(&Fixture::new().await).await;
}

/// The body of scenario 28, for every backend.
pub(crate) async fn scenario_28(f: &Fixture) {
    let k = &key("run");
    f.put(k, json!({"value": "run"}), None).await;
    let gate = Gate::new();
    f.lc.with_deletion(k, options(), |_, m| async move {
        f.store.hold_next_cas(&gate);
        f.timer.advance(RENEW).await;
        let guard = m.lease().expect("leased deletion");
        assert!(guard.renewal_pending(), "the renewal is prepared and held");
        m.commit(&direct(f)).await?;
        assert!(f.row(k).await.is_none());
        assert_eq!(guard.phase(), OwnerPhase::Deleted);
        gate.open();
        guard.join_renewal().await;
        assert!(
            f.row(k).await.is_none(),
            "the renewal did not recreate the row"
        );
        assert!(guard.failure().is_none());
        Ok(())
    })
    .await
    .unwrap();
    assert!(f.raw(k).await.is_none(), "still gone after the scope");
}

/// 29. Absent-row deletion: commit proves the key is still absent; rollback is a no-op; a row
/// created meanwhile makes the commit fail.
#[tokio::test]
async fn lifecycle_scenario_29_absent_row_deletion() {
    let f = &Fixture::new().await;
    let k = &key("absent");
    f.lc.with_deletion(k, options(), |current, m| async move {
        assert!(current.is_none());
        assert!(m.is_absent_row());
        m.commit(&direct(f)).await?;
        m.rollback().await?;
        assert!(f.row(k).await.is_none());
        f.put(k, json!({"value": "created meanwhile"}), None).await;
        let changed = m.commit(&direct(f)).await;
        assert!(matches!(
            assert_err_contains(changed, "Binding changed before session deletion"),
            Error::DeletionChanged { .. }
        ));
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(
        f.unleased(k).await,
        Some(json!({"value": "created meanwhile"}))
    );
}

/// An absent row leased for its deletion (`lease_absent_row`): a writer that would create the
/// row while the host transaction runs waits for the deletion instead of slipping in between
/// the absence proof and the host's COMMIT; the committed deletion leaves nothing behind, and
/// a rolled-back one leaves the lease policy's row, released, as any `with_lease` would.
#[tokio::test]
async fn lifecycle_absent_row_leased_for_its_deletion() {
    let f = &Fixture::new().await;
    let peer = &f.peer();
    for commit in [true, false] {
        let k = &key(if commit { "committed" } else { "rolled-back" });
        let leased = DeletionOptions {
            lease_absent_row: true,
            ..options()
        };
        f.lc.with_deletion(k, leased, |current, m| async move {
            assert_eq!(current, Some(record(json!({}))), "the lease policy's row");
            assert!(!m.is_absent_row());
            assert!(m.lease().is_some(), "the key is leased");
            let busy = peer
                .try_with_lease(k, LeaseOptions::default(), |_| async { Ok(()) })
                .await
                .unwrap_err();
            assert!(busy.is_busy(), "{busy:?}");
            if commit {
                m.commit(&direct(f)).await?;
                assert!(f.row(k).await.is_none());
            } else {
                m.rollback().await?;
            }
            Ok(())
        })
        .await
        .unwrap();
        if commit {
            assert!(f.raw(k).await.is_none(), "nothing left behind");
        } else {
            assert_eq!(f.unleased(k).await, Some(json!({})), "released");
        }
    }
}

/// 30. Rollback after a failed (unapplied) commit returns quietly and writes nothing.
#[tokio::test]
async fn lifecycle_scenario_30_rollback_after_unapplied_commit() {
    let f = &Fixture::new().await;
    let k = &key("run");
    f.put(k, json!({"value": "prepared"}), None).await;
    f.lc.with_deletion(k, options(), |_, m| async move {
        f.lc.transact(k, TransactOptions::default(), |_, _| {
            Ok(Applied::write(record(json!({"value": "changed"})), ()))
        })
        .await?;
        let changed = m.commit(&direct(f)).await;
        assert!(matches!(changed, Err(Error::DeletionChanged { .. })));
        let before = f.store.lookup(&f.ns, k).await?.unwrap();
        m.rollback().await?;
        assert_eq!(
            f.store.lookup(&f.ns, k).await?.unwrap(),
            before,
            "nothing written"
        );
        assert!(!m.is_deleted());
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(f.unleased(k).await, Some(json!({"value": "changed"})));
}

/// 31. Deletion commits only inside the host's transaction.
///
/// OpenClaw's stage-D refuses a direct `mutation.commit()` outside its worker participant. In our
/// design the commit takes the host's open [`RowTransaction`](tether_core::RowTransaction) (the
/// decision in `docs/deletion-and-reset.md`), so the property protected is that the binding row's
/// removal commits and rolls back with the host transaction: a staged delete is invisible until the
/// host commits; when the host transaction rolls back, the row is back and `rollback()` accepts the
/// identical restored row (owner back to held); a post-commit finalizer has no row transaction at
/// all (refused); only the host's committed transaction removes the row.
#[tokio::test]
async fn lifecycle_scenario_31_deletion_commits_only_through_the_host_transaction() {
    let f = &Fixture::new().await;
    let k = &key("run");
    f.put(k, json!({"value": "run"}), None).await;
    f.lc.with_deletion(k, options(), |_, m| async move {
        let guard = m.lease().unwrap();
        let refused = m.commit(&NoRowTransaction).await.unwrap_err();
        assert!(
            matches!(refused, Error::InvalidArgument { .. }),
            "no row transaction, no deletion: {refused:?}"
        );
        assert_eq!(guard.phase(), OwnerPhase::Held);

        let tx = f.mem().begin();
        m.commit(&tx).await?;
        assert!(
            f.row(k).await.is_some(),
            "not visible before the host commits"
        );
        tx.rollback();
        m.rollback().await?;
        assert_eq!(guard.phase(), OwnerPhase::Held);
        assert!(!m.is_deleted());
        let (_, lease) = f.row(k).await.unwrap();
        assert_eq!(lease.unwrap().token, *guard.token());

        let tx = f.mem().begin();
        m.commit(&tx).await?;
        tx.commit()?;
        m.settle_outcome(DeletionOutcome::Committed, None).await?;
        assert!(f.row(k).await.is_none());
        assert_eq!(guard.phase(), OwnerPhase::Deleted);
        Ok(())
    })
    .await
    .unwrap();
    assert!(f.row(k).await.is_none());
}

/// The host settles through the core `SessionMutation::settle_outcome` (it never sees the SDK
/// types): an unknown COMMIT outcome reported that way blocks the key exactly like
/// `SessionMutation::settle_outcome`, so later lease operations are refused with the unknown outcome.
#[tokio::test]
async fn deletion_settled_unknown_through_the_core_trait_blocks_the_key() {
    let f = &Fixture::new().await;
    let k = &key("run");
    f.put(k, json!({"value": "run"}), None).await;
    let result =
        f.lc.with_deletion(k, options(), |_, m| async move {
            let tx = f.mem().begin();
            m.commit(&tx).await?;
            let host: &dyn SessionMutation = &m;
            host.settle_outcome(
                tether_core::SettlementOutcome::Unknown,
                Some(Error::OutcomeUnknown {
                    key: k.clone(),
                    message: "COMMIT outcome unknown".into(),
                    cause: None,
                }),
            )
            .await?;
            assert!(m.is_unresolved());
            Ok(())
        })
        .await;
    assert!(
        result.is_err(),
        "the blocked owner reports the unknown outcome"
    );
    let again =
        f.lc.transact(k, TransactOptions::default(), |_, _| Ok(Applied::keep(())))
            .await;
    let err = again.unwrap_err();
    assert!(err.is_outcome_unknown(), "{err:?}");
}
