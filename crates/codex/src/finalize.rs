//! Settled-turn finalization through a capability-free Codex run.
//!
//! When a Codex turn ends after tool calls with no assistant text, the harness captures the
//! turn's evidence as a bounded, provenance-checked projection ([`CodexEvidence`], set as the
//! attempt's harness-owned finalization context). The host's finalizer
//! ([`BoundedTurnFinalizer`] over [`CodexFinalizerRuntime`]) then answers once through a
//! separate run: a private app-server process, an ephemeral thread with no dynamic tools,
//! approvals `never`, a read-only sandbox and Codex's own tools turned off by configuration,
//! given only the fixed finalization instructions, the frozen projection (injected with
//! `thread/inject_items`) and the host's prompt. It fails closed, before any model request,
//! when the context is missing or the restricted process cannot be started; any tool,
//! command, file change or approval in the run rejects it, and the host falls back.

use std::sync::Arc;
use std::time::Duration;

use crate::native::CodexThreads;
use async_trait::async_trait;
use serde_json::{Value, json};
use tether_core::{
    AgentMessage, AssertCurrent, Cancellation, ContentBlock, Error, HarnessFinalizationData,
    HarnessId, MessageRole, RuntimeErrorKind, SessionKey, SettledTurnFinalizationContext, Usage,
};
use tether_finalizer::ProjectionLimits;
use tether_finalizer::{
    BoundedTurnFinalizer, BoundedTurnOutput, BoundedTurnRequest, BoundedTurnRuntime, Isolation,
    MirrorRequest, MirroredRow, NativeItem, OwnedEvidence, PreparedAuth,
};
use tether_finalizer::{
    CaptureRequest, CapturedTurnContext, ModelSelection, capture_settled_turn_context,
};
use tether_finalizer::{HistoryReadError, ProvenanceInput, prompt_identity};
use tracing::Instrument as _;

use crate::client::{CodexAppServer, CodexClient, ServerEvent};
use crate::host::{HostTranscript, MirrorEntry};
use crate::protocol::{TurnNotification, method};

/// `-c` overrides of the finalization process: Codex's own tools and everything that could
/// reach outside the model are turned off.
pub const RESTRICTED_CONFIG: &[&str] = &[
    "features.apps=false",
    "features.browser_use=false",
    "features.browser_use_external=false",
    "features.computer_use=false",
    "features.code_mode=false",
    "features.code_mode_host=false",
    "features.goals=false",
    "features.hooks=false",
    "features.image_generation=false",
    "features.in_app_browser=false",
    "features.in_app_local_automation=false",
    "features.multi_agent=false",
    "features.plugins=false",
    "features.remote_plugin=false",
    "features.plugin_sharing=false",
    "features.shell_tool=false",
    "features.shell_snapshot=false",
    "features.skill_search=false",
    "features.skill_mcp_dependency_install=false",
    "features.sleep_tool=false",
    "features.tool_suggest=false",
    "features.tool_search_always_defer_mcp_tools=false",
    "features.tool_call_mcp_elicitation=false",
    "features.unified_exec=false",
    "features.view_image=false",
    "features.collaboration_modes=false",
    "features.realtime_conversation=false",
    "features.worktrees=false",
    "features.default_mode_request_user_input=false",
    "features.request_permissions_tool=false",
    // The question tool and the plan tool are switched by `[tools]` keys, not features.
    "tools.experimental_request_user_input.enabled=false",
    "tools.update_plan.enabled=false",
    "web_search=\"disabled\"",
    "mcp_servers={}",
    "approval_policy=\"never\"",
    "sandbox_mode=\"read-only\"",
];

/// How long the finalization run may take.
const FINALIZATION_TIMEOUT: Duration = Duration::from_secs(120);

/// The Codex harness's private finalization evidence: the captured, frozen context of one
/// settled tool-only turn.
#[derive(Debug, Clone)]
pub struct CodexEvidence {
    captured: CapturedTurnContext,
}

impl OwnedEvidence for CodexEvidence {
    fn captured(&self) -> &CapturedTurnContext {
        &self.captured
    }
}

