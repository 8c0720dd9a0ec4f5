//! The SQL store's side of the host port: [`SqlHostTransaction`], one SQL transaction in which
//! the harnesses' binding rows, the host's own tables and the session rows change together.

use std::time::Duration;

use async_trait::async_trait;
use sea_orm::{ConnectionTrait as _, DatabaseTransaction, DbBackend, Value};
use tether_core::{
    BindingKey, Error, GenerationChange, HostSessionEntry, Namespace, RowPredicate, RowTransaction,
    RowWrite, SessionId, SessionKey, StoredRow, TranscriptAnchor,
};

use super::group::WriteTx;
use super::{SqlRowTransaction, Store, db_error};
use crate::port::{HostBackend, HostTransaction};
use crate::transcript::{Cut, CutStatus, NewHostSession};

/// The open SQL transaction of a host operation (deletion, context reset).
///
/// Besides the [`HostTransaction`] port it runs the host's own statements: a host deleting its
/// sessions through `tether_host::HostSessions::delete_sessions_with` receives this
/// transaction, and whatever it writes commits or rolls back with the deletion.
///
/// Statements use `$1, $2, …` placeholders on every backend (Tether rewrites them for SQLite).
/// On SQLite the transaction holds the database's write lock (`BEGIN IMMEDIATE`): inside it,
/// write through this transaction only, never through the store itself.
pub struct SqlHostTransaction {
    store: Store,
    tx: WriteTx,
}

impl std::fmt::Debug for SqlHostTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlHostTransaction")
            .field("backend", &self.backend())
            .finish_non_exhaustive()
    }
}

impl SqlHostTransaction {
    /// The session row of `entry` as this transaction sees it, when it is still at `entry`'s
    /// generation and lifecycle revision.
    async fn current_row(
        &self,
        entry: &HostSessionEntry,
    ) -> Result<Option<super::host::SessionRow>, Error> {
        Ok(self
            .store
            .session_row(&*self.tx, &entry.session_key)
            .await?
            .filter(|row| {
                row.entry.session_id == entry.session_id
                    && row.entry.lifecycle_revision == entry.lifecycle_revision
            }))
    }

    /// The database backend (SQLite or PostgreSQL), for backend-specific SQL.
    pub fn backend(&self) -> DbBackend {
        self.store.backend()
    }

    /// Runs one statement with `$n` placeholders bound to `values`; returns the rows affected.
    /// A failure is a typed store error and fails the whole operation before COMMIT.
    pub async fn execute(&self, sql: &str, values: Vec<Value>) -> Result<u64, Error> {
        self.tx
            .execute_raw(self.store.stmt(sql, values))
            .await
            .map(|r| r.rows_affected())
            .map_err(super::host_statement_error)
    }

    /// The transaction itself, for queries [`execute`](Self::execute) does not cover (of the
    /// sea-orm version re-exported as `tether_storage::sea_orm`).
    pub fn sql(&self) -> &DatabaseTransaction {
        &self.tx
    }

    fn rows(&self) -> SqlRowTransaction<'_> {
        SqlRowTransaction::new(&self.store, &self.tx)
    }
}

#[async_trait]
impl RowTransaction for SqlHostTransaction {
    async fn lookup(&self, ns: &Namespace, key: &BindingKey) -> Result<Option<StoredRow>, Error> {
        self.rows().lookup(ns, key).await
    }

    async fn delete_if(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error> {
        self.rows().delete_if(ns, key, predicate).await
    }

    async fn register_if_absent(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        row: RowWrite,
        ttl: Option<Duration>,
    ) -> Result<bool, Error> {
        self.rows().register_if_absent(ns, key, row, ttl).await
    }
}

#[async_trait]
impl HostTransaction for SqlHostTransaction {
    async fn session(&self, key: &SessionKey) -> Result<Option<HostSessionEntry>, Error> {
        Ok(self
            .store
            .session_row(&*self.tx, key)
            .await?
            .map(|row| row.entry))
    }

    async fn check_cut(&self, key: &SessionKey, cut: &Cut) -> Result<Result<(), CutStatus>, Error> {
        let Some(row) = self.store.session_row(&*self.tx, key).await? else {
            return Ok(Err(CutStatus::MissingEntry));
        };
        Ok(self
            .store
            .plan_cut_in(&*self.tx, &row, cut)
            .await?
            .map(|_| ()))
    }

    async fn upstream_link(&self, key: &SessionKey) -> Result<Option<String>, Error> {
        self.store.upstream_link_in(&*self.tx, key).await
    }

    async fn delete_session(&self, entry: &HostSessionEntry) -> Result<bool, Error> {
        self.store.delete_session_in(&self.tx, entry).await
    }

    async fn apply_cut(
        &self,
        entry: &HostSessionEntry,
        cut: &Cut,
        next: &SessionId,
    ) -> Result<bool, Error> {
        let Some(row) = self.current_row(entry).await? else {
            return Ok(false);
        };
        let Ok(leaf) = self.store.plan_cut_in(&*self.tx, &row, cut).await? else {
            return Ok(false);
        };
        Ok(self
            .store
            .rotate_in(&self.tx, &row.entry, next, GenerationChange::Cut, leaf)
            .await?
            .is_some())
    }

    async fn rotate_session(
        &self,
        entry: &HostSessionEntry,
        next: &SessionId,
        change: GenerationChange,
    ) -> Result<Option<HostSessionEntry>, Error> {
        let Some(row) = self.current_row(entry).await? else {
            return Ok(None);
        };
        self.store
            .rotate_in(&self.tx, &row.entry, next, change, row.active_leaf)
            .await
    }

    async fn delete_unowned_bindings(&self, entry: &HostSessionEntry) -> Result<usize, Error> {
        self.store.delete_session_bindings_in(&self.tx, entry).await
    }

    fn row_tx(&self) -> &dyn RowTransaction {
        self
    }

    async fn commit(self) -> Result<(), Error> {
        self.store.commit(self.tx).await
    }

    async fn rollback(self) -> Result<(), Error> {
        self.tx.rollback().await.map_err(db_error)
    }
}

#[async_trait]
impl HostBackend for Store {
    type Transaction = SqlHostTransaction;

    async fn begin_host(&self) -> Result<SqlHostTransaction, Error> {
        Ok(SqlHostTransaction {
            store: self.clone(),
            tx: self.begin_write().await?,
        })
    }

    async fn host_session(&self, key: &SessionKey) -> Result<Option<HostSessionEntry>, Error> {
        self.session(key).await
    }

    async fn check_host_cut(
        &self,
        key: &SessionKey,
        cut: &Cut,
    ) -> Result<Result<HostSessionEntry, CutStatus>, Error> {
        let db = self.connection();
        let Some(row) = self.session_row(db, key).await? else {
            return Err(Error::session_not_found(key));
        };
        Ok(self.plan_cut_in(db, &row, cut).await?.map(|_| row.entry))
    }

    async fn host_upstream_link(&self, key: &SessionKey) -> Result<Option<String>, Error> {
        self.upstream_link(key).await
    }

    async fn fork_host_session(
        &self,
        source: &SessionKey,
        at: &TranscriptAnchor,
        new: NewHostSession,
    ) -> Result<CutStatus, Error> {
        self.fork_session(source, at, new).await
    }
}
