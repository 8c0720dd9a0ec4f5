//! Part B: `infer_tool_meta_from_args` (vectors 26–39).

use serde_json::{Value, json};
use tether_harness_sdk::results::display::{DetailMode, infer_tool_meta_from_args};
use tether_harness_sdk::results::drop_deep;

fn meta(tool: &str, args: &Value) -> Option<String> {
    infer_tool_meta_from_args(tool, args, DetailMode::Raw)
}

#[test]
fn tool_results_026_zero_and_false_values_omitted() {
    let args = json!({"task": "double-message-bug-gpt", "label": 0, "runTimeoutSeconds": 0});
    assert_eq!(
        meta("sessions_spawn", &args).as_deref(),
        Some("double-message-bug-gpt")
    );
}

#[test]
fn tool_results_027_message_react_summary() {
    let args = json!({"action": "react", "provider": "discord", "to": "chan-1", "remove": false});
    let out = meta("message", &args).expect("detail");
    assert!(out.contains("provider discord"), "{out}");
    assert!(out.contains("to chan-1"), "{out}");
    assert!(!out.contains("remove"), "{out}");
}

#[test]
fn tool_results_028_label_overrides() {
    let args = json!({"sessionKey": "agent:main:main", "limit": 20, "includeTools": true});
    let out = meta("sessions_history", &args).expect("detail");
    assert!(out.contains("session agent:main:main"), "{out}");
    assert!(out.contains("limit 20"), "{out}");
    assert!(out.contains("tools true"), "{out}");
}

#[test]
fn tool_results_029_read_line_range() {
    let args = json!({"file_path": "/scratch/a.txt", "offset": 2, "limit": 2});
    assert_eq!(
        meta("read", &args).as_deref(),
        Some("lines 2-3 from /scratch/a.txt")
    );
    let first = json!({"path": "/scratch/a.txt", "limit": 1});
    assert_eq!(
        meta("read", &first).as_deref(),
        Some("first 1 line of /scratch/a.txt")
    );
}

#[test]
fn tool_results_030_write_and_edit_char_counts() {
    let write = json!({"file_path": "/scratch/a.txt", "content": "abc"});
    assert_eq!(
        meta("write", &write).as_deref(),
        Some("to /scratch/a.txt (3 chars)")
    );
    let edit = json!({"path": "/scratch/a.txt", "newText": "abcd"});
    assert_eq!(
        meta("edit", &edit).as_deref(),
        Some("in /scratch/a.txt (4 chars)")
    );
}

#[test]
fn tool_results_031_web_search_queries() {
    assert_eq!(
        meta("web_search", &json!({"query": "OpenClaw docs", "count": 3})).as_deref(),
        Some("for \"OpenClaw docs\" (top 3)")
    );
    assert_eq!(
        meta(
            "web_search",
            &json!({"q": "Codex OAuth API key", "max_results": 5})
        )
        .as_deref(),
        Some("for \"Codex OAuth API key\" (top 5)")
    );
    let four = json!({"search_query": [{"q": "a"}, {"q": "b"}, {"q": "c"}, {"q": "d"}]});
    assert_eq!(
        meta("web_search", &four).as_deref(),
        Some("for \"a\", \"b\", \"c\"…")
    );
}

#[test]
fn tool_results_032_exec_cd_preamble_and_explain_mode() {
    let args = json!({"command": "cd ~/my-project && npm install"});
    assert_eq!(
        meta("exec", &args).as_deref(),
        Some("install dependencies (in ~/my-project), `cd ~/my-project && npm install`")
    );
    assert_eq!(
        infer_tool_meta_from_args("exec", &args, DetailMode::Explain).as_deref(),
        Some("install dependencies (in ~/my-project)")
    );
}

#[test]
fn tool_results_033_or_is_not_a_preamble() {
    let out = meta("exec", &json!({"command": "cd /app || npm install"})).expect("detail");
    assert!(
        out.starts_with("run cd /app → install dependencies"),
        "{out}"
    );
}

#[test]
fn tool_results_034_unknown_binary_is_raw() {
    let args = json!({"command": "jj rebase -s abc -d main"});
    assert_eq!(
        meta("exec", &args).as_deref(),
        Some("jj rebase -s abc -d main")
    );
}

#[test]
fn tool_results_035_node_label_only_for_node_host() {
    let out = meta(
        "exec",
        &json!({"command": "npm install", "host": "gateway", "node": "raspberrypi"}),
    )
    .expect("detail");
    assert!(!out.contains("node:"), "{out}");
    let on_node = meta(
        "exec",
        &json!({"command": "npm install", "host": "node", "node": "raspberrypi"}),
    )
    .expect("detail");
    assert!(on_node.contains("node: raspberrypi"), "{on_node}");
}

fn nest(depth: usize) -> Value {
    let mut v = json!("x");
    for _ in 0..depth {
        v = Value::Array(vec![v]);
    }
    v
}

#[test]
fn tool_results_036_twenty_thousand_levels_return_none() {
    let args = json!({"path": Value::Null});
    let mut args = args;
    args["path"] = nest(20_000);
    assert_eq!(meta("unknown_tool", &args), None);
    drop_deep(args);
}

#[test]
fn tool_results_037_deep_branch_dropped_shallow_sibling_kept() {
    let mut args = json!({"path": []});
    args["path"] = Value::Array(vec![nest(100), json!("visible")]);
    assert_eq!(meta("unknown_tool", &args).as_deref(), Some("visible"));
    drop_deep(args);
    // 63 levels inside the outer array (64 in total) still render.
    let shallow = json!({"path": [nest(63)]});
    assert_eq!(meta("unknown_tool", &shallow).as_deref(), Some("x"));
    let too_deep = json!({"path": [nest(64)]});
    assert_eq!(meta("unknown_tool", &too_deep), None);
}

#[test]
fn tool_results_038_secret_in_detail_redacted() {
    let key = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let out = meta(
        "exec",
        &json!({"command": format!("export OPENAI_API_KEY={key}")}),
    )
    .expect("detail");
    assert!(!out.contains(key), "{out}");
    assert!(out.contains("OPENAI_API_KEY"), "{out}");
}

#[test]
fn tool_results_039_non_object_args_give_none() {
    assert_eq!(meta("unknown_tool", &json!("hello")), None);
    assert_eq!(meta("unknown_tool", &Value::Null), None);
    assert_eq!(meta("unknown_tool", &json!([1, 2])), None);
    assert_eq!(meta("unknown_tool", &json!({})), None);
}
