//! `cargo xtask public-api [--check]`: the public surface of each library crate, as a sorted
//! list of paths, committed as `crates/<crate>/public-api.txt` so that a change of surface is a
//! visible diff (and `--check`, run by `ci`, fails on an uncommitted one).
//!
//! The surface comes from rustdoc's JSON output (`--output-format json`, an unstable rustdoc
//! flag, enabled on the stable toolchain with `RUSTC_BOOTSTRAP=1` for this one command, in a
//! target directory of its own so the main build's fingerprints are untouched). The walk starts
//! at the crate root and follows every public module and `pub use`, so an item reachable by two
//! paths is listed twice — that is the point: one path per item is the goal. Each line is
//! `<path>: <kind>`, sorted by path, so a type's inherent public methods, an enum's variants and
//! a trait's items follow it, and a trait implemented for a public type shows as
//! `<path>: impl <trait>` (blanket and auto-trait impls are left out). rustdoc's own warnings
//! are silenced here: `ci`'s documentation step reports them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::{cargo, say, workspace_root};

/// (package, library name, directory under the workspace root).
const CRATES: &[(&str, &str, &str)] = &[
    ("tether-core", "tether_core", "crates/core"),
    ("tether-storage", "tether_storage", "crates/storage"),
    (
        "tether-harness-sdk",
        "tether_harness_sdk",
        "crates/harness-sdk",
    ),
    ("tether-finalizer", "tether_finalizer", "crates/finalizer"),
    ("tether-host", "tether_host", "crates/host"),
    ("tether-codex", "tether_codex", "crates/codex"),
    (
        "tether-admin-http",
        "tether_admin_http",
        "crates/admin-http",
    ),
];

/// The snapshot file of each crate.
const SNAPSHOT: &str = "public-api.txt";

/// Writes (or with `--check` compares) every crate's snapshot.
pub(crate) fn public_api(args: &[String]) -> Result<(), String> {
    let check = match args.first().map(String::as_str) {
        None => false,
        Some("--check") => true,
        Some(other) => return Err(format!("unknown argument `{other}`; use --check")),
    };
    let root = workspace_root()?;
    let target = crate::target_dir()?.join("public-api");
    let mut stale = Vec::new();
    for (package, lib, dir) in CRATES {
        let (lines, paths) = surface(&root, &target, package, lib)?;
        let text = format!(
            "# The public API of {package} (`cargo xtask public-api` writes this file; `ci` checks it).\n{}",
            lines.iter().map(|l| format!("{l}\n")).collect::<String>()
        );
        let path = root.join(dir).join(SNAPSHOT);
        if check {
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            if committed != text {
                stale.push(format!("{dir}/{SNAPSHOT}"));
            }
        } else {
            std::fs::write(&path, &text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        say(&format!("public-api: {package}: {paths} public paths"));
    }
    if stale.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the public API changed: {} out of date; review the change and run `cargo xtask public-api`",
            stale.join(", ")
        ))
    }
}

/// The sorted surface lines of one crate.
fn surface(
    root: &Path,
    target: &Path,
    package: &str,
    lib: &str,
) -> Result<(Vec<String>, usize), String> {
    let out = cargo()
        .current_dir(root)
        .args([
            "rustdoc",
            "-q",
            "-p",
            package,
            "--lib",
            "--locked",
            "--target-dir",
        ])
        .arg(target)
        .args(["--", "-Z", "unstable-options", "--output-format", "json"])
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTDOCFLAGS", "--cap-lints allow")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run cargo rustdoc: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo rustdoc -p {package} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let file: PathBuf = target.join("doc").join(format!("{lib}.json"));
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let doc = json::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut walk = Walk {
        index: doc
            .get("index")
            .and_then(json::Value::as_object)
            .ok_or("rustdoc JSON without an index")?,
        lines: BTreeSet::new(),
        paths: 0,
        visiting: BTreeSet::new(),
    };
    let root_id = doc
        .get("root")
        .map(json::Value::key)
        .ok_or("rustdoc JSON without a root")?;
    walk.module(&root_id, lib);
    Ok((walk.lines.into_iter().collect(), walk.paths))
}

