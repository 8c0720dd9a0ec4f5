//! User-turn mirroring (see `docs/tool-results.md, 'Transcript mirroring'`).
//!
//! [`restore_prepared_user_turn_meta`] puts the host-prepared operational metadata of a user turn
//! back onto the message a runtime hook produced, and [`UserTurnTranscriptRecorder`] is the
//! persisted marker that announces "the original input committed" only for a fresh append.
//!
//! The metadata is typed ([`UserTurnMeta`]) and travels on a message under a wire key
//! ([`MetaKey`]: OpenClaw's `__openclaw` by default, or the host's own).
//! [`UserTurnTranscriptRecorder::append_user_turn`] appends a restored message with its
//! metadata ([`UserTurnEntry`]) and feeds the append's outcome to the marker.
//!
//! Restored metadata authorizes nothing and does not prove that a transcript append happened.

use std::borrow::Cow;

use serde_json::{Map, Value};
use tether_core::{AppendOutcome, TranscriptAnchor};

use super::tree::{deep_clone, deep_equal, drop_deep};

mod entry;
mod meta;

pub use entry::UserTurnEntry;
pub use meta::{
    MAX_META_KEY_LEN, META_KEY, MetaKey, STEER_TARGET_RUN_ID_MAX_CHARS, UserTurnMeta, wire,
};

/// Restores the prepared user-turn operational metadata onto `runtime` (the message after
/// `before_message_write` hooks ran), under OpenClaw's key [`META_KEY`]: the rules are those
/// of [`MetaKey::restore`], which does the same under a key of the host's own.
///
/// Neither input is mutated; `prepared` should be a snapshot taken before hooks ran.
pub fn restore_prepared_user_turn_meta<'a>(
    runtime: &'a Value,
    prepared: Option<&Value>,
) -> Cow<'a, Value> {
    MetaKey::OPENCLAW.restore(runtime, prepared)
}

/// What the transcript store reported for the harness's own canonical append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Persistence {
    /// `true` only when a new entry was written (not for an idempotent history match).
    pub appended: bool,
}

/// The admission receipt of a committed user turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionReceipt {
    /// The transcript entry.
    pub anchor: TranscriptAnchor,
    /// The logical turn id (the recorder's own when the caller gave only an anchor).
    pub logical_turn_id: String,
    /// Always `"user"` for user-turn admissions.
    pub role: &'static str,
}

/// What the caller passes as the committed entry: a bare anchor or a full admission receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TranscriptReceipt {
    /// Only the entry anchor; the recorder completes it with its own logical turn id.
    Anchor(TranscriptAnchor),
    /// A complete admission receipt (kept as is).
    Admission(AdmissionReceipt),
}

/// The "original input committed" notification.
#[derive(Debug, Clone, PartialEq)]
pub struct OriginalInputCommit {
    /// The committed message.
    pub message: Value,
    /// Its transcript entry.
    pub anchor: TranscriptAnchor,
}

/// One source of collected (multi-source) input, registered with
/// [`UserTurnTranscriptRecorder::add_collected_source`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CollectedSourceId(pub usize);

/// The observable effects of one [`UserTurnTranscriptRecorder::mark_runtime_persisted`] call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PersistedMarkEffects {
    /// Set when the original input committed notification fires (at most once per recorder).
    pub original_input_committed: Option<OriginalInputCommit>,
    /// Collected-input sources the commit anchor is forwarded to: only sources with mentions
    /// whose content deep-equals the committed content.
    pub forwarded_to_sources: Vec<CollectedSourceId>,
    /// Set when the "message persisted" callback fires (at most once per recorder).
    pub message_persisted: Option<Value>,
}

/// What the host's fallback persistence must do now; see
/// [`UserTurnTranscriptRecorder::plan_fallback`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FallbackPlan {
    /// The runtime's own append is still in flight: report its outcome
    /// ([`UserTurnTranscriptRecorder::mark_runtime_persisted`] or
    /// [`UserTurnTranscriptRecorder::mark_runtime_persistence_failed`]) and plan again.
    WaitForRuntime,
    /// Nothing to append (the turn is blocked, or already persisted without late media).
    Nothing,
    /// Append this message: the turn was never persisted.
    Append(Value),
    /// Media resolved after the prompt reached the provider. The bytes the provider saw are
    /// never rewritten: append `admitted` first when the turn was never persisted, then
    /// `late_media`, a separate message (its metadata marked `lateMedia: true`, never announced
    /// as the original input).
    LateMedia {
        /// The admitted message, when the turn still has to be persisted.
        admitted: Option<Value>,
        /// The media that arrived late.
        late_media: Value,
    },
}

