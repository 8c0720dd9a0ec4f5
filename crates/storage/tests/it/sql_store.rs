//! SQL-store specifics: opening, pragmas, migrations, bad input, the background sweeper.

use std::sync::Arc;
use std::time::Duration;

use sea_orm::{ConnectionTrait, Statement};
use tether_core::{BindingStore, Error, FakeClock, NamespaceConfig, StoreErrorKind};
use tether_storage::{Store, StoreOptions};

use crate::support::{START, key, unique_ns, value};

async fn pragma(store: &Store, name: &str) -> String {
    let row = store
        .connection()
        .query_one_raw(Statement::from_string(
            store.backend(),
            format!("PRAGMA {name}"),
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get_by_index::<i64>(0)
        .map(|n| n.to_string())
        .or_else(|_| row.try_get_by_index::<String>(0))
        .unwrap()
}

#[tokio::test]
async fn sqlite_file_runs_wal_with_synchronous_full_and_temp_files_in_memory_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = Store::open(&url).await.unwrap();
    assert_eq!(pragma(&store, "journal_mode").await, "wal");
    assert_eq!(pragma(&store, "synchronous").await, "2", "FULL");
    assert_eq!(pragma(&store, "foreign_keys").await, "1");
    assert_eq!(pragma(&store, "temp_store").await, "2", "MEMORY");
    store.close().await.unwrap();
    let normal = Store::open_with(
        StoreOptions::new(url)
            .synchronous_normal(true)
            .temp_store_memory(false),
    )
    .await
    .unwrap();
    assert_eq!(
        pragma(&normal, "synchronous").await,
        "1",
        "NORMAL when asked"
    );
    assert_eq!(
        pragma(&normal, "temp_store").await,
        "0",
        "SQLite's default (files) when asked"
    );
}

#[tokio::test]
async fn sqlite_memory_url_works() {
    let store = Store::open_with(
        StoreOptions::new("sqlite::memory:").clock(Arc::new(FakeClock::new(START))),
    )
    .await
    .unwrap();
    let ns = unique_ns("mem");
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    assert!(
        store
            .register_if_absent(&ns, &key("a"), value("a"), None)
            .await
            .unwrap()
    );
    assert_eq!(store.count(&ns).await.unwrap(), 1);
}

#[tokio::test]
async fn malformed_urls_and_unreachable_servers_get_typed_errors() {
    for bad in ["mysql://u:secret@h/db", "nonsense", "sqlite://"] {
        let err = Store::open(bad).await.unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Store {
                    kind: StoreErrorKind::Configuration { .. }
                }
            ),
            "{bad}: {err:?}"
        );
        assert!(!err.to_string().contains("secret"));
    }
    let err = Store::open_with(
        StoreOptions::new("postgres://postgres@127.0.0.1:1/none")
            .connect_timeout(Duration::from_millis(500)),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Store {
                kind: StoreErrorKind::Unavailable { .. }
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("reachable"), "{err}");
}

#[tokio::test]
async fn a_schema_newer_than_the_binary_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let store = Store::open(&url).await.unwrap();
    store
        .connection()
        .execute_unprepared(
            "INSERT INTO seaql_migrations (version, applied_at) VALUES ('m9999_from_the_future', 0)",
        )
        .await
        .unwrap();
    store.close().await.unwrap();
    let err = Store::open(&url).await.unwrap_err();
    assert!(
        matches!(&err, Error::Store { kind: StoreErrorKind::SchemaTooNew { found, .. } } if found == "m9999_from_the_future"),
        "{err:?}"
    );
    assert!(err.to_string().contains("upgrade Tether"));
    // Opening twice with the same schema is fine (migrations are idempotent).
    let dir2 = tempfile::tempdir().unwrap();
    let url2 = format!("sqlite://{}", dir2.path().join("t.db").display());
    Store::open(&url2).await.unwrap();
    Store::open(&url2).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_sweeper_removes_expired_rows() {
    let clock = FakeClock::new(START);
    let store =
        Store::open_with(StoreOptions::new("sqlite::memory:").clock(Arc::new(clock.clone())))
            .await
            .unwrap();
    let ns = unique_ns("sweeper");
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    for i in 0..5 {
        store
            .register_if_absent(
                &ns,
                &key(&format!("k{i}")),
                value("v"),
                Some(Duration::from_secs(1)),
            )
            .await
            .unwrap();
    }
    store
        .register_if_absent(&ns, &key("keep"), value("v"), None)
        .await
        .unwrap();
    clock.advance(Duration::from_secs(1));
    let handle = store.spawn_sweeper(Duration::from_millis(10), 2);
    let physical = || async {
        let row = store
            .connection()
            .query_one_raw(Statement::from_string(
                store.backend(),
                "SELECT COUNT(*) AS n FROM binding_records",
            ))
            .await
            .unwrap()
            .unwrap();
        row.try_get::<i64>("", "n").unwrap()
    };
    let mut left = physical().await;
    for _ in 0..200 {
        if left == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        left = physical().await;
    }
    handle.abort();
    assert_eq!(left, 1, "only the row without expiry remains");
    assert_eq!(store.count(&ns).await.unwrap(), 1);
}

