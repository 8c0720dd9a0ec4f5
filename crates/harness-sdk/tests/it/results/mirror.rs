//! Part A: user-turn mirroring and the persisted marker (vectors 1–25).

use std::borrow::Cow;

use serde_json::{Value, json};
use tether_core::{AppendOutcome, TranscriptAnchor};
use tether_harness_sdk::results::mirror::{
    Persistence, TranscriptReceipt, UserTurnTranscriptRecorder, restore_prepared_user_turn_meta,
};

fn restore(runtime: &Value, prepared: &Value) -> Value {
    restore_prepared_user_turn_meta(runtime, Some(prepared)).into_owned()
}

fn appended(flag: bool) -> Option<Persistence> {
    Some(Persistence { appended: flag })
}

fn anchor(n: i64) -> Option<TranscriptReceipt> {
    Some(TranscriptReceipt::Anchor(TranscriptAnchor(n)))
}

#[test]
fn tool_results_001_no_prepared_returns_same_reference() {
    let runtime = json!({"role": "user", "content": "x"});
    let out = restore_prepared_user_turn_meta(&runtime, None);
    assert!(matches!(out, Cow::Borrowed(r) if std::ptr::eq(r, &runtime)));
}

#[test]
fn tool_results_002_non_user_passthrough() {
    let runtime = json!({"role": "assistant", "content": [{"type": "text", "text": "a"}],
        "__openclaw": {"steerTargetRunId": "f"}});
    let prepared = json!({"role": "user", "content": "p", "__openclaw": {"intent": {"x": 1}}});
    let out = restore_prepared_user_turn_meta(&runtime, Some(&prepared));
    assert!(matches!(out, Cow::Borrowed(r) if std::ptr::eq(r, &runtime)));
    assert_eq!(out.into_owned()["__openclaw"]["steerTargetRunId"], "f");
}

fn old_bytes() -> Value {
    json!({"role": "user", "content": "Keep the original CSV task.", "timestamp": 1_700_000_000_000_i64,
        "idempotencyKey": "old-run:user",
        "__openclaw": {"senderId": "historical-human", "senderName": "Historical human", "senderIsOwner": true}})
}

#[test]
fn tool_results_003_old_bytes_replay_restores_prepared_exactly() {
    let prepared = old_bytes();
    let mut runtime = prepared.clone();
    runtime["__openclaw"]["autoSteer"] = json!({"choice": "steer", "reason": "decision"});
    runtime["__openclaw"]["steerTargetRunId"] = json!("forged-new-run");
    assert_eq!(restore(&runtime, &prepared), prepared);
}

#[test]
fn tool_results_004_historical_steer_target_replaces_forged_one() {
    let mut prepared = old_bytes();
    prepared["__openclaw"]["steerTargetRunId"] = json!("historical-active-run");
    let mut runtime = prepared.clone();
    runtime["__openclaw"]["steerTargetRunId"] = json!("forged-new-run");
    runtime["__openclaw"]["autoSteer"] = json!({"choice": "steer", "reason": "decision"});
    assert_eq!(restore(&runtime, &prepared), prepared);
}

#[test]
fn tool_results_005_prepared_auto_steer_restored() {
    let prepared = json!({"role": "user", "content": "c", "__openclaw": {"autoSteer": {"reason": "abstained"}}});
    let runtime = json!({"role": "user", "content": "c",
        "__openclaw": {"autoSteer": {"choice": "steer", "reason": "decision"}, "steerTargetRunId": "forged"}});
    assert_eq!(
        restore(&runtime, &prepared)["__openclaw"],
        json!({"autoSteer": {"reason": "abstained"}})
    );
}

fn mentions_prepared() -> Value {
    json!({"role": "user", "content": "hi @ada",
        "__openclaw": {"humanMentions": [{"profileId": "ada", "start": 3, "end": 7}]}})
}

#[test]
fn tool_results_006_mentions_kept_when_content_equal() {
    let runtime = json!({"role": "user", "content": "hi @ada"});
    let out = restore(&runtime, &mentions_prepared());
    assert_eq!(
        out["__openclaw"]["humanMentions"],
        mentions_prepared()["__openclaw"]["humanMentions"]
    );
}

