//! Settled-turn finalization through a capability-free Codex run, on the real app-server, with
//! the host orchestration of `tether-finalizer` (two tries, then the persisted fallback).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tether_codex::TurnRequest;
use tether_core::{
    AgentId, AppendOutcome, AttemptResult, Cancellation, Error, FakeClock, FinalizationAttempt,
    HarnessId, LeaseConfig, MessageRole, RunId, RuntimeErrorKind, SessionId, SessionTarget,
    SettledTurnFinalizationContext, SettledTurnFinalizer, Timestamp, TranscriptAnchor,
    always_current,
};
use tether_finalizer::{
    FallbackAppend, FallbackAppendError, FallbackAppendResult, FallbackTranscript,
    FinalizationInput, FinalizationOutcome, ItemLifecycle, LifecycleOptions, RunSignal, TurnFacts,
    WriterFence, prepare_terminal_with_settled_turn_finalization,
};

use crate::host::{AGENT, SESSION_ID, World, attempt, attempt_in, codex_binary, session_key};
use crate::model::{ModelServer, Step, mentions, tool_names};

/// Asserts that a finalization request offers the model no tool at all.
fn assert_tool_free(request: &Value) {
    let offered = tool_names(request);
    assert!(
        offered.is_empty(),
        "the finalization run offered tools: {offered:?}"
    );
}

/// A model name outside Codex's model catalog: Codex then attaches none of the tools its
/// catalog adds per model family (code mode, sub-agents), so what the finalization run offers
/// is decided by its configuration alone.
const PLAIN_MODEL: &str = "tether-scripted";

async fn world(script: Vec<Step>) -> Option<(World, ModelServer)> {
    let binary = codex_binary()?;
    let model = ModelServer::start(script).await;
    let mut world = World::new(binary, model.base_url());
    world.model = Some(PLAIN_MODEL);
    Some((world, model))
}

/// The host's fallback transcript: records the fallback rows.
#[derive(Default)]
struct Fallbacks {
    rows: Mutex<Vec<String>>,
}

#[async_trait]
impl FallbackTranscript for Fallbacks {
    async fn resolve_target(&self, s: &SessionTarget) -> Result<SessionTarget, Error> {
        Ok(s.clone())
    }

    async fn append_fallback(
        &self,
        append: FallbackAppend,
    ) -> Result<FallbackAppendResult, FallbackAppendError> {
        self.rows
            .lock()
            .unwrap()
            .push(append.message.visible_text());
        Ok(FallbackAppendResult::Appended(AppendOutcome {
            appended: true,
            anchor: TranscriptAnchor(1),
        }))
    }
}

/// Runs the host's finalization phase over a settled attempt.
async fn finalize(
    key: &tether_core::SessionKey,
    finalizer: &dyn SettledTurnFinalizer,
    settled: AttemptResult,
    fallbacks: &Fallbacks,
) -> tether_finalizer::PreparedFinalization {
    finalize_in(key, SESSION_ID, finalizer, settled, fallbacks).await
}

/// [`finalize`] of the session's generation `generation`.
async fn finalize_in(
    key: &tether_core::SessionKey,
    generation: &str,
    finalizer: &dyn SettledTurnFinalizer,
    settled: AttemptResult,
    fallbacks: &Fallbacks,
) -> tether_finalizer::PreparedFinalization {
    let batch = settled
        .messages_snapshot
        .iter()
        .rev()
        .find(|m| m.role == MessageRole::Assistant)
        .cloned();
    let facts = TurnFacts {
        item_lifecycle: ItemLifecycle::new(1, 1, 0),
        current_attempt_assistant: batch,
        ..TurnFacts::default()
    };
    let signal = RunSignal::new();
    let clock = FakeClock::new(Timestamp::from_millis(0));
    let input = FinalizationInput {
        run_id: RunId::new("run-1").unwrap(),
        harness_id: HarnessId::new("codex").unwrap(),
        finalizer: Some(finalizer),
        settled: Arc::new(settled),
        facts: &facts,
        session: SessionTarget {
            agent_id: AgentId::new(AGENT).unwrap(),
            session_key: Some(key.clone()),
            session_id: SessionId::new(generation).unwrap(),
        },
        fence: WriterFence::default(),
        signal: &signal,
        try_timeout: Duration::from_secs(120),
        clock: &clock,
        transcript: fallbacks,
        admission: always_current(),
        diagnostics: LifecycleOptions::default(),
        model_policy: None,
    };
    prepare_terminal_with_settled_turn_finalization(&input)
        .await
        .unwrap()
}

