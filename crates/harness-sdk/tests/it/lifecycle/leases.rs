//! Scenarios 1–22: leases and `transact` (`docs/lifecycle.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::json;
use tether_core::{AssertCurrent, BindingStore, Error, StoreErrorKind};
use tether_harness_sdk::lifecycle::{Applied, LeaseOptions, Timer, TransactOptions};
use tether_storage::StoreHook;
use tokio::sync::oneshot;

use super::support::{
    Counter, Fixture, Gate, RENEW, RETRY, STALE, assert_err_contains, key, record, set_value,
    unknown,
};

/// 1. A peer waits behind an absent-row lease and re-evaluates after the owner exits.
#[tokio::test]
async fn lifecycle_scenario_01_peer_waits_behind_absent_row_lease() {
    scenario_01(&Fixture::new().await).await;
}

/// The body of scenario 1, for every backend.
pub(crate) async fn scenario_01(f: &Fixture) {
    let k = &key("k");
    let (inside_tx, inside_rx) = oneshot::channel();
    let (go_tx, go_rx) = oneshot::channel::<()>();
    let (wrote_tx, wrote_rx) = oneshot::channel();
    let (exit_tx, exit_rx) = oneshot::channel::<()>();
    let owner = {
        let lc = f.lc.clone();
        let k = k.clone();
        tokio::spawn(async move {
            lc.with_lease(&k, LeaseOptions::default(), |_| async {
                inside_tx.send(()).unwrap();
                go_rx.await.unwrap();
                wrote_tx.send(set_value(&lc, &k, "owner").await).unwrap();
                exit_rx.await.unwrap();
                Ok(())
            })
            .await
        })
    };
    inside_rx.await.unwrap();
    let peer = {
        let peer = f.peer();
        let k = k.clone();
        tokio::spawn(async move {
            peer.transact(&k, TransactOptions::default(), |current, _| {
                Ok(if current.and_then(|c| c.get("value")).is_none() {
                    Applied::write(record(json!({"value": "peer"})), true)
                } else {
                    Applied::keep(false)
                })
            })
            .await
        })
    };
    f.timer.settle().await;
    assert!(!peer.is_finished(), "the peer waits behind the live lease");
    go_tx.send(()).unwrap();
    assert!(wrote_rx.await.unwrap().unwrap());
    f.timer.settle().await;
    assert!(!peer.is_finished());
    exit_tx.send(()).unwrap();
    owner.await.unwrap().unwrap();
    f.timer.advance(RETRY).await;
    assert!(peer.is_finished());
    assert!(
        !peer.await.unwrap().unwrap(),
        "the peer saw the owner's value"
    );
    assert_eq!(f.unleased(k).await, Some(json!({"value": "owner"})));
}

/// 2. Heartbeats keep the lease across a request longer than the lease lifetime.
#[tokio::test]
async fn lifecycle_scenario_02_renewed_lease_across_long_request() {
    scenario_02(&Fixture::new().await).await;
}

/// The body of scenario 2, for every backend.
pub(crate) async fn scenario_02(f: &Fixture) {
    let k = &key("k");
    f.put(k, json!({"value": "owner"}), None).await;
    let (inside_tx, inside_rx) = oneshot::channel();
    let (exit_tx, exit_rx) = oneshot::channel::<()>();
    let owner = {
        let lc = f.lc.clone();
        let k = k.clone();
        tokio::spawn(async move {
            lc.with_lease(&k, LeaseOptions::default(), |_| async {
                inside_tx.send(()).unwrap();
                exit_rx.await.unwrap();
                set_value(&lc, &k, "updated").await
            })
            .await
        })
    };
    inside_rx.await.unwrap();
    let peer = {
        let peer = f.peer();
        let k = k.clone();
        tokio::spawn(async move {
            peer.transact(&k, TransactOptions::default(), |_, _| {
                Ok(Applied::write(record(json!({"value": "peer"})), true))
            })
            .await
        })
    };
    f.timer.advance(Duration::from_secs(66)).await;
    assert!(
        !peer.is_finished(),
        "heartbeats renewed the lease past its lifetime"
    );
    let (_, lease) = f.row(k).await.unwrap();
    assert!(lease.unwrap().renewed_at > super::support::START);
    exit_tx.send(()).unwrap();
    assert!(owner.await.unwrap().unwrap());
    f.timer.advance(RETRY).await;
    assert!(peer.await.unwrap().unwrap());
    assert_eq!(f.unleased(k).await, Some(json!({"value": "peer"})));
}

