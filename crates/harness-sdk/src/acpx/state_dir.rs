//! Which ACPX state directory a process uses, and the one-time adoption of the legacy one.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

use tether_core::Error;

use super::migration::{MigrationReport, migrate_legacy_sessions};

/// Where the ACPX state may live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpxStateConfig {
    /// The operator's explicit `stateDir`, when configured. Never relocated.
    pub explicit_state_dir: Option<PathBuf>,
    /// The agent workspace; the legacy default is `<workspace>/state`.
    pub workspace_dir: PathBuf,
    /// The host's state directory; the new default is `<state dir>/acpx`.
    pub host_state_dir: PathBuf,
}

impl AcpxStateConfig {
    /// A configuration without an explicit directory.
    pub fn new(workspace_dir: PathBuf, host_state_dir: PathBuf) -> Self {
        Self {
            explicit_state_dir: None,
            workspace_dir,
            host_state_dir,
        }
    }

    /// Sets the explicit directory.
    #[must_use]
    pub fn with_explicit_state_dir(mut self, dir: PathBuf) -> Self {
        self.explicit_state_dir = Some(dir);
        self
    }

    /// The legacy default `<workspace>/state`.
    pub fn legacy_dir(&self) -> PathBuf {
        self.workspace_dir.join("state")
    }

    /// The new default `<state dir>/acpx`.
    pub fn default_dir(&self) -> PathBuf {
        self.host_state_dir.join("acpx")
    }
}

/// Why a directory was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateDirSource {
    /// The explicit directory.
    Explicit,
    /// The new default, already in use (non-empty) or with nothing to adopt.
    Default,
    /// The new default, just adopted from the legacy directory (`files` copied).
    Adopted {
        /// How many files were copied.
        files: usize,
    },
    /// The legacy directory, because adopting it failed in this process.
    LegacyFallback,
}

/// The directory a process uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedStateDir {
    /// The directory.
    pub path: PathBuf,
    /// Why.
    pub source: StateDirSource,
}

/// A resolved directory whose legacy session files were migrated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedStateDir {
    /// The directory.
    pub state_dir: ResolvedStateDir,
    /// The legacy-schema migration.
    pub migration: MigrationReport,
}

/// New default directories whose adoption failed in this process, with the legacy directory
/// used instead. Kept for the life of the process.
static FALLBACKS: OnceLock<Mutex<HashMap<PathBuf, PathBuf>>> = OnceLock::new();

fn fallbacks() -> std::sync::MutexGuard<'static, HashMap<PathBuf, PathBuf>> {
    FALLBACKS
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Whether `dir` is missing or an empty directory. Any other state (a file, unreadable)
/// counts as non-empty: it is never overwritten.
fn is_empty_dir(dir: &Path) -> bool {
    match fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(error) => error.kind() == io::ErrorKind::NotFound && !dir.exists(),
    }
}

/// Copies the tree `from` into the new directory `to`, returning the number of files.
fn copy_tree(from: &Path, to: &Path) -> io::Result<usize> {
    fs::create_dir(to)?;
    let mut files = 0;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            files += copy_tree(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
            files += 1;
        }
    }
    Ok(files)
}

/// Copies `legacy` to a staging directory beside `default`, then renames it onto `default`
/// (which is missing or empty), so a failure never leaves a partial new default behind.
fn adopt(legacy: &Path, default: &Path) -> io::Result<usize> {
    let parent = default
        .parent()
        .ok_or_else(|| io::Error::other("the new default directory has no parent"))?;
    fs::create_dir_all(parent)?;
    let staging = parent.join(format!(".acpx-adopting-{}", uuid::Uuid::new_v4().simple()));
    let copied = copy_tree(legacy, &staging).and_then(|files| {
        if default.exists() {
            fs::remove_dir(default)?;
        }
        fs::rename(&staging, default)?;
        Ok(files)
    });
    if copied.is_err() && staging.exists() {
        // Only our own staging copy is removed; the legacy files are never touched.
        if let Err(error) = fs::remove_dir_all(&staging) {
            tracing::warn!(path = %staging.display(), %error, "could not remove the ACPX adoption staging directory");
        }
    }
    copied
}

