//! The host's own writes inside Tether's deletion transaction.
//!
//! A host deletes its sessions through [`HostSessions::delete_sessions_with`](super::HostSessions::delete_sessions_with)
//! and passes a closure that receives a [`HostTransaction`]: the very SQL transaction in which
//! the harnesses' prepared mutations commit and the session rows disappear. Whatever the host
//! writes there (its own tables, audit rows) commits or rolls back with them: a failure of the
//! host's writes rolls back the SQL transaction and then every harness mutation, newest first.

use std::sync::Arc;

use sea_orm::{ConnectionTrait as _, DatabaseTransaction, DbBackend, Value};
use tether_core::{BoxFuture, Error, HostSessionEntry};

use crate::sql::{Store, db_error};

/// The open SQL transaction of a host-session deletion, lent to the host's own writes.
///
/// Statements use `$1, $2, …` placeholders on every backend (Tether rewrites them for
/// SQLite). For anything beyond [`execute`](Self::execute), [`sql`](Self::sql) is the
/// sea-orm transaction itself, of the sea-orm version re-exported as `tether_storage::sea_orm`.
#[derive(Clone, Copy)]
pub struct HostTransaction<'a> {
    store: &'a Store,
    tx: &'a DatabaseTransaction,
}

impl std::fmt::Debug for HostTransaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostTransaction")
            .field("backend", &self.backend())
            .finish_non_exhaustive()
    }
}

impl<'a> HostTransaction<'a> {
    pub(crate) fn new(store: &'a Store, tx: &'a DatabaseTransaction) -> Self {
        Self { store, tx }
    }

    /// The database backend (SQLite or PostgreSQL), for backend-specific SQL.
    pub fn backend(&self) -> DbBackend {
        self.store.backend()
    }

    /// Runs one statement with `$n` placeholders bound to `values`; returns the rows affected.
    /// A failure is a typed store error and fails the whole deletion before COMMIT.
    pub async fn execute(&self, sql: &str, values: Vec<Value>) -> Result<u64, Error> {
        self.tx
            .execute_raw(self.store.stmt(sql, values))
            .await
            .map(|r| r.rows_affected())
            .map_err(db_error)
    }

    /// The sea-orm transaction, for queries [`execute`](Self::execute) does not cover.
    pub fn sql(&self) -> &'a DatabaseTransaction {
        self.tx
    }

    /// Removes the binding rows of `entry` (both key shapes, every namespace) in this
    /// transaction, for a deletion with no harness registered to own them (an operator's
    /// deletion). Refused with [`Error::MutationBlocked`], changing nothing, while one of them
    /// holds a live lease. Returns how many rows were removed.
    pub async fn delete_unowned_bindings(&self, entry: &HostSessionEntry) -> Result<usize, Error> {
        self.store.delete_session_bindings_in(self.tx, entry).await
    }
}

/// The host's writes of one deletion: called once, inside the transaction, after the harnesses
/// committed and before the session rows are removed, with the sessions being deleted.
pub(crate) type HostWrites = Arc<
    dyn for<'a> Fn(HostTransaction<'a>, &'a [HostSessionEntry]) -> BoxFuture<'a, Result<(), Error>>
        + Send
        + Sync,
>;
