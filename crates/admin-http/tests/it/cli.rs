//! The `tether` binary end to end: `tether demo` on a temporary database, read back through
//! the API; operator commands and their exit codes.

use std::process::{Command, Output};

use axum::http::StatusCode;
use tether_admin_http::auth::Tokens;
use tether_admin_http::database::open_database;
use tether_admin_http::{AppState, ServeConfig};

use crate::support::{call, seg};

fn tether(args: &[&str], url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .args(["--database-url", url])
        .env("RUST_LOG", "warn")
        .env_remove("TETHER_DATABASE_URL")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_populates_a_database_the_api_then_reads() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("demo.db").display());
    // Without RUST_LOG: the summary, not the steps' info lines.
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["demo", "--database-url", &url])
        .env_remove("RUST_LOG")
        .env_remove("TETHER_DATABASE_URL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("tether serve --database-url"));
    assert!(
        text(&out).contains("fell back (scripted:"),
        "the fallbacks are explained: {}",
        text(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains(" INFO "), "no info lines: {stderr}");
    // A second run on the populated database is refused at once (it would wait behind the
    // first run's stuck lease), and changes nothing.
    let started = std::time::Instant::now();
    let again = tether(&["demo"], &url);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert!(
        text(&again).contains("populates an empty database"),
        "{}",
        text(&again)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));

    let config = ServeConfig::new(&url, "127.0.0.1:0", &Default::default()).unwrap();
    let state = AppState::from_database(open_database(&config).await.unwrap(), Tokens::default());
    let sessions = call(&state, "GET", "/v1/sessions", None, None).await.json();
    assert_eq!(sessions["sessions"].as_array().unwrap().len(), 4);
    let leased = call(&state, "GET", "/v1/sessions?has_lease=true", None, None)
        .await
        .json();
    assert_eq!(
        leased["sessions"][0]["session_key"],
        "agent:main:group:release"
    );
    let bob = call(
        &state,
        "GET",
        &format!("/v1/sessions/{}", seg("agent:main:direct:bob")),
        None,
        None,
    )
    .await;
    assert_eq!(bob.status, StatusCode::OK, "{}", bob.text);
    let bob = bob.json();
    assert_eq!(bob["lineage"]["previous_session_id"], "gen-2-1");
    // The demo reset bob's context (a rewind): the generation began with a cut.
    assert_eq!(bob["lineage"]["previous_change"], "cut");
    assert_eq!(bob["session"]["previous_change"], "cut");
    assert_eq!(bob["bindings"].as_array().unwrap().len(), 1);
    assert!(!bob["transcript_tail"].as_array().unwrap().is_empty());
    let nightly = call(
        &state,
        "GET",
        &format!("/v1/sessions/{}", seg("agent:ops:cron:nightly")),
        None,
        None,
    )
    .await
    .json();
    assert!(
        nightly["tool_outcomes"][0]["content"]
            .as_str()
            .unwrap()
            .contains("failed")
    );
    assert!(
        nightly["finalizations"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("finalization: fell back")
    );
    assert_eq!(
        call(&state, "GET", "/v1/quarantine", None, None)
            .await
            .json()["quarantine"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let metrics = call(&state, "GET", "/metrics", None, None).await.text;
    assert!(metrics.contains("tether_sessions 4"), "{metrics}");
    assert!(
        metrics.contains("tether_finalizations_total{outcome=\"fell_back\"} 2"),
        "carol's record is still counted after her session was deleted (a counter never \
         decreases): {metrics}"
    );
    assert!(
        metrics.contains("tether_finalizations_total{outcome=\"succeeded\"} 3"),
        "{metrics}"
    );
    let page = call(&state, "GET", "/", None, None).await.text;
    assert!(page.contains("example-worker-2 (crashed)"));
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_commands_mirror_the_api_with_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("ops.db").display());
    assert!(tether(&["demo"], &url).status.success());

    let list = tether(&["sessions", "list", "--limit", "2"], &url);
    assert!(list.status.success());
    let listed = text(&list);
    assert!(listed.contains("agent:main:direct:alice") && listed.contains("more: --cursor"));
    let cursor = listed.split("--cursor ").nth(1).unwrap().trim().to_owned();
    let rest = text(&tether(&["sessions", "list", "--cursor", &cursor], &url));
    assert!(rest.contains("agent:ops:cron:nightly") && !rest.contains("alice"));
    assert_eq!(
        tether(&["sessions", "list", "--limit", "500"], &url)
            .status
            .code(),
        Some(2),
        "bad input exits 2"
    );

    let human = text(&tether(
        &["sessions", "show", "agent:main:direct:alice"],
        &url,
    ));
    assert!(
        human.contains("session     agent:main:direct:alice") && human.contains("generation"),
        "{human}"
    );
    let bob = text(&tether(
        &["sessions", "show", "agent:main:direct:bob"],
        &url,
    ));
    assert!(bob.contains("previous gen-2-1 by cut"), "{bob}");
    let show = tether(
        &[
            "sessions",
            "show",
            "agent:main:direct:alice",
            "--output",
            "json",
        ],
        &url,
    );
    let detail: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(detail["session"]["agent_id"], "main");
    let missing = tether(&["sessions", "show", "agent:main:none"], &url);
    assert_eq!(missing.status.code(), Some(3));
    // The hint names the command, not the API request.
    let said = text(&missing);
    assert!(said.contains("`tether sessions list`"), "{said}");
    assert!(!said.contains("GET /v1"), "{said}");
    // With `--output json` a failure is JSON on stdout as well (its text still on stderr).
    let missing_json = tether(
        &["sessions", "show", "agent:main:none", "--output", "json"],
        &url,
    );
    assert_eq!(missing_json.status.code(), Some(3));
    let error: serde_json::Value = serde_json::from_slice(&missing_json.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&missing_json)));
    assert_eq!(error["error"]["code"], "not_found", "{error}");
    assert_eq!(error["error"]["exit_code"], 3, "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("`tether sessions list`")),
        "{error}"
    );
    assert!(String::from_utf8_lossy(&missing_json.stderr).contains("tether: error:"));
    // Without it, stdout stays empty on failure.
    assert!(missing.stdout.is_empty(), "{}", text(&missing));

    // A destructive command without a terminal and without --yes changes nothing (exit 2).
    let unconfirmed = tether(
        &[
            "sessions",
            "delete",
            "agent:main:direct:alice",
            "--reason",
            "test",
        ],
        &url,
    );
    assert_eq!(unconfirmed.status.code(), Some(2), "{}", text(&unconfirmed));
    assert!(text(&unconfirmed).contains("--yes"));
    assert_eq!(
        tether(&["sessions", "show", "agent:main:direct:alice"], &url)
            .status
            .code(),
        Some(0),
        "still there"
    );

    // A live lease blocks deletion (4) until it is force-expired.
    let blocked = tether(
        &[
            "sessions",
            "delete",
            "agent:main:group:release",
            "--reason",
            "test",
            "--yes",
        ],
        &url,
    );
    assert_eq!(blocked.status.code(), Some(4), "{}", text(&blocked));
    assert!(text(&blocked).contains("tether leases expire"));
    let leases = tether(&["leases", "list", "--output", "json"], &url);
    let leases: serde_json::Value = serde_json::from_slice(&leases.stdout).unwrap();
    let (ns, key) = (
        leases["bindings"][0]["namespace"]
            .as_str()
            .unwrap()
            .to_owned(),
        leases["bindings"][0]["key"].as_str().unwrap().to_owned(),
    );
    let expire = [
        "leases",
        "expire",
        "--yes",
        "--namespace",
        &ns,
        "--key",
        &key,
    ];
    assert_eq!(
        tether(&[&expire[..], &["--reason", " "]].concat(), &url)
            .status
            .code(),
        Some(2),
        "a blank reason is bad input"
    );
    // Another epoch than the lease's is a conflict (4) that names the current one.
    let stale = tether(
        &[
            &expire[..],
            &["--reason", "stale view", "--epoch", "999999999"],
        ]
        .concat(),
        &url,
    );
    assert_eq!(stale.status.code(), Some(4), "{}", text(&stale));
    assert!(text(&stale).contains("is now at epoch"), "{}", text(&stale));
    let expired = tether(
        &[&expire[..], &["--reason", "worker crashed"]].concat(),
        &url,
    );
    assert!(expired.status.success(), "{}", text(&expired));
    assert_eq!(
        tether(&[&expire[..], &["--reason", "again"]].concat(), &url)
            .status
            .code(),
        Some(4)
    );
    let deleted = tether(
        &[
            "sessions",
            "delete",
            "agent:main:group:release",
            "--reason",
            "test",
            "--yes",
        ],
        &url,
    );
    assert!(deleted.status.success(), "{}", text(&deleted));

    let quarantined = text(&tether(&["quarantine", "list"], &url));
    assert!(quarantined.contains("conversation:legacy-42"));
    let release = [
        "quarantine",
        "release",
        "--namespace",
        "example-threads",
        "--key",
        "conversation:legacy-42",
        "--yes",
        "--reason",
        "record repaired",
    ];
    assert!(tether(&release, &url).status.success());
    assert_eq!(tether(&release, &url).status.code(), Some(3));

    // Every action above is in the audit trail, by `cli`, with its reason and outcome.
    let config = ServeConfig::new(&url, "127.0.0.1:0", &Default::default()).unwrap();
    let state = AppState::from_database(open_database(&config).await.unwrap(), Tokens::default());
    let audit = call(&state, "GET", "/v1/audit?limit=200", None, None)
        .await
        .json();
    let trail: Vec<(String, String, String, String)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|e| {
            (
                e["actor"].as_str().unwrap().to_owned(),
                e["action"].as_str().unwrap().to_owned(),
                e["reason"].as_str().unwrap().to_owned(),
                e["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let row = |action: &str, reason: &str, outcome: &str| {
        (
            "cli".to_owned(),
            action.to_owned(),
            reason.to_owned(),
            outcome.to_owned(),
        )
    };
    assert_eq!(
        trail,
        [
            row("delete_session", "test", "refused"),
            row("expire_lease", "stale view", "refused"),
            row("expire_lease", "worker crashed", "succeeded"),
            row("expire_lease", "again", "refused"),
            row("delete_session", "test", "succeeded"),
            row("release_quarantine", "record repaired", "succeeded"),
            row("release_quarantine", "record repaired", "refused"),
        ]
    );
}

/// A `tether serve` child on `url` (a free loopback port), stopped when dropped.
struct Served {
    child: std::process::Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(url: &str, env: &[(&str, &str)]) -> Served {
    use std::io::BufRead as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["serve", "--bind", "127.0.0.1:0", "--database-url", url])
        .env("RUST_LOG", "warn")
        .env_remove("TETHER_ADMIN_TOKEN")
        .env_remove("TETHER_READ_TOKEN")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    Served {
        child,
        base: format!("http://{addr}"),
    }
}

/// `tether ARGS --server BASE` with `token` in TETHER_TOKEN (no database flag, no stdin).
fn remote(args: &[&str], base: &str, token: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
    cmd.args(args)
        .args(["--server", base])
        .env("RUST_LOG", "warn")
        .env_remove("TETHER_DATABASE_URL")
        .env_remove("TETHER_TOKEN")
        .stdin(std::process::Stdio::null());
    if let Some(token) = token {
        cmd.env("TETHER_TOKEN", token);
    }
    cmd.output().unwrap()
}

/// A `--server` URL carrying credentials is refused (they belong in TETHER_TOKEN) without
/// repeating them on the terminal.
#[test]
fn cli_a_server_url_with_credentials_is_refused_without_showing_them() {
    for base in [
        "http://admin:hunter2@127.0.0.1:1",
        "https://admin:hunter2@127.0.0.1:1/api",
        "http://hunter2@127.0.0.1:1",
        "http://admin:hunt/er2@127.0.0.1:1",
    ] {
        let out = remote(&["sessions", "list"], base, None);
        assert_eq!(out.status.code(), Some(2), "{base}: {}", text(&out));
        let shown = text(&out);
        assert!(
            !shown.contains("hunter2") && !shown.contains("hunt/er2"),
            "{shown}"
        );
        assert!(shown.contains("***@127.0.0.1:1"), "{shown}");
    }
}

/// A `--server` ending in `/v1` (the API's own prefix, which the commands add) is a usage
/// error naming the base URL to give, not a "not found" from `/v1/v1/…`.
#[test]
fn cli_a_server_url_ending_in_v1_is_a_usage_error() {
    for (base, hint) in [
        ("http://127.0.0.1:1/v1", ": http://127.0.0.1:1\n"),
        ("http://127.0.0.1:1/v1/", ": http://127.0.0.1:1\n"),
        (
            "http://127.0.0.1:1/tether/v1",
            ": http://127.0.0.1:1/tether\n",
        ),
    ] {
        let out = remote(&["sessions", "list"], base, None);
        assert_eq!(out.status.code(), Some(2), "{base}: {}", text(&out));
        let shown = text(&out);
        assert!(shown.contains("without `/v1`"), "{shown}");
        assert!(shown.contains(hint), "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cli_over_the_api_lists_pages_acts_as_the_token_and_maps_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("remote.db").display());
    assert!(tether(&["demo"], &url).status.success());
    let served = serve(
        &url,
        &[
            ("TETHER_ADMIN_TOKENS", "alice:alice-secret"),
            ("TETHER_READ_TOKENS", "viewer:viewer-secret"),
        ],
    );
    let base_url = served.base.clone();
    let base = base_url.as_str();
    let read = Some("viewer-secret");
    let admin = Some("alice-secret");

    // Lists page through the API, in table and JSON form.
    let first = remote(&["sessions", "list", "--limit", "2"], base, read);
    assert!(first.status.success(), "{}", text(&first));
    let listed = text(&first);
    assert!(listed.contains("agent:main:direct:alice") && listed.contains("more: --cursor"));
    let cursor = listed.split("--cursor ").nth(1).unwrap().trim().to_owned();
    let rest = text(&remote(
        &["sessions", "list", "--cursor", &cursor],
        base,
        read,
    ));
    assert!(rest.contains("agent:ops:cron:nightly") && !rest.contains("direct:alice"));
    let found = remote(
        &[
            "sessions", "list", "--search", "NIGHTLY", "--output", "json",
        ],
        base,
        read,
    );
    let found: serde_json::Value = serde_json::from_slice(&found.stdout).unwrap();
    assert_eq!(found["sessions"].as_array().unwrap().len(), 1);
    let show = text(&remote(
        &["sessions", "show", "agent:main:direct:alice"],
        base,
        read,
    ));
    assert!(
        show.contains("session     agent:main:direct:alice"),
        "{show}"
    );

    // The holder view from the command line: leases of one holder, naming their session.
    let leases = remote(&["leases", "list", "--output", "json"], base, read);
    let leases: serde_json::Value = serde_json::from_slice(&leases.stdout).unwrap();
    let lease = &leases["bindings"][0];
    let holder = lease["lease"]["holder"].as_str().unwrap().to_owned();
    assert!(lease["session_key"].is_string(), "{lease}");
    let held = text(&remote(
        &["leases", "list", "--holder", &holder],
        base,
        read,
    ));
    assert!(held.contains(lease["key"].as_str().unwrap()), "{held}");
    assert!(held.contains("session="), "{held}");
    // The table names the native thread where the row binds one, as the API does.
    if let Some(native) = lease["native_id"].as_str() {
        assert!(held.contains(&format!("native={native}")), "{held}");
    }
    let every = remote(&["leases", "list", "--all", "--output", "json"], base, read);
    let every: serde_json::Value = serde_json::from_slice(&every.stdout).unwrap();
    let bound = every["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|b| b["native_id"].as_str())
        .expect("the demo binds a native thread")
        .to_owned();
    let table = text(&remote(&["leases", "list", "--all"], base, read));
    assert!(table.contains(&format!("native={bound}")), "{table}");
    let paged = remote(
        &["quarantine", "list", "--limit", "1", "--output", "json"],
        base,
        read,
    );
    assert!(paged.status.success(), "{}", text(&paged));

    // Exit codes: bad input 2, no token or a read token for an action 2, missing 3, blocked 4.
    let bad_limit = remote(&["sessions", "list", "--limit", "0"], base, read);
    assert_eq!(bad_limit.status.code(), Some(2), "{}", text(&bad_limit));
    assert_eq!(
        remote(&["sessions", "list"], base, None).status.code(),
        Some(2),
        "no token: unauthorized"
    );
    let missing = remote(&["sessions", "show", "agent:main:none"], base, read);
    assert_eq!(missing.status.code(), Some(3));
    assert!(
        text(&missing).contains("`tether sessions list`"),
        "{}",
        text(&missing)
    );
    let (ns, key) = (
        lease["namespace"].as_str().unwrap().to_owned(),
        lease["key"].as_str().unwrap().to_owned(),
    );
    let expire = [
        "leases",
        "expire",
        "--namespace",
        &ns,
        "--key",
        &key,
        "--reason",
        "worker wedged",
    ];
    let unconfirmed = remote(&expire, base, admin);
    assert_eq!(unconfirmed.status.code(), Some(2), "{}", text(&unconfirmed));
    let as_reader = remote(&[&expire[..], &["--yes"]].concat(), base, read);
    assert_eq!(as_reader.status.code(), Some(2), "{}", text(&as_reader));
    assert!(text(&as_reader).contains("TETHER_TOKEN"));
    let expired = remote(
        &[&expire[..], &["--yes", "--output", "json"]].concat(),
        base,
        admin,
    );
    assert!(expired.status.success(), "{}", text(&expired));
    let result: serde_json::Value = serde_json::from_slice(&expired.stdout).unwrap();
    assert_eq!(result["outcome"], "expired");
    let nothing_left = remote(
        &[&expire[..], &["--yes", "--output", "json"]].concat(),
        base,
        admin,
    );
    assert_eq!(
        nothing_left.status.code(),
        Some(4),
        "nothing left to expire"
    );
    let error: serde_json::Value = serde_json::from_slice(&nothing_left.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&nothing_left)));
    assert_eq!(error["error"]["code"], "conflict", "{error}");
    assert_eq!(error["error"]["exit_code"], 4, "{error}");

    // The service recorded the actions under the token's name, listed by the audit command.
    let trail = remote(
        &["audit", "list", "--actor", "alice", "--output", "json"],
        base,
        read,
    );
    let trail: serde_json::Value = serde_json::from_slice(&trail.stdout).unwrap();
    let outcomes: Vec<&str> = trail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["refused", "succeeded"], "{trail}");
    assert_eq!(trail["entries"][1]["reason"], "worker wedged");

    // A service that does not answer: exit 5; a URL that is not http://: exit 2.
    drop(served);
    let down = remote(&["sessions", "list"], base, read);
    assert_eq!(down.status.code(), Some(5), "{}", text(&down));
    assert_eq!(
        remote(&["sessions", "list"], "https://example.invalid", read)
            .status
            .code(),
        Some(2)
    );
}

/// `tether serve` classifies a database it cannot open as every other command does: 6 for a
/// database it cannot use as it is (a schema newer than the binary, a PostgreSQL database that
/// does not exist), not the generic 1.
#[tokio::test(flavor = "multi_thread")]
async fn cli_serve_exits_like_every_command_when_the_database_cannot_be_opened() {
    use tether_storage::{HostBackend as _, HostTransaction as _};
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("future.db").display());
    let store = tether_storage::Store::open(&url).await.unwrap();
    let tx = store.begin_host().await.unwrap();
    tx.execute(
        "INSERT INTO seaql_migrations (version, applied_at) VALUES ('m9999_from_the_future', 0)",
        vec![],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    store.close().await.unwrap();
    let serve = |url: &str| {
        Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["serve", "--database-url", url])
            .env("RUST_LOG", "warn")
            .env("TETHER_BIND", "127.0.0.1:0")
            .env_remove("TETHER_DATABASE_URL")
            .env_remove("TETHER_ADMIN_TOKEN")
            .env_remove("TETHER_READ_TOKEN")
            .output()
            .unwrap()
    };
    // A connection cap of 0 is a usage error (2), never a silent 1.
    let zero = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["serve", "--max-connections", "0", "--database-url", &url])
        .env_remove("TETHER_MAX_CONNECTIONS")
        .output()
        .unwrap();
    assert_eq!(zero.status.code(), Some(2), "{}", text(&zero));
    let future = serve(&url);
    assert_eq!(future.status.code(), Some(6), "{}", text(&future));
    assert!(
        text(&future).contains("cannot open the database"),
        "{}",
        text(&future)
    );
    // The same database through a read command: the same code.
    let listed = tether(&["sessions", "list"], &url);
    assert_eq!(listed.status.code(), Some(6), "{}", text(&listed));

    if let Some(db) = tether_storage::testing::PgTestDatabase::create("serve_exit").await {
        let missing = tether_storage::testing::with_database(
            &tether_storage::testing::pg_server_url(),
            "tether_no_such_database",
        );
        let out = serve(&missing);
        assert_eq!(out.status.code(), Some(6), "{}", text(&out));
        assert!(text(&out).contains("does not exist"), "{}", text(&out));
        db.cleanup().await;
    }
}
