//! The supervised `codex app-server` child: JSON-RPC 2.0 over its stdin and stdout, one JSON
//! message per line.
//!
//! [`CodexClient`] is one running app-server process: it correlates responses with requests
//! (each request has its own timeout), routes notifications and server requests to the turn
//! that subscribed to their thread (bounded queues, so a slow consumer slows the server down
//! instead of growing memory), and forwards the child's stderr into `tracing`. When the child
//! exits, every request in flight fails with [`CodexError::ServerExited`] and every
//! subscription ends. [`CodexAppServer`] supervises one client per host process and starts a
//! new child when the previous one died or hung.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, oneshot, watch};

use crate::error::CodexError;
use crate::protocol::{
    ClientInfo, InitializeCapabilities, InitializeParams, InitializeResponse, method,
};

/// How to start `codex app-server`.
#[derive(Clone)]
pub struct CodexConfig {
    /// The `codex` binary.
    pub binary: PathBuf,
    /// The `CODEX_HOME` the server keeps its threads in. Two host processes that should resume
    /// each other's threads share it.
    pub codex_home: PathBuf,
    /// `-c key=value` configuration overrides, in order.
    pub config_overrides: Vec<String>,
    /// Extra environment variables of the child (values are never logged).
    pub env: Vec<(String, String)>,
    /// How long one request may wait for its response before the server counts as hung.
    pub request_timeout: Duration,
    /// Capacity of each subscription's event queue and of the outgoing queue.
    pub queue_capacity: usize,
    /// The client name sent in `initialize`.
    pub client_name: String,
    /// When set, every message sent or received is also recorded here (protocol tests).
    pub wire_log: Option<WireLog>,
}

impl fmt::Debug for CodexConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env_names: Vec<&str> = self.env.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("CodexConfig")
            .field("binary", &self.binary)
            .field("codex_home", &self.codex_home)
            .field("config_overrides", &self.config_overrides)
            .field("env (names only)", &env_names)
            .field("request_timeout", &self.request_timeout)
            .field("queue_capacity", &self.queue_capacity)
            .finish_non_exhaustive()
    }
}

impl CodexConfig {
    /// The default request timeout: 60 s.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
    /// The default queue capacity: 1024 messages.
    pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;

    /// A configuration for `binary` with threads kept in `codex_home`.
    pub fn new(binary: impl Into<PathBuf>, codex_home: impl Into<PathBuf>) -> Self {
        Self {
            binary: binary.into(),
            codex_home: codex_home.into(),
            config_overrides: Vec::new(),
            env: Vec::new(),
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            queue_capacity: Self::DEFAULT_QUEUE_CAPACITY,
            client_name: "tether".to_owned(),
            wire_log: None,
        }
    }

    /// Adds a `-c key=value` override (TOML value syntax).
    #[must_use]
    pub fn with_config(mut self, key_value: impl Into<String>) -> Self {
        self.config_overrides.push(key_value.into());
        self
    }

    /// Sets an environment variable of the child.
    #[must_use]
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Points the server at a Responses-API model provider at `base_url` (for example
    /// `http://127.0.0.1:PORT/v1`), authenticated with the API key in the environment variable
    /// `env_key` (set it with [`Self::with_env`] or in the host's environment).
    #[must_use]
    pub fn with_responses_provider(self, base_url: &str, env_key: &str) -> Self {
        self.with_config("model_provider=\"tether\"").with_config(format!(
            "model_providers.tether={{name=\"tether\",base_url=\"{base_url}\",wire_api=\"responses\",env_key=\"{env_key}\"}}"
        ))
    }

    /// Sets the request timeout.
    #[must_use]
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Records every message into `log`.
    #[must_use]
    pub fn with_wire_log(mut self, log: WireLog) -> Self {
        self.wire_log = Some(log);
        self
    }
}

/// Which way a recorded message went and what it was.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireKind {
    /// A request this crate sent.
    ClientRequest,
    /// A notification this crate sent.
    ClientNotification,
    /// This crate's answer to a server request (`method` is the request's).
    ClientReply,
    /// The server's response to a request (`method` is the request's).
    ServerResponse,
    /// A notification from the server.
    ServerNotification,
    /// A request from the server.
    ServerRequest,
}

/// One recorded message.
#[derive(Debug, Clone)]
pub struct WireFrame {
    /// What it was.
    pub kind: WireKind,
    /// The method (for responses and replies: the method of the request they answer).
    pub method: String,
    /// The whole JSON-RPC message.
    pub message: Value,
}

