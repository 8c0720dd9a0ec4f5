//! The terminal-outcome accumulator (see `docs/tool-results.md, 'The terminal-outcome accumulator'`).
//!
//! One accumulator per attempt: [`terminal_outcome_accumulator`] returns the
//! [`TerminalObserver`] the harness reports every finished tool call to, and the
//! [`HostToolFacts`] handle the host keeps for its own execution facts. Each report returns the
//! canonical [`ToolTerminalResolution`]; the harness copies `last_tool_error` into its attempt
//! result and uses `execution_started`, `executed_arguments` and `side_effect_evidence` instead
//! of deriving its own.
//!
//! Precedence: host facts outrank harness claims (a host execution record — consumed on read —
//! beats the observation in both directions; a pre-execution block and a "not started" proof
//! force "not started"). Unresolved mutating failures survive unrelated successes and clear only
//! when the same action succeeds, as decided by the [`ActionIdentity`] (default
//! [`FingerprintIdentity`], or [`ToolNameIdentity`] for "same tool name"). A suppressed message
//! send never clears an earlier failure.

mod host;
mod identity;
mod mutation;
mod render;

pub use host::{HostToolFacts, NotStartedProof, ToolResult};
pub use identity::{
    ActionCall, ActionIdentity, ActionRecord, FingerprintIdentity, ToolNameIdentity,
};
pub use mutation::{MutationFacts, classify_tool_mutation, is_read_only_command};
pub use render::{render_tool_recovery, render_tool_warning, tool_label, tool_warning_payload};

use std::sync::Arc;

use serde_json::{Map, Value};
use tether_core::{TerminalDiagnostic, ToolErrorSummary};

use super::delivery::{
    DeliveryStatus, project_plugin_message_delivery_fact, read_result_delivery_fact,
};
use super::tree::deep_clone;

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolOutcome {
    /// The call succeeded.
    Success,
    /// The call failed (or was blocked).
    Failure,
}

/// Structured failure fields reported by the harness.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFailure {
    /// The harness's claim about execution (host facts and the observation outrank it).
    pub execution_started: Option<bool>,
    /// A structured error code.
    pub error_code: Option<String>,
    /// The error text.
    pub error: Option<String>,
    /// A validation error summary.
    pub validation_error_summary: Option<String>,
    /// Whether the call timed out.
    pub timed_out: Option<bool>,
    /// Whether the failure came from result middleware.
    pub middleware_error: Option<bool>,
    /// A structured diagnostic.
    pub terminal_diagnostic: Option<TerminalDiagnostic>,
}

/// A plugin tool that declared itself side-effecting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerMutation {
    /// The owner key (e.g. `["memory-lancedb","memory_store"]`).
    pub owner_key: String,
}

/// One terminal report of a tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolTerminalObservation {
    /// The protocol call id.
    pub tool_call_id: Option<String>,
    /// The canonical tool name.
    pub tool_name: String,
    /// The arguments that reached the tool (after hooks).
    pub arguments: Option<Value>,
    /// Display metadata.
    pub meta: Option<String>,
    /// `false` only when a guard stopped the call before the implementation ran.
    pub execution_started: Option<bool>,
    /// The harness's replay-safety claim.
    pub replay_safe: Option<bool>,
    /// The outcome.
    pub outcome: ToolOutcome,
    /// Failure fields.
    pub failure: Option<ToolFailure>,
    /// Mutation facts of a native tool without a host definition (bypasses the classifier).
    pub native_mutation: Option<MutationFacts>,
    /// Owner-declared mutation.
    pub owner_mutation: Option<OwnerMutation>,
    /// The original host result or thrown error.
    pub result: Option<ToolResult>,
}

impl ToolTerminalObservation {
    /// A successful call of `tool_name` with `arguments`.
    pub fn success(tool_name: impl Into<String>, arguments: Value) -> Self {
        Self {
            tool_call_id: None,
            tool_name: tool_name.into(),
            arguments: Some(arguments),
            meta: None,
            execution_started: None,
            replay_safe: None,
            outcome: ToolOutcome::Success,
            failure: None,
            native_mutation: None,
            owner_mutation: None,
            result: None,
        }
    }

