//! Host sessions, transcripts, search and upstream links: the same cases on SQLite and
//! PostgreSQL.

use tether_core::{
    AgentId, HostSessionRead, HostSessionStore, LifecycleRevision, SessionId, SessionKey,
    TranscriptAnchor,
};
use tether_storage::{Cut, CutStatus, NewHostSession, NewTranscriptEntry, Store, TranscriptRole};

use crate::support::{START, unique_ns};

/// A session key unique to this process and call.
pub(crate) fn session_key(label: &str) -> SessionKey {
    SessionKey::new(format!("agent:main:{}", unique_ns(label))).unwrap()
}

pub(crate) fn new_session(key: &SessionKey, id: &str) -> NewHostSession {
    NewHostSession {
        session_key: key.clone(),
        agent_id: AgentId::new("main").unwrap(),
        session_id: SessionId::new(id).unwrap(),
        agent_harness_id: None,
    }
}

fn msg(role: TranscriptRole, content: &str, idem: Option<&str>) -> NewTranscriptEntry {
    NewTranscriptEntry {
        role,
        content: content.into(),
        idempotency_key: idem.map(str::to_owned),
        metadata: None,
    }
}

async fn append(
    store: &Store,
    key: &SessionKey,
    role: TranscriptRole,
    content: &str,
) -> TranscriptAnchor {
    store
        .append_transcript(key, msg(role, content, None))
        .await
        .unwrap()
        .anchor
}

/// Create, tri-state read, guarded generation rotation.
pub(crate) async fn host_session_create_read_rotate(store: &Store) {
    let key = session_key("host");
    assert!(matches!(
        store.read_session(&key).await,
        HostSessionRead::Missing
    ));
    assert!(
        store
            .create_session(new_session(&key, "s-1"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .create_session(new_session(&key, "s-x"))
            .await
            .unwrap()
    );
    let HostSessionRead::Current(entry) = store.read_session(&key).await else {
        panic!("expected the entry");
    };
    assert_eq!(entry.session_id.as_str(), "s-1");
    assert_eq!(entry.lifecycle_revision, LifecycleRevision::INITIAL);
    assert_eq!(entry.previous_session_id, None);
    assert_eq!(entry.previous_change, None);
    assert_eq!(entry.created_at, START);
    let rotated = store
        .rotate_generation(
            &key,
            &SessionId::new("s-1").unwrap(),
            SessionId::new("s-2").unwrap(),
        )
        .await
        .unwrap()
        .expect("rotated");
    assert_eq!(rotated.session_id.as_str(), "s-2");
    assert_eq!(
        rotated.previous_session_id.as_ref().unwrap().as_str(),
        "s-1"
    );
    assert_eq!(
        rotated.previous_change,
        Some(tether_core::GenerationChange::Transfer),
        "a rotation is a transfer: the native context continues"
    );
    assert_eq!(
        rotated.lifecycle_revision,
        LifecycleRevision::INITIAL.next()
    );
    assert_eq!(store.session(&key).await.unwrap().unwrap(), rotated);
    let stale = store
        .rotate_generation(
            &key,
            &SessionId::new("s-1").unwrap(),
            SessionId::new("s-3").unwrap(),
        )
        .await
        .unwrap();
    assert!(
        stale.is_none(),
        "a stale expected generation rotates nothing"
    );
    assert_eq!(store.session(&key).await.unwrap().unwrap(), rotated);
}

/// Appends are idempotent per key: `appended` true, then false with the same anchor.
pub(crate) async fn transcript_append_is_idempotent(store: &Store) {
    let key = session_key("append");
    store
        .create_session(new_session(&key, "s-1"))
        .await
        .unwrap();
    let first = store
        .append_transcript(&key, msg(TranscriptRole::User, "hello", Some("m-1")))
        .await
        .unwrap();
    assert!(first.appended);
    let again = store
        .append_transcript(
            &key,
            msg(TranscriptRole::User, "hello (retry)", Some("m-1")),
        )
        .await
        .unwrap();
    assert!(!again.appended);
    assert_eq!(again.anchor, first.anchor);
    let reply = append(store, &key, TranscriptRole::Assistant, "hi").await;
    assert_eq!(store.active_leaf(&key).await.unwrap(), Some(reply));
    let path = store.active_path(&key).await.unwrap();
    assert_eq!(path.len(), 2);
    assert_eq!(path[0].content, "hello");
    assert_eq!(path[1].parent, Some(first.anchor));
    let missing = session_key("missing");
    let err = store
        .append_transcript(&missing, msg(TranscriptRole::User, "x", None))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            tether_core::Error::Host {
                kind: tether_core::HostErrorKind::SessionNotFound { .. }
            }
        ),
        "a typed host error, not a string: {err:?}"
    );
}

