//! projection of a full attempt result.

use tether_core::{AttemptTerminal, ReplayMetadata, ToolMeta, Usage};
use tether_finalizer::{
    FinalizerError, FullAttemptEvidence, ItemLifecycle, TerminalStatus, TimeoutKind,
    project_settled_turn_finalization_attempt_result,
};

use crate::support::assistant;

fn ok_evidence(text: &str) -> FullAttemptEvidence {
    let mut e = FullAttemptEvidence::default();
    e.attempt.completed_assistant = Some(assistant(text, "stop"));
    e
}

#[test]
fn finalization_s008_capability_free_attempt_projects_to_exact_fields() {
    let mut e = ok_evidence("final");
    e.last_assistant_text_message_index = Some(2);
    let result = project_settled_turn_finalization_attempt_result(&e).unwrap();
    let value = result.to_value();
    let keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["assistant", "assistant_message_index"]);
    assert_eq!(value["assistant_message_index"], 2);
    assert_eq!(result.visible_text(), "final");

    // Owned transcript: ownership and key, never the index; usage and trace carried.
    e.assistant_transcript_owned = true;
    e.assistant_transcript_idempotency_key = Some("k:assistant".into());
    e.attempt.usage = Some(Usage {
        input_tokens: 1,
        output_tokens: 2,
    });
    let owned = project_settled_turn_finalization_attempt_result(&e).unwrap();
    assert_eq!(owned.assistant_transcript_owned, Some(true));
    assert_eq!(
        owned.assistant_transcript_idempotency_key.as_deref(),
        Some("k:assistant")
    );
    assert_eq!(owned.assistant_message_index, None);
    assert_eq!(
        owned.usage,
        Some(Usage {
            input_tokens: 1,
            output_tokens: 2
        })
    );
}

#[test]
fn finalization_s009_failed_terminal_with_text_did_not_complete() {
    let mut e = ok_evidence("visible");
    e.attempt.terminal = AttemptTerminal::Failed {
        message: "boom".into(),
    };
    let err = project_settled_turn_finalization_attempt_result(&e).unwrap_err();
    assert!(matches!(err, FinalizerError::AttemptUnsuccessful));
    assert!(err.to_string().contains("did not complete successfully"));
    for mutate in [
        (|e: &mut FullAttemptEvidence| e.prompt_timeout_outcome = true)
            as fn(&mut FullAttemptEvidence),
        |e| e.preflight_recovery = true,
        |e| e.before_agent_finalize_revision_reason = Some("revise".into()),
        |e| e.native_runtime_failure = true,
        |e| e.provider_format_error = true,
    ] {
        let mut e = ok_evidence("visible");
        mutate(&mut e);
        assert!(matches!(
            project_settled_turn_finalization_attempt_result(&e),
            Err(FinalizerError::AttemptUnsuccessful)
        ));
    }
}

#[test]
fn finalization_s010_capability_free_blank_answer_is_empty() {
    let e = ok_evidence("  ");
    assert!(
        project_settled_turn_finalization_attempt_result(&e)
            .unwrap_err()
            .is_empty()
    );
}

#[test]
fn finalization_s011_compaction_did_not_complete() {
    let mut e = ok_evidence("x");
    e.compaction_count = 1;
    assert!(matches!(
        project_settled_turn_finalization_attempt_result(&e),
        Err(FinalizerError::AttemptUnsuccessful)
    ));
}