/// A shared record of the messages of one or more clients (for protocol tests).
#[derive(Debug, Clone, Default)]
pub struct WireLog(Arc<Mutex<Vec<WireFrame>>>);

impl WireLog {
    fn push(&self, kind: WireKind, method: &str, message: &Value) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(WireFrame {
                kind,
                method: method.to_owned(),
                message: message.clone(),
            });
    }

    /// Everything recorded so far.
    pub fn frames(&self) -> Vec<WireFrame> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A request from the server to this client (a tool call, an approval).
#[derive(Debug, Clone)]
pub struct ServerRequest {
    /// The JSON-RPC id to answer.
    pub id: Value,
    /// The method.
    pub method: String,
    /// The parameters.
    pub params: Value,
}

/// A message the server sent about a subscribed thread.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ServerEvent {
    /// A notification.
    Notification {
        /// The method.
        method: String,
        /// The parameters.
        params: Value,
    },
    /// A request that needs an answer ([`CodexClient::reply`]).
    Request(ServerRequest),
}

type PendingReply = oneshot::Sender<Result<Value, CodexError>>;

struct Shared {
    outgoing: mpsc::Sender<String>,
    pending: Mutex<HashMap<i64, (String, PendingReply)>>,
    routes: Mutex<HashMap<String, mpsc::Sender<ServerEvent>>>,
    exit: watch::Receiver<Option<String>>,
    wire: Option<WireLog>,
}

impl Shared {
    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<i64, (String, PendingReply)>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_routes(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::Sender<ServerEvent>>> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn exit_status(&self) -> Option<String> {
        self.exit.borrow().clone()
    }
}

/// One running `codex app-server` process, initialized and ready for requests.
pub struct CodexClient {
    shared: Arc<Shared>,
    next_id: AtomicI64,
    pid: Option<u32>,
    request_timeout: Duration,
    queue_capacity: usize,
    kill: Mutex<Option<oneshot::Sender<()>>>,
    server_version: String,
}

impl fmt::Debug for CodexClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodexClient")
            .field("pid", &self.pid)
            .field("server_version", &self.server_version)
            .field("exited", &self.shared.exit_status())
            .finish_non_exhaustive()
    }
}

impl Drop for CodexClient {
    fn drop(&mut self) {
        self.stop();
    }
}

impl CodexClient {
    /// Starts `codex app-server` and runs the `initialize` handshake. A binary that cannot be
    /// started fails with [`CodexError::Spawn`]; one that exits or stays silent (for the
    /// request timeout) before it answered `initialize`, with [`CodexError::Handshake`].
    #[tracing::instrument(name = "codex.client.start", skip_all, fields(binary = %config.binary.display()))]
    pub async fn start(config: &CodexConfig) -> Result<Self, CodexError> {
        let mut command = Command::new(&config.binary);
        command.arg("app-server");
        for key_value in &config.config_overrides {
            command.arg("-c").arg(key_value);
        }
        command
            .env("CODEX_HOME", &config.codex_home)
            .envs(config.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|source| CodexError::Spawn {
            binary: config.binary.display().to_string(),
            source,
        })?;
        let pid = child.id();
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| CodexError::protocol("no stdin pipe"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| CodexError::protocol("no stdout pipe"))?;
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(forward_stderr(stderr, pid));
        }
        let capacity = config.queue_capacity.max(1);
        let (outgoing, outgoing_rx) = mpsc::channel(capacity);
        let (exit_tx, exit_rx) = watch::channel(None);
        let (kill_tx, kill_rx) = oneshot::channel();
        tokio::spawn(watch_child(child, kill_rx, exit_tx));
        tokio::spawn(write_lines(stdin, outgoing_rx));
        let shared = Arc::new(Shared {
            outgoing,
            pending: Mutex::new(HashMap::new()),
            routes: Mutex::new(HashMap::new()),
            exit: exit_rx,
            wire: config.wire_log.clone(),
        });
        tokio::spawn(read_lines(shared.clone(), stdout));
        let mut client = Self {
            shared,
            next_id: AtomicI64::new(1),
            pid,
            request_timeout: config.request_timeout,
            queue_capacity: capacity,
            kill: Mutex::new(Some(kill_tx)),
            server_version: String::new(),
        };
        let init: InitializeResponse = client
            .request(
                method::INITIALIZE,
                &InitializeParams {
                    client_info: ClientInfo {
                        name: config.client_name.clone(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                    },
                    capabilities: InitializeCapabilities {
                        experimental_api: true,
                    },
                },
            )
            .await
            .map_err(|error| match error {
                // Gone or silent before its first answer: not an app-server at all (or not
                // one of this protocol), which no retry fixes.
                CodexError::ServerExited { .. } | CodexError::Timeout { .. } => {
                    tracing::warn!(binary = %config.binary.display(), %error, "the codex binary did not answer the app-server handshake");
                    CodexError::Handshake {
                        binary: config.binary.display().to_string(),
                        source: Box::new(error),
                    }
                }
                other => other,
            })?;
        client.notify(method::INITIALIZED, None).await?;
        tracing::info!(pid, user_agent = %init.user_agent, "codex app-server ready");
        client.server_version = init.user_agent;
        Ok(client)
    }

