//! `lease_concurrent`: lease throughput and latency under concurrency, Tether beside etcd.
//!
//! N owners (1, 8, 32 and 128 by default) each work on their own key, back to back, for a fixed
//! time; every operation's latency is recorded. Two workloads, through the public API:
//!
//! - `cycle`: `Lifecycle::with_lease` with an empty body (acquire + release);
//! - `transact`: one `Lifecycle::transact` write under a lease the owner holds for the whole
//!   run (acquired before the clock starts).
//!
//! Tether runs on SQLite (a file, WAL, `synchronous=FULL`, the store's default pool of 8
//! connections for reads and its writer connection) and on PostgreSQL (a throwaway database, a
//! pool as large as the owner count, capped below the server's `max_connections`; skipped with
//! a note when no server answers).
//! The lifecycle uses the shipped lease ([`LeaseConfig::default`]: 65 s, renewed every 65/3 s).
//!
//! The peer is a single-node etcd (feature `etcd`, module `etcd`) started by the harness on
//! loopback ports of its own with a scratch data directory beside the SQLite file, doing the
//! same work as an etcd user writes it with the `etcd-client` crate: `cycle` = lease grant +
//! txn put-if-absent bound to the lease + txn delete guarded by the lease + revoke; `transact`
//! = get + txn put guarded by `mod_revision`. Without the feature or without an `etcd` binary
//! the peer rows say "skipped" and the Tether rows still run.
//!
//! Each row starts its owners together (after the transact owners hold their leases), lets
//! them run `--warm` seconds, then counts the operations that finish within the next `--secs`
//! seconds. Output: one `bench-result` line per Tether row (`lease_cycle_concurrent_sqlite_32`,
//! …: ops/s, the etcd ops/s of the same workload and owner count as the baseline, p50/p99) and
//! per etcd row (`lease_cycle_concurrent_etcd_32`, …), plus the scaling of each Tether workload
//! from 1 to 32 owners (`lease_cycle_concurrent_postgres_scaling`: ops/s at 32 owners with the
//! ops/s at 1 owner as its baseline).
//!
//! Beside the PostgreSQL rows, a gauge of the server itself (module `pgbench`):
//! PostgreSQL's own benchmark client sends the statement of a Tether transact, one client per
//! owner (`lease_transact_concurrent_pgbench_8`, …), and each Tether PostgreSQL transact row is
//! set against it (`lease_transact_concurrent_postgres_of_pgbench_8`: Tether's ops/s with
//! pgbench's as its baseline). Without a `pgbench` binary the gauge rows say "skipped".
//!
//! Beside the SQLite rows, a gauge of the engine itself (module `libsqlite`): the SQLite library
//! the store links, called directly from one thread per owner with the statement of a Tether
//! transact (`lease_transact_concurrent_libsqlite_8`, …), and each Tether SQLite transact row set
//! against it (`lease_transact_concurrent_sqlite_of_libsqlite_8`).

#[cfg(feature = "etcd")]
pub mod etcd;
pub mod libsqlite;
pub mod pgbench;

use std::collections::BTreeMap;
use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DbBackend, Statement};
use serde_json::json;
use tether_core::{JsonObjectCodec, LeaseConfig};
use tether_harness_sdk::lifecycle::{Applied, LeaseOptions, Lifecycle, TransactOptions};
use tokio::sync::Barrier;

use crate::cli::{Args, run_harness};
use crate::raw::bench_key;
use crate::report::{ResultLine, emit, note};
use crate::stats::{Latencies, millis};
use crate::stores::{Backend, BenchStore, Record};

/// The harness name (notes are filed under it).
pub const NAME: &str = "lease_concurrent";

/// The owner counts of the issue.
pub const OWNERS: [usize; 4] = [1, 8, 32, 128];

/// Connections left free on a PostgreSQL server besides those already in use (other sessions
/// and the database administration of the harness).
const PG_SPARE_CONNECTIONS: i64 = 5;

const HELP: &str = "lease_concurrent: N owners each on their own key, lease cycle and \
transact throughput with p50/p99, Tether (SQLite, PostgreSQL) beside etcd.