/// Records how a user turn reached the transcript and decides the one-time notifications.
///
/// Besides the runtime's own append it tracks the two paths a host's fallback persistence has
/// to respect: a runtime append still in flight ([`Self::mark_runtime_persistence_pending`]),
/// and input whose media resolves lazily, possibly after the prompt was sent
/// ([`Self::record_resolved_input`], [`Self::mark_sent_to_provider`]);
/// [`Self::plan_fallback`] combines them.
///
/// Every message it keeps or returns is copied, compared and dropped without recursion, so
/// caller JSON of any depth is safe.
#[derive(Debug)]
pub struct UserTurnTranscriptRecorder {
    logical_turn_id: String,
    runtime_persisted: bool,
    runtime_pending: bool,
    persisted_message: Option<Value>,
    admission: Option<(AdmissionReceipt, Value)>,
    blocked: bool,
    commit_notified: bool,
    persisted_notified: bool,
    sent_to_provider: bool,
    /// The lazily resolved input and whether it resolved before the prompt was sent.
    resolved: Option<(Value, bool)>,
    sources: Vec<(Value, bool)>,
    key: MetaKey,
}

impl Default for UserTurnTranscriptRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for UserTurnTranscriptRecorder {
    fn clone(&self) -> Self {
        Self {
            logical_turn_id: self.logical_turn_id.clone(),
            runtime_persisted: self.runtime_persisted,
            runtime_pending: self.runtime_pending,
            persisted_message: self.persisted_message.as_ref().map(deep_clone),
            admission: self
                .admission
                .as_ref()
                .map(|(r, m)| (r.clone(), deep_clone(m))),
            blocked: self.blocked,
            commit_notified: self.commit_notified,
            persisted_notified: self.persisted_notified,
            sent_to_provider: self.sent_to_provider,
            resolved: self.resolved.as_ref().map(|(m, b)| (deep_clone(m), *b)),
            sources: self
                .sources
                .iter()
                .map(|(c, mentions)| (deep_clone(c), *mentions))
                .collect(),
            key: self.key.clone(),
        }
    }
}

impl Drop for UserTurnTranscriptRecorder {
    fn drop(&mut self) {
        let kept = [
            self.persisted_message.take(),
            self.admission.take().map(|(_, m)| m),
            self.resolved.take().map(|(m, _)| m),
        ];
        kept.into_iter().flatten().for_each(drop_deep);
        std::mem::take(&mut self.sources)
            .into_iter()
            .for_each(|(c, _)| drop_deep(c));
    }
}

impl UserTurnTranscriptRecorder {
    /// A fresh recorder with a random logical turn id, reading user-turn metadata under
    /// OpenClaw's key ([`MetaKey::OPENCLAW`]).
    pub fn new() -> Self {
        Self::with_meta_key(MetaKey::OPENCLAW)
    }

    /// A fresh recorder reading and writing user-turn metadata under `key`.
    pub fn with_meta_key(key: MetaKey) -> Self {
        Self {
            logical_turn_id: uuid::Uuid::new_v4().to_string(),
            runtime_persisted: false,
            runtime_pending: false,
            persisted_message: None,
            admission: None,
            blocked: false,
            commit_notified: false,
            persisted_notified: false,
            sent_to_provider: false,
            resolved: None,
            sources: Vec::new(),
            key,
        }
    }

    /// The key this recorder reads and writes user-turn metadata under.
    pub fn meta_key(&self) -> &MetaKey {
        &self.key
    }

    /// The runtime started its own append of the turn; until its outcome is reported,
    /// [`Self::plan_fallback`] answers [`FallbackPlan::WaitForRuntime`].
    pub fn mark_runtime_persistence_pending(&mut self) {
        if !self.runtime_persisted {
            self.runtime_pending = true;
        }
    }

