//! A test host: a SQLite store (host sessions, transcripts, bindings), a Codex app-server
//! supervisor, the harness, and host tools with guards.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tether_codex::protocol::DynamicToolSpec;
use tether_codex::{CodexAppServer, CodexConfig, WireLog};
use tether_codex::{CodexHarness, HARNESS_ID, ThreadSettings};
use tether_codex::{HostTranscript, MirrorEntry, ToolCall, ToolExecutor, ToolRun};
use tether_core::HarnessRegistry;
use tether_core::{
    AgentId, AppendOutcome, AttemptParams, HarnessId, LeaseConfig, MessageRole, RunId, SessionId,
    SessionKey, SessionTarget,
};
use tether_host::{ActiveRuns, HostSessions, TransactionHooks};
use tether_storage::{NewHostSession, NewTranscriptEntry, Store, TranscriptEntry, TranscriptRole};

/// The Codex binary, or `None` (the test is skipped) unless `TETHER_REQUIRE_CODEX=1`.
pub(crate) fn codex_binary() -> Option<PathBuf> {
    tether_codex::scripted::codex_binary_for_tests(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
    )
}

/// The files one simulated deployment shares between its host processes.
#[derive(Debug)]
pub(crate) struct World {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) binary: PathBuf,
    pub(crate) model_url: String,
    pub(crate) wire: Option<WireLog>,
    pub(crate) request_timeout: Duration,
    /// The sandbox of new threads (default `read-only`).
    pub(crate) sandbox: Option<&'static str>,
    /// The model of new threads (default: Codex's default).
    pub(crate) model: Option<&'static str>,
}

impl World {
    pub(crate) fn new(binary: PathBuf, model_url: String) -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            binary,
            model_url,
            wire: None,
            request_timeout: Duration::from_secs(30),
            sandbox: None,
            model: None,
        }
    }

    pub(crate) fn database_url(&self) -> String {
        format!("sqlite://{}", self.dir.path().join("host.db").display())
    }

    pub(crate) fn codex_home(&self) -> PathBuf {
        let home = self.dir.path().join("codex-home");
        std::fs::create_dir_all(&home).unwrap();
        home
    }

    pub(crate) fn workdir(&self) -> String {
        let work = self.dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        work.display().to_string()
    }

    /// A host process: its own store connection, its own app-server, its own harness.
    pub(crate) async fn host(&self, holder: &str, lease: LeaseConfig) -> Host {
        self.host_with(holder, lease, false).await
    }

    /// A host process that runs each turn on its own app-server process.
    pub(crate) async fn host_with(
        &self,
        holder: &str,
        lease: LeaseConfig,
        process_per_turn: bool,
    ) -> Host {
        let store = Store::open(&self.database_url()).await.unwrap();
        let mut config = CodexConfig::new(&self.binary, self.codex_home())
            .with_responses_provider(&self.model_url, "TETHER_TEST_MODEL_KEY")
            .with_env("TETHER_TEST_MODEL_KEY", "dummy-test-key")
            // No provider retries: a scripted failure fails the turn at once.
            .with_config("model_providers.tether.request_max_retries=0")
            .with_config("model_providers.tether.stream_max_retries=0")
            .with_request_timeout(self.request_timeout);
        if let Some(wire) = &self.wire {
            config = config.with_wire_log(wire.clone());
        }
        let server = Arc::new(CodexAppServer::new(config));
        let tools = Arc::new(TestTools::default());
        let mut settings = ThreadSettings::new(self.workdir());
        if let Some(sandbox) = self.sandbox {
            settings.sandbox = sandbox.to_owned();
        }
        settings.model = self.model.map(str::to_owned);
        let transcript = StoreTranscript {
            store: store.clone(),
            entries: Arc::new(Mutex::new(Vec::new())),
            refuse: Arc::default(),
            land_next_assistant_first: Arc::default(),
        };
        let harness = CodexHarness::builder(
            server.clone(),
            Arc::new(store.clone()),
            Arc::new(store.clone()),
            Arc::new(transcript.clone()),
        )
        .tools(tools.clone())
        .settings(settings)
        .holder(holder)
        .lease_config(lease)
        .process_per_turn(process_per_turn)
        .build()
        .await
        .unwrap();
        Host {
            store,
            server,
            harness,
            tools,
            transcript,
        }
    }
}

/// Short waits so contention tests finish quickly.
pub(crate) fn quick_lease() -> LeaseConfig {
    LeaseConfig {
        wait_budget: Duration::from_secs(1),
        retry_interval: Duration::from_millis(100),
        ..LeaseConfig::default()
    }
}

