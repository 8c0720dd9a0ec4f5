//! Tether's automation, run as `cargo xtask <task>` (alias in `.cargo/config.toml`).
//!
//! Tasks:
//! - `ci`: format check, clippy with warnings denied, the whole test suite, docs with warnings
//!   denied, and the architecture check; ends with one summary line.
//! - `arch-check`: only the architecture check.
//! - `codex-install`: the pinned Codex CLI into `.tether-cache/codex/` (for `tether-codex` tests).
//! - `bench-report [--quick]`: every benchmark and scale harness, `target/bench-report.json`.
//! - `faults [--quick]`: the resource-fault suite (disk full, read-only file system, PostgreSQL
//!   backends terminated, connections refused, server restart) under the chaos workload.
//!
//! This crate has no dependencies so it builds first and fast.

use std::env;
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

mod arch;
mod bench_report;
mod chaos;
mod codex;
mod faults;
mod ui_check;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let task = args.first().map(String::as_str).unwrap_or("help");
    let result = match task {
        "ci" => ci(),
        "chaos" => return chaos::main(&args[1..]),
        "faults" => faults::faults(&args[1..]).map(|()| Summary::default()),
        "api-fuzz" => chaos::api_fuzz(&args[1..]).map(|()| Summary::default()),
        "arch-check" => arch::check().map(|()| Summary::default()),
        "codex-install" => codex::install().map(|()| Summary::default()),
        "openapi" => openapi(args.get(1).map(String::as_str)).map(|()| Summary::default()),
        "bench-report" => bench_report::bench_report(&args[1..]).map(|()| Summary::default()),
        "ui-check" => ui_check::ui_check().map(|()| Summary::default()),
        "help" | "--help" | "-h" => {
            usage();
            return ExitCode::SUCCESS;
        }
        other => Err(format!("unknown task `{other}`; run `cargo xtask help`")),
    };
    match result {
        Ok(summary) => {
            if task == "ci" {
                say(&format!(
                    "ci: {} passed, {} failed",
                    summary.passed, summary.failed
                ));
            } else {
                say(&format!("xtask {task}: ok"));
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            say(&format!("xtask {task}: FAILED: {message}"));
            ExitCode::FAILURE
        }
    }
}

fn usage() {
    say("usage: cargo xtask <task>\n\n\
         tasks:\n  \
         ci          fmt --check, clippy -D warnings, all tests, docs -D warnings, architecture check,\n              \
                     each storage backend built alone\n  \
         arch-check  fail when a crate depends on what its architecture invariant forbids\n  \
         codex-install  install the pinned Codex CLI with npm into .tether-cache/codex/\n  \
         openapi     write crates/admin-http/openapi.json; `--check` compares instead\n  \
         ui-check    screenshot the dashboard and Swagger UI in headless Chromium (target/ui-check/)\n  \
         faults      chaos workers and tether serve under disk full, a read-only file system,\n              \
                     terminated backends, refused connections and a PostgreSQL restart (root;\n              \
                     `--quick`: the short version ci runs; `--seconds S`, `--only KIND`)\n  \
         bench-report  run every benchmark and scale harness; write target/bench-report.json \
         (`--quick`: within 10 minutes)");
}

/// User-facing output of the automation tool.
#[allow(clippy::print_stdout)]
fn say(line: &str) {
    println!("{line}");
}

/// Test counts gathered from `cargo test` output.
#[derive(Debug, Default, Clone, Copy)]
struct Summary {
    passed: u64,
    failed: u64,
}

fn cargo() -> Command {
    Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn run(step: &str, cmd: &mut Command) -> Result<(), String> {
    say(&format!("==> {step}"));
    let start = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("{step}: cannot start: {e}"))?;
    if status.success() {
        say(&format!("    {step}: ok ({:.0?})", start.elapsed()));
        Ok(())
    } else {
        Err(format!("{step} failed ({status})"))
    }
}

