//! The architecture check: crates must not depend on what their invariants forbid
//! (ARCHITECTURE.md). Reads `cargo tree` for the normal (non-dev) dependency graph.

use std::collections::BTreeSet;

use crate::cargo;

/// (crate, forbidden dependencies) pairs.
const RULES: &[(&str, &[&str])] = &[
    (
        "tether-core",
        &[
            "tokio",
            "sea-orm",
            "sqlx",
            "axum",
            "hyper",
            "tether-storage",
            "tether-host",
        ],
    ),
    (
        "tether-storage",
        &[
            "tether-harness-sdk",
            "tether-finalizer",
            "tether-host",
            "axum",
            "hyper",
        ],
    ),
    (
        "tether-harness-sdk",
        &[
            "tether-storage",
            "tether-host",
            "sea-orm",
            "sqlx",
            "axum",
            "hyper",
        ],
    ),
    (
        "tether-finalizer",
        &[
            "tether-storage",
            "tether-host",
            "sea-orm",
            "sqlx",
            "axum",
            "hyper",
            "tokio",
        ],
    ),
    (
        "tether-host",
        &["tether-codex", "tether-admin-http", "axum", "hyper"],
    ),
    (
        "tether-codex",
        &[
            "tether-storage",
            "tether-host",
            "sea-orm",
            "sqlx",
            "axum",
            "hyper",
        ],
    ),
];

/// Runs every rule; lists all violations.
pub(crate) fn check() -> Result<(), String> {
    let mut violations = Vec::new();
    for (krate, forbidden) in RULES {
        let deps = normal_dependencies(krate)?;
        for bad in *forbidden {
            if deps.contains(*bad) {
                violations.push(format!("{krate} depends on {bad}"));
            }
        }
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "architecture invariants broken: {}",
            violations.join("; ")
        ))
    }
}

fn normal_dependencies(krate: &str) -> Result<BTreeSet<String>, String> {
    let out = cargo()
        .args([
            "tree", "--locked", "-p", krate, "-e", "normal", "--prefix", "none", "--format", "{p}",
        ])
        .output()
        .map_err(|e| format!("cargo tree: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo tree -p {krate} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(parse_tree(&String::from_utf8_lossy(&out.stdout)))
}

fn parse_tree(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_tree;

    #[test]
    fn parses_package_names() {
        let deps = parse_tree("tether-core v0.0.0 (/x)\nsha2 v0.10.9\nsha2 v0.10.9 (*)\n");
        assert!(deps.contains("tether-core"));
        assert!(deps.contains("sha2"));
        assert_eq!(deps.len(), 2);
    }
}
