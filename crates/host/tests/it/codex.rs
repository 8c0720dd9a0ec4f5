//! The Codex app-server harness on a host (`Host::codex_harness`): a real `codex app-server`
//! (skipped without a Codex binary unless `TETHER_REQUIRE_CODEX=1`) against the scripted
//! loopback model, on SQLite and PostgreSQL.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tether_codex::scripted::{ModelServer, Step};
use tether_codex::{CodexAppServer, CodexConfig, ThreadSettings, TurnRequest};
use tether_core::{
    AgentId, AttemptParams, BindingStore as _, HarnessId, ResetReason, RunId, SessionId,
    SessionKey, SessionTarget,
};
use tether_host::{Host, WorkTracker as _};
use tether_storage::{NewHostSession, TranscriptRole};

use crate::on_both;

/// The Codex binary, or `None` (the test is skipped) unless `TETHER_REQUIRE_CODEX=1`.
fn codex_binary() -> Option<PathBuf> {
    tether_codex::scripted::codex_binary_for_tests(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
    )
}

/// An app-server supervisor for `binary` over a `CODEX_HOME` in `dir`, asking `model`.
fn codex_server(binary: &Path, dir: &Path, model: &ModelServer) -> Arc<CodexAppServer> {
    let home = dir.join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let config = CodexConfig::new(binary, home)
        .with_responses_provider(&model.base_url(), "TETHER_TEST_MODEL_KEY")
        .with_env("TETHER_TEST_MODEL_KEY", "dummy-test-key")
        .with_config("model_providers.tether.request_max_retries=0")
        .with_config("model_providers.tether.stream_max_retries=0")
        .with_request_timeout(Duration::from_secs(30));
    Arc::new(CodexAppServer::new(config))
}

/// The attempt `run` of the host session `key` in its generation `gen-1`.
fn attempt(key: &SessionKey, run: &str, prompt: &str) -> AttemptParams {
    AttemptParams {
        run_id: RunId::new(run).unwrap(),
        session: SessionTarget {
            agent_id: AgentId::new("main").unwrap(),
            session_key: Some(key.clone()),
            session_id: SessionId::new("gen-1").unwrap(),
        },
        prompt: prompt.to_owned(),
        timeout: Some(Duration::from_secs(120)),
        source_reply_delivery_mode: None,
    }
}

/// A Codex host session `key` in generation `gen-1`.
async fn codex_session(host: &Host, key: &SessionKey) {
    host.store()
        .create_session(NewHostSession {
            session_key: key.clone(),
            agent_id: AgentId::new("main").unwrap(),
            session_id: SessionId::new("gen-1").unwrap(),
            agent_harness_id: Some(HarnessId::new(tether_codex::HARNESS_ID).unwrap()),
        })
        .await
        .unwrap();
}

/// A turn through the harness `Host::codex_harness` wires: the thread is bound in the host's
/// store under its holder, the items are mirrored into the host's transcript, and a deletion
/// through the host's registry removes the binding and the Codex thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_codex_harness_is_wired_to_the_host() {
    let Some(binary) = codex_binary() else {
        return;
    };
    on_both("host_codex", |host: Host, postgres| {
        let binary = binary.clone();
        async move {
            let model = ModelServer::start(vec![Step::Reply("Hello from Codex.")])
                .await
                .unwrap();
            let dir = tempfile::tempdir().unwrap();
            let server = codex_server(&binary, dir.path(), &model);
            let harness = host
                .codex_harness(server.clone())
                .settings(ThreadSettings::new(dir.path().display().to_string()))
                .build()
                .await
                .unwrap();
            host.registry().register(Arc::new(harness.clone()));

            let key = SessionKey::new(format!("agent:main:direct:codex-{postgres}")).unwrap();
            codex_session(&host, &key).await;
            let params = attempt(&key, "run-1", "say hello");
            let outcome = harness
                .run_turn(TurnRequest::new(params.clone()))
                .await
                .unwrap();
            assert_eq!(outcome.reply(), Some("Hello from Codex."));

            // Mirrored into the host's own transcript.
            let path = host.store().active_path(&key).await.unwrap();
            let roles: Vec<_> = path.iter().map(|e| e.role).collect();
            assert_eq!(roles, vec![TranscriptRole::User, TranscriptRole::Assistant]);
            assert!(path.iter().all(|e| {
                e.idempotency_key
                    .as_deref()
                    .is_some_and(|k| k.starts_with("codex:"))
            }));
            // Bound in the host's store, the turn's lease labelled with the host's holder.
            assert_eq!(
                harness.bound_thread(&params).await.unwrap(),
                Some(outcome.thread_id.clone())
            );
            let (events, _) = host.store().lease_events_page(None, 100).await.unwrap();
            let codex_events: Vec<_> = events
                .iter()
                .filter(|e| e.namespace.as_str() == tether_codex::NAMESPACE)
                .collect();
            assert!(
                codex_events
                    .iter()
                    .any(|e| e.holder.as_deref() == Some(host.holder())),
                "{codex_events:?}"
            );
            assert!(
                codex_events
                    .iter()
                    .filter_map(|e| e.holder.as_deref())
                    .all(|h| h == host.holder()),
                "{codex_events:?}"
            );

            // The host's deletion reaches the registered harness.
            host.sessions()
                .delete_sessions(std::slice::from_ref(&key))
                .await
                .unwrap();
            assert_eq!(harness.bound_thread(&params).await.unwrap(), None);
            assert!(harness.pending_native_cleanup().await.unwrap().is_empty());
            server.shutdown().await;
        }
    })
    .await;
}

