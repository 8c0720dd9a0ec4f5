//! The pgbench gauge of [`super`]: PostgreSQL's own benchmark client sending the statement of
//! a Tether `transact`, so that a report shows what the server does with that statement on the
//! machine it ran on, with no Tether code and no Rust driver in the way.
//!
//! For each owner count N, a throwaway database is migrated by the store (the same tables and
//! indexes as the Tether rows), N rows are seeded as leased rows (`pgbench-0` …), and `pgbench`
//! runs N clients (at most the connections the server can still give, as for the Tether
//! rows), each updating its own row back to back, with prepared statements, for the row's
//! window rounded up to whole seconds. The statement is the one a Tether transact under a held
//! lease sends on PostgreSQL, alone (see [`SCRIPT_SQL`]): the same `WITH … UPDATE … RETURNING
//! lease_epoch`, the same ten columns set, the same key, revision and expiry conditions. Two
//! differences, both in the gauge's favour by at most an expression: the revision is counted up
//! by the statement (`revision = revision + 1`, matched with `revision >= 1`) instead of being
//! bound from the caller's copy, and the constant columns are literals instead of parameters.
//!
//! Each transaction's latency and end come from pgbench's per-transaction log (`-l`); the row
//! counts the transactions that end inside the measured part of the window, starting from the
//! first transaction's start, exactly as the Tether rows count theirs. After the run the rows'
//! revisions must account for every logged transaction (so an update that matched no row would
//! be caught, not counted).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend, Statement};

use super::{LEASE_EXPIRES_AT, Measured, NAME, Settings, Tally, Window, pg_pool_cap, record};
use crate::report::note;
use crate::stores::{BenchStore, namespace};

/// The statement of one pgbench transaction (`{value}`: the record as a `bytea` literal;
/// `{namespace}`: the benchmark namespace). `:client_id` is pgbench's own variable (0-based),
/// so each client updates its own row.
pub const SCRIPT_SQL: &str = "WITH w AS (UPDATE binding_records SET value = '{value}'::bytea, \
revision = revision + 1, lease_token = 'pgbench-token', lease_expires_at = {expires}, \
lease_acquired_at = 1, lease_renewed_at = 1, holder = 'bench', created_at = 1, expires_at = NULL \
WHERE namespace = '{namespace}' AND key = 'pgbench-' || :client_id AND revision >= 1 \
AND (expires_at IS NULL OR expires_at > 1) RETURNING lease_epoch) SELECT lease_epoch FROM w;\n";

/// The pgbench script: [`SCRIPT_SQL`] with its values filled in.
pub fn script() -> Result<String, String> {
    let value = serde_json::to_vec(&record(1)).map_err(|e| format!("encoding the record: {e}"))?;
    let mut hex = String::with_capacity(2 + 2 * value.len());
    hex.push_str("\\x");
    for byte in value {
        let _ = write!(hex, "{byte:02x}");
    }
    Ok(SCRIPT_SQL
        .replace("{value}", &hex)
        .replace("{expires}", &LEASE_EXPIRES_AT.to_string())
        .replace("{namespace}", namespace().as_str()))
}

/// The `pgbench` binary: on PATH, or in the server's own bin directory (Debian keeps it under
/// `/usr/lib/postgresql/<version>/bin`, the newest version first).
pub fn pgbench_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("pgbench"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(Result::ok)
            .map(|entry| entry.path().join("bin/pgbench"))
            .filter(|p| p.is_file())
            .collect();
        found.sort_by_key(|p| {
            p.parent()
                .and_then(Path::parent)
                .and_then(Path::file_name)
                .and_then(|v| v.to_str())
                .and_then(|v| v.parse::<u32>().ok())
        });
        found.pop()
    })
}

/// One logged transaction: its latency and when it ended (microseconds since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logged {
    /// How long the transaction took.
    pub latency: Duration,
    /// When it ended, in microseconds since the Unix epoch.
    pub ended_us: u64,
}

/// Parses one line of pgbench's per-transaction log (`client_id transaction_no time script_no
/// time_epoch time_us`, time in microseconds); `Err` for a failed or skipped transaction or a
/// line of another shape.
pub fn parse_log_line(line: &str) -> Result<Logged, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let number = |i: usize| -> Result<u64, String> {
        fields
            .get(i)
            .ok_or_else(|| format!("pgbench log line `{line}`: field {} missing", i + 1))?
            .parse::<u64>()
            .map_err(|_| format!("pgbench log line `{line}`: field {} is not a count", i + 1))
    };
    let latency = number(2)?;
    let (seconds, micros) = (number(4)?, number(5)?);
    Ok(Logged {
        latency: Duration::from_micros(latency),
        ended_us: seconds * 1_000_000 + micros,
    })
}

