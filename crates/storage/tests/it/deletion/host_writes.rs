//! The host's own writes join the deletion's SQL transaction
//! (`HostSessions::delete_sessions_with`), on SQLite and PostgreSQL, with a host table of its own.

use std::sync::Arc;

use tether_core::HarnessRegistry;
use tether_core::{AgentId, BindingStore as _, Error, SessionKey};
use tether_host::{ActiveRuns, HostSessions};
use tether_storage::Store;
use tether_storage::testing::PgTestDatabase;

use super::harness::{Log, RecordingHarness, bind, binding_key, entries};
use crate::conformance::host_cases::{new_session, session_key};
use crate::support::{sqlite_store, unique_ns};

/// The host's own table: one chat thread per session.
async fn host_table(store: &Store) {
    use tether_storage::sea_orm::ConnectionTrait as _;
    store
        .connection()
        .execute_unprepared(
            "CREATE TABLE IF NOT EXISTS host_chat_threads (session_key TEXT PRIMARY KEY, title TEXT NOT NULL)",
        )
        .await
        .unwrap();
}

async fn host_rows(store: &Store, key: &SessionKey) -> i64 {
    use tether_storage::sea_orm::{ConnectionTrait as _, Statement};
    let backend = store.backend();
    let sql = match backend {
        tether_storage::sea_orm::DbBackend::Postgres => {
            "SELECT COUNT(*) AS n FROM host_chat_threads WHERE session_key = $1"
        }
        _ => "SELECT COUNT(*) AS n FROM host_chat_threads WHERE session_key = ?",
    };
    let row = store
        .connection()
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            sql,
            vec![key.as_str().into()],
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get::<i64>("", "n").unwrap()
}