fn ci() -> Result<Summary, String> {
    run("fmt", cargo().args(["fmt", "--all", "--check"]))?;
    run(
        "clippy",
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    say("==> openapi snapshot");
    openapi(Some("--check"))?;
    let summary = test()?;
    chaos::ci()?;
    say("==> faults --quick");
    faults::ci()?;
    run(
        "doc",
        cargo()
            .args(["doc", "--workspace", "--no-deps", "--locked"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    say("==> architecture check");
    arch::check()?;
    say("    architecture check: ok");
    // The workspace build unifies features; a user depends on one backend. Each storage
    // backend must build on its own (this once caught PostgreSQL-only driver features used
    // from code compiled for SQLite too).
    run(
        "tether-storage alone (sqlite)",
        cargo().args(["check", "-p", "tether-storage", "--locked"]),
    )?;
    run(
        "tether-storage alone (postgres)",
        cargo().args([
            "check",
            "-p",
            "tether-storage",
            "--no-default-features",
            "--features",
            "postgres",
            "--locked",
        ]),
    )?;
    Ok(summary)
}

/// The committed OpenAPI snapshot.
const OPENAPI_SNAPSHOT: &str = "crates/admin-http/openapi.json";

/// Writes (or with `--check` compares) the OpenAPI snapshot from the `tether` binary.
fn openapi(flag: Option<&str>) -> Result<(), String> {
    let check = match flag {
        None => false,
        Some("--check") => true,
        Some(other) => return Err(format!("unknown flag `{other}`; use --check")),
    };
    let out = cargo()
        .args([
            "run",
            "--quiet",
            "-p",
            "tether-admin-http",
            "--bin",
            "tether",
            "--",
            "openapi",
        ])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run tether openapi: {e}"))?;
    if !out.status.success() {
        return Err(format!("tether openapi failed ({})", out.status));
    }
    let served = String::from_utf8(out.stdout).map_err(|e| format!("not UTF-8: {e}"))?;
    let root = workspace_root()?;
    let path = root.join(OPENAPI_SNAPSHOT);
    if check {
        let committed = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if committed != served {
            return Err(format!(
                "{OPENAPI_SNAPSHOT} is out of date with the served document; run `cargo xtask openapi` and commit it"
            ));
        }
        say("openapi: snapshot matches the served document");
    } else {
        std::fs::write(&path, served)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        say(&format!("openapi: wrote {OPENAPI_SNAPSHOT}"));
    }
    Ok(())
}

/// The workspace root (xtask lives one level below it).
fn workspace_root() -> Result<std::path::PathBuf, String> {
    let manifest =
        env::var("CARGO_MANIFEST_DIR").map_err(|_| "run through `cargo xtask`".to_owned())?;
    std::path::Path::new(&manifest)
        .parent()
        .map(std::path::Path::to_path_buf)
        .ok_or_else(|| "cannot find the workspace root".to_owned())
}

/// Runs the whole test suite, echoing its output and counting results.
fn test() -> Result<Summary, String> {
    say("==> test");
    let start = Instant::now();
    let mut child = cargo()
        .args(["test", "--workspace", "--locked", "--no-fail-fast"])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("test: cannot start: {e}"))?;
    let mut summary = Summary::default();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some((passed, failed)) = parse_test_result(&line) {
                summary.passed += passed;
                summary.failed += failed;
            }
            say(&line);
        }
    }
    let status = child.wait().map_err(|e| format!("test: {e}"))?;
    say(&format!(
        "    test: {} passed, {} failed ({:.0?})",
        summary.passed,
        summary.failed,
        start.elapsed()
    ));
    if status.success() && summary.failed == 0 {
        Ok(summary)
    } else {
        Err(format!(
            "tests failed ({status}): {} passed, {} failed",
            summary.passed, summary.failed
        ))
    }
}

/// Parses `test result: ok. 18 passed; 0 failed; …`.
fn parse_test_result(line: &str) -> Option<(u64, u64)> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let number_before = |word: &str| -> Option<u64> {
        let idx = rest.find(word)?;
        rest[..idx].split_whitespace().last()?.parse().ok()
    };
    Some((number_before(" passed")?, number_before(" failed")?))
}

#[cfg(test)]
mod tests {
    use super::parse_test_result;

    #[test]
    fn parses_cargo_test_summaries() {
        assert_eq!(
            parse_test_result("test result: ok. 18 passed; 0 failed; 0 ignored; 0 measured"),
            Some((18, 0))
        );
        assert_eq!(
            parse_test_result("test result: FAILED. 3 passed; 2 failed; 0 ignored"),
            Some((3, 2))
        );
        assert_eq!(parse_test_result("running 3 tests"), None);
    }
}
