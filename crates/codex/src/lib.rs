//! # tether-codex
//!
//! The Codex app-server harness: Tether driving a real `codex app-server` (the Codex CLI's
//! JSON-RPC 2.0 server over stdio).
//!
//! - `client`: one supervised app-server child per host process ([`CodexAppServer`]), the
//!   `initialize` handshake, request/response correlation with per-request timeouts,
//!   notifications and server requests routed per thread through bounded queues, stderr into
//!   `tracing`, a crashed or hung child reported as a typed [`CodexError`] and restarted.
//! - [`protocol`]: typed serde messages for the subset of the protocol the harness uses.
//! - `harness`: [`CodexHarness`], an [`AgentHarness`](tether_core::AgentHarness) on the SDK's
//!   thread-binding backend: host session → Codex thread id under the fenced lease, resume
//!   with `thread/resume`, turns with item mirroring, host tools as dynamic tools, terminal
//!   outcomes through the SDK's accumulator, approvals through a host policy that refuses by
//!   default, cancellation with `turn/interrupt`.
//! - `native`: the Codex side of deletion, context reset and reset: claims of running turns,
//!   the thread cleanup (`thread/delete`, `thread/archive`) after the host's COMMIT, and the
//!   durable records (due cleanups, context-reset continuations) in the host's binding store.
//! - `finalize`: settled-turn finalization through a capability-free Codex run (the
//!   harness captures the context; [`CodexFinalizerRuntime`] answers once, or the host falls
//!   back).
//! - `host`: what the host supplies (transcript, tool executor, approval policy, and its
//!   record of runs in flight, [`RunAdmission`]).
//! - `locate`: the pinned Codex version and where its binary is found.
//! - `scripted` (feature `scripted-model`): a loopback model server answering from a script,
//!   for tests and demos.
//!
//! A harness never picks the host's store: it receives the host's
//! [`BindingStore`](tether_core::BindingStore), [`HostSessionStore`](tether_core::HostSessionStore)
//! and [`HostTranscript`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use tether_codex::{CodexAppServer, CodexConfig, CodexHarness, ThreadSettings, TurnRequest};
//! # async fn demo(
//! #     store: Arc<dyn tether_core::BindingStore>,
//! #     sessions: Arc<dyn tether_core::HostSessionStore>,
//! #     transcript: Arc<dyn tether_codex::HostTranscript>,
//! #     params: tether_core::AttemptParams,
//! # ) -> Result<(), tether_codex::CodexError> {
//! let config = CodexConfig::new("/usr/local/bin/codex", "/var/lib/host/codex-home")
//!     .with_responses_provider("https://api.openai.com/v1", "OPENAI_API_KEY");
//! let server = Arc::new(CodexAppServer::new(config));
//! let harness = CodexHarness::builder(server, store, sessions, transcript)
//!     .settings(ThreadSettings::new("/srv/workspace"))
//!     .holder("worker-1")
//!     .build()
//!     .await?;
//! let outcome = harness.run_turn(TurnRequest::new(params)).await?;
//! tracing::info!(thread = %outcome.thread_id, reply = ?outcome.reply(), "turn done");
//! # Ok(())
//! # }
//! ```

mod client;
pub(crate) mod context;
mod error;
mod finalize;
mod harness;
mod host;
mod ids;
mod locate;
mod native;
pub mod prelude;
pub mod protocol;
#[cfg(feature = "scripted-model")]
pub mod scripted;

pub use client::{
    CodexAppServer, CodexClient, CodexConfig, ServerEvent, ServerRequest, WireFrame, WireKind,
    WireLog,
};
pub use error::CodexError;
pub use finalize::{CodexEvidence, CodexFinalizerRuntime, RESTRICTED_CONFIG, answer_text};
pub use harness::{
    ApprovalReport, CODEX_ERRORS_KEPT, CodexHarness, CodexHarnessBuilder, HARNESS_ID, MirrorReport,
    NAMESPACE, ThreadSettings, ToolReport, TurnCancel, TurnOutcome, TurnRequest, approval_response,
};
pub use host::{
    AdmissionGuard, ApprovalDecision, ApprovalKind, ApprovalPolicy, ApprovalRequest,
    HostTranscript, MirrorEntry, NoTools, RefuseAll, RunAdmission, ToolCall, ToolExecutor, ToolRun,
};
pub use ids::{ThreadId, TurnId};
pub use locate::{CODEX_BIN_ENV, PINNED_CODEX_VERSION, cached_codex_binary, locate_codex_binary};
pub use native::{
    ARCHIVE_NAMESPACE, CLEANUP_NAMESPACE, CONTINUATION_NAMESPACE, CodexThreads,
    INJECTION_NAMESPACE, NativeCleanup, PendingCleanup, record_deleted_session_threads,
};
