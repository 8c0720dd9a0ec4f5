//! `lease_transact_sqlite` / `lease_transact_postgres`: the lifecycle's `transact` on a held
//! lease versus a raw single-statement conditional `UPDATE … WHERE key = ? AND revision = ?`
//! through the same driver and pool (SQLite: WAL, `synchronous=FULL`).
#![allow(missing_docs, clippy::print_stderr, clippy::expect_used)]

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use tether_benches::raw::{RawRow, bench_key};
use tether_benches::report::note;
use tether_benches::stores::{Backend, BenchStore, Record};
use tether_core::LeaseConfig;
use tether_harness_sdk::lifecycle::{Applied, LeaseOptions, TransactOptions};

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

fn record(i: u64) -> Record {
    let mut r = Record::new();
    r.insert("thread".into(), json!("t-1"));
    r.insert("n".into(), json!(i));
    r
}

fn lease_transact(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let name = format!("lease_transact_{}", backend.as_str());
        let Some(bench) = rt
            .block_on(BenchStore::open(backend, "bench_transact", 8))
            .expect("open store")
        else {
            note(
                &name,
                "skipped: no PostgreSQL server answered (set TETHER_PG_URL)",
            );
            continue;
        };
        // A long lease: no heartbeat falls inside a measurement.
        let lifecycle = bench
            .lifecycle(LeaseConfig::with_lease_duration(Duration::from_secs(600)))
            .expect("lifecycle");
        let key = bench_key("transact", 0);
        let value = serde_json::to_vec(&record(0)).expect("encode");
        let raw = rt
            .block_on(RawRow::seed(&bench.store, bench_key("raw", 0), &value))
            .expect("seed raw row");
        let raw = std::sync::Arc::new(tokio::sync::Mutex::new(raw));
        let store = bench.store.clone();

        let mut group = c.benchmark_group(&name);
        group.throughput(Throughput::Elements(1));
        group.bench_function("ours", |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (lc, key) = (&lifecycle, &key);
                async move {
                    lc.with_lease(key, LeaseOptions::default(), |_| async move {
                        let start = Instant::now();
                        for i in 0..iters {
                            lc.transact(key, TransactOptions::default(), |_, _| {
                                Ok(Applied::write(record(i), ()))
                            })
                            .await?;
                        }
                        Ok(start.elapsed())
                    })
                    .await
                    .expect("transact under a held lease")
                }
            });
        });
        group.bench_function("baseline", |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let (raw, store) = (raw.clone(), &store);
                async move {
                    let mut raw = raw.lock().await;
                    let start = Instant::now();
                    for i in 0..iters {
                        let value = serde_json::to_vec(&record(i)).expect("encode");
                        raw.cas_update(store, &value).await.expect("raw update");
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
    targets = lease_transact
}
criterion_main!(benches);
