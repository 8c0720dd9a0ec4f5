//! Deletion, reset and context reset on the real Codex app-server: the host's SQL transaction
//! (`HostSessions`) with the harness registered, native cleanup after the COMMIT.

use std::sync::Arc;

use serde_json::{Value, json};
use tether_codex::NativeCleanup;
use tether_codex::TurnRequest;
use tether_codex::protocol::method;
use tether_codex::{CodexAppServer, CodexConfig};
use tether_core::{AgentId, LeaseConfig, ResetParams, ResetReason, SessionId};
use tether_harness_sdk::reset::reset_registered_harness_sessions;
use tether_host::TransactionHooks;
use tether_storage::{CutStatus, TranscriptRole};

use crate::host::{AGENT, Host, SESSION_ID, World, attempt, attempt_in, codex_binary, session_key};
use crate::model::{ModelServer, Step, mentions, tool_names};

async fn world(script: Vec<Step>) -> Option<(World, ModelServer)> {
    let binary = codex_binary()?;
    let model = ModelServer::start(script).await;
    Some((World::new(binary, model.base_url()), model))
}

/// `thread/read` of `thread_id` on the host's app-server.
async fn read_thread(host: &Host, thread_id: &str) -> Result<Value, tether_codex::CodexError> {
    host.server
        .client()
        .await
        .unwrap()
        .request_value(
            method::THREAD_READ,
            &json!({ "threadId": thread_id, "includeTurns": false }),
        )
        .await
}

/// The ids of the archived threads Codex lists.
async fn archived_threads(host: &Host) -> Vec<String> {
    host.listed_threads(true).await
}

