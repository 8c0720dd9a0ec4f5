//! Host-owned tool media and `message_tool_only` routing (see `docs/tool-results.md, 'Host-owned media'`).
//!
//! * `tool_media_urls`: all media tools produced in the attempt.
//! * `host_owned_tool_media_urls`: the subset the trusted harness runtime created and persisted
//!   itself. Model-selected media is never host-owned; entries that are not also in
//!   `tool_media_urls` are ignored ([`validated_host_owned_tool_media_urls`]).
//! * On a `message_tool_only` route, host-owned media (and core auto-delivery media) are split
//!   into separate payloads marked to survive source-reply suppression; in any other mode they
//!   are merged like generic media. The mark is private: only [`merge_attempt_tool_media_payloads`]
//!   sets it.

use tether_core::AttemptResult;

/// One reply payload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyPayload {
    /// The text.
    pub text: Option<String>,
    /// Media URLs.
    pub media_urls: Vec<String>,
    /// The first media URL.
    pub media_url: Option<String>,
    /// Send audio as a voice note.
    pub audio_as_voice: Option<bool>,
    /// The media is trusted local media.
    pub trusted_local_media: Option<bool>,
    /// Model reasoning (never the visible answer).
    pub is_reasoning: bool,
    /// An error payload.
    pub is_error: bool,
    /// A transcript mirror of a source reply a messaging tool already delivered.
    pub is_source_reply_mirror: bool,
}

/// A payload ready for delivery, with its private routing mark.
///
/// ```compile_fail
/// use tether_harness_sdk::results::media::{DeliveryPayload, ReplyPayload};
/// let forged = DeliveryPayload {
///     payload: ReplyPayload::default(),
///     deliver_despite_source_reply_suppression: true,
/// };
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryPayload {
    /// The payload.
    pub payload: ReplyPayload,
    deliver_despite_source_reply_suppression: bool,
}

impl DeliveryPayload {
    /// Whether the payload must be delivered even when source replies are suppressed
    /// (host-owned or auto-delivery media on a `message_tool_only` route).
    pub fn deliver_despite_source_reply_suppression(&self) -> bool {
        self.deliver_despite_source_reply_suppression
    }

    fn plain(payload: ReplyPayload) -> Self {
        Self {
            payload,
            deliver_despite_source_reply_suppression: false,
        }
    }
}

/// Inputs of [`merge_attempt_tool_media_payloads`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolMediaMerge<'a> {
    /// The attempt's reply payloads.
    pub payloads: &'a [ReplyPayload],
    /// All tool media of the attempt.
    pub tool_media_urls: &'a [String],
    /// An explicit selection of tool media (filtered to eligible URLs).
    pub tool_media_selection_urls: Option<&'a [String]>,
    /// Media the trusted runtime created itself.
    pub host_owned_tool_media_urls: &'a [String],
    /// Core auto-delivery (TTS contract) media.
    pub tool_auto_delivery_media_urls: &'a [String],
    /// Send tool audio as a voice note.
    pub tool_audio_as_voice: bool,
    /// Tool media is trusted local media.
    pub tool_trusted_local_media: bool,
    /// The route's source-reply delivery mode.
    pub source_reply_delivery_mode: Option<&'a str>,
}

fn clean(urls: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for u in urls {
        let t = u.trim();
        if !t.is_empty() && !out.iter().any(|o| o == t) {
            out.push(t.to_owned());
        }
    }
    out
}