/// 3. The lease is released after the callback fails; a peer proceeds without waiting.
#[tokio::test]
async fn lifecycle_scenario_03_lease_released_after_callback_rejects() {
    scenario_03(&Fixture::new().await).await;
}

/// The body of scenario 3, for every backend.
pub(crate) async fn scenario_03(f: &Fixture) {
    let k = &key("k");
    let result: Result<(), Error> =
        f.lc.with_lease(k, LeaseOptions::default(), |_| async {
            Err(Error::other("owner failed"))
        })
        .await;
    assert_err_contains(result, "owner failed");
    let peer = {
        let peer = f.peer();
        let k = k.clone();
        tokio::spawn(async move { set_value(&peer, &k, "peer").await })
    };
    f.timer.settle().await;
    assert!(peer.is_finished(), "no wait behind a released lease");
    assert!(peer.await.unwrap().unwrap());
    assert_eq!(f.unleased(k).await, Some(json!({"value": "peer"})));
}

/// 4. Fence at transaction: after the lease expired and a peer took the key, the old owner's
/// write is refused and its scope reports the lost lease.
#[tokio::test]
async fn lifecycle_scenario_04_fence_at_transaction() {
    scenario_04(&Fixture::new().await).await;
}

/// The body of scenario 4, for every backend.
pub(crate) async fn scenario_04(f: &Fixture) {
    let k = &key("k");
    let result =
        f.lc.with_lease(k, LeaseOptions::default(), |_| async {
            f.clock.advance(Duration::from_secs(66));
            let peer = f.peer();
            let pk = k.clone();
            let peer_result = tokio::spawn(async move {
                peer.with_lease(&pk, LeaseOptions::default(), |_| async {
                    set_value(&peer, &pk, "peer").await
                })
                .await
            })
            .await
            .unwrap();
            assert!(peer_result.unwrap());
            let stale = set_value(&f.lc, k, "stale").await;
            assert_err_contains(stale, "Lost binding lease");
            Ok(())
        })
        .await;
    assert_err_contains(result, "Lost binding lease");
    assert_eq!(f.unleased(k).await, Some(json!({"value": "peer"})));
}

/// 5. Fence at heartbeat: a failed renewal is reported at exit, and release never removes the
/// successor's token.
#[tokio::test]
async fn lifecycle_scenario_05_fence_at_heartbeat_successor_untouched() {
    scenario_05(&Fixture::new().await).await;
}

/// The body of scenario 5, for every backend.
pub(crate) async fn scenario_05(f: &Fixture) {
    let k = &key("k");
    let result =
        f.lc.with_lease(k, LeaseOptions::default(), |_| async {
            f.put(
                k,
                json!({}),
                Some(("peer-owner", f.now() + Duration::from_secs(120))),
            )
            .await;
            f.timer.advance(Duration::from_secs(30)).await;
            Ok(())
        })
        .await;
    assert_err_contains(result, "Lost binding lease");
    let (_, lease) = f.row(k).await.unwrap();
    assert_eq!(lease.unwrap().token.as_str(), "peer-owner");
}

/// 6. A comparison refusal re-evaluates `apply` against the fresh row.
#[tokio::test]
async fn lifecycle_scenario_06_comparison_refusal_reevaluates() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "original"}), None).await;
    let ns = f.ns.clone();
    f.mem()
        .set_hook(StoreHook::new().before_compare(move |call| {
            let ns = ns.clone();
            Box::pin(async move {
                if call.seq == 1 {
                    super::support::force_set(
                        &call.store,
                        &ns,
                        &call.key,
                        json!({"value": "successor"}),
                        None,
                    )
                    .await;
                }
                Ok(())
            })
        }));
    let applies = Counter::default();
    let result =
        f.lc.transact(k, TransactOptions::default(), |current, _| {
            applies.bump();
            Ok(
                if current.and_then(|c| c.get("value")) == Some(&json!("original")) {
                    Applied::write(record(json!({"value": "updated"})), true)
                } else {
                    Applied::keep(false)
                },
            )
        })
        .await
        .unwrap();
    assert!(!result);
    assert_eq!(applies.get(), 2);
    assert_eq!(f.unleased(k).await, Some(json!({"value": "successor"})));
}