    /// Whether a runtime append is still in flight.
    pub fn has_runtime_persistence_pending(&self) -> bool {
        self.runtime_pending
    }

    /// The runtime's pending append failed: the turn is not persisted, and the fallback may
    /// append it.
    pub fn mark_runtime_persistence_failed(&mut self) {
        self.runtime_pending = false;
    }

    /// The prompt was sent to the provider: input that resolves from now on is late.
    pub fn mark_sent_to_provider(&mut self) {
        self.sent_to_provider = true;
    }

    /// Whether the prompt was sent to the provider.
    pub fn was_sent_to_provider(&self) -> bool {
        self.sent_to_provider
    }

    /// Records the lazily resolved input (the user message with its media). Only the first
    /// resolution counts; returns whether this one was recorded.
    pub fn record_resolved_input(&mut self, resolved: Value) -> bool {
        if self.resolved.is_some() {
            return false;
        }
        self.resolved = Some((resolved, !self.sent_to_provider));
        true
    }

    /// The host's fallback persistence, with the pending and lazy-media paths: what to append
    /// now for the turn whose prepared message is `message`.
    ///
    /// * A blocked turn appends nothing; a runtime append in flight must settle first.
    /// * Input resolved after the prompt reached the provider, with media the admitted message
    ///   lacks: the admitted message (when never persisted) and a separate late-media message.
    /// * Otherwise the resolved input (or `message`) when the turn was never persisted.
    ///
    /// Every message this returns counts as persisted from then on.
    pub fn plan_fallback(&mut self, message: &Value) -> FallbackPlan {
        if self.blocked {
            return FallbackPlan::Nothing;
        }
        if self.runtime_pending {
            return FallbackPlan::WaitForRuntime;
        }
        if let Some((resolved, false)) = &self.resolved
            && self.sent_to_provider
        {
            let admitted = self.persisted_message.as_ref().unwrap_or(message);
            let late_key = format!("late-media:{}", self.logical_turn_id);
            if let Some(late_media) =
                late_media_message(Some(admitted), resolved, &late_key, &self.key)
            {
                let admitted = (!self.runtime_persisted).then(|| {
                    self.runtime_persisted = true;
                    self.replace_persisted(deep_clone(message));
                    deep_clone(message)
                });
                return FallbackPlan::LateMedia {
                    admitted,
                    late_media,
                };
            }
        }
        if self.runtime_persisted {
            return FallbackPlan::Nothing;
        }
        let turn = deep_clone(
            self.resolved
                .as_ref()
                .map_or(message, |(resolved, _)| resolved),
        );
        self.runtime_persisted = true;
        self.replace_persisted(deep_clone(&turn));
        FallbackPlan::Append(turn)
    }

    /// The recorder's own logical turn id.
    pub fn logical_turn_id(&self) -> &str {
        &self.logical_turn_id
    }

    /// Registers one source of collected input (its content and whether it carries mentions).
    pub fn add_collected_source(
        &mut self,
        content: Value,
        has_mentions: bool,
    ) -> CollectedSourceId {
        self.sources.push((content, has_mentions));
        CollectedSourceId(self.sources.len() - 1)
    }

    /// Marks the turn blocked: no "original input committed" notification will fire.
    pub fn mark_blocked(&mut self) {
        self.blocked = true;
    }

    /// Whether the turn was persisted (by the runtime or the fallback).
    pub fn has_persisted(&self) -> bool {
        self.runtime_persisted
    }

    /// The first admission receipt recorded, if any.
    pub fn admission_receipt(&self) -> Option<&AdmissionReceipt> {
        self.admission.as_ref().map(|(r, _)| r)
    }

    /// The persisted message, preferring the admitted one.
    pub fn persisted_message(&self) -> Option<&Value> {
        self.admission
            .as_ref()
            .map(|(_, m)| m)
            .or(self.persisted_message.as_ref())
    }

