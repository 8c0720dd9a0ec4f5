//! Message-tool-only source replies: whether the tool call was the reply to the source, and the
//! payload it carried.

use serde_json::{Map, Value};

use super::*;

/// The inputs of [`is_delivered_message_tool_only_source_reply`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceReplyQuery<'a> {
    /// The route's source-reply delivery mode (`message_tool_only`).
    pub source_reply_delivery_mode: Option<&'a str>,
    /// The tool name.
    pub tool_name: Option<&'a str>,
    /// The executed arguments.
    pub args: Option<&'a Value>,
    /// The original result.
    pub result: Option<&'a Value>,
    /// The hook-adjusted result.
    pub hook_result: Option<&'a Value>,
    /// Whether the tool reported an error.
    pub is_error: bool,
    /// The delivery fact snapshotted before middleware.
    pub fact: Option<&'a MessageDeliveryFact>,
    /// The send was proven to target the current source (see
    /// [`is_delivered_messaging_tool_send_to_current_source`]).
    pub allow_explicit_source_route: bool,
    /// An explicit confirmation from the caller, which wins over everything else.
    pub delivery_confirmed: Option<bool>,
}

const SOURCE_SEND_ACTIONS: &[&str] = &[
    "send",
    "thread-reply",
    "sendwitheffect",
    "sendattachment",
    "upload-file",
];
const EXPLICIT_ROUTE_ACTIONS: &[&str] = &["reply", "thread-reply", "poll"];
const EXPLICIT_ROUTE_KEYS: &[&str] = &["channel", "target", "to", "channelId", "provider"];

fn current_source_route_marker(value: Option<&Value>) -> bool {
    value
        .and_then(|v| v.get("details"))
        .and_then(|d| d.get("sourceReplyRoute"))
        .and_then(Value::as_str)
        == Some("current-source")
}

/// Whether a `message` tool call delivered the run's source reply (so the final assistant
/// reply must not be sent again).
pub fn is_delivered_message_tool_only_source_reply(q: &SourceReplyQuery<'_>) -> bool {
    let confirmed_route = q
        .fact
        .is_some_and(MessageDeliveryFact::source_reply_delivered)
        || current_source_route_marker(q.result)
        || current_source_route_marker(q.hook_result);
    if q.source_reply_delivery_mode != Some("message_tool_only") && !confirmed_route {
        return false;
    }
    if normalize_tool_name(q.tool_name.unwrap_or("message")) != "message" {
        return false;
    }
    let explicit_ok = q.allow_explicit_source_route || confirmed_route;
    let Some(action) = action_of(q.args) else {
        return false;
    };
    let action_ok = SOURCE_SEND_ACTIONS.contains(&action.as_str())
        || (explicit_ok && EXPLICIT_ROUTE_ACTIONS.contains(&action.as_str()));
    if !action_ok {
        return false;
    }
    let has_explicit_route = q.args.and_then(Value::as_object).is_some_and(|a| {
        EXPLICIT_ROUTE_KEYS.iter().any(|k| {
            a.get(*k)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.trim().is_empty())
        }) || a
            .get("targets")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty())
    });
    if has_explicit_route && !explicit_ok {
        return false;
    }
    if let Some(confirmed) = q.delivery_confirmed {
        return confirmed;
    }
    if let Some(fact) = q.fact {
        return fact.is_delivered(q.is_error);
    }
    is_delivered_messaging_tool_result(&MessagingToolResult {
        tool_name: Some("message"),
        args: q.args,
        result: q.result,
        hook_result: q.hook_result,
        is_error: q.is_error,
        ..MessagingToolResult::default()
    })
}