/// 7. An uncertain outcome is returned, never replayed.
#[tokio::test]
async fn lifecycle_scenario_07_uncertain_outcome_not_replayed() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "original"}), None).await;
    f.mem().set_hook(StoreHook::new().after_apply(|call, _| {
        Box::pin(async move {
            if call.seq == 1 {
                return Err(Error::other("storage outcome unknown"));
            }
            Ok(())
        })
    }));
    let result =
        f.lc.transact(k, TransactOptions::default(), |current, _| {
            let value = current
                .and_then(|c| c.get("value"))
                .and_then(|v| v.as_str())
                .unwrap_or("");
            Ok(Applied::write(
                record(json!({"value": format!("{value}:once")})),
                (),
            ))
        })
        .await;
    assert_err_contains(result, "storage outcome unknown");
    assert_eq!(f.unleased(k).await, Some(json!({"value": "original:once"})));
}

/// 8. A lease that expires between observation and commit admission is lost, and the loss is
/// reported at exit even though the callback swallowed the transact error.
#[tokio::test]
async fn lifecycle_scenario_08_lease_loss_reported_when_swallowed() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "original"}), None).await;
    let result =
        f.lc.with_lease(k, LeaseOptions::default(), |_| async {
            let clock = f.clock.clone();
            f.mem()
                .set_hook(StoreHook::new().before_compare(move |call| {
                    let clock = clock.clone();
                    Box::pin(async move {
                        if call.seq == 1 {
                            clock.advance(STALE + Duration::from_millis(1));
                        }
                        Ok(())
                    })
                }));
            let swallowed = set_value(&f.lc, k, "changed").await;
            assert_err_contains(swallowed, "Lost binding lease");
            Ok("callback returned normally")
        })
        .await;
    assert_err_contains(result, "Lost binding lease");
    assert_eq!(f.row(k).await.unwrap().0, json!({"value": "original"}));
}

/// 9. A failed owner joins its pending renewal before releasing; the run's error wins.
#[tokio::test]
async fn lifecycle_scenario_09_renewal_joined_before_failed_owner_releases() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "original"}), None).await;
    let gate = Gate::new();
    let (inside_tx, inside_rx) = oneshot::channel();
    let owner = {
        let lc = f.lc.clone();
        let k = k.clone();
        let store = f.mem().clone();
        let timer = f.timer.clone();
        let gate = gate.clone();
        tokio::spawn(async move {
            lc.with_lease(&k, LeaseOptions::default(), |_| async move {
                store.set_hook(StoreHook::new().before_read(move |call| {
                    let gate = gate.clone();
                    Box::pin(async move {
                        if call.seq == 1 {
                            gate.wait().await;
                        }
                        Ok(())
                    })
                }));
                inside_tx.send(()).unwrap();
                Timer::sleep(&*timer, RENEW + Duration::from_millis(1)).await;
                Err::<(), _>(Error::other("native request failed"))
            })
            .await
        })
    };
    inside_rx.await.unwrap();
    f.timer.advance(RENEW).await;
    assert_eq!(gate.entered(), 1, "the renewal's observe is held");
    f.timer.advance(Duration::from_millis(1)).await;
    assert!(
        !owner.is_finished(),
        "the scope waits for the pending renewal"
    );
    gate.open();
    f.timer.settle().await;
    assert_err_contains(owner.await.unwrap(), "native request failed");
    assert_eq!(f.unleased(k).await, Some(json!({"value": "original"})));
}

