//! The JSON shapes of the admin API (with their OpenAPI schemas), and their conversions from
//! the store's types. Times are Unix milliseconds; transcript text and binding values are
//! always sanitized before they get here.

use serde::{Deserialize, Serialize};
use tether_core::{
    BindingKeyKind, GenerationChange, HarnessId, HostSessionEntry, QuarantineEntry,
    RecordCodec as _, SessionId, Timestamp,
};
use tether_harness_sdk::backend::ThreadBindingCodec;
use tether_storage::{
    BindingRecord, LeaseEvent, ListedSession, NamespaceSummary, TranscriptEntry, TranscriptHit,
};
use utoipa::ToSchema;

use crate::lists::SessionNames;
use crate::sanitize::{preview_bytes, sanitize_reason, sanitize_text};

/// A host session as listed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionSummary {
    /// The logical session key.
    pub session_key: String,
    /// The owning agent.
    pub agent_id: String,
    /// The current physical generation.
    pub session_id: String,
    /// The generation it replaced, if any.
    pub previous_session_id: Option<String>,
    /// How it replaced that generation (present exactly when `previous_session_id` is).
    pub previous_change: Option<GenerationChangeBody>,
    /// Bumped on every generation change.
    pub lifecycle_revision: u64,
    /// The harness driving the session, if selected.
    pub agent_harness_id: Option<String>,
    /// Creation time (Unix ms).
    pub created_at_ms: i64,
    /// Last update time (Unix ms).
    pub updated_at_ms: i64,
}

impl From<&HostSessionEntry> for SessionSummary {
    fn from(e: &HostSessionEntry) -> Self {
        Self {
            session_key: e.session_key.to_string(),
            agent_id: e.agent_id.to_string(),
            session_id: e.session_id.to_string(),
            previous_session_id: e.previous_session_id.as_ref().map(ToString::to_string),
            previous_change: e.previous_change.map(GenerationChangeBody::from),
            lifecycle_revision: e.lifecycle_revision.get(),
            agent_harness_id: e.agent_harness_id.as_ref().map(ToString::to_string),
            created_at_ms: e.created_at.as_millis(),
            updated_at_ms: e.updated_at.as_millis(),
        }
    }
}

impl From<HostSessionEntry> for SessionSummary {
    /// The same summary as from a reference, moving the strings instead of copying them.
    fn from(e: HostSessionEntry) -> Self {
        Self {
            session_key: e.session_key.into_string(),
            agent_id: e.agent_id.into_string(),
            session_id: e.session_id.into_string(),
            previous_session_id: e.previous_session_id.map(SessionId::into_string),
            previous_change: e.previous_change.map(GenerationChangeBody::from),
            lifecycle_revision: e.lifecycle_revision.get(),
            agent_harness_id: e.agent_harness_id.map(HarnessId::into_string),
            created_at_ms: e.created_at.as_millis(),
            updated_at_ms: e.updated_at.as_millis(),
        }
    }
}

/// [`SessionSummary`] borrowed from a listed session: the same JSON, written without copying a
/// string (the session list's route writes its page with it).
#[derive(Debug, Serialize)]
pub(crate) struct SessionSummaryRef<'a> {
    session_key: &'a str,
    agent_id: &'a str,
    session_id: &'a str,
    previous_session_id: Option<&'a str>,
    previous_change: Option<GenerationChangeBody>,
    lifecycle_revision: u64,
    agent_harness_id: Option<&'a str>,
    created_at_ms: i64,
    updated_at_ms: i64,
}

impl<'a> From<&'a ListedSession<'_>> for SessionSummaryRef<'a> {
    fn from(s: &'a ListedSession<'_>) -> Self {
        Self {
            session_key: s.session_key(),
            agent_id: s.agent_id(),
            session_id: s.session_id(),
            previous_session_id: s.previous_session_id(),
            previous_change: s.previous_change().map(GenerationChangeBody::from),
            lifecycle_revision: s.lifecycle_revision().get(),
            agent_harness_id: s.agent_harness_id(),
            created_at_ms: s.created_at().as_millis(),
            updated_at_ms: s.updated_at().as_millis(),
        }
    }
}

