//! The host facade and the SQL fallback transcript, on SQLite and (when a server answers)
//! PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use tether_core::{
    AgentHarness, AgentId, AgentMessage, BindingStore, Cancellation, Error, HarnessId,
    LifecycleRevision, MessageRole, NamespaceConfig, SessionId, SessionKey, SessionTarget,
    always_current,
};
use tether_finalizer::{FallbackAppend, FallbackAppendResult, FallbackTranscript, WriterFence};
use tether_harness_sdk::backend::{BindingIdentity, ThreadBinding, WriteOptions};
use tether_host::Host;
use tether_storage::NewHostSession;
use tether_storage::testing::PgTestDatabase;

const NAMESPACE: &str = "host-threads";

/// Runs `check` on a SQLite file host and, when a server answers, a PostgreSQL host.
async fn on_both<F, Fut>(label: &str, check: F)
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