struct Walk<'a> {
    index: &'a BTreeMap<String, json::Value>,
    lines: BTreeSet<String>,
    /// How many paths reach an item (members and impls not counted).
    paths: usize,
    /// Modules on the current walk (a glob re-export cycle stops here).
    visiting: BTreeSet<String>,
}

impl<'a> Walk<'a> {
    fn item(&self, id: &str) -> Option<(&'a str, &'a json::Value, &'a json::Value)> {
        let index: &'a BTreeMap<String, json::Value> = self.index;
        let item = index.get(id)?;
        let inner = item.get("inner")?.as_object()?;
        let (kind, body) = inner.iter().next()?;
        Some((kind.as_str(), body, item))
    }

    fn module(&mut self, id: &str, path: &str) {
        if !self.visiting.insert(id.to_owned()) {
            return;
        }
        let items: Vec<String> = self
            .item(id)
            .and_then(|(_, body, _)| body.get("items"))
            .and_then(json::Value::as_array)
            .map(|a| a.iter().map(json::Value::key).collect())
            .unwrap_or_default();
        for child in items {
            self.child(&child, path);
        }
        self.visiting.remove(id);
    }

    fn child(&mut self, id: &str, path: &str) {
        let Some((kind, body, item)) = self.item(id) else {
            return;
        };
        if !is_public(item) {
            return;
        }
        if kind == "use" {
            let name = body
                .get("name")
                .and_then(json::Value::as_str)
                .unwrap_or("_");
            let glob = body.get("is_glob").and_then(json::Value::as_bool) == Some(true);
            let target = body.get("id").map(json::Value::key);
            let source = body
                .get("source")
                .and_then(json::Value::as_str)
                .unwrap_or("?");
            match target
                .as_deref()
                .and_then(|t| self.item(t).map(|(k, _, _)| (t, k)))
            {
                Some((t, "module")) if glob => self.module(t, path),
                Some((t, _)) if !glob => self.named(t, &format!("{path}::{name}")),
                _ if glob => {
                    self.lines.insert(format!("{path}::*: use {source}::*"));
                }
                _ => {
                    self.lines.insert(format!("{path}::{name}: use {source}"));
                }
            }
            return;
        }
        let name = item
            .get("name")
            .and_then(json::Value::as_str)
            .unwrap_or("_");
        self.named(id, &format!("{path}::{name}"));
    }

    /// The item `id`, reachable at `path`.
    fn named(&mut self, id: &str, path: &str) {
        let Some((kind, body, _)) = self.item(id) else {
            return;
        };
        let kind = kind.to_owned();
        if kind == "module" {
            self.lines.insert(format!("{path}: mod"));
            self.paths += 1;
            self.module(id, path);
            return;
        }
        self.lines.insert(format!("{path}: {kind}"));
        self.paths += 1;
        let members: Vec<String> = match kind.as_str() {
            "enum" => ids(body.get("variants")),
            "trait" => ids(body.get("items")),
            _ => Vec::new(),
        };
        for member in members {
            if let Some((member_kind, _, item)) = self.item(&member) {
                let name = item
                    .get("name")
                    .and_then(json::Value::as_str)
                    .unwrap_or("_");
                self.lines.insert(format!("{path}::{name}: {member_kind}"));
            }
        }
        for imp in ids(body.get("impls")) {
            self.impl_block(&imp, path);
        }
    }