/// [`SessionPageBody`] of borrowed summaries: the same JSON.
#[derive(Debug, Serialize)]
pub(crate) struct SessionPageRef<'a> {
    pub(crate) sessions: Vec<SessionSummaryRef<'a>>,
    pub(crate) next_cursor: Option<String>,
}

/// One page of sessions.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionPageBody {
    /// The sessions, in session-key order.
    pub sessions: Vec<SessionSummary>,
    /// Pass as `cursor` to read the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// How a generation replaced its predecessor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GenerationChangeBody {
    /// A rotation keeping the conversation (a compaction): the native thread continues.
    Transfer,
    /// A rewind or branch switch: the native context was cut.
    Cut,
    /// A `/new` or `/reset`: the session started over.
    Reset,
}

impl From<GenerationChange> for GenerationChangeBody {
    fn from(change: GenerationChange) -> Self {
        match change {
            GenerationChange::Cut => Self::Cut,
            GenerationChange::Reset => Self::Reset,
            // A change this build does not know yet reads as the one that keeps the most.
            _ => Self::Transfer,
        }
    }
}

impl GenerationChangeBody {
    /// The name, as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transfer => "transfer",
            Self::Cut => "cut",
            Self::Reset => "reset",
        }
    }
}

/// The generation lineage of a session.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Lineage {
    /// The current generation.
    pub session_id: String,
    /// The generation it replaced, if any.
    pub previous_session_id: Option<String>,
    /// How it replaced that generation (present exactly when `previous_session_id` is).
    pub previous_change: Option<GenerationChangeBody>,
    /// How many generation changes happened (starts at 1).
    pub lifecycle_revision: u64,
}

/// A packed lease epoch as operators read it: `g3·2` is the second epoch of the row's third
/// lifetime (instead of `12884901890`). The packed number stays the fencing value.
pub fn epoch_label(epoch: u64) -> String {
    let (generation, number) = tether_storage::epoch_parts(epoch);
    format!("g{generation}·{number}")
}

/// A lease on a binding row.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LeaseBody {
    /// The holder label.
    pub holder: Option<String>,
    /// The lease epoch (fencing number; what `expected_epoch` takes).
    pub epoch: u64,
    /// The epoch for people: `g<generation>·<number>` (row lifetime, then the epoch's number
    /// in it); never repeats for a key.
    pub epoch_label: String,
    /// The first eight characters of the token.
    pub token_prefix: String,
    /// When it was acquired (Unix ms).
    pub acquired_at_ms: i64,
    /// When it was last renewed (Unix ms).
    pub renewed_at_ms: i64,
    /// When it expires (Unix ms).
    pub expires_at_ms: i64,
    /// Milliseconds until expiry (0 once expired).
    pub expires_in_ms: i64,
    /// Whether it is still live.
    pub live: bool,
}

/// A binding row.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BindingBody {
    /// The namespace.
    pub namespace: String,
    /// The key.
    pub key: String,
    /// `physical`, `stable` or `conversation`.
    pub key_kind: String,
    /// The row revision.
    pub revision: u64,
    /// The largest epoch handed out on this row.
    pub epoch_floor: u64,
    /// Size of the stored value.
    pub value_bytes: usize,
    /// The stored value, sanitized and truncated.
    pub value_preview: String,
    /// The native runtime's id of the bound thread (for the Codex harness, the Codex thread
    /// id), when the value is a thread-binding record holding an active binding; `None` for a
    /// cleared or retired row and for values of other formats.
    pub native_id: Option<String>,
    /// When the row was created (Unix ms).
    pub created_at_ms: i64,
    /// When the row expires (Unix ms), if ever.
    pub expires_at_ms: Option<i64>,
    /// The lease, if the row carries one.
    pub lease: Option<LeaseBody>,
    /// The host session this row binds, where the store knows it (physical and stable keys of
    /// a stored session); `None` for conversation keys and unknown sessions.
    pub session_key: Option<String>,
}

