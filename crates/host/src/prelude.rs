//! Everything a host gateway uses in one import: `use tether_host::prelude::*;` brings the
//! facade, the store, the thread-binding harness pieces, the finalizer's host seams and
//! [`tether_core::prelude`] (the traits whose methods a host calls, the ids and values they
//! take).

pub use tether_finalizer::prelude::*;
pub use tether_harness_sdk::prelude::*;
pub use tether_storage::prelude::*;

#[cfg(feature = "codex")]
pub use crate::SqlCodexTranscript;
pub use crate::{
    ActiveRuns, AdmittedRun, DeletionRequest, Host, HostBuilder, HostSessions,
    SqlFallbackTranscript, WorkTracker,
};