/// Removes Markdown image references to `eligible` URLs from `text`; returns the new text and
/// the referenced URLs (in order, de-duplicated).
fn take_markdown_images(text: &str, eligible: &[String]) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut referenced: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("![") {
        let after = &rest[start + 2..];
        let parsed = after.find("](").and_then(|close| {
            let url_part = &after[close + 2..];
            url_part
                .find(')')
                .map(|end| (close, url_part[..end].trim(), close + 2 + end + 1))
        });
        match parsed {
            Some((_, url, consumed)) if eligible.iter().any(|e| e == url) => {
                out.push_str(&rest[..start]);
                if !referenced.iter().any(|r| r == url) {
                    referenced.push(url.to_owned());
                }
                rest = &after[consumed..];
            }
            _ => {
                out.push_str(&rest[..start + 2]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    if referenced.is_empty() {
        (text.to_owned(), referenced)
    } else {
        (out.trim().to_owned(), referenced)
    }
}

fn media_payload(
    urls: Vec<String>,
    audio_as_voice: Option<bool>,
    trusted: Option<bool>,
) -> ReplyPayload {
    ReplyPayload {
        media_url: urls.first().cloned(),
        media_urls: urls,
        audio_as_voice,
        trusted_local_media: trusted,
        ..ReplyPayload::default()
    }
}

/// Merges the attempt's tool media into its reply payloads (reference F, steps 1–7).
pub fn merge_attempt_tool_media_payloads(input: &ToolMediaMerge<'_>) -> Vec<DeliveryPayload> {
    let _span = tracing::debug_span!("merge_attempt_tool_media_payloads").entered();
    let tool = clean(input.tool_media_urls);
    let mut payloads: Vec<ReplyPayload> = input.payloads.to_vec();
    let visible = payloads.iter().position(|p| !p.is_reasoning && !p.is_error);

    let selected: Vec<String> = match input.tool_media_selection_urls {
        Some(selection) => clean(selection)
            .into_iter()
            .filter(|u| tool.contains(u))
            .collect(),
        None => {
            let referenced = visible.and_then(|i| {
                let text = payloads[i].text.as_deref()?;
                let (new_text, refs) = take_markdown_images(text, &tool);
                (!refs.is_empty()).then_some((i, new_text, refs))
            });
            match referenced {
                Some((i, new_text, refs)) => {
                    payloads[i].text = Some(new_text);
                    refs
                }
                None => tool.clone(),
            }
        }
    };
    let host_owned_inventory = clean(input.host_owned_tool_media_urls);
    let host_owned: Vec<String> = selected
        .iter()
        .filter(|u| host_owned_inventory.contains(u))
        .cloned()
        .collect();
    let auto: Vec<String> = clean(input.tool_auto_delivery_media_urls)
        .into_iter()
        .filter(|u| tool.contains(u))
        .collect();

    if selected.is_empty()
        && auto.is_empty()
        && !input.tool_audio_as_voice
        && !input.tool_trusted_local_media
    {
        return input
            .payloads
            .iter()
            .cloned()
            .map(DeliveryPayload::plain)
            .collect();
    }

    let split = input.source_reply_delivery_mode == Some("message_tool_only");
    let (owned_split, auto_split, generic): (Vec<String>, Vec<String>, Vec<String>) = if split {
        let auto_only: Vec<String> = auto
            .iter()
            .filter(|u| !host_owned.contains(u))
            .cloned()
            .collect();
        let generic = selected
            .iter()
            .filter(|u| !host_owned.contains(u) && !auto_only.contains(u))
            .cloned()
            .collect();
        (host_owned, auto_only, generic)
    } else {
        let mut all = selected.clone();
        for u in &auto {
            if !all.contains(u) {
                all.push(u.clone());
            }
        }
        (Vec::new(), Vec::new(), all)
    };

    let mut out: Vec<DeliveryPayload> = Vec::with_capacity(payloads.len() + 3);
    let mergeable = visible.filter(|i| !(split && payloads[*i].is_source_reply_mirror));
    let mut generic_placed = generic.is_empty();
    for (i, mut p) in payloads.into_iter().enumerate() {
        if Some(i) == mergeable && !generic.is_empty() {
            for u in &generic {
                if !p.media_urls.contains(u) {
                    p.media_urls.push(u.clone());
                }
            }
            if p.media_url.is_none() {
                p.media_url = p.media_urls.first().cloned();
            }
            if input.tool_audio_as_voice {
                p.audio_as_voice = Some(true);
            }
            if input.tool_trusted_local_media {
                p.trusted_local_media = Some(true);
            }
            generic_placed = true;
        }
        out.push(DeliveryPayload::plain(p));
    }
    if !generic_placed {
        out.push(DeliveryPayload::plain(media_payload(
            generic,
            input.tool_audio_as_voice.then_some(true),
            input.tool_trusted_local_media.then_some(true),
        )));
    }
    if !owned_split.is_empty() {
        out.push(DeliveryPayload {
            payload: media_payload(
                owned_split,
                None,
                input.tool_trusted_local_media.then_some(true),
            ),
            deliver_despite_source_reply_suppression: true,
        });
    }
    if !auto_split.is_empty() {
        out.push(DeliveryPayload {
            payload: media_payload(
                auto_split,
                input.tool_audio_as_voice.then_some(true),
                Some(true),
            ),
            deliver_despite_source_reply_suppression: true,
        });
    }
    out
}

/// The host-owned media of an attempt result that core honours: the trimmed, de-duplicated
/// entries that also appear in `tool_media_urls`. Others are ignored (no error).
pub fn validated_host_owned_tool_media_urls(result: &AttemptResult) -> Vec<String> {
    let tool = clean(&result.tool_media_urls);
    clean(&result.host_owned_tool_media_urls)
        .into_iter()
        .filter(|u| tool.contains(u))
        .collect()
}

/// Records media the trusted runtime created and persisted itself (for example a native image
/// generation copied into the managed media directory): the managed path is added to both
/// `tool_media_urls` and `host_owned_tool_media_urls`, and the attempt is marked as having had
/// potential side effects and not replay-safe.
pub fn record_host_created_media(result: &mut AttemptResult, managed_path: &str) {
    let path = managed_path.trim();
    if path.is_empty() {
        return;
    }
    for list in [
        &mut result.tool_media_urls,
        &mut result.host_owned_tool_media_urls,
    ] {
        if !list.iter().any(|u| u == path) {
            list.push(path.to_owned());
        }
    }
    result.replay.had_potential_side_effects = true;
    result.replay.replay_safe = false;
    tracing::debug!(media = %path, "host-created tool media recorded");
}
