//! The invariant checker: reads the write log, the drill's records and Tether's own tables, and
//! lists every violation.

use sea_orm::{ConnectionTrait, QueryResult};
use tether_core::{BindingStore, Error, QuarantineStore, SessionKey};
use tether_storage::Store;

use super::{KEYS, db_error, lease_key, lease_ns, session_binding, session_ns, stmt};

fn get<T: sea_orm::TryGetable>(row: &QueryResult, column: &str) -> Result<T, Error> {
    row.try_get("", column).map_err(db_error)
}

async fn rows(store: &Store, sql: &str) -> Result<Vec<QueryResult>, Error> {
    store
        .connection()
        .query_all_raw(stmt(store, sql, Vec::new()))
        .await
        .map_err(db_error)
}

/// The number of rows in `table`.
pub(crate) async fn count(store: &Store, table: &str) -> Result<u64, Error> {
    let rows = rows(store, &format!("SELECT COUNT(*) AS n FROM {table}")).await?;
    let n: i64 = rows.first().map_or(Ok(0), |r| get(r, "n"))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// The number of operations the log records, and every violation found.
pub(crate) async fn check(store: &Store) -> Result<(u64, Vec<String>), Error> {
    let mut violations = Vec::new();

    // 1. Never two writers in one lease epoch.
    for row in rows(
        store,
        "SELECT key, epoch, COUNT(DISTINCT writer) AS writers FROM chaos_log GROUP BY key, epoch HAVING COUNT(DISTINCT writer) > 1",
    )
    .await?
    {
        let (key, epoch): (String, i64) = (get(&row, "key")?, get(&row, "epoch")?);
        violations.push(format!("two writers in lease epoch {epoch} of {key}"));
    }

    // 1b. ... as the store recorded it: every lease epoch granted once, and every logged write
    //     made by the holder the store granted that epoch to.
    for row in rows(
        store,
        "SELECT key, epoch, COUNT(*) AS grants FROM lease_events WHERE namespace = 'chaos-leases' AND kind = 'acquired' GROUP BY key, epoch HAVING COUNT(*) > 1",
    )
    .await?
    {
        let (key, epoch): (String, i64) = (get(&row, "key")?, get(&row, "epoch")?);
        violations.push(format!("lease epoch {epoch} of {key} granted more than once"));
    }
    for row in rows(
        store,
        "SELECT l.key AS key, l.epoch AS epoch, l.writer AS writer, e.holder AS holder FROM chaos_log l \
         JOIN lease_events e ON e.namespace = 'chaos-leases' AND e.key = l.key AND e.epoch = l.epoch AND e.kind = 'acquired' \
         WHERE e.holder IS NULL OR e.holder <> l.writer",
    )
    .await?
    {
        let (key, epoch, writer): (String, i64, String) =
            (get(&row, "key")?, get(&row, "epoch")?, get(&row, "writer")?);
        let holder: Option<String> = get(&row, "holder")?;
        violations.push(format!(
            "{writer} wrote under lease epoch {epoch} of {key}, granted to {holder:?}"
        ));
    }

    // 2. Never a write accepted with a stale epoch: per key, accepted epochs never go back.
    let mut last: Option<(String, i64)> = None;
    for row in rows(store, "SELECT key, epoch FROM chaos_log ORDER BY key, id").await? {
        let (key, epoch): (String, i64) = (get(&row, "key")?, get(&row, "epoch")?);
        if let Some((k, e)) = &last
            && *k == key
            && epoch < *e
        {
            violations.push(format!("stale epoch {epoch} accepted after {e} on {key}"));
        }
        last = Some((key, epoch));
    }

    // 3. No binding lost: every contended key's row is there and decodes.
    for i in 0..KEYS {
        let key = lease_key(i);
        match store.lookup(&lease_ns(), &key).await? {
            Some(row) if serde_json::from_slice::<serde_json::Value>(&row.value).is_ok() => {}
            Some(_) => violations.push(format!("binding {key} no longer decodes")),
            None => violations.push(format!("binding {key} lost")),
        }
    }

    // 4. No half-applied deletion or reset, no resurrected deletion, unknown outcomes
    //    quarantined.
    for row in rows(
        store,
        "SELECT session_key, kind, status FROM chaos_sessions WHERE status <> 'creating'",
    )
    .await?
    {
        let (raw, kind, status): (String, String, String) = (
            get(&row, "session_key")?,
            get(&row, "kind")?,
            get(&row, "status")?,
        );
        let session = SessionKey::new(&raw)?;
        let entry = store.session(&session).await?;
        let binding = store
            .lookup(&session_ns(), &session_binding(&session))
            .await?
            .is_some();
        let generation = entry.as_ref().map(|e| e.session_id.as_str().to_owned());
        // Consistency whatever happened: the binding exists exactly while generation s-1 does.
        let consistent = match generation.as_deref() {
            Some("s-1") => binding,
            Some(_) | None => !binding,
        };
        if !consistent {
            violations.push(format!(
                "half-applied {kind} of {raw} ({status}): session {generation:?}, binding {binding}"
            ));
        }
        let expected = match status.as_str() {
            "deleted" => Some(generation.is_none()),
            "rewound" => Some(generation.as_deref() == Some("s-2")),
            "kept" => Some(generation.as_deref() == Some("s-1")),
            _ => None,
        };
        if expected == Some(false) {
            violations.push(format!(
                "{kind} of {raw} recorded {status} but the session is {generation:?}"
            ));
        }
        if status == "unknown"
            && store
                .quarantined(&session_ns(), &session_binding(&session))
                .await?
                .is_none()
        {
            violations.push(format!("unknown outcome of {raw} not quarantined"));
        }
    }

    // 5. Every quarantined key explained.
    let explained: Vec<String> = rows(store, "SELECT session_key FROM chaos_explained")
        .await?
        .iter()
        .map(|r| get::<String>(r, "session_key"))
        .collect::<Result<_, _>>()?;
    for row in rows(store, "SELECT namespace, key FROM quarantined_keys").await? {
        let (ns, key): (String, String) = (get(&row, "namespace")?, get(&row, "key")?);
        let known = explained
            .iter()
            .filter_map(|s| SessionKey::new(s).ok())
            .any(|s| session_binding(&s).as_str() == key);
        if ns != session_ns().as_str() || !known {
            violations.push(format!("quarantined key {ns}/{key} has no explanation"));
        }
    }

    let ops = count(store, "chaos_log").await?
        + count(store, "chaos_rejects").await?
        + count(store, "chaos_sessions").await?;
    Ok((ops, violations))
}
