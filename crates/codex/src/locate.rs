//! Finding the `codex` binary: `TETHER_CODEX_BIN`, or the cache `cargo xtask codex-install` fills.

use std::path::{Path, PathBuf};

/// The `@openai/codex` version this crate is built and tested against. `cargo xtask
/// codex-install` reads this line to know what to install; a bump changes only this constant.
pub const PINNED_CODEX_VERSION: &str = "0.171.0";

/// The environment variable naming an explicit `codex` binary.
pub const CODEX_BIN_ENV: &str = "TETHER_CODEX_BIN";

/// The binary inside the project's cache (`<workspace>/.tether-cache/codex/<version>/bin/codex`),
/// given the workspace root.
pub fn cached_codex_binary(workspace_root: &Path) -> PathBuf {
    workspace_root
        .join(".tether-cache")
        .join("codex")
        .join(PINNED_CODEX_VERSION)
        .join("bin")
        .join("codex")
}

/// Locates a `codex` binary: `TETHER_CODEX_BIN` when set, otherwise the project cache under
/// `workspace_root`. `None` when neither names a file.
///
/// A set `TETHER_CODEX_BIN` is the only place looked at: when it names no file the answer is
/// `None`, logged as a warning naming the path, and the cache is not consulted (an explicit
/// choice that is wrong is reported, never replaced by another binary).
pub fn locate_codex_binary(workspace_root: Option<&Path>) -> Option<PathBuf> {
    locate_in(
        std::env::var_os(CODEX_BIN_ENV).map(PathBuf::from),
        workspace_root,
    )
}

/// [`locate_codex_binary`] with the value of `TETHER_CODEX_BIN` given.
fn locate_in(explicit: Option<PathBuf>, workspace_root: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = explicit {
        if path.is_file() {
            return Some(path);
        }
        tracing::warn!(
            path = %path.display(),
            "{CODEX_BIN_ENV} names no file; no codex binary is used (the cache under .tether-cache/ is not consulted while {CODEX_BIN_ENV} is set)"
        );
        return None;
    }
    let cached = cached_codex_binary(workspace_root?);
    cached.is_file().then_some(cached)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A workspace whose cache holds a (fake) binary of the pinned version.
    fn workspace_with_cache() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let cached = cached_codex_binary(root.path());
        std::fs::create_dir_all(cached.parent().unwrap()).unwrap();
        std::fs::write(&cached, "").unwrap();
        root
    }

    #[test]
    fn the_cache_is_used_when_the_variable_is_unset() {
        let root = workspace_with_cache();
        assert_eq!(
            locate_in(None, Some(root.path())),
            Some(cached_codex_binary(root.path()))
        );
        assert_eq!(locate_in(None, None), None);
    }

    #[test]
    fn an_explicit_binary_wins_and_a_missing_one_is_not_replaced_by_the_cache() {
        let root = workspace_with_cache();
        let explicit = root.path().join("my-codex");
        std::fs::write(&explicit, "").unwrap();
        assert_eq!(
            locate_in(Some(explicit.clone()), Some(root.path())),
            Some(explicit)
        );
        let missing = root.path().join("no-such-codex");
        let logs = SharedLog::default();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(logs.clone())
            .finish();
        let found = tracing::subscriber::with_default(subscriber, || {
            locate_in(Some(missing.clone()), Some(root.path()))
        });
        assert_eq!(found, None);
        let logged = logs.text();
        assert!(logged.contains("WARN"), "{logged}");
        assert!(logged.contains(&missing.display().to_string()), "{logged}");
        assert!(logged.contains("is not consulted"), "{logged}");
    }

    /// A log writer keeping what was written.
    #[derive(Clone, Default)]
    struct SharedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl SharedLog {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    impl std::io::Write for SharedLog {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for SharedLog {
        type Writer = Self;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }
}
