//! `cargo xtask chaos --backend sqlite|postgres --processes N --seconds S`: N chaos-worker
//! processes (binary `chaos_worker` of `tether-benches`) share one SQLite file or one fresh
//! PostgreSQL database; a killer SIGKILLs a random worker at random intervals and restarts it;
//! then the invariant checker prints `chaos: <ops> ops, <kills> kills, <violations> violations`
//! and the task fails on any violation.

use std::env;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::{cargo, run, say};

/// How long a frozen worker stays stopped: longer than the workers' 3 s lease.
const PAUSE: Duration = Duration::from_secs(4);

struct Options {
    backend: String,
    processes: usize,
    seconds: u64,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let backend = value("--backend").unwrap_or_else(|| "sqlite".into());
    if backend != "sqlite" && backend != "postgres" {
        return Err(format!(
            "--backend must be sqlite or postgres, not `{backend}`"
        ));
    }
    let number = |name: &str, default: u64| -> Result<u64, String> {
        value(name).map_or(Ok(default), |v| {
            v.parse()
                .map_err(|_| format!("{name} needs a number, got `{v}`"))
        })
    };
    Ok(Options {
        backend,
        processes: usize::try_from(number("--processes", 3)?.max(1)).unwrap_or(3),
        seconds: number("--seconds", 20)?.max(2),
    })
}

/// A tiny xorshift generator seeded from the clock (no dependency).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(7, |d| d.as_nanos() as u64);
        Self(nanos | 1)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x % n.max(1)
    }
}

pub(crate) fn worker_binary() -> Result<PathBuf, String> {
    Ok(crate::target_dir()?.join("debug").join("chaos_worker"))
}

pub(crate) fn output(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("chaos_worker: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!(
            "chaos_worker failed ({}): {}",
            out.status,
            text.trim()
        ))
    }
}

fn spawn(bin: &PathBuf, url: &str, name: &str, seconds: u64) -> Result<Child, String> {
    Command::new(bin)
        .args(["run", "--url", url, "--name", name, "--seconds"])
        .arg(seconds.to_string())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start chaos worker {name}: {e}"))
}

/// `cargo xtask chaos`: the checker's summary is the last line; the exit code is non-zero on
/// any violation or failure.
pub(crate) fn main(args: &[String]) -> ExitCode {
    match chaos(args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(message) => {
            say(&format!("xtask chaos: FAILED: {message}"));
            ExitCode::FAILURE
        }
    }
}

