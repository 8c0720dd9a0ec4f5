//! The quarantine contract on the SQL store: durable records of keys whose last write has an
//! unknown outcome, kept until an operator releases them.

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, QueryResult, Value};
use tether_core::{BindingKey, Error, Namespace, QuarantineEntry, QuarantineStore, Timestamp};

use super::{End, Store, db_error, to_i64};
use crate::plan;

pub(crate) fn decode_quarantine(r: &QueryResult) -> Result<QuarantineEntry, Error> {
    let ns: String = r.try_get("", "namespace").map_err(db_error)?;
    let key: String = r.try_get("", "key").map_err(db_error)?;
    Ok(QuarantineEntry {
        namespace: Namespace::new(ns)?,
        key: BindingKey::parse(&key)?,
        reason: r.try_get("", "reason").map_err(db_error)?,
        custody: r.try_get("", "custody").map_err(db_error)?,
        quarantined_at: Timestamp::from_millis(r.try_get("", "quarantined_at").map_err(db_error)?),
    })
}

#[async_trait]
impl QuarantineStore for Store {
    async fn quarantine(&self, entry: QuarantineEntry) -> Result<(), Error> {
        plan::check_quarantine(&entry)?;
        let tx = self.begin_write().await?;
        let result = tx
            .execute_raw(self.stmt(
                "INSERT INTO quarantined_keys (namespace, key, reason, custody, quarantined_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (namespace, key) DO NOTHING",
                vec![
                    entry.namespace.as_str().into(),
                    entry.key.as_str().into(),
                    entry.reason.into(),
                    Value::from(entry.custody),
                    entry.quarantined_at.as_millis().into(),
                ],
            ))
            .await
            .map(|_| ((), End::Commit))
            .map_err(db_error);
        self.finish(tx, result).await
    }

    async fn quarantined(
        &self,
        ns: &Namespace,
        key: &BindingKey,
    ) -> Result<Option<QuarantineEntry>, Error> {
        let found = self
            .inner
            .db
            .query_one_raw(self.stmt(
                "SELECT namespace, key, reason, custody, quarantined_at FROM quarantined_keys \
                 WHERE namespace = $1 AND key = $2",
                vec![ns.as_str().into(), key.as_str().into()],
            ))
            .await
            .map_err(db_error)?;
        found.as_ref().map(decode_quarantine).transpose()
    }

    async fn release_quarantine(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        operator_reason: &str,
    ) -> Result<bool, Error> {
        tether_core::text::check_reason("operator reason", operator_reason)?;
        let tx = self.begin_write().await?;
        let result = tx
            .execute_raw(self.stmt(
                "DELETE FROM quarantined_keys WHERE namespace = $1 AND key = $2",
                vec![ns.as_str().into(), key.as_str().into()],
            ))
            .await
            .map(|r| (r.rows_affected(), End::Commit))
            .map_err(db_error);
        let affected = self.finish(tx, result).await?;
        tracing::info!(namespace = %ns, key = %key, operator_reason, released = affected > 0, "quarantine released");
        Ok(affected > 0)
    }
}

impl Store {
    pub(super) async fn quarantined_keys_in(
        &self,
        limit: usize,
    ) -> Result<Vec<QuarantineEntry>, Error> {
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                "SELECT namespace, key, reason, custody, quarantined_at FROM quarantined_keys \
                 ORDER BY quarantined_at, namespace, key LIMIT $1",
                vec![to_i64(limit as u64).into()],
            ))
            .await
            .map_err(db_error)?;
        rows.iter().map(decode_quarantine).collect()
    }
}