/// Rewind and switch: applied cuts rotate the generation; each refusal leaves everything as it
/// was.
pub(crate) async fn transcript_cuts_and_refusals(store: &Store) {
    let key = session_key("cuts");
    store
        .create_session(new_session(&key, "s-1"))
        .await
        .unwrap();
    let u1 = append(store, &key, TranscriptRole::User, "u1").await;
    let a1 = append(store, &key, TranscriptRole::Assistant, "a1").await;
    let u2 = append(store, &key, TranscriptRole::User, "u2").await;
    let a2 = append(store, &key, TranscriptRole::Assistant, "a2").await;

    let status = store
        .cut_transcript(
            &key,
            &Cut::Rewind { to: u2 },
            SessionId::new("s-2").unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(status, CutStatus::Created);
    let entry = store.session(&key).await.unwrap().unwrap();
    assert_eq!(entry.session_id.as_str(), "s-2");
    assert_eq!(entry.previous_session_id.as_ref().unwrap().as_str(), "s-1");
    assert_eq!(store.active_leaf(&key).await.unwrap(), Some(a1));
    let u2b = append(store, &key, TranscriptRole::User, "u2b").await;

    let before = (
        store.session(&key).await.unwrap(),
        store.active_leaf(&key).await.unwrap(),
    );
    let refused = [
        (
            Cut::Rewind {
                to: TranscriptAnchor(i64::MAX),
            },
            CutStatus::MissingEntry,
        ),
        (Cut::Rewind { to: a1 }, CutStatus::NotUserMessage),
        (Cut::Rewind { to: u2 }, CutStatus::OffActivePath),
        (
            Cut::SwitchBranch {
                to: TranscriptAnchor(i64::MAX),
            },
            CutStatus::MissingEntry,
        ),
        (Cut::SwitchBranch { to: a1 }, CutStatus::NotBranchTip),
        (Cut::SwitchBranch { to: u2b }, CutStatus::AlreadyActive),
    ];
    for (cut, expected) in refused {
        let status = store
            .cut_transcript(&key, &cut, SessionId::new("s-never").unwrap())
            .await
            .unwrap();
        assert_eq!(status, expected, "{cut:?}");
        assert_eq!(
            (
                store.session(&key).await.unwrap(),
                store.active_leaf(&key).await.unwrap()
            ),
            before,
            "{cut:?} changed nothing"
        );
    }
    assert_eq!(CutStatus::OffActivePath.as_str(), "off-active-path");
    // A session that does not exist is a typed "not found", not a missing entry.
    let nowhere = SessionKey::new("agent:main:direct:nowhere").unwrap();
    let missing = store
        .cut_transcript(
            &nowhere,
            &Cut::Rewind { to: u2 },
            SessionId::new("s-never").unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            missing,
            tether_core::Error::Host {
                kind: tether_core::HostErrorKind::SessionNotFound { .. }
            }
        ),
        "{missing:?}"
    );
    let status = store
        .cut_transcript(
            &key,
            &Cut::SwitchBranch { to: a2 },
            SessionId::new("s-3").unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(status, CutStatus::Created);
    let path: Vec<_> = store
        .active_path(&key)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.anchor)
        .collect();
    assert_eq!(path, vec![u1, a1, u2, a2]);
}