/// A sweeper does not keep its store open: `close` closes the pool while it runs, and the
/// task ends on its next tick instead of sweeping a closed store forever.
#[tokio::test]
async fn a_sweeper_never_keeps_its_store_open() {
    let (store, _dir) = crate::support::sqlite_store().await;
    let probe = store.connection().clone();
    // Closed between ticks (a tick holds the store only while it sweeps).
    let handle = store.spawn_sweeper(Duration::from_millis(300), 10);
    tokio::time::sleep(Duration::from_millis(20)).await;
    store.close().await.unwrap();
    assert!(
        probe.ping().await.is_err(),
        "close closed the pool although a sweeper was running"
    );
    tokio::time::timeout(Duration::from_secs(5), handle)
        .await
        .expect("the sweeper ends once the store is gone")
        .unwrap();
}

/// A failing host-session read is reported as `Failed`, never as `Missing`.
#[tokio::test]
async fn a_failing_host_session_read_is_failed_not_missing() {
    use tether_core::{HostSessionRead, HostSessionStore, SessionKey};
    let (store, _dir) = crate::support::sqlite_store().await;
    store
        .connection()
        .execute_unprepared("DROP TABLE transcript_entries; DROP TABLE host_sessions")
        .await
        .unwrap();
    let read = store
        .read_session(&SessionKey::new("agent:main:x").unwrap())
        .await;
    assert!(
        matches!(read, HostSessionRead::Failed(Error::Store { .. })),
        "{read:?}"
    );
}

/// A database whose counters are gone (a schema an operator must repair) is an unusable store,
/// a kind a caller can match on (the admin API answers 503), never a bare error.
#[tokio::test]
async fn a_schema_missing_its_counters_is_an_unusable_store() {
    use tether_core::{AgentId, SessionId, SessionKey};
    use tether_storage::{FINALIZATION_PREFIX, NewHostSession, NewTranscriptEntry, TranscriptRole};
    let (store, _dir) = crate::support::sqlite_store().await;
    let session = SessionKey::new("agent:main:counters").unwrap();
    store
        .create_session(NewHostSession {
            session_key: session.clone(),
            agent_id: AgentId::new("main").unwrap(),
            session_id: SessionId::new("counters-g1").unwrap(),
            agent_harness_id: None,
        })
        .await
        .unwrap();
    let ns = unique_ns("counters");
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    store
        .connection()
        .execute_unprepared("DELETE FROM tether_counters")
        .await
        .unwrap();
    let unusable = |err: &Error| {
        matches!(
            err,
            Error::Store {
                kind: StoreErrorKind::Unusable { .. }
            }
        )
    };
    // A finalization record is counted in the transaction that appends it.
    let err = store
        .append_transcript(
            &session,
            NewTranscriptEntry {
                role: TranscriptRole::System,
                content: format!("{FINALIZATION_PREFIX} succeeded"),
                idempotency_key: None,
                metadata: None,
            },
        )
        .await
        .unwrap_err();
    assert!(unusable(&err), "{err:?}");
    assert!(err.to_string().contains("tether migrate"), "{err}");
    // A new row draws its revision base from the row counter.
    let err = store
        .register_if_absent(&ns, &key("s1"), value("v"), None)
        .await
        .unwrap_err();
    assert!(unusable(&err), "{err:?}");
    // Nothing was written by either.
    assert!(store.lookup(&ns, &key("s1")).await.unwrap().is_none());
}