    /// A failed call of `tool_name` with `arguments` and error text.
    pub fn failure(
        tool_name: impl Into<String>,
        arguments: Value,
        error: impl Into<String>,
    ) -> Self {
        Self {
            outcome: ToolOutcome::Failure,
            failure: Some(ToolFailure {
                error: Some(error.into()),
                ..ToolFailure::default()
            }),
            ..Self::success(tool_name, arguments)
        }
    }

    /// A call whose outcome is unknown: it may have started, and nothing reports how it ended
    /// (the runtime or its process died while the tool ran, the host lost the answer).
    /// Recorded as a failure that may have started: a mutating call's effect receipt is
    /// [`EffectReceipt::Uncertain`] and its error stays the last tool error until a retry of
    /// the same action succeeds; a replay-safe read's is [`EffectReceipt::FailedNoEffect`].
    pub fn outcome_unknown(
        tool_name: impl Into<String>,
        arguments: Value,
        reason: impl Into<String>,
    ) -> Self {
        Self::failure(tool_name, arguments, reason).with_execution_started(true)
    }

    /// Sets the protocol call id.
    #[must_use]
    pub fn with_call_id(mut self, call_id: impl Into<String>) -> Self {
        self.tool_call_id = Some(call_id.into());
        self
    }

    /// Sets the display metadata (never part of the action identity).
    #[must_use]
    pub fn with_meta(mut self, meta: impl Into<String>) -> Self {
        self.meta = Some(meta.into());
        self
    }

    /// Sets whether the implementation ran (`false`: a guard stopped the call before it).
    #[must_use]
    pub fn with_execution_started(mut self, started: bool) -> Self {
        self.execution_started = Some(started);
        self
    }

    /// Sets the original host result.
    #[must_use]
    pub fn with_result(mut self, result: ToolResult) -> Self {
        self.result = Some(result);
        self
    }

    /// Declares the call a mutation of `owner_key` (its identity is the canonical form of its
    /// arguments under that owner).
    #[must_use]
    pub fn with_owner_mutation(mut self, owner_key: impl Into<String>) -> Self {
        self.owner_mutation = Some(OwnerMutation {
            owner_key: owner_key.into(),
        });
        self
    }

    /// Sets the mutation facts of a native tool without a host definition.
    #[must_use]
    pub fn with_native_mutation(mut self, facts: MutationFacts) -> Self {
        self.native_mutation = Some(facts);
        self
    }
}

/// What is known about a call's effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EffectReceipt {
    /// Host proof that the call never started.
    NotStarted,
    /// A replay-safe read completed.
    ReadCompleted,
    /// A replay-safe call failed without effect.
    FailedNoEffect,
    /// A mutating call succeeded.
    MutationCommitted,
    /// Effects unknown.
    Uncertain,
}

/// A latched "succeeded after retry" receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRecovery {
    /// The tool whose success resolved the failure.
    pub tool_name: String,
}

/// The canonical resolution of one terminal report.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolTerminalResolution {
    /// The public unresolved failure after this report.
    pub last_tool_error: Option<ToolErrorSummary>,
    /// Whether the tool implementation may have started.
    pub execution_started: bool,
    /// The arguments that actually executed (host-adjusted when recorded), if a plain object.
    pub executed_arguments: Option<Map<String, Value>>,
    /// Whether the call may have had side effects.
    pub side_effect_evidence: bool,
    /// The effect receipt.
    pub effect_receipt: EffectReceipt,
    /// The latched recovery receipt, if any.
    pub last_tool_recovery: Option<ToolRecovery>,
}

#[derive(Debug, Clone)]
struct Unresolved {
    record: ActionRecord,
    summary: ToolErrorSummary,
}

/// The error state: unresolved mutating failures (newest last), a non-mutating failure, and a
/// latched recovery receipt.
#[derive(Debug, Default)]
struct ErrorState {
    unresolved: Vec<Unresolved>,
    non_mutating: Option<ToolErrorSummary>,
    recovery: Option<(ToolRecovery, ActionRecord)>,
}

impl ErrorState {
    fn public(&self) -> Option<ToolErrorSummary> {
        self.unresolved
            .last()
            .map(|u| u.summary.clone())
            .or_else(|| self.non_mutating.clone())
    }