    /// The child's process id.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The server's user agent from the handshake (it carries the version).
    pub fn server_version(&self) -> &str {
        &self.server_version
    }

    /// How the process ended, once it has.
    pub fn exit_status(&self) -> Option<String> {
        self.shared.exit_status()
    }

    /// Whether the process is still running.
    pub fn is_alive(&self) -> bool {
        self.shared.exit_status().is_none()
    }

    /// Kills the process (idempotent).
    pub fn stop(&self) {
        if let Some(kill) = self
            .kill
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = kill.send(());
        }
    }

    /// Waits (at most `limit`) until the process has exited.
    pub async fn wait_exit(&self, limit: Duration) {
        let mut exit = self.shared.exit.clone();
        let _ = tokio::time::timeout(limit, exit.wait_for(Option::is_some)).await;
    }

    /// The error of a request or turn that lost this process: [`CodexError::ServerExited`]
    /// with how it ended (`output closed` when the exit status is not known yet).
    pub(crate) fn lost(&self) -> CodexError {
        CodexError::server_exited(
            self.shared
                .exit_status()
                .unwrap_or_else(|| "output closed".to_owned()),
        )
    }

    async fn send_line(&self, message: &Value) -> Result<(), CodexError> {
        let line = serde_json::to_string(message)
            .map_err(|e| CodexError::protocol(format!("cannot encode a message: {e}")))?;
        self.shared
            .outgoing
            .send(line)
            .await
            .map_err(|_| self.lost())
    }

    /// Sends a request and waits (at most the request timeout) for its result.
    pub async fn request<P, R>(&self, method: &str, params: &P) -> Result<R, CodexError>
    where
        P: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let value = self.request_value(method, params).await?;
        serde_json::from_value(value)
            .map_err(|e| CodexError::protocol(format!("unexpected `{method}` result: {e}")))
    }

    /// [`Self::request`] returning the raw result.
    #[tracing::instrument(name = "codex.request", skip(self, params), fields(pid = self.pid))]
    pub async fn request_value<P>(&self, method: &str, params: &P) -> Result<Value, CodexError>
    where
        P: Serialize + ?Sized,
    {
        if !self.is_alive() {
            return Err(self.lost());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let params = serde_json::to_value(params)
            .map_err(|e| CodexError::protocol(format!("cannot encode `{method}`: {e}")))?;
        let message = json!({ "id": id, "method": method, "params": params });
        let (tx, rx) = oneshot::channel();
        self.shared
            .lock_pending()
            .insert(id, (method.to_owned(), tx));
        if let Some(wire) = &self.shared.wire {
            wire.push(WireKind::ClientRequest, method, &message);
        }
        if let Err(e) = self.send_line(&message).await {
            self.shared.lock_pending().remove(&id);
            return Err(e);
        }
        match tokio::time::timeout(self.request_timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(self.lost()),
            Err(_) => {
                self.shared.lock_pending().remove(&id);
                tracing::warn!(method, timeout = ?self.request_timeout, "codex app-server did not answer");
                Err(CodexError::timeout(method, self.request_timeout))
            }
        }
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), CodexError> {
        let message = match params {
            Some(params) => json!({ "method": method, "params": params }),
            None => json!({ "method": method }),
        };
        if let Some(wire) = &self.shared.wire {
            wire.push(WireKind::ClientNotification, method, &message);
        }
        self.send_line(&message).await
    }

    /// Answers a server request with a result.
    pub async fn reply(&self, request: &ServerRequest, result: Value) -> Result<(), CodexError> {
        let message = json!({ "id": request.id, "result": result });
        if let Some(wire) = &self.shared.wire {
            wire.push(WireKind::ClientReply, &request.method, &message);
        }
        self.send_line(&message).await
    }

    /// Answers a server request with a JSON-RPC error.
    pub async fn reply_error(
        &self,
        request: &ServerRequest,
        code: i64,
        message: &str,
    ) -> Result<(), CodexError> {
        let message = json!({ "id": request.id, "error": { "code": code, "message": message } });
        self.send_line(&message).await
    }

    /// Routes the events of `thread_id` to the returned queue until it is dropped or the
    /// process exits (then the queue ends). A second subscription replaces the first.
    pub fn subscribe(&self, thread_id: &str) -> mpsc::Receiver<ServerEvent> {
        let (tx, rx) = mpsc::channel(self.queue_capacity);
        self.shared.lock_routes().insert(thread_id.to_owned(), tx);
        if !self.is_alive() {
            self.shared.lock_routes().clear();
        }
        rx
    }

    /// Stops routing the events of `thread_id`.
    pub fn unsubscribe(&self, thread_id: &str) {
        self.shared.lock_routes().remove(thread_id);
    }
}

