//! lifecycle, core orchestration, and the absent or
//! unavailable finalizer (G4).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tether_core::{
    AttemptResult, AttemptTerminal, Error, HarnessId, RunId, SettledTurnFinalizationContext,
    SettledTurnFinalizer, ToolErrorSummary, Usage,
};
use tether_finalizer::{
    DiagnosticEvent, DiagnosticPhase, FALLBACK_TEXT, FailureSignal, FallbackAppendError,
    FallbackAppendResult, FinalizationOutcome, FinalizerError, LifecycleOptions, LifecycleOutcome,
    ModelSelection, PayloadKind, ReplyExpectation, ReplyPayload, RunCompletion, RunSignal,
    RunTrigger, SETTLED_TOOL_FINALIZATION_INSTRUCTION, SourceReplyMode, TOOL_FAILURE_INSTRUCTION,
    TerminalToolFailure, TimeoutKind, TurnFacts, run_lifecycle_finalization,
};
use tether_finalizer::{FALLBACK_MODEL, FALLBACK_PROVIDER, MAX_TIMER};

use crate::gate::{read_and_failed_exec, settled_write};
use crate::harness::{AppendBehavior, RecordingTranscript, Run, ScriptedFinalizer, Step, fence};
use crate::support::{answer_json, assistant, tool_calls, tool_result, user};

pub(crate) fn empty_json(text: &str) -> serde_json::Value {
    answer_json(text)
}

pub(crate) fn tool_error_card() -> ReplyPayload {
    ReplyPayload::new(
        PayloadKind::ToolErrorWarning,
        "⚠️ exec failed: SYSTEM_RUN_DENIED",
        true,
    )
}

pub(crate) fn with_failed_exec() -> (AttemptResult, TurnFacts) {
    let (mut settled, mut facts) = read_and_failed_exec();
    settled.last_tool_error = Some(ToolErrorSummary {
        tool_name: "exec".into(),
        error_code: Some("SYSTEM_RUN_DENIED".into()),
        ..ToolErrorSummary::default()
    });
    facts.payloads = vec![tool_error_card()];
    facts.failure_signal = Some(FailureSignal {
        kind: "execution_denied".into(),
        code: Some("SYSTEM_RUN_DENIED".into()),
        fatal_for_cron: true,
    });
    (settled, facts)
}

async fn lifecycle(
    finalizer: Option<&ScriptedFinalizer>,
    settled: &AttemptResult,
    options: LifecycleOptions,
    events: &mut Vec<DiagnosticEvent>,
) -> Result<LifecycleOutcome, FinalizerError> {
    let attempt = tether_core::FinalizationAttempt::new(
        RunId::new("run-1").unwrap(),
        SETTLED_TOOL_FINALIZATION_INSTRUCTION.into(),
        crate::harness::target(true),
        tether_core::Cancellation::new(),
        None,
        1,
    );
    run_lifecycle_finalization(
        &HarnessId::new("codex").unwrap(),
        finalizer.map(|f| f as &dyn SettledTurnFinalizer),
        attempt,
        settled,
        options,
        events,
    )
    .await
}

#[tokio::test]
async fn finalization_s016_explicit_finalizer_gets_only_the_restricted_attempt() {
    let finalizer = ScriptedFinalizer::always(answer_json("final answer"));
    let (settled, _) = settled_write();
    let before = format!("{settled:?}");
    let mut events = Vec::new();
    let outcome = lifecycle(
        Some(&finalizer),
        &settled,
        LifecycleOptions::default(),
        &mut events,
    )
    .await
    .unwrap();
    assert!(
        matches!(&outcome, LifecycleOutcome::Answered(r) if r.visible_text() == "final answer")
    );
    let calls = finalizer.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].prompt, SETTLED_TOOL_FINALIZATION_INSTRUCTION);
    assert_eq!(
        calls[0].settled_ptr,
        std::ptr::from_ref(&settled) as usize,
        "the same settled attempt"
    );
    assert_eq!(
        format!("{settled:?}"),
        before,
        "the caller's attempt is unchanged"
    );
    // "No hostCapabilities and no private fields" is a type-level guarantee here: see the
    // compile-fail doctests on `tether_finalizer::restricted`.
}

#[tokio::test]
async fn finalization_s017_harness_without_a_finalizer_cannot_finalize() {
    let (settled, _) = settled_write();
    let mut events = Vec::new();
    let err = lifecycle(None, &settled, LifecycleOptions::default(), &mut events)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Agent harness codex cannot safely finalize a settled tool turn."
    );
    assert!(events.is_empty());
}

#[tokio::test]
async fn finalization_s018_captured_content_includes_the_final_response() {
    let finalizer = ScriptedFinalizer::always(answer_json("done"));
    let (settled, _) = settled_write();
    let mut events = Vec::new();
    let options = LifecycleOptions {
        capture_content: true,
        agent_run_diagnostics: true,
    };
    let outcome = lifecycle(Some(&finalizer), &settled, options, &mut events)
        .await
        .unwrap();
    assert!(matches!(
        events[0],
        DiagnosticEvent::HarnessRunStarted {
            operation: "settled-tool-finalization",
            try_number: 1,
            ..
        }
    ));
    assert!(matches!(&events[1], DiagnosticEvent::RunStarted { run_id } if run_id == "run-1"));
    assert_eq!(events[2], DiagnosticEvent::Phase(DiagnosticPhase::Send));
    assert_eq!(events[3], DiagnosticEvent::Phase(DiagnosticPhase::Resolve));
    assert_eq!(
        events[4],
        DiagnosticEvent::HarnessRunCompleted {
            outcome: RunCompletion::Completed,
            item_lifecycle: tether_finalizer::ItemLifecycle::default(),
            final_response: Some("done".into())
        }
    );
    // The lifecycle fills the trace when the harness gave none.
    let trace = outcome.result().diagnostic_trace.as_ref().unwrap();
    assert_eq!(trace.0["operation"], "settled-tool-finalization");
}

