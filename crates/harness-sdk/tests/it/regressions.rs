//! Regression tests for upstream bugs (numbered as in the upstream tracker) that the
//! thread-binding backend and its hooks must make impossible; `docs/harness-backend.md`,
//! "Failure shapes the backend rules out", lists them (#138767 lives in `generation.rs`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tether_core::RecordCodec as _;
use tether_core::{
    AgentHarness, BindingStore, Error, HostSessionEntry, ResetReason, RowWrite,
    SessionDeletionHook, SessionDeletionParams, SessionKey, StoreErrorKind, always_current,
};
use tether_harness_sdk::backend::{BindingIdentity, ThreadBindingCodec, ThreadBindingRecord};

use crate::backend::{Fx, START, agent, caller, opts, settle, sid, skey, thread};
use crate::hooks::{committing, deletion, direct, reset};

/// #66262: a reset rotated the host session but kept the native resume handle. After the
/// reset hook, the successor generation can never resume the old thread — whether the host
/// resets the old generation or (after rotating) names the new one.
#[tokio::test]
async fn regression_66262_reset_does_not_keep_a_stale_native_binding() {
    for reset_names_successor in [false, true] {
        let f = Fx::new().await;
        f.host("s1", None);
        let (s1, s2) = (f.id("s1"), f.id("s2"));
        assert!(
            f.store
                .set(&s1, thread("thread-stale"), opts())
                .await
                .unwrap()
        );
        f.mem.rotate_host_session(&skey(), sid("s2")).unwrap();
        let session = if reset_names_successor { "s2" } else { "s1" };
        f.harness()
            .reset(reset(session, ResetReason::New))
            .await
            .unwrap();
        assert_eq!(f.read(&s1).await, None);
        let resolved = f.harness().resolve(&s2, &caller()).await.unwrap();
        assert!(
            resolved.binding.is_none(),
            "the successor must not resume the stale thread (reset named {session})"
        );
    }

    // Without the reset the same rotation is a compaction: the binding is transferred. The
    // reset above is what keeps the stale thread from being resumed.
    let f = Fx::new().await;
    f.host("s1", None);
    assert!(
        f.store
            .set(&f.id("s1"), thread("thread-1"), opts())
            .await
            .unwrap()
    );
    f.mem.rotate_host_session(&skey(), sid("s2")).unwrap();
    let resolved = f.harness().resolve(&f.id("s2"), &caller()).await.unwrap();
    assert_eq!(resolved.binding.unwrap().thread_id, "thread-1");
}

/// #116022, #123460, #135778: an in-place `/reset` or `/new` (same physical id) retired the
/// generation, so every later turn failed ("generation was retired"), restarts did not help,
/// and `/new` only rewrote the retired row. Resets never retire; a same-id fence left by an
/// older version is repaired through the host-store path, by a reset or by the next turn.
#[tokio::test]
async fn regression_116022_123460_135778_in_place_reset_never_bricks_later_turns() {
    let f = Fx::new().await;
    f.host("s1", None);
    let s1 = f.id("s1");
    let generation = f.generation();
    let turn = |thread_id: &'static str| {
        let (store, generation, s1) = (f.store.clone(), generation.clone(), s1.clone());
        async move {
            let (inner, id) = (store.clone(), s1.clone());
            store
                .with_reclaimed_lease(&s1, &generation, &caller(), true, |_, _| async move {
                    inner.set(&id, thread(thread_id), opts()).await
                })
                .await
        }
    };
    assert!(turn("thread-1").await.unwrap());
    for reason in [ResetReason::Reset, ResetReason::Reset, ResetReason::New] {
        f.harness().reset(reset("s1", reason)).await.unwrap();
        assert!(!f.record(&s1).await.is_some_and(|r| r.is_retired()));
        assert!(turn("thread-2").await.unwrap(), "the next turn binds again");
    }

    // A permanent same-id fence as an older version left it (`session-key:` row, no TTL).
    f.mem.remove_host_session(&skey());
    f.host("s1", None);
    f.store.clear(&s1, None, opts()).await.unwrap();
    f.clock.advance(Duration::from_millis(5));
    let fence = ThreadBindingRecord::cleared(Some(sid("s1")), true);
    let value = ThreadBindingCodec.encode(&fence);
    assert!(
        f.mem
            .register_if_absent(&f.ns, s1.key(), RowWrite { value, lease: None }, None)
            .await
            .unwrap()
    );
    // A restart (a fresh instance) does not help a plain lease: the fence is real.
    let restarted = f.peer();
    let err = restarted
        .with_lease(&s1, false, None, |_| async { Ok(()) })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("generation was retired"), "{err}");
    // `/new` keeping the id repairs it (host row proves s1), and turns work again.
    f.harness()
        .reset(reset("s1", ResetReason::New))
        .await
        .unwrap();
    assert!(!f.record(&s1).await.unwrap().is_retired());
    assert!(turn("thread-3").await.unwrap());

    // The next turn alone also repairs such a fence when the host row proves the same id.
    assert_eq!(
        f.store.retire(&s1, opts()).await.unwrap(),
        tether_harness_sdk::backend::TransitionOutcome::Applied
    );
    assert!(turn("thread-4").await.unwrap());
    assert_eq!(f.read(&s1).await.as_deref(), Some("thread-4"));
}

