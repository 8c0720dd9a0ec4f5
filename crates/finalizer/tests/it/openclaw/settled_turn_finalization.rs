//! `src/agents/embedded-agent-runner/run/settled-turn-finalization.test.ts`: the request gate
//! (`resolve_settled_turn_finalization_request`) and the once-per-run orchestration
//! (`prepare_terminal_with_settled_turn_finalization`).
//!
//! The peer's test swaps its backend and transcript writer for mocks; here the scripted
//! finalizer and the recording transcript of `harness.rs` play those parts.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tether_core::{AttemptResult, AttemptTerminal, Error, ReplayMetadata, ToolErrorSummary};
use tether_finalizer::MAX_TIMER;
use tether_finalizer::{
    FALLBACK_TEXT, FallbackAppendError, FallbackAppendResult, FinalizationOutcome, FinalizerError,
    ItemLifecycle, ModelSelection, PayloadKind, ReplyExpectation, ReplyPayload, RunSignal,
    RunTrigger, SETTLED_TOOL_FINALIZATION_INSTRUCTION, TOOL_FAILURE_INSTRUCTION, TurnFacts,
    resolve_settled_turn_finalization_request,
};

use crate::gate::{empty_stop, settled_write};
use crate::harness::{AppendBehavior, RecordingTranscript, Run, ScriptedFinalizer, Step, fence};
use crate::orchestration::{
    empty_json, tool_error_card, truncated_after_commentary, with_failed_exec,
};
use crate::support::{answer_json, assistant};

fn gate(settled: &AttemptResult, facts: &TurnFacts, available: bool) -> Option<String> {
    resolve_settled_turn_finalization_request(settled, facts, available).map(|r| r.prompt)
}

/// The peer's settled successful attempt: the failed-exec fixture with every failure cleared.
fn settled_successful() -> (AttemptResult, TurnFacts) {
    let (mut settled, mut facts) = with_failed_exec();
    settled.last_tool_error = None;
    for m in &mut settled.messages_snapshot {
        m.is_error = false;
    }
    for meta in &mut facts.tool_call_metas {
        meta.is_error = false;
    }
    facts.payloads.clear();
    facts.failure_signal = None;
    (settled, facts)
}

// ---- resolveSettledTurnFinalizationRequest ----

#[test]
fn openclaw_settled_turn_finalization_requests_only_for_a_required_settled_tool_turn() {
    // An empty completed stop after a settled `write`.
    let (settled, mut facts) = empty_stop();
    facts.reply_expectation = ReplyExpectation::Required;
    assert_eq!(
        gate(&settled, &facts, true).as_deref(),
        Some(SETTLED_TOOL_FINALIZATION_INSTRUCTION)
    );
    facts.reply_expectation = ReplyExpectation::Optional;
    assert_eq!(gate(&settled, &facts, true), None);
    // A heartbeat does not require a reply (the host's facts for it).
    let mut heartbeat = facts.clone();
    heartbeat.trigger = RunTrigger::Heartbeat;
    heartbeat.reply_expectation = ReplyExpectation::Optional;
    assert_eq!(gate(&settled, &heartbeat, true), None);
}

#[test]
fn openclaw_settled_turn_finalization_explicit_silence_stays_terminal() {
    let (mut settled, mut facts) = settled_write();
    settled
        .messages_snapshot
        .push(assistant("NO_REPLY", "stop"));
    settled.completed_assistant = Some(assistant("NO_REPLY", "stop"));
    settled.assistant_texts = vec!["NO_REPLY".into()];
    settled.replay = ReplayMetadata {
        had_potential_side_effects: true,
        replay_safe: false,
    };
    facts.current_attempt_assistant = None;
    facts.allow_empty_assistant_reply_as_silent = true;
    let mut heartbeat = facts.clone();
    heartbeat.trigger = RunTrigger::Heartbeat;
    heartbeat.reply_expectation = ReplyExpectation::Optional;
    assert_eq!(gate(&settled, &heartbeat, true), None);
    let mut direct = facts;
    direct.trigger = RunTrigger::User;
    direct.reply_expectation = ReplyExpectation::Required;
    // Deliberate difference: a required reply that ended in explicit silence after settled
    // tools is continued (scenario S41); the peer keeps it terminal unless its reply-delivery
    // observer reports the required confirmation missing, an observer Tether does not have.
    assert_eq!(
        gate(&settled, &direct, true).as_deref(),
        Some(SETTLED_TOOL_FINALIZATION_INSTRUCTION)
    );
}