#[tokio::test]
async fn finalization_s019_empty_content_is_a_completed_empty_outcome() {
    let finalizer = ScriptedFinalizer::always(
        json!({"assistant": {"role": "assistant", "content": [], "stop_reason": "stop"}}),
    );
    let (settled, _) = settled_write();
    let mut events = Vec::new();
    let outcome = lifecycle(
        Some(&finalizer),
        &settled,
        LifecycleOptions::default(),
        &mut events,
    )
    .await
    .unwrap();
    assert!(matches!(
        outcome,
        LifecycleOutcome::Empty { silent: false, .. }
    ));
    assert!(matches!(
        events.last(),
        Some(DiagnosticEvent::HarnessRunCompleted {
            outcome: RunCompletion::Completed,
            ..
        })
    ));
    // A throw records the failure and rethrows.
    let failing = ScriptedFinalizer::failing("boom");
    let mut events = Vec::new();
    assert!(
        lifecycle(
            Some(&failing),
            &settled,
            LifecycleOptions::default(),
            &mut events
        )
        .await
        .is_err()
    );
    assert!(matches!(
        &events[2],
        DiagnosticEvent::Phase(DiagnosticPhase::Resolve)
    ));
    assert!(matches!(&events[3], DiagnosticEvent::RunError { message } if message == "boom"));
    assert!(matches!(
        events[4],
        DiagnosticEvent::HarnessRunCompleted {
            outcome: RunCompletion::Error,
            ..
        }
    ));
}

#[tokio::test]
async fn finalization_s025_the_host_prompt_is_never_persisted() {
    // Translation: the orchestration persists only the fallback assistant row; the host prompt
    // travels only inside the restricted attempt.
    let finalizer = ScriptedFinalizer::always(empty_json(" "));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert_eq!(prepared.outcome, FinalizationOutcome::CompletedEmpty);
    let appends = transcript.appends();
    assert_eq!(appends.len(), 1);
    assert!(!format!("{:?}", appends[0].message).contains("text-only pass"));
    assert_eq!(appends[0].message.visible_text(), FALLBACK_TEXT);
}

#[tokio::test]
async fn finalization_s042_progress_receipt_then_an_answer() {
    let finalizer = ScriptedFinalizer::always(answer_json("The note was saved."));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (mut settled, mut facts) = settled_write();
    settled.delivery.did_send_via_messaging_tool = true;
    settled.delivery.messaging_tool_sent_texts = vec!["Saving…".into()];
    facts.message_tool_sends = vec![tether_finalizer::MessageToolSend {
        source_reply_final: Some(false),
    }];
    let run = Run::new(
        settled.clone(),
        facts,
        Some(&finalizer),
        &transcript,
        &signal,
    );
    let prepared = run.prepare().await.unwrap();
    assert_eq!(finalizer.call_count(), 1);
    assert!(
        finalizer.calls.lock().unwrap()[0]
            .prompt
            .contains("text-only pass")
    );
    assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
    let rebuilt = prepared.rebuilt.as_ref().unwrap();
    assert_eq!(
        rebuilt.attempt.delivery, settled.delivery,
        "delivery state preserved"
    );
    assert_eq!(prepared.payloads.len(), 1);
    assert!(!prepared.payloads[0].transcript_mirror);
    assert!(prepared.payloads[0].deliver_despite_source_suppression);
    assert_eq!(prepared.payloads[0].text, "The note was saved.");
    assert!(transcript.appends().is_empty());
}

#[tokio::test]
async fn finalization_s043_tool_media_block_reply_is_not_finalized() {
    for (media, expected) in [
        (true, FinalizationOutcome::NotAttempted),
        (false, FinalizationOutcome::Answered),
    ] {
        let finalizer = ScriptedFinalizer::always(answer_json("Here is the audio."));
        let transcript = RecordingTranscript::new(AppendBehavior::Append);
        let signal = RunSignal::new();
        let (settled, mut facts) = settled_write();
        facts.has_tool_media_block_reply = media;
        let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
            .prepare()
            .await
            .unwrap();
        assert_eq!(prepared.outcome, expected);
        assert_eq!(finalizer.call_count(), usize::from(!media));
        if media {
            assert!(prepared.payloads.is_empty());
        }
    }
}

pub(crate) fn truncated_after_commentary() -> (AttemptResult, TurnFacts) {
    let batch = tool_calls(Some("Saving the note now."), &[("c1", "write")]);
    let mut failed_assistant = assistant("", "error");
    failed_assistant.meta.insert(
        "error_message".into(),
        "Stream ended without finish_reason".into(),
    );
    let messages = vec![
        user("save a note"),
        batch.clone(),
        tool_result("c1", "write", "saved", false),
    ];
    let settled = AttemptResult {
        terminal: AttemptTerminal::Failed {
            message: "Stream ended without finish_reason".into(),
        },
        settled_turn_finalization_context: Some(SettledTurnFinalizationContext::Transcript(
            messages.clone().into(),
        )),
        messages_snapshot: messages,
        completed_assistant: Some(failed_assistant),
        ..AttemptResult::default()
    };
    let facts = TurnFacts {
        item_lifecycle: tether_finalizer::ItemLifecycle::new(1, 1, 0),
        tool_call_metas: vec![tether_finalizer::ToolCallMeta {
            call_id: Some("c1".into()),
            tool_name: "write".into(),
            ..Default::default()
        }],
        ..TurnFacts::default()
    };
    (settled, facts)
}

#[tokio::test]
async fn finalization_s044_truncated_completion_answered_or_empty() {
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = truncated_after_commentary();
    let answered = ScriptedFinalizer::always(answer_json("Saved your note."));
    let run = Run::new(
        settled.clone(),
        facts.clone(),
        Some(&answered),
        &transcript,
        &signal,
    );
    let prepared = run.prepare().await.unwrap();
    assert_eq!(answered.call_count(), 1);
    assert_eq!(prepared.assistant_texts, ["Saved your note."]);
    let empty = ScriptedFinalizer::always(empty_json(""));
    let signal = RunSignal::new();
    let run = Run::new(settled, facts, Some(&empty), &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert_eq!(empty.call_count(), 2);
    assert_eq!(prepared.outcome, FinalizationOutcome::CompletedEmpty);
    assert_eq!(prepared.payloads[0].text, FALLBACK_TEXT);
    assert!(!prepared.payloads[0].is_error);
    let ptrs: Vec<usize> = empty
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.settled_ptr)
        .collect();
    assert_eq!(ptrs[0], ptrs[1], "every call gets the same settled attempt");
    assert_eq!(ptrs[0], Arc::as_ptr(&run.settled) as usize);
}

