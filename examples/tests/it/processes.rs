//! The `example-host` binary as separate processes: the tour, two processes contending for one
//! session, and a holder losing its lease to an operator — on a SQLite file and on PostgreSQL
//! (skipped when no server answers, unless `TETHER_REQUIRE_PG=1`).

use std::collections::HashMap;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tether_core::{BindingKey, Namespace, SessionKey};
use tether_example_harness::ExampleHarness;
use tether_example_harness::harness::{EXAMPLE_API_KEY, NAMESPACE};
use tether_storage::testing::PgTestDatabase;
use tether_storage::{ForceExpireOutcome, LeaseEventKind, Store};
use tokio::io::{AsyncBufReadExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long any one expected line may take.
const LINE_TIMEOUT: Duration = Duration::from_secs(90);

/// A database for the processes: a SQLite file or a throwaway PostgreSQL database.
pub(crate) enum Database {
    Sqlite(tempfile::TempDir),
    Postgres(PgTestDatabase),
}

impl Database {
    pub(crate) fn sqlite() -> Self {
        Self::Sqlite(tempfile::tempdir().unwrap())
    }

    pub(crate) async fn postgres() -> Option<Self> {
        PgTestDatabase::create("example_host")
            .await
            .map(Self::Postgres)
    }

    pub(crate) fn url(&self) -> String {
        match self {
            Self::Sqlite(dir) => format!("sqlite://{}", dir.path().join("host.db").display()),
            Self::Postgres(db) => db.url().to_owned(),
        }
    }

    pub(crate) async fn cleanup(self) {
        if let Self::Postgres(db) = self {
            db.cleanup().await;
        }
    }
}

fn example_host(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-host"));
    command
        .args(args)
        .env("RUST_LOG", "info")
        .kill_on_drop(true);
    command
}

/// `name=value` lines.
fn facts(stdout: &str) -> HashMap<String, String> {
    stdout
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// A running `example-host` whose report lines are read as they come.
struct Running {
    name: &'static str,
    child: Child,
    /// Open while the process runs; `hold` releases its lease when it closes.
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
}

impl Running {
    fn spawn(name: &'static str, args: &[&str]) -> Self {
        let mut child = example_host(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self {
            name,
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Closes the process's standard input (a `hold` releases its lease).
    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Reads lines until `name=…` and returns its value.
    async fn expect(&mut self, name: &str) -> String {
        let wanted = format!("{name}=");
        loop {
            let line = tokio::time::timeout(LINE_TIMEOUT, self.lines.next_line())
                .await
                .unwrap_or_else(|_| {
                    panic!("{}: no `{name}` in time; saw {:?}", self.name, self.seen)
                })
                .unwrap()
                .unwrap_or_else(|| {
                    panic!("{}: ended without `{name}`; saw {:?}", self.name, self.seen)
                });
            self.seen.push(line.clone());
            if let Some(value) = line.strip_prefix(&wanted) {
                return value.to_owned();
            }
        }
    }

    /// Reads the remaining lines and waits for the process to exit.
    async fn exit(mut self) -> ExitStatus {
        let name = self.name;
        let finished = async {
            while let Ok(Some(line)) = self.lines.next_line().await {
                self.seen.push(line);
            }
            self.child.wait().await.unwrap()
        };
        tokio::time::timeout(LINE_TIMEOUT, finished)
            .await
            .unwrap_or_else(|_| panic!("{name}: did not exit in time"))
    }
}

async fn tour(db: &Database) {
    let url = db.url();
    let output = example_host(&["tour", "--database-url", &url, "--holder", "tour-1"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let seen = facts(&stdout);
    let postgres = matches!(db, Database::Postgres(_));
    let expected = [
        ("backend", if postgres { "postgres" } else { "sqlite" }),
        ("server_clock", if postgres { "true" } else { "false" }),
        ("turn1.started_thread", "true"),
        ("turn1.announced", "true"),
        ("turn1.sender_is_owner", "true"),
        ("turn1.replay_announced", "false"),
        ("turn1.epochs_increase", "true"),
        ("turn2.finalization", "succeeded"),
        ("turn3.tool", "failed"),
        ("turn3.last_tool_error", "shell"),
        ("turn3.finalization", "fell-back"),
        ("turn3.fallback_rows", "1"),
        ("lease.spawned_write_in_scope", "true"),
        ("lease.spawned_write_outside_scope", "held-outside-scope"),
        ("lease.outside_scope_refused_quickly", "true"),
        ("lease.try_busy", "true"),
        ("lease.try_retryable", "true"),
        ("lease.try_fast", "true"),
        ("lease.operator_expired_stuck", "true"),
        ("lease.lost", "lost-lease"),
        ("deletion.failing_host_write_refused", "true"),
        ("deletion.kept_after_refusal", "true"),
        ("deletion.deleted", "1"),
        ("deletion.host_rows_left", "0"),
        ("deletion.binding_left", "false"),
        ("deletion.transcript_left", "0"),
    ];
    for (name, value) in expected {
        assert_eq!(
            seen.get(name).map(String::as_str),
            Some(value),
            "{name}\n{stdout}\n{stderr}"
        );
    }
    assert!(seen["turn2.reply"].starts_with("Done: run cargo test"));
    // Sanitized logging: the tool's arguments are logged, the credential in them never is.
    assert!(stderr.contains("tool call settled"), "{stderr}");
    assert!(stderr.contains("api_key"), "{stderr}");
    assert!(!stderr.contains(EXAMPLE_API_KEY), "{stderr}");

    // A session already under the tour's key (here `tether demo`'s alice) is someone else's:
    // the tour refuses to start instead of driving and deleting it.
    let store = Store::open(&url).await.unwrap();
    let alice = SessionKey::new("agent:main:direct:alice").unwrap();
    assert!(
        store
            .create_session(tether_storage::NewHostSession {
                session_key: alice.clone(),
                agent_id: tether_core::AgentId::new("main").unwrap(),
                session_id: tether_core::SessionId::new("theirs").unwrap(),
                agent_harness_id: None,
            })
            .await
            .unwrap()
    );
    let output = example_host(&["tour", "--database-url", &url, "--holder", "tour-2"])
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{said}");
    assert!(said.contains("another --prefix"), "{said}");
    let kept = store
        .session(&alice)
        .await
        .unwrap()
        .expect("the session stays");
    assert_eq!(kept.session_id.as_str(), "theirs");
    store.close().await.unwrap();
}

/// One process holds the session's lease with heartbeats; a second one is refused at once
/// with the typed busy error, then waits and gets the lease with a greater epoch after the
/// first released it (when the test closes its input). The lease history shows exactly one
/// holder at a time.
async fn contention(db: &Database) {
    let url = db.url();
    let session = "agent:main:direct:contended";
    let mut holder = Running::spawn(
        "holder",
        &[
            "hold",
            "--database-url",
            &url,
            "--session",
            session,
            "--holder",
            "worker-a",
            "--hold-ms",
            "60000",
            "--lease-ms",
            "1500",
        ],
    );
    let first: u64 = holder.expect("held").await.parse().unwrap();
    let expires_at: i64 = holder.expect("expires_at").await.parse().unwrap();
    let mut contender = Running::spawn(
        "contender",
        &[
            "contend",
            "--database-url",
            &url,
            "--session",
            session,
            "--holder",
            "worker-b",
            "--wait-ms",
            "30000",
            "--lease-ms",
            "1500",
        ],
    );
    let try_ms: u64 = contender.expect("try_ms").await.parse().unwrap();
    assert_eq!(contender.expect("try").await, "busy");
    assert_eq!(contender.expect("try_busy").await, "true");
    assert!(try_ms < 2_000, "try_with_lease waited {try_ms} ms");
    let renewed: i64 = holder.expect("renewed").await.parse().unwrap();
    assert!(
        renewed > expires_at,
        "a heartbeat pushed the expiry ({expires_at} -> {renewed})"
    );
    holder.close_stdin();
    let renewed_until: i64 = holder.expect("renewed_until").await.parse().unwrap();
    assert!(renewed_until >= renewed);
    assert_eq!(holder.expect("released").await, "true");
    let second: u64 = contender.expect("acquired").await.parse().unwrap();
    assert!(second > first, "epochs {first} then {second}");
    assert!(holder.exit().await.success());
    assert!(contender.exit().await.success());
    exactly_one_holder_at_a_time(&url, session, &["worker-a", "worker-b"]).await;
}

/// Replays the session's lease history: every acquisition finds no live holder.
async fn exactly_one_holder_at_a_time(url: &str, session: &str, holders: &[&str]) {
    let store = Store::open(url).await.unwrap();
    let entry = store
        .session(&SessionKey::new(session).unwrap())
        .await
        .unwrap()
        .unwrap();
    let ns = Namespace::new(NAMESPACE).unwrap();
    let key: BindingKey = ExampleHarness::identity(&entry).key().clone();
    let mut events = store
        .recent_lease_events(Some((&ns, &key)), 1_000)
        .await
        .unwrap();
    events.sort_by_key(|e| e.seq);
    let mut current: Option<String> = None;
    let mut acquired_by = Vec::new();
    for event in &events {
        match event.kind {
            LeaseEventKind::Acquired => {
                assert!(
                    current.is_none(),
                    "{:?} acquired while {current:?} held it: {events:?}",
                    event.holder
                );
                current.clone_from(&event.holder);
                acquired_by.push(event.holder.clone().unwrap_or_default());
            }
            LeaseEventKind::Released | LeaseEventKind::Expired => current = None,
            LeaseEventKind::TakenOver => panic!("a live lease was taken over: {events:?}"),
            _ => {}
        }
    }
    for holder in holders {
        assert!(
            acquired_by.iter().any(|h| h == holder),
            "{holder} never held the lease: {events:?}"
        );
    }
    let _ = store.close().await;
}

/// A holder whose lease an operator expires: its `lost()` completes, it stops with exit code
/// 3, and a second process gets the lease at once with a greater epoch.
async fn lost_lease(db: &Database) {
    let url = db.url();
    let session = "agent:main:direct:lost";
    let mut holder = Running::spawn(
        "holder",
        &[
            "hold",
            "--database-url",
            &url,
            "--session",
            session,
            "--holder",
            "worker-a",
            "--hold-ms",
            "60000",
            "--lease-ms",
            "1500",
        ],
    );
    let first: u64 = holder.expect("held").await.parse().unwrap();
    let store = Store::open(&url).await.unwrap();
    let entry = store
        .session(&SessionKey::new(session).unwrap())
        .await
        .unwrap()
        .unwrap();
    let expired = store
        .force_expire_lease(
            &Namespace::new(NAMESPACE).unwrap(),
            ExampleHarness::identity(&entry).key(),
            None,
        )
        .await
        .unwrap();
    assert!(
        matches!(expired, ForceExpireOutcome::Expired { .. }),
        "{expired:?}"
    );
    assert_eq!(holder.expect("lost").await, "lost-lease");
    assert_eq!(holder.exit().await.code(), Some(3));
    let mut contender = Running::spawn(
        "contender",
        &[
            "contend",
            "--database-url",
            &url,
            "--session",
            session,
            "--holder",
            "worker-b",
            "--wait-ms",
            "30000",
            "--lease-ms",
            "1500",
        ],
    );
    assert_eq!(contender.expect("try").await, "acquired");
    let second: u64 = contender.expect("acquired").await.parse().unwrap();
    assert!(second > first, "epochs {first} then {second}");
    assert!(contender.exit().await.success());
    let _ = store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_host_tour_on_sqlite() {
    let db = Database::sqlite();
    tour(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_host_two_processes_contend_on_sqlite() {
    let db = Database::sqlite();
    contention(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_host_lost_lease_on_sqlite() {
    let db = Database::sqlite();
    lost_lease(&db).await;
}

/// PostgreSQL: the tour, the contention and the lost lease in one throwaway database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_host_on_postgres() {
    let Some(db) = Database::postgres().await else {
        return;
    };
    tour(&db).await;
    contention(&db).await;
    lost_lease(&db).await;
    db.cleanup().await;
}
