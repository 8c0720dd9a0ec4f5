//! The contracts a host or harness uses in almost every file, in one import:
//! `use tether_core::prelude::*;` brings the store, host and harness traits into scope (their
//! methods need them) together with the ids, keys and values those methods take.
//!
//! Every item here is also at the crate root; the prelude only gathers them.
//!
//! ```
//! use tether_core::prelude::*;
//!
//! let key = BindingKey::physical(&AgentId::new("main")?, &SessionId::new("s-1")?);
//! let ns = Namespace::new("bindings")?;
//! let config = NamespaceConfig::new(ns);
//! assert!(key.as_str().contains("s-1"));
//! assert_eq!(config.namespace.as_str(), "bindings");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use crate::{
    AgentHarness, AgentId, AgentMessage, ApplyOutcome, AttemptParams, AttemptResult, BindingId,
    BindingKey, BindingStore, Clock, Error, HarnessId, HarnessRegistry, HostErrorKind,
    HostSessionEntry, HostSessionStore, Intent, JsonObjectCodec, Lease, LeaseConfig, LeaseEpoch,
    LeaseToken, LeaseWrite, MessageRole, Namespace, NamespaceConfig, QuarantineStore, RecordCodec,
    ResetReason, RowTransaction, RowWrite, RunId, RuntimeErrorKind, SessionContextResetHook,
    SessionDeletionHook, SessionId, SessionKey, SessionMutation, SessionTarget,
    SettledTurnFinalizer, StoreErrorKind, SystemClock, Timestamp, TokenSource, TranscriptAnchor,
    always_current,
};
