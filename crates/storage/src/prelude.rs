//! Everything a host needs to open a store and use it, in one import:
//! `use tether_storage::prelude::*;` brings [`tether_core::prelude`] (the store traits, whose
//! methods need them in scope, and the ids and values they take) and the stores of this crate.
//!
//! ```
//! use tether_storage::prelude::*;
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = Store::open("sqlite::memory:").await?;
//! let ns = Namespace::new("bindings")?;
//! store.register_namespace(NamespaceConfig::new(ns.clone())).await?;
//! let key = BindingKey::physical(&AgentId::new("main")?, &SessionId::new("s-1")?);
//! assert!(store.lookup(&ns, &key).await?.is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

pub use tether_core::prelude::*;

pub use crate::{
    CutStatus, HostBackend, HostTransaction, MemoryStore, NewHostSession, NewTranscriptEntry,
    SqlHostTransaction, Store, StoreAdmin, StoreOptions, TranscriptEntry, TranscriptRole,
};