/// A fork copies the path before the user message into a new key; the source is untouched.
pub(crate) async fn fork_leaves_the_source_untouched(store: &Store) {
    let key = session_key("fork-src");
    store
        .create_session(new_session(&key, "s-1"))
        .await
        .unwrap();
    append(store, &key, TranscriptRole::User, "u1").await;
    let a1 = append(store, &key, TranscriptRole::Assistant, "a1").await;
    let u2 = append(store, &key, TranscriptRole::User, "u2").await;
    append(store, &key, TranscriptRole::Assistant, "a2").await;
    let before = (
        store.session(&key).await.unwrap(),
        store.active_path(&key).await.unwrap(),
    );

    let target = session_key("fork-dst");
    assert_eq!(
        store
            .fork_session(&key, &a1, new_session(&target, "f-1"))
            .await
            .unwrap(),
        CutStatus::NotUserMessage
    );
    assert_eq!(
        store
            .fork_session(
                &key,
                &TranscriptAnchor(i64::MAX),
                new_session(&target, "f-1")
            )
            .await
            .unwrap(),
        CutStatus::MissingEntry
    );
    assert!(
        store.session(&target).await.unwrap().is_none(),
        "refusals create nothing"
    );
    assert_eq!(
        store
            .fork_session(&key, &u2, new_session(&target, "f-1"))
            .await
            .unwrap(),
        CutStatus::Created
    );
    let after = (
        store.session(&key).await.unwrap(),
        store.active_path(&key).await.unwrap(),
    );
    assert_eq!(after, before, "the source is untouched");
    let again = store
        .fork_session(&key, &u2, new_session(&target, "f-2"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            again,
            tether_core::Error::Host {
                kind: tether_core::HostErrorKind::SessionExists { .. }
            }
        ),
        "forking onto an existing key is a typed conflict: {again:?}"
    );
    let nowhere = SessionKey::new("agent:main:direct:nowhere").unwrap();
    let missing = store
        .fork_session(&nowhere, &u2, new_session(&target, "f-3"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            missing,
            tether_core::Error::Host {
                kind: tether_core::HostErrorKind::SessionNotFound { .. }
            }
        ),
        "forking a missing session is a typed not found: {missing:?}"
    );
    let forked: Vec<_> = store
        .active_path(&target)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.role, e.content))
        .collect();
    assert_eq!(
        forked,
        vec![
            (TranscriptRole::User, "u1".to_owned()),
            (TranscriptRole::Assistant, "a1".to_owned())
        ]
    );
    assert_eq!(
        store
            .session(&target)
            .await
            .unwrap()
            .unwrap()
            .session_id
            .as_str(),
        "f-1"
    );
}