async fn body(store: Store) {
    host_table(&store).await;
    let log = Log::default();
    let ns = unique_ns("host-writes");
    let registry = HarnessRegistry::shared();
    registry.register(RecordingHarness::new("codex", &log, &ns, true, false));
    let hosts = HostSessions::new(store.clone(), registry, Arc::new(ActiveRuns::new()));
    let agent = AgentId::new("main").unwrap();

    // 1. The host's writes fail: nothing commits, the harness mutation rolls back.
    let kept = session_key("host-writes-kept");
    assert!(
        store
            .create_session(new_session(&kept, "s-1"))
            .await
            .unwrap()
    );
    bind(&store, &ns, &kept).await;
    let insert = |key: &SessionKey| {
        let key = key.as_str().to_owned();
        let store = store.clone();
        async move {
            use tether_storage::sea_orm::{ConnectionTrait as _, Statement};
            let sql = match store.backend() {
                tether_storage::sea_orm::DbBackend::Postgres => {
                    "INSERT INTO host_chat_threads (session_key, title) VALUES ($1, 'hello')"
                }
                _ => "INSERT INTO host_chat_threads (session_key, title) VALUES (?, 'hello')",
            };
            store
                .connection()
                .execute_raw(Statement::from_sql_and_values(
                    store.backend(),
                    sql,
                    vec![key.into()],
                ))
                .await
                .unwrap();
        }
    };
    insert(&kept).await;
    let err = hosts
        .delete_sessions_with(std::slice::from_ref(&kept), |tx, deleted| {
            Box::pin(async move {
                for entry in deleted {
                    tx.execute(
                        "DELETE FROM host_chat_threads WHERE session_key = $1",
                        vec![entry.session_key.as_str().into()],
                    )
                    .await?;
                }
                Err(Error::other("the host refuses after its own delete"))
            })
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("the host refuses"), "{err}");
    assert!(
        store.session(&kept).await.unwrap().is_some(),
        "session kept"
    );
    assert_eq!(
        host_rows(&store, &kept).await,
        1,
        "the host's delete rolled back"
    );
    assert!(
        store
            .observe(&ns, &binding_key(&agent, &kept))
            .await
            .unwrap()
            .row
            .is_some(),
        "the binding is back"
    );
    let effects: Vec<String> = entries(&log)
        .into_iter()
        .filter(|e| e.starts_with("commit:") || e.starts_with("rollback:"))
        .collect();
    assert_eq!(effects, ["commit:codex", "rollback:codex"]);

    // 2. The host's writes succeed: its row, the session row and the binding go together.
    let gone = session_key("host-writes-gone");
    assert!(
        store
            .create_session(new_session(&gone, "s-1"))
            .await
            .unwrap()
    );
    bind(&store, &ns, &gone).await;
    insert(&gone).await;
    let deleted = hosts
        .delete_sessions_with(std::slice::from_ref(&gone), |tx, deleted| {
            Box::pin(async move {
                assert_eq!(deleted.len(), 1);
                let n = tx
                    .execute(
                        "DELETE FROM host_chat_threads WHERE session_key = $1",
                        vec![deleted[0].session_key.as_str().into()],
                    )
                    .await?;
                assert_eq!(n, 1);
                Ok(())
            })
        })
        .await
        .unwrap();
    assert_eq!(deleted, vec![gone.clone()]);
    assert!(store.session(&gone).await.unwrap().is_none());
    assert_eq!(host_rows(&store, &gone).await, 0);
    assert!(
        store
            .observe(&ns, &binding_key(&agent, &gone))
            .await
            .unwrap()
            .row
            .is_none(),
        "the binding went with the session"
    );

    // 3. A failing statement is a typed store error and rolls everything back.
    let err = hosts
        .delete_sessions_with(std::slice::from_ref(&kept), |tx, _| {
            Box::pin(async move {
                tx.execute("DELETE FROM no_such_host_table", vec![]).await?;
                Ok(())
            })
        })
        .await
        .unwrap_err();
    // The host's own missing table is a backend error (its mistake), not an unusable
    // database to migrate: only Tether's own missing tables say that.
    assert!(
        matches!(
            err,
            Error::Store {
                kind: tether_core::StoreErrorKind::Backend { .. }
            }
        ),
        "{err:?}"
    );
    assert!(!err.to_string().contains("tether migrate"), "{err}");
    if store.backend() == tether_storage::sea_orm::DbBackend::Postgres {
        // The server's own source line is not shown as if it were the statement's.
        assert!(err.to_string().contains("(SQLSTATE 42P01)"), "{err}");
        assert!(!err.to_string().contains(" at line "), "{err}");
    }
    assert!(store.session(&kept).await.unwrap().is_some());
    assert_eq!(host_rows(&store, &kept).await, 1);

    // 4. The host's own constraint, violated: the database's code reaches the host.
    let err = hosts
        .delete_sessions_with(std::slice::from_ref(&kept), |tx, _| {
            Box::pin(async move {
                let again = "INSERT INTO host_chat_threads (session_key, title) VALUES ($1, 'x')";
                let key = tether_storage::sea_orm::Value::from("host-writes-duplicate");
                tx.execute(again, vec![key.clone()]).await?;
                tx.execute(again, vec![key]).await?;
                Ok(())
            })
        })
        .await
        .unwrap_err();
    let unique_violation = match store.backend() {
        tether_storage::sea_orm::DbBackend::Postgres => "23505",
        _ => "1555",
    };
    assert_eq!(
        tether_storage::database_error_code(&err).as_deref(),
        Some(unique_violation),
        "{err:?}"
    );
    assert!(store.session(&kept).await.unwrap().is_some(), "rolled back");
    // Tether's own refusals carry no database code.
    let refused = tether_core::Error::from(tether_core::HostErrorKind::SessionNotFound {
        key: kept.to_string(),
    });
    assert_eq!(tether_storage::database_error_code(&refused), None);
}

/// The title the host keeps for `key`'s chat thread.
async fn host_title(store: &Store, key: &SessionKey) -> Option<String> {
    use tether_storage::sea_orm::{ConnectionTrait as _, Statement};
    let backend = store.backend();
    let sql = match backend {
        tether_storage::sea_orm::DbBackend::Postgres => {
            "SELECT title FROM host_chat_threads WHERE session_key = $1"
        }
        _ => "SELECT title FROM host_chat_threads WHERE session_key = ?",
    };
    store
        .connection()
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            sql,
            vec![key.as_str().into()],
        ))
        .await
        .unwrap()
        .map(|row| row.try_get::<String>("", "title").unwrap())
}

