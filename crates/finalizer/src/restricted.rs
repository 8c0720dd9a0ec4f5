//! The type-level guarantee that replaces OpenClaw's runtime stripping (see `docs/finalization.md`, 'The capability-free attempt'; scenarios S16,
//! S69, S99).
//!
//! OpenClaw removes `hostCapabilities` and private fields from a JavaScript object at runtime
//! and freezes context objects so they cannot be forged or mutated. Here the same guarantees
//! are properties of the types, checked by the compiler:
//!
//! - [`tether_core::FinalizationAttempt`] has private fields and one constructor taking only
//!   plain data (run id, prompt, committed session target, cancellation, deadline, try number).
//!   There is no field for a tool surface, permission grant, user-input channel, native exec
//!   hook, agent, skill, memory, scheduler, extension or remote control, and none can be added
//!   from outside:
//!
//! ```compile_fail
//! # use tether_core::FinalizationAttempt;
//! fn tools(attempt: &FinalizationAttempt) {
//!     // No such field: a finalizer cannot reach a tool surface.
//!     let _ = &attempt.tools;
//! }
//! ```
//!
//! ```compile_fail
//! # use tether_core::*;
//! // A struct literal cannot smuggle an extra capability (nor set private fields).
//! let attempt = FinalizationAttempt {
//!     run_id: RunId::new("r").unwrap(),
//!     prompt: String::new(),
//!     host_capabilities: (),
//! };
//! ```
//!
//! ```compile_fail
//! # use tether_core::*;
//! fn grant(attempt: &mut FinalizationAttempt) {
//!     // No mutator either: the prompt the host built is the prompt the harness sends.
//!     attempt.prompt = "run the tool again".to_string();
//! }
//! ```
//!
//! - The settled attempt reaches a finalizer as `&AttemptResult`: it cannot be changed, and
//!   core passes the very same object to every try (pinned by S16 and S44).
//!
//! ```compile_fail
//! # use tether_core::*;
//! fn mutate(settled: &AttemptResult) {
//!     settled.tool_metas.clear();
//! }
//! ```
//!
//! - Context evidence is frozen: a transcript context is an `Arc<[AgentMessage]>` and harness
//!   data is wrapped in [`tether_core::HarnessFinalizationData`], which hands out only shared
//!   references and opens only as its owner's private type — a structurally identical value of
//!   another type is rejected by `open`, not by a field check:
//!
//! ```
//! use tether_core::{HarnessFinalizationData, HarnessId};
//! struct CodexEvidence(Vec<String>);
//! struct LookAlike(Vec<String>);
//! let data = HarnessFinalizationData::new(HarnessId::new("codex")?, CodexEvidence(vec![]));
//! assert!(data.open::<CodexEvidence>().is_some());
//! assert!(data.open::<LookAlike>().is_none());
//! # Ok::<(), tether_core::IdError>(())
//! ```
//!
//! ```compile_fail
//! # use std::sync::Arc;
//! # use tether_core::*;
//! fn forge(messages: &Arc<[AgentMessage]>) {
//!     // Frozen: no mutable access through the shared slice.
//!     messages[0].content.clear();
//! }
//! ```