#[tokio::test]
async fn finalization_s045_honest_answer_after_a_denied_exec_keeps_the_failure_signal() {
    let finalizer = ScriptedFinalizer::always(answer_json("The command was denied; nothing ran."));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, mut facts) = with_failed_exec();
    facts.carried.mcp_view = Some(json!({"servers": ["fs"]}));
    facts.carried.successful_cron_adds = 2;
    facts.carried.successful_nested_tool_names = vec!["read".into()];
    facts.carried.code_mode_engaged = true;
    let prepared = Run::new(
        settled.clone(),
        facts,
        Some(&finalizer),
        &transcript,
        &signal,
    )
    .prepare()
    .await
    .unwrap();
    assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
    assert!(
        finalizer.calls.lock().unwrap()[0]
            .prompt
            .ends_with(TOOL_FAILURE_INSTRUCTION)
    );
    assert!(prepared.payloads[0].deliver_despite_source_suppression);
    let rebuilt = prepared.rebuilt.unwrap();
    assert_eq!(rebuilt.carried.mcp_view, Some(json!({"servers": ["fs"]})));
    assert_eq!(rebuilt.carried.successful_cron_adds, 2);
    assert_eq!(rebuilt.carried.successful_nested_tool_names, ["read"]);
    assert!(rebuilt.carried.code_mode_engaged);
    assert_eq!(
        rebuilt.item_lifecycle,
        tether_finalizer::ItemLifecycle::default()
    );
    assert!(
        rebuilt.attempt.replay.replay_safe && !rebuilt.attempt.replay.had_potential_side_effects
    );
    assert_eq!(rebuilt.agent_meta.assistant_turns, 2);
    let signal = prepared.failure_signal.unwrap();
    assert_eq!(signal.kind, "execution_denied");
    assert!(signal.fatal_for_cron);
}

#[tokio::test]
async fn finalization_s046_explicit_no_reply_after_a_failure_is_not_finalized() {
    let finalizer = ScriptedFinalizer::always(answer_json("unused"));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (mut settled, facts) = with_failed_exec();
    settled.completed_assistant = Some(assistant("NO_REPLY", "stop"));
    settled.assistant_texts = vec!["NO_REPLY".into()];
    let mut facts = facts;
    facts.current_attempt_assistant = None;
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert_eq!(prepared.outcome, FinalizationOutcome::NotAttempted);
    assert_eq!(finalizer.call_count(), 0);
    assert_eq!(prepared.assistant_texts, ["NO_REPLY"]);
    assert!(prepared.payloads[0].is_error && prepared.payloads[0].text.contains("failed"));
}

#[tokio::test]
async fn finalization_s047_failed_command_keeps_the_original_attempt_without_fallback() {
    let finalizers = [
        ScriptedFinalizer::always(empty_json(" ")),
        ScriptedFinalizer::failing("model error"),
    ];
    for finalizer in &finalizers {
        let transcript = RecordingTranscript::new(AppendBehavior::Append);
        let signal = RunSignal::new();
        let (settled, facts) = with_failed_exec();
        let run = Run::new(settled, facts, Some(finalizer), &transcript, &signal);
        let prepared = run.prepare().await.unwrap();
        assert!(finalizer.call_count() >= 1);
        assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
        assert!(
            Arc::ptr_eq(&prepared.attempt, &run.settled),
            "the same attempt object"
        );
        assert!(prepared.payloads[0].is_error);
        assert!(transcript.appends().is_empty());
    }
}

#[tokio::test]
async fn finalization_s048_native_selection_and_context_are_carried() {
    let mut answer = answer_json("Done.");
    answer["assistant"]["provider"] = "host-finalizer".into();
    let finalizer = ScriptedFinalizer::always(answer);
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, mut facts) = settled_write();
    let selection = ModelSelection {
        model: "gpt-5-codex".into(),
        model_provider: Some("openai".into()),
        auth_profile_id: None,
    };
    facts.carried.runtime_model_selection = Some(selection.clone());
    facts.carried.context_tokens = Some(1_000_000);
    facts.carried.credential_source = Some("profile".into());
    facts.carried.model_attempt = Some(1);
    let rebuilt = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap()
        .rebuilt
        .unwrap();
    assert_eq!(
        rebuilt.carried.runtime_model_selection,
        Some(selection.clone())
    );
    assert_eq!(rebuilt.carried.context_tokens, Some(1_000_000));
    assert_eq!(rebuilt.carried.model_attempt, Some(1));
    assert_eq!(
        rebuilt.agent_meta.provider.as_deref(),
        Some("host-finalizer")
    );
    assert_eq!(rebuilt.agent_meta.model.as_deref(), Some("fin-model"));
    assert_eq!(rebuilt.agent_meta.runtime_model_selection, Some(selection));
    assert_eq!(
        rebuilt.agent_meta.credential_source.as_deref(),
        Some("profile")
    );
}

#[tokio::test]
async fn finalization_s049_fresh_controls_per_try_and_no_abort_leaks() {
    let first_cancel = Arc::new(std::sync::Mutex::new(None::<tether_core::Cancellation>));
    let stash = first_cancel.clone();
    let late = first_cancel.clone();
    let steps: Vec<Step> = vec![
        Box::new(move |attempt| {
            // The first try fires its own timeout.
            attempt.cancellation().cancel();
            *stash.lock().unwrap() = Some(attempt.cancellation().clone());
            Ok(answer_json(""))
        }),
        Box::new(move |attempt| {
            // A late callback of the retired first try fires during the second.
            late.lock().unwrap().as_ref().unwrap().cancel();
            assert!(
                !attempt.cancellation().is_cancelled(),
                "the new try is unaffected"
            );
            Ok(answer_json("Recovered."))
        }),
    ];
    let finalizer = ScriptedFinalizer::new(steps);
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    let calls = finalizer.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    assert_eq!((calls[0].try_number, calls[1].try_number), (1, 2));
    assert!(!calls[1].cancellation.is_cancelled());
    assert!(!signal.is_cancelled(), "the outer signal is not aborted");
    assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
    assert_eq!(prepared.rebuilt.unwrap().agent_meta.assistant_turns, 3);
}

#[tokio::test]
async fn finalization_s050_try_deadline_uses_the_prepared_timeout_or_the_max_timer() {
    for (timeout, expected) in [
        (Duration::from_secs(60), Duration::from_secs(60)),
        (Duration::ZERO, MAX_TIMER),
    ] {
        let finalizer = ScriptedFinalizer::always(answer_json("ok"));
        let transcript = RecordingTranscript::new(AppendBehavior::Append);
        let signal = RunSignal::new();
        let (settled, facts) = settled_write();
        let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
        run.try_timeout = timeout;
        run.prepare().await.unwrap();
        let calls = finalizer.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 1, "controls created once");
        let now = tether_core::Timestamp::from_millis(1_000);
        assert_eq!(calls[0].deadline, Some(now + expected));
    }
}