#[test]
fn tool_results_007_mentions_dropped_when_text_rewritten() {
    let runtime = json!({"role": "user", "content": "hi @ada!"});
    let out = restore(&runtime, &mentions_prepared());
    assert!(out.get("__openclaw").is_none(), "{out}");
    assert_eq!(out["content"], "hi @ada!");
}

#[test]
fn tool_results_008_forged_runtime_mentions_dropped() {
    let runtime = json!({"role": "user", "content": "hi",
        "__openclaw": {"humanMentions": [{"profileId": "eve", "start": 0, "end": 2}]}});
    let prepared = json!({"role": "user", "content": "hi"});
    let out = restore(&runtime, &prepared);
    assert!(out.get("__openclaw").is_none(), "{out}");
}

#[test]
fn tool_results_009_array_content_vs_string_drops_mentions() {
    let prepared = json!({"role": "user", "content": [{"type": "text", "text": "hi"}],
        "__openclaw": {"humanMentions": [{"profileId": "ada", "start": 0, "end": 2}]}});
    let runtime = json!({"role": "user", "content": "hi"});
    assert!(restore(&runtime, &prepared).get("__openclaw").is_none());
}

#[test]
fn tool_results_010_prepared_sender_is_owner_wins() {
    let prepared = json!({"role": "user", "content": "c", "__openclaw": {"senderIsOwner": false}});
    let runtime = json!({"role": "user", "content": "c", "__openclaw": {"senderIsOwner": true}});
    assert_eq!(
        restore(&runtime, &prepared)["__openclaw"]["senderIsOwner"],
        false
    );
}

/// Design decision: OpenClaw keeps a hook-written `senderIsOwner` when the prepared snapshot has
/// none; Tether closes that gap and drops it (a hook cannot grant owner status).
#[test]
fn tool_results_011_sender_is_owner_without_prepared_value_is_dropped() {
    let prepared = json!({"role": "user", "content": "c", "__openclaw": {"senderId": "h"}});
    let runtime = json!({"role": "user", "content": "c", "__openclaw": {"senderId": "h", "senderIsOwner": true}});
    let out = restore(&runtime, &prepared);
    assert!(out["__openclaw"].get("senderIsOwner").is_none(), "{out}");
    assert_eq!(out["__openclaw"]["senderId"], "h");
}

#[test]
fn tool_results_012_overlong_steer_target_dropped() {
    let long = "r".repeat(513);
    let prepared =
        json!({"role": "user", "content": "c", "__openclaw": {"steerTargetRunId": long}});
    let runtime =
        json!({"role": "user", "content": "c", "__openclaw": {"steerTargetRunId": "forged"}});
    assert!(restore(&runtime, &prepared).get("__openclaw").is_none());
    let ok = "r".repeat(512);
    let prepared = json!({"role": "user", "content": "c", "__openclaw": {"steerTargetRunId": format!(" {ok} ")}});
    assert_eq!(
        restore(&runtime, &prepared)["__openclaw"]["steerTargetRunId"],
        ok
    );
}

#[test]
fn tool_results_013_prepared_display_false_forced() {
    let prepared = json!({"role": "user", "content": "c", "display": false});
    let runtime = json!({"role": "user", "content": "c", "display": true});
    assert_eq!(restore(&runtime, &prepared)["display"], false);
    let prepared_true = json!({"role": "user", "content": "c", "display": true});
    let runtime_false = json!({"role": "user", "content": "c", "display": false});
    assert_eq!(restore(&runtime_false, &prepared_true)["display"], false);
}

#[test]
fn tool_results_014_prepared_provenance_wins() {
    let prepared = json!({"role": "user", "content": "c",
        "provenance": {"kind": "external_user", "sourceChannel": "telegram"}});
    let runtime = json!({"role": "user", "content": "c", "provenance": {"kind": "inter_session"}});
    assert_eq!(
        restore(&runtime, &prepared)["provenance"],
        prepared["provenance"]
    );
}