/// The harness `Host::codex_harness` builds admits each turn in the host's record of runs in
/// flight, with no admission by the caller: while a turn runs, a reset of its session is
/// refused with `CompetingWork`, and after it the reset goes through; a compaction is admitted
/// while it runs too, also after its caller stopped waiting. A turn whose caller
/// dropped `run_turn`'s future stays admitted until its task ended (its lease released), and
/// is then no longer admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_codex_harness_admits_each_turn_while_it_runs() {
    use tether_core::Error;

    let Some(binary) = codex_binary() else {
        return;
    };
    on_both("host_codex_admission", |host: Host, postgres| {
        let binary = binary.clone();
        async move {
            let model = ModelServer::start(vec![
                Step::Stall(Duration::from_secs(3), "slow answer"),
                Step::Stall(Duration::from_secs(3), "a slow summary"),
                Step::Stall(Duration::from_secs(3), "another slow summary"),
                Step::Stall(Duration::from_secs(60), "never delivered"),
            ])
            .await
            .unwrap();
            let dir = tempfile::tempdir().unwrap();
            let server = codex_server(&binary, dir.path(), &model);
            let harness = host
                .codex_harness(server.clone())
                .settings(ThreadSettings::new(dir.path().display().to_string()))
                .build()
                .await
                .unwrap();
            host.registry().register(Arc::new(harness.clone()));
            let key = SessionKey::new(format!("agent:main:direct:admitted-{postgres}")).unwrap();
            codex_session(&host, &key).await;
            let generation = SessionId::new("gen-1").unwrap();
            let admitted = || host.runs().has_competing_work(&key, &generation);
            let next = SessionId::new("gen-2").unwrap();
            // Waits (30 s at most) until the session has no run in flight.
            let until_idle = |what: &'static str| async move {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                while admitted() {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "{what} is still admitted"
                    );
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };

            // A turn in flight: admitted, and the session's reset is refused.
            let running = tokio::spawn({
                let harness = harness.clone();
                let request = TurnRequest::new(attempt(&key, "run-1", "a slow question"));
                async move { harness.run_turn(request).await }
            });
            assert!(model.wait_for_requests(1, Duration::from_secs(30)).await);
            assert!(admitted(), "the running turn is admitted");
            let refused = host
                .sessions()
                .reset(&key, next.clone(), ResetReason::New)
                .await;
            assert!(
                matches!(refused, Err(Error::CompetingWork { .. })),
                "{refused:?}"
            );
            let outcome = running.await.unwrap().unwrap();
            assert_eq!(outcome.reply(), Some("slow answer"));
            assert!(!admitted(), "the finished turn is no longer admitted");

            // A compaction runs as a turn: admitted while it runs.
            let compacting = tokio::spawn({
                let harness = harness.clone();
                let params = attempt(&key, "run-c", "");
                async move { harness.compact(&params).await }
            });
            assert!(model.wait_for_requests(2, Duration::from_secs(30)).await);
            assert!(admitted(), "the running compaction is admitted");
            assert_eq!(compacting.await.unwrap().unwrap(), outcome.thread_id);
            assert!(!admitted(), "the finished compaction is no longer admitted");

            // A compaction whose caller stops waiting runs on, admitted, until Codex ends it.
            {
                let params = attempt(&key, "run-c2", "");
                let compaction = harness.compact(&params);
                tokio::pin!(compaction);
                tokio::select! {
                    result = &mut compaction => panic!("the stalled compaction ended: {result:?}"),
                    arrived = model.wait_for_requests(3, Duration::from_secs(30)) => assert!(arrived),
                }
            }
            assert!(admitted(), "the dropped compaction's task still runs");
            until_idle("the dropped compaction").await;

            // A caller that stops waiting: the turn's task interrupts the turn and stays
            // admitted until it ended.
            {
                let turn = harness.run_turn(TurnRequest::new(attempt(&key, "run-2", "another")));
                tokio::pin!(turn);
                tokio::select! {
                    result = &mut turn => panic!("the stalled turn ended: {result:?}"),
                    arrived = model.wait_for_requests(4, Duration::from_secs(30)) => assert!(arrived),
                }
            }
            assert!(admitted(), "the dropped turn's task still runs");
            until_idle("the dropped turn").await;
            let identity = tether_harness_sdk::backend::BindingIdentity::session(
                AgentId::new("main").unwrap(),
                generation.clone(),
                Some(key.clone()),
            );
            let ns = tether_core::Namespace::new(tether_codex::NAMESPACE).unwrap();
            let row = host
                .store()
                .lookup(&ns, identity.key())
                .await
                .unwrap()
                .expect("the session's binding row");
            assert!(
                row.live_lease(host.clock().now()).is_none(),
                "admitted until its task released the lease: {row:?}"
            );

            // Idle again: the reset goes through.
            let reset = host.sessions().reset(&key, next, ResetReason::New).await;
            assert!(reset.is_ok(), "{reset:?}");
            server.shutdown().await;
        }
    })
    .await;
}