/// Runs the drill; `Ok(false)` when the checker found violations.
pub(crate) fn chaos(args: &[String]) -> Result<bool, String> {
    let options = parse(args)?;
    run(
        "build chaos_worker",
        cargo().args(["build", "-p", "tether-benches", "--bin", "chaos_worker"]),
    )?;
    let bin = worker_binary()?;
    let mut scratch = None;
    let url = if options.backend == "sqlite" {
        let dir = env::temp_dir().join(format!(
            "tether-chaos-{}-{}",
            std::process::id(),
            Rng::new().below(1 << 40)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let url = format!("sqlite://{}/chaos.db?mode=rwc", dir.display());
        scratch = Some(dir);
        url
    } else {
        let printed = output(Command::new(&bin).arg("pg-create"))?;
        printed
            .lines()
            .last()
            .map(str::trim)
            .filter(|l| l.starts_with("postgres"))
            .ok_or_else(|| format!("pg-create printed no URL: {printed}"))?
            .to_owned()
    };
    say(&format!(
        "==> chaos: {} workers on {} for {} s",
        options.processes, options.backend, options.seconds
    ));
    let result = drill(&bin, &url, &options);
    if options.backend == "postgres"
        && let Err(e) = output(Command::new(&bin).args(["pg-drop", "--url", &url]))
    {
        say(&format!("    could not drop the chaos database: {e}"));
    }
    if let Some(dir) = scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

/// Runs the workers and the killer, then the checker: `Ok(false)` when it found violations.
fn drill(bin: &PathBuf, url: &str, options: &Options) -> Result<bool, String> {
    output(Command::new(bin).args(["setup", "--url", url]))?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(options.seconds);
    let mut rng = Rng::new();
    let mut workers = Vec::with_capacity(options.processes);
    for i in 0..options.processes {
        workers.push(spawn(bin, url, &format!("w{i}"), options.seconds)?);
    }
    let mut kills = 0u64;
    let mut pauses = 0u64;
    let mut restarts = 0u64;
    loop {
        let pause = Duration::from_millis(500 + rng.below(2000));
        if Instant::now() + pause + Duration::from_secs(1) >= deadline {
            break;
        }
        sleep(pause);
        let index = usize::try_from(rng.below(workers.len() as u64)).unwrap_or(0);
        let victim = &mut workers[index];
        let running = victim.try_wait().map_err(|e| e.to_string())?.is_none();
        if running
            && rng.below(4) == 0
            && Instant::now() + PAUSE + Duration::from_secs(1) < deadline
        {
            // Freeze the worker past its lease (SIGSTOP, then SIGCONT): it wakes up holding a
            // stale epoch, which the fence must refuse.
            let pid = victim.id().to_string();
            let stopped = Command::new("kill").args(["-STOP", &pid]).status();
            if stopped.is_ok_and(|s| s.success()) {
                sleep(PAUSE);
                let _ = Command::new("kill").args(["-CONT", &pid]).status();
                pauses += 1;
                continue;
            }
        }
        if running {
            // `Child::kill` sends SIGKILL on Unix.
            victim.kill().map_err(|e| format!("kill: {e}"))?;
            let _ = victim.wait();
            kills += 1;
        }
        restarts += 1;
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_secs()
            .max(1);
        workers[index] = spawn(bin, url, &format!("w{index}r{restarts}"), left)?;
    }
    say(&format!(
        "    {pauses} workers frozen past their lease and resumed"
    ));
    for mut worker in workers {
        let _ = worker.wait();
    }
    let out = Command::new(bin)
        .args(["check", "--url", url, "--kills"])
        .arg(kills.to_string())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("chaos_worker check: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    for line in text.lines() {
        say(line);
    }
    if !text
        .lines()
        .last()
        .is_some_and(|l| l.starts_with("chaos: "))
    {
        return Err(format!("the checker failed ({})", out.status));
    }
    Ok(out.status.success())
}

/// The `ci` step: 3 workers for 20 s on SQLite, then on PostgreSQL; fails on any violation.
pub(crate) fn ci() -> Result<(), String> {
    for backend in ["sqlite", "postgres"] {
        let args: Vec<String> = ["--backend", backend, "--processes", "3", "--seconds", "20"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        if !chaos(&args)? {
            return Err(format!("chaos on {backend} found violations"));
        }
    }
    Ok(())
}

/// What `api-fuzz` does when schemathesis is missing: fail with `--require` (CI), else say so
/// and pass.
fn without_schemathesis(require: bool) -> Result<(), String> {
    let install = "`python3 -m pip install -r .ci/requirements-api-fuzz.txt`";
    if require {
        return Err(format!(
            "schemathesis is not installed and --require was given; install it with {install}"
        ));
    }
    say(&format!(
        "api-fuzz: schemathesis is not installed ({install}); nothing run (pass --require to fail instead)"
    ));
    Ok(())
}

/// `cargo xtask api-fuzz [--examples N]`: runs schemathesis (when installed) against a
/// `tether serve` on a scratch SQLite database seeded by `tether demo`, with every check
/// (no server error, responses conform to the OpenAPI document). `cargo xtask ci` runs it.
pub(crate) fn api_fuzz(args: &[String]) -> Result<(), String> {
    // The console scripts pip installs, or the module when they are not on PATH.
    let candidates: [&[&str]; 3] = [
        &["schemathesis"],
        &["st"],
        &["python3", "-m", "schemathesis.cli"],
    ];
    let tool = candidates.into_iter().find(|cmd| {
        Command::new(cmd[0])
            .args(&cmd[1..])
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    let Some(tool) = tool else {
        return without_schemathesis(args.iter().any(|a| a == "--require"));
    };
    let examples = args
        .iter()
        .position(|a| a == "--examples")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| "50".into());
    run(
        "build tether",
        cargo().args(["build", "-p", "tether-admin-http", "--bin", "tether"]),
    )?;
    let tether = crate::target_dir()?.join("debug").join("tether");
    let dir = env::temp_dir().join(format!("tether-api-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let url = format!("sqlite://{}/api.db?mode=rwc", dir.display());
    let token = "api-fuzz-admin-token";
    let demo = Command::new(&tether)
        .args(["demo", "--database-url", &url])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("tether demo: {e}"))?;
    if !demo.success() {
        return Err(format!("tether demo failed ({demo})"));
    }
    let mut serve = Command::new(&tether);
    serve
        .args(["serve", "--database-url", &url])
        .env("TETHER_ADMIN_TOKEN", token);
    let (mut server, bind) = match crate::service::start(serve, &dir.join("serve.log")) {
        Ok(started) => started,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    let status = Command::new(tool[0])
        .args(&tool[1..])
        .args([
            "run",
            &format!("http://{bind}/api-docs/openapi.json"),
            "--checks",
            "all",
            // Pagination cursors are opaque server-issued tokens: a schema cannot say which
            // strings the server issued, so "a schema-valid cursor was refused" is expected and
            // excluded. Every other check (server errors, response schemas, status codes,
            // schema-violating requests refused) runs.
            "--exclude-checks",
            "positive_data_acceptance",
            "--header",
            &format!("Authorization: Bearer {token}"),
            "--max-examples",
            &examples,
        ])
        .status();
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("schemathesis found problems ({s})")),
        Err(e) => Err(format!("cannot run {}: {e}", tool.join(" "))),
    }
}

#[cfg(test)]
mod api_fuzz_tests {
    use super::without_schemathesis;

    #[test]
    fn a_missing_schemathesis_fails_only_when_required() {
        let err = without_schemathesis(true).unwrap_err();
        assert!(
            err.contains("--require") && err.contains("pip install"),
            "{err}"
        );
        assert!(without_schemathesis(false).is_ok());
    }
}