#[test]
fn finalization_s012_tool_metas_and_lifecycle_are_capability_activity() {
    let mut e = ok_evidence("x");
    e.attempt.tool_metas = vec![ToolMeta {
        tool_name: "write".into(),
        meta: None,
        is_error: false,
    }];
    e.item_lifecycle = ItemLifecycle::new(1, 1, 0);
    let err = project_settled_turn_finalization_attempt_result(&e).unwrap_err();
    assert!(err.to_string().contains("reported capability activity"));
    // Every other activity field is rejected on its own too.
    let mutations: Vec<fn(&mut FullAttemptEvidence)> = vec![
        |e| e.item_lifecycle = ItemLifecycle::new(0, 0, 1),
        |e| e.client_tool_calls = vec!["c".into()],
        |e| {
            e.attempt.accepted_session_spawns = vec![tether_core::AcceptedSessionSpawn {
                run_id: "r".into(),
                child_session_key: "k".into(),
                session_url: None,
                public_read: false,
                label: None,
                expects_completion_message: false,
                collected: false,
            }]
        },
        |e| e.attempt.delivery.did_send_via_messaging_tool = true,
        |e| e.attempt.delivery.did_deliver_source_reply_via_message_tool = true,
        |e| e.did_send_deterministic_approval_prompt = true,
        |e| e.attempt.delivery.messaging_tool_sent_texts = vec!["t".into()],
        |e| e.attempt.delivery.messaging_tool_sent_media_urls = vec!["m".into()],
        |e| e.attempt.delivery.messaging_tool_sent_targets = vec![serde_json::json!({})],
        |e| e.attempt.delivery.messaging_tool_source_reply_payloads = vec![serde_json::json!({})],
        |e| e.heartbeat_tool_response = true,
        |e| e.attempt.tool_media_urls = vec!["u".into()],
        |e| e.attempt.host_owned_tool_media_urls = vec!["u".into()],
        |e| e.tool_audio_as_voice = true,
        |e| e.tool_trusted_local_media = true,
        |e| e.has_tool_media_block_reply = true,
        |e| e.attempt.last_tool_error = Some(tether_core::ToolErrorSummary::default()),
        |e| e.successful_cron_adds = 1,
        |e| e.attempt.yield_detected = true,
    ];
    for mutate in mutations {
        let mut e = ok_evidence("x");
        mutate(&mut e);
        assert!(matches!(
            project_settled_turn_finalization_attempt_result(&e),
            Err(FinalizerError::CapabilityActivity { .. })
        ));
    }
}

#[test]
fn finalization_s013_unsafe_replay_metadata_is_capability_activity() {
    let unsafe_replay = ReplayMetadata {
        had_potential_side_effects: false,
        replay_safe: false,
    };
    let mut cumulative = ok_evidence("x");
    cumulative.attempt.replay = unsafe_replay;
    let mut current = ok_evidence("x");
    current.current_attempt_replay = Some(unsafe_replay);
    let mut side_effects = ok_evidence("x");
    side_effects.current_attempt_replay = Some(ReplayMetadata {
        had_potential_side_effects: true,
        replay_safe: true,
    });
    for e in [cumulative, current, side_effects] {
        assert!(matches!(
            project_settled_turn_finalization_attempt_result(&e),
            Err(FinalizerError::CapabilityActivity { .. })
        ));
    }
}

#[test]
fn finalization_s014_stale_or_partial_assistant_is_not_accepted() {
    let e = FullAttemptEvidence {
        last_assistant: Some(assistant("stale", "stop")),
        current_attempt_assistant: Some(assistant("partial", "stop")),
        ..FullAttemptEvidence::default()
    };
    let err = project_settled_turn_finalization_attempt_result(&e).unwrap_err();
    assert!(matches!(err, FinalizerError::NoCompletedAssistant));
    assert!(err.to_string().contains("no completed assistant message"));
}

#[test]
fn finalization_s015_finalizer_owned_timeout_is_a_canonical_terminal_outcome() {
    let mut e = ok_evidence("x");
    e.attempt.terminal = AttemptTerminal::TimedOut;
    e.timeout_kind = Some(TimeoutKind::RunBudget);
    match project_settled_turn_finalization_attempt_result(&e).unwrap_err() {
        FinalizerError::TerminalOutcome { status, reason, .. } => {
            assert_eq!(status, TerminalStatus::Timeout);
            assert_eq!(reason, "hard_timeout");
        }
        other => panic!("{other:?}"),
    }
    e.timeout_kind = Some(TimeoutKind::IdlePrompt);
    let err = project_settled_turn_finalization_attempt_result(&e).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Settled-turn finalization model stream timed out waiting for output"
    );
    e.attempt.terminal = AttemptTerminal::Aborted;
    assert!(matches!(
        project_settled_turn_finalization_attempt_result(&e),
        Err(FinalizerError::TerminalOutcome {
            status: TerminalStatus::Cancelled,
            ..
        })
    ));
}
