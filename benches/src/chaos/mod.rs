//! The chaos drill (RELIABILITY.md, "Chaos"): worker processes share one SQLite file or one
//! PostgreSQL database; `cargo xtask chaos` starts them, SIGKILLs them at random, restarts them,
//! and finally runs the invariant checker.
//!
//! Tables of the drill (created by `--setup`, next to Tether's own):
//! - `chaos_fence(key, epoch, writer)`: the fencing target; a write is accepted only when its
//!   lease epoch is not older than the fence's, checked and advanced in the same SQL
//!   transaction as the log insert;
//! - `chaos_log(id, key, epoch, writer, seq)`: every accepted write;
//! - `chaos_rejects(key, epoch, writer)`: writes the fence refused;
//! - `chaos_sessions(session_key, writer, kind, status)`: sessions the workers created, and how
//!   their deletion, context reset or reset ended;
//! - `chaos_explained(session_key, reason)`: why a binding key was quarantined.

#[path = "check.rs"]
pub(crate) mod check;
#[path = "worker.rs"]
pub(crate) mod worker;

use std::sync::Arc;
use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend, Statement, Value as SqlValue};
use tether_core::{
    AgentId, BindingId, BindingKey, BindingStore, Clock, Error, Namespace, NamespaceConfig,
    RowWrite, SessionKey, SystemClock, Timestamp,
};
use tether_storage::{ServerClock, Store, StoreOptions};

/// The lease keys the workers contend for.
pub(crate) const KEYS: usize = 4;

/// The namespace of the contended lease keys.
pub(crate) fn lease_ns() -> Namespace {
    Namespace::new("chaos-leases").unwrap_or_else(|_| unreachable!("a valid namespace"))
}

/// The namespace of the session bindings.
pub(crate) fn session_ns() -> Namespace {
    Namespace::new("chaos-sessions").unwrap_or_else(|_| unreachable!("a valid namespace"))
}

/// The namespace of the thread bindings of the sessions the workers reset (written and read
/// through the SDK's thread-binding backend, so that its generation rules apply).
pub(crate) fn thread_ns() -> Namespace {
    Namespace::new("chaos-threads").unwrap_or_else(|_| unreachable!("a valid namespace"))
}

/// The native thread a reset session is bound to before its reset: the reset generation must
/// never continue it.
pub(crate) fn old_thread(session: &SessionKey) -> String {
    format!("old-{session}")
}

/// The prefix of the thread a turn of the reset generation binds.
pub(crate) const NEW_THREAD: &str = "new-";

/// The thread-binding hooks of the reset sessions, over `store` (leases on `clock`, labelled
/// `holder`).
pub(crate) fn thread_harness(
    store: &Store,
    clock: Arc<dyn Clock>,
    holder: &str,
) -> Result<tether_harness_sdk::hooks::ThreadBindingHarness, Error> {
    let bindings = tether_harness_sdk::backend::ThreadBindingStore::builder(
        Arc::new(store.clone()),
        thread_ns(),
    )
    .lease_config(tether_core::LeaseConfig {
        lease_duration: Duration::from_secs(3),
        wait_budget: Duration::from_secs(5),
        retry_interval: Duration::from_millis(25),
        renew_interval: Duration::from_secs(1),
    })
    .clock(clock)
    .holder(holder)
    .quarantine(Arc::new(store.clone()))
    .build()?;
    Ok(tether_harness_sdk::hooks::ThreadBindingHarness::new(
        tether_core::HarnessId::new("chaos-threads")?,
        bindings,
        tether_harness_sdk::generation::GenerationAuthority::new(Arc::new(store.clone())),
    ))
}

/// The `i`th lease key.
pub(crate) fn lease_key(i: usize) -> BindingKey {
    BindingKey::conversation(
        &BindingId::new(format!("chaos-k{i}")).unwrap_or_else(|_| unreachable!("a valid id")),
    )
}

/// The agent of every chaos session.
pub(crate) fn agent() -> AgentId {
    AgentId::new("main").unwrap_or_else(|_| unreachable!("a valid agent id"))
}

/// The binding key of a chaos session.
pub(crate) fn session_binding(session: &SessionKey) -> BindingKey {
    BindingKey::stable(&agent(), session)
}

/// Opens the shared store (the system clock: every process runs on this machine) and
/// registers the drill's namespaces with it.
pub(crate) async fn open(url: &str) -> Result<Store, Error> {
    open_with_clock(url, Arc::new(SystemClock)).await
}

async fn open_with_clock(url: &str, clock: Arc<dyn Clock>) -> Result<Store, Error> {
    let store = Store::open_with(
        StoreOptions::new(url)
            .clock(clock)
            .max_connections(4)
            .busy_timeout(Duration::from_secs(10)),
    )
    .await?;
    for ns in [lease_ns(), session_ns()] {
        store.register_namespace(NamespaceConfig::new(ns)).await?;
    }
    store
        .register_namespace(
            tether_harness_sdk::backend::ThreadBindingStore::namespace_config(thread_ns()),
        )
        .await?;
    Ok(store)
}