/// Host writes that retitle the session's chat thread, then fail when `fail` is set.
fn retitle(
    title: &'static str,
    fail: bool,
) -> impl for<'a> Fn(
    &'a tether_storage::SqlHostTransaction,
    &'a [tether_core::HostSessionEntry],
) -> tether_core::BoxFuture<'a, Result<(), Error>>
+ Send
+ Sync
+ 'static {
    move |tx, sessions| {
        let key = sessions[0].session_key.as_str().to_owned();
        Box::pin(async move {
            tx.execute(
                "UPDATE host_chat_threads SET title = $1 WHERE session_key = $2",
                vec![title.into(), key.into()],
            )
            .await?;
            if fail {
                return Err(Error::other("the host refuses after its own write"));
            }
            Ok(())
        })
    }
}

/// The host's writes join a rewind's, a branch switch's and a reset's transaction: they commit
/// with the session's move to its next generation, or nothing does.
async fn context_reset_and_reset_body(store: Store) {
    use tether_core::{ResetReason, SessionId};
    use tether_storage::{NewTranscriptEntry, TranscriptRole};
    host_table(&store).await;
    let log = Log::default();
    let ns = unique_ns("host-writes-reset");
    let registry = HarnessRegistry::shared();
    registry.register(RecordingHarness::new("codex", &log, &ns, true, true));
    let runs = Arc::new(ActiveRuns::new());
    let hosts = HostSessions::new(store.clone(), registry, Arc::clone(&runs) as _);
    let key = session_key("host-writes-reset");
    assert!(
        store
            .create_session(new_session(&key, "s-1"))
            .await
            .unwrap()
    );
    bind(&store, &ns, &key).await;
    let mut anchors = Vec::new();
    for (role, text) in [
        (TranscriptRole::User, "u1"),
        (TranscriptRole::Assistant, "a1"),
        (TranscriptRole::User, "u2"),
        (TranscriptRole::Assistant, "a2"),
    ] {
        let appended = store
            .append_transcript(&key, NewTranscriptEntry::new(role, text))
            .await
            .unwrap();
        anchors.push(appended.anchor);
    }
    {
        use tether_storage::sea_orm::{ConnectionTrait as _, Statement};
        let sql = match store.backend() {
            tether_storage::sea_orm::DbBackend::Postgres => {
                "INSERT INTO host_chat_threads (session_key, title) VALUES ($1, 'first')"
            }
            _ => "INSERT INTO host_chat_threads (session_key, title) VALUES (?, 'first')",
        };
        store
            .connection()
            .execute_raw(Statement::from_sql_and_values(
                store.backend(),
                sql,
                vec![key.as_str().into()],
            ))
            .await
            .unwrap();
    }
    let generation = |store: Store, key: SessionKey| async move {
        store.session(&key).await.unwrap().unwrap().session_id
    };

    // A rewind whose host writes fail changes nothing: no cut, no new generation, no title.
    let err = hosts
        .rewind_with(
            &key,
            anchors[2],
            SessionId::new("s-2").unwrap(),
            retitle("rewound", true),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("the host refuses"), "{err}");
    assert_eq!(generation(store.clone(), key.clone()).await.as_str(), "s-1");
    assert_eq!(host_title(&store, &key).await.as_deref(), Some("first"));
    assert_eq!(store.active_leaf(&key).await.unwrap(), Some(anchors[3]));
    // Then it commits with its writes.
    let status = hosts
        .rewind_with(
            &key,
            anchors[2],
            SessionId::new("s-2").unwrap(),
            retitle("rewound", false),
        )
        .await
        .unwrap();
    assert_eq!(status, tether_storage::CutStatus::Created);
    assert_eq!(generation(store.clone(), key.clone()).await.as_str(), "s-2");
    // The predecessor is recorded as cut: no harness adopts its native context.
    assert_eq!(
        store.session(&key).await.unwrap().unwrap().previous_change,
        Some(tether_core::GenerationChange::Cut)
    );
    assert_eq!(host_title(&store, &key).await.as_deref(), Some("rewound"));
    assert_eq!(store.active_leaf(&key).await.unwrap(), Some(anchors[1]));

    // A branch switch back to the old tip, with its writes.
    let status = hosts
        .switch_branch_with(
            &key,
            anchors[3],
            SessionId::new("s-3").unwrap(),
            retitle("switched", false),
        )
        .await
        .unwrap();
    assert_eq!(status, tether_storage::CutStatus::Created);
    assert_eq!(host_title(&store, &key).await.as_deref(), Some("switched"));
    assert_eq!(store.active_leaf(&key).await.unwrap(), Some(anchors[3]));

    // A reset whose writes fail changes nothing and tells no harness.
    let resets_before = entries(&log)
        .iter()
        .filter(|e| e.starts_with("reset:"))
        .count();
    let err = hosts
        .reset_with(
            &key,
            SessionId::new("s-4").unwrap(),
            ResetReason::New,
            retitle("new chat", true),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("the host refuses"), "{err}");
    assert_eq!(generation(store.clone(), key.clone()).await.as_str(), "s-3");
    assert_eq!(host_title(&store, &key).await.as_deref(), Some("switched"));
    assert_eq!(
        entries(&log)
            .iter()
            .filter(|e| e.starts_with("reset:"))
            .count(),
        resets_before,
        "no harness told of a reset that did not happen"
    );
    // Then it commits: a new generation (the predecessor recorded), the host's row, the
    // transcript kept, and the harnesses told.
    let now = hosts
        .reset_with(
            &key,
            SessionId::new("s-4").unwrap(),
            ResetReason::New,
            retitle("new chat", false),
        )
        .await
        .unwrap();
    assert_eq!(now.session_id.as_str(), "s-4");
    assert_eq!(
        now.previous_session_id.as_ref().map(SessionId::as_str),
        Some("s-3")
    );
    // Recorded as a reset, in the row and in the entry the reset returned.
    assert_eq!(
        now.previous_change,
        Some(tether_core::GenerationChange::Reset)
    );
    assert_eq!(store.session(&key).await.unwrap().unwrap(), now);
    assert_eq!(host_title(&store, &key).await.as_deref(), Some("new chat"));
    assert_eq!(store.active_leaf(&key).await.unwrap(), Some(anchors[3]));
    let resets: Vec<String> = entries(&log)
        .into_iter()
        .filter(|e| e.starts_with("reset:"))
        .collect();
    assert_eq!(resets.len(), resets_before + 1, "{resets:?}");
    assert_eq!(resets.last().map(String::as_str), Some("reset:codex:New"));
    // Refused, nothing changed: a reset to the generation the session is at (a retry of a
    // reset that committed), a reset while a run of the session is in flight, a reset of a
    // missing session.
    let err = hosts
        .reset(&key, SessionId::new("s-4").unwrap(), ResetReason::New)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    let run = runs.start(&key);
    let err = hosts
        .reset(&key, SessionId::new("s-5").unwrap(), ResetReason::New)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CompetingWork { .. }), "{err:?}");
    drop(run);
    assert_eq!(generation(store.clone(), key.clone()).await.as_str(), "s-4");
    let missing = session_key("host-writes-reset-missing");
    let err = hosts
        .reset(&missing, SessionId::new("s-9").unwrap(), ResetReason::Reset)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Host {
                kind: tether_core::HostErrorKind::SessionNotFound { .. }
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn host_writes_join_context_resets_and_resets_on_sqlite() {
    let (store, _dir) = sqlite_store().await;
    context_reset_and_reset_body(store).await;
}

#[tokio::test]
async fn host_writes_join_context_resets_and_resets_on_postgres() {
    let Some(db) = PgTestDatabase::create("host_writes_reset").await else {
        return;
    };
    let store = Store::open(db.url()).await.unwrap();
    context_reset_and_reset_body(store.clone()).await;
    drop(store);
    db.cleanup().await;
}

#[tokio::test]
async fn host_writes_join_the_deletion_transaction_on_sqlite() {
    let (store, _dir) = sqlite_store().await;
    body(store).await;
}

#[tokio::test]
async fn host_writes_join_the_deletion_transaction_on_postgres() {
    let Some(db) = PgTestDatabase::create("host_writes").await else {
        return;
    };
    let store = Store::open(db.url()).await.unwrap();
    body(store.clone()).await;
    drop(store);
    db.cleanup().await;
}
