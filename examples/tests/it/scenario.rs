//! The example harness and the demo scenario, in process on in-memory SQLite.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tether_core::{AgentId, Namespace, SessionId, SessionKey};
use tether_example_harness::Finalization;
use tether_example_harness::demo::{self, SESSIONS, STEPS};
use tether_example_harness::harness::{FALLBACK_TEXT, NAMESPACE};
use tether_example_harness::{ExampleHarness, SimulatedRuntime, ToolOutcome};
use tether_storage::{SessionFilter, Store, StoreAdmin as _, TranscriptRole, session_binding_keys};

#[tokio::test]
async fn turns_hold_the_lease_reuse_the_thread_and_mirror_the_transcript() {
    let store = Store::open("sqlite::memory:").await.unwrap();
    let runtime = Arc::new(SimulatedRuntime::new());
    let harness = ExampleHarness::new(store.clone(), runtime.clone(), "w1")
        .await
        .unwrap();
    let key = SessionKey::new("agent:main:x").unwrap();
    let entry = harness
        .start_session(
            &key,
            &AgentId::new("main").unwrap(),
            &SessionId::new("g1").unwrap(),
        )
        .await
        .unwrap();
    let first = harness.run_turn(&key, 1, "hello").await.unwrap();
    assert!(first.started_thread);
    assert!(first.last_tool_error.is_none(), "no tool ran");
    assert!(
        first.user_turn_announced,
        "a fresh append announces the turn"
    );
    assert_eq!(
        first.sender_is_owner,
        Some(true),
        "the host's owner flag, not the hook's"
    );
    let second = harness.run_turn(&key, 2, "run make fail").await.unwrap();
    assert!(!second.started_thread, "the bound native thread is resumed");
    assert_eq!(second.thread_id, first.thread_id);
    assert_eq!(second.tool.as_ref().unwrap().outcome, ToolOutcome::Failed);
    // The failed call is reported through the terminal-outcome accumulator.
    let error = second
        .last_tool_error
        .clone()
        .expect("an unresolved failure");
    assert_eq!(error.tool_name, "shell");
    assert!(
        error
            .error
            .as_deref()
            .unwrap()
            .contains("exited with status 1")
    );

    assert!(
        second.lease_epoch > first.lease_epoch,
        "each turn holds a fresh lease"
    );
    assert_eq!(runtime.history_len(&first.thread_id), Some(2));
    let path = store.active_path(&key).await.unwrap();
    let roles: Vec<_> = path.iter().map(|e| e.role).collect();
    assert_eq!(
        roles,
        [
            TranscriptRole::User,
            TranscriptRole::Assistant,
            TranscriptRole::User,
            TranscriptRole::Tool,
            TranscriptRole::Assistant,
            TranscriptRole::System
        ]
    );
    // The user entries carry the restored message's metadata.
    let meta = path[2].metadata.as_ref().expect("user-turn metadata");
    assert_eq!(meta["__openclaw"]["senderIsOwner"], serde_json::json!(true));
    assert!(
        meta["__openclaw"].get("steerTargetRunId").is_none(),
        "the hook's forged steer target is dropped"
    );
    assert_eq!(meta["provenance"]["kind"], "external_user");
    assert!(path[3].content.contains("failed"));
    assert!(path[4].content.starts_with("Done: run make fail"));
    assert_eq!(path[5].content, "finalization: succeeded");
    // Replaying a turn does not duplicate its transcript entries, nor announce it again.
    let replay = harness.run_turn(&key, 2, "run make fail").await.unwrap();
    assert!(!replay.user_turn_announced);
    assert_eq!(store.active_path(&key).await.unwrap().len(), 6);
    // A refused finalization result falls back to the host answer, and says why.
    let garbled = harness.run_turn(&key, 3, "run ls --garbled").await.unwrap();
    assert!(matches!(
        garbled.finalization,
        Some(Finalization::FellBack { .. })
    ));
    assert_eq!(garbled.reply, FALLBACK_TEXT);
    let path = store.active_path(&key).await.unwrap();
    // The orchestration persisted the host fallback under the run's key, then the record.
    let fallback = &path[path.len() - 2];
    assert_eq!(fallback.role, TranscriptRole::Assistant);
    assert_eq!(fallback.content, FALLBACK_TEXT);
    assert!(
        fallback
            .idempotency_key
            .as_deref()
            .unwrap()
            .ends_with(":settled-finalization-fallback")
    );
    let record = &path[path.len() - 1].content;
    assert!(
        record.starts_with("finalization: fell back") && record.contains("tools"),
        "{record}"
    );
    // The lease was released after the turn; the binding row stays.
    let rows = store.session_bindings(&entry).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].live_lease(store.clock().now()).is_none());
    // A turn whose tool succeeded reports no failure.
    let fine = harness.run_turn(&key, 9, "run make").await.unwrap();
    assert_eq!(fine.tool.unwrap().outcome, ToolOutcome::Succeeded);
    assert!(fine.last_tool_error.is_none());
}

