//! The task-portable lease handle: writes under a guard from a spawned task, `in_scope`,
//! the opt-in early refusal, `guard.lost()`, per-call wait budgets and `try_with_lease`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tether_core::{BindingKey, Error, JsonObjectCodec, LeaseConfig, LeaseWrite};
use tether_harness_sdk::lifecycle::{Applied, LeaseOptions, Lifecycle, TransactOptions};
use tether_storage::MemoryStore;

use super::support::{Fixture, Lc, RETRY, Record, STALE, config, key, record, set_value};

#[tokio::test]
async fn lifecycle_spawned_work_writes_under_the_guard() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.lc.with_lease(k, LeaseOptions::default(), |guard| async move {
        // transact_under from a spawned task: no wait behind its own lease.
        let lc = f.lc.clone();
        let g = guard.clone();
        let spawned = tokio::spawn(async move {
            lc.transact_under(&g, TransactOptions::default(), |_, owned| {
                assert!(owned.is_some(), "written under the guard's token");
                Ok(Applied::write(record(json!({"value": "from-task"})), ()))
            })
            .await
        });
        f.timer.settle().await;
        assert!(spawned.is_finished(), "the spawned write did not wait");
        spawned.await.unwrap()?;
        // in_scope: plain `transact` calls inside the future run under the lease.
        let lc = f.lc.clone();
        let k2 = k.clone();
        let scoped =
            tokio::spawn(guard.in_scope(async move { set_value(&lc, &k2, "scoped").await }));
        f.timer.settle().await;
        assert!(scoped.is_finished(), "the scoped write did not wait");
        assert!(scoped.await.unwrap()?);
        Ok(())
    })
    .await
    .unwrap();
    let (value, lease) = f.row(k).await.unwrap();
    assert_eq!(value["value"], "scoped");
    assert!(lease.is_none(), "released at scope exit");
}

#[tokio::test]
async fn lifecycle_spawned_transact_can_ask_to_fail_fast() {
    let f = &Fixture::new().await;
    let k = &key("k");
    f.lc.with_lease(k, LeaseOptions::default(), |_guard| async move {
        let lc = f.lc.clone();
        let k2 = k.clone();
        let spawned = tokio::spawn(async move {
            lc.transact(
                &k2,
                TransactOptions::default().failing_if_held_here(),
                |_, _| Ok(Applied::write(record(json!({"value": "x"})), ())),
            )
            .await
        });
        f.timer.settle().await;
        assert!(spawned.is_finished(), "refused at once");
        let err = spawned.await.unwrap().unwrap_err();
        assert!(matches!(err, Error::HeldOutsideScope { .. }), "{err:?}");
        assert!(err.to_string().contains("transact_under"), "{err}");
        Ok(())
    })
    .await
    .unwrap();
    // Without a live owner here the option changes nothing.
    f.lc.transact(
        k,
        TransactOptions::default().failing_if_held_here(),
        |_, _| Ok(Applied::write(record(json!({"value": "after"})), ())),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn lifecycle_guard_lost_completes_when_the_lease_is_lost() {
    let f = &Fixture::new().await;
    let k = &key("k");
    let result =
        f.lc.with_lease(k, LeaseOptions::default(), |guard| async move {
            let g = guard.clone();
            let lost = tokio::spawn(async move { g.lost().await });
            f.timer.settle().await;
            assert!(!lost.is_finished(), "pending while held");
            // Another writer removes the row: the next renewal finds the lease gone.
            f.delete(k).await;
            f.timer.advance(STALE / 3 + Duration::from_millis(1)).await;
            f.timer.settle().await;
            let error = lost.await.unwrap();
            assert!(error.is_lost_lease(), "{error:?}");
            Ok(())
        })
        .await;
    let err = result.unwrap_err();
    assert!(err.is_lost_lease(), "{err:?}");
}

#[tokio::test]
async fn lifecycle_per_call_wait_budget_and_try_with_lease() {
    let f = &Fixture::new().await;
    let k = &key("k");
    let peer = f.peer();
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = {
        let k = k.clone();
        tokio::spawn(async move {
            peer.with_lease(&k, LeaseOptions::default(), |_| async move {
                held_tx.send(()).unwrap();
                done_rx.await.unwrap();
                Ok(())
            })
            .await
        })
    };
    held_rx.await.unwrap();

    // try_with_lease: refused at once, `run` never starts.
    let started = super::support::Counter::default();
    let counter = started.clone();
    let err =
        f.lc.try_with_lease(k, LeaseOptions::default(), |_| async move {
            counter.bump();
            Ok(())
        })
        .await
        .unwrap_err();
    assert_eq!(started.get(), 0, "run never started");
    assert!(matches!(err, Error::LeaseTimeout { .. }), "{err:?}");
    assert!(err.is_busy() && err.is_retryable());

    // A 3 s budget: gives up after about 3 s of fake time, not the default 70 s.
    let lc = f.lc.clone();
    let k2 = k.clone();
    let waiting = tokio::spawn(async move {
        lc.transact(
            &k2,
            TransactOptions::default().with_wait_budget(Duration::from_secs(3)),
            |_, _| Ok(Applied::write(record(json!({"value": "x"})), ())),
        )
        .await
    });
    f.timer.settle().await;
    assert!(!waiting.is_finished(), "waits within its budget");
    for _ in 0..4 {
        f.timer.advance(RETRY).await;
        f.timer.settle().await;
    }
    assert!(waiting.is_finished(), "gave up after its own budget");
    let err = waiting.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::LeaseTimeout { .. }), "{err:?}");
    assert!(err.to_string().contains("held by peer;"), "{err}");
    done_tx.send(()).unwrap();
    holder.await.unwrap().unwrap();
}

