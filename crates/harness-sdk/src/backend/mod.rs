//! The thread-binding harness backend: a reusable binding store for harnesses that bind a
//! native thread (an app-server thread, for example). The contract: `docs/harness-backend.md`.
//!
//! - [`ThreadBindingRecord`] (version 1, active or cleared, the [`ThreadBinding`], the owning
//!   `session_id` generation, the retired fence, a task import) and its JSON
//!   [`ThreadBindingCodec`]; rows are keyed by [`BindingIdentity`] (stable, physical or
//!   conversation keys of [`tether_core::BindingKey`]);
//! - [`ThreadBindingStore`]: `set` / `set_if_absent`, `patch` and `clear` pinned to the native
//!   thread ([`ThreadPin`]), `adopt`, reset versus retire
//!   ([`ThreadBindingStore::transition_session_generation`]), `prepare_reclaim` and
//!   `reclaim_generation` (the same-id fence repaired only with host lineage), the protected
//!   supervision scope, the lease policy [`prepare_lease`] and the release TTL policy
//!   [`release_ttl`] (physical fences expire after [`PHYSICAL_RETIRE_TTL`], stable fences
//!   stay, cleared rows vanish), all through the binding lifecycle, never blind; and
//!   [`ThreadBindingStore::shed_disposable`], which relieves a full namespace by removing only
//!   rows that carry nothing (no store-level eviction);
//! - [`ThreadGenerationOps`]: the store as
//!   [`GenerationOperations`](crate::generation::GenerationOperations) and
//!   [`BindingReader`](crate::generation::BindingReader).
//!
//! ```
//! use std::sync::Arc;
//! use tether_core::{AgentId, BindingStore, Namespace, SessionId, SessionKey};
//! use tether_harness_sdk::backend::{
//!     BindingIdentity, GenerationTransition, ThreadBinding, ThreadBindingStore, ThreadPin,
//!     TransitionOutcome, WriteOptions,
//! };
//! use tether_storage::MemoryStore;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let memory = Arc::new(MemoryStore::default());
//! let ns = Namespace::new("thread-bindings")?;
//! memory.register_namespace(ThreadBindingStore::namespace_config(ns.clone())).await?;
//! let bindings = ThreadBindingStore::builder(memory, ns).build()?;
//!
//! let agent = AgentId::new("main")?;
//! let key = SessionKey::new("agent:main:direct:peer")?;
//! let s1 = BindingIdentity::session(agent, SessionId::new("s1")?, Some(key));
//! assert!(bindings.set_if_absent(&s1, ThreadBinding::new("thread-1", "/work"), WriteOptions::default()).await?);
//! // A writer pinned to another thread never clears this one.
//! assert!(!bindings.clear(&s1, Some(&ThreadPin::thread("thread-0")), WriteOptions::default()).await?);
//! // Retirement fences the generation: its own writes are refused from now on.
//! let retired = bindings
//!     .transition_session_generation(&s1, GenerationTransition::Retire, WriteOptions::default())
//!     .await?;
//! assert_eq!(retired, TransitionOutcome::Applied);
//! assert!(!bindings.set(&s1, ThreadBinding::new("thread-2", "/work"), WriteOptions::default()).await?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod generation;
mod identity;
mod policy;
mod record;
mod store;

pub use generation::ThreadGenerationOps;
pub use identity::BindingIdentity;
pub use policy::{
    BackendTexts, CLEARED_TTL, DEFAULT_MAX_ENTRIES, PHYSICAL_RETIRE_TTL, default_error_texts,
    prepare_lease, release_ttl, release_ttl_policy,
};
pub use record::{
    BindingState, ConnectionScope, RECORD_VERSION, ThreadBinding, ThreadBindingCodec,
    ThreadBindingRecord,
};
pub use store::{
    GenerationTransition, ThreadBindingStore, ThreadBindingStoreBuilder, ThreadLifecycle,
    ThreadPin, TransitionOutcome, WriteOptions,
};
