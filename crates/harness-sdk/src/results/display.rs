//! Compact display metadata of a tool call (see `docs/tool-results.md, 'Display metadata'`).
//!
//! [`infer_tool_meta_from_args`] turns raw tool arguments into a short, **lossy, redacted**
//! one-line description for UI cards and logs. It is never an argument substitute or a
//! validation input: the raw arguments stay untouched for validation and execution.

use serde_json::{Map, Value};

use super::redact::redact_text;

/// How much an `exec` summary shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DetailMode {
    /// Summary followed by the raw command when they differ (default).
    #[default]
    Raw,
    /// Summary only.
    Explain,
}

/// Arrays nested deeper than this contribute nothing to the display.
pub const MAX_DISPLAY_ARRAY_DEPTH: usize = 64;

/// Longer strings are cut in the middle to this many characters (the head, `…`, the tail),
/// after redaction.
pub const MAX_DISPLAY_VALUE_CHARS: usize = 160;

/// At most this many `label value` entries are shown.
pub const MAX_DETAIL_ENTRIES: usize = 8;

const SEPARATOR: &str = " · ";

/// Infers compact display metadata from a tool's arguments; `None` when nothing displayable
/// remains. Never panics and never recurses deeper than [`MAX_DISPLAY_ARRAY_DEPTH`] levels.
pub fn infer_tool_meta_from_args(
    tool_name: &str,
    args: &Value,
    mode: DetailMode,
) -> Option<String> {
    let tool = tool_name.trim().to_ascii_lowercase();
    let obj = args.as_object()?;
    let detail = match tool.as_str() {
        "exec" | "bash" | "sandbox_exec" => exec_detail(obj, mode),
        "read" => read_detail(obj),
        "write" => file_detail(obj, "to"),
        "edit" => file_detail(obj, "in"),
        "attach" => path_of(obj).map(|p| format!("from {p}")),
        "web_search" => web_search_detail(obj),
        "web_fetch" => web_fetch_detail(obj),
        _ => None,
    }
    .or_else(|| summary_detail(&tool, obj))?;
    let shortened = shorten_home(&detail);
    let redacted = redact_text(&shortened).replace(SEPARATOR, ", ");
    let trimmed = redacted.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

fn detail_keys(tool: &str, action: Option<&str>) -> &'static [&'static str] {
    match (tool, action) {
        ("message", Some("react")) => &[
            "provider",
            "channel",
            "to",
            "target",
            "messageId",
            "emoji",
            "remove",
        ],
        ("message", _) => &[
            "provider",
            "channel",
            "to",
            "target",
            "messageId",
            "threadId",
            "message",
        ],
        ("sessions_spawn", _) => &["task", "label", "agentId", "model", "runTimeoutSeconds"],
        ("sessions_send", _) => &["sessionKey", "label", "message", "timeoutSeconds"],
        ("sessions_history", _) => &["sessionKey", "limit", "includeTools"],
        ("sessions_list", _) => &["kinds", "limit", "activeMinutes"],
        ("memory_search", _) => &["query", "maxResults"],
        ("memory_get", _) => &["path", "from", "lines"],
        _ => &[
            "command",
            "path",
            "file_path",
            "url",
            "query",
            "pattern",
            "name",
            "sessionKey",
            "task",
            "label",
            "id",
            "target",
            "to",
        ],
    }
}

fn label_for(key: &str) -> String {
    match key {
        "sessionKey" => "session".into(),
        "includeTools" => "tools".into(),
        "runTimeoutSeconds" | "timeoutSeconds" => "timeout".into(),
        "messageId" => "message".into(),
        "maxResults" => "max".into(),
        "file_path" => "path".into(),
        _ => {
            let mut out = String::new();
            for c in key.chars() {
                if c.is_ascii_uppercase() {
                    out.push(' ');
                    out.push(c.to_ascii_lowercase());
                } else if c == '_' {
                    out.push(' ');
                } else {
                    out.push(c);
                }
            }
            out
        }
    }
}

fn summary_detail(tool: &str, obj: &Map<String, Value>) -> Option<String> {
    let action = obj.get("action").and_then(Value::as_str).map(str::trim);
    let mut entries: Vec<(String, String)> = Vec::new();
    for key in detail_keys(tool, action) {
        let Some(value) = obj.get(*key).and_then(|v| coerce_display_value(v, 0)) else {
            continue;
        };
        let label = label_for(key);
        if entries.iter().any(|(l, v)| *l == label && *v == value) {
            continue;
        }
        entries.push((label, value));
        if entries.len() == MAX_DETAIL_ENTRIES {
            break;
        }
    }
    match entries.len() {
        0 => None,
        1 => entries.pop().map(|(_, v)| v),
        _ => Some(
            entries
                .iter()
                .map(|(l, v)| format!("{l} {v}"))
                .collect::<Vec<_>>()
                .join(SEPARATOR),
        ),
    }
}