/// A wait that times out behind a lease carrying this owner's own holder label says so: another
/// lifecycle instance of the same process holds it (two instances are two owners).
#[tokio::test]
async fn lifecycle_a_timeout_behind_its_own_label_names_the_second_instance() {
    let f = &Fixture::new().await;
    let k = &key("k");
    let (done_tx, holder) = hold_in_scope(f.twin(), k).await;
    let err =
        f.lc.try_with_lease(k, LeaseOptions::default(), |_| async move { Ok(()) })
            .await
            .unwrap_err();
    assert!(matches!(err, Error::LeaseTimeout { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("held by owner: this owner's own holder label")
            && err.to_string().contains("share one"),
        "{err}"
    );
    done_tx.send(()).unwrap();
    holder.await.unwrap().unwrap();

    // The same instance holding the key in a scope this call is not part of: a different
    // hint (the instance is shared already; the call is outside the scope).
    let (done_tx, held) = hold_in_scope(f.lc.clone(), k).await;
    let err =
        f.lc.try_with_lease(k, LeaseOptions::default(), |_| async move { Ok(()) })
            .await
            .unwrap_err();
    assert!(
        err.to_string().contains("this lifecycle's own live lease")
            && err.to_string().contains("transact_under"),
        "{err}"
    );
    done_tx.send(()).unwrap();
    held.await.unwrap().unwrap();
}

/// Holds `k` in a `with_lease` scope of `lc` on a task of its own until the returned sender
/// fires; returns once the lease is held.
async fn hold_in_scope(
    lc: Lc,
    k: &BindingKey,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), Error>>,
) {
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let k = k.clone();
    let scope = tokio::spawn(async move {
        lc.with_lease(&k, LeaseOptions::default(), |_| async move {
            held_tx.send(()).unwrap();
            done_rx.await.unwrap();
            Ok(())
        })
        .await
    });
    held_rx.await.unwrap();
    (done_tx, scope)
}

#[tokio::test]
async fn lifecycle_misuse_is_an_invalid_argument() {
    let f = &Fixture::new().await;
    let k = &key("k");
    let peer = f.peer();
    f.lc.with_lease(k, LeaseOptions::default(), |guard| async move {
        // A guard is good only with the lifecycle instance that acquired it.
        let err = peer
            .transact_under(&guard, TransactOptions::default(), |_, _| {
                Ok(Applied::write(record(json!({"value": "foreign"})), ()))
            })
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        assert!(!err.is_retryable(), "{err:?}");
        Ok(())
    })
    .await
    .unwrap();
    let (value, _) = f.row(k).await.expect("the lease's row");
    assert_ne!(value["value"], "foreign", "the foreign write wrote nothing");

    // A lease timing that could never renew in time is refused when the lifecycle is built.
    let never_renews = LeaseConfig {
        renew_interval: STALE,
        ..config()
    };
    let err = Lifecycle::builder(
        Arc::new(MemoryStore::new(Arc::new(f.clock.clone()))),
        f.ns.clone(),
        JsonObjectCodec,
        Arc::new(|current: Option<&Record>, _: &LeaseWrite| {
            Some(current.cloned().unwrap_or_default())
        }),
    )
    .lease_config(never_renews)
    .build()
    .map(|_| ())
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert!(err.to_string().contains("renew interval"), "{err}");
}
