//! The host facade and the SQL fallback transcript, on SQLite and (when a server answers)
//! PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use tether_core::{
    AgentHarness, AgentId, AgentMessage, BindingStore, Cancellation, Error, HarnessId,
    HostErrorKind, LeaseConfig, LifecycleRevision, MessageRole, NamespaceConfig, SessionId,
    SessionKey, SessionTarget, always_current,
};
use tether_finalizer::{FallbackAppend, FallbackAppendResult, FallbackTranscript, WriterFence};
use tether_harness_sdk::backend::{BindingIdentity, ThreadBinding, WriteOptions};
use tether_harness_sdk::generation::BindingAuthority;
use tether_harness_sdk::hooks::ThreadBindingHarness;
use tether_host::Host;
use tether_storage::testing::PgTestDatabase;
use tether_storage::{CutStatus, NewHostSession, NewTranscriptEntry, TranscriptRole};

#[cfg(feature = "codex")]
mod codex;

const NAMESPACE: &str = "host-threads";

/// Runs `check` on a SQLite file host and, when a server answers, a PostgreSQL host.
pub(crate) async fn on_both<F, Fut>(label: &str, check: F)
where
    F: Fn(Host, bool) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("host.db").display());
    let host = Host::builder(&url).holder("worker-a").open().await.unwrap();
    check(host.clone(), false).await;
    host.close().await.unwrap();
    if let Some(db) = PgTestDatabase::create(label).await {
        let host = Host::builder(db.url())
            .holder("worker-a")
            .open()
            .await
            .unwrap();
        check(host.clone(), true).await;
        host.close().await.unwrap();
        db.cleanup().await;
    }
}