impl BindingBody {
    /// The body of `record` as seen at `now`.
    pub fn new(record: &BindingRecord, now: Timestamp) -> Self {
        let row = &record.row;
        Self {
            namespace: record.namespace.to_string(),
            key: record.key.to_string(),
            key_kind: match record.key.kind() {
                BindingKeyKind::Physical => "physical",
                BindingKeyKind::Stable => "stable",
                _ => "conversation",
            }
            .into(),
            revision: row.revision.get(),
            epoch_floor: record.epoch_floor,
            value_bytes: row.value.len(),
            value_preview: preview_bytes(&row.value),
            native_id: native_id(&row.value),
            created_at_ms: row.created_at.as_millis(),
            expires_at_ms: row.expires_at.map(Timestamp::as_millis),
            lease: row.lease.as_ref().map(|l| LeaseBody {
                holder: l.holder.as_deref().map(sanitize_text),
                epoch: l.epoch.get(),
                epoch_label: epoch_label(l.epoch.get()),
                token_prefix: l.token.as_str().chars().take(8).collect(),
                acquired_at_ms: l.acquired_at.as_millis(),
                renewed_at_ms: l.renewed_at.as_millis(),
                expires_at_ms: l.expires_at.as_millis(),
                expires_in_ms: (l.expires_at.as_millis() - now.as_millis()).max(0),
                live: l.expires_at > now,
            }),
            session_key: None,
        }
    }

    /// The body naming the host session of its key from `names`.
    pub(crate) fn named(mut self, names: &SessionNames) -> Self {
        self.session_key = names.get(&self.key);
        self
    }
}

/// The thread id of a thread-binding record's active binding (sanitized like any stored text).
fn native_id(value: &[u8]) -> Option<String> {
    let record = ThreadBindingCodec.decode(value)?;
    record.binding().map(|b| sanitize_text(&b.thread_id))
}

/// One page of binding rows.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BindingPageBody {
    /// The rows, in (namespace, key) order.
    pub bindings: Vec<BindingBody>,
    /// Pass as `cursor` to read the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// A lease event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LeaseEventBody {
    /// Position in the history.
    pub seq: u64,
    /// The namespace.
    pub namespace: String,
    /// The key.
    pub key: String,
    /// `acquired`, `renewed`, `released`, `expired`, `taken_over` or `fenced`.
    pub kind: String,
    /// The epoch it is about.
    pub epoch: Option<u64>,
    /// The epoch for people (see [`epoch_label`]).
    pub epoch_label: Option<String>,
    /// The token prefix it is about.
    pub token_prefix: Option<String>,
    /// The other token involved (previous holder or refused writer).
    pub other_token_prefix: Option<String>,
    /// The holder label.
    pub holder: Option<String>,
    /// When (Unix ms).
    pub at_ms: i64,
    /// For a `renewed` event: how long the renewal's write spent in the store, in
    /// microseconds (commit excluded); absent for other kinds and batched renewals.
    pub latency_us: Option<u64>,
    /// The host session of the event's key, where the store knows it.
    pub session_key: Option<String>,
}

impl LeaseEventBody {
    /// The body naming the host session of its key from `names`.
    pub(crate) fn named(mut self, names: &SessionNames) -> Self {
        self.session_key = names.get(&self.key);
        self
    }
}

impl From<&LeaseEvent> for LeaseEventBody {
    fn from(e: &LeaseEvent) -> Self {
        Self {
            seq: e.seq,
            namespace: e.namespace.to_string(),
            key: e.key.to_string(),
            kind: e.kind.as_str().into(),
            epoch: e.epoch.map(|x| x.get()),
            epoch_label: e.epoch.map(|x| epoch_label(x.get())),
            token_prefix: e.token_prefix.clone(),
            other_token_prefix: e.other_token_prefix.clone(),
            holder: e.holder.as_deref().map(sanitize_text),
            at_ms: e.at.as_millis(),
            latency_us: e
                .latency
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            session_key: None,
        }
    }
}

/// One page of the lease history, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LeaseEventPageBody {
    /// The events, newest first.
    pub events: Vec<LeaseEventBody>,
    /// Pass as `cursor` to read the next (older) page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// One page of quarantined keys, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QuarantinePageBody {
    /// The quarantined keys, oldest first.
    pub quarantine: Vec<QuarantineBody>,
    /// Pass as `cursor` to read the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// A binding row with its lease history.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BindingDetail {
    /// The row.
    pub binding: BindingBody,
    /// Its quarantine record, if the key is quarantined.
    pub quarantine: Option<QuarantineBody>,
    /// Its lease events, newest first.
    pub events: Vec<LeaseEventBody>,
}