/// A row whose lease columns are inconsistent fails closed as an invalid row (never absent),
/// and scans refuse a corrupted key.
#[tokio::test]
async fn corrupted_sql_rows_are_invalid_not_absent() {
    let (store, _dir) = crate::support::sqlite_store().await;
    let ns = unique_ns("corrupt-sql");
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let k = key("s1");
    store
        .register_if_absent(
            &ns,
            &k,
            crate::support::leased("v", "tok", START + Duration::from_secs(60)),
            None,
        )
        .await
        .unwrap();
    store
        .connection()
        .execute_unprepared("UPDATE binding_records SET lease_epoch = NULL")
        .await
        .unwrap();
    let err = store.lookup(&ns, &k).await.unwrap_err();
    assert!(matches!(err, Error::InvalidRow { .. }), "{err:?}");
    assert!(store.observe(&ns, &k).await.is_err());
    store
        .connection()
        .execute_unprepared("UPDATE binding_records SET lease_epoch = 1, key = 'not-a-binding-key'")
        .await
        .unwrap();
    assert!(store.scan(&ns, None, 10).await.is_err());
}

/// Refused or failed writes end their `BEGIN IMMEDIATE` transaction at once: another
/// connection can write right after, well within a short busy timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_writes_release_the_sqlite_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let open = || {
        Store::open_with(
            StoreOptions::new(url.clone())
                .busy_timeout(Duration::from_millis(200))
                .max_connections(1),
        )
    };
    let (a, b) = (open().await.unwrap(), open().await.unwrap());
    let ns = unique_ns("lock");
    for s in [&a, &b] {
        s.register_namespace(NamespaceConfig::new(ns.clone()).with_max_entries(1))
            .await
            .unwrap();
    }
    assert!(
        a.register_if_absent(&ns, &key("x"), value("x"), None)
            .await
            .unwrap()
    );
    for round in 0..5 {
        // Refused (present), refused (capacity), no-op delete: each ends its transaction.
        assert!(
            !a.register_if_absent(&ns, &key("x"), value("x"), None)
                .await
                .unwrap()
        );
        assert!(
            a.register_if_absent(&ns, &key("y"), value("y"), None)
                .await
                .is_err()
        );
        assert!(
            a.delete_if(&ns, &key("x"), &|_| false)
                .await
                .unwrap()
                .is_none()
        );
        let seen = b.observe(&ns, &key("x")).await.unwrap();
        let out = b
            .compare_and_apply(
                &ns,
                &key("x"),
                &seen.comparison,
                tether_core::Intent::Set {
                    row: value(&format!("r{round}")),
                    ttl: None,
                },
                &tether_core::admit_all,
            )
            .await
            .unwrap();
        assert!(
            matches!(out, tether_core::ApplyOutcome::Applied { .. }),
            "round {round}"
        );
    }
}

/// A database that cannot be used as it is (read-only, not a database) is reported as
/// unusable — nothing to retry — and a busy or full one as unavailable; neither as a generic
/// backend error.
#[tokio::test]
async fn read_only_and_corrupt_databases_are_unusable_not_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let url = format!("sqlite://{}", path.display());
    let store = Store::open(&url).await.unwrap();
    store.close().await.unwrap();
    let read_only = Store::open(&format!("{url}?mode=ro")).await.unwrap();
    let ns = unique_ns("ro");
    read_only
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let err = read_only
        .register_if_absent(&ns, &key("k"), value("v"), None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Store {
                kind: StoreErrorKind::Unusable { message, ..}
            } if message.contains("read-only")
        ),
        "{err:?}"
    );

    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    let err = Store::open(&format!("sqlite://{}", garbage.display()))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Store {
                kind: StoreErrorKind::Unusable { .. }
            }
        ),
        "{err:?}"
    );
}