async fn session(host: &Host, key: &str, generation: &str) -> SessionKey {
    let key = SessionKey::new(key).unwrap();
    host.store()
        .create_session(NewHostSession {
            session_key: key.clone(),
            agent_id: AgentId::new("main").unwrap(),
            session_id: SessionId::new(generation).unwrap(),
            agent_harness_id: Some(HarnessId::new("threads").unwrap()),
        })
        .await
        .unwrap();
    key
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_picks_the_clock_and_shares_it_with_the_store() {
    on_both("host_clock", |host, postgres| async move {
        // PostgreSQL: the server's clock, measured at open; SQLite: the system clock.
        assert_eq!(host.server_clock().is_some(), postgres);
        if let Some(server) = host.server_clock() {
            assert!(
                server.offset_millis().abs() < 5_000,
                "same machine: {} ms",
                server.offset_millis()
            );
        }
        assert!(
            Arc::ptr_eq(host.clock(), host.store().clock()),
            "one clock for the host and its store"
        );
        assert_eq!(host.holder(), "worker-a");
    })
    .await;
    // A clock of the caller's wins everywhere.
    let fake = tether_core::FakeClock::new(tether_core::Timestamp::from_millis(1_000));
    let host = Host::builder("sqlite::memory:")
        .clock(Arc::new(fake))
        .open()
        .await
        .unwrap();
    assert_eq!(host.store().clock().now().as_millis(), 1_000);
    assert_eq!(host.clock().now().as_millis(), 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_wires_bindings_leases_and_deletion_over_one_store() {
    on_both("host_wiring", |host, _| async move {
        let harness = host.thread_harness("threads", NAMESPACE).await.unwrap();
        assert!(
            host.store()
                .has_namespace(&tether_core::Namespace::new(NAMESPACE).unwrap()),
            "registered by the facade"
        );
        let harness = Arc::new(harness);
        host.registry()
            .register(harness.clone() as Arc<dyn AgentHarness>);
        let key = session(&host, "agent:main:direct:wired", "gen-1").await;
        let identity = BindingIdentity::session(
            AgentId::new("main").unwrap(),
            SessionId::new("gen-1").unwrap(),
            Some(key.clone()),
        );
        let bindings = harness.store();
        let (epoch, holder) = bindings
            .with_lease(&identity, false, None, |lease| {
                let (bindings, identity) = (bindings.clone(), identity.clone());
                async move {
                    bindings
                        .set(
                            &identity,
                            ThreadBinding::new("thread-1", "/srv"),
                            WriteOptions::default(),
                        )
                        .await?;
                    Ok::<_, Error>(lease.epoch())
                }
            })
            .await
            .map(|epoch| (epoch, host.holder().to_owned()))
            .unwrap();
        assert!(epoch.get() >= 1);
        let row = host
            .store()
            .lookup(bindings.namespace(), identity.key())
            .await
            .unwrap()
            .expect("the binding row");
        assert!(row.lease.is_none(), "released after the scope");
        assert_eq!(holder, "worker-a");

        // Deleting the session removes its binding in the same transaction.
        let deleted = host
            .sessions()
            .delete_sessions(std::slice::from_ref(&key))
            .await
            .unwrap();
        assert_eq!(deleted, vec![key.clone()]);
        assert!(host.store().session(&key).await.unwrap().is_none());
        assert!(bindings.read(&identity).await.unwrap().is_none());
    })
    .await;
}

/// The binding identity of `key`'s generation `generation` (agent `main`).
fn identity(key: &SessionKey, generation: &str) -> BindingIdentity {
    BindingIdentity::session(
        AgentId::new("main").unwrap(),
        SessionId::new(generation).unwrap(),
        Some(key.clone()),
    )
}

/// Resets `key` to generation `next` in the host's transaction and tells no harness: what a
/// crash between the reset's COMMIT and its notification leaves.
async fn reset_unnotified(host: &Host, key: &SessionKey, next: &str) {
    tether_storage::testing::commit_unnotified_reset(
        host.store(),
        key,
        &SessionId::new(next).unwrap(),
    )
    .await
    .unwrap()
    .expect("rotated");
}

/// Rotates `key` from generation `from` to `to` (a compaction: a transfer), telling no harness.
async fn rotate(host: &Host, key: &SessionKey, from: &str, to: &str) {
    host.store()
        .rotate_generation(
            key,
            &SessionId::new(from).unwrap(),
            SessionId::new(to).unwrap(),
        )
        .await
        .unwrap()
        .expect("rotated");
}

/// A session `key` at `gen-1` whose turn bound the thread `old`.
async fn bound_session(host: &Host, harness: &ThreadBindingHarness, key: &str) -> SessionKey {
    let key = session(host, key, "gen-1").await;
    assert!(
        bind_in_turn(harness, &identity(&key, "gen-1"), "old")
            .await
            .unwrap()
    );
    key
}

/// Binds `thread` for `identity` through the turn lease, writing under its authority.
async fn bind_in_turn(
    harness: &ThreadBindingHarness,
    identity: &BindingIdentity,
    thread: &str,
) -> Result<bool, Error> {
    let caller = BindingAuthority::caller(always_current());
    let bindings = harness.store().clone();
    harness
        .with_turn_lease(identity, &caller, |_lease, authority| async move {
            let options = WriteOptions::checked(authority.assert_current_fn());
            bindings
                .set(identity, ThreadBinding::new(thread, "/srv"), options)
                .await
        })
        .await
}

/// How a generation began decides whether its first turn continues the predecessor's native
/// thread, durably: a reset whose notification never ran (the process died right after the
/// host's COMMIT) leaves the predecessor's binding, and the next turn clears it instead of
/// continuing it; a cut applied without any harness taking part is not continued either; a
/// rotation (a compaction) is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_a_reset_or_cut_is_never_continued_even_without_its_notification() {
    use tether_core::GenerationChange;

    on_both("host_reset_durable", |host, _| async move {
        let harness = host.thread_harness("threads", NAMESPACE).await.unwrap();
        let thread_of_turn = |id: BindingIdentity| {
            let harness = harness.clone();
            async move {
                let caller = BindingAuthority::caller(always_current());
                harness
                    .with_turn_lease(&id, &caller, |_lease, _authority| async { Ok(()) })
                    .await
                    .unwrap();
                let resolved = harness.resolve(&id, &caller).await.unwrap();
                (
                    resolved.binding.map(|b| b.thread_id),
                    resolved.previous_change,
                )
            }
        };

        // A reset committed by the host with no harness told (no harness is registered here:
        // exactly what a crash between the COMMIT and the notification leaves).
        let key = session(&host, "agent:main:direct:reset-crash", "gen-1").await;
        assert!(
            bind_in_turn(&harness, &identity(&key, "gen-1"), "before-reset")
                .await
                .unwrap()
        );
        reset_unnotified(&host, &key, "gen-2").await;
        assert_eq!(
            thread_of_turn(identity(&key, "gen-2")).await,
            (None, Some(GenerationChange::Reset)),
            "the reset generation starts without the predecessor's thread"
        );
        assert!(
            bind_in_turn(&harness, &identity(&key, "gen-2"), "after-reset")
                .await
                .unwrap()
        );
        assert_eq!(
            thread_of_turn(identity(&key, "gen-2")).await.0.as_deref(),
            Some("after-reset")
        );

        // A supervision binding: its owner decides over the native thread, so a reset keeps it
        // (the reset's notification does too) and the new generation adopts it.
        let key = session(&host, "agent:main:direct:reset-supervised", "gen-1").await;
        let supervised = {
            let harness = harness.clone();
            let id = identity(&key, "gen-1");
            async move {
                let caller = BindingAuthority::caller(always_current());
                let bindings = harness.store().clone();
                harness
                    .with_turn_lease(&id, &caller, |_lease, authority| {
                        let id = id.clone();
                        async move {
                            bindings
                                .set(
                                    &id,
                                    ThreadBinding::new("supervisor-thread", "/srv").supervised(),
                                    WriteOptions::checked(authority.assert_current_fn()),
                                )
                                .await
                        }
                    })
                    .await
            }
        };
        assert!(supervised.await.unwrap());
        reset_unnotified(&host, &key, "gen-2").await;
        assert_eq!(
            thread_of_turn(identity(&key, "gen-2")).await,
            (
                Some("supervisor-thread".to_owned()),
                Some(GenerationChange::Reset)
            ),
            "a reset never locks a supervised session out"
        );

        // A cut applied by the store alone (no context-reset hook took part).
        let key = session(&host, "agent:main:direct:cut-alone", "gen-1").await;
        assert!(
            bind_in_turn(&harness, &identity(&key, "gen-1"), "before-cut")
                .await
                .unwrap()
        );
        let user = host
            .store()
            .append_transcript(&key, NewTranscriptEntry::new(TranscriptRole::User, "hi"))
            .await
            .unwrap();
        let status = host
            .store()
            .cut_transcript(
                &key,
                &tether_storage::Cut::Rewind { to: user.anchor },
                SessionId::new("gen-2").unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(status, CutStatus::Created);
        assert_eq!(
            thread_of_turn(identity(&key, "gen-2")).await,
            (None, Some(GenerationChange::Cut))
        );

        // A rotation is a transfer: the thread continues.
        let key = session(&host, "agent:main:direct:rotated", "gen-1").await;
        assert!(
            bind_in_turn(&harness, &identity(&key, "gen-1"), "compacted")
                .await
                .unwrap()
        );
        host.store()
            .rotate_generation(
                &key,
                &SessionId::new("gen-1").unwrap(),
                SessionId::new("gen-2").unwrap(),
            )
            .await
            .unwrap()
            .expect("rotated");
        assert_eq!(
            thread_of_turn(identity(&key, "gen-2")).await,
            (
                Some("compacted".to_owned()),
                Some(GenerationChange::Transfer)
            )
        );
    })
    .await;
}

/// A reset's notification that runs after the new generation's first turn (another process's
/// slow fan-out, or a host sending it again after a crash) ends only what the reset ended: the
/// predecessor's binding. The thread the turn bound after the COMMIT is kept. Before any turn
/// the same notification clears the predecessor's binding; an in-place reset of the generation
/// still clears its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_a_late_reset_notification_keeps_the_thread_bound_after_the_reset() {
    use tether_core::{ResetParams, ResetReason};

    on_both("host_reset_late", |host, _| async move {
        let harness = host.thread_harness("threads", NAMESPACE).await.unwrap();
        let bound = |id: BindingIdentity| {
            let store = harness.store().clone();
            async move { store.read(&id).await.unwrap().map(|b| b.thread_id) }
        };
        let late_notification = |key: SessionKey| {
            let (host, harness) = (host.clone(), harness.clone());
            async move {
                let entry = host.store().session(&key).await.unwrap().unwrap();
                let params = ResetParams::of_entry(&entry, ResetReason::New);
                assert_eq!(
                    params.replaced_generation().map(SessionId::as_str),
                    Some("gen-1")
                );
                AgentHarness::reset(&harness, params).await.unwrap();
            }
        };

        // The new generation's first turn ran before the notification.
        let key = session(&host, "agent:main:direct:late-reset", "gen-1").await;
        assert!(
            bind_in_turn(&harness, &identity(&key, "gen-1"), "before-reset")
                .await
                .unwrap()
        );
        reset_unnotified(&host, &key, "gen-2").await;
        assert!(
            bind_in_turn(&harness, &identity(&key, "gen-2"), "after-reset")
                .await
                .unwrap()
        );
        late_notification(key.clone()).await;
        assert_eq!(
            bound(identity(&key, "gen-2")).await.as_deref(),
            Some("after-reset"),
            "the late notification kept the new generation's thread"
        );
        // Sent again, it changes nothing more.
        late_notification(key.clone()).await;
        assert_eq!(
            bound(identity(&key, "gen-2")).await.as_deref(),
            Some("after-reset")
        );

        // In place, the generation's own binding is cleared.
        AgentHarness::reset(
            &harness,
            ResetParams::new(
                AgentId::new("main").unwrap(),
                SessionId::new("gen-2").unwrap(),
                Some(key.clone()),
                ResetReason::Reset,
            ),
        )
        .await
        .unwrap();
        assert_eq!(bound(identity(&key, "gen-2")).await, None);

        // No turn before the notification: it clears the predecessor's binding.
        let key = session(&host, "agent:main:direct:late-reset-idle", "gen-1").await;
        assert!(
            bind_in_turn(&harness, &identity(&key, "gen-1"), "before-reset")
                .await
                .unwrap()
        );
        reset_unnotified(&host, &key, "gen-2").await;
        late_notification(key.clone()).await;
        assert_eq!(bound(identity(&key, "gen-1")).await, None);
        let caller = BindingAuthority::caller(always_current());
        let resolved = harness
            .resolve(&identity(&key, "gen-2"), &caller)
            .await
            .unwrap();
        assert_eq!(resolved.binding, None, "the reset thread is not continued");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_turn_lease_never_binds_a_deleted_or_reset_generation() {
    on_both("host_turn_lease", |host, _| async move {
        let harness = Arc::new(host.thread_harness("threads", NAMESPACE).await.unwrap());
        host.registry()
            .register(harness.clone() as Arc<dyn AgentHarness>);
        let bound = |id: BindingIdentity| {
            let harness = harness.clone();
            async move {
                let binding = harness.store().read(&id).await.unwrap();
                binding.map(|b| b.thread_id)
            }
        };

        // A context reset: the old generation's late writer is refused, and the reset context
        // never comes back to the new generation.
        let key = session(&host, "agent:main:direct:reset", "gen-1").await;
        let (gen1, gen2) = (identity(&key, "gen-1"), identity(&key, "gen-2"));
        assert!(bind_in_turn(&harness, &gen1, "old-context").await.unwrap());
        let user = host
            .store()
            .append_transcript(&key, NewTranscriptEntry::new(TranscriptRole::User, "hi"))
            .await
            .unwrap();
        let cut = host
            .sessions()
            .rewind(&key, user.anchor, SessionId::new("gen-2").unwrap())
            .await
            .unwrap();
        assert_eq!(cut, CutStatus::Created);
        let late = bind_in_turn(&harness, &gen1, "old-context")
            .await
            .unwrap_err();
        assert!(
            matches!(late, Error::SupersededGeneration { .. }),
            "{late:?}"
        );
        assert_eq!(
            bound(gen1.clone()).await,
            None,
            "the late writer wrote nothing"
        );
        assert!(bind_in_turn(&harness, &gen2, "new-context").await.unwrap());
        assert_eq!(bound(gen2.clone()).await.as_deref(), Some("new-context"));

        // A deletion: a turn that starts after it is refused as a missing session.
        host.sessions()
            .delete_sessions(std::slice::from_ref(&key))
            .await
            .unwrap();
        let gone = bind_in_turn(&harness, &gen2, "after-delete")
            .await
            .unwrap_err();
        assert!(
            matches!(
                gone,
                Error::Host {
                    kind: HostErrorKind::SessionNotFound { .. }
                }
            ),
            "{gone:?}"
        );
        assert_eq!(bound(gen2).await, None);

        // A turn that read the session before the deletion and waited for its lease while the
        // deletion held it is refused once it gets the lease (or, when it read the host after
        // the commit, as a missing session): it never binds the deleted generation again.
        for bound_before in [true, false] {
            let key = session(
                &host,
                &format!("agent:main:direct:waiting-{bound_before}"),
                "gen-1",
            )
            .await;
            let waiting = identity(&key, "gen-1");
            if bound_before {
                assert!(bind_in_turn(&harness, &waiting, "first").await.unwrap());
            }
            let started = Arc::new(tokio::sync::Notify::new());
            let writer = {
                let (harness, waiting, started) =
                    (harness.clone(), waiting.clone(), started.clone());
                tokio::spawn(async move {
                    started.notified().await;
                    bind_in_turn(&harness, &waiting, "late").await
                })
            };
            let deleted = host
                .sessions()
                .delete_sessions_with(std::slice::from_ref(&key), move |_, _| {
                    let started = started.clone();
                    Box::pin(async move {
                        // The deletion holds the lease: let the writer read the session and queue.
                        started.notify_one();
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        Ok(())
                    })
                })
                .await
                .unwrap();
            assert_eq!(deleted, vec![key.clone()]);
            let refused = writer.await.unwrap().unwrap_err();
            assert!(
                matches!(
                    refused,
                    Error::SupersededGeneration { .. }
                        | Error::Host {
                            kind: HostErrorKind::SessionNotFound { .. }
                        }
                ),
                "{refused:?}"
            );
            assert_eq!(
                bound(waiting.clone()).await,
                None,
                "nothing bound for the deleted session"
            );
            assert_no_row_stays(&harness, &waiting).await;
        }
    })
    .await;
}

/// Asserts that `identity`'s binding row is gone or going: a turn refused after the deletion's
/// COMMIT got the lease on the absent key first, so its lease wrote a cleared row, and the release
/// gave that row the cleared TTL (`CLEARED_TTL`, 1 ms): it vanishes at once, though a read in
/// the same millisecond of the store's clock still sees it. A row that holds anything, or one
/// still there long after its TTL, is a row left behind.
async fn assert_no_row_stays(harness: &ThreadBindingHarness, identity: &BindingIdentity) {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while let Some(record) = harness.store().record(identity).await.unwrap() {
        assert!(
            record.binding().is_none() && record.task_import.is_none() && !record.is_retired(),
            "a row left behind: {record:?}"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "a cleared row outlived its TTL: {record:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `thread_bindings` and `thread_harness` for one namespace share one lifecycle instance: a
/// write through the host's bindings inside the harness's turn lease is the holder's write
/// (before, it was a second owner of the same process waiting behind that lease until
/// `LeaseTimeout`, naming this very process as the holder).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_thread_bindings_and_the_thread_harness_are_one_owner() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("host.db").display());
    let quick = LeaseConfig {
        wait_budget: Duration::from_secs(2),
        ..LeaseConfig::with_lease_duration(Duration::from_secs(30))
    };
    let host = Host::builder(url).lease_config(quick).open().await.unwrap();
    let harness = Arc::new(host.thread_harness("threads", NAMESPACE).await.unwrap());
    host.registry()
        .register(harness.clone() as Arc<dyn AgentHarness>);
    // Asked for after the harness, and again through a clone of the host.
    let bindings = host.thread_bindings(NAMESPACE).await.unwrap();
    let again = host.clone().thread_bindings(NAMESPACE).await.unwrap();
    let key = session(&host, "agent:main:direct:one-owner", "gen-1").await;
    let identity = BindingIdentity::session(
        AgentId::new("main").unwrap(),
        SessionId::new("gen-1").unwrap(),
        Some(key),
    );
    let caller = BindingAuthority::caller(always_current());
    let started = std::time::Instant::now();
    let written = harness
        .with_turn_lease(&identity, &caller, |_lease, authority| {
            let (bindings, identity) = (bindings.clone(), identity.clone());
            async move {
                let options = WriteOptions::checked(authority.assert_current_fn());
                bindings
                    .set(&identity, ThreadBinding::new("native-1", "/srv"), options)
                    .await
            }
        })
        .await;
    assert!(written.is_ok(), "{written:?}");
    assert!(
        started.elapsed() < quick.wait_budget,
        "waited {:?} behind its own lease",
        started.elapsed()
    );
    let read = again.read(&identity).await.unwrap().unwrap();
    assert_eq!(read.thread_id, "native-1");
    // The default holder names the machine when it has a name, never a bare process id there.
    let named = Host::open("sqlite::memory:").await.unwrap();
    let kernel_name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let usable = kernel_name
        .trim()
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if !kernel_name.trim().is_empty() && usable {
        assert!(
            named
                .holder()
                .starts_with(&format!("{}-", kernel_name.trim())),
            "{}",
            named.holder()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_lease_config_reaches_its_bindings_and_bounds_a_deletion_wait() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("host.db").display());
    let quick = LeaseConfig {
        wait_budget: Duration::from_millis(300),
        ..LeaseConfig::with_lease_duration(Duration::from_secs(30))
    };
    let open = |holder: &'static str| {
        let url = url.clone();
        async move {
            let host = Host::builder(url)
                .holder(holder)
                .lease_config(quick)
                .open()
                .await
                .unwrap();
            let harness = Arc::new(host.thread_harness("threads", NAMESPACE).await.unwrap());
            host.registry()
                .register(harness.clone() as Arc<dyn AgentHarness>);
            (host, harness)
        }
    };
    let (a, harness_a) = open("host-a").await;
    let (b, harness_b) = open("host-b").await;
    assert_eq!(a.lease_config(), &quick);
    assert_eq!(harness_a.store().lifecycle().lease_config(), &quick);

    // Host A drives the session; host B's deletion waits for the budget, then is busy.
    let key = session(&a, "agent:main:direct:busy", "gen-1").await;
    let identity = BindingIdentity::session(
        AgentId::new("main").unwrap(),
        SessionId::new("gen-1").unwrap(),
        Some(key.clone()),
    );
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let turn = {
        let (harness, identity) = (harness_a.clone(), identity.clone());
        tokio::spawn(async move {
            let caller = BindingAuthority::caller(always_current());
            harness
                .with_turn_lease(&identity, &caller, |_, _| async move {
                    held_tx.send(()).unwrap();
                    done_rx.await.unwrap();
                    Ok(())
                })
                .await
        })
    };
    held_rx.await.unwrap();
    let started = std::time::Instant::now();
    let err = b
        .sessions()
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseTimeout { .. }), "{err:?}");
    // The error names who holds the lease, so an operator knows which host to look at.
    assert!(err.to_string().contains("held by host-a"), "{err}");
    // And it names the host session, not only the binding key's hash.
    assert!(
        err.to_string()
            .contains("(host session agent:main:direct:busy)"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited {:?}, not the default 70 s",
        started.elapsed()
    );
    // Host B's turn of the same session times out the same way, naming the session too.
    let caller = BindingAuthority::caller(always_current());
    let err = harness_b
        .with_turn_lease(&identity, &caller, |_, _| async { Ok(()) })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseTimeout { .. }), "{err:?}");
    assert!(
        err.to_string().contains("held by host-a")
            && err
                .to_string()
                .contains("(host session agent:main:direct:busy)"),
        "{err}"
    );
    done_tx.send(()).unwrap();
    turn.await.unwrap().unwrap();
    assert!(a.store().session(&key).await.unwrap().is_some());

    // A timing that cannot renew in time is refused when the host opens.
    let never_renews = LeaseConfig {
        renew_interval: Duration::from_secs(30),
        ..quick
    };
    let err = Host::builder(url.clone())
        .lease_config(never_renews)
        .open()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_lifecycle_keeps_a_namespace_registered_with_its_own_settings() {
    type Record = serde_json::Map<String, serde_json::Value>;
    let host = Host::builder("sqlite::memory:")
        .namespace(
            NamespaceConfig::new(tether_core::Namespace::new("capped").unwrap())
                .with_max_entries(1),
        )
        .open()
        .await
        .unwrap();
    let policy: tether_harness_sdk::lifecycle::PrepareLease<Record> =
        Arc::new(|current: Option<&Record>, _| Some(current.cloned().unwrap_or_default()));
    let lifecycle = host
        .lifecycle(
            NamespaceConfig::new(tether_core::Namespace::new("capped").unwrap()),
            tether_core::JsonObjectCodec,
            policy,
        )
        .await
        .unwrap()
        .build()
        .unwrap();
    let write = |name: &'static str| {
        let lifecycle = lifecycle.clone();
        async move {
            let key =
                tether_core::BindingKey::conversation(&tether_core::BindingId::new(name).unwrap());
            lifecycle
                .transact(&key, Default::default(), |_, _| {
                    Ok(tether_harness_sdk::lifecycle::Applied::write(
                        Record::new(),
                        (),
                    ))
                })
                .await
        }
    };
    write("first").await.unwrap();
    // The builder's setting (one entry) stands: the lifecycle call did not re-register it.
    let refused = write("second").await.unwrap_err();
    assert!(
        matches!(&refused, Error::Store { .. }),
        "capacity refused the second row: {refused:?}"
    );
}

fn target(key: &SessionKey, generation: &str) -> SessionTarget {
    SessionTarget {
        agent_id: AgentId::new("main").unwrap(),
        session_key: Some(key.clone()),
        session_id: SessionId::new(generation).unwrap(),
    }
}

fn fallback(target: SessionTarget, fence: WriterFence, run: &str) -> FallbackAppend {
    FallbackAppend {
        idempotency_key: format!("{run}:settled-finalization-fallback"),
        target,
        message: AgentMessage::text(MessageRole::Assistant, "The tool run finished."),
        fence,
        cancellation: Cancellation::new(),
        assert_still_active: always_current(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_fallback_transcript_appends_once_under_the_writer_fence() {
    on_both("host_fallback", |host, _| async move {
        let transcript = host.fallback_transcript();
        let key = session(&host, "agent:main:direct:fallback", "gen-1").await;
        let entry = host.store().session(&key).await.unwrap().unwrap();

        // The run's target resolves to the session's current generation.
        let resolved = transcript.resolve_target(&target(&key, "gen-0")).await.unwrap();
        assert_eq!(resolved.session_id.as_str(), "gen-1");

        let fence = WriterFence {
            expected_lifecycle_revision: Some(entry.lifecycle_revision),
            expected_writer_run_id: None,
        };
        let first = transcript
            .append_fallback(fallback(resolved.clone(), fence.clone(), "run-1"))
            .await
            .unwrap();
        let FallbackAppendResult::Appended(first) = first else {
            panic!("{first:?}")
        };
        assert!(first.appended);
        // The same run again confirms its row.
        let again = transcript
            .append_fallback(fallback(resolved.clone(), fence.clone(), "run-1"))
            .await
            .unwrap();
        assert_eq!(
            again,
            FallbackAppendResult::Appended(tether_core::AppendOutcome {
                appended: false,
                anchor: first.anchor
            })
        );
        let rows = host.store().active_path(&key).await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].content, "The tool run finished.");

        // A fence the session no longer matches writes nothing.
        let stale = WriterFence {
            expected_lifecycle_revision: Some(LifecycleRevision::new(
                entry.lifecycle_revision.get() + 7,
            )),
            expected_writer_run_id: None,
        };
        let moved = transcript
            .append_fallback(fallback(resolved.clone(), stale, "run-2"))
            .await
            .unwrap();
        assert!(matches!(moved, FallbackAppendResult::SessionRebound { .. }), "{moved:?}");
        let other_generation = transcript
            .append_fallback(fallback(target(&key, "gen-9"), WriterFence::default(), "run-3"))
            .await
            .unwrap();
        assert!(matches!(
            other_generation,
            FallbackAppendResult::SessionRebound { .. }
        ));
        // A writer run id cannot be checked by the SQL store: refused, not written past.
        let by_run = WriterFence {
            expected_lifecycle_revision: None,
            expected_writer_run_id: Some("writer-1".into()),
        };
        let blocked = transcript
            .append_fallback(fallback(resolved.clone(), by_run, "run-4"))
            .await
            .unwrap();
        assert!(matches!(blocked, FallbackAppendResult::Blocked { .. }));
        // The run's authority ended: nothing written.
        let mut inactive = fallback(resolved.clone(), WriterFence::default(), "run-5");
        inactive.assert_still_active = Arc::new(|| Err(Error::revoked("the run was superseded")));
        let blocked = transcript.append_fallback(inactive).await.unwrap();
        assert!(matches!(blocked, FallbackAppendResult::Blocked { reason } if reason.contains("superseded")));
        // A session that is gone, or a run without a session key.
        let missing = transcript
            .append_fallback(fallback(
                target(&SessionKey::new("agent:main:direct:gone").unwrap(), "gen-1"),
                WriterFence::default(),
                "run-6",
            ))
            .await
            .unwrap();
        assert_eq!(missing, FallbackAppendResult::MissingActiveSession);
        let mut unkeyed = target(&key, "gen-1");
        unkeyed.session_key = None;
        let missing = transcript
            .append_fallback(fallback(unkeyed, WriterFence::default(), "run-7"))
            .await
            .unwrap();
        assert_eq!(missing, FallbackAppendResult::MissingActiveSession);
        assert_eq!(host.store().active_path(&key).await.unwrap().len(), 1);
        tokio::time::sleep(Duration::from_millis(1)).await;
    })
    .await;
}

/// Two compactions with no turn between them: the binding belongs to a generation before the
/// recorded predecessor, and whether its context continued up to the predecessor is unknown,
/// so no turn adopts or clears it. The turn's error says so and what frees the session; a reset
/// does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_two_compactions_without_a_turn_say_what_blocks_and_a_reset_frees_it() {
    use tether_core::ResetReason;

    on_both("host_two_compactions", |host, _| async move {
        let harness = host.thread_harness("threads", NAMESPACE).await.unwrap();
        host.registry()
            .register(Arc::new(harness.clone()) as Arc<dyn AgentHarness>);
        let key = bound_session(&host, &harness, "agent:main:direct:compacted-twice").await;
        rotate(&host, &key, "gen-1", "gen-2").await;
        rotate(&host, &key, "gen-2", "gen-3").await;
        let err = bind_in_turn(&harness, &identity(&key, "gen-3"), "new")
            .await
            .unwrap_err();
        assert!(matches!(err, Error::SupersededGeneration { .. }), "{err:?}");
        let text = err.to_string();
        for part in ["gen-1", "gen-2", "changed twice", "reset the session"] {
            assert!(text.contains(part), "{part}: {text}");
        }
        host.sessions()
            .reset(&key, SessionId::new("gen-4").unwrap(), ResetReason::New)
            .await
            .unwrap();
        assert!(
            bind_in_turn(&harness, &identity(&key, "gen-4"), "fresh")
                .await
                .unwrap()
        );
    })
    .await;
}

/// Two changes with no turn between them, the second a reset or a cut: the binding the first
/// generation left is owned by neither the current generation nor its recorded predecessor.
/// The reset or cut ended every earlier context, so the next turn (and the reset's own
/// notification) clears it and starts afresh, instead of failing every turn as superseded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_a_reset_after_a_compaction_without_a_turn_starts_afresh() {
    use tether_core::{GenerationChange, ResetReason};

    on_both("host_reset_two_changes", |host, _| async move {
        let harness = host.thread_harness("threads", NAMESPACE).await.unwrap();
        host.registry()
            .register(Arc::new(harness.clone()) as Arc<dyn AgentHarness>);
        let first_turn_after = |key: SessionKey, change: GenerationChange| {
            let harness = harness.clone();
            async move {
                let id = identity(&key, "gen-3");
                let caller = BindingAuthority::caller(always_current());
                let resolved = harness.resolve(&id, &caller).await.unwrap();
                assert_eq!(resolved.previous_change, Some(change));
                assert_eq!(resolved.binding, None, "the old thread is not continued");
                assert!(bind_in_turn(&harness, &id, "fresh").await.unwrap());
                assert_eq!(
                    harness
                        .store()
                        .read(&id)
                        .await
                        .unwrap()
                        .map(|b| b.thread_id)
                        .as_deref(),
                    Some("fresh")
                );
            }
        };

        // A compaction at the end of a turn, then `/new` (notified): the notification clears
        // the binding the compacted generation never took over.
        let key = bound_session(&host, &harness, "agent:main:direct:compacted-then-new").await;
        rotate(&host, &key, "gen-1", "gen-2").await;
        host.sessions()
            .reset(&key, SessionId::new("gen-3").unwrap(), ResetReason::New)
            .await
            .unwrap();
        assert_eq!(
            harness
                .store()
                .record(&identity(&key, "gen-3"))
                .await
                .unwrap()
                .and_then(|r| r.binding().cloned()),
            None,
            "the notification cleared it"
        );
        first_turn_after(key, GenerationChange::Reset).await;

        // The same with the notification lost: the turn clears it.
        let key = bound_session(&host, &harness, "agent:main:direct:compacted-then-lost-new").await;
        rotate(&host, &key, "gen-1", "gen-2").await;
        reset_unnotified(&host, &key, "gen-3").await;
        first_turn_after(key, GenerationChange::Reset).await;

        // Two resets, both notifications lost.
        let key = bound_session(&host, &harness, "agent:main:direct:two-lost-resets").await;
        reset_unnotified(&host, &key, "gen-2").await;
        reset_unnotified(&host, &key, "gen-3").await;
        first_turn_after(key, GenerationChange::Reset).await;

        // A compaction, then a cut applied by the store alone.
        let key = bound_session(&host, &harness, "agent:main:direct:compacted-then-cut").await;
        let user = host
            .store()
            .append_transcript(&key, NewTranscriptEntry::new(TranscriptRole::User, "hi"))
            .await
            .unwrap();
        rotate(&host, &key, "gen-1", "gen-2").await;
        let status = host
            .store()
            .cut_transcript(
                &key,
                &tether_storage::Cut::Rewind { to: user.anchor },
                SessionId::new("gen-3").unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(status, CutStatus::Created);
        first_turn_after(key, GenerationChange::Cut).await;
    })
    .await;
}
