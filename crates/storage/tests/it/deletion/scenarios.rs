//! Scenarios 57–66 (host side of deletion and context reset, `docs/deletion-and-reset.md`):
//! the host layer's one coordinator over each store that implements the host port — SQLite,
//! PostgreSQL and the memory store.

use std::sync::Arc;

use sea_orm::ConnectionTrait;
use tether_core::{
    AgentId, BindingStore, BoxFuture, Error, HarnessRegistry, HostSessionEntry, Namespace,
    SessionId, SessionKey, StoredRow, TranscriptAnchor,
};
use tether_host::{ActiveRuns, DeletionRequest, HostSessions, TransactionHooks};
use tether_storage::{
    Cut, CutStatus, MemoryHostTransaction, MemoryStore, NewHostSession, NewTranscriptEntry,
    SqlHostTransaction, Store, TranscriptEntry, TranscriptRole,
};

use super::harness::{Log, RecordingHarness, bind, binding_key, entries};
use crate::conformance::host_cases::{new_session, session_key};
use crate::support::{sqlite_store, unique_ns};
use tether_storage::testing::PgTestDatabase;

/// The backend a scenario runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Db {
    Sqlite,
    Postgres,
    Memory,
}

/// Each scenario body runs on SQLite, on PostgreSQL (skipped without a server unless
/// `TETHER_REQUIRE_PG=1`) and on the memory store: `<scenario>::on_sqlite`, `on_postgres`,
/// `on_memory`.
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn on_sqlite() {
                    super::$name(super::Db::Sqlite).await;
                }

                #[tokio::test]
                async fn on_postgres() {
                    super::$name(super::Db::Postgres).await;
                }

                #[tokio::test]
                async fn on_memory() {
                    super::$name(super::Db::Memory).await;
                }
            }
        )*
    };
}

/// The store under test.
#[derive(Clone)]
enum Backend {
    Sql(Store),
    Memory(MemoryStore),
}

/// The coordinator over the store under test.
enum Hosts {
    Sql(HostSessions<Store>),
    Memory(HostSessions<MemoryStore>),
}

macro_rules! each {
    ($hosts:expr, $h:ident => $body:expr) => {
        match $hosts {
            Hosts::Sql($h) => $body,
            Hosts::Memory($h) => $body,
        }
    };
}

type Failure = Arc<dyn Fn() -> BoxFuture<'static, Result<(), Error>> + Send + Sync>;

impl Hosts {
    async fn rewind(
        &self,
        key: &SessionKey,
        to: TranscriptAnchor,
        next: SessionId,
    ) -> Result<CutStatus, Error> {
        each!(self, h => h.rewind(key, to, next).await)
    }

    async fn switch_branch(
        &self,
        key: &SessionKey,
        to: TranscriptAnchor,
        next: SessionId,
    ) -> Result<CutStatus, Error> {
        each!(self, h => h.switch_branch(key, to, next).await)
    }

    async fn fork(
        &self,
        source: &SessionKey,
        at: &TranscriptAnchor,
        new: NewHostSession,
    ) -> Result<CutStatus, Error> {
        each!(self, h => h.fork(source, at, new).await)
    }

    async fn delete_sessions(&self, keys: &[SessionKey]) -> Result<Vec<SessionKey>, Error> {
        each!(self, h => h.delete_sessions(keys).await)
    }

    async fn delete_requests(
        &self,
        requests: &[DeletionRequest],
    ) -> Result<Vec<SessionKey>, Error> {
        each!(self, h => h.delete_requests(requests).await)
    }

    async fn delete_without_harnesses(&self, key: &SessionKey) -> Result<bool, Error> {
        each!(self, h => h.delete_without_harnesses(key).await)
    }

    /// Hooks that need no transaction: `before` fails (or passes) after every harness
    /// committed, `after` right after COMMIT.
    fn with_failures(self, before: Option<Failure>, after: Option<&'static str>) -> Self {
        fn hooks<T>(before: Option<Failure>, after: Option<&'static str>) -> TransactionHooks<T> {
            let mut hooks = TransactionHooks::new();
            if let Some(before) = before {
                hooks = hooks.after_mutations(move |_| before());
            }
            if let Some(message) = after {
                hooks = hooks.after_commit(move || Err(Error::other(message)));
            }
            hooks
        }
        match self {
            Self::Sql(h) => Self::Sql(h.with_hooks(hooks(before, after))),
            Self::Memory(h) => Self::Memory(h.with_hooks(hooks(before, after))),
        }
    }

    /// Fails with `message` after every harness committed, before COMMIT.
    fn failing_before_commit(self, message: &'static str) -> Self {
        self.with_failures(
            Some(Arc::new(move || {
                Box::pin(async move { Err(Error::other(message)) })
            })),
            None,
        )
    }