#[test]
fn tool_results_015_forged_intent_dropped() {
    let prepared = json!({"role": "user", "content": "c"});
    let runtime = json!({"role": "user", "content": "c", "__openclaw": {"intent": {"x": 1}}});
    assert!(restore(&runtime, &prepared).get("__openclaw").is_none());
    let prepared_intent =
        json!({"role": "user", "content": "c", "__openclaw": {"intent": {"y": 2}}});
    assert_eq!(
        restore(&runtime, &prepared_intent)["__openclaw"]["intent"],
        json!({"y": 2})
    );
}

#[test]
fn tool_results_016_inputs_not_mutated() {
    let mut prepared = mentions_prepared();
    prepared["display"] = json!(false);
    let runtime = json!({"role": "user", "content": "hi @ada",
        "__openclaw": {"intent": {"x": 1}, "steerTargetRunId": "f", "humanMentions": []}});
    let (p0, r0) = (prepared.to_string(), runtime.to_string());
    let _ = restore(&runtime, &prepared);
    assert_eq!(prepared.to_string(), p0);
    assert_eq!(runtime.to_string(), r0);
}

fn user_msg() -> Value {
    json!({"role": "user", "content": "hello"})
}

#[test]
fn tool_results_017_appended_true_notifies_once_with_admission() {
    let mut rec = UserTurnTranscriptRecorder::new();
    let fx = rec.mark_runtime_persisted(Some(&user_msg()), anchor(7), appended(true));
    let commit = fx.original_input_committed.expect("commit notification");
    assert_eq!(commit.message, user_msg());
    assert_eq!(commit.anchor, TranscriptAnchor(7));
    assert!(rec.has_persisted());
    let receipt = rec.admission_receipt().expect("admission");
    assert_eq!(receipt.anchor, TranscriptAnchor(7));
    assert_eq!(receipt.logical_turn_id, rec.logical_turn_id());
    assert_eq!(receipt.role, "user");
    assert_eq!(fx.message_persisted, Some(user_msg()));
}

/// Collected input: the anchor is forwarded only to sources with mentions whose content equals
/// the committed content.
#[test]
fn tool_results_017b_collected_sources_forwarding() {
    let mut rec = UserTurnTranscriptRecorder::new();
    let same = rec.add_collected_source(json!("hello"), true);
    let _rewritten = rec.add_collected_source(json!("hello!"), true);
    let _no_mentions = rec.add_collected_source(json!("hello"), false);
    let fx = rec.mark_runtime_persisted(Some(&user_msg()), anchor(4), appended(true));
    assert_eq!(fx.forwarded_to_sources, vec![same]);
    let mut idle = UserTurnTranscriptRecorder::new();
    idle.add_collected_source(json!("hello"), true);
    let fx = idle.mark_runtime_persisted(Some(&user_msg()), anchor(4), appended(false));
    assert!(
        fx.forwarded_to_sources.is_empty(),
        "no commit, no forwarding"
    );
}

#[test]
fn tool_results_018_appended_false_never_notifies() {
    let mut rec = UserTurnTranscriptRecorder::new();
    let fx = rec.mark_runtime_persisted(Some(&user_msg()), anchor(7), appended(false));
    assert!(fx.original_input_committed.is_none());
    assert!(rec.admission_receipt().is_some());
    assert_eq!(fx.message_persisted, Some(user_msg()));
    let again = rec.mark_runtime_persisted(Some(&user_msg()), anchor(7), appended(false));
    assert!(again.message_persisted.is_none(), "persisted fires once");
    // Same through the store's AppendOutcome.
    let mut rec = UserTurnTranscriptRecorder::new();
    let fx = rec.mark_runtime_persisted_from_append(
        &user_msg(),
        &AppendOutcome {
            appended: false,
            anchor: TranscriptAnchor(3),
        },
    );
    assert!(fx.original_input_committed.is_none());
}

#[test]
fn tool_results_019_missing_persistence_is_not_appended() {
    let mut rec = UserTurnTranscriptRecorder::new();
    let fx = rec.mark_runtime_persisted(Some(&user_msg()), anchor(7), None);
    assert!(fx.original_input_committed.is_none());
    assert!(rec.admission_receipt().is_some());
    assert!(fx.message_persisted.is_some());
}