    fn record_failure(
        &mut self,
        identity: &dyn ActionIdentity,
        record: ActionRecord,
        summary: ToolErrorSummary,
    ) {
        if summary.mutating_action == Some(true) {
            self.non_mutating = None;
            self.unresolved
                .retain(|u| !identity.same_action(&u.record, &record));
            if self
                .recovery
                .as_ref()
                .is_some_and(|(_, r)| identity.same_action(r, &record))
            {
                self.recovery = None;
            }
            self.unresolved.push(Unresolved { record, summary });
        } else if self.unresolved.is_empty() {
            self.non_mutating = Some(summary);
        }
    }

    fn record_success(
        &mut self,
        identity: &dyn ActionIdentity,
        record: &ActionRecord,
        tool_name: &str,
    ) {
        if self.unresolved.is_empty() {
            self.non_mutating = None;
            return;
        }
        let before = self.unresolved.len();
        self.unresolved
            .retain(|u| !identity.same_action(&u.record, record));
        if self.unresolved.len() != before {
            self.recovery = Some((
                ToolRecovery {
                    tool_name: tool_name.to_owned(),
                },
                record.clone(),
            ));
        }
    }
}

/// The harness side of the accumulator: report every terminal tool call here.
#[derive(Debug)]
pub struct TerminalObserver {
    run_id: String,
    identity: Arc<dyn ActionIdentity>,
    host: HostToolFacts,
    state: ErrorState,
}

/// Creates the accumulator of one attempt: the observer for the harness and the host's facts
/// handle (keep the latter in host code; it is the only source of [`NotStartedProof`]s).
pub fn terminal_outcome_accumulator(
    run_id: impl Into<String>,
    identity: Arc<dyn ActionIdentity>,
) -> (TerminalObserver, HostToolFacts) {
    let host = HostToolFacts::default();
    (
        TerminalObserver {
            run_id: run_id.into(),
            identity,
            host: host.clone(),
            state: ErrorState::default(),
        },
        host,
    )
}

/// A timeout diagnostic from `result.details` (`timedOut: true` and a positive safe-integer
/// `timeoutMs`; `partialResults` = `results.len()` when `partial: true` and results exist).
fn timeout_diagnostic(result: Option<&ToolResult>) -> Option<TerminalDiagnostic> {
    let details = crate::results::errors::details(result?.value())?;
    if details.get("timedOut") != Some(&Value::Bool(true)) {
        return None;
    }
    let timeout_ms = details
        .get("timeoutMs")?
        .as_u64()
        .filter(|ms| *ms > 0 && *ms < (1 << 53))?;
    let partial_results = (details.get("partial") == Some(&Value::Bool(true)))
        .then(|| {
            details
                .get("results")
                .and_then(Value::as_array)
                .map(|r| r.len() as u64)
        })
        .flatten()
        .filter(|n| *n > 0);
    Some(TerminalDiagnostic::Timeout {
        timeout_ms,
        partial_results,
    })
}

/// A call skipped by steering before it started is not a new failure (test `tool_results_133`).
fn is_steering_skip(observation: &ToolTerminalObservation, execution_started: bool) -> bool {
    let details = observation
        .result
        .as_ref()
        .and_then(|r| crate::results::errors::details(r.value()));
    !execution_started
        && details
            .and_then(|d| d.get("status"))
            .and_then(Value::as_str)
            == Some("skipped")
        && details
            .and_then(|d| d.get("deniedReason"))
            .and_then(Value::as_str)
            == Some("steering")
}

fn is_suppressed_message_send(observation: &ToolTerminalObservation) -> bool {
    if !observation.tool_name.trim().eq_ignore_ascii_case("message") {
        return false;
    }
    let Some(result) = observation.result.as_ref() else {
        return false;
    };
    read_result_delivery_fact(result.value())
        .or_else(|| project_plugin_message_delivery_fact(result.value()))
        .is_some_and(|f| f.status() == DeliveryStatus::Suppressed)
}

impl TerminalObserver {
    /// The run this observer belongs to.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The public unresolved failure.
    pub fn last_tool_error(&self) -> Option<ToolErrorSummary> {
        self.state.public()
    }