    fn with_sql_hooks(self, hooks: TransactionHooks<SqlHostTransaction>) -> Self {
        match self {
            Self::Sql(h) => Self::Sql(h.with_hooks(hooks)),
            Self::Memory(_) => panic!("SQL transaction hooks on the memory store"),
        }
    }

    fn with_memory_hooks(self, hooks: TransactionHooks<MemoryHostTransaction>) -> Self {
        match self {
            Self::Memory(h) => Self::Memory(h.with_hooks(hooks)),
            Self::Sql(_) => panic!("memory transaction hooks on a SQL store"),
        }
    }
}

struct Fixture {
    db: Db,
    store: Backend,
    _dir: Option<tempfile::TempDir>,
    _pg: Option<PgTestDatabase>,
    registry: Arc<HarnessRegistry>,
    runs: Arc<ActiveRuns>,
    log: Log,
    ns: Namespace,
}

/// The anchors of a session's transcript `u1 → a1 → u2 → a2`.
struct Turns {
    u1: TranscriptAnchor,
    a1: TranscriptAnchor,
    u2: TranscriptAnchor,
    a2: TranscriptAnchor,
}

impl Fixture {
    /// A fresh store of `db`; `None` when PostgreSQL is not there (and not required).
    async fn on(db: Db) -> Option<Self> {
        let (store, dir, pg) = match db {
            Db::Sqlite => {
                let (store, dir) = sqlite_store().await;
                (Backend::Sql(store), Some(dir), None)
            }
            Db::Postgres => {
                let pg = PgTestDatabase::create("deletion_scenarios").await?;
                let store = Store::open(pg.url()).await.unwrap();
                (Backend::Sql(store), None, Some(pg))
            }
            Db::Memory => (Backend::Memory(MemoryStore::default()), None, None),
        };
        Some(Self {
            db,
            store,
            _dir: dir,
            _pg: pg,
            registry: HarnessRegistry::shared(),
            runs: Arc::new(ActiveRuns::new()),
            log: Log::default(),
            ns: unique_ns("native-bindings"),
        })
    }

    fn hosts(&self) -> Hosts {
        let (registry, runs) = (Arc::clone(&self.registry), self.runs.clone());
        match &self.store {
            Backend::Sql(store) => Hosts::Sql(HostSessions::new(store.clone(), registry, runs)),
            Backend::Memory(store) => {
                Hosts::Memory(HostSessions::new(store.clone(), registry, runs))
            }
        }
    }

    fn bindings(&self) -> &dyn BindingStore {
        match &self.store {
            Backend::Sql(store) => store,
            Backend::Memory(store) => store,
        }
    }

    fn sql_store(&self) -> Option<&Store> {
        match &self.store {
            Backend::Sql(store) => Some(store),
            Backend::Memory(_) => None,
        }
    }

    fn memory_store(&self) -> Option<&MemoryStore> {
        match &self.store {
            Backend::Memory(store) => Some(store),
            Backend::Sql(_) => None,
        }
    }

    fn harness(&self, id: &str, deletion: bool, reset: bool) -> Arc<RecordingHarness> {
        let h = RecordingHarness::new(id, &self.log, &self.ns, deletion, reset);
        self.registry.register(h.clone());
        h
    }

    async fn append(&self, key: &SessionKey, role: TranscriptRole, text: &str) -> TranscriptAnchor {
        let entry = NewTranscriptEntry {
            role,
            content: text.into(),
            idempotency_key: None,
            metadata: None,
        };
        match &self.store {
            Backend::Sql(store) => store.append_transcript(key, entry).await.unwrap().anchor,
            Backend::Memory(store) => store.append_transcript(key, entry).unwrap().anchor,
        }
    }

    async fn session(&self, label: &str) -> (SessionKey, Turns) {
        let key = session_key(label);
        let created = match &self.store {
            Backend::Sql(store) => store
                .create_session(new_session(&key, "s-1"))
                .await
                .unwrap(),
            Backend::Memory(store) => store.create_session(new_session(&key, "s-1")),
        };
        assert!(created);
        let mut ids = Vec::new();
        for (role, text) in [
            (TranscriptRole::User, "u1"),
            (TranscriptRole::Assistant, "a1"),
            (TranscriptRole::User, "u2"),
            (TranscriptRole::Assistant, "a2"),
        ] {
            ids.push(self.append(&key, role, text).await);
        }
        bind(self.bindings(), &self.ns, &key).await;
        let mut it = ids.into_iter();
        let mut next = || it.next().unwrap();
        (
            key,
            Turns {
                u1: next(),
                a1: next(),
                u2: next(),
                a2: next(),
            },
        )
    }

