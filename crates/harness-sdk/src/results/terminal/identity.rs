//! Action identity (`docs/tool-results.md`, 'The terminal-outcome accumulator'): when is a successful call "the same action" as an
//! earlier failed one?
//!
//! The default rule ([`FingerprintIdentity`]) keys on the tool, its `action` argument and the
//! arguments that name a target, per tool:
//!
//! | Tool | Identity |
//! |---|---|
//! | `edit`, `write`, `apply_patch` | the files they touch (`edit` then `write` on one file is one action) |
//! | `sessions_spawn` | tool + target agent (`agentId`); task, model, label and timeouts may change on a retry |
//! | owner-declared mutation | owner key + canonical JSON of the arguments |
//! | any other mutating tool | tool + action + targets (path, old/new path, recipient `to`/`target`, message id, session key, job id, id, model); tool + action when no target is present |
//!
//! Display metadata (`meta`) is **never** part of the identity: hosts pass it with every
//! terminal report and it carries volatile details (lengths, counts, truncated text), so a
//! retry with adjusted arguments would otherwise never clear its failure.

use std::fmt;

use serde_json::{Map, Value};

use super::mutation::{classifier_name, normalized_action};

/// What the identity rule sees of one call.
#[derive(Debug, Clone, Copy)]
pub struct ActionCall<'a> {
    /// Canonical tool name.
    pub tool_name: &'a str,
    /// Executed arguments (plain object), if any.
    pub arguments: Option<&'a Map<String, Value>>,
    /// Display metadata, if any.
    pub meta: Option<&'a str>,
    /// Whether the call is a mutating action.
    pub mutating: bool,
    /// The owner key of an owner-declared mutation.
    pub owner_key: Option<&'a str>,
}

/// The identity data of one call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ActionRecord {
    /// Lowercased, trimmed tool name.
    pub tool_name: String,
    /// `tool=…|action=…|path=…` (mutating calls only), or `owner=…|args=…`.
    pub fingerprint: Option<String>,
    /// Files an `edit`/`write`/`apply_patch` call targets.
    pub file_targets: Vec<String>,
    /// Normalized display metadata (informational only: never compared by the built-in rules).
    pub meta: Option<String>,
}

/// A pluggable "same action" rule.
pub trait ActionIdentity: Send + Sync + fmt::Debug {
    /// Builds the identity data of a call.
    fn describe(&self, call: &ActionCall<'_>) -> ActionRecord;

    /// Whether `success` resolves the earlier `failed` call.
    fn same_action(&self, failed: &ActionRecord, success: &ActionRecord) -> bool;
}

/// The simple rule: same (case-insensitive, trimmed) tool name.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolNameIdentity;

impl ActionIdentity for ToolNameIdentity {
    fn describe(&self, call: &ActionCall<'_>) -> ActionRecord {
        ActionRecord {
            tool_name: call.tool_name.trim().to_ascii_lowercase(),
            ..ActionRecord::default()
        }
    }

    fn same_action(&self, failed: &ActionRecord, success: &ActionRecord) -> bool {
        failed.tool_name == success.tool_name
    }
}

/// The default rule (`docs/tool-results.md`, the action-identity table): tool + action + target (path, recipient, message id, session
/// key, job id, id, model); `edit` and `write` on the same file are one action;
/// `sessions_spawn` is keyed on its target agent; owner-declared mutations include a canonical
/// form of their arguments. Display metadata is never part of it (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct FingerprintIdentity;

const TARGET_GROUPS: &[(&str, &[&str])] = &[
    (
        "path",
        &["path", "file_path", "filePath", "filepath", "file"],
    ),
    ("oldpath", &["oldPath", "old_path"]),
    ("newpath", &["newPath", "new_path"]),
    ("to", &["to", "target"]),
    ("messageid", &["messageId", "message_id"]),
    ("sessionkey", &["sessionKey", "session_key"]),
    ("jobid", &["jobId", "job_id"]),
    ("id", &["id"]),
    ("model", &["model"]),
];

/// The target groups of `sessions_spawn`: only the agent it spawns (a retry adjusts the task,
/// model, label or timeouts and is still the same action).
const SPAWN_TARGET_GROUPS: &[(&str, &[&str])] = &[("agentid", &["agentId", "agent_id"])];

/// The target groups that identify a call of `tool`.
fn target_groups(tool: &str) -> &'static [(&'static str, &'static [&'static str])] {
    match tool {
        "sessions_spawn" => SPAWN_TARGET_GROUPS,
        _ => TARGET_GROUPS,
    }
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.trim().to_owned()).filter(|s| !s.is_empty()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn normalize_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut prev_slash = false;
    for c in path.trim().chars() {
        let c = if c == '\\' { '/' } else { c };
        if c == '/' && prev_slash {
            continue;
        }
        prev_slash = c == '/';
        out.push(c);
    }
    if out.len() > 1 && out.ends_with('/') {
        out.pop();
    }
    out
}