/// Full-text search: every word must match; optional session filter; append order.
pub(crate) async fn transcript_search(store: &Store) {
    let a = session_key("search-a");
    let b = session_key("search-b");
    store.create_session(new_session(&a, "s-a")).await.unwrap();
    store.create_session(new_session(&b, "s-b")).await.unwrap();
    let word = format!("zebra{}", std::process::id());
    let a1 = append(
        store,
        &a,
        TranscriptRole::User,
        &format!("The {word} crossed the Road"),
    )
    .await;
    append(store, &a, TranscriptRole::Assistant, "nothing to see").await;
    let b1 = append(
        store,
        &b,
        TranscriptRole::Assistant,
        &format!("a road and a {word}, again"),
    )
    .await;
    append(store, &b, TranscriptRole::User, &format!("only the {word}")).await;

    let hits = store
        .search_transcripts(&format!("{word} ROAD"), None, 10)
        .await
        .unwrap();
    let anchors: Vec<_> = hits.iter().map(|h| h.anchor).collect();
    assert_eq!(anchors, vec![a1, b1]);
    assert_eq!(hits[0].session_key, a);
    assert_eq!(hits[0].role, TranscriptRole::User);
    let only_a = store
        .search_transcripts(&format!("road {word}"), Some(&a), 10)
        .await
        .unwrap();
    assert_eq!(only_a.len(), 1);
    assert_eq!(only_a[0].anchor, a1);
    assert_eq!(
        store
            .search_transcripts(&word, None, 10)
            .await
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        store
            .search_transcripts(&word, None, 2)
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(
        store
            .search_transcripts(" \"*\" ", None, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // Punctuated text tokenizes the same on both backends (emails, paths, hyphens).
    let c = session_key("search-c");
    store.create_session(new_session(&c, "s-c")).await.unwrap();
    let mail = append(
        store,
        &c,
        TranscriptRole::User,
        &format!("mail {word}@example.org about /srv/app-data"),
    )
    .await;
    let joined = format!("{word} example");
    for query in ["example", "org", "srv", "app data", joined.as_str()] {
        let hits = store.search_transcripts(query, Some(&c), 10).await.unwrap();
        assert_eq!(hits.len(), 1, "query {query:?}");
        assert_eq!(hits[0].anchor, mail);
    }
}

/// Upstream links are created once and removed only with the expected value.
pub(crate) async fn upstream_links_expected_delete(store: &Store) {
    let key = session_key("upstream");
    assert!(store.link_upstream(&key, "acp:one").await.unwrap());
    assert!(!store.link_upstream(&key, "acp:two").await.unwrap());
    assert_eq!(
        store.upstream_link(&key).await.unwrap().as_deref(),
        Some("acp:one")
    );
    assert!(!store.unlink_upstream(&key, "acp:two").await.unwrap());
    assert_eq!(
        store.upstream_link(&key).await.unwrap().as_deref(),
        Some("acp:one")
    );
    assert!(store.unlink_upstream(&key, "acp:one").await.unwrap());
    assert!(store.upstream_link(&key).await.unwrap().is_none());
}

/// The server clock follows the database's time (same machine here: a small offset).
pub(crate) async fn server_clock_tracks_database_time(store: &Store) {
    use tether_core::Clock;
    let clock = tether_storage::ServerClock::new();
    clock.resync(store).await.unwrap();
    assert!(
        clock.offset_millis().abs() < 2_000,
        "offset {}",
        clock.offset_millis()
    );
    let local = tether_core::SystemClock.now();
    assert!((clock.now().as_millis() - local.as_millis()).abs() < 2_000);

    // A host whose own clock runs 10 s ahead (or behind) reads the database's time once
    // resynced: its skew does not reach lease decisions.
    for skew in [10_000_i64, -10_000] {
        let skewed =
            tether_core::Timestamp::from_millis(tether_core::SystemClock.now().as_millis() + skew);
        let clock = tether_storage::ServerClock::over(std::sync::Arc::new(
            tether_core::FakeClock::new(skewed),
        ));
        assert_eq!(
            clock.now(),
            skewed,
            "before a resync it reads the host's clock"
        );
        clock.resync(store).await.unwrap();
        let off = clock.now().as_millis() - tether_core::SystemClock.now().as_millis();
        assert!(
            off.abs() < 2_000,
            "skew {skew}: {off} ms off the database's time"
        );
    }
}

/// Deletion in the host transaction (the decision in `docs/deletion-and-reset.md`) on every SQL
/// backend: a harness's deletion commit removes its binding row
/// inside the host transaction, so a failure before COMMIT restores it and a success removes
/// both rows together.
pub(crate) async fn deletion_commits_bindings_with_the_session_row(store: &Store) {
    use std::sync::Arc;
    use tether_core::HarnessRegistry;
    use tether_core::{BindingStore, Error};
    use tether_host::{ActiveRuns, HostSessions, TransactionHooks};

    use crate::deletion::harness::{Log, RecordingHarness, bind, binding_key, entries};

    let ns = unique_ns("sql-deletion");
    let log = Log::default();
    let registry = HarnessRegistry::shared();
    let harness = RecordingHarness::new("codex", &log, &ns, true, false);
    registry.register(harness.clone());
    let key = session_key("sql-deletion");
    store
        .create_session(new_session(&key, "s-1"))
        .await
        .unwrap();
    bind(store, &ns, &key).await;
    let bkey = binding_key(&AgentId::new("main").unwrap(), &key);
    let hosts = || {
        HostSessions::new(
            store.clone(),
            Arc::clone(&registry),
            Arc::new(ActiveRuns::new()),
        )
    };

    let failing = TransactionHooks::new()
        .after_mutations(|_| Box::pin(async { Err(Error::other("injected before COMMIT")) }));
    let err = hosts()
        .with_hooks(failing)
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "injected before COMMIT");
    assert!(
        store.lookup(&ns, &bkey).await.unwrap().is_some(),
        "binding restored with the transaction"
    );
    assert!(store.session(&key).await.unwrap().is_some());

    let deleted = hosts()
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap();
    assert_eq!(deleted, vec![key.clone()]);
    assert!(store.lookup(&ns, &bkey).await.unwrap().is_none());
    assert!(store.session(&key).await.unwrap().is_none());
    assert!(harness.finalized());
    assert_eq!(
        entries(&log)
            .iter()
            .filter(|e| e.starts_with("commit:") || e.starts_with("rollback:"))
            .count(),
        3
    );
}

/// Transcript content and idempotency keys follow one rule on both SQL backends: a NUL, an
/// oversized entry or a malformed idempotency key is refused with a typed error before
/// anything is written; a NUL in a search query is refused the same way.
pub(crate) async fn transcript_text_rules_refuse_before_writing(store: &Store) {
    use tether_core::text::MAX_CONTENT_LEN;
    use tether_core::{Error, TextError};
    let key = session_key("text");
    assert!(
        store
            .create_session(new_session(&key, "s-1"))
            .await
            .unwrap()
    );
    for (content, idem) in [
        ("nul \0 inside".to_owned(), None),
        ("x".repeat(MAX_CONTENT_LEN + 1), None),
        ("fine".to_owned(), Some("idem\0")),
        ("fine".to_owned(), Some("idem\u{200B}")),
        ("fine".to_owned(), Some(" idem")),
    ] {
        let err = store
            .append_transcript(&key, msg(TranscriptRole::User, &content, idem))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidText(_)), "{err:?}");
    }
    assert!(
        store.active_path(&key).await.unwrap().is_empty(),
        "nothing written"
    );
    assert!(matches!(
        store.search_transcripts("a\0b", None, 10).await,
        Err(Error::InvalidText(TextError::Nul { .. }))
    ));
    let ok = store
        .append_transcript(
            &key,
            msg(TranscriptRole::User, "tab\there\nnewline", Some("i-1")),
        )
        .await
        .unwrap();
    assert!(ok.appended);
}

