//! `lease_cycle_sqlite` / `lease_cycle_postgres`: acquire + release through the lifecycle
//! (`with_lease` with an empty body) versus two raw conditional statements (acquire, release)
//! through the same driver and pool.
#![allow(missing_docs, clippy::print_stderr, clippy::expect_used)]

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tether_benches::raw::{RawRow, bench_key};
use tether_benches::report::note;
use tether_benches::stores::{Backend, BenchStore};
use tether_core::LeaseConfig;
use tether_harness_sdk::lifecycle::LeaseOptions;

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

fn lease_cycle(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let name = format!("lease_cycle_{}", backend.as_str());
        let Some(bench) = rt
            .block_on(BenchStore::open(backend, "bench_cycle", 8))
            .expect("open store")
        else {
            note(
                &name,
                "skipped: no PostgreSQL server answered (set TETHER_PG_URL)",
            );
            continue;
        };
        let lifecycle = bench
            .lifecycle(LeaseConfig::with_lease_duration(Duration::from_secs(600)))
            .expect("lifecycle");
        let key = bench_key("cycle", 0);
        let raw = rt
            .block_on(RawRow::seed(&bench.store, bench_key("raw", 0), b"{}"))
            .expect("seed raw row");
        let raw = std::sync::Arc::new(tokio::sync::Mutex::new(raw));
        let store = bench.store.clone();

        let mut group = c.benchmark_group(&name);
        group.throughput(Throughput::Elements(1));
        group.bench_function("ours", |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (lc, key) = (&lifecycle, &key);
                async move {
                    let start = Instant::now();
                    for _ in 0..iters {
                        lc.with_lease(key, LeaseOptions::default(), |guard| async move {
                            Ok(guard.epoch())
                        })
                        .await
                        .expect("acquire and release");
                    }
                    start.elapsed()
                }
            });
        });
        group.bench_function("baseline", |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (raw, store) = (raw.clone(), &store);
                async move {
                    let mut raw = raw.lock().await;
                    let start = Instant::now();
                    for _ in 0..iters {
                        raw.acquire_release(store, "4f6c1f7e-raw-token", i64::MAX / 2)
                            .await
                            .expect("raw acquire and release");
                    }
                    start.elapsed()
                }
            });
        });
        group.finish();
        rt.block_on(bench.cleanup());
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = lease_cycle
}
criterion_main!(benches);