    async fn binding(&self, key: &SessionKey) -> Option<StoredRow> {
        self.bindings()
            .lookup(&self.ns, &binding_key(&AgentId::new("main").unwrap(), key))
            .await
            .unwrap()
    }

    async fn entry(&self, key: &SessionKey) -> Option<HostSessionEntry> {
        match &self.store {
            Backend::Sql(store) => store.session(key).await.unwrap(),
            Backend::Memory(store) => store.session(key),
        }
    }

    async fn active_leaf(&self, key: &SessionKey) -> Option<TranscriptAnchor> {
        match &self.store {
            Backend::Sql(store) => store.active_leaf(key).await.unwrap(),
            Backend::Memory(store) => store.active_leaf(key),
        }
    }

    async fn active_path(&self, key: &SessionKey) -> Vec<TranscriptEntry> {
        match &self.store {
            Backend::Sql(store) => store.active_path(key).await.unwrap(),
            Backend::Memory(store) => store.active_path(key),
        }
    }

    /// A cut made without any harness taking part.
    async fn cut(&self, key: &SessionKey, cut: &Cut, next: SessionId) {
        let status = match &self.store {
            Backend::Sql(store) => store.cut_transcript(key, cut, next).await.unwrap(),
            Backend::Memory(store) => store.cut_transcript(key, cut, next),
        };
        assert_eq!(status, CutStatus::Created);
    }

    async fn upstream_link(&self, key: &SessionKey) -> Option<String> {
        match &self.store {
            Backend::Sql(store) => store.upstream_link(key).await.unwrap(),
            Backend::Memory(store) => store.upstream_link(key),
        }
    }

    /// Changes the session entry of `key` behind the coordinator's back.
    fn edit_entry(
        &self,
        key: &SessionKey,
        edit: impl Fn(&mut HostSessionEntry) + Send + Sync + 'static,
    ) -> Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync> {
        let key = key.clone();
        let edit = Arc::new(edit);
        match self.store.clone() {
            Backend::Sql(store) => Arc::new(move || {
                let (store, key, edit) = (store.clone(), key.clone(), Arc::clone(&edit));
                Box::pin(async move {
                    let mut entry = store.session(&key).await.unwrap().unwrap();
                    edit(&mut entry);
                    let sql = format!(
                        "UPDATE host_sessions SET session_id = '{}', previous_session_id = {}, \
                         lifecycle_revision = {}, agent_harness_id = {} WHERE session_key = '{}'",
                        entry.session_id.as_str(),
                        entry
                            .previous_session_id
                            .as_ref()
                            .map_or("NULL".to_owned(), |p| format!("'{}'", p.as_str())),
                        entry.lifecycle_revision.get(),
                        entry
                            .agent_harness_id
                            .as_ref()
                            .map_or("NULL".to_owned(), |h| format!("'{}'", h.as_str())),
                        key.as_str()
                    );
                    store.connection().execute_unprepared(&sql).await.unwrap();
                })
            }),
            Backend::Memory(store) => Arc::new(move || {
                let mut entry = store.session(&key).unwrap();
                edit(&mut entry);
                store.put_host_session(entry);
                Box::pin(async {})
            }),
        }
    }

    async fn sql(&self, sql: &str) {
        self.sql_store()
            .expect("raw SQL on a SQL store")
            .connection()
            .execute_unprepared(sql)
            .await
            .unwrap();
    }
}

fn sid(id: &str) -> SessionId {
    SessionId::new(id).unwrap()
}

/// Commits and rollbacks in the log, in order.
fn effects(log: &Log) -> Vec<String> {
    entries(log)
        .into_iter()
        .filter(|e| e.starts_with("commit:") || e.starts_with("rollback:"))
        .collect()
}

async fn lifecycle_scenario_57_rewind_or_switch_commits_retire_native_context(db: Db) {
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let h = f.harness("codex", true, true);
    let hosts = f.hosts();

    let (key, t) = f.session("s57-rewind").await;
    let status = hosts.rewind(&key, t.u2, sid("s-2")).await.unwrap();
    assert_eq!(status, CutStatus::Created);
    let entry = f.entry(&key).await.unwrap();
    assert_eq!(entry.session_id, sid("s-2"));
    assert_eq!(entry.previous_session_id, Some(sid("s-1")));
    assert!(
        f.binding(&key).await.is_none(),
        "native binding cleared at the commit edge"
    );
    assert!(h.finalized());
    assert_eq!(effects(&f.log), ["commit:codex"]);
    assert_eq!(f.active_leaf(&key).await, Some(t.a1));

    // Branch switch: make a second branch without harnesses, rebind, then switch back.
    let (key, t) = f.session("s57-switch").await;
    f.cut(&key, &Cut::Rewind { to: t.u2 }, sid("s-2")).await;
    let status = hosts.switch_branch(&key, t.a2, sid("s-3")).await.unwrap();
    assert_eq!(status, CutStatus::Created);
    let entry = f.entry(&key).await.unwrap();
    assert_eq!(
        (entry.session_id, entry.previous_session_id),
        (sid("s-3"), Some(sid("s-2")))
    );
    assert!(f.binding(&key).await.is_none());
    let path: Vec<_> = f
        .active_path(&key)
        .await
        .into_iter()
        .map(|e| e.anchor)
        .collect();
    assert_eq!(path, vec![t.u1, t.a1, t.u2, t.a2]);
}

