//! The native-session binding lifecycle (the contract: `docs/lifecycle.md`).
//!
//! A [`Lifecycle`] is generic over a harness backend: a
//! [`BindingStore`](tether_core::BindingStore) namespace, a
//! [`RecordCodec`](tether_core::RecordCodec), the backend's lease policy ([`PrepareLease`]) and
//! release TTL ([`ReleaseTtl`]), its [`ErrorTexts`](tether_core::ErrorTexts), the
//! [`LeaseConfig`](tether_core::LeaseConfig) (defaults: lease 65 s, wait 70 s, retry 1 s, renew
//! every lease/3), a [`Clock`](tether_core::Clock), a [`TokenSource`](tether_core::TokenSource)
//! and a [`Timer`] ([`ManualTimer`] drives heartbeats deterministically in tests).
//!
//! - [`Lifecycle::transact`]: a pure compare-and-swap step that never writes over a live
//!   foreign lease (waits up to the wait budget) and, inside a lease scope, writes only while
//!   the owner's exact lease is live on the row. Conflicts re-run the step; store errors are
//!   never replayed.
//! - [`Lifecycle::with_lease`]: exact-token acquisition through the backend's lease policy, the
//!   store's monotonic [`LeaseEpoch`](tether_core::LeaseEpoch) handed to the owner as its
//!   fencing token ([`LeaseGuard::epoch`], [`LeaseGuard::verify_fence`], [`EpochFence`]),
//!   single-flight heartbeats, sticky lease loss, re-entrancy in the same task, exact-token
//!   release without the caller's authority.
//! - [`LeaseGuard::capture_lease_assertion`], [`LeaseGuard::quiesce`], [`LeaseGuard::block`]
//!   and [`Lifecycle::block`]: settlement hooks; a blocked key is refused at every entry point
//!   and every compare-and-swap admission, and quarantined durably when a
//!   [`QuarantineStore`](tether_core::QuarantineStore) is configured.
//! - [`Lifecycle::with_mutation`] and [`Lifecycle::with_exclusive_mutation_fence`].
//! - [`Lifecycle::with_deletion`]: a [`DeletionMutation`] committed through the host's
//!   [`RowTransaction`](tether_core::RowTransaction), settled with [`SessionMutation::settle_outcome`](tether_core::SessionMutation::settle_outcome);
//!   [`wrap_deletion_mutation`], [`is_deletion_unresolved`] and [`CommitFinalizer`].
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//! use tether_core::{
//!     BindingId, BindingKey, BindingStore, JsonObjectCodec, LeaseWrite, Namespace,
//!     NamespaceConfig,
//! };
//! use tether_harness_sdk::lifecycle::{Applied, LeaseOptions, Lifecycle, TransactOptions};
//! use tether_storage::MemoryStore;
//!
//! type Record = serde_json::Map<String, serde_json::Value>;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::default());
//! let ns = Namespace::new("example-bindings")?;
//! store.register_namespace(NamespaceConfig::new(ns.clone())).await?;
//! let lifecycle = Lifecycle::builder(
//!     store,
//!     ns,
//!     JsonObjectCodec,
//!     // The lease policy: keep the current record (or start an empty one).
//!     Arc::new(|current: Option<&Record>, _lease: &LeaseWrite| {
//!         Some(current.cloned().unwrap_or_default())
//!     }),
//! )
//! .build()?;
//!
//! let key = &BindingKey::conversation(&BindingId::new("demo")?);
//! let lc = &lifecycle;
//! let epoch = lc
//!     .with_lease(key, LeaseOptions::default(), |lease| async move {
//!         // Inside the scope, writes keep the exact lease and are fenced by it.
//!         lc.transact(key, TransactOptions::default(), |current, token| {
//!                 assert!(token.is_some(), "the owner writes under its own token");
//!                 let mut next = current.cloned().unwrap_or_default();
//!                 next.insert("thread".into(), json!("t-1"));
//!                 Ok(Applied::write(next, ()))
//!             })
//!             .await?;
//!         Ok(lease.epoch())
//!     })
//!     .await?;
//! assert!(epoch.get() >= 1);
//! let stored = lifecycle.read(key).await?.expect("written");
//! assert_eq!(stored["thread"], "t-1");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod batch;
mod deletion;
mod fence;
mod instance;
mod owner;
mod scope;
mod shared;
mod timer;

pub use deletion::{
    CommitFinalizer, DeletionHooks, DeletionMutation, DeletionOptions, DeletionOutcome,
    DirectRowTransaction, NoRowTransaction, RecordAssertion, WrappedDeletion,
    is_deletion_unresolved, wrap_deletion_mutation,
};
pub use fence::EpochFence;
pub use instance::{
    Applied, LeaseOptions, Lifecycle, LifecycleBuilder, PrepareLease, ReleaseTtl, TransactOptions,
    UuidTokens,
};
pub use owner::{LeaseAssertion, LeaseGuard, OwnerPhase};
pub use shared::ReleaseFailureHook;
pub use timer::{IdleProbe, ManualTimer, Timer, TokioTimer};
