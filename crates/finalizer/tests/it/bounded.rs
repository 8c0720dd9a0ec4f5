//! provenance-checked capture and the bounded projection, with
//! limits enforced while reading.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use tether_core::{AgentMessage, Cancellation, ContentBlock, Error, MessageRole, always_current};
use tether_finalizer::{
    CaptureRequest, HistoryReadError, HistorySource, ProjectedItem, ProjectionLimits,
    ProvenanceInput, RejectionReason, capture_settled_turn_context, project_current_evidence,
    project_settled_turn_history,
};
use tether_finalizer::{
    MAX_FIELD_BYTES, OMITTED_CONTEXT_NOTICE, TOOL_FAILED_WITHOUT_TEXT, rewrite_call_id,
};

use crate::support::{tool_calls, tool_result, user, with_id};

type Read = Result<AgentMessage, HistoryReadError>;

/// A source that counts how many times the message at `guard` (and beyond) is read, and fails
/// if it is.
pub(crate) struct GuardedSource {
    messages: Vec<AgentMessage>,
    index: usize,
    guard: usize,
    reads_past_guard: Rc<Cell<usize>>,
}

impl GuardedSource {
    pub(crate) fn new(messages: Vec<AgentMessage>, guard: usize) -> (Self, Rc<Cell<usize>>) {
        let reads = Rc::new(Cell::new(0));
        let source = Self {
            messages,
            index: 0,
            guard,
            reads_past_guard: reads.clone(),
        };
        (source, reads)
    }
}

impl HistorySource for GuardedSource {
    fn next_message(&mut self) -> Option<Read> {
        let i = self.index;
        self.index += 1;
        if i >= self.guard {
            self.reads_past_guard.set(self.reads_past_guard.get() + 1);
            return Some(Err(HistoryReadError::failed("read past the limit")));
        }
        self.messages.get(i).cloned().map(Ok)
    }
}

pub(crate) fn ok_source(messages: Vec<AgentMessage>) -> impl HistorySource {
    messages.into_iter().map(Ok::<_, HistoryReadError>)
}

pub(crate) fn call(id: &str, name: &str, arguments: Value) -> AgentMessage {
    let mut m = tool_calls(None, &[]);
    m.content = vec![ContentBlock::ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
    }];
    m
}

/// The settled messages of turn `t`: prompt, call, result "sent", with mirror identities.
pub(crate) fn settled_turn(t: &str) -> Vec<AgentMessage> {
    vec![
        with_id(user("please send it"), &format!("{t}:prompt")),
        with_id(call("c1", "send", json!({})), &format!("{t}:tool:c1:call")),
        with_id(
            tool_result("c1", "send", "sent", false),
            &format!("{t}:tool:c1:result"),
        ),
    ]
}

fn provenance<'a>(
    t: &'a str,
    settled: &'a [AgentMessage],
    mirrored: &'a [AgentMessage],
) -> ProvenanceInput<'a> {
    ProvenanceInput {
        turn_id: t,
        settled_messages: settled,
        mirrored_messages: mirrored,
        limits: ProjectionLimits::default(),
    }
}

fn request<'a>(
    input: ProvenanceInput<'a>,
    model: Option<&'a str>,
    cancel: &'a Cancellation,
) -> CaptureRequest<'a> {
    CaptureRequest {
        provenance: input,
        model,
        model_provider: Some("openai"),
        auth_profile_id: Some("profile-1"),
        cancellation: cancel,
        owner_alive: always_current(),
    }
}

