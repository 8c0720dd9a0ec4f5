//! Orchestration of the settled-turn finalization phase (see `docs/finalization.md`).
//!
//! [`prepare_terminal_with_settled_turn_finalization`] runs once per run, after the ordinary
//! attempt's terminal was prepared and outside any retry loop: the request gate, at most two
//! tries when the answer is empty (each with a fresh cancellation and deadline), the silence
//! policy, cancellation precedence, the persisted host fallback and the rebuilt terminal.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use async_trait::async_trait;
//! use tether_core::*;
//! use tether_finalizer::*;
//!
//! /// A harness whose finalizer answers from the settled transcript.
//! struct Answering;
//! #[async_trait]
//! impl SettledTurnFinalizer for Answering {
//!     async fn finalize_settled_turn(&self, _: FinalizationAttempt, _: &AttemptResult) -> Result<serde_json::Value, Error> {
//!         Ok(serde_json::json!({"assistant": {"role": "assistant", "content": "Saved.", "stop_reason": "stop"}}))
//!     }
//! }
//!
//! /// The host's transcript (never reached here: the finalizer answers).
//! struct Transcript;
//! #[async_trait]
//! impl FallbackTranscript for Transcript {
//!     async fn resolve_target(&self, s: &SessionTarget) -> Result<SessionTarget, Error> { Ok(s.clone()) }
//!     async fn append_fallback(&self, _: FallbackAppend) -> Result<FallbackAppendResult, FallbackAppendError> {
//!         Ok(FallbackAppendResult::Appended(AppendOutcome { appended: true, anchor: TranscriptAnchor(1) }))
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let call = ContentBlock::ToolCall { id: "c1".into(), name: "write".into(), arguments: serde_json::json!({}) };
//! let mut batch = AgentMessage::text(MessageRole::Assistant, "").with_stop_reason("toolUse");
//! batch.content = vec![call];
//! let result = AgentMessage::tool_result("c1", "write", "saved");
//! let settled = AttemptResult {
//!     messages_snapshot: vec![AgentMessage::text(MessageRole::User, "save a note"), batch.clone(), result],
//!     ..AttemptResult::default()
//! };
//! let facts = TurnFacts {
//!     item_lifecycle: ItemLifecycle::new(1, 1, 0),
//!     current_attempt_assistant: Some(batch),
//!     ..TurnFacts::default()
//! };
//! let signal = RunSignal::new();
//! let clock = FakeClock::new(Timestamp::from_millis(0));
//! let input = FinalizationInput {
//!     run_id: RunId::new("run-1")?,
//!     harness_id: HarnessId::new("example")?,
//!     finalizer: Some(&Answering),
//!     settled: Arc::new(settled),
//!     facts: &facts,
//!     session: SessionTarget { agent_id: AgentId::new("main")?, session_key: None, session_id: SessionId::new("s1")? },
//!     fence: WriterFence::default(),
//!     signal: &signal,
//!     try_timeout: Duration::from_secs(60),
//!     clock: &clock,
//!     transcript: &Transcript,
//!     admission: always_current(),
//!     diagnostics: LifecycleOptions::default(),
//!     model_policy: None,
//! };
//! let prepared = prepare_terminal_with_settled_turn_finalization(&input).await.unwrap();
//! assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
//! assert_eq!(prepared.payloads[0].text, "Saved.");
//! # Ok::<(), IdError>(())
//! # }).unwrap();
//! ```

use std::sync::Arc;
use std::time::Duration;

use tether_core::{
    AgentHarness, AgentMessage, AppendOutcome, AssertCurrent, AttemptResult, AttemptTerminal,
    Cancellation, Clock, FinalizationAttempt, HarnessId, ReplayMetadata, RunId, SessionTarget,
    SettledTurnFinalizer, SystemClock, Usage, always_current,
};
use tracing::Instrument;

