//! What a host wiring settled-turn finalization uses, in one import:
//! `use tether_finalizer::prelude::*;` brings the host's seams (the fallback transcript, the
//! model policy), the orchestration entry point with its input and outcome, the bounded
//! finalizer a harness builds on, and the narrow result it must produce.
//!
//! ```
//! use tether_finalizer::prelude::*;
//!
//! // The one visible answer a finalization may return, validated before anything uses it.
//! let answer = serde_json::json!({"assistant": {
//!     "role": "assistant",
//!     "content": [{"type": "text", "text": "Done."}],
//!     "stop_reason": "stop",
//! }});
//! let checked = validate_settled_turn_finalization_result(&answer)?;
//! assert_eq!(checked.assistant.to_agent_message().content.len(), 1);
//!
//! // A tool call is never an answer: refused, naming the field.
//! let tool_call = serde_json::json!({"assistant": {
//!     "role": "assistant",
//!     "content": [{"type": "text", "text": "Done."}],
//!     "tool_calls": [],
//! }});
//! let refused = validate_settled_turn_finalization_result(&tool_call).unwrap_err();
//! assert!(matches!(refused, FinalizerError::UnsupportedAssistantField { .. }));
//! # Ok::<(), FinalizerError>(())
//! ```

pub use tether_core::SettledTurnFinalizer;

pub use crate::{
    BoundedTurnFinalizer, BoundedTurnRuntime, FallbackAppend, FallbackAppendError,
    FallbackAppendResult, FallbackTranscript, FinalizationInput, FinalizationOutcome,
    FinalizerError, OperatorModelPolicy, PreparedFinalization, RunSignal,
    SettledTurnFinalizationResult, TurnFacts, WriterFence,
    prepare_terminal_with_settled_turn_finalization, validate_settled_turn_finalization_result,
};
