//! The SQLite gauge of [`super`]: the SQLite library the store links (the bundled build of
//! `libsqlite3-sys`), called directly through `rusqlite` with the statement of a Tether
//! `transact`, so that a report shows what the engine does with that statement on the machine
//! it ran on, with no Tether code, no pool and no async driver in the way. It is to the SQLite
//! rows what the pgbench gauge is to the PostgreSQL ones.
//!
//! For each owner count N, a SQLite file is created and migrated by the store (the same tables
//! and indexes as the Tether rows, WAL), N leased rows are seeded (`libsqlite-0` …), and N OS
//! threads each open a connection of their own with the store's settings (`synchronous=FULL`,
//! foreign keys on, the store's busy timeout of 5 s), prepare [`STATEMENT`] once and step it
//! back to back on their own row for the row's window. The statement is the one a Tether
//! transact under a held lease sends on SQLite when it writes alone (the same `UPDATE`, the same
//! nine columns set, the same key, revision and expiry conditions), and each step binds the
//! revision its thread expects and the next one, as Tether does; a step that changes no row
//! ends its thread with an error. Operations are counted as the Tether rows count theirs.
//!
//! What the gauge leaves out, against a Tether row, is what a reader should see in the ratio:
//! at one owner the thread crossing of the async driver (each of Tether's statements goes to
//! the connection's worker thread and its result comes back to a tokio task); at several, group
//! commit: here every update is a commit of its own, the writers taking turns behind SQLite's
//! one write lock (a writer that finds it taken waits in SQLite's busy handler, which sleeps).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, params};
use tether_core::{Clock, SystemClock};

use super::{LEASE_EXPIRES_AT, Measured, NAME, Settings, Tally, Window, Workload, record};
use crate::report::note;
use crate::stores::{BenchStore, namespace};

/// The name of the gauge in row names (`lease_transact_concurrent_libsqlite_8`, and
/// `lease_transact_concurrent_sqlite_of_libsqlite_8` for the Tether row set against it).
pub const GAUGE: &str = "libsqlite";

/// The statement every step runs: a Tether transact's `UPDATE` on SQLite. `?1` namespace,
/// `?2` key, `?3..=?11` the nine columns, `?12` the expected revision, `?13` the writer's
/// clock (milliseconds).
pub const STATEMENT: &str = "UPDATE binding_records SET value = ?3, revision = ?4, \
lease_token = ?5, lease_expires_at = ?6, lease_acquired_at = ?7, lease_renewed_at = ?8, \
holder = ?9, created_at = ?10, expires_at = ?11 \
WHERE namespace = ?1 AND key = ?2 AND revision = ?12 AND (expires_at IS NULL OR expires_at > ?13)";

/// The busy timeout of the gauge's connections: the store's default.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The lease token the seeded rows carry and every step writes back.
const TOKEN: &str = "libsqlite-token";

/// The key of owner `index`'s row.
fn key(index: usize) -> String {
    format!("{GAUGE}-{index}")
}

/// Opens a connection to the gauge's file with the store's SQLite settings.
fn open(path: &Path) -> Result<Connection, String> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("opening {}: {e}", path.display()))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .and_then(|()| {
            conn.execute_batch(
                "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;",
            )
        })
        .map_err(|e| format!("setting up a connection to {}: {e}", path.display()))?;
    Ok(conn)
}

/// Seeds `n` leased rows `libsqlite-0` … with revision 1, in one statement.
fn seed(conn: &Connection, n: usize, value: &[u8]) -> Result<(), String> {
    conn.execute(
        "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < ?4) \
         INSERT INTO binding_records (namespace, key, value, revision, lease_token, lease_epoch, \
         lease_expires_at, lease_acquired_at, lease_renewed_at, holder, created_at, expires_at) \
         SELECT ?1, ?5 || '-' || i, ?2, 1, ?6, 1, ?3, 1, 1, 'bench', 1, NULL FROM s",
        params![
            namespace().as_str(),
            value,
            LEASE_EXPIRES_AT,
            i64::try_from(n).unwrap_or(i64::MAX),
            GAUGE,
            TOKEN,
        ],
    )
    .map_err(|e| format!("seeding the gauge rows: {e}"))?;
    Ok(())
}

/// How many updates the seeded rows have taken (each step that changed its row adds one).
fn updates(conn: &Connection) -> Result<i64, String> {
    conn.query_row(
        "SELECT COALESCE(SUM(revision - 1), 0) FROM binding_records WHERE key LIKE ?1",
        params![format!("{GAUGE}-%")],
        |row| row.get(0),
    )
    .map_err(|e| format!("counting the gauge updates: {e}"))
}