#[test]
fn finalization_s068_cancel_or_owner_closure_during_the_read_rejects() {
    let settled = settled_turn("turn-2");
    // Cancelled while the read is pending.
    let cancel = Cancellation::new();
    let req = request(
        provenance("turn-2", &settled, &settled),
        Some("gpt"),
        &cancel,
    );
    let c2 = cancel.clone();
    let history = settled.clone();
    let result = capture_settled_turn_context(&req, || {
        Ok(history.into_iter().enumerate().map(move |(i, m)| {
            if i == 1 {
                c2.cancel();
            }
            Ok::<_, HistoryReadError>(m)
        }))
    });
    assert_eq!(result.unwrap_err(), RejectionReason::Cancelled);
    // Cancelled while the read rejects: cancellation still wins.
    let cancel = Cancellation::new();
    let req = request(
        provenance("turn-2", &settled, &settled),
        Some("gpt"),
        &cancel,
    );
    let c3 = cancel.clone();
    let result = capture_settled_turn_context(&req, || -> Result<std::vec::IntoIter<Read>, _> {
        c3.cancel();
        Err(HistoryReadError::failed("aborted"))
    });
    assert_eq!(result.unwrap_err(), RejectionReason::Cancelled);
    // The owner closed during the read.
    let closed = Arc::new(AtomicBool::new(false));
    let flag = closed.clone();
    let cancel = Cancellation::new();
    let mut req = request(
        provenance("turn-2", &settled, &settled),
        Some("gpt"),
        &cancel,
    );
    req.owner_alive = Arc::new(move || {
        if flag.load(Ordering::SeqCst) {
            Err(Error::revoked("owner closed"))
        } else {
            Ok(())
        }
    });
    let history = settled.clone();
    let result = capture_settled_turn_context(&req, || {
        closed.store(true, Ordering::SeqCst);
        Ok(ok_source(history))
    });
    assert_eq!(result.unwrap_err(), RejectionReason::HistoryReadFailed);
}

#[test]
fn finalization_s069_capture_projects_prior_and_current_and_excludes_later_turns() {
    let settled = settled_turn("turn-2");
    let mut history = vec![with_id(user("earlier question"), "turn-1:prompt")];
    history.extend(settled.clone());
    history.push(with_id(user("a later prompt"), "turn-3:prompt"));
    let cancel = Cancellation::new();
    let req = request(
        provenance("turn-2", &settled, &settled),
        Some("gpt-5"),
        &cancel,
    );
    let mut inputs = history.clone();
    let ctx = capture_settled_turn_context(&req, || Ok(ok_source(history))).unwrap();
    assert_eq!(
        ctx.projection().to_json(),
        json!([
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "earlier question"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "please send it"}]},
            {"type": "function_call", "call_id": "c1", "name": "send", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sent"},
        ])
    );
    assert_eq!(ctx.selection().model, "gpt-5");
    assert_eq!(
        ctx.selection().auth_profile_id.as_deref(),
        Some("profile-1")
    );
    // Type-level freeze (replaces the TS deep-freeze checks): the context owns its data, so a
    // later change of the inputs cannot reach it, and it exposes only shared references.
    let before = ctx.projection().to_json();
    inputs[1].content = vec![ContentBlock::Text {
        text: "mutated".into(),
    }];
    let clone = ctx.clone();
    assert_eq!(ctx.projection().to_json(), before);
    assert_eq!(clone, ctx);
}

#[test]
fn finalization_s070_missing_model_never_reads() {
    let settled = settled_turn("t");
    for model in [None, Some(""), Some("  ")] {
        let cancel = Cancellation::new();
        let req = request(provenance("t", &settled, &settled), model, &cancel);
        let opened = Cell::new(false);
        let result = capture_settled_turn_context(&req, || {
            opened.set(true);
            Ok(ok_source(settled.clone()))
        });
        assert_eq!(result.unwrap_err(), RejectionReason::ModelUnavailable);
        assert!(!opened.get(), "the reader is never called");
    }
}

#[test]
fn finalization_s071_persisted_prompt_without_identity_is_rejected() {
    let settled = settled_turn("t");
    let mut history = settled.clone();
    history[0].id = None; // same content, no identity
    let original = history.clone();
    let result = project_settled_turn_history(
        provenance("t", &settled, &settled),
        ok_source(history.clone()),
    );
    assert_eq!(result.unwrap_err(), RejectionReason::ProvenanceRejected);
    assert_eq!(history, original, "history unchanged");
}