    fn impl_block(&mut self, id: &str, path: &str) {
        let Some((_, body, _)) = self.item(id) else {
            return;
        };
        if body.get("is_synthetic").and_then(json::Value::as_bool) == Some(true)
            || body.get("blanket_impl").is_some_and(|b| !b.is_null())
        {
            return;
        }
        match body.get("trait").filter(|t| !t.is_null()) {
            Some(tr) => {
                let name = tr.get("path").and_then(json::Value::as_str).unwrap_or("?");
                self.lines.insert(format!("{path}: impl {name}"));
            }
            None => {
                for member in ids(body.get("items")) {
                    if let Some((kind, _, item)) = self.item(&member)
                        && is_public(item)
                    {
                        let name = item
                            .get("name")
                            .and_then(json::Value::as_str)
                            .unwrap_or("_");
                        self.lines.insert(format!("{path}::{name}: {kind}"));
                    }
                }
            }
        }
    }
}

fn ids(value: Option<&json::Value>) -> Vec<String> {
    value
        .and_then(json::Value::as_array)
        .map(|a| a.iter().map(json::Value::key).collect())
        .unwrap_or_default()
}

fn is_public(item: &json::Value) -> bool {
    matches!(
        item.get("visibility").and_then(json::Value::as_str),
        Some("public" | "default")
    )
}

/// A small JSON reader (xtask has no dependencies): enough for rustdoc's output.
mod json {
    use std::collections::BTreeMap;

    /// A JSON value.
    #[derive(Debug)]
    pub(super) enum Value {
        Null,
        Bool(bool),
        Number(String),
        String(String),
        Array(Vec<Value>),
        Object(BTreeMap<String, Value>),
    }

    impl Value {
        pub(super) fn get(&self, key: &str) -> Option<&Value> {
            self.as_object()?.get(key)
        }

        pub(super) fn as_object(&self) -> Option<&BTreeMap<String, Value>> {
            match self {
                Self::Object(o) => Some(o),
                _ => None,
            }
        }

        pub(super) fn as_array(&self) -> Option<&Vec<Value>> {
            match self {
                Self::Array(a) => Some(a),
                _ => None,
            }
        }

        pub(super) fn as_str(&self) -> Option<&str> {
            match self {
                Self::String(s) => Some(s),
                _ => None,
            }
        }

        pub(super) fn as_bool(&self) -> Option<bool> {
            match self {
                Self::Bool(b) => Some(*b),
                _ => None,
            }
        }

        pub(super) fn is_null(&self) -> bool {
            matches!(self, Self::Null)
        }

        /// An id as the index's key: a number's digits, or a string.
        pub(super) fn key(&self) -> String {
            match self {
                Self::Number(n) => n.clone(),
                Self::String(s) => s.clone(),
                _ => String::new(),
            }
        }
    }

    pub(super) fn parse(text: &str) -> Result<Value, String> {
        let mut p = Parser {
            s: text.as_bytes(),
            i: 0,
        };
        let v = p.value(0)?;
        p.ws();
        if p.i != p.s.len() {
            return Err(format!("trailing data at byte {}", p.i));
        }
        Ok(v)
    }

