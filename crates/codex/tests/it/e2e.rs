//! End-to-end turns on the real Codex app-server.

use std::time::Duration;

use serde_json::json;
use tether_codex::ApprovalDecision;
use tether_codex::CodexError;
use tether_codex::{ApprovalReport, TurnCancel, TurnRequest};
use tether_core::{AttemptTerminal, LeaseConfig, MessageRole};
use tether_harness_sdk::results::terminal::ToolOutcome;
use tether_storage::TranscriptRole;

use crate::host::{World, attempt, codex_binary, quick_lease, session_key};
use crate::model::{ModelServer, Step, mentions};

async fn world(script: Vec<Step>) -> Option<(World, ModelServer)> {
    let binary = codex_binary()?;
    let model = ModelServer::start(script).await;
    Some((World::new(binary, model.base_url()), model))
}

fn roles(entries: &[tether_storage::TranscriptEntry]) -> Vec<TranscriptRole> {
    entries.iter().map(|e| e.role).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_plain_reply() {
    let Some((world, model)) = world(vec![Step::Reply("Hello from Codex.")]).await else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("plain");
    host.create_session(&key).await;

    // The host prepared the user turn with operational metadata; a hook-style rewrite of the
    // metadata on the runtime side must not survive, the prepared values must.
    let mut request = TurnRequest::new(attempt(&key, "run-1", "say hello"));
    request.prepared_user_message = Some(json!({
        "role": "user",
        "content": "say hello",
        "__openclaw": { "senderIsOwner": true, "intent": "greeting" },
    }));
    let outcome = host.harness.run_turn(request).await.unwrap();

    assert_eq!(outcome.reply(), Some("Hello from Codex."));
    assert_eq!(outcome.attempt.terminal, AttemptTerminal::Ok);
    assert!(outcome.started_thread && !outcome.resumed_thread);
    assert!(outcome.tools.is_empty());
    assert_eq!(outcome.attempt.usage.map(|u| u.output_tokens), Some(7));
    // The binding record holds the Codex thread id.
    let bound = host
        .harness
        .bound_thread(&attempt(&key, "run-1", ""))
        .await
        .unwrap();
    assert_eq!(bound.as_ref(), Some(&outcome.thread_id));
    // User and assistant items mirrored once each, keyed by their native ids.
    let mirrored: Vec<_> = outcome
        .mirrored
        .iter()
        .map(|m| (m.role, m.appended))
        .collect();
    assert_eq!(
        mirrored,
        vec![(MessageRole::User, true), (MessageRole::Assistant, true)]
    );
    let transcript = host.transcript(&key).await;
    assert_eq!(
        roles(&transcript),
        vec![TranscriptRole::User, TranscriptRole::Assistant]
    );
    assert_eq!(transcript[0].content, "say hello");
    assert_eq!(transcript[1].content, "Hello from Codex.");
    let expected_key = format!(
        "codex:{}:{}:{}",
        outcome.thread_id, outcome.turn_id, outcome.mirrored[1].item_id
    );
    assert_eq!(
        transcript[1].idempotency_key.as_deref(),
        Some(expected_key.as_str())
    );
    let committed = outcome
        .original_input_committed
        .as_ref()
        .expect("a fresh user append announces the committed input");
    assert_eq!(committed.message["content"], json!("say hello"));
    let user = &host.transcript.entries()[0];
    assert_eq!(user.message["__openclaw"]["senderIsOwner"], json!(true));
    assert_eq!(user.message["__openclaw"]["intent"], json!("greeting"));
    // The model saw the prompt.
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert!(mentions(&requests[0], "say hello"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_dynamic_tool_then_reply() {
    let Some((world, model)) = world(vec![
        Step::Calls(vec![("call-look", "lookup", json!({ "q": "tether" }))]),
        Step::Reply("A tether is a rope."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("tool");
    host.create_session(&key).await;

    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "define tether")))
        .await
        .unwrap();

    assert_eq!(outcome.reply(), Some("A tether is a rope."));
    assert_eq!(
        host.tools.executed(),
        vec![("lookup".to_owned(), json!({ "q": "tether" }))]
    );
    let report = &outcome.tools[0];
    assert_eq!(
        (report.tool.as_str(), report.call_id.as_str()),
        ("lookup", "call-look")
    );
    assert_eq!(report.outcome, ToolOutcome::Success);
    assert!(report.execution_started);
    assert_eq!(
        report
            .executed_arguments
            .clone()
            .map(serde_json::Value::Object),
        Some(json!({ "q": "tether" }))
    );
    assert_eq!(outcome.attempt.last_tool_error, None);
    // The tool result went back to the model through the dynamic-tool response.
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert!(mentions(&requests[1], "definition of tether"));
    // Every tool the host offered reached the model.
    for tool in ["lookup", "read", "write", "deploy"] {
        assert!(mentions(&requests[0], tool), "tool {tool} was not offered");
    }
    let transcript = host.transcript(&key).await;
    assert_eq!(
        roles(&transcript),
        vec![
            TranscriptRole::User,
            TranscriptRole::Tool,
            TranscriptRole::Assistant
        ]
    );
    assert!(
        transcript[1]
            .content
            .contains("lookup succeeded: definition of tether")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_failed_mutation_survives_unrelated_success() {
    let Some((world, _model)) = world(vec![
        Step::Calls(vec![
            (
                "call-write",
                "write",
                json!({ "path": "notes.txt", "content": "x" }),
            ),
            ("call-read", "read", json!({ "path": "other.txt" })),
        ]),
        Step::Reply("I could not save the notes."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("mutation");
    host.create_session(&key).await;

    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "save and read")))
        .await
        .unwrap();

    let by_tool = |name: &str| {
        outcome
            .tools
            .iter()
            .find(|t| t.tool == name)
            .unwrap()
            .clone()
    };
    assert_eq!(by_tool("write").outcome, ToolOutcome::Failure);
    assert!(by_tool("write").side_effect_evidence);
    assert_eq!(by_tool("read").outcome, ToolOutcome::Success);
    // The unrelated read succeeded, and the failed write is still the attempt's tool error.
    let error = outcome
        .attempt
        .last_tool_error
        .expect("the failed write survives");
    assert_eq!(error.tool_name, "write");
    assert_eq!(error.mutating_action, Some(true));
    assert_eq!(error.error.as_deref(), Some("disk full"));
    assert_eq!(error.execution_started, Some(true));
    assert!(outcome.attempt.replay.had_potential_side_effects);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_guard_refuses_before_dispatch() {
    let Some((world, model)) = world(vec![
        Step::Calls(vec![("call-deploy", "deploy", json!({ "target": "prod" }))]),
        Step::Reply("Deploying needs an operator."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("guard");
    host.create_session(&key).await;

    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "deploy it")))
        .await
        .unwrap();

    assert!(
        host.tools.executed().is_empty(),
        "the refused tool must never run"
    );
    let report = &outcome.tools[0];
    assert_eq!(report.tool, "deploy");
    assert!(!report.execution_started);
    assert!(!report.side_effect_evidence);
    assert_eq!(report.outcome, ToolOutcome::Failure);
    let error = outcome
        .attempt
        .last_tool_error
        .expect("a refused call is reported");
    assert_eq!(error.execution_started, Some(false));
    // The model was told the call was refused.
    assert!(mentions(
        &model.requests()[1],
        "refused: deploys need an operator"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_second_host_resumes_thread() {
    let Some((world, model)) = world(vec![
        Step::Reply("The secret word is heron."),
        Step::Reply("You asked about the secret word."),
    ])
    .await
    else {
        return;
    };
    let key = session_key("resume");
    let first = {
        let host_a = world.host("host-a", LeaseConfig::default()).await;
        host_a.create_session(&key).await;
        let outcome = host_a
            .harness
            .run_turn(TurnRequest::new(attempt(&key, "run-1", "remember heron")))
            .await
            .unwrap();
        host_a.server.shutdown().await;
        outcome
    };

    // Another host process: its own store connection, lifecycle and app-server.
    let host_b = world.host("host-b", LeaseConfig::default()).await;
    let second = host_b
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-2", "what did I ask?")))
        .await
        .unwrap();

    assert_eq!(second.thread_id, first.thread_id);
    assert!(second.resumed_thread && !second.started_thread);
    assert!(second.lease_epoch > first.lease_epoch);
    assert_eq!(second.reply(), Some("You asked about the secret word."));
    // The resumed thread carried the first turn's history to the model.
    let requests = model.requests();
    assert!(mentions(&requests[1], "remember heron"));
    assert!(mentions(&requests[1], "The secret word is heron."));
    assert_eq!(host_b.transcript(&key).await.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_two_hosts_contend_for_one_session() {
    let Some((world, model)) = world(vec![
        Step::Stall(Duration::from_secs(4), "slow answer"),
        Step::Reply("second answer"),
    ])
    .await
    else {
        return;
    };
    let key = session_key("contend");
    // Both hosts hand the Codex writer over with the lease (one app-server process per turn).
    let host_a = world.host_with("host-a", quick_lease(), true).await;
    let host_b = world.host_with("host-b", quick_lease(), true).await;
    host_a.create_session(&key).await;

    let harness_a = host_a.harness.clone();
    let key_a = key.clone();
    let running = tokio::spawn(async move {
        harness_a
            .run_turn(TurnRequest::new(attempt(&key_a, "run-a", "slow question")))
            .await
    });
    model.wait_for_requests(1).await;

    // Host B asks for the same session while A drives it: it waits out its budget and is refused.
    let refused = host_b
        .harness
        .run_turn(TurnRequest::new(attempt(
            &key,
            "run-b",
            "impatient question",
        )))
        .await;
    match refused {
        Err(CodexError::Lifecycle(tether_core::Error::LeaseTimeout { .. })) => {}
        other => panic!("expected a lease timeout, got {other:?}"),
    }
    let first = running.await.unwrap().unwrap();
    assert_eq!(first.reply(), Some("slow answer"));
    assert_eq!(model.requests().len(), 1, "host B never reached the model");

    // Once A is done, B drives the same thread.
    let second = host_b
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-b2", "now my question")))
        .await
        .unwrap();
    assert_eq!(second.thread_id, first.thread_id);
    assert!(second.resumed_thread);
    assert_eq!(model.max_in_flight(), 1, "never two turns at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_sigkill_mid_turn_then_resume() {
    let Some((world, model)) = world(vec![
        Step::Stall(Duration::from_secs(60), "never delivered"),
        Step::Reply("Back again."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("kill");
    host.create_session(&key).await;

    let harness = host.harness.clone();
    let key_a = key.clone();
    let running = tokio::spawn(async move {
        harness
            .run_turn(TurnRequest::new(attempt(&key_a, "run-1", "long task")))
            .await
    });
    model.wait_for_requests(1).await;
    let pid = host.server.client().await.unwrap().pid().unwrap();
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());

    let error = running.await.unwrap().unwrap_err();
    assert!(
        matches!(error, CodexError::ServerExited { .. }),
        "expected ServerExited, got {error:?}"
    );
    assert!(error.is_server_lost());
    assert!(error.tools_ran().is_empty(), "no tool ran: {error:?}");
    // Nothing half-written: the whole user item, no partial assistant text.
    let transcript = host.transcript(&key).await;
    assert_eq!(roles(&transcript), vec![TranscriptRole::User]);
    let bound = host
        .harness
        .bound_thread(&attempt(&key, "run-1", ""))
        .await
        .unwrap()
        .expect("the binding survives the crash");

    // The next turn starts a new app-server and resumes the same thread.
    let next = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-2", "are you there?")))
        .await
        .unwrap();
    assert_eq!(next.thread_id, bound);
    assert!(next.resumed_thread);
    assert_eq!(next.reply(), Some("Back again."));
    assert_eq!(host.server.starts(), 2);
    assert_eq!(
        roles(&host.transcript(&key).await),
        vec![
            TranscriptRole::User,
            TranscriptRole::User,
            TranscriptRole::Assistant
        ]
    );
}

/// The app-server dies while a host tool runs: the tool ran (a side effect the host answers
/// for), so its result is in the host transcript although Codex never reported the item; the
/// turn fails as a lost server and the next turn resumes the thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_a_tool_that_ran_is_mirrored_when_the_server_dies_during_it() {
    let Some((world, _model)) = world(vec![
        Step::Calls(vec![("call-crash", "lookup", json!({ "q": "crash" }))]),
        Step::Reply("Back again."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("crash-in-tool");
    host.create_session(&key).await;
    let pid = host.server.client().await.unwrap().pid().unwrap();
    host.tools.during_next(move || {
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        // The process is gone before the tool answers.
        std::thread::sleep(Duration::from_millis(200));
    });

    let error = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "look up crash")))
        .await
        .unwrap_err();
    assert!(error.is_server_lost(), "{error:?}");
    assert_eq!(host.tools.executed().len(), 1, "the tool ran");
    // The caller's error says which tool the lost turn had run, with its terminal report.
    let ran = error.tools_ran();
    assert_eq!(ran.len(), 1, "{error:?}");
    assert_eq!(
        (
            ran[0].call_id.as_str(),
            ran[0].tool.as_str(),
            ran[0].outcome
        ),
        ("call-crash", "lookup", ToolOutcome::Success)
    );
    assert!(ran[0].execution_started && !ran[0].native, "{:?}", ran[0]);
    assert!(
        error
            .to_string()
            .contains("after the turn ran 1 tool call(s)"),
        "{error}"
    );
    let transcript = host.transcript(&key).await;
    assert_eq!(
        roles(&transcript),
        vec![TranscriptRole::User, TranscriptRole::Tool],
        "{transcript:?}"
    );
    assert!(
        transcript[1]
            .content
            .contains("lookup succeeded: definition of crash")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_cancel_interrupts_turn() {
    let Some((world, model)) = world(vec![Step::Stall(Duration::from_secs(60), "too late")]).await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("cancel");
    host.create_session(&key).await;

    let cancel = TurnCancel::new();
    let mut request = TurnRequest::new(attempt(&key, "run-1", "take your time"));
    request.cancel = Some(cancel.clone());
    let harness = host.harness.clone();
    let running = tokio::spawn(async move { harness.run_turn(request).await });
    model.wait_for_requests(1).await;
    cancel.cancel();

    let outcome = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("turn/interrupt ends the turn promptly")
        .unwrap()
        .unwrap();
    assert_eq!(outcome.attempt.terminal, AttemptTerminal::Aborted);
    assert!(outcome.attempt.assistant_texts.is_empty());
}

/// A run cancelled before its Codex turn started never starts one: cancelled before
/// `run_turn` is called (on a bound session and on a session with no thread yet) and cancelled
/// while it waits behind another holder's lease, it fails with `CancelledBeforeStart`, the
/// model is asked nothing, the transcript and the binding are as they were, the lease is
/// released, and the next turn of the session resumes its thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_a_run_cancelled_before_its_turn_starts_never_reaches_codex() {
    let Some((world, model)) = world(vec![
        Step::Reply("first answer"),
        Step::Reply("answer after the cancelled runs"),
    ])
    .await
    else {
        return;
    };
    // A lease wait long enough that the run below waits behind the holder until cancelled.
    let patient = LeaseConfig {
        wait_budget: Duration::from_secs(60),
        retry_interval: Duration::from_millis(100),
        ..LeaseConfig::default()
    };
    let host = world.host("host-b", patient).await;
    let key = session_key("cancelled-before");
    host.create_session(&key).await;
    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "first question")))
        .await
        .unwrap();
    let transcript = host.transcript(&key).await;
    assert_eq!(transcript.len(), 2);
    assert_eq!(model.requests().len(), 1);

    let cancelled_request = |run: &str, prompt: &str| {
        let cancel = TurnCancel::new();
        let mut request = TurnRequest::new(attempt(&key, run, prompt));
        request.cancel = Some(cancel.clone());
        (request, cancel)
    };

    // Cancelled before the call.
    let (request, cancel) = cancelled_request("run-2", "xylo before the call");
    cancel.cancel();
    let refused = host.harness.run_turn(request).await;
    assert!(
        matches!(refused, Err(CodexError::CancelledBeforeStart)),
        "{refused:?}"
    );
    assert_eq!(model.requests().len(), 1, "the model was asked nothing");
    assert_eq!(host.transcript(&key).await, transcript);
    let bound = host
        .harness
        .bound_thread(&attempt(&key, "run-2", ""))
        .await
        .unwrap();
    assert_eq!(bound.as_ref(), Some(&first.thread_id));

    // A session without a thread: none is started or bound.
    let fresh = session_key("cancelled-fresh");
    host.create_session(&fresh).await;
    let cancel = TurnCancel::new();
    cancel.cancel();
    let mut request = TurnRequest::new(attempt(&fresh, "run-f", "xylo on a fresh session"));
    request.cancel = Some(cancel);
    let refused = host.harness.run_turn(request).await;
    assert!(
        matches!(refused, Err(CodexError::CancelledBeforeStart)),
        "{refused:?}"
    );
    let unbound = host
        .harness
        .bound_thread(&attempt(&fresh, "run-f", ""))
        .await;
    assert_eq!(unbound.unwrap(), None);
    assert!(host.transcript(&fresh).await.is_empty());

    // Cancelled while it waits behind another holder's lease on the session.
    let holder = world.host("host-a", LeaseConfig::default()).await;
    let identity = tether_harness_sdk::backend::BindingIdentity::session(
        tether_core::AgentId::new(crate::host::AGENT).unwrap(),
        tether_core::SessionId::new(crate::host::SESSION_ID).unwrap(),
        Some(key.clone()),
    );
    let (held_tx, held_rx) = tokio::sync::oneshot::channel::<()>();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let holding = tokio::spawn(async move {
        holder
            .harness
            .bindings()
            .with_lease(&identity, false, None, |_lease| async move {
                let _ = held_tx.send(());
                let _ = release_rx.await;
                Ok(())
            })
            .await
    });
    held_rx.await.expect("the other holder took the lease");
    let (request, cancel) = cancelled_request("run-3", "xylo while waiting");
    let harness = host.harness.clone();
    let waiting = tokio::spawn(async move { harness.run_turn(request).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!waiting.is_finished(), "the run waits behind the lease");
    cancel.cancel();
    let refused = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("a run cancelled while it waits for the lease ends without it")
        .unwrap();
    assert!(
        matches!(refused, Err(CodexError::CancelledBeforeStart)),
        "{refused:?}"
    );
    release_tx.send(()).unwrap();
    holding.await.unwrap().unwrap();
    assert_eq!(model.requests().len(), 1, "the model was asked nothing");
    assert_eq!(host.transcript(&key).await, transcript);

    // The session goes on: the next turn resumes its thread, with none of the cancelled runs.
    let next = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-4", "next question")))
        .await
        .unwrap();
    assert_eq!(next.reply(), Some("answer after the cancelled runs"));
    assert_eq!(next.thread_id, first.thread_id);
    assert!(next.resumed_thread);
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert!(mentions(&requests[1], "first question"));
    assert!(!mentions(&requests[1], "xylo"), "{}", requests[1]);
    let after = host.transcript(&key).await;
    assert_eq!(after.len(), 4);
    assert!(after.iter().all(|e| !e.content.contains("xylo")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_consecutive_turns_share_one_process() {
    let Some((world, model)) = world(vec![Step::Reply("first"), Step::Reply("second")]).await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("consecutive");
    host.create_session(&key).await;

    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "one")))
        .await
        .unwrap();
    // The assistant item of the second turn was already mirrored, as an earlier try of the
    // same mirroring would leave it: the harness's append resolves to it.
    host.transcript.land_next_assistant_first();
    let second = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-2", "two")))
        .await
        .unwrap();

    let mirrored: Vec<_> = second
        .mirrored
        .iter()
        .map(|m| (m.role, m.appended))
        .collect();
    assert_eq!(
        mirrored,
        vec![(MessageRole::User, true), (MessageRole::Assistant, false)]
    );
    let repeated_key = format!(
        "codex:{}:{}:{}",
        second.thread_id, second.turn_id, second.mirrored[1].item_id
    );
    let transcript = host.transcript(&key).await;
    let with_key: Vec<_> = transcript
        .iter()
        .filter(|e| e.idempotency_key.as_deref() == Some(repeated_key.as_str()))
        .collect();
    assert_eq!(with_key.len(), 1, "a repeat never writes a second entry");
    assert_eq!(second.thread_id, first.thread_id);
    assert_eq!(second.reply(), Some("second"));
    assert_eq!(
        host.server.starts(),
        1,
        "one app-server for the host process"
    );
    assert!(
        mentions(&model.requests()[1], "first"),
        "the second turn sees the first"
    );

    // A second live host with its own shared app-server cannot take the thread's writer.
    let other = world.host("host-b", LeaseConfig::default()).await;
    let refused = other
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-3", "three")))
        .await;
    assert!(
        matches!(refused, Err(CodexError::WriterHeldElsewhere { .. })),
        "got {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_hung_app_server_times_out_and_restarts() {
    let Some((mut world, _model)) = world(vec![Step::Reply("Fresh process.")]).await else {
        return;
    };
    world.request_timeout = Duration::from_secs(2);
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("hang");
    host.create_session(&key).await;

    // Freeze the running app-server: it stops answering without exiting.
    let pid = host.server.client().await.unwrap().pid().unwrap();
    let signal = |name: &str| {
        std::process::Command::new("kill")
            .args([name, &pid.to_string()])
            .status()
            .unwrap()
    };
    assert!(signal("-STOP").success());

    let error = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "hello?")))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, CodexError::Timeout { method, .. } if method == "thread/start"),
        "got {error:?}"
    );
    assert!(error.is_server_lost());
    // Nothing was bound or mirrored for the failed attempt.
    assert_eq!(
        host.harness
            .bound_thread(&attempt(&key, "run-1", ""))
            .await
            .unwrap(),
        None
    );
    assert!(host.transcript(&key).await.is_empty());

    // The hung process was discarded; the next turn runs on a new one.
    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-2", "hello again")))
        .await
        .unwrap();
    assert_eq!(outcome.reply(), Some("Fresh process."));
    assert_eq!(host.server.starts(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_native_command_escalation_refused_by_default_policy() {
    let Some((world, model)) = world(vec![
        Step::Calls(vec![(
            "call-cmd",
            "exec_command",
            json!({
                "cmd": "echo escalated > escalated.txt",
                "sandbox_permissions": "require_escalated",
                "justification": "write a file outside the sandbox"
            }),
        )]),
        Step::Reply("The command was not allowed."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("approval");
    host.create_session(&key).await;

    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "write the file")))
        .await
        .unwrap();

    assert_eq!(
        outcome.approvals,
        vec![ApprovalReport {
            method: "item/commandExecution/requestApproval".to_owned(),
            decision: ApprovalDecision::Refuse,
        }]
    );
    assert!(
        !std::path::Path::new(&world.workdir())
            .join("escalated.txt")
            .exists()
    );
    assert!(model.requests().len() >= 2);
    // The declined command is reported as a native action that never started.
    let native: Vec<_> = outcome.tools.iter().filter(|t| t.native).collect();
    assert_eq!(native.len(), 1, "{:?}", outcome.tools);
    assert_eq!(native[0].tool, "exec_command");
    assert!(!native[0].execution_started);
    assert!(!native[0].side_effect_evidence);
    assert_eq!(native[0].outcome, ToolOutcome::Failure);
    assert_eq!(native[0].error.as_deref(), Some("declined"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_native_commands_are_reported_as_mutations() {
    let Some((mut world, _model)) = world(vec![
        Step::Calls(vec![(
            "call-fail",
            "exec_command",
            json!({ "cmd": "echo partial > made.txt && exit 3" }),
        )]),
        Step::Calls(vec![("call-list", "exec_command", json!({ "cmd": "ls" }))]),
        Step::Reply("Wrote part of it."),
    ])
    .await
    else {
        return;
    };
    // Without a sandbox, so the commands run the same on every machine.
    world.sandbox = Some("danger-full-access");
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("native");
    host.create_session(&key).await;

    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "make the file")))
        .await
        .unwrap();

    assert!(
        std::path::Path::new(&world.workdir())
            .join("made.txt")
            .exists()
    );
    let native: Vec<_> = outcome.tools.iter().filter(|t| t.native).collect();
    assert_eq!(native.len(), 2, "{:?}", outcome.tools);
    let failed = native[0];
    assert_eq!(failed.tool, "exec_command");
    assert_eq!(failed.outcome, ToolOutcome::Failure);
    assert_eq!(failed.error.as_deref(), Some("exit 3"));
    assert!(failed.execution_started && failed.side_effect_evidence);
    assert_eq!(
        failed.arguments["command"]
            .as_str()
            .map(|c| c.contains("made.txt")),
        Some(true)
    );
    assert_eq!(native[1].outcome, ToolOutcome::Success);
    // The read-only `ls` that succeeded afterwards does not clear the failed mutation.
    let error = outcome
        .attempt
        .last_tool_error
        .expect("the failed command survives");
    assert_eq!(error.tool_name, "exec_command");
    assert_eq!(error.mutating_action, Some(true));
    assert!(matches!(
        error.terminal_diagnostic,
        Some(tether_core::TerminalDiagnostic::Process { .. })
    ));
    let transcript = host.transcript(&key).await;
    assert!(
        transcript
            .iter()
            .any(|e| e.role == TranscriptRole::Tool && e.content.contains("exec_command exit 3"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_a_turn_given_up_on_an_error_does_not_go_on_in_codex() {
    let Some((world, model)) = world(vec![
        Step::SlowCalls(
            Duration::from_secs(2),
            vec![("call-late", "lookup", json!({ "q": "late" }))],
        ),
        Step::Reply("should never be asked for"),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("given-up");
    host.create_session(&key).await;
    // The host refuses to mirror the user's message: the harness gives the turn up.
    host.transcript.refuse_appends(true);
    let result = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "look it up later")))
        .await;
    assert!(result.is_err(), "{result:?}");
    // The harness unsubscribes from the thread it gave up, which ends the turn in Codex. Had
    // the turn gone on, Codex would take the model's tool call after its 2 s, have it refused
    // by this host (no turn of it listens any more) and ask the model again.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let asked = model.requests().len();
    assert!(
        asked <= 1,
        "the turn the harness gave up went on in Codex: the model was asked {asked} times"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_lost_lease_mid_turn_runs_no_tool() {
    let Some((world, model)) = world(vec![
        Step::SlowCalls(
            Duration::from_secs(4),
            vec![("call-late", "lookup", json!({ "q": "late" }))],
        ),
        Step::Reply("should not matter"),
    ])
    .await
    else {
        return;
    };
    // Short leases renewed every second, so a revoked lease is noticed within the stall.
    let lease = LeaseConfig {
        lease_duration: Duration::from_secs(3),
        renew_interval: Duration::from_secs(1),
        ..quick_lease()
    };
    let host = world.host("host-a", lease).await;
    let key = session_key("revoked");
    host.create_session(&key).await;

    let harness = host.harness.clone();
    let key_a = key.clone();
    let running = tokio::spawn(async move {
        harness
            .run_turn(TurnRequest::new(attempt(
                &key_a,
                "run-1",
                "look it up later",
            )))
            .await
    });
    model.wait_for_requests(1).await;
    // An operator expires the lease while the model is still thinking.
    let identity = tether_harness_sdk::backend::BindingIdentity::session(
        tether_core::AgentId::new(crate::host::AGENT).unwrap(),
        tether_core::SessionId::new(crate::host::SESSION_ID).unwrap(),
        Some(key.clone()),
    );
    let ns = tether_core::Namespace::new(tether_codex::NAMESPACE).unwrap();
    host.store
        .force_expire_lease(&ns, identity.key(), None)
        .await
        .unwrap();

    let error = running.await.unwrap().unwrap_err();
    assert!(matches!(error, CodexError::Lifecycle(_)), "got {error:?}");
    assert!(
        host.tools.executed().is_empty(),
        "a host that lost the lease must not run tools"
    );
    assert!(
        model
            .requests()
            .iter()
            .all(|r| !mentions(r, "definition of late")),
        "no tool result reached the model"
    );
}

/// With the shipped lease timing (renewed every ~22 s) an operator's revocation mid-turn is not
/// seen by any renewal within the turn: the host tool is still refused, because the harness
/// reads the lease row before it runs a host tool, and the turn fails as a lost lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_a_lease_revoked_mid_turn_runs_no_tool_with_the_shipped_lease() {
    let Some((world, model)) = world(vec![
        Step::SlowCalls(
            Duration::from_secs(2),
            vec![("call-revoked", "lookup", json!({ "q": "revoked" }))],
        ),
        Step::Reply("should not matter"),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("revoked-shipped");
    host.create_session(&key).await;

    let harness = host.harness.clone();
    let key_a = key.clone();
    let running = tokio::spawn(async move {
        harness
            .run_turn(TurnRequest::new(attempt(&key_a, "run-1", "look it up")))
            .await
    });
    model.wait_for_requests(1).await;
    let identity = tether_harness_sdk::backend::BindingIdentity::session(
        tether_core::AgentId::new(crate::host::AGENT).unwrap(),
        tether_core::SessionId::new(crate::host::SESSION_ID).unwrap(),
        Some(key.clone()),
    );
    let ns = tether_core::Namespace::new(tether_codex::NAMESPACE).unwrap();
    let expired = host
        .store
        .force_expire_lease(&ns, identity.key(), None)
        .await
        .unwrap();
    assert!(
        matches!(expired, tether_storage::ForceExpireOutcome::Expired { .. }),
        "{expired:?}"
    );

    let error = running.await.unwrap().unwrap_err();
    assert!(
        matches!(&error, CodexError::Lifecycle(e) if e.is_lost_lease()),
        "got {error:?}"
    );
    assert!(
        host.tools.executed().is_empty(),
        "a host whose lease was revoked must not run tools"
    );
    assert!(
        model
            .requests()
            .iter()
            .all(|r| !mentions(r, "definition of revoked")),
        "no tool result reached the model"
    );
}

/// A provider that numbers its call ids per response reuses `call_0` in every turn: each turn's
/// tool result is still mirrored (its key is scoped by the Codex turn), none is dropped as a
/// repeat of the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_an_item_id_reused_in_a_later_turn_is_mirrored_again() {
    let Some((world, _model)) = world(vec![
        Step::Calls(vec![("call_0", "lookup", json!({ "q": "first" }))]),
        Step::Reply("First done."),
        Step::Calls(vec![("call_0", "lookup", json!({ "q": "second" }))]),
        Step::Reply("Second done."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("reused-call-id");
    host.create_session(&key).await;
    for (run, prompt) in [("run-1", "look up first"), ("run-2", "look up second")] {
        let outcome = host
            .harness
            .run_turn(TurnRequest::new(attempt(&key, run, prompt)))
            .await
            .unwrap();
        assert!(
            outcome.mirrored.iter().all(|m| m.appended),
            "{run}: {:?}",
            outcome.mirrored
        );
    }
    assert_eq!(host.tools.executed().len(), 2);
    let transcript = host.transcript(&key).await;
    let tools: Vec<&str> = transcript
        .iter()
        .filter(|e| e.role == TranscriptRole::Tool)
        .map(|e| e.content.as_str())
        .collect();
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert!(tools[0].contains("definition of first"), "{tools:?}");
    assert!(tools[1].contains("definition of second"), "{tools:?}");
    assert_eq!(transcript.len(), 6, "user, tool, assistant twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_model_failure_fails_the_turn_and_the_thread_goes_on() {
    let Some((world, _model)) = world(vec![Step::Fail(400), Step::Reply("Better now.")]).await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("failure");
    host.create_session(&key).await;

    let failed = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "first try")))
        .await
        .unwrap();
    assert!(
        matches!(failed.attempt.terminal, AttemptTerminal::Failed { .. }),
        "{:?}",
        failed.attempt.terminal
    );
    assert!(failed.attempt.assistant_texts.is_empty());
    // Codex's own error notification says why.
    assert!(!failed.codex_errors.is_empty(), "{failed:?}");
    assert_eq!(
        roles(&host.transcript(&key).await),
        vec![TranscriptRole::User],
        "only the whole user item was mirrored"
    );

    let next = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-2", "second try")))
        .await
        .unwrap();
    assert_eq!(next.thread_id, failed.thread_id);
    assert_eq!(next.attempt.terminal, AttemptTerminal::Ok);
    assert_eq!(next.reply(), Some("Better now."));
    assert!(next.codex_errors.is_empty(), "{:?}", next.codex_errors);
}

/// A model provider nobody answers at: the turn ends (here within its timeout) and says why —
/// Codex's own error notifications — instead of a bare `TimedOut` or `Failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_an_unreachable_model_provider_is_named_in_the_outcome() {
    let Some(binary) = crate::host::codex_binary() else {
        return;
    };
    // A loopback port nothing listens on: bound, then closed.
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let world = World::new(binary, format!("http://127.0.0.1:{dead}/v1"));
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("unreachable");
    host.create_session(&key).await;
    let mut params = attempt(&key, "run-1", "anyone there?");
    params.timeout = Some(Duration::from_secs(8));
    let outcome = host
        .harness
        .run_turn(TurnRequest::new(params))
        .await
        .unwrap();
    assert_ne!(outcome.attempt.terminal, AttemptTerminal::Ok);
    assert!(
        !outcome.codex_errors.is_empty(),
        "no reason given for {:?}",
        outcome.attempt.terminal
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_two_sessions_run_at_once_on_one_app_server() {
    let Some((world, model)) = world(vec![
        Step::Stall(Duration::from_millis(1500), "answer"),
        Step::Stall(Duration::from_millis(1500), "answer"),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let (alice, bob) = (session_key("alice"), session_key("bob"));
    host.create_session(&alice).await;
    host.create_session(&bob).await;

    let run = |key: tether_core::SessionKey, prompt: &'static str| {
        let harness = host.harness.clone();
        tokio::spawn(async move {
            harness
                .run_turn(TurnRequest::new(attempt(&key, prompt, prompt)))
                .await
        })
    };
    let (a, b) = (
        run(alice.clone(), "from-alice"),
        run(bob.clone(), "from-bob"),
    );
    let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());

    assert_ne!(a.thread_id, b.thread_id);
    assert_eq!(
        host.server.starts(),
        1,
        "both sessions on the host's one app-server"
    );
    assert_eq!(
        model.max_in_flight(),
        2,
        "the two turns ran at the same time"
    );
    // Each session got its own events: its own user item and reply, nothing of the other's.
    for (key, prompt) in [(&alice, "from-alice"), (&bob, "from-bob")] {
        let transcript = host.transcript(key).await;
        assert_eq!(
            roles(&transcript),
            vec![TranscriptRole::User, TranscriptRole::Assistant]
        );
        assert_eq!(transcript[0].content, prompt);
    }
}

/// `Duration::MAX` as an attempt's timeout means "no limit": a turn and a compaction run with
/// it (the deadline is capped, the clock never overflows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_a_timeout_of_duration_max_is_no_limit() {
    let Some((world, model)) = world(vec![
        Step::Reply("No hurry."),
        Step::Reply("Summary: nothing happened."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("no-limit");
    host.create_session(&key).await;
    let mut params = attempt(&key, "run-1", "take your time");
    params.timeout = Some(Duration::MAX);
    let outcome = host
        .harness
        .run_turn(TurnRequest::new(params.clone()))
        .await
        .unwrap();
    assert_eq!(outcome.reply(), Some("No hurry."));
    assert_eq!(outcome.attempt.terminal, AttemptTerminal::Ok);

    params.run_id = tether_core::RunId::new("run-c").unwrap();
    let compacted = host.harness.compact(&params).await.unwrap();
    assert_eq!(compacted, outcome.thread_id);
    assert_eq!(model.requests().len(), 2, "the compaction asked the model");
}

/// A caller that stops waiting for a turn (drops `run_turn`'s future, here through a timeout)
/// cancels it: the session is free again at once (not after the 65 s lease), and Codex's turn
/// was interrupted before the stalled reply arrived, so the model's next request and the host
/// transcript agree that it never answered. A host tool that panics is that tool's failure:
/// the turn goes on and the session stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_a_dropped_turn_is_cancelled_and_frees_its_session() {
    let Some((world, model)) = world(vec![
        Step::Stall(Duration::from_secs(6), "reply to the dropped turn"),
        Step::Reply("The next answer."),
        Step::Calls(vec![("call-1", "lookup", json!({ "q": "x" }))]),
        Step::Reply("After the broken tool."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("dropped-turn");
    host.create_session(&key).await;
    let dropped = tokio::time::timeout(
        Duration::from_secs(2),
        host.harness
            .run_turn(TurnRequest::new(attempt(&key, "run-1", "slow question"))),
    )
    .await;
    assert!(dropped.is_err(), "the caller stopped waiting: {dropped:?}");

    let started = std::time::Instant::now();
    let next = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-2", "next question")))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the next turn waited {:?} for the dropped turn's lease",
        started.elapsed()
    );
    assert_eq!(next.attempt.terminal, AttemptTerminal::Ok);
    assert_eq!(next.attempt.assistant_texts, vec!["The next answer."]);
    let requests = model.requests();
    assert!(
        !mentions(requests.last().unwrap(), "reply to the dropped turn"),
        "the dropped turn's reply reached the model's context"
    );
    let transcript = host.transcript(&key).await;
    assert!(
        transcript
            .iter()
            .all(|e| !e.content.contains("reply to the dropped turn")),
        "{transcript:?}"
    );

    // A host tool that panics.
    host.tools
        .during_next(|| panic!("the lookup service broke"));
    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-3", "look x up")))
        .await
        .unwrap();
    assert_eq!(outcome.tools.len(), 1, "{outcome:?}");
    assert_eq!(outcome.tools[0].outcome, ToolOutcome::Failure);
    assert!(
        outcome.tools[0].execution_started,
        "it ran: its effect is unknown"
    );
    assert!(
        outcome.tools[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("panicked: the lookup service broke")),
        "{:?}",
        outcome.tools[0].error
    );
    assert_eq!(
        outcome.attempt.assistant_texts,
        vec!["After the broken tool."]
    );
}

/// A host tool that declares its call read-only (`ToolRun::read_only`) and fails is no
/// possible side effect: the turn stays replay-safe (a failure classified by name alone would
/// leave it uncertain).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_a_failed_read_only_tool_is_no_side_effect() {
    let Some((world, _model)) = world(vec![
        Step::Calls(vec![("call-1", "lookup", json!({ "q": "missing" }))]),
        Step::Reply("The word is missing."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("read-only-failure");
    host.create_session(&key).await;
    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "read it")))
        .await
        .unwrap();
    assert_eq!(outcome.tools.len(), 1, "{outcome:?}");
    assert_eq!(outcome.tools[0].outcome, ToolOutcome::Failure);
    assert!(outcome.tools[0].execution_started);
    assert!(
        !outcome.tools[0].side_effect_evidence,
        "{:?}",
        outcome.tools[0]
    );
    assert!(outcome.attempt.replay.replay_safe);
    assert!(!outcome.attempt.replay.had_potential_side_effects);
}