/// The tally of a run's logged transactions in `window`, counted from the start of the first
/// transaction.
pub fn tally(logged: &[Logged], window: Window) -> Tally {
    let mut tally = Tally::default();
    let Some(start) = logged
        .iter()
        .map(|t| t.ended_us.saturating_sub(t.latency.as_micros() as u64))
        .min()
    else {
        return tally;
    };
    for t in logged {
        if window.counts(Duration::from_micros(t.ended_us - start)) {
            tally.latencies.push(t.latency);
        }
    }
    tally
}

/// Runs pgbench with `clients` clients on the database at `url` for `secs` seconds, logging
/// every transaction into `dir`; the logged transactions.
fn run_pgbench(
    binary: &Path,
    url: &str,
    dir: &Path,
    clients: usize,
    secs: u64,
) -> Result<Vec<Logged>, String> {
    let script_file = dir.join("transact.sql");
    std::fs::write(&script_file, script()?)
        .map_err(|e| format!("{}: {e}", script_file.display()))?;
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(clients);
    let output = Command::new(binary)
        .args(["--no-vacuum", "--protocol", "prepared", "--log"])
        .arg(format!("--log-prefix={}", dir.join("tx").display()))
        .arg(format!("--client={clients}"))
        .arg(format!("--jobs={threads}"))
        .arg(format!("--time={secs}"))
        .arg(format!("--file={}", script_file.display()))
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    let report = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "pgbench failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim(),
            report.trim()
        ));
    }
    if let Some(line) = report
        .lines()
        .find(|l| l.starts_with("number of failed transactions") && !l.contains(": 0 "))
    {
        return Err(format!("pgbench: {line}"));
    }
    let mut logged = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        let is_log = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("tx."));
        if !is_log {
            continue;
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            logged.push(parse_log_line(line)?);
        }
    }
    Ok(logged)
}

/// Seeds `n` leased rows `pgbench-0` … for the pgbench clients, in one statement.
async fn seed(bench: &BenchStore, n: usize) -> Result<(), String> {
    let value = serde_json::to_vec(&record(0)).map_err(|e| format!("encoding the record: {e}"))?;
    bench
        .store
        .connection()
        .execute_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            "INSERT INTO binding_records (namespace, key, value, revision, lease_token, \
             lease_epoch, lease_expires_at, lease_acquired_at, lease_renewed_at, holder, \
             created_at, expires_at) \
             SELECT $1, 'pgbench-' || i, $2, 1, 'pgbench-token', 1, $3, 1, 1, 'bench', 1, NULL \
             FROM generate_series(0, $4 - 1) AS s(i)",
            vec![
                namespace().as_str().into(),
                value.into(),
                LEASE_EXPIRES_AT.into(),
                i64::try_from(n).unwrap_or(i64::MAX).into(),
            ],
        ))
        .await
        .map_err(|e| format!("seeding the pgbench rows: {e}"))?;
    Ok(())
}

/// How many updates the seeded rows have taken (each pgbench transaction adds one).
async fn updates(bench: &BenchStore) -> Result<i64, String> {
    let row = bench
        .store
        .connection()
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT COALESCE(SUM(revision - 1), 0)::bigint AS n FROM binding_records \
             WHERE key LIKE 'pgbench-%'",
        ))
        .await
        .map_err(|e| format!("counting the pgbench updates: {e}"))?
        .ok_or("counting the pgbench updates: no row")?;
    row.try_get::<i64>("", "n")
        .map_err(|e| format!("counting the pgbench updates: {e}"))
}