#[test]
fn finalization_s072_missing_or_duplicate_identities_are_rejected() {
    let settled = settled_turn("t");
    let cases: Vec<(Vec<AgentMessage>, Vec<AgentMessage>, &str)> = vec![
        // Missing prompt in the history.
        (settled.clone(), settled[1..].to_vec(), "t"),
        // Missing call in the history.
        (
            settled.clone(),
            vec![settled[0].clone(), settled[2].clone()],
            "t",
        ),
        // Duplicate persisted identity.
        (
            settled.clone(),
            vec![
                settled[0].clone(),
                settled[0].clone(),
                settled[1].clone(),
                settled[2].clone(),
            ],
            "t",
        ),
        // Duplicate prompt after the boundary.
        (
            settled.clone(),
            [settled.clone(), vec![settled[0].clone()]].concat(),
            "t",
        ),
        // The settled evidence belongs to another turn.
        (settled.clone(), settled.clone(), "turn-3"),
    ];
    for (settled, history, turn) in cases {
        let result =
            project_settled_turn_history(provenance(turn, &settled, &settled), ok_source(history));
        assert_eq!(result.unwrap_err(), RejectionReason::ProvenanceRejected);
    }
    // A settled message without identity, or a settled list without the prompt.
    let mut no_id = settled.clone();
    no_id[1].id = None;
    assert_eq!(
        project_settled_turn_history(provenance("t", &no_id, &no_id), ok_source(settled.clone()))
            .unwrap_err(),
        RejectionReason::ProvenanceRejected
    );
}

#[test]
fn finalization_s073_result_drift_under_the_same_identity_is_rejected() {
    let settled = settled_turn("t");
    let mut history = settled.clone();
    history[2].content = vec![ContentBlock::Text {
        text: "not sent".into(),
    }];
    assert_eq!(
        project_settled_turn_history(provenance("t", &settled, &settled), ok_source(history))
            .unwrap_err(),
        RejectionReason::ProvenanceRejected
    );
    // The error flag is part of the fingerprint.
    let mut flipped = settled.clone();
    flipped[2].is_error = true;
    assert_eq!(
        project_settled_turn_history(provenance("t", &settled, &settled), ok_source(flipped))
            .unwrap_err(),
        RejectionReason::ProvenanceRejected
    );
}

#[test]
fn finalization_s074_reordered_mirror_is_rejected() {
    let settled = settled_turn("t");
    let mirrored = vec![settled[1].clone(), settled[0].clone(), settled[2].clone()];
    assert_eq!(
        project_settled_turn_history(
            provenance("t", &settled, &mirrored),
            ok_source(settled.clone())
        )
        .unwrap_err(),
        RejectionReason::ProvenanceRejected
    );
}

#[test]
fn finalization_s075_read_failures_reject_even_after_a_full_prefix() {
    let settled = settled_turn("t");
    let cancel = Cancellation::new();
    let req = request(provenance("t", &settled, &settled), Some("m"), &cancel);
    let rejected = capture_settled_turn_context(&req, || -> Result<std::vec::IntoIter<Read>, _> {
        Err(HistoryReadError::failed("disk on fire"))
    });
    assert_eq!(rejected.unwrap_err(), RejectionReason::HistoryReadFailed);
    let mut reads: Vec<Read> = settled.iter().cloned().map(Ok).collect();
    reads.push(Err(HistoryReadError::failed("truncated file")));
    let result = capture_settled_turn_context(&req, || Ok(reads.into_iter()));
    assert_eq!(result.unwrap_err(), RejectionReason::HistoryReadFailed);
    // Only an owning rejection site supplies a closed reason.
    let owned = capture_settled_turn_context(&req, || -> Result<std::vec::IntoIter<Read>, _> {
        Err(HistoryReadError {
            reason: Some(RejectionReason::SnapshotInvalidated),
            message: "fence moved".into(),
        })
    });
    assert_eq!(owned.unwrap_err(), RejectionReason::SnapshotInvalidated);
}

