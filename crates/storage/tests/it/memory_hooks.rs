//! The memory store's fault-injection hook, as the lifecycle tests use it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tether_core::{ApplyOutcome, BindingStore, Error, Intent, admit_all};
use tether_storage::StoreHook;

use crate::support::{key, memory_backend, text, value};

fn memory() -> (crate::support::Backend, tether_storage::MemoryStore) {
    let backend = memory_backend();
    let clock = backend.clock.clone();
    // A store handle of the concrete type sharing the fixture's clock.
    let store = tether_storage::MemoryStore::new(Arc::new(clock));
    (backend, store)
}

/// Lifecycle scenario 6, store side: a hook replaces the row just before the first compare; the
/// write conflicts with the successor, and a re-evaluation sees it.
#[tokio::test]
async fn hook_replaces_the_row_before_the_first_compare() {
    let (_b, store) = memory();
    let ns = tether_core::Namespace::new("hooks-6").unwrap();
    store
        .register_namespace(tether_core::NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let k = key("s1");
    store
        .register_if_absent(&ns, &k, value("original"), None)
        .await
        .unwrap();
    let (hns, hk) = (ns.clone(), k.clone());
    store.set_hook(StoreHook::new().before_compare(move |call| {
        let (ns, k) = (hns.clone(), hk.clone());
        Box::pin(async move {
            if call.seq == 1 {
                let seen = call.store.observe(&ns, &k).await?;
                call.store
                    .compare_and_apply(
                        &ns,
                        &k,
                        &seen.comparison,
                        Intent::Set {
                            row: value("successor"),
                            ttl: None,
                        },
                        &admit_all,
                    )
                    .await?;
            }
            Ok(())
        })
    }));
    let seen = store.observe(&ns, &k).await.unwrap();
    let out = store
        .compare_and_apply(
            &ns,
            &k,
            &seen.comparison,
            Intent::Set {
                row: value("updated"),
                ttl: None,
            },
            &admit_all,
        )
        .await
        .unwrap();
    let ApplyOutcome::Conflict { current } = out else {
        panic!("{out:?}")
    };
    assert_eq!(
        text(current.row.as_ref().unwrap()),
        r#"{"value":"successor"}"#
    );
    store.clear_hook();
    assert_eq!(
        text(&store.lookup(&ns, &k).await.unwrap().unwrap()),
        r#"{"value":"successor"}"#
    );
}

/// Lifecycle scenario 7, store side: the write applies and then the call fails; the caller sees
/// the error and the row holds the single write.
#[tokio::test]
async fn hook_fails_after_apply_with_the_write_in_place() {
    let (_b, store) = memory();
    let ns = tether_core::Namespace::new("hooks-7").unwrap();
    store
        .register_namespace(tether_core::NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let k = key("s1");
    store
        .register_if_absent(&ns, &k, value("original"), None)
        .await
        .unwrap();
    let applied = Arc::new(AtomicUsize::new(0));
    let seen_applied = Arc::clone(&applied);
    store.set_hook(StoreHook::new().after_apply(move |_call, outcome| {
        let applied = Arc::clone(&seen_applied);
        Box::pin(async move {
            if matches!(outcome, ApplyOutcome::Applied { .. }) {
                applied.fetch_add(1, Ordering::SeqCst);
            }
            Err(Error::other("storage outcome unknown"))
        })
    }));
    let seen = store.observe(&ns, &k).await.unwrap();
    let err = store
        .compare_and_apply(
            &ns,
            &k,
            &seen.comparison,
            Intent::Set {
                row: value("original:once"),
                ttl: None,
            },
            &admit_all,
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "storage outcome unknown");
    assert_eq!(applied.load(Ordering::SeqCst), 1);
    assert_eq!(
        text(&store.lookup(&ns, &k).await.unwrap().unwrap()),
        r#"{"value":"original:once"}"#
    );
}

/// A hook can hold a call on a test-controlled future; other writes proceed meanwhile and the
/// held call then conflicts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_pauses_a_call_until_released() {
    let (_b, store) = memory();
    let ns = tether_core::Namespace::new("hooks-pause").unwrap();
    store
        .register_namespace(tether_core::NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let k = key("s1");
    store
        .register_if_absent(&ns, &k, value("original"), None)
        .await
        .unwrap();
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let slots = Arc::new(std::sync::Mutex::new(Some((entered_tx, release_rx))));
    store.set_hook(StoreHook::new().before_compare(move |_call| {
        let slot = slots.lock().unwrap().take();
        Box::pin(async move {
            if let Some((entered, release)) = slot {
                let _ = entered.send(());
                let _ = release.await;
            }
            Ok(())
        })
    }));
    let seen = store.observe(&ns, &k).await.unwrap();
    let held = {
        let (store, ns, k, cmp) = (
            store.clone(),
            ns.clone(),
            k.clone(),
            seen.comparison.clone(),
        );
        tokio::spawn(async move {
            store
                .compare_and_apply(
                    &ns,
                    &k,
                    &cmp,
                    Intent::Set {
                        row: value("held"),
                        ttl: None,
                    },
                    &admit_all,
                )
                .await
        })
    };
    entered_rx.await.unwrap();
    // The second call passes the hook (its slot is empty) and wins.
    let out = store
        .compare_and_apply(
            &ns,
            &k,
            &seen.comparison,
            Intent::Set {
                row: value("other"),
                ttl: None,
            },
            &admit_all,
        )
        .await
        .unwrap();
    assert!(matches!(out, ApplyOutcome::Applied { .. }));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!held.is_finished(), "still held by the hook");
    release_tx.send(()).unwrap();
    let out = held.await.unwrap().unwrap();
    assert!(matches!(out, ApplyOutcome::Conflict { .. }));
}

/// A read hook can fail `observe`.
#[tokio::test]
async fn read_hook_fails_observe() {
    let (_b, store) = memory();
    let ns = tether_core::Namespace::new("hooks-read").unwrap();
    store
        .register_namespace(tether_core::NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    store.set_hook(StoreHook::new().before_read(|call| {
        Box::pin(async move {
            if call.seq == 2 {
                return Err(Error::other("observe failed"));
            }
            Ok(())
        })
    }));
    assert!(store.observe(&ns, &key("a")).await.is_ok());
    let err = store.observe(&ns, &key("a")).await.unwrap_err();
    assert_eq!(err.to_string(), "observe failed");
    assert!(store.observe(&ns, &key("a")).await.is_ok());
}