/// 10. A renewal failure (with its cause) is preserved; a retained assertion passes until the
/// lease expires, then reports that failure.
#[tokio::test]
async fn lifecycle_scenario_10_renewal_failure_preserved_until_assertion_expires() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "original"}), None).await;
    let result =
        f.lc.with_lease(k, LeaseOptions::default(), |guard| async move {
            let assert = f.lc.capture_lease_assertion(k)?;
            f.mem().set_hook(StoreHook::new().before_read(|call| {
                Box::pin(async move {
                    if call.seq == 1 {
                        return Err(Error::other("cause C: observe failed"));
                    }
                    Ok(())
                })
            }));
            f.timer.advance(RENEW).await;
            assert!(guard.failure().is_some(), "the renewal failure is recorded");
            let expires_at = guard.expires_at();
            f.clock.set(expires_at - Duration::from_millis(1));
            assert.check().expect("still live at expires_at - 1");
            f.clock.set(expires_at);
            assert.check()?;
            Ok(())
        })
        .await;
    let error = assert_err_contains(result, "Lost binding lease");
    let cause = std::error::Error::source(&error).expect("the renewal cause is kept");
    assert_eq!(cause.to_string(), "cause C: observe failed");
}

/// Beside scenario 10: a renewal *refused* because the row no longer carries the lease (an
/// operator expired it, another owner took it) fails a retained assertion at once, well before
/// the lease's known expiry; and `LeaseAssertion::verify_fence` notices a revoked lease with one
/// read, before any renewal.
#[tokio::test]
async fn lifecycle_assertion_fails_at_once_when_the_store_shows_the_lease_taken() {
    let f = &Fixture::new().await;
    let (refused, read) = (&key("refused"), &key("read"));
    f.put(refused, json!({"value": "original"}), None).await;
    f.put(read, json!({"value": "original"}), None).await;

    // Noticed by a renewal.
    let result =
        f.lc.with_lease(refused, LeaseOptions::default(), |guard| async move {
            let assert = f.lc.capture_lease_assertion(refused)?;
            // The lease is removed from the row behind the owner's back.
            f.put(refused, json!({"value": "original"}), None).await;
            assert.check().expect("nothing known before the renewal");
            f.timer.advance(RENEW).await;
            assert!(guard.failure().is_some(), "the refused renewal is recorded");
            assert!(
                guard.expires_at() > f.now(),
                "the known expiry is still ahead"
            );
            assert!(assert.check().unwrap_err().is_lost_lease());
            Ok(())
        })
        .await;
    assert!(
        result.unwrap_err().is_lost_lease(),
        "the loss is reported at exit"
    );

    // Noticed by a read.
    let result =
        f.lc.with_lease(read, LeaseOptions::default(), |guard| async move {
            let assert = f.lc.capture_lease_assertion(read)?;
            assert_eq!(assert.verify_fence().await?, guard.epoch());
            f.put(read, json!({"value": "original"}), None).await;
            assert.check().expect("nothing known without a read");
            assert!(assert.verify_fence().await.unwrap_err().is_lost_lease());
            assert!(
                assert.check().unwrap_err().is_lost_lease(),
                "known from then on"
            );
            Ok(())
        })
        .await;
    assert!(result.unwrap_err().is_lost_lease());
}

/// 11. Quiesce refuses while a renewal is in flight, succeeds after it is joined, stops
/// heartbeats and transacts; release still happens at exit.
#[tokio::test]
async fn lifecycle_scenario_11_quiesce_with_renewal_in_flight() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "original"}), None).await;
    let gate = Gate::new();
    let result =
        f.lc.with_lease(k, LeaseOptions::default(), |guard| async move {
            let hold = gate.clone();
            f.mem()
                .set_hook(StoreHook::new().before_compare(move |call| {
                    let hold = hold.clone();
                    Box::pin(async move {
                        if call.seq == 1 {
                            hold.wait().await;
                        }
                        Ok(())
                    })
                }));
            let before = f.row(k).await.unwrap().1.unwrap().expires_at;
            f.timer.advance(RENEW).await;
            assert!(guard.renewal_pending());
            assert_err_contains(guard.quiesce(), "Lost binding lease");
            assert_eq!(f.row(k).await.unwrap().1.unwrap().expires_at, before);
            gate.open();
            guard.join_renewal().await;
            assert!(!guard.renewal_pending());
            let renewed = f.row(k).await.unwrap().1.unwrap().expires_at;
            assert!(renewed > before);
            guard.quiesce()?;
            let revision = f.store.lookup(&f.ns, k).await?.unwrap().revision;
            f.timer.advance(RENEW * 2).await;
            assert_eq!(f.store.lookup(&f.ns, k).await?.unwrap().revision, revision);
            assert_err_contains(set_value(&f.lc, k, "late").await, "Lost binding lease");
            Ok(())
        })
        .await;
    result.unwrap();
    assert_eq!(f.unleased(k).await, Some(json!({"value": "original"})));
}

