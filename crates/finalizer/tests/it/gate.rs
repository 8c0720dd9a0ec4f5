//! the request gate and the settled-batch evidence.

use tether_core::{
    AcceptedSessionSpawn, AttemptResult, AttemptTerminal, ReplayMetadata,
    SettledTurnFinalizationContext, ToolErrorSummary,
};
use tether_finalizer::{
    ItemLifecycle, MessageToolSend, PayloadKind, ReplyExpectation, ReplyPayload,
    SETTLED_TOOL_FINALIZATION_INSTRUCTION, TOOL_FAILURE_INSTRUCTION, TimeoutKind, ToolCallMeta,
    TurnFacts, resolve_settled_tool_batch_evidence, resolve_settled_turn_finalization_request,
};

use crate::support::{assistant, tool_calls, tool_result, user};

fn meta(id: &str, name: &str) -> ToolCallMeta {
    ToolCallMeta {
        call_id: Some(id.into()),
        tool_name: name.into(),
        ..ToolCallMeta::default()
    }
}

/// A settled write batch (1/1/0) after the user's message.
pub(crate) fn settled_write() -> (AttemptResult, TurnFacts) {
    let batch = tool_calls(None, &[("c1", "write")]);
    let settled = AttemptResult {
        messages_snapshot: vec![
            user("save a note"),
            batch.clone(),
            tool_result("c1", "write", "saved", false),
        ],
        ..AttemptResult::default()
    };
    let facts = TurnFacts {
        item_lifecycle: ItemLifecycle::new(1, 1, 0),
        tool_call_metas: vec![meta("c1", "write")],
        current_attempt_assistant: Some(batch),
        ..TurnFacts::default()
    };
    (settled, facts)
}

fn gate(settled: &AttemptResult, facts: &TurnFacts) -> Option<String> {
    resolve_settled_turn_finalization_request(settled, facts, true).map(|r| r.prompt)
}

#[test]
fn finalization_s026_idle_timeout_after_side_effects_finalizes() {
    let (mut settled, mut facts) = settled_write();
    settled.terminal = AttemptTerminal::TimedOut;
    settled.replay = ReplayMetadata {
        had_potential_side_effects: true,
        replay_safe: false,
    };
    facts.timeout_kind = Some(TimeoutKind::IdlePrompt);
    assert_eq!(
        gate(&settled, &facts).as_deref(),
        Some(SETTLED_TOOL_FINALIZATION_INSTRUCTION)
    );
}

#[test]
fn finalization_s027_intentional_termination_is_not_finalized() {
    let (settled, mut facts) = settled_write();
    facts.tool_call_metas[0].terminate = true;
    assert!(gate(&settled, &facts).is_none());
    assert!(
        resolve_settled_tool_batch_evidence(&settled, &facts)
            .unwrap()
            .intentional_termination
    );
}

#[test]
fn finalization_s028_terminate_on_a_stale_call_id_does_not_count() {
    let (settled, mut facts) = settled_write();
    facts.tool_call_metas.insert(
        0,
        ToolCallMeta {
            terminate: true,
            ..meta("old", "write")
        },
    );
    assert!(gate(&settled, &facts).is_some());
}

#[test]
fn finalization_s029_the_last_meta_of_a_reused_call_id_decides() {
    let (settled, mut facts) = settled_write();
    facts.tool_call_metas = vec![
        ToolCallMeta {
            terminate: true,
            ..meta("c1", "write")
        },
        meta("c1", "write"),
    ];
    assert!(gate(&settled, &facts).is_some(), "current nonterminal");
    facts.tool_call_metas = vec![
        meta("c1", "write"),
        ToolCallMeta {
            terminate: true,
            ..meta("c1", "write")
        },
    ];
    assert!(gate(&settled, &facts).is_none(), "current terminal");
}

