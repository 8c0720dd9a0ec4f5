//! the side-effect-aware incomplete-turn warning, the hooks skipped
//! during finalization, and the terminal-resolution policy after it.

use tether_core::{AttemptResult, AttemptTerminal};
use tether_finalizer::{
    FinalizationOutcome, HookPoint, IncompleteTurnInput, Liveness, ReplyExpectation, RunSignal,
    TerminalResolutionPolicy, TurnFacts, resolve_incomplete_turn,
};
use tether_finalizer::{
    INCOMPLETE_TURN_MESSAGE, INCOMPLETE_TURN_TEXT, SIDE_EFFECT_NOTE, incomplete_turn_text,
};

use crate::gate::settled_write;
use crate::harness::{AppendBehavior, RecordingTranscript, Run};

fn input<'a>(attempt: &'a AttemptResult, facts: &'a TurnFacts) -> IncompleteTurnInput<'a> {
    IncompleteTurnInput {
        attempt,
        facts,
        usable_payload: false,
        assistant_incomplete: false,
        replay_state_side_effects: false,
        failure_copy: None,
        intentional_termination: false,
        tool_authored_final_reply: false,
        completion_message_spawn: false,
        replay_safe_provider_refusal: false,
    }
}

#[test]
fn incomplete_turn_text_is_side_effect_aware() {
    assert_eq!(
        incomplete_turn_text(false, None),
        "⚠️ Agent couldn't generate a response. Please try again."
    );
    assert_eq!(
        incomplete_turn_text(true, None),
        "⚠️ Agent couldn't generate a response. Note: some tool actions may have already been executed — please verify before retrying."
    );
    assert_eq!(
        incomplete_turn_text(false, Some("⚠️ Model overloaded.")),
        "⚠️ Model overloaded."
    );
    assert_eq!(
        incomplete_turn_text(true, Some("⚠️ Model overloaded.")),
        format!("⚠️ Model overloaded.{SIDE_EFFECT_NOTE}")
    );
}

#[test]
fn incomplete_turn_is_surfaced_with_its_error_record() {
    let (mut attempt, facts) = settled_write();
    let plain = resolve_incomplete_turn(&input(&attempt, &facts)).unwrap();
    assert_eq!(plain.payload.text, INCOMPLETE_TURN_TEXT);
    assert!(plain.payload.is_error);
    assert_eq!(plain.error.kind, "incomplete_turn");
    assert_eq!(plain.error.message, INCOMPLETE_TURN_MESSAGE);
    assert!(plain.error.fallback_safe);
    assert_eq!(plain.liveness, Liveness::Abandoned);
    assert!(plain.replay_invalid);
    attempt.replay.had_potential_side_effects = true;
    let side = resolve_incomplete_turn(&input(&attempt, &facts)).unwrap();
    assert!(side.payload.text.ends_with(SIDE_EFFECT_NOTE));
    assert!(!side.error.fallback_safe);
    let refusal = resolve_incomplete_turn(&IncompleteTurnInput {
        replay_safe_provider_refusal: true,
        ..input(&attempt, &facts)
    })
    .unwrap();
    assert!(!refusal.replay_invalid);
}

