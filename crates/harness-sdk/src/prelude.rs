//! What a harness author or a host driving one uses in almost every file, in one import:
//! `use tether_harness_sdk::prelude::*;` brings [`tether_core::prelude`] (the store and harness
//! traits, whose methods need them in scope, and the ids and values they take), the lifecycle
//! (`Lifecycle`, `with_lease`, `transact`, the lease guard and its options) and the
//! thread-binding backend with its ready harness hooks.
//!
//! ```
//! use std::sync::Arc;
//! use tether_harness_sdk::prelude::*;
//! use tether_storage::MemoryStore;
//! type Record = serde_json::Map<String, serde_json::Value>;
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::default());
//! let ns = Namespace::new("example-bindings")?;
//! store.register_namespace(NamespaceConfig::new(ns.clone())).await?;
//! let policy: PrepareLease<Record> =
//!     Arc::new(|current: Option<&Record>, _lease: &LeaseWrite| {
//!         Some(current.cloned().unwrap_or_default())
//!     });
//! let lifecycle = Lifecycle::builder(store, ns, JsonObjectCodec, policy).build()?;
//! let key = &BindingKey::conversation(&BindingId::new("demo")?);
//! let epoch = lifecycle
//!     .with_lease(key, LeaseOptions::default(), |lease| async move { Ok(lease.epoch()) })
//!     .await?;
//! assert!(epoch.get() >= 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

pub use tether_core::prelude::*;

pub use crate::backend::{
    BindingIdentity, ThreadBinding, ThreadBindingRecord, ThreadBindingStore,
    ThreadBindingStoreBuilder, WriteOptions,
};
pub use crate::generation::{BindingAuthority, GenerationAuthority};
pub use crate::hooks::{NativeThreads, ThreadBindingHarness};
pub use crate::lifecycle::{
    Applied, LeaseGuard, LeaseOptions, Lifecycle, LifecycleBuilder, PrepareLease, Timer,
    TokioTimer, TransactOptions,
};
pub use crate::results::terminal::{TerminalObserver, ToolTerminalObservation};
