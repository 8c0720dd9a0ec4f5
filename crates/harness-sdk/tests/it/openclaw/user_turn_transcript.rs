//! `src/sessions/user-turn-transcript.test.ts`, the cases about merging prepared user-turn
//! metadata into the runtime message (Tether's `restore_prepared_user_turn_meta`). The media
//! input builder and the file-backed transcript writer of that file are OpenClaw host code
//! Tether does not reimplement.

use std::borrow::Cow;

use serde_json::json;
use tether_harness_sdk::results::mirror::restore_prepared_user_turn_meta;

#[test]
fn openclaw_user_turn_transcript_prepared_metadata_never_touches_assistant_messages() {
    let prepared =
        json!({"role": "user", "content": "display prompt", "__openclaw": {"senderIsOwner": true}});
    let assistant = json!({"role": "assistant", "content": "hello"});
    let out = restore_prepared_user_turn_meta(&assistant, Some(&prepared));
    assert!(matches!(out, Cow::Borrowed(_)));
    assert_eq!(out.into_owned(), assistant);
}

#[test]
fn openclaw_user_turn_transcript_runtime_multimodal_content_is_kept() {
    let content = json!([
        {"type": "text", "text": "canonical image caption"},
        {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}
    ]);
    let prepared = json!({"role": "user", "content": "canonical image caption", "timestamp": 123});
    let runtime = json!({"role": "user", "content": content});
    let out = restore_prepared_user_turn_meta(&runtime, Some(&prepared)).into_owned();
    assert_eq!(out["role"], json!("user"));
    assert_eq!(out["content"], content);
}

#[test]
fn openclaw_user_turn_transcript_adds_prepared_metadata_to_runtime_user_messages() {
    let prepared =
        json!({"role": "user", "content": "group prompt", "__openclaw": {"senderIsOwner": false}});
    let runtime = json!({
        "role": "user",
        "content": "runtime prompt",
        "provenance": {"sourceChannel": "telegram"}
    });
    let out = restore_prepared_user_turn_meta(&runtime, Some(&prepared)).into_owned();
    // Deliberate difference: OpenClaw also puts the prepared display text back as `content`;
    // Tether restores operational metadata only and never rewrites what the hooks wrote.
    assert_eq!(out["content"], json!("runtime prompt"));
    assert_eq!(out["__openclaw"]["senderIsOwner"], json!(false));
}