#[test]
fn finalization_s030_mixed_terminal_and_nonterminal_batch_finalizes() {
    let batch = tool_calls(None, &[("c1", "write"), ("c2", "read")]);
    let settled = AttemptResult {
        messages_snapshot: vec![
            user("go"),
            batch.clone(),
            tool_result("c1", "write", "ok", false),
            tool_result("c2", "read", "ok", false),
        ],
        ..AttemptResult::default()
    };
    let facts = TurnFacts {
        item_lifecycle: ItemLifecycle::new(2, 2, 0),
        tool_call_metas: vec![
            ToolCallMeta {
                terminate: true,
                ..meta("c1", "write")
            },
            meta("c2", "read"),
        ],
        current_attempt_assistant: Some(batch),
        ..TurnFacts::default()
    };
    assert!(gate(&settled, &facts).is_some());
}

#[test]
fn finalization_s031_failed_prompt_terminal_needs_a_context() {
    let (mut settled, facts) = settled_write();
    settled.terminal = AttemptTerminal::Failed {
        message: "socket hang up".into(),
    };
    assert!(gate(&settled, &facts).is_none(), "without a context");
    settled.settled_turn_finalization_context = Some(SettledTurnFinalizationContext::Transcript(
        settled.messages_snapshot.clone().into(),
    ));
    assert!(gate(&settled, &facts).is_some(), "with a context");
}

#[test]
fn finalization_s032_aborts_and_hard_timeouts_are_not_finalized() {
    let (settled, facts) = settled_write();
    let mut aborted = facts.clone();
    aborted.externally_aborted = true;
    assert!(gate(&settled, &aborted).is_none());
    let mut aborted_terminal = settled.clone();
    aborted_terminal.terminal = AttemptTerminal::Aborted;
    assert!(gate(&aborted_terminal, &facts).is_none());
    for kind in [
        TimeoutKind::Runtime,
        TimeoutKind::RunBudget,
        TimeoutKind::Compaction,
        TimeoutKind::ToolExecution,
    ] {
        let mut timed = settled.clone();
        timed.terminal = AttemptTerminal::TimedOut;
        timed.replay.had_potential_side_effects = true;
        let mut f = facts.clone();
        f.timeout_kind = Some(kind);
        assert!(gate(&timed, &f).is_none(), "{kind:?}");
        // A timeout observation alone (ok terminal) also blocks.
        let mut observed = facts.clone();
        observed.timeout_kind = Some(kind);
        assert!(gate(&settled, &observed).is_none(), "observation {kind:?}");
    }
}

#[test]
fn finalization_s033_a_batch_before_a_newer_user_message_is_a_prior_turn() {
    let (mut settled, mut facts) = settled_write();
    settled.messages_snapshot.push(user("new question"));
    facts.current_attempt_assistant = None;
    assert!(gate(&settled, &facts).is_none());
    assert!(resolve_settled_tool_batch_evidence(&settled, &facts).is_none());
}

type Mutation = Box<dyn Fn(&mut AttemptResult, &mut TurnFacts)>;

pub(crate) fn read_and_failed_exec() -> (AttemptResult, TurnFacts) {
    let batch = tool_calls(None, &[("r1", "read"), ("e1", "exec")]);
    let settled = AttemptResult {
        messages_snapshot: vec![
            user("run it"),
            batch.clone(),
            tool_result("r1", "read", "ok", false),
            tool_result("e1", "exec", "denied", true),
        ],
        ..AttemptResult::default()
    };
    let facts = TurnFacts {
        item_lifecycle: ItemLifecycle::new(2, 2, 0),
        tool_call_metas: vec![
            meta("r1", "read"),
            ToolCallMeta {
                is_error: true,
                ..meta("e1", "exec")
            },
        ],
        current_attempt_assistant: Some(batch),
        ..TurnFacts::default()
    };
    (settled, facts)
}

#[test]
fn finalization_s034_a_settled_failure_adds_the_failure_sentence() {
    let expected = format!("{SETTLED_TOOL_FINALIZATION_INSTRUCTION}\n{TOOL_FAILURE_INSTRUCTION}");
    let (mut settled, mut facts) = read_and_failed_exec();
    assert_eq!(
        gate(&settled, &facts).as_deref(),
        Some(expected.as_str()),
        "no lastToolError"
    );
    settled.last_tool_error = Some(ToolErrorSummary {
        tool_name: "exec".into(),
        ..ToolErrorSummary::default()
    });
    assert_eq!(
        gate(&settled, &facts).as_deref(),
        Some(expected.as_str()),
        "matching lastToolError"
    );
    facts.tool_call_metas[1].terminate = true;
    assert_eq!(
        gate(&settled, &facts).as_deref(),
        Some(expected.as_str()),
        "failed exec marked terminate"
    );
    assert!(expected.ends_with("If a tool failed, say so; never claim completion or success."));
}