async fn lifecycle_scenario_58_cut_transaction_failure_restores_native_context(db: Db) {
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let h = f.harness("codex", true, true);
    let (key, t) = f.session("s58").await;
    let before = f.entry(&key).await;
    // The session-row change fails inside the transaction: a trigger on SQL, a failing step
    // at the same place of the memory transaction.
    let hosts = match db {
        Db::Sqlite => {
            f.sql("CREATE TRIGGER abort_rotation BEFORE UPDATE ON host_sessions BEGIN SELECT RAISE(ABORT, 'injected session-row failure'); END")
                .await;
            f.hosts()
        }
        Db::Postgres => {
            f.sql("CREATE FUNCTION abort_rotation() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'injected session-row failure'; END $$ LANGUAGE plpgsql")
                .await;
            f.sql("CREATE TRIGGER abort_rotation BEFORE UPDATE ON host_sessions FOR EACH ROW EXECUTE FUNCTION abort_rotation()")
                .await;
            f.hosts()
        }
        Db::Memory => f
            .hosts()
            .failing_before_commit("injected session-row failure"),
    };
    let err = hosts.rewind(&key, t.u2, sid("s-2")).await.unwrap_err();
    assert!(
        err.to_string().contains("injected session-row failure"),
        "{err}"
    );
    assert_eq!(f.entry(&key).await, before, "entry unchanged");
    assert!(f.binding(&key).await.is_some(), "binding restored");
    assert_eq!(effects(&f.log), ["commit:codex", "rollback:codex"]);
    assert!(!h.finalized());
}

async fn lifecycle_scenario_59_rejected_cuts_do_not_touch_native_context(db: Db) {
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let (key, t) = f.session("s59").await;
    // A second branch, made without harnesses: u1 → a1 → {u2 → a2, u2b}.
    f.cut(&key, &Cut::Rewind { to: t.u2 }, sid("s-2")).await;
    let u2b = f.append(&key, TranscriptRole::User, "u2b").await;
    let h = f.harness("codex", true, true);
    let hosts = f.hosts();
    let before = (
        f.entry(&key).await,
        f.binding(&key).await,
        f.active_leaf(&key).await,
    );
    let missing = TranscriptAnchor(i64::MAX);
    let rewinds = [
        (missing, CutStatus::MissingEntry),
        (t.a1, CutStatus::NotUserMessage),
        (t.u2, CutStatus::OffActivePath),
    ];
    for (to, expected) in rewinds {
        assert_eq!(hosts.rewind(&key, to, sid("s-x")).await.unwrap(), expected);
    }
    let switches = [
        (missing, CutStatus::MissingEntry),
        (t.a1, CutStatus::NotBranchTip),
        (u2b, CutStatus::AlreadyActive),
    ];
    for (to, expected) in switches {
        assert_eq!(
            hosts.switch_branch(&key, to, sid("s-x")).await.unwrap(),
            expected
        );
    }
    let after = (
        f.entry(&key).await,
        f.binding(&key).await,
        f.active_leaf(&key).await,
    );
    assert_eq!(after, before);
    // A session that does not exist is a typed "not found", not a missing entry.
    let nowhere = SessionKey::new(format!("{key}-nowhere")).unwrap();
    let missing = hosts.rewind(&nowhere, t.u2, sid("s-x")).await.unwrap_err();
    assert!(
        matches!(
            missing,
            Error::Host {
                kind: tether_core::HostErrorKind::SessionNotFound { .. }
            }
        ),
        "{missing:?}"
    );
    assert!(
        entries(&f.log).is_empty(),
        "no harness hook ran: {:?}",
        entries(&f.log)
    );
    assert!(!h.finalized());
}

async fn lifecycle_scenario_60_fork_leaves_the_source_native_context_intact(db: Db) {
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let h = f.harness("codex", true, true);
    let (key, t) = f.session("s60").await;
    let before = (f.entry(&key).await, f.binding(&key).await);
    let target = session_key("s60-fork");
    let status = f
        .hosts()
        .fork(&key, &t.u2, new_session(&target, "f-1"))
        .await
        .unwrap();
    assert_eq!(status, CutStatus::Created);
    assert_eq!((f.entry(&key).await, f.binding(&key).await), before);
    assert!(f.entry(&target).await.is_some());
    assert!(entries(&f.log).is_empty());
    assert!(!h.finalized());
}

