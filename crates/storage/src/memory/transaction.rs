//! A staged transaction over the memory store's binding rows, for deletion commits.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tether_core::{
    BindingKey, Comparison, Error, Namespace, Revision, RowPredicate, RowTransaction, RowWrite,
    StoredRow,
};

use super::MemoryStore;
use crate::plan;

type RowId = (Namespace, BindingKey);

#[derive(Debug)]
enum Op {
    Delete(RowId),
    Register(RowId, RowWrite, Option<Duration>),
}

#[derive(Debug, Default)]
struct Staged {
    ops: Vec<Op>,
    /// The comparison of each row when the transaction first read it.
    base: BTreeMap<RowId, Comparison>,
    /// The rows as the transaction sees them after its own staged writes.
    view: BTreeMap<RowId, Option<StoredRow>>,
}

/// Binding-row operations staged against a [`MemoryStore`] and applied atomically by
/// [`commit`](MemoryTransaction::commit).
///
/// Reads see the transaction's own staged writes. At commit every row the transaction read must
/// still match what it read; otherwise nothing is applied and an error is returned. Dropping the
/// transaction (or calling [`rollback`](MemoryTransaction::rollback)) discards everything.
///
/// A row staged by `register_if_absent` reads back with revision 0 until commit assigns its real
/// revision and lease epoch.
#[derive(Debug)]
pub struct MemoryTransaction {
    store: MemoryStore,
    staged: Mutex<Staged>,
}

impl MemoryTransaction {
    pub(crate) fn new(store: MemoryStore) -> Self {
        Self {
            store,
            staged: Mutex::new(Staged::default()),
        }
    }

    fn staged(&self) -> std::sync::MutexGuard<'_, Staged> {
        self.staged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Number of staged writes.
    pub fn staged_writes(&self) -> usize {
        self.staged().ops.len()
    }

    fn current(&self, staged: &mut Staged, id: &RowId) -> Result<Option<StoredRow>, Error> {
        if let Some(row) = staged.view.get(id) {
            return Ok(row.clone());
        }
        let now = self.store.now();
        let state = self.store.state();
        state.config(&id.0)?;
        let row = state.live(&id.0, &id.1, now).cloned();
        staged
            .base
            .entry(id.clone())
            .or_insert_with(|| Comparison::for_row(row.as_ref()));
        Ok(row)
    }

    /// Applies every staged write at once, or nothing.
    pub fn commit(self) -> Result<(), Error> {
        self.commit_with(|_, _| Ok(()))
    }

    /// Applies every staged write and `also` (the host session changes of the same
    /// transaction) at once, or nothing: `also` runs on a copy of the state that replaces the
    /// store's only when everything succeeded.
    pub(crate) fn commit_with(
        self,
        also: impl FnOnce(&mut super::state::State, tether_core::Timestamp) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let staged = self
            .staged
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = self.store.now();
        let mut state = self.store.state();
        for ((ns, key), base) in &staged.base {
            if Comparison::for_row(state.live(ns, key, now)) != *base {
                return Err(Error::other(format!(
                    "binding row {key} in namespace {ns} changed since the transaction read it; nothing was committed"
                )));
            }
        }
        let mut next = state.clone();
        for op in staged.ops {
            match op {
                Op::Delete((ns, key)) => {
                    next.delete(&ns, &key, now);
                }
                Op::Register((ns, key), row, ttl) => {
                    next.set(&ns, &key, row, ttl, now)?;
                }
            }
        }
        also(&mut next, now)?;
        *state = next;
        Ok(())
    }

    /// Discards every staged write.
    pub fn rollback(self) {
        drop(self);
    }
}

#[async_trait]
impl RowTransaction for MemoryTransaction {
    async fn lookup(&self, ns: &Namespace, key: &BindingKey) -> Result<Option<StoredRow>, Error> {
        let mut staged = self.staged();
        self.current(&mut staged, &(ns.clone(), key.clone()))
    }

    async fn delete_if(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error> {
        let id = (ns.clone(), key.clone());
        let mut staged = self.staged();
        match self.current(&mut staged, &id)? {
            Some(row) if predicate(&row) => {
                staged.ops.push(Op::Delete(id.clone()));
                staged.view.insert(id, None);
                Ok(Some(row))
            }
            _ => Ok(None),
        }
    }

    async fn register_if_absent(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        row: RowWrite,
        ttl: Option<Duration>,
    ) -> Result<bool, Error> {
        let id = (ns.clone(), key.clone());
        let mut staged = self.staged();
        if self.current(&mut staged, &id)?.is_some() {
            return Ok(false);
        }
        let now = self.store.now();
        let config = self.store.state().config(ns)?.clone();
        plan::check_write(&config, &row)?;
        let expires_at = plan::row_expiry(&config, ttl, now);
        let placeholder_epoch = row.lease.as_ref().map(|_| tether_core::LeaseEpoch::new(0));
        let view = plan::plan_set(
            None,
            row.clone(),
            expires_at,
            now,
            Revision::new(0),
            placeholder_epoch,
        )?;
        staged.ops.push(Op::Register(id.clone(), row, ttl));
        staged.view.insert(id, Some(view.row));
        Ok(true)
    }
}