/// Gives each message of a settled turn its provenance identity: the prompt
/// `<turn>:prompt`, tool calls `<turn>:call:<id>`, tool results `<turn>:tool:<id>`, assistant
/// text `<turn>:assistant:<n>`.
fn with_identities(turn_id: &str, messages: &[AgentMessage]) -> Vec<AgentMessage> {
    let mut out = Vec::with_capacity(messages.len());
    let mut prompt_seen = false;
    for (n, message) in messages.iter().enumerate() {
        let mut message = message.clone();
        let call = message.content.iter().find_map(|b| match b {
            ContentBlock::ToolCall { id, .. } => Some(id.clone()),
            _ => None,
        });
        message.id = Some(match (message.role, call, &message.tool_call_id) {
            (MessageRole::User, _, _) if !prompt_seen => {
                prompt_seen = true;
                prompt_identity(turn_id)
            }
            (MessageRole::Assistant, Some(call), _) => format!("{turn_id}:call:{call}"),
            (MessageRole::ToolResult, _, Some(call)) => format!("{turn_id}:tool:{call}"),
            _ => format!("{turn_id}:message:{n}"),
        });
        out.push(message);
    }
    out
}

/// Captures the finalization context of a settled turn that ran tools and produced no
/// assistant text. `None` (logged by the capture) when the evidence cannot be proven or is
/// over the bounds; the host then has no context and may only fall back.
pub(crate) fn capture(
    harness: &HarnessId,
    turn_id: &str,
    messages: &[AgentMessage],
    model: Option<&str>,
    model_provider: Option<&str>,
    owner_alive: AssertCurrent,
) -> Option<SettledTurnFinalizationContext> {
    let settled = with_identities(turn_id, messages);
    let cancellation = Cancellation::new();
    let request = CaptureRequest {
        provenance: ProvenanceInput {
            turn_id,
            settled_messages: &settled,
            mirrored_messages: &settled,
            limits: ProjectionLimits::default(),
        },
        model,
        model_provider,
        auth_profile_id: None,
        cancellation: &cancellation,
        owner_alive,
    };
    let history = settled.clone();
    let captured = capture_settled_turn_context(&request, || {
        Ok::<_, HistoryReadError>(history.into_iter().map(Ok))
    })
    .ok()?;
    Some(SettledTurnFinalizationContext::Harness(
        HarnessFinalizationData::new(harness.clone(), CodexEvidence { captured }),
    ))
}

/// The Codex side of the bounded finalizer: runs the capability-free turn and mirrors the
/// answer into the host transcript.
#[derive(Debug)]
pub struct CodexFinalizerRuntime {
    server: Arc<CodexAppServer>,
    cwd: String,
    transcript: Arc<dyn HostTranscript>,
    /// The one session this runtime mirrors into; `None`: the session of each try.
    session_key: Option<SessionKey>,
    /// Where a harness keeps the items due into each session's bound thread: a mirrored
    /// answer is also recorded there, so the session's thread learns what it answered.
    answers: Option<Arc<CodexThreads>>,
}

impl CodexFinalizerRuntime {
    /// A runtime starting its private processes from `server`'s configuration, with threads in
    /// `cwd`, mirroring the answer into `transcript` under `session_key` (a try for another
    /// session is refused with [`Error::InvalidArgument`]).
    pub fn new(
        server: Arc<CodexAppServer>,
        cwd: impl Into<String>,
        transcript: Arc<dyn HostTranscript>,
        session_key: SessionKey,
    ) -> Self {
        Self {
            server,
            cwd: cwd.into(),
            transcript,
            session_key: Some(session_key),
            answers: None,
        }
    }

    /// [`CodexFinalizerRuntime::new`] for every session: the answer is mirrored under the
    /// session key of each try ([`FinalizationAttempt::session`](tether_core::FinalizationAttempt::session));
    /// a try without one is refused with [`Error::InvalidArgument`]. This is the finalizer a
    /// [`CodexHarness`](crate::CodexHarness) offers through
    /// `AgentHarness::settled_turn_finalizer`.
    pub fn for_any_session(
        server: Arc<CodexAppServer>,
        cwd: impl Into<String>,
        transcript: Arc<dyn HostTranscript>,
    ) -> Self {
        Self {
            server,
            cwd: cwd.into(),
            transcript,
            session_key: None,
            answers: None,
        }
    }

    /// Also records each mirrored answer as due into the session's bound Codex thread (the
    /// harness injects it before the session's next turn).
    pub(crate) fn recording_answers(mut self, threads: Arc<CodexThreads>) -> Self {
        self.answers = Some(threads);
        self
    }

    /// The session the answer of `request` is mirrored into.
    fn mirror_key(&self, request: &MirrorRequest) -> Result<SessionKey, Error> {
        match (&self.session_key, &request.session.session_key) {
            (Some(fixed), Some(theirs)) if fixed != theirs => {
                Err(Error::invalid_argument(format!(
                    "this Codex finalizer mirrors into session `{fixed}`; the try is for `{theirs}`"
                )))
            }
            (Some(key), _) | (None, Some(key)) => Ok(key.clone()),
            (None, None) => Err(Error::invalid_argument(
                "a Codex finalization needs the host session key of the turn to mirror its \
                 answer into",
            )),
        }
    }