async fn lifecycle_scenario_61_upstream_link_appearing_mid_cut_refuses_the_rewind(db: Db) {
    // Preparation phase: the link is adopted while the harness prepares.
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let h = f.harness("codex", true, true);
    let (key, t) = f.session("s61-prepare").await;
    let before = (
        f.entry(&key).await,
        f.binding(&key).await,
        f.active_leaf(&key).await,
    );
    let (store, link_key) = (f.store.clone(), key.clone());
    h.on_prepare(move || {
        Box::pin(async move {
            let linked = match store {
                Backend::Sql(store) => store
                    .link_upstream(&link_key, "acp:external-1")
                    .await
                    .unwrap(),
                Backend::Memory(store) => store.link_upstream(&link_key, "acp:external-1"),
            };
            assert!(linked);
        })
    });
    let err = f.hosts().rewind(&key, t.u2, sid("s-2")).await.unwrap_err();
    assert!(err.to_string().contains("external agent harness"), "{err}");
    assert_eq!(
        (
            f.entry(&key).await,
            f.binding(&key).await,
            f.active_leaf(&key).await
        ),
        before
    );
    assert!(
        effects(&f.log).is_empty(),
        "neither commit nor rollback ran"
    );

    // Commit phase: the link is adopted inside the transaction after the harness committed.
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    f.harness("codex", true, true);
    let (key, t) = f.session("s61-commit").await;
    let before = (f.entry(&key).await, f.binding(&key).await);
    // SQL: the link is written inside the transaction (and rolls back with it). Memory: a
    // third party cannot write inside the memory transaction, so the link is adopted beside
    // it, after the harness committed; the transaction still sees it before COMMIT.
    let hosts = match f.memory_store() {
        None => {
            let link_sql = format!(
                "INSERT INTO upstream_links (session_key, upstream, created_at) VALUES ('{}', 'acp:external-2', 0)",
                key.as_str()
            );
            f.hosts()
                .with_sql_hooks(TransactionHooks::new().after_mutations(
                    move |tx: &SqlHostTransaction| {
                        let sql = link_sql.clone();
                        Box::pin(async move {
                            tx.sql().execute_unprepared(&sql).await.unwrap();
                            Ok(())
                        })
                    },
                ))
        }
        Some(store) => {
            let (store, link_key) = (store.clone(), key.clone());
            f.hosts()
                .with_memory_hooks(TransactionHooks::new().after_mutations(move |_| {
                    assert!(store.link_upstream(&link_key, "acp:external-2"));
                    Box::pin(async { Ok(()) })
                }))
        }
    };
    let err = hosts.rewind(&key, t.u2, sid("s-2")).await.unwrap_err();
    assert!(err.to_string().contains("external agent harness"), "{err}");
    assert_eq!(effects(&f.log), ["commit:codex", "rollback:codex"]);
    assert_eq!(
        (f.entry(&key).await, f.binding(&key).await),
        before,
        "binding present again"
    );
    if f.db != Db::Memory {
        assert!(
            f.upstream_link(&key).await.is_none(),
            "the in-transaction link rolled back"
        );
    }
}

async fn lifecycle_scenario_62_commit_edge_generation_check(db: Db) {
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let h = f.harness("codex", true, true);

    // The session rotates while the harness prepares.
    let (key, _) = f.session("s62-rotate").await;
    let rotate = f.edit_entry(&key, |entry| {
        entry.previous_session_id = Some(std::mem::replace(&mut entry.session_id, sid("s-9")));
        entry.lifecycle_revision = entry.lifecycle_revision.next();
    });
    h.on_prepare(move || rotate());
    let err = f
        .hosts()
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::SupersededGeneration { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("Session changed before deletion: {key}")
    );
    assert!(effects(&f.log).is_empty(), "no harness commit ran");
    assert_eq!(f.entry(&key).await.unwrap().session_id, sid("s-9"));
    assert!(f.binding(&key).await.is_some());

    // Only the lifecycle revision moves.
    let (key, _) = f.session("s62-revision").await;
    let bump = f.edit_entry(&key, |entry| {
        entry.lifecycle_revision = entry.lifecycle_revision.next();
    });
    h.on_prepare(move || bump());
    let err = f
        .hosts()
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Session changed before deletion: {key}")
    );
    assert!(f.entry(&key).await.is_some());

    // Context reset: only the recorded predecessor moves.
    let (key, t) = f.session("s62-previous").await;
    let predecessor = f.edit_entry(&key, |entry| {
        entry.previous_session_id = Some(sid("s-0"));
    });
    h.on_prepare(move || predecessor());
    let err = f.hosts().rewind(&key, t.u2, sid("s-2")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("Session changed before deletion: {key}")
    );
    assert!(effects(&f.log).is_empty());
    assert!(f.binding(&key).await.is_some());
}

