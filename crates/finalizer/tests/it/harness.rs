//! Test doubles for the orchestration tests: a scripted finalizer and a recording transcript.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tether_core::{
    AgentId, AppendOutcome, AttemptResult, Cancellation, Error, FakeClock, FinalizationAttempt,
    HarnessId, LifecycleRevision, RunId, SessionId, SessionKey, SessionTarget,
    SettledTurnFinalizer, Timestamp, TranscriptAnchor, always_current,
};
use tether_finalizer::{
    FallbackAppend, FallbackAppendError, FallbackAppendResult, FallbackTranscript,
    FinalizationInput, LifecycleOptions, PreparedFinalization, RunSignal, TurnFacts, WriterFence,
    prepare_terminal_with_settled_turn_finalization,
};

/// What the scripted finalizer does on one call.
pub(crate) type Step = Box<dyn Fn(&FinalizationAttempt) -> Result<Value, Error> + Send + Sync>;

/// What the finalizer saw on one call.
#[derive(Debug, Clone)]
pub(crate) struct SeenCall {
    pub(crate) prompt: String,
    pub(crate) try_number: u8,
    pub(crate) cancellation: Cancellation,
    pub(crate) deadline: Option<Timestamp>,
    pub(crate) session: SessionTarget,
    pub(crate) settled_ptr: usize,
}

/// A finalizer that replays scripted steps (the last step repeats).
#[derive(Default)]
pub(crate) struct ScriptedFinalizer {
    steps: Mutex<VecDeque<Step>>,
    last: Mutex<Option<Arc<Step>>>,
    pub(crate) calls: Mutex<Vec<SeenCall>>,
}

impl ScriptedFinalizer {
    pub(crate) fn new(steps: Vec<Step>) -> Self {
        Self {
            steps: Mutex::new(steps.into()),
            ..Self::default()
        }
    }

    pub(crate) fn always(value: Value) -> Self {
        Self::new(vec![Box::new(move |_| Ok(value.clone()))])
    }

    pub(crate) fn failing(message: &'static str) -> Self {
        Self::new(vec![Box::new(move |_| Err(Error::other(message)))])
    }

