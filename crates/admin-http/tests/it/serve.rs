//! The walking skeleton: `/healthz`, the OpenAPI document and Swagger UI, served in-process.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

use tether_admin_http::{AppState, app};

async fn get(state: AppState, path: &str) -> (StatusCode, String, String) {
    let response = app(state)
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        content_type,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test]
async fn healthz_answers_ok() {
    let (status, content_type, body) = get(AppState::for_tests(), "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert!(content_type.starts_with("application/json"));
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["status"], "ok");
}

#[tokio::test]
async fn openapi_document_is_valid_and_lists_healthz() {
    let (status, _, body) = get(AppState::for_tests(), "/api-docs/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    assert_eq!(doc["info"]["title"], "Tether admin API");
    assert!(doc["paths"]["/healthz"]["get"].is_object());
    assert!(
        doc["paths"]["/readyz"]["get"]["responses"]["503"].is_object(),
        "typed errors appear in the document"
    );
}

#[tokio::test]
async fn swagger_ui_is_served_from_the_binary() {
    let (status, content_type, body) = get(AppState::for_tests(), "/docs/").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(content_type.starts_with("text/html"));
    assert!(body.contains("swagger-ui"), "{body}");
    assert!(
        !body.contains("https://"),
        "no asset may come from the network"
    );
    let (status, _, js) = get(AppState::for_tests(), "/docs/swagger-ui-bundle.js").await;
    assert_eq!(status, StatusCode::OK);
    assert!(js.len() > 100_000, "the vendored bundle is served");
}

#[tokio::test]
async fn serve_opens_and_migrates_a_fresh_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nested/tether.db");
    let url = format!("sqlite://{}", file.display());
    let config =
        tether_admin_http::ServeConfig::new(&url, "127.0.0.1:0", &Default::default()).unwrap();
    let database = tether_admin_http::database::open_database(&config)
        .await
        .unwrap();
    assert!(file.exists(), "database file and its folder are created");
    let state = AppState::new(
        std::sync::Arc::new(database),
        tether_admin_http::auth::Tokens::default(),
    );
    let (status, _, body) = get(state, "/healthz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["backend"], "sqlite");
}

/// Runs the real `tether serve` binary on a temporary folder, reads the printed address,
/// requests the three endpoints over loopback, then stops it with SIGINT (Ctrl-C).
#[test]
fn tether_serve_binary_serves_and_stops_on_ctrl_c() {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .current_dir(dir.path())
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env_remove("TETHER_DATABASE_URL")
        .env_remove("TETHER_BIND")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("an address line").unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_owned();
    assert!(dir.path().join("tether-data/tether.db").exists());

    let fetch = |path: &str| -> String {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    };
    assert!(fetch("/healthz").starts_with("HTTP/1.1 200"));
    assert!(fetch("/api-docs/openapi.json").contains("\"openapi\""));
    assert!(fetch("/docs/").contains("swagger-ui"));

    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "clean shutdown on Ctrl-C: {exit:?}");
}
