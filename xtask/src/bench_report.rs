//! `cargo xtask bench-report [--quick]`: runs every benchmark and scale harness of
//! `tether-benches`, writes `target/bench-report.json` and prints a Markdown table (also written
//! to `target/bench-report.md`) for `BENCHMARKS.md`.
//!
//! The criterion benchmarks run through `cargo bench -p tether-benches`; their results are read
//! back from `target/criterion/<workload>/<function>/new/{estimates,benchmark}.json` (only files
//! written by this run count). The scale harnesses print `bench-result` lines (see
//! `tether_benches::report`) that are collected as they are; so does the concurrent lease
//! harness (`cargo bench --bench lease_concurrent`, a `harness = false` target), built with the
//! `etcd` feature of `tether-benches` when `etcd` and `protoc` are on PATH so that its etcd peer
//! rows run (else they say "skipped" and the Tether rows still run); its pgbench gauge rows (the
//! server's own client sending a Tether transact's statement) run when PostgreSQL's `pgbench`
//! is on PATH or under `/usr/lib/postgresql/*/bin`, and its SQLite gauge rows (the SQLite
//! library called directly with that statement) always. `--quick` shortens the
//! criterion measurement time, the concurrent rows and the harnesses' sample counts and budgets
//! so the whole run stays within ten minutes on a 2-core machine; the workloads and their sizes
//! stay the same.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Instant, SystemTime};

use super::{cargo, say, workspace_root};

/// The criterion workloads, in report order.
const CRITERION_WORKLOADS: &[&str] = &[
    "lease_transact_sqlite",
    "lease_transact_postgres",
    "lease_cycle_sqlite",
    "lease_cycle_postgres",
    "sanitize_tool_args",
    "finalizer_projection",
    "terminal_accumulator",
];

/// The criterion bench targets (files in `benches/benches/`).
const BENCH_TARGETS: &[&str] = &[
    "lease_transact",
    "lease_cycle",
    "sanitize_tool_args",
    "finalizer_projection",
    "terminal_accumulator",
];

/// The concurrent lease harness (`benches/benches/lease_concurrent.rs`, logic in
/// `benches/src/concurrent/`).
const CONCURRENT_TARGET: &str = "lease_concurrent";

/// "No worse than 0.9× today's figure" at 1 owner (issue 17, "Performance under concurrency"):
/// the ops/s the issue quotes as today's, measured on this machine kind before the concurrency
/// work (one owner, SQLite WAL + FULL and PostgreSQL 15). The bar is 0.9× these.
const ONE_OWNER_TODAY: &[(&str, f64)] = &[
    ("lease_cycle_concurrent_sqlite_1", 1064.0),
    ("lease_transact_concurrent_sqlite_1", 5127.0),
    ("lease_cycle_concurrent_postgres_1", 858.0),
    ("lease_transact_concurrent_postgres_1", 4593.0),
];

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Workload {
    pub(crate) name: String,
    pub(crate) ours: f64,
    pub(crate) baseline: Option<f64>,
    pub(crate) unit: String,
    /// Median latency of one operation (ms), for rows that measured it.
    pub(crate) p50_ms: Option<f64>,
    /// 99th-percentile latency of one operation (ms), for rows that measured it.
    pub(crate) p99_ms: Option<f64>,
    /// Extra text for the Markdown table (input, percentiles).
    pub(crate) detail: String,
}

impl Workload {
    fn ratio(&self) -> Option<f64> {
        self.baseline.filter(|b| *b != 0.0).map(|b| self.ours / b)
    }
}