fn reset_params(key: &tether_core::SessionKey, reason: ResetReason) -> ResetParams {
    ResetParams::new(
        AgentId::new(AGENT).unwrap(),
        SessionId::new(SESSION_ID).unwrap(),
        Some(key.clone()),
        reason,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_deletion_commits_binding_with_session_then_deletes_thread() {
    let Some((world, _model)) = world(vec![Step::Reply("Noted.")]).await else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("delete");
    host.create_session(&key).await;
    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "remember this")))
        .await
        .unwrap();
    let thread = outcome.thread_id.to_string();
    read_thread(&host, &thread)
        .await
        .expect("the bound thread exists before the deletion");

    let deleted = host
        .sessions(TransactionHooks::new())
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap();

    assert_eq!(deleted, vec![key.clone()]);
    // Session row and binding row went together.
    assert!(host.store.session(&key).await.unwrap().is_none());
    assert!(
        host.harness
            .bound_thread(&attempt(&key, "run-1", ""))
            .await
            .unwrap()
            .is_none()
    );
    // After the COMMIT the Codex thread was deleted.
    assert!(
        host.harness
            .pending_native_cleanup()
            .await
            .unwrap()
            .is_empty()
    );
    let read = read_thread(&host, &thread).await;
    assert!(
        read.is_err(),
        "thread/read of a deleted thread must fail: {read:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_deletion_fault_before_commit_rolls_back_and_thread_resumes() {
    let Some((world, model)) = world(vec![
        Step::Reply("The word is kestrel."),
        Step::Reply("You told me kestrel."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("delete-fault");
    host.create_session(&key).await;
    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "remember kestrel")))
        .await
        .unwrap();

    // The host's own write fails inside the SQL transaction, after the harness committed.
    let failed = host
        .sessions(TransactionHooks::new())
        .delete_sessions_with(std::slice::from_ref(&key), |_tx, _deleted| {
            Box::pin(async { Err(tether_core::Error::other("host write failed")) })
        })
        .await;

    assert!(failed.is_err());
    assert!(host.store.session(&key).await.unwrap().is_some());
    // The rollback restored the binding and nothing touched the Codex thread.
    assert_eq!(
        host.harness
            .bound_thread(&attempt(&key, "run-1", ""))
            .await
            .unwrap()
            .as_ref(),
        Some(&first.thread_id)
    );
    assert!(
        host.harness
            .pending_native_cleanup()
            .await
            .unwrap()
            .is_empty()
    );
    let second = host
        .harness
        .run_turn(TurnRequest::new(attempt(
            &key,
            "run-2",
            "what was the word?",
        )))
        .await
        .unwrap();
    assert_eq!(second.thread_id, first.thread_id);
    assert!(second.resumed_thread && !second.started_thread);
    assert_eq!(second.reply(), Some("You told me kestrel."));
    assert!(mentions(&model.requests()[1], "remember kestrel"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_deletion_fault_after_commit_never_resurrects() {
    let Some((world, model)) = world(vec![Step::Reply("Stored.")]).await else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("delete-late-fault");
    host.create_session(&key).await;
    let outcome = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "store it")))
        .await
        .unwrap();
    let thread = outcome.thread_id.to_string();

    // The publication step after COMMIT fails: the caller sees the error, nothing rolls back.
    let hooks = TransactionHooks::new()
        .after_commit(|| Err(tether_core::Error::other("publication failed")));
    let result = host
        .sessions(hooks)
        .delete_sessions(std::slice::from_ref(&key))
        .await;
    assert!(result.is_err(), "the after-commit fault reaches the caller");

    assert!(host.store.session(&key).await.unwrap().is_none());
    assert!(
        host.harness
            .bound_thread(&attempt(&key, "run-1", ""))
            .await
            .unwrap()
            .is_none()
    );
    // The committed deletion still cleaned the thread up; nothing is restored by a retry.
    assert!(read_thread(&host, &thread).await.is_err());
    assert_eq!(host.harness.retry_native_cleanup().await.unwrap(), 0);
    assert!(
        host.harness
            .bound_thread(&attempt(&key, "run-1", ""))
            .await
            .unwrap()
            .is_none()
    );
    // A turn for the deleted session is refused before any model request: the old
    // generation binds nothing again.
    let revived = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-2", "are you there?")))
        .await;
    assert!(
        matches!(
            &revived,
            Err(tether_codex::CodexError::Lifecycle(
                tether_core::Error::Host {
                    kind: tether_core::HostErrorKind::SessionNotFound { .. }
                }
            ))
        ),
        "{revived:?}"
    );
    // Nothing was started for it either: no thread bound, and no request on its way to the
    // model (a turn started in Codex reaches the model shortly after; give it the time).
    assert!(
        host.harness
            .bound_thread(&attempt(&key, "run-2", ""))
            .await
            .unwrap()
            .is_none()
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        1,
        "a later request reached the model: {:?}",
        requests.get(1).map(|r| r["input"].to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_deletion_cleanup_refused_elsewhere_is_kept_for_retry() {
    let Some((world, _model)) = world(vec![Step::Reply("Held.")]).await else {
        return;
    };
    let key = session_key("delete-held");
    // Host A ran the thread on its shared app-server, which still writes it.
    let host_a = world.host("host-a", LeaseConfig::default()).await;
    host_a.create_session(&key).await;
    let outcome = host_a
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "hold it")))
        .await
        .unwrap();
    let thread = outcome.thread_id.to_string();

    // Host B (another process) deletes the session while A's app-server still holds the thread.
    let host_b = world.host("host-b", LeaseConfig::default()).await;
    let deleted = host_b
        .sessions(TransactionHooks::new())
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap();
    assert_eq!(deleted, vec![key.clone()]);
    assert!(host_b.store.session(&key).await.unwrap().is_none());

    // Codex refused the delete (A's process is the thread's writer): the cleanup is logged
    // and kept, the deletion stays committed.
    let pending = host_b.harness.pending_native_cleanup().await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].thread_id, thread);
    assert_eq!(pending[0].action, NativeCleanup::Delete);
    assert!(
        pending[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("another app-server process")),
        "{pending:?}"
    );
    // A retry while A still holds it fails again and keeps it.
    assert_eq!(host_b.harness.retry_native_cleanup().await.unwrap(), 1);

    // Host B restarts: the due cleanup is in the shared store, not in B's memory, so the new
    // harness instance finds it.
    host_b.server.shutdown().await;
    drop(host_b);
    let host_b = world.host("host-b-restarted", LeaseConfig::default()).await;
    let pending = host_b.harness.pending_native_cleanup().await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].thread_id, thread);
    // Once A's process is gone the new instance's retry deletes it; the binding never came
    // back.
    host_a.server.shutdown().await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(host_b.harness.retry_native_cleanup().await.unwrap(), 0);
    assert!(
        host_b
            .harness
            .pending_native_cleanup()
            .await
            .unwrap()
            .is_empty()
    );
    assert!(read_thread(&host_b, &thread).await.is_err());
    assert!(
        host_b
            .harness
            .bound_thread(&attempt(&key, "run-1", ""))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_reset_starts_a_fresh_thread_and_archives_the_old_one() {
    let Some((world, model)) = world(vec![
        Step::Reply("The code is 4711."),
        Step::Reply("I have no code."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("reset");
    host.create_session(&key).await;
    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "the code is 4711")))
        .await
        .unwrap();

    let registry = host.registry();
    let report =
        reset_registered_harness_sessions(&[&registry], &reset_params(&key, ResetReason::New))
            .await;
    assert_eq!(report.failures().count(), 0, "{:?}", report.outcomes());
    assert!(
        host.harness
            .bound_thread(&attempt(&key, "run-1", ""))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        archived_threads(&host)
            .await
            .contains(&first.thread_id.to_string())
    );

    let second = host
        .harness
        .run_turn(TurnRequest::new(attempt(
            &key,
            "run-2",
            "what is the code?",
        )))
        .await
        .unwrap();
    assert!(second.started_thread && !second.resumed_thread);
    assert_ne!(second.thread_id, first.thread_id);
    // The fresh thread carried nothing of the retired one to the model.
    let requests = model.requests();
    // A phrase, not the bare number: a request also carries ids and times in digits and hex.
    assert!(!mentions(&requests[1], "code is 4711"));
    assert!(mentions(&requests[1], "what is the code?"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_failing_reset_hook_is_logged_once_and_runs_again() {
    let Some((world, _model)) = world(vec![Step::Reply("One."), Step::Reply("Two.")]).await else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let keys = [session_key("reset-fails-1"), session_key("reset-fails-2")];
    let mut threads = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        host.create_session(key).await;
        let outcome = host
            .harness
            .run_turn(TurnRequest::new(attempt(key, &format!("run-{i}"), "hi")))
            .await
            .unwrap();
        threads.push(outcome.thread_id.to_string());
    }

    // Another host process whose Codex cannot start: its reset clears the binding but cannot
    // archive the retired thread, so the hook fails.
    let broken_server = Arc::new(CodexAppServer::new(CodexConfig::new(
        world.dir.path().join("no-such-codex"),
        world.codex_home(),
    )));
    let broken = tether_codex::CodexHarness::builder(
        broken_server,
        Arc::new(host.store.clone()),
        Arc::new(host.store.clone()),
        Arc::new(host.transcript.clone()),
    )
    .holder("host-b")
    .build()
    .await
    .unwrap();
    let registry = tether_core::HarnessRegistry::new();
    registry.register(Arc::new(broken.clone()));

    let first = reset_registered_harness_sessions(
        &[&registry],
        &reset_params(&keys[0], ResetReason::Reset),
    )
    .await;
    let failed: Vec<_> = first.failures().collect();
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].logged,
        "the first failure of the harness is logged"
    );
    assert!(
        failed[0]
            .error
            .as_ref()
            .unwrap()
            .to_string()
            .contains(&threads[0])
    );

    // The hook runs again on the next reset, fails again, and is not logged again.
    let second = reset_registered_harness_sessions(
        &[&registry],
        &reset_params(&keys[1], ResetReason::Reset),
    )
    .await;
    let failed: Vec<_> = second.failures().collect();
    assert_eq!(failed.len(), 1, "the hook ran and failed again");
    assert!(
        !failed[0].logged,
        "a harness's failure is logged once per process"
    );
    // Both bindings were retired; both archives wait for a retry.
    for key in &keys {
        assert!(
            host.harness
                .bound_thread(&attempt(key, "run-x", ""))
                .await
                .unwrap()
                .is_none()
        );
    }
    let pending: Vec<_> = broken
        .pending_native_cleanup()
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.thread_id, p.action))
        .collect();
    assert_eq!(pending.len(), 2);
    for thread in &threads {
        assert!(pending.contains(&(thread.clone(), NativeCleanup::Archive)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_rewind_invalidates_binding_and_next_turn_lacks_cut_turns() {
    let Some((world, model)) = world(vec![
        Step::Reply("First answer."),
        Step::Reply("The password is swordfish."),
        Step::Reply("Fresh answer."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("rewind");
    host.create_session(&key).await;
    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "first question")))
        .await
        .unwrap();
    host.harness
        .run_turn(TurnRequest::new(attempt(
            &key,
            "run-2",
            "tell me the password",
        )))
        .await
        .unwrap();
    let transcript = host.transcript(&key).await;
    assert_eq!(transcript.len(), 4);
    assert_eq!(transcript[2].role, TranscriptRole::User);

    // Rewind to just before the second user message, moving to generation gen-2.
    let status = host
        .sessions(TransactionHooks::new())
        .rewind(&key, transcript[2].anchor, SessionId::new("gen-2").unwrap())
        .await
        .unwrap();
    assert_eq!(status, CutStatus::Created);
    assert!(
        host.harness
            .bound_thread(&attempt(&key, "run-3", ""))
            .await
            .unwrap()
            .is_none(),
        "the old generation's binding was invalidated"
    );
    assert!(
        archived_threads(&host)
            .await
            .contains(&first.thread_id.to_string())
    );

    let third = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(
            &key,
            "gen-2",
            "run-3",
            "another question",
        )))
        .await
        .unwrap();
    // The next turn runs on a fork of the old thread through the kept turn.
    assert!(third.started_thread);
    assert_ne!(third.thread_id, first.thread_id);
    assert_eq!(third.continued_from.as_ref(), Some(&first.thread_id));
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    // The model sees the kept turn, not the cut one, and still gets the host's tools.
    assert!(mentions(&requests[2], "first question"));
    assert!(mentions(&requests[2], "First answer."));
    assert!(!mentions(&requests[2], "swordfish"));
    assert!(!mentions(&requests[2], "tell me the password"));
    assert!(mentions(&requests[2], "another question"));
    assert_eq!(tool_names(&requests[2]), tool_names(&requests[0]));
    assert!(mentions(&requests[2], "Looks a word up."));
    // The session continues on the fork: the next turn resumes it.
    assert_eq!(
        host.harness
            .bound_thread(&attempt_in(&key, "gen-2", "run-4", ""))
            .await
            .unwrap(),
        Some(third.thread_id.clone())
    );
}

/// Rows of the context-reset continuation namespace.
async fn continuations(host: &Host) -> u64 {
    host.rows(tether_codex::CONTINUATION_NAMESPACE).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_reset_or_deletion_after_a_rewind_drops_the_continuation() {
    let Some((world, model)) = world(vec![
        Step::Reply("First answer."),
        Step::Reply("Second answer."),
        Step::Reply("Fresh answer."),
        Step::Reply("Solo answer."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("rewind-then-reset");
    host.create_session(&key).await;
    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "first question")))
        .await
        .unwrap();
    host.harness
        .run_turn(TurnRequest::new(attempt(&key, "run-2", "second question")))
        .await
        .unwrap();
    let transcript = host.transcript(&key).await;
    host.sessions(TransactionHooks::new())
        .rewind(&key, transcript[2].anchor, SessionId::new("gen-2").unwrap())
        .await
        .unwrap();
    assert_eq!(
        continuations(&host).await,
        1,
        "the rewind left a continuation"
    );

    // A reset means a fresh start: the continuation goes, the next turn runs on a new thread.
    let registry = host.registry();
    let report = reset_registered_harness_sessions(
        &[&registry],
        &ResetParams::new(
            AgentId::new(AGENT).unwrap(),
            SessionId::new("gen-2").unwrap(),
            Some(key.clone()),
            ResetReason::Reset,
        ),
    )
    .await;
    assert_eq!(report.failures().count(), 0);
    assert_eq!(continuations(&host).await, 0);
    let next = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(
            &key,
            "gen-2",
            "run-3",
            "after reset",
        )))
        .await
        .unwrap();
    assert!(next.started_thread);
    assert_eq!(next.continued_from, None);
    assert_ne!(next.thread_id, first.thread_id);
    assert!(!mentions(&model.requests()[2], "first question"));

    // A deletion after a rewind (no turn in between, so no binding to release) also drops it.
    let other = session_key("rewind-then-delete");
    host.create_session(&other).await;
    host.harness
        .run_turn(TurnRequest::new(attempt(&other, "run-4", "solo question")))
        .await
        .unwrap();
    let transcript = host.transcript(&other).await;
    host.sessions(TransactionHooks::new())
        .rewind(
            &other,
            transcript[0].anchor,
            SessionId::new("gen-2").unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(continuations(&host).await, 1);
    host.sessions(TransactionHooks::new())
        .delete_sessions(std::slice::from_ref(&other))
        .await
        .unwrap();
    assert_eq!(continuations(&host).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_compaction_keeps_binding_and_thread() {
    let Some((world, model)) = world(vec![
        Step::Reply("The colour is teal."),
        Step::Reply("Summary: the user said the colour is teal."),
        Step::Reply("You said teal."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("compact");
    host.create_session(&key).await;
    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(
            &key,
            "run-1",
            "the colour is teal",
        )))
        .await
        .unwrap();

    // Codex compacts the thread's history in place (a compaction turn on the same thread).
    let compacted = host
        .harness
        .compact(&attempt(&key, "run-c", ""))
        .await
        .unwrap();
    assert_eq!(compacted, first.thread_id);
    assert_eq!(
        model.requests().len(),
        2,
        "the compaction asked the model once"
    );
    assert!(mentions(&model.requests()[1], "the colour is teal"));

    // The host compacts: the physical session id changes under the same key (a transfer).
    let rotated = host
        .store
        .rotate_generation(
            &key,
            &SessionId::new(SESSION_ID).unwrap(),
            SessionId::new("gen-2").unwrap(),
        )
        .await
        .unwrap();
    assert!(rotated.is_some());

    let second = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(
            &key,
            "gen-2",
            "run-2",
            "which colour?",
        )))
        .await
        .unwrap();
    // The same Codex thread continues, with its history; nothing was archived.
    assert_eq!(second.thread_id, first.thread_id);
    assert!(second.resumed_thread && !second.started_thread);
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert!(mentions(&requests[2], "the colour is teal"));
    assert!(mentions(&requests[2], "which colour?"));
    assert!(
        !archived_threads(&host)
            .await
            .contains(&first.thread_id.to_string())
    );
    assert_eq!(
        host.harness
            .bound_thread(&attempt_in(&key, "gen-2", "run-3", ""))
            .await
            .unwrap()
            .as_ref(),
        Some(&first.thread_id)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_deletion_with_process_per_turn_cleans_up_on_its_own_process() {
    let Some((world, _model)) = world(vec![Step::Reply("Per turn.")]).await else {
        return;
    };
    // Two host processes that share sessions: each turn's app-server exits before the lease is
    // released, so the host that deletes can write the thread.
    let key = session_key("delete-per-turn");
    let host_a = world
        .host_with("host-a", LeaseConfig::default(), true)
        .await;
    host_a.create_session(&key).await;
    let outcome = host_a
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "hello")))
        .await
        .unwrap();
    let thread = outcome.thread_id.to_string();
    let host_b = world
        .host_with("host-b", LeaseConfig::default(), true)
        .await;
    let starts_before = host_b.server.starts();

    let deleted = host_b
        .sessions(TransactionHooks::new())
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap();

    assert_eq!(deleted, vec![key.clone()]);
    assert!(
        host_b
            .harness
            .pending_native_cleanup()
            .await
            .unwrap()
            .is_empty()
    );
    // The cleanup ran on a process of its own, started for it.
    assert_eq!(host_b.server.starts(), starts_before + 1);
    assert!(read_thread(&host_b, &thread).await.is_err());
    assert!(host_b.store.session(&key).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_rewind_retires_a_binding_compaction_had_not_transferred() {
    let Some((world, model)) = world(vec![
        Step::Reply("First."),
        Step::Reply("The token is 9931."),
        Step::Reply("Fresh."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("rewind-after-compaction");
    host.create_session(&key).await;
    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "first")))
        .await
        .unwrap();
    host.harness
        .run_turn(TurnRequest::new(attempt(&key, "run-2", "the token please")))
        .await
        .unwrap();
    // The host compacts to gen-2; no turn ran since, so gen-1 still owns the binding row.
    host.store
        .rotate_generation(
            &key,
            &SessionId::new(SESSION_ID).unwrap(),
            SessionId::new("gen-2").unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    let transcript = host.transcript(&key).await;
    let status = host
        .sessions(TransactionHooks::new())
        .rewind(&key, transcript[2].anchor, SessionId::new("gen-3").unwrap())
        .await
        .unwrap();
    assert_eq!(status, CutStatus::Created);
    // The predecessor's binding was retired by the context reset (not adopted), and its
    // thread archived after the COMMIT.
    for generation in [SESSION_ID, "gen-2", "gen-3"] {
        assert!(
            host.harness
                .bound_thread(&attempt_in(&key, generation, "run-x", ""))
                .await
                .unwrap()
                .is_none(),
            "{generation} still bound"
        );
    }
    assert!(
        archived_threads(&host)
            .await
            .contains(&first.thread_id.to_string())
    );
    let next = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(
            &key, "gen-3", "run-3", "again",
        )))
        .await
        .unwrap();
    assert!(next.started_thread);
    assert_ne!(next.thread_id, first.thread_id);
    // The cut answer is looked for as a phrase, not as the bare number: every request carries
    // ids and times in digits and hex (UUIDs, `turn_started_at_unix_ms`), where four given
    // digits turn up now and then; the bare number failed this test once in CI. The message
    // says which requests mention the phrase and where the turn ran.
    let requests = model.requests();
    assert!(
        !mentions(&requests[2], "token is 9931"),
        "{} requests, mentioning the cut answer: {:?}; continued from {:?}; input of the third: {}",
        requests.len(),
        requests
            .iter()
            .enumerate()
            .filter(|(_, r)| mentions(r, "token is 9931"))
            .map(|(i, _)| i)
            .collect::<Vec<_>>(),
        next.continued_from,
        requests[2]["input"]
    );
}

/// A turn that still carries the generation a rewind superseded, with no host authority of its
/// own (`TurnRequest::new`), is refused as `SupersededGeneration` under the session's lease:
/// it binds no thread for either generation and sends nothing to the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_a_late_turn_of_a_superseded_generation_binds_nothing() {
    let Some((world, model)) = world(vec![
        Step::Reply("First answer."),
        Step::Reply("A late answer."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("late-generation");
    host.create_session(&key).await;
    host.harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "first question")))
        .await
        .unwrap();
    let transcript = host.transcript(&key).await;
    // The host moves the session to generation gen-2 (a rewind to the first user message).
    let status = host
        .sessions(TransactionHooks::new())
        .rewind(&key, transcript[0].anchor, SessionId::new("gen-2").unwrap())
        .await
        .unwrap();
    assert_eq!(status, CutStatus::Created);

    // A turn still carrying gen-1 (queued before the rewind, no authority of its own) is
    // refused before Codex is asked for anything.
    let late = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-late", "late question")))
        .await;
    assert!(
        matches!(
            &late,
            Err(tether_codex::CodexError::Lifecycle(
                tether_core::Error::SupersededGeneration { .. }
            ))
        ),
        "{late:?}"
    );
    assert!(
        host.harness
            .bound_thread(&attempt(&key, "run-late", ""))
            .await
            .unwrap()
            .is_none(),
        "the late turn bound nothing for gen-1"
    );
    assert!(
        host.harness
            .bound_thread(&attempt_in(&key, "gen-2", "run-2", ""))
            .await
            .unwrap()
            .is_none(),
        "nor for gen-2"
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(model.requests().len(), 1, "the late turn reached the model");
}

/// `/new` after the host moved the session to a new id (a compaction's transfer), with the
/// reset carrying the new id: the reset clears the binding the recorded predecessor still owns,
/// and its Codex thread is archived like the generation's own (never left unarchived and
/// untracked); the next turn starts a fresh thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_a_reset_after_a_rotation_archives_the_predecessors_thread() {
    let Some((world, _model)) = world(vec![
        Step::Reply("The colour is teal."),
        Step::Reply("A fresh start."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("rotate-then-reset");
    host.create_session(&key).await;
    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "remember teal")))
        .await
        .unwrap();
    // The host's reset: the session moves to gen-2, then every harness is told.
    let now = host
        .sessions(TransactionHooks::new())
        .reset(&key, SessionId::new("gen-2").unwrap(), ResetReason::New)
        .await
        .unwrap();
    assert_eq!(now.session_id.as_str(), "gen-2");
    assert!(
        archived_threads(&host)
            .await
            .contains(&first.thread_id.to_string()),
        "the predecessor's thread was archived"
    );
    assert!(
        host.harness
            .pending_native_cleanup()
            .await
            .unwrap()
            .is_empty()
    );

    let next = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(
            &key, "gen-2", "run-2", "hello",
        )))
        .await
        .unwrap();
    assert!(next.started_thread);
    assert_ne!(next.thread_id, first.thread_id);
}

