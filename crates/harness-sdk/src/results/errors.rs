//! Tool-result errors: the error rule of a returned result (`details.status`, `ok`/`success`,
//! `timedOut`, `error`, `exitCode`), its failure kind (blocked, timed out, cancelled, failed),
//! and the error text and code a host shows or matches.
//!
//! A tool result has the shape agent runtimes return, `{"content": [...], "details": {...}}`:
//! the model reads `content`, the host reads `details`, and the error rule reads `details`
//! (`status`, `ok`, `success`, `timedOut`, `error`, `exitCode`). A plain object result (no
//! `details`, and no `content` list of blocks) is read as its own `details`. A result with a
//! `content` list and no `details` has nothing the rule reads: it is not an error.
//!
//! Everything reads the raw result shallowly (the result and its `details`, plus one level of
//! nested error objects), never recursing on caller-supplied depth; error texts are redacted
//! and cut to one line.
//!
//! ```
//! use serde_json::json;
//! use tether_harness_sdk::results::errors::{
//!     ToolResultFailureKind, extract_tool_error_code, extract_tool_error_message,
//!     is_tool_result_error, tool_result_failure_kind,
//! };
//!
//! let result = json!({"details": {"status": "completed", "exitCode": 2, "error": "boom\nstack"}});
//! assert!(is_tool_result_error(&result));
//! assert_eq!(tool_result_failure_kind(&result), Some(ToolResultFailureKind::Failed));
//! assert_eq!(extract_tool_error_message(&result).as_deref(), Some("boom"));
//! let denied = json!({"details": {"status": "failed", "error": {"code": "SYSTEM_RUN_DENIED"}}});
//! assert_eq!(extract_tool_error_code(&denied).as_deref(), Some("SYSTEM_RUN_DENIED"));
//! // A plain object is its own details; text alone says nothing.
//! assert!(is_tool_result_error(&json!({"ok": false, "exitCode": 1})));
//! assert!(!is_tool_result_error(&json!({"content": [{"type": "text", "text": "Error: no"}]})));
//! ```

use serde_json::{Map, Value};

use super::redact::redact_text;
use super::sanitize::redact_structured;
use super::tree::drop_deep;

/// Error texts are cut to this many UTF-16 code units (plus `…`).
pub const TOOL_ERROR_MAX_UNITS: usize = 400;

/// Result texts are cut to this many UTF-16 code units.
pub const TOOL_RESULT_TEXT_MAX_UNITS: usize = 8000;

/// Codes recognised at the start of a denial message (`SYSTEM_RUN_DENIED: approval required`).
const DENIAL_CODES: [&str; 2] = ["SYSTEM_RUN_DENIED", "INVALID_REQUEST"];

const TIMEOUT_STATUSES: &[&str] = &["timeout", "timed_out"];
const BLOCKED_STATUSES: &[&str] = &[
    "blocked",
    "denied",
    "forbidden",
    "disabled",
    "approval-unavailable",
];
const CANCELLED_STATUSES: &[&str] = &["aborted", "cancelled", "canceled", "killed"];
const OTHER_FAILURE_STATUSES: &[&str] = &["error", "failed", "failure", "unavailable", "invalid"];

/// How a returned tool result failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolResultFailureKind {
    /// A guard or policy refused it (`blocked`, `denied`, `forbidden`, `disabled`,
    /// `approval-unavailable`).
    Blocked,
    /// It timed out (`timedOut: true`, or status `timeout`/`timed_out`).
    TimedOut,
    /// It was cancelled (`aborted`, `cancelled`, `canceled`, `killed`).
    Cancelled,
    /// Any other failure.
    Failed,
}

/// The object the error rule reads: a result's `details` object; for a plain object result
/// (no `details`, and no `content` list of blocks, so not the `{content, details}` shape of a
/// runtime's tool result) the result itself, so a failure a host reports as
/// `{"ok": false, "exitCode": 1}` is never read as a success.
pub(crate) fn details(result: &Value) -> Option<&Map<String, Value>> {
    let obj = result.as_object()?;
    match obj.get("details") {
        Some(details) => details.as_object(),
        None if !obj.get("content").is_some_and(Value::is_array) => Some(obj),
        None => None,
    }
}

/// `details.status`, trimmed and lower-cased.
fn status(result: &Value) -> Option<String> {
    details(result)?
        .get("status")?
        .as_str()
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty())
}

fn is_truthy(value: Option<&Value>) -> bool {
    value.is_some_and(super::tree::is_truthy)
}