fn file_targets(tool: &str, args: Option<&Map<String, Value>>) -> Vec<String> {
    let Some(args) = args else {
        return Vec::new();
    };
    match tool {
        "edit" | "write" => {
            let mut targets = Vec::new();
            for group in ["path", "oldpath"] {
                let aliases = TARGET_GROUPS
                    .iter()
                    .find(|(g, _)| *g == group)
                    .map(|(_, a)| *a)
                    .unwrap_or(&[]);
                if let Some(p) = aliases
                    .iter()
                    .find_map(|k| args.get(*k).and_then(Value::as_str))
                {
                    let p = normalize_path(p);
                    if !p.is_empty() && !targets.contains(&p) {
                        targets.push(p);
                    }
                }
            }
            targets
        }
        "apply_patch" => {
            let patch = ["input", "patch"]
                .iter()
                .find_map(|k| args.get(*k).and_then(Value::as_str))
                .unwrap_or("");
            let mut targets: Vec<String> = Vec::new();
            for line in patch.lines() {
                let line = line.trim();
                let path = line
                    .strip_prefix("*** Add File:")
                    .or_else(|| line.strip_prefix("*** Update File:"))
                    .map(normalize_path);
                if let Some(p) = path.filter(|p| !p.is_empty() && !targets.contains(p)) {
                    targets.push(p);
                }
            }
            targets
        }
        _ => Vec::new(),
    }
}

