//! The engine-reuse finalizer (the built-in pattern and the projection of `docs/finalization.md`; S25, S45).

use std::sync::Mutex;

use async_trait::async_trait;
use tether_core::{
    AgentMessage, AttemptResult, Cancellation, Error, FinalizationAttempt, MessageRole, RunId,
    RuntimeErrorKind, SettledTurnFinalizationContext, SettledTurnFinalizer, ToolMeta,
};
use tether_finalizer::{
    EngineFinalizer, FinalizationEngine, FinalizationOutcome, FinalizerError, FullAttemptEvidence,
    RestrictedEngineParams, RunSignal, SETTLED_TOOL_FINALIZATION_INSTRUCTION,
};

use crate::gate::settled_write;
use crate::harness::{AppendBehavior, RecordingTranscript, Run, target};
use crate::support::{assistant, runtime_kind};

/// An engine double with a raw transcript: it persists user prompts unless suppressed.
struct Engine {
    answer: &'static str,
    tool_activity: bool,
    seen: Mutex<Vec<RestrictedEngineParams>>,
    raw_transcript: Mutex<Vec<AgentMessage>>,
}

impl Engine {
    fn new(answer: &'static str) -> Self {
        Self {
            answer,
            tool_activity: false,
            seen: Mutex::new(Vec::new()),
            raw_transcript: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl FinalizationEngine for Engine {
    fn label(&self) -> &str {
        "OpenClaw"
    }

    async fn run_restricted(
        &self,
        params: RestrictedEngineParams,
    ) -> Result<FullAttemptEvidence, Error> {
        let mut raw = self.raw_transcript.lock().unwrap();
        if raw.is_empty() {
            raw.extend(params.transcript.iter().cloned());
        }
        if !params.suppress_next_user_message_persistence {
            raw.push(AgentMessage::text(MessageRole::User, params.prompt.clone()));
        }
        let answer = assistant(self.answer, "stop");
        raw.push(answer.clone());
        drop(raw);
        self.seen.lock().unwrap().push(params);
        let mut evidence = FullAttemptEvidence::default();
        evidence.attempt.completed_assistant = Some(answer);
        if self.tool_activity {
            evidence.attempt.tool_metas = vec![ToolMeta {
                tool_name: "write".into(),
                meta: None,
                is_error: false,
            }];
        }
        Ok(evidence)
    }
}

fn try_attempt() -> FinalizationAttempt {
    FinalizationAttempt::new(
        RunId::new("run-1").unwrap(),
        SETTLED_TOOL_FINALIZATION_INSTRUCTION.into(),
        target(true),
        Cancellation::new(),
        None,
        1,
    )
}

/// A settled write turn whose finalization context is its own transcript.
fn settled_with_transcript_context() -> AttemptResult {
    let (mut settled, _) = settled_write();
    settled.settled_turn_finalization_context = Some(SettledTurnFinalizationContext::Transcript(
        settled.messages_snapshot.clone().into(),
    ));
    settled
}

#[tokio::test]
async fn engine_runs_behind_the_restricted_allow_list() {
    let finalizer = EngineFinalizer::new(Engine::new("Recovered final answer."));
    let settled = settled_with_transcript_context();
    let raw = finalizer
        .finalize_settled_turn(try_attempt(), &settled)
        .await
        .unwrap();
    assert_eq!(
        raw["assistant"]["content"][0]["text"],
        "Recovered final answer."
    );
    let params = finalizer.engine().seen.lock().unwrap()[0].clone();
    assert_eq!(params.operation, "settled-tool-finalization");
    assert!(params.disable_tools && params.disable_trajectory);
    assert!(
        params.skip_prepared_user_turn_message && params.suppress_next_user_message_persistence
    );
    assert!(!params.initial_replay.had_potential_side_effects && params.initial_replay.replay_safe);
    assert_eq!(&params.transcript[..], &settled.messages_snapshot[..]);
    assert_eq!(params.prompt, SETTLED_TOOL_FINALIZATION_INSTRUCTION);
    // S25: the raw transcript has the original request and the answer, not the host prompt.
    let transcript = finalizer.engine().raw_transcript.lock().unwrap().clone();
    assert!(transcript.iter().any(|m| m.visible_text() == "save a note"));
    assert!(
        transcript
            .iter()
            .any(|m| m.visible_text() == "Recovered final answer.")
    );
    assert!(
        !transcript
            .iter()
            .any(|m| m.visible_text() == SETTLED_TOOL_FINALIZATION_INSTRUCTION)
    );
}

#[tokio::test]
async fn engine_refuses_unavailable_or_foreign_context_before_running() {
    let finalizer = EngineFinalizer::new(Engine::new("x"));
    let settled = AttemptResult {
        settled_turn_finalization_context: Some(SettledTurnFinalizationContext::Unavailable),
        ..AttemptResult::default()
    };
    let err = finalizer
        .finalize_settled_turn(try_attempt(), &settled)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "OpenClaw settled-turn finalization context is unavailable"
    );
    assert_eq!(runtime_kind(&err), Some(RuntimeErrorKind::Refused));
    assert!(finalizer.engine().seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn engine_answer_outside_the_contract_is_a_refused_run_keeping_the_finalizer_error() {
    let mut engine = Engine::new("Done.");
    engine.tool_activity = true;
    let finalizer = EngineFinalizer::new(engine);
    let settled = settled_with_transcript_context();
    let err = finalizer
        .finalize_settled_turn(try_attempt(), &settled)
        .await
        .unwrap_err();
    assert_eq!(
        runtime_kind(&err),
        Some(RuntimeErrorKind::Refused),
        "{err:?}"
    );
    // The projection's own error is the cause, for a caller that wants to know why.
    let Error::Runtime {
        cause: Some(cause), ..
    } = &err
    else {
        panic!("no cause kept: {err:?}");
    };
    let projection = cause
        .downcast_ref::<FinalizerError>()
        .expect("the cause is the finalizer's error");
    assert_eq!(err.to_string(), projection.to_string());
    assert_eq!(finalizer.engine().seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn engine_capability_activity_falls_back_and_blank_answers_retry() {
    let mut engine = Engine::new("Done.");
    engine.tool_activity = true;
    let finalizer = EngineFinalizer::new(engine);
    let transcript = RecordingTranscript::new(AppendBehavior::Append);
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let prepared = Run::new(settled, facts, Some(&finalizer), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert_eq!(
        prepared.outcome,
        FinalizationOutcome::Failed,
        "a projection rejection is a failed try"
    );
    assert_eq!(finalizer.engine().seen.lock().unwrap().len(), 1);
    let blank = EngineFinalizer::new(Engine::new("  "));
    let signal = RunSignal::new();
    let (settled, facts) = settled_write();
    let prepared = Run::new(settled, facts, Some(&blank), &transcript, &signal)
        .prepare()
        .await
        .unwrap();
    assert_eq!(prepared.outcome, FinalizationOutcome::CompletedEmpty);
    assert_eq!(
        blank.engine().seen.lock().unwrap().len(),
        2,
        "an empty projection is retried once"
    );
}
