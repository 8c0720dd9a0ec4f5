//! `terminal_accumulator`: 10,000 terminal tool reports through one terminal-outcome accumulator
//! (`docs/tool-results.md`, "The terminal-outcome accumulator") versus deep-cloning the same
//! reports into a list (the cost of merely keeping them).
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tether_benches::inputs::terminal_reports;
use tether_harness_sdk::results::terminal::{FingerprintIdentity, terminal_outcome_accumulator};

const REPORTS: usize = 10_000;

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

fn accumulator(c: &mut Criterion) {
    let reports = terminal_reports(REPORTS);
    let mut group = c.benchmark_group("terminal_accumulator");
    group.throughput(Throughput::Elements(REPORTS as u64));
    group.bench_function("ours", |b| {
        b.iter(|| {
            let (mut observer, _host) =
                terminal_outcome_accumulator("run-1", Arc::new(FingerprintIdentity));
            for report in &reports {
                black_box(observer.observe(black_box(report)));
            }
            observer.last_tool_error()
        });
    });
    group.bench_function("baseline", |b| {
        b.iter(|| {
            let kept: Vec<_> = reports.iter().map(|r| black_box(r).clone()).collect();
            kept
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = accumulator
}
criterion_main!(benches);