use crate::error::FinalizerError;
use crate::evidence::ItemLifecycle;
use crate::facts::{
    CarriedFacts, FailureSignal, PayloadKind, ReplyExpectation, ReplyPayload, RunTrigger,
    SourceReplyMode, TerminalToolFailure, TurnFacts, WriterDeliveryAuthority, WriterFence,
};
use crate::fallback::{
    FALLBACK_TEXT, FallbackTranscript, RECOVERY_NOTICE_TEXT, fallback_idempotency_key,
    fallback_identity, fallback_message, persist_fallback,
};
use crate::gate::{FinalizationRequest, resolve_settled_turn_finalization_request};
use crate::lifecycle::{
    DiagnosticEvent, LifecycleOptions, LifecycleOutcome, run_lifecycle_finalization,
};
use crate::model_policy::{ModelPolicyGate, NativeModelPolicySupport};
use crate::policy::TerminalResolutionPolicy;
use crate::result::{
    DiagnosticTrace, FinalAssistant, SILENT_REPLY_TOKEN, SettledTurnFinalizationResult,
};
use crate::signal::RunSignal;

/// At most this many tries when the answer is empty.
pub const MAX_EMPTY_FINALIZATION_TRIES: u8 = 2;
/// The maximum timer value (used when the prepared timeout is zero).
pub const MAX_TIMER: Duration = Duration::from_millis(2_147_483_647);

/// The outcome of the finalization phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizationOutcome {
    /// The gate declined.
    NotAttempted,
    /// A visible answer (or accepted silence).
    Answered,
    /// No answer after the tries; the host fallback was used.
    CompletedEmpty,
    /// Failed (a throw, cancellation, or fallback not allowed).
    Failed,
    /// A cron run with an ok terminal: a silent `NO_REPLY` row, no payload.
    SilentFallback,
}

impl FinalizationOutcome {
    /// The reference name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotAttempted => "not-attempted",
            Self::Answered => "answered",
            Self::CompletedEmpty => "completed-empty",
            Self::Failed => "failed",
            Self::SilentFallback => "silent-fallback",
        }
    }
}

/// The agent metadata of a rebuilt terminal.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentMeta {
    /// The finalizer's response provider.
    pub provider: Option<String>,
    /// The finalizer's response model.
    pub model: Option<String>,
    /// The carried native model selection.
    pub runtime_model_selection: Option<crate::capture::ModelSelection>,
    /// The carried credential source.
    pub credential_source: Option<String>,
    /// Assistant turns of the run, including each finalization try.
    pub assistant_turns: u32,
    /// The recorded error (a fallback after a provider failure keeps it).
    pub error: Option<String>,
}

/// A rebuilt terminal: a new attempt replacing terminal ownership only (see `docs/finalization.md`).
#[derive(Debug, Clone)]
pub struct RebuiltTerminal {
    /// The new attempt (fresh terminal, snapshot plus answer, carried settled facts).
    pub attempt: AttemptResult,
    /// The finalization prompt.
    pub final_prompt_text: String,
    /// The answer as the last and current assistant.
    pub assistant: AgentMessage,
    /// Whether the answer is owned by a transcript row.
    pub assistant_transcript_owned: bool,
    /// The owned row's idempotency key.
    pub assistant_transcript_idempotency_key: Option<String>,
    /// The answer's stream index.
    pub last_assistant_text_message_index: Option<u64>,
    /// The diagnostic trace.
    pub diagnostic_trace: Option<DiagnosticTrace>,
    /// Always 0/0/0.
    pub item_lifecycle: ItemLifecycle,
    /// Always side-effect-free and replay-safe.
    pub current_attempt_replay: ReplayMetadata,
    /// Always 0.
    pub compaction_count: u32,
    /// Always false.
    pub has_tool_media_block_reply: bool,
    /// Settled facts carried over.
    pub carried: CarriedFacts,
    /// Agent metadata.
    pub agent_meta: AgentMeta,
    /// Replay is invalid (kept for a provider-failure fallback).
    pub replay_invalid: bool,
}