#[derive(Debug)]
pub(crate) struct Host {
    pub(crate) store: Store,
    pub(crate) server: Arc<CodexAppServer>,
    pub(crate) harness: CodexHarness,
    pub(crate) tools: Arc<TestTools>,
    pub(crate) transcript: StoreTranscript,
}

pub(crate) const AGENT: &str = "main";
pub(crate) const SESSION_ID: &str = "gen-1";

pub(crate) fn session_key(name: &str) -> SessionKey {
    SessionKey::new(format!("agent:main:direct:{name}")).unwrap()
}

impl Host {
    /// Creates the host session (idempotent).
    pub(crate) async fn create_session(&self, key: &SessionKey) {
        self.store
            .create_session(NewHostSession {
                session_key: key.clone(),
                agent_id: AgentId::new(AGENT).unwrap(),
                session_id: SessionId::new(SESSION_ID).unwrap(),
                agent_harness_id: Some(HarnessId::new(HARNESS_ID).unwrap()),
            })
            .await
            .unwrap();
    }

    /// A registry holding this host's harness.
    pub(crate) fn registry(&self) -> Arc<HarnessRegistry> {
        let registry = Arc::new(HarnessRegistry::new());
        registry.register(Arc::new(self.harness.clone()));
        registry
    }

    /// The host's session operations (deletion, rewind) with this host's harness registered
    /// and `hooks` injecting faults into the host transaction.
    pub(crate) fn sessions(&self, hooks: TransactionHooks) -> HostSessions {
        HostSessions::new(
            self.store.clone(),
            self.registry(),
            Arc::new(ActiveRuns::new()),
        )
        .with_hooks(hooks)
    }

    pub(crate) async fn transcript(&self, key: &SessionKey) -> Vec<TranscriptEntry> {
        self.store.active_path(key).await.unwrap()
    }

    /// The live rows of `namespace` (one of the harness's record namespaces).
    pub(crate) async fn rows(&self, namespace: &str) -> u64 {
        tether_core::BindingStore::count(
            &self.store,
            &tether_core::Namespace::new(namespace).unwrap(),
        )
        .await
        .unwrap()
    }

    /// Moves `key` to generation `next` by a reset committed in the host's transaction and
    /// tells no harness: what a crash between the reset's COMMIT and its notification leaves.
    pub(crate) async fn reset_unnotified(&self, key: &SessionKey, next: &str) {
        tether_storage::testing::commit_unnotified_reset(
            &self.store,
            key,
            &SessionId::new(next).unwrap(),
        )
        .await
        .unwrap()
        .expect("rotated");
    }

    /// The ids of the threads Codex lists, archived or not.
    pub(crate) async fn listed_threads(&self, archived: bool) -> Vec<String> {
        let listed = self
            .server
            .client()
            .await
            .unwrap()
            .request_value("thread/list", &json!({ "archived": archived }))
            .await
            .unwrap();
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["id"].as_str().map(str::to_owned))
            .collect()
    }
}

pub(crate) fn attempt(key: &SessionKey, run: &str, prompt: &str) -> AttemptParams {
    attempt_in(key, SESSION_ID, run, prompt)
}

/// An attempt in the session generation `session_id`.
pub(crate) fn attempt_in(
    key: &SessionKey,
    session_id: &str,
    run: &str,
    prompt: &str,
) -> AttemptParams {
    AttemptParams {
        run_id: RunId::new(run).unwrap(),
        session: SessionTarget {
            agent_id: AgentId::new(AGENT).unwrap(),
            session_key: Some(key.clone()),
            session_id: SessionId::new(session_id).unwrap(),
        },
        prompt: prompt.to_owned(),
        timeout: Some(Duration::from_secs(120)),
        source_reply_delivery_mode: None,
    }
}

/// The host transcript over the SQL store; also keeps every mirrored entry as the harness
/// handed it over (with its structured message).
#[derive(Debug, Clone)]
pub(crate) struct StoreTranscript {
    store: Store,
    entries: Arc<Mutex<Vec<MirrorEntry>>>,
    /// Every append fails while set (a host that refuses the mirror).
    refuse: Arc<std::sync::atomic::AtomicBool>,
    /// While set, the next assistant append lands once on its own first (as an earlier try
    /// of the same mirroring would have left it), then the append runs as asked.
    land_next_assistant_first: Arc<std::sync::atomic::AtomicBool>,
}

impl StoreTranscript {
    pub(crate) fn entries(&self) -> Vec<MirrorEntry> {
        self.entries.lock().unwrap().clone()
    }

    /// Makes every append fail (`true`) or work again.
    pub(crate) fn refuse_appends(&self, refuse: bool) {
        self.refuse
            .store(refuse, std::sync::atomic::Ordering::SeqCst);
    }

