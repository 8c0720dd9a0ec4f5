//! `held_leases_100k`: one process acquires and holds many leases (100,000 by default) for
//! three lease periods with heartbeats, then reports how many were lost (target 0) and the
//! heartbeat CPU as a share of one core (targets: ≤ 0.25 with the shipped lease, ≤ 0.1 with a
//! 3 s stress lease).
//!
//! Rows: `held_leases_100k_lost` (count) and `held_leases_100k_cpu` (cpu-share) with
//! `--production-lease`; with a stress lease of S seconds, `held_leases_100k_lost_stress<S>s`
//! and `held_leases_100k_cpu_stress<S>s` (for example `…_stress3s`).
//!
//! Options: `--leases N` (100000), `--lease-secs S` (3; renew every S/3, wait budget S),
//! `--production-lease` (instead of `--lease-secs`: `LeaseConfig::default()`, a 65 s lease
//! renewed every 65/3 s), `--periods P` (3), `--backend sqlite|postgres` (sqlite),
//! `--connections C` (8), `--acquire-concurrency K` (16), `--acquire-budget-secs B` (600:
//! acquisition stops there and the rest count as lost), `--per-owner-heartbeats` (one renewal
//! transaction per lease instead of the lifecycle's batched heartbeats, for comparison),
//! `--help`.
//!
//! Heartbeat CPU is the process's user + system CPU time (`/proc/self/stat`, all threads,
//! SQLite included since it runs in-process) during the hold phase, when the only work left is
//! renewal, divided by the wall time (the batch statistics below included). A PostgreSQL server's CPU
//! is not part of that number; when the server runs on this machine its CPU over the same
//! window is reported in notes, read from `/proc/<pid>/stat`: the backends connected to the
//! benchmark's database, and separately every `postgres` process (which includes background
//! writers and other users' sessions on a shared server).
//!
//! Renewal batches are read from the lifecycle's `lease batch renewed` / `batched lease
//! renewal failed` trace events (a minimal subscriber that listens to those two events only):
//! count, size, duration percentiles, leases refused, and the smallest slack seen (how much of
//! the closest lease was left when its batch started; negative would mean a renewal came after
//! the expiry).
#![allow(clippy::print_stderr)]

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DbBackend, Statement};
use tether_benches::cli::{Args, run_harness};
use tether_benches::raw::bench_key;
use tether_benches::report::{ResultLine, emit, note};
use tether_benches::stats::{Latencies, millis, process_cpu_time};
use tether_benches::stores::{Backend, BenchStore};
use tether_core::LeaseConfig;
use tether_harness_sdk::lifecycle::LeaseOptions;
use tether_storage::Store;
use tokio::sync::{Semaphore, watch};
use tracing::field::{Field, Visit};
use tracing::{Event, Metadata, Subscriber, span};

const NAME: &str = "held_leases_100k";

const HELP: &str = "held_leases_100k: acquire and hold many leases for several lease periods, \
report leases lost and heartbeat CPU.

Options:
  --leases N                 leases to acquire and hold (100000)
  --lease-secs S             lease duration in seconds, renewed every S/3 (3)
  --production-lease         use LeaseConfig::default() (65 s lease, renew every 65/3 s)
  --periods P                lease periods to hold after acquisition (3)
  --backend sqlite|postgres  store backend (sqlite)
  --connections C            pool size (8)
  --acquire-concurrency K    acquisitions in flight (16)
  --acquire-budget-secs B    stop acquiring after B s; the rest count as lost (600)
  --per-owner-heartbeats     one renewal transaction per lease (comparison)
  --help                     this text";

struct Settings {
    /// The suffix of the row names: empty for the shipped lease, `_stress<S>s` otherwise.
    row_suffix: String,
    leases: u64,
    lease: LeaseConfig,
    periods: u32,
    backend: Backend,
    connections: u32,
    concurrency: usize,
    budget: Duration,
    batched: bool,
}

fn settings(args: &Args) -> Result<Settings, String> {
    let backend = match args.value("--backend", "sqlite".to_owned())?.as_str() {
        "sqlite" => Backend::Sqlite,
        "postgres" => Backend::Postgres,
        other => return Err(format!("--backend: unknown `{other}` (sqlite or postgres)")),
    };
    let production = args.flag("--production-lease");
    let lease_secs = args.value("--lease-secs", 3.0f64)?;
    let lease = if production {
        LeaseConfig::default()
    } else {
        let duration = Duration::from_secs_f64(lease_secs);
        LeaseConfig {
            lease_duration: duration,
            wait_budget: duration,
            retry_interval: Duration::from_millis(100),
            renew_interval: duration / 3,
        }
    };
    lease.validate().map_err(|e| format!("lease: {e}"))?;
    Ok(Settings {
        row_suffix: if production {
            String::new()
        } else {
            format!("_stress{lease_secs}s")
        },
        leases: args.value("--leases", 100_000u64)?,
        lease,
        periods: args.value("--periods", 3u32)?,
        backend,
        connections: args.value("--connections", 8u32)?,
        concurrency: args.value("--acquire-concurrency", 16usize)?,
        budget: Duration::from_secs(args.value("--acquire-budget-secs", 600u64)?),
        batched: !args.flag("--per-owner-heartbeats"),
    })
}