/// 12. An unknown outcome keeps the token on the row and blocks the key in this instance (and
/// in the durable quarantine), for every entry point; other keys are unaffected.
#[tokio::test]
async fn lifecycle_scenario_12_unknown_outcome_retained() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "original"}), None).await;
    let result: Result<(), Error> =
        f.lc.with_lease(k, LeaseOptions::default(), |guard| async move {
            guard.quiesce()?;
            guard.block(unknown(guard.key()), None).await?;
            Err(unknown(guard.key()))
        })
        .await;
    let blocked = assert_err_contains(result, "outcome unknown");
    assert!(blocked.is_outcome_unknown());
    let (value, lease) = f.row(k).await.unwrap();
    assert_eq!(value, json!({"value": "original"}));
    let lease = lease.expect("not released");
    assert_eq!(lease.token.as_str(), "owner-1");
    let quarantined = f.quarantine.quarantined(&f.ns, k).await.unwrap();
    assert!(
        quarantined.is_some(),
        "recorded durably (docs/storage.md, Unknown outcomes)"
    );

    f.clock.advance(STALE * 2);
    let spy = Counter::default();
    let again =
        f.lc.with_lease(k, LeaseOptions::default(), |_| async {
            spy.bump();
            Ok(())
        })
        .await;
    assert!(assert_err_contains(again, "outcome unknown").is_outcome_unknown());
    assert_eq!(spy.get(), 0);
    assert!(
        assert_err_contains(set_value(&f.lc, k, "x").await, "outcome unknown").is_outcome_unknown()
    );
    assert_eq!(
        f.mem().raw_row(&f.ns, k).unwrap().value,
        br#"{"value":"original"}"#
    );
    let independent = &key("independent");
    f.lc.with_lease(independent, LeaseOptions::default(), |_| async {
        set_value(&f.lc, independent, "fine").await
    })
    .await
    .unwrap();
}

/// 13 and 14 share this body: a transact already waiting behind the owner is refused once the
/// owner blocks the key, whatever happened to the row meanwhile.
async fn waiting_mutation_refused_after_unknown(delete_row: bool) {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "original"}), None).await;
    let (inside_tx, inside_rx) = oneshot::channel();
    let (block_tx, block_rx) = oneshot::channel::<()>();
    let owner = {
        let lc = f.lc.clone();
        let k = k.clone();
        tokio::spawn(async move {
            lc.with_lease(&k, LeaseOptions::default(), |guard| async move {
                inside_tx.send(()).unwrap();
                block_rx.await.unwrap();
                guard.block(unknown(guard.key()), None).await?;
                Err::<(), _>(unknown(guard.key()))
            })
            .await
        })
    };
    inside_rx.await.unwrap();
    let applies = Counter::default();
    let waiting = {
        let lc = f.lc.clone();
        let k = k.clone();
        let applies = applies.clone();
        tokio::spawn(async move {
            lc.transact(&k, TransactOptions::default(), move |_, _| {
                applies.bump();
                Ok(Applied::write(record(json!({"value": "outside"})), ()))
            })
            .await
        })
    };
    f.timer.settle().await;
    assert!(!waiting.is_finished(), "busy behind the owner");
    block_tx.send(()).unwrap();
    f.timer.settle().await;
    if delete_row {
        f.delete(k).await;
    } else {
        f.clock.advance(STALE + Duration::from_millis(1));
    }
    assert!(owner.await.unwrap().unwrap_err().is_outcome_unknown());
    f.timer.advance(RETRY).await;
    assert!(waiting.await.unwrap().unwrap_err().is_outcome_unknown());
    assert_eq!(applies.get(), 0, "apply never ran");
    if delete_row {
        assert!(f.row(k).await.is_none(), "nothing recreated the row");
    } else {
        assert_eq!(f.row(k).await.unwrap().0, json!({"value": "original"}));
    }
}

/// 13. A mutation already waiting is refused after an unknown outcome (row removed).
#[tokio::test]
async fn lifecycle_scenario_13_waiting_mutation_refused_after_unknown_row_removed() {
    waiting_mutation_refused_after_unknown(true).await;
}