/// Inputs of [`prepare_terminal_with_settled_turn_finalization`].
pub struct FinalizationInput<'a> {
    /// The run.
    pub run_id: RunId,
    /// The harness.
    pub harness_id: HarnessId,
    /// Its finalizer, when it has one.
    pub finalizer: Option<&'a dyn SettledTurnFinalizer>,
    /// The settled attempt (passed to every try as the same object, never changed).
    pub settled: Arc<AttemptResult>,
    /// The host's turn facts.
    pub facts: &'a TurnFacts,
    /// The committed session target.
    pub session: SessionTarget,
    /// The committed writer fence.
    pub fence: WriterFence,
    /// The run's signal.
    pub signal: &'a RunSignal,
    /// The prepared per-try timeout (zero: the maximum timer value).
    pub try_timeout: Duration,
    /// The clock.
    pub clock: &'a dyn Clock,
    /// The fallback transcript seam.
    pub transcript: &'a dyn FallbackTranscript,
    /// The run's admitted authority.
    pub admission: AssertCurrent,
    /// Diagnostic options.
    pub diagnostics: LifecycleOptions,
    /// The operator's model policy, when one is configured, and the harness's support for it.
    pub model_policy: Option<ModelPolicyGate<'a>>,
}

impl<'a> FinalizationInput<'a> {
    /// The input for finalizing `settled`, the attempt of run `run_id` that `harness` ran on
    /// `session`, with the host's turn `facts`, the run's `signal` and the host's fallback
    /// `transcript`. The harness supplies its id and its finalizer
    /// ([`AgentHarness::settled_turn_finalizer`]; none: the host falls back).
    ///
    /// Defaults, each with a `with_*` setter: the system clock, no writer fence, no per-try
    /// timeout of its own (zero: only the run's deadline and cancellation bound a try), an
    /// admission that always holds, default diagnostics, no operator model policy.
    pub fn new(
        harness: &'a dyn AgentHarness,
        run_id: RunId,
        session: SessionTarget,
        settled: Arc<AttemptResult>,
        facts: &'a TurnFacts,
        signal: &'a RunSignal,
        transcript: &'a dyn FallbackTranscript,
    ) -> Self {
        static SYSTEM_CLOCK: SystemClock = SystemClock;
        Self {
            run_id,
            harness_id: harness.id().clone(),
            finalizer: harness.settled_turn_finalizer(),
            settled,
            facts,
            session,
            fence: WriterFence::default(),
            signal,
            try_timeout: Duration::ZERO,
            clock: &SYSTEM_CLOCK,
            transcript,
            admission: always_current(),
            diagnostics: LifecycleOptions::default(),
            model_policy: None,
        }
    }