/// Several processes opening one new database at once (hosts starting together, `tether
/// migrate` run twice) take turns at the migration instead of racing to create the same
/// tables: every open succeeds and the schema is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_opens_of_a_new_database_all_migrate_it() {
    async fn open_together(url: &str) {
        let opens: Vec<_> = (0..6)
            .map(|_| {
                let url = url.to_owned();
                tokio::spawn(async move { Store::open(&url).await })
            })
            .collect();
        let mut stores = Vec::new();
        for open in opens {
            stores.push(
                open.await
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{url}: {e:?}")),
            );
        }
        // Whole: a host session round-trips on every store.
        for (i, store) in stores.into_iter().enumerate() {
            let key = tether_core::SessionKey::new(format!("agent:main:direct:s{i}")).unwrap();
            assert!(
                store
                    .create_session(tether_storage::NewHostSession {
                        session_key: key.clone(),
                        agent_id: tether_core::AgentId::new("main").unwrap(),
                        session_id: tether_core::SessionId::new("gen-1").unwrap(),
                        agent_harness_id: None,
                    })
                    .await
                    .unwrap()
            );
            store.close().await.unwrap();
        }
    }
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        open_together(&format!(
            "sqlite://{}",
            dir.path().join(format!("new-{round}.db")).display()
        ))
        .await;
    }
    for round in 0..3 {
        let Some(db) =
            tether_storage::testing::PgTestDatabase::create(&format!("concurrent_open_{round}"))
                .await
        else {
            return;
        };
        open_together(db.url()).await;
        db.cleanup().await;
    }
}

/// A PostgreSQL URL naming a database or a role the server does not have is unusable, not
/// unavailable: retrying cannot help until the URL or the server is fixed, and the message says
/// which.
#[tokio::test]
async fn a_missing_postgres_database_or_role_is_unusable_not_retryable() {
    let Some(db) = tether_storage::testing::PgTestDatabase::create("missing_db").await else {
        return;
    };
    let server = tether_storage::testing::pg_server_url();
    let missing = tether_storage::testing::with_database(&server, "tether_no_such_database");
    // The same URL with its user (if any) replaced by a role the server does not have.
    let (scheme, rest) = missing.split_once("://").unwrap();
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    let stranger = format!("{scheme}://tether_no_such_role@{host}");
    for (url, says) in [
        (&missing, "does not exist"),
        (&stranger, "user or password"),
    ] {
        let err = Store::open(url).await.unwrap_err();
        assert!(!err.is_retryable(), "{err:?}");
        assert!(
            matches!(
                &err,
                Error::Store {
                    kind: StoreErrorKind::Unusable { message, .. }
                } if message.contains(says)
            ),
            "{err:?}"
        );
    }
    db.cleanup().await;
}

#[tokio::test]
async fn a_fenced_transcript_append_writes_only_to_the_session_it_expects() {
    use tether_core::{AgentId, HostErrorKind, LifecycleRevision, SessionId, SessionKey};
    use tether_storage::{NewHostSession, NewTranscriptEntry, SessionExpectation, TranscriptRole};

    let check = async |store: Store| {
        let key = SessionKey::new("agent:main:direct:fenced").unwrap();
        store
            .create_session(NewHostSession {
                session_key: key.clone(),
                agent_id: AgentId::new("main").unwrap(),
                session_id: SessionId::new("gen-1").unwrap(),
                agent_harness_id: None,
            })
            .await
            .unwrap();
        let entry = |text: &str, idem: &str| NewTranscriptEntry {
            role: TranscriptRole::Assistant,
            content: text.into(),
            idempotency_key: Some(idem.into()),
            metadata: None,
        };
        let revision = store
            .session(&key)
            .await
            .unwrap()
            .unwrap()
            .lifecycle_revision;
        let expected = SessionExpectation::default()
            .with_session_id(SessionId::new("gen-1").unwrap())
            .with_lifecycle_revision(revision);
        let written = store
            .append_transcript_expecting(&key, entry("answer", "run-1:fallback"), &expected)
            .await
            .unwrap();
        assert!(written.appended);

        // Another generation, or another revision: nothing appended, not even an idempotent hit.
        for wrong in [
            SessionExpectation::default().with_session_id(SessionId::new("gen-2").unwrap()),
            SessionExpectation::default()
                .with_lifecycle_revision(LifecycleRevision::new(revision.get() + 1)),
        ] {
            for idem in ["run-1:fallback", "run-2:fallback"] {
                let err = store
                    .append_transcript_expecting(&key, entry("late", idem), &wrong)
                    .await
                    .unwrap_err();
                assert!(
                    matches!(
                        err,
                        Error::Host {
                            kind: HostErrorKind::SessionChanged { .. }
                        }
                    ),
                    "{err:?}"
                );
            }
        }
        let entries = store.active_path(&key).await.unwrap();
        assert_eq!(entries.len(), 1, "{entries:?}");
        // A missing session is not found, whatever is expected.
        let err = store
            .append_transcript_expecting(
                &SessionKey::new("agent:main:direct:absent").unwrap(),
                entry("x", "k"),
                &expected,
            )
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            Error::Host {
                kind: HostErrorKind::SessionNotFound { .. }
            }
        ));
    };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    check(Store::open(&url).await.unwrap()).await;
    if let Some(db) = tether_storage::testing::PgTestDatabase::create("fenced_append").await {
        let store = Store::open(db.url()).await.unwrap();
        check(store.clone()).await;
        store.close().await.unwrap();
        db.cleanup().await;
    }
}

