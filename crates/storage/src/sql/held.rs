//! One pooled connection kept between lone statements (PostgreSQL, and SQLite files).
//!
//! A statement run on the pool checks a connection out and back in each time, and the pool
//! does real work both ways. When it takes a connection back it pings it, in a task of its
//! own (to flush a rollback a dropped transaction may have left); on PostgreSQL it pings it
//! again before handing it out. A PostgreSQL ping is a round trip to the server; a SQLite one
//! a round trip through the connection's worker thread. For an owner working alone (a lease
//! acquired, renewed or released, a `transact` under it: one conditional statement in
//! autocommit, sometimes after a lookup of the row), that work cost about a third of the
//! statement on PostgreSQL and a tenth on SQLite, on a two-core machine.
//!
//! So the store's lone statements outside any transaction (the lifecycle's single-statement
//! writes when they go alone, and row lookups: [`Store::query_one_alone`],
//! [`Store::execute_alone_sqlite`]) keep the connection they ran on for a short while
//! ([`LINGER`]): a lone statement that starts within that time after the previous one
//! completed runs on the same connection, without a checkout and without a ping. A
//! connection that is not taken again in time goes back to the pool (a task watches it), so
//! an idle store holds nothing: about [`LINGER`] after one statement, and at most about
//! `BUSY_LOOKS + 1` lingers (12 ms) after the last of a run of them, since the watch looks less
//! often at a busy connection (each look wakes a worker thread of the busy owner). Anyone
//! waiting for a pool whose every connection is busy waits at most that much longer.
//! Statements running at the same time take the kept connection one at a time and the pool for
//! the rest. An in-memory SQLite database keeps nothing: its one connection is the whole
//! database, and everyone else would wait for it.
//!
//! A SQLite file keeps two: its lone reads keep a connection of the readers' pool, its lone
//! writes the writer connection (a pool of one, see `Writer` in the parent module). A writer
//! transaction takes the writer connection back from a lone write at once
//! ([`HeldConnection::hold_off`]) instead of waiting for the linger, and while it waits for it
//! no lone write keeps it.
//!
//! What this trades on PostgreSQL: the pool's ping finds a connection the server closed (a
//! restart, an administrator's `pg_terminate_backend`) before a statement is sent on it, which
//! then runs on a fresh connection. A kept connection is not pinged, so when the server closes
//! it within the [`LINGER`] after a lone statement, the next one fails instead: with the
//! server's answer (a `FATAL` it sent before closing; nothing was applied,
//! `StoreErrorKind::Unavailable`) or, when the connection broke without one, a write as an
//! unknown outcome — the answer a write already gets when the server goes away while it runs,
//! which is where a lone write is nearly all of the time when writes follow each other that
//! closely. A statement that starts later than that uses the pool and its ping as before. A
//! SQLite connection is a handle on a local file with no peer to close it, so there the kept
//! connection trades nothing but the pool's capacity for the linger.
//!
//! [`Store::query_one_alone`]: super::Store::query_one_alone
//! [`Store::execute_alone_sqlite`]: super::Store::execute_alone_sqlite
//! [`StoreErrorKind::Unavailable`]: tether_core::StoreErrorKind::Unavailable
//!
//! Architecture Invariant: a connection is kept only after a statement on it completed; a
//! statement that failed, or whose future was dropped half-way, gives its connection back to
//! the pool, which tests it (and closes it when it is broken) before anyone uses it again.
//!
//! Architecture Invariant: a kept connection is reused only within [`LINGER`] after its last
//! statement completed; an older one goes back to the pool, and its next user gets it only
//! after the pool's checks.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use sea_orm::sea_query::Values;
use sea_orm::sqlx::pool::PoolConnection;
use sea_orm::sqlx::{self, Database, Executor, IntoArguments, Pool};
use sea_orm::{ConnAcquireErr, DbErr, QueryResult, RuntimeErr, Statement};
use sea_query_sqlx::SqlxValues;
use tokio::runtime::Handle;

/// How long a kept connection waits for the next lone statement before it goes back to the
/// pool.
const LINGER: Duration = Duration::from_millis(2);