Options:
  --secs S                    measured seconds per row (3; --quick: 1.5)
  --warm S                    warm-up seconds per row before measuring (0.5; --quick: 0.5)
  --quick                     the short version bench-report --quick runs
  --owners 1,8,32,128         owner counts
  --backend sqlite|postgres|all
                              Tether backends (all)
  --no-etcd                   skip the etcd peer rows
  --no-pgbench                skip the pgbench gauge rows (PostgreSQL)
  --no-libsqlite              skip the SQLite library gauge rows (SQLite)
  --pg-pool C                 PostgreSQL pool size at every owner count (default: the owner
                              count, capped below the server's max_connections)
  --help                      this text

The etcd rows need the `etcd` feature of tether-benches (built with protoc) and an `etcd`
binary on PATH: apt-get install etcd-server protobuf-compiler.";

/// The two workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    /// Acquire + release with an empty body.
    Cycle,
    /// One write under a held lease.
    Transact,
}

impl Workload {
    /// Both workloads, in report order.
    pub const ALL: [Workload; 2] = [Workload::Cycle, Workload::Transact];

    /// `cycle` or `transact`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cycle => "cycle",
            Self::Transact => "transact",
        }
    }

    /// The row name: `lease_<workload>_concurrent_<system>_<suffix>` (`system` is `sqlite`,
    /// `postgres`, `etcd`, a gauge (`pgbench`, `libsqlite`) or a Tether row set against one
    /// (`postgres_of_pgbench`, `sqlite_of_libsqlite`); `suffix` an owner count or
    /// `scaling`).
    pub fn row(self, system: &str, suffix: impl std::fmt::Display) -> String {
        format!("lease_{}_concurrent_{system}_{suffix}", self.as_str())
    }
}

/// The measuring window of one row, from the moment every owner is ready.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Warm-up: operations finishing before it ends are not counted.
    pub warm: Duration,
    /// The measured time after the warm-up.
    pub measure: Duration,
}

impl Window {
    /// Whether an operation that finished `finished_after` after the start is counted.
    pub fn counts(&self, finished_after: Duration) -> bool {
        finished_after >= self.warm && finished_after <= self.warm + self.measure
    }
}

/// What the harness runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The window of every row.
    pub window: Window,
    /// Owner counts.
    pub owners: Vec<usize>,
    /// Tether backends.
    pub backends: Vec<Backend>,
    /// Whether to run the etcd peer (when built in).
    pub etcd: bool,
    /// Whether to run the pgbench gauge (with the PostgreSQL backend).
    pub pgbench: bool,
    /// Whether to run the SQLite library gauge (with the SQLite backend).
    pub libsqlite: bool,
    /// A fixed PostgreSQL pool size instead of one connection per owner (for comparison).
    pub pg_pool: Option<u32>,
}

impl Settings {
    /// Parses the options (see `--help`).
    pub fn parse(args: &Args) -> Result<Self, String> {
        let quick = args.flag("--quick");
        let secs = args.value("--secs", if quick { 1.5 } else { 3.0 })?;
        let warm = args.value("--warm", 0.5f64)?;
        let valid = secs > 0.0 && secs <= 50.0 && (0.0..=10.0).contains(&warm);
        if !valid {
            // The lease (Tether's shipped 65 s, etcd's TTL the same) must outlast a row.
            return Err("--secs must be in (0, 50] and --warm in [0, 10]".to_owned());
        }
        let owners = args
            .value("--owners", "1,8,32,128".to_owned())?
            .split(',')
            .map(|n| match n.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("--owners: `{n}` is not a positive number")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let backends = match args.value("--backend", "all".to_owned())?.as_str() {
            "all" => vec![Backend::Sqlite, Backend::Postgres],
            "sqlite" => vec![Backend::Sqlite],
            "postgres" => vec![Backend::Postgres],
            other => {
                return Err(format!(
                    "--backend: unknown `{other}` (sqlite, postgres, all)"
                ));
            }
        };
        Ok(Self {
            window: Window {
                warm: Duration::from_secs_f64(warm),
                measure: Duration::from_secs_f64(secs),
            },
            owners,
            backends,
            etcd: !args.flag("--no-etcd"),
            pgbench: !args.flag("--no-pgbench"),
            libsqlite: !args.flag("--no-libsqlite"),
            pg_pool: match args.value("--pg-pool", 0u32)? {
                0 => None,
                n => Some(n),
            },
        })
    }
}

/// What one owner saw.
#[derive(Debug, Default)]
pub struct Tally {
    /// Latencies of the counted operations.
    pub latencies: Latencies,
    /// Counted operations that failed.
    pub errors: u64,
    /// The first error, whenever it happened.
    pub first_error: Option<String>,
}

impl Tally {
    fn failed(&mut self, error: String, counted: bool) {
        if counted {
            self.errors += 1;
        }
        self.first_error.get_or_insert(error);
    }
}

/// What one row measured.
#[derive(Debug)]
pub struct Measured {
    /// Owners.
    pub owners: usize,
    /// The measured time.
    pub window: Duration,
    /// Every owner's tally merged.
    pub tally: Tally,
}

impl Measured {
    /// Merges the owners' tallies.
    pub fn merge(owners: usize, window: Window, tallies: Vec<Tally>) -> Self {
        let mut tally = Tally::default();
        for t in tallies {
            tally.latencies.extend(&t.latencies);
            tally.errors += t.errors;
            if tally.first_error.is_none() {
                tally.first_error = t.first_error;
            }
        }
        Self {
            owners,
            window: window.measure,
            tally,
        }
    }