enum Item<'a> {
    Value(&'a Value),
    Object(&'a Map<String, Value>),
    Text(&'static str),
    Key(&'a str),
}

/// A canonical (sorted-key, compact) JSON text, built without recursion.
#[cfg(test)]
pub(crate) fn canonical_json(value: &Value) -> String {
    write_canonical(Item::Value(value))
}

/// [`canonical_json`] of an object.
pub(crate) fn canonical_json_object(map: &Map<String, Value>) -> String {
    write_canonical(Item::Object(map))
}

fn write_canonical(root: Item<'_>) -> String {
    let mut out = String::new();
    let mut stack = vec![root];
    while let Some(item) = stack.pop() {
        match item {
            Item::Text(t) => out.push_str(t),
            Item::Key(k) => {
                out.push_str(&Value::String(k.to_owned()).to_string());
                out.push(':');
            }
            Item::Value(Value::Array(items)) => {
                stack.push(Item::Text("]"));
                for (i, v) in items.iter().enumerate().rev() {
                    stack.push(Item::Value(v));
                    if i > 0 {
                        stack.push(Item::Text(","));
                    }
                }
                out.push('[');
            }
            Item::Value(Value::Object(map)) | Item::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                stack.push(Item::Text("}"));
                for (i, (k, v)) in entries.into_iter().enumerate().rev() {
                    stack.push(Item::Value(v));
                    stack.push(Item::Key(k));
                    if i > 0 {
                        stack.push(Item::Text(","));
                    }
                }
                out.push('{');
            }
            Item::Value(scalar) => out.push_str(&scalar.to_string()),
        }
    }
    out
}

fn normalize_meta(meta: Option<&str>) -> Option<String> {
    meta.map(|m| {
        m.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    })
    .filter(|m| !m.is_empty())
}

impl ActionIdentity for FingerprintIdentity {
    fn describe(&self, call: &ActionCall<'_>) -> ActionRecord {
        let tool = classifier_name(call.tool_name);
        let meta = normalize_meta(call.meta);
        let fingerprint = if let Some(owner) = call.owner_key {
            let args = call
                .arguments
                .map(canonical_json_object)
                .unwrap_or_else(|| "{}".into());
            Some(format!("owner={owner}|args={args}"))
        } else if call.mutating {
            let mut fp = format!("tool={tool}");
            if let Some(action) = normalized_action(call.arguments) {
                fp.push_str(&format!("|action={action}"));
            }
            if let Some(args) = call.arguments {
                for (group, aliases) in target_groups(&tool) {
                    if let Some(v) = aliases
                        .iter()
                        .find_map(|k| args.get(*k).and_then(scalar_text))
                    {
                        fp.push_str(&format!("|{group}={}", v.to_lowercase()));
                    }
                }
            }
            Some(fp)
        } else {
            None
        };
        ActionRecord {
            file_targets: file_targets(&tool, call.arguments),
            tool_name: tool,
            fingerprint,
            meta,
        }
    }

    fn same_action(&self, failed: &ActionRecord, success: &ActionRecord) -> bool {
        if !failed.file_targets.is_empty() && !success.file_targets.is_empty() {
            return failed
                .file_targets
                .iter()
                .any(|t| success.file_targets.contains(t));
        }
        if failed.fingerprint.is_some() || success.fingerprint.is_some() {
            return failed.fingerprint.is_some() && failed.fingerprint == success.fingerprint;
        }
        failed.tool_name == success.tool_name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn describe(tool: &str, args: Value, mutating: bool) -> ActionRecord {
        let args = args.as_object().cloned();
        FingerprintIdentity.describe(&ActionCall {
            tool_name: tool,
            arguments: args.as_ref(),
            meta: None,
            mutating,
            owner_key: None,
        })
    }

    #[test]
    fn fingerprints() {
        let a = describe(
            "message",
            json!({"action": "send", "to": "Channel:A", "message": "x"}),
            true,
        );
        assert_eq!(
            a.fingerprint.as_deref(),
            Some("tool=message|action=send|to=channel:a")
        );
        let r = describe("read", json!({"path": "/a"}), false);
        assert_eq!(r.fingerprint, None);
        let s = describe(
            "sessions_spawn",
            json!({"agentId": "Coder", "task": "x", "model": "m1"}),
            true,
        );
        assert_eq!(
            s.fingerprint.as_deref(),
            Some("tool=sessions_spawn|agentid=coder")
        );
    }

    #[test]
    fn display_metadata_is_never_part_of_the_identity() {
        let call = |meta: &'static str| ActionCall {
            tool_name: "cron",
            arguments: None,
            meta: Some(meta),
            mutating: true,
            owner_key: None,
        };
        let a = FingerprintIdentity.describe(&call("add job, 12 chars"));
        let b = FingerprintIdentity.describe(&call("add job, 40 chars"));
        assert_eq!(a.fingerprint.as_deref(), Some("tool=cron"));
        assert!(FingerprintIdentity.same_action(&a, &b));
    }

    #[test]
    fn edit_and_write_on_same_file_match() {
        let e = describe("edit", json!({"path": "/scratch//demo.txt"}), true);
        let w = describe("write", json!({"file_path": "/scratch/demo.txt"}), true);
        assert!(FingerprintIdentity.same_action(&e, &w));
        let p = describe(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Update File: /scratch/demo.txt\n"}),
            true,
        );
        assert!(FingerprintIdentity.same_action(&e, &p));
    }

    #[test]
    fn canonical_json_sorts_and_handles_depth() {
        assert_eq!(
            canonical_json(&json!({"b": [1, "x"], "a": {"d": null, "c": true}})),
            r#"{"a":{"c":true,"d":null},"b":[1,"x"]}"#
        );
        let mut deep = json!(1);
        for _ in 0..20_000 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(canonical_json(&deep).len(), 40_001);
        crate::results::drop_deep(deep);
    }
}