    /// Reads time from `clock` (the store's clock, so deadlines agree with it).
    #[must_use]
    pub fn with_clock(mut self, clock: &'a dyn Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Enforces `fence` on the fallback row.
    #[must_use]
    pub fn with_fence(mut self, fence: WriterFence) -> Self {
        self.fence = fence;
        self
    }

    /// Bounds each try by `timeout` (zero: the maximum timer value).
    #[must_use]
    pub fn with_try_timeout(mut self, timeout: Duration) -> Self {
        self.try_timeout = timeout;
        self
    }

    /// Checks the run's admitted authority with `admission` before each commit edge.
    #[must_use]
    pub fn with_admission(mut self, admission: AssertCurrent) -> Self {
        self.admission = admission;
        self
    }

    /// Diagnostic options.
    #[must_use]
    pub fn with_diagnostics(mut self, diagnostics: LifecycleOptions) -> Self {
        self.diagnostics = diagnostics;
        self
    }

    /// Binds each try's model execution to the operator's model `policy`.
    #[must_use]
    pub fn with_model_policy(mut self, policy: ModelPolicyGate<'a>) -> Self {
        self.model_policy = Some(policy);
        self
    }

    /// Uses `finalizer` instead of the harness's own (`None`: no finalizer, the host falls
    /// back).
    #[must_use]
    pub fn with_finalizer(mut self, finalizer: Option<&'a dyn SettledTurnFinalizer>) -> Self {
        self.finalizer = finalizer;
        self
    }
}

/// Runs one try under the operator model policy: a preflight error for a harness without exact
/// support, otherwise bind, assert before and after the call, and release.
async fn run_try(
    input: &FinalizationInput<'_>,
    attempt: FinalizationAttempt,
    events: &mut Vec<DiagnosticEvent>,
) -> Result<LifecycleOutcome, FinalizerError> {
    let binding = match input.model_policy {
        None => None,
        Some(gate) => {
            if gate.support != NativeModelPolicySupport::Exact {
                return Err(FinalizerError::ModelPolicyPreflight {
                    harness: input.harness_id.to_string(),
                });
            }
            let binding = gate
                .policy
                .bind(input.facts.carried.runtime_model_selection.as_ref())?;
            binding.assert_current()?;
            Some(binding)
        }
    };
    let outcome = run_lifecycle_finalization(
        &input.harness_id,
        input.finalizer,
        attempt,
        &input.settled,
        input.diagnostics,
        events,
    )
    .await;
    if let Some(binding) = &binding {
        binding.assert_current()?;
    }
    drop(binding);
    outcome
}

impl std::fmt::Debug for FinalizationInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FinalizationInput")
            .field("run_id", &self.run_id)
            .field("harness_id", &self.harness_id)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// The prepared terminal after the finalization phase.
#[derive(Debug, Clone)]
pub struct PreparedFinalization {
    /// The outcome.
    pub outcome: FinalizationOutcome,
    /// The attempt that owns the terminal: the *same* settled `Arc` when it was preserved.
    pub attempt: Arc<AttemptResult>,
    /// The rebuilt terminal, when one was built.
    pub rebuilt: Option<RebuiltTerminal>,
    /// The payloads to deliver.
    pub payloads: Vec<ReplyPayload>,
    /// The assistant texts of the terminal.
    pub assistant_texts: Vec<String>,
    /// Finalization tries made.
    pub tries: u8,
    /// Usage of the finalization tries.
    pub finalization_usage: Usage,
    /// The restored failure signal.
    pub failure_signal: Option<FailureSignal>,
    /// The restored terminal tool failure.
    pub terminal_tool_failure: Option<TerminalToolFailure>,
    /// The persisted fallback row, when one was written.
    pub fallback_persisted: Option<AppendOutcome>,
    /// Lifecycle diagnostics.
    pub events: Vec<DiagnosticEvent>,
    /// How the terminal resolver treats the run now.
    pub policy: TerminalResolutionPolicy,
}

impl PreparedFinalization {
    /// The text visible at the source under `mode`.
    pub fn visible_text(&self, mode: SourceReplyMode) -> String {
        self.payloads
            .iter()
            .map(|p| p.visible_text(mode))
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

enum TryEnd {
    Answered(SettledTurnFinalizationResult),
    Silence(SettledTurnFinalizationResult),
    Empty,
    Failed,
    /// The run was cancelled: the original terminal is preserved.
    Cancelled,
}

struct Phase<'a> {
    input: &'a FinalizationInput<'a>,
    request: Option<FinalizationRequest>,
    tries: u8,
    usage: Usage,
    events: Vec<DiagnosticEvent>,
}

impl Phase<'_> {
    fn finish(
        self,
        outcome: FinalizationOutcome,
        attempt: Arc<AttemptResult>,
        rebuilt: Option<RebuiltTerminal>,
        payloads: Vec<ReplyPayload>,
        assistant_texts: Vec<String>,
        fallback_persisted: Option<AppendOutcome>,
    ) -> PreparedFinalization {
        let facts = self.input.facts;
        PreparedFinalization {
            outcome,
            attempt,
            rebuilt,
            payloads,
            assistant_texts,
            tries: self.tries,
            finalization_usage: self.usage,
            failure_signal: facts.failure_signal.clone(),
            terminal_tool_failure: facts.terminal_tool_failure.clone(),
            fallback_persisted,
            events: self.events,
            policy: TerminalResolutionPolicy::for_outcome(outcome, facts.reply_expectation),
        }
    }