/// While lone statements keep coming, the watch looks at the kept connection only every this
/// many lingers: each look wakes a worker thread, which cost a busy owner about a tenth of its
/// lone writes per second when it looked every linger. So a connection that was busy goes back
/// to the pool at most about `(BUSY_LOOKS + 1)` lingers after its last statement.
const BUSY_LOOKS: u32 = 5;

/// The kept connection of one store (see the module documentation).
#[derive(Debug)]
pub(crate) struct HeldConnection<DB: Database> {
    state: Arc<Mutex<Held<DB>>>,
    /// [`LINGER`], but for tests.
    linger: Duration,
}

impl<DB: Database> Default for HeldConnection<DB> {
    fn default() -> Self {
        Self::with_linger(LINGER)
    }
}

#[derive(Debug)]
struct Held<DB: Database> {
    /// The kept connection and when its last statement completed.
    conn: Option<(PoolConnection<DB>, Instant)>,
    /// How many [`HeldConnection::hold_off`] guards live: while any does, a completed
    /// statement gives its connection back instead of keeping it.
    held_off: usize,
    /// Whether a task is watching `conn` to give it back once it has lingered.
    watched: bool,
    /// How many times a connection was kept: the watch tells a busy connection from a quiet
    /// one by it.
    kept: u64,
    /// How many times a watch looked at the kept connection.
    looks: u64,
    /// The runtime the last connection was kept on.
    runtime: Option<Handle>,
}

impl<DB: Database> Default for Held<DB> {
    fn default() -> Self {
        Self {
            conn: None,
            held_off: 0,
            watched: false,
            kept: 0,
            looks: 0,
            runtime: None,
        }
    }
}

impl<DB: Database> Drop for Held<DB> {
    fn drop(&mut self) {
        let Some((conn, _)) = self.conn.take() else {
            return;
        };
        // The pool takes a connection back in a task of its own, which needs a runtime: a
        // store dropped outside one (at the end of a test's `main`, after `block_on`) gives
        // its kept connection back on the runtime it was kept on.
        let _entered = match (Handle::try_current(), &self.runtime) {
            (Err(_), Some(runtime)) => Some(runtime.enter()),
            _ => None,
        };
        drop(conn);
    }
}

impl<DB: Database> HeldConnection<DB> {
    /// A connection kept `linger` after each lone statement.
    fn with_linger(linger: Duration) -> Self {
        Self {
            state: Arc::default(),
            linger,
        }
    }

    /// The kept connection when one was kept within the linger, else one from `pool`.
    async fn checkout(&self, pool: &Pool<DB>) -> Result<PoolConnection<DB>, DbErr> {
        match self.take() {
            Some(kept) => Ok(kept),
            None => acquire(pool).await,
        }
    }

    /// Gives the kept connection (if any) back to the pool now.
    pub(crate) fn release(&self) {
        let kept = self.lock().conn.take();
        drop(kept);
    }

    /// Gives the kept connection back to the pool now and keeps none until the returned guard
    /// is dropped: for whoever is about to take a connection from a pool the kept one counts
    /// in (a transaction on the SQLite writer connection, a pool of one), which must not wait
    /// for a lone statement's linger.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // the SQLite writer connection only
    pub(crate) fn hold_off(&self) -> HoldOff<DB> {
        let kept = {
            let mut held = self.lock();
            held.held_off += 1;
            held.conn.take()
        };
        drop(kept);
        HoldOff {
            state: Arc::clone(&self.state),
        }
    }

    /// Whether a connection is kept, and when its last statement completed (tests of other
    /// modules).
    #[cfg(test)]
    pub(crate) fn lock_for_test(&self) -> Option<Instant> {
        self.lock().conn.as_ref().map(|(_, since)| *since)
    }

    fn lock(&self) -> MutexGuard<'_, Held<DB>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kept connection, when its last statement completed within the linger; an older
    /// one goes back to the pool.
    fn take(&self) -> Option<PoolConnection<DB>> {
        let (conn, since) = self.lock().conn.take()?;
        if since.elapsed() <= self.linger {
            Some(conn)
        } else {
            drop(conn);
            None
        }
    }