    /// The harness's canonical append finished: record it.
    ///
    /// `persistence` must carry the store's **actual** `appended` flag; absence counts as
    /// `false`. The "original input committed" notification fires only for `appended: true`,
    /// at most once, never after [`Self::mark_blocked`], and never for hidden
    /// (`display: false`), context-excluded, non-external (`provenance.kind` other than
    /// `external_user`), late-media or before-agent-run-blocked messages.
    pub fn mark_runtime_persisted(
        &mut self,
        message: Option<&Value>,
        receipt: Option<TranscriptReceipt>,
        persistence: Option<Persistence>,
    ) -> PersistedMarkEffects {
        let _span = tracing::debug_span!("mark_runtime_persisted").entered();
        let mut effects = PersistedMarkEffects::default();
        self.runtime_persisted = true;
        self.runtime_pending = false;
        if let Some(m) = message {
            self.replace_persisted(deep_clone(m));
        }
        if let (Some(m), Some(receipt)) = (message, receipt) {
            let receipt = match receipt {
                TranscriptReceipt::Admission(r) => r,
                TranscriptReceipt::Anchor(anchor) => AdmissionReceipt {
                    anchor,
                    logical_turn_id: self.logical_turn_id.clone(),
                    role: "user",
                },
            };
            if persistence.is_some_and(|p| p.appended) && self.may_notify_commit(m) {
                self.commit_notified = true;
                let committed_content = m.get("content");
                effects.forwarded_to_sources = self
                    .sources
                    .iter()
                    .enumerate()
                    .filter(|(_, (content, has_mentions))| {
                        *has_mentions && committed_content.is_some_and(|c| deep_equal(c, content))
                    })
                    .map(|(i, _)| CollectedSourceId(i))
                    .collect();
                effects.original_input_committed = Some(OriginalInputCommit {
                    message: deep_clone(m),
                    anchor: receipt.anchor,
                });
            }
            if self.admission.is_none() {
                self.admission = Some((receipt, deep_clone(m)));
            }
        }
        if !self.persisted_notified
            && let Some(m) = self.persisted_message().map(deep_clone)
        {
            self.persisted_notified = true;
            effects.message_persisted = Some(m);
        }
        effects
    }

    /// [`Self::mark_runtime_persisted`] fed from the store's [`AppendOutcome`].
    pub fn mark_runtime_persisted_from_append(
        &mut self,
        message: &Value,
        outcome: &AppendOutcome,
    ) -> PersistedMarkEffects {
        self.mark_runtime_persisted(
            Some(message),
            Some(TranscriptReceipt::Anchor(outcome.anchor)),
            Some(Persistence {
                appended: outcome.appended,
            }),
        )
    }

    /// The canonical append of a committed user turn, with its metadata: `message` (the
    /// restored message) is split into a [`UserTurnEntry`] — text, idempotency key, and every
    /// other field as metadata — which `append` writes to the host transcript (idempotently,
    /// under the entry's key). The store's [`AppendOutcome`] then feeds the persisted marker
    /// exactly as [`Self::mark_runtime_persisted_from_append`] does, so only a fresh append
    /// announces the original input.
    ///
    /// An `append` error is returned as it is and records nothing: the turn is not persisted,
    /// and the fallback may append it.
    pub async fn append_user_turn<F, Fut, E>(
        &mut self,
        message: &Value,
        append: F,
    ) -> Result<PersistedMarkEffects, E>
    where
        F: FnOnce(UserTurnEntry) -> Fut,
        Fut: std::future::Future<Output = Result<AppendOutcome, E>>,
    {
        let outcome = append(UserTurnEntry::from_message(message)).await?;
        tracing::debug!(
            appended = outcome.appended,
            anchor = outcome.anchor.0,
            "user turn appended"
        );
        Ok(self.mark_runtime_persisted_from_append(message, &outcome))
    }

    /// The host's fallback persistence path: returns the message to append, if any.
    ///
    /// After the runtime persisted the turn nothing is appended again, unless media resolved
    /// after the prompt was sent to the provider: then a separate late-media message (marked
    /// `lateMedia: true` in its metadata) is returned. A blocked turn is never appended.
    pub fn persist_fallback(
        &mut self,
        message: &Value,
        media_resolved_after_prompt: bool,
    ) -> Option<Value> {
        if self.blocked {
            return None;
        }
        if self.runtime_persisted {
            if !media_resolved_after_prompt {
                return None;
            }
            let key = self.key.as_str();
            let mut late = object_without(message, &[key]);
            late.insert(key.into(), late_media_meta(message, &self.key));
            return Some(Value::Object(late));
        }
        self.runtime_persisted = true;
        self.replace_persisted(deep_clone(message));
        Some(deep_clone(message))
    }

