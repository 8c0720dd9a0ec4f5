//! The Codex app-server harness on a host (`Host::codex_harness`): a real `codex app-server`
//! (skipped without a Codex binary unless `TETHER_REQUIRE_CODEX=1`) against the scripted
//! loopback model, on SQLite and PostgreSQL.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tether_codex::scripted::{ModelServer, Step};
use tether_codex::{CodexAppServer, CodexConfig, ThreadSettings, TurnRequest};
use tether_core::{AgentId, AttemptParams, HarnessId, RunId, SessionId, SessionKey, SessionTarget};
use tether_host::Host;
use tether_storage::{NewHostSession, TranscriptRole};

use crate::on_both;

/// The cached Codex binary; `None` (with a note) when absent and not required.
#[allow(clippy::print_stderr)]
fn codex_binary() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    match tether_codex::locate_codex_binary(Some(&root)) {
        Some(path) => Some(path),
        None if std::env::var("TETHER_REQUIRE_CODEX").as_deref() == Ok("1") => {
            panic!("TETHER_REQUIRE_CODEX=1 but no codex binary: run `cargo xtask codex-install`")
        }
        None => {
            eprintln!("skipped: no codex binary (run `cargo xtask codex-install`)");
            None
        }
    }
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
            let config = CodexConfig::new(&binary, dir.path().join("codex-home"))
                .with_responses_provider(&model.base_url(), "TETHER_TEST_MODEL_KEY")
                .with_env("TETHER_TEST_MODEL_KEY", "dummy-test-key")
                .with_config("model_providers.tether.request_max_retries=0")
                .with_config("model_providers.tether.stream_max_retries=0")
                .with_request_timeout(Duration::from_secs(30));
            std::fs::create_dir_all(dir.path().join("codex-home")).unwrap();
            let server = Arc::new(CodexAppServer::new(config));
            let harness = host
                .codex_harness(server.clone())
                .settings(ThreadSettings::new(dir.path().display().to_string()))
                .build()
                .await
                .unwrap();
            host.registry().register(Arc::new(harness.clone()));

            let key = SessionKey::new(format!("agent:main:direct:codex-{postgres}")).unwrap();
            host.store()
                .create_session(NewHostSession {
                    session_key: key.clone(),
                    agent_id: AgentId::new("main").unwrap(),
                    session_id: SessionId::new("gen-1").unwrap(),
                    agent_harness_id: Some(HarnessId::new(tether_codex::HARNESS_ID).unwrap()),
                })
                .await
                .unwrap();
            let params = AttemptParams {
                run_id: RunId::new("run-1").unwrap(),
                session: SessionTarget {
                    agent_id: AgentId::new("main").unwrap(),
                    session_key: Some(key.clone()),
                    session_id: SessionId::new("gen-1").unwrap(),
                },
                prompt: "say hello".to_owned(),
                timeout: Some(Duration::from_secs(120)),
                source_reply_delivery_mode: None,
            };
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
