//! The stored record of the thread-binding backend and its JSON codec (see
//! `docs/harness-backend.md`, "Record, keys and capacity").

use serde_json::{Map, Value};
use tether_core::{RecordCodec, SessionId};

/// The only record version this backend writes and reads.
pub const RECORD_VERSION: u64 = 1;

/// The scope of the connection that owns a binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConnectionScope {
    /// A supervision connection: a protected scope that ordinary writers cannot set over,
    /// clear, reclaim as empty, or delete; only supervision adoption or an initialization
    /// rollback may.
    Supervision,
}

impl ConnectionScope {
    fn as_str(self) -> &'static str {
        match self {
            Self::Supervision => "supervision",
        }
    }

    fn parse(raw: &str) -> Option<Self> {
        match raw {
            "supervision" => Some(Self::Supervision),
            _ => None,
        }
    }
}

/// The native thread a session is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadBinding {
    /// The native thread id (the resume handle).
    pub thread_id: String,
    /// The working directory the thread runs in.
    pub cwd: String,
    /// The model, when pinned.
    pub model: Option<String>,
    /// The model provider, when pinned.
    pub model_provider: Option<String>,
    /// The physical client connection that holds the thread, when known.
    pub client_id: Option<String>,
    /// The connection scope; `Some(Supervision)` marks a protected supervision binding.
    pub connection_scope: Option<ConnectionScope>,
    /// The thread a supervision binding supervises.
    pub supervision_source_thread_id: Option<String>,
    /// Further backend fields, kept verbatim (bounded digests, never raw payloads: a value may
    /// hold at most 64 KiB).
    pub extra: Map<String, Value>,
}

impl ThreadBinding {
    /// A binding of `thread_id` running in `cwd`, with nothing else pinned.
    pub fn new(thread_id: impl Into<String>, cwd: impl Into<String>) -> Self {
        Self {
            thread_id: thread_id.into(),
            cwd: cwd.into(),
            model: None,
            model_provider: None,
            client_id: None,
            connection_scope: None,
            supervision_source_thread_id: None,
            extra: Map::new(),
        }
    }

    /// Sets the client id.
    #[must_use]
    pub fn with_client(mut self, client_id: impl Into<String>) -> Self {
        self.client_id = Some(client_id.into());
        self
    }

    /// Marks the binding as owned by supervision.
    #[must_use]
    pub fn supervised(mut self) -> Self {
        self.connection_scope = Some(ConnectionScope::Supervision);
        self
    }

    /// Whether the binding belongs to the protected supervision scope.
    pub fn is_supervision(&self) -> bool {
        self.connection_scope == Some(ConnectionScope::Supervision)
    }

    fn to_json(&self) -> Value {
        let mut map = self.extra.clone();
        map.insert("threadId".into(), Value::String(self.thread_id.clone()));
        map.insert("cwd".into(), Value::String(self.cwd.clone()));
        let optional = [
            ("model", &self.model),
            ("modelProvider", &self.model_provider),
            ("clientId", &self.client_id),
            (
                "supervisionSourceThreadId",
                &self.supervision_source_thread_id,
            ),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                map.insert(name.into(), Value::String(value.clone()));
            }
        }
        if let Some(scope) = self.connection_scope {
            map.insert(
                "connectionScope".into(),
                Value::String(scope.as_str().into()),
            );
        }
        Value::Object(map)
    }

    fn from_json(value: &Value) -> Option<Self> {
        let mut map = value.as_object()?.clone();
        let thread_id = take_string(&mut map, "threadId")?.filter(|t| !t.trim().is_empty())?;
        let cwd = take_string(&mut map, "cwd")??;
        let model = take_string(&mut map, "model")?;
        let model_provider = take_string(&mut map, "modelProvider")?;
        let client_id = take_string(&mut map, "clientId")?;
        let supervision_source_thread_id = take_string(&mut map, "supervisionSourceThreadId")?;
        let connection_scope = match take_string(&mut map, "connectionScope")? {
            None => None,
            Some(raw) => Some(ConnectionScope::parse(&raw)?),
        };
        Some(Self {
            thread_id,
            cwd,
            model,
            model_provider,
            client_id,
            connection_scope,
            supervision_source_thread_id,
            extra: map,
        })
    }
}

