//! Conversion of legacy ACPX session files (`openclaw.acpx.session.v1` → `acpx.session.v1`).

use std::fs;
use std::io;
use std::path::Path;

use serde_json::{Map, Value};
use tether_core::Error;

use crate::results::deep_clone;

/// The legacy session record schema.
pub const LEGACY_SESSION_SCHEMA: &str = "openclaw.acpx.session.v1";

/// The current session record schema.
pub const CURRENT_SESSION_SCHEMA: &str = "acpx.session.v1";

/// A session file that could not be migrated (it was warned about and left as it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedSessionFile {
    /// The file name.
    pub name: String,
    /// Why.
    pub reason: String,
}

/// What a migration did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationReport {
    /// Record ids of the converted sessions.
    pub migrated: Vec<String>,
    /// Files warned about and skipped.
    pub skipped: Vec<SkippedSessionFile>,
}

fn string(record: &Map<String, Value>, field: &str) -> Option<String> {
    record.get(field).and_then(Value::as_str).map(str::to_owned)
}

fn required(record: &Map<String, Value>, field: &str) -> Result<String, String> {
    string(record, field).ok_or_else(|| format!("missing or non-string field `{field}`"))
}

fn object_or_empty(record: &Map<String, Value>, field: &str) -> Value {
    match record.get(field) {
        Some(o @ Value::Object(_)) => deep_clone(o),
        _ => Value::Object(Map::new()),
    }
}

/// Converts one record. Returns `Ok(None)` for a record that is not of the legacy schema
/// (left alone), the converted record for a valid legacy one (its `acpxRecordId` kept), and an
/// error describing what is malformed otherwise.
pub fn convert_legacy_session(raw: &Value) -> Result<Option<Value>, String> {
    let Some(record) = raw.as_object() else {
        return Ok(None);
    };
    if record.get("schema").and_then(Value::as_str) != Some(LEGACY_SESSION_SCHEMA) {
        return Ok(None);
    }
    let record_id = required(record, "acpxRecordId")?;
    let mut out = Map::new();
    out.insert("schema".into(), CURRENT_SESSION_SCHEMA.into());
    out.insert("acpxRecordId".into(), record_id.into());
    for field in [
        "acpSessionId",
        "agentCommand",
        "cwd",
        "createdAt",
        "lastUsedAt",
        "updated_at",
    ] {
        out.insert(field.into(), required(record, field)?.into());
    }
    match record.get("lastSeq").and_then(Value::as_i64) {
        Some(seq) if seq >= 0 => out.insert("lastSeq".into(), seq.into()),
        _ => return Err("missing or negative integer field `lastSeq`".into()),
    };
    match record.get("messages") {
        Some(messages @ Value::Array(_)) => out.insert("messages".into(), deep_clone(messages)),
        _ => return Err("missing array field `messages`".into()),
    };
    for field in [
        "agentSessionId",
        "name",
        "lastRequestId",
        "closedAt",
        "agentStartedAt",
        "lastPromptAt",
        "lastAgentExitAt",
        "lastAgentDisconnectReason",
    ] {
        if let Some(value) = string(record, field) {
            out.insert(field.into(), value.into());
        }
    }
    out.insert("eventLog".into(), object_or_empty(record, "eventLog"));
    out.insert(
        "closed".into(),
        record
            .get("closed")
            .and_then(Value::as_bool)
            .unwrap_or(false)
            .into(),
    );
    if let Some(pid) = record.get("pid").and_then(Value::as_u64).filter(|p| *p > 0) {
        out.insert("pid".into(), pid.into());
    }
    if let Some(version) = record.get("protocolVersion").and_then(Value::as_i64) {
        out.insert("protocolVersion".into(), version.into());
    }
    for field in ["lastAgentExitCode", "lastAgentExitSignal"] {
        match record.get(field) {
            Some(Value::Null) => {
                out.insert(field.into(), Value::Null);
            }
            Some(v @ (Value::Number(_) | Value::String(_))) => {
                out.insert(field.into(), v.clone());
            }
            _ => {}
        }
    }
    if let Some(v @ (Value::String(_) | Value::Null)) = record.get("title") {
        out.insert("title".into(), v.clone());
    }
    for field in ["agentCapabilities", "acpx"] {
        if let Some(v @ Value::Object(_)) = record.get(field) {
            out.insert(field.into(), deep_clone(v));
        }
    }
    out.insert(
        "cumulative_token_usage".into(),
        object_or_empty(record, "cumulative_token_usage"),
    );
    out.insert(
        "request_token_usage".into(),
        object_or_empty(record, "request_token_usage"),
    );
    Ok(Some(Value::Object(out)))
}

