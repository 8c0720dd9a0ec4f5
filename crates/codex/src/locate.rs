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

/// Locates a `codex` binary: `TETHER_CODEX_BIN` when set (it must exist), otherwise the project
/// cache under `workspace_root`. `None` when neither is present.
pub fn locate_codex_binary(workspace_root: Option<&Path>) -> Option<PathBuf> {
    if let Some(explicit) = std::env::var_os(CODEX_BIN_ENV) {
        let path = PathBuf::from(explicit);
        return path.is_file().then_some(path);
    }
    let cached = cached_codex_binary(workspace_root?);
    cached.is_file().then_some(cached)
}
