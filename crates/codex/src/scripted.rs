//! A scripted model server (feature `scripted-model`): a loopback Responses-API endpoint
//! (`POST /v1/responses`) that answers each request with the next step of a script as a
//! server-sent-event stream, and records every request body it received.
//!
//! It lets the real `codex app-server` run turns without a network or a model: the crate's
//! integration tests and `tether demo --codex` drive Codex with it. Point Codex at it with
//! [`CodexConfig::with_responses_provider`](crate::CodexConfig::with_responses_provider) and
//! [`ModelServer::base_url`]. Test and demo tooling, not part of the default API.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One scripted model response.
#[derive(Debug, Clone)]
pub enum Step {
    /// An assistant message.
    Reply(&'static str),
    /// Function calls `(call id, tool, arguments)`.
    Calls(Vec<(&'static str, &'static str, Value)>),
    /// Holds the request open for this long, then replies.
    Stall(Duration, &'static str),
    /// Answers with this HTTP error status.
    Fail(u16),
    /// Holds the request open for this long, then calls functions.
    SlowCalls(Duration, Vec<(&'static str, &'static str, Value)>),
    /// Completes the response with no output item (the turn ends without assistant text).
    Silent,
}

/// The environment variable that makes a missing Codex binary fail a test instead of skipping
/// it (`1`; CI sets it).
pub const REQUIRE_CODEX_ENV: &str = "TETHER_REQUIRE_CODEX";

/// The Codex binary a test drives the real app-server with, as
/// [`locate_codex_binary`](crate::locate_codex_binary) finds it from `root` (the directory
/// holding `.tether-cache/`, normally the workspace root): `TETHER_CODEX_BIN`, else the cache
/// `cargo xtask codex-install` fills. When there is none, `None` and a line on stderr saying
/// the test is skipped, unless [`REQUIRE_CODEX_ENV`] is `1`: then it panics, so a run that
/// must drive Codex fails instead of passing without it.
///
/// # Panics
///
/// With `TETHER_REQUIRE_CODEX=1` and no binary found.
#[allow(clippy::print_stderr)] // test tooling: the test's reader learns why it was skipped
pub fn codex_binary_for_tests(root: &Path) -> Option<PathBuf> {
    match crate::locate_codex_binary(Some(root)) {
        Some(path) => Some(path),
        None if std::env::var(REQUIRE_CODEX_ENV).as_deref() == Ok("1") => panic!(
            "{REQUIRE_CODEX_ENV}=1 but no codex binary: run `cargo xtask codex-install` or set TETHER_CODEX_BIN"
        ),
        None => {
            eprintln!("skipped: no codex binary (run `cargo xtask codex-install`)");
            None
        }
    }
}

/// What a request gets once the script is used up.
pub const EXHAUSTED: &str = "(the script is exhausted)";

#[derive(Debug, Default)]
struct Inner {
    script: Mutex<Vec<Step>>,
    requests: Mutex<Vec<Value>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A running scripted model server (its task runs until the runtime shuts down).
#[derive(Debug, Clone)]
pub struct ModelServer {
    inner: Arc<Inner>,
    addr: SocketAddr,
}

impl ModelServer {
    /// Starts the server on `127.0.0.1:0` with `script`.
    pub async fn start(script: Vec<Step>) -> std::io::Result<Self> {
        let inner = Arc::new(Inner {
            script: Mutex::new(script),
            ..Inner::default()
        });
        let app = Router::new()
            .route("/v1/responses", post(respond))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::warn!(%error, "the scripted model server stopped");
            }
        });
        Ok(Self { inner, addr })
    }

    /// The provider base URL (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request body received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.inner
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many script steps are left.
    pub fn remaining(&self) -> usize {
        self.inner
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The most requests that were ever in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight.load(Ordering::SeqCst)
    }

    /// Waits up to `limit` until `n` requests arrived; `false` when they did not.
    pub async fn wait_for_requests(&self, n: usize, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self.requests().len() >= n {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Whether a request body mentions `needle` anywhere (input items, instructions, tools).
pub fn mentions(request: &Value, needle: &str) -> bool {
    request.to_string().contains(needle)
}

/// Every tool definition anywhere in a model request (top-level `tools`, tool lists carried
/// by input items, namespaces), by name.
pub fn tool_names(request: &Value) -> Vec<String> {
    fn tools(list: &Value, out: &mut Vec<String>) {
        for tool in list.as_array().into_iter().flatten() {
            out.push(
                tool["name"]
                    .as_str()
                    .or_else(|| tool["type"].as_str())
                    .unwrap_or("?")
                    .to_owned(),
            );
            tools(&tool["tools"], out);
        }
    }
    fn walk(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    if key == "tools" && inner.is_array() {
                        tools(inner, out);
                    } else {
                        walk(inner, out);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(request, &mut out);
    out
}

async fn respond(State(inner): State<Arc<Inner>>, body: axum::body::Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let index = {
        let mut requests = inner
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        requests.push(request);
        requests.len()
    };
    let now = inner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    inner.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let step = {
        let mut script = inner.script.lock().unwrap_or_else(PoisonError::into_inner);
        if script.is_empty() {
            Step::Reply(EXHAUSTED)
        } else {
            script.remove(0)
        }
    };
    if let Step::Fail(status) = step {
        inner.in_flight.fetch_sub(1, Ordering::SeqCst);
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (status, "scripted failure").into_response();
    }
    let response_id = format!("resp-{index}");
    let mut events = vec![json!({ "type": "response.created", "response": { "id": response_id } })];
    match step {
        Step::Reply(text) => events.push(message(index, text)),
        Step::Stall(wait, text) => {
            tokio::time::sleep(wait).await;
            events.push(message(index, text));
        }
        Step::Fail(_) | Step::Silent => {}
        Step::Calls(calls) => events.extend(function_calls(calls)),
        Step::SlowCalls(wait, calls) => {
            tokio::time::sleep(wait).await;
            events.extend(function_calls(calls));
        }
    }
    events.push(json!({
        "type": "response.completed",
        "response": {
            "id": response_id,
            "usage": {
                "input_tokens": 11, "input_tokens_details": null,
                "output_tokens": 7, "output_tokens_details": null,
                "total_tokens": 18
            }
        }
    }));
    inner.in_flight.fetch_sub(1, Ordering::SeqCst);
    let mut body = String::new();
    for event in events {
        let kind = event["type"].as_str().unwrap_or_default().to_owned();
        body.push_str(&format!("event: {kind}\ndata: {event}\n\n"));
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream")],
        body,
    )
        .into_response()
}

fn message(index: usize, text: &str) -> Value {
    json!({
        "type": "response.output_item.done",
        "item": {
            "type": "message",
            "role": "assistant",
            "id": format!("msg-{index}"),
            "content": [{ "type": "output_text", "text": text }]
        }
    })
}

fn function_calls(calls: Vec<(&'static str, &'static str, Value)>) -> Vec<Value> {
    calls
        .into_iter()
        .map(|(call_id, name, arguments)| {
            json!({
                "type": "response.output_item.done",
                "item": {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": name,
                    "arguments": arguments.to_string(),
                }
            })
        })
        .collect()
}
