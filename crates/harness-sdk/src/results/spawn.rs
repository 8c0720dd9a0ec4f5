//! Accepted `sessions_spawn` receipts (see `docs/tool-results.md, 'Spawn receipts'`).
//!
//! Capture receipts from the **original** tool result, before any result middleware rewrites
//! `details` ([`AcceptedSessionSpawns::capture`]).

use serde_json::Value;
use tether_core::{AcceptedSessionSpawn, AttemptResult};

use super::tree::trimmed_str;

/// Normalizes a raw `sessions_spawn` result into an accepted-spawn receipt.
///
/// `details` must be an object with `status` exactly `"accepted"`, a trimmed non-empty `runId`
/// and `childSessionKey`. `sessionUrl` is kept only as an `http(s)` URL; `label` only when
/// non-empty; `publicRead` only for a literal `true`; `expectsCompletionMessage` is `true`
/// only for a literal `true` (missing or non-boolean → `false`).
pub fn normalize_accepted_session_spawn_result(result: &Value) -> Option<AcceptedSessionSpawn> {
    let details = result.get("details")?.as_object()?;
    if details.get("status").and_then(Value::as_str) != Some("accepted") {
        return None;
    }
    let run_id = trimmed_str(details.get("runId"))?.to_owned();
    let child_session_key = trimmed_str(details.get("childSessionKey"))?.to_owned();
    let session_url = trimmed_str(details.get("sessionUrl"))
        .filter(|u| is_http_url(u))
        .map(str::to_owned);
    Some(AcceptedSessionSpawn {
        run_id,
        child_session_key,
        session_url,
        public_read: details.get("publicRead") == Some(&Value::Bool(true)),
        label: trimmed_str(details.get("label")).map(str::to_owned),
        expects_completion_message: details.get("expectsCompletionMessage")
            == Some(&Value::Bool(true)),
        collected: false,
    })
}

/// Whether `url` is an absolute `http:` or `https:` URL with a host.
fn is_http_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    let rest = match lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
    {
        Some(rest) => rest,
        None => return false,
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    !host.is_empty() && !url.chars().any(char::is_whitespace)
}

/// The accepted spawns of one run, keyed by child `run_id`.
///
/// The first acceptance of a `run_id` is immutable; a later entry for the same `run_id` can
/// only add `collected: true`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcceptedSessionSpawns {
    entries: Vec<AcceptedSessionSpawn>,
}

impl AcceptedSessionSpawns {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Captures a receipt from a raw tool result (only for `sessions_spawn`). Call it with the
    /// original result, before middleware.
    pub fn capture(
        &mut self,
        tool_name: &str,
        raw_result: &Value,
    ) -> Option<&AcceptedSessionSpawn> {
        if !tool_name.trim().eq_ignore_ascii_case("sessions_spawn") {
            return None;
        }
        let spawn = normalize_accepted_session_spawn_result(raw_result)?;
        let run_id = spawn.run_id.clone();
        self.merge([spawn]);
        self.entries.iter().find(|e| e.run_id == run_id)
    }

    /// Merges receipts and returns all of them.
    pub fn merge(
        &mut self,
        accepted: impl IntoIterator<Item = AcceptedSessionSpawn>,
    ) -> &[AcceptedSessionSpawn] {
        for spawn in accepted {
            match self.entries.iter_mut().find(|e| e.run_id == spawn.run_id) {
                Some(existing) => existing.collected |= spawn.collected,
                None => self.entries.push(spawn),
            }
        }
        &self.entries
    }

    /// Marks the children named by an `agents_wait` result as collected.
    pub fn mark_collected(&mut self, agents_wait_result: &Value) {
        for run_id in read_collected_run_ids(agents_wait_result) {
            if let Some(e) = self.entries.iter_mut().find(|e| e.run_id == run_id) {
                e.collected = true;
            }
        }
    }

    /// All receipts.
    pub fn as_slice(&self) -> &[AcceptedSessionSpawn] {
        &self.entries
    }

    /// Copies the receipts into the attempt result (through every terminal phase unchanged).
    pub fn apply_to(&self, result: &mut AttemptResult) {
        result.accepted_session_spawns = self.entries.clone();
    }
}

/// Whether any spawn was accepted.
pub fn has_accepted_session_spawn(spawns: &[AcceptedSessionSpawn]) -> bool {
    !spawns.is_empty()
}

/// Whether any accepted child will send a completion message.
pub fn has_completion_message_session_spawn(spawns: &[AcceptedSessionSpawn]) -> bool {
    spawns.iter().any(|s| s.expects_completion_message)
}

/// Whether any child still counts as outstanding: completion-owning children always count,
/// others until collected.
pub fn has_uncollected_session_spawn(spawns: &[AcceptedSessionSpawn]) -> bool {
    spawns
        .iter()
        .any(|s| s.expects_completion_message || !s.collected)
}

/// The run ids of `details.completed[]` entries whose `status` is `"done"`.
pub fn read_collected_run_ids(agents_wait_result: &Value) -> Vec<String> {
    agents_wait_result
        .get("details")
        .and_then(|d| d.get("completed"))
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter(|i| i.get("status").and_then(Value::as_str) == Some("done"))
                .filter_map(|i| trimmed_str(i.get("runId")).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}
