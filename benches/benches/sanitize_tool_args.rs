//! `sanitize_tool_args` versus a deep clone (`serde_json::Value::clone`) of the same input:
//! a typical tool call, a 1 MiB nested document and a secret-heavy document (the group of the
//! bar), and, in a group of its own with no bar, tool calls carrying 16 KiB of prose or code.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tether_benches::inputs::{
    CODE_LINES, PROSE_LINE, long_text_call, nested_document, secret_heavy_document,
    typical_tool_call,
};
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
    compare(c, "sanitize_tool_args", &inputs);
    // Long texts: the redaction reads every byte of a text and a copy does not, so the ratio
    // falls with the text's length (no bar; `cargo xtask bench-report` does not read it).
    let long = [
        ("prose_16kib", long_text_call(PROSE_LINE, 16 << 10)),
        ("code_16kib", long_text_call(CODE_LINES, 16 << 10)),
    ];
    compare(c, "sanitize_long_text", &long);
}

/// One benchmark group: `sanitize_tool_args` (`ours/<input>`) beside a clone
/// (`baseline/<input>`) of each input.
fn compare(c: &mut Criterion, name: &str, inputs: &[(&str, serde_json::Value)]) {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    for (label, value) in inputs {
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