struct SilenceRow {
    text: &'static str,
    reply: ReplyExpectation,
    allow_silent: bool,
    failed_tool: bool,
    calls: usize,
    outcome: FinalizationOutcome,
}

#[tokio::test]
async fn finalization_s051_heartbeat_silence_policy_rows() {
    use FinalizationOutcome::{Answered, CompletedEmpty, Failed};
    use ReplyExpectation::{Optional, Required};
    let rows = [
        SilenceRow {
            text: "NO_REPLY",
            reply: Optional,
            allow_silent: true,
            failed_tool: false,
            calls: 1,
            outcome: Answered,
        },
        SilenceRow {
            text: "NO_REPLY",
            reply: Required,
            allow_silent: true,
            failed_tool: false,
            calls: 2,
            outcome: CompletedEmpty,
        },
        SilenceRow {
            text: "NO_REPLY",
            reply: Optional,
            allow_silent: false,
            failed_tool: false,
            calls: 2,
            outcome: CompletedEmpty,
        },
        SilenceRow {
            text: "",
            reply: Optional,
            allow_silent: true,
            failed_tool: false,
            calls: 2,
            outcome: CompletedEmpty,
        },
        SilenceRow {
            text: "NO_REPLY",
            reply: Optional,
            allow_silent: true,
            failed_tool: true,
            calls: 2,
            outcome: Failed,
        },
    ];
    for row in rows {
        let finalizer = ScriptedFinalizer::always(empty_json(row.text));
        let transcript = RecordingTranscript::new(AppendBehavior::Append);
        let signal = RunSignal::new();
        let (settled, mut facts) = if row.failed_tool {
            with_failed_exec()
        } else {
            settled_write()
        };
        facts.trigger = RunTrigger::Heartbeat;
        facts.reply_expectation = row.reply;
        facts.allow_empty_assistant_reply_as_silent = row.allow_silent;
        let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
        let prepared = run.prepare().await.unwrap();
        assert_eq!(finalizer.call_count(), row.calls, "{:?}", row.text);
        assert_eq!(prepared.outcome, row.outcome);
        match row.outcome {
            Answered => {
                assert_eq!(prepared.assistant_texts, ["NO_REPLY"]);
                assert!(prepared.payloads.is_empty());
                assert!(transcript.appends().is_empty());
            }
            CompletedEmpty => assert_eq!(prepared.payloads[0].text, FALLBACK_TEXT),
            _ => {
                assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
                assert!(prepared.payloads[0].is_error);
            }
        }
    }
}

#[tokio::test]
async fn finalization_s052_silence_is_never_accepted_after_a_timeout() {
    let finalizer = ScriptedFinalizer::always(empty_json("NO_REPLY"));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (mut settled, mut facts) = settled_write();
    settled.terminal = AttemptTerminal::TimedOut;
    settled.replay.had_potential_side_effects = true;
    facts.timeout_kind = Some(TimeoutKind::IdlePrompt);
    facts.reply_expectation = ReplyExpectation::Optional;
    facts.allow_empty_assistant_reply_as_silent = true;
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert_eq!(finalizer.call_count(), 2);
    assert_ne!(prepared.outcome, FinalizationOutcome::Answered);
}

#[tokio::test]
async fn finalization_s053_fenced_fallback_is_persisted_once_with_the_writer_authority() {
    let finalizer = ScriptedFinalizer::always(empty_json(" "));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (mut settled, facts) = settled_write();
    settled.tool_metas = vec![tether_core::ToolMeta {
        tool_name: "write".into(),
        meta: None,
        is_error: false,
    }];
    let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    run.fence = fence();
    let prepared = run.prepare().await.unwrap();
    assert_eq!(prepared.outcome, FinalizationOutcome::CompletedEmpty);
    let payload = &prepared.payloads[0];
    assert!(!payload.is_error);
    assert_eq!(payload.text, FALLBACK_TEXT);
    let authority = payload.writer_authority.as_ref().unwrap();
    assert_eq!(
        authority.idempotency_key.as_deref(),
        Some("run-settled:settled-finalization-fallback")
    );
    assert_eq!(authority.fence, fence());
    assert_eq!(authority.session_key.as_str(), "agent:main:peer");
    let appends = transcript.appends();
    assert_eq!(appends.len(), 1);
    assert_eq!(
        appends[0].idempotency_key,
        "run-settled:settled-finalization-fallback"
    );
    assert_eq!(appends[0].fence, fence());
    let rebuilt = prepared.rebuilt.unwrap();
    assert!(rebuilt.assistant_transcript_owned);
    assert_eq!(
        rebuilt.assistant_transcript_idempotency_key.as_deref(),
        Some("run-settled:settled-finalization-fallback")
    );
    assert!(rebuilt.attempt.replay.replay_safe);
    assert_eq!(rebuilt.attempt.tool_metas.len(), 1);
    assert_eq!(rebuilt.agent_meta.assistant_turns, 3);
    // The append carries the queue signal itself.
    appends[0].cancellation.cancel();
    assert!(signal.is_cancelled());
}

#[tokio::test]
async fn finalization_s054_silent_expected_helper_gets_no_fallback() {
    let finalizer = ScriptedFinalizer::always(empty_json(""));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, mut facts) = settled_write();
    facts.silent_expected = true;
    let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert_eq!(finalizer.call_count(), 2);
    assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
    assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
    assert!(prepared.payloads.is_empty());
    assert!(transcript.appends().is_empty());
}

#[tokio::test]
async fn finalization_s055_fallback_stays_private_in_message_tool_only_mode() {
    for finalizer in [
        ScriptedFinalizer::always(empty_json("")),
        ScriptedFinalizer::failing("boom"),
    ] {
        let transcript = RecordingTranscript::new(AppendBehavior::Append);
        let signal = RunSignal::new();
        let (settled, mut facts) = settled_write();
        facts.source_reply_mode = SourceReplyMode::MessageToolOnly;
        let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
            .prepare()
            .await
            .unwrap();
        assert!(!prepared.payloads[0].deliver_despite_source_suppression);
        assert_eq!(prepared.visible_text(SourceReplyMode::MessageToolOnly), "");
        assert_eq!(
            prepared.visible_text(SourceReplyMode::Automatic),
            FALLBACK_TEXT
        );
    }
}

