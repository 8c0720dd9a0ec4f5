//! How a writer transaction ends: the one COMMIT path of the SQL store, what a failed COMMIT
//! means, and the pool rule that keeps a connection left inside a transaction out of the pool.
//!
//! A COMMIT that fails (or whose answer is lost) leaves the outcome of the writes it carried
//! unknown: SQLite may have rolled the transaction back on its own (a full disk, an I/O error)
//! or kept it open; PostgreSQL may have committed before the connection broke. The store never
//! replays such a write and never reports it as refused: it reports
//! [`StoreErrorKind::CommitFailed`] (the keyed writes turn it into
//! [`Error::OutcomeUnknown`] for their key, so the owner quarantines it), and the connection is
//! rolled back and checked before it may serve another transaction.
//!
//! The check: when a pooled connection comes back, its queued rollback is flushed and a
//! connection that still counts itself inside a transaction is closed, not reused. Without it,
//! a connection whose failed COMMIT was followed by a failed ROLLBACK (SQLite had already
//! ended the transaction) would run every later "transaction" as a savepoint inside a
//! transaction that never commits: writes acknowledged and never saved, and the write lock
//! held against every other connection.

use sea_orm::DbErr;
use tether_core::{BindingKey, Cause, Error, StoreErrorKind};

use super::group::WriteTx;
use super::{End, Store};

/// What the next COMMIT of a store does instead of its normal work (feature `test-support`),
/// for fault walks of the COMMIT itself.
#[cfg(feature = "test-support")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommitFault {
    /// The COMMIT is never sent (the transaction is rolled back) and reports a failure: the
    /// caller cannot tell this from a COMMIT that happened.
    Fail,
    /// The COMMIT happens, then reports a failure (its answer was lost).
    FailAfterCommit,
}

/// The commit faults armed on one store, consumed one per COMMIT.
#[cfg(feature = "test-support")]
#[derive(Debug, Default)]
pub(crate) struct CommitFaults(std::sync::Mutex<std::collections::VecDeque<CommitFault>>);

#[cfg(feature = "test-support")]
impl CommitFaults {
    fn next(&self) -> Option<CommitFault> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front()
    }
}

/// The error of a COMMIT that failed: the writes it carried may or may not be applied.
pub(crate) fn commit_failed(err: &dyn std::fmt::Display) -> Error {
    commit_failed_with(err, None)
}

/// [`commit_failed`] for a driver's error, kept as the error's source.
pub(crate) fn commit_failed_by(err: DbErr) -> Error {
    commit_failed_with(&err.to_string(), Some(Cause::new(err)))
}

fn commit_failed_with(err: &dyn std::fmt::Display, cause: Option<Cause>) -> Error {
    Error::store(StoreErrorKind::CommitFailed {
        message: format!(
            "{err}; the writes of this transaction may or may not be saved, and are never replayed"
        ),
        cause,
    })
}

/// A keyed write's error: a failed COMMIT becomes [`Error::OutcomeUnknown`] for `key`, so the
/// owner of the key quarantines it. Other errors pass unchanged.
pub(crate) fn for_key(key: &BindingKey, error: Error) -> Error {
    match error {
        Error::Store {
            kind: StoreErrorKind::CommitFailed { ref message, .. },
        } => Error::OutcomeUnknown {
            key: key.clone(),
            message: format!("the outcome of the write of {key} is unknown: {message}"),
            cause: Some(std::sync::Arc::new(error.clone())),
        },
        other => other,
    }
}

impl Store {
    /// Commits `tx`. A failure is [`StoreErrorKind::CommitFailed`]: the outcome is unknown,
    /// and the connection goes through the pool's release check (its rollback flushed, closed
    /// if it is still inside a transaction) before it serves anyone again.
    pub(crate) async fn commit(&self, tx: WriteTx) -> Result<(), Error> {
        // The write slot (SQLite) is freed once the COMMIT answered, never before.
        let (tx, _slot) = tx.into_parts();
        #[cfg(feature = "test-support")]
        match self.inner.commit_faults.next() {
            Some(CommitFault::Fail) => {
                if let Err(err) = tx.rollback().await {
                    tracing::warn!(error = %err, "rollback under an injected COMMIT fault failed");
                }
                return Err(commit_failed(&"injected COMMIT failure"));
            }
            Some(CommitFault::FailAfterCommit) => {
                tx.commit().await.map_err(commit_failed_by)?;
                return Err(commit_failed(&"injected failure after COMMIT"));
            }
            None => {}
        }
        tx.commit().await.map_err(|err| {
            tracing::error!(error = %err, "COMMIT failed; the outcome of its writes is unknown");
            commit_failed_by(err)
        })
    }