/// The threads a reset and a rewind archived keep the session's earlier conversation: a
/// deletion of the session deletes them with the bound one, and leaves no record behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_deletion_deletes_the_threads_resets_archived() {
    let Some((world, _model)) = world(vec![
        Step::Reply("Before the reset."),
        Step::Reply("After the reset."),
        Step::Reply("Second question answered."),
        Step::Reply("On the fork."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("delete-archived");
    host.create_session(&key).await;
    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-1", "one")))
        .await
        .unwrap();
    // `/reset`: the first thread is archived, the next turn starts a second one.
    let registry = host.registry();
    let report =
        reset_registered_harness_sessions(&[&registry], &reset_params(&key, ResetReason::Reset))
            .await;
    assert_eq!(report.failures().count(), 0, "{:?}", report.outcomes());
    let second = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-2", "two")))
        .await
        .unwrap();
    host.harness
        .run_turn(TurnRequest::new(attempt(&key, "run-3", "three")))
        .await
        .unwrap();
    // A rewind to the second turn's answer: the second thread is archived, the session
    // continues on a fork of it.
    let transcript = host.transcript(&key).await;
    assert_eq!(transcript.len(), 6, "{transcript:?}");
    let status = host
        .sessions(TransactionHooks::new())
        .rewind(&key, transcript[4].anchor, SessionId::new("gen-2").unwrap())
        .await
        .unwrap();
    assert_eq!(status, CutStatus::Created);
    let forked = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(&key, "gen-2", "run-4", "four")))
        .await
        .unwrap();
    assert_eq!(forked.continued_from.as_ref(), Some(&second.thread_id));
    let archived = archived_threads(&host).await;
    for thread in [&first.thread_id, &second.thread_id] {
        assert!(archived.contains(&thread.to_string()), "{thread} archived");
    }
    assert_eq!(archives(&host).await, 1, "one list for the session");

    host.sessions(TransactionHooks::new())
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap();
    for thread in [&first.thread_id, &second.thread_id, &forked.thread_id] {
        assert!(
            read_thread(&host, &thread.to_string()).await.is_err(),
            "{thread} deleted"
        );
    }
    let archived = archived_threads(&host).await;
    assert!(
        !archived.contains(&first.thread_id.to_string())
            && !archived.contains(&second.thread_id.to_string()),
        "{archived:?}"
    );
    assert_eq!(archives(&host).await, 0, "the list went with the session");
    assert!(
        host.harness
            .pending_native_cleanup()
            .await
            .unwrap()
            .is_empty()
    );
}

