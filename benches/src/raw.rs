//! The raw baselines: single conditional statements on the store's own `binding_records` table,
//! through the store's own driver and pool ([`Store::connection`]), and bulk seeding.

use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};
use tether_core::{BindingId, BindingKey, Error};
use tether_storage::Store;

use crate::stores::namespace;

/// The key of the `i`-th benchmark binding with `prefix`.
pub fn bench_key(prefix: &str, i: u64) -> BindingKey {
    let id = BindingId::new(format!("{prefix}-{i:08}"))
        .unwrap_or_else(|_| unreachable!("a valid binding id"));
    BindingKey::conversation(&id)
}

/// A statement written with `$n` placeholders in order of appearance, for `store`'s backend.
pub fn statement(store: &Store, sql: &str, values: Vec<Value>) -> Statement {
    let backend = store.backend();
    let sql = match backend {
        DbBackend::Postgres => sql.to_owned(),
        _ => rewrite_placeholders(sql),
    };
    Statement::from_sql_and_values(backend, sql, values)
}

/// `$1`, `$2`, … become `?` (SQLite binds positionally).
fn rewrite_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            while chars.peek().is_some_and(char::is_ascii_digit) {
                chars.next();
            }
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

fn backend_error(err: sea_orm::DbErr) -> Error {
    Error::other(format!("raw baseline statement failed: {err}"))
}

/// A row written and updated only by raw conditional statements.
#[derive(Debug, Clone)]
pub struct RawRow {
    key: BindingKey,
    revision: i64,
}

impl RawRow {
    /// Inserts the row `key` with `value` at revision 1 (plain insert, no lease).
    pub async fn seed(store: &Store, key: BindingKey, value: &[u8]) -> Result<Self, Error> {
        store
            .connection()
            .execute_raw(statement(
                store,
                "INSERT INTO binding_records (namespace, key, value, revision, created_at) \
                 VALUES ($1, $2, $3, 1, 0)",
                vec![
                    namespace().as_str().into(),
                    key.as_str().into(),
                    value.to_vec().into(),
                ],
            ))
            .await
            .map_err(backend_error)?;
        Ok(Self { key, revision: 1 })
    }

    /// The raw compare-and-swap: `UPDATE … SET value, revision WHERE key = ? AND revision = ?`
    /// in autocommit; fails unless exactly one row changed.
    pub async fn cas_update(&mut self, store: &Store, value: &[u8]) -> Result<(), Error> {
        let next = self.revision + 1;
        let affected = store
            .connection()
            .execute_raw(statement(
                store,
                "UPDATE binding_records SET value = $1, revision = $2 \
                 WHERE namespace = $3 AND key = $4 AND revision = $5",
                vec![
                    value.to_vec().into(),
                    next.into(),
                    namespace().as_str().into(),
                    self.key.as_str().into(),
                    self.revision.into(),
                ],
            ))
            .await
            .map_err(backend_error)?
            .rows_affected();
        self.expect_one(affected)?;
        self.revision = next;
        Ok(())
    }

    /// The raw lease cycle: a conditional acquire (token, epoch, expiry) then a conditional
    /// release, two autocommit statements.
    pub async fn acquire_release(
        &mut self,
        store: &Store,
        token: &str,
        expires_at_ms: i64,
    ) -> Result<(), Error> {
        let acquired = self.revision + 1;
        let affected = store
            .connection()
            .execute_raw(statement(
                store,
                "UPDATE binding_records SET lease_token = $1, lease_epoch = COALESCE(lease_epoch, 0) + 1, \
                 lease_expires_at = $2, lease_acquired_at = $3, lease_renewed_at = $4, revision = $5 \
                 WHERE namespace = $6 AND key = $7 AND revision = $8",
                vec![
                    token.into(),
                    expires_at_ms.into(),
                    0i64.into(),
                    0i64.into(),
                    acquired.into(),
                    namespace().as_str().into(),
                    self.key.as_str().into(),
                    self.revision.into(),
                ],
            ))
            .await
            .map_err(backend_error)?
            .rows_affected();
        self.expect_one(affected)?;
        self.revision = acquired;
        let released = acquired + 1;
        let affected = store
            .connection()
            .execute_raw(statement(
                store,
                "UPDATE binding_records SET lease_token = NULL, lease_expires_at = NULL, \
                 lease_acquired_at = NULL, lease_renewed_at = NULL, revision = $1 \
                 WHERE namespace = $2 AND key = $3 AND revision = $4",
                vec![
                    released.into(),
                    namespace().as_str().into(),
                    self.key.as_str().into(),
                    acquired.into(),
                ],
            ))
            .await
            .map_err(backend_error)?
            .rows_affected();
        self.expect_one(affected)?;
        self.revision = released;
        Ok(())
    }

    fn expect_one(&self, affected: u64) -> Result<(), Error> {
        if affected == 1 {
            Ok(())
        } else {
            Err(Error::other(format!(
                "raw conditional write of {} changed {affected} rows",
                self.key
            )))
        }
    }
}

/// Inserts `n` plain rows `bench_key(prefix, 0..n)` in one transaction, set-based on the server
/// (a recursive CTE on SQLite, `generate_series` on PostgreSQL).
pub async fn seed_bulk(store: &Store, prefix: &str, n: u64) -> Result<(), Error> {
    let ns = namespace();
    // Keys have the shape of `bench_key`: conversation:<prefix>-<8 digits>.
    let sql = match store.backend() {
        DbBackend::Postgres => {
            "INSERT INTO binding_records (namespace, key, value, revision, created_at) \
             SELECT $1, $2 || lpad(i::text, 8, '0'), '\\x7b7d'::bytea, 1, 0 \
             FROM generate_series(0, $3 - 1) AS s(i)"
                .to_owned()
        }
        _ => "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < ?) \
             INSERT INTO binding_records (namespace, key, value, revision, created_at) \
             SELECT ?, ? || printf('%08d', i), X'7b7d', 1, 0 FROM s"
            .to_owned(),
    };
    let key_prefix = format!("conversation:{prefix}-");
    let count = i64::try_from(n).unwrap_or(i64::MAX);
    let values: Vec<Value> = match store.backend() {
        DbBackend::Postgres => vec![ns.as_str().into(), key_prefix.into(), count.into()],
        _ => vec![count.into(), ns.as_str().into(), key_prefix.into()],
    };
    let stmt = Statement::from_sql_and_values(store.backend(), sql, values);
    let conn = store.connection();
    let tx = sea_orm::TransactionTrait::begin(conn)
        .await
        .map_err(backend_error)?;
    tx.execute_raw(stmt).await.map_err(backend_error)?;
    tx.commit().await.map_err(backend_error)?;
    if store.backend() == DbBackend::Postgres {
        conn.execute_unprepared("ANALYZE binding_records")
            .await
            .map_err(backend_error)?;
    } else {
        conn.execute_unprepared("ANALYZE")
            .await
            .map_err(backend_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_positional() {
        assert_eq!(
            rewrite_placeholders("a = $1 AND b = $12, c = '$x'"),
            "a = ? AND b = ?, c = '$x'"
        );
    }

    #[test]
    fn bench_keys_are_conversation_keys() {
        assert_eq!(bench_key("k", 7).as_str(), "conversation:k-00000007");
    }
}