/// A host clock that is wrong: the system clock plus `skew` milliseconds (ahead when
/// positive, behind when negative).
#[derive(Debug)]
pub(crate) struct SkewedClock(pub(crate) i64);

impl Clock for SkewedClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(SystemClock.now().as_millis().saturating_add(self.0))
    }
}

/// The clock a worker decides leases with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClockChoice {
    /// Its own host clock (the system clock plus the skew): what `cargo xtask chaos` uses.
    Host,
    /// The database server's time ([`ServerClock`] over the host clock, resynced every 5 s):
    /// what several hosts on PostgreSQL must use.
    Server,
}

/// Opens the store of a worker whose host clock runs `skew_ms` off, deciding leases with
/// `choice`; returns the store and the clock (the lifecycle must use the same one).
pub(crate) async fn open_worker(
    url: &str,
    skew_ms: i64,
    choice: ClockChoice,
) -> Result<(Store, Arc<dyn Clock>), Error> {
    let host: Arc<dyn Clock> = if skew_ms == 0 {
        Arc::new(SystemClock)
    } else {
        Arc::new(SkewedClock(skew_ms))
    };
    match choice {
        ClockChoice::Host => Ok((open_with_clock(url, host.clone()).await?, host)),
        ClockChoice::Server => {
            let clock = ServerClock::over(host);
            let store = open_with_clock(url, Arc::new(clock.clone())).await?;
            clock.resync(&store).await?;
            tracing::info!(
                skew_ms,
                offset_ms = clock.offset_millis(),
                "server clock resynced"
            );
            // Runs as long as the process (the worker exits at its deadline).
            drop(clock.spawn_resync(store.clone(), Duration::from_secs(5)));
            Ok((store, Arc::new(clock)))
        }
    }
}

/// A statement with `?` placeholders, numbered for PostgreSQL.
pub(crate) fn stmt(store: &Store, sql: &str, values: Vec<SqlValue>) -> Statement {
    let backend = store.connection().get_database_backend();
    let sql = if backend == DbBackend::Postgres {
        let mut out = String::with_capacity(sql.len() + 8);
        let mut n = 0;
        for c in sql.chars() {
            if c == '?' {
                n += 1;
                out.push_str(&format!("${n}"));
            } else {
                out.push(c);
            }
        }
        out
    } else {
        sql.to_owned()
    };
    Statement::from_sql_and_values(backend, sql, values)
}

fn db_error(e: sea_orm::DbErr) -> Error {
    Error::other(format!("chaos SQL failed: {e}"))
}

/// Creates the drill's tables, registers the namespaces, and writes the lease keys' rows and
/// fences (idempotent).
pub(crate) async fn setup(store: &Store) -> Result<(), Error> {
    let db = store.connection();
    let id = if db.get_database_backend() == DbBackend::Postgres {
        "BIGSERIAL PRIMARY KEY"
    } else {
        "INTEGER PRIMARY KEY AUTOINCREMENT"
    };
    for sql in [
        "CREATE TABLE IF NOT EXISTS chaos_fence (key TEXT PRIMARY KEY, epoch BIGINT NOT NULL, writer TEXT NOT NULL)".to_owned(),
        format!("CREATE TABLE IF NOT EXISTS chaos_log (id {id}, key TEXT NOT NULL, epoch BIGINT NOT NULL, writer TEXT NOT NULL, seq BIGINT NOT NULL)"),
        "CREATE TABLE IF NOT EXISTS chaos_rejects (key TEXT NOT NULL, epoch BIGINT NOT NULL, writer TEXT NOT NULL)".to_owned(),
        "CREATE TABLE IF NOT EXISTS chaos_sessions (session_key TEXT PRIMARY KEY, writer TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL)".to_owned(),
        "CREATE TABLE IF NOT EXISTS chaos_explained (session_key TEXT PRIMARY KEY, reason TEXT NOT NULL)".to_owned(),
    ] {
        db.execute_unprepared(&sql).await.map_err(db_error)?;
    }
    for i in 0..KEYS {
        let key = lease_key(i);
        db.execute_raw(stmt(
            store,
            "INSERT INTO chaos_fence (key, epoch, writer) VALUES (?, 0, '') ON CONFLICT DO NOTHING",
            vec![key.as_str().into()],
        ))
        .await
        .map_err(db_error)?;
        let row = RowWrite {
            value: br#"{"writer":"setup","seq":0}"#.to_vec(),
            lease: None,
        };
        store
            .register_if_absent(&lease_ns(), &key, row, None)
            .await?;
    }
    Ok(())
}