/// The renewal batches seen since the last [`RenewStats::take`].
#[derive(Debug, Default)]
struct RenewStats {
    batches: u64,
    leases: u64,
    refused: u64,
    failed_batches: u64,
    durations: Latencies,
    largest: u64,
    /// The smallest slack (ms) of any batch: expiry of its closest lease minus the batch start.
    min_slack_ms: Option<i64>,
}

impl RenewStats {
    fn take(&mut self) -> Self {
        std::mem::take(self)
    }

    fn summary(&mut self, window: Duration) -> String {
        if self.batches == 0 {
            return "no renewal batch".to_owned();
        }
        format!(
            "{} batches, {} renewals ({:.0}/s), largest batch {}, batch time p50 {:.1} ms p99 {:.1} ms max {:.1} ms, {} renewals refused, {} batches failed, smallest slack before expiry {}",
            self.batches,
            self.leases,
            self.leases as f64 / window.as_secs_f64().max(1e-9),
            self.largest,
            millis(self.durations.percentile(50.0)),
            millis(self.durations.percentile(99.0)),
            millis(self.durations.percentile(100.0)),
            self.refused,
            self.failed_batches,
            self.min_slack_ms
                .map_or_else(|| "n/a".to_owned(), |ms| format!("{ms} ms")),
        )
    }
}

/// The module whose events describe renewal batches.
const BATCH_TARGET: &str = "tether_harness_sdk::lifecycle::batch";

/// A tracing subscriber that only listens to the renewal driver's per-batch events.
#[derive(Debug, Clone, Default)]
struct BatchRecorder {
    stats: Arc<Mutex<RenewStats>>,
}

impl BatchRecorder {
    fn stats(&self) -> MutexGuard<'_, RenewStats> {
        self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The fields of one batch event.
#[derive(Debug, Default)]
struct BatchFields {
    leases: u64,
    refused: u64,
    elapsed_us: u64,
    min_slack_ms: Option<i64>,
    failed: bool,
}

impl Visit for BatchFields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "leases" => self.leases = value,
            "refused" => self.refused = value,
            "elapsed_us" => self.elapsed_us = value,
            _ => {}
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == "min_slack_ms" {
            self.min_slack_ms = Some(value);
        }
    }

    fn record_debug(&mut self, field: &Field, _value: &dyn std::fmt::Debug) {
        if field.name() == "error" {
            self.failed = true;
        }
    }
}

impl Subscriber for BatchRecorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_event() && metadata.target() == BATCH_TARGET
    }

    fn new_span(&self, _span: &span::Attributes<'_>) -> span::Id {
        // Never called: no span is enabled.
        span::Id::from_u64(1)
    }

    fn record(&self, _span: &span::Id, _values: &span::Record<'_>) {}

    fn record_follows_from(&self, _span: &span::Id, _follows: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = BatchFields::default();
        event.record(&mut fields);
        if fields.leases == 0 && !fields.failed {
            return;
        }
        let mut stats = self.stats();
        stats.batches += 1;
        stats.leases += fields.leases;
        stats.largest = stats.largest.max(fields.leases);
        stats
            .durations
            .push(Duration::from_micros(fields.elapsed_us));
        stats.refused += fields.refused;
        if fields.failed {
            stats.failed_batches += 1;
        }
        if let Some(slack) = fields.min_slack_ms {
            stats.min_slack_ms = Some(stats.min_slack_ms.map_or(slack, |m| m.min(slack)));
        }
    }

    fn enter(&self, _span: &span::Id) {}

    fn exit(&self, _span: &span::Id) {}
}

/// CPU seconds of the PostgreSQL server processes on this machine, by pid.
#[derive(Debug, Default)]
struct PgCpu {
    /// The backends connected to the benchmark's database.
    ours: HashMap<u32, Duration>,
    /// Every process named `postgres`.
    all: HashMap<u32, Duration>,
}

/// `utime + stime` of `/proc/<pid>/stat`, in seconds (100 ticks per second, Linux's
/// `USER_HZ`).
fn proc_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_secs_f64((utime + stime) / 100.0))
}

/// The pids of `postgres` processes visible in `/proc`.
fn postgres_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "postgres")
        })
        .collect()
}

