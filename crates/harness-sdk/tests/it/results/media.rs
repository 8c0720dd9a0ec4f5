//! Part F: host-owned media and `message_tool_only` routing (vectors 108–115).

use tether_core::AttemptResult;
use tether_harness_sdk::results::media::{
    DeliveryPayload, ReplyPayload, ToolMediaMerge, merge_attempt_tool_media_payloads,
    record_host_created_media, validated_host_owned_tool_media_urls,
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

fn media(urls: &[&str], voice: Option<bool>, trusted: Option<bool>) -> ReplyPayload {
    ReplyPayload {
        media_urls: s(urls),
        media_url: urls.first().map(|u| (*u).to_owned()),
        audio_as_voice: voice,
        trusted_local_media: trusted,
        ..ReplyPayload::default()
    }
}

fn payloads(out: &[DeliveryPayload]) -> Vec<ReplyPayload> {
    out.iter().map(|p| p.payload.clone()).collect()
}

fn bypass(out: &[DeliveryPayload]) -> Vec<bool> {
    out.iter()
        .map(DeliveryPayload::deliver_despite_source_reply_suppression)
        .collect()
}

const MTO: Option<&str> = Some("message_tool_only");

#[test]
fn tool_results_108_generic_media_merge_into_visible_payload() {
    let input = [
        ReplyPayload {
            is_reasoning: true,
            ..text("thinking")
        },
        ReplyPayload {
            media_urls: s(&["/scratch/a.png"]),
            ..text("done")
        },
    ];
    let tool = s(&["/scratch/a.png", "/scratch/b.opus"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        payloads: &input,
        tool_media_urls: &tool,
        tool_audio_as_voice: true,
        ..ToolMediaMerge::default()
    });
    let expected_visible = ReplyPayload {
        text: Some("done".into()),
        ..media(&["/scratch/a.png", "/scratch/b.opus"], Some(true), None)
    };
    assert_eq!(payloads(&out), vec![input[0].clone(), expected_visible]);
    assert_eq!(bypass(&out), vec![false, false]);
}

#[test]
fn tool_results_109_host_owned_split_on_message_tool_only() {
    let tool = s(&["/scratch/generated.png"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        tool_media_urls: &tool,
        host_owned_tool_media_urls: &tool,
        source_reply_delivery_mode: MTO,
        ..ToolMediaMerge::default()
    });
    assert_eq!(
        payloads(&out),
        vec![media(&["/scratch/generated.png"], None, None)]
    );
    assert_eq!(bypass(&out), vec![true]);
}

#[test]
fn tool_results_110_forged_host_owned_entry_ignored() {
    let tool = s(&["/scratch/tool.png"]);
    let forged = s(&["/scratch/forged.png"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        tool_media_urls: &tool,
        host_owned_tool_media_urls: &forged,
        source_reply_delivery_mode: MTO,
        ..ToolMediaMerge::default()
    });
    assert_eq!(
        payloads(&out),
        vec![media(&["/scratch/tool.png"], None, None)]
    );
    assert_eq!(bypass(&out), vec![false]);
    let result = AttemptResult {
        tool_media_urls: tool,
        host_owned_tool_media_urls: s(&["/scratch/forged.png", " /scratch/tool.png "]),
        ..AttemptResult::default()
    };
    assert_eq!(
        validated_host_owned_tool_media_urls(&result),
        s(&["/scratch/tool.png"])
    );
}

#[test]
fn tool_results_111_generic_merged_host_owned_split() {
    let input = [text("Done")];
    let tool = s(&["/scratch/reply.opus", "/scratch/generated.png"]);
    let owned = s(&["/scratch/generated.png"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        payloads: &input,
        tool_media_urls: &tool,
        host_owned_tool_media_urls: &owned,
        tool_audio_as_voice: true,
        source_reply_delivery_mode: MTO,
        ..ToolMediaMerge::default()
    });
    assert_eq!(
        payloads(&out),
        vec![
            ReplyPayload {
                text: Some("Done".into()),
                ..media(&["/scratch/reply.opus"], Some(true), None)
            },
            media(&["/scratch/generated.png"], None, None),
        ]
    );
    assert_eq!(bypass(&out), vec![false, true]);
}

#[test]
fn tool_results_112_auto_delivery_media_split_with_flags() {
    let input = [text("PRIVATE_FINAL_83636_MUST_NOT_APPEAR")];
    let tool = s(&["/scratch/reply.opus"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        payloads: &input,
        tool_media_urls: &tool,
        tool_auto_delivery_media_urls: &tool,
        tool_audio_as_voice: true,
        tool_trusted_local_media: true,
        source_reply_delivery_mode: MTO,
        ..ToolMediaMerge::default()
    });
    assert_eq!(
        payloads(&out),
        vec![
            input[0].clone(),
            media(&["/scratch/reply.opus"], Some(true), Some(true))
        ]
    );
    assert_eq!(bypass(&out), vec![false, true]);
}

#[test]
fn tool_results_113_unmatched_markdown_kept() {
    let input = [text("Caption\n\n![not tool media](/scratch/unrelated.png)")];
    let tool = s(&["/scratch/pending.png"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        payloads: &input,
        tool_media_urls: &tool,
        ..ToolMediaMerge::default()
    });
    assert_eq!(
        payloads(&out),
        vec![ReplyPayload {
            text: input[0].text.clone(),
            ..media(&["/scratch/pending.png"], None, None)
        }]
    );
    // Matched references are removed from the text and select the attached media.
    let input = [text("Here ![img](/scratch/a.png)")];
    let tool = s(&["/scratch/a.png", "/scratch/b.png"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        payloads: &input,
        tool_media_urls: &tool,
        ..ToolMediaMerge::default()
    });
    assert_eq!(
        payloads(&out),
        vec![ReplyPayload {
            text: Some("Here".into()),
            ..media(&["/scratch/a.png"], None, None)
        }]
    );
}

#[test]
fn tool_results_114_other_modes_merge_host_owned_media() {
    let tool = s(&["/scratch/generated.png"]);
    let out = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        tool_media_urls: &tool,
        host_owned_tool_media_urls: &tool,
        ..ToolMediaMerge::default()
    });
    assert_eq!(
        payloads(&out),
        vec![media(&["/scratch/generated.png"], None, None)]
    );
    assert_eq!(bypass(&out), vec![false]);
    let nothing = merge_attempt_tool_media_payloads(&ToolMediaMerge {
        payloads: &[text("x")],
        ..ToolMediaMerge::default()
    });
    assert_eq!(payloads(&nothing), vec![text("x")]);
}

/// The Codex projector is not part of this crate; this checks the SDK side of vector 115: a
/// runtime-created artifact (already copied into the managed media directory) is recorded as
/// both tool media and host-owned media, with side-effect replay metadata.
#[test]
fn tool_results_115_host_created_media_recorded() {
    let mut result = AttemptResult::default();
    record_host_created_media(&mut result, "/state/media/managed/ig_1.png");
    record_host_created_media(&mut result, "/state/media/managed/ig_1.png");
    assert_eq!(
        result.tool_media_urls,
        s(&["/state/media/managed/ig_1.png"])
    );
    assert_eq!(result.host_owned_tool_media_urls, result.tool_media_urls);
    assert!(result.assistant_texts.is_empty());
    assert!(result.replay.had_potential_side_effects && !result.replay.replay_safe);
    assert_eq!(
        validated_host_owned_tool_media_urls(&result),
        result.tool_media_urls
    );
}