    /// Keeps the original attempt and payloads, outcome `failed`.
    fn preserve(self) -> PreparedFinalization {
        let settled = Arc::clone(&self.input.settled);
        let payloads = self.input.facts.payloads.clone();
        let texts = settled.assistant_texts.clone();
        self.finish(
            FinalizationOutcome::Failed,
            settled,
            None,
            payloads,
            texts,
            None,
        )
    }

    fn preserve_cancellation(self) -> PreparedFinalization {
        tracing::warn!(
            run_id = %self.input.run_id,
            reason = self.input.signal.reason().as_deref(),
            "settled-turn finalization was cancelled — preserving cancellation"
        );
        self.preserve()
    }
}

fn silence_accepted(input: &FinalizationInput<'_>, request: &FinalizationRequest) -> bool {
    // Pinned rule (see `docs/finalization.md`): optional reply, silence allowed
    // by the route, no failed tool, and the original terminal was not a timeout.
    input.facts.reply_expectation == ReplyExpectation::Optional
        && input.facts.allow_empty_assistant_reply_as_silent
        && request.batch.failed_tool_names.is_empty()
        && !matches!(input.settled.terminal, AttemptTerminal::TimedOut)
        && input.facts.timeout_kind.is_none()
}

fn add_usage(total: &mut Usage, usage: Option<Usage>) {
    if let Some(u) = usage {
        // Counts come from the model; a huge one saturates instead of wrapping.
        total.input_tokens = total.input_tokens.saturating_add(u.input_tokens);
        total.output_tokens = total.output_tokens.saturating_add(u.output_tokens);
    }
}

fn writer_authority(
    input: &FinalizationInput<'_>,
    idempotency_key: Option<String>,
) -> Option<WriterDeliveryAuthority> {
    let key = input.session.session_key.clone()?;
    input.fence.is_set().then(|| WriterDeliveryAuthority {
        agent_id: input.session.agent_id.clone(),
        session_key: key,
        session_id: input.session.session_id.clone(),
        fence: input.fence.clone(),
        idempotency_key,
    })
}

pub(crate) fn strip_error_fields(meta: &mut serde_json::Map<String, serde_json::Value>) {
    for key in [
        "error_message",
        "error_code",
        "delivery",
        "source_reply_final",
        "timestamp",
    ] {
        meta.remove(key);
    }
}

/// Builds a rebuilt terminal around `result` (see `docs/finalization.md`).
fn rebuild(
    input: &FinalizationInput<'_>,
    prompt: &str,
    result: &SettledTurnFinalizationResult,
    answer_text: String,
    assistant_turns: u32,
    usage: Option<Usage>,
) -> RebuiltTerminal {
    let settled = &input.settled;
    let assistant = result.assistant.to_agent_message();
    let mut snapshot = settled.messages_snapshot.clone();
    snapshot.push(assistant.clone());
    let clean = ReplayMetadata {
        had_potential_side_effects: false,
        replay_safe: true,
    };
    let attempt = AttemptResult {
        terminal: AttemptTerminal::Ok,
        session_id_used: settled.session_id_used.clone(),
        assistant_texts: vec![answer_text],
        messages_snapshot: snapshot,
        completed_assistant: Some(assistant.clone()),
        tool_metas: settled.tool_metas.clone(),
        tool_media_urls: settled.tool_media_urls.clone(),
        host_owned_tool_media_urls: settled.host_owned_tool_media_urls.clone(),
        accepted_session_spawns: settled.accepted_session_spawns.clone(),
        last_tool_error: settled.last_tool_error.clone(),
        settled_turn_finalization_context: None,
        replay: clean,
        delivery: settled.delivery.clone(),
        usage,
        yield_detected: false,
    };
    RebuiltTerminal {
        attempt,
        final_prompt_text: prompt.to_owned(),
        assistant_transcript_owned: result.assistant_transcript_owned == Some(true),
        assistant_transcript_idempotency_key: result.assistant_transcript_idempotency_key.clone(),
        last_assistant_text_message_index: result.assistant_message_index,
        diagnostic_trace: result.diagnostic_trace.clone(),
        item_lifecycle: ItemLifecycle::default(),
        current_attempt_replay: clean,
        compaction_count: 0,
        has_tool_media_block_reply: false,
        carried: input.facts.carried.clone(),
        agent_meta: AgentMeta {
            provider: result.assistant.provider().map(str::to_owned),
            model: result.assistant.model().map(str::to_owned),
            runtime_model_selection: input.facts.carried.runtime_model_selection.clone(),
            credential_source: input.facts.carried.credential_source.clone(),
            assistant_turns,
            error: None,
        },
        assistant,
        replay_invalid: false,
    }
}

/// Runs the settled-turn finalization phase once (see `docs/finalization.md`).
///
/// Returns the possibly replaced attempt, the payloads and the outcome. Only a rebound
/// transcript writer (and a lost admission) is an error; every other failure ends in the host
/// fallback or a preserved original terminal.
pub async fn prepare_terminal_with_settled_turn_finalization(
    input: &FinalizationInput<'_>,
) -> Result<PreparedFinalization, FinalizerError> {
    let span = tracing::info_span!("settled_turn_finalization", run_id = %input.run_id, harness = %input.harness_id);
    finalization_phase(input).instrument(span).await
}

async fn finalization_phase(
    input: &FinalizationInput<'_>,
) -> Result<PreparedFinalization, FinalizerError> {
    let facts = input.facts;
    let settled = &input.settled;
    let mut phase = Phase {
        input,
        request: resolve_settled_turn_finalization_request(
            settled,
            facts,
            input.finalizer.is_some(),
        ),
        tries: 0,
        usage: Usage::default(),
        events: Vec::new(),
    };
    let request = phase.request.take().filter(|_| {
        let first = input.signal.claim_phase();
        if !first {
            tracing::info!(run_id = %input.run_id, "settled-turn finalization already ran for this run — not attempting again");
        }
        first
    });
    let Some(request) = request else {
        let payloads = facts.payloads.clone();
        let texts = settled.assistant_texts.clone();
        return Ok(phase.finish(
            FinalizationOutcome::NotAttempted,
            Arc::clone(settled),
            None,
            payloads,
            texts,
            None,
        ));
    };
    (input.admission)().map_err(|_| FinalizerError::AdmissionInactive)?;
    let fallback_allowed = !facts.silent_expected && settled.last_tool_error.is_none();
    // The normal path: a tool-only turn is what finalization is for.
    tracing::info!(
        run_id = %input.run_id,
        session_id = %input.session.session_id,
        "settled post-tool turn lacked a final answer — running isolated finalization"
    );
    let end = run_tries(&mut phase, &request).await;
    conclude(phase, &request, end, fallback_allowed).await
}

/// Runs the tries: at most [`MAX_EMPTY_FINALIZATION_TRIES`] while the answer is empty, each
/// with a fresh cancellation and deadline; a cancelled run ends them.
async fn run_tries(phase: &mut Phase<'_>, request: &FinalizationRequest) -> TryEnd {
    let input = phase.input;
    let timeout = if input.try_timeout.is_zero() {
        MAX_TIMER
    } else {
        input.try_timeout
    };
    let mut end = TryEnd::Failed;
    for try_number in 1..=MAX_EMPTY_FINALIZATION_TRIES {
        if input.signal.is_cancelled() {
            return TryEnd::Cancelled;
        }
        let try_cancel = Cancellation::new();
        input.signal.install_try(&try_cancel);
        let deadline = input.clock.now() + timeout;
        let attempt = FinalizationAttempt::new(
            input.run_id.clone(),
            request.prompt.clone(),
            input.session.clone(),
            try_cancel,
            Some(deadline),
            try_number,
        );
        phase.tries += 1;
        let outcome = run_try(input, attempt, &mut phase.events).await;
        input.signal.retire_try();
        match outcome {
            Ok(LifecycleOutcome::Answered(result)) => {
                add_usage(&mut phase.usage, result.usage);
                return TryEnd::Answered(result);
            }
            Ok(LifecycleOutcome::Empty { result, silent }) => {
                add_usage(&mut phase.usage, result.usage);
                if silent && silence_accepted(input, request) {
                    return TryEnd::Silence(result);
                }
                end = TryEnd::Empty;
                if try_number < MAX_EMPTY_FINALIZATION_TRIES {
                    tracing::info!(run_id = %input.run_id, "settled-turn finalization completed without a visible answer — retrying 1/1 with tools disabled");
                } else {
                    tracing::warn!(run_id = %input.run_id, attempts = try_number, "settled-turn finalization completed without a visible answer — using terminal fallback reply | preserving original failure");
                }
            }
            Err(err) => {
                if input.signal.is_cancelled() {
                    return TryEnd::Cancelled;
                }
                tracing::warn!(run_id = %input.run_id, error = %err, "settled-turn finalization failed — using terminal fallback reply | preserving original failure");
                return TryEnd::Failed;
            }
        }
    }
    end
}

/// Turns how the tries ended into the prepared terminal: the rebuilt answer, accepted
/// silence, the preserved original (cancelled, or fallback not allowed), or the host fallback.
async fn conclude(
    phase: Phase<'_>,
    request: &FinalizationRequest,
    end: TryEnd,
    fallback_allowed: bool,
) -> Result<PreparedFinalization, FinalizerError> {
    let input = phase.input;
    let assistant_turns = input.facts.assistant_turns + u32::from(phase.tries);
    match end {
        TryEnd::Cancelled => Ok(phase.preserve_cancellation()),
        TryEnd::Answered(result) => {
            let text = result.visible_text();
            let rebuilt = rebuild(
                input,
                &request.prompt,
                &result,
                text.clone(),
                assistant_turns,
                result.usage,
            );
            let mut payload =
                ReplyPayload::new(PayloadKind::FinalizationAnswer, text.clone(), false);
            payload.deliver_despite_source_suppression = true;
            payload.writer_authority =
                writer_authority(input, result.assistant_transcript_idempotency_key.clone());
            let attempt = Arc::new(rebuilt.attempt.clone());
            Ok(phase.finish(
                FinalizationOutcome::Answered,
                attempt,
                Some(rebuilt),
                vec![payload],
                vec![text],
                None,
            ))
        }
        TryEnd::Silence(result) => {
            let rebuilt = rebuild(
                input,
                &request.prompt,
                &result,
                SILENT_REPLY_TOKEN.into(),
                assistant_turns,
                result.usage,
            );
            let attempt = Arc::new(rebuilt.attempt.clone());
            Ok(phase.finish(
                FinalizationOutcome::Answered,
                attempt,
                Some(rebuilt),
                Vec::new(),
                vec![SILENT_REPLY_TOKEN.into()],
                None,
            ))
        }
        TryEnd::Empty | TryEnd::Failed => {
            if input.signal.is_cancelled() {
                return Ok(phase.preserve_cancellation());
            }
            if !fallback_allowed {
                return Ok(phase.preserve());
            }
            let empty = matches!(end, TryEnd::Empty);
            host_fallback(phase, request, empty, assistant_turns).await
        }
    }
}

async fn host_fallback(
    phase: Phase<'_>,
    request: &FinalizationRequest,
    empty: bool,
    assistant_turns: u32,
) -> Result<PreparedFinalization, FinalizerError> {
    let input = phase.input;
    let settled = &input.settled;
    let failed_terminal = matches!(settled.terminal, AttemptTerminal::Failed { .. });
    let cron_silent =
        input.facts.trigger == RunTrigger::Cron && settled.terminal == AttemptTerminal::Ok;
    let provider_copy = input
        .facts
        .provider_failure_copy
        .as_deref()
        .filter(|_| failed_terminal);
    let text = if cron_silent {
        SILENT_REPLY_TOKEN
    } else {
        provider_copy.unwrap_or(FALLBACK_TEXT)
    };
    let identity = fallback_identity(input, request);
    let message = fallback_message(identity, text, input.clock.now().as_millis());
    let persisted = persist_fallback(input, &message).await?;
    if input.signal.is_cancelled() {
        return Ok(phase.preserve_cancellation());
    }
    let key = persisted
        .as_ref()
        .map(|_| fallback_idempotency_key(&input.run_id));
    let mut result =
        SettledTurnFinalizationResult::answer(FinalAssistant::from_agent_message(&message));
    if persisted.is_some() {
        result.assistant_transcript_owned = Some(true);
        result.assistant_transcript_idempotency_key.clone_from(&key);
    }
    result.usage = settled.usage;
    let mut rebuilt = rebuild(
        input,
        &request.prompt,
        &result,
        text.to_owned(),
        assistant_turns,
        settled.usage,
    );
    if cron_silent {
        let attempt = Arc::new(rebuilt.attempt.clone());
        return Ok(phase.finish(
            FinalizationOutcome::SilentFallback,
            attempt,
            Some(rebuilt),
            Vec::new(),
            vec![SILENT_REPLY_TOKEN.into()],
            persisted,
        ));
    }
    if let (Some(_), AttemptTerminal::Failed { message }) = (provider_copy, &settled.terminal) {
        // G4: a provider failure keeps its failed terminal and error; replay stays invalid.
        rebuilt.attempt.terminal = settled.terminal.clone();
        rebuilt.agent_meta.error = Some(message.clone());
        rebuilt.replay_invalid = true;
    }
    let mut payload = ReplyPayload::new(PayloadKind::HostFallback, text, false);
    payload.writer_authority = writer_authority(input, key);
    let mut payloads = vec![payload];
    if recovery_notice_allowed(input) && input.signal.claim_notice() {
        let mut notice =
            ReplyPayload::new(PayloadKind::RecoveryNotice, RECOVERY_NOTICE_TEXT, false);
        notice.deliver_despite_source_suppression = true;
        notice.writer_authority = writer_authority(input, None);
        payloads.push(notice);
    }
    // A provider-failure fallback keeps the run failed (G4); otherwise an empty answer is a
    // closed `completed-empty` fact.
    let outcome = if empty && provider_copy.is_none() {
        FinalizationOutcome::CompletedEmpty
    } else {
        FinalizationOutcome::Failed
    };
    let attempt = Arc::new(rebuilt.attempt.clone());
    Ok(phase.finish(
        outcome,
        attempt,
        Some(rebuilt),
        payloads,
        vec![text.to_owned()],
        persisted,
    ))
}

/// Whether the opt-in `message_tool_only` recovery notice may be delivered (see `docs/finalization.md`).
fn recovery_notice_allowed(input: &FinalizationInput<'_>) -> bool {
    let facts = input.facts;
    facts.message_tool_only_recovery_notice
        && facts.source_reply_mode == SourceReplyMode::MessageToolOnly
        && facts.trigger != RunTrigger::Heartbeat
        && !facts.internal_system_input
        && !facts.ambient_room_event
        && !input.settled.delivery.did_send_via_messaging_tool
        && facts.message_tool_sends.is_empty()
        && !crate::gate::source_reply_delivered(&input.settled, facts)
        && !input.signal.is_cancelled()
}
