//! Operator reads and actions of the SQL store (`sql/admin_read.rs`), on in-memory SQLite.

use std::sync::Arc;
use std::time::Duration;

use tether_core::HarnessRegistry;
use tether_core::{
    AgentId, ApplyOutcome, BindingId, BindingKey, BindingStore, Error, FakeClock, HarnessId,
    Intent, LeaseToken, LeaseWrite, Namespace, NamespaceConfig, QuarantineEntry, QuarantineStore,
    RowWrite, SessionId, SessionKey, Timestamp, admit_all,
};
use tether_host::{HostSessions, WorkTracker};
use tether_storage::{
    ForceExpireOutcome, LeaseEventKind, NewHostSession, SessionFilter, Store, StoreOptions,
    session_binding_keys,
};

const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

async fn store() -> (Store, Arc<FakeClock>) {
    open("sqlite::memory:").await
}

async fn open(url: &str) -> (Store, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::new(T0));
    let store = Store::open_with(StoreOptions::new(url).clock(clock.clone()))
        .await
        .unwrap();
    (store, clock)
}

/// Runs `body` on a throwaway PostgreSQL database (skipped when none answers and
/// `TETHER_REQUIRE_PG` is unset).
async fn on_postgres<F, Fut>(label: &str, body: F)
where
    F: FnOnce(Store, Arc<FakeClock>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(db) = tether_storage::testing::PgTestDatabase::create(label).await else {
        return;
    };
    let (store, clock) = open(db.url()).await;
    body(store.clone(), clock).await;
    store.close().await.unwrap();
    db.cleanup().await;
}

async fn session(store: &Store, key: &str, agent: &str, harness: Option<&str>) -> SessionKey {
    let session_key = SessionKey::new(key).unwrap();
    store
        .create_session(NewHostSession {
            session_key: session_key.clone(),
            agent_id: AgentId::new(agent).unwrap(),
            session_id: SessionId::new(format!("{key}-g1")).unwrap(),
            agent_harness_id: harness.map(|h| HarnessId::new(h).unwrap()),
        })
        .await
        .unwrap();
    session_key
}

async fn bind(store: &Store, ns: &Namespace, key: &BindingKey, lease_secs: Option<u64>) {
    let seen = store.observe(ns, key).await.unwrap();
    let lease = lease_secs.map(|s| LeaseWrite {
        token: LeaseToken::new(format!("token-{key}")).unwrap(),
        expires_at: T0 + Duration::from_secs(s),
        holder: Some("worker-1".into()),
    });
    let outcome = store
        .compare_and_apply(
            ns,
            key,
            &seen.comparison,
            Intent::Set {
                row: RowWrite {
                    value: b"{\"thread\":\"t\"}".to_vec(),
                    lease,
                },
                ttl: None,
            },
            &admit_all,
        )
        .await
        .unwrap();
    assert!(
        matches!(outcome, ApplyOutcome::Applied { .. }),
        "{outcome:?}"
    );
}

#[derive(Debug)]
struct Idle;

impl WorkTracker for Idle {
    fn has_competing_work(&self, _: &SessionKey, _: &SessionId) -> bool {
        false
    }
}

#[tokio::test]
async fn sessions_are_listed_with_filters_and_keyset_pages() {
    let (store, clock) = store().await;
    sessions_are_listed_with_filters_and_keyset_pages_body(store, clock).await;
}

#[tokio::test]
async fn sessions_are_listed_with_filters_and_keyset_pages_on_postgres() {
    on_postgres(
        "admin_read",
        sessions_are_listed_with_filters_and_keyset_pages_body,
    )
    .await;
}