    /// The finalizer over this runtime.
    pub fn into_finalizer(self) -> BoundedTurnFinalizer<Self> {
        BoundedTurnFinalizer::new(self)
    }

    async fn run_on(
        &self,
        client: &CodexClient,
        request: &BoundedTurnRequest,
        cancellation: &Cancellation,
    ) -> Result<BoundedTurnOutput, Error> {
        let rpc = |e: crate::error::CodexError| e.into_core_in("codex finalization");
        let started = client
            .request_value(
                method::THREAD_START,
                &json!({
                    "cwd": self.cwd,
                    "model": request.model,
                    "ephemeral": true,
                    "dynamicTools": [],
                    "approvalPolicy": "never",
                    "sandbox": "read-only",
                    "developerInstructions": request.developer_instructions,
                }),
            )
            .await
            .map_err(rpc)?;
        let thread_id = started["thread"]["id"]
            .as_str()
            .ok_or_else(|| {
                crate::error::CodexError::protocol("`thread/start` answered without a thread id")
                    .into_core_in("codex finalization")
            })?
            .to_owned();
        let mut output = BoundedTurnOutput {
            native_provider: started["modelProvider"].as_str().map(str::to_owned),
            native_model: started["model"].as_str().map(str::to_owned),
            ..BoundedTurnOutput::default()
        };
        client
            .request_value(
                method::THREAD_INJECT_ITEMS,
                &json!({ "threadId": thread_id, "items": request.history.to_json() }),
            )
            .await
            .map_err(rpc)?;
        if cancellation.is_cancelled() {
            return Err(Error::revoked("codex finalization was cancelled"));
        }
        let mut events = client.subscribe(&thread_id);
        client
            .request_value(
                method::TURN_START,
                &json!({
                    "threadId": thread_id,
                    "input": [{ "type": "text", "text": request.input }],
                }),
            )
            .await
            .map_err(rpc)?;
        let deadline = tokio::time::Instant::now() + FINALIZATION_TIMEOUT;
        let mut usage = Usage::default();
        // A capability-free run is one model response. Codex answers a call to a tool it does
        // not offer with an error output and samples again, without any item: a second
        // response is the only trace of that attempt, and it rejects the run.
        let mut responses = 0usize;
        loop {
            let event = tokio::time::timeout_at(deadline, events.recv())
                .await
                .map_err(|_| {
                    Error::runtime(
                        RuntimeErrorKind::Unavailable,
                        "codex finalization timed out",
                        None,
                    )
                })?
                .ok_or_else(|| {
                    Error::runtime(
                        RuntimeErrorKind::Unavailable,
                        "codex finalization: the app-server exited",
                        None,
                    )
                })?;
            match event {
                ServerEvent::Notification { method, params } => match method.as_str() {
                    method::ITEM_COMPLETED => {
                        let item = &params["item"];
                        let kind = item["type"].as_str().unwrap_or("unknown");
                        let text = || item["text"].as_str().unwrap_or_default().to_owned();
                        output.items.push(match kind {
                            "agentMessage" => {
                                output.text = text();
                                NativeItem::AgentMessage { text: text() }
                            }
                            "reasoning" => NativeItem::Reasoning,
                            "userMessage" => NativeItem::UserMessage {
                                text: item["content"]
                                    .as_array()
                                    .into_iter()
                                    .flatten()
                                    .filter_map(|c| c["text"].as_str())
                                    .collect::<Vec<_>>()
                                    .join("\n"),
                            },
                            other => NativeItem::Other {
                                item_type: other.to_owned(),
                            },
                        });
                    }
                    method::ITEM_STARTED => {
                        let kind = params["item"]["type"].as_str().unwrap_or("unknown");
                        if !matches!(kind, "agentMessage" | "reasoning" | "userMessage") {
                            output.items.push(NativeItem::Other {
                                item_type: kind.to_owned(),
                            });
                        }
                    }
                    method::TOKEN_USAGE_UPDATED => {
                        responses += 1;
                        if responses == 2 {
                            output.items.push(NativeItem::Other {
                                item_type: "modelResampledAfterToolCall".to_owned(),
                            });
                        }
                        let last = &params["tokenUsage"]["last"];
                        let count = |field: &str| last[field].as_u64().unwrap_or(0);
                        usage.input_tokens =
                            usage.input_tokens.saturating_add(count("inputTokens"));
                        usage.output_tokens =
                            usage.output_tokens.saturating_add(count("outputTokens"));
                    }
                    method::TURN_COMPLETED => {
                        let n: TurnNotification = serde_json::from_value(params).map_err(|e| {
                            crate::error::CodexError::protocol(format!(
                                "unexpected `{method}` parameters: {e}"
                            ))
                            .into_core_in("codex finalization")
                        })?;
                        match n.turn.status.as_str() {
                            "completed" => {}
                            "interrupted" => output.interrupted = true,
                            other => {
                                return Err(Error::runtime(
                                    RuntimeErrorKind::TurnFailed,
                                    format!("codex finalization turn ended `{other}`"),
                                    None,
                                ));
                            }
                        }
                        output.usage = Some(usage);
                        return Ok(output);
                    }
                    _ => tracing::trace!(method, "codex finalization notification"),
                },
                ServerEvent::Request(server_request) => {
                    // Nothing is granted: every tool call, approval and question is refused
                    // and the run is rejected for having asked.
                    output.items.push(NativeItem::Other {
                        item_type: server_request.method.clone(),
                    });
                    client
                        .reply_error(
                            &server_request,
                            -32000,
                            "a finalization run has no tools and grants nothing",
                        )
                        .await
                        .map_err(rpc)?;
                }
            }
        }
    }
}