/// Rows of the archived-threads namespace.
async fn archives(host: &Host) -> u64 {
    host.rows(tether_codex::ARCHIVE_NAMESPACE).await
}

/// A `/new` whose notification never ran — the host committed the reset, then its process died
/// before telling the harnesses: the next turn reads from the session row that the generation
/// began with a reset, so it neither resumes the predecessor's bound thread nor (after a
/// rewind that left a continuation) continues the kept turns on a fork. It starts a fresh
/// thread, the model sees nothing of the earlier conversation, and the thread the reset left
/// is archived as the notification would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_a_reset_without_its_notification_starts_a_fresh_thread() {
    let Some((world, model)) = world(vec![
        Step::Reply("Noted: the token is 9931."),
        Step::Reply("Second answer."),
        Step::Reply("A fresh start."),
        Step::Reply("Noted: the code is 4711."),
        Step::Reply("Another fresh start."),
        Step::Reply("Still on the fresh thread."),
        Step::Reply("Noted: the secret is 2718."),
        Step::Reply("A later answer."),
        Step::Reply("After the rewind."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("reset-not-notified");
    host.create_session(&key).await;
    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(
            &key,
            "run-1",
            "remember: the token is 9931",
        )))
        .await
        .unwrap();
    host.harness
        .run_turn(TurnRequest::new(attempt(&key, "run-2", "second question")))
        .await
        .unwrap();
    let transcript = host.transcript(&key).await;
    host.sessions(TransactionHooks::new())
        .rewind(&key, transcript[2].anchor, SessionId::new("gen-2").unwrap())
        .await
        .unwrap();
    assert_eq!(
        continuations(&host).await,
        1,
        "the rewind left a continuation"
    );

    // The reset's transaction, committed; no harness is told.
    host.reset_unnotified(&key, "gen-3").await;

    let next = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(
            &key,
            "gen-3",
            "run-3",
            "hello again",
        )))
        .await
        .unwrap();
    assert!(next.started_thread, "{next:?}");
    assert_eq!(
        next.continued_from, None,
        "the kept turns are not continued"
    );
    assert_ne!(next.thread_id, first.thread_id);
    let requests = model.requests();
    let last = requests.last().unwrap();
    assert!(
        !mentions(last, "token is 9931"),
        "the reset context came back"
    );
    assert_eq!(
        continuations(&host).await,
        0,
        "the continuation was dropped"
    );

    // Without a rewind before it: the binding the predecessor left is not resumed.
    let other = session_key("reset-not-notified-bound");
    host.create_session(&other).await;
    let bound = host
        .harness
        .run_turn(TurnRequest::new(attempt(
            &other,
            "run-4",
            "remember: the code is 4711",
        )))
        .await
        .unwrap();
    host.reset_unnotified(&other, "gen-2").await;
    let fresh = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(
            &other,
            "gen-2",
            "run-5",
            "hello there",
        )))
        .await
        .unwrap();
    assert!(fresh.started_thread, "{fresh:?}");
    assert_ne!(fresh.thread_id, bound.thread_id);
    let requests = model.requests();
    assert!(
        !mentions(requests.last().unwrap(), "code is 4711"),
        "the reset context came back"
    );
    // The turn archived the thread the reset left, as the notification would have, and
    // listed it for the session (its deletion deletes it).
    assert!(
        archived_threads(&host)
            .await
            .contains(&bound.thread_id.to_string()),
        "the old thread was archived"
    );
    assert!(
        host.harness
            .pending_native_cleanup()
            .await
            .unwrap()
            .is_empty()
    );
    // The reset's notification comes late (another process's slow fan-out, or the host sending
    // it again after a restart): the thread the new generation's first turn bound is kept,
    // and the next turn resumes it.
    let entry = host.store.session(&other).await.unwrap().unwrap();
    let registry = host.registry();
    let report = reset_registered_harness_sessions(
        &[&registry],
        &ResetParams::of_entry(&entry, ResetReason::New),
    )
    .await;
    assert_eq!(report.failures().count(), 0);
    let resumed = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(
            &other,
            "gen-2",
            "run-5b",
            "still there?",
        )))
        .await
        .unwrap();
    assert!(!resumed.started_thread, "{resumed:?}");
    assert_eq!(resumed.thread_id, fresh.thread_id);
    assert!(
        !archived_threads(&host)
            .await
            .contains(&fresh.thread_id.to_string()),
        "the new generation's thread was archived"
    );

    // A rewind after the unnotified reset, before any turn: the binding it releases is the
    // predecessor's, whose context the reset ended, so no continuation forks its kept turns.
    let third = session_key("reset-not-notified-rewound");
    host.create_session(&third).await;
    for (run, prompt) in [
        ("run-6", "remember: the secret is 2718"),
        ("run-7", "a later question"),
    ] {
        host.harness
            .run_turn(TurnRequest::new(attempt(&third, run, prompt)))
            .await
            .unwrap();
    }
    host.reset_unnotified(&third, "gen-2").await;
    let transcript = host.transcript(&third).await;
    host.sessions(TransactionHooks::new())
        .rewind(
            &third,
            transcript[2].anchor,
            SessionId::new("gen-3").unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        continuations(&host).await,
        0,
        "no continuation of the pre-reset thread"
    );
    let after = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(
            &third, "gen-3", "run-8", "what now",
        )))
        .await
        .unwrap();
    assert!(after.started_thread, "{after:?}");
    assert_eq!(after.continued_from, None);
    assert!(
        !mentions(model.requests().last().unwrap(), "secret is 2718"),
        "the reset context came back through a fork"
    );
}