#[test]
fn finalization_s035_only_progress_sends_leave_the_source_reply_missing() {
    // Empty stop after settled tools, required reply.
    let (mut settled, mut facts) = settled_write();
    let mut batch = tool_calls(None, &[("c1", "write")]);
    batch.stop_reason = Some("stop".into());
    settled.messages_snapshot[1] = batch;
    settled.completed_assistant = Some(assistant("", "stop"));
    facts.current_attempt_assistant = None;
    let with = |final_flag: Option<bool>| {
        let mut f = facts.clone();
        f.message_tool_sends = vec![MessageToolSend {
            source_reply_final: final_flag,
        }];
        gate(&settled, &f)
    };
    assert!(with(Some(false)).is_some(), "progress");
    assert!(with(Some(true)).is_none(), "final");
    assert!(with(None).is_none(), "legacy unmarked");
}

#[test]
fn finalization_s036_a_tool_error_owned_by_another_name_is_unsettled() {
    let (mut settled, facts) = read_and_failed_exec();
    settled.last_tool_error = Some(ToolErrorSummary {
        tool_name: "write".into(),
        ..ToolErrorSummary::default()
    });
    assert!(gate(&settled, &facts).is_none());
    // A failed result whose tool name does not match its call is not a result of the batch.
    let (mut settled, facts) = read_and_failed_exec();
    settled.messages_snapshot[3] = tool_result("e1", "shell", "denied", true);
    settled.last_tool_error = Some(ToolErrorSummary {
        tool_name: "exec".into(),
        ..ToolErrorSummary::default()
    });
    assert!(gate(&settled, &facts).is_none());
}

#[test]
fn finalization_s037_two_same_name_calls_with_one_failure_stay_unsettled() {
    let batch = tool_calls(None, &[("e1", "exec"), ("e2", "exec")]);
    let settled = AttemptResult {
        messages_snapshot: vec![
            user("run both"),
            batch.clone(),
            tool_result("e1", "exec", "ok", false),
            tool_result("e2", "exec", "failed", true),
        ],
        last_tool_error: Some(ToolErrorSummary {
            tool_name: "exec".into(),
            ..ToolErrorSummary::default()
        }),
        ..AttemptResult::default()
    };
    let facts = TurnFacts {
        item_lifecycle: ItemLifecycle::new(2, 2, 0),
        tool_call_metas: vec![meta("e1", "exec"), meta("e2", "exec")],
        current_attempt_assistant: Some(batch),
        ..TurnFacts::default()
    };
    assert!(
        resolve_settled_tool_batch_evidence(&settled, &facts)
            .unwrap()
            .has_unsettled_tool_error
    );
    assert!(gate(&settled, &facts).is_none());
}

#[test]
fn finalization_s038_outstanding_work_blocks_finalization() {
    let (settled, facts) = read_and_failed_exec();
    let cases: Vec<Mutation> = vec![
        Box::new(|_, f| f.tool_call_metas[0].async_started = true),
        Box::new(|s, _| {
            s.accepted_session_spawns = vec![AcceptedSessionSpawn {
                run_id: "child".into(),
                child_session_key: "k".into(),
                session_url: None,
                public_read: false,
                label: None,
                expects_completion_message: true,
                collected: false,
            }]
        }),
        Box::new(|_, f| f.client_tool_calls = 1),
        Box::new(|s, _| s.yield_detected = true),
        Box::new(|_, f| f.did_send_deterministic_approval_prompt = true),
    ];
    assert!(gate(&settled, &facts).is_some(), "baseline finalizes");
    for case in cases {
        let (mut s, mut f) = (settled.clone(), facts.clone());
        case(&mut s, &mut f);
        assert!(gate(&s, &f).is_none());
    }
}