    /// Keeps `conn` for the next lone statement (or gives it back when one is kept already) and
    /// makes sure a task gives it back once it has lingered.
    fn keep(&self, conn: PoolConnection<DB>) {
        let mut held = self.lock();
        if held.conn.is_some() || held.held_off > 0 {
            drop(held);
            drop(conn);
            return;
        }
        held.conn = Some((conn, Instant::now()));
        held.kept = held.kept.wrapping_add(1);
        held.runtime = Handle::try_current().ok();
        if !held.watched {
            held.watched = true;
            let kept = held.kept;
            drop(held);
            tokio::spawn(watch(Arc::downgrade(&self.state), self.linger, kept));
        }
    }
}

impl<DB> HeldConnection<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    SqlxValues: IntoArguments<DB>,
    QueryResult: From<DB::Row>,
{
    /// Runs `stmt` in autocommit on the kept connection (or on a connection from `pool` when
    /// none was kept within the linger) and returns its first row, as sea-orm's
    /// `query_one_raw` does on the pool.
    ///
    /// Errors are mapped as sea-orm maps them on the pool path: no connection to be had is
    /// `DbErr::ConnectionAcquire` or `DbErr::Conn` (nothing was sent), a failed statement
    /// `DbErr::Query`.
    ///
    /// On PostgreSQL the answer comes after the server ended the statement's autocommit
    /// transaction (the driver reads on to the end of the exchange), so a write may use it. On
    /// SQLite the driver hands over the first row before the statement is reset, which is
    /// when SQLite commits: there it serves reads only, and a write goes through
    /// [`HeldConnection::execute`], which answers after the commit.
    pub(crate) async fn query_one(
        &self,
        pool: &Pool<DB>,
        mut stmt: Statement,
    ) -> Result<Option<QueryResult>, DbErr> {
        let mut conn = self.checkout(pool).await?;
        let row = bound(&mut stmt)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| DbErr::Query(RuntimeErr::SqlxError(Arc::new(e))))?;
        self.keep(conn);
        Ok(row.map(QueryResult::from))
    }

    /// Runs `stmt` in autocommit as [`HeldConnection::query_one`] does and returns every row
    /// it answered (PostgreSQL: once the server ended the statement's transaction).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))] // used by PostgreSQL batches only
    pub(crate) async fn query_all(
        &self,
        pool: &Pool<DB>,
        mut stmt: Statement,
    ) -> Result<Vec<QueryResult>, DbErr> {
        let mut conn = self.checkout(pool).await?;
        let rows = bound(&mut stmt)
            .fetch_all(&mut *conn)
            .await
            .map_err(|e| DbErr::Query(RuntimeErr::SqlxError(Arc::new(e))))?;
        self.keep(conn);
        Ok(rows.into_iter().map(QueryResult::from).collect())
    }

    /// Runs `stmt` in autocommit as [`HeldConnection::query_one`] does and returns the
    /// driver's answer (how many rows it changed), as sea-orm's `execute_raw` does on the
    /// pool; errors are `DbErr::Exec` for a failed statement.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // used by SQLite writes only
    pub(crate) async fn execute(
        &self,
        pool: &Pool<DB>,
        mut stmt: Statement,
    ) -> Result<DB::QueryResult, DbErr> {
        let mut conn = self.checkout(pool).await?;
        let done = bound(&mut stmt)
            .execute(&mut *conn)
            .await
            .map_err(|e| DbErr::Exec(RuntimeErr::SqlxError(Arc::new(e))))?;
        self.keep(conn);
        Ok(done)
    }
}

/// While it lives, the [`HeldConnection`] it came from keeps no connection
/// ([`HeldConnection::hold_off`]).
#[derive(Debug)]
#[must_use = "the connection is held off only while the guard lives"]
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))] // the SQLite writer connection only
pub(crate) struct HoldOff<DB: Database> {
    state: Arc<Mutex<Held<DB>>>,
}

impl<DB: Database> Drop for HoldOff<DB> {
    fn drop(&mut self) {
        let mut held = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        held.held_off = held.held_off.saturating_sub(1);
    }
}

