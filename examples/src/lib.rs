//! # tether-example-harness
//!
//! Example host gateways, built only on public APIs: a chat gateway on the real Codex
//! app-server harness, and a host with a harness of its own over a simulated native runtime
//! ([`SimulatedRuntime`]).
//!
//! - [`codex_gateway`] is where a gateway on Codex starts: a [`tether_host::Host`] builds the
//!   Codex harness wired to its store (`Host::codex_harness`), and the gateway creates a
//!   session, runs two turns on one Codex thread (the second resumes it), resets the session
//!   (`/new`), runs a turn on a fresh thread and deletes the session. The `codex-gateway`
//!   binary runs it against a real model provider (`--model-provider-url`, the key in
//!   `OPENAI_API_KEY`) with the Codex binary from `TETHER_CODEX_BIN` or the cache
//!   `cargo xtask codex-install` writes, printing each step.
//!
//! The simulated runtime shows what a harness of your own does:
//!
//! - [`ExampleHarness`] binds native threads to host sessions through the SDK's thread-binding
//!   backend. A turn holds the session's lease (renewed by heartbeats) while it runs, restores
//!   the host's typed user-turn metadata onto what the runtime's hook wrote and appends it with
//!   that metadata (feeding the persisted marker), feeds each tool call's terminal outcome to
//!   the terminal-outcome accumulator, logs the call's arguments sanitized, and finalizes a tool
//!   turn through `tether-finalizer`'s orchestration with the SQL fallback transcript. Deletion
//!   and context reset go through the host's transactional path.
//! - [`tour::run`] drives it on a [`tether_host::Host`]: the turns above, the lease handle
//!   (writes from a spawned task, `try_with_lease`, `lost()`), and a deletion whose host writes
//!   share the deletion's transaction.
//! - [`contention`] is the two-process part: one process holds a session's lease, another
//!   contends for it.
//! - The `example-host` binary runs the tour and either side of the contention on a SQLite or
//!   PostgreSQL database; [`demo::populate`] is what `tether demo` runs.
//! - [`cli`]: the `--name value` options both binaries take.
//!
//! ```
//! use std::sync::Arc;
//! use tether_core::{AgentId, SessionId, SessionKey};
//! use tether_example_harness::{ExampleHarness, Finalization, SimulatedRuntime};
//! use tether_host::Host;
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let host = Host::open("sqlite::memory:").await?;
//! let harness = ExampleHarness::on_host(&host, Arc::new(SimulatedRuntime::new()), None).await?;
//! let key = SessionKey::new("agent:main:direct:alice")?;
//! harness.start_session(&key, &AgentId::new("main")?, &SessionId::new("g1")?).await?;
//! let turn = harness.run_turn(&key, 1, "run cargo test").await?;
//! assert!(turn.started_thread && turn.user_turn_announced);
//! assert_eq!(turn.finalization, Some(Finalization::Succeeded));
//! // user (with its metadata), tool result, final answer, finalization record
//! let path = host.store().active_path(&key).await?;
//! assert_eq!(path.len(), 4);
//! assert!(path[0].metadata.is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

pub mod cli;
pub mod codex_gateway;
pub mod contention;
pub mod demo;
pub mod harness;
pub mod runtime;
pub mod tour;

pub use harness::{ExampleHarness, Finalization, TurnReport};
pub use runtime::{NativeReply, SimulatedRuntime, ToolOutcome, ToolRun};