    /// Successful operations per second.
    pub fn throughput(&self) -> f64 {
        self.tally.latencies.len() as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// (p50, p99) latency in milliseconds.
    pub fn percentiles(&mut self) -> (f64, f64) {
        (
            millis(self.tally.latencies.percentile(50.0)),
            millis(self.tally.latencies.percentile(99.0)),
        )
    }

    /// The result line of this measurement as row `name`: ops/s with p50 and p99, and
    /// `baseline` (ops/s) when the row has one.
    pub fn result_line(&mut self, name: &str, baseline: Option<f64>) -> ResultLine {
        let (p50, p99) = self.percentiles();
        ResultLine::new(name, self.throughput(), baseline, "ops/s").with_percentiles(p50, p99)
    }

    /// `N ops in S s (X/s), p50 A ms p99 B ms[, E failed (first: …)]`.
    pub fn summary(&mut self) -> String {
        let (p50, p99) = self.percentiles();
        let mut text = format!(
            "{} owners: {} ops in {:.1} s ({:.0}/s), p50 {p50:.3} ms p99 {p99:.3} ms",
            self.owners,
            self.tally.latencies.len(),
            self.window.as_secs_f64(),
            self.throughput(),
        );
        if self.tally.errors > 0 || self.tally.first_error.is_some() {
            text.push_str(&format!(
                ", {} failed in the window (first error: {})",
                self.tally.errors,
                self.tally.first_error.as_deref().unwrap_or("none")
            ));
        }
        text
    }
}

/// Runs `op` back to back from the moment every owner passed `gate` until `window` closes.
/// An operation counts when it finishes inside the measured part of the window.
pub async fn op_loop<F, Fut>(gate: &Barrier, window: Window, mut op: F) -> Tally
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    gate.wait().await;
    let start = Instant::now();
    let end = window.warm + window.measure;
    let mut tally = Tally::default();
    loop {
        let began = Instant::now();
        if began.duration_since(start) >= end {
            break;
        }
        let result = op().await;
        let finished = Instant::now();
        let counted = window.counts(finished.duration_since(start));
        match result {
            Ok(()) if counted => tally.latencies.push(finished.duration_since(began)),
            Ok(()) => {}
            Err(e) => tally.failed(e, counted),
        }
    }
    tally
}

/// Runs one owner of a workload that first needs a resource (a held lease): `setup` runs
/// `op_loop` once its resource is ready; when it fails before reaching the gate, the owner
/// still passes the gate (so the others start) and reports the failure.
pub async fn gated<S, Fut>(gate: Arc<Barrier>, setup: S) -> Tally
where
    S: FnOnce(Arc<Barrier>, Arc<AtomicBool>) -> Fut,
    Fut: Future<Output = Result<Tally, String>>,
{
    let passed = Arc::new(AtomicBool::new(false));
    match setup(gate.clone(), passed.clone()).await {
        Ok(tally) => tally,
        Err(e) => {
            if !passed.load(Ordering::SeqCst) {
                gate.wait().await;
            }
            let mut tally = Tally::default();
            tally.failed(format!("owner setup: {e}"), true);
            tally
        }
    }
}

/// Spawns `owners` tasks running `owner(index, gate)` and merges their tallies.
pub async fn drive<F, Fut>(owners: usize, window: Window, owner: F) -> Result<Measured, String>
where
    F: Fn(usize, Arc<Barrier>) -> Fut,
    Fut: Future<Output = Tally> + Send + 'static,
{
    let gate = Arc::new(Barrier::new(owners));
    let tasks: Vec<_> = (0..owners)
        .map(|i| tokio::spawn(owner(i, gate.clone())))
        .collect();
    let mut tallies = Vec::with_capacity(owners);
    for task in tasks {
        tallies.push(task.await.map_err(|e| format!("owner task failed: {e}"))?);
    }
    Ok(Measured::merge(owners, window, tallies))
}

/// The lease expiry of the rows the gauges seed (2100-01-01, milliseconds): far beyond any row.
pub(crate) const LEASE_EXPIRES_AT: i64 = 4_102_444_800_000;

pub(crate) fn record(n: u64) -> Record {
    let mut r = Record::new();
    r.insert("thread".into(), json!("t-1"));
    r.insert("n".into(), json!(n));
    r
}

/// One Tether row on an open store.
async fn tether_row(
    lifecycle: &Lifecycle<JsonObjectCodec>,
    workload: Workload,
    owners: usize,
    window: Window,
) -> Result<Measured, String> {
    drive(owners, window, |i, gate| {
        let lc = lifecycle.clone();
        let key = bench_key("owner", i as u64);
        async move {
            match workload {
                Workload::Cycle => {
                    let (lc, key) = (&lc, &key);
                    op_loop(&gate, window, move || async move {
                        lc.with_lease(key, LeaseOptions::default(), |_| async { Ok(()) })
                            .await
                            .map_err(|e| e.to_string())
                    })
                    .await
                }
                Workload::Transact => {
                    gated(gate, |gate, passed| async move {
                        let (gate, passed, lc, key) = (&gate, &passed, &lc, &key);
                        lc.with_lease(key, LeaseOptions::default(), move |_| async move {
                            passed.store(true, Ordering::SeqCst);
                            let mut n = 0u64;
                            Ok(op_loop(gate, window, move || {
                                n += 1;
                                let next = record(n);
                                async move {
                                    lc.transact(key, TransactOptions::default(), move |_, _| {
                                        Ok(Applied::write(next.clone(), ()))
                                    })
                                    .await
                                    .map_err(|e| e.to_string())
                                }
                            })
                            .await)
                        })
                        .await
                        .map_err(|e| e.to_string())
                    })
                    .await
                }
            }
        }
    })
    .await
}

/// How many connections the PostgreSQL server behind `store` can still give one pool.
pub(crate) async fn pg_pool_cap(store: &tether_storage::Store) -> Result<(i64, String), String> {
    let rows = store
        .connection()
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT current_setting('max_connections')::bigint AS max, \
             current_setting('superuser_reserved_connections')::bigint AS reserved, \
             (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::bigint AS used",
        ))
        .await
        .map_err(|e| format!("reading max_connections: {e}"))?;
    let row = rows.first().ok_or("reading max_connections: no row")?;
    let get = |c: &str| -> Result<i64, String> {
        row.try_get::<i64>("", c)
            .map_err(|e| format!("reading {c}: {e}"))
    };
    let (max, reserved, used) = (get("max")?, get("reserved")?, get("used")?);
    let cap = (max - reserved - used - PG_SPARE_CONNECTIONS).max(1);
    Ok((
        cap,
        format!(
            "max_connections {max}, {reserved} reserved, {used} in use when measured, {PG_SPARE_CONNECTIONS} left spare"
        ),
    ))
}

