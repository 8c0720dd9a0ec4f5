//! `src/agents/embedded-agent-runner/run/tool-media-payloads.test.ts`: merging tool media into
//! the attempt's reply payloads. (OpenClaw's reply metadata is a side table; Tether keeps the
//! source-reply mirror mark on the payload and the routing mark on `DeliveryPayload`.)

use tether_harness_sdk::results::media::{
    DeliveryPayload, ReplyPayload, ToolMediaMerge, merge_attempt_tool_media_payloads,
};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

fn text(t: &str) -> ReplyPayload {
    ReplyPayload {
        text: Some(t.into()),
        ..ReplyPayload::default()
    }
}

fn reasoning() -> ReplyPayload {
    ReplyPayload {
        is_reasoning: true,
        ..text("thinking")
    }
}

fn with_media(
    mut p: ReplyPayload,
    urls: &[&str],
    voice: Option<bool>,
    trusted: Option<bool>,
) -> ReplyPayload {
    p.media_urls = s(urls);
    p.media_url = urls.first().map(|u| (*u).to_owned());
    p.audio_as_voice = voice;
    p.trusted_local_media = trusted;
    p
}

fn payloads(out: &[DeliveryPayload]) -> Vec<ReplyPayload> {
    out.iter().map(|p| p.payload.clone()).collect()
}

#[test]
fn openclaw_tool_media_payloads_attach_to_the_first_visible_reply() {
    let input = [
        reasoning(),
        ReplyPayload {
            media_urls: s(&["/tmp/a.png"]),
            ..text("done")
        },
    ];
    let tool = s(&["/tmp/a.png", "/tmp/b.opus"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        payloads: &input,
        tool_media_urls: &tool,
        tool_audio_as_voice: true,
        ..ToolMediaMerge::default()
    });
    assert_eq!(
        payloads(&out),
        [
            reasoning(),
            with_media(
                text("done"),
                &["/tmp/a.png", "/tmp/b.opus"],
                Some(true),
                None
            )
        ]
    );
}

#[test]
fn openclaw_tool_media_payloads_media_only_reply_without_a_visible_one() {
    let input = [reasoning()];
    let tool = s(&["/tmp/reply.opus"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        payloads: &input,
        tool_media_urls: &tool,
        tool_audio_as_voice: true,
        ..ToolMediaMerge::default()
    });
    assert_eq!(
        payloads(&out),
        [
            reasoning(),
            with_media(
                ReplyPayload::default(),
                &["/tmp/reply.opus"],
                Some(true),
                None
            )
        ]
    );
}

#[test]
fn openclaw_tool_media_payloads_reply_metadata_survives_the_merge() {
    // OpenClaw's metadata (assistant index, suppression bypass) lives beside the payload;
    // Tether's routing mark is on the `DeliveryPayload` and stays unset for generic media.
    let input = [reasoning(), text("done")];
    let tool = s(&["/tmp/reply.png"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        payloads: &input,
        tool_media_urls: &tool,
        ..ToolMediaMerge::default()
    });
    assert_eq!(
        payloads(&out),
        [
            reasoning(),
            with_media(text("done"), &["/tmp/reply.png"], None, None)
        ]
    );
    assert!(
        out.iter()
            .all(|p| !p.deliver_despite_source_reply_suppression())
    );
}

#[test]
fn openclaw_tool_media_payloads_trusted_local_media_provenance() {
    let input = [text("done")];
    let tool = s(&["/tmp/reply.opus"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        payloads: &input,
        tool_media_urls: &tool,
        tool_audio_as_voice: true,
        tool_trusted_local_media: true,
        ..ToolMediaMerge::default()
    });
    assert_eq!(
        payloads(&out),
        [with_media(
            text("done"),
            &["/tmp/reply.opus"],
            Some(true),
            Some(true)
        )]
    );
}

fn mirror() -> ReplyPayload {
    ReplyPayload {
        is_source_reply_mirror: true,
        ..text("sent through message tool")
    }
}

#[test]
fn openclaw_tool_media_payloads_source_reply_mirrors_get_no_tool_media() {
    let input = [mirror()];
    let tool = s(&["/tmp/generated.png"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        payloads: &input,
        tool_media_urls: &tool,
        source_reply_delivery_mode: Some("message_tool_only"),
        ..ToolMediaMerge::default()
    });
    assert_eq!(out[0].payload, mirror());
    assert!(
        out.iter()
            .all(|p| p.payload.media_urls.is_empty() || !p.payload.is_source_reply_mirror)
    );
}

#[test]
fn openclaw_tool_media_payloads_trusted_local_media_splits_from_a_source_reply_mirror() {
    let input = [mirror()];
    let tool = s(&["/tmp/tts-audio.opus"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        payloads: &input,
        tool_media_urls: &tool,
        tool_audio_as_voice: true,
        tool_trusted_local_media: true,
        source_reply_delivery_mode: Some("message_tool_only"),
        ..ToolMediaMerge::default()
    });
    assert_eq!(out.len(), 2, "{out:?}");
    // The mirror stays as it was; the media gets its own payload, without routing metadata.
    assert_eq!(out[0].payload, mirror());
    assert_eq!(
        out[1].payload,
        with_media(
            ReplyPayload::default(),
            &["/tmp/tts-audio.opus"],
            Some(true),
            Some(true)
        )
    );
    assert_eq!(out[1].payload.text, None);
    assert!(!out[1].deliver_despite_source_reply_suppression());
}