/// Owns the child: waits for it to exit (or kills it on request) and publishes how it ended.
async fn watch_child(
    mut child: Child,
    kill: oneshot::Receiver<()>,
    exit: watch::Sender<Option<String>>,
) {
    let status = tokio::select! {
        status = child.wait() => status,
        _ = kill => {
            let _ = child.start_kill();
            child.wait().await
        }
    };
    let text = match status {
        Ok(status) => status.to_string(),
        Err(e) => format!("wait failed: {e}"),
    };
    tracing::info!(pid = child.id(), status = %text, "codex app-server exited");
    let _ = exit.send(Some(text));
}

async fn write_lines(mut stdin: ChildStdin, mut lines: mpsc::Receiver<String>) {
    while let Some(mut line) = lines.recv().await {
        line.push('\n');
        if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
}

async fn forward_stderr(stderr: tokio::process::ChildStderr, pid: Option<u32>) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(target: "tether_codex::stderr", pid, "{line}");
    }
}

/// The thread a server message belongs to.
fn thread_of(params: &Value) -> Option<&str> {
    params
        .get("threadId")
        .or_else(|| params.get("conversationId"))
        .or_else(|| params.get("thread").and_then(|t| t.get("id")))
        .and_then(Value::as_str)
}

async fn read_lines(shared: Arc<Shared>, stdout: tokio::process::ChildStdout) {
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let message: Value = match serde_json::from_str(&line) {
            Ok(message) => message,
            Err(e) => {
                tracing::warn!(error = %e, "codex app-server wrote a line that is not JSON");
                continue;
            }
        };
        dispatch(&shared, message).await;
    }
    // Output closed: wait briefly for the exit status, then fail everything in flight.
    let mut exit = shared.exit.clone();
    let _ = tokio::time::timeout(Duration::from_secs(5), exit.wait_for(Option::is_some)).await;
    let status = shared
        .exit_status()
        .unwrap_or_else(|| "output closed".to_owned());
    let pending: Vec<_> = shared.lock_pending().drain().collect();
    for (_, (_, reply)) in pending {
        let _ = reply.send(Err(CodexError::server_exited(status.clone())));
    }
    shared.lock_routes().clear();
}

async fn dispatch(shared: &Shared, message: Value) {
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let id = message.get("id").cloned();
    match (method, id) {
        (None, Some(id)) => {
            let Some(id) = id.as_i64() else {
                tracing::warn!(?id, "response with an id this client never sent");
                return;
            };
            let Some((method, reply)) = shared.lock_pending().remove(&id) else {
                tracing::debug!(id, "response to a request that already timed out");
                return;
            };
            if let Some(wire) = &shared.wire {
                wire.push(WireKind::ServerResponse, &method, &message);
            }
            let result = match (message.get("result"), message.get("error")) {
                (Some(result), None) => Ok(result.clone()),
                (_, Some(error)) => Err(CodexError::Rpc {
                    method,
                    code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                    message: error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                }),
                (None, None) => Err(CodexError::protocol(format!(
                    "`{method}` response has neither result nor error"
                ))),
            };
            let _ = reply.send(result);
        }
        (Some(method), id) => {
            let params = message.get("params").cloned().unwrap_or(Value::Null);
            if let Some(wire) = &shared.wire {
                let kind = if id.is_some() {
                    WireKind::ServerRequest
                } else {
                    WireKind::ServerNotification
                };
                wire.push(kind, &method, &message);
            }
            let route = thread_of(&params).and_then(|t| shared.lock_routes().get(t).cloned());
            let event = match id {
                Some(id) => ServerEvent::Request(ServerRequest { id, method, params }),
                None => ServerEvent::Notification { method, params },
            };
            match route {
                // Bounded: a full queue holds the reader (and so the server) back.
                Some(route) => {
                    if let Err(closed) = route.send(event).await {
                        // The turn ended meanwhile: answer as if nobody subscribed.
                        unrouted(shared, closed.0).await;
                    }
                }
                None => unrouted(shared, event).await,
            }
        }
        (None, None) => tracing::warn!("codex app-server message with neither method nor id"),
    }
}