#[test]
fn finalization_s076_storage_only_details_are_never_copied() {
    let mut settled = settled_turn("t");
    settled[2]
        .meta
        .insert("details".into(), Value::String("x".repeat(1024 * 1024)));
    let projection = project_settled_turn_history(
        provenance("t", &settled, &settled),
        ok_source(settled.clone()),
    )
    .unwrap();
    let last = projection.items().last().unwrap();
    assert!(matches!(last, ProjectedItem::FunctionCallOutput { output, .. } if output == "sent"));
    assert!(serde_json::to_vec(&projection.to_json()).unwrap().len() < 1024);
}

#[test]
fn no_reader_is_kept_open_after_capture() {
    struct DropFlag(Arc<AtomicBool>, std::vec::IntoIter<AgentMessage>);
    impl HistorySource for DropFlag {
        fn next_message(&mut self) -> Option<Read> {
            self.1.next().map(Ok)
        }
    }
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let settled = settled_turn("t");
    let cancel = Cancellation::new();
    let req = request(provenance("t", &settled, &settled), Some("m"), &cancel);
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let ctx =
        capture_settled_turn_context(&req, || Ok(DropFlag(flag, settled.clone().into_iter())))
            .unwrap();
    assert!(
        dropped.load(Ordering::SeqCst),
        "the reader was dropped before the context is returned"
    );
    assert_eq!(ctx.projection().items().len(), 3);
}

fn current(
    messages: Vec<AgentMessage>,
) -> Result<tether_finalizer::BoundedProjection, RejectionReason> {
    project_current_evidence(ok_source(messages), ProjectionLimits::default())
}