    pub(crate) fn call_count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

#[async_trait]
impl SettledTurnFinalizer for ScriptedFinalizer {
    async fn finalize_settled_turn(
        &self,
        attempt: FinalizationAttempt,
        settled: &AttemptResult,
    ) -> Result<Value, Error> {
        self.calls.lock().unwrap().push(SeenCall {
            prompt: attempt.prompt().to_owned(),
            try_number: attempt.try_number(),
            cancellation: attempt.cancellation().clone(),
            deadline: attempt.deadline(),
            session: attempt.session().clone(),
            settled_ptr: std::ptr::from_ref(settled) as usize,
        });
        let step = self.steps.lock().unwrap().pop_front().map(Arc::new);
        let step = match step {
            Some(step) => {
                *self.last.lock().unwrap() = Some(step.clone());
                step
            }
            None => self
                .last
                .lock()
                .unwrap()
                .clone()
                .expect("at least one step"),
        };
        step(&attempt)
    }
}

/// What the recording transcript does.
pub(crate) enum AppendBehavior {
    Append,
    Respond(FallbackAppendResult),
    Fail(FallbackAppendError),
    /// Cancels the run while the append is pending, then appends.
    CancelDuring,
}

/// A transcript that records fallback appends.
pub(crate) struct RecordingTranscript {
    pub(crate) resolve_fails: bool,
    pub(crate) behavior: AppendBehavior,
    pub(crate) appends: Mutex<Vec<FallbackAppend>>,
}

impl RecordingTranscript {
    pub(crate) fn new(behavior: AppendBehavior) -> Self {
        Self {
            resolve_fails: false,
            behavior,
            appends: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn appends(&self) -> Vec<FallbackAppend> {
        self.appends.lock().unwrap().clone()
    }
}

#[async_trait]
impl FallbackTranscript for RecordingTranscript {
    async fn resolve_target(&self, session: &SessionTarget) -> Result<SessionTarget, Error> {
        if self.resolve_fails {
            return Err(Error::other("target resolution failed"));
        }
        Ok(session.clone())
    }

    async fn append_fallback(
        &self,
        append: FallbackAppend,
    ) -> Result<FallbackAppendResult, FallbackAppendError> {
        let cancellation = append.cancellation.clone();
        (append.assert_still_active)().map_err(FallbackAppendError::Failed)?;
        self.appends.lock().unwrap().push(append);
        let appended = Ok(FallbackAppendResult::Appended(AppendOutcome {
            appended: true,
            anchor: TranscriptAnchor(7),
        }));
        match &self.behavior {
            AppendBehavior::Append => appended,
            AppendBehavior::Respond(r) => Ok(r.clone()),
            AppendBehavior::Fail(e) => Err(e.clone()),
            AppendBehavior::CancelDuring => {
                cancellation.cancel();
                appended
            }
        }
    }
}

/// The committed target of the tests.
pub(crate) fn target(with_key: bool) -> SessionTarget {
    SessionTarget {
        agent_id: AgentId::new("main").unwrap(),
        session_key: with_key.then(|| SessionKey::new("agent:main:peer").unwrap()),
        session_id: SessionId::new("sess-1").unwrap(),
    }
}

/// A writer fence at revision 3, writer `run-settled`.
pub(crate) fn fence() -> WriterFence {
    WriterFence {
        expected_lifecycle_revision: Some(LifecycleRevision::new(3)),
        expected_writer_run_id: Some("run-settled".into()),
    }
}

/// One orchestration run's configuration.
pub(crate) struct Run<'a> {
    pub(crate) settled: Arc<AttemptResult>,
    pub(crate) facts: TurnFacts,
    pub(crate) finalizer: Option<&'a dyn SettledTurnFinalizer>,
    pub(crate) transcript: &'a RecordingTranscript,
    pub(crate) signal: &'a RunSignal,
    pub(crate) session: SessionTarget,
    pub(crate) fence: WriterFence,
    pub(crate) try_timeout: Duration,
    pub(crate) diagnostics: LifecycleOptions,
    pub(crate) clock: FakeClock,
    pub(crate) admission: tether_core::AssertCurrent,
    pub(crate) model_policy: Option<tether_finalizer::ModelPolicyGate<'a>>,
}

impl<'a> Run<'a> {
    pub(crate) fn new(
        settled: AttemptResult,
        facts: TurnFacts,
        finalizer: Option<&'a dyn SettledTurnFinalizer>,
        transcript: &'a RecordingTranscript,
        signal: &'a RunSignal,
    ) -> Self {
        Self {
            settled: Arc::new(settled),
            facts,
            finalizer,
            transcript,
            signal,
            session: target(true),
            fence: WriterFence::default(),
            try_timeout: Duration::from_secs(60),
            diagnostics: LifecycleOptions::default(),
            clock: FakeClock::new(Timestamp::from_millis(1_000)),
            admission: always_current(),
            model_policy: None,
        }
    }

    pub(crate) async fn prepare(
        &self,
    ) -> Result<PreparedFinalization, tether_finalizer::FinalizerError> {
        let input = FinalizationInput {
            run_id: RunId::new("run-settled").unwrap(),
            harness_id: HarnessId::new("codex").unwrap(),
            finalizer: self.finalizer,
            settled: Arc::clone(&self.settled),
            facts: &self.facts,
            session: self.session.clone(),
            fence: self.fence.clone(),
            signal: self.signal,
            try_timeout: self.try_timeout,
            clock: &self.clock,
            transcript: self.transcript,
            admission: self.admission.clone(),
            diagnostics: self.diagnostics,
            model_policy: self.model_policy,
        };
        prepare_terminal_with_settled_turn_finalization(&input).await
    }
}
