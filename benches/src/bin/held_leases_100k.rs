//! `held_leases_100k`: one process acquires and holds many leases (100,000 by default) for
//! three lease periods with heartbeats, then reports how many were lost (target 0) and the
//! heartbeat CPU as a share of one core (target ≤ 0.25).
//!
//! Options: `--leases N` (100000), `--lease-secs S` (3), `--periods P` (3), `--backend
//! sqlite|postgres` (sqlite), `--connections C` (8), `--acquire-concurrency K` (16),
//! `--acquire-budget-secs B` (600: acquisition stops there and the rest count as lost),
//! `--per-owner-heartbeats` (one renewal transaction per lease instead of the lifecycle's
//! batched heartbeats, for comparison).
//!
//! Heartbeat CPU is the process's user + system CPU time (`/proc/self/stat`, all threads,
//! SQLite included since it runs in-process; a PostgreSQL server's own CPU is not counted)
//! during the hold phase, when the only work left is renewal, divided by the wall time.
#![allow(clippy::print_stderr)]

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tether_benches::cli::Args;
use tether_benches::raw::bench_key;
use tether_benches::report::{ResultLine, emit, note};
use tether_benches::stats::process_cpu_time;
use tether_benches::stores::{Backend, BenchStore};
use tether_core::LeaseConfig;
use tether_harness_sdk::lifecycle::LeaseOptions;
use tokio::sync::{Semaphore, watch};

const NAME: &str = "held_leases_100k";

struct Settings {
    leases: u64,
    lease: Duration,
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
    Ok(Settings {
        leases: args.value("--leases", 100_000u64)?,
        lease: Duration::from_secs_f64(args.value("--lease-secs", 3.0f64)?),
        periods: args.value("--periods", 3u32)?,
        backend,
        connections: args.value("--connections", 8u32)?,
        concurrency: args.value("--acquire-concurrency", 16usize)?,
        budget: Duration::from_secs(args.value("--acquire-budget-secs", 600u64)?),
        batched: !args.flag("--per-owner-heartbeats"),
    })
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
    let lease = LeaseConfig {
        lease_duration: s.lease,
        wait_budget: s.lease,
        retry_interval: Duration::from_millis(100),
        renew_interval: s.lease / 3,
    };
    let lifecycle = bench
        .lifecycle_with(lease, s.batched)
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
            s.lease,
            s.lease / 3,
            s.leases,
            acquisition.as_secs_f64(),
            held_at_start as f64 / acquisition.as_secs_f64().max(1e-9),
            acquire_failed.load(Ordering::Relaxed),
        ),
    );
    // Hold phase: only heartbeats run.
    let cpu_before = process_cpu_time();
    let hold_start = Instant::now();
    tokio::time::sleep(s.lease * s.periods).await;
    let hold = hold_start.elapsed();
    let cpu_after = process_cpu_time();
    let _ = stop_tx.send(true);
    let mut kept = 0u64;
    for task in tasks {
        if task.await.unwrap_or(false) {
            kept += 1;
        }
    }
    let lost = s.leases - kept;
    emit(&ResultLine::new(NAME, lost as f64, None, "count"));
    match (cpu_before, cpu_after) {
        (Some(before), Some(after)) => {
            let share = after.saturating_sub(before).as_secs_f64() / hold.as_secs_f64();
            emit(&ResultLine::new(NAME, share, None, "cpu-share"));
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
    bench.cleanup().await;
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::from_env();
    let result = settings(&args).and_then(|s| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?
            .block_on(run(s))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{NAME}: {message}");
            ExitCode::FAILURE
        }
    }
}