async fn lifecycle_scenario_63_unprepared_deletion_with_owners_present(db: Db) {
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let h = f.harness("codex", true, false);
    let (key, _) = f.session("s63").await;
    let err = f.hosts().delete_without_harnesses(&key).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert!(
        !err.is_busy() && !err.is_retryable(),
        "retrying cannot help"
    );
    assert_eq!(
        err.to_string(),
        format!("Session deletion requires prepared harness ownership: {key}")
    );
    assert!(f.entry(&key).await.is_some());
    assert!(f.registry.unregister(&h.id).is_some());
    assert!(f.hosts().delete_without_harnesses(&key).await.unwrap());
    assert!(f.entry(&key).await.is_none());
}

async fn lifecycle_scenario_64_rollback_order_and_aggregation(db: Db) {
    // Both commits ran, the transaction fails before COMMIT: rollbacks B then A.
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let a = f.harness("a-harness", true, false);
    let b = f.harness("b-harness", true, false);
    let (key, _) = f.session("s64").await;
    let err = f
        .hosts()
        .failing_before_commit("injected failure before COMMIT")
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "injected failure before COMMIT");
    assert_eq!(
        effects(&f.log),
        [
            "commit:a-harness",
            "commit:b-harness",
            "rollback:b-harness",
            "rollback:a-harness"
        ]
    );
    assert!(f.entry(&key).await.is_some());
    assert!(f.binding(&key).await.is_some());
    assert!(!a.finalized() && !b.finalized());

    // One rollback fails: an aggregate carrying the original error.
    f.log.lock().unwrap().clear();
    b.fail_rollback
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let err = f
        .hosts()
        .failing_before_commit("injected failure before COMMIT")
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap_err();
    let Error::RollbackFailed { original, failures } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(original.to_string(), "injected failure before COMMIT");
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].to_string(), "rollback of b-harness failed");
    assert!(
        err.to_string()
            .starts_with("Session deletion rollback failed"),
        "{err}"
    );
    assert_eq!(
        effects(&f.log).len(),
        4,
        "A still rolled back after B failed"
    );

    // The failure happens after COMMIT (publication): nothing is rolled back.
    f.log.lock().unwrap().clear();
    let err = f
        .hosts()
        .with_failures(None, Some("publication failed"))
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "publication failed");
    assert_eq!(effects(&f.log), ["commit:a-harness", "commit:b-harness"]);
    assert!(f.entry(&key).await.is_none(), "the deletion stands");
    assert!(f.binding(&key).await.is_none());
}

async fn lifecycle_scenario_65_competing_work_blocks_the_mutation(db: Db) {
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let h = f.harness("codex", true, true);
    let (key, t) = f.session("s65").await;
    f.runs.admit(&key);
    let err = f
        .hosts()
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CompetingWork { .. }));
    assert_eq!(
        err.to_string(),
        format!(
            "Cannot delete session while competing work is in flight for {key}; retry after the run completes"
        )
    );
    let err = f.hosts().rewind(&key, t.u2, sid("s-2")).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("Cannot mutate session while competing work is in flight"),
        "{err}"
    );
    assert!(
        entries(&f.log).is_empty(),
        "failed fast, before preparation"
    );
    f.runs.finish(&key);

    // Work admitted during preparation is caught at the commit edge.
    let (runs, k) = (f.runs.clone(), key.clone());
    h.on_prepare(move || {
        Box::pin(async move {
            runs.admit(&k);
        })
    });
    let err = f
        .hosts()
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CompetingWork { .. }), "{err:?}");
    assert!(effects(&f.log).is_empty());
    assert!(f.entry(&key).await.is_some());
    assert!(f.binding(&key).await.is_some());
}

