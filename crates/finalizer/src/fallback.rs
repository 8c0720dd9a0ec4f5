//! The host fallback of the finalization phase: its fixed text and attribution, the host's
//! transcript seam ([`FallbackTranscript`]) and the persisted fallback row (see
//! `docs/finalization.md`, "Host fallback").

use std::sync::Arc;

use async_trait::async_trait;
use tether_core::{
    AgentMessage, AppendOutcome, AssertCurrent, Cancellation, ContentBlock, RunId, SessionTarget,
};

use crate::error::FinalizerError;
use crate::facts::WriterFence;
use crate::gate::FinalizationRequest;
use crate::orchestrate::{FinalizationInput, strip_error_fields};

/// The fixed host fallback text.
pub const FALLBACK_TEXT: &str = "The tool run finished, but no final summary was produced. I did not repeat any completed actions.";
/// Provider attribution of the persisted fallback row.
pub const FALLBACK_PROVIDER: &str = "tether";
/// Model attribution of the persisted fallback row.
pub const FALLBACK_MODEL: &str = "delivery-mirror";

/// The `message_tool_only` recovery notice (opt-in; see `docs/finalization.md`).
pub const RECOVERY_NOTICE_TEXT: &str =
    "I lost that turn before I could answer. Please resend if it still matters.";

/// The idempotency key of the persisted fallback: `<run_id>:settled-finalization-fallback`.
pub fn fallback_idempotency_key(run_id: &RunId) -> String {
    format!("{run_id}:settled-finalization-fallback")
}

/// The fallback row append request.
#[derive(Clone)]
pub struct FallbackAppend {
    /// `<run_id>:settled-finalization-fallback`.
    pub idempotency_key: String,
    /// The resolved session target.
    pub target: SessionTarget,
    /// The row: the fallback text attributed to `tether` / `delivery-mirror`.
    pub message: AgentMessage,
    /// The writer fence to enforce.
    pub fence: WriterFence,
    /// The run (queue) cancellation.
    pub cancellation: Cancellation,
    /// Checked at the commit edge: the run's admitted authority is still active.
    pub assert_still_active: AssertCurrent,
}

impl std::fmt::Debug for FallbackAppend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackAppend")
            .field("idempotency_key", &self.idempotency_key)
            .field("target", &self.target)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

/// The transcript's answer to a fallback append.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FallbackAppendResult {
    /// Written (or found under the idempotency key).
    Appended(AppendOutcome),
    /// The writer refused.
    Blocked {
        /// Why.
        reason: String,
    },
    /// No active session to write to.
    MissingActiveSession,
    /// The session writer was rebound.
    SessionRebound {
        /// Why.
        reason: String,
    },
}

/// A failed fallback append.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum FallbackAppendError {
    /// The transcript writer claim was rebound: propagates, no reply is built.
    WriterRebound(String),
    /// Any other failure: logged, the fallback is still delivered without persistence.
    Failed(tether_core::Error),
}

/// The host transcript seam for the fallback row (the host implements it).
#[async_trait]
pub trait FallbackTranscript: Send + Sync {
    /// Resolves the run's session target for the append.
    async fn resolve_target(
        &self,
        session: &SessionTarget,
    ) -> Result<SessionTarget, tether_core::Error>;

    /// Appends the fallback row idempotently under the writer fence.
    async fn append_fallback(
        &self,
        append: FallbackAppend,
    ) -> Result<FallbackAppendResult, FallbackAppendError>;
}

/// The fallback assistant identity: the source attempt's current or last assistant, the
/// settled attempt's completed assistant, then the settled-batch assistant. The gate only
/// requests finalization when a settled batch exists, so an identity is always found (the
/// reference's "no assistant identity" error cannot arise here).
pub(crate) fn fallback_identity<'a>(
    input: &'a FinalizationInput<'a>,
    request: &'a FinalizationRequest,
) -> &'a AgentMessage {
    input
        .facts
        .current_attempt_assistant
        .as_ref()
        .or(input.facts.last_assistant.as_ref())
        .or(input.settled.completed_assistant.as_ref())
        .unwrap_or(&request.batch.batch_assistant)
}

pub(crate) fn fallback_message(identity: &AgentMessage, text: &str, now_ms: i64) -> AgentMessage {
    let mut meta = identity.meta.clone();
    strip_error_fields(&mut meta);
    meta.insert("timestamp".into(), now_ms.into());
    AgentMessage {
        role: tether_core::MessageRole::Assistant,
        content: vec![ContentBlock::Text { text: text.into() }],
        id: None,
        tool_call_id: None,
        tool_name: None,
        is_error: false,
        stop_reason: Some("stop".into()),
        meta,
    }
}

/// Persists the fallback row. `Ok(None)`: not persisted (skipped or failed, logged).
pub(crate) async fn persist_fallback(
    input: &FinalizationInput<'_>,
    message: &AgentMessage,
) -> Result<Option<AppendOutcome>, FinalizerError> {
    let rebound = |message: String| FinalizerError::WriterRebound { message };
    if input.session.session_key.is_none() {
        if input.fence.is_set() {
            return Err(rebound("the fenced session has no session key".into()));
        }
        return Ok(None);
    }
    let target = match input.transcript.resolve_target(&input.session).await {
        Ok(target) => target,
        Err(err) => {
            tracing::warn!(run_id = %input.run_id, error = %err, "settled-turn fallback transcript append failed");
            return Ok(None);
        }
    };
    let mut row = message.clone();
    row.meta.insert("provider".into(), FALLBACK_PROVIDER.into());
    row.meta.insert("model".into(), FALLBACK_MODEL.into());
    let append = FallbackAppend {
        idempotency_key: fallback_idempotency_key(&input.run_id),
        target,
        message: row,
        fence: input.fence.clone(),
        cancellation: input.signal.cancellation().clone(),
        assert_still_active: Arc::clone(&input.admission),
    };
    match input.transcript.append_fallback(append).await {
        Ok(FallbackAppendResult::Appended(outcome)) => Ok(Some(outcome)),
        Ok(FallbackAppendResult::SessionRebound { reason }) => Err(rebound(reason)),
        Ok(FallbackAppendResult::Blocked { reason }) if input.fence.is_set() => {
            Err(rebound(reason))
        }
        Ok(FallbackAppendResult::MissingActiveSession) if input.fence.is_set() => {
            Err(rebound("missing active session".into()))
        }
        Ok(other) => {
            tracing::warn!(run_id = %input.run_id, result = ?other, "settled-turn fallback transcript append skipped");
            Ok(None)
        }
        Err(FallbackAppendError::WriterRebound(message)) => Err(rebound(message)),
        Err(FallbackAppendError::Failed(err)) => {
            tracing::warn!(run_id = %input.run_id, error = %err, "settled-turn fallback transcript append failed");
            Ok(None)
        }
    }
}