/// Display coercion of one value; arrays deeper than [`MAX_DISPLAY_ARRAY_DEPTH`] are absent.
fn coerce_display_value(value: &Value, array_depth: usize) -> Option<String> {
    match value {
        Value::String(s) => {
            let line = s.lines().next().unwrap_or("").trim();
            if line.is_empty() {
                return None;
            }
            // Redact before cutting: a cut must never keep the tail of a secret whose
            // recognisable prefix it removed.
            let line = redact_text(line);
            let count = line.chars().count();
            if count > MAX_DISPLAY_VALUE_CHARS {
                // Keep the head and the tail (paths and file names end meaningfully).
                let head = (MAX_DISPLAY_VALUE_CHARS - 1) / 2;
                let tail = MAX_DISPLAY_VALUE_CHARS - 1 - head;
                let mut cut: String = line.chars().take(head).collect();
                cut.push('…');
                cut.extend(line.chars().skip(count - tail));
                Some(cut)
            } else {
                Some(line)
            }
        }
        Value::Bool(true) => Some("true".into()),
        Value::Number(n) => {
            let f = n.as_f64()?;
            (f != 0.0 && f.is_finite()).then(|| n.to_string())
        }
        Value::Array(items) => {
            if array_depth >= MAX_DISPLAY_ARRAY_DEPTH {
                return None;
            }
            let mut shown = Vec::new();
            let mut more = false;
            for item in items {
                if let Some(s) = coerce_display_value(item, array_depth + 1) {
                    if shown.len() == 3 {
                        more = true;
                        break;
                    }
                    shown.push(s);
                }
            }
            if shown.is_empty() {
                return None;
            }
            let mut joined = shown.join(", ");
            if more {
                joined.push_str(", …");
            }
            Some(joined)
        }
        Value::Bool(false) | Value::Null | Value::Object(_) => None,
    }
}

fn str_arg<'a>(obj: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| {
        obj.get(*k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    })
}

fn num_arg(obj: &Map<String, Value>, keys: &[&str]) -> Option<u64> {
    keys.iter().find_map(|k| {
        let f = obj.get(*k)?.as_f64()?;
        f.is_finite().then(|| f.floor().max(1.0) as u64)
    })
}

fn path_of(obj: &Map<String, Value>) -> Option<&str> {
    str_arg(obj, &["path", "file_path", "filePath", "file"])
}

fn read_detail(obj: &Map<String, Value>) -> Option<String> {
    let path = path_of(obj)?;
    let offset = num_arg(obj, &["offset"]);
    let limit = num_arg(obj, &["limit"]);
    Some(match (offset, limit) {
        (Some(a), Some(n)) => format!("lines {a}-{} from {path}", a.saturating_add(n - 1)),
        (Some(a), None) => format!("from line {a} in {path}"),
        (None, Some(1)) => format!("first 1 line of {path}"),
        (None, Some(n)) => format!("first {n} lines of {path}"),
        (None, None) => format!("from {path}"),
    })
}

fn file_detail(obj: &Map<String, Value>, preposition: &str) -> Option<String> {
    let path = path_of(obj)?;
    let content = ["content", "newText", "new_string"]
        .iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_str));
    Some(match content {
        Some(c) => format!("{preposition} {path} ({} chars)", c.chars().count()),
        None => format!("{preposition} {path}"),
    })
}

fn web_search_detail(obj: &Map<String, Value>) -> Option<String> {
    let mut queries: Vec<String> = Vec::new();
    if let Some(q) = str_arg(obj, &["query", "q"]) {
        queries.push(q.to_owned());
    } else if let Some(items) = obj.get("search_query").and_then(Value::as_array) {
        queries.extend(
            items
                .iter()
                .filter_map(|i| str_arg(i.as_object()?, &["q"]).map(str::to_owned)),
        );
    } else if let Some(objective) = str_arg(obj, &["objective"]) {
        queries.push(objective.to_owned());
        if let Some(items) = obj.get("search_queries").and_then(Value::as_array) {
            queries.extend(items.iter().filter_map(|i| i.as_str()).map(str::to_owned));
        }
    }
    if queries.is_empty() {
        return None;
    }
    let mut out = String::from("for ");
    let quoted: Vec<String> = queries.iter().take(3).map(|q| format!("\"{q}\"")).collect();
    out.push_str(&quoted.join(", "));
    if queries.len() > 3 {
        out.push('…');
    }
    if let Some(n) = num_arg(obj, &["count", "max_results", "maxResults", "top"]) {
        out.push_str(&format!(" (top {n})"));
    }
    Some(out)
}

fn web_fetch_detail(obj: &Map<String, Value>) -> Option<String> {
    let url = str_arg(obj, &["url"])?;
    let mut extras = Vec::new();
    if let Some(mode) = str_arg(obj, &["extractMode", "mode"]) {
        extras.push(format!("mode {mode}"));
    }
    if let Some(max) = num_arg(obj, &["maxChars", "max_chars"]) {
        extras.push(format!("max {max} chars"));
    }
    Some(if extras.is_empty() {
        format!("from {url}")
    } else {
        format!("from {url} ({})", extras.join(", "))
    })
}

fn exec_detail(obj: &Map<String, Value>, mode: DetailMode) -> Option<String> {
    let command = str_arg(obj, &["command", "cmd"])?;
    let workdir = str_arg(obj, &["workdir", "cwd"]);
    let node = if obj.get("host").and_then(Value::as_str) == Some("node") {
        str_arg(obj, &["node"])
    } else {
        None
    };
    Some(super::exec_display::exec_detail(
        command,
        workdir,
        node,
        mode == DetailMode::Explain,
        SEPARATOR,
    ))
}

fn shorten_home(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let found = ["/Users/", "/home/", "C:\\Users\\"]
            .iter()
            .filter_map(|p| rest.find(p).map(|at| (at, *p)))
            .min_by_key(|(at, _)| *at);
        let Some((at, prefix)) = found else {
            out.push_str(rest);
            return out;
        };
        let sep = if prefix.ends_with('\\') { '\\' } else { '/' };
        let after = &rest[at + prefix.len()..];
        match after.find(sep) {
            Some(end) if end > 0 && !after[..end].contains(char::is_whitespace) => {
                out.push_str(&rest[..at]);
                out.push('~');
                rest = &after[end..];
            }
            _ => {
                out.push_str(&rest[..at + prefix.len()]);
                rest = after;
            }
        }
    }
}
