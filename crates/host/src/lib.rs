//! # tether-host
//!
//! The host layer: what a host gateway opens once and works from. [`Host::open`] opens (and
//! migrates) the store, picks the clock every lease decision uses — the database server's
//! clock on PostgreSQL, kept in step in the background, so several host processes share one
//! time line — and hands out, already wired to that store and clock:
//!
//! - thread bindings for a harness ([`Host::thread_bindings`], namespace registered for you)
//!   and the ready harness hooks over them ([`Host::thread_harness`]);
//! - a lifecycle for records of your own ([`Host::lifecycle`]);
//! - the host's session operations, with transactional deletion and context reset
//!   ([`Host::sessions`]), over the harness registry ([`Host::registry`]);
//! - the settled-turn finalizer's fallback transcript over the SQL store
//!   ([`SqlFallbackTranscript`]);
//! - with the `codex` feature, the Codex app-server harness wired to all of the above
//!   (`Host::codex_harness`, `SqlCodexTranscript`).
//!
//! The session coordinator ([`HostSessions`]) is generic over the storage crate's
//! `HostBackend` port: the SQL store by default, the memory store for tests and embedders.
//!
//! Architecture Invariant: this crate sits above `tether-storage`, `tether-harness-sdk` and
//! `tether-finalizer`; none of them depends on it. Host-side deletion and context reset exist
//! here and nowhere else.
//!
//! ```
//! use tether_host::prelude::*;
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let host = Host::open("sqlite::memory:").await?;
//! let harness = host.thread_harness("example", "example-threads").await?;
//! host.registry().register(std::sync::Arc::new(harness));
//! let key = SessionKey::new("agent:main:direct:alice")?;
//! host.store()
//!     .create_session(NewHostSession {
//!         session_key: key.clone(),
//!         agent_id: AgentId::new("main")?,
//!         session_id: SessionId::new("gen-1")?,
//!         agent_harness_id: Some(HarnessId::new("example")?),
//!     })
//!     .await?;
//! assert_eq!(host.sessions().delete_sessions(&[key]).await?.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

#[cfg(feature = "codex")]
mod codex;
mod fallback;
mod host;
pub mod prelude;
mod sessions;
mod work;

#[cfg(feature = "codex")]
pub use codex::SqlCodexTranscript;
pub use fallback::SqlFallbackTranscript;
pub use host::{Host, HostBuilder};
#[cfg(feature = "test-support")]
pub use sessions::TransactionHooks;
pub use sessions::{DeletionRequest, HostSessions};
pub use work::{ActiveRuns, AdmittedRun, WorkTracker};

/// The README's quickstart, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeQuickstart;