#[test]
fn openclaw_settled_turn_finalization_needs_an_available_finalizer_and_no_visible_error() {
    let (mut settled, mut facts) = with_failed_exec();
    settled.last_tool_error = Some(ToolErrorSummary {
        tool_name: "exec".into(),
        error: Some("post-processing error".into()),
        ..ToolErrorSummary::default()
    });
    facts.reply_expectation = ReplyExpectation::Required;
    // A visible structured error reply the user already sees.
    facts.payloads = vec![ReplyPayload::new(
        PayloadKind::Answer,
        "Review the failed operation.",
        true,
    )];
    assert_eq!(gate(&settled, &facts, true), None);
    // No finalizer and no captured context.
    facts.payloads.clear();
    assert_eq!(gate(&settled, &facts, false), None);
    // A plain error reply given to the runner (not its own synthetic warning card).
    facts.payloads = vec![ReplyPayload::new(
        PayloadKind::Answer,
        "⚠️ 🛠️ Exec failed",
        true,
    )];
    assert_eq!(gate(&settled, &facts, true), None);
    // The runner's own synthetic tool-error card is not an answer.
    facts.payloads = vec![tool_error_card()];
    let prompt = gate(&settled, &facts, true).expect("requested");
    assert!(prompt.contains(SETTLED_TOOL_FINALIZATION_INSTRUCTION));
}

// ---- prepareTerminalWithSettledTurnFinalization ----

