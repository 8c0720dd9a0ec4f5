//! Staged transactions over the memory store (deletion commits).

use std::sync::Arc;

use tether_core::{
    BindingStore, FakeClock, Intent, Namespace, NamespaceConfig, RowTransaction, admit_all,
};
use tether_storage::MemoryStore;

use crate::support::{START, key, text, value};

async fn store() -> (MemoryStore, Namespace) {
    let store = MemoryStore::new(Arc::new(FakeClock::new(START)));
    let ns = Namespace::new("tx").unwrap();
    store
        .register_namespace(NamespaceConfig::new(ns.clone()).with_max_entries(3))
        .await
        .unwrap();
    (store, ns)
}

#[tokio::test]
async fn staged_writes_are_invisible_until_commit() {
    let (store, ns) = store().await;
    store
        .register_if_absent(&ns, &key("a"), value("a"), None)
        .await
        .unwrap();
    let tx = store.begin();
    let removed = tx.delete_if(&ns, &key("a"), &|_| true).await.unwrap();
    assert_eq!(text(&removed.unwrap()), r#"{"value":"a"}"#);
    assert!(
        tx.lookup(&ns, &key("a")).await.unwrap().is_none(),
        "the transaction sees its delete"
    );
    assert!(
        tx.register_if_absent(&ns, &key("b"), value("b"), None)
            .await
            .unwrap()
    );
    assert!(
        !tx.register_if_absent(&ns, &key("b"), value("b2"), None)
            .await
            .unwrap()
    );
    assert_eq!(tx.staged_writes(), 2);
    assert!(
        store.lookup(&ns, &key("a")).await.unwrap().is_some(),
        "others still see the row"
    );
    assert!(store.lookup(&ns, &key("b")).await.unwrap().is_none());
    tx.commit().unwrap();
    assert!(store.lookup(&ns, &key("a")).await.unwrap().is_none());
    assert_eq!(
        text(&store.lookup(&ns, &key("b")).await.unwrap().unwrap()),
        r#"{"value":"b"}"#
    );
}

#[tokio::test]
async fn rollback_discards_everything() {
    let (store, ns) = store().await;
    store
        .register_if_absent(&ns, &key("a"), value("a"), None)
        .await
        .unwrap();
    let tx = store.begin();
    tx.delete_if(&ns, &key("a"), &|_| true).await.unwrap();
    tx.rollback();
    assert!(store.lookup(&ns, &key("a")).await.unwrap().is_some());
}

#[tokio::test]
async fn a_row_changed_after_the_transaction_read_it_aborts_the_commit() {
    let (store, ns) = store().await;
    store
        .register_if_absent(&ns, &key("a"), value("a"), None)
        .await
        .unwrap();
    store
        .register_if_absent(&ns, &key("c"), value("c"), None)
        .await
        .unwrap();
    let tx = store.begin();
    tx.delete_if(&ns, &key("c"), &|_| true).await.unwrap();
    tx.delete_if(&ns, &key("a"), &|_| true).await.unwrap();
    let seen = store.observe(&ns, &key("a")).await.unwrap();
    store
        .compare_and_apply(
            &ns,
            &key("a"),
            &seen.comparison,
            Intent::Set {
                row: value("successor"),
                ttl: None,
            },
            &admit_all,
        )
        .await
        .unwrap();
    let err = tx.commit().unwrap_err();
    assert!(err.to_string().contains("nothing was committed"), "{err}");
    assert_eq!(
        text(&store.lookup(&ns, &key("a")).await.unwrap().unwrap()),
        r#"{"value":"successor"}"#
    );
    assert!(
        store.lookup(&ns, &key("c")).await.unwrap().is_some(),
        "no partial commit"
    );
}

/// Host session entries: tri-state reads and generation rotation.
#[tokio::test]
async fn host_sessions_read_tri_state_and_rotate() {
    use tether_core::{
        AgentId, HostSessionEntry, HostSessionRead, HostSessionStore, LifecycleRevision, SessionId,
        SessionKey,
    };
    let (store, _) = store().await;
    let key = SessionKey::new("agent:main:direct:peer").unwrap();
    assert!(matches!(
        store.read_session(&key).await,
        HostSessionRead::Missing
    ));
    store.put_host_session(HostSessionEntry::new(
        key.clone(),
        AgentId::new("main").unwrap(),
        SessionId::new("s-1").unwrap(),
        START,
    ));
    let entry = store.read_session(&key).await.entry().cloned().unwrap();
    assert_eq!(entry.session_id.as_str(), "s-1");
    let rotated = store
        .rotate_host_session(&key, SessionId::new("s-2").unwrap())
        .unwrap();
    assert_eq!(rotated.session_id.as_str(), "s-2");
    assert_eq!(
        rotated.previous_session_id.as_ref().unwrap().as_str(),
        "s-1"
    );
    assert_eq!(
        rotated.lifecycle_revision,
        LifecycleRevision::INITIAL.next()
    );
    store.fail_host_session_reads(Some(tether_core::Error::other("disk gone")));
    assert!(matches!(
        store.read_session(&key).await,
        HostSessionRead::Failed(_)
    ));
    store.fail_host_session_reads(None);
    assert!(store.remove_host_session(&key).is_some());
    assert!(matches!(
        store.read_session(&key).await,
        HostSessionRead::Missing
    ));
}

/// The memory store's transcripts keep what the SQL store keeps: an entry's metadata round
/// trips, a fork copies it, and an idempotency-key hit appends nothing.
#[test]
fn memory_transcript_metadata_round_trips_and_forks() {
    use serde_json::json;
    use tether_storage::{
        CutStatus, HostBackend as _, NewHostSession, NewTranscriptEntry, TranscriptRole,
    };

    let store = tether_storage::MemoryStore::default();
    let key = tether_core::SessionKey::new("agent:main:memory-metadata").unwrap();
    let new = |key: &tether_core::SessionKey, id: &str| NewHostSession {
        session_key: key.clone(),
        agent_id: tether_core::AgentId::new("main").unwrap(),
        session_id: tether_core::SessionId::new(id).unwrap(),
        agent_harness_id: None,
    };
    assert!(store.create_session(new(&key, "s-1")));
    assert!(!store.create_session(new(&key, "s-1")), "the key exists");
    let metadata = json!({"__openclaw": {"senderIsOwner": true, "steerTargetRunId": "run-7"}})
        .as_object()
        .unwrap()
        .clone();
    let first = store
        .append_transcript(
            &key,
            NewTranscriptEntry::new(TranscriptRole::User, "hi")
                .with_idempotency_key("turn-1:user")
                .with_metadata(metadata.clone()),
        )
        .unwrap();
    assert!(first.appended);
    let again = store
        .append_transcript(
            &key,
            NewTranscriptEntry::new(TranscriptRole::User, "hi").with_idempotency_key("turn-1:user"),
        )
        .unwrap();
    assert_eq!((again.appended, again.anchor), (false, first.anchor));
    store
        .append_transcript(
            &key,
            NewTranscriptEntry::new(TranscriptRole::Assistant, "hello"),
        )
        .unwrap();
    let second_user = store
        .append_transcript(&key, NewTranscriptEntry::new(TranscriptRole::User, "more"))
        .unwrap();
    let path = store.active_path(&key);
    assert_eq!(path.len(), 3);
    assert_eq!(path[0].metadata.as_ref(), Some(&metadata));
    assert_eq!(path[1].metadata, None);

    let fork = tether_core::SessionKey::new("agent:main:memory-metadata-fork").unwrap();
    let status = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(store.fork_host_session(&key, &second_user.anchor, new(&fork, "f-1")))
        .unwrap();
    assert_eq!(status, CutStatus::Created);
    let copied = store.active_path(&fork);
    assert_eq!(copied.len(), 2, "the path before the fork point");
    assert_eq!(copied[0].metadata.as_ref(), Some(&metadata));
}

/// A reset on the memory store: the session moves to its next generation, the transcript and
/// its active leaf kept; host writes that fail change nothing.
#[tokio::test]
async fn a_reset_on_the_memory_store_rotates_the_session_or_changes_nothing() {
    use tether_core::{Error, ResetReason, SessionId, SessionKey};
    use tether_host::{ActiveRuns, HostSessions};
    use tether_storage::{NewHostSession, NewTranscriptEntry, TranscriptRole};

    let store = MemoryStore::default();
    let key = SessionKey::new("agent:main:memory-reset").unwrap();
    assert!(store.create_session(NewHostSession {
        session_key: key.clone(),
        agent_id: tether_core::AgentId::new("main").unwrap(),
        session_id: SessionId::new("s-1").unwrap(),
        agent_harness_id: None,
    }));
    let leaf = store
        .append_transcript(&key, NewTranscriptEntry::new(TranscriptRole::User, "hi"))
        .unwrap()
        .anchor;
    let hosts = HostSessions::new(
        store.clone(),
        tether_core::HarnessRegistry::shared(),
        Arc::new(ActiveRuns::new()),
    );
    let err = hosts
        .reset_with(
            &key,
            SessionId::new("s-2").unwrap(),
            ResetReason::New,
            |_, _| Box::pin(async { Err(Error::other("the host refuses")) }),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("the host refuses"), "{err}");
    assert_eq!(store.session(&key).unwrap().session_id.as_str(), "s-1");
    let now = hosts
        .reset(&key, SessionId::new("s-2").unwrap(), ResetReason::New)
        .await
        .unwrap();
    assert_eq!(now.session_id.as_str(), "s-2");
    assert_eq!(
        now.previous_session_id.as_ref().map(SessionId::as_str),
        Some("s-1")
    );
    assert_eq!(
        now.previous_change,
        Some(tether_core::GenerationChange::Reset)
    );
    assert_eq!(store.session(&key).unwrap(), now);
    assert_eq!(store.active_leaf(&key), Some(leaf));

    // The fault hooks reach a reset too: a fault at the commit edge commits nothing; a fault
    // after the COMMIT is reported and undoes nothing.
    let faulty = HostSessions::new(
        store.clone(),
        tether_core::HarnessRegistry::shared(),
        Arc::new(ActiveRuns::new()),
    )
    .with_hooks(
        tether_host::TransactionHooks::new()
            .after_mutations(|_| Box::pin(async { Err(Error::other("edge fault")) })),
    );
    let err = faulty
        .reset(&key, SessionId::new("s-3").unwrap(), ResetReason::Reset)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("edge fault"), "{err}");
    assert_eq!(store.session(&key).unwrap().session_id.as_str(), "s-2");
    let late = HostSessions::new(
        store.clone(),
        tether_core::HarnessRegistry::shared(),
        Arc::new(ActiveRuns::new()),
    )
    .with_hooks(
        tether_host::TransactionHooks::new().after_commit(|| Err(Error::other("late fault"))),
    );
    let err = late
        .reset(&key, SessionId::new("s-3").unwrap(), ResetReason::Reset)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("late fault"), "{err}");
    assert_eq!(store.session(&key).unwrap().session_id.as_str(), "s-3");
}