/// The first finalization try of `run-1` on `key`, for calling a finalizer directly.
fn direct_try(key: &tether_core::SessionKey) -> FinalizationAttempt {
    FinalizationAttempt::new(
        RunId::new("run-1").unwrap(),
        "Give the final answer.".to_owned(),
        SessionTarget {
            agent_id: AgentId::new(AGENT).unwrap(),
            session_key: Some(key.clone()),
            session_id: SessionId::new(SESSION_ID).unwrap(),
        },
        Cancellation::new(),
        None,
        1,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_tool_only_turn_is_finalized_by_a_tool_free_run() {
    let Some((world, model)) = world(vec![
        Step::Calls(vec![("call-1", "lookup", json!({ "q": "heron" }))]),
        Step::Silent,
        Step::Reply("A heron is a wading bird."),
        Step::Reply("Yes, I said it wades."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("finalize");
    host.create_session(&key).await;
    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "what is a heron?")))
        .await
        .unwrap();
    // The turn ran the tool and said nothing: the harness captured its own evidence.
    assert_eq!(outcome.reply(), None);
    assert_eq!(outcome.attempt.tool_metas.len(), 1);
    assert!(matches!(
        outcome.attempt.settled_turn_finalization_context,
        Some(SettledTurnFinalizationContext::Harness(_))
    ));
    // The ordinary turn offered the host's tools to the model.
    assert!(tool_names(&model.requests()[0]).contains(&"lookup".to_owned()));

    let finalizer = host.harness.settled_turn_finalizer(key.clone());
    let fallbacks = Fallbacks::default();
    let prepared = finalize(&key, &finalizer, outcome.attempt.clone(), &fallbacks).await;

    assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
    assert_eq!(prepared.payloads[0].text, "A heron is a wading bird.");
    assert!(fallbacks.rows.lock().unwrap().is_empty());
    // The finalization run saw no tool at all, only the frozen evidence and the host prompt.
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    let run = &requests[2];
    assert_eq!(run["model"], json!(PLAIN_MODEL), "the captured model ran");
    assert_tool_free(run);
    assert!(mentions(run, "what is a heron?"));
    assert!(mentions(run, "definition of heron"));
    // The answer was mirrored into the host transcript once.
    let transcript = host.transcript(&key).await;
    assert_eq!(
        transcript.last().map(|e| e.content.as_str()),
        Some("A heron is a wading bird.")
    );

    // The session's own thread learns the answer before its next turn: the model's next
    // request carries it, as the host transcript does.
    let next = host
        .harness
        .run_turn(TurnRequest::new(attempt(
            &key,
            "run-2",
            "did you say it wades?",
        )))
        .await
        .unwrap();
    assert!(next.resumed_thread);
    assert_eq!(next.thread_id, outcome.thread_id);
    let requests = model.requests();
    assert!(
        mentions(requests.last().unwrap(), "A heron is a wading bird."),
        "the finalized answer never reached the session's thread"
    );
    assert_eq!(
        injections(&host).await,
        0,
        "injected once, then no longer due"
    );
}

/// Rows of the due-items namespace (finalized answers not yet injected into their thread).
async fn injections(host: &crate::host::Host) -> u64 {
    host.rows(tether_codex::INJECTION_NAMESPACE).await
}

/// `/new`, then the new generation's first turn (tool-only, finalized: its answer is due into
/// the new thread), then the reset's notification, late (another process's slow fan-out, or the
/// host sending it again after a restart): the notification keeps what the new generation's
/// turn left due, and the next turn injects the answer into the same thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_a_late_reset_notification_keeps_the_new_threads_due_answer() {
    use tether_core::{ResetParams, ResetReason};

    let Some((world, model)) = world(vec![
        Step::Reply("Before the reset."),
        Step::Calls(vec![("call-1", "lookup", json!({ "q": "heron" }))]),
        Step::Silent,
        Step::Reply("A heron is a wading bird."),
        Step::Reply("Yes, I said it wades."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("late-reset-due");
    host.create_session(&key).await;
    host.harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "hello")))
        .await
        .unwrap();
    // `/new` committed; its notification has not run yet.
    host.reset_unnotified(&key, "gen-2").await;

    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(
            &key,
            "gen-2",
            "run-2",
            "what is a heron?",
        )))
        .await
        .unwrap();
    assert!(outcome.started_thread, "{outcome:?}");
    assert_eq!(outcome.reply(), None);
    let finalizer = host.harness.settled_turn_finalizer(key.clone());
    let prepared = finalize_in(
        &key,
        "gen-2",
        &finalizer,
        outcome.attempt.clone(),
        &Fallbacks::default(),
    )
    .await;
    assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
    assert_eq!(
        injections(&host).await,
        1,
        "the answer is due into the new thread"
    );

    let entry = host.store.session(&key).await.unwrap().unwrap();
    let registry = host.registry();
    let report = tether_harness_sdk::reset::reset_registered_harness_sessions(
        &[&registry],
        &ResetParams::of_entry(&entry, ResetReason::New),
    )
    .await;
    assert_eq!(report.failures().count(), 0);
    assert_eq!(
        injections(&host).await,
        1,
        "the late notification dropped what the new thread had due"
    );

    let next = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(
            &key,
            "gen-2",
            "run-3",
            "did you say it wades?",
        )))
        .await
        .unwrap();
    assert_eq!(next.thread_id, outcome.thread_id);
    assert!(
        mentions(
            model.requests().last().unwrap(),
            "A heron is a wading bird."
        ),
        "the finalized answer never reached the new thread"
    );
    assert_eq!(injections(&host).await, 0);
}

