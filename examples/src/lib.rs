//! # tether-example-harness
//!
//! A complete example harness built on `tether-harness-sdk` over a simulated native runtime
//! ([`SimulatedRuntime`]): it binds native threads to host sessions through the SDK's
//! thread-binding backend, holds the binding's lease while a turn runs, mirrors the transcript
//! into the host store, reports tool terminal outcomes, finalizes settled tool turns through
//! `tether-finalizer`'s narrow-result validator (with a host fallback), and supports deletion
//! and context reset through the host's transactional path. [`demo::populate`] is what `tether demo` runs.
//!
//! ```
//! use std::sync::Arc;
//! use tether_core::{AgentId, SessionId, SessionKey};
//! use tether_example_harness::{ExampleHarness, SimulatedRuntime};
//! use tether_storage::Store;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = Store::open("sqlite::memory:").await?;
//! let harness = ExampleHarness::new(store.clone(), Arc::new(SimulatedRuntime::new()), "worker-1").await?;
//! let key = SessionKey::new("agent:main:direct:alice")?;
//! harness.start_session(&key, &AgentId::new("main")?, &SessionId::new("g1")?).await?;
//! let turn = harness.run_turn(&key, 1, "run cargo test").await?;
//! assert!(turn.started_thread);
//! assert_eq!(turn.finalization, Some(tether_example_harness::Finalization::Succeeded));
//! // user, tool result, finalization record, final answer
//! assert_eq!(store.active_path(&key).await?.len(), 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

pub mod demo;
pub mod harness;
pub mod runtime;

pub use harness::{ExampleHarness, Finalization, TurnReport};
pub use runtime::{NativeReply, SimulatedRuntime, ToolOutcome, ToolRun};