/// A quarantined key.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QuarantineBody {
    /// The namespace.
    pub namespace: String,
    /// The key.
    pub key: String,
    /// Why it was blocked (sanitized).
    pub reason: String,
    /// Who blocked it.
    pub custody: Option<String>,
    /// When (Unix ms).
    pub quarantined_at_ms: i64,
    /// The host session of the key, where the store knows it.
    pub session_key: Option<String>,
}

impl QuarantineBody {
    /// The body naming the host session of its key from `names`.
    pub(crate) fn named(mut self, names: &SessionNames) -> Self {
        self.session_key = names.get(&self.key);
        self
    }
}

impl From<&QuarantineEntry> for QuarantineBody {
    fn from(q: &QuarantineEntry) -> Self {
        Self {
            namespace: q.namespace.to_string(),
            key: q.key.to_string(),
            reason: sanitize_text(&q.reason),
            custody: q.custody.as_deref().map(sanitize_text),
            quarantined_at_ms: q.quarantined_at.as_millis(),
            session_key: None,
        }
    }
}

/// A quarantined key with the binding row it blocks (if any).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QuarantineDetail {
    /// The record.
    pub quarantine: QuarantineBody,
    /// The binding row at that key, if live.
    pub binding: Option<BindingBody>,
}

/// A transcript entry, sanitized.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TranscriptEntryBody {
    /// The entry id.
    pub anchor: i64,
    /// `user`, `assistant`, `system` or `tool`.
    pub role: String,
    /// The text, sanitized and truncated.
    pub content: String,
    /// When (Unix ms).
    pub created_at_ms: i64,
}

impl From<&TranscriptEntry> for TranscriptEntryBody {
    fn from(e: &TranscriptEntry) -> Self {
        Self {
            anchor: e.anchor.0,
            role: e.role.as_str().into(),
            content: sanitize_text(&e.content),
            created_at_ms: e.created_at.as_millis(),
        }
    }
}

/// A transcript search hit, sanitized.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TranscriptHitBody {
    /// The session.
    pub session_key: String,
    /// The entry id.
    pub anchor: i64,
    /// Who wrote it.
    pub role: String,
    /// The text, sanitized and truncated.
    pub snippet: String,
}

impl From<&TranscriptHit> for TranscriptHitBody {
    fn from(h: &TranscriptHit) -> Self {
        Self {
            session_key: h.session_key.to_string(),
            anchor: h.anchor.0,
            role: h.role.as_str().into(),
            snippet: sanitize_text(&h.content),
        }
    }
}

/// Search results.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SearchBody {
    /// The hits, in append order.
    pub hits: Vec<TranscriptHitBody>,
}

/// Everything about one session.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionDetail {
    /// The session entry.
    pub session: SessionSummary,
    /// Its generation lineage.
    pub lineage: Lineage,
    /// Its binding rows (physical and stable keys, every namespace), with their leases.
    pub bindings: Vec<BindingBody>,
    /// Quarantine records of its binding keys.
    pub quarantine: Vec<QuarantineBody>,
    /// The last entries of the active transcript path, oldest first, sanitized.
    pub transcript_tail: Vec<TranscriptEntryBody>,
    /// The last tool results on the active path, oldest first, sanitized.
    pub tool_outcomes: Vec<TranscriptEntryBody>,
    /// Finalization records of its settled turns (`system` transcript entries starting with
    /// `finalization:`), oldest first.
    pub finalizations: Vec<TranscriptEntryBody>,
    /// The newest lease events of its binding rows, newest first.
    pub lease_events: Vec<LeaseEventBody>,
    /// The upstream (external harness) link, if any.
    pub upstream: Option<String>,
}

/// A namespace known to the database.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NamespaceBody {
    /// The namespace.
    pub namespace: String,
    /// Live binding rows.
    pub rows: u64,
    /// Live binding rows with a live lease.
    pub leased: u64,
}

impl From<&NamespaceSummary> for NamespaceBody {
    fn from(n: &NamespaceSummary) -> Self {
        Self {
            namespace: n.namespace.to_string(),
            rows: n.rows,
            leased: n.leased,
        }
    }
}

/// An operator's reason for an action.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReasonBody {
    /// Why: recorded whole in the audit trail and the service log; required, not blank, no
    /// NUL, at most 4,096 bytes (a longer reason is refused, never cut).
    #[schema(min_length = 1, max_length = 4096, pattern = "\\S")]
    pub reason: String,
}