/// Removes `name` from `map`: `Some(None)` when absent, `Some(Some(s))` for a string, `None`
/// (invalid) for any other JSON type.
fn take_string(map: &mut Map<String, Value>, name: &str) -> Option<Option<String>> {
    match map.remove(name) {
        None => Some(None),
        Some(Value::String(s)) => Some(Some(s)),
        Some(_) => None,
    }
}

/// Whether a row holds a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindingState {
    /// The session is bound to a native thread.
    Active(ThreadBinding),
    /// No binding. `retired` marks a durable generation fence (tombstone) against late
    /// writers of the owning generation.
    Cleared {
        /// Whether the owning generation was retired.
        retired: bool,
    },
}

/// The stored record of one binding row (format version 1). The lease lives in the
/// row's lease columns, not here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadBindingRecord {
    /// Active binding or cleared row.
    pub state: BindingState,
    /// The owning generation (the host's physical session id), when known.
    pub session_id: Option<SessionId>,
    /// A native task import the row must keep (rows holding one never expire).
    pub task_import: Option<Value>,
}

impl ThreadBindingRecord {
    /// An active record of `binding` owned by `session_id`.
    pub fn active(binding: ThreadBinding, session_id: Option<SessionId>) -> Self {
        Self {
            state: BindingState::Active(binding),
            session_id,
            task_import: None,
        }
    }

    /// A cleared record owned by `session_id`.
    pub fn cleared(session_id: Option<SessionId>, retired: bool) -> Self {
        Self {
            state: BindingState::Cleared { retired },
            session_id,
            task_import: None,
        }
    }

    /// The binding, when active.
    pub fn binding(&self) -> Option<&ThreadBinding> {
        match &self.state {
            BindingState::Active(binding) => Some(binding),
            BindingState::Cleared { .. } => None,
        }
    }

    /// Whether the row holds a binding.
    pub fn is_active(&self) -> bool {
        matches!(self.state, BindingState::Active(_))
    }

    /// Whether the row is a cleared, retired generation fence.
    pub fn is_retired(&self) -> bool {
        matches!(self.state, BindingState::Cleared { retired: true })
    }

    /// Whether the row holds an active supervision binding.
    pub fn is_supervision(&self) -> bool {
        self.binding().is_some_and(ThreadBinding::is_supervision)
    }

    /// The same record, cleared (retired or not), keeping its owner and task import.
    #[must_use]
    pub fn into_cleared(self, retired: bool) -> Self {
        Self {
            state: BindingState::Cleared { retired },
            ..self
        }
    }

    fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("version".into(), Value::from(RECORD_VERSION));
        match &self.state {
            BindingState::Active(binding) => {
                map.insert("state".into(), Value::String("active".into()));
                map.insert("binding".into(), binding.to_json());
            }
            BindingState::Cleared { retired } => {
                map.insert("state".into(), Value::String("cleared".into()));
                if *retired {
                    map.insert("retired".into(), Value::Bool(true));
                }
            }
        }
        if let Some(session_id) = &self.session_id {
            map.insert("sessionId".into(), Value::String(session_id.to_string()));
        }
        if let Some(import) = &self.task_import {
            map.insert("nativeSubagentTaskImport".into(), import.clone());
        }
        Value::Object(map)
    }

    fn from_json(value: &Value) -> Option<Self> {
        let map = value.as_object()?;
        if map.get("version")?.as_u64()? != RECORD_VERSION {
            return None;
        }
        let retired = match map.get("retired") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return None,
        };
        let state = match map.get("state")?.as_str()? {
            "active" if !retired => {
                BindingState::Active(ThreadBinding::from_json(map.get("binding")?)?)
            }
            "cleared" if !map.contains_key("binding") => BindingState::Cleared { retired },
            _ => return None,
        };
        let session_id = match map.get("sessionId") {
            None => None,
            Some(Value::String(raw)) => Some(SessionId::new(raw).ok()?),
            Some(_) => return None,
        };
        let task_import = map
            .get("nativeSubagentTaskImport")
            .filter(|v| !v.is_null())
            .cloned();
        Some(Self {
            state,
            session_id,
            task_import,
        })
    }
}

