//! `cargo xtask codex-install`: installs the pinned Codex CLI (`@openai/codex`) with npm into a
//! cache folder the project owns (`.tether-cache/codex/<version>/`, ignored by git), so the
//! `tether-codex` end-to-end tests can drive a real `codex app-server`.
//!
//! The version lives in one place, `PINNED_CODEX_VERSION` in `crates/codex/src/locate.rs`; this
//! task reads it from there. After npm finishes, the task links `bin/codex` to the native binary
//! the package ships, so the tests start the app-server directly (no Node wrapper process between
//! the test and the child it may kill).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{say, workspace_root};

/// Where the pinned version is declared.
const VERSION_SOURCE: &str = "crates/codex/src/locate.rs";
/// The declaration line's prefix in that file.
const VERSION_PREFIX: &str = "pub const PINNED_CODEX_VERSION: &str = \"";

/// Installs the pinned version unless it is already present.
pub(crate) fn install() -> Result<(), String> {
    let root = workspace_root()?;
    let version = pinned_version(&root)?;
    let dir = root.join(".tether-cache").join("codex").join(&version);
    let link = dir.join("bin").join("codex");
    if installed_version(&dir).as_deref() == Some(version.as_str()) && link.exists() {
        say(&format!(
            "codex-install: @openai/codex@{version} already in {}",
            dir.display()
        ));
        return Ok(());
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    say(&format!(
        "codex-install: npm install @openai/codex@{version} into {}",
        dir.display()
    ));
    let status = Command::new("npm")
        .args([
            "install",
            "--no-save",
            "--no-audit",
            "--no-fund",
            "--prefix",
        ])
        .arg(&dir)
        .arg(format!("@openai/codex@{version}"))
        .status()
        .map_err(|e| format!("cannot start npm (is Node.js installed?): {e}"))?;
    if !status.success() {
        return Err(format!("npm install failed ({status})"));
    }
    let found = installed_version(&dir);
    if found.as_deref() != Some(version.as_str()) {
        return Err(format!(
            "npm installed {found:?}, expected @openai/codex@{version}"
        ));
    }
    let native = native_binary(&dir)?;
    std::fs::create_dir_all(dir.join("bin")).map_err(|e| format!("cannot create bin/: {e}"))?;
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&native, &link)
        .map_err(|e| format!("cannot link {}: {e}", link.display()))?;
    say(&format!(
        "codex-install: {} -> {}",
        link.display(),
        native.display()
    ));
    Ok(())
}

/// Reads the pinned version from the crate's source.
fn pinned_version(root: &Path) -> Result<String, String> {
    let path = root.join(VERSION_SOURCE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_pinned(&text).ok_or_else(|| format!("no `{VERSION_PREFIX}…` line in {VERSION_SOURCE}"))
}

fn parse_pinned(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix(VERSION_PREFIX)?;
        Some(rest.split('"').next()?.to_owned())
    })
}

/// The version of `@openai/codex` installed under `dir`, if any.
fn installed_version(dir: &Path) -> Option<String> {
    let manifest = dir.join("node_modules/@openai/codex/package.json");
    let text = std::fs::read_to_string(manifest).ok()?;
    // A tiny scan for `"version": "x"` keeps xtask free of dependencies.
    let idx = text.find("\"version\"")?;
    let rest = &text[idx + "\"version\"".len()..];
    let start = rest.find('"')? + 1;
    let end = rest[start..].find('"')? + start;
    Some(rest[start..end].to_owned())
}

/// The native binary shipped by the platform package
/// (`node_modules/@openai/codex-<platform>/vendor/<triple>/bin/codex`).
fn native_binary(dir: &Path) -> Result<PathBuf, String> {
    let scope = dir.join("node_modules/@openai");
    let entries = std::fs::read_dir(&scope).map_err(|e| format!("{}: {e}", scope.display()))?;
    for entry in entries.flatten() {
        let vendor = entry.path().join("vendor");
        let Ok(triples) = std::fs::read_dir(&vendor) else {
            continue;
        };
        for triple in triples.flatten() {
            let candidate = triple.path().join("bin").join("codex");
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(format!(
        "no native codex binary under {}/*/vendor/*/bin/",
        scope.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::parse_pinned;

    #[test]
    fn reads_the_pinned_version_line() {
        let text = "//! x\n/// The version.\npub const PINNED_CODEX_VERSION: &str = \"0.171.0\";\n";
        assert_eq!(parse_pinned(text).as_deref(), Some("0.171.0"));
        assert_eq!(parse_pinned("const OTHER: &str = \"1\";"), None);
    }
}
