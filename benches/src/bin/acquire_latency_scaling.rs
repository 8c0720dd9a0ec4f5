//! `acquire_latency_scaling`: p50 and p99 lease acquisition latency with 1,000 and with
//! 1,000,000 binding rows (target: p50 at 1,000,000 ≤ 1.3 × p50 at 1,000).
//!
//! For each size a fresh store is seeded in bulk in one transaction, then `--samples` leases
//! (default 500) are acquired one after another on existing rows spread over the whole key
//! range; the latency is from the `with_lease` call until its callback runs (the release is not
//! timed). Options: `--small N` (1000), `--large N` (1000000), `--samples K` (500), `--backend
//! sqlite|postgres` (sqlite).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tether_benches::cli::{Args, run_harness};
use tether_benches::raw::{bench_key, seed_bulk};
use tether_benches::report::{ResultLine, emit, note};
use tether_benches::stats::{Latencies, millis};
use tether_benches::stores::{Backend, BenchStore};
use tether_core::LeaseConfig;
use tether_harness_sdk::lifecycle::LeaseOptions;

const NAME: &str = "acquire_latency_scaling";

async fn measure(backend: Backend, rows: u64, samples: u64) -> Result<Option<Latencies>, String> {
    let Some(bench) = BenchStore::open(backend, "bench_acquire", 8)
        .await
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let seeded = Instant::now();
    seed_bulk(&bench.store, "seed", rows)
        .await
        .map_err(|e| e.to_string())?;
    note(
        NAME,
        &format!(
            "{}: seeded {rows} rows in {:.1} s",
            backend.as_str(),
            seeded.elapsed().as_secs_f64()
        ),
    );
    let lifecycle = bench
        .lifecycle(LeaseConfig::with_lease_duration(Duration::from_secs(600)))
        .map_err(|e| e.to_string())?;
    let mut latencies = Latencies::default();
    // A multiplicative walk over the key range (odd step, so keys are distinct for samples ≤ rows).
    let step = (rows / 2) | 1;
    for i in 0..samples {
        let key = bench_key("seed", (i * step + i / rows) % rows);
        let start = Instant::now();
        let latency = lifecycle
            .with_lease(&key, LeaseOptions::default(), |_| async move {
                Ok(start.elapsed())
            })
            .await
            .map_err(|e| format!("acquisition of {key} failed: {e}"))?;
        latencies.push(latency);
    }
    bench.cleanup().await;
    Ok(Some(latencies))
}

async fn run(args: &Args) -> Result<(), String> {
    let backend = match args.value("--backend", "sqlite".to_owned())?.as_str() {
        "sqlite" => Backend::Sqlite,
        "postgres" => Backend::Postgres,
        other => return Err(format!("--backend: unknown `{other}` (sqlite or postgres)")),
    };
    let small = args.value("--small", 1_000u64)?;
    let large = args.value("--large", 1_000_000u64)?;
    let samples = args.value("--samples", 500u64)?;
    let Some(mut at_small) = measure(backend, small, samples).await? else {
        note(
            NAME,
            "skipped: no PostgreSQL server answered (set TETHER_PG_URL)",
        );
        return Ok(());
    };
    let Some(mut at_large) = measure(backend, large, samples).await? else {
        note(
            NAME,
            "skipped: no PostgreSQL server answered (set TETHER_PG_URL)",
        );
        return Ok(());
    };
    let (p50_small, p99_small) = (at_small.percentile(50.0), at_small.percentile(99.0));
    let (p50_large, p99_large) = (at_large.percentile(50.0), at_large.percentile(99.0));
    note(
        NAME,
        &format!(
            "{}: {samples} acquisitions each; {small} rows p50 {:.3} ms p99 {:.3} ms; {large} rows p50 {:.3} ms p99 {:.3} ms",
            backend.as_str(),
            millis(p50_small),
            millis(p99_small),
            millis(p50_large),
            millis(p99_large)
        ),
    );
    emit(&ResultLine::new(
        NAME,
        millis(p50_large),
        Some(millis(p50_small)),
        "ms",
    ));
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::from_env();
    run_harness(NAME, Ok(run(&args)))
}