/// Decides the state directory (see the [module documentation](super)); adopts the legacy
/// directory into an empty new default. Never fails: an adoption failure falls back to the
/// legacy directory for the rest of the process.
///
/// Resolutions in one process are serialized (so two callers never adopt at once). When
/// another process wins the race and populates the new default first, this one uses it.
#[tracing::instrument(name = "acpx.resolve_state_dir", skip_all)]
pub fn resolve_state_dir(config: &AcpxStateConfig) -> ResolvedStateDir {
    if let Some(explicit) = &config.explicit_state_dir {
        return ResolvedStateDir {
            path: explicit.clone(),
            source: StateDirSource::Explicit,
        };
    }
    let default = config.default_dir();
    let legacy = config.legacy_dir();
    let mut fallbacks = fallbacks();
    if let Some(path) = fallbacks.get(&default) {
        return ResolvedStateDir {
            path: path.clone(),
            source: StateDirSource::LegacyFallback,
        };
    }
    if !is_empty_dir(&default) || !legacy.is_dir() || is_empty_dir(&legacy) {
        return ResolvedStateDir {
            path: default,
            source: StateDirSource::Default,
        };
    }
    match adopt(&legacy, &default) {
        Ok(files) => {
            tracing::info!(from = %legacy.display(), to = %default.display(), files, "adopted the legacy ACPX state directory");
            ResolvedStateDir {
                path: default,
                source: StateDirSource::Adopted { files },
            }
        }
        Err(error) if !is_empty_dir(&default) => {
            // A failed copy never publishes a partial new default, so a populated one now
            // was adopted or created by another process meanwhile: use it.
            tracing::debug!(to = %default.display(), %error, "the new ACPX state directory was populated concurrently; using it");
            ResolvedStateDir {
                path: default,
                source: StateDirSource::Default,
            }
        }
        Err(error) => {
            tracing::warn!(
                from = %legacy.display(),
                to = %default.display(),
                %error,
                "could not adopt the legacy ACPX state directory; using it in place for the rest of this process"
            );
            fallbacks.insert(default, legacy.clone());
            ResolvedStateDir {
                path: legacy,
                source: StateDirSource::LegacyFallback,
            }
        }
    }
}

/// [`resolve_state_dir`], then [`migrate_legacy_sessions`] in the chosen directory.
pub fn prepare_state_dir(config: &AcpxStateConfig) -> Result<PreparedStateDir, Error> {
    let state_dir = resolve_state_dir(config);
    let migration = migrate_legacy_sessions(&state_dir.path)?;
    Ok(PreparedStateDir {
        state_dir,
        migration,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adoption_never_replaces_a_populated_default() {
        let root = tempfile::tempdir().unwrap();
        let legacy = root.path().join("workspace/state");
        fs::create_dir_all(legacy.join("sessions")).unwrap();
        fs::write(legacy.join("sessions/a.json"), b"{}").unwrap();
        let default = root.path().join("state/acpx");
        fs::create_dir_all(&default).unwrap();
        fs::write(default.join("winner.json"), b"{}").unwrap();

        assert!(
            adopt(&legacy, &default).is_err(),
            "a populated default is never replaced"
        );
        assert!(default.join("winner.json").exists());
        assert!(!default.join("sessions").exists());
        let entries: Vec<_> = fs::read_dir(root.path().join("state"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(entries, vec!["acpx"], "the staging copy was removed");
        assert!(legacy.join("sessions/a.json").exists());
    }

    #[test]
    fn empty_means_missing_or_no_entries() {
        let dir = tempfile::tempdir().unwrap();
        assert!(is_empty_dir(dir.path()));
        assert!(is_empty_dir(&dir.path().join("missing")));
        fs::write(dir.path().join("f"), b"x").unwrap();
        assert!(!is_empty_dir(dir.path()));
        assert!(
            !is_empty_dir(&dir.path().join("f")),
            "a file is not an empty directory"
        );
    }
}
