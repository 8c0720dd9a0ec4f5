//! What the host skips during and after a finalization (see `docs/finalization.md`).

use crate::facts::ReplyExpectation;
use crate::orchestrate::FinalizationOutcome;

/// Host hook points and ambient contributors of an ordinary turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HookPoint {
    /// Plugin prompt mutation.
    PluginPromptMutation,
    /// `before_agent_run`.
    BeforeAgentRun,
    /// The LLM input hook.
    LlmInput,
    /// The LLM output hook.
    LlmOutput,
    /// The terminal revision pass (`before_agent_finalize`).
    BeforeAgentFinalize,
    /// `agent_end`.
    AgentEnd,
    /// Hooks run before a transcript message is written.
    BeforeMessageWrite,
    /// System-prompt contributors (provider, plugin, ambient context).
    SystemPromptContributors,
    /// Bootstrap context.
    BootstrapContext,
    /// Orphan tool-call repair.
    OrphanRepair,
    /// Internal-event wrapping and origin context of the prompt.
    PromptWrapping,
    /// Trajectory recording.
    Trajectory,
}

impl HookPoint {
    /// Every hook point.
    pub const ALL: [Self; 12] = [
        Self::PluginPromptMutation,
        Self::BeforeAgentRun,
        Self::LlmInput,
        Self::LlmOutput,
        Self::BeforeAgentFinalize,
        Self::AgentEnd,
        Self::BeforeMessageWrite,
        Self::SystemPromptContributors,
        Self::BootstrapContext,
        Self::OrphanRepair,
        Self::PromptWrapping,
        Self::Trajectory,
    ];

    /// Whether the hook runs during a settled-tool finalization try: never. The prompt is sent
    /// exactly as the host built it, with an empty system prompt and no contributors.
    pub fn runs_during_finalization(self) -> bool {
        false
    }
}

/// How the terminal resolver treats the run after the finalization phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalResolutionPolicy {
    /// Whether finalization was attempted (any outcome but `not-attempted`): the outcome is
    /// then terminal for the user turn.
    pub finalization_attempted: bool,
    /// Reasoning-only continuation may run.
    pub reasoning_only_continuation: bool,
    /// The missing-assistant same-prompt retry may run.
    pub missing_assistant_retry: bool,
    /// The compaction continuation may run.
    pub compaction_continuation: bool,
    /// The `before_agent_finalize` revision pass may run.
    pub before_agent_finalize_revision: bool,
    /// Model fallback and auth-profile rotation may run.
    pub model_fallback_and_auth_rotation: bool,
    /// The silent-empty check accepts only an explicit silent reply.
    pub only_explicit_silent_reply: bool,
    /// A `completed-empty` outcome surfaces the incomplete-turn text.
    pub surface_incomplete_for_completed_empty: bool,
    /// The pending auth-profile failure reason is cleared.
    pub clear_auth_profile_failure: bool,
}

impl TerminalResolutionPolicy {
    /// The policy after a finalization phase with `outcome`.
    pub fn for_outcome(outcome: FinalizationOutcome, reply: ReplyExpectation) -> Self {
        let attempted = outcome != FinalizationOutcome::NotAttempted;
        Self {
            finalization_attempted: attempted,
            reasoning_only_continuation: !attempted,
            missing_assistant_retry: !attempted,
            compaction_continuation: !attempted,
            before_agent_finalize_revision: !attempted,
            model_fallback_and_auth_rotation: !attempted,
            only_explicit_silent_reply: attempted,
            surface_incomplete_for_completed_empty: outcome == FinalizationOutcome::CompletedEmpty
                && reply == ReplyExpectation::Required,
            clear_auth_profile_failure: matches!(
                outcome,
                FinalizationOutcome::Answered | FinalizationOutcome::CompletedEmpty
            ),
        }
    }
}