/// Runs the report. `args` are the task's arguments after `bench-report`.
pub(crate) fn bench_report(args: &[String]) -> Result<(), String> {
    let quick = match args {
        [] => false,
        [flag] if flag == "--quick" => true,
        other => {
            return Err(format!(
                "unknown arguments {other:?}; usage: cargo xtask bench-report [--quick]"
            ));
        }
    };
    let root = workspace_root()?;
    let target = crate::target_dir()?;
    let started = SystemTime::now();
    let clock = Instant::now();
    let mut notes: Vec<String> = Vec::new();
    let mut workloads: Vec<Workload> = Vec::new();

    // 1. Criterion benchmarks.
    let measurement = if quick { "2" } else { "3" };
    let mut bench = cargo();
    bench
        .current_dir(&root)
        .args(["bench", "-p", "tether-benches"]);
    for target in BENCH_TARGETS {
        bench.args(["--bench", target]);
    }
    bench.args([
        "--",
        "--warm-up-time",
        "1",
        "--measurement-time",
        measurement,
    ]);
    let lines = run_collecting("criterion benchmarks", &mut bench)?;
    notes.extend(collect_notes(&lines));
    workloads.extend(criterion_workloads(&target.join("criterion"), started)?);

    // 2. The concurrent lease harness (a `harness = false` bench target), with its etcd peer
    //    when it can be built and run here.
    let missing: Vec<&str> = ["etcd", "protoc"]
        .into_iter()
        .filter(|tool| !on_path(tool))
        .collect();
    let mut concurrent = cargo();
    concurrent.current_dir(&root).args([
        "bench",
        "-p",
        "tether-benches",
        "--bench",
        CONCURRENT_TARGET,
    ]);
    if missing.is_empty() {
        concurrent.args(["--features", "etcd"]);
    } else {
        notes.push(format!(
            "{CONCURRENT_TARGET}: etcd peer not built: {} not on PATH (install etcd-server and protobuf-compiler: apt-get install etcd-server protobuf-compiler)",
            missing.join(" and ")
        ));
    }
    concurrent.arg("--");
    if quick {
        concurrent.arg("--quick");
    }
    collect_harness(
        CONCURRENT_TARGET,
        &mut concurrent,
        &mut workloads,
        &mut notes,
    );

    // 3. Scale harnesses (release builds of `tether-benches` binaries).
    let harnesses: Vec<(&str, Vec<&str>)> = vec![
        (
            "held_leases_100k",
            // The shipped lease (`LeaseConfig::default()`: 65 s, renewed every 65/3 s). Acquiring
            // 100,000 leases on SQLite with synchronous=FULL is fsync-bound (a few hundred per
            // second here); the quick run acquires them on PostgreSQL instead. A shorter lease
            // is a stress setting: run the binary with `--lease-secs S` (BENCHMARKS.md).
            if quick {
                vec![
                    "--production-lease",
                    "--backend",
                    "postgres",
                    "--acquire-concurrency",
                    "32",
                    "--acquire-budget-secs",
                    "240",
                ]
            } else {
                vec!["--production-lease"]
            },
        ),
        (
            "held_leases_100k",
            // The stress lease of the CPU bar (3 s, renewed every second; rows
            // `held_leases_100k_{lost,cpu}_stress3s`), acquired on PostgreSQL in both modes:
            // on SQLite with synchronous=FULL the acquisition alone outlasts many 3 s leases.
            vec![
                "--lease-secs",
                "3",
                "--backend",
                "postgres",
                "--acquire-concurrency",
                "32",
                "--acquire-budget-secs",
                if quick { "240" } else { "600" },
            ],
        ),
        (
            "acquire_latency_scaling",
            if quick {
                vec!["--samples", "200"]
            } else {
                vec![]
            },
        ),
        (
            "admin_sessions_latency",
            if quick {
                vec!["--requests", "2000"]
            } else {
                vec![]
            },
        ),
    ];
    for (bin, extra) in harnesses {
        if !root
            .join("benches/src/bin")
            .join(format!("{bin}.rs"))
            .exists()
        {
            notes.push(format!(
                "{bin}: not run: the harness does not exist in this tree"
            ));
            continue;
        }
        let mut cmd = cargo();
        cmd.current_dir(&root).args([
            "run",
            "--quiet",
            "--release",
            "-p",
            "tether-benches",
            "--bin",
            bin,
            "--",
        ]);
        cmd.args(&extra);
        collect_harness(bin, &mut cmd, &mut workloads, &mut notes);
    }

    // 4. Output.
    let machine = machine();
    let json = render_json(&machine, &workloads);
    let json_path = target.join("bench-report.json");
    std::fs::write(&json_path, json)
        .map_err(|e| format!("cannot write {}: {e}", json_path.display()))?;
    let markdown = render_markdown(&machine, quick, &workloads, &notes);
    let md_path = target.join("bench-report.md");
    std::fs::write(&md_path, &markdown)
        .map_err(|e| format!("cannot write {}: {e}", md_path.display()))?;
    say(&markdown);
    say(&format!(
        "bench-report: wrote {} and {} in {:.0?}",
        json_path.display(),
        md_path.display(),
        clock.elapsed()
    ));
    Ok(())
}