#[tokio::test]
async fn finalization_s056_a_tries_own_timeout_never_aborts_the_run() {
    let finalizer = ScriptedFinalizer::new(vec![Box::new(|attempt| {
        attempt.cancellation().cancel();
        Err(Error::other("finalization try timed out"))
    })]);
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = with_failed_exec();
    let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert!(!signal.is_cancelled());
    assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
    assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
    assert_eq!(prepared.payloads, vec![tool_error_card()]);
    assert_eq!(prepared.failure_signal.unwrap().kind, "execution_denied");
}

#[tokio::test]
async fn finalization_s057_outer_cancel_during_the_finalizer_wins() {
    for throw in [true, false] {
        let signal = Arc::new(RunSignal::new());
        let inner = signal.clone();
        let finalizer = ScriptedFinalizer::new(vec![Box::new(move |attempt| {
            inner.cancel("user pressed Stop");
            assert!(
                attempt.cancellation().is_cancelled(),
                "the live try sees the stop"
            );
            if throw {
                Err(Error::other("aborted"))
            } else {
                Ok(answer_json(""))
            }
        })]);
        let transcript = RecordingTranscript::new(AppendBehavior::Append);
        let (settled, mut facts) = settled_write();
        facts.payloads = vec![ReplyPayload::new(
            PayloadKind::ToolErrorWarning,
            "⚠️ interrupted",
            true,
        )];
        let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
        let prepared = run.prepare().await.unwrap();
        assert_eq!(finalizer.call_count(), 1);
        assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
        assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
        assert!(prepared.payloads[0].is_error);
        assert!(transcript.appends().is_empty());
        assert_eq!(signal.reason().as_deref(), Some("user pressed Stop"));
    }
}

#[tokio::test]
async fn finalization_s058_cancel_while_the_fallback_append_is_pending() {
    let finalizer = ScriptedFinalizer::failing("boom");
    let transcript = RecordingTranscript::new(AppendBehavior::CancelDuring);
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
    assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
    assert!(
        prepared
            .payloads
            .iter()
            .all(|p| p.kind != PayloadKind::HostFallback)
    );
    assert!(
        transcript.appends()[0].cancellation.is_cancelled(),
        "the append saw the queue signal"
    );
}

#[tokio::test]
async fn finalization_s059_fallback_is_delivered_when_target_resolution_fails() {
    let finalizer = ScriptedFinalizer::failing("boom");
    let mut transcript = RecordingTranscript::new(AppendBehavior::Append);
    transcript.resolve_fails = true;
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert_eq!(prepared.payloads[0].text, FALLBACK_TEXT);
    assert!(transcript.appends().is_empty());
    assert!(prepared.fallback_persisted.is_none());
}

#[tokio::test]
async fn finalization_s060_writer_rebound_propagates() {
    let finalizer = ScriptedFinalizer::failing("boom");
    let transcript = RecordingTranscript::new(AppendBehavior::Fail(
        FallbackAppendError::WriterRebound("claimed by run-2".into()),
    ));
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let err = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap_err();
    assert!(matches!(err, FinalizerError::WriterRebound { .. }));
    assert_eq!(transcript.appends().len(), 1);
}

#[tokio::test]
async fn finalization_s061_committed_fence_reaches_finalizer_and_append() {
    let finalizer = ScriptedFinalizer::failing("boom");
    let transcript =
        RecordingTranscript::new(AppendBehavior::Respond(FallbackAppendResult::Blocked {
            reason: "writer fence mismatch".into(),
        }));
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    run.fence = fence();
    let err = run.prepare().await.unwrap_err();
    assert!(matches!(err, FinalizerError::WriterRebound { .. }));
    assert_eq!(
        finalizer.calls.lock().unwrap()[0].session,
        run.session,
        "the finalizer got the committed target"
    );
    assert_eq!(
        transcript.appends()[0].fence,
        fence(),
        "the append got the same fence"
    );
}

#[tokio::test]
async fn finalization_s062_missing_active_session_with_a_fence_is_a_rebound() {
    let finalizer = ScriptedFinalizer::failing("boom");
    let transcript = RecordingTranscript::new(AppendBehavior::Respond(
        FallbackAppendResult::MissingActiveSession,
    ));
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    run.fence = fence();
    assert!(matches!(
        run.prepare().await.unwrap_err(),
        FinalizerError::WriterRebound { .. }
    ));
    // Without a fence it is only skipped, and the fallback is still delivered.
    let transcript = RecordingTranscript::new(AppendBehavior::Respond(
        FallbackAppendResult::MissingActiveSession,
    ));
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert_eq!(prepared.payloads[0].text, FALLBACK_TEXT);
    assert!(prepared.fallback_persisted.is_none());
}

/// A command-only harness: no current or last assistant, the attributed tool-call entry kept.
fn command_only(context: SettledTurnFinalizationContext) -> (AttemptResult, TurnFacts) {
    let (mut settled, mut facts) = settled_write();
    settled.settled_turn_finalization_context = Some(context);
    facts.current_attempt_assistant = None;
    facts.last_assistant = None;
    facts.source_reply_mode = SourceReplyMode::MessageToolOnly;
    (settled, facts)
}

