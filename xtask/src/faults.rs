//! `cargo xtask faults [--quick] [--seconds S] [--processes N] [--only KIND] [--skew-clock server|host]`: the resource-fault
//! suite. Chaos workers (binary `chaos_worker` of `tether-benches`, the workload and write-log
//! checker of `cargo xtask chaos`) and one `tether serve` share a database while this task
//! breaks the resources under them, without restarting any of them:
//!
//! - `disk-full` (SQLite): the database lives on a small tmpfs the task mounts; a filler file
//!   takes every free byte for a while and is deleted again, several times;
//! - `read-only` (SQLite): the database lives on a small ext4 image the task mounts with
//!   `errors=remount-ro`; midway the task raises a file-system error, and the kernel turns the
//!   file system read-only under the open files, as it does in production;
//! - `postgres`: on a fresh database, the task terminates every backend (`pg_terminate_backend`),
//!   refuses connections for a while (`ALLOW_CONNECTIONS false`), and restarts the server
//!   (`pg_ctlcluster … restart`);
//! - `partition` (PostgreSQL): one worker in a network namespace of the task's making reaches
//!   the server through the task's forwarder (`forwarder.rs`); its link is cut, delayed and
//!   made lossy (both by the forwarder: this kernel has no `netem`), and the answer to one of
//!   its COMMITs is lost on the wire before the link is cut;
//! - `skew` (PostgreSQL): one worker's host clock runs 5 s ahead and one's 5 s behind (the
//!   lease is 3 s), all deciding leases with the server's time; `--skew-clock host` runs the
//!   control on their own clocks, which must fail.
//!
//! Every worker logs each outcome to an ack log outside the database's file system. Afterwards
//! the checker verifies the chaos invariants (one writer per lease epoch, no stale epoch, no lost
//! binding, no half-applied deletion or reset, unknown outcomes quarantined) and: every
//! acknowledged write is in the database, no write half-applied (fence and log disagree),
//! `PRAGMA integrity_check` ok, never two holders of a key at once (in real time), each lost
//! COMMIT reported unknown and quarantined and on disk exactly when the server committed it.
//! The task itself checks that every worker and the service ran to
//! the end without a restart, that workers succeeded again after each recoverable fault (and how
//! long that took), and that `/readyz` answered 200 again. Needs root (mounts, the server
//! restart); elsewhere it says what it skipped.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, sleep};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::chaos::{Rng, output, worker_binary};
use crate::forwarder::Forwarder;
use crate::{cargo, run, say};

#[derive(Clone)]
struct Options {
    quick: bool,
    seconds: u64,
    processes: usize,
    only: Option<String>,
    /// The clock the workers of the `skew` phase decide leases with: `server` (the database
    /// server's time, what several hosts must use) or `host` (their own skewed clocks: the
    /// control run, which must find violations).
    skew_clock: String,
}

const KINDS: [&str; 5] = ["disk-full", "read-only", "postgres", "partition", "skew"];

