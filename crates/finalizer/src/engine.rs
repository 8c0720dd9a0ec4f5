//! A finalizer for harnesses that reuse their ordinary attempt engine (see `docs/finalization.md`; the
//! built-in harness pattern): the engine runs behind a restricted allow-list of parameters and
//! its full attempt result is projected into the narrow result (see `docs/finalization.md`, 'The narrow result').
//!
//! Core never implements finalization by calling `run_attempt` with a disable-tools hint: the
//! engine receives [`RestrictedEngineParams`], which holds only the transcript, the prompt, the
//! session target, the try's cancellation and deadline, and fixed restriction flags.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tether_core::{
    AgentMessage, AttemptResult, Cancellation, Cause, Error, FinalizationAttempt, ReplayMetadata,
    RunId, RuntimeErrorKind, SessionTarget, SettledTurnFinalizationContext, SettledTurnFinalizer,
    Timestamp,
};

use crate::lifecycle::SETTLED_TOOL_FINALIZATION_OPERATION;
use crate::projection::{FullAttemptEvidence, project_settled_turn_finalization_attempt_result};

/// The allow-listed parameters of one engine run for finalization.
#[derive(Debug, Clone)]
pub struct RestrictedEngineParams {
    /// Always `settled-tool-finalization`.
    pub operation: &'static str,
    /// The run.
    pub run_id: RunId,
    /// The host prompt (host-private: never persisted into the raw transcript).
    pub prompt: String,
    /// The committed session target.
    pub session: SessionTarget,
    /// The transcript through the settled tool-result boundary (frozen).
    pub transcript: Arc<[AgentMessage]>,
    /// This try's cancellation.
    pub cancellation: Cancellation,
    /// This try's deadline.
    pub deadline: Option<Timestamp>,
    /// Always true.
    pub disable_tools: bool,
    /// Always true.
    pub disable_trajectory: bool,
    /// Always true: the prepared user turn is not re-sent.
    pub skip_prepared_user_turn_message: bool,
    /// Always true: the prompt is not persisted as a user message.
    pub suppress_next_user_message_persistence: bool,
    /// Always clean: no replay invalidation, no side effects.
    pub initial_replay: ReplayMetadata,
}

impl RestrictedEngineParams {
    /// Builds the parameters of one try. The transcript is the settled `Transcript` context,
    /// or the settled snapshot when the turn carries no context; an `Unavailable` or foreign
    /// `Harness` context is refused before any engine work.
    pub fn for_try(
        attempt: &FinalizationAttempt,
        settled: &AttemptResult,
        label: &str,
    ) -> Result<Self, Error> {
        let transcript: Arc<[AgentMessage]> = match &settled.settled_turn_finalization_context {
            Some(SettledTurnFinalizationContext::Transcript(messages)) => Arc::clone(messages),
            None => Arc::from(settled.messages_snapshot.clone()),
            Some(_) => {
                return Err(Error::runtime(
                    RuntimeErrorKind::Refused,
                    format!("{label} settled-turn finalization context is unavailable"),
                    None,
                ));
            }
        };
        Ok(Self {
            operation: SETTLED_TOOL_FINALIZATION_OPERATION,
            run_id: attempt.run_id().clone(),
            prompt: attempt.prompt().to_owned(),
            session: attempt.session().clone(),
            transcript,
            cancellation: attempt.cancellation().clone(),
            deadline: attempt.deadline(),
            disable_tools: true,
            disable_trajectory: true,
            skip_prepared_user_turn_message: true,
            suppress_next_user_message_persistence: true,
            initial_replay: ReplayMetadata {
                had_potential_side_effects: false,
                replay_safe: true,
            },
        })
    }
}

/// A harness's attempt engine, run behind the restricted parameters.
#[async_trait]
pub trait FinalizationEngine: Send + Sync {
    /// The label used in messages.
    fn label(&self) -> &str;

    /// Runs the engine once and reports its full attempt evidence.
    async fn run_restricted(
        &self,
        params: RestrictedEngineParams,
    ) -> Result<FullAttemptEvidence, Error>;
}

/// A [`SettledTurnFinalizer`] over a [`FinalizationEngine`]: restricted parameters in, the
/// projected narrow result out.
#[derive(Debug)]
pub struct EngineFinalizer<E> {
    engine: E,
}

impl<E: FinalizationEngine> EngineFinalizer<E> {
    /// Wraps an engine.
    pub fn new(engine: E) -> Self {
        Self { engine }
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }
}

#[async_trait]
impl<E: FinalizationEngine> SettledTurnFinalizer for EngineFinalizer<E> {
    async fn finalize_settled_turn(
        &self,
        attempt: FinalizationAttempt,
        settled: &AttemptResult,
    ) -> Result<Value, Error> {
        let params = RestrictedEngineParams::for_try(&attempt, settled, self.engine.label())?;
        let evidence = self.engine.run_restricted(params).await?;
        match project_settled_turn_finalization_attempt_result(&evidence) {
            Ok(result) => Ok(result.to_value()),
            // An empty answer is a valid raw result: the host's validator maps it to `empty`.
            Err(crate::FinalizerError::Empty { result, .. }) => Ok(result.to_value()),
            // The engine's answer is not a final answer (a tool call, a field outside the
            // contract, …): the run is refused; the finalizer's own error stays the cause.
            Err(err) => Err(Error::runtime(
                RuntimeErrorKind::Refused,
                err.to_string(),
                Some(Cause::new(err)),
            )),
        }
    }
}
