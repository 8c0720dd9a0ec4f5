//! Host-owned execution facts and the private "not started" provenance.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use crate::results::tree::{deep_clone, drop_deep};

/// Proof that a tool call never started, attached to a tool result by host code.
///
/// It has a private field and no deserializer: the only way to obtain one is
/// [`HostToolFacts::not_started_proof`], and the host keeps its [`HostToolFacts`] handle (the
/// harness only receives the [`TerminalObserver`](super::TerminalObserver)).
///
/// ```compile_fail
/// use tether_harness_sdk::results::terminal::NotStartedProof;
/// let forged = NotStartedProof { call_id: None };
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotStartedProof {
    call_id: Option<String>,
}

impl NotStartedProof {
    /// The call the proof was minted for, if the host named one.
    pub fn call_id(&self) -> Option<&str> {
        self.call_id.as_deref()
    }
}

/// A raw tool result (or thrown error) as the host saw it, with private provenance.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolResult {
    value: Value,
    not_started: Option<NotStartedProof>,
}

impl ToolResult {
    /// A result without provenance (serialized fields never carry provenance).
    pub fn new(value: Value) -> Self {
        Self {
            value,
            not_started: None,
        }
    }

    /// A result carrying the host's proof that the call never started.
    pub fn with_not_started_proof(value: Value, proof: NotStartedProof) -> Self {
        Self {
            value,
            not_started: Some(proof),
        }
    }

    /// The raw value.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The raw value, consumed.
    pub fn into_value(self) -> Value {
        self.value
    }

    /// The "not started" proof, if any.
    pub fn not_started_proof(&self) -> Option<&NotStartedProof> {
        self.not_started.as_ref()
    }
}

#[derive(Debug, Default)]
struct Inner {
    execution: HashMap<String, bool>,
    pre_execution_blocked: HashSet<String>,
    adjusted_params: HashMap<String, Value>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Stored parameters may be nested arbitrarily deep: free them without recursion.
        for (_, v) in self.adjusted_params.drain() {
            drop_deep(v);
        }
    }
}

/// What the host knows about tool calls of one attempt. Host facts outrank harness claims.
#[derive(Debug, Clone, Default)]
pub struct HostToolFacts {
    inner: Arc<Mutex<Inner>>,
}

impl HostToolFacts {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records whether the tool implementation of `call_id` started (consumed by the next
    /// observation of that call).
    pub fn record_execution(&self, call_id: &str, started: bool) {
        self.lock().execution.insert(call_id.to_owned(), started);
    }

    /// Records that a guard blocked `call_id` before execution (never consumed).
    pub fn record_pre_execution_blocked(&self, call_id: &str) {
        self.lock().pre_execution_blocked.insert(call_id.to_owned());
    }

    /// Records the parameters the host actually passed to the tool (never consumed).
    pub fn record_adjusted_params(&self, call_id: &str, params: Value) {
        self.lock()
            .adjusted_params
            .insert(call_id.to_owned(), params);
    }

    /// The adjusted parameters recorded for `call_id`.
    pub fn adjusted_params(&self, call_id: &str) -> Option<Value> {
        self.lock().adjusted_params.get(call_id).map(deep_clone)
    }

    /// Whether an execution record for `call_id` is still pending.
    pub fn has_execution_record(&self, call_id: &str) -> bool {
        self.lock().execution.contains_key(call_id)
    }

    /// Mints a "not started" proof to attach to a tool result ([`ToolResult::with_not_started_proof`]).
    pub fn not_started_proof(&self, call_id: Option<&str>) -> NotStartedProof {
        NotStartedProof {
            call_id: call_id.map(str::to_owned),
        }
    }

    pub(crate) fn take_execution(&self, call_id: &str) -> Option<bool> {
        self.lock().execution.remove(call_id)
    }

    pub(crate) fn is_pre_execution_blocked(&self, call_id: &str) -> bool {
        self.lock().pre_execution_blocked.contains(call_id)
    }
}