/// Runs a harness, keeping its `bench-result` rows and `bench-note` notes (a failure is a note).
fn collect_harness(
    step: &str,
    cmd: &mut std::process::Command,
    workloads: &mut Vec<Workload>,
    notes: &mut Vec<String>,
) {
    match run_collecting(step, cmd) {
        Ok(lines) => {
            notes.extend(collect_notes(&lines));
            workloads.extend(lines.iter().filter_map(|l| parse_result_line(l)));
        }
        Err(e) => notes.push(format!("{step}: FAILED: {e}")),
    }
}

/// Whether an executable file `name` is in a directory of `PATH`.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
}

/// Runs `cmd`, echoing and returning its stdout lines (stderr passes through).
fn run_collecting(step: &str, cmd: &mut std::process::Command) -> Result<Vec<String>, String> {
    say(&format!("==> {step}"));
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("{step}: cannot start: {e}"))?;
    let mut lines = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            say(&line);
            lines.push(line);
        }
    }
    let status = child.wait().map_err(|e| format!("{step}: {e}"))?;
    say(&format!("    {step}: {status} ({:.0?})", start.elapsed()));
    if status.success() {
        Ok(lines)
    } else {
        Err(format!("{step} failed ({status})"))
    }
}

fn collect_notes(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("bench-note "))
        .map(str::to_owned)
        .collect()
}

/// Parses `bench-result name=N unit=U ours=X baseline=Y|null [p50_ms=A] [p99_ms=B]`.
pub(crate) fn parse_result_line(line: &str) -> Option<Workload> {
    let rest = line.trim().strip_prefix("bench-result ")?;
    let mut fields = BTreeMap::new();
    for part in rest.split_whitespace() {
        let (k, v) = part.split_once('=')?;
        fields.insert(k, v);
    }
    let ours: f64 = fields.get("ours")?.parse().ok()?;
    let baseline = match *fields.get("baseline")? {
        "null" => None,
        b => Some(b.parse().ok()?),
    };
    let optional = |key: &str| -> Option<Option<f64>> {
        match fields.get(key) {
            None => Some(None),
            Some(v) => v.parse().ok().map(Some),
        }
    };
    Some(Workload {
        name: (*fields.get("name")?).to_owned(),
        ours,
        baseline,
        unit: (*fields.get("unit")?).to_owned(),
        p50_ms: optional("p50_ms")?,
        p99_ms: optional("p99_ms")?,
        detail: String::new(),
    })
}

