//! # tether-storage
//!
//! The stores of Tether, all implementing the `tether-core` contracts
//! ([`BindingStore`](tether_core::BindingStore), [`QuarantineStore`](tether_core::QuarantineStore),
//! [`HostSessionStore`](tether_core::HostSessionStore)) plus [`StoreAdmin`]:
//!
//! - [`MemoryStore`]: in memory, with an injectable clock, a fault-injection hook (feature
//!   `test-support`) and a staged [`MemoryTransaction`], for fast tests and harness authors;
//! - [`Store`]: the SQL store over sea-orm 2, SQLite (default; WAL, `synchronous=FULL`,
//!   `BEGIN IMMEDIATE` writers) or PostgreSQL, chosen by URL, with migrations, host sessions,
//!   transcripts (a tree with idempotent append, rewind, branch switch, fork and full-text
//!   search), upstream links, a background sweeper and a [`ServerClock`];
//! - the host port ([`HostBackend`], [`HostTransaction`]) that the host layer's deletion and
//!   context-reset coordinator (`tether_host::HostSessions`, see `docs/deletion-and-reset.md`)
//!   runs over: both stores implement it ([`SqlHostTransaction`], [`MemoryHostTransaction`]),
//!   so the harnesses' prepared mutations commit inside the same transaction as the session
//!   rows.
//!
//! Every write is a compare-and-swap against an observation; a row is invisible once its
//! `expires_at <= now`; each lease acquisition gets a lease epoch that is never reused; every
//! lease change is recorded in a lease event history.
//!
//! Backends are features: `sqlite` (default) and `postgres`. A build without one still has
//! the in-memory store; [`Store::open`] then refuses a URL of the missing backend with a
//! configuration error that names the feature to enable.
//!
//! Test tooling is behind the `test-support` feature, never in the default API:
//! `fault_injection` (a fault-injecting wrapper around any store, with the COMMIT faults of the
//! SQL store), the in-memory store's `StoreHook`, and `testing` (throwaway PostgreSQL
//! databases).
//!
//! ```
//! use std::sync::Arc;
//! use tether_core::{
//!     AgentId, ApplyOutcome, BindingKey, BindingStore, FakeClock, Intent, Namespace,
//!     NamespaceConfig, RowWrite, SessionId, Timestamp, admit_all,
//! };
//! use tether_storage::MemoryStore;
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new(Arc::new(FakeClock::new(Timestamp::EPOCH)));
//! let ns = Namespace::new("example-bindings")?;
//! store.register_namespace(NamespaceConfig::new(ns.clone()).with_max_entries(100)).await?;
//!
//! let key = BindingKey::physical(&AgentId::new("main")?, &SessionId::new("s-1")?);
//! let seen = store.observe(&ns, &key).await?;
//! let write = RowWrite { value: br#"{"thread":"t-1"}"#.to_vec(), lease: None };
//! let outcome = store
//!     .compare_and_apply(&ns, &key, &seen.comparison, Intent::Set { row: write, ttl: None }, &admit_all)
//!     .await?;
//! assert!(matches!(outcome, ApplyOutcome::Applied { .. }));
//!
//! // The old observation is stale now: a second write with it conflicts.
//! let stale = store
//!     .compare_and_apply(&ns, &key, &seen.comparison, Intent::Delete, &admit_all)
//!     .await?;
//! assert!(matches!(stale, ApplyOutcome::Conflict { .. }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod admin;
mod events;
#[cfg(feature = "test-support")]
pub mod fault_injection;
mod memory;
mod plan;
mod port;
pub mod prelude;
mod sql;
#[cfg(feature = "test-support")]
pub mod testing;
mod transcript;

pub use admin::StoreAdmin;
pub use events::{LeaseEvent, LeaseEventKind, LeaseEventQuery};
#[cfg(feature = "test-support")]
pub use memory::{CompareCall, HookFuture, ReadCall, StoreHook};
pub use memory::{MemoryHostTransaction, MemoryStore, MemoryTransaction};
pub use port::{HostBackend, HostTransaction};
/// The sea-orm crate the SQL store is built on, re-exported so a host's own SQL inside Tether's
/// transaction ([`SqlHostTransaction::sql`]) uses the same version.
pub use sea_orm;
pub use sql::{
    AuditEntry, AuditOutcome, AuditPage, BindingRecord, FinalizationCounts, ForceExpireOutcome,
    GroupCommitStats, ListedSession, NamespaceSummary, NewAuditEntry, QuarantineCursor,
    RenewLatencyHistogram, ServerClock, SessionFilter, SessionPage, SqlHostTransaction,
    SqlRowTransaction, Store, StoreOptions, database_error_code, epoch_parts, redact_url,
    session_binding_keys,
};
#[cfg(feature = "test-support")]
pub use sql::{CommitFault, GroupCommitHold};
pub use transcript::{
    Cut, CutStatus, FINALIZATION_PREFIX, FinalizationOutcome, MAX_METADATA_DEPTH, NewHostSession,
    NewTranscriptEntry, SessionExpectation, TranscriptEntry, TranscriptHit, TranscriptMetadata,
    TranscriptRole,
};