    /// The latched recovery receipt.
    pub fn last_tool_recovery(&self) -> Option<ToolRecovery> {
        self.state.recovery.as_ref().map(|(r, _)| r.clone())
    }

    /// Reports one terminal tool call and returns its canonical resolution.
    pub fn observe(&mut self, observation: &ToolTerminalObservation) -> ToolTerminalResolution {
        let _span = tracing::debug_span!(
            "observe_tool_terminal",
            run_id = %self.run_id,
            tool = %observation.tool_name,
            call_id = observation.tool_call_id.as_deref().unwrap_or("")
        )
        .entered();
        let call_id = observation.tool_call_id.as_deref();
        let proof = observation
            .result
            .as_ref()
            .and_then(ToolResult::not_started_proof);
        let tracked = call_id.and_then(|id| self.host.take_execution(id));
        let blocked = call_id.is_some_and(|id| self.host.is_pre_execution_blocked(id));
        let execution_started = tracked.or(observation.execution_started).unwrap_or(true)
            && !blocked
            && proof.is_none();

        let adjusted = call_id.and_then(|id| self.host.adjusted_params(id));
        let executed_arguments: Option<Map<String, Value>> = match adjusted {
            Some(Value::Object(map)) => Some(map),
            _ => match &observation.arguments {
                Some(Value::Object(map)) => Some(
                    map.iter()
                        .map(|(k, v)| (k.clone(), deep_clone(v)))
                        .collect(),
                ),
                _ => None,
            },
        };

        let mutation = if observation.owner_mutation.is_some() {
            MutationFacts {
                mutating_action: true,
                replay_safe: false,
            }
        } else if let Some(native) = observation.native_mutation {
            native
        } else {
            classify_tool_mutation(&observation.tool_name, executed_arguments.as_ref())
        };
        let replay_safe = observation.replay_safe.unwrap_or(mutation.replay_safe);
        let mutating_action = execution_started && mutation.mutating_action;
        let record = self.identity.describe(&ActionCall {
            tool_name: &observation.tool_name,
            arguments: executed_arguments.as_ref(),
            meta: observation.meta.as_deref(),
            mutating: mutation.mutating_action,
            owner_key: observation
                .owner_mutation
                .as_ref()
                .map(|o| o.owner_key.as_str()),
        });

        match observation.outcome {
            ToolOutcome::Failure => {
                if !is_steering_skip(observation, execution_started) {
                    let failure = observation.failure.clone().unwrap_or_default();
                    let terminal_diagnostic = failure.terminal_diagnostic.clone().or_else(|| {
                        execution_started
                            .then(|| timeout_diagnostic(observation.result.as_ref()))
                            .flatten()
                    });
                    let summary = ToolErrorSummary {
                        tool_name: observation.tool_name.clone(),
                        execution_started: Some(execution_started),
                        meta: observation.meta.clone(),
                        error_code: failure.error_code,
                        error: failure.error,
                        validation_error_summary: failure.validation_error_summary,
                        timed_out: failure.timed_out,
                        middleware_error: failure.middleware_error,
                        mutating_action: Some(mutating_action),
                        terminal_diagnostic,
                    };
                    self.state
                        .record_failure(self.identity.as_ref(), record, summary);
                }
            }
            ToolOutcome::Success => {
                if !is_suppressed_message_send(observation) {
                    self.state.record_success(
                        self.identity.as_ref(),
                        &record,
                        &observation.tool_name,
                    );
                }
            }
        }

        let success = observation.outcome == ToolOutcome::Success;
        let effect_receipt = if proof.is_some() {
            EffectReceipt::NotStarted
        } else if !execution_started {
            EffectReceipt::Uncertain
        } else if replay_safe {
            if success {
                EffectReceipt::ReadCompleted
            } else {
                EffectReceipt::FailedNoEffect
            }
        } else if mutation.mutating_action && success {
            EffectReceipt::MutationCommitted
        } else {
            EffectReceipt::Uncertain
        };
        ToolTerminalResolution {
            last_tool_error: self.state.public(),
            execution_started,
            executed_arguments,
            side_effect_evidence: execution_started && !replay_safe,
            effect_receipt,
            last_tool_recovery: self.last_tool_recovery(),
        }
    }
}