/// The ids of the threads Codex lists that are not archived.
async fn live_threads(host: &Host) -> Vec<String> {
    host.listed_threads(false).await
}

/// The script of [`fork_chain`].
fn fork_chain_script() -> Vec<Step> {
    vec![
        Step::Reply("First answer."),
        Step::Reply("Second answer."),
        Step::Reply("On the first fork."),
        Step::Reply("Still on the first fork."),
        Step::Reply("On the second fork."),
    ]
}

/// Two rewinds in a row on `host`'s session `key` (created here): the first thread, its fork
/// (archived by the second rewind, the first thread by the first one) and the fork of that
/// fork, bound in `gen-3`. Returns the three threads, oldest first.
async fn fork_chain(host: &Host, key: &tether_core::SessionKey) -> [tether_codex::ThreadId; 3] {
    host.create_session(key).await;
    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(key, "run-1", "one")))
        .await
        .unwrap();
    host.harness
        .run_turn(TurnRequest::new(attempt(key, "run-2", "two")))
        .await
        .unwrap();
    // Rewind to before the second question: the next turn forks the first thread.
    let transcript = host.transcript(key).await;
    assert_eq!(transcript.len(), 4, "{transcript:?}");
    host.sessions(TransactionHooks::new())
        .rewind(key, transcript[2].anchor, SessionId::new("gen-2").unwrap())
        .await
        .unwrap();
    let second = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(key, "gen-2", "run-3", "three")))
        .await
        .unwrap();
    assert_eq!(second.continued_from.as_ref(), Some(&first.thread_id));
    host.harness
        .run_turn(TurnRequest::new(attempt_in(key, "gen-2", "run-4", "four")))
        .await
        .unwrap();
    // Rewind again, to before the fourth question: the path keeps the third turn, mirrored
    // from the fork, so the next turn forks the fork.
    let transcript = host.transcript(key).await;
    assert_eq!(transcript.len(), 6, "{transcript:?}");
    host.sessions(TransactionHooks::new())
        .rewind(key, transcript[4].anchor, SessionId::new("gen-3").unwrap())
        .await
        .unwrap();
    let third = host
        .harness
        .run_turn(TurnRequest::new(attempt_in(key, "gen-3", "run-5", "five")))
        .await
        .unwrap();
    assert_eq!(third.continued_from.as_ref(), Some(&second.thread_id));
    let archived = archived_threads(host).await;
    for thread in [&first.thread_id, &second.thread_id] {
        assert!(archived.contains(&thread.to_string()), "{thread} archived");
    }

    [first.thread_id, second.thread_id, third.thread_id]
}