pub(crate) fn empty_stop() -> (AttemptResult, TurnFacts) {
    let (mut settled, mut facts) = settled_write();
    let mut batch = tool_calls(None, &[("c1", "write")]);
    batch.stop_reason = Some("stop".into());
    settled.messages_snapshot[1] = batch;
    settled.completed_assistant = Some(assistant("", "stop"));
    facts.current_attempt_assistant = None;
    (settled, facts)
}

#[test]
fn finalization_s039_empty_stop_needs_a_settled_synchronous_successful_batch() {
    let (settled, facts) = empty_stop();
    assert!(gate(&settled, &facts).is_some(), "baseline");
    let cases: Vec<fn(&mut TurnFacts)> = vec![
        |f| f.empty_stop_continuation_allowed = false,
        |f| f.item_lifecycle = ItemLifecycle::new(1, 0, 1),
        |f| f.item_lifecycle = ItemLifecycle::new(2, 1, 0),
        |f| f.tool_call_metas[0].async_started = true,
        |f| f.tool_call_metas[0].is_error = true,
    ];
    for case in cases {
        let mut f = facts.clone();
        case(&mut f);
        assert!(gate(&settled, &f).is_none());
    }
}

#[test]
fn finalization_s040_a_prior_turn_empty_stop_is_not_current() {
    let settled = AttemptResult {
        messages_snapshot: vec![user("hello")],
        ..AttemptResult::default()
    };
    let facts = TurnFacts {
        last_assistant: Some(assistant("", "stop")),
        ..TurnFacts::default()
    };
    assert!(gate(&settled, &facts).is_none());
}

#[test]
fn finalization_s041_heartbeat_no_reply_is_silence_but_a_direct_turn_finalizes() {
    let (mut settled, mut facts) = settled_write();
    settled.completed_assistant = Some(assistant("NO_REPLY", "stop"));
    facts.current_attempt_assistant = None;
    let mut heartbeat = facts.clone();
    heartbeat.trigger = tether_finalizer::RunTrigger::Heartbeat;
    heartbeat.reply_expectation = ReplyExpectation::Optional;
    heartbeat.allow_empty_assistant_reply_as_silent = true;
    assert!(gate(&settled, &heartbeat).is_none());
    assert!(gate(&settled, &facts).is_some(), "required direct turn");
}

#[test]
fn gate_synthetic_error_payloads_do_not_count_as_an_answer() {
    let (settled, mut facts) = settled_write();
    facts.payloads = vec![ReplyPayload::new(
        PayloadKind::ToolErrorWarning,
        "⚠️ write failed",
        true,
    )];
    assert!(gate(&settled, &facts).is_some());
    facts.payloads.push(ReplyPayload::new(
        PayloadKind::PreToolCommentary,
        "Saving…",
        false,
    ));
    assert!(gate(&settled, &facts).is_some());
    facts.payloads.push(ReplyPayload::new(
        PayloadKind::SilentCronToolResult,
        "",
        false,
    ));
    assert!(gate(&settled, &facts).is_none());
    // A provider-error payload on a failed terminal with a context does not count.
    let (mut failed, mut f) = settled_write();
    failed.terminal = AttemptTerminal::Failed {
        message: "overloaded".into(),
    };
    failed.settled_turn_finalization_context = Some(SettledTurnFinalizationContext::Unavailable);
    f.payloads = vec![ReplyPayload::new(
        PayloadKind::ProviderError,
        "⚠️ overloaded",
        true,
    )];
    assert!(gate(&failed, &f).is_some());
    f.payloads
        .push(ReplyPayload::new(PayloadKind::Answer, "real", false));
    assert!(gate(&failed, &f).is_none());
}

#[test]
fn gate_absent_finalizer_needs_a_context_and_truncation_is_never_bypassed() {
    let (mut settled, facts) = settled_write();
    assert!(resolve_settled_turn_finalization_request(&settled, &facts, false).is_none());
    settled.settled_turn_finalization_context = Some(SettledTurnFinalizationContext::Unavailable);
    assert!(resolve_settled_turn_finalization_request(&settled, &facts, false).is_some());
    let (mut truncated, facts) = settled_write();
    truncated.completed_assistant = Some(assistant("partial", "length"));
    let mut f = facts.clone();
    f.current_attempt_assistant = None;
    assert!(gate(&truncated, &f).is_none());
}