    /// Lands the next assistant append once before the harness's own (a repeat of it).
    pub(crate) fn land_next_assistant_first(&self) {
        self.land_next_assistant_first
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait]
impl HostTranscript for StoreTranscript {
    async fn append(
        &self,
        session: &SessionKey,
        entry: MirrorEntry,
    ) -> Result<AppendOutcome, tether_core::Error> {
        let role = match entry.role {
            MessageRole::User => TranscriptRole::User,
            MessageRole::Assistant => TranscriptRole::Assistant,
            MessageRole::ToolResult => TranscriptRole::Tool,
            _ => TranscriptRole::System,
        };
        if self.refuse.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(tether_core::Error::other(
                "the test host refuses the append",
            ));
        }
        self.entries.lock().unwrap().push(entry.clone());
        if entry.role == MessageRole::Assistant
            && self
                .land_next_assistant_first
                .swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            self.store
                .append_transcript(
                    session,
                    NewTranscriptEntry {
                        role,
                        content: entry.text.clone(),
                        idempotency_key: Some(entry.idempotency_key.clone()),
                        metadata: None,
                    },
                )
                .await?;
        }
        self.store
            .append_transcript(
                session,
                NewTranscriptEntry {
                    role,
                    content: entry.text,
                    idempotency_key: Some(entry.idempotency_key),
                    metadata: None,
                },
            )
            .await
    }

    async fn active_idempotency_keys(
        &self,
        session: &SessionKey,
    ) -> Result<Vec<String>, tether_core::Error> {
        Ok(self
            .store
            .active_path(session)
            .await?
            .into_iter()
            .filter_map(|entry| entry.idempotency_key)
            .collect())
    }
}

/// Host tools: `lookup` and `read` succeed (a `lookup` of `missing` fails, declared read-only),
/// `write` starts and fails, `deploy` is refused by a
/// guard before dispatch. Records the calls whose implementation ran.
#[derive(Default)]
pub(crate) struct TestTools {
    pub(crate) executed: Mutex<Vec<(String, Value)>>,
    /// Runs inside the next tool's execution, after its implementation ran (a crash while a
    /// tool runs).
    pub(crate) during_next: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for TestTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestTools")
            .field("executed", &self.executed)
            .finish_non_exhaustive()
    }
}

impl TestTools {
    pub(crate) fn executed(&self) -> Vec<(String, Value)> {
        self.executed.lock().unwrap().clone()
    }

    /// Runs `hook` inside the next tool's execution, after its implementation ran.
    pub(crate) fn during_next(&self, hook: impl FnOnce() + Send + 'static) {
        *self.during_next.lock().unwrap() = Some(Box::new(hook));
    }
}

#[async_trait]
impl ToolExecutor for TestTools {
    fn tools(&self) -> Vec<DynamicToolSpec> {
        let object = |props: Value| json!({ "type": "object", "properties": props });
        vec![
            DynamicToolSpec::function(
                "lookup",
                "Looks a word up.",
                object(json!({ "q": { "type": "string" } })),
            ),
            DynamicToolSpec::function(
                "read",
                "Reads a file.",
                object(json!({ "path": { "type": "string" } })),
            ),
            DynamicToolSpec::function(
                "write",
                "Writes a file.",
                object(json!({ "path": { "type": "string" }, "content": { "type": "string" } })),
            ),
            DynamicToolSpec::function(
                "deploy",
                "Deploys.",
                object(json!({ "target": { "type": "string" } })),
            ),
        ]
    }

    async fn execute(&self, call: ToolCall) -> ToolRun {
        if call.tool == "deploy" {
            return ToolRun::refused(&call, "deploys need an operator");
        }
        call.facts.record_execution(&call.call_id, true);
        self.executed
            .lock()
            .unwrap()
            .push((call.tool.clone(), call.arguments.clone()));
        let hook = self.during_next.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        match call.tool.as_str() {
            // A lookup of a missing word fails, declared read-only (its name alone says
            // nothing): no possible side effect.
            "lookup" if call.arguments["q"] == "missing" => {
                ToolRun::failure("no such word").read_only()
            }
            "lookup" => ToolRun::success(format!(
                "definition of {}",
                call.arguments["q"].as_str().unwrap_or("?")
            )),
            "read" => ToolRun::success(format!(
                "contents of {}",
                call.arguments["path"].as_str().unwrap_or("?")
            )),
            "write" => ToolRun::failure("disk full"),
            other => ToolRun::failure(format!("unknown tool {other}")),
        }
    }
}