/// One owner: steps [`STATEMENT`] on its own row from the moment every owner passed `gate`
/// until `window` closes. An owner whose connection cannot be set up still passes the gate (so
/// the others start) and reports why.
fn owner(path: &Path, index: usize, gate: &Barrier, window: Window, value: &[u8]) -> Tally {
    let mut tally = Tally::default();
    let conn = open(path);
    let prepared = match &conn {
        Ok(conn) => conn
            .prepare(STATEMENT)
            .map_err(|e| format!("preparing the statement: {e}")),
        Err(e) => Err(e.clone()),
    };
    gate.wait();
    let mut statement = match prepared {
        Ok(statement) => statement,
        Err(e) => {
            tally.failed(format!("owner setup: {e}"), true);
            return tally;
        }
    };
    let namespace = namespace();
    let key = key(index);
    let mut revision: i64 = 1;
    let start = Instant::now();
    let end = window.warm + window.measure;
    loop {
        let began = Instant::now();
        if began.duration_since(start) >= end {
            break;
        }
        // The store's default clock.
        let now = SystemClock.now().as_millis();
        let result = statement.execute(params![
            namespace.as_str(),
            key,
            value,
            revision + 1,
            TOKEN,
            LEASE_EXPIRES_AT,
            1i64,
            now,
            "bench",
            1i64,
            Option::<i64>::None,
            revision,
            now,
        ]);
        let finished = Instant::now();
        let counted = window.counts(finished.duration_since(start));
        match result {
            Ok(1) => {
                revision += 1;
                if counted {
                    tally.latencies.push(finished.duration_since(began));
                }
            }
            Ok(changed) => {
                tally.failed(
                    format!("the update of {key} changed {changed} rows, not 1"),
                    counted,
                );
                break;
            }
            Err(e) => tally.failed(e.to_string(), counted),
        }
    }
    tally
}

/// Runs `owners` owner threads on the migrated SQLite file at `path`.
fn run(path: &Path, owners: usize, window: Window) -> Result<Measured, String> {
    let value = serde_json::to_vec(&record(1)).map_err(|e| format!("encoding the record: {e}"))?;
    let setup = open(path)?;
    seed(&setup, owners, &value)?;
    let gate = Barrier::new(owners);
    let tallies = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..owners)
            .map(|i| {
                let (gate, value) = (&gate, value.as_slice());
                scope.spawn(move || owner(path, i, gate, window, value))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join())
            .collect::<Result<Vec<_>, _>>()
    })
    .map_err(|_| "a gauge owner thread panicked".to_owned())?;
    let measured = Measured::merge(owners, window, tallies);
    let written = updates(&setup)?;
    let counted = measured.tally.latencies.len() as i64;
    if written < counted {
        return Err(format!(
            "the gauge counted {counted} updates but its rows took {written}"
        ));
    }
    Ok(measured)
}

/// One gauge row: a fresh SQLite file migrated by the store, `owners` threads on it.
pub async fn row(owners: usize, window: Window) -> Result<Measured, String> {
    let bench = BenchStore::sqlite(1).await.map_err(|e| e.to_string())?;
    let result = match bench.sqlite_file() {
        Some(path) => tokio::task::spawn_blocking(move || run(&path, owners, window))
            .await
            .map_err(|e| format!("gauge task: {e}"))
            .and_then(|r| r),
        None => Err("the benchmark store has no SQLite file".to_owned()),
    };
    bench.cleanup().await;
    result
}

/// The gauge rows (owner count → measurement), or why there are none.
pub async fn rows(settings: &Settings) -> Result<BTreeMap<usize, Measured>, String> {
    note(
        NAME,
        &format!(
            "SQLite gauge: the SQLite library {} the store links, called directly, one thread \
             and one connection per owner (WAL, synchronous=FULL), each updating its own row \
             with the statement of a Tether transact; every update its own commit",
            rusqlite::version()
        ),
    );
    let mut out = BTreeMap::new();
    for &owners in &settings.owners {
        let mut measured = row(owners, settings.window).await?;
        note(
            NAME,
            &format!(
                "{}: {}",
                Workload::Transact.row(GAUGE, owners),
                measured.summary()
            ),
        );
        out.insert(owners, measured);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The gauge on a real file: every counted step updated its row, each owner its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_gauge_updates_each_owners_row() {
        let window = Window {
            warm: Duration::from_millis(100),
            measure: Duration::from_millis(300),
        };
        let m = row(3, window).await.unwrap();
        assert_eq!(m.owners, 3);
        assert!(!m.tally.latencies.is_empty());
        assert_eq!(m.tally.errors, 0, "{:?}", m.tally.first_error);
        assert!(m.tally.first_error.is_none(), "{:?}", m.tally.first_error);
    }

    /// A step that matches no row (another revision) is an error, not a counted update.
    #[test]
    fn a_step_on_a_moved_row_fails_the_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gauge.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE binding_records (namespace TEXT, key TEXT, value BLOB, \
             revision INTEGER, lease_token TEXT, lease_epoch INTEGER, lease_expires_at INTEGER, \
             lease_acquired_at INTEGER, lease_renewed_at INTEGER, holder TEXT, \
             created_at INTEGER, expires_at INTEGER, PRIMARY KEY (namespace, key));",
        )
        .unwrap();
        seed(&conn, 1, b"{}").unwrap();
        // Another writer moved the row on: the owner's expected revision 1 no longer matches.
        conn.execute("UPDATE binding_records SET revision = 7", [])
            .unwrap();
        let window = Window {
            warm: Duration::ZERO,
            measure: Duration::from_millis(200),
        };
        let tally = owner(&path, 0, &Barrier::new(1), window, b"{}");
        assert!(tally.latencies.is_empty());
        assert_eq!(tally.errors, 1);
        let error = tally.first_error.unwrap();
        assert!(error.contains("changed 0 rows"), "{error}");
    }
}
