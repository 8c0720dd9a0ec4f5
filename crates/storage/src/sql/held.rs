//! PostgreSQL: one pooled connection kept between lone statements.
//!
//! A statement run on the pool checks a connection out and back in each time, and the pool
//! does real work both ways: it pings the connection before handing it out, and again, in a
//! task of its own, when it takes it back (to flush a rollback a dropped transaction may have
//! left). For an owner working alone (a lease acquired, renewed or released, a `transact`
//! under it: one conditional statement in autocommit, sometimes after a lookup of the row),
//! that work cost about a third of the statement on a two-core machine.
//!
//! So the store's lone statements outside any transaction (the lifecycle's single-statement
//! writes when they go alone, and row lookups: [`Store::query_one_alone`]) keep the connection
//! they ran on for a short while ([`LINGER`]): a lone statement that starts within that time
//! after the previous one completed runs on the same connection, without a checkout and
//! without a ping. A connection that is not taken again in time goes back to the pool (a task
//! watches it), so an idle store holds nothing, and anyone waiting for the pool waits at most
//! about that long. Statements running at the same time take the kept connection one at a
//! time and the pool for the rest.
//!
//! What this trades: the pool's ping finds a connection the server closed (a restart, an
//! administrator's `pg_terminate_backend`) before a statement is sent on it, which then runs on
//! a fresh connection. A kept connection is not pinged, so when the server closes it within the
//! [`LINGER`] after a lone statement, the next one fails instead: with the server's answer (a
//! `FATAL` it sent before closing; nothing was applied, `StoreErrorKind::Unavailable`) or, when
//! the connection broke without one, a write as an unknown outcome — the answer a write already
//! gets when the server goes away while it runs, which is where a lone write is nearly all of
//! the time when writes follow each other that closely. A statement that starts later than that
//! uses the pool and its ping as before.
//!
//! [`Store::query_one_alone`]: super::Store::query_one_alone
//! [`StoreErrorKind::Unavailable`]: tether_core::StoreErrorKind::Unavailable
//!
//! Architecture Invariant: a connection is kept only after a statement on it completed; a
//! statement that failed, or whose future was dropped half-way, gives its connection back to
//! the pool, which tests it (and closes it when it is broken) before anyone uses it again.
//!
//! Architecture Invariant: a kept connection is reused only within [`LINGER`] after its last
//! statement completed; an older one goes back to the pool, and its next user gets it only
//! after the pool's ping.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use sea_orm::sea_query::Values;
use sea_orm::sqlx::pool::PoolConnection;
use sea_orm::sqlx::{self, PgPool, Postgres};
use sea_orm::{ConnAcquireErr, DbErr, QueryResult, RuntimeErr, Statement};
use sea_query_sqlx::SqlxValues;

/// How long a kept connection waits for the next lone statement before it goes back to the
/// pool.
const LINGER: Duration = Duration::from_millis(2);

/// The kept connection of one store (see the module documentation).
#[derive(Debug)]
pub(crate) struct HeldConnection {
    state: Arc<Mutex<Held>>,
    /// [`LINGER`], but for tests.
    linger: Duration,
}

impl Default for HeldConnection {
    fn default() -> Self {
        Self::with_linger(LINGER)
    }
}

#[derive(Debug, Default)]
struct Held {
    /// The kept connection and when its last statement completed.
    conn: Option<(PoolConnection<Postgres>, Instant)>,
    /// Whether a task is watching `conn` to give it back once it has lingered.
    watched: bool,
}

impl HeldConnection {
    /// A connection kept `linger` after each lone statement.
    fn with_linger(linger: Duration) -> Self {
        Self {
            state: Arc::default(),
            linger,
        }
    }

    /// Runs `stmt` in autocommit on the kept connection (or on a connection from `pool` when
    /// none was kept within the linger) and returns its first row, as sea-orm's
    /// `query_one_raw` does on the pool.
    ///
    /// Errors are mapped as sea-orm maps them on the pool path: no connection to be had is
    /// `DbErr::ConnectionAcquire` or `DbErr::Conn` (nothing was sent), a failed statement
    /// `DbErr::Query`.
    pub(crate) async fn query_one(
        &self,
        pool: &PgPool,
        stmt: Statement,
    ) -> Result<Option<QueryResult>, DbErr> {
        let mut conn = match self.take() {
            Some(kept) => kept,
            None => acquire(pool).await?,
        };
        let values = stmt.values.unwrap_or(Values(Vec::new()));
        let row = sqlx::query_with(sqlx::AssertSqlSafe(stmt.sql.as_str()), SqlxValues(values))
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| DbErr::Query(RuntimeErr::SqlxError(Arc::new(e))))?;
        self.keep(conn);
        Ok(row.map(QueryResult::from))
    }

    /// Gives the kept connection (if any) back to the pool now.
    pub(crate) fn release(&self) {
        let kept = self.lock().conn.take();
        drop(kept);
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kept connection, when its last statement completed within the linger; an older
    /// one goes back to the pool.
    fn take(&self) -> Option<PoolConnection<Postgres>> {
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
    fn keep(&self, conn: PoolConnection<Postgres>) {
        let mut held = self.lock();
        if held.conn.is_some() {
            drop(held);
            drop(conn);
            return;
        }
        held.conn = Some((conn, Instant::now()));
        if !held.watched {
            held.watched = true;
            drop(held);
            tokio::spawn(watch(Arc::downgrade(&self.state), self.linger));
        }
    }
}

/// Gives the kept connection back to the pool once it has gone `linger` without a lone
/// statement, then ends (the next kept connection starts a new watch).
async fn watch(state: Weak<Mutex<Held>>, linger: Duration) {
    let mut wait = linger;
    loop {
        tokio::time::sleep(wait).await;
        let Some(state) = state.upgrade() else {
            return;
        };
        let mut held = state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, since)) = &held.conn
            && let Some(left) = linger.checked_sub(since.elapsed())
            && !left.is_zero()
        {
            wait = left;
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
async fn acquire(pool: &PgPool) -> Result<PoolConnection<Postgres>, DbErr> {
    pool.acquire().await.map_err(|e| match e {
        sqlx::Error::PoolTimedOut => DbErr::ConnectionAcquire(ConnAcquireErr::Timeout),
        sqlx::Error::PoolClosed => DbErr::ConnectionAcquire(ConnAcquireErr::ConnectionClosed),
        other => DbErr::Conn(RuntimeErr::SqlxError(Arc::new(other))),
    })
}

#[cfg(all(test, feature = "test-support"))]
mod tests {
    use sea_orm::sqlx::postgres::PgPoolOptions;

    use super::*;
    use crate::testing::PgTestDatabase;

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
    async fn backend_pid(held: &HeldConnection, pool: &PgPool) -> i32 {
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
    async fn finish(held: HeldConnection, pool: PgPool, db: PgTestDatabase) {
        held.release();
        pool.close().await;
        db.cleanup().await;
    }

    /// Waits (a bounded while) until the pool holds `idle` idle connections.
    async fn until_idle(pool: &PgPool, idle: usize) {
        for _ in 0..500 {
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

    #[tokio::test]
    async fn lone_statements_in_quick_succession_share_one_connection_and_give_it_back() {
        let Some((db, pool)) = pool("held_reuse", 4).await else {
            return;
        };
        // A long linger, so that a slow machine cannot make the connection linger out between
        // two statements of the test.
        let held = HeldConnection::with_linger(Duration::from_millis(500));
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
        let held = HeldConnection::default();
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
        let held = HeldConnection::with_linger(Duration::from_secs(10));
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
        let held = HeldConnection::default();
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
        let held = HeldConnection::default();
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