#[tokio::test]
async fn deletion_and_context_reset_go_through_the_host_transaction() {
    let store = Store::open("sqlite::memory:").await.unwrap();
    let runtime = Arc::new(SimulatedRuntime::new());
    let harness = ExampleHarness::new(store.clone(), runtime.clone(), "w1")
        .await
        .unwrap();
    let key = SessionKey::new("agent:main:y").unwrap();
    let agent = AgentId::new("main").unwrap();
    harness
        .start_session(&key, &agent, &SessionId::new("g1").unwrap())
        .await
        .unwrap();
    let turn = harness.run_turn(&key, 1, "hello").await.unwrap();
    harness
        .reset_context(&key, SessionId::new("g2").unwrap())
        .await
        .unwrap();
    let entry = store.session(&key).await.unwrap().unwrap();
    assert_eq!(entry.session_id.as_str(), "g2");
    assert_eq!(entry.previous_session_id.unwrap().as_str(), "g1");
    let after = harness.run_turn(&key, 2, "again").await.unwrap();
    assert_ne!(
        after.thread_id, turn.thread_id,
        "the reset dropped the native binding"
    );

    let entry = store.session(&key).await.unwrap().unwrap();
    harness
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap();
    assert!(store.session(&key).await.unwrap().is_none());
    assert!(
        !runtime.has_thread(&after.thread_id),
        "native thread closed"
    );
    let ns = Namespace::new(NAMESPACE).unwrap();
    for k in session_binding_keys(&entry) {
        let row = store.binding_record(&ns, &k).await.unwrap();
        assert!(
            row.is_none_or(|r| r.live_lease(store.clock().now()).is_none()),
            "no live binding lease left behind"
        );
    }
}

#[tokio::test]
async fn the_demo_populates_every_admin_view() {
    let store = Store::open("sqlite::memory:").await.unwrap();
    let steps = AtomicU64::new(0);
    let summary = demo::populate(store.clone(), &|_| {
        steps.fetch_add(1, Ordering::SeqCst);
    })
    .await
    .unwrap();
    assert_eq!(steps.load(Ordering::SeqCst), STEPS);
    assert_eq!(summary.sessions, SESSIONS.len());
    assert_eq!(summary.finalizations, (3, 2), "ops tool turns fall back");
    let page = store
        .list_sessions(&SessionFilter {
            limit: 50,
            ..SessionFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(page.sessions.len(), SESSIONS.len() - 1, "one was deleted");
    let leased = store
        .list_sessions(&SessionFilter {
            limit: 50,
            has_lease: Some(true),
            ..SessionFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(leased.sessions.len(), 1);
    assert_eq!(leased.sessions[0].session_key.as_str(), SESSIONS[2].0);
    assert_eq!(store.quarantined_keys(10).await.unwrap().len(), 1);
    let bob = store
        .session(&SessionKey::new(SESSIONS[1].0).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(bob.previous_session_id.is_some());
    assert!(!store.recent_lease_events(None, 5).await.unwrap().is_empty());
}