/// Transcript metadata round trip on an in-memory SQLite database (the conformance suite runs
/// the same case on a SQLite file and on PostgreSQL).
#[tokio::test]
async fn sqlite_in_memory_transcript_metadata_round_trips() {
    let store = crate::support::open_store("sqlite::memory:").await;
    crate::conformance::host_cases::transcript_metadata_round_trips(&store).await;
}

/// A SQLite file store with one pooled connection (and its writer connection) serves a host
/// transaction, lone writes, transactional writes and reads all at once without a deadlock:
/// the host transaction holds the writer connection while readers read beside it, and the
/// writes wait their turn. Every host transaction runs on the same writer connection (a
/// temporary table, seen only by the connection that made it, marks it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_one_pooled_connection_serves_writers_and_readers_together() {
    use tether_storage::{HostBackend as _, HostTransaction as _};

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("one.db").display());
    let store = Store::open_with(StoreOptions::new(url).max_connections(1))
        .await
        .unwrap();
    let ns = unique_ns("one-conn");
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let marked = store.begin_host().await.unwrap();
    marked
        .execute("CREATE TEMP TABLE writer_marker (n INTEGER)", vec![])
        .await
        .unwrap();
    marked
        .execute("CREATE TABLE host_items (n INTEGER)", vec![])
        .await
        .unwrap();
    marked.commit().await.unwrap();
    for owner in 0..4 {
        let name = format!("k{owner}");
        assert!(
            store
                .register_if_absent(&ns, &key(&name), value("v0"), None)
                .await
                .unwrap()
        );
    }

    let work = async {
        let host = {
            let store = store.clone();
            tokio::spawn(async move {
                for round in 0..10i64 {
                    let tx = store.begin_host().await.unwrap();
                    tx.execute(
                        "INSERT INTO writer_marker (n) VALUES ($1)",
                        vec![round.into()],
                    )
                    .await
                    .expect("the host transaction runs on the writer connection");
                    tx.execute("INSERT INTO host_items (n) VALUES ($1)", vec![round.into()])
                        .await
                        .unwrap();
                    // Held open a while: readers read beside it, writers queue behind it.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    tx.commit().await.unwrap();
                }
            })
        };
        let writers: Vec<_> = (0..4)
            .map(|owner| {
                let store = store.clone();
                let ns = ns.clone();
                tokio::spawn(async move {
                    let k = key(&format!("k{owner}"));
                    for round in 0..25 {
                        // Over the observed live row: a lone write in autocommit.
                        let seen = store.observe(&ns, &k).await.unwrap();
                        let out = store
                            .apply_observed(
                                &ns,
                                &k,
                                &seen,
                                tether_core::Intent::Set {
                                    row: value(&format!("v{round}")),
                                    ttl: None,
                                },
                                &tether_core::admit_all,
                            )
                            .await
                            .unwrap();
                        assert!(
                            matches!(out.outcome, tether_core::ApplyOutcome::Applied { .. }),
                            "{:?}",
                            out.outcome
                        );
                        // A transactional write and a read.
                        let extra = key(&format!("extra{owner}-{round}"));
                        assert!(
                            store
                                .register_if_absent(&ns, &extra, value("x"), None)
                                .await
                                .unwrap()
                        );
                        assert!(store.lookup(&ns, &extra).await.unwrap().is_some());
                    }
                })
            })
            .collect();
        host.await.unwrap();
        for writer in writers {
            writer.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(60), work)
        .await
        .expect("no deadlock between the writer connection and the pool");

    let items = store
        .connection()
        .query_one_raw(Statement::from_string(
            store.backend(),
            "SELECT count(*) AS c FROM host_items",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(items.try_get::<i64>("", "c").unwrap(), 10);
    assert_eq!(store.count(&ns).await.unwrap(), 4 + 4 * 25);
    store.close().await.unwrap();
}
