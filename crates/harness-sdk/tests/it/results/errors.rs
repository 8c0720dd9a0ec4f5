//! The tool-result error rule on results that are not in the runtime's `{content, details}`
//! shape: a plain object a host records for a tool is read as its own `details`, so a failure is
//! never taken for a success (and an accumulator fed from the rule keeps the error).

use serde_json::json;
use tether_harness_sdk::results::errors::{
    ToolResultFailureKind, extract_tool_error_message, is_tool_result_error,
    is_tool_result_timed_out, tool_result_failure_kind,
};

#[test]
fn tool_result_errors_a_plain_object_result_is_read_as_its_own_details() {
    for failed in [
        json!({"ok": false, "exitCode": 1, "error": "`deploy fail` exited 1"}),
        json!({"success": false}),
        json!({"exitCode": 2}),
        json!({"error": "boom"}),
        json!({"status": "failed"}),
        json!({"status": "denied"}),
        // A text `content` is not the runtime's list of blocks: still a plain record.
        json!({"ok": false, "exitCode": 1, "content": "stderr: permission denied"}),
    ] {
        assert!(is_tool_result_error(&failed), "{failed}");
    }
    assert_eq!(
        extract_tool_error_message(
            &json!({"ok": false, "exitCode": 1, "error": "`deploy fail` exited 1"})
        )
        .as_deref(),
        Some("`deploy fail` exited 1")
    );
    assert_eq!(
        tool_result_failure_kind(&json!({"status": "denied"})),
        Some(ToolResultFailureKind::Blocked)
    );
    let timed_out = json!({"timedOut": true});
    assert!(is_tool_result_timed_out(&timed_out));
    assert_eq!(
        tool_result_failure_kind(&timed_out),
        Some(ToolResultFailureKind::TimedOut)
    );
    for succeeded in [
        json!({"ok": true, "exitCode": 0}),
        json!({"status": "completed"}),
        json!({"ok": true, "status": "cancelled"}),
        json!({"path": "/tmp/x", "bytes": 12}),
        json!({}),
    ] {
        assert!(!is_tool_result_error(&succeeded), "{succeeded}");
    }
}

#[test]
fn tool_result_errors_the_runtime_shape_is_read_from_details_only() {
    // `details` is what the rule reads; top-level fields beside it are not.
    assert!(is_tool_result_error(
        &json!({"content": [], "details": {"exitCode": 1}})
    ));
    assert!(!is_tool_result_error(
        &json!({"ok": false, "details": {"status": "completed"}})
    ));
    // A result with content and no details has nothing the rule reads, whatever its text says.
    assert!(!is_tool_result_error(
        &json!({"content": [{"type": "text", "text": "Error: nothing there"}]})
    ));
    // Not an object: nothing to read.
    for other in [json!("Error: text"), json!(null), json!([{"error": "x"}])] {
        assert!(!is_tool_result_error(&other), "{other}");
    }
}