/// 14. The same with the blocked owner's lease expired instead of the row removed.
#[tokio::test]
async fn lifecycle_scenario_14_waiting_mutation_refused_after_unknown_lease_expired() {
    waiting_mutation_refused_after_unknown(false).await;
}

/// 15. A key blocked between observation and commit is refused at commit admission.
#[tokio::test]
async fn lifecycle_scenario_15_blocked_key_rechecked_between_observe_and_commit() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "original"}), None).await;
    let gate = Gate::new();
    let hold = gate.clone();
    f.mem().set_hook(StoreHook::new().before_compare(move |_| {
        let hold = hold.clone();
        Box::pin(async move {
            hold.wait().await;
            Ok(())
        })
    }));
    let applies = Counter::default();
    let outside = {
        let lc = f.lc.clone();
        let k = k.clone();
        let applies = applies.clone();
        tokio::spawn(async move {
            lc.transact(&k, TransactOptions::default(), move |_, _| {
                applies.bump();
                Ok(Applied::write(record(json!({"value": "outside"})), ()))
            })
            .await
        })
    };
    f.timer.settle().await;
    assert_eq!(gate.entered(), 1);
    assert_eq!(applies.get(), 1);
    f.lc.block(k, unknown(k), Some("test".into()))
        .await
        .unwrap();
    gate.open();
    assert!(outside.await.unwrap().unwrap_err().is_outcome_unknown());
    assert_eq!(applies.get(), 1);
    assert_eq!(f.unleased(k).await, Some(json!({"value": "original"})));
}

/// 16. After a storage failure on the acquisition write, the exact token is still cleaned up.
#[tokio::test]
async fn lifecycle_scenario_16_exact_token_cleanup_after_storage_failure() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "native"}), None).await;
    f.mem().set_hook(StoreHook::new().after_apply(|call, _| {
        Box::pin(async move {
            if call.seq == 1 {
                return Err(Error::store(StoreErrorKind::Unavailable {
                    message: "F: connection reset after write".into(),
                    cause: None,
                }));
            }
            Ok(())
        })
    }));
    let runs = Counter::default();
    let result =
        f.lc.with_lease(k, LeaseOptions::default(), |_| async {
            runs.bump();
            Ok(())
        })
        .await;
    assert_err_contains(result, "F: connection reset");
    assert_eq!(runs.get(), 0);
    assert_eq!(f.unleased(k).await, Some(json!({"value": "native"})));
}

fn flag_assertion(flag: &Arc<AtomicBool>) -> AssertCurrent {
    let flag = flag.clone();
    Arc::new(move || {
        if flag.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Error::revoked("F: caller cancelled"))
        }
    })
}

/// 17. Cancellation right after the acquisition write: run never starts, the lease is cleaned.
#[tokio::test]
async fn lifecycle_scenario_17_cancellation_right_after_admission() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "native"}), None).await;
    let current = Arc::new(AtomicBool::new(true));
    let flip = current.clone();
    f.mem()
        .set_hook(StoreHook::new().after_apply(move |call, _| {
            let flip = flip.clone();
            Box::pin(async move {
                if call.seq == 1 {
                    flip.store(false, Ordering::SeqCst);
                }
                Ok(())
            })
        }));
    let runs = Counter::default();
    let options = LeaseOptions {
        assert_current: Some(flag_assertion(&current)),
        prepare_lease: None,
        wait_budget: None,
    };
    let result =
        f.lc.with_lease(k, options, |_| async {
            runs.bump();
            Ok(())
        })
        .await;
    assert_err_contains(result, "F: caller cancelled");
    assert_eq!(runs.get(), 0);
    assert_eq!(f.unleased(k).await, Some(json!({"value": "native"})));
}

/// 18. Cancellation during run: the scope rejects, and release does not borrow the revoked
/// assertion.
#[tokio::test]
async fn lifecycle_scenario_18_cancellation_during_run() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "native"}), None).await;
    let current = Arc::new(AtomicBool::new(true));
    let runs = Counter::default();
    let options = LeaseOptions {
        assert_current: Some(flag_assertion(&current)),
        prepare_lease: None,
        wait_budget: None,
    };
    let result =
        f.lc.with_lease(k, options, |_| async {
            runs.bump();
            current.store(false, Ordering::SeqCst);
            Ok(())
        })
        .await;
    assert_err_contains(result, "F: caller cancelled");
    assert_eq!(runs.get(), 1);
    assert_eq!(f.unleased(k).await, Some(json!({"value": "native"})));
}