/// Two rewinds in a row make a chain of forks: the first thread, its fork (archived by the
/// second rewind) and the fork of that fork (bound). Codex refuses to delete a thread whose
/// history a fork still references, so one deletion of the session must delete the newest
/// first (the bound thread, then the archived ones newest first, a refused one again once
/// the rest are gone) and leave neither a thread, archived or not, nor a pending cleanup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_deletion_after_two_rewinds_deletes_the_whole_fork_chain() {
    let Some((world, _model)) = world(fork_chain_script()).await else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("delete-fork-chain");
    let chain = fork_chain(&host, &key).await;

    host.sessions(TransactionHooks::new())
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap();

    // Nothing is left behind by this one deletion: no thread, no cleanup waiting for a retry.
    assert_eq!(
        host.harness.pending_native_cleanup().await.unwrap(),
        vec![],
        "every thread of the chain was deleted by the deletion itself"
    );
    assert_eq!(archived_threads(&host).await, Vec::<String>::new());
    assert_eq!(live_threads(&host).await, Vec::<String>::new());
    for thread in &chain {
        assert!(
            read_thread(&host, thread.as_str()).await.is_err(),
            "{thread} deleted"
        );
    }
    assert_eq!(archives(&host).await, 0, "the list went with the session");
}

/// The same chain deleted by another host process while the first one's app-server still
/// writes the bound fork: every deletion is refused (the fork's writer is elsewhere, and the
/// older threads are still referenced by it) and kept. Once the writer is gone, one retry
/// deletes the whole chain, though it meets the oldest thread first: a deletion refused
/// because a fork still references the thread runs again after the fork went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_one_retry_deletes_a_fork_chain_refused_elsewhere() {
    let Some((world, _model)) = world(fork_chain_script()).await else {
        return;
    };
    let host_a = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("retry-fork-chain");
    let chain = fork_chain(&host_a, &key).await;

    let host_b = world.host("host-b", LeaseConfig::default()).await;
    host_b
        .sessions(TransactionHooks::new())
        .delete_sessions(std::slice::from_ref(&key))
        .await
        .unwrap();
    let mut pending: Vec<String> = host_b
        .harness
        .pending_native_cleanup()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.thread_id)
        .collect();
    pending.sort();
    let mut expected: Vec<String> = chain.iter().map(ToString::to_string).collect();
    expected.sort();
    assert_eq!(pending, expected, "the whole chain is due");
    // Thread ids are time-ordered: the retry, in thread-id order, meets the oldest first.
    assert_eq!(pending[0], chain[0].to_string());

    host_a.server.shutdown().await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(host_b.harness.retry_native_cleanup().await.unwrap(), 0);
    assert!(
        host_b
            .harness
            .pending_native_cleanup()
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(archived_threads(&host_b).await, Vec::<String>::new());
    assert_eq!(live_threads(&host_b).await, Vec::<String>::new());
}