    /// Runs `statement`, a write statement in autocommit that stands for a COMMIT (a batch
    /// written by one statement), as [`Store::commit`] runs a COMMIT: under the commit faults
    /// armed on the store (feature `test-support`). Its error is the statement's own.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))] // PostgreSQL batches only
    pub(crate) async fn commit_alone<T>(
        &self,
        statement: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        #[cfg(feature = "test-support")]
        match self.inner.commit_faults.next() {
            Some(CommitFault::Fail) => return Err(commit_failed(&"injected COMMIT failure")),
            Some(CommitFault::FailAfterCommit) => {
                statement.await?;
                return Err(commit_failed(&"injected failure after COMMIT"));
            }
            None => {}
        }
        statement.await
    }

    /// Ends a writer transaction explicitly: commits on `Ok((value, End::Commit))` (a failed
    /// COMMIT is [`StoreErrorKind::CommitFailed`]), rolls back otherwise (an error is returned
    /// unchanged after the rollback; nothing of it was saved). Dropping a transaction rolls it
    /// back too, but only when the connection is next used.
    pub(crate) async fn finish<T>(
        &self,
        tx: WriteTx,
        result: Result<(T, End), Error>,
    ) -> Result<T, Error> {
        match result {
            Ok((value, End::Commit)) => {
                self.commit(tx).await?;
                Ok(value)
            }
            Ok((value, End::Rollback)) => {
                if let Err(err) = tx.rollback().await {
                    tracing::warn!(error = %err, "rollback of an unchanged transaction failed");
                }
                Ok(value)
            }
            Err(err) => {
                if let Err(rollback) = tx.rollback().await {
                    tracing::warn!(error = %rollback, "transaction rollback failed");
                }
                Err(err)
            }
        }
    }

    /// Arms `fault` for a coming COMMIT of this store (and of its clones): faults are consumed
    /// one per COMMIT, in the order they were armed (feature `test-support`).
    #[cfg(feature = "test-support")]
    pub fn arm_commit_fault(&self, fault: CommitFault) {
        self.inner
            .commit_faults
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push_back(fault);
    }

    /// Disarms every commit fault not yet consumed (feature `test-support`).
    #[cfg(feature = "test-support")]
    pub fn disarm_commit_faults(&self) {
        self.inner
            .commit_faults
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}

/// The pool's release check: flushes the rollback a dropped transaction queued, then keeps
/// the connection only when it is outside any transaction. A connection that is not (its
/// COMMIT and its ROLLBACK both failed) is closed, and the pool opens a fresh one.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn release_check<C>(
    conn: &mut C,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<bool, sea_orm::sqlx::Error>> + Send + '_>,
>
where
    C: sea_orm::sqlx::Connection,
{
    Box::pin(async move {
        if !conn.is_in_transaction() {
            // The common case: the connection's transactions ended (or it ran autocommit
            // statements only). Nothing to flush here: the pool pings every connection it
            // takes back right after this check.
            return Ok(true);
        }
        // A transaction dropped without its end queued its rollback: flush it, then look again.
        conn.ping().await?;
        if conn.is_in_transaction() {
            tracing::warn!(
                "a pooled connection is still inside a transaction after its rollback; closing it"
            );
            return Ok(false);
        }
        Ok(true)
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sea_orm::{ConnectionTrait, Statement, TransactionTrait};

    use super::super::{Store, StoreOptions};

    /// The release check skips its flush when the connection left no transaction behind, but
    /// a transaction dropped without its end still releases the database: its rollback is
    /// flushed when the connection goes back to the pool, not when it is next used. With one
    /// pooled connection that then sits idle, a second store on the same file (another
    /// process, say) can write at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_transaction_frees_the_sqlite_write_lock_when_its_connection_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
        let store = Store::open_with(StoreOptions::new(&url).max_connections(1))
            .await
            .unwrap();
        let other = Store::open_with(
            StoreOptions::new(&url)
                .max_connections(1)
                .busy_timeout(Duration::from_millis(200)),
        )
        .await
        .unwrap();
        let db = &store.inner.db;
        let stmt = |sql: &str| Statement::from_string(db.get_database_backend(), sql.to_owned());
        db.execute_raw(stmt("CREATE TABLE probe (n INTEGER)"))
            .await
            .unwrap();

        let tx = db.begin().await.unwrap();
        tx.execute_raw(stmt("INSERT INTO probe VALUES (1)"))
            .await
            .unwrap();
        drop(tx);
        // Give the pool's release task its turn, then write from the other store.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let odb = &other.inner.db;
        odb.execute_raw(Statement::from_string(
            odb.get_database_backend(),
            "INSERT INTO probe VALUES (2)".to_owned(),
        ))
        .await
        .expect("the dropped transaction no longer holds the write lock");

        // Nothing of the dropped transaction was kept, and the connection serves again.
        let rows = db
            .query_all_raw(stmt("SELECT n FROM probe ORDER BY n"))
            .await
            .unwrap();
        let ns: Vec<i64> = rows.iter().map(|r| r.try_get("", "n").unwrap()).collect();
        assert_eq!(ns, vec![2]);
    }
}
