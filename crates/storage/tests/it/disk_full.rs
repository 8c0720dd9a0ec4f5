//! SQLite on a full disk: every acknowledged write is in the file after the process exits, and
//! the store recovers by itself once space is back.
//!
//! The parent test mounts a 2 MiB tmpfs (root only; elsewhere the test says why it skipped,
//! and fails instead when `TETHER_REQUIRE_TMPFS=1`), then runs this test binary again as a
//! child process that writes to a database on it: some writes with space, then writes while a
//! filler file has taken every free byte, then writes after the filler is deleted. The child
//! logs every write it was told succeeded (to a file outside the tmpfs) and every write that
//! failed, then exits without closing the store. The parent opens the file afterwards and
//! checks each key against the log.

#![allow(clippy::print_stderr)] // the skip notice and the counts, for whoever reads the test log

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tether_core::{BindingStore, Intent, Namespace, NamespaceConfig, RowWrite, admit_all};
use tether_storage::{Store, StoreOptions};

use crate::support::key;

/// Set in the child: the folder on the tmpfs.
const CHILD_DIR: &str = "TETHER_DISK_FULL_DIR";
/// Set in the child: the write log (outside the tmpfs).
const CHILD_LOG: &str = "TETHER_DISK_FULL_LOG";

const WRITERS: usize = 4;
const KEYS_PER_WRITER: usize = 3;

fn namespace() -> Namespace {
    Namespace::new("disk-full").unwrap()
}

fn db_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("tether.db").display())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// One line of the child's write log.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Logged {
    /// `ack <key> <attempt>`: the store said the write was applied.
    Ack(String, u64),
    /// `err <key> <attempt> <message>`: the write failed (its outcome may be unknown).
    Err(String, u64, String),
    /// `phase <name>`.
    Phase(String),
}

fn parse_log(text: &str) -> Vec<Logged> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(4, ' ');
            match (parts.next()?, parts.next(), parts.next()) {
                ("ack", Some(k), Some(n)) => Some(Logged::Ack(k.to_owned(), n.parse().ok()?)),
                ("err", Some(k), Some(n)) => Some(Logged::Err(
                    k.to_owned(),
                    n.parse().ok()?,
                    parts.next().unwrap_or_default().to_owned(),
                )),
                ("phase", Some(p), _) => Some(Logged::Phase(p.to_owned())),
                _ => None,
            }
        })
        .collect()
}

fn value_of(key: &str, attempt: u64) -> Vec<u8> {
    format!("{key}#{attempt}").into_bytes()
}

fn attempt_of(key: &str, value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value)
        .ok()?
        .strip_prefix(key)?
        .strip_prefix('#')?
        .parse()
        .ok()
}

#[test]
fn disk_full_sqlite_every_acknowledged_write_survives_and_the_store_recovers() {
    if !is_root() {
        assert!(
            std::env::var("TETHER_REQUIRE_TMPFS").as_deref() != Ok("1"),
            "TETHER_REQUIRE_TMPFS=1 but the test cannot mount a tmpfs (not root)"
        );
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    }
    let mnt = Tmpfs::mount("2m").expect("mount a 2 MiB tmpfs");
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("writes.log");
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "--exact",
            "disk_full::disk_full_child_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, mnt.path())
        .env(CHILD_LOG, &log)
        .output()
        .expect("run the child");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let entries = parse_log(&std::fs::read_to_string(&log).unwrap_or_default());
    let phase_of = |i: usize| {
        entries[..i]
            .iter()
            .rev()
            .find_map(|e| match e {
                Logged::Phase(p) => Some(p.clone()),
                _ => None,
            })
            .unwrap_or_default()
    };
    let full_errors = entries
        .iter()
        .enumerate()
        .filter(|(i, e)| matches!(e, Logged::Err(..)) && phase_of(*i) == "full")
        .count();
    let freed_errors: Vec<&Logged> = entries
        .iter()
        .enumerate()
        .filter(|(i, e)| matches!(e, Logged::Err(..)) && phase_of(*i) == "freed")
        .map(|(_, e)| e)
        .collect();
    assert!(
        out.status.success(),
        "the child failed ({}); recovery after freeing space: {} errors, first {:?}\n{stderr}",
        out.status,
        freed_errors.len(),
        freed_errors.first()
    );
    let acks = entries
        .iter()
        .filter(|e| matches!(e, Logged::Ack(..)))
        .count();
    eprintln!(
        "disk full: {acks} writes acknowledged, {full_errors} failed on the full disk, {} failed after space came back",
        freed_errors.len()
    );
    assert!(
        full_errors > 0,
        "no write failed while the disk was full: the test did not fill the disk\n{stderr}"
    );

    // Per key: the last acknowledged attempt, and every attempt that was made.
    let mut last_ack: BTreeMap<String, u64> = BTreeMap::new();
    let mut tried: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for e in &entries {
        match e {
            Logged::Ack(k, n) => {
                last_ack.insert(k.clone(), *n);
                tried.entry(k.clone()).or_default().push(*n);
            }
            Logged::Err(k, n, _) => tried.entry(k.clone()).or_default().push(*n),
            Logged::Phase(_) => {}
        }
    }
    assert_eq!(
        last_ack.len(),
        WRITERS * KEYS_PER_WRITER,
        "every key got writes"
    );

    // The child has exited without closing the store: read what the file holds.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = Store::open(&db_url(mnt.path())).await.unwrap();
        store
            .register_namespace(NamespaceConfig::new(namespace()))
            .await
            .unwrap();
        let mut missing = Vec::new();
        for (k, acked) in &last_ack {
            let row = store.lookup(&namespace(), &key(k)).await.unwrap();
            let stored = row.as_ref().and_then(|r| attempt_of(k, &r.value));
            match stored {
                // The acknowledged write, or a later write of the same key (acknowledged or
                // with an unknown outcome), is in the file; never an attempt nobody made.
                Some(n) if n >= *acked && tried[k].contains(&n) => {}
                other => missing.push(format!("{k}: acked #{acked}, file has {other:?}")),
            }
        }
        assert!(
            missing.is_empty(),
            "acknowledged writes missing from the file after the process exited: {missing:?}\n{stderr}"
        );
        let check = sea_orm::ConnectionTrait::query_one_raw(
            store.connection(),
            sea_orm::Statement::from_string(store.backend(), "PRAGMA integrity_check"),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(check.try_get_by_index::<String>(0).unwrap(), "ok");
    });
}

