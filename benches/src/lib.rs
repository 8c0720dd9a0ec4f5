//! # tether-benches
//!
//! Tether's performance measurements (the bars: BENCHMARKS.md): criterion benchmarks in
//! `benches/`, each workload beside its baseline in the same run, and fixed-work scale harnesses
//! in `src/bin/` for what criterion cannot express. `cargo bench -p tether-benches` runs the
//! benchmarks; `cargo xtask bench-report` runs everything and writes `target/bench-report.json`.
//!
//! This library holds what the benchmarks and harnesses share: opening the stores exactly as
//! production does ([`stores`]), the raw single-statement baselines ([`raw`]), the inputs
//! ([`inputs`]), latency statistics and process CPU time ([`stats`]), the result lines the
//! report collects ([`report`]), and the concurrent lease harness with its etcd peer, its
//! pgbench gauge and its SQLite library gauge ([`concurrent`], run by `cargo bench --bench
//! lease_concurrent`).
//!
//! ```
//! use tether_benches::stats::Latencies;
//! use std::time::Duration;
//!
//! let mut l = Latencies::default();
//! for ms in 1..=100 {
//!     l.push(Duration::from_millis(ms));
//! }
//! assert_eq!(l.percentile(50.0), Duration::from_millis(50));
//! assert_eq!(l.percentile(99.0), Duration::from_millis(99));
//! let line = tether_benches::report::ResultLine::new("acquire_latency_scaling", 1.2, Some(1.0), "ms");
//! assert!(line.to_string().starts_with("bench-result name=acquire_latency_scaling"));
//! ```

pub mod cli;
pub mod concurrent;
pub mod inputs;
pub mod raw;
pub mod report;
pub mod stats;
pub mod stores;