/// 19. An accepted outcome needs no post-effect lineage read.
///
/// Our lifecycle has no lineage reader of its own: the acquirer's authority is a synchronous
/// `assert_current`, and after `run` returns the scope calls only that and the exact-token
/// release. The property protected: once `run` has accepted, no store read other than the
/// release's happens, so a lineage source failing after `run` starts cannot turn an accepted
/// outcome into a failure. Reads are counted by a hook that fails every read except the
/// release's single observation.
#[tokio::test]
async fn lifecycle_scenario_19_accepted_outcome_needs_no_post_effect_lineage_read() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "native"}), None).await;
    let checks = Counter::default();
    let counted = checks.clone();
    let options = LeaseOptions {
        assert_current: Some(Arc::new(move || {
            counted.bump();
            Ok(())
        })),
        prepare_lease: None,
        wait_budget: None,
    };
    let reads = Counter::default();
    let result =
        f.lc.with_lease(k, options, |_| async {
            let reads = reads.clone();
            f.mem().set_hook(StoreHook::new().before_read(move |_| {
                let n = reads.bump();
                Box::pin(async move {
                    if n > 1 {
                        return Err(Error::other("lineage reader failed after run started"));
                    }
                    Ok(())
                })
            }));
            Ok(json!({"accepted": true}))
        })
        .await
        .unwrap();
    assert_eq!(result, json!({"accepted": true}));
    assert_eq!(reads.get(), 1, "only the release read the row");
    assert!(checks.get() >= 3, "before, after acquisition, after run");
    f.mem().clear_hook();
    assert_eq!(f.unleased(k).await, Some(json!({"value": "native"})));
}

/// 20. Settling a revoked caller never removes a successor's token.
#[tokio::test]
async fn lifecycle_scenario_20_successor_token_not_removed_while_settling_revoked_caller() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "native"}), None).await;
    let successor = std::sync::Mutex::new(None);
    let result: Result<(), Error> =
        f.lc.with_lease(k, LeaseOptions::default(), |_| async {
            f.put(
                k,
                json!({"value": "successor"}),
                Some(("successor-token", f.now() + Duration::from_secs(60))),
            )
            .await;
            *successor.lock().unwrap() = f.store.lookup(&f.ns, k).await?;
            Err(Error::revoked("caller revoked"))
        })
        .await;
    assert_err_contains(result, "caller revoked");
    let (value, lease) = f.row(k).await.unwrap();
    assert_eq!(value, json!({"value": "successor"}));
    assert_eq!(lease.unwrap().token.as_str(), "successor-token");
    let expected = successor.lock().unwrap().clone().expect("successor row");
    assert_eq!(
        f.store.lookup(&f.ns, k).await.unwrap().unwrap(),
        expected,
        "exactly the successor"
    );
}

/// 21. Contention does not block the runtime.
///
/// OpenClaw's scenario holds a foreign SQLite write transaction and checks its event loop
/// still makes progress while a worker-backed mutation waits. Our store calls are async and
/// waiting behind a lease is a timer sleep, never a blocking wait, so the property tested is:
/// on a single-threaded runtime, while a transact waits behind a foreign lease, other tasks
/// (including writes to other keys) run to completion; after the holder releases, the
/// waiting mutation resolves "stored" with the value "after".
#[tokio::test(flavor = "current_thread")]
async fn lifecycle_scenario_21_contention_does_not_block_the_runtime() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "before"}), None).await;
    let (inside_tx, inside_rx) = oneshot::channel();
    let (exit_tx, exit_rx) = oneshot::channel::<()>();
    let holder = {
        let peer = f.peer();
        let k = k.clone();
        tokio::spawn(async move {
            peer.with_lease(&k, LeaseOptions::default(), |_| async {
                inside_tx.send(()).unwrap();
                exit_rx.await.unwrap();
                Ok(())
            })
            .await
        })
    };
    inside_rx.await.unwrap();
    let mutation = {
        let lc = f.lc.clone();
        let k = k.clone();
        tokio::spawn(async move {
            lc.transact(&k, TransactOptions::default(), |_, _| {
                Ok(Applied::write(record(json!({"value": "after"})), "stored"))
            })
            .await
        })
    };
    let other = {
        let lc = f.lc.clone();
        tokio::spawn(async move { set_value(&lc, &key("other"), "progress").await })
    };
    f.timer.advance(RETRY * 3).await;
    assert!(other.is_finished(), "the runtime made progress");
    assert!(other.await.unwrap().unwrap());
    assert!(!mutation.is_finished(), "the mutation still waits");
    exit_tx.send(()).unwrap();
    holder.await.unwrap().unwrap();
    f.timer.advance(RETRY).await;
    assert_eq!(mutation.await.unwrap().unwrap(), "stored");
    assert_eq!(f.unleased(k).await, Some(json!({"value": "after"})));
}

