//! The result lines the harnesses print and `cargo xtask bench-report` collects.
//!
//! One line per measured value: `bench-result name=<workload> unit=<unit> ours=<number>
//! baseline=<number|null>`, plus free-form `bench-note <workload>: <text>` lines that the report
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
}

impl ResultLine {
    /// A result line.
    pub fn new(name: &str, ours: f64, baseline: Option<f64>, unit: &str) -> Self {
        Self {
            name: name.to_owned(),
            ours,
            baseline,
            unit: unit.to_owned(),
        }
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
            Some(b) => write!(f, " baseline={b}"),
            None => f.write_str(" baseline=null"),
        }
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
    }
}