/// The file name of a session record: its id, percent-encoded like `encodeURIComponent`.
fn session_file_name(record_id: &str) -> String {
    let mut out = String::with_capacity(record_id.len() + 5);
    for byte in record_id.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out.push_str(".json");
    out
}

/// Writes `bytes` to `path` through a temporary sibling and a rename; the sibling is removed
/// when either step fails (a full disk leaves no partial file behind).
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension(format!("json.tmp-{}", uuid::Uuid::new_v4().simple()));
    fs::write(&tmp, bytes)
        .and_then(|()| fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })
}

fn migrate_file(sessions: &Path, name: &str) -> Result<Option<String>, String> {
    let text = fs::read_to_string(sessions.join(name)).map_err(|e| e.to_string())?;
    let raw: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let Some(converted) = convert_legacy_session(&raw)? else {
        return Ok(None);
    };
    let record_id = converted
        .get("acpxRecordId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let bytes = serde_json::to_vec_pretty(&converted).map_err(|e| e.to_string())?;
    write_atomically(&sessions.join(session_file_name(&record_id)), &bytes)
        .map_err(|e| e.to_string())?;
    Ok(Some(record_id))
}

/// Converts every legacy-schema file in `<state_dir>/sessions/*.json`, saving the converted
/// record as `<record id>.json` (the same file when it was already named after its id; a
/// differently named legacy file is left in place, never deleted). Files of other schemas are
/// left alone; malformed files are warned about and skipped; a missing directory is a no-op.
#[tracing::instrument(name = "acpx.migrate_legacy_sessions", skip_all, fields(state_dir = %state_dir.display()))]
pub fn migrate_legacy_sessions(state_dir: &Path) -> Result<MigrationReport, Error> {
    let sessions = state_dir.join("sessions");
    let entries = match fs::read_dir(&sessions) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Ok(MigrationReport::default());
        }
        Err(error) => {
            return Err(Error::other(format!(
                "cannot read the ACPX session directory {}: {error}",
                sessions.display()
            )));
        }
    };
    let mut names: Vec<String> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| {
            Error::other(format!(
                "cannot list the ACPX session directory {}: {error}",
                sessions.display()
            ))
        })?;
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_file && name.ends_with(".json") {
            names.push(name);
        }
    }
    names.sort();
    let mut report = MigrationReport::default();
    for name in names {
        match migrate_file(&sessions, &name) {
            Ok(Some(record_id)) => report.migrated.push(record_id),
            Ok(None) => {}
            Err(reason) => {
                tracing::warn!("failed to migrate legacy ACPX session file {name}: {reason}");
                report.skipped.push(SkippedSessionFile { name, reason });
            }
        }
    }
    if !report.migrated.is_empty() {
        tracing::info!(
            "migrated {} legacy ACPX session file(s)",
            report.migrated.len()
        );
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_uri_component_encoded() {
        assert_eq!(session_file_name("abc-1"), "abc-1.json");
        assert_eq!(session_file_name("a b/c:d"), "a%20b%2Fc%3Ad.json");
        assert_eq!(session_file_name("é"), "%C3%A9.json");
    }

    #[test]
    fn non_legacy_records_are_left_alone() {
        assert_eq!(
            convert_legacy_session(&serde_json::json!({"schema": "acpx.session.v1"})),
            Ok(None)
        );
        assert_eq!(convert_legacy_session(&serde_json::json!([1])), Ok(None));
        let err = convert_legacy_session(&serde_json::json!({"schema": LEGACY_SESSION_SCHEMA}))
            .unwrap_err();
        assert!(err.contains("acpxRecordId"), "{err}");
    }
}