/// What group commit did during a row (its warm-up included): how many writes went alone,
/// how many went in batches of what size, and how many batches were one statement.
fn group_commit_summary(stats: &tether_storage::GroupCommitStats) -> String {
    let mean = if stats.batches == 0 {
        0.0
    } else {
        stats.batched_writes as f64 / stats.batches as f64
    };
    format!(
        "group commit (warm-up included): {} writes alone, {} in {} batches (mean {mean:.1}, largest {}; {} written by one statement), {} turns given to join",
        stats.solo_writes,
        stats.batched_writes,
        stats.batches,
        stats.largest_batch,
        stats.single_statement_batches,
        stats.joining_turns
    )
}

/// The Tether rows of one backend: (workload, owners) → measurement; `None` when PostgreSQL
/// does not answer.
async fn tether_rows(
    backend: Backend,
    settings: &Settings,
) -> Result<Option<BTreeMap<(Workload, usize), Measured>>, String> {
    let pg_cap = if backend == Backend::Postgres {
        let Some(probe) = BenchStore::postgres("bench_concurrent", 1)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        let cap = pg_pool_cap(&probe.store).await;
        probe.cleanup().await;
        let (cap, how) = cap?;
        if let Some(fixed) = settings.pg_pool {
            note(
                NAME,
                &format!(
                    "postgres: --pg-pool {fixed}: a pool of {fixed} at every owner count ({how})"
                ),
            );
        } else {
            note(
                NAME,
                &format!(
                    "postgres: pool = owner count, at most {cap} connections ({how}){}",
                    if settings.owners.iter().any(|&n| n as i64 > cap) {
                        format!("; rows with more owners than {cap} share {cap} connections")
                    } else {
                        String::new()
                    }
                ),
            );
        }
        Some(cap)
    } else {
        note(
            NAME,
            "sqlite: a file in a temp dir, WAL, synchronous=FULL, the store's default pool (8 connections) and its writer connection at every owner count",
        );
        None
    };
    let mut out = BTreeMap::new();
    for workload in Workload::ALL {
        for &owners in &settings.owners {
            let connections = match (pg_cap, settings.pg_pool) {
                (Some(_), Some(fixed)) => fixed,
                (Some(cap), None) => (owners as i64).min(cap) as u32,
                (None, _) => 8,
            };
            let Some(bench) = BenchStore::open(backend, "bench_concurrent", connections)
                .await
                .map_err(|e| e.to_string())?
            else {
                return Ok(None);
            };
            let lifecycle = bench
                .lifecycle(LeaseConfig::default())
                .map_err(|e| e.to_string())?;
            let measured = tether_row(&lifecycle, workload, owners, settings.window).await;
            let grouped = bench.store.group_commit_stats();
            drop(lifecycle);
            bench.cleanup().await;
            let mut measured = measured?;
            note(
                NAME,
                &format!(
                    "{}: {}; {}",
                    workload.row(backend.as_str(), owners),
                    measured.summary(),
                    group_commit_summary(&grouped)
                ),
            );
            out.insert((workload, owners), measured);
        }
    }
    Ok(Some(out))
}