#[async_trait]
impl BoundedTurnRuntime for CodexFinalizerRuntime {
    type Evidence = CodexEvidence;

    fn label(&self) -> &str {
        "Codex"
    }

    fn scope_prefix(&self) -> &str {
        "codex-settled-finalizer"
    }

    fn isolation(&self) -> Isolation {
        Isolation::PrivateStdio
    }

    /// The app-server reads the provider's key from its configured environment variable.
    async fn resolve_auth(&self, _selection: &ModelSelection) -> Result<PreparedAuth, Error> {
        Ok(PreparedAuth::ApiKey)
    }

    async fn run_bounded_turn(
        &self,
        request: BoundedTurnRequest,
        cancellation: &Cancellation,
    ) -> Result<BoundedTurnOutput, Error> {
        let span = tracing::info_span!("codex.finalization_run", model = %request.model);
        async {
            // Fail closed before anything reaches a model.
            if !request.require_no_external_capabilities {
                return Err(Error::runtime(
                    RuntimeErrorKind::Refused,
                    "codex finalization requires a capability-free run",
                    None,
                ));
            }
            if request.history.current_items().is_empty() {
                return Err(Error::runtime(
                    RuntimeErrorKind::Refused,
                    "codex finalization context is missing",
                    None,
                ));
            }
            let mut config = self.server.config().clone();
            for line in RESTRICTED_CONFIG {
                config = config.with_config(*line);
            }
            let client = CodexClient::start(&config).await.map_err(|e| {
                e.into_core_in("codex finalization: the restricted app-server cannot start")
            })?;
            let result = self.run_on(&client, &request, cancellation).await;
            client.stop();
            client.wait_exit(Duration::from_secs(10)).await;
            result
        }
        .instrument(span)
        .await
    }

    async fn mirror(&self, request: MirrorRequest) -> Result<MirroredRow, Error> {
        let key = self.mirror_key(&request)?;
        let text = request.message.visible_text();
        let entry = MirrorEntry {
            role: MessageRole::Assistant,
            text,
            message: json!({ "role": "assistant", "content": request.message.visible_text() }),
            idempotency_key: format!("{}:assistant", request.idempotency_scope),
        };
        self.transcript.append(&key, entry).await?;
        if let Some(threads) = &self.answers {
            let session = tether_harness_sdk::backend::BindingIdentity::session(
                request.session.agent_id.clone(),
                request.session.session_id.clone(),
                Some(key.clone()),
            );
            let item = json!({
                "type": "message",
                "role": "assistant",
                "content": [{ "type": "output_text", "text": request.message.visible_text() }],
            });
            if let Err(error) = threads.record_injection(session.key(), item).await {
                tracing::warn!(%error, "the finalized answer is in the host transcript but could not be recorded for the session's codex thread");
            }
        }
        Ok(MirroredRow {
            identity: request.identity,
            message: request.message,
        })
    }
}

/// The raw JSON value of a finalization result's visible answer, when it has one.
pub fn answer_text(result: &Value) -> Option<String> {
    let text = result["assistant"]["content"]
        .as_array()?
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<String>();
    (!text.trim().is_empty()).then_some(text)
}
