//! Generation authority (the contract: `docs/generation.md`).
//!
//! A durable native binding may only be used for the host session generation that owns it. The
//! host's session row (through [`tether_core::HostSessionStore`]) is the authority: its
//! `session_id` is the current physical generation and its `previous_session_id` the recorded
//! predecessor. This module turns one host read into a tri-state decision and carries the exact
//! lineage proof through every later wait:
//!
//! - [`GenerationAuthority::capture`] reads the host row: **current** when the row names the
//!   target generation, **ephemeral** when there is no row (the caller's own authority governs),
//!   **superseded** when the row names another generation or the read failed (a failed read can
//!   never authorize a durable binding);
//! - [`BindingAuthority::with_current`] re-reads every lineage entry in one pass, compares both
//!   `session_id` and `previous_session_id`, re-asserts the caller, and only then runs the
//!   synchronous effect;
//! - [`GenerationAuthority::resolve_binding`] reads a binding and returns it together with the
//!   authority that must be re-checked after every await ("a committed binding is not host
//!   authority");
//! - [`GenerationAuthority::reclaim_generation`] adopts a verified predecessor before any stale
//!   reclamation when the generation began with a transfer, and clears it when it began with a
//!   cut or a reset (`HostSessionEntry::previous_change`), through a backend's
//!   [`GenerationOperations`], re-checking the lineage after each step so two generations are
//!   never bridged across a wait.
//!
//! ```
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use tether_core::{AgentId, HostSessionRead, HostSessionStore, SessionId, SessionKey, always_current};
//! use tether_harness_sdk::generation::{BindingAuthority, GenerationAuthority, GenerationState, GenerationTarget};
//!
//! #[derive(Debug)]
//! struct NoRows;
//! #[async_trait]
//! impl HostSessionStore for NoRows {
//!     async fn read_session(&self, _key: &SessionKey) -> HostSessionRead {
//!         HostSessionRead::Missing
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let authority = GenerationAuthority::new(Arc::new(NoRows));
//! let target = GenerationTarget::new(
//!     AgentId::new("main")?,
//!     SessionId::new("s-1")?,
//!     Some(SessionKey::new("agent:main:direct")?),
//! );
//! let caller = BindingAuthority::caller(always_current());
//! let capture = authority.capture(&target, &caller).await?;
//! assert_eq!(capture.state(), GenerationState::Ephemeral);
//! capture.authority().verify().await?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod authority;
mod capture;
mod reclaim;

pub use authority::{BindingAuthority, LineageEntry};
pub use capture::{GenerationAuthority, GenerationCapture, GenerationState, GenerationTarget};
pub use reclaim::{
    AdoptionResult, AssertBinding, BindingReader, GenerationOperations, ReclaimPlan,
    ResolveRequest, ResolvedBinding,
};

use tether_core::{Error, SessionId};

/// The text of the superseded-generation error. `{session_id}` is replaced with the generation
/// the caller acted for.
///
/// A backend may replace it so its users see its own wording; the error stays
/// [`Error::SupersededGeneration`] either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationTexts {
    /// Template of the superseded error (`{session_id}`).
    pub superseded: String,
}

impl Default for GenerationTexts {
    fn default() -> Self {
        Self {
            superseded: "Session generation is no longer current: {session_id}".into(),
        }
    }
}

impl GenerationTexts {
    /// [`Error::SupersededGeneration`] for `session_id`.
    pub fn superseded(&self, session_id: &SessionId) -> Error {
        Error::SupersededGeneration {
            session_id: session_id.as_str().to_owned(),
            message: self.superseded.replace("{session_id}", session_id.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superseded_text_is_filled_and_matchable() {
        let err = GenerationTexts::default().superseded(&SessionId::new("s-9").unwrap());
        assert_eq!(
            err.to_string(),
            "Session generation is no longer current: s-9"
        );
        assert!(
            matches!(err, Error::SupersededGeneration { ref session_id, .. } if session_id == "s-9")
        );
        let custom = GenerationTexts {
            superseded: "This Codex session changed ({session_id})".into(),
        };
        assert_eq!(
            custom.superseded(&SessionId::new("x").unwrap()).to_string(),
            "This Codex session changed (x)"
        );
    }
}