    struct Parser<'a> {
        s: &'a [u8],
        i: usize,
    }

    impl Parser<'_> {
        fn ws(&mut self) {
            while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
                self.i += 1;
            }
        }

        fn err(&self, what: &str) -> String {
            format!("{what} at byte {}", self.i)
        }

        fn value(&mut self, depth: usize) -> Result<Value, String> {
            if depth > 512 {
                return Err(self.err("nested too deeply"));
            }
            self.ws();
            match self.s.get(self.i) {
                Some(b'{') => {
                    self.i += 1;
                    let mut map = BTreeMap::new();
                    self.ws();
                    if self.s.get(self.i) == Some(&b'}') {
                        self.i += 1;
                        return Ok(Value::Object(map));
                    }
                    loop {
                        self.ws();
                        let key = self.string()?;
                        self.ws();
                        if self.s.get(self.i) != Some(&b':') {
                            return Err(self.err("expected `:`"));
                        }
                        self.i += 1;
                        map.insert(key, self.value(depth + 1)?);
                        self.ws();
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b'}') => {
                                self.i += 1;
                                return Ok(Value::Object(map));
                            }
                            _ => return Err(self.err("expected `,` or `}`")),
                        }
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    let mut items = Vec::new();
                    self.ws();
                    if self.s.get(self.i) == Some(&b']') {
                        self.i += 1;
                        return Ok(Value::Array(items));
                    }
                    loop {
                        items.push(self.value(depth + 1)?);
                        self.ws();
                        match self.s.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b']') => {
                                self.i += 1;
                                return Ok(Value::Array(items));
                            }
                            _ => return Err(self.err("expected `,` or `]`")),
                        }
                    }
                }
                Some(b'"') => self.string().map(Value::String),
                Some(b't') => self.word("true", Value::Bool(true)),
                Some(b'f') => self.word("false", Value::Bool(false)),
                Some(b'n') => self.word("null", Value::Null),
                Some(c) if *c == b'-' || c.is_ascii_digit() => {
                    let start = self.i;
                    while self
                        .s
                        .get(self.i)
                        .is_some_and(|c| c.is_ascii_digit() || b"+-.eE".contains(c))
                    {
                        self.i += 1;
                    }
                    Ok(Value::Number(
                        String::from_utf8_lossy(&self.s[start..self.i]).into_owned(),
                    ))
                }
                _ => Err(self.err("unexpected character")),
            }
        }

        fn word(&mut self, word: &str, value: Value) -> Result<Value, String> {
            if self.s[self.i..].starts_with(word.as_bytes()) {
                self.i += word.len();
                Ok(value)
            } else {
                Err(self.err("unexpected word"))
            }
        }

        fn string(&mut self) -> Result<String, String> {
            if self.s.get(self.i) != Some(&b'"') {
                return Err(self.err("expected a string"));
            }
            self.i += 1;
            let mut out = Vec::new();
            loop {
                match self.s.get(self.i) {
                    None => return Err(self.err("unterminated string")),
                    Some(b'"') => {
                        self.i += 1;
                        return String::from_utf8(out).map_err(|_| self.err("invalid UTF-8"));
                    }
                    Some(b'\\') => {
                        let escaped = *self
                            .s
                            .get(self.i + 1)
                            .ok_or_else(|| self.err("bad escape"))?;
                        self.i += 2;
                        match escaped {
                            b'n' => out.push(b'\n'),
                            b't' => out.push(b'\t'),
                            b'r' => out.push(b'\r'),
                            b'b' => out.push(8),
                            b'f' => out.push(12),
                            b'u' => {
                                let hex = self
                                    .s
                                    .get(self.i..self.i + 4)
                                    .and_then(|h| std::str::from_utf8(h).ok())
                                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                                    .ok_or_else(|| self.err("bad \\u escape"))?;
                                self.i += 4;
                                // Surrogate halves (rare in rustdoc output) become U+FFFD.
                                let c = char::from_u32(hex).unwrap_or('\u{fffd}');
                                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                            }
                            other => out.push(other),
                        }
                    }
                    Some(&c) => {
                        out.push(c);
                        self.i += 1;
                    }
                }
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::{Value, parse};

        #[test]
        fn reads_what_rustdoc_writes() {
            let v = parse(
                r#"{"root": 7, "index": {"7": {"name": "a\"b\u00e9", "x": [true, null, -1.5e3]}}}"#,
            )
            .unwrap();
            assert_eq!(v.get("root").unwrap().key(), "7");
            let item = v.get("index").unwrap().get("7").unwrap();
            assert_eq!(item.get("name").unwrap().as_str(), Some("a\"bé"));
            let x = item.get("x").unwrap().as_array().unwrap();
            assert_eq!(x[0].as_bool(), Some(true));
            assert!(x[1].is_null());
            assert!(matches!(&x[2], Value::Number(n) if n == "-1.5e3"));
            assert!(parse("[1,]").is_err());
            assert!(parse("{} x").is_err());
        }
    }
}