/// 22. Revocation at commit admission publishes nothing.
///
/// OpenClaw runs this against its worker store's admission probe. Our stores run the
/// lifecycle's admission check inside the write transaction, just before the write; the hook
/// flips the acquirer's authority right before the in-lease write is admitted.
#[tokio::test]
async fn lifecycle_scenario_22_revocation_at_commit_admission_publishes_nothing() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.put(k, json!({"value": "before"}), None).await;
    let current = Arc::new(AtomicBool::new(true));
    let options = LeaseOptions {
        assert_current: Some(flag_assertion(&current)),
        prepare_lease: None,
        wait_budget: None,
    };
    let runs = Counter::default();
    let result =
        f.lc.with_lease(k, options, |_| async {
            runs.bump();
            let flip = current.clone();
            f.mem()
                .set_hook(StoreHook::new().before_compare(move |call| {
                    let flip = flip.clone();
                    Box::pin(async move {
                        if call.seq == 1 {
                            flip.store(false, Ordering::SeqCst);
                        }
                        Ok(())
                    })
                }));
            set_value(&f.lc, k, "after").await
        })
        .await;
    assert_err_contains(result, "F: caller cancelled");
    assert_eq!(runs.get(), 1);
    assert_eq!(f.row(k).await.unwrap().0, json!({"value": "before"}));
}

/// A scope whose future is dropped before it ends (a caller's timeout, a disconnected client)
/// releases its lease on a task of its own: a peer acquires at once instead of waiting for the
/// lease to expire — also when the drop lands while a heartbeat renewal is in flight (the
/// scope's end then no longer waits for a renewal that will never finish).
#[tokio::test]
async fn lifecycle_a_dropped_scope_releases_its_lease() {
    for renewal_in_flight in [false, true] {
        let f = Fixture::new().await;
        let k = &key("dropped");
        let (started_tx, started_rx) = oneshot::channel();
        let scope = {
            let (lc, k) = (f.lc.clone(), k.clone());
            tokio::spawn(async move {
                lc.with_lease(&k, LeaseOptions::default(), |_| async move {
                    started_tx.send(()).unwrap();
                    std::future::pending::<Result<(), Error>>().await
                })
                .await
            })
        };
        started_rx.await.unwrap();
        assert!(f.row(k).await.unwrap().1.is_some(), "held");
        let gate = Gate::new();
        if renewal_in_flight {
            f.store.hold_next_cas(&gate);
            f.timer.advance(RENEW).await;
            while gate.entered() == 0 {
                tokio::task::yield_now().await;
            }
        }
        scope.abort();
        assert!(scope.await.unwrap_err().is_cancelled());
        f.timer.settle().await;
        for _ in 0..100 {
            if f.row(k).await.unwrap().1.is_none() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(
            f.row(k).await.unwrap().1.is_none(),
            "released (renewal in flight: {renewal_in_flight})"
        );
        let peer = {
            let (peer, k) = (f.peer(), k.clone());
            tokio::spawn(async move { set_value(&peer, &k, "peer").await })
        };
        f.timer.settle().await;
        assert!(peer.is_finished(), "no wait behind a dropped scope's lease");
        assert!(peer.await.unwrap().unwrap());
        gate.open();
    }
}