/// The number after `"key":` at or after `from` in `text`.
fn number_after(text: &str, key: &str, from: usize) -> Option<f64> {
    let needle = format!("\"{key}\":");
    let at = text.get(from..)?.find(&needle)? + from + needle.len();
    let rest = text[at..].trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E')))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The string after `"key":` in `text` (no escapes expected).
fn string_after(text: &str, key: &str) -> Option<String> {
    let needle = format!("\"{key}\":\"");
    let at = text.find(&needle)? + needle.len();
    let end = text[at..].find('"')?;
    Some(text[at..at + end].to_owned())
}

/// One criterion measurement: function id → operations per second.
fn read_measurements(group_dir: &Path, since: SystemTime) -> Result<BTreeMap<String, f64>, String> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(group_dir) else {
        return Ok(out);
    };
    for entry in entries.flatten() {
        let new = entry.path().join("new");
        let (Ok(bench), Ok(estimates)) = (
            std::fs::read_to_string(new.join("benchmark.json")),
            std::fs::read_to_string(new.join("estimates.json")),
        ) else {
            continue;
        };
        let fresh = std::fs::metadata(new.join("estimates.json"))
            .and_then(|m| m.modified())
            .is_ok_and(|m| m >= since);
        if !fresh {
            continue;
        }
        let Some(function) = string_after(&bench, "function_id") else {
            continue;
        };
        let elements = number_after(&bench, "Elements", 0).unwrap_or(1.0);
        let mean_at = estimates
            .find("\"mean\"")
            .ok_or_else(|| format!("no mean in {}", new.display()))?;
        let mean_ns = number_after(&estimates, "point_estimate", mean_at)
            .ok_or_else(|| format!("no point estimate in {}", new.display()))?;
        if mean_ns > 0.0 {
            out.insert(function, elements * 1e9 / mean_ns);
        }
    }
    Ok(out)
}

fn criterion_workloads(dir: &Path, since: SystemTime) -> Result<Vec<Workload>, String> {
    let mut out = Vec::new();
    for name in CRITERION_WORKLOADS {
        let measured = read_measurements(&dir.join(name), since)?;
        if measured.is_empty() {
            continue;
        }
        // Pair `ours[/input]` with `baseline[/input]`.
        let mut pairs: Vec<(String, f64, f64)> = measured
            .iter()
            .filter_map(|(function, ours)| {
                let input = function.strip_prefix("ours")?;
                let baseline = measured.get(&format!("baseline{input}"))?;
                Some((input.trim_start_matches('/').to_owned(), *ours, *baseline))
            })
            .collect();
        if pairs.is_empty() {
            continue;
        }
        // Several inputs: the row is the worst ratio; the detail lists every input.
        pairs.sort_by(|a, b| (a.1 / a.2).total_cmp(&(b.1 / b.2)));
        let detail = if pairs.len() > 1 || !pairs[0].0.is_empty() {
            pairs
                .iter()
                .map(|(input, o, b)| {
                    format!("{input}: {} vs {} ({:.2})", fmt_num(*o), fmt_num(*b), o / b)
                })
                .collect::<Vec<_>>()
                .join("; ")
        } else {
            String::new()
        };
        let (input, ours, baseline) = pairs[0].clone();
        out.push(Workload {
            name: (*name).to_owned(),
            ours,
            baseline: Some(baseline),
            unit: "ops/s".to_owned(),
            p50_ms: None,
            p99_ms: None,
            detail: if input.is_empty() {
                detail
            } else {
                format!("worst input `{input}`; {detail}")
            },
        });
    }
    Ok(out)
}

