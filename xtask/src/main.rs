//! Tether's automation, run as `cargo xtask <task>` (alias in `.cargo/config.toml`).
//!
//! The tasks are the rows of [`TASKS`]: the help text (`cargo xtask help`) and the dispatch both
//! read that one table, and a unit test keeps README.md and ARCHITECTURE.md listing the same
//! tasks.
//!
//! This crate has no dependencies so it builds first and fast.

use std::env;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

mod arch;
mod bench_report;
mod chaos;
mod codex;
mod faults;
mod forwarder;
mod public_api;
mod service;
mod ui_check;

/// One `cargo xtask` task: its name, its arguments, what it does, and how it runs.
struct Task {
    /// What follows `cargo xtask`.
    name: &'static str,
    /// The arguments it accepts, as shown in the help (empty when none).
    args: &'static str,
    /// One line: what it does.
    about: &'static str,
    /// Runs it with the arguments after the name.
    run: fn(&[String]) -> Outcome,
}

/// How a task ended, before it is reported.
enum Outcome {
    /// `ci` passed: the test counts of its summary line.
    Ci(Summary),
    /// Any other task passed: reported as `xtask <task>: ok`.
    Done,
    /// The task reported for itself; exit with this code (`chaos` ends with its checker's line).
    Exit(ExitCode),
    /// The task failed: reported as `xtask <task>: FAILED: <message>`.
    Failed(String),
}

impl From<Result<(), String>> for Outcome {
    fn from(result: Result<(), String>) -> Self {
        result.map_or_else(Outcome::Failed, |()| Outcome::Done)
    }
}

/// Every task, in the order the help lists them. README.md and ARCHITECTURE.md list the same
/// names (checked by the tests below).
static TASKS: &[Task] = &[
    Task {
        name: "ci",
        args: "",
        about: "fmt --check, clippy -D warnings, the OpenAPI and public API snapshots, all tests, \
                the console in headless Chromium (ui-check), schemathesis against the admin API \
                (api-fuzz), chaos on SQLite and PostgreSQL, faults --quick, docs -D warnings, the \
                architecture check, each storage backend built alone",
        run: |_| ci().map_or_else(Outcome::Failed, Outcome::Ci),
    },
    Task {
        name: "arch-check",
        args: "",
        about: "fail when a crate depends on what its architecture invariant forbids",
        run: |_| arch::check().into(),
    },
    Task {
        name: "codex-install",
        args: "",
        about: "install the pinned Codex CLI with npm into .tether-cache/codex/ (for tether-codex \
                tests and `tether chat`)",
        run: |_| codex::install().into(),
    },
    Task {
        name: "openapi",
        args: "[--check]",
        about: "write crates/admin-http/openapi.json; `--check` compares instead",
        run: |args| openapi(args.first().map(String::as_str)).into(),
    },
    Task {
        name: "public-api",
        args: "[--check]",
        about: "write each library crate's public surface to crates/<crate>/public-api.txt; \
                `--check` compares instead",
        run: |args| public_api::public_api(args).into(),
    },
    Task {
        name: "chaos",
        args: "[--backend sqlite|postgres] [--processes N] [--seconds S]",
        about: "SIGKILL chaos workers sharing one database at random, then check the invariants \
                from their write log",
        run: |args| Outcome::Exit(chaos::main(args)),
    },
    Task {
        name: "faults",
        args: "[--quick] [--seconds S] [--only KIND] [--skew-clock server|host]",
        about: "chaos workers and tether serve under disk full, a read-only file system, terminated \
                backends, refused connections, a PostgreSQL restart, a network partition (cut, \
                delayed, lossy, a COMMIT's answer lost) and clock skew (root; `--quick`: the \
                short version ci runs)",
        run: |args| faults::faults(args).into(),
    },
    Task {
        name: "bench-report",
        args: "[--quick]",
        about: "run every benchmark and scale harness; write target/bench-report.json and .md \
                (`--quick`: within 10 minutes)",
        run: |args| bench_report::bench_report(args).into(),
    },
    Task {
        name: "ui-check",
        args: "",
        about: "walk the operator console in headless Chromium through ChromeDriver (sign-in, a \
                session page, a filtered list, the holder view, each action with its \
                confirmation, the audit trail, sign-out, Swagger UI), checking the DOM and saving \
                screenshots in <target>/ui-check/ (installs Debian's chromium and chromium-driver \
                when missing)",
        run: |_| ui_check::ui_check().into(),
    },
    Task {
        name: "api-fuzz",
        args: "[--examples N] [--require]",
        about: "run schemathesis against `tether serve` on a demo database (`--require`: fail when \
                schemathesis is missing; ci runs it, required under .ci/run)",
        run: |args| chaos::api_fuzz(args).into(),
    },
    Task {
        name: "help",
        args: "",
        about: "this list (also `--help`, `-h`, or no task)",
        run: |_| {
            usage();
            Outcome::Exit(ExitCode::SUCCESS)
        },
    },
];

