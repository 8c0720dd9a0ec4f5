//! `tether chat` against the real Codex app-server (pinned, `cargo xtask codex-install`) and the
//! scripted model server of `tether-codex`.

use std::path::Path;
use std::process::Command;

use tether_codex::scripted::{ModelServer, Step};

#[tokio::test(flavor = "multi_thread")]
async fn codex_e2e_tether_chat_runs_a_turn_then_resumes_the_thread() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(codex) = tether_codex::scripted::codex_binary_for_tests(&root) else {
        return;
    };
    let model = ModelServer::start(vec![
        Step::Reply("Scripted answer 1."),
        Step::Reply("Scripted answer 2."),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("chat.db").display());
    let provider = model.base_url();
    let run = |message: &str| {
        Command::new(env!("CARGO_BIN_EXE_tether"))
            .args([
                "chat",
                "--database-url",
                &url,
                "--session",
                "agent:main:direct:me",
            ])
            .args(["--model-provider-url", &provider])
            .arg("--codex-bin")
            .arg(&codex)
            .arg("--codex-home")
            .arg(dir.path().join("codex-home"))
            .arg("--cwd")
            .arg(dir.path())
            .arg(message)
            .env("OPENAI_API_KEY", "dummy-test-key")
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    let first = run("hello");
    let first_out = String::from_utf8_lossy(&first.stdout).to_string();
    assert!(
        first.status.success(),
        "{first_out}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(first_out.contains("(new)"), "{first_out}");
    assert!(first_out.contains("Scripted answer 1."), "{first_out}");
    let thread = first_out
        .lines()
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .to_owned();

    let second = run("again");
    let second_out = String::from_utf8_lossy(&second.stdout).to_string();
    assert!(second.status.success(), "{second_out}");
    assert!(
        second_out.contains(&format!("thread {thread} (resumed)")),
        "{second_out}"
    );
    assert!(second_out.contains("Scripted answer 2."), "{second_out}");

    let store = tether_storage::Store::open(&url).await.unwrap();
    let key = tether_core::SessionKey::new("agent:main:direct:me").unwrap();
    let transcript: Vec<String> = store
        .active_path(&key)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.content)
        .collect();
    assert_eq!(
        transcript,
        ["hello", "Scripted answer 1.", "again", "Scripted answer 2."]
    );
}
