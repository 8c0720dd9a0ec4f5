//! the built-in transcript producer.

use tether_core::{AgentMessage, AttemptTerminal, SettledTurnFinalizationContext};
use tether_finalizer::{
    FailureFacts, FailureSource, TimeoutKind, TranscriptCaptureInput,
    resolve_transcript_finalization_context,
};

use crate::support::{assistant, tool_calls, tool_result, user};

fn snapshot(commentary: Option<&str>) -> Vec<AgentMessage> {
    vec![
        user("save a note"),
        tool_calls(commentary, &[("c1", "write")]),
        tool_result("c1", "write", "saved", false),
    ]
}

fn failed() -> AttemptTerminal {
    AttemptTerminal::Failed {
        message: "prompt failed".into(),
    }
}

fn with_failure(source: &FailureSource, facts: &FailureFacts, messages: &[AgentMessage]) -> bool {
    let terminal = failed();
    resolve_transcript_finalization_context(&TranscriptCaptureInput {
        terminal: &terminal,
        timeout_observation: None,
        thrown_failure: Some((source, facts)),
        completed_assistant: None,
        assistant_texts: &[],
        messages_snapshot: messages,
    })
    .is_some()
}

#[test]
fn finalization_s020_only_transient_prompt_failures_capture_a_context() {
    let messages = snapshot(None);
    let prompt = FailureSource::Prompt;
    let code = |c: &str, m: &str| FailureFacts {
        code: Some(c.into()),
        ..FailureFacts::message(m)
    };
    let yes = [
        code("ECONNRESET", "socket hang up"),
        FailureFacts {
            cause_codes: vec!["UND_ERR_SOCKET".into()],
            ..FailureFacts::message("fetch failed")
        },
        FailureFacts::message("Stream ended without finish_reason"),
    ];
    for facts in &yes {
        assert!(with_failure(&prompt, facts, &messages), "{facts:?}");
    }
    let no = [
        FailureFacts {
            status: Some(401),
            ..FailureFacts::message("unauthorized")
        },
        FailureFacts {
            status: Some(429),
            code: Some("insufficient_quota".into()),
            ..FailureFacts::message("quota")
        },
        FailureFacts::message("content policy violation"),
        FailureFacts {
            status: Some(403),
            ..FailureFacts::message("security policy denied")
        },
        FailureFacts {
            name: Some("SyntaxError".into()),
            ..FailureFacts::message("Unexpected token in JSON")
        },
    ];
    for facts in &no {
        assert!(!with_failure(&prompt, facts, &messages), "{facts:?}");
    }
    let socket = code("ECONNRESET", "socket hang up");
    for source in [
        FailureSource::Precheck,
        FailureSource::Compaction,
        FailureSource::Hook("before_agent_run".into()),
    ] {
        assert!(!with_failure(&source, &socket, &messages), "{source:?}");
    }
}

fn assistant_error(message: &str, code: Option<&str>) -> AgentMessage {
    let mut m = assistant("", "error");
    m.content.clear();
    m.meta.insert("error_message".into(), message.into());
    if let Some(code) = code {
        m.meta.insert("error_code".into(), code.into());
    }
    m
}

#[test]
fn finalization_s021_assistant_reported_failures_on_an_ok_terminal() {
    let messages = snapshot(None);
    let ok = AttemptTerminal::Ok;
    let capture = |m: &AgentMessage| {
        resolve_transcript_finalization_context(&TranscriptCaptureInput {
            terminal: &ok,
            timeout_observation: None,
            thrown_failure: None,
            completed_assistant: Some(m),
            assistant_texts: &[],
            messages_snapshot: &messages,
        })
        .is_some()
    };
    assert!(capture(&assistant_error(
        "WebSocket error",
        Some("ERR_WEBSOCKET_TRANSPORT")
    )));
    assert!(capture(&assistant_error("boom", Some("ECONNRESET"))));
    assert!(!capture(&assistant_error("invalid API key", None)));
    assert!(capture(&assistant_error(
        "Stream ended without finish_reason",
        None
    )));
    // An ok turn without any failure gets no context here (the gate decides).
    assert!(!capture(&assistant("done", "stop")));
}

#[test]
fn finalization_s022_text_after_the_tools_blocks_capture() {
    let truncated = FailureFacts::message("Stream ended without finish_reason");
    let prompt = FailureSource::Prompt;
    let terminal = failed();
    let run = |messages: &[AgentMessage], texts: &[String]| {
        resolve_transcript_finalization_context(&TranscriptCaptureInput {
            terminal: &terminal,
            timeout_observation: None,
            thrown_failure: Some((&prompt, &truncated)),
            completed_assistant: None,
            assistant_texts: texts,
            messages_snapshot: messages,
        })
        .is_some()
    };
    let with_commentary = snapshot(Some("Saving the note now."));
    assert!(
        run(&with_commentary, &["Saving the note now.".into()]),
        "pre-tool commentary only"
    );
    assert!(
        !run(&with_commentary, &["Something unattributed".into()]),
        "unattributed text"
    );
    let mut after = snapshot(None);
    after.push(assistant("All done, the note is saved.", "stop"));
    assert!(!run(&after, &[]), "text authored after the tool results");
}

#[test]
fn finalization_s023_timeouts_never_capture() {
    let messages = snapshot(None);
    let socket = FailureFacts {
        code: Some("ECONNRESET".into()),
        ..FailureFacts::message("socket hang up")
    };
    let prompt = FailureSource::Prompt;
    let failed = failed();
    for observation in [TimeoutKind::Compaction, TimeoutKind::ToolExecution] {
        assert!(
            resolve_transcript_finalization_context(&TranscriptCaptureInput {
                terminal: &failed,
                timeout_observation: Some(observation),
                thrown_failure: Some((&prompt, &socket)),
                completed_assistant: None,
                assistant_texts: &[],
                messages_snapshot: &messages,
            })
            .is_none()
        );
    }
    let timed_out = AttemptTerminal::TimedOut;
    let ws = assistant_error("WebSocket error", Some("ERR_WEBSOCKET_TRANSPORT"));
    assert!(
        resolve_transcript_finalization_context(&TranscriptCaptureInput {
            terminal: &timed_out,
            timeout_observation: None,
            thrown_failure: None,
            completed_assistant: Some(&ws),
            assistant_texts: &[],
            messages_snapshot: &messages,
        })
        .is_none()
    );
}

#[test]
fn finalization_s024_captured_transcript_is_frozen_and_needs_a_tool_result() {
    let messages = snapshot(None);
    let socket = FailureFacts {
        code: Some("ECONNRESET".into()),
        ..FailureFacts::message("socket hang up")
    };
    let prompt = FailureSource::Prompt;
    let terminal = failed();
    let input = TranscriptCaptureInput {
        terminal: &terminal,
        timeout_observation: None,
        thrown_failure: Some((&prompt, &socket)),
        completed_assistant: None,
        assistant_texts: &[],
        messages_snapshot: &messages,
    };
    match resolve_transcript_finalization_context(&input) {
        // Frozen by type: `Arc<[AgentMessage]>` hands out only shared references.
        Some(SettledTurnFinalizationContext::Transcript(frozen)) => {
            assert!(frozen.iter().any(|m| m.tool_call_id.is_some()));
            assert_eq!(&frozen[..], &messages[..]);
        }
        other => panic!("expected a transcript context, got {other:?}"),
    }
    let no_result = vec![user("hi"), tool_calls(None, &[("c1", "write")])];
    assert!(
        resolve_transcript_finalization_context(&TranscriptCaptureInput {
            messages_snapshot: &no_result,
            ..input
        })
        .is_none()
    );
}