async fn sessions_are_listed_with_filters_and_keyset_pages_body(
    store: Store,
    clock: Arc<FakeClock>,
) {
    let _ = &clock;
    let ns = Namespace::new("admin-ns").unwrap();
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    for i in 0..5 {
        session(&store, &format!("s{i}"), "main", Some("codex")).await;
    }
    session(&store, "t0", "other", None).await;
    let leased = store
        .session(&SessionKey::new("s1").unwrap())
        .await
        .unwrap()
        .unwrap();
    bind(&store, &ns, &session_binding_keys(&leased)[1], Some(60)).await;
    let quarantined = store
        .session(&SessionKey::new("s3").unwrap())
        .await
        .unwrap()
        .unwrap();
    store
        .quarantine(QuarantineEntry {
            namespace: ns.clone(),
            key: session_binding_keys(&quarantined)[0].clone(),
            reason: "corrupt".into(),
            custody: None,
            quarantined_at: T0,
        })
        .await
        .unwrap();

    let first = store
        .list_sessions(&SessionFilter {
            limit: 4,
            ..SessionFilter::default()
        })
        .await
        .unwrap();
    let keys: Vec<_> = first
        .sessions
        .iter()
        .map(|e| e.session_key.to_string())
        .collect();
    assert_eq!(keys, ["s0", "s1", "s2", "s3"]);
    assert_eq!(
        first.next.as_ref().map(ToString::to_string).as_deref(),
        Some("s3")
    );
    let second = store
        .list_sessions(&SessionFilter {
            limit: 4,
            after: first.next,
            ..SessionFilter::default()
        })
        .await
        .unwrap();
    let keys: Vec<_> = second
        .sessions
        .iter()
        .map(|e| e.session_key.to_string())
        .collect();
    assert_eq!(keys, ["s4", "t0"]);
    assert!(second.next.is_none());

    let by = |f: SessionFilter| {
        let store = store.clone();
        async move {
            store
                .list_sessions(&SessionFilter { limit: 10, ..f })
                .await
                .unwrap()
                .sessions
                .into_iter()
                .map(|e| e.session_key.to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        by(SessionFilter {
            agent: Some(AgentId::new("other").unwrap()),
            ..SessionFilter::default()
        })
        .await,
        ["t0"]
    );
    assert_eq!(
        by(SessionFilter {
            harness: Some(HarnessId::new("codex").unwrap()),
            ..SessionFilter::default()
        })
        .await
        .len(),
        5
    );
    assert_eq!(
        by(SessionFilter {
            has_lease: Some(true),
            ..SessionFilter::default()
        })
        .await,
        ["s1"]
    );
    assert_eq!(
        by(SessionFilter {
            quarantined: Some(true),
            ..SessionFilter::default()
        })
        .await,
        ["s3"]
    );
    assert_eq!(
        by(SessionFilter {
            has_lease: Some(false),
            quarantined: Some(false),
            ..SessionFilter::default()
        })
        .await,
        ["s0", "s2", "s4", "t0"]
    );
}

#[tokio::test]
async fn listed_sessions_are_the_listed_entries_borrowed() {
    let (store, clock) = store().await;
    listed_sessions_are_the_listed_entries_borrowed_body(store, clock).await;
}

#[tokio::test]
async fn listed_sessions_are_the_listed_entries_borrowed_on_postgres() {
    on_postgres(
        "listed_sessions",
        listed_sessions_are_the_listed_entries_borrowed_body,
    )
    .await;
}

/// `with_listed_sessions` hands over exactly the sessions and cursor `list_sessions` answers,
/// for every filter (one the database evaluates whole, or one read session by session) and
/// page size: keys that JSON escapes, no harness, and predecessors of every recorded change
/// (and of none, which reads as a transfer).
async fn listed_sessions_are_the_listed_entries_borrowed_body(store: Store, _: Arc<FakeClock>) {
    use tether_core::HostSessionEntry;
    use tether_storage::sea_orm::{ConnectionTrait as _, Statement};

    let ns = Namespace::new("listed-ns").unwrap();
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let keys = [
        "agent:main:a",
        "agent:main:b \"quoted\" c:\\path",
        "agent:main:naïve",
        "agent:main:transfer",
        "agent:main:cut",
        "agent:main:reset",
        "agent:main:legacy",
    ];
    for (i, key) in keys.iter().enumerate() {
        session(&store, key, "main", (i % 2 == 0).then_some("codex")).await;
    }
    for (key, change) in [
        ("agent:main:transfer", Some("transfer")),
        ("agent:main:cut", Some("cut")),
        ("agent:main:reset", Some("reset")),
        ("agent:main:legacy", None),
    ] {
        store
            .connection()
            .execute_raw(Statement::from_sql_and_values(
                store.backend(),
                match store.backend() {
                    tether_storage::sea_orm::DbBackend::Postgres => {
                        "UPDATE host_sessions SET previous_session_id = $1, previous_change = $2, \
                         lifecycle_revision = 7 WHERE session_key = $3"
                    }
                    _ => {
                        "UPDATE host_sessions SET previous_session_id = ?, previous_change = ?, \
                         lifecycle_revision = 7 WHERE session_key = ?"
                    }
                },
                [
                    format!("{key}-g0").into(),
                    change.map(str::to_owned).into(),
                    key.to_string().into(),
                ],
            ))
            .await
            .unwrap();
    }
    let leased = store
        .session(&SessionKey::new("agent:main:cut").unwrap())
        .await
        .unwrap()
        .unwrap();
    bind(&store, &ns, &session_binding_keys(&leased)[1], Some(60)).await;

    let mut seen_previous = 0;
    let filters = [
        SessionFilter::default(),
        SessionFilter {
            harness: Some(HarnessId::new("codex").unwrap()),
            ..SessionFilter::default()
        },
        SessionFilter {
            has_lease: Some(false),
            ..SessionFilter::default()
        },
        SessionFilter {
            has_lease: Some(true),
            ..SessionFilter::default()
        },
    ];
    for filter in filters {
        for limit in [1, 2, 3, 7, 10] {
            // Page through the whole list both ways, comparing each page.
            let mut after = None;
            loop {
                let f = SessionFilter {
                    limit,
                    after: after.clone(),
                    ..filter.clone()
                };
                let page = store.list_sessions(&f).await.unwrap();
                let (listed, next) = store
                    .with_listed_sessions(&f, |sessions, next| {
                        let entries: Vec<HostSessionEntry> = sessions
                            .iter()
                            .map(|s| s.clone().into_entry().unwrap())
                            .collect();
                        for (s, e) in sessions.iter().zip(&entries) {
                            assert_eq!(s.session_key(), e.session_key.as_str());
                            assert_eq!(s.agent_id(), e.agent_id.as_str());
                            assert_eq!(s.session_id(), e.session_id.as_str());
                            assert_eq!(
                                s.previous_session_id(),
                                e.previous_session_id.as_ref().map(SessionId::as_str)
                            );
                            assert_eq!(s.previous_change(), e.previous_change);
                            assert_eq!(
                                s.agent_harness_id(),
                                e.agent_harness_id.as_ref().map(HarnessId::as_str)
                            );
                            assert_eq!(s.lifecycle_revision(), e.lifecycle_revision);
                            assert_eq!(
                                (s.created_at(), s.updated_at()),
                                (e.created_at, e.updated_at)
                            );
                        }
                        (entries, next.map(str::to_owned))
                    })
                    .await
                    .unwrap();
                assert_eq!(listed, page.sessions, "{f:?}");
                assert_eq!(next, page.next.as_ref().map(ToString::to_string), "{f:?}");
                seen_previous += listed
                    .iter()
                    .filter(|e| e.previous_session_id.is_some())
                    .count();
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
        }
    }
    assert!(seen_previous > 0);
    // The texts come back as stored, escaped in the page or not.
    let all = store
        .with_listed_sessions(
            &SessionFilter {
                limit: 10,
                ..SessionFilter::default()
            },
            |sessions, next| {
                let keys: Vec<String> = sessions.iter().map(|s| s.session_key().into()).collect();
                (keys, next.is_none())
            },
        )
        .await
        .unwrap();
    let mut want: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    want.sort();
    assert_eq!(all, (want, true));
    let legacy = store
        .session(&SessionKey::new("agent:main:legacy").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        legacy.previous_change,
        Some(tether_core::GenerationChange::Transfer)
    );
}

#[tokio::test]
async fn bindings_are_read_without_registering_the_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let clock = Arc::new(FakeClock::new(T0));
    let writer = Store::open_with(StoreOptions::new(url.clone()).clock(clock.clone()))
        .await
        .unwrap();
    let ns = Namespace::new("harness-ns").unwrap();
    writer
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let key = BindingKey::physical(
        &AgentId::new("main").unwrap(),
        &SessionId::new("x").unwrap(),
    );
    bind(&writer, &ns, &key, Some(30)).await;

    // Another process: nothing registered.
    let admin = Store::open_with(StoreOptions::new(url).clock(clock.clone()))
        .await
        .unwrap();
    let record = admin.binding_record(&ns, &key).await.unwrap().unwrap();
    let lease = record.live_lease(T0).unwrap();
    assert_eq!(lease.holder.as_deref(), Some("worker-1"));
    assert_eq!(admin.namespaces().await.unwrap()[0].leased, 1);
    assert_eq!(
        admin
            .list_bindings(Some(&ns), true, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    clock.advance(Duration::from_secs(31));
    assert!(
        admin
            .list_bindings(Some(&ns), true, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        admin
            .list_bindings(None, false, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        admin
            .list_bindings(None, false, Some((&ns, &key)), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn force_expire_bumps_the_epoch_and_fences_the_old_holder() {
    let (store, clock) = store().await;
    force_expire_bumps_the_epoch_and_fences_the_old_holder_body(store, clock).await;
}

#[tokio::test]
async fn force_expire_bumps_the_epoch_and_fences_the_old_holder_on_postgres() {
    on_postgres(
        "admin_read",
        force_expire_bumps_the_epoch_and_fences_the_old_holder_body,
    )
    .await;
}

async fn force_expire_bumps_the_epoch_and_fences_the_old_holder_body(
    store: Store,
    clock: Arc<FakeClock>,
) {
    let _ = &clock;
    let ns = Namespace::new("fx").unwrap();
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let key = BindingKey::physical(
        &AgentId::new("main").unwrap(),
        &SessionId::new("x").unwrap(),
    );
    bind(&store, &ns, &key, Some(60)).await;
    let held = store.observe(&ns, &key).await.unwrap();
    let epoch = held.row.as_ref().unwrap().lease.as_ref().unwrap().epoch;

    assert_eq!(
        store
            .force_expire_lease(
                &ns,
                &key,
                Some(tether_core::LeaseEpoch::new(epoch.get() + 7))
            )
            .await
            .unwrap(),
        ForceExpireOutcome::EpochMismatch { current: epoch }
    );
    let outcome = store
        .force_expire_lease(&ns, &key, Some(epoch))
        .await
        .unwrap();
    assert!(
        matches!(&outcome, ForceExpireOutcome::Expired { previous_epoch, .. } if *previous_epoch == epoch),
        "{outcome:?}"
    );
    assert_eq!(
        store.force_expire_lease(&ns, &key, None).await.unwrap(),
        ForceExpireOutcome::NoLease
    );
    let other = BindingKey::physical(
        &AgentId::new("main").unwrap(),
        &SessionId::new("y").unwrap(),
    );
    assert_eq!(
        store.force_expire_lease(&ns, &other, None).await.unwrap(),
        ForceExpireOutcome::Missing
    );

    // The old holder's renewal with its observation is fenced.
    let renew = store
        .compare_and_apply(
            &ns,
            &key,
            &held.comparison,
            Intent::Set {
                row: RowWrite {
                    value: b"{}".to_vec(),
                    lease: Some(LeaseWrite {
                        token: LeaseToken::new(format!("token-{key}")).unwrap(),
                        expires_at: T0 + Duration::from_secs(120),
                        holder: Some("worker-1".into()),
                    }),
                },
                ttl: None,
            },
            &admit_all,
        )
        .await
        .unwrap();
    assert!(matches!(renew, ApplyOutcome::Conflict { .. }));
    // The next acquisition gets an epoch larger than the expired one plus one.
    bind(&store, &ns, &key, Some(60)).await;
    let next = store.observe(&ns, &key).await.unwrap();
    assert!(next.row.unwrap().lease.unwrap().epoch.get() > epoch.get() + 1);

    let kinds: Vec<_> = store
        .recent_lease_events(Some((&ns, &key)), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(kinds.contains(&LeaseEventKind::Expired), "{kinds:?}");
    let counts = store.lease_event_counts().await.unwrap();
    assert!(
        counts
            .iter()
            .any(|(k, n)| *k == LeaseEventKind::Acquired && *n == 2)
    );
}

#[tokio::test]
async fn deletion_removes_binding_rows_in_the_host_transaction_and_refuses_live_leases() {
    let (store, clock) = store().await;
    deletion_removes_binding_rows_in_the_host_transaction_and_refuses_live_leases_body(
        store, clock,
    )
    .await;
}

#[tokio::test]
async fn deletion_removes_binding_rows_in_the_host_transaction_and_refuses_live_leases_on_postgres()
{
    on_postgres(
        "admin_read",
        deletion_removes_binding_rows_in_the_host_transaction_and_refuses_live_leases_body,
    )
    .await;
}

async fn deletion_removes_binding_rows_in_the_host_transaction_and_refuses_live_leases_body(
    store: Store,
    clock: Arc<FakeClock>,
) {
    let _ = &clock;
    let ns = Namespace::new("del").unwrap();
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let key = session(&store, "s-del", "main", None).await;
    let entry = store.session(&key).await.unwrap().unwrap();
    let [physical, stable] = session_binding_keys(&entry);
    bind(&store, &ns, &physical, None).await;
    bind(&store, &ns, &stable, Some(10)).await;

    let refused = delete_with_bindings(store.clone(), entry.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, Error::MutationBlocked { .. }),
        "{refused}"
    );
    assert!(refused.to_string().contains("force-expire"));
    assert!(store.session(&key).await.unwrap().is_some(), "rolled back");
    assert_eq!(store.session_bindings(&entry).await.unwrap().len(), 2);

    clock.advance(Duration::from_secs(11));
    // A quarantined key (a write to it whose outcome is unknown) refuses the deletion too,
    // changing nothing, until an operator checked and released it: deleting would drop the
    // row the quarantine asks to check and leave the quarantine blocking a new session.
    store
        .quarantine(QuarantineEntry {
            namespace: ns.clone(),
            key: stable.clone(),
            reason: "commit outcome unknown".into(),
            custody: None,
            quarantined_at: T0,
        })
        .await
        .unwrap();
    let refused = delete_with_bindings(store.clone(), entry.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &refused,
            Error::Host {
                kind: tether_core::HostErrorKind::BindingQuarantined { binding, .. }
            } if *binding == format!("{ns}/{stable}")
        ),
        "{refused}"
    );
    assert!(store.session(&key).await.unwrap().is_some(), "rolled back");
    assert_eq!(store.session_bindings(&entry).await.unwrap().len(), 2);
    assert!(
        store
            .release_quarantine(&ns, &stable, "checked: nothing pending")
            .await
            .unwrap()
    );
    let deleted = delete_with_bindings(store.clone(), entry.clone())
        .await
        .unwrap();
    assert_eq!(deleted.len(), 1);
    assert!(store.session(&key).await.unwrap().is_none());
    assert!(store.session_bindings(&entry).await.unwrap().is_empty());
    assert!(
        store
            .binding_record(&ns, &physical)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(store.admin_counts().await.unwrap(), (0, 0));
}

/// The in-memory host backend refuses an operator's deletion of a session with a quarantined
/// binding as the SQL store does, and deletes it once the quarantine is released.
#[tokio::test]
async fn the_memory_backend_refuses_deleting_a_session_with_a_quarantined_binding() {
    let store = tether_storage::MemoryStore::new(Arc::new(FakeClock::new(T0)));
    let key = SessionKey::new("agent:main:direct:mem-quarantined").unwrap();
    assert!(store.create_session(NewHostSession {
        session_key: key.clone(),
        agent_id: AgentId::new("main").unwrap(),
        session_id: SessionId::new("gen-1").unwrap(),
        agent_harness_id: None,
    }));
    let entry = store.session(&key).unwrap();
    let ns = Namespace::new("del").unwrap();
    let [_, stable] = session_binding_keys(&entry);
    store
        .quarantine(QuarantineEntry {
            namespace: ns.clone(),
            key: stable.clone(),
            reason: "commit outcome unknown".into(),
            custody: None,
            quarantined_at: T0,
        })
        .await
        .unwrap();
    let sessions = HostSessions::new(store.clone(), HarnessRegistry::shared(), Arc::new(Idle));
    let request = || [tether_host::DeletionRequest::new(key.clone()).removing_unowned_bindings()];
    let refused = sessions.delete_requests(&request()).await.unwrap_err();
    assert!(
        matches!(
            &refused,
            Error::Host {
                kind: tether_core::HostErrorKind::BindingQuarantined { .. }
            }
        ),
        "{refused}"
    );
    assert!(store.session(&key).is_some());
    assert!(
        store
            .release_quarantine(&ns, &stable, "checked")
            .await
            .unwrap()
    );
    assert_eq!(
        sessions.delete_requests(&request()).await.unwrap(),
        std::slice::from_ref(&key)
    );
    assert!(store.session(&key).is_none());
}

async fn delete_with_bindings(
    store: Store,
    entry: tether_core::HostSessionEntry,
) -> Result<Vec<SessionKey>, Error> {
    let key = entry.session_key;
    HostSessions::new(store, HarnessRegistry::shared(), Arc::new(Idle))
        .delete_requests(&[tether_host::DeletionRequest::new(key).removing_unowned_bindings()])
        .await
}

#[tokio::test]
async fn renew_latencies_form_a_cumulative_histogram() {
    let (store, clock) = store().await;
    renew_latencies_form_a_cumulative_histogram_body(store, clock).await;
}

#[tokio::test]
async fn renew_latencies_form_a_cumulative_histogram_on_postgres() {
    on_postgres(
        "admin_read_latency",
        renew_latencies_form_a_cumulative_histogram_body,
    )
    .await;
}

/// Two renewals of one lease: the histogram counts exactly the `renewed` events' latencies
/// (acquisitions carry none), cumulatively per bound, with their exact sum.
async fn renew_latencies_form_a_cumulative_histogram_body(store: Store, _clock: Arc<FakeClock>) {
    let ns = Namespace::new("latency").unwrap();
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let bounds = [Duration::ZERO, Duration::from_secs(3600)];
    let empty = store.renew_latency_histogram(&bounds).await.unwrap();
    assert_eq!((empty.count, empty.sum), (0, Duration::ZERO));
    assert_eq!(empty.buckets, [(bounds[0], 0), (bounds[1], 0)]);

    let key = BindingKey::conversation(&BindingId::new("b-latency").unwrap());
    for lease_secs in [60, 90, 120] {
        bind(&store, &ns, &key, Some(lease_secs)).await;
    }
    let events = store
        .recent_lease_events(Some((&ns, &key)), 10)
        .await
        .unwrap();
    let latencies: Vec<Duration> = events
        .iter()
        .filter(|e| e.kind == LeaseEventKind::Renewed)
        .map(|e| e.latency.expect("a renewal carries its latency"))
        .collect();
    assert_eq!(latencies.len(), 2, "{events:?}");
    let histogram = store.renew_latency_histogram(&bounds).await.unwrap();
    assert_eq!(histogram.count, 2);
    assert_eq!(histogram.sum, latencies.iter().sum::<Duration>());
    let zero = latencies.iter().filter(|l| l.is_zero()).count() as u64;
    assert_eq!(histogram.buckets, [(bounds[0], zero), (bounds[1], 2)]);
}