/// `stmt` as a driver query (its values moved out).
fn bound<DB>(stmt: &mut Statement) -> sqlx::query::Query<'_, DB, SqlxValues>
where
    DB: Database,
    SqlxValues: IntoArguments<DB>,
{
    let values = stmt.values.take().unwrap_or(Values(Vec::new()));
    sqlx::query_with(sqlx::AssertSqlSafe(stmt.sql.as_str()), SqlxValues(values))
}

/// Gives the kept connection back to the pool once it has gone `linger` without a lone
/// statement, then ends (the next kept connection starts a new watch). `kept` is the count of
/// the keep that started it.
///
/// The first look comes `linger` after the connection was kept. A connection kept again since
/// the previous look (or taken by a statement that will keep it again) is busy: the next look
/// comes only [`BUSY_LOOKS`] lingers later. A quiet one goes back once it is `linger` old. The
/// freshness of a reused connection does not depend on the watch: a statement takes the kept
/// connection only within the linger after its last statement ([`HeldConnection::take`]).
async fn watch<DB: Database>(state: Weak<Mutex<Held<DB>>>, linger: Duration, kept: u64) {
    let mut wait = linger;
    let mut seen = kept;
    loop {
        tokio::time::sleep(wait).await;
        let Some(state) = state.upgrade() else {
            return;
        };
        let mut held = state.lock().unwrap_or_else(PoisonError::into_inner);
        held.looks += 1;
        let busy = held.kept != seen;
        seen = held.kept;
        wait = match &held.conn {
            _ if busy => linger * BUSY_LOOKS,
            Some((_, since)) => match linger.checked_sub(since.elapsed()) {
                Some(left) if !left.is_zero() => left,
                _ => Duration::ZERO,
            },
            // Taken by a statement that has not been kept since: it went back to the pool (a
            // failed statement), or a statement is still running on it.
            None => Duration::ZERO,
        };
        if !wait.is_zero() {
            continue;
        }
        let lingered = held.conn.take();
        held.watched = false;
        drop(held);
        drop(lingered);
        return;
    }
}

/// A connection from the pool, its errors mapped as sea-orm maps them.
async fn acquire<DB: Database>(pool: &Pool<DB>) -> Result<PoolConnection<DB>, DbErr> {
    pool.acquire().await.map_err(|e| match e {
        sqlx::Error::PoolTimedOut => DbErr::ConnectionAcquire(ConnAcquireErr::Timeout),
        sqlx::Error::PoolClosed => DbErr::ConnectionAcquire(ConnAcquireErr::ConnectionClosed),
        other => DbErr::Conn(RuntimeErr::SqlxError(Arc::new(other))),
    })
}

