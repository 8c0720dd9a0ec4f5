//! Wrong binaries: a program that is not a Codex app-server is a configuration problem
//! (`Unusable`, never retried), whereas an app-server that answered the handshake and exited
//! later is lost (`Unavailable`: the next operation runs on a fresh process). No Codex needed.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use tether_codex::{CodexClient, CodexConfig, CodexError};
use tether_core::RuntimeErrorKind;

/// Writes an executable shell script `name` into `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Starts `binary` as the app-server with a short request (and so handshake) timeout. A
/// script just written can be "busy" for a moment while another test forks: that start is
/// tried again.
async fn start(binary: &Path, home: &Path) -> Result<CodexClient, CodexError> {
    let config = CodexConfig::new(binary, home).with_request_timeout(Duration::from_millis(500));
    for _ in 0..20 {
        match CodexClient::start(&config).await {
            Err(CodexError::Spawn { source, .. }) if source.raw_os_error() == Some(26) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
    CodexClient::start(&config).await
}

/// The runtime kind the error has through the core contracts, and whether it is retryable.
fn classed(error: CodexError) -> (RuntimeErrorKind, bool) {
    match tether_core::Error::from(error) {
        core @ tether_core::Error::Runtime { .. } => {
            let retryable = core.is_retryable();
            let tether_core::Error::Runtime { kind, .. } = core else {
                unreachable!()
            };
            (kind, retryable)
        }
        other => panic!("not a runtime error: {other:?}"),
    }
}

#[tokio::test]
async fn a_binary_that_exits_before_the_handshake_is_unusable() {
    let home = tempfile::tempdir().unwrap();
    let error = start(Path::new("/bin/true"), home.path())
        .await
        .expect_err("/bin/true is no app-server");
    let text = error.to_string();
    assert!(
        text.contains("the binary at /bin/true did not answer the codex app-server handshake"),
        "{text}"
    );
    assert!(text.contains("is it `codex`"), "{text}");
    match &error {
        CodexError::Handshake { binary, source } => {
            assert_eq!(binary, "/bin/true");
            assert!(
                matches!(**source, CodexError::ServerExited { .. }),
                "{source:?}"
            );
        }
        other => panic!("expected Handshake, got {other:?}"),
    }
    assert!(!error.is_server_lost());
    assert_eq!(classed(error), (RuntimeErrorKind::Unusable, false));
}

#[tokio::test]
async fn a_binary_that_never_answers_the_handshake_is_unusable() {
    let dir = tempfile::tempdir().unwrap();
    let silent = script(dir.path(), "silent", "exec sleep 30");
    let error = start(&silent, dir.path())
        .await
        .expect_err("a silent program is no app-server");
    let text = error.to_string();
    assert!(text.contains(&silent.display().to_string()), "{text}");
    assert!(
        text.contains("did not answer the codex app-server handshake"),
        "{text}"
    );
    match &error {
        CodexError::Handshake { source, .. } => assert!(
            matches!(&**source, CodexError::Timeout { method, .. } if method == "initialize"),
            "{source:?}"
        ),
        other => panic!("expected Handshake, got {other:?}"),
    }
    assert_eq!(classed(error), (RuntimeErrorKind::Unusable, false));
}

#[tokio::test]
async fn an_app_server_that_exits_after_the_handshake_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    // Answers `initialize`, reads `initialized`, then exits.
    let server = script(
        dir.path(),
        "brief-app-server",
        r#"read -r line
printf '%s\n' '{"id":1,"result":{"userAgent":"brief/0","codexHome":"/tmp"}}'
read -r line
exit 3"#,
    );
    let client = start(&server, dir.path())
        .await
        .expect("the handshake is answered");
    let error = client
        .request_value("thread/start", &json!({}))
        .await
        .expect_err("the server exited");
    assert!(
        matches!(error, CodexError::ServerExited { .. }),
        "{error:?}"
    );
    assert!(error.is_server_lost());
    assert_eq!(classed(error), (RuntimeErrorKind::Unavailable, true));
}
