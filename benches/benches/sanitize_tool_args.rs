//! `sanitize_tool_args` versus a deep clone (`serde_json::Value::clone`) of the same input:
//! a typical tool call, a 1 MiB nested document and a secret-heavy document.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tether_benches::inputs::{nested_document, secret_heavy_document, typical_tool_call};
use tether_harness_sdk::results::sanitize::sanitize_tool_args;

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

fn sanitize(c: &mut Criterion) {
    let inputs = [
        ("typical", typical_tool_call()),
        ("nested_1mib", nested_document(1 << 20)),
        ("secret_heavy", secret_heavy_document()),
    ];
    let mut group = c.benchmark_group("sanitize_tool_args");
    group.throughput(Throughput::Elements(1));
    for (label, value) in &inputs {
        group.bench_function(format!("ours/{label}"), |b| {
            b.iter(|| sanitize_tool_args(black_box(value)));
        });
        group.bench_function(format!("baseline/{label}"), |b| {
            b.iter(|| black_box(value).clone());
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = sanitize
}
criterion_main!(benches);