#[test]
fn incomplete_turn_is_not_emitted_when_the_turn_is_accounted_for() {
    let (attempt, facts) = settled_write();
    let base = input(&attempt, &facts);
    let flags: Vec<IncompleteTurnInput<'_>> = vec![
        IncompleteTurnInput {
            usable_payload: true,
            ..base
        },
        IncompleteTurnInput {
            intentional_termination: true,
            ..base
        },
        IncompleteTurnInput {
            tool_authored_final_reply: true,
            ..base
        },
        IncompleteTurnInput {
            completion_message_spawn: true,
            ..base
        },
    ];
    for i in flags {
        assert!(resolve_incomplete_turn(&i).is_none());
    }
    // A usable payload with an incomplete assistant still surfaces.
    assert!(
        resolve_incomplete_turn(&IncompleteTurnInput {
            usable_payload: true,
            assistant_incomplete: true,
            ..base
        })
        .is_some()
    );
    let attempt_cases: Vec<fn(&mut AttemptResult)> = vec![
        |a| a.terminal = AttemptTerminal::Aborted,
        |a| a.yield_detected = true,
        |a| a.last_tool_error = Some(tether_core::ToolErrorSummary::default()),
        |a| a.tool_media_urls = vec!["file:///a.png".into()],
        |a| a.delivery.did_deliver_source_reply_via_message_tool = true,
    ];
    for case in attempt_cases {
        let mut a = attempt.clone();
        case(&mut a);
        assert!(resolve_incomplete_turn(&input(&a, &facts)).is_none());
    }
    let fact_cases: Vec<fn(&mut TurnFacts)> = vec![
        |f| f.externally_aborted = true,
        |f| f.client_tool_calls = 1,
        |f| f.did_send_deterministic_approval_prompt = true,
        |f| f.has_tool_media_block_reply = true,
        |f| f.async_activity = true,
    ];
    for case in fact_cases {
        let mut f = facts.clone();
        case(&mut f);
        assert!(resolve_incomplete_turn(&input(&attempt, &f)).is_none());
    }
    // A normal stop with unfinished lifecycle.
    let mut a = attempt.clone();
    a.completed_assistant = Some(crate::support::assistant("", "stop"));
    let mut f = facts.clone();
    f.item_lifecycle = tether_finalizer::ItemLifecycle::new(1, 0, 1);
    assert!(resolve_incomplete_turn(&input(&a, &f)).is_none());
}

#[tokio::test]
async fn absent_capability_without_a_context_keeps_the_incomplete_turn_error() {
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (mut settled, facts) = settled_write();
    settled.replay.had_potential_side_effects = true;
    let run = Run::new(settled, facts.clone(), None, &transcript, &signal);
    let prepared = run.prepare().await.unwrap();
    assert_eq!(prepared.outcome, FinalizationOutcome::NotAttempted);
    assert!(transcript.appends().is_empty());
    let warning = resolve_incomplete_turn(&input(&prepared.attempt, &facts)).unwrap();
    assert!(warning.payload.text.ends_with(SIDE_EFFECT_NOTE));
}

#[test]
fn no_host_hook_runs_during_finalization() {
    for hook in HookPoint::ALL {
        assert!(!hook.runs_during_finalization(), "{hook:?}");
    }
}

#[test]
fn an_attempted_finalization_is_terminal_for_the_user_turn() {
    let not = TerminalResolutionPolicy::for_outcome(
        FinalizationOutcome::NotAttempted,
        ReplyExpectation::Required,
    );
    assert!(
        !not.finalization_attempted
            && not.missing_assistant_retry
            && not.reasoning_only_continuation
    );
    assert!(
        not.compaction_continuation
            && not.before_agent_finalize_revision
            && not.model_fallback_and_auth_rotation
    );
    for outcome in [
        FinalizationOutcome::Answered,
        FinalizationOutcome::CompletedEmpty,
        FinalizationOutcome::Failed,
        FinalizationOutcome::SilentFallback,
    ] {
        let p = TerminalResolutionPolicy::for_outcome(outcome, ReplyExpectation::Required);
        assert!(p.finalization_attempted);
        assert!(
            !p.reasoning_only_continuation
                && !p.missing_assistant_retry
                && !p.compaction_continuation
        );
        assert!(!p.before_agent_finalize_revision && !p.model_fallback_and_auth_rotation);
        assert!(p.only_explicit_silent_reply);
        assert_eq!(
            p.clear_auth_profile_failure,
            matches!(
                outcome,
                FinalizationOutcome::Answered | FinalizationOutcome::CompletedEmpty
            )
        );
    }
    let optional = TerminalResolutionPolicy::for_outcome(
        FinalizationOutcome::CompletedEmpty,
        ReplyExpectation::Optional,
    );
    assert!(!optional.surface_incomplete_for_completed_empty);
}