fn parse(args: &[String]) -> Result<Options, String> {
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let quick = args.iter().any(|a| a == "--quick");
    let number = |name: &str, default: u64| -> Result<u64, String> {
        value(name).map_or(Ok(default), |v| {
            v.parse()
                .map_err(|_| format!("{name} needs a number, got `{v}`"))
        })
    };
    let only = value("--only");
    if let Some(kind) = &only
        && !KINDS.contains(&kind.as_str())
    {
        return Err(format!("--only must be one of {KINDS:?}, not `{kind}`"));
    }
    let skew_clock = value("--skew-clock").unwrap_or_else(|| "server".to_owned());
    if skew_clock != "server" && skew_clock != "host" {
        return Err(format!(
            "--skew-clock must be server or host, not `{skew_clock}`"
        ));
    }
    Ok(Options {
        skew_clock,
        quick,
        seconds: number("--seconds", if quick { 20 } else { 60 })?.max(10),
        processes: usize::try_from(number("--processes", 3)?.max(1)).unwrap_or(3),
        only,
    })
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

pub(crate) fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// Runs a command quietly; its stderr in the error.
fn quiet(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// One fault: when it started and ended (ms since the Unix epoch; `end` = `None` when the
/// fault is never lifted), and whether workers must recover from it without a restart.
struct Window {
    what: &'static str,
    start: u128,
    end: Option<u128>,
    /// The worker the fault cut off, when it hit one worker.
    of: Option<&'static str>,
    /// The worker's link was down (for longer than its lease): it must not start a write
    /// under a lease it held before the cut once that lease lapsed.
    cut: bool,
}

/// What one phase measured.
pub(crate) struct Phase {
    kind: &'static str,
    backend: &'static str,
    seconds: u64,
    ops: u64,
    failed: u64,
    acks: u64,
    quarantined: usize,
    released: usize,
    faults: usize,
    failed_during_faults: u64,
    violations: Vec<String>,
    /// The slowest worker to succeed again after a fault ended: how long, who, after what.
    worst_recovery: Option<(u128, String, &'static str)>,
    worst_ready_ms: Option<u128>,
    /// For each fault of a lease holder's link that made a lease it held lapse: the fault,
    /// and how long after the fault began the holder learned it.
    learned_ms: Vec<(&'static str, u128)>,
    /// The checker's line for each COMMIT whose answer was lost on the wire.
    lost_commits: Vec<String>,
    /// The checker's count of lease intervals compared for overlap.
    intervals: String,
    /// Failed operations by error class.
    classes: String,
    checker: String,
}

/// A scratch folder removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!(
            "tether-faults-{what}-{}-{}",
            std::process::id(),
            Rng::new().below(1 << 40)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    /// Removes the folder, unless `TETHER_FAULTS_KEEP` is set (to read the ack logs after a
    /// run; the database file system is unmounted either way).
    fn drop(&mut self) {
        if std::env::var_os("TETHER_FAULTS_KEEP").is_some() {
            say(&format!("    kept {}", self.0.display()));
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A file system the task mounted, unmounted on drop (lazily if something still holds it).
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let path = self.0.display().to_string();
        if quiet("umount", &[&path]).is_err() {
            let _ = quiet("umount", &["-l", &path]);
        }
    }
}

/// The admin token of the service the task starts (a throwaway value for a local service).
const ADMIN_TOKEN: &str = "faults-admin-token";

/// Polls `/readyz` of the service every 250 ms: (ms since the epoch, HTTP status or 0).
struct Readiness {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<(u128, u16)>>>,
    thread: Option<thread::JoinHandle<()>>,
}

fn readyz(addr: &str) -> u16 {
    http(addr, "GET", "/readyz", "")
}

/// One HTTP/1.1 request to the service with the admin token; the response status, 0 when
/// there was no answer.
fn http(addr: &str, method: &str, path: &str, body: &str) -> u16 {
    let Ok(parsed) = addr.parse() else { return 0 };
    let Ok(mut stream) = TcpStream::connect_timeout(&parsed, Duration::from_secs(2)) else {
        return 0;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(3)));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Authorization: Bearer {ADMIN_TOKEN}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut head = [0u8; 12];
    if stream.read_exact(&mut head).is_err() {
        return 0;
    }
    std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

impl Readiness {
    fn start(addr: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (stop2, seen2) = (stop.clone(), seen.clone());
        let thread = thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let status = readyz(&addr);
                if let Ok(mut seen) = seen2.lock() {
                    seen.push((now_ms(), status));
                }
                sleep(Duration::from_millis(250));
            }
        });
        Self {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    /// A poller that polls nothing (what a finished workload keeps).
    fn idle() -> Self {
        Self {
            stop: Arc::new(AtomicBool::new(true)),
            seen: Arc::new(Mutex::new(Vec::new())),
            thread: None,
        }
    }

    fn finish(mut self) -> Vec<(u128, u16)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// How one worker runs: in a network namespace (with the URL it reaches the database by
/// there), and with which extra arguments.
#[derive(Default)]
struct Launch {
    netns: Option<String>,
    url: Option<String>,
    args: Vec<String>,
}

/// The workers and the service of one phase.
struct Workload {
    bin: PathBuf,
    url: String,
    acks: PathBuf,
    workers: Vec<Child>,
    names: Vec<String>,
    service: Child,
    addr: String,
    readiness: Readiness,
    /// Lease keys the operator released through the service, and when.
    released: Vec<(String, u128)>,
}

impl Workload {
    fn start(
        bin: &Path,
        tether: &Path,
        url: &str,
        acks: &Path,
        options: &Options,
    ) -> Result<Self, String> {
        let names: Vec<String> = (0..options.processes).map(|i| format!("w{i}")).collect();
        Self::start_with(bin, tether, url, acks, options, &names, |_| {
            Launch::default()
        })
    }

    /// Starts the named workers; `launch(name)` says how each one runs.
    fn start_with(
        bin: &Path,
        tether: &Path,
        url: &str,
        acks: &Path,
        options: &Options,
        names: &[String],
        launch: impl Fn(&str) -> Launch,
    ) -> Result<Self, String> {
        output(Command::new(bin).args(["setup", "--url", url]))?;
        let mut workers = Vec::new();
        for name in names {
            let log = acks.join(format!("{name}.acks"));
            let how = launch(name);
            let mut cmd = match &how.netns {
                Some(netns) => {
                    let mut cmd = Command::new("ip");
                    cmd.args(["netns", "exec", netns]).arg(bin);
                    cmd
                }
                None => Command::new(bin),
            };
            let worker_url = how.url.unwrap_or_else(|| url.to_owned());
            let child = cmd
                .args(["run", "--url", &worker_url, "--name", name])
                .args(&how.args)
                .arg("--seconds")
                .arg(options.seconds.to_string())
                .arg("--acks")
                .arg(&log)
                .stdout(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start chaos worker {name}: {e}"))?;
            workers.push(child);
        }
        let mut serve = Command::new(tether);
        serve
            .args(["serve", "--database-url", url])
            .env("TETHER_ADMIN_TOKEN", ADMIN_TOKEN);
        let (service, bind) = match crate::service::start(serve, &acks.join("service.log")) {
            Ok(started) => started,
            Err(e) => {
                for worker in &mut workers {
                    let _ = worker.kill();
                    let _ = worker.wait();
                }
                return Err(e);
            }
        };
        Ok(Self {
            bin: bin.to_owned(),
            url: url.to_owned(),
            acks: acks.to_owned(),
            workers,
            names: names.to_vec(),
            service,
            addr: bind.clone(),
            readiness: Readiness::start(bind),
            released: Vec::new(),
        })
    }

    /// The operator's step after faults that left lease keys quarantined: release each
    /// through the running service (`POST /v1/quarantine/{ns}/{key}/release`).
    fn release_quarantined(&mut self) -> Result<(), String> {
        let before = self.released.len();
        for i in 0..4 {
            let key = format!("conversation:chaos-k{i}");
            let release = || {
                http(
                    &self.addr,
                    "POST",
                    &format!("/v1/quarantine/chaos-leases/{key}/release"),
                    r#"{"reason":"faults: the operator checked the row after the fault"}"#,
                )
            };
            // No answer (0): under load the service can take seconds to answer; the operator
            // tries again for up to 10 s.
            let mut status = release();
            let mut tries = 0;
            while status == 0 && tries < 20 {
                sleep(Duration::from_millis(500));
                status = release();
                tries += 1;
            }
            match status {
                200 => self.released.push((key, now_ms())),
                404 => {}
                other => {
                    let service = match self.service.try_wait() {
                        Ok(None) => "running".to_owned(),
                        Ok(Some(status)) => format!("exited ({status})"),
                        Err(e) => e.to_string(),
                    };
                    return Err(format!(
                        "releasing {key} answered {other} (0: no answer); tether serve {service}, its last words: {}",
                        crate::service::last_words(&self.acks.join("service.log"))
                    ));
                }
            }
        }
        let now = self.released.len() - before;
        if now > 0 || before == 0 {
            say(&format!(
                "    operator released {now} quarantined lease keys through the service"
            ));
        }
        Ok(())
    }

    /// Waits for the workers' deadline, stops the service, and reads what happened.
    fn finish(
        mut self,
        kind: &'static str,
        backend: &'static str,
        options: &Options,
        windows: &[Window],
        before_check: impl FnOnce() -> Result<(), String>,
    ) -> Result<Phase, String> {
        let mut violations = Vec::new();
        for (name, worker) in self.names.iter().zip(self.workers.iter_mut()) {
            match worker.wait() {
                Ok(status) if status.success() => {}
                Ok(status) => violations.push(format!("worker {name} ended with {status}")),
                Err(e) => violations.push(format!("worker {name}: {e}")),
            }
        }
        let seen = std::mem::replace(&mut self.readiness, Readiness::idle()).finish();
        match self.service.try_wait() {
            Ok(None) => {
                let _ = self.service.kill();
                let _ = self.service.wait();
            }
            Ok(Some(status)) => violations.push(format!("tether serve exited ({status})")),
            Err(e) => violations.push(format!("tether serve: {e}")),
        }
        before_check()?;

        // The ack logs: outcomes in time, for the faults' effect and the recovery times.
        let mut outcomes: Vec<(u128, bool, String)> = Vec::new();
        let mut lost: Vec<(u128, String)> = Vec::new();
        // (a `hold` line, else a `begin` line; time; worker; "key epoch").
        let mut leases: Vec<(bool, u128, String, String)> = Vec::new();
        let mut classes = std::collections::BTreeMap::new();
        for name in &self.names {
            let path = self.acks.join(format!("{name}.acks"));
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for line in text.lines() {
                let mut fields = line.split(' ');
                let (tag, at) = (fields.next(), fields.next().and_then(|t| t.parse().ok()));
                match (tag, at) {
                    (Some("ok"), Some(at)) => outcomes.push((at, true, name.clone())),
                    (Some("fail"), Some(at)) => {
                        outcomes.push((at, false, name.clone()));
                        let class = fields.next().unwrap_or("?").to_owned();
                        *classes.entry(class).or_insert(0u64) += 1;
                    }
                    (Some("lost"), Some(at)) => lost.push((at, name.clone())),
                    (Some(tag @ ("hold" | "begin")), Some(at)) => {
                        if let (Some(key), Some(epoch)) = (fields.next(), fields.next()) {
                            leases.push((
                                tag == "hold",
                                at,
                                name.clone(),
                                format!("{key} {epoch}"),
                            ));
                        }
                    }
                    _ => {}
                }
            }
        }
        // When the cut-off worker (`Window::of`) learned that a lease it held lapsed.
        let mut learned_ms = Vec::new();
        for window in windows {
            let Some(of) = window.of else { continue };
            if let Some(at) = lost
                .iter()
                .filter(|(at, who)| {
                    // Within the lease (3 s) after the fault ends: not a later fault's lapse.
                    *who == of
                        && *at >= window.start
                        && window.end.is_none_or(|end| *at <= end + 3_000)
                })
                .map(|(at, _)| *at)
                .min()
            {
                learned_ms.push((window.what, at - window.start));
            }
        }
        // A worker whose link was cut for longer than its lease starts no write under a lease
        // it held before the cut once that lease lapsed: it learns of the loss first.
        for window in windows.iter().filter(|w| w.cut) {
            let Some(of) = window.of else { continue };
            let held_before: Vec<&String> = leases
                .iter()
                .filter(|(hold, at, who, _)| *hold && who == of && *at < window.start)
                .map(|(_, _, _, lease)| lease)
                .collect();
            for (_, at, _, lease) in leases.iter().filter(|(hold, at, who, lease)| {
                !*hold && who == of && *at > window.start + 3_000 && held_before.contains(&lease)
            }) {
                violations.push(format!(
                    "{of} started a write under {lease} {} ms after its link was cut (lease 3 s)",
                    at - window.start
                ));
            }
        }
        // Every released key is written again by some worker.
        for (key, at) in &self.released {
            let written_again = self.names.iter().any(|name| {
                std::fs::read_to_string(self.acks.join(format!("{name}.acks")))
                    .unwrap_or_default()
                    .lines()
                    .any(|l| {
                        let f: Vec<&str> = l.split(' ').collect();
                        f.len() == 6
                            && f[0] == "ack"
                            && f[2] == key
                            && f[1].parse::<u128>().is_ok_and(|t| t > *at)
                    })
            });
            if !written_again {
                violations.push(format!(
                    "lease key {key} was released but no worker wrote it again"
                ));
            }
        }
        let ops = outcomes.len() as u64;
        let failed = outcomes.iter().filter(|(_, ok, _)| !ok).count() as u64;
        let failed_during_faults = outcomes
            .iter()
            .filter(|(at, ok, _)| {
                !ok && windows
                    .iter()
                    .any(|w| *at >= w.start && w.end.is_none_or(|end| *at <= end + 1_000))
            })
            .count() as u64;
        let mut worst_recovery: Option<(u128, String, &'static str)> = None;
        let mut worst_ready_ms = None;
        for window in windows {
            let Some(end) = window.end else { continue };
            // Every worker succeeds again after the fault is lifted.
            for name in &self.names {
                let name = name.clone();
                match outcomes
                    .iter()
                    .filter(|(at, ok, who)| *ok && *at > end && *who == name)
                    .map(|(at, _, _)| *at)
                    .min()
                {
                    Some(at) => {
                        if worst_recovery
                            .as_ref()
                            .is_none_or(|(ms, _, _)| at - end > *ms)
                        {
                            worst_recovery = Some((at - end, name, window.what));
                        }
                    }
                    None => violations.push(format!(
                        "worker {name} never succeeded again after {} ended",
                        window.what
                    )),
                }
            }
            match seen.iter().find(|(at, status)| *at > end && *status == 200) {
                Some((at, _)) => worst_ready_ms = Some(worst_ready_ms.unwrap_or(0).max(at - end)),
                None => violations.push(format!(
                    "/readyz never answered 200 again after {} ended",
                    window.what
                )),
            }
        }
        if windows.iter().all(|w| w.end.is_some())
            && seen.last().is_none_or(|(_, status)| *status != 200)
        {
            violations.push(format!(
                "/readyz did not answer 200 at the end (last: {:?})",
                seen.last()
            ));
        }

        let out = Command::new(&self.bin)
            .args(["check", "--url", &self.url, "--kills", "0", "--acks"])
            .arg(&self.acks)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("chaos_worker check: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        for line in text.lines() {
            say(&format!("    {line}"));
            if let Some(v) = line.strip_prefix("violation: ") {
                violations.push(v.to_owned());
            }
        }
        if !text
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("chaos: "))
        {
            return Err(format!("the checker failed ({})", out.status));
        }
        let acks = text
            .lines()
            .find_map(|l| l.strip_prefix("acks: "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let quarantined = text
            .lines()
            .filter(|l| l.starts_with("quarantined after an unknown outcome"))
            .count();
        let lost_commits = text
            .lines()
            .filter_map(|l| l.strip_prefix("lost COMMIT: "))
            .map(str::to_owned)
            .collect();
        let intervals = text
            .lines()
            .find_map(|l| l.strip_prefix("leases: "))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or("0")
            .to_owned();
        Ok(Phase {
            kind,
            backend,
            seconds: options.seconds,
            ops,
            failed,
            acks,
            quarantined,
            released: self.released.len(),
            faults: windows.len(),
            failed_during_faults,
            violations,
            worst_recovery,
            worst_ready_ms,
            learned_ms,
            lost_commits,
            intervals,
            classes: classes
                .iter()
                .map(|(class, n)| format!("{class} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            checker: text.lines().last().unwrap_or_default().to_owned(),
        })
    }
}

impl Drop for Workload {
    /// A phase that failed half-way leaves no worker or service behind.
    fn drop(&mut self) {
        for child in self
            .workers
            .iter_mut()
            .chain(std::iter::once(&mut self.service))
        {
            if child.try_wait().is_ok_and(|s| s.is_none()) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Fills the file system at `dir` with one file until it refuses another byte.
fn fill(dir: &Path) -> Result<u64, String> {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let chunk = vec![0x5a_u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(_) => break,
        }
    }
    // The last partial pages too.
    while file.write(&chunk[..512]).is_ok_and(|n| n > 0) {
        written += 512;
    }
    Ok(written)
}

/// Sleeps until `deadline`, or not at all when it is past.
fn sleep_until(deadline: Instant) {
    sleep(deadline.saturating_duration_since(Instant::now()));
}

fn disk_full(bin: &Path, tether: &Path, options: &Options) -> Result<Phase, String> {
    let scratch = Scratch::new("disk-full")?;
    let mnt = scratch.0.join("tmpfs");
    std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
    let mnt_s = mnt.display().to_string();
    // The database grows with the run: long runs get room for it (the filler takes every
    // free byte whatever the size).
    let size_mib = if options.seconds > 120 { 256 } else { 24 };
    quiet(
        "mount",
        &[
            "-t",
            "tmpfs",
            "-o",
            &format!("size={size_mib}m"),
            "tmpfs",
            &mnt_s,
        ],
    )?;
    let mount = Mount(mnt.clone());
    let acks = scratch.0.join("acks");
    std::fs::create_dir_all(&acks).map_err(|e| e.to_string())?;
    let url = format!("sqlite://{}/chaos.db?mode=rwc", mnt.display());
    say(&format!(
        "==> faults disk-full: {} workers and tether serve on SQLite on a {size_mib} MiB tmpfs, {} s",
        options.processes, options.seconds
    ));
    let start = Instant::now();
    let mut workload = Workload::start(bin, tether, &url, &acks, options)?;
    let deadline = start + Duration::from_secs(options.seconds);
    let hold = Duration::from_secs(if options.quick { 2 } else { 3 });
    let mut windows = Vec::new();
    let mut at = start + Duration::from_secs(3);
    while at + hold + Duration::from_secs(6) < deadline {
        sleep_until(at);
        let begin = now_ms();
        let bytes = fill(&mnt)?;
        sleep(hold);
        std::fs::remove_file(mnt.join("filler")).map_err(|e| format!("free: {e}"))?;
        windows.push(Window {
            what: "disk full",
            start: begin,
            end: Some(now_ms()),
            of: None,
            cut: false,
        });
        say(&format!(
            "    disk full for {hold:?} ({} KiB filler), then freed",
            bytes / 1024
        ));
        at += Duration::from_secs(if options.quick { 6 } else { 8 });
        // The operator's step, after each fault: the keys whose writes' outcome is unknown are
        // checked and released, so that every fault meets a working drill (not keys blocked
        // since the first one).
        sleep(Duration::from_secs(1));
        workload.release_quarantined()?;
    }
    // Records written late (the lifecycle writes a record it could not write on a full disk
    // at the key's next entry point) are released too.
    sleep(Duration::from_secs(1));
    workload.release_quarantined()?;
    let phase = workload.finish("disk-full", "SQLite", options, &windows, || Ok(()))?;
    drop(mount);
    Ok(phase)
}

fn read_only(bin: &Path, tether: &Path, options: &Options) -> Result<Phase, String> {
    let scratch = Scratch::new("read-only")?;
    let image = scratch.0.join("ext4.img");
    let image_s = image.display().to_string();
    let mnt = scratch.0.join("ext4");
    std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
    let mnt_s = mnt.display().to_string();
    let size = if options.seconds > 120 { "256M" } else { "64M" };
    quiet("truncate", &["-s", size, &image_s])?;
    quiet("mkfs.ext4", &["-q", "-F", &image_s])?;
    quiet("mount", &["-o", "loop,errors=remount-ro", &image_s, &mnt_s])?;
    let mount = Mount(mnt.clone());
    let device = quiet("findmnt", &["-no", "SOURCE", &mnt_s])?;
    let device = device
        .trim()
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let trigger = PathBuf::from(format!("/sys/fs/ext4/{device}/trigger_fs_error"));
    if !trigger.exists() {
        return Err(format!(
            "{} is missing: the kernel cannot raise an ext4 error on demand",
            trigger.display()
        ));
    }
    let acks = scratch.0.join("acks");
    std::fs::create_dir_all(&acks).map_err(|e| e.to_string())?;
    let url = format!("sqlite://{}/chaos.db?mode=rwc", mnt.display());
    say(&format!(
        "==> faults read-only: {} workers and tether serve on SQLite on an ext4 image \
         (errors=remount-ro), {} s; the file system turns read-only midway",
        options.processes, options.seconds
    ));
    let start = Instant::now();
    let workload = Workload::start(bin, tether, &url, &acks, options)?;
    sleep_until(start + Duration::from_secs(options.seconds / 2));
    let begin = now_ms();
    std::fs::write(&trigger, "1").map_err(|e| format!("{}: {e}", trigger.display()))?;
    let options_now = quiet("findmnt", &["-no", "OPTIONS", &mnt_s])?;
    say(&format!(
        "    ext4 error raised; mount options now {}",
        options_now.trim()
    ));
    if !options_now
        .trim()
        .split(',')
        .any(|o| o == "ro" || o == "emergency_ro")
    {
        return Err(format!(
            "the file system did not turn read-only: {}",
            options_now.trim()
        ));
    }
    // A file system the kernel made read-only cannot be made writable again while files are
    // open on it: the fault is not lifted during the run.
    let windows = [Window {
        what: "read-only file system",
        start: begin,
        end: None,
        of: None,
        cut: false,
    }];
    let repair = || {
        // The operator's repair: unmount, e2fsck, mount again (the checker needs to write).
        drop(mount);
        let fsck = Command::new("e2fsck")
            .args(["-fy", &image_s])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run e2fsck: {e}"))?;
        // 0: clean, 1: errors corrected.
        if !matches!(fsck.code(), Some(0 | 1)) {
            return Err(format!("e2fsck could not repair the image ({fsck})"));
        }
        quiet("mount", &["-o", "loop", &image_s, &mnt_s])?;
        Ok(())
    };
    let phase = workload.finish("read-only", "SQLite", options, &windows, repair);
    let _ = quiet("umount", &[&mnt_s]);
    phase
}

/// The PostgreSQL cluster to restart: `TETHER_PG_CLUSTER` ("15 main"), or the first one
/// `pg_lsclusters` lists.
fn pg_cluster() -> Option<(String, String)> {
    let text = std::env::var("TETHER_PG_CLUSTER")
        .ok()
        .or_else(|| quiet("pg_lsclusters", &["-h"]).ok())?;
    let mut fields = text.lines().next()?.split_whitespace();
    Some((fields.next()?.to_owned(), fields.next()?.to_owned()))
}

/// Makes the database accept connections again whatever happened.
struct AllowAgain<'a> {
    bin: &'a Path,
    url: &'a str,
}

impl Drop for AllowAgain<'_> {
    fn drop(&mut self) {
        let _ =
            output(Command::new(self.bin).args(["pg-allow", "--url", self.url, "--allow", "true"]));
    }
}

fn postgres(bin: &Path, tether: &Path, options: &Options) -> Result<Phase, String> {
    on_fresh_database(bin, |url| postgres_on(bin, tether, url, options))
}

fn postgres_on(bin: &Path, tether: &Path, url: &str, options: &Options) -> Result<Phase, String> {
    let scratch = Scratch::new("postgres")?;
    let acks = scratch.0.join("acks");
    std::fs::create_dir_all(&acks).map_err(|e| e.to_string())?;
    let cluster = pg_cluster();
    say(&format!(
        "==> faults postgres: {} workers and tether serve on a fresh PostgreSQL database, {} s",
        options.processes, options.seconds
    ));
    let start = Instant::now();
    let mut workload = Workload::start(bin, tether, url, &acks, options)?;
    let _allow = AllowAgain { bin, url };
    let deadline = start + Duration::from_secs(options.seconds);
    let mut windows = Vec::new();
    let mut at = start + Duration::from_secs(3);
    let mut round = 0usize;
    while at + Duration::from_secs(6) <= deadline {
        sleep_until(at);
        let begin = now_ms();
        let what = match round % 3 {
            0 => {
                let said = output(Command::new(bin).args(["pg-terminate", "--url", url]))?;
                say(&format!("    {}", said.trim()));
                "backends terminated"
            }
            1 => {
                output(Command::new(bin).args(["pg-allow", "--url", url, "--allow", "false"]))?;
                sleep(Duration::from_secs(3));
                output(Command::new(bin).args(["pg-allow", "--url", url, "--allow", "true"]))?;
                say("    connections refused for 3 s");
                "connections refused"
            }
            _ => {
                let Some((version, name)) = &cluster else {
                    say("    no pg_ctlcluster cluster found: server restart skipped");
                    round += 1;
                    continue;
                };
                quiet("pg_ctlcluster", &[version, name, "restart"])?;
                say(&format!("    server restarted (cluster {version} {name})"));
                "server restart"
            }
        };
        windows.push(Window {
            what,
            start: begin,
            end: Some(now_ms()),
            of: None,
            cut: false,
        });
        round += 1;
        at += Duration::from_secs(if options.quick { 5 } else { 9 });
        // The operator's step: lease keys whose write's outcome a fault made unknown (a
        // COMMIT cut off by a terminated backend or the restart) are checked and released.
        sleep(Duration::from_secs(1));
        workload.release_quarantined()?;
    }
    workload.finish("postgres", "PostgreSQL", options, &windows, || Ok(()))
}

/// `ip` (iproute2), installed with apt-get when missing; `Err` when it is still missing.
fn partition_tools() -> Result<(), String> {
    let have_ip = || {
        Command::new("ip")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !have_ip() {
        say("    missing: apt-get install -y iproute2");
        let installed = quiet("apt-get", &["update", "-q"])
            .and_then(|_| quiet("apt-get", &["install", "-y", "-q", "iproute2"]));
        if let Err(e) = installed {
            say(&format!("    {e}"));
        }
    }
    if have_ip() {
        Ok(())
    } else {
        Err("iproute2 could not be installed (no `ip`)".to_owned())
    }
}

/// A network namespace joined to this one by a veth pair on a private /30 link, removed (with
/// its veth pair) on drop.
struct Netns {
    name: String,
    outer: String,
    inner: String,
    outer_ip: String,
    inner_ip: String,
}

impl Netns {
    fn create() -> Result<Self, String> {
        let tag = std::process::id() % 100_000;
        let octet = Rng::new().below(250) + 1;
        let netns = Self {
            name: format!("tether-faults-{tag}"),
            outer: format!("tfo{tag}"),
            inner: format!("tfi{tag}"),
            outer_ip: format!("10.231.{octet}.1"),
            inner_ip: format!("10.231.{octet}.2"),
        };
        quiet("ip", &["netns", "add", &netns.name])?;
        let setup = || -> Result<(), String> {
            let (ns, outer, inner) = (&netns.name, &netns.outer, &netns.inner);
            quiet(
                "ip",
                &["link", "add", outer, "type", "veth", "peer", "name", inner],
            )?;
            quiet("ip", &["link", "set", inner, "netns", ns])?;
            quiet(
                "ip",
                &[
                    "addr",
                    "add",
                    &format!("{}/30", netns.outer_ip),
                    "dev",
                    outer,
                ],
            )?;
            quiet("ip", &["link", "set", outer, "up"])?;
            let in_ns = |args: &[&str]| netns.ip_inside(args);
            in_ns(&[
                "addr",
                "add",
                &format!("{}/30", netns.inner_ip),
                "dev",
                inner,
            ])?;
            in_ns(&["link", "set", inner, "up"])?;
            in_ns(&["link", "set", "lo", "up"])?;
            Ok(())
        };
        setup()?;
        Ok(netns)
    }

    /// Runs `ip` inside the namespace.
    fn ip_inside(&self, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["netns", "exec", self.name.as_str(), "ip"];
        all.extend_from_slice(args);
        quiet("ip", &all)
    }

    /// Both ends of the link up (`true`) or down: a cut.
    fn link(&self, up: bool) -> Result<(), String> {
        let state = if up { "up" } else { "down" };
        quiet("ip", &["link", "set", &self.outer, state])?;
        self.ip_inside(&["link", "set", &self.inner, state])?;
        Ok(())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = quiet("ip", &["link", "del", &self.outer]);
        let _ = quiet("ip", &["netns", "del", &self.name]);
    }
}

/// `url` with its `host:port` replaced.
fn with_host(url: &str, host_port: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let (authority, path) = rest.split_once('/')?;
    let user = authority.rsplit_once('@').map(|(u, _)| u);
    Some(match user {
        Some(user) => format!("{scheme}://{user}@{host_port}/{path}"),
        None => format!("{scheme}://{host_port}/{path}"),
    })
}

/// A fresh PostgreSQL database for a phase (`pg-create`), dropped again after `phase` ran on it.
fn on_fresh_database(
    bin: &Path,
    phase: impl FnOnce(&str) -> Result<Phase, String>,
) -> Result<Phase, String> {
    let printed = output(Command::new(bin).arg("pg-create"))?;
    let url = printed
        .lines()
        .last()
        .map(str::trim)
        .filter(|l| l.starts_with("postgres"))
        .ok_or_else(|| format!("pg-create printed no URL (is PostgreSQL running?): {printed}"))?
        .to_owned();
    let result = phase(&url);
    if let Err(e) = output(Command::new(bin).args(["pg-drop", "--url", &url])) {
        say(&format!("    could not drop the chaos database: {e}"));
    }
    result
}

/// How long the partition phase runs on after its last fault, so that every worker can
/// succeed again before the end. Recovery is slow by design of the drill: `p0` holds each lease
/// 8 s, and the other workers pick one of four keys at random, each waiting up to its 5 s budget
/// behind `p0`'s lease before failing busy, so all of them can spend most of a hold blocked on
/// `p0`'s key (their ack logs show the three failing busy within 100 ms of each other). `p0`
/// itself, cut off, first learns that its lease lapsed (up to the 3 s lease), then holds its next
/// lease 8 s before its next success. Runs measured worst recoveries of 7.1, 8.4 and 15.4 s (the
/// last: `p0` after its lost COMMIT); with a 5 s tail, a worker blocked behind `p0` at the end
/// was reported as never recovering.
const RECOVERY_TAIL: Duration = Duration::from_secs(20);

/// One fault of the partition phase.
#[derive(Clone, Copy)]
enum LinkFault {
    /// Both ends of the link down.
    Cut,
    /// Every chunk held this long each way by the forwarder.
    Delay(u64),
    /// Each transmission of a chunk lost with this probability (in %), each way, and sent
    /// again after a doubling retransmission timeout (by the forwarder).
    Loss(u64),
    /// The answer to the next COMMIT of a fenced write swallowed and the connection closed,
    /// then the link cut: a COMMIT in flight when the link dropped.
    LostCommit,
}

impl LinkFault {
    /// The fault's name in the phase's output.
    fn name(self) -> &'static str {
        match self {
            Self::Cut => "link cut",
            Self::Delay(_) => "link delay",
            Self::Loss(_) => "lossy link",
            Self::LostCommit => "lost COMMIT",
        }
    }
}

fn partition_on(bin: &Path, tether: &Path, url: &str, options: &Options) -> Result<Phase, String> {
    let scratch = Scratch::new("partition")?;
    let acks = scratch.0.join("acks");
    std::fs::create_dir_all(&acks).map_err(|e| e.to_string())?;
    let upstream = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(authority, _)| authority.rsplit('@').next().unwrap_or(authority).to_owned())
        .ok_or_else(|| "cannot read host and port of the database URL".to_owned())?;
    let netns = Netns::create()?;
    let listen = format!("{}:{}", netns.outer_ip, 15_432);
    let forwarder = Forwarder::start(&listen, &upstream)?;
    let control = forwarder.control.clone();
    let inner_url =
        with_host(url, &listen).ok_or_else(|| "cannot rewrite the database URL".to_owned())?;
    let mut names: Vec<String> = (0..options.processes).map(|i| format!("w{i}")).collect();
    names.push("p0".to_owned());
    // The quick run needs room for three faults (a lost COMMIT waits for p0's next fenced
    // write, which comes after an 8 s hold) and the quiet tail after the last one.
    let mut options_here = Options {
        seconds: options.seconds,
        ..options.clone()
    };
    if options.quick {
        options_here.seconds = options.seconds.max(54);
    }
    let options = &options_here;
    say(&format!(
        "==> faults partition: worker p0 in network namespace {} (reaching PostgreSQL over {} -> {listen} through the task's forwarder), {} workers and tether serve outside, {} s",
        netns.name, netns.inner_ip, options.processes, options.seconds
    ));
    let start = Instant::now();
    let ns_name = netns.name.clone();
    let mut workload = Workload::start_with(bin, tether, url, &acks, options, &names, |name| {
        if name == "p0" {
            // The holder to cut off: it holds each lease 8 s (its 3 s lease renewed every
            // second), so that a cut lands while it holds one and the lapse is noticed by the
            // local expiry clock.
            Launch {
                netns: Some(ns_name.clone()),
                url: Some(inner_url.clone()),
                args: vec!["--hold-ms".to_owned(), "8000".to_owned()],
            }
        } else {
            Launch::default()
        }
    })?;
    let deadline = start + Duration::from_secs(options.seconds);
    let mut windows = Vec::new();
    let mut at = start + Duration::from_secs(3);
    let mut round = 0usize;
    let hold = if options.quick { 4 } else { 5 };
    let mut faults = vec![(LinkFault::LostCommit, 6)];
    if !options.quick {
        faults.push((LinkFault::Cut, 6));
    }
    faults.push((LinkFault::Delay(350), hold));
    faults.push((LinkFault::Loss(30), hold));
    let mut skipped = 0;
    loop {
        let (fault, secs) = faults[round % faults.len()];
        round += 1;
        if at + Duration::from_secs(secs) + RECOVERY_TAIL > deadline {
            // Faults of the first pass that did not fit are said, not dropped silently.
            if let Some(left) = faults.get(round - 1..).filter(|left| !left.is_empty()) {
                let names: Vec<&str> = left.iter().map(|(fault, _)| fault.name()).collect();
                say(&format!(
                    "    no time left for: {} (the phase keeps {} s after its last fault)",
                    names.join(", "),
                    RECOVERY_TAIL.as_secs()
                ));
            }
            break;
        }
        sleep_until(at);
        // The operator releases the lease keys quarantined after earlier lost COMMITs.
        workload.release_quarantined()?;
        let mut begin = now_ms();
        let what = match fault {
            LinkFault::Cut => {
                netns.link(false)?;
                sleep(Duration::from_secs(secs));
                netns.link(true)?;
                "link cut"
            }
            LinkFault::Delay(ms) => {
                control.delay(ms);
                sleep(Duration::from_secs(secs));
                control.delay(0);
                "link delayed 350 ms each way"
            }
            LinkFault::Loss(percent) => {
                control.lose(percent);
                sleep(Duration::from_secs(secs));
                control.lose(0);
                "link 30% lossy (each transmission of a chunk)"
            }
            LinkFault::LostCommit => {
                let before = control.lost_commits().len();
                control.arm_lost_commit(true);
                let wait_until = Instant::now() + Duration::from_secs(15);
                while control.lost_commits().len() == before && Instant::now() < wait_until {
                    sleep(Duration::from_millis(5));
                }
                control.arm_lost_commit(false);
                let lost = control.lost_commits();
                let Some(commit) = lost.get(before) else {
                    say(
                        "    p0 sent no fenced-write COMMIT in 15 s: no COMMIT answer lost this round",
                    );
                    skipped += 1;
                    at = Instant::now() + Duration::from_secs(1);
                    continue;
                };
                begin = commit.at_ms;
                netns.link(false)?;
                sleep(Duration::from_secs(secs));
                netns.link(true)?;
                say(&format!(
                    "    p0: a COMMIT forwarded, the server's answer ({}) swallowed and the connection closed",
                    commit.answer
                ));
                "COMMIT answer lost, then link cut"
            }
        };
        say(&format!("    p0: {what} for {secs} s"));
        windows.push(Window {
            what,
            start: begin,
            end: Some(now_ms()),
            of: Some("p0"),
            cut: matches!(fault, LinkFault::Cut | LinkFault::LostCommit),
        });
        at = Instant::now() + Duration::from_secs(if options.quick { 3 } else { 4 });
    }
    if skipped > 0 {
        say(&format!(
            "    {skipped} lost-COMMIT rounds found no COMMIT to lose"
        ));
    }
    // What the checker verifies each lost COMMIT against: the server's real answer.
    let lost: String = control
        .lost_commits()
        .iter()
        .map(|c| format!("{} p0 {}\n", c.at_ms, c.answer))
        .collect();
    std::fs::write(acks.join("lost-commits"), lost).map_err(|e| format!("lost-commits: {e}"))?;
    sleep(Duration::from_secs(1));
    workload.release_quarantined()?;
    let phase = workload.finish("partition", "PostgreSQL", options, &windows, || Ok(()));
    drop(forwarder);
    drop(netns);
    phase
}

/// The `skew` phase (PostgreSQL): beside the usual workers, one whose host clock runs 5 s
/// ahead and one whose host clock runs 5 s behind (the lease is 3 s), all deciding leases with
/// the server's time (`--skew-clock server`, the default) or, as a control that must fail,
/// with their own clocks (`--skew-clock host`).
fn skew_on(bin: &Path, tether: &Path, url: &str, options: &Options) -> Result<Phase, String> {
    let scratch = Scratch::new("skew")?;
    let acks = scratch.0.join("acks");
    std::fs::create_dir_all(&acks).map_err(|e| e.to_string())?;
    let mut names: Vec<String> = (0..options.processes).map(|i| format!("w{i}")).collect();
    names.push("ahead".to_owned());
    names.push("behind".to_owned());
    say(&format!(
        "==> faults skew: {} workers, one 5 s ahead and one 5 s behind (lease 3 s), all deciding leases with the {} clock, and tether serve on a fresh PostgreSQL database, {} s",
        options.processes,
        if options.skew_clock == "server" {
            "server's"
        } else {
            "host's own (control run)"
        },
        options.seconds
    ));
    let clock = options.skew_clock.clone();
    let workload = Workload::start_with(bin, tether, url, &acks, options, &names, |name| {
        let skew = match name {
            "ahead" => "5000",
            "behind" => "-5000",
            _ => "0",
        };
        let mut args = vec![
            "--clock".to_owned(),
            clock.clone(),
            "--clock-skew-ms".to_owned(),
            skew.to_owned(),
        ];
        if skew != "0" {
            // The skewed workers hold each lease 0.5 s: long enough for a wrong clock to
            // matter (a lease taken from a live holder, or kept past its expiry).
            args.extend(["--hold-ms".to_owned(), "500".to_owned()]);
        }
        Launch {
            args,
            ..Launch::default()
        }
    })?;
    workload.finish("skew", "PostgreSQL", options, &[], || Ok(()))
}

/// `cargo xtask faults`: `Ok` only when every phase ran without a violation.
pub(crate) fn faults(args: &[String]) -> Result<(), String> {
    let options = parse(args)?;
    if !is_root() {
        say(
            "faults: skipped: the suite mounts file systems and restarts PostgreSQL, which needs \
             root (run it as root, as `cargo xtask ci` does on CI)",
        );
        return Ok(());
    }
    run(
        "build chaos_worker and tether",
        cargo().args([
            "build",
            "-p",
            "tether-benches",
            "--bin",
            "chaos_worker",
            "-p",
            "tether-admin-http",
            "--bin",
            "tether",
        ]),
    )?;
    let bin = worker_binary()?;
    let tether = bin.with_file_name("tether");
    let wanted = |kind: &str| options.only.as_deref().is_none_or(|only| only == kind);
    let mut phases = Vec::new();
    if wanted("disk-full") {
        phases.push(disk_full(&bin, &tether, &options)?);
    }
    if wanted("read-only") {
        phases.push(read_only(&bin, &tether, &options)?);
    }
    if wanted("postgres") {
        phases.push(postgres(&bin, &tether, &options)?);
    }
    if wanted("partition") {
        match partition_tools() {
            Ok(()) => phases.push(on_fresh_database(&bin, |url| {
                partition_on(&bin, &tether, url, &options)
            })?),
            Err(why) => say(&format!("faults partition: skipped: {why}")),
        }
    }
    if wanted("skew") {
        phases.push(on_fresh_database(&bin, |url| {
            skew_on(&bin, &tether, url, &options)
        })?);
    }
    say(
        "faults: kind | backend | s | ops (failed) | acked writes | lease keys still quarantined / released | \
         faults | failed ops during faults | worst worker recovery | worst /readyz recovery | \
         violations",
    );
    let mut total = 0;
    for p in &phases {
        let ms = |v: Option<u128>| v.map_or_else(|| "-".to_owned(), |ms| format!("{ms} ms"));
        say(&format!(
            "faults: {} | {} | {} | {} ({}) | {} | {} / {} | {} | {} | {} | {} | {}",
            p.kind,
            p.backend,
            p.seconds,
            p.ops,
            p.failed,
            p.acks,
            p.quarantined,
            p.released,
            p.faults,
            p.failed_during_faults,
            ms(p.worst_recovery.as_ref().map(|(ms, _, _)| *ms)),
            ms(p.worst_ready_ms),
            p.violations.len()
        ));
        say(&format!("        checker: {}", p.checker));
        if let Some((ms, worker, what)) = &p.worst_recovery {
            say(&format!(
                "        slowest recovery: {worker}, {ms} ms after the fault ended ({what})"
            ));
        }
        say(&format!("        failures by class: {}", p.classes));
        say(&format!(
            "        lease intervals compared (never two holders at once): {}",
            p.intervals
        ));
        if !p.lost_commits.is_empty() {
            say(&format!(
                "        COMMIT answers lost on the wire: {}",
                p.lost_commits.len()
            ));
            for line in &p.lost_commits {
                say(&format!("          {line}"));
            }
        }
        if !p.learned_ms.is_empty() {
            for (what, ms) in &p.learned_ms {
                say(&format!(
                    "        cut-off holder learned its lease lapsed {ms} ms after the fault began ({what})"
                ));
            }
        }
        for v in &p.violations {
            say(&format!("        violation: {v}"));
        }
        if p.faults > 0 && p.failed_during_faults == 0 {
            say(&format!(
                "        note: no operation failed during the {} faults",
                p.kind
            ));
        }
        total += p.violations.len();
    }
    if total == 0 {
        Ok(())
    } else {
        Err(format!("{total} violations"))
    }
}

/// The `ci` step: the short version.
pub(crate) fn ci() -> Result<(), String> {
    faults(&["--quick".to_owned()])
}

#[cfg(test)]
mod tests {
    use super::{parse, with_host};

    #[test]
    fn the_database_url_is_rewritten_to_the_private_link() {
        assert_eq!(
            with_host(
                "postgres://postgres@127.0.0.1:5432/tether_chaos_1",
                "10.231.7.1:15432"
            )
            .as_deref(),
            Some("postgres://postgres@10.231.7.1:15432/tether_chaos_1")
        );
        assert_eq!(
            with_host("postgres://127.0.0.1:5432/db?sslmode=disable", "10.0.0.1:1").as_deref(),
            Some("postgres://10.0.0.1:1/db?sslmode=disable")
        );
        assert_eq!(with_host("not a url", "10.0.0.1:1"), None);
    }

    #[test]
    fn options_default_quick_and_refuse_unknown_kinds() {
        let args = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let quick = parse(&args(&["--quick"])).unwrap_or_else(|e| panic!("{e}"));
        assert!(quick.quick);
        assert_eq!(quick.seconds, 20);
        let full = parse(&args(&["--seconds", "600", "--only", "partition"]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (full.seconds, full.only.as_deref()),
            (600, Some("partition"))
        );
        assert!(parse(&args(&["--only", "meteor"])).is_err());
        assert!(parse(&args(&["--seconds", "many"])).is_err());
        assert_eq!(quick.skew_clock, "server");
        let control = parse(&args(&["--only", "skew", "--skew-clock", "host"]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (control.only.as_deref(), control.skew_clock.as_str()),
            (Some("skew"), "host")
        );
        assert!(parse(&args(&["--skew-clock", "sundial"])).is_err());
    }
}
