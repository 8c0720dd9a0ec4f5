//! Tether's automation, run as `cargo xtask <task>` (alias in `.cargo/config.toml`).
//!
//! Tasks:
//! - `ci`: format check, clippy with warnings denied, the whole test suite, docs with warnings
//!   denied, and the architecture check; ends with one summary line.
//! - `arch-check`: only the architecture check.
//!
//! This crate has no dependencies so it builds first and fast.

use std::env;
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

mod arch;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let task = args.first().map(String::as_str).unwrap_or("help");
    let result = match task {
        "ci" => ci(),
        "arch-check" => arch::check().map(|()| Summary::default()),
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
                    "xtask ci: {} passed, {} failed",
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
         ci          fmt --check, clippy -D warnings, all tests, docs -D warnings, architecture check\n  \
         arch-check  fail when a crate depends on what its architecture invariant forbids");
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
    let summary = test()?;
    run(
        "doc",
        cargo()
            .args(["doc", "--workspace", "--no-deps", "--locked"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    say("==> architecture check");
    arch::check()?;
    say("    architecture check: ok");
    Ok(summary)
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
