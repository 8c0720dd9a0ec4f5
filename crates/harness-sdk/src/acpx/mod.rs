//! The ACPX harness's state directory (the contract: `docs/harness-backend.md`, "ACPX state
//! directory").
//!
//! The default state directory moved from `<workspace>/state` to `<state dir>/acpx`.
//! [`resolve_state_dir`] decides which directory a process uses:
//!
//! - an explicit directory is used as is and never relocated;
//! - otherwise the new default is used; when it is empty and the legacy `<workspace>/state`
//!   holds files, they are **copied** (never moved or deleted) into a staging directory that is
//!   renamed onto the new default only once complete;
//! - when adoption fails, a warning is logged and the legacy directory is used for the rest of
//!   the process, so that an update never hides existing sessions.
//!
//! [`migrate_legacy_sessions`] then converts session files of the legacy schema
//! `openclaw.acpx.session.v1` to `acpx.session.v1`, keeping their record id; malformed files are
//! warned about and skipped, and a missing directory is a no-op. [`prepare_state_dir`] does both.
//!
//! ```
//! use tether_harness_sdk::acpx::{AcpxStateConfig, StateDirSource, prepare_state_dir};
//!
//! let root = tempfile::tempdir()?;
//! let workspace = root.path().join("workspace");
//! std::fs::create_dir_all(workspace.join("state/sessions"))?;
//! std::fs::write(workspace.join("state/sessions/a.json"), br#"{"schema":"acpx.session.v1"}"#)?;
//!
//! let config = AcpxStateConfig::new(workspace.clone(), root.path().join("tether-state"));
//! let prepared = prepare_state_dir(&config)?;
//! assert_eq!(prepared.state_dir.source, StateDirSource::Adopted { files: 1 });
//! assert!(prepared.state_dir.path.join("sessions/a.json").exists());
//! assert!(workspace.join("state/sessions/a.json").exists(), "legacy files are kept");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod migration;
mod state_dir;

pub use migration::{
    CURRENT_SESSION_SCHEMA, LEGACY_SESSION_SCHEMA, MigrationReport, SkippedSessionFile,
    convert_legacy_session, migrate_legacy_sessions,
};
pub use state_dir::{
    AcpxStateConfig, PreparedStateDir, ResolvedStateDir, StateDirSource, prepare_state_dir,
    resolve_state_dir,
};
