//! The user-turn recorder's pending-persistence and lazy-media paths
//! (`UserTurnTranscriptRecorder::plan_fallback`).

use serde_json::{Value, json};
use tether_core::TranscriptAnchor;
use tether_harness_sdk::results::mirror::{
    FallbackPlan, Persistence, TranscriptReceipt, UserTurnTranscriptRecorder,
};

fn prepared() -> Value {
    json!({"role": "user", "content": "look at this", "idempotencyKey": "turn-1"})
}

/// The same turn after its attachment resolved: the text plus an image.
fn resolved() -> Value {
    json!({
        "role": "user",
        "content": [
            {"type": "text", "text": "look at this"},
            {"type": "image", "mimeType": "image/png", "data": "aGVsbG8="}
        ],
        "idempotencyKey": "turn-1"
    })
}

fn persisted(rec: &mut UserTurnTranscriptRecorder, message: &Value) {
    rec.mark_runtime_persisted(
        Some(message),
        Some(TranscriptReceipt::Anchor(TranscriptAnchor(3))),
        Some(Persistence { appended: true }),
    );
}

#[test]
fn recorder_a_pending_runtime_append_must_settle_before_the_fallback() {
    let mut rec = UserTurnTranscriptRecorder::new();
    rec.mark_runtime_persistence_pending();
    assert!(rec.has_runtime_persistence_pending());
    assert_eq!(rec.plan_fallback(&prepared()), FallbackPlan::WaitForRuntime);
    assert!(!rec.has_persisted(), "waiting appends nothing");
    persisted(&mut rec, &prepared());
    assert!(!rec.has_runtime_persistence_pending());
    assert_eq!(rec.plan_fallback(&prepared()), FallbackPlan::Nothing);
}

#[test]
fn recorder_a_failed_runtime_append_leaves_the_turn_to_the_fallback() {
    let mut rec = UserTurnTranscriptRecorder::new();
    rec.mark_runtime_persistence_pending();
    rec.mark_runtime_persistence_failed();
    assert!(!rec.has_runtime_persistence_pending());
    assert_eq!(
        rec.plan_fallback(&prepared()),
        FallbackPlan::Append(prepared())
    );
    assert!(rec.has_persisted());
    assert_eq!(
        rec.plan_fallback(&prepared()),
        FallbackPlan::Nothing,
        "appended once"
    );
}

#[test]
fn recorder_a_blocked_turn_is_never_appended_even_while_pending() {
    let mut rec = UserTurnTranscriptRecorder::new();
    rec.mark_runtime_persistence_pending();
    rec.mark_blocked();
    assert_eq!(rec.plan_fallback(&prepared()), FallbackPlan::Nothing);
}

#[test]
fn recorder_pending_is_not_armed_after_the_turn_persisted() {
    let mut rec = UserTurnTranscriptRecorder::new();
    persisted(&mut rec, &prepared());
    rec.mark_runtime_persistence_pending();
    assert!(!rec.has_runtime_persistence_pending());
}

#[test]
fn recorder_media_resolved_before_the_send_is_persisted_inline() {
    let mut rec = UserTurnTranscriptRecorder::new();
    assert!(rec.record_resolved_input(resolved()));
    rec.mark_sent_to_provider();
    assert!(rec.was_sent_to_provider());
    assert_eq!(
        rec.plan_fallback(&prepared()),
        FallbackPlan::Append(resolved())
    );
}

#[test]
fn recorder_late_media_after_a_runtime_append_is_a_separate_message() {
    let mut rec = UserTurnTranscriptRecorder::new();
    rec.mark_sent_to_provider();
    persisted(&mut rec, &prepared());
    rec.record_resolved_input(resolved());
    let plan = rec.plan_fallback(&prepared());
    let FallbackPlan::LateMedia {
        admitted,
        late_media,
    } = plan
    else {
        panic!("late media expected: {plan:?}");
    };
    assert_eq!(admitted, None, "the admitted bytes are already persisted");
    assert_eq!(
        late_media,
        json!({
            "role": "user",
            "content": [{"type": "image", "mimeType": "image/png", "data": "aGVsbG8="}],
            "idempotencyKey": "turn-1:late-media",
            "__openclaw": {"lateMedia": true}
        })
    );
    // The late-media message is never announced as the original input.
    let effects = rec.mark_runtime_persisted(
        Some(&late_media),
        Some(TranscriptReceipt::Anchor(TranscriptAnchor(4))),
        Some(Persistence { appended: true }),
    );
    assert!(effects.original_input_committed.is_none());
}

#[test]
fn recorder_late_media_for_a_never_persisted_turn_appends_the_admitted_bytes_first() {
    let mut rec = UserTurnTranscriptRecorder::new();
    rec.mark_sent_to_provider();
    rec.record_resolved_input(resolved());
    let FallbackPlan::LateMedia {
        admitted,
        late_media,
    } = rec.plan_fallback(&prepared())
    else {
        panic!("late media expected");
    };
    assert_eq!(
        admitted,
        Some(prepared()),
        "what the provider saw, unchanged"
    );
    assert_eq!(late_media["__openclaw"]["lateMedia"], true);
    assert!(rec.has_persisted());
    assert_eq!(rec.persisted_message(), Some(&prepared()));
}

#[test]
fn recorder_late_resolution_without_new_media_adds_nothing() {
    let mut rec = UserTurnTranscriptRecorder::new();
    rec.mark_sent_to_provider();
    persisted(&mut rec, &resolved());
    rec.record_resolved_input(resolved());
    assert_eq!(rec.plan_fallback(&resolved()), FallbackPlan::Nothing);
    // Text only, resolved late: no media, so the turn is appended as resolved.
    let mut rec = UserTurnTranscriptRecorder::new();
    rec.mark_sent_to_provider();
    rec.record_resolved_input(json!({"role": "user", "content": "look at this"}));
    assert_eq!(
        rec.plan_fallback(&prepared()),
        FallbackPlan::Append(json!({"role": "user", "content": "look at this"}))
    );
}

#[test]
fn recorder_only_the_first_resolution_counts() {
    let mut rec = UserTurnTranscriptRecorder::new();
    assert!(rec.record_resolved_input(resolved()));
    rec.mark_sent_to_provider();
    assert!(!rec.record_resolved_input(prepared()));
    assert_eq!(
        rec.plan_fallback(&prepared()),
        FallbackPlan::Append(resolved()),
        "resolved before the send, kept"
    );
}

#[test]
fn recorder_late_media_without_an_idempotency_key_gets_the_turn_key() {
    let mut rec = UserTurnTranscriptRecorder::new();
    rec.mark_sent_to_provider();
    let mut media = resolved();
    media.as_object_mut().unwrap().remove("idempotencyKey");
    rec.record_resolved_input(media);
    let FallbackPlan::LateMedia { late_media, .. } =
        rec.plan_fallback(&json!({"role": "user", "content": "look at this"}))
    else {
        panic!("late media expected");
    };
    assert_eq!(
        late_media["idempotencyKey"],
        format!("late-media:{}", rec.logical_turn_id())
    );
}
