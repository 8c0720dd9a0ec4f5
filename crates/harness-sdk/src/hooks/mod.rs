//! Harness hooks over the thread-binding backend (the contract: `docs/deletion-and-reset.md`,
//! "The harness side"):
//! a ready [`ThreadBindingHarness`] implementing [`tether_core::AgentHarness`],
//! [`tether_core::SessionDeletionHook`] and [`tether_core::SessionContextResetHook`], so a
//! host's deletion or context-reset transaction can drive it.
//!
//! - **`with_session_deletion`**: the backend's lifecycle deletion (lease allowed on the
//!   generation's own retired fence, generation check through the record assertion; another
//!   generation's cleared or retired tombstone never vetoes), the initialization rollback, the
//!   supervision refusal and the active-claim refusal **before** the host's `run`, the claim
//!   checked again at commit, and the post-commit cleanup (initialization rollback, native
//!   subscription release unless another row owns the thread, client release) **after** the
//!   host transaction. Nothing is ever restored after commit. A binding still owned by the
//!   host's exact recorded predecessor (a compaction not yet transferred, or a reset whose
//!   notification never ran) is deleted as that predecessor's, never adopted first.
//! - **`with_session_context_reset`**: deletes the exact recorded predecessor's binding (one
//!   not yet transferred) without adopting it, else the current generation's binding.
//! - **`reset`**: a non-retiring in-place reset; the generation's own retirement fence is
//!   repaired only through the authoritative host-store reclaim path; a predecessor's binding
//!   left on the row is cleared when the host records it as the exact predecessor (otherwise a
//!   reset that rotated the session would keep the old native resume handle).
//!   A `Deleted` notification retires what is left (usually nothing).
//!
//! Ordinary compaction — a session id change under the same key — is a transfer
//! ([`ThreadBindingHarness::resolve`] adopts the verified predecessor), never a context reset.
//!
//! ```
//! use std::sync::Arc;
//! use tether_core::{
//!     AgentHarness, AgentId, BindingStore, HarnessId, Namespace, ResetParams, ResetReason,
//!     SessionId, SessionKey,
//! };
//! use tether_harness_sdk::backend::{BindingIdentity, ThreadBinding, ThreadBindingStore, WriteOptions};
//! use tether_harness_sdk::generation::GenerationAuthority;
//! use tether_harness_sdk::hooks::ThreadBindingHarness;
//! use tether_storage::MemoryStore;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let memory = Arc::new(MemoryStore::default());
//! let ns = Namespace::new("thread-bindings")?;
//! memory.register_namespace(ThreadBindingStore::namespace_config(ns.clone())).await?;
//! let store = ThreadBindingStore::builder(memory.clone(), ns).build()?;
//! let harness = ThreadBindingHarness::new(
//!     HarnessId::new("threads")?,
//!     store.clone(),
//!     GenerationAuthority::new(memory),
//! );
//!
//! let (agent, s1, key) = (AgentId::new("main")?, SessionId::new("s1")?, SessionKey::new("agent:main:k")?);
//! let identity = BindingIdentity::session(agent.clone(), s1.clone(), Some(key.clone()));
//! store.set(&identity, ThreadBinding::new("thread-1", "/work"), WriteOptions::default()).await?;
//! harness
//!     .reset(ResetParams::new(agent, s1, Some(key), ResetReason::Reset))
//!     .await?;
//! // The stale thread is gone, and the same generation can bind a new one.
//! assert_eq!(store.read(&identity).await?, None);
//! assert!(store.set(&identity, ThreadBinding::new("thread-2", "/work"), WriteOptions::default()).await?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod harness;
mod initialization;
mod mutation;

pub use harness::{InitializationRollbacks, NativeThreads, ThreadBindingHarness};
pub use initialization::{ThreadInitializationBackend, rollbacks_from_owner};
pub use mutation::HookMutation;