/// The task called `name`; `--help`, `-h` are `help`.
fn task(name: &str) -> Option<&'static Task> {
    let name = match name {
        "--help" | "-h" => "help",
        other => other,
    };
    TASKS.iter().find(|task| task.name == name)
}

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let name = args.first().map(String::as_str).unwrap_or("help");
    let outcome = match task(name) {
        Some(task) => (task.run)(&args[1..]),
        None => Outcome::Failed(format!("unknown task `{name}`; run `cargo xtask help`")),
    };
    match outcome {
        Outcome::Ci(summary) => {
            say(&format!(
                "ci: {} passed, {} failed",
                summary.passed, summary.failed
            ));
            ExitCode::SUCCESS
        }
        Outcome::Done => {
            say(&format!("xtask {name}: ok"));
            ExitCode::SUCCESS
        }
        Outcome::Exit(code) => code,
        Outcome::Failed(message) => {
            say(&format!("xtask {name}: FAILED: {message}"));
            ExitCode::FAILURE
        }
    }
}

/// The help text: every row of [`TASKS`].
fn help_text() -> String {
    let mut text = String::from("usage: cargo xtask <task> [arguments]\n\ntasks:\n");
    let width = TASKS.iter().map(|t| t.name.len()).max().unwrap_or(0);
    for task in TASKS {
        let _ = writeln!(text, "  {:width$}  {}", task.name, task.about);
        if !task.args.is_empty() {
            let _ = writeln!(text, "  {:width$}  arguments: {}", "", task.args);
        }
    }
    text
}

fn usage() {
    say(help_text().trim_end());
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
    say("==> public API snapshot");
    public_api::public_api(&["--check".to_owned()])?;
    let summary = test()?;
    say("==> ui-check");
    let started = Instant::now();
    ui_check::ui_check()?;
    say(&format!("    ui-check: ok ({:.0?})", started.elapsed()));
    // schemathesis against the served OpenAPI document: required where CI installs it
    // (`TETHER_REQUIRE_API_FUZZ=1`, set by `.ci/run`), a skip note elsewhere.
    say("==> api-fuzz");
    let mut fuzz = Vec::new();
    if env::var("TETHER_REQUIRE_API_FUZZ").is_ok_and(|v| v == "1") {
        fuzz.push("--require".to_owned());
    }
    chaos::api_fuzz(&fuzz)?;
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
    // Without a backend the crate still builds (the in-memory store), and the SQL store
    // refuses every URL with an error naming the feature it needs.
    run(
        "tether-storage alone (no backend)",
        cargo().args([
            "check",
            "-p",
            "tether-storage",
            "--no-default-features",
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

/// The cargo target directory: `CARGO_TARGET_DIR` (relative to the workspace root when it is
/// relative), else `<root>/target`, wherever `cargo xtask` was started from.
pub(crate) fn target_dir() -> Result<std::path::PathBuf, String> {
    let root = workspace_root()?;
    Ok(match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    })
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
    use super::{TASKS, help_text, parse_test_result, task};

    /// A document of the workspace, read from the source tree.
    fn document(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// How README.md lists a task: one row of its table of tasks (a `|` inside a cell is
    /// written `\|`, as Markdown tables need).
    fn readme_row(t: &super::Task) -> String {
        let call = if t.args.is_empty() {
            format!("cargo xtask {}", t.name)
        } else {
            format!("cargo xtask {} {}", t.name, t.args)
        };
        format!(
            "| `{}` | {} |",
            call.replace('|', "\\|"),
            t.about.replace('|', "\\|")
        )
    }

    #[test]
    fn every_task_is_dispatched_and_helped_once() {
        for (i, t) in TASKS.iter().enumerate() {
            assert!(
                TASKS[..i].iter().all(|other| other.name != t.name),
                "task `{}` listed twice",
                t.name
            );
            assert!(
                task(t.name).is_some_and(|found| std::ptr::eq(found, t)),
                "task `{}` is not dispatched",
                t.name
            );
            assert!(
                help_text().contains(&format!("  {} ", t.name)),
                "help omits `{}`",
                t.name
            );
        }
        for alias in ["--help", "-h"] {
            assert_eq!(task(alias).map(|t| t.name), Some("help"));
        }
        assert!(task("no-such-task").is_none());
    }

    #[test]
    fn readme_lists_exactly_the_tasks() {
        let readme = document("README.md");
        for t in TASKS {
            let row = readme_row(t);
            assert!(
                readme.lines().any(|line| line == row),
                "README.md must list `{}` as\n{row}",
                t.name
            );
        }
    }

    #[test]
    fn architecture_lists_exactly_the_tasks() {
        let architecture = document("ARCHITECTURE.md");
        let section = architecture
            .split("### `xtask`")
            .nth(1)
            .and_then(|rest| rest.split("\n#").next())
            .expect("ARCHITECTURE.md has an `xtask` section");
        for t in TASKS {
            assert!(
                section.contains(&format!("`{}`", t.name)),
                "ARCHITECTURE.md's `xtask` section omits `{}`",
                t.name
            );
        }
    }

    #[test]
    fn documents_name_only_existing_tasks() {
        for name in [
            "README.md",
            "ARCHITECTURE.md",
            "RELIABILITY.md",
            "BENCHMARKS.md",
            "benches/HISTORY.md",
        ] {
            let text = document(name);
            for (at, call) in text.match_indices("cargo xtask ") {
                let called = text[at + call.len()..]
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .next()
                    .unwrap_or_default();
                if called.is_empty() {
                    continue; // `cargo xtask <task>`
                }
                assert!(
                    task(called).is_some(),
                    "{name} names `cargo xtask {called}`, which is not a task"
                );
            }
        }
    }

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