fn fmt_num(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

fn json_number(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".to_owned()
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `{"machine": "...", "workloads": [{"name", "ours", "baseline", "unit", "ratio", "p50_ms",
/// "p99_ms"}]}` (the percentiles are `null` for rows that do not measure them).
pub(crate) fn render_json(machine: &str, workloads: &[Workload]) -> String {
    let mut out = format!(
        "{{\n  \"machine\": {},\n  \"workloads\": [",
        json_string(machine)
    );
    for (i, w) in workloads.iter().enumerate() {
        let _ = write!(
            out,
            "{}\n    {{\"name\": {}, \"ours\": {}, \"baseline\": {}, \"unit\": {}, \"ratio\": {}, \"p50_ms\": {}, \"p99_ms\": {}}}",
            if i == 0 { "" } else { "," },
            json_string(&w.name),
            json_number(w.ours),
            w.baseline.map_or_else(|| "null".to_owned(), json_number),
            json_string(&w.unit),
            w.ratio().map_or_else(|| "null".to_owned(), json_number),
            w.p50_ms.map_or_else(|| "null".to_owned(), json_number),
            w.p99_ms.map_or_else(|| "null".to_owned(), json_number),
        );
    }
    out.push_str("\n  ]\n}\n");
    out
}

/// The target of a row (the bars in BENCHMARKS.md), and whether it is met (`None`: no target,
/// or it cannot be checked, for example without the etcd peer).
fn target(w: &Workload) -> (String, Option<bool>) {
    let ratio = w.ratio();
    let name = w.name.as_str();
    if name.starts_with("lease_cycle_concurrent_") || name.starts_with("lease_transact_concurrent_")
    {
        return concurrent_target(w);
    }
    let (goal, met) = match (name, w.unit.as_str()) {
        (n, _) if n.starts_with("lease_transact_") => ("ratio ≥ 0.8", ratio.map(|r| r >= 0.8)),
        ("held_leases_100k_lost" | "held_leases_100k_lost_stress3s", "count") => {
            ("0 lost", Some(w.ours == 0.0))
        }
        ("held_leases_100k_cpu", "cpu-share") => ("≤ 0.25 core", Some(w.ours <= 0.25)),
        ("held_leases_100k_cpu_stress3s", "cpu-share") => ("≤ 0.1 core", Some(w.ours <= 0.1)),
        ("acquire_latency_scaling", _) => ("p50 ratio ≤ 1.3", ratio.map(|r| r <= 1.3)),
        ("sanitize_tool_args", _) => ("ratio ≥ 0.7", ratio.map(|r| r >= 0.7)),
        ("admin_sessions_latency", _) => ("p99 ≤ 10 ms", Some(w.ours <= 10.0)),
        _ => ("—", None),
    };
    (goal.to_owned(), met)
}

/// The targets of the concurrent lease rows (`lease_{cycle,transact}_concurrent_<system>_<n>`).
fn concurrent_target(w: &Workload) -> (String, Option<bool>) {
    let name = w.name.as_str();
    // The gauges, and Tether's transact rows set against them (no bar yet): the server's own
    // client on PostgreSQL, the SQLite library called directly on SQLite.
    for (gauge, label) in [("pgbench", "pgbench"), ("libsqlite", "SQLite library")] {
        if name.contains(&format!("_of_{gauge}_")) {
            return (format!("gauge (÷ {label})"), None);
        }
        if name.contains(&format!("_{gauge}_")) {
            return (format!("gauge ({label})"), None);
        }
    }
    let is_tether = name.contains("_sqlite_") || name.contains("_postgres_");
    if name.contains("_etcd_") {
        return ("peer (etcd)".to_owned(), None);
    }
    if name.ends_with("_postgres_scaling") {
        return (
            "32 owners ≥ 3× 1 owner".to_owned(),
            w.ratio().map(|r| r >= 3.0),
        );
    }
    if is_tether && name.ends_with("_32") {
        let p99_ok = w.p99_ms.is_some_and(|p| p <= 20.0);
        let met = if p99_ok {
            w.ratio().map(|r| r >= 3.0)
        } else {
            Some(false)
        };
        return ("ratio ≥ 3 vs etcd, p99 ≤ 20 ms".to_owned(), met);
    }
    if let Some((_, today)) = ONE_OWNER_TODAY.iter().find(|(n, _)| *n == name) {
        let floor = 0.9 * today;
        return (
            format!("≥ {floor:.0} ops/s (0.9 × {today:.0})"),
            Some(w.ours >= floor),
        );
    }
    ("—".to_owned(), None)
}

pub(crate) fn render_markdown(
    machine: &str,
    quick: bool,
    workloads: &[Workload],
    notes: &[String],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Machine: {machine}{}\n",
        if quick { " (`--quick` run)" } else { "" }
    );
    out.push_str(
        "| workload | ours | baseline | unit | ratio | p50 ms | p99 ms | target | met |\n",
    );
    out.push_str("|---|---:|---:|---|---:|---:|---:|---|---|\n");
    for w in workloads {
        let (goal, met) = target(w);
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |",
            w.name,
            fmt_num(w.ours),
            w.baseline.map_or_else(|| "—".to_owned(), fmt_num),
            w.unit,
            w.ratio()
                .map_or_else(|| "—".to_owned(), |r| format!("{r:.2}")),
            w.p50_ms.map_or_else(|| "—".to_owned(), fmt_num),
            w.p99_ms.map_or_else(|| "—".to_owned(), fmt_num),
            goal,
            match met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "—",
            }
        );
    }
    let details: Vec<String> = workloads
        .iter()
        .filter(|w| !w.detail.is_empty())
        .map(|w| format!("- `{}`: {}", w.name, w.detail))
        .chain(notes.iter().map(|n| format!("- {n}")))
        .collect();
    if !details.is_empty() {
        out.push_str("\nNotes:\n\n");
        for d in details {
            out.push_str(&d);
            out.push('\n');
        }
    }
    out
}