#[tokio::test]
async fn finalization_s063_absent_finalizer_with_unavailable_context_reaches_the_fallback() {
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = command_only(SettledTurnFinalizationContext::Unavailable);
    let before = format!("{settled:?}");
    let run = Run::new(settled, facts, None, &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
    assert_eq!(
        format!("{:?}", run.settled),
        before,
        "the input attempt is unchanged"
    );
    let rebuilt = prepared.rebuilt.as_ref().unwrap();
    assert_eq!(rebuilt.attempt.terminal, AttemptTerminal::Ok);
    assert_eq!(
        rebuilt.attempt.messages_snapshot[..3],
        run.settled.messages_snapshot[..],
        "prefix unchanged"
    );
    let appends = transcript.appends();
    assert_eq!(appends.len(), 1);
    assert_eq!(
        appends[0].idempotency_key,
        "run-settled:settled-finalization-fallback"
    );
    assert_eq!(appends[0].message.meta["provider"], FALLBACK_PROVIDER);
    assert_eq!(appends[0].message.meta["model"], FALLBACK_MODEL);
    assert!(!prepared.payloads[0].deliver_despite_source_suppression);
    assert_eq!(prepared.visible_text(SourceReplyMode::MessageToolOnly), "");
    assert_eq!(rebuilt.assistant.meta["provider"], "tool-prov");
    assert_eq!(rebuilt.assistant.meta["model"], "tool-model");
}

#[tokio::test]
async fn finalization_s064_absent_finalizer_with_a_failed_tool_keeps_the_failure() {
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (mut settled, mut facts) = with_failed_exec();
    settled.settled_turn_finalization_context = Some(SettledTurnFinalizationContext::Transcript(
        settled.messages_snapshot.clone().into(),
    ));
    settled.last_tool_error.as_mut().unwrap().error_code = Some("INVALID_REQUEST".into());
    facts.trigger = RunTrigger::Cron;
    facts.failure_signal = Some(FailureSignal {
        kind: "execution_denied".into(),
        code: Some("INVALID_REQUEST".into()),
        fatal_for_cron: true,
    });
    facts.terminal_tool_failure = Some(TerminalToolFailure {
        tool_name: "exec".into(),
        code: Some("UNKNOWN_TOOL_ID".into()),
    });
    let run = Run::new(settled, facts, None, &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
    assert!(prepared.payloads[0].is_error && prepared.payloads[0].text.contains("failed"));
    assert!(transcript.appends().is_empty());
    let signal = prepared.failure_signal.unwrap();
    assert_eq!(
        (
            signal.kind.as_str(),
            signal.code.as_deref(),
            signal.fatal_for_cron
        ),
        ("execution_denied", Some("INVALID_REQUEST"), true)
    );
    assert_eq!(
        prepared.terminal_tool_failure.unwrap().code.as_deref(),
        Some("UNKNOWN_TOOL_ID")
    );
}

#[tokio::test]
async fn finalization_s065_absent_finalizer_for_a_silent_helper_gets_no_fallback() {
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, mut facts) = command_only(SettledTurnFinalizationContext::Unavailable);
    facts.silent_expected = true;
    let run = Run::new(settled, facts, None, &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
    assert!(prepared.payloads.is_empty());
    assert!(transcript.appends().is_empty());
}

#[tokio::test]
async fn finalization_s066_provider_failure_fallback_uses_the_classified_copy() {
    let copy = "⚠️ Selected model is at capacity. Try a different model, or wait and retry.";
    let finalizer = ScriptedFinalizer::failing("finalizer failed");
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (mut settled, mut facts) = settled_write();
    settled.terminal = AttemptTerminal::Failed {
        message: "503 OVERLOADED: selected model at capacity".into(),
    };
    settled.settled_turn_finalization_context = Some(SettledTurnFinalizationContext::Transcript(
        settled.messages_snapshot.clone().into(),
    ));
    facts.provider_failure_copy = Some(copy.into());
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert_eq!(prepared.payloads[0].text, copy);
    assert_eq!(transcript.appends()[0].message.visible_text(), copy);
    let rebuilt = prepared.rebuilt.unwrap();
    assert!(matches!(
        rebuilt.attempt.terminal,
        AttemptTerminal::Failed { .. }
    ));
    assert!(rebuilt.agent_meta.error.unwrap().contains("capacity"));
    assert!(rebuilt.replay_invalid);
    assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
}

#[tokio::test]
async fn finalization_s067_cron_fallback_is_a_silent_no_reply_row() {
    let finalizer = ScriptedFinalizer::failing("finalizer failed");
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (mut settled, mut facts) = settled_write();
    settled.settled_turn_finalization_context = Some(SettledTurnFinalizationContext::Unavailable);
    facts.trigger = RunTrigger::Cron;
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert_eq!(prepared.outcome, FinalizationOutcome::SilentFallback);
    assert_eq!(prepared.outcome.as_str(), "silent-fallback");
    assert!(prepared.payloads.is_empty());
    assert_eq!(transcript.appends()[0].message.visible_text(), "NO_REPLY");
}

#[tokio::test]
async fn orchestration_usage_of_each_try_is_accumulated() {
    let mut empty = empty_json("");
    empty["usage"] = json!({"input_tokens": 10, "output_tokens": 1});
    let mut answer = answer_json("ok");
    answer["usage"] = json!({"input_tokens": 12, "output_tokens": 3});
    let finalizer = ScriptedFinalizer::new(vec![
        Box::new(move |_| Ok(empty.clone())),
        Box::new(move |_| Ok(answer.clone())),
    ]);
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert_eq!(
        prepared.finalization_usage,
        Usage {
            input_tokens: 22,
            output_tokens: 4
        }
    );
    assert_eq!(
        prepared.rebuilt.unwrap().attempt.usage,
        Some(Usage {
            input_tokens: 12,
            output_tokens: 3
        })
    );
    assert!(prepared.policy.finalization_attempted);
    assert!(
        !prepared.policy.missing_assistant_retry
            && !prepared.policy.model_fallback_and_auth_rotation
    );
}

#[tokio::test]
async fn orchestration_a_tool_call_answer_fails_closed_into_the_fallback() {
    let finalizer = ScriptedFinalizer::always(json!({"assistant": {
        "role": "assistant", "content": [{"type": "toolCall", "name": "write"}], "stop_reason": "toolUse"
    }}));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert_eq!(
        finalizer.call_count(),
        1,
        "a rejected result is not retried"
    );
    assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
    assert_eq!(prepared.payloads[0].text, FALLBACK_TEXT);
}

#[tokio::test]
async fn orchestration_lost_admission_stops_before_any_try() {
    let finalizer = ScriptedFinalizer::always(answer_json("unused"));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    run.admission = Arc::new(|| Err(Error::revoked("run closed")));
    let err = run.prepare().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "admitted run authority is no longer active"
    );
    assert_eq!(finalizer.call_count(), 0);
}

#[tokio::test]
async fn orchestration_diagnostics_cover_every_try() {
    let finalizer = ScriptedFinalizer::always(empty_json(""));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    run.diagnostics = LifecycleOptions {
        capture_content: true,
        agent_run_diagnostics: false,
    };
    let prepared = run.prepare().await.unwrap();
    let started: Vec<u8> = prepared
        .events
        .iter()
        .filter_map(|e| match e {
            DiagnosticEvent::HarnessRunStarted { try_number, .. } => Some(*try_number),
            _ => None,
        })
        .collect();
    assert_eq!(started, [1, 2]);
    let completed = prepared
        .events
        .iter()
        .filter(|e| {
            matches!(
                e,
                DiagnosticEvent::HarnessRunCompleted {
                    outcome: RunCompletion::Completed,
                    ..
                }
            )
        })
        .count();
    assert_eq!(completed, 2, "empty tries complete normally");
    assert_eq!(prepared.tries, 2);
}

#[tokio::test]
async fn orchestration_the_phase_runs_at_most_once_per_run() {
    let finalizer = ScriptedFinalizer::always(empty_json(""));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    let first = run.prepare().await.unwrap();
    assert_eq!(first.outcome, FinalizationOutcome::CompletedEmpty);
    assert!(signal.finalization_phase_started());
    // A retry loop calling the phase again for the same run gets `not-attempted`.
    let again = run.prepare().await.unwrap();
    assert_eq!(again.outcome, FinalizationOutcome::NotAttempted);
    assert_eq!(finalizer.call_count(), 2, "no further tries");
    assert_eq!(
        transcript.appends().len(),
        1,
        "the fallback is persisted once"
    );
}

struct Policy {
    binds: std::sync::Mutex<Vec<Option<ModelSelection>>>,
    live: Arc<std::sync::atomic::AtomicUsize>,
    /// Shared with the bindings: set to revoke the operator policy.
    revoked: Arc<std::sync::atomic::AtomicBool>,
}

struct Binding {
    live: Arc<std::sync::atomic::AtomicUsize>,
    revoked: Arc<std::sync::atomic::AtomicBool>,
}

impl tether_finalizer::ModelPolicyBinding for Binding {
    fn assert_current(&self) -> Result<(), Error> {
        if self.revoked.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::revoked("operator model policy changed"));
        }
        Ok(())
    }
}