/// Waits (a bounded while) until `pool` holds `idle` idle connections.
#[cfg(all(test, any(feature = "test-support", feature = "sqlite")))]
async fn until_idle<DB: Database>(pool: &Pool<DB>, idle: usize) {
    for _ in 0..2_500 {
        if pool.num_idle() == idle {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!(
        "the pool never had {idle} idle connections (has {})",
        pool.num_idle()
    );
}

#[cfg(all(test, feature = "test-support"))]
mod postgres_tests {
    use sea_orm::sqlx::postgres::PgPoolOptions;
    use sea_orm::sqlx::{PgPool, Postgres};

    use super::*;
    use crate::testing::PgTestDatabase;

    /// The kept connection of a PostgreSQL store.
    type Held = HeldConnection<Postgres>;

    /// A pool of `size` connections on a fresh database; nothing when no server answers.
    async fn pool(label: &str, size: u32) -> Option<(PgTestDatabase, PgPool)> {
        let db = PgTestDatabase::create(label).await?;
        let pool = PgPoolOptions::new()
            .max_connections(size)
            .acquire_timeout(Duration::from_secs(5))
            .connect(db.url())
            .await
            .expect("connect");
        Some((db, pool))
    }

    /// `text` as a PostgreSQL statement without values.
    fn sql(text: &str) -> Statement {
        Statement::from_string(sea_orm::DbBackend::Postgres, text)
    }

    /// The backend process id of the connection `held` runs on (read as the store reads its
    /// rows: through sea-orm's `QueryResult`).
    async fn backend_pid(held: &Held, pool: &PgPool) -> i32 {
        let row = held
            .query_one(pool, sql("SELECT pg_backend_pid() AS pid"))
            .await
            .expect("query")
            .expect("a row");
        row.try_get("", "pid").expect("pid")
    }

    /// Ends the backend `pid` from another connection of `pool`, as an administrator would.
    async fn terminate(pool: &PgPool, pid: i32) {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(pool)
            .await
            .expect("terminate");
    }

    /// Gives the kept connection back, closes the pool (which waits for every connection) and
    /// drops the database.
    async fn finish(held: Held, pool: PgPool, db: PgTestDatabase) {
        held.release();
        pool.close().await;
        db.cleanup().await;
    }

    #[tokio::test]
    async fn lone_statements_in_quick_succession_share_one_connection_and_give_it_back() {
        let Some((db, pool)) = pool("held_reuse", 4).await else {
            return;
        };
        // A long linger, so that a slow machine cannot make the connection linger out between
        // two statements of the test.
        let held = Held::with_linger(Duration::from_millis(250));
        let first = backend_pid(&held, &pool).await;
        for _ in 0..20 {
            // Kept, not in the pool: the pool's only connection is checked out.
            assert!(held.lock().conn.is_some());
            assert_eq!((pool.size(), pool.num_idle()), (1, 0));
            assert_eq!(backend_pid(&held, &pool).await, first);
        }
        // Once it has lingered, the watch gives it back.
        until_idle(&pool, 1).await;
        assert!(held.lock().conn.is_none());
        finish(held, pool, db).await;
    }

    #[tokio::test]
    async fn a_kept_connection_older_than_the_linger_is_not_reused_unchecked() {
        let Some((db, pool)) = pool("held_stale", 4).await else {
            return;
        };
        let held = Held::default();
        let first = backend_pid(&held, &pool).await;
        // The server closes the kept connection; by the time of the next statement it has
        // lingered, so it goes back to the pool, whose ping finds it closed.
        terminate(&pool, first).await;
        tokio::time::sleep(LINGER * 5).await;
        let second = backend_pid(&held, &pool).await;
        assert_ne!(second, first);
        finish(held, pool, db).await;
    }

    #[tokio::test]
    async fn a_kept_connection_closed_by_the_server_fails_one_statement_then_is_replaced() {
        let Some((db, pool)) = pool("held_closed", 4).await else {
            return;
        };
        let held = Held::with_linger(Duration::from_secs(10));
        let first = backend_pid(&held, &pool).await;
        // Terminated from another connection while kept: the next statement within the linger
        // is sent on it and fails (the trade the module documents) ...
        terminate(&pool, first).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(held.lock().conn.is_some());
        let failed = held.query_one(&pool, sql("SELECT 1")).await;
        // The server said why before it closed the connection: its answer, not silence.
        let Err(DbErr::Query(RuntimeErr::SqlxError(e))) = &failed else {
            panic!("{failed:?}");
        };
        let sqlx::Error::Database(answer) = &**e else {
            panic!("{e:?}");
        };
        assert_eq!(answer.code().as_deref(), Some("57P01"), "{answer:?}");
        // ... and is not kept: the next one runs on a fresh connection.
        assert!(held.lock().conn.is_none());
        let second = backend_pid(&held, &pool).await;
        assert_ne!(second, first);
        finish(held, pool, db).await;
    }

    #[tokio::test]
    async fn a_failed_statement_gives_its_connection_back() {
        let Some((db, pool)) = pool("held_failed", 4).await else {
            return;
        };
        let held = Held::default();
        let error = held
            .query_one(&pool, sql("SELECT * FROM no_such_table"))
            .await
            .expect_err("no such table");
        let DbErr::Query(RuntimeErr::SqlxError(e)) = &error else {
            panic!("{error:?}");
        };
        assert!(matches!(**e, sqlx::Error::Database(_)), "{e:?}");
        assert!(held.lock().conn.is_none());
        until_idle(&pool, 1).await;
        finish(held, pool, db).await;
    }

    #[tokio::test]
    async fn a_closed_pool_is_a_refused_acquisition() {
        let Some((db, pool)) = pool("held_pool_closed", 1).await else {
            return;
        };
        pool.close().await;
        let held = Held::default();
        let error = held
            .query_one(&pool, sql("SELECT 1"))
            .await
            .expect_err("closed");
        assert!(
            matches!(
                error,
                DbErr::ConnectionAcquire(ConnAcquireErr::ConnectionClosed)
            ),
            "{error:?}"
        );
        db.cleanup().await;
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod sqlite_tests {
    use sea_orm::sqlx::sqlite::{
        SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    };
    use sea_orm::{ConnectionTrait, DbBackend, TransactionTrait};

    use super::*;
    use crate::sql::{Store, StoreOptions};

    /// A pool of `size` connections on a fresh SQLite file in WAL mode, as the store opens it.
    async fn pool(size: u32) -> (tempfile::TempDir, SqlitePool) {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("held.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        let pool = SqlitePoolOptions::new()
            .max_connections(size)
            .acquire_timeout(Duration::from_secs(5))
            .test_before_acquire(false)
            .connect_with(options)
            .await
            .expect("open");
        (dir, pool)
    }

    /// `text` as a SQLite statement without values.
    fn sql(text: &str) -> Statement {
        Statement::from_string(DbBackend::Sqlite, text)
    }

    /// A run of lone statements keeps the connection busy: the watch looks at it every
    /// `BUSY_LOOKS` lingers, not every linger (each look wakes a worker thread), and gives it
    /// back once the run ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_a_busy_kept_connection_is_looked_at_less_often() {
        let (_dir, pool) = pool(2).await;
        let linger = Duration::from_millis(20);
        let held = HeldConnection::with_linger(linger);
        held.execute(&pool, sql("CREATE TABLE t (n INTEGER)"))
            .await
            .expect("create");
        let started = Instant::now();
        let mut n = 0;
        while started.elapsed() < linger * 20 {
            n += 1;
            held.execute(&pool, sql(&format!("INSERT INTO t VALUES ({n})")))
                .await
                .expect("insert");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let looks = held.lock().looks;
        // 20 lingers of statements: one look after the first linger, then one every
        // BUSY_LOOKS (5) lingers, about 5 in all; a look every linger would be 20.
        assert!(
            looks <= 10,
            "{looks} looks at a connection busy for 20 lingers"
        );
        until_idle(&pool, 1).await;
        assert!(held.lock().conn.is_none());
        pool.close().await;
    }

    #[tokio::test]
    async fn sqlite_lone_statements_in_quick_succession_share_one_connection_and_give_it_back() {
        let (_dir, pool) = pool(4).await;
        let held = HeldConnection::with_linger(Duration::from_millis(250));
        held.execute(&pool, sql("CREATE TABLE t (n INTEGER)"))
            .await
            .expect("create");
        // A temporary table is seen only by the connection that made it: it marks the
        // connection the statements run on.
        held.execute(&pool, sql("CREATE TEMP TABLE marker (x INTEGER)"))
            .await
            .expect("marker");
        for n in 0..20 {
            assert!(held.lock().conn.is_some());
            assert_eq!((pool.size(), pool.num_idle()), (1, 0));
            let done = held
                .execute(&pool, sql(&format!("INSERT INTO t VALUES ({n})")))
                .await
                .expect("insert");
            assert_eq!(done.rows_affected(), 1);
            let row = held
                .query_one(
                    &pool,
                    sql("SELECT count(*) AS c FROM temp.sqlite_master WHERE name = 'marker'"),
                )
                .await
                .expect("query")
                .expect("a row");
            assert_eq!(row.try_get::<i64>("", "c").expect("count"), 1);
        }
        // Autocommit: every insert is in the file for the other connections.
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
            .fetch_one(&pool)
            .await
            .expect("count");
        assert_eq!(count, 20);
        // Once it has lingered, the watch gives it back.
        until_idle(&pool, 2).await;
        assert!(held.lock().conn.is_none());
        pool.close().await;
    }

    /// A pool of one whose connection a lone statement keeps: whoever holds the kept
    /// connection off gets the pool's connection at once, not after the linger, and no
    /// statement keeps it again until the guard is dropped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_held_off_the_kept_connection_goes_back_at_once_and_is_not_kept_again() {
        let (_dir, pool) = pool(1).await;
        let held = HeldConnection::with_linger(Duration::from_secs(30));
        held.execute(&pool, sql("CREATE TABLE t (n INTEGER)"))
            .await
            .expect("create");
        assert!(held.lock().conn.is_some());
        let off = held.hold_off();
        assert!(held.lock().conn.is_none());
        let conn = tokio::time::timeout(Duration::from_secs(5), pool.acquire())
            .await
            .expect("not after a 30 s linger")
            .expect("acquire");
        drop(conn);
        // A statement that completes while held off gives its connection back.
        held.execute(&pool, sql("INSERT INTO t VALUES (1)"))
            .await
            .expect("insert");
        assert!(held.lock().conn.is_none());
        tokio::time::timeout(Duration::from_secs(5), pool.acquire())
            .await
            .expect("free")
            .expect("acquire");
        drop(off);
        held.execute(&pool, sql("INSERT INTO t VALUES (2)"))
            .await
            .expect("insert");
        assert!(
            held.lock().conn.is_some(),
            "kept again once the guard is gone"
        );
        held.release();
        pool.close().await;
    }

    #[tokio::test]
    async fn sqlite_a_failed_statement_gives_its_connection_back() {
        let (_dir, pool) = pool(4).await;
        let held = HeldConnection::default();
        let error = held
            .execute(&pool, sql("INSERT INTO no_such_table VALUES (1)"))
            .await
            .expect_err("no such table");
        let DbErr::Exec(RuntimeErr::SqlxError(e)) = &error else {
            panic!("{error:?}");
        };
        assert!(matches!(**e, sqlx::Error::Database(_)), "{e:?}");
        assert!(held.lock().conn.is_none());
        until_idle(&pool, 1).await;
        pool.close().await;
    }

    /// A store on a file with one pooled connection: a transaction on the pool right after a
    /// lone read gets the connection once it has lingered; a lone write keeps the writer
    /// connection, not the pool's. An in-memory store keeps nothing.
    #[tokio::test]
    async fn sqlite_store_keeps_a_file_connection_and_hands_it_to_the_next_transaction() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display());
        let store = Store::open_with(StoreOptions::new(&url).max_connections(1))
            .await
            .expect("open");
        store
            .execute_alone_sqlite(sql("CREATE TABLE probe (n INTEGER)"))
            .await
            .expect("create");
        let file = store.inner.file_connections();
        let (held, writer) = (&file.readers_held, &file.writer);
        assert!(held.lock().conn.is_none(), "the write ran on the writer");
        assert!(writer.held.lock().conn.is_some());
        store
            .query_one_alone(sql("SELECT count(*) FROM probe"))
            .await
            .expect("read");
        assert!(held.lock().conn.is_some());
        let tx = tokio::time::timeout(Duration::from_secs(5), store.inner.db.begin())
            .await
            .expect("the kept connection went back within the linger")
            .expect("begin");
        tx.execute_raw(sql("INSERT INTO probe VALUES (1)"))
            .await
            .expect("insert");
        tx.commit().await.expect("commit");
        let changed = store
            .execute_alone_sqlite(sql("UPDATE probe SET n = 2"))
            .await
            .expect("update");
        assert_eq!(changed, 1);
        store.close().await.expect("close");

        let memory = Store::open("sqlite::memory:").await.expect("open");
        assert!(memory.inner.sqlite_file.is_none());
        memory.close().await.expect("close");
    }

    /// A store dropped outside any runtime right after a lone statement (its connection still
    /// kept) gives the connection back on the runtime it was kept on instead of panicking.
    #[test]
    fn sqlite_a_store_dropped_outside_a_runtime_gives_its_kept_connection_back() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("d.db").display());
        let store = rt.block_on(async {
            let store = Store::open_with(StoreOptions::new(&url))
                .await
                .expect("open");
            store
                .execute_alone_sqlite(sql("CREATE TABLE probe (n INTEGER)"))
                .await
                .expect("create");
            store
                .query_one_alone(sql("SELECT count(*) FROM probe"))
                .await
                .expect("read");
            store
        });
        let held = &store.inner.file_connections().readers_held;
        assert!(held.lock().conn.is_some());
        drop(store);
        drop(rt);
    }
}