/// `<CPU model>, <n> CPUs, <memory> GiB RAM, <kernel>` from `/proc` (Linux).
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or_else(
            || "unknown memory".to_owned(),
            |kb| format!("{:.0} GiB RAM", kb / 1024.0 / 1024.0),
        );
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").map_or_else(
        |_| std::env::consts::OS.to_owned(),
        |k| format!("Linux {}", k.trim()),
    );
    format!("{model}, {cpus} CPUs (nproc), {memory}, {kernel}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_parse() {
        let w = parse_result_line(
            "bench-result name=acquire_latency_scaling unit=ms ours=1.5 baseline=1.25",
        )
        .unwrap();
        assert_eq!(w.name, "acquire_latency_scaling");
        assert_eq!(w.unit, "ms");
        assert_eq!(w.ratio(), Some(1.2));
        assert_eq!((w.p50_ms, w.p99_ms), (None, None));
        let none = parse_result_line(
            "bench-result name=held_leases_100k_lost unit=count ours=0 baseline=null",
        )
        .unwrap();
        assert_eq!(none.name, "held_leases_100k_lost");
        assert_eq!(none.baseline, None);
        assert_eq!(none.ratio(), None);
        assert!(parse_result_line("Benchmarking foo").is_none());
        assert!(parse_result_line("bench-result name=x unit=ms ours=abc baseline=null").is_none());
    }

    #[test]
    fn result_lines_carry_percentiles() {
        let w = parse_result_line(
            "bench-result name=lease_cycle_concurrent_postgres_32 unit=ops/s ours=3000 baseline=1000 p50_ms=8.5 p99_ms=19.25",
        )
        .unwrap();
        assert_eq!(w.ratio(), Some(3.0));
        assert_eq!((w.p50_ms, w.p99_ms), (Some(8.5), Some(19.25)));
        let etcd = parse_result_line(
            "bench-result name=lease_cycle_concurrent_etcd_32 unit=ops/s ours=1000 baseline=null p50_ms=30 p99_ms=60",
        )
        .unwrap();
        assert_eq!(etcd.p99_ms, Some(60.0));
        assert!(
            parse_result_line(
                "bench-result name=x unit=ops/s ours=1 baseline=null p50_ms=fast p99_ms=2"
            )
            .is_none()
        );
    }

    fn row(name: &str, ours: f64, baseline: Option<f64>, p99_ms: Option<f64>) -> Workload {
        Workload {
            name: name.into(),
            ours,
            baseline,
            unit: "ops/s".into(),
            p50_ms: p99_ms.map(|p| p / 2.0),
            p99_ms,
            detail: String::new(),
        }
    }

    #[test]
    fn concurrent_rows_have_the_issue_targets() {
        let met = |w: Workload| target(&w).1;
        // 32 owners: ≥ 3× etcd and p99 ≤ 20 ms, both.
        let at32 = "lease_transact_concurrent_sqlite_32";
        assert_eq!(met(row(at32, 3000.0, Some(1000.0), Some(20.0))), Some(true));
        assert_eq!(met(row(at32, 2999.0, Some(1000.0), Some(5.0))), Some(false));
        assert_eq!(
            met(row(at32, 9000.0, Some(1000.0), Some(20.5))),
            Some(false)
        );
        // Without the etcd peer the ratio cannot be checked; a bad p99 still fails.
        assert_eq!(met(row(at32, 9000.0, None, Some(5.0))), None);
        assert_eq!(met(row(at32, 9000.0, None, Some(50.0))), Some(false));
        // Not the criterion `lease_transact_*` bar.
        assert_eq!(
            target(&row(at32, 1.0, Some(1.0), Some(1.0))).0,
            "ratio ≥ 3 vs etcd, p99 ≤ 20 ms"
        );
        // 1 owner: ≥ 0.9 × today's figure, whatever etcd did.
        let one = "lease_cycle_concurrent_postgres_1";
        assert_eq!(met(row(one, 773.0, Some(10.0), Some(1.0))), Some(true));
        assert_eq!(met(row(one, 772.0, Some(10.0), Some(1.0))), Some(false));
        assert_eq!(
            target(&row(one, 1.0, None, None)).0,
            "≥ 772 ops/s (0.9 × 858)"
        );
        assert_eq!(
            met(row(
                "lease_transact_concurrent_sqlite_1",
                4615.0,
                None,
                None
            )),
            Some(true)
        );
        // Scaling from 1 to 32 owners on PostgreSQL.
        let scaling = "lease_cycle_concurrent_postgres_scaling";
        assert_eq!(met(row(scaling, 3000.0, Some(1000.0), None)), Some(true));
        assert_eq!(met(row(scaling, 2000.0, Some(1000.0), None)), Some(false));
        // No target: other owner counts, SQLite scaling, the etcd peer.
        assert_eq!(
            met(row(
                "lease_cycle_concurrent_sqlite_128",
                1.0,
                Some(9.0),
                None
            )),
            None
        );
        assert_eq!(
            met(row(
                "lease_cycle_concurrent_sqlite_scaling",
                1.0,
                Some(9.0),
                None
            )),
            None
        );
        assert_eq!(
            target(&row("lease_cycle_concurrent_etcd_32", 1.0, None, None)).0,
            "peer (etcd)"
        );
        // The pgbench gauge and Tether against it: no bar, whatever the numbers.
        assert_eq!(
            target(&row(
                "lease_transact_concurrent_pgbench_32",
                1.0,
                None,
                Some(1.0)
            )),
            ("gauge (pgbench)".to_owned(), None)
        );
        assert_eq!(
            target(&row(
                "lease_transact_concurrent_postgres_of_pgbench_32",
                100.0,
                Some(1.0),
                Some(90.0)
            )),
            ("gauge (÷ pgbench)".to_owned(), None)
        );
        // The same for the SQLite library gauge: neither row takes a Tether bar (the ratio row
        // names `sqlite` and ends in an owner count).
        for n in [1, 32] {
            assert_eq!(
                target(&row(
                    &format!("lease_transact_concurrent_libsqlite_{n}"),
                    1.0,
                    None,
                    Some(1.0)
                )),
                ("gauge (SQLite library)".to_owned(), None)
            );
            assert_eq!(
                target(&row(
                    &format!("lease_transact_concurrent_sqlite_of_libsqlite_{n}"),
                    100.0,
                    Some(1.0),
                    Some(1.0)
                )),
                ("gauge (÷ SQLite library)".to_owned(), None)
            );
        }
    }

    #[test]
    fn raised_bars_and_renamed_rows() {
        let w = |name: &str, ours: f64, baseline: Option<f64>, unit: &str| Workload {
            name: name.into(),
            ours,
            baseline,
            unit: unit.into(),
            ..Workload::default()
        };
        let check = |x: Workload| target(&x);
        assert_eq!(
            check(w("held_leases_100k_lost", 0.0, None, "count")).1,
            Some(true)
        );
        assert_eq!(
            check(w("held_leases_100k_lost_stress3s", 1.0, None, "count")).1,
            Some(false)
        );
        assert_eq!(
            check(w("held_leases_100k_cpu", 0.2, None, "cpu-share")).1,
            Some(true)
        );
        assert_eq!(
            check(w("held_leases_100k_cpu_stress3s", 0.2, None, "cpu-share")),
            ("≤ 0.1 core".to_owned(), Some(false))
        );
        assert_eq!(
            check(w("held_leases_100k_cpu_stress3s", 0.1, None, "cpu-share")).1,
            Some(true)
        );
        assert_eq!(
            check(w("sanitize_tool_args", 0.6, Some(1.0), "ops/s")),
            ("ratio ≥ 0.7".to_owned(), Some(false))
        );
        assert_eq!(
            check(w("admin_sessions_latency", 10.5, None, "ms")),
            ("p99 ≤ 10 ms".to_owned(), Some(false))
        );
        // The old shared name has no target any more.
        assert_eq!(check(w("held_leases_100k", 0.0, None, "count")).1, None);
    }

    #[test]
    fn criterion_json_fields_are_found() {
        let estimates = r#"{"mean":{"confidence_interval":{"confidence_level":0.95,"lower_bound":90.0,"upper_bound":110.0},"point_estimate":1.5e2,"standard_error":1.0},"median":{"point_estimate":7.0}}"#;
        let at = estimates.find("\"mean\"").unwrap();
        assert_eq!(number_after(estimates, "point_estimate", at), Some(150.0));
        let bench = r#"{"group_id":"sanitize_tool_args","function_id":"ours/typical","value_str":null,"throughput":{"Elements":10000}}"#;
        assert_eq!(
            string_after(bench, "function_id").as_deref(),
            Some("ours/typical")
        );
        assert_eq!(number_after(bench, "Elements", 0), Some(10000.0));
    }

    #[test]
    fn json_has_the_issue_shape() {
        let rows = vec![
            Workload {
                name: "lease_transact_sqlite".into(),
                ours: 800.0,
                baseline: Some(1000.0),
                unit: "ops/s".into(),
                ..Workload::default()
            },
            Workload {
                name: "held_leases_100k_lost".into(),
                ours: 0.0,
                baseline: None,
                unit: "count".into(),
                ..Workload::default()
            },
            row(
                "lease_cycle_concurrent_sqlite_32",
                4000.0,
                Some(1000.0),
                Some(12.5),
            ),
        ];
        let json = render_json("test \"box\"", &rows);
        assert!(json.contains(r#""machine": "test \"box\"""#), "{json}");
        assert!(json.contains(r#"{"name": "lease_transact_sqlite", "ours": 800, "baseline": 1000, "unit": "ops/s", "ratio": 0.8, "p50_ms": null, "p99_ms": null}"#), "{json}");
        assert!(json.contains(r#"{"name": "held_leases_100k_lost", "ours": 0, "baseline": null, "unit": "count", "ratio": null, "p50_ms": null, "p99_ms": null}"#), "{json}");
        assert!(json.contains(r#"{"name": "lease_cycle_concurrent_sqlite_32", "ours": 4000, "baseline": 1000, "unit": "ops/s", "ratio": 4, "p50_ms": 6.25, "p99_ms": 12.5}"#), "{json}");
        let md = render_markdown("m", true, &rows, &["n".into()]);
        assert!(
            md.contains(
                "| `lease_transact_sqlite` | 800 | 1000 | ops/s | 0.80 | — | — | ratio ≥ 0.8 | yes |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| `lease_cycle_concurrent_sqlite_32` | 4000 | 1000 | ops/s | 4.00 | 6.25 | 12.50 | ratio ≥ 3 vs etcd, p99 ≤ 20 ms | yes |"
            ),
            "{md}"
        );
        assert!(md.contains("- n"));
    }
}