impl Drop for Binding {
    fn drop(&mut self) {
        self.live.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl tether_finalizer::OperatorModelPolicy for Policy {
    fn bind(
        &self,
        selection: Option<&ModelSelection>,
    ) -> Result<Box<dyn tether_finalizer::ModelPolicyBinding>, Error> {
        self.binds.lock().unwrap().push(selection.cloned());
        self.live.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Box::new(Binding {
            live: self.live.clone(),
            revoked: self.revoked.clone(),
        }))
    }
}

fn policy() -> Policy {
    Policy {
        binds: std::sync::Mutex::new(Vec::new()),
        live: Arc::new(0.into()),
        revoked: Arc::new(false.into()),
    }
}

#[tokio::test]
async fn orchestration_operator_model_policy_needs_exact_support() {
    let finalizer = ScriptedFinalizer::always(answer_json("unused"));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let p = policy();
    let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    run.model_policy = Some(tether_finalizer::ModelPolicyGate {
        policy: &p,
        support: tether_finalizer::NativeModelPolicySupport::Unsupported,
    });
    let prepared = run.prepare().await.unwrap();
    assert_eq!(
        finalizer.call_count(),
        0,
        "preflight fails before the harness is called"
    );
    assert!(p.binds.lock().unwrap().is_empty());
    assert_eq!(prepared.payloads[0].text, FALLBACK_TEXT);
}

#[tokio::test]
async fn orchestration_operator_model_policy_binds_each_try_to_the_settled_selection() {
    let finalizer = ScriptedFinalizer::always(empty_json(""));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, mut facts) = settled_write();
    let selection = ModelSelection {
        model: "m".into(),
        model_provider: Some("p".into()),
        auth_profile_id: None,
    };
    facts.carried.runtime_model_selection = Some(selection.clone());
    let p = policy();
    let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    run.model_policy = Some(tether_finalizer::ModelPolicyGate {
        policy: &p,
        support: tether_finalizer::NativeModelPolicySupport::Exact,
    });
    run.prepare().await.unwrap();
    assert_eq!(
        *p.binds.lock().unwrap(),
        vec![Some(selection.clone()), Some(selection)],
        "one binding per try"
    );
    assert_eq!(
        p.live.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "every binding released"
    );

    // A binding revoked during the call fails the try: the answer is not used.
    let p = policy();
    let revoke = p.revoked.clone();
    let finalizer = ScriptedFinalizer::new(vec![Box::new(move |_| {
        revoke.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(answer_json("answer under a revoked policy"))
    })]);
    let (settled, facts) = settled_write();
    let signal = RunSignal::new();
    let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    run.model_policy = Some(tether_finalizer::ModelPolicyGate {
        policy: &p,
        support: tether_finalizer::NativeModelPolicySupport::Exact,
    });
    let prepared = run.prepare().await.unwrap();
    assert_eq!(finalizer.call_count(), 1);
    assert_ne!(prepared.outcome, FinalizationOutcome::Answered);
    assert_eq!(prepared.payloads[0].text, FALLBACK_TEXT);
    assert_eq!(p.live.load(std::sync::atomic::Ordering::SeqCst), 0);
}

#[tokio::test]
async fn orchestration_a_host_try_timeout_cancels_only_the_live_try() {
    let signal = Arc::new(RunSignal::new());
    let timer = signal.clone();
    let steps: Vec<Step> = vec![
        Box::new(move |attempt| {
            // The host's per-try timer fires at the deadline.
            assert!(timer.time_out_live_try());
            assert!(attempt.cancellation().is_cancelled());
            Ok(answer_json(""))
        }),
        Box::new(|attempt| {
            assert!(
                !attempt.cancellation().is_cancelled(),
                "a fresh cancellation"
            );
            Ok(answer_json("Second try answered."))
        }),
    ];
    let finalizer = ScriptedFinalizer::new(steps);
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let (settled, facts) = settled_write();
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert!(!signal.is_cancelled(), "the run stays live");
    assert!(
        !signal.time_out_live_try(),
        "no try is live after the phase"
    );
    assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
    assert_eq!(finalizer.call_count(), 2);
}