#[test]
fn finalization_s077_thinking_is_dropped_and_arguments_serialized() {
    let mut call_msg = call("c1", "send", json!({"action": "send"}));
    call_msg.content.insert(
        0,
        ContentBlock::Thinking {
            text: "private".into(),
        },
    );
    let p = current(vec![
        user("go"),
        AgentMessage::text(MessageRole::Assistant, "on it"),
        call_msg,
        tool_result("c1", "send", "ok", false),
    ])
    .unwrap();
    assert_eq!(p.items().len(), 4);
    assert!(!p.to_json().to_string().contains("private"));
    assert!(
        matches!(&p.items()[2], ProjectedItem::FunctionCall { arguments, .. } if arguments == r#"{"action":"send"}"#)
    );
    // String arguments must parse to an object.
    let p = current(vec![
        user("go"),
        call("c1", "send", json!("{\"a\":1}")),
        tool_result("c1", "send", "ok", false),
    ])
    .unwrap();
    assert!(
        matches!(&p.items()[1], ProjectedItem::FunctionCall { arguments, .. } if arguments == "{\"a\":1}")
    );
    assert_eq!(
        current(vec![
            user("go"),
            call("c1", "send", json!("[1]")),
            tool_result("c1", "send", "ok", false)
        ])
        .unwrap_err(),
        RejectionReason::InvalidContent
    );
}

#[test]
fn finalization_s078_multi_block_tool_result_content_becomes_the_output() {
    // Core's content model has no separate "enriched toolResult" block type: producers flatten
    // enriched result content into text blocks, which are joined with newlines.
    let mut result = tool_result("c1", "send", "first", false);
    result.content.push(ContentBlock::Text {
        text: "second".into(),
    });
    let p = current(vec![user("go"), call("c1", "send", json!({})), result]).unwrap();
    assert!(
        matches!(p.items().last().unwrap(), ProjectedItem::FunctionCallOutput { output, .. } if output == "first\nsecond")
    );
}

#[test]
fn finalization_s079_long_call_ids_are_rewritten_deterministically() {
    let long_a = "a".repeat(83);
    let long_b = format!("{}b", "a".repeat(82));
    let p = current(vec![
        user("go"),
        call(&long_a, "send", json!({})),
        tool_result(&long_a, "send", "ok", false),
        call(&long_b, "send", json!({})),
        tool_result(&long_b, "send", "ok", false),
    ])
    .unwrap();
    let ids: Vec<&str> = p
        .items()
        .iter()
        .filter_map(|i| match i {
            ProjectedItem::FunctionCall { call_id, .. }
            | ProjectedItem::FunctionCallOutput { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(ids[0], ids[1], "call and result share the rewritten id");
    assert_eq!(ids[2], ids[3]);
    assert_ne!(ids[0], ids[2], "distinct over-length ids do not collide");
    assert!(
        ids.iter()
            .all(|id| id.starts_with("call_") && id.chars().count() <= 64)
    );
    assert_eq!(ids[0], rewrite_call_id(&long_a));
}

#[test]
fn finalization_s080_namespaced_tool_names_pass_and_invalid_names_fail() {
    let name = "codex_apps.slack.slack_send";
    assert!(
        current(vec![
            user("go"),
            call("c1", name, json!({})),
            tool_result("c1", name, "ok", false)
        ])
        .is_ok()
    );
    for bad in ["bad tool", "", &"x".repeat(129)] {
        assert_eq!(
            current(vec![
                user("go"),
                call("c1", bad, json!({})),
                tool_result("c1", bad, "ok", false)
            ])
            .unwrap_err(),
            RejectionReason::InvalidContent
        );
    }
}

#[test]
fn finalization_s081_failed_results_are_prefixed_and_the_prefix_is_not_charged() {
    let out = |result: AgentMessage| match current(vec![
        user("go"),
        call("c1", "send", json!({})),
        result,
    ])
    .unwrap()
    .items()
    .last()
    .unwrap()
    {
        ProjectedItem::FunctionCallOutput { output, .. } => output.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        out(tool_result("c1", "send", "Delivery failed.", true)),
        "[Tool result status: error]\nDelivery failed."
    );
    let mut empty = tool_result("c1", "send", "", true);
    empty.content.clear();
    assert_eq!(
        out(empty),
        format!("[Tool result status: error]\n{TOOL_FAILED_WITHOUT_TEXT}")
    );
    let exact = "e".repeat(MAX_FIELD_BYTES);
    assert!(out(tool_result("c1", "send", &exact, true)).ends_with(&exact));
    let mut ok_empty = tool_result("c1", "send", "", false);
    ok_empty.content.clear();
    assert_eq!(out(ok_empty), "Tool completed without textual output.");
}

#[test]
fn finalization_s082_whitespace_is_preserved_in_every_role() {
    let p = current(vec![
        user("  hi \n"),
        AgentMessage::text(MessageRole::Assistant, "\t thinking aloud  "),
        call("c1", "send", json!({})),
        tool_result("c1", "send", " out \n", false),
    ])
    .unwrap();
    let json = p.to_json();
    assert_eq!(json[0]["content"][0]["text"], "  hi \n");
    assert_eq!(json[1]["content"][0]["text"], "\t thinking aloud  ");
    assert_eq!(json[3]["output"], " out \n");
}

#[test]
fn finalization_s083_limits_stop_the_read_before_later_payloads() {
    // 205 user messages then a guarded message: item_limit at the 201st, the guard never read.
    let many: Vec<AgentMessage> = (0..205).map(|i| user(&format!("m{i}"))).collect();
    let (source, reads) = GuardedSource::new(many, 205);
    assert_eq!(
        project_current_evidence(source, ProjectionLimits::default()).unwrap_err(),
        RejectionReason::ItemLimit
    );
    assert_eq!(reads.get(), 0);
    // 9 messages of 60 KiB: byte_limit at the 9th, the guard never read.
    let big: Vec<AgentMessage> = (0..9).map(|_| user(&"x".repeat(60 * 1024))).collect();
    let (source, reads) = GuardedSource::new(big, 9);
    assert_eq!(
        project_current_evidence(source, ProjectionLimits::default()).unwrap_err(),
        RejectionReason::ByteLimit
    );
    assert_eq!(reads.get(), 0);
    // And the guard itself proves a full read would have failed differently.
    let (mut source, reads) = GuardedSource::new(vec![], 0);
    assert!(source.next_message().unwrap().is_err());
    assert_eq!(reads.get(), 1);
}

fn upstream_user(decorated: &str, upstream: &str) -> AgentMessage {
    let mut m = user(decorated);
    m.meta.insert("upstream_text".into(), Value::from(upstream));
    m
}

#[test]
fn finalization_s084_upstream_text_is_preferred_and_bounded_by_the_aggregate() {
    let tail = || {
        vec![
            call("c1", "send", json!({})),
            tool_result("c1", "send", "ok", false),
        ]
    };
    let p = current([vec![upstream_user("[decorated] hi", "hi")], tail()].concat()).unwrap();
    assert_eq!(p.to_json()[0]["content"][0]["text"], "hi");
    let long = "u".repeat(100 * 1024);
    assert!(current([vec![upstream_user("d", &long)], tail()].concat()).is_ok());
    let too_long = "u".repeat(512 * 1024 + 1);
    assert_eq!(
        current([vec![upstream_user("d", &too_long)], tail()].concat()).unwrap_err(),
        RejectionReason::FieldLimit
    );
    let msgs = vec![
        upstream_user("d", &"u".repeat(400 * 1024)),
        user(&"a".repeat(60 * 1024)),
        user(&"b".repeat(60 * 1024)),
    ];
    assert_eq!(
        current([msgs, tail()].concat()).unwrap_err(),
        RejectionReason::ByteLimit
    );
}

#[test]
fn finalization_s085_user_images_are_unsupported_even_with_upstream_text() {
    let mut m = upstream_user("look", "look");
    m.content.push(ContentBlock::Image {
        mime_type: "image/png".into(),
        data: "AAAA".into(),
    });
    assert_eq!(
        current(vec![m]).unwrap_err(),
        RejectionReason::UnsupportedUserImage
    );
}

#[test]
fn finalization_s086_pairing_errors_are_closed_reasons() {
    let c = || call("c1", "send", json!({}));
    let r = || tool_result("c1", "send", "ok", false);
    assert_eq!(
        current(vec![user("go"), r()]).unwrap_err(),
        RejectionReason::InvalidPairing,
        "orphan result"
    );
    assert_eq!(
        current(vec![user("go"), c()]).unwrap_err(),
        RejectionReason::IncompletePairing,
        "missing result"
    );
    assert_eq!(
        current(vec![user("go"), c(), r(), c(), r()]).unwrap_err(),
        RejectionReason::InvalidPairing,
        "duplicate call id"
    );
    assert_eq!(
        current(vec![
            user("go"),
            c(),
            tool_result("c1", "other", "ok", false)
        ])
        .unwrap_err(),
        RejectionReason::InvalidPairing,
        "name mismatch"
    );
    assert_eq!(
        current(vec![user("go")]).unwrap_err(),
        RejectionReason::IncompletePairing,
        "no completed result"
    );
}

#[test]
fn finalization_s087_image_results_become_a_text_marker() {
    let mut result = tool_result("c1", "image_gen", "Generated the requested asset.", false);
    result.content.push(ContentBlock::Image {
        mime_type: "image/png".into(),
        data: "AAAA".into(),
    });
    let p = current(vec![user("go"), call("c1", "image_gen", json!({})), result]).unwrap();
    assert!(matches!(
        p.items().last().unwrap(),
        ProjectedItem::FunctionCallOutput { output, .. } if output == "Generated the requested asset.\n[Image tool result: image/png]"
    ));
}

#[test]
fn finalization_s088_oversized_user_text_is_rejected_never_truncated() {
    let m = user(&"x".repeat(MAX_FIELD_BYTES + 1));
    assert_eq!(current(vec![m]).unwrap_err(), RejectionReason::FieldLimit);
    let exact = user(&"x".repeat(MAX_FIELD_BYTES));
    let p = current(vec![
        exact,
        call("c1", "send", json!({})),
        tool_result("c1", "send", "ok", false),
    ])
    .unwrap();
    assert_eq!(
        p.to_json()[0]["content"][0]["text"].as_str().unwrap().len(),
        MAX_FIELD_BYTES
    );
}

fn history_with_prior(prior: Vec<AgentMessage>, settled: &[AgentMessage]) -> Vec<AgentMessage> {
    [prior, settled.to_vec()].concat()
}

#[test]
fn bounded_prior_context_is_dropped_in_whole_groups_with_a_notice() {
    let settled = settled_turn("t");
    // Group 1 is over the field limit (dropped whole); group 2 fits.
    let prior = vec![
        user("old question"),
        AgentMessage::text(MessageRole::Assistant, "z".repeat(MAX_FIELD_BYTES + 1)),
        user("recent question"),
        AgentMessage::text(MessageRole::Assistant, "recent answer"),
    ];
    let p = project_settled_turn_history(
        provenance("t", &settled, &settled),
        ok_source(history_with_prior(prior, &settled)),
    )
    .unwrap();
    assert!(p.omitted_prior_context());
    let json = p.to_json();
    assert_eq!(json[0]["content"][0]["text"], OMITTED_CONTEXT_NOTICE);
    assert_eq!(json[1]["content"][0]["text"], "recent question");
    assert_eq!(json[2]["content"][0]["text"], "recent answer");
    assert!(
        !json.to_string().contains("old question"),
        "the whole older group is dropped"
    );
    assert_eq!(p.current_items().len(), 3, "current evidence never trimmed");
}

#[test]
fn bounded_oldest_groups_are_trimmed_until_everything_fits() {
    let settled = settled_turn("t");
    // 150 prior groups of 2 items: only the newest fit beside the 3 current items and the notice.
    let mut prior = Vec::new();
    for i in 0..150 {
        prior.push(user(&format!("q{i}")));
        prior.push(AgentMessage::text(MessageRole::Assistant, format!("a{i}")));
    }
    let p = project_settled_turn_history(
        provenance("t", &settled, &settled),
        ok_source(history_with_prior(prior, &settled)),
    )
    .unwrap();
    assert!(p.items().len() <= 200);
    assert_eq!(p.items().len(), 1 + 98 * 2 + 3);
    let json = p.to_json();
    assert_eq!(
        json[1]["content"][0]["text"], "q52",
        "groups trimmed whole from the oldest"
    );
    assert_eq!(json[196]["content"][0]["text"], "a149");
    assert_eq!(p.current_items().len(), 3);
}

#[test]
fn bounded_user_message_during_a_pending_tool_stays_in_its_group() {
    let settled = settled_turn("t");
    let prior = vec![
        user("q0"),
        call("p1", "exec", json!({})),
        user("steer while running"),
        tool_result("p1", "exec", "done", false),
        AgentMessage::text(MessageRole::Assistant, "z".repeat(MAX_FIELD_BYTES + 1)),
        user("q1"),
    ];
    let p = project_settled_turn_history(
        provenance("t", &settled, &settled),
        ok_source(history_with_prior(prior, &settled)),
    )
    .unwrap();
    let text = p.to_json().to_string();
    assert!(
        !text.contains("steer while running"),
        "the atomic group was dropped whole"
    );
    assert!(!text.contains("p1"));
    assert!(text.contains("q1"));
}

#[test]
fn bounded_current_evidence_over_the_limit_is_rejected_not_trimmed() {
    let mut settled = settled_turn("t");
    settled[2].content = vec![ContentBlock::Text {
        text: "r".repeat(MAX_FIELD_BYTES + 1),
    }];
    assert_eq!(
        project_settled_turn_history(
            provenance("t", &settled, &settled),
            ok_source(settled.clone())
        )
        .unwrap_err(),
        RejectionReason::FieldLimit
    );
}

#[derive(Debug, Clone)]
enum Op {
    User(usize),
    Text(usize),
    Pair { result_len: usize, is_error: bool },
}

fn ops_to_messages(ops: &[Op], prefix: &str) -> Vec<AgentMessage> {
    let mut out = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::User(n) => out.push(user(&"u".repeat(*n))),
            Op::Text(n) => out.push(AgentMessage::text(MessageRole::Assistant, "a".repeat(*n))),
            Op::Pair {
                result_len,
                is_error,
            } => {
                let id = format!("{prefix}{i}");
                out.push(call(&id, "tool", json!({})));
                out.push(tool_result(
                    &id,
                    "tool",
                    &"r".repeat(*result_len),
                    *is_error,
                ));
            }
        }
    }
    out
}

fn arb_ops(max_len: usize) -> impl proptest::strategy::Strategy<Value = Vec<Op>> {
    use proptest::prelude::*;
    let op = prop_oneof![
        (1..300usize).prop_map(Op::User),
        (1..300usize).prop_map(Op::Text),
        (0..300usize, any::<bool>()).prop_map(|(result_len, is_error)| Op::Pair {
            result_len,
            is_error
        }),
    ];
    prop::collection::vec(op, 0..max_len)
}

const SMALL: ProjectionLimits = ProjectionLimits {
    max_items: 12,
    max_total_bytes: 2_000,
    max_field_bytes: 200,
};

proptest::proptest! {
    #[test]
    fn property_current_evidence_is_within_limits_or_rejected(ops in arb_ops(16)) {
        let mut messages = vec![user("go")];
        messages.extend(ops_to_messages(&ops, "c"));
        messages.extend(ops_to_messages(&[Op::Pair { result_len: 3, is_error: false }], "last"));
        if let Ok(p) = project_current_evidence(ok_source(messages), SMALL) {
            proptest::prop_assert!(p.items().len() <= SMALL.max_items);
            proptest::prop_assert!(p.total_bytes() <= SMALL.max_total_bytes);
            proptest::prop_assert!(!p.omitted_prior_context());
        }
    }

    #[test]
    fn property_prior_context_is_trimmed_but_current_evidence_never_is(prior in arb_ops(40)) {
        let settled = settled_turn("t");
        let limits = ProjectionLimits { max_items: 20, max_total_bytes: 3_000, max_field_bytes: 200 };
        let mut history = ops_to_messages(&prior, "p");
        history.extend(settled.clone());
        let input = ProvenanceInput { turn_id: "t", settled_messages: &settled, mirrored_messages: &settled, limits };
        let p = project_settled_turn_history(input, ok_source(history)).unwrap();
        proptest::prop_assert!(p.items().len() <= limits.max_items);
        proptest::prop_assert!(p.total_bytes() <= limits.max_total_bytes);
        let current = project_current_evidence(ok_source(settled.clone()), limits).unwrap();
        proptest::prop_assert_eq!(p.current_items(), current.items());
    }
}

#[test]
fn bounded_an_oversized_prior_tool_result_still_settles_its_call() {
    // Regression (found by the property test): the over-size verdict must not skip pairing.
    let settled = settled_turn("t");
    let prior = vec![
        user("old"),
        call("p1", "exec", json!({})),
        tool_result("p1", "exec", &"r".repeat(MAX_FIELD_BYTES + 1), false),
        user("recent"),
    ];
    let p = project_settled_turn_history(
        provenance("t", &settled, &settled),
        ok_source(history_with_prior(prior, &settled)),
    )
    .unwrap();
    assert!(p.omitted_prior_context());
    assert!(!p.to_json().to_string().contains("p1"));
    assert!(p.to_json().to_string().contains("recent"));
}

#[test]
fn bounded_provenance_path_stops_reading_at_the_current_item_limit() {
    let mut settled = vec![with_id(user("go"), "t:prompt")];
    for i in 0..205 {
        settled.push(with_id(
            AgentMessage::text(MessageRole::Assistant, format!("step {i}")),
            &format!("t:assistant:{i}"),
        ));
    }
    settled.push(with_id(call("c1", "send", json!({})), "t:tool:c1:call"));
    settled.push(with_id(
        tool_result("c1", "send", "sent", false),
        "t:tool:c1:result",
    ));
    // Item 201 is the message at index 200; the message at index 201 must never be read.
    let (source, reads) = GuardedSource::new(settled.clone(), 201);
    let result = project_settled_turn_history(provenance("t", &settled, &settled), source);
    assert_eq!(result.unwrap_err(), RejectionReason::ItemLimit);
    assert_eq!(reads.get(), 0, "nothing read past the limit");
}
