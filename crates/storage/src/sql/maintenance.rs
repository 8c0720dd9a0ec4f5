//! The maintenance contract on the SQL store ([`StoreAdmin`]): the lease event log, the sweep of
//! expired rows, pruning, and the quarantined keys.

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, DatabaseTransaction, Value};
use tether_core::{BindingKey, Error, LeaseEpoch, Namespace, QuarantineEntry, Timestamp};

use super::admin_read::{KEY_EVENTS_AFTER, select_lease_events};
use super::{End, Store, db_error, to_i64};
use crate::admin::StoreAdmin;
use crate::events::{LeaseEvent, LeaseEventKind, LeaseEventQuery, PendingEvent};

#[async_trait]
impl StoreAdmin for Store {
    async fn lease_events(&self, query: &LeaseEventQuery) -> Result<Vec<LeaseEvent>, Error> {
        // One key's events read the key's range of the event index; other queries filter the
        // log in id order.
        let sql = if query.namespace.is_some() && query.key.is_some() {
            KEY_EVENTS_AFTER
        } else {
            select_lease_events!(
                "WHERE ($1 IS NULL OR namespace = $1) AND ($2 IS NULL OR key = $2) \
                 AND id > $3 ORDER BY id LIMIT $4"
            )
        };
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                sql,
                vec![
                    Value::from(query.namespace.as_ref().map(|n| n.as_str().to_owned())),
                    Value::from(query.key.as_ref().map(|k| k.as_str().to_owned())),
                    to_i64(query.after.unwrap_or(0)).into(),
                    to_i64(query.limit as u64).into(),
                ],
            ))
            .await
            .map_err(db_error)?;
        rows.iter().map(super::admin_read::decode_event).collect()
    }

    async fn sweep_expired(&self, limit: usize) -> Result<usize, Error> {
        let tx = self.begin_write().await?;
        let result = self.sweep_in(&tx, limit).await.map(|n| (n, End::Commit));
        self.finish(tx, result).await
    }

    async fn prune_lease_events(&self, before: Timestamp) -> Result<u64, Error> {
        let tx = self.begin_write().await?;
        let result = tx
            .execute_raw(self.stmt(
                "DELETE FROM lease_events WHERE at < $1",
                vec![before.as_millis().into()],
            ))
            .await
            .map(|r| (r.rows_affected(), End::Commit))
            .map_err(db_error);
        self.finish(tx, result).await
    }

    async fn quarantined_keys(&self, limit: usize) -> Result<Vec<QuarantineEntry>, Error> {
        self.quarantined_keys_in(limit).await
    }
}

impl Store {
    async fn sweep_in(&self, tx: &DatabaseTransaction, limit: usize) -> Result<usize, Error> {
        let now = self.now();
        let removed = tx
            .query_all_raw(self.stmt(
                "DELETE FROM binding_records WHERE (namespace, key) IN (\
                   SELECT namespace, key FROM binding_records \
                   WHERE expires_at IS NOT NULL AND expires_at <= $1 ORDER BY expires_at LIMIT $2) \
                 RETURNING namespace, key, lease_token, lease_epoch, holder",
                vec![now.as_millis().into(), to_i64(limit as u64).into()],
            ))
            .await
            .map_err(db_error)?;
        for r in &removed {
            let token: Option<String> = r.try_get("", "lease_token").map_err(db_error)?;
            let Some(token) = token else { continue };
            let ns: String = r.try_get("", "namespace").map_err(db_error)?;
            let key: String = r.try_get("", "key").map_err(db_error)?;
            let epoch: Option<i64> = r.try_get("", "lease_epoch").map_err(db_error)?;
            let event = PendingEvent {
                kind: LeaseEventKind::Expired,
                epoch: epoch
                    .and_then(|e| u64::try_from(e).ok())
                    .map(LeaseEpoch::new),
                token_prefix: Some(token.chars().take(8).collect()),
                other_token_prefix: None,
                holder: r.try_get("", "holder").map_err(db_error)?,
            };
            self.insert_event(
                tx,
                &Namespace::new(ns)?,
                &BindingKey::parse(&key)?,
                now,
                Some(event),
                None,
            )
            .await?;
        }
        Ok(removed.len())
    }
}