/// One gauge row: `owners` clients, at most as many as the server can still give (the cap of
/// the Tether rows' pools).
async fn row(binary: &Path, owners: usize, window: Window) -> Result<Measured, String> {
    let Some(bench) = BenchStore::postgres("bench_pgbench", 1)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Err("no PostgreSQL server answered (set TETHER_PG_URL)".to_owned());
    };
    let result = async {
        let cap = usize::try_from(pg_pool_cap(&bench.store).await?.0).unwrap_or(1);
        let clients = owners.min(cap).max(1);
        if clients < owners {
            note(
                NAME,
                &format!(
                    "pgbench gauge: {owners} owners run as {clients} clients (max_connections)"
                ),
            );
        }
        seed(&bench, clients).await?;
        let url = bench
            .database_url()
            .ok_or("the benchmark store has no PostgreSQL URL")?
            .to_owned();
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let secs = (window.warm + window.measure).as_secs_f64().ceil() as u64;
        let binary = binary.to_owned();
        let dir_path = dir.path().to_owned();
        let logged = tokio::task::spawn_blocking(move || {
            run_pgbench(&binary, &url, &dir_path, clients, secs)
        })
        .await
        .map_err(|e| format!("pgbench task: {e}"))??;
        let written = updates(&bench).await?;
        if written < logged.len() as i64 {
            return Err(format!(
                "pgbench logged {} transactions but the rows took {written} updates: some \
                 statements matched no row",
                logged.len()
            ));
        }
        Ok(Measured {
            owners,
            window: window.measure,
            tally: tally(&logged, window),
        })
    }
    .await;
    bench.cleanup().await;
    result
}

/// The gauge rows (owner count → measurement), or why there are none.
pub async fn rows(settings: &Settings) -> Result<BTreeMap<usize, Measured>, String> {
    let binary = pgbench_binary().ok_or(
        "no `pgbench` on PATH or under /usr/lib/postgresql/*/bin (Debian: the postgresql \
         package of the server's version ships it)",
    )?;
    note(
        NAME,
        &format!(
            "pgbench gauge: {} with prepared statements, one client per owner (capped as the \
             PostgreSQL pools are), each updating its own row with the statement of a Tether \
             transact",
            binary.display()
        ),
    );
    let mut out = BTreeMap::new();
    for &owners in &settings.owners {
        let mut measured = row(&binary, owners, settings.window).await?;
        note(
            NAME,
            &format!(
                "{}: {}",
                super::Workload::Transact.row("pgbench", owners),
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

    #[test]
    fn log_lines_parse_and_count_in_the_window() {
        let a = parse_log_line("0 1 406 0 1796445663 307349").unwrap();
        assert_eq!(a.latency, Duration::from_micros(406));
        assert_eq!(a.ended_us, 1_796_445_663_307_349);
        assert!(parse_log_line("0 1 failed 0 1796445663 307349").is_err());
        assert!(parse_log_line("0 1 406").is_err());

        // Started at 1_000_000 µs; warm 0.5 s, measured 1 s: [1.5 s, 2.5 s] counts.
        let window = Window {
            warm: Duration::from_millis(500),
            measure: Duration::from_secs(1),
        };
        let at = |end_ms: u64| Logged {
            latency: Duration::from_millis(1),
            ended_us: 1_000_000 + end_ms * 1000,
        };
        let logged = [
            Logged {
                latency: Duration::from_millis(1),
                ended_us: 1_001_000,
            },
            at(499),
            at(500),
            at(1000),
            at(1500),
            at(1501),
        ];
        let t = tally(&logged, window);
        assert_eq!(t.latencies.len(), 3);
        assert!(tally(&[], window).latencies.is_empty());
    }

    #[test]
    fn the_script_is_one_statement_with_the_record_as_bytes() {
        let s = script().unwrap();
        assert_eq!(s.matches(';').count(), 1, "{s}");
        assert!(s.contains("'\\x7b"), "{s}");
        assert!(s.contains(&format!("namespace = '{}'", namespace().as_str())));
        assert!(!s.contains('{'), "a placeholder was left: {s}");
    }

    /// The gauge against the real server: every counted transaction updated its row. Without a
    /// server it is skipped (`TETHER_REQUIRE_PG=1` makes that a failure, as everywhere);
    /// without a `pgbench` binary too, unless the server is required.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[allow(clippy::panic)]
    async fn the_gauge_runs_against_postgres() {
        let binary = pgbench_binary();
        if binary.is_none() && std::env::var_os("TETHER_REQUIRE_PG").is_some_and(|v| v == "1") {
            panic!("TETHER_REQUIRE_PG=1 and no pgbench binary beside the PostgreSQL server");
        }
        let Some(probe) = BenchStore::postgres("bench_pgbench_probe", 1)
            .await
            .unwrap()
        else {
            return;
        };
        probe.cleanup().await;
        let Some(binary) = binary else {
            return;
        };
        let window = Window {
            warm: Duration::from_millis(200),
            measure: Duration::from_millis(500),
        };
        let m = row(&binary, 2, window).await.unwrap();
        assert!(!m.tally.latencies.is_empty());
        assert_eq!(m.owners, 2);
    }
}
