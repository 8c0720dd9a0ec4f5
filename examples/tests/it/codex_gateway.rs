//! The `codex-gateway` example against the real Codex app-server (pinned version, installed by
//! `cargo xtask codex-install`) and the scripted loopback model server: its flow through the
//! library on a SQLite file and on PostgreSQL, and the binary as a process. Skipped without a
//! Codex binary, unless `TETHER_REQUIRE_CODEX=1`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tether_codex::scripted::{ModelServer, Step, mentions};
use tether_codex::{CODEX_BIN_ENV, CodexConfig, ThreadId};
use tether_core::{AttemptTerminal, SessionKey};
use tether_example_harness::codex_gateway::{self, GatewayConfig, PROMPTS};
use tether_host::Host;
use tokio::process::Command;

use crate::processes::Database;

/// The Codex binary, or `None` (the test is skipped) unless `TETHER_REQUIRE_CODEX=1`.
fn codex_binary() -> Option<PathBuf> {
    tether_codex::scripted::codex_binary_for_tests(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    )
}

/// The model's three answers: the word, the word again on the same thread, and nothing on the
/// fresh thread after `/new`.
async fn model() -> ModelServer {
    ModelServer::start(vec![
        Step::Reply("I will remember heron."),
        Step::Reply("You asked me to remember heron."),
        Step::Reply("You have not asked me to remember anything."),
    ])
    .await
    .expect("the scripted model server starts on loopback")
}

/// The gateway's flow through the library: a new thread, the same thread resumed, `/new`, a
/// fresh thread that knows nothing of the first two turns, and the session deleted with its
/// binding and Codex threads — on a SQLite file and on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_gateway_chats_resets_and_deletes_on_the_real_app_server() {
    let Some(binary) = codex_binary() else {
        return;
    };
    let mut databases = vec![Database::sqlite()];
    databases.extend(Database::postgres().await);
    for database in databases {
        let model = model().await;
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("codex-home");
        std::fs::create_dir_all(&home).unwrap();
        let codex = CodexConfig::new(&binary, home)
            .with_responses_provider(&model.base_url(), "TETHER_TEST_MODEL_KEY")
            .with_env("TETHER_TEST_MODEL_KEY", "dummy-test-key")
            .with_request_timeout(Duration::from_secs(30));
        let host = Host::open(database.url()).await.unwrap();
        let key = SessionKey::new("agent:main:direct:gateway").unwrap();
        let config = GatewayConfig::new(codex, dir.path().display().to_string(), key.clone());
        let mut steps = Vec::new();
        let report = codex_gateway::run(&host, config, |step| steps.push(step.clone()))
            .await
            .unwrap();

        assert_eq!(report.session, key);
        assert!(report.first.started_thread, "{report:?}");
        assert_eq!(report.first.terminal, AttemptTerminal::Ok);
        assert_eq!(
            report.first.reply.as_deref(),
            Some("I will remember heron.")
        );
        // The second turn resumed the same thread.
        assert_eq!(report.second.thread_id, report.first.thread_id);
        assert!(report.second.resumed_thread && !report.second.started_thread);
        assert_eq!(
            report.second.reply.as_deref(),
            Some("You asked me to remember heron.")
        );
        // `/new` moved the session on, and its next turn started a fresh thread.
        assert_eq!(report.reset_to.as_str(), "gen-2");
        assert!(report.after_reset.started_thread, "{report:?}");
        assert_ne!(report.after_reset.thread_id, report.first.thread_id);
        // Deleted: the session, and every Codex thread of it.
        assert!(report.session_gone);
        assert_eq!(report.cleanups_pending, 0);
        assert!(host.store().session(&key).await.unwrap().is_none());

        // The resumed thread carried the first turn to the model; the fresh one did not.
        let requests = model.requests();
        assert_eq!(requests.len(), 3);
        assert!(mentions(&requests[1], PROMPTS[0]));
        assert!(mentions(&requests[1], "I will remember heron."));
        assert!(!mentions(&requests[2], "heron"), "{}", requests[2]);

        // Each step was reported as it happened, in order.
        let kinds: Vec<&str> = steps
            .iter()
            .map(|step| match step {
                codex_gateway::Step::SessionCreated { .. } => "created",
                codex_gateway::Step::Turn { .. } => "turn",
                codex_gateway::Step::Reset { .. } => "reset",
                codex_gateway::Step::Deleted { .. } => "deleted",
                _ => "other",
            })
            .collect();
        assert_eq!(
            kinds,
            ["created", "turn", "turn", "reset", "turn", "deleted"]
        );
        host.close().await.unwrap();
        database.cleanup().await;
    }
}

/// The thread id a turn line names (`turn 1: new thread <id>, …`).
fn thread_of(line: &str) -> ThreadId {
    let id = line
        .split_once("thread ")
        .and_then(|(_, rest)| rest.split(',').next())
        .unwrap_or_else(|| panic!("no thread in {line:?}"));
    ThreadId::new(id)
}

/// The `codex-gateway` binary finds Codex through `TETHER_CODEX_BIN`, asks the provider at
/// `--model-provider-url`, keeps its database under `tether-data/` by default, and prints each
/// step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_gateway_binary_prints_each_step() {
    let Some(binary) = codex_binary() else {
        return;
    };
    let model = model().await;
    let dir = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_codex-gateway"))
        .current_dir(dir.path())
        .env(CODEX_BIN_ENV, &binary)
        .env(codex_gateway::API_KEY_ENV, "dummy-test-key")
        .env("RUST_LOG", "warn")
        .args(["--model-provider-url", &model.base_url()])
        .args(["--session", "agent:main:direct:printed"])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("the gateway finishes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{stdout}");
    assert!(
        lines[0].starts_with("created session agent:main:direct:printed (generation gen-1)"),
        "{stdout}"
    );
    assert!(lines[1].starts_with("turn 1: new thread "), "{stdout}");
    assert!(lines[2].starts_with("turn 2: resumed thread "), "{stdout}");
    assert_eq!(thread_of(lines[2]), thread_of(lines[1]));
    assert!(
        lines[2].contains("You asked me to remember heron."),
        "{stdout}"
    );
    assert!(
        lines[3].starts_with("/new: the session moved from generation gen-1 to gen-2"),
        "{stdout}"
    );
    assert!(
        lines[4].starts_with("turn after /new: new thread "),
        "{stdout}"
    );
    assert_ne!(thread_of(lines[4]), thread_of(lines[1]));
    assert_eq!(
        lines[5],
        "deleted session agent:main:direct:printed: the host no longer has it; 0 Codex thread cleanup(s) still due"
    );
    assert!(dir.path().join("tether-data/codex-gateway.db").is_file());
}