async fn lifecycle_scenario_66_harness_owner_replaced_mid_operation(db: Db) {
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let h = f.harness("codex", true, false);
    let (key, _) = f.session("s66").await;
    let (registry, log, ns) = (Arc::clone(&f.registry), Arc::clone(&f.log), f.ns.clone());
    h.on_prepare(move || {
        Box::pin(async move {
            registry.register(RecordingHarness::new("codex", &log, &ns, true, false));
        })
    });
    let err = f
        .hosts()
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap_err();
    let Error::RollbackFailed { original, failures } = &err else {
        panic!("{err:?}")
    };
    assert!(matches!(**original, Error::OwnerChanged { .. }));
    assert_eq!(
        original.to_string(),
        "Session deletion harness owner changed: codex"
    );
    assert_eq!(failures.len(), 1);
    assert_eq!(
        failures[0].to_string(),
        "Session deletion harness owner changed: codex"
    );
    assert!(
        effects(&f.log).is_empty(),
        "the guard refused before the harness effects"
    );
    assert!(f.entry(&key).await.is_some());
    assert!(f.binding(&key).await.is_some());
    let captured = h.captured.lock().unwrap().clone().unwrap();
    assert!(captured().is_err(), "a retained assertion keeps failing");

    // After a successful operation the retained assertion is dead as well.
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let h = f.harness("codex", true, false);
    let (key, _) = f.session("s66-closed").await;
    f.hosts()
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap();
    let captured = h.captured.lock().unwrap().clone().unwrap();
    let err = captured().unwrap_err();
    assert_eq!(
        err.to_string(),
        "Session deletion harness owner changed: codex"
    );
}

/// Targets are deduplicated and sorted; owners are filtered by `agent_harness_id`; bindings go
/// with the session rows; every harness is notified after the deletion.
async fn deletion_sorts_targets_filters_owners_and_notifies_after_commit(db: Db) {
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let codex = f.harness("codex", true, false);
    f.harness("other", true, false);
    let (a, _) = f.session("del-a").await;
    let (b, _) = f.session("del-b").await;
    // Only `codex` drives both sessions.
    for key in [&a, &b] {
        f.edit_entry(key, |entry| {
            entry.agent_harness_id = Some(tether_core::HarnessId::new("codex").unwrap());
        })()
        .await;
    }
    let deleted = f
        .hosts()
        .delete_sessions(&[b.clone(), a.clone(), b.clone()])
        .await
        .unwrap();
    let mut expected = vec![a.clone(), b.clone()];
    expected.sort();
    assert_eq!(deleted, expected);
    let log = entries(&f.log);
    let prepares: Vec<_> = log
        .iter()
        .filter(|e| e.starts_with("prepare:"))
        .cloned()
        .collect();
    assert_eq!(
        prepares,
        vec![
            format!("prepare:codex:{}", expected[0]),
            format!("prepare:codex:{}", expected[1])
        ]
    );
    assert!(codex.finalized());
    assert!(f.entry(&a).await.is_none() && f.entry(&b).await.is_none());
    assert!(f.binding(&a).await.is_none() && f.binding(&b).await.is_none());
    assert!(f.active_path(&a).await.is_empty(), "transcript deleted");
    let resets = log.iter().filter(|e| e.starts_with("reset:")).count();
    assert_eq!(
        resets, 4,
        "both harnesses notified for both sessions: {log:?}"
    );
    // Notifications come after the commit (the last prepared harness finalized first).
    let last_final = log
        .iter()
        .rposition(|e| e.starts_with("finalized:"))
        .unwrap();
    let first_reset = log.iter().position(|e| e.starts_with("reset:")).unwrap();
    assert!(first_reset > last_final);
}

#[derive(Debug)]
struct TestInitialization {
    id: u64,
    current: std::sync::atomic::AtomicBool,
}

impl tether_core::InitializationHandle for TestInitialization {
    fn assert_rollback_current(&self) -> Result<(), Error> {
        if self.current.load(std::sync::atomic::Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Error::revoked(
                "initialization rollback is no longer current",
            ))
        }
    }

    fn handle_id(&self) -> u64 {
        self.id
    }
}

/// `docs/deletion-and-reset.md`, steps 1 and 3: a deletion that rolls back an initialization
/// hands the handle to the harnesses, and the owners' authority ends with the handle's.
async fn deletion_rolling_back_an_initialization_follows_its_handle(db: Db) {
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    let h = f.harness("codex", true, false);
    let (key, _) = f.session("init-ok").await;
    let init = Arc::new(TestInitialization {
        id: 7,
        current: true.into(),
    });
    let deleted = f
        .hosts()
        .delete_requests(&[DeletionRequest::new(key.clone()).with_initialization(init.clone())])
        .await
        .unwrap();
    assert_eq!(deleted, vec![key.clone()]);
    assert!(entries(&f.log).contains(&"init:codex:7".to_owned()));
    assert!(h.finalized());

    // The initialization stops being current while the harness prepares: nothing is deleted.
    let (key, _) = f.session("init-revoked").await;
    let init = Arc::new(TestInitialization {
        id: 8,
        current: true.into(),
    });
    let revoke = Arc::clone(&init);
    h.on_prepare(move || {
        Box::pin(async move {
            revoke
                .current
                .store(false, std::sync::atomic::Ordering::SeqCst);
        })
    });
    let err = f
        .hosts()
        .delete_requests(&[DeletionRequest::new(key.clone()).with_initialization(init)])
        .await
        .unwrap_err();
    let Error::RollbackFailed { original, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        original.to_string(),
        "initialization rollback is no longer current"
    );
    assert!(f.entry(&key).await.is_some());
    assert!(f.binding(&key).await.is_some());
}