/// A host that finalizes through the registry (`FinalizationInput::new(&harness, …)`, as the
/// README and docs/finalization.md show) gets the Codex harness's own finalizer: the answer comes
/// from the capability-free Codex run and is mirrored into the session the try names, not the
/// host fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_the_registered_harness_offers_its_finalizer() {
    let Some((world, model)) = world(vec![
        Step::Calls(vec![("call-1", "lookup", json!({ "q": "egret" }))]),
        Step::Silent,
        Step::Reply("An egret is a white heron."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("finalize-registered");
    host.create_session(&key).await;
    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(
            &key,
            "run-1",
            "what is an egret?",
        )))
        .await
        .unwrap();
    assert_eq!(outcome.reply(), None);
    let harness: &dyn tether_core::AgentHarness = &host.harness;
    assert!(harness.settled_turn_finalizer().is_some());

    // The gate's facts come from the outcome itself.
    let facts = outcome.turn_facts();
    assert_eq!(facts.item_lifecycle, ItemLifecycle::new(1, 1, 0));
    assert_eq!(facts.tool_call_metas[0].call_id.as_deref(), Some("call-1"));
    let signal = RunSignal::new();
    let fallbacks = Fallbacks::default();
    let session = attempt(&key, "run-1", "").session;
    let input = FinalizationInput::new(
        harness,
        RunId::new("run-1").unwrap(),
        session,
        Arc::new(outcome.attempt.clone()),
        &facts,
        &signal,
        &fallbacks,
    )
    .with_try_timeout(Duration::from_secs(120));
    let prepared = prepare_terminal_with_settled_turn_finalization(&input)
        .await
        .unwrap();

    assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
    assert_eq!(prepared.payloads[0].text, "An egret is a white heron.");
    assert!(fallbacks.rows.lock().unwrap().is_empty());
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert_tool_free(&requests[2]);
    let transcript = host.transcript(&key).await;
    assert_eq!(
        transcript.last().map(|e| e.content.as_str()),
        Some("An egret is a white heron.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_finalization_run_calling_a_tool_is_refused_and_falls_back() {
    let Some((world, model)) = world(vec![
        Step::Calls(vec![("call-1", "lookup", json!({ "q": "heron" }))]),
        Step::Silent,
        // Every finalization try calls a tool (the direct try, then the host's try).
        Step::Calls(vec![("call-2", "lookup", json!({ "q": "again" }))]),
        Step::Reply("(after the refused call)"),
        Step::Calls(vec![("call-3", "lookup", json!({ "q": "again" }))]),
        Step::Reply("(after the refused call)"),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("finalize-refused");
    host.create_session(&key).await;
    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "what is a heron?")))
        .await
        .unwrap();
    let finalizer = host.harness.settled_turn_finalizer(key.clone());

    // One try directly: the run is rejected for its tool activity.
    let direct = finalizer
        .finalize_settled_turn(direct_try(&key), &outcome.attempt)
        .await;
    let error = direct.expect_err("a run that called a tool is refused");
    assert!(
        error.to_string().contains("unexpected native item"),
        "{error}"
    );
    assert!(
        matches!(
            error,
            Error::Runtime {
                kind: RuntimeErrorKind::Refused,
                ..
            }
        ),
        "{error:?}"
    );

    // The host orchestration: its try is refused the same way (a refusal is not retried),
    // then the host fallback is persisted and delivered.
    let fallbacks = Fallbacks::default();
    let prepared = finalize(&key, &finalizer, outcome.attempt.clone(), &fallbacks).await;
    assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
    let rows = fallbacks.rows.lock().unwrap().clone();
    assert_eq!(rows.len(), 1, "the host fallback text was persisted once");
    assert_eq!(prepared.payloads.len(), 1);
    assert_eq!(prepared.payloads[0].text, rows[0]);
    // Nothing the refused runs produced reached the transcript.
    let transcript = host.transcript(&key).await;
    assert!(
        !transcript
            .iter()
            .any(|e| e.content.contains("after the refused call"))
    );
    // Every finalization request was tool-free; the scripted calls were never executed.
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        6,
        "two finalization runs of two model requests each"
    );
    for request in &requests[2..] {
        assert_tool_free(request);
    }
    assert_eq!(
        host.tools.executed().len(),
        1,
        "only the ordinary turn ran a tool"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_unavailable_finalization_context_never_reaches_the_model() {
    let Some((world, model)) = world(vec![]).await else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("finalize-unavailable");
    let finalizer = host.harness.settled_turn_finalizer(key.clone());
    let mut settled = AttemptResult::default();
    let mut call = tether_core::AgentMessage::text(MessageRole::Assistant, "");
    call.content = vec![tether_core::ContentBlock::ToolCall {
        id: "c1".into(),
        name: "lookup".into(),
        arguments: json!({}),
    }];
    call.stop_reason = Some("toolUse".into());
    let mut result = tether_core::AgentMessage::text(MessageRole::ToolResult, "found");
    result.tool_call_id = Some("c1".into());
    result.tool_name = Some("lookup".into());
    settled.messages_snapshot = vec![
        tether_core::AgentMessage::text(MessageRole::User, "look it up"),
        call,
        result,
    ];
    settled.tool_metas.push(tether_core::ToolMeta {
        tool_name: "lookup".into(),
        meta: None,
        is_error: false,
    });
    settled.settled_turn_finalization_context = Some(SettledTurnFinalizationContext::Unavailable);

    // Directly: refused before anything runs, a kind a caller can match on.
    let direct = finalizer
        .finalize_settled_turn(direct_try(&key), &settled)
        .await
        .expect_err("an unavailable context is refused");
    assert!(
        matches!(
            direct,
            Error::Runtime {
                kind: RuntimeErrorKind::Refused,
                ..
            }
        ),
        "{direct:?}"
    );

    let fallbacks = Fallbacks::default();
    let prepared = finalize(&key, &finalizer, settled, &fallbacks).await;

    assert_ne!(prepared.outcome, FinalizationOutcome::Answered);
    assert_eq!(
        fallbacks.rows.lock().unwrap().len(),
        1,
        "the host fallback was used"
    );
    assert!(
        model.requests().is_empty(),
        "nothing reached the model server"
    );
}