/// The JSON codec of [`ThreadBindingRecord`]. A value that is not a version-1 record (unknown
/// version or state, an active row without a valid binding, a retired active row, a blank
/// session id) does not decode, so the lifecycle reports the row as invalid (fail closed).
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadBindingCodec;

impl RecordCodec for ThreadBindingCodec {
    type Record = ThreadBindingRecord;

    fn decode(&self, value: &[u8]) -> Option<ThreadBindingRecord> {
        let json: Value = serde_json::from_slice(value).ok()?;
        ThreadBindingRecord::from_json(&json)
    }

    fn encode(&self, record: &ThreadBindingRecord) -> Vec<u8> {
        // Serializing a `Value` built from strings, numbers and booleans cannot fail.
        serde_json::to_vec(&record.to_json()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sid(s: &str) -> SessionId {
        SessionId::new(s).unwrap()
    }

    #[test]
    fn records_round_trip_through_json() {
        let mut binding = ThreadBinding::new("thread-1", "/work")
            .with_client("client-a")
            .supervised();
        binding.model = Some("gpt".into());
        binding
            .extra
            .insert("contextEngine".into(), json!("lossless"));
        let mut record = ThreadBindingRecord::active(binding, Some(sid("s1")));
        record.task_import = Some(json!({"task": 1}));
        let codec = ThreadBindingCodec;
        let bytes = codec.encode(&record);
        let json: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(json["version"], 1);
        assert_eq!(json["state"], "active");
        assert_eq!(json["binding"]["threadId"], "thread-1");
        assert_eq!(json["binding"]["connectionScope"], "supervision");
        assert_eq!(json["sessionId"], "s1");
        assert_eq!(codec.decode(&bytes), Some(record));

        let fence = ThreadBindingRecord::cleared(Some(sid("s1")), true);
        let bytes = codec.encode(&fence);
        assert_eq!(
            serde_json::from_slice::<Value>(&bytes).unwrap(),
            json!({"version": 1, "state": "cleared", "retired": true, "sessionId": "s1"})
        );
        assert_eq!(codec.decode(&bytes), Some(fence));
    }

    #[test]
    fn invalid_values_do_not_decode() {
        let codec = ThreadBindingCodec;
        for bad in [
            json!({"version": 2, "state": "cleared"}),
            json!({"version": 1, "state": "paused"}),
            json!({"version": 1, "state": "active"}),
            json!({"version": 1, "state": "active", "binding": {"threadId": "", "cwd": "/"}}),
            json!({"version": 1, "state": "active", "binding": {"threadId": 3, "cwd": "/"}}),
            json!({"version": 1, "state": "active", "retired": true, "binding": {"threadId": "t", "cwd": "/"}}),
            json!({"version": 1, "state": "cleared", "binding": {"threadId": "t", "cwd": "/"}}),
            json!({"version": 1, "state": "cleared", "sessionId": " "}),
            json!({"version": 1, "state": "active", "binding": {"threadId": "t", "cwd": "/", "connectionScope": "x"}}),
            json!([1, 2]),
        ] {
            let bytes = serde_json::to_vec(&bad).unwrap();
            assert_eq!(codec.decode(&bytes), None, "{bad}");
        }
        assert_eq!(codec.decode(b"\xff"), None);
    }
}