/// The etcd rows, or why there are none.
#[cfg(feature = "etcd")]
async fn etcd_rows(settings: &Settings) -> Result<BTreeMap<(Workload, usize), Measured>, String> {
    etcd::rows(settings).await
}

/// The etcd rows, or why there are none.
#[cfg(not(feature = "etcd"))]
async fn etcd_rows(_settings: &Settings) -> Result<BTreeMap<(Workload, usize), Measured>, String> {
    Err(
        "this build has no etcd peer (tether-benches feature `etcd`; building it needs protoc): \
         install etcd-server and protobuf-compiler, then run with --features etcd \
         (cargo xtask bench-report does so when `etcd` and `protoc` are on PATH)"
            .to_owned(),
    )
}

/// The scaling row of a workload: ops/s at 32 owners, with ops/s at 1 owner as its baseline.
pub fn scaling_line(workload: Workload, system: &str, one: f64, many: f64) -> ResultLine {
    ResultLine::new(&workload.row(system, "scaling"), many, Some(one), "ops/s")
}

/// Runs the harness (after `--help` was handled).
pub async fn run(settings: Settings) -> Result<(), String> {
    let mut etcd = BTreeMap::new();
    if settings.etcd {
        match etcd_rows(&settings).await {
            Ok(rows) => etcd = rows,
            Err(why) => note(NAME, &format!("etcd peer rows skipped: {why}")),
        }
    } else {
        note(NAME, "etcd peer rows skipped: --no-etcd");
    }
    for (&(workload, owners), measured) in &mut etcd {
        emit(&measured.result_line(&workload.row("etcd", owners), None));
    }
    for &backend in &settings.backends {
        let Some(mut rows) = tether_rows(backend, &settings).await? else {
            note(
                NAME,
                "postgres rows skipped: no PostgreSQL server answered (set TETHER_PG_URL)",
            );
            continue;
        };
        for (&(workload, owners), measured) in &mut rows {
            let baseline = etcd.get(&(workload, owners)).map(Measured::throughput);
            emit(&measured.result_line(&workload.row(backend.as_str(), owners), baseline));
        }
        for workload in Workload::ALL {
            if let (Some(one), Some(many)) = (rows.get(&(workload, 1)), rows.get(&(workload, 32))) {
                emit(&scaling_line(
                    workload,
                    backend.as_str(),
                    one.throughput(),
                    many.throughput(),
                ));
            }
        }
        match backend {
            Backend::Postgres => pgbench_rows(&settings, &rows).await,
            Backend::Sqlite => libsqlite_rows(&settings, &rows).await,
        }
    }
    Ok(())
}