/// The fixed result that replaces a confirmed send whose result middleware failed; `None`
/// when the send is not confirmed (settled fact, or without a fact a delivery with a platform id).
pub fn middleware_failure_fallback(
    fact: Option<&MessageDeliveryFact>,
    original: &MessagingToolResult<'_>,
) -> Option<Value> {
    let confirmed = match fact {
        Some(f) => f.status == DeliveryStatus::Settled,
        None => is_delivered_messaging_tool_result(&MessagingToolResult {
            require_plugin_delivery_id: true,
            ..*original
        }),
    };
    confirmed.then(|| {
        serde_json::json!({
            "content": [{"type": "text", "text": "Message delivered, but result post-processing failed."}],
            "details": {"ok": true, "deliveryStatus": "sent", "middlewareWarning": "post-processing failed"},
        })
    })
}

/// One attachment of a source reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceReplyAttachment {
    /// A local path.
    pub path: Option<String>,
    /// A URL.
    pub url: Option<String>,
    /// A media URL.
    pub media_url: Option<String>,
    /// A file path.
    pub file_path: Option<String>,
    /// The MIME type.
    pub mime_type: Option<String>,
    /// A display name.
    pub name: Option<String>,
    /// Whether the media is trusted local media.
    pub trusted_local_media: Option<bool>,
    /// Duration in milliseconds.
    pub duration_ms: Option<f64>,
    /// Width in pixels.
    pub width: Option<f64>,
    /// Height in pixels.
    pub height: Option<f64>,
}

/// A source reply a messaging tool delivered to an internal UI sink. Only
/// [`extract_messaging_tool_source_reply_payload`] creates it, so
/// [`SourceReplyPayload::transcript_owner`] cannot be forged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceReplyPayload {
    /// The text.
    pub text: Option<String>,
    /// The first media URL.
    pub media_url: Option<String>,
    /// All media URLs (strings only).
    pub media_urls: Vec<String>,
    /// Attachments with their metadata.
    pub attachments: Vec<SourceReplyAttachment>,
    /// Whether the media is trusted local media.
    pub trusted_local_media: Option<bool>,
    /// Whether audio is sent as a voice note.
    pub audio_as_voice: bool,
    /// Rich presentation, as given.
    pub presentation: Option<Value>,
    /// Legacy interactive payload.
    pub interactive: Option<Value>,
    /// Channel-specific data (shallow copy).
    pub channel_data: Option<Map<String, Value>>,
    /// The idempotency key.
    pub idempotency_key: Option<String>,
    transcript_owner: bool,
}

impl SourceReplyPayload {
    /// The JSON form recorded in `DeliveryState::messaging_tool_source_reply_payloads`.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                out.insert(k.to_owned(), v);
            }
        };
        put("text", self.text.clone().map(Value::String));
        put("mediaUrl", self.media_url.clone().map(Value::String));
        put(
            "mediaUrls",
            (!self.media_urls.is_empty()).then(|| {
                Value::Array(self.media_urls.iter().cloned().map(Value::String).collect())
            }),
        );
        put(
            "attachments",
            (!self.attachments.is_empty()).then(|| {
                Value::Array(
                    self.attachments
                        .iter()
                        .map(|a| {
                            let mut m = Map::new();
                            for (k, v) in [
                                ("path", &a.path),
                                ("url", &a.url),
                                ("mediaUrl", &a.media_url),
                                ("filePath", &a.file_path),
                                ("mimeType", &a.mime_type),
                                ("name", &a.name),
                            ] {
                                if let Some(v) = v {
                                    m.insert(k.into(), Value::String(v.clone()));
                                }
                            }
                            if let Some(t) = a.trusted_local_media {
                                m.insert("trustedLocalMedia".into(), Value::Bool(t));
                            }
                            for (k, v) in [
                                ("durationMs", a.duration_ms),
                                ("width", a.width),
                                ("height", a.height),
                            ] {
                                if let Some(n) = v.and_then(serde_json::Number::from_f64) {
                                    m.insert(k.into(), Value::Number(n));
                                }
                            }
                            Value::Object(m)
                        })
                        .collect(),
                )
            }),
        );
        put(
            "trustedLocalMedia",
            self.trusted_local_media.map(Value::Bool),
        );
        put(
            "audioAsVoice",
            self.audio_as_voice.then_some(Value::Bool(true)),
        );
        put("presentation", self.presentation.clone());
        put("interactive", self.interactive.clone());
        put("channelData", self.channel_data.clone().map(Value::Object));
        put(
            "idempotencyKey",
            self.idempotency_key.clone().map(Value::String),
        );
        put(
            "transcriptOwner",
            self.transcript_owner.then_some(Value::Bool(true)),
        );
        Value::Object(out)
    }

    /// Whether the tool confirmed it owns the transcript entry of this reply
    /// (`details.sourceReplyTranscriptOwner === true` on the raw result).
    pub fn transcript_owner(&self) -> bool {
        self.transcript_owner
    }

    fn is_empty(&self) -> bool {
        self.text.is_none()
            && self.media_url.is_none()
            && self.media_urls.is_empty()
            && self.attachments.is_empty()
            && self.trusted_local_media.is_none()
            && !self.audio_as_voice
            && self.presentation.is_none()
            && self.interactive.is_none()
            && self.channel_data.is_none()
            && self.idempotency_key.is_none()
            && !self.transcript_owner
    }
}

