//! # tether-core
//!
//! The contracts of Tether, a session runtime for agent harnesses: validated ids, binding-key
//! derivation, lease and fencing values, the [`Clock`] and [`TokenSource`] seams, the
//! [`RecordCodec`] contract, the [`BindingStore`] compare-and-swap contract, the host session
//! contract, the [`AgentHarness`] trait with its optional capabilities, attempt parameters and
//! results, and the one [`Error`] enum every crate speaks.
//!
//! **This crate does no I/O.** No tokio, no database, no HTTP, no file system, no global
//! clock: time comes from a [`Clock`], randomness from a [`TokenSource`]. It can be depended on
//! alone by a harness author.
//!
//! ```
//! use std::time::Duration;
//! use tether_core::{AgentId, BindingKey, Clock, FakeClock, Lease, LeaseEpoch, LeaseToken, SessionKey, Timestamp};
//!
//! let agent = AgentId::new("main")?;
//! let key = BindingKey::stable(&agent, &SessionKey::new("agent:main:telegram:peer@example.com")?);
//! assert!(key.as_str().starts_with("session-key:main:"));
//! assert!(!key.as_str().contains("example.com"));
//!
//! let clock = FakeClock::new(Timestamp::from_millis(0));
//! let lease = Lease {
//!     token: LeaseToken::new("token-1")?,
//!     epoch: LeaseEpoch::INITIAL,
//!     expires_at: clock.now() + Duration::from_secs(65),
//!     acquired_at: clock.now(),
//!     renewed_at: clock.now(),
//!     holder: None,
//! };
//! clock.advance(Duration::from_secs(65));
//! assert!(!lease.is_live(clock.now()), "expiry is inclusive at equality");
//! # Ok::<(), tether_core::IdError>(())
//! ```
#![deny(missing_docs)]

mod attempt;
mod codec;
mod error;
mod finalization;
mod harness;
mod host;
mod ids;
mod keys;
mod lease;
pub mod prelude;
mod registry;
mod store;
pub mod text;
mod time;

pub use attempt::{
    AcceptedSessionSpawn, AgentMessage, AttemptParams, AttemptResult, AttemptTerminal,
    ContentBlock, DeliveryState, MessageRole, ReplayMetadata, SessionTarget, TerminalDiagnostic,
    ToolErrorSummary, ToolMeta, Usage,
};
pub use codec::{JsonObjectCodec, RecordCodec, decode_row};
pub use error::{
    BoxError, Cause, Error, ErrorTexts, HostErrorKind, RuntimeErrorKind, StoreErrorKind,
};
pub use finalization::{
    Cancellation, FinalizationAttempt, HarnessFinalizationData, SettledTurnFinalizationContext,
};
pub use harness::{
    AgentHarness, AssertCurrent, BoxFuture, InitializationHandle, MutationRun, ResetParams,
    ResetReason, RowTransaction, SessionContextResetHook, SessionContextResetParams,
    SessionDeletionHook, SessionDeletionParams, SessionMutation, SettledTurnFinalizer,
    SettlementOutcome, always_current,
};
pub use host::{
    AppendOutcome, GenerationChange, HostSessionEntry, HostSessionRead, HostSessionStore,
    QuarantineEntry, QuarantineStore, TranscriptAnchor,
};
pub use ids::{
    AgentId, BindingId, HarnessId, IdError, MAX_ID_LEN, Namespace, RunId, SessionId, SessionKey,
};
pub use keys::{BindingKey, BindingKeyKind};
pub use lease::{Lease, LeaseConfig, LeaseEpoch, LeaseToken, LifecycleRevision, Revision, is_live};
pub use registry::{HarnessRegistry, same_harness};
pub use store::{
    Admission, ApplyOutcome, BindingStore, Comparison, DEFAULT_MAX_VALUE_BYTES, Intent,
    LeaseRenewal, LeaseWrite, NamespaceConfig, Observation, ObservedOutcome, OverflowPolicy,
    RowPredicate, RowWrite, StoredRow, admit_all,
};
pub use text::TextError;
pub use time::{Clock, FakeClock, SequentialTokens, SystemClock, Timestamp, TokenSource};