/// The child half of the disk-full test: ignored in ordinary runs, run only by
/// [`disk_full_sqlite_every_acknowledged_write_survives_and_the_store_recovers`] with its
/// environment.
#[test]
#[ignore = "the child process of the disk-full test; run by that test"]
fn disk_full_child_process() {
    let dir = PathBuf::from(std::env::var_os(CHILD_DIR).expect("run by the disk-full test"));
    let log_path = PathBuf::from(std::env::var_os(CHILD_LOG).expect("run by the disk-full test"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let code = rt.block_on(child(dir, log_path));
    // Exit without dropping the store or the runtime: nothing gets a chance to flush.
    std::process::exit(code);
}

struct Log(std::sync::Mutex<std::fs::File>);

impl Log {
    fn line(&self, line: &str) {
        let mut f = self.0.lock().unwrap();
        writeln!(f, "{line}").unwrap();
        f.flush().unwrap();
    }
}

/// One write of `key` (attempt `n`): observe, then compare-and-apply.
async fn write(store: &Store, log: &Log, key_name: &str, n: u64) -> bool {
    let ns = namespace();
    let k = key(key_name);
    let result = async {
        let seen = store.observe(&ns, &k).await?;
        let row = RowWrite {
            value: value_of(key_name, n),
            lease: None,
        };
        store
            .compare_and_apply(
                &ns,
                &k,
                &seen.comparison,
                Intent::Set { row, ttl: None },
                &admit_all,
            )
            .await
    }
    .await;
    match result {
        Ok(tether_core::ApplyOutcome::Applied { .. }) => {
            log.line(&format!("ack {key_name} {n}"));
            true
        }
        Ok(other) => {
            log.line(&format!("err {key_name} {n} not applied: {other:?}"));
            false
        }
        Err(e) => {
            let message = e.to_string().replace('\n', " ");
            log.line(&format!("err {key_name} {n} {message}"));
            false
        }
    }
}

async fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
    path
}

async fn child(dir: PathBuf, log_path: PathBuf) -> i32 {
    let log = Arc::new(Log(std::sync::Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap(),
    )));
    let store = Store::open_with(
        StoreOptions::new(db_url(&dir))
            .max_connections(WRITERS as u32)
            .busy_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    store
        .register_namespace(NamespaceConfig::new(namespace()))
        .await
        .unwrap();
    let keys = |w: usize| (0..KEYS_PER_WRITER).map(move |i| format!("w{w}-k{i}"));

    // Phase 1: room on disk.
    log.line("phase space");
    let mut attempt = 0;
    for _ in 0..3 {
        for w in 0..WRITERS {
            for k in keys(w) {
                attempt += 1;
                if !write(&store, &log, &k, attempt).await {
                    return 10;
                }
            }
        }
    }

    // Phase 2: the disk is full; writers keep trying concurrently.
    let filler = fill(&dir).await;
    log.line("phase full");
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, log) = (store.clone(), Arc::clone(&log));
            tokio::spawn(async move {
                for round in 0..6u64 {
                    for (i, k) in keys(w).enumerate() {
                        let n = 1_000 + (w as u64) * 100 + round * 10 + i as u64;
                        write(&store, &log, &k, n).await;
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }

    // Phase 3: space is back; every writer must get 5 writes in a row through, by itself,
    // within 30 s.
    std::fs::remove_file(&filler).unwrap();
    log.line("phase freed");
    let deadline = Instant::now() + Duration::from_secs(30);
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, log) = (store.clone(), Arc::clone(&log));
            tokio::spawn(async move {
                let mut streak = 0;
                let mut n = 10_000 + (w as u64) * 1_000;
                while streak < 5 {
                    if Instant::now() > deadline {
                        return false;
                    }
                    for k in keys(w) {
                        n += 1;
                        if write(&store, &log, &k, n).await {
                            streak += 1;
                        } else {
                            streak = 0;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
                true
            })
        })
        .collect();
    let mut recovered = true;
    for t in tasks {
        recovered &= t.await.unwrap();
    }
    log.line("phase done");
    if recovered { 0 } else { 20 }
}
