//! Binding-row operations bound to an open SQL transaction (the decision in
//! `docs/deletion-and-reset.md`: deletion commits inside the host's transaction).

use std::time::{Duration, Instant};

use async_trait::async_trait;
use sea_orm::DatabaseTransaction;
use tether_core::{
    BindingKey, Error, Namespace, RowPredicate, RowTransaction, RowWrite, StoredRow,
};

use super::Store;
use super::binding::WriteTime;
use crate::plan;

/// The [`RowTransaction`] a harness's deletion `commit` runs through: its binding rows change
/// inside the host's SQL transaction and disappear atomically with the session row.
///
/// Inside `commit`, change rows of this database only through this view: on SQLite the host
/// transaction holds the write lock (`BEGIN IMMEDIATE`), so a write through the store itself
/// would wait for the busy timeout and fail (with `sqlite::memory:` there is a single
/// connection, so it would wait for a pooled connection instead).
#[derive(Debug)]
pub struct SqlRowTransaction<'a> {
    store: &'a Store,
    tx: &'a DatabaseTransaction,
}

impl<'a> SqlRowTransaction<'a> {
    /// A view of `store`'s binding rows inside `tx`.
    pub fn new(store: &'a Store, tx: &'a DatabaseTransaction) -> Self {
        Self { store, tx }
    }
}

#[async_trait]
impl RowTransaction for SqlRowTransaction<'_> {
    async fn lookup(&self, ns: &Namespace, key: &BindingKey) -> Result<Option<StoredRow>, Error> {
        self.store.config(ns)?;
        let now = self.store.clock().now();
        Ok(self
            .store
            .physical_row(self.tx, ns, key)
            .await?
            .filter(|r| plan::row_is_live(r, now)))
    }

    async fn delete_if(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error> {
        self.store.config(ns)?;
        let now = self.store.clock().now();
        let live = self
            .store
            .physical_row(self.tx, ns, key)
            .await?
            .filter(|r| plan::row_is_live(r, now));
        match live {
            Some(row) if predicate(&row) => {
                let deleted = self.store.delete_tx(self.tx, ns, key, &row, now).await?;
                Ok(deleted.then_some(row))
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
        let config = self.store.config(ns)?;
        let now = self.store.clock().now();
        let physical = self.store.physical(self.tx, ns, key).await?;
        if physical
            .as_ref()
            .is_some_and(|p| plan::row_is_live(&p.row, now))
        {
            return Ok(false);
        }
        Ok(self
            .store
            .set_tx(
                self.tx,
                &config,
                key,
                physical.as_ref(),
                row,
                ttl,
                WriteTime::new(Instant::now(), now),
            )
            .await?
            .is_some())
    }
}