#[test]
fn tool_results_020_commit_notifies_at_most_once_first_admission_kept() {
    let mut rec = UserTurnTranscriptRecorder::new();
    let first = rec.mark_runtime_persisted(Some(&user_msg()), anchor(1), appended(true));
    let second = rec.mark_runtime_persisted_from_append(
        &user_msg(),
        &AppendOutcome {
            appended: true,
            anchor: TranscriptAnchor(2),
        },
    );
    assert!(first.original_input_committed.is_some());
    assert!(second.original_input_committed.is_none());
    assert_eq!(
        rec.admission_receipt().map(|r| r.anchor),
        Some(TranscriptAnchor(1))
    );
}

#[test]
fn tool_results_021_blocked_never_notifies() {
    let mut rec = UserTurnTranscriptRecorder::new();
    rec.mark_blocked();
    let fx = rec.mark_runtime_persisted(Some(&user_msg()), anchor(1), appended(true));
    assert!(fx.original_input_committed.is_none());
    assert!(rec.persist_fallback(&user_msg(), true).is_none());
}

#[test]
fn tool_results_022_hidden_or_non_external_never_notifies() {
    for msg in [
        json!({"role": "user", "content": "x", "display": false}),
        json!({"role": "user", "content": "x", "provenance": {"kind": "inter_session"}}),
        json!({"role": "user", "content": "x", "excludeFromContext": true}),
        json!({"role": "user", "content": "x", "__openclaw": {"beforeAgentRunBlocked": {"reason": "r"}}}),
    ] {
        let mut rec = UserTurnTranscriptRecorder::new();
        let fx = rec.mark_runtime_persisted(Some(&msg), anchor(1), appended(true));
        assert!(fx.original_input_committed.is_none(), "{msg}");
    }
    let external = json!({"role": "user", "content": "x", "provenance": {"kind": "external_user"}});
    let mut rec = UserTurnTranscriptRecorder::new();
    let fx = rec.mark_runtime_persisted(Some(&external), anchor(1), appended(true));
    assert!(fx.original_input_committed.is_some());
}

#[test]
fn tool_results_023_late_media_never_notifies_and_keeps_admission() {
    let mut rec = UserTurnTranscriptRecorder::new();
    rec.mark_runtime_persisted(Some(&user_msg()), anchor(1), appended(false));
    let late = json!({"role": "user", "content": "hello", "__openclaw": {"lateMedia": true}});
    let fx = rec.mark_runtime_persisted(Some(&late), anchor(2), appended(true));
    assert!(fx.original_input_committed.is_none());
    assert!(
        fx.message_persisted.is_none(),
        "persisted callback fired once only"
    );
    assert_eq!(
        rec.admission_receipt().map(|r| r.anchor),
        Some(TranscriptAnchor(1))
    );
    assert_eq!(rec.persisted_message(), Some(&user_msg()));
}

#[test]
fn tool_results_024_no_anchor_no_admission_no_commit() {
    let mut rec = UserTurnTranscriptRecorder::new();
    let fx = rec.mark_runtime_persisted(Some(&user_msg()), None, appended(true));
    assert!(fx.original_input_committed.is_none());
    assert!(rec.admission_receipt().is_none());
    assert_eq!(fx.message_persisted, Some(user_msg()));
}

#[test]
fn tool_results_025_fallback_after_runtime_persist_appends_only_late_media() {
    let mut rec = UserTurnTranscriptRecorder::new();
    rec.mark_runtime_persisted(Some(&user_msg()), anchor(1), appended(true));
    assert!(rec.persist_fallback(&user_msg(), false).is_none());
    let late = rec
        .persist_fallback(&user_msg(), true)
        .expect("late media row");
    assert_eq!(late["__openclaw"]["lateMedia"], true);
    let mut fresh = UserTurnTranscriptRecorder::new();
    assert_eq!(fresh.persist_fallback(&user_msg(), false), Some(user_msg()));
    assert!(fresh.has_persisted());
    assert!(fresh.persist_fallback(&user_msg(), false).is_none());
}