/// Every pushed mutation learns how the host transaction ended: committed after COMMIT, rolled
/// back after the rollback list ran, and unknown — with no rollback — when COMMIT itself fails
/// (here a deferred foreign-key violation that SQLite reports only at COMMIT).
async fn host_transaction_settles_mutations_and_never_rolls_back_an_unknown_commit(db: Db) {
    // Committed.
    let Some(f) = Fixture::on(db).await else {
        return;
    };
    f.harness("codex", true, false);
    let (key, _) = f.session("settle-committed").await;
    f.hosts()
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap();
    let log = entries(&f.log);
    let commit = log.iter().position(|e| e == "commit:codex").unwrap();
    let settle = log
        .iter()
        .position(|e| e == "settle:committed:codex")
        .unwrap();
    assert!(commit < settle, "{log:?}");

    // Rolled back before COMMIT.
    f.log.lock().unwrap().clear();
    let (key, _) = f.session("settle-rolled-back").await;
    f.hosts()
        .failing_before_commit("injected failure before COMMIT")
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap_err();
    let settles: Vec<_> = entries(&f.log)
        .into_iter()
        .filter(|e| e.starts_with("rollback:") || e.starts_with("settle:"))
        .collect();
    assert_eq!(settles, ["rollback:codex", "settle:rolled-back:codex"]);

    // COMMIT fails: outcome unknown, nothing rolled back.
    f.log.lock().unwrap().clear();
    let (key, _) = f.session("settle-unknown").await;
    let hosts = match f.memory_store() {
        // SQL: a deferred foreign-key violation that the database reports only at COMMIT.
        None => {
            f.sql(
                "CREATE TABLE commit_guard (k TEXT REFERENCES host_sessions (session_key) DEFERRABLE INITIALLY DEFERRED)",
            )
            .await;
            f.hosts()
                .with_sql_hooks(TransactionHooks::new().after_mutations(
                    |tx: &SqlHostTransaction| {
                        Box::pin(async move {
                            tx.execute(
                                "INSERT INTO commit_guard (k) VALUES ('no-such-session')",
                                vec![],
                            )
                            .await
                            .map(|_| ())
                        })
                    },
                ))
        }
        // Memory: the binding row the transaction read changes beside it, so its COMMIT
        // refuses.
        Some(store) => {
            let (store, ns) = (store.clone(), f.ns.clone());
            let bkey = binding_key(&AgentId::new("main").unwrap(), &key);
            f.hosts()
                .with_memory_hooks(TransactionHooks::new().after_mutations(move |_| {
                    let mut row = store.raw_row(&ns, &bkey).expect("the binding row");
                    row.revision = tether_core::Revision::new(row.revision.get() + 1_000);
                    store.put_raw(&ns, &bkey, row).unwrap();
                    Box::pin(async { Ok(()) })
                }))
        }
    };
    let err = hosts
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap_err();
    assert!(err.is_outcome_unknown(), "{err:?}");
    assert!(err.to_string().contains("outcome is unknown"), "{err}");
    let log = entries(&f.log);
    assert!(log.contains(&"commit:codex".to_owned()), "{log:?}");
    assert!(log.contains(&"settle:unknown:codex".to_owned()), "{log:?}");
    assert!(
        !log.iter().any(|e| e.starts_with("rollback:")),
        "no rollback after an unknown COMMIT: {log:?}"
    );
}

on_every_backend!(
    lifecycle_scenario_57_rewind_or_switch_commits_retire_native_context,
    lifecycle_scenario_58_cut_transaction_failure_restores_native_context,
    lifecycle_scenario_59_rejected_cuts_do_not_touch_native_context,
    lifecycle_scenario_60_fork_leaves_the_source_native_context_intact,
    lifecycle_scenario_61_upstream_link_appearing_mid_cut_refuses_the_rewind,
    lifecycle_scenario_62_commit_edge_generation_check,
    lifecycle_scenario_63_unprepared_deletion_with_owners_present,
    lifecycle_scenario_64_rollback_order_and_aggregation,
    lifecycle_scenario_65_competing_work_blocks_the_mutation,
    lifecycle_scenario_66_harness_owner_replaced_mid_operation,
    deletion_sorts_targets_filters_owners_and_notifies_after_commit,
    deletion_rolling_back_an_initialization_follows_its_handle,
    host_transaction_settles_mutations_and_never_rolls_back_an_unknown_commit,
);