/// #144396 / #144179: a predecessor's retired tombstone vetoed `sessions delete` with
/// "generation changed before session deletion". A cleared (retired) row of another
/// generation never vetoes; an active row of another generation still does.
#[tokio::test]
async fn regression_144396_predecessor_tombstone_does_not_veto_deletion() {
    let f = Fx::new().await;
    f.host("s2", Some("s1"));
    let s1 = f.id("s1");
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    f.store.retire(&s1, opts()).await.unwrap();
    assert!(f.record(&s1).await.unwrap().is_retired());

    f.harness()
        .with_session_deletion(deletion("s2"), committing(direct(&f), || Ok(())))
        .await
        .unwrap();
    assert_eq!(f.raw(&s1).await, None, "the deletion removed the row");

    // An active binding of another generation (not the recorded predecessor) keeps the
    // strict ownership check.
    let s0 = f.id("s0");
    assert!(f.store.set(&s0, thread("thread-9"), opts()).await.unwrap());
    let err = f
        .harness()
        .with_session_deletion(deletion("s2"), committing(direct(&f), || Ok(())))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DeletionChanged { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("generation changed before session deletion"),
        "{err}"
    );
    assert_eq!(f.read(&s0).await.as_deref(), Some("thread-9"));
}

/// #128366: deleted sessions left binding rows behind until the namespace cap (reject-new)
/// wedged every run. With a 3-row namespace, ten create → bind → delete cycles leave no row
/// behind, and a full namespace really does refuse new rows.
#[tokio::test]
async fn regression_128366_deletion_leaves_no_rows_behind() {
    let f = Fx::with_capacity(Some(3)).await;
    let h = f.harness();
    for i in 0..10 {
        let key = SessionKey::new(format!("agent:main:one-shot-{i}")).unwrap();
        let session = sid(&format!("run-{i}"));
        f.mem.put_host_session(HostSessionEntry::new(
            key.clone(),
            agent(),
            session.clone(),
            START,
        ));
        let identity = BindingIdentity::session(agent(), session.clone(), Some(key.clone()));
        assert!(
            f.store
                .set(&identity, thread("thread"), opts())
                .await
                .unwrap(),
            "cycle {i} can bind"
        );
        let params = SessionDeletionParams {
            agent_id: agent(),
            session_key: key.clone(),
            session_id: session.clone(),
            lifecycle_revision: None,
            initialization: None,
            assert_current: always_current(),
        };
        h.with_session_deletion(params, committing(direct(&f), || Ok(())))
            .await
            .unwrap();
        f.mem.remove_host_session(&key);
        h.reset(tether_core::ResetParams::new(
            agent(),
            session,
            Some(key),
            ResetReason::Deleted,
        ))
        .await
        .unwrap();
    }
    assert_eq!(f.count().await, 0);

    for i in 0..3 {
        let identity = BindingIdentity::session(agent(), sid(&format!("full-{i}")), None);
        assert!(f.store.set(&identity, thread("t"), opts()).await.unwrap());
    }
    let overflow = BindingIdentity::session(agent(), sid("full-3"), None);
    let err = f
        .store
        .set(&overflow, thread("t"), opts())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Store {
                kind: StoreErrorKind::CapacityExceeded { .. }
            }
        ),
        "{err:?}"
    );
}

/// #118506: reclaiming before acquiring the lease left a window in which a concurrent
/// same-identity lifecycle could take the recovered binding. The reclaim runs under the
/// lease: when the owner's callback starts, the row is already reclaimed **and** leased, and
/// a concurrent same-identity turn waits, then finds the owner's binding.
#[tokio::test]
async fn regression_118506_reclaim_and_lease_are_one_transition() {
    let f = Fx::new().await;
    // A new session under the same key after s1 was retired; no recorded predecessor.
    f.host("s2", None);
    let (s1, s2) = (f.id("s1"), f.id("s2"));
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    f.store.retire(&s1, opts()).await.unwrap();

    let generation = f.generation();
    let peer = f.peer();
    let (peer_gen, peer_id) = (generation.clone(), s2.clone());
    let start = Arc::new(tokio::sync::Notify::new());
    let go = start.clone();
    let contender = tokio::spawn(async move {
        go.notified().await;
        let inner = peer.clone();
        let id = peer_id.clone();
        peer.with_reclaimed_lease(&peer_id, &peer_gen, &caller(), true, |_, _| async move {
            inner
                .set_if_absent(&id, thread("thread-peer"), opts())
                .await
        })
        .await
    });

    let store = f.store.clone();
    let (mem, ns, id) = (f.mem.clone(), f.ns.clone(), s2.clone());
    let won = f
        .store
        .with_reclaimed_lease(&s2, &generation, &caller(), true, |guard, _| async move {
            let row = mem.lookup(&ns, id.key()).await?.expect("row");
            let value: serde_json::Value = serde_json::from_slice(&row.value).unwrap();
            assert_eq!(
                value,
                json!({"version": 1, "state": "cleared", "sessionId": "s2"})
            );
            assert_eq!(
                row.lease.as_ref().map(|l| &l.token),
                Some(guard.token()),
                "reclaimed under the owner's lease"
            );
            start.notify_one();
            settle().await;
            assert!(
                !contender.is_finished(),
                "the contender waits behind the lease"
            );
            let won = store
                .set_if_absent(&id, thread("thread-owner"), opts())
                .await?;
            Ok((won, contender))
        })
        .await
        .unwrap();
    let (won, contender) = won;
    assert!(won);
    f.timer.advance(Duration::from_secs(1)).await;
    settle().await;
    assert!(
        !contender.await.unwrap().unwrap(),
        "the contender finds the owner's binding"
    );
    assert_eq!(f.read(&f.id("s2")).await.as_deref(), Some("thread-owner"));
}
