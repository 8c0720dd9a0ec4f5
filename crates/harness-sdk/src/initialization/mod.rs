//! The initialization owner (the contract: `docs/harness-backend.md`, "Initialization owner").
//!
//! When the host creates a session and a harness binds a native session to it during that
//! initialization, a failed creation must be able to undo exactly what this initialization
//! wrote — and nothing a successor wrote since. The [`InitializationOwner`]:
//!
//! - registers ownership (store, identity, cleanup) **before any write**, keyed by the exact
//!   [`InitializationHandle`](tether_core::InitializationHandle);
//! - binds through the backend's set-if-absent write ([`InitializationBackend::write_binding`]);
//!   a refused write forgets the binding and fails with the binding-changed error;
//! - links the session upstream **if absent** ([`UpstreamLinks`]);
//! - hands the deletion path a rollback ([`InitializationOwner::get_rollback`]) only for the same
//!   store, identity and binding, guarded by the handle's `assert_rollback_current`; the
//!   rollback deletes the link **only if unchanged**, then runs the backend cleanup.
//!
//! Error texts come from [`InitializationTexts`]; the changed-owner errors are
//! [`Error::OwnerChanged`](tether_core::Error::OwnerChanged).

mod links;
mod owner;

pub use links::{LinkDeleteOutcome, UpstreamLink, UpstreamLinkInput, UpstreamLinks};
pub use owner::{
    Cleanup, InitializationBackend, InitializationOwner, InitializationRollback,
    InitializationTexts, PrepareParams, PreparedInitialization,
};
