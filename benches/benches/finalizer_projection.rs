//! `finalizer_projection`: the bounded, provenance-checked projection of a 10,000-entry
//! transcript (`project_settled_turn_history`) versus reading the same entries without
//! projection (the same source, every message taken and inspected).
#![allow(missing_docs, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use tether_benches::inputs::transcript;
use tether_finalizer::{
    HistoryReadError, HistorySource, ProjectionLimits, ProvenanceInput,
    project_settled_turn_history,
};

const ENTRIES: usize = 10_000;

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

fn projection(c: &mut Criterion) {
    let (history, settled) = transcript("turn-1", ENTRIES);
    let source = || history.clone().into_iter().map(Ok::<_, HistoryReadError>);
    let projected = project_settled_turn_history(
        ProvenanceInput {
            turn_id: "turn-1",
            settled_messages: &settled,
            mirrored_messages: &settled,
            limits: ProjectionLimits::default(),
        },
        source(),
    )
    .expect("the benchmark transcript projects");
    assert!(
        projected.omitted_prior_context(),
        "the limits trim the history"
    );

    let mut group = c.benchmark_group("finalizer_projection");
    group.throughput(Throughput::Elements(ENTRIES as u64));
    group.bench_function("ours", |b| {
        b.iter_batched(
            source,
            |history| {
                project_settled_turn_history(
                    ProvenanceInput {
                        turn_id: "turn-1",
                        settled_messages: &settled,
                        mirrored_messages: &settled,
                        limits: ProjectionLimits::default(),
                    },
                    history,
                )
                .expect("projects")
            },
            BatchSize::LargeInput,
        );
    });
    group.bench_function("baseline", |b| {
        b.iter_batched(
            source,
            |mut history| {
                let mut bytes = 0usize;
                while let Some(next) = history.next_message() {
                    let message = next.expect("readable");
                    bytes += message.visible_text().len();
                    black_box(&message);
                }
                bytes
            },
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = projection
}
criterion_main!(benches);