/// A message for no subscribed thread: notifications are logged; requests are refused (an
/// approval nobody asked for is never granted).
async fn unrouted(shared: &Shared, event: ServerEvent) {
    match event {
        ServerEvent::Notification { method, .. } => {
            tracing::trace!(method, "codex notification for no active turn");
        }
        ServerEvent::Request(request) => {
            tracing::warn!(
                method = request.method,
                "codex request for no active turn: refused"
            );
            let message = json!({
                "id": request.id,
                "error": { "code": -32000, "message": "no active turn in this host for the request's thread" }
            });
            if let Ok(line) = serde_json::to_string(&message) {
                let _ = shared.outgoing.send(line).await;
            }
        }
    }
}

/// One supervised app-server per host process: hands out the running client and starts a new
/// one when the previous process died or was discarded as hung.
#[derive(Debug)]
pub struct CodexAppServer {
    config: CodexConfig,
    current: tokio::sync::Mutex<Option<Arc<CodexClient>>>,
    starts: AtomicU64,
}

impl CodexAppServer {
    /// A supervisor for `config` (nothing is started until the first [`Self::client`]).
    pub fn new(config: CodexConfig) -> Self {
        Self {
            config,
            current: tokio::sync::Mutex::new(None),
            starts: AtomicU64::new(0),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CodexConfig {
        &self.config
    }

    /// The running client, starting (or restarting) the process when needed.
    pub async fn client(&self) -> Result<Arc<CodexClient>, CodexError> {
        let mut current = self.current.lock().await;
        if let Some(client) = current.as_ref().filter(|c| c.is_alive()) {
            return Ok(client.clone());
        }
        if let Some(dead) = current.take() {
            tracing::warn!(pid = dead.pid(), status = ?dead.exit_status(), "restarting the codex app-server");
        }
        let client = Arc::new(CodexClient::start(&self.config).await?);
        self.starts.fetch_add(1, Ordering::Relaxed);
        *current = Some(client.clone());
        Ok(client)
    }

    /// Starts a process that is not shared: the caller owns it and stops it.
    pub async fn dedicated(&self) -> Result<CodexClient, CodexError> {
        let client = CodexClient::start(&self.config).await?;
        self.starts.fetch_add(1, Ordering::Relaxed);
        Ok(client)
    }

    /// Stops `client` if it is the current one (a hung server); the next [`Self::client`]
    /// starts a new process.
    pub async fn discard(&self, client: &Arc<CodexClient>) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, client)) {
            current.take();
        }
        client.stop();
    }

    /// How many processes this supervisor has started and initialized, shared or
    /// [dedicated](Self::dedicated). A process that could not be spawned or did not answer
    /// `initialize` (the start failed with its error) is not counted.
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    /// Stops the running process, if any.
    pub async fn shutdown(&self) {
        if let Some(client) = self.current.lock().await.take() {
            client.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_environment_values() {
        let config = CodexConfig::new("/bin/codex", "/tmp/home")
            .with_env("OPENAI_API_KEY", "sk-very-secret")
            .with_responses_provider("http://127.0.0.1:1/v1", "OPENAI_API_KEY");
        let text = format!("{config:?}");
        assert!(text.contains("OPENAI_API_KEY"));
        assert!(!text.contains("sk-very-secret"));
    }

    #[test]
    fn server_messages_are_routed_by_their_thread() {
        assert_eq!(
            thread_of(&json!({ "threadId": "t1", "turnId": "x" })),
            Some("t1")
        );
        assert_eq!(thread_of(&json!({ "conversationId": "t2" })), Some("t2"));
        assert_eq!(thread_of(&json!({ "thread": { "id": "t3" } })), Some("t3"));
        assert_eq!(thread_of(&json!({ "rateLimits": {} })), None);
    }
}