/// The Codex harness keeps its bindings in the host's one store of the Codex namespace: a
/// write through `host.thread_bindings(tether_codex::NAMESPACE)` inside a lease the harness's
/// store holds is the holder's own write (before, the harness built a second store, a second
/// lease owner, and the write waited behind the lease until `LeaseTimeout`). A store of
/// another namespace is refused. No Codex process is started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_codex_harness_shares_the_hosts_binding_store() {
    use tether_core::{Error, LeaseConfig};
    use tether_harness_sdk::backend::{BindingIdentity, ThreadBinding, WriteOptions};

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("host.db").display());
    let quick = LeaseConfig {
        wait_budget: Duration::from_secs(2),
        ..LeaseConfig::with_lease_duration(Duration::from_secs(30))
    };
    let host = Host::builder(url).lease_config(quick).open().await.unwrap();
    let server = Arc::new(CodexAppServer::new(CodexConfig::new(
        dir.path().join("no-codex"),
        dir.path().join("codex-home"),
    )));
    let harness = host.codex_harness(server.clone()).build().await.unwrap();
    let bindings = host.thread_bindings(tether_codex::NAMESPACE).await.unwrap();
    let identity = BindingIdentity::session(
        AgentId::new("main").unwrap(),
        SessionId::new("gen-1").unwrap(),
        Some(SessionKey::new("agent:main:direct:codex-one-owner").unwrap()),
    );
    let started = std::time::Instant::now();
    let written = harness
        .bindings()
        .with_lease(&identity, false, None, |_lease| {
            let (bindings, identity) = (bindings.clone(), identity.clone());
            async move {
                bindings
                    .set(
                        &identity,
                        ThreadBinding::new("codex-thread", "/srv"),
                        WriteOptions::default(),
                    )
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
    assert_eq!(
        harness
            .bindings()
            .read(&identity)
            .await
            .unwrap()
            .map(|b| b.thread_id)
            .as_deref(),
        Some("codex-thread")
    );

    let other = host.thread_bindings("not-codex").await.unwrap();
    let refused = host
        .codex_harness(server)
        .bindings(other)
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            tether_codex::CodexError::Lifecycle(Error::InvalidArgument { .. })
        ),
        "{refused:?}"
    );
}