/// A force-expiry request.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpireLeaseBody {
    /// Why: recorded whole in the audit trail and the service log; required, not blank, no
    /// NUL, at most 4,096 bytes (a longer reason is refused, never cut).
    #[schema(min_length = 1, max_length = 4096, pattern = "\\S")]
    pub reason: String,
    /// Only expire the lease with this epoch (what the operator saw); another epoch is refused
    /// with 409 `epoch_mismatch` and the current one.
    #[serde(default, deserialize_with = "integral_u64")]
    #[schema(minimum = 0)]
    pub expected_epoch: Option<u64>,
}

/// What an action did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ActionResult {
    /// What happened (`deleted`, `expired`, `released`).
    pub outcome: String,
    /// A human-readable summary.
    pub message: String,
    /// For a force-expiry: the expired epoch.
    pub previous_epoch: Option<u64>,
}

/// Readiness.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Ready {
    /// `ready`.
    pub status: String,
    /// Host sessions stored.
    pub sessions: u64,
}

/// Reads an optional non-negative integer, also when a client writes it as an integral number
/// such as `3.0` (JSON Schema's `integer` allows that); fractions and negatives are refused.
fn integral_u64<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error as _;
    match Option::<serde_json::Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => {
            if let Some(v) = n.as_u64() {
                return Ok(Some(v));
            }
            match n.as_f64() {
                Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= 9_007_199_254_740_992.0 =>
                {
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    Ok(Some(f as u64))
                }
                _ => Err(D::Error::custom(format!(
                    "expected a non-negative integer, found {n}"
                ))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ExpireLeaseBody;

    #[test]
    fn expected_epoch_accepts_integral_numbers_only() {
        let parse = |s: &str| serde_json::from_str::<ExpireLeaseBody>(s);
        assert_eq!(
            parse(r#"{"reason":"r","expected_epoch":3}"#)
                .unwrap()
                .expected_epoch,
            Some(3)
        );
        assert_eq!(
            parse(r#"{"reason":"r","expected_epoch":3.0}"#)
                .unwrap()
                .expected_epoch,
            Some(3)
        );
        assert_eq!(parse(r#"{"reason":"r"}"#).unwrap().expected_epoch, None);
        assert!(parse(r#"{"reason":"r","expected_epoch":3.5}"#).is_err());
        assert!(parse(r#"{"reason":"r","expected_epoch":-1}"#).is_err());
        assert!(parse(r#"{"reason":"r","expected_epoch":"3"}"#).is_err());
    }
}

/// One recorded operator action.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditEntryBody {
    /// Position in the trail (increasing).
    pub id: u64,
    /// When the action started (Unix ms).
    pub at_ms: i64,
    /// Who acted: the token's name, `cli`, or `anonymous`.
    pub actor: String,
    /// `delete_session`, `expire_lease` or `release_quarantine`.
    pub action: String,
    /// The session key or `namespace/key` acted on (sanitized).
    pub target: String,
    /// The operator's reason, whole (secrets redacted).
    pub reason: String,
    /// `succeeded`, `refused`, `failed`, or `started` (never completed).
    pub outcome: String,
    /// What the service answered (sanitized).
    pub detail: Option<String>,
    /// When the action ended (Unix ms).
    pub finished_at_ms: Option<i64>,
}

impl From<&tether_storage::AuditEntry> for AuditEntryBody {
    fn from(e: &tether_storage::AuditEntry) -> Self {
        Self {
            id: e.id,
            at_ms: e.at.as_millis(),
            actor: sanitize_text(&e.actor),
            action: e.action.clone(),
            target: sanitize_text(&e.target),
            reason: sanitize_reason(&e.reason),
            outcome: e.outcome.as_str().into(),
            detail: e.detail.as_deref().map(sanitize_text),
            finished_at_ms: e.finished_at.map(Timestamp::as_millis),
        }
    }
}

/// One page of the audit trail, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AuditPageBody {
    /// The entries, newest first.
    pub entries: Vec<AuditEntryBody>,
    /// Pass as `cursor` to read the next (older) page; absent on the last page.
    pub next_cursor: Option<String>,
}