#[tokio::test]
async fn openclaw_settled_turn_finalization_empty_post_tool_turn_only_without_delivered_media() {
    for media_delivered in [false, true] {
        let finalizer = ScriptedFinalizer::always(answer_json("The tool run finished."));
        let transcript = RecordingTranscript::new(AppendBehavior::Append);
        let signal = RunSignal::new();
        let (mut settled, mut facts) = settled_write();
        settled.completed_assistant = Some(assistant("", "stop"));
        facts.current_attempt_assistant = None;
        facts.tool_call_metas[0].tool_name = "tts".into();
        facts.has_tool_media_block_reply = media_delivered;
        let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
        let prepared = run.prepare().await.unwrap();
        if media_delivered {
            assert_eq!(finalizer.call_count(), 0);
            assert_eq!(prepared.outcome, FinalizationOutcome::NotAttempted);
            assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
            assert!(prepared.payloads.is_empty());
        } else {
            assert_eq!(finalizer.call_count(), 1);
            assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
            assert_eq!(prepared.payloads.len(), 1);
            assert_eq!(prepared.payloads[0].text, "The tool run finished.");
        }
    }
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_recovers_truncated_completions_after_commentary() {
    for reported in [false, true] {
        for answered in [true, false] {
            let (mut settled, facts) = truncated_after_commentary();
            if reported {
                settled.terminal = AttemptTerminal::Ok;
            }
            let finalizer = ScriptedFinalizer::always(if answered {
                answer_json("The note was saved.")
            } else {
                empty_json("")
            });
            let transcript = RecordingTranscript::new(AppendBehavior::Append);
            let signal = RunSignal::new();
            let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
            let prepared = run.prepare().await.unwrap();
            let case = format!("reported: {reported}, answered: {answered}");
            let (outcome, calls, text) = if answered {
                (FinalizationOutcome::Answered, 1, "The note was saved.")
            } else {
                (FinalizationOutcome::CompletedEmpty, 2, FALLBACK_TEXT)
            };
            assert_eq!(prepared.outcome, outcome, "{case}");
            assert_eq!(finalizer.call_count(), calls, "{case}");
            for call in finalizer.calls.lock().unwrap().iter() {
                assert_eq!(call.settled_ptr, Arc::as_ptr(&run.settled) as usize);
            }
            assert_eq!(prepared.payloads.len(), 1, "{case}");
            assert_eq!(prepared.payloads[0].text, text, "{case}");
            assert!(!prepared.payloads[0].is_error, "{case}");
        }
    }
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_failure_honest_output_replaces_the_warning() {
    let finalizer =
        ScriptedFinalizer::always(answer_json("The exec tool failed: post-processing error."));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, mut facts) = with_failed_exec();
    facts.carried.mcp_view = Some(json!({"viewId": "view-after-tools"}));
    facts.carried.successful_cron_adds = 1;
    facts.carried.successful_nested_tool_names = vec!["memory_search".into()];
    facts.carried.code_mode_engaged = true;
    facts.assistant_turns = 1;
    let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert_eq!(finalizer.call_count(), 1);
    let call = finalizer.calls.lock().unwrap()[0].clone();
    assert!(call.prompt.ends_with(TOOL_FAILURE_INSTRUCTION));
    assert_eq!(call.settled_ptr, Arc::as_ptr(&run.settled) as usize);
    assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
    assert_eq!(prepared.payloads.len(), 1);
    assert_eq!(
        prepared.payloads[0].text,
        "The exec tool failed: post-processing error."
    );
    assert!(prepared.payloads[0].deliver_despite_source_suppression);
    let rebuilt = prepared.rebuilt.clone().unwrap();
    assert_eq!(
        rebuilt.carried.mcp_view,
        Some(json!({"viewId": "view-after-tools"}))
    );
    assert_eq!(rebuilt.carried.successful_cron_adds, 1);
    assert_eq!(
        rebuilt.carried.successful_nested_tool_names,
        ["memory_search"]
    );
    assert!(rebuilt.carried.code_mode_engaged);
    assert_eq!(rebuilt.item_lifecycle, ItemLifecycle::default());
    assert_eq!(
        rebuilt.attempt.replay,
        ReplayMetadata {
            had_potential_side_effects: false,
            replay_safe: true
        }
    );
    assert_eq!(rebuilt.agent_meta.assistant_turns, 2);
    let signal = prepared.failure_signal.unwrap();
    assert_eq!(signal.kind, "execution_denied");
    assert_eq!(signal.code.as_deref(), Some("SYSTEM_RUN_DENIED"));
    assert!(signal.fatal_for_cron);
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_failed_command_then_no_reply_is_not_recovered() {
    let finalizer = ScriptedFinalizer::always(answer_json("unused"));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (mut settled, mut facts) = with_failed_exec();
    settled.terminal = AttemptTerminal::Ok;
    settled.assistant_texts = vec!["NO_REPLY".into()];
    settled
        .messages_snapshot
        .push(assistant("NO_REPLY", "stop"));
    settled.completed_assistant = Some(assistant("NO_REPLY", "stop"));
    settled.last_tool_error = Some(ToolErrorSummary {
        tool_name: "exec".into(),
        error: Some("Command exited with code 127".into()),
        ..ToolErrorSummary::default()
    });
    facts.current_attempt_assistant = None;
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert_eq!(finalizer.call_count(), 0);
    assert_eq!(prepared.outcome, FinalizationOutcome::NotAttempted);
    assert_eq!(prepared.assistant_texts, ["NO_REPLY"]);
    assert_eq!(prepared.payloads.len(), 1);
    assert!(prepared.payloads[0].is_error && prepared.payloads[0].text.contains("failed"));
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_command_failure_survives_empty_or_failed_recovery() {
    for finalizer in [
        ScriptedFinalizer::always(empty_json("")),
        ScriptedFinalizer::failing("finalizer unavailable"),
    ] {
        let transcript = RecordingTranscript::new(AppendBehavior::Append);
        let signal = RunSignal::new();
        let (mut settled, facts) = with_failed_exec();
        settled.terminal = AttemptTerminal::Ok;
        let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
        let prepared = run.prepare().await.unwrap();
        assert!(finalizer.call_count() >= 1);
        assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
        assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
        assert_eq!(prepared.payloads.len(), 1);
        assert!(prepared.payloads[0].is_error && prepared.payloads[0].text.contains("failed"));
        assert!(transcript.appends().is_empty());
    }
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_runtime_context_and_model_selection_are_kept() {
    let mut answer = answer_json("The exec tool failed: post-processing error.");
    answer["assistant"]["provider"] = "host-finalizer".into();
    answer["assistant"]["model"] = "summary-model".into();
    let finalizer = ScriptedFinalizer::always(answer);
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, mut facts) = with_failed_exec();
    let selection = ModelSelection {
        model: "native-selected-model".into(),
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
    assert_eq!(rebuilt.agent_meta.model.as_deref(), Some("summary-model"));
    assert_eq!(rebuilt.agent_meta.runtime_model_selection, Some(selection));
    assert_eq!(
        rebuilt.agent_meta.credential_source.as_deref(),
        Some("profile")
    );
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_retry_gets_fresh_controls_and_retires_old_ones() {
    let first = Arc::new(std::sync::Mutex::new(None::<tether_core::Cancellation>));
    let (stash, late) = (first.clone(), first.clone());
    let steps: Vec<Step> = vec![
        Box::new(move |attempt| {
            assert!(!attempt.cancellation().is_cancelled(), "a fresh try");
            // The first try times out while settling and comes back empty.
            attempt.cancellation().cancel();
            *stash.lock().unwrap() = Some(attempt.cancellation().clone());
            Ok(empty_json(""))
        }),
        Box::new(move |attempt| {
            // Late callbacks of the retired first try fire during the second.
            late.lock().unwrap().as_ref().unwrap().cancel();
            assert!(!attempt.cancellation().is_cancelled());
            Ok(answer_json("The command completed successfully."))
        }),
    ];
    let finalizer = ScriptedFinalizer::new(steps);
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, mut facts) = with_failed_exec();
    facts.assistant_turns = 1;
    let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    let calls = finalizer.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    for call in &calls {
        assert_eq!(call.settled_ptr, Arc::as_ptr(&run.settled) as usize);
    }
    assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
    assert_eq!(
        prepared.payloads[0].text,
        "The command completed successfully."
    );
    assert_eq!(prepared.rebuilt.unwrap().agent_meta.assistant_turns, 3);
    // Firing every retired control after finalization never aborts the run.
    for call in &calls {
        call.cancellation.cancel();
    }
    assert!(!signal.is_cancelled());
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_seeds_the_normalized_timeout_budget() {
    for (timeout, expected) in [
        (Duration::from_secs(60), Duration::from_secs(60)),
        (Duration::ZERO, MAX_TIMER),
    ] {
        let finalizer = ScriptedFinalizer::always(answer_json("Done."));
        let transcript = RecordingTranscript::new(AppendBehavior::Append);
        let signal = RunSignal::new();
        let (settled, facts) = with_failed_exec();
        let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
        run.try_timeout = timeout;
        let prepared = run.prepare().await.unwrap();
        let calls = finalizer.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 1, "controls created exactly once");
        let now = tether_core::Timestamp::from_millis(1_000);
        assert_eq!(calls[0].deadline, Some(now + expected));
        assert_eq!(prepared.outcome, FinalizationOutcome::Answered);
    }
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_fallback_is_persisted_with_the_queue_signal() {
    let finalizer = ScriptedFinalizer::always(empty_json(""));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, mut facts) = settled_successful();
    facts.assistant_turns = 1;
    let tool_metas = settled.tool_metas.clone();
    let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    run.fence = fence();
    let prepared = run.prepare().await.unwrap();
    assert_eq!(finalizer.call_count(), 2);
    assert_eq!(prepared.outcome, FinalizationOutcome::CompletedEmpty);
    let payload = &prepared.payloads[0];
    assert_eq!(payload.text, FALLBACK_TEXT);
    assert!(!payload.is_error);
    // Deliberate difference: the host fallback never crosses source-reply suppression
    // (scenario S55); only a finalization answer does.
    assert!(!payload.deliver_despite_source_suppression);
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
    assert_eq!(appends[0].message.visible_text(), FALLBACK_TEXT);
    // The append carries the run's queue signal itself, not a try's.
    appends[0].cancellation.cancel();
    assert!(signal.is_cancelled());
    let rebuilt = prepared.rebuilt.unwrap();
    assert!(rebuilt.assistant_transcript_owned);
    assert_eq!(prepared.assistant_texts, [FALLBACK_TEXT]);
    assert!(
        rebuilt.attempt.replay.replay_safe && !rebuilt.attempt.replay.had_potential_side_effects
    );
    assert_eq!(rebuilt.attempt.tool_metas, tool_metas);
    assert_eq!(rebuilt.agent_meta.assistant_turns, 3);
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_exhausted_silent_helper_gets_no_fallback() {
    let finalizer = ScriptedFinalizer::always(empty_json(""));
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, mut facts) = with_failed_exec();
    facts.silent_expected = true;
    let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert_eq!(finalizer.call_count(), 2);
    assert!(transcript.appends().is_empty());
    assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
    assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
    assert!(prepared.payloads.iter().all(|p| p.text != FALLBACK_TEXT));
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_failed_finalizer_keeps_the_original_failure() {
    let finalizer = ScriptedFinalizer::new(vec![Box::new(|attempt| {
        // The try's own timeout fires, then the finalizer fails.
        attempt.cancellation().cancel();
        Err(Error::other("finalizer failed"))
    })]);
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = with_failed_exec();
    let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert!(!signal.is_cancelled(), "the run is not aborted");
    assert_eq!(finalizer.call_count(), 1);
    assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
    assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
    assert_eq!(prepared.payloads, vec![tool_error_card()]);
    let failure = prepared.failure_signal.unwrap();
    assert_eq!(failure.kind, "execution_denied");
    assert_eq!(failure.code.as_deref(), Some("SYSTEM_RUN_DENIED"));
    assert!(failure.fatal_for_cron);
    assert!(prepared.assistant_texts.is_empty());
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_outer_or_stop_cancellation_gets_no_fallback() {
    // Both the outer cancel and the user's Stop reach Tether as a cancellation of the run
    // signal while the try is live.
    for reason in ["cancelled by user", "Stop"] {
        let signal = Arc::new(RunSignal::new());
        let inner = signal.clone();
        let finalizer = ScriptedFinalizer::new(vec![Box::new(move |attempt| {
            inner.cancel(reason);
            assert!(
                attempt.cancellation().is_cancelled(),
                "the live try sees it"
            );
            Err(Error::other("finalizer cancellation did not propagate"))
        })]);
        let transcript = RecordingTranscript::new(AppendBehavior::Append);
        let (settled, facts) = with_failed_exec();
        let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
        let prepared = run.prepare().await.unwrap();
        assert_eq!(finalizer.call_count(), 1);
        assert!(signal.is_cancelled());
        assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
        assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
        assert!(prepared.payloads[0].is_error);
        assert!(transcript.appends().is_empty());
    }
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_cancellation_while_the_fallback_append_is_pending() {
    let finalizer = ScriptedFinalizer::always(empty_json(""));
    let transcript = RecordingTranscript::new(AppendBehavior::CancelDuring);
    let signal = RunSignal::new();
    let (settled, facts) = settled_successful();
    let run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    let appends = transcript.appends();
    assert_eq!(appends.len(), 1);
    assert!(
        appends[0].cancellation.is_cancelled(),
        "the append saw the queue signal"
    );
    assert!(signal.is_cancelled());
    assert_eq!(prepared.outcome, FinalizationOutcome::Failed);
    assert!(Arc::ptr_eq(&prepared.attempt, &run.settled));
    assert!(prepared.payloads.iter().all(|p| p.text != FALLBACK_TEXT));
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_honest_fallback_when_the_target_is_unresolved() {
    let finalizer = ScriptedFinalizer::failing("summary unavailable");
    let mut transcript = RecordingTranscript::new(AppendBehavior::Append);
    transcript.resolve_fails = true;
    let signal = RunSignal::new();
    let (settled, facts) = settled_successful();
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert_eq!(prepared.payloads.len(), 1);
    assert_eq!(prepared.payloads[0].text, FALLBACK_TEXT);
    assert!(transcript.appends().is_empty());
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_no_fallback_after_the_writer_is_superseded() {
    let finalizer = ScriptedFinalizer::always(empty_json(""));
    let transcript = RecordingTranscript::new(AppendBehavior::Fail(
        FallbackAppendError::WriterRebound("claimed by another run".into()),
    ));
    let signal = RunSignal::new();
    let (settled, facts) = settled_successful();
    let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    run.fence = fence();
    let err = run.prepare().await.unwrap_err();
    assert!(matches!(err, FinalizerError::WriterRebound { .. }), "{err}");
    assert_eq!(transcript.appends().len(), 1);
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_committed_writer_fence_is_used_for_the_fallback() {
    let finalizer = ScriptedFinalizer::always(empty_json(""));
    let transcript =
        RecordingTranscript::new(AppendBehavior::Respond(FallbackAppendResult::Blocked {
            reason: "writer replaced after the initial transcript commit".into(),
        }));
    let signal = RunSignal::new();
    let (settled, facts) = settled_successful();
    let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    run.fence = fence();
    let err = run.prepare().await.unwrap_err();
    assert!(matches!(err, FinalizerError::WriterRebound { .. }), "{err}");
    for call in finalizer.calls.lock().unwrap().iter() {
        assert_eq!(
            call.session, run.session,
            "the finalizer got the committed target"
        );
    }
    assert_eq!(transcript.appends()[0].fence, fence());
}

#[tokio::test]
async fn openclaw_settled_turn_finalization_no_fallback_after_the_fenced_entry_is_removed() {
    let finalizer = ScriptedFinalizer::always(empty_json(""));
    let transcript = RecordingTranscript::new(AppendBehavior::Respond(
        FallbackAppendResult::MissingActiveSession,
    ));
    let signal = RunSignal::new();
    let (settled, facts) = settled_successful();
    let mut run = Run::new(settled, facts, Some(&finalizer), &transcript, &signal);
    run.fence = fence();
    let err = run.prepare().await.unwrap_err();
    assert!(matches!(err, FinalizerError::WriterRebound { .. }), "{err}");
    assert_eq!(transcript.appends().len(), 1);
}