/// Metadata stored with an entry comes back as written (nested values, unicode, an escaped
/// NUL), through the active path and a fork; an idempotent hit keeps the first entry's
/// metadata; an entry without metadata reads `None`; metadata nested too deep is refused
/// before anything is written.
pub(crate) async fn transcript_metadata_round_trips(store: &Store) {
    use serde_json::json;
    use tether_core::{Error, TextError};
    use tether_storage::{MAX_METADATA_DEPTH, TranscriptMetadata};

    let key = session_key("metadata");
    assert!(
        store
            .create_session(new_session(&key, "s-1"))
            .await
            .unwrap()
    );
    let metadata =
        |value: serde_json::Value| -> TranscriptMetadata { value.as_object().unwrap().clone() };
    let restored = metadata(json!({
        "provenance": {"kind": "external_user", "sourceChannel": "telegram"},
        "timestamp": 1_700_000_000_000_i64,
        "__openclaw": {
            "senderIsOwner": true,
            "steerTargetRunId": "run-7",
            "humanMentions": [{"profileId": "ada", "start": 3, "end": 7}],
            "senderName": "Ada \u{1F600} \u{0} end"
        }
    }));
    let first = store
        .append_transcript(
            &key,
            NewTranscriptEntry::new(TranscriptRole::User, "hi @ada")
                .with_idempotency_key("turn-1:user")
                .with_metadata(restored.clone()),
        )
        .await
        .unwrap();
    assert!(first.appended);
    let again = store
        .append_transcript(
            &key,
            NewTranscriptEntry::new(TranscriptRole::User, "hi @ada")
                .with_idempotency_key("turn-1:user")
                .with_metadata(metadata(json!({"other": "ignored"}))),
        )
        .await
        .unwrap();
    assert_eq!((again.appended, &again.anchor), (false, &first.anchor));
    store
        .append_transcript(
            &key,
            NewTranscriptEntry::new(TranscriptRole::Assistant, "hello"),
        )
        .await
        .unwrap();
    let path = store.active_path(&key).await.unwrap();
    assert_eq!(path.len(), 2);
    assert_eq!(path[0].metadata.as_ref(), Some(&restored));
    assert_eq!(path[1].metadata, None);

    // A fork copies the entries before its user message, metadata included.
    let second_user = store
        .append_transcript(&key, msg(TranscriptRole::User, "next", None))
        .await
        .unwrap()
        .anchor;
    let forked = session_key("metadata-fork");
    assert_eq!(
        store
            .fork_session(&key, &second_user, new_session(&forked, "f-1"))
            .await
            .unwrap(),
        CutStatus::Created
    );
    let copy = store.active_path(&forked).await.unwrap();
    assert_eq!(copy[0].metadata.as_ref(), Some(&restored));

    // Too deep: refused with a typed error, nothing written.
    let mut deep = json!("leaf");
    for _ in 0..MAX_METADATA_DEPTH {
        deep = json!([deep]);
    }
    let err = store
        .append_transcript(
            &key,
            NewTranscriptEntry::new(TranscriptRole::User, "deep")
                .with_metadata(metadata(json!({ "deep": deep }))),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidText(TextError::TooDeep { .. })),
        "{err:?}"
    );
    assert_eq!(store.active_path(&key).await.unwrap().len(), 3);
    let mut within = json!("leaf");
    for _ in 0..MAX_METADATA_DEPTH - 2 {
        within = json!([within]);
    }
    let kept = metadata(json!({ "deep": within }));
    store
        .append_transcript(
            &key,
            NewTranscriptEntry::new(TranscriptRole::User, "deep but within")
                .with_metadata(kept.clone()),
        )
        .await
        .unwrap();
    let path = store.active_path(&key).await.unwrap();
    assert_eq!(path.last().unwrap().metadata.as_ref(), Some(&kept));
}
