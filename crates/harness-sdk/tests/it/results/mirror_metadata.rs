//! Typed user-turn metadata: the configurable wire key, and the canonical append that stores
//! the restored message's metadata in the host transcript and feeds the persisted marker, on
//! a SQLite file, in-memory SQLite and PostgreSQL.

use serde_json::{Value, json};
use tether_core::{AgentId, Error, SessionId, SessionKey};
use tether_harness_sdk::results::mirror::{
    MetaKey, UserTurnEntry, UserTurnMeta, UserTurnTranscriptRecorder,
    restore_prepared_user_turn_meta,
};
use tether_storage::testing::PgTestDatabase;
use tether_storage::{NewHostSession, NewTranscriptEntry, Store, TranscriptRole};

/// The host's prepared message: typed metadata written under OpenClaw's key.
fn prepared() -> Value {
    let meta = UserTurnMeta::default()
        .with_sender_is_owner(true)
        .with_steer_target_run_id("  run-7  ")
        .with_human_mentions(json!([{"profileId": "ada", "start": 3, "end": 7}]))
        .with_other("senderName", json!("Ada"));
    let mut message = json!({
        "role": "user",
        "content": "hi @ada",
        "idempotencyKey": "turn-1:user",
        "provenance": {"kind": "external_user", "sourceChannel": "telegram"}
    });
    MetaKey::OPENCLAW.write(&mut message, &meta);
    message
}

/// What a hook wrote: it tried to forge owner status and a steer target.
fn runtime() -> Value {
    json!({
        "role": "user",
        "content": "hi @ada",
        "idempotencyKey": "turn-1:user",
        "provenance": {"kind": "external_user", "sourceChannel": "telegram"},
        "__openclaw": {"senderIsOwner": false, "steerTargetRunId": "forged", "senderName": "Ada"}
    })
}

#[test]
fn tool_results_mirror_typed_metadata_restores_like_the_wire_helper() {
    let restored = restore_prepared_user_turn_meta(&runtime(), Some(&prepared())).into_owned();
    let meta = MetaKey::OPENCLAW.read(&restored).unwrap();
    assert_eq!(meta.sender_is_owner, Some(true));
    assert_eq!(
        meta.steer_target_run_id.as_deref(),
        Some("run-7"),
        "trimmed"
    );
    assert_eq!(
        meta.human_mentions,
        Some(json!([{"profileId": "ada", "start": 3, "end": 7}]))
    );
    assert_eq!(meta.other.get("senderName"), Some(&json!("Ada")));
    assert_eq!(
        MetaKey::OPENCLAW
            .restore(&runtime(), Some(&prepared()))
            .into_owned(),
        restored
    );
}

#[test]
fn tool_results_mirror_a_recorder_with_its_own_key_marks_late_media_there() {
    let key = MetaKey::new("__host").unwrap();
    let mut rec = UserTurnTranscriptRecorder::with_meta_key(key.clone());
    assert_eq!(rec.meta_key(), &key);
    let message = json!({"role": "user", "content": "see", "__host": {"senderIsOwner": true}});
    rec.persist_fallback(&message, false).unwrap();
    let late = rec.persist_fallback(&message, true).unwrap();
    let meta = key.read(&late).unwrap();
    assert_eq!(meta.late_media, Some(true));
    assert_eq!(meta.sender_is_owner, Some(true));
    assert!(late.get("__openclaw").is_none());
}

/// The append through the recorder, the read back, and the marker, on one store.
async fn round_trip(store: &Store) {
    let key = SessionKey::new("agent:main:direct:ada").unwrap();
    store
        .create_session(NewHostSession {
            session_key: key.clone(),
            agent_id: AgentId::new("main").unwrap(),
            session_id: SessionId::new("gen-1").unwrap(),
            agent_harness_id: None,
        })
        .await
        .unwrap();
    let restored = restore_prepared_user_turn_meta(&runtime(), Some(&prepared())).into_owned();
    let append = |entry: UserTurnEntry| {
        let mut new = NewTranscriptEntry::new(TranscriptRole::User, entry.text.clone())
            .with_metadata(entry.metadata.clone());
        new.idempotency_key = entry.idempotency_key.clone();
        let (store, key) = (store.clone(), key.clone());
        async move { store.append_transcript(&key, new).await }
    };

    let mut rec = UserTurnTranscriptRecorder::new();
    let effects = rec
        .append_user_turn(&restored, append)
        .await
        .expect("appended");
    let committed = effects
        .original_input_committed
        .expect("a fresh append announces the original input");
    assert_eq!(committed.message, restored);

    let path = store.active_path(&key).await.unwrap();
    assert_eq!(path.len(), 1);
    assert_eq!(path[0].content, "hi @ada");
    assert_eq!(path[0].anchor, committed.anchor);
    let stored = UserTurnEntry::message_from(
        &path[0].content,
        path[0].idempotency_key.as_deref(),
        path[0].metadata.as_ref(),
    );
    assert_eq!(
        stored, restored,
        "the restored message survives the round trip"
    );
    assert_eq!(
        MetaKey::OPENCLAW.read(&stored),
        MetaKey::OPENCLAW.read(&restored)
    );

    // The same turn again (a replay): an idempotent hit, which never announces.
    let mut replay = UserTurnTranscriptRecorder::new();
    let effects = replay
        .append_user_turn(&restored, append)
        .await
        .expect("found");
    assert!(effects.original_input_committed.is_none());
    assert_eq!(store.active_path(&key).await.unwrap().len(), 1);

    // A failed append is returned as it is and marks nothing.
    let mut failing = UserTurnTranscriptRecorder::new();
    let err = failing
        .append_user_turn(&restored, |entry: UserTurnEntry| {
            let store = store.clone();
            async move {
                let missing = SessionKey::new("agent:main:direct:nobody").unwrap();
                store
                    .append_transcript(
                        &missing,
                        NewTranscriptEntry::new(TranscriptRole::User, entry.text.clone()),
                    )
                    .await
            }
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Host { .. }), "{err:?}");
    assert!(!failing.has_persisted());
}

#[tokio::test]
async fn tool_results_mirror_metadata_round_trip_on_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("mirror.db").display());
    round_trip(&Store::open(&url).await.unwrap()).await;
}

#[tokio::test]
async fn tool_results_mirror_metadata_round_trip_on_sqlite_in_memory() {
    round_trip(&Store::open("sqlite::memory:").await.unwrap()).await;
}

#[tokio::test]
async fn tool_results_mirror_metadata_round_trip_on_postgres() {
    let Some(db) = PgTestDatabase::create("harness_mirror").await else {
        return;
    };
    let store = Store::open(db.url()).await.unwrap();
    round_trip(&store).await;
    let _ = store.close().await;
    db.cleanup().await;
}