/// The pgbench gauge rows, and each PostgreSQL transact row set against them.
async fn pgbench_rows(settings: &Settings, tether: &BTreeMap<(Workload, usize), Measured>) {
    if !settings.pgbench {
        note(NAME, "pgbench gauge rows skipped: --no-pgbench");
        return;
    }
    let mut gauge = match pgbench::rows(settings).await {
        Ok(rows) => rows,
        Err(why) => {
            note(NAME, &format!("pgbench gauge rows skipped: {why}"));
            return;
        }
    };
    emit_gauge(Backend::Postgres, "pgbench", &mut gauge, tether);
}

/// The SQLite library gauge rows, and each SQLite transact row set against them.
async fn libsqlite_rows(settings: &Settings, tether: &BTreeMap<(Workload, usize), Measured>) {
    if !settings.libsqlite {
        note(NAME, "SQLite gauge rows skipped: --no-libsqlite");
        return;
    }
    match libsqlite::rows(settings).await {
        Ok(mut gauge) => emit_gauge(Backend::Sqlite, libsqlite::GAUGE, &mut gauge, tether),
        Err(why) => note(NAME, &format!("SQLite gauge rows skipped: {why}")),
    }
}

/// Emits the rows of gauge `name` and each `backend` transact row set against them.
fn emit_gauge(
    backend: Backend,
    name: &str,
    gauge: &mut BTreeMap<usize, Measured>,
    tether: &BTreeMap<(Workload, usize), Measured>,
) {
    for (&owners, measured) in gauge {
        emit(&measured.result_line(&Workload::Transact.row(name, owners), None));
        if let Some(ours) = tether.get(&(Workload::Transact, owners)) {
            emit(&of_gauge_line(
                backend,
                name,
                owners,
                ours.throughput(),
                measured.throughput(),
            ));
        }
    }
}

/// A Tether transact row on `backend` set against gauge `gauge`
/// (`lease_transact_concurrent_postgres_of_pgbench_8`): Tether's ops/s, with the gauge's as
/// the baseline.
pub fn of_gauge_line(
    backend: Backend,
    gauge: &str,
    owners: usize,
    tether: f64,
    measured: f64,
) -> ResultLine {
    ResultLine::new(
        &Workload::Transact.row(&format!("{}_of_{gauge}", backend.as_str()), owners),
        tether,
        Some(measured),
        "ops/s",
    )
}