/// A snapshot of the server's CPU; `None` unless PostgreSQL runs on this machine.
async fn pg_cpu(store: &Store) -> Option<PgCpu> {
    if store.backend() != DbBackend::Postgres {
        return None;
    }
    let rows = store
        .connection()
        .query_all_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()",
        ))
        .await
        .ok()?;
    let mut snapshot = PgCpu::default();
    for row in rows {
        let pid: i32 = row.try_get("", "pid").ok()?;
        let pid = u32::try_from(pid).ok()?;
        snapshot.ours.insert(pid, proc_cpu(pid)?);
    }
    for pid in postgres_pids() {
        if let Some(cpu) = proc_cpu(pid) {
            snapshot.all.insert(pid, cpu);
        }
    }
    (!snapshot.ours.is_empty()).then_some(snapshot)
}

/// CPU used between two snapshots: per pid `after - before` (a pid first seen after started
/// inside the window and counts whole; processes that ended inside it are missed).
fn cpu_between(before: &HashMap<u32, Duration>, after: &HashMap<u32, Duration>) -> Duration {
    after
        .iter()
        .map(|(pid, cpu)| cpu.saturating_sub(before.get(pid).copied().unwrap_or_default()))
        .sum()
}

async fn run(s: Settings) -> Result<(), String> {
    let Some(bench) = BenchStore::open(s.backend, "bench_held", s.connections)
        .await
        .map_err(|e| e.to_string())?
    else {
        note(
            NAME,
            "skipped: no PostgreSQL server answered (set TETHER_PG_URL)",
        );
        return Ok(());
    };
    let recorder = BatchRecorder::default();
    // Only this harness's events; fails harmlessly if a subscriber is already set.
    let _ = tracing::subscriber::set_global_default(recorder.clone());
    let lifecycle = bench
        .lifecycle_with(s.lease, s.batched)
        .map_err(|e| e.to_string())?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let permits = Arc::new(Semaphore::new(s.concurrency.max(1)));
    let acquired = Arc::new(AtomicU64::new(0));
    let acquire_failed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(usize::try_from(s.leases).unwrap_or(0));
    for i in 0..s.leases {
        let (lc, mut stop) = (lifecycle.clone(), stop_rx.clone());
        let (permits, acquired, acquire_failed) =
            (permits.clone(), acquired.clone(), acquire_failed.clone());
        tasks.push(tokio::spawn(async move {
            let key = bench_key("held", i);
            let Ok(permit) = permits.acquire_owned().await else {
                return false;
            };
            if *stop.borrow() {
                return false;
            }
            let mut entered = false;
            let outcome = lc
                .with_lease(&key, LeaseOptions::default(), |_guard| {
                    entered = true;
                    drop(permit);
                    acquired.fetch_add(1, Ordering::Relaxed);
                    async move {
                        let _ = stop.wait_for(|stopped| *stopped).await;
                        Ok(())
                    }
                })
                .await;
            if !entered {
                acquire_failed.fetch_add(1, Ordering::Relaxed);
            }
            entered && outcome.is_ok()
        }));
    }
    // Acquisition phase.
    loop {
        let done = acquired.load(Ordering::Relaxed) + acquire_failed.load(Ordering::Relaxed);
        if done >= s.leases || started.elapsed() >= s.budget {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let acquisition = started.elapsed();
    let held_at_start = acquired.load(Ordering::Relaxed);
    note(
        NAME,
        &format!(
            "{} backend, {} heartbeats, lease {:?}, renew every {:?}; acquired {held_at_start} of {} leases in {:.1} s ({:.0}/s); {} acquisitions failed",
            s.backend.as_str(),
            if s.batched { "batched" } else { "per-owner" },
            s.lease.lease_duration,
            s.lease.renew_interval,
            s.leases,
            acquisition.as_secs_f64(),
            held_at_start as f64 / acquisition.as_secs_f64().max(1e-9),
            acquire_failed.load(Ordering::Relaxed),
        ),
    );
    let mut during_acquisition = recorder.stats().take();
    // Hold phase: only heartbeats run.
    let pg_before = pg_cpu(&bench.store).await;
    let cpu_before = process_cpu_time();
    let hold_start = Instant::now();
    tokio::time::sleep(s.lease.lease_duration * s.periods).await;
    let hold = hold_start.elapsed();
    let cpu_after = process_cpu_time();
    let pg_after = pg_cpu(&bench.store).await;
    let mut during_hold = recorder.stats().take();
    let _ = stop_tx.send(true);
    let mut kept = 0u64;
    for task in tasks {
        if task.await.unwrap_or(false) {
            kept += 1;
        }
    }
    let lost = s.leases - kept;
    emit(&ResultLine::new(
        &format!("{NAME}_lost{}", s.row_suffix),
        lost as f64,
        None,
        "count",
    ));
    match (cpu_before, cpu_after) {
        (Some(before), Some(after)) => {
            let share = after.saturating_sub(before).as_secs_f64() / hold.as_secs_f64();
            emit(&ResultLine::new(
                &format!("{NAME}_cpu{}", s.row_suffix),
                share,
                None,
                "cpu-share",
            ));
        }
        _ => note(
            NAME,
            "heartbeat CPU not measured: /proc/self/stat is unavailable",
        ),
    }
    note(
        NAME,
        &format!(
            "held {:.1} s ({} lease periods); {kept} of {} leases held to the end",
            hold.as_secs_f64(),
            s.periods,
            s.leases
        ),
    );
    if s.batched {
        note(
            NAME,
            &format!(
                "renewal batches during acquisition: {}",
                during_acquisition.summary(acquisition)
            ),
        );
        note(
            NAME,
            &format!(
                "renewal batches during the hold: {}",
                during_hold.summary(hold)
            ),
        );
    }
    match (pg_before, pg_after) {
        (Some(before), Some(after)) => {
            let secs = hold.as_secs_f64();
            note(
                NAME,
                &format!(
                    "PostgreSQL server CPU during the hold (not in the heartbeat CPU above; /proc/<pid>/stat): backends of the benchmark database {:.3} of one core; all postgres processes on the machine (incl. background writers and other users' sessions) {:.3} of one core",
                    cpu_between(&before.ours, &after.ours).as_secs_f64() / secs,
                    cpu_between(&before.all, &after.all).as_secs_f64() / secs,
                ),
            );
        }
        _ if s.backend == Backend::Postgres => note(
            NAME,
            "PostgreSQL server CPU not measured: its processes are not readable in /proc here",
        ),
        _ => {}
    }
    drop(lifecycle);
    bench.cleanup().await;
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::from_env();
    if args.flag("--help") {
        eprintln!("{HELP}");
        return ExitCode::SUCCESS;
    }
    run_harness(NAME, settings(&args).map(run))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorder_counts_only_the_drivers_batch_events() {
        let recorder = BatchRecorder::default();
        tracing::subscriber::with_default(recorder.clone(), || {
            tracing::debug!(
                target: "tether_harness_sdk::lifecycle::batch",
                leases = 2_000usize,
                refused = 3usize,
                elapsed_us = 40_000u64,
                min_slack_ms = 250i64,
                "lease batch renewed"
            );
            tracing::warn!(
                target: "tether_harness_sdk::lifecycle::batch",
                error = %"connection reset",
                leases = 500usize,
                elapsed_us = 90_000u64,
                min_slack_ms = -20i64,
                "batched lease renewal failed"
            );
            tracing::debug!(target: "somewhere_else", leases = 7usize, "not a batch");
        });
        let mut stats = recorder.stats().take();
        assert_eq!(stats.batches, 2);
        assert_eq!(stats.leases, 2_500);
        assert_eq!(stats.refused, 3);
        assert_eq!(stats.failed_batches, 1);
        assert_eq!(stats.largest, 2_000);
        assert_eq!(stats.min_slack_ms, Some(-20));
        assert_eq!(stats.durations.percentile(100.0), Duration::from_millis(90));
        assert_eq!(recorder.stats().batches, 0, "take resets");
    }

    #[test]
    fn server_cpu_counts_new_processes_whole_and_known_ones_by_difference() {
        let before = HashMap::from([(1, Duration::from_secs(5)), (2, Duration::from_secs(1))]);
        let after = HashMap::from([(1, Duration::from_secs(7)), (3, Duration::from_secs(1))]);
        assert_eq!(cpu_between(&before, &after), Duration::from_secs(3));
    }

    #[test]
    fn settings_take_the_production_lease_on_request() {
        let args = |raw: &[&str]| Args::new(raw.iter().map(|s| (*s).to_owned()));
        let s = settings(&args(&["--production-lease", "--backend", "postgres"])).unwrap();
        assert_eq!(s.lease, LeaseConfig::default());
        assert_eq!(s.row_suffix, "");
        let s = settings(&args(&["--lease-secs", "3"])).unwrap();
        assert_eq!(s.lease.lease_duration, Duration::from_secs(3));
        assert_eq!(s.row_suffix, "_stress3s");
        assert_eq!(
            settings(&args(&["--lease-secs", "2.5"]))
                .unwrap()
                .row_suffix,
            "_stress2.5s"
        );
        assert_eq!(s.lease.renew_interval, Duration::from_secs(1));
        assert!(settings(&args(&["--backend", "oracle"])).is_err());
    }
}
