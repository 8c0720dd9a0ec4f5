//! `tether demo --codex`: the real Codex app-server driven by the scripted model server into a
//! temporary SQLite database; and its clear refusal when no Codex binary is found.

use std::path::Path;
use std::process::Command;

use tether_admin_http::AppState;
use tether_admin_http::auth::Tokens;
use tether_admin_http::database::Database;
use tether_codex::CODEX_BIN_ENV;
use tether_core::{RecordCodec as _, SessionKey};
use tether_harness_sdk::backend::ThreadBindingCodec;
use tether_storage::{Store, TranscriptRole};

use crate::support::{call, seg};

fn demo(url: &str, codex: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["demo", "--codex", "--database-url", url])
        .env(CODEX_BIN_ENV, codex)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// The Codex thread ids bound to `key` (its binding rows holding an active thread binding).
async fn bound_threads(store: &Store, key: &str) -> Vec<String> {
    let entry = store
        .session(&SessionKey::new(key).unwrap())
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{key} is missing"));
    store
        .session_bindings(&entry)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|b| ThreadBindingCodec.decode(&b.row.value))
        .filter_map(|r| r.binding().map(|b| b.thread_id.clone()))
        .collect()
}

async fn transcript(store: &Store, key: &str) -> Vec<(TranscriptRole, String)> {
    store
        .active_path(&SessionKey::new(key).unwrap())
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.role, e.content))
        .collect()
}

#[test]
fn demo_codex_without_a_codex_binary_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let url = format!("sqlite://{}", db.display());
    let out = demo(&url, &dir.path().join("no-such-codex"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(CODEX_BIN_ENV), "{stderr}");
    assert!(stderr.contains("cargo xtask codex-install"), "{stderr}");
    assert!(stderr.contains("no-such-codex"), "{stderr}");
    // Nothing was created.
    assert!(!db.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_e2e_tether_demo_codex_populates_a_database() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(codex) = tether_codex::scripted::codex_binary_for_tests(&root) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("demo.db").display());
    let out = demo(&url, &codex);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("5 sessions, 9 Codex turns"), "{stdout}");

    let store = Store::open(&url).await.unwrap();
    // Every live session is bound to a Codex thread.
    let chat = bound_threads(&store, "agent:main:codex-demo-chat").await;
    assert_eq!(chat.len(), 1, "{chat:?}");
    let chat_path = transcript(&store, "agent:main:codex-demo-chat").await;
    assert!(
        chat_path
            .iter()
            .any(|(role, text)| *role == TranscriptRole::Tool
                && text.contains("definition of heron")),
        "{chat_path:?}"
    );
    assert_eq!(
        chat_path.last().map(|(_, t)| t.as_str()),
        Some("A heron is a wading bird.")
    );

    // The tool-only turn got the finalizer's answer.
    let finalized = transcript(&store, "agent:main:codex-demo-finalized").await;
    assert_eq!(
        finalized.last(),
        Some(&(
            TranscriptRole::Assistant,
            "Tides follow the moon.".to_owned()
        )),
        "{finalized:?}"
    );
    assert!(stdout.contains("Tides follow the moon."), "{stdout}");

    // The reset session runs on a new thread.
    let reset = bound_threads(&store, "agent:main:codex-demo-reset").await;
    assert_eq!(reset.len(), 1);
    assert!(
        stdout.contains(&format!("-> {}; context reset", reset[0])),
        "{stdout}"
    );

    // The rewound session runs on the fork; its path lost the rewound turn.
    let rewind = bound_threads(&store, "agent:main:codex-demo-rewind").await;
    assert_eq!(rewind.len(), 1);
    assert!(
        stdout.contains(&format!("-> fork {};", rewind[0])),
        "{stdout}"
    );
    let rewind_path = transcript(&store, "agent:main:codex-demo-rewind").await;
    assert!(
        !rewind_path.iter().any(|(_, t)| t.contains("rewound away")),
        "{rewind_path:?}"
    );
    assert!(
        rewind_path
            .iter()
            .any(|(_, t)| t.contains("Answer after the rewind")),
        "{rewind_path:?}"
    );
    let entry = store
        .session(&SessionKey::new("agent:main:codex-demo-rewind").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(entry.session_id.as_str(), "rewind-g2");

    // The deleted session is gone with its binding.
    assert!(
        store
            .session(&SessionKey::new("agent:main:codex-demo-deleted").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    // The admin API shows each binding's Codex thread id.
    let state = AppState::from_database(Database::from_store(store.clone()), Tokens::default());
    for (name, thread) in [
        ("agent:main:codex-demo-chat", &chat[0]),
        ("agent:main:codex-demo-rewind", &rewind[0]),
    ] {
        let detail = call(
            &state,
            "GET",
            &format!("/v1/sessions/{}", seg(name)),
            None,
            None,
        )
        .await
        .json();
        let shown: Vec<&str> = detail["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| b["native_id"].as_str())
            .collect();
        assert_eq!(shown, [thread.as_str()], "{detail}");
    }
    // Three live sessions, three distinct threads.
    let mut all: Vec<String> = [chat, reset, rewind].concat();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 3);
}