/// A session bound to a thread Codex no longer has (deleted behind the host's back, or the
/// app-server now runs over another `CODEX_HOME`): `thread/resume` answers "no rollout found".
/// The next turn clears the stale binding and runs on a new thread, saying so
/// (`lost_thread`), instead of failing every turn; the turn after it resumes the new thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_e2e_a_bound_thread_codex_lost_is_replaced_by_a_new_one() {
    let Some((world, model)) = world(vec![
        Step::Reply("The code is 4711."),
        Step::Reply("I have no memory of a code."),
        Step::Reply("Still here."),
    ])
    .await
    else {
        return;
    };
    let host = world.host("host-a", LeaseConfig::default()).await;
    let key = session_key("lost-thread");
    host.create_session(&key).await;
    let first = host
        .harness
        .run_turn(TurnRequest::new(attempt(
            &key,
            "run-1",
            "remember the code",
        )))
        .await
        .unwrap();
    assert_eq!(first.lost_thread, None);
    // Codex loses the thread; the binding still names it.
    let client = host.server.client().await.unwrap();
    let thread = json!({ "threadId": first.thread_id.as_str() });
    let _ = client
        .request_value(method::THREAD_UNSUBSCRIBE, &thread)
        .await;
    client
        .request_value(method::THREAD_DELETE, &thread)
        .await
        .unwrap();
    assert!(read_thread(&host, first.thread_id.as_str()).await.is_err());

    let second = host
        .harness
        .run_turn(TurnRequest::new(attempt(
            &key,
            "run-2",
            "what was the code?",
        )))
        .await
        .expect("a lost thread is replaced, not a failure of every turn");
    assert!(second.started_thread);
    assert!(!second.resumed_thread);
    assert_ne!(second.thread_id, first.thread_id);
    assert_eq!(second.lost_thread.as_ref(), Some(&first.thread_id));
    assert_eq!(second.reply(), Some("I have no memory of a code."));
    // The new thread carries nothing of the lost one.
    assert!(!mentions(&model.requests()[1], "remember the code"));
    assert_eq!(
        host.harness
            .bound_thread(&attempt(&key, "run-3", ""))
            .await
            .unwrap(),
        Some(second.thread_id.clone())
    );

    let third = host
        .harness
        .run_turn(TurnRequest::new(attempt(&key, "run-3", "still there?")))
        .await
        .unwrap();
    assert!(third.resumed_thread);
    assert_eq!(third.thread_id, second.thread_id);
    assert_eq!(third.lost_thread, None);
    // The host transcript kept every turn, the lost thread's included.
    assert_eq!(host.transcript(&key).await.len(), 6);
}