#[tokio::test]
async fn orchestration_opt_in_recovery_notice_crosses_source_suppression_once() {
    use tether_finalizer::RECOVERY_NOTICE_TEXT;
    let finalizer = ScriptedFinalizer::failing("boom");
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, mut facts) = settled_write();
    facts.source_reply_mode = SourceReplyMode::MessageToolOnly;
    facts.message_tool_only_recovery_notice = true;
    let prepared = Run::new(
        settled.clone(),
        facts.clone(),
        Some(&finalizer),
        &transcript,
        &signal,
    )
    .prepare()
    .await
    .unwrap();
    assert_eq!(prepared.payloads.len(), 2);
    assert!(
        !prepared.payloads[0].deliver_despite_source_suppression,
        "the fallback stays private"
    );
    assert_eq!(
        prepared.visible_text(SourceReplyMode::MessageToolOnly),
        RECOVERY_NOTICE_TEXT
    );
    // Skipped for a heartbeat, internal input, an ambient event, or after the message tool ran.
    let skips: Vec<fn(&mut TurnFacts)> = vec![
        |f| f.trigger = RunTrigger::Heartbeat,
        |f| f.internal_system_input = true,
        |f| f.ambient_room_event = true,
        |f| {
            f.message_tool_sends = vec![tether_finalizer::MessageToolSend {
                source_reply_final: Some(false),
            }]
        },
        |f| f.message_tool_only_recovery_notice = false,
    ];
    for skip in skips {
        let mut f = facts.clone();
        skip(&mut f);
        let signal = RunSignal::new();
        let prepared = Run::new(settled.clone(), f, Some(&finalizer), &transcript, &signal)
            .prepare()
            .await
            .unwrap();
        assert!(
            prepared
                .payloads
                .iter()
                .all(|p| p.kind != PayloadKind::RecoveryNotice)
        );
    }
}

/// A harness with or without a settled-turn finalizer, as a host registry holds it.
#[derive(Debug)]
struct Harness {
    id: HarnessId,
    finalizer: Option<Arc<ScriptedFinalizer>>,
}

impl std::fmt::Debug for ScriptedFinalizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScriptedFinalizer")
    }
}

#[async_trait::async_trait]
impl tether_core::AgentHarness for Harness {
    fn id(&self) -> &HarnessId {
        &self.id
    }

    async fn reset(&self, _: tether_core::ResetParams) -> Result<(), Error> {
        Ok(())
    }

    fn settled_turn_finalizer(&self) -> Option<&dyn SettledTurnFinalizer> {
        self.finalizer
            .as_deref()
            .map(|f| f as &dyn SettledTurnFinalizer)
    }
}

#[tokio::test]
async fn orchestration_an_input_built_from_a_harness_takes_its_id_finalizer_and_defaults() {
    let (settled, facts) = settled_write();
    let settled = Arc::new(settled);
    let signal = RunSignal::new();
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let answering = Harness {
        id: HarnessId::new("answering").unwrap(),
        finalizer: Some(Arc::new(ScriptedFinalizer::always(answer_json("Saved.")))),
    };
    let input = tether_finalizer::FinalizationInput::new(
        &answering,
        RunId::new("run-built").unwrap(),
        crate::harness::target(true),
        Arc::clone(&settled),
        &facts,
        &signal,
        &transcript,
    );
    assert_eq!(input.harness_id.as_str(), "answering");
    assert_eq!(
        input.try_timeout,
        Duration::ZERO,
        "no per-try timeout of its own"
    );
    assert!(!input.fence.is_set() && input.model_policy.is_none());
    let prepared = tether_finalizer::prepare_terminal_with_settled_turn_finalization(&input)
        .await
        .unwrap();
    assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
    assert_eq!(prepared.payloads[0].text, "Saved.");
    assert_eq!(
        answering.finalizer.as_ref().unwrap().call_count(),
        1,
        "the harness's own finalizer ran"
    );
    assert!(transcript.appends.lock().unwrap().is_empty());

    // A harness without a finalizer cannot finalize: nothing is asked of any model, and the
    // setters reach the input.
    let silent = Harness {
        id: HarnessId::new("silent").unwrap(),
        finalizer: None,
    };
    let signal = RunSignal::new();
    let input = tether_finalizer::FinalizationInput::new(
        &silent,
        RunId::new("run-fallback").unwrap(),
        crate::harness::target(true),
        settled,
        &facts,
        &signal,
        &transcript,
    )
    .with_fence(fence())
    .with_try_timeout(Duration::from_secs(5));
    assert!(input.finalizer.is_none());
    assert_eq!(
        (input.fence.clone(), input.try_timeout),
        (fence(), Duration::from_secs(5))
    );
    let prepared = tether_finalizer::prepare_terminal_with_settled_turn_finalization(&input)
        .await
        .unwrap();
    assert_eq!(prepared.outcome, FinalizationOutcome::NotAttempted);
    assert_eq!(answering.finalizer.as_ref().unwrap().call_count(), 1);
}

thread_local! {
    /// The log lines of events emitted on this thread (see [`capture_logs`]).
    static THREAD_LOGS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Writes into the current thread's [`THREAD_LOGS`].
struct ThreadLogWriter;

impl std::io::Write for ThreadLogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        THREAD_LOGS.with(|logs| logs.borrow_mut().extend_from_slice(buf));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs, once per test process, a global INFO subscriber that writes each thread's events
/// into that thread's buffer, and empties this thread's buffer. A global subscriber, not a
/// scoped one: with `set_default`, a callsite first reached by another test thread could stay
/// disabled for this one (it happened under parallel tests).
fn capture_logs() {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(|| ThreadLogWriter)
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in this test binary");
    });
    THREAD_LOGS.with(|logs| logs.borrow_mut().clear());
}

/// The lines logged on this thread since [`capture_logs`].
fn captured_logs() -> String {
    THREAD_LOGS.with(|logs| String::from_utf8_lossy(&logs.borrow()).into_owned())
}

#[tokio::test]
async fn orchestration_the_answered_path_logs_nothing_above_info() {
    // The current-thread runtime of `tokio::test` polls everything on this thread.
    capture_logs();

    let (settled, facts) = settled_write();
    let finalizer = ScriptedFinalizer::always(answer_json("Saved."));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
    // A second call for the same run is a retry loop's, also normal.
    let again = run.prepare().await.unwrap();
    assert_eq!(again.outcome, FinalizationOutcome::NotAttempted);

    let logs = captured_logs();
    assert!(
        logs.contains("running isolated finalization"),
        "the phase is logged: {logs}"
    );
    for line in logs.lines() {
        assert!(
            !line.contains("WARN") && !line.contains("ERROR"),
            "the answered path logs at info: {line}"
        );
    }
}