fn str_field(obj: &Map<String, Value>, key: &str) -> Option<String> {
    obj.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn non_negative(obj: &Map<String, Value>, key: &str) -> Option<f64> {
    obj.get(key)
        .and_then(Value::as_f64)
        .filter(|f| f.is_finite() && *f >= 0.0)
}

/// Extracts the source reply a messaging tool delivered to the internal UI sink
/// (`details.sourceReplySink == "internal-ui"` and `details.deliveryStatus` absent or `sent`).
pub fn extract_messaging_tool_source_reply_payload(result: &Value) -> Option<SourceReplyPayload> {
    let details = result.get("details")?.as_object()?;
    if details.get("sourceReplySink").and_then(Value::as_str) != Some("internal-ui") {
        return None;
    }
    match details.get("deliveryStatus") {
        None => {}
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("sent") => {}
        Some(_) => return None,
    }
    let source = details
        .get("sourceReply")
        .and_then(Value::as_object)
        .unwrap_or(details);
    let from_either = |key: &str| source.get(key).or_else(|| details.get(key));
    let mut payload = SourceReplyPayload {
        text: str_field(source, "text").or_else(|| str_field(details, "message")),
        media_url: from_either("mediaUrl")
            .and_then(Value::as_str)
            .map(str::to_owned),
        ..SourceReplyPayload::default()
    };
    if let Some(urls) = from_either("mediaUrls").and_then(Value::as_array) {
        payload.media_urls = urls
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
    }
    if let Some(items) = source.get("attachments").and_then(Value::as_array) {
        for item in items.iter().filter_map(Value::as_object) {
            payload.attachments.push(SourceReplyAttachment {
                path: str_field(item, "path"),
                url: str_field(item, "url"),
                media_url: str_field(item, "mediaUrl"),
                file_path: str_field(item, "filePath"),
                mime_type: str_field(item, "mimeType"),
                name: str_field(item, "name"),
                trusted_local_media: item.get("trustedLocalMedia").and_then(Value::as_bool),
                duration_ms: non_negative(item, "durationMs"),
                width: non_negative(item, "width"),
                height: non_negative(item, "height"),
            });
        }
    }
    payload.trusted_local_media = source.get("trustedLocalMedia").and_then(Value::as_bool);
    payload.audio_as_voice = [source, details]
        .iter()
        .any(|o| o.get("audioAsVoice") == Some(&Value::Bool(true)));
    payload.presentation = source
        .get("presentation")
        .filter(|p| p.is_object())
        .cloned();
    payload.interactive = source.get("interactive").filter(|p| !p.is_null()).cloned();
    payload.channel_data = source
        .get("channelData")
        .and_then(Value::as_object)
        .cloned();
    payload.idempotency_key = from_either("idempotencyKey")
        .and_then(Value::as_str)
        .map(str::to_owned);
    payload.transcript_owner =
        details.get("sourceReplyTranscriptOwner") == Some(&Value::Bool(true));
    (!payload.is_empty()).then_some(payload)
}
