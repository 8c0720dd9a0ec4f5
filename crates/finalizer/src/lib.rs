//! # tether-finalizer
//!
//! Settled-turn finalization: one final visible answer after a tool-only turn, through a
//! capability-free replay that cannot repeat or extend the completed work, with a host fallback
//! (the contract is in `docs/finalization.md`).
//!
//! The crate holds (by private module; every public item is at the crate root):
//! - `result`: the narrow result with exactly six allowed fields and its validator;
//! - `projection`: the projection of a full attempt result into a narrow result, for harnesses
//!   that reuse their attempt engine (`evidence` holds the extra attempt facts it inspects);
//! - `bounded`: the bounded projection of a settled turn's history with its identity and
//!   provenance proof, limits enforced while reading;
//! - `capture`: the context producers (the built-in transcript producer and the bounded,
//!   provenance-checked capture);
//! - `facts` and `gate`: the host's turn facts and the request gate with the settled-batch
//!   evidence and the host prompt;
//! - `lifecycle`: one try through the harness with its diagnostics;
//! - `orchestrate`: the once-per-run finalization phase (tries, silence policy, cancellation,
//!   the persisted host fallback, the rebuilt terminal);
//! - `policy`: the hooks skipped during finalization and the terminal-resolution policy after
//!   it; `incomplete`: the side-effect-aware incomplete-turn warning;
//! - `bounded_finalizer`: a reusable finalizer for harnesses that replay their captured
//!   bounded projection in an isolated native turn; `engine`: one for harnesses that reuse
//!   their attempt engine behind a restricted allow-list and project its result.
//!
//! It never holds or passes a tool surface: the attempt it hands a harness is
//! [`tether_core::FinalizationAttempt`], which is plain data (`restricted` documents and
//! proves the type-level guarantee with compile-fail examples).
//!
//! ```
//! use serde_json::json;
//! use tether_finalizer::{FinalizerError, validate_settled_turn_finalization_result};
//!
//! let ok = json!({"assistant": {"role": "assistant", "content": [{"type": "text", "text": "done"}], "stop_reason": "stop"}});
//! assert_eq!(validate_settled_turn_finalization_result(&ok)?.visible_text(), "done");
//!
//! let extra = json!({"assistant": ok["assistant"].clone(), "tools": null});
//! let err = validate_settled_turn_finalization_result(&extra).unwrap_err();
//! assert_eq!(err.to_string(), "Settled-turn finalization returned unsupported result field: tools");
//! # Ok::<(), FinalizerError>(())
//! ```

mod bounded;
mod bounded_finalizer;
mod capture;
mod engine;
mod error;
mod evidence;
mod facts;
mod fallback;
mod gate;
mod incomplete;
mod lifecycle;
mod model_policy;
mod orchestrate;
mod policy;
pub mod prelude;
mod projection;
mod restricted;
mod result;
mod signal;

pub use bounded::{
    BoundedProjection, HistoryReadError, HistorySource, ProjectedItem, ProjectionLimits,
    ProvenanceInput, RejectionReason, project_current_evidence, project_settled_turn_history,
};
pub use bounded_finalizer::{
    BoundedTurnFinalizer, BoundedTurnOutput, BoundedTurnRequest, BoundedTurnRuntime, Isolation,
    MirrorRequest, MirroredRow, NativeItem, OwnedEvidence, PreparedAuth,
};
pub use capture::{
    CaptureRequest, CapturedTurnContext, FailureFacts, FailureSource, ModelSelection,
    NativeTurnFailure, TranscriptCaptureInput, capture_settled_turn_context, is_transient_failure,
    native_failure_finalization_allowed, resolve_transcript_finalization_context,
};
pub use engine::{EngineFinalizer, FinalizationEngine, RestrictedEngineParams};
pub use error::{FinalizerError, TerminalStatus};
pub use evidence::{ItemLifecycle, TimeoutKind};
pub use facts::{
    CarriedFacts, FailureSignal, MessageToolSend, PayloadKind, ReplyExpectation, ReplyPayload,
    RunTrigger, SourceReplyMode, TerminalToolFailure, ToolCallMeta, TurnFacts,
    WriterDeliveryAuthority, WriterFence,
};
pub use fallback::{
    FALLBACK_MODEL, FALLBACK_PROVIDER, FALLBACK_TEXT, FallbackAppend, FallbackAppendError,
    FallbackAppendResult, FallbackTranscript, RECOVERY_NOTICE_TEXT, fallback_idempotency_key,
};
pub use gate::{
    FinalizationRequest, SETTLED_TOOL_FINALIZATION_INSTRUCTION, SettledBatchEvidence,
    TOOL_FAILURE_INSTRUCTION, resolve_settled_tool_batch_evidence,
    resolve_settled_turn_finalization_request,
};
pub use incomplete::{IncompleteTurn, IncompleteTurnInput, Liveness, resolve_incomplete_turn};
pub use lifecycle::{
    DiagnosticEvent, DiagnosticPhase, LifecycleOptions, LifecycleOutcome, RunCompletion,
    run_lifecycle_finalization,
};
pub use model_policy::{
    ModelPolicyBinding, ModelPolicyGate, NativeModelPolicySupport, OperatorModelPolicy,
};
pub use orchestrate::{
    FinalizationInput, FinalizationOutcome, PreparedFinalization, RebuiltTerminal,
    prepare_terminal_with_settled_turn_finalization,
};
pub use policy::{HookPoint, TerminalResolutionPolicy};
pub use projection::{FullAttemptEvidence, project_settled_turn_finalization_attempt_result};
pub use result::{
    ALLOWED_ASSISTANT_FIELDS, ALLOWED_CONTENT_BLOCK_TYPES, ALLOWED_RESULT_FIELDS, DiagnosticTrace,
    FinalAssistant, MAX_RESULT_DEPTH, SILENT_REPLY_TOKEN, SettledTurnFinalizationResult,
    depth_within, is_silent_reply_text, is_tool_call_block_type,
    validate_settled_turn_finalization_result,
};
pub use signal::RunSignal;

// The limits, texts and helpers the finalizer's contract names (`docs/finalization.md`), at
// the crate root like everything else.
pub use bounded::{
    MAX_CALL_ID_CHARS, MAX_FIELD_BYTES, MAX_ITEMS, MAX_TOOL_NAME_CHARS, MAX_TOTAL_BYTES,
    META_EXCLUDE_FROM_CONTEXT, META_TRANSIENT_RUNTIME_CONTEXT, META_UPSTREAM_TEXT,
    OMITTED_CONTEXT_NOTICE, TOOL_COMPLETED_WITHOUT_TEXT, TOOL_ERROR_PREFIX,
    TOOL_FAILED_WITHOUT_TEXT, is_valid_tool_name, prompt_identity, rewrite_call_id,
};
pub use bounded_finalizer::BOUNDED_TURN_INSTRUCTIONS;
pub use gate::{should_treat_empty_reply_as_silent, source_reply_delivered, usable_payload_count};
pub use incomplete::IncompleteTurnError;
pub use incomplete::{
    INCOMPLETE_TURN_BASE_TEXT, INCOMPLETE_TURN_MESSAGE, INCOMPLETE_TURN_TEXT, SIDE_EFFECT_NOTE,
    TIMED_OUT_MESSAGE, TIMED_OUT_TEXT, incomplete_turn_text,
};
pub use lifecycle::SETTLED_TOOL_FINALIZATION_OPERATION;
pub use orchestrate::AgentMeta;
pub use orchestrate::{MAX_EMPTY_FINALIZATION_TRIES, MAX_TIMER};
