//! One finalization try through the harness (see `docs/finalization.md`) and the lifecycle diagnostics
//! recorded around it (see `docs/finalization.md`).

use tether_core::{AttemptResult, FinalizationAttempt, HarnessId, SettledTurnFinalizer};
use tracing::Instrument;

use crate::error::FinalizerError;
use crate::evidence::ItemLifecycle;
use crate::result::{
    DiagnosticTrace, SettledTurnFinalizationResult, validate_settled_turn_finalization_result,
};

/// The operation name of a finalization try.
pub const SETTLED_TOOL_FINALIZATION_OPERATION: &str = "settled-tool-finalization";

/// A lifecycle phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiagnosticPhase {
    /// The request is being sent.
    Send,
    /// The answer is being resolved.
    Resolve,
}

/// How a harness run completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunCompletion {
    /// Completed (covers both `answered` and `empty`).
    Completed,
    /// The try failed.
    Error,
}

/// A diagnostic event recorded by the finalization lifecycle.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum DiagnosticEvent {
    /// A harness run started, in finalization mode.
    HarnessRunStarted {
        /// The harness.
        harness: String,
        /// The operation (`settled-tool-finalization`).
        operation: &'static str,
        /// The try number.
        try_number: u8,
    },
    /// The agent run started (only when agent-run diagnostics are enabled).
    RunStarted {
        /// The run.
        run_id: String,
    },
    /// A phase began.
    Phase(DiagnosticPhase),
    /// The harness run completed.
    HarnessRunCompleted {
        /// Completed or error.
        outcome: RunCompletion,
        /// Always 0/0/0: finalization runs no tools.
        item_lifecycle: ItemLifecycle,
        /// The visible answer, when content capture is on.
        final_response: Option<String>,
    },
    /// The try failed.
    RunError {
        /// The error text.
        message: String,
    },
}

/// Diagnostic options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LifecycleOptions {
    /// Capture content (the final response) in the completed event.
    pub capture_content: bool,
    /// Emit the agent-run `run.started` event too.
    pub agent_run_diagnostics: bool,
}

/// The lifecycle outcome of one try: answered or empty. Everything else is an error.
#[derive(Debug, Clone, PartialEq)]
pub enum LifecycleOutcome {
    /// A visible answer.
    Answered(SettledTurnFinalizationResult),
    /// No visible answer (blank or the silent token).
    Empty {
        /// The result.
        result: SettledTurnFinalizationResult,
        /// The text was the silent token.
        silent: bool,
    },
}

impl LifecycleOutcome {
    /// The result.
    pub fn result(&self) -> &SettledTurnFinalizationResult {
        match self {
            Self::Answered(result) | Self::Empty { result, .. } => result,
        }
    }
}

fn finalization_trace(attempt: &FinalizationAttempt) -> DiagnosticTrace {
    let mut trace = serde_json::Map::new();
    trace.insert("run_id".into(), attempt.run_id().as_str().into());
    trace.insert(
        "operation".into(),
        SETTLED_TOOL_FINALIZATION_OPERATION.into(),
    );
    trace.insert("try".into(), attempt.try_number().into());
    DiagnosticTrace(trace)
}

/// Runs one finalization try through the harness's finalizer, validates the raw result, maps
/// the empty outcome, fills the diagnostic trace, and records the lifecycle events.
///
/// A harness without a finalizer fails with [`FinalizerError::CannotFinalize`] before any event.
pub async fn run_lifecycle_finalization(
    harness_id: &HarnessId,
    finalizer: Option<&dyn SettledTurnFinalizer>,
    attempt: FinalizationAttempt,
    settled: &AttemptResult,
    options: LifecycleOptions,
    events: &mut Vec<DiagnosticEvent>,
) -> Result<LifecycleOutcome, FinalizerError> {
    let Some(finalizer) = finalizer else {
        return Err(FinalizerError::CannotFinalize {
            harness: harness_id.to_string(),
        });
    };
    let span = tracing::info_span!(
        "settled_turn_finalization_try",
        harness = %harness_id,
        run_id = %attempt.run_id(),
        try_number = attempt.try_number()
    );
    events.push(DiagnosticEvent::HarnessRunStarted {
        harness: harness_id.to_string(),
        operation: SETTLED_TOOL_FINALIZATION_OPERATION,
        try_number: attempt.try_number(),
    });
    if options.agent_run_diagnostics {
        events.push(DiagnosticEvent::RunStarted {
            run_id: attempt.run_id().to_string(),
        });
    }
    events.push(DiagnosticEvent::Phase(DiagnosticPhase::Send));
    let trace = finalization_trace(&attempt);
    let raw = finalizer
        .finalize_settled_turn(attempt, settled)
        .instrument(span)
        .await;
    events.push(DiagnosticEvent::Phase(DiagnosticPhase::Resolve));
    let outcome = raw.map_err(FinalizerError::from).and_then(|raw| {
        match validate_settled_turn_finalization_result(&raw) {
            Ok(result) => Ok(LifecycleOutcome::Answered(result)),
            Err(FinalizerError::Empty { result, silent }) => Ok(LifecycleOutcome::Empty {
                result: *result,
                silent,
            }),
            Err(err) => Err(err),
        }
    });
    match outcome {
        Ok(mut outcome) => {
            let result = match &mut outcome {
                LifecycleOutcome::Answered(result) | LifecycleOutcome::Empty { result, .. } => {
                    result
                }
            };
            if result.diagnostic_trace.is_none() {
                result.diagnostic_trace = Some(trace);
            }
            events.push(DiagnosticEvent::HarnessRunCompleted {
                outcome: RunCompletion::Completed,
                item_lifecycle: ItemLifecycle::default(),
                final_response: options
                    .capture_content
                    .then(|| outcome.result().visible_text()),
            });
            Ok(outcome)
        }
        Err(err) => {
            events.push(DiagnosticEvent::RunError {
                message: err.to_string(),
            });
            events.push(DiagnosticEvent::HarnessRunCompleted {
                outcome: RunCompletion::Error,
                item_lifecycle: ItemLifecycle::default(),
                final_response: None,
            });
            Err(err)
        }
    }
}