    /// Keeps `message` as the persisted message, dropping the one it replaces without
    /// recursion.
    fn replace_persisted(&mut self, message: Value) {
        if let Some(old) = self.persisted_message.replace(message) {
            drop_deep(old);
        }
    }

    fn may_notify_commit(&self, message: &Value) -> bool {
        if self.commit_notified || self.blocked {
            return false;
        }
        if message.get("display") == Some(&Value::Bool(false))
            || message.get("excludeFromContext") == Some(&Value::Bool(true))
        {
            return false;
        }
        if let Some(provenance) = message.get("provenance").filter(|p| !p.is_null())
            && provenance.get("kind").and_then(Value::as_str) != Some("external_user")
        {
            return false;
        }
        let meta = self.key.wire_of(message);
        if meta.and_then(|m| m.get(wire::LATE_MEDIA)) == Some(&Value::Bool(true)) {
            return false;
        }
        if meta
            .and_then(|m| m.get(wire::BEFORE_AGENT_RUN_BLOCKED))
            .is_some()
        {
            return false;
        }
        true
    }
}

/// The media of a user message: the content blocks that are not text, in order.
fn media_blocks(message: &Value) -> Vec<&Value> {
    message
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) != Some("text"))
                .collect()
        })
        .unwrap_or_default()
}

/// The separate message carrying media that resolved after the admitted message reached the
/// provider, or `None` when the resolved input adds no media. Its content drops what the
/// admitted message already said; its idempotency key derives from the resolved one (or
/// `fallback_key`), and its metadata is marked `lateMedia: true`.
fn late_media_message(
    admitted: Option<&Value>,
    resolved: &Value,
    fallback_key: &str,
    meta_key: &MetaKey,
) -> Option<Value> {
    let resolved_media = media_blocks(resolved);
    let same_media = |a: &Value| {
        let admitted_media = media_blocks(a);
        admitted_media.len() == resolved_media.len()
            && admitted_media
                .iter()
                .zip(&resolved_media)
                .all(|(x, y)| deep_equal(x, y))
    };
    if resolved_media.is_empty() || admitted.is_some_and(same_media) {
        return None;
    }
    let mut out = object_without(resolved, &["content", "idempotencyKey", meta_key.as_str()]);
    let admitted_content = admitted.and_then(|a| a.get("content"));
    let resolved_content = resolved.get("content");
    let content = match (admitted_content, resolved_content) {
        (Some(a), Some(r)) if deep_equal(a, r) => Value::String(String::new()),
        (Some(Value::String(said)), Some(Value::Array(blocks))) => Value::Array(
            blocks
                .iter()
                .filter(|b| {
                    b.get("type").and_then(Value::as_str) != Some("text")
                        || b.get("text").and_then(Value::as_str) != Some(said.as_str())
                })
                .map(deep_clone)
                .collect(),
        ),
        (_, Some(r)) => deep_clone(r),
        (_, None) => Value::String(String::new()),
    };
    out.insert("content".into(), content);
    let key = match resolved.get("idempotencyKey").and_then(Value::as_str) {
        Some(k) if !k.is_empty() => format!("{k}:late-media"),
        _ => fallback_key.to_owned(),
    };
    out.insert("idempotencyKey".into(), Value::String(key));
    out.insert(
        meta_key.as_str().into(),
        late_media_meta(resolved, meta_key),
    );
    Some(Value::Object(out))
}

/// A copy of `message`'s fields except `skip` (empty when it is not an object).
fn object_without(message: &Value, skip: &[&str]) -> Map<String, Value> {
    message
        .as_object()
        .map(|fields| {
            fields
                .iter()
                .filter(|(k, _)| !skip.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), deep_clone(v)))
                .collect()
        })
        .unwrap_or_default()
}

/// `message`'s operational metadata with `lateMedia: true` added.
fn late_media_meta(message: &Value, key: &MetaKey) -> Value {
    let mut meta: Map<String, Value> = key
        .wire_of(message)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), deep_clone(v))).collect())
        .unwrap_or_default();
    meta.insert(wire::LATE_MEDIA.into(), Value::Bool(true));
    Value::Object(meta)
}
