//! The result lines the harnesses print and `cargo xtask bench-report` collects.
//!
//! One line per measured value: `bench-result name=<workload> unit=<unit> ours=<number>
//! baseline=<number|null>`, optionally followed by the latency percentiles of the same
//! measurement (`p50_ms=<number> p99_ms=<number>`, for throughput rows), plus free-form `bench-note <workload>: <text>` lines that the report
//! keeps beside the table (for example "PostgreSQL unreachable").

use std::fmt;

/// One measured value of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultLine {
    /// The workload name (as in the issue: `held_leases_100k`, …).
    pub name: String,
    /// Our number.
    pub ours: f64,
    /// The baseline, when the workload has one.
    pub baseline: Option<f64>,
    /// `ops/s`, `ms`, `ratio`, `count` or `cpu-share`.
    pub unit: String,
    /// The median latency of one operation in milliseconds, when the row measured it.
    pub p50_ms: Option<f64>,
    /// The 99th-percentile latency of one operation in milliseconds, when the row measured it.
    pub p99_ms: Option<f64>,
}

impl ResultLine {
    /// A result line.
    pub fn new(name: &str, ours: f64, baseline: Option<f64>, unit: &str) -> Self {
        Self {
            name: name.to_owned(),
            ours,
            baseline,
            unit: unit.to_owned(),
            p50_ms: None,
            p99_ms: None,
        }
    }

    /// The same line with the p50 and p99 latency (milliseconds) of its operations.
    #[must_use]
    pub fn with_percentiles(mut self, p50_ms: f64, p99_ms: f64) -> Self {
        self.p50_ms = Some(p50_ms);
        self.p99_ms = Some(p99_ms);
        self
    }
}

impl fmt::Display for ResultLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bench-result name={} unit={} ours={}",
            self.name, self.unit, self.ours
        )?;
        match self.baseline {
            Some(b) => write!(f, " baseline={b}")?,
            None => f.write_str(" baseline=null")?,
        }
        if let Some(p50) = self.p50_ms {
            write!(f, " p50_ms={p50}")?;
        }
        if let Some(p99) = self.p99_ms {
            write!(f, " p99_ms={p99}")?;
        }
        Ok(())
    }
}

/// Prints a result line on stdout (the harness's user-facing output).
#[allow(clippy::print_stdout)]
pub fn emit(line: &ResultLine) {
    println!("{line}");
}

/// Prints a note about `workload` on stdout.
#[allow(clippy::print_stdout)]
pub fn note(workload: &str, text: &str) {
    println!("bench-note {workload}: {text}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_render_with_and_without_a_baseline() {
        let with = ResultLine::new("lease_transact_sqlite", 10.5, Some(20.0), "ops/s");
        assert_eq!(
            with.to_string(),
            "bench-result name=lease_transact_sqlite unit=ops/s ours=10.5 baseline=20"
        );
        let without = ResultLine::new("held_leases_100k", 0.0, None, "count");
        assert_eq!(
            without.to_string(),
            "bench-result name=held_leases_100k unit=count ours=0 baseline=null"
        );
        let timed = ResultLine::new("lease_cycle_concurrent_sqlite_8", 900.0, None, "ops/s")
            .with_percentiles(2.5, 11.25);
        assert_eq!(
            timed.to_string(),
            "bench-result name=lease_cycle_concurrent_sqlite_8 unit=ops/s ours=900 baseline=null p50_ms=2.5 p99_ms=11.25"
        );
    }
}