/// The tool-result error rule: `ok: false` or `success: false`; a failure status (unless
/// `ok`/`success` is `true`, so an acknowledged cancellation is not an error); `timedOut:
/// true` or any `error`; a finite non-zero `exitCode` (even under status `completed`: the
/// process ran to the end and failed).
pub fn is_tool_result_error(result: &Value) -> bool {
    let Some(d) = details(result) else {
        return false;
    };
    let flag = |k: &str| d.get(k).and_then(Value::as_bool);
    if flag("ok") == Some(false) || flag("success") == Some(false) {
        return true;
    }
    let status = status(result);
    let status = status.as_deref();
    let explicitly_ok = flag("ok") == Some(true) || flag("success") == Some(true);
    let failure_status = status.is_some_and(|s| {
        [
            TIMEOUT_STATUSES,
            BLOCKED_STATUSES,
            CANCELLED_STATUSES,
            OTHER_FAILURE_STATUSES,
        ]
        .iter()
        .any(|set| set.contains(&s))
    });
    if failure_status && !explicitly_ok {
        return true;
    }
    if flag("timedOut") == Some(true) || is_truthy(d.get("error")) {
        return true;
    }
    d.get("exitCode")
        .and_then(Value::as_f64)
        .is_some_and(|code| code.is_finite() && code != 0.0)
}

/// Whether a result reports a timeout (status `timeout` or `details.timedOut: true`).
pub fn is_tool_result_timed_out(result: &Value) -> bool {
    status(result).as_deref() == Some("timeout")
        || details(result).and_then(|d| d.get("timedOut")) == Some(&Value::Bool(true))
}

/// The failure kind of an erroneous result (`None` when [`is_tool_result_error`] is false).
pub fn tool_result_failure_kind(result: &Value) -> Option<ToolResultFailureKind> {
    if !is_tool_result_error(result) {
        return None;
    }
    let status = status(result);
    let status = status.as_deref();
    let is = |set: &[&str]| status.is_some_and(|s| set.contains(&s));
    Some(if is(BLOCKED_STATUSES) {
        ToolResultFailureKind::Blocked
    } else if details(result).and_then(|d| d.get("timedOut")) == Some(&Value::Bool(true))
        || is(TIMEOUT_STATUSES)
    {
        ToolResultFailureKind::TimedOut
    } else if is(CANCELLED_STATUSES) {
        ToolResultFailureKind::Cancelled
    } else {
        ToolResultFailureKind::Failed
    })
}

/// The first `max` UTF-16 code units of `s` at most, never splitting a character.
fn utf16_prefix(s: &str, max: usize) -> &str {
    let mut units = 0;
    for (i, c) in s.char_indices() {
        units += c.len_utf16();
        if units > max {
            return &s[..i];
        }
    }
    s
}

/// The first non-blank line of an error text, redacted, cut to [`TOOL_ERROR_MAX_UNITS`].
fn error_line(text: &str) -> Option<String> {
    let line = text.trim().lines().next()?.trim();
    if line.is_empty() {
        return None;
    }
    let line = redact_text(line);
    let cut = utf16_prefix(&line, TOOL_ERROR_MAX_UNITS);
    Some(if cut.len() < line.len() {
        format!("{cut}…")
    } else {
        line
    })
}

/// An error text from a string, or from an object's `message` or `error` string.
fn error_candidate(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => error_line(s),
        Value::Object(o) => [o.get("message"), o.get("error")]
            .into_iter()
            .flatten()
            .find_map(Value::as_str)
            .and_then(error_line),
        _ => None,
    }
}

/// `error`, then `message`, then `reason`.
fn direct_error(obj: Option<&Map<String, Value>>) -> Option<String> {
    let obj = obj?;
    ["error", "message", "reason"]
        .iter()
        .find_map(|k| error_candidate(obj.get(*k)))
}

/// Whether a status reads as an error (`failed`, `timeout`, `denied`, `cancelled`, …; never
/// `0`, `ok`, `success`, `completed` or `running`).
fn is_error_like_status(status: &str) -> bool {
    let s = status.trim().to_lowercase();
    if s.is_empty() || matches!(s.as_str(), "0" | "ok" | "success" | "completed" | "running") {
        return false;
    }
    let compact: String = s
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .collect();
    [
        "error",
        "fail",
        "timeout",
        "timedout",
        "denied",
        "cancel",
        "invalid",
        "forbidden",
    ]
    .iter()
    .any(|w| compact.contains(w))
}

/// A direct error, else an error-like `status`.
fn error_or_status(obj: Option<&Map<String, Value>>) -> Option<String> {
    direct_error(obj).or_else(|| {
        let s = obj?.get("status")?.as_str()?;
        is_error_like_status(s).then(|| error_line(s)).flatten()
    })
}

/// The error text of a failed tool result, in order: `details.error`/`message`/`reason`,
/// `details.aggregated`, the same fields at the top level, an error inside JSON result text,
/// an error-like `details.status` or top-level `status`, and finally the result text itself
/// (unless a status says the result is not an error). One redacted line, at most
/// [`TOOL_ERROR_MAX_UNITS`] UTF-16 units.
pub fn extract_tool_error_message(result: &Value) -> Option<String> {
    let root = result.as_object()?;
    let d = details(result);
    if let Some(found) = direct_error(d)
        .or_else(|| error_candidate(d.and_then(|d| d.get("aggregated"))))
        .or_else(|| direct_error(Some(root)))
    {
        return Some(found);
    }
    let text = extract_tool_result_text(result);
    if let Some(text) = &text
        && text.trim_start().starts_with('{')
        && let Ok(parsed) = serde_json::from_str::<Value>(text)
    {
        let found = error_or_status(parsed.as_object());
        drop_deep(parsed);
        if found.is_some() {
            return found;
        }
    }
    if let Some(found) = error_or_status(d).or_else(|| error_or_status(Some(root))) {
        return Some(found);
    }
    if status(result).is_some() && !is_tool_result_error(result) {
        return None;
    }
    text.as_deref().and_then(error_line)
}