/// The entry point of `cargo bench --bench lease_concurrent` (arguments after `--`; cargo's
/// own `--bench` is ignored).
#[allow(clippy::print_stderr)]
pub fn main() -> ExitCode {
    let args = Args::from_env();
    if args.flag("--help") {
        eprintln!("{HELP}");
        return ExitCode::SUCCESS;
    }
    run_harness(NAME, Settings::parse(&args).map(run))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Args {
        Args::new(list.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn row_names_follow_the_issue() {
        assert_eq!(
            Workload::Cycle.row("sqlite", 32),
            "lease_cycle_concurrent_sqlite_32"
        );
        assert_eq!(
            Workload::Transact.row("etcd", 128),
            "lease_transact_concurrent_etcd_128"
        );
        let line = scaling_line(Workload::Cycle, "postgres", 100.0, 400.0);
        assert_eq!(
            line.to_string(),
            "bench-result name=lease_cycle_concurrent_postgres_scaling unit=ops/s ours=400 baseline=100"
        );
        assert_eq!(
            of_gauge_line(Backend::Postgres, "pgbench", 32, 300.0, 400.0).to_string(),
            "bench-result name=lease_transact_concurrent_postgres_of_pgbench_32 unit=ops/s ours=300 baseline=400"
        );
        assert_eq!(
            of_gauge_line(Backend::Sqlite, libsqlite::GAUGE, 1, 300.0, 400.0).to_string(),
            "bench-result name=lease_transact_concurrent_sqlite_of_libsqlite_1 unit=ops/s ours=300 baseline=400"
        );
    }

    #[test]
    fn settings_parse() {
        let s = Settings::parse(&args(&["--bench"])).unwrap();
        assert_eq!(s.owners, OWNERS);
        assert_eq!(s.window.measure, Duration::from_secs(3));
        assert_eq!(s.backends, [Backend::Sqlite, Backend::Postgres]);
        assert!(s.etcd);
        let q = Settings::parse(&args(&[
            "--quick",
            "--owners",
            "1, 32",
            "--backend",
            "postgres",
            "--no-etcd",
        ]))
        .unwrap();
        assert_eq!(q.window.measure, Duration::from_millis(1500));
        assert_eq!(q.owners, [1, 32]);
        assert_eq!(q.backends, [Backend::Postgres]);
        assert!(!q.etcd);
        assert!(q.pgbench);
        assert!(!Settings::parse(&args(&["--no-pgbench"])).unwrap().pgbench);
        assert!(q.libsqlite);
        assert!(
            !Settings::parse(&args(&["--no-libsqlite"]))
                .unwrap()
                .libsqlite
        );
        assert!(Settings::parse(&args(&["--owners", "0"])).is_err());
        assert!(Settings::parse(&args(&["--secs", "90"])).is_err());
        assert!(Settings::parse(&args(&["--backend", "mysql"])).is_err());
    }

    #[test]
    fn only_operations_finishing_in_the_measured_part_count() {
        let w = Window {
            warm: Duration::from_millis(500),
            measure: Duration::from_secs(2),
        };
        assert!(!w.counts(Duration::from_millis(499)));
        assert!(w.counts(Duration::from_millis(500)));
        assert!(w.counts(Duration::from_millis(2500)));
        assert!(!w.counts(Duration::from_millis(2501)));
    }

    #[test]
    fn tallies_merge_into_throughput_and_percentiles() {
        let window = Window {
            warm: Duration::ZERO,
            measure: Duration::from_secs(2),
        };
        let tallies = (1..=4u64)
            .map(|owner| {
                let mut t = Tally::default();
                for ms in 0..25 {
                    t.latencies.push(Duration::from_millis(owner * 25 - ms));
                }
                if owner == 3 {
                    t.failed("boom".into(), true);
                }
                t
            })
            .collect();
        let mut m = Measured::merge(4, window, tallies);
        assert_eq!(m.throughput(), 50.0);
        assert_eq!(m.percentiles(), (50.0, 99.0));
        assert_eq!(
            m.result_line("lease_cycle_concurrent_sqlite_4", Some(25.0))
                .to_string(),
            "bench-result name=lease_cycle_concurrent_sqlite_4 unit=ops/s ours=50 baseline=25 p50_ms=50 p99_ms=99"
        );
        assert_eq!(m.tally.errors, 1);
        assert!(
            m.summary()
                .contains("1 failed in the window (first error: boom)")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn both_workloads_run_on_sqlite() {
        let bench = BenchStore::sqlite(8).await.unwrap();
        let lifecycle = bench.lifecycle(LeaseConfig::default()).unwrap();
        let window = Window {
            warm: Duration::from_millis(20),
            measure: Duration::from_millis(150),
        };
        for workload in Workload::ALL {
            let m = tether_row(&lifecycle, workload, 3, window).await.unwrap();
            assert!(!m.tally.latencies.is_empty(), "{workload:?}");
            assert_eq!(m.tally.errors, 0, "{:?}", m.tally.first_error);
        }
        drop(lifecycle);
        bench.cleanup().await;
    }
}
