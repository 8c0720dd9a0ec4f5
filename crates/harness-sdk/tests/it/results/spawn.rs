//! Part E: accepted `sessions_spawn` receipts (vectors 97–107).

use serde_json::{Value, json};
use tether_core::{AcceptedSessionSpawn, AttemptResult, AttemptTerminal};
use tether_harness_sdk::results::spawn::{
    AcceptedSessionSpawns, has_accepted_session_spawn, has_completion_message_session_spawn,
    has_uncollected_session_spawn, normalize_accepted_session_spawn_result, read_collected_run_ids,
};

fn base() -> Value {
    json!({"details": {"status": "accepted", "runId": " run-child ",
        "childSessionKey": " agent:claude:subagent:child ", "expectsCompletionMessage": true}})
}

fn spawn(run_id: &str, key: &str) -> AcceptedSessionSpawn {
    AcceptedSessionSpawn {
        run_id: run_id.into(),
        child_session_key: key.into(),
        session_url: None,
        public_read: false,
        label: None,
        expects_completion_message: false,
        collected: false,
    }
}

#[test]
fn tool_results_097_trimmed_receipt() {
    let s = normalize_accepted_session_spawn_result(&base()).expect("accepted");
    assert_eq!(s.run_id, "run-child");
    assert_eq!(s.child_session_key, "agent:claude:subagent:child");
    assert!(s.expects_completion_message);
    assert_eq!(
        (s.session_url, s.label, s.public_read, s.collected),
        (None, None, false, false)
    );
}

#[test]
fn tool_results_098_url_and_label() {
    let mut r = base();
    r["details"]["sessionUrl"] = json!(" https://openclaw.example/chat/main/work ");
    r["details"]["label"] = json!(" Review ");
    let s = normalize_accepted_session_spawn_result(&r).expect("accepted");
    assert_eq!(
        s.session_url.as_deref(),
        Some("https://openclaw.example/chat/main/work")
    );
    assert_eq!(s.label.as_deref(), Some("Review"));
}

#[test]
fn tool_results_099_unsafe_url_and_blank_label_dropped() {
    let mut r = base();
    r["details"]["sessionUrl"] = json!("javascript:alert(1)");
    r["details"]["label"] = json!(" ");
    let s = normalize_accepted_session_spawn_result(&r).expect("accepted");
    assert_eq!((s.session_url, s.label), (None, None));
    r["details"]["sessionUrl"] = json!("https://");
    assert_eq!(
        normalize_accepted_session_spawn_result(&r).and_then(|s| s.session_url),
        None
    );
}

#[test]
fn tool_results_100_status_must_be_exactly_accepted() {
    for status in ["error", "Accepted"] {
        let mut r = base();
        r["details"]["status"] = json!(status);
        assert!(
            normalize_accepted_session_spawn_result(&r).is_none(),
            "{status}"
        );
    }
}

#[test]
fn tool_results_101_ids_required() {
    let mut r = base();
    r["details"]["childSessionKey"] = json!(" ");
    assert!(normalize_accepted_session_spawn_result(&r).is_none());
    let mut r = base();
    r["details"].as_object_mut().map(|d| d.remove("runId"));
    assert!(normalize_accepted_session_spawn_result(&r).is_none());
}

#[test]
fn tool_results_102_expects_completion_only_for_literal_true() {
    let mut r = base();
    r["details"]
        .as_object_mut()
        .map(|d| d.remove("expectsCompletionMessage"));
    assert!(
        !normalize_accepted_session_spawn_result(&r)
            .expect("accepted")
            .expects_completion_message
    );
    r["details"]["expectsCompletionMessage"] = json!("true");
    assert!(
        !normalize_accepted_session_spawn_result(&r)
            .expect("accepted")
            .expects_completion_message
    );
}

#[test]
fn tool_results_103_public_read_only_for_literal_true() {
    let mut r = base();
    r["details"]["publicRead"] = json!("true");
    assert!(
        !normalize_accepted_session_spawn_result(&r)
            .expect("accepted")
            .public_read
    );
    r["details"]["publicRead"] = json!(true);
    assert!(
        normalize_accepted_session_spawn_result(&r)
            .expect("accepted")
            .public_read
    );
}

#[test]
fn tool_results_104_non_record_results() {
    for r in [Value::Null, json!("accepted"), json!({"details": [1, 2]})] {
        assert!(normalize_accepted_session_spawn_result(&r).is_none(), "{r}");
    }
}

#[test]
fn tool_results_105_first_acceptance_immutable_collected_sticky() {
    let mut list = AcceptedSessionSpawns::new();
    let first = AcceptedSessionSpawn {
        label: Some("first".into()),
        ..spawn("run-a", "agent:main:subagent:a")
    };
    list.merge([first.clone()]);
    let other = AcceptedSessionSpawn {
        collected: true,
        ..spawn("run-a", "agent:main:subagent:other")
    };
    let expected = AcceptedSessionSpawn {
        collected: true,
        ..first
    };
    assert_eq!(list.merge([other]), std::slice::from_ref(&expected));
    assert_eq!(
        list.merge([spawn("run-a", "agent:main:subagent:a")]),
        [expected]
    );
}

#[test]
fn tool_results_106_uncollected_counts_completion_owners() {
    let owner = AcceptedSessionSpawn {
        expects_completion_message: true,
        collected: true,
        ..spawn("r", "k")
    };
    assert!(has_uncollected_session_spawn(std::slice::from_ref(&owner)));
    assert!(has_completion_message_session_spawn(&[owner]));
    let collected = AcceptedSessionSpawn {
        collected: true,
        ..spawn("r", "k")
    };
    assert!(!has_uncollected_session_spawn(std::slice::from_ref(
        &collected
    )));
    assert!(has_accepted_session_spawn(&[collected]));
    assert!(!has_accepted_session_spawn(&[]));
}

#[test]
fn tool_results_107_receipts_survive_terminal_phases_and_middleware() {
    let raw = json!({"details": {"status": "accepted", "runId": "child-run",
        "childSessionKey": "agent:main:subagent:child", "expectsCompletionMessage": true}});
    // Middleware rewrites the presented result; the capture used the raw one first.
    let mut list = AcceptedSessionSpawns::new();
    assert!(list.capture("sessions_spawn", &raw).is_some());
    let rewritten = json!({"details": {"status": "ok", "summary": "spawned"}});
    assert!(list.capture("sessions_spawn", &rewritten).is_none());
    assert!(
        list.capture("message", &raw).is_none(),
        "only sessions_spawn results are receipts"
    );
    let expected = [AcceptedSessionSpawn {
        expects_completion_message: true,
        ..spawn("child-run", "agent:main:subagent:child")
    }];
    for terminal in [
        AttemptTerminal::TimedOut,
        AttemptTerminal::Ok,
        AttemptTerminal::Aborted,
    ] {
        let mut result = AttemptResult {
            terminal,
            yield_detected: true,
            ..AttemptResult::default()
        };
        list.apply_to(&mut result);
        assert_eq!(result.accepted_session_spawns, expected);
    }
    // agents_wait collection.
    let wait = json!({"details": {"completed": [{"runId": "child-run", "status": "done"}, {"runId": "x", "status": "running"}]}});
    assert_eq!(read_collected_run_ids(&wait), vec!["child-run".to_owned()]);
    list.mark_collected(&wait);
    assert!(list.as_slice()[0].collected);
}