fn code_string(value: Option<&Value>) -> Option<String> {
    value?
        .as_str()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// A denial code at the start of a message (`SYSTEM_RUN_DENIED` or `…: reason`).
fn denial_code(value: Option<&Value>) -> Option<String> {
    let message = value?.as_str()?.trim();
    DENIAL_CODES
        .iter()
        .find(|code| {
            message == **code
                || message
                    .strip_prefix(**code)
                    .is_some_and(|rest| rest.starts_with(':'))
        })
        .map(|code| (*code).to_owned())
}

/// The code of a nested error object: a denial code in its `message` or `error`, else its
/// `code` or `gatewayCode`.
fn nested_code(value: Option<&Value>) -> Option<String> {
    let obj = value?.as_object()?;
    denial_code(obj.get("message"))
        .or_else(|| denial_code(obj.get("error")))
        .or_else(|| code_string(obj.get("code")))
        .or_else(|| code_string(obj.get("gatewayCode")))
}

fn direct_code(obj: Option<&Map<String, Value>>) -> Option<String> {
    let obj = obj?;
    nested_code(obj.get("error"))
        .or_else(|| nested_code(obj.get("nodeError")))
        .or_else(|| code_string(obj.get("code")))
        .or_else(|| code_string(obj.get("gatewayCode")))
}

/// The structured error code of a tool result (`details` first, then the top level): a
/// nested `error`/`nodeError` object's denial code or `code`, else `code` or `gatewayCode`.
/// Codes are never read from prose (a plain error string or the result text).
pub fn extract_tool_error_code(result: &Value) -> Option<String> {
    direct_code(details(result)).or_else(|| direct_code(result.as_object()))
}

/// The result a host records for a tool that threw: `details.status: "error"`, the error
/// text, and the thrown error's gateway code and node error when present.
pub fn tool_lifecycle_error_result(
    message: &str,
    gateway_code: Option<&str>,
    node_error: Option<&Map<String, Value>>,
) -> Value {
    let mut d = Map::new();
    d.insert("status".into(), Value::from("error"));
    d.insert("error".into(), Value::from(message));
    if let Some(code) = gateway_code.map(str::trim).filter(|c| !c.is_empty()) {
        d.insert("gatewayCode".into(), Value::from(code));
    }
    if let Some(node) = node_error {
        d.insert("nodeError".into(), Value::Object(shallow_copy(node)));
    }
    let mut out = Map::new();
    out.insert("details".into(), Value::Object(d));
    Value::Object(out)
}

/// A copy of an object's scalar fields (nested containers are left out: an error record
/// needs none, and copying them would walk caller-supplied depth).
fn shallow_copy(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .filter(|(_, v)| !matches!(v, Value::Array(_) | Value::Object(_)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The content blocks of a result: an array result itself; a typed block as itself; an
/// untyped envelope's `content` (array, or one object); else the result as one block.
fn content_blocks(result: &Value) -> Vec<&Value> {
    match result {
        Value::Array(items) => items.iter().collect(),
        Value::Object(o) if o.get("type").and_then(Value::as_str).is_some() => vec![result],
        Value::Object(o) => match o.get("content") {
            Some(Value::Array(items)) => items.iter().collect(),
            Some(content @ Value::Object(_)) => vec![content],
            _ => vec![result],
        },
        _ => Vec::new(),
    }
}

/// The visible text of a tool result: its `text` blocks joined by newlines; without any, its
/// structured non-media blocks serialized (redacted); `None` for a non-object result or
/// nothing visible. Cut to [`TOOL_RESULT_TEXT_MAX_UNITS`] UTF-16 units.
pub fn extract_tool_result_text(result: &Value) -> Option<String> {
    if !matches!(result, Value::Object(_) | Value::Array(_)) {
        return None;
    }
    let blocks = content_blocks(result);
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    let joined = if texts.is_empty() {
        let structured: Vec<String> = blocks
            .iter()
            .filter(|b| b.is_object())
            .filter(|b| {
                !matches!(
                    b.get("type").and_then(Value::as_str),
                    Some("text" | "image" | "image_url" | "audio")
                )
            })
            .filter_map(|b| {
                // Serializing recurses once per level: deep blocks are left out.
                if !super::tree::depth_at_most(b, 64) {
                    return None;
                }
                let clean = redact_structured(b);
                let text = redact_text(&clean.to_string());
                (text != "{}").then_some(text)
            })
            .collect();
        if structured.is_empty() {
            return None;
        }
        structured.join("\n")
    } else {
        texts.join("\n")
    };
    Some(utf16_prefix(&joined, TOOL_RESULT_TEXT_MAX_UNITS).to_owned())
}
