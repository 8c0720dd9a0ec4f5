//! `src/agents/tool-display.test.ts`: compact tool display details (the tool-search bridge and
//! the emoji tool summaries are OpenClaw UI features Tether does not have).

use serde_json::{Value, json};
use tether_harness_sdk::results::display::{DetailMode, infer_tool_meta_from_args};

fn detail(tool: &str, args: Value) -> String {
    infer_tool_meta_from_args(tool, &args, DetailMode::Raw).unwrap_or_default()
}

fn explain(tool: &str, args: Value) -> String {
    infer_tool_meta_from_args(tool, &args, DetailMode::Explain).unwrap_or_default()
}

#[test]
fn openclaw_tool_display_skips_zero_and_false_optional_details() {
    assert_eq!(
        detail(
            "sessions_spawn",
            json!({"task": "double-message-bug-gpt", "label": 0, "runTimeoutSeconds": 0})
        ),
        "double-message-bug-gpt"
    );
}

#[test]
fn openclaw_tool_display_includes_only_truthy_booleans() {
    let d = detail(
        "message",
        json!({"action": "react", "provider": "discord", "to": "chan-1", "remove": false}),
    );
    assert!(d.contains("provider discord"), "{d}");
    assert!(d.contains("to chan-1"), "{d}");
    assert!(!d.contains("remove"), "{d}");
}

#[test]
fn openclaw_tool_display_keeps_positive_numbers_and_true_booleans() {
    let d = detail(
        "sessions_history",
        json!({"sessionKey": "agent:main:main", "limit": 20, "includeTools": true}),
    );
    assert!(d.contains("session agent:main:main"), "{d}");
    assert!(d.contains("limit 20"), "{d}");
    assert!(d.contains("tools true"), "{d}");
}

#[test]
fn openclaw_tool_display_read_write_edit_intent_first() {
    assert_eq!(
        detail(
            "read",
            json!({"file_path": "/tmp/a.txt", "offset": 2, "limit": 2})
        ),
        "lines 2-3 from /tmp/a.txt"
    );
    assert_eq!(
        detail(
            "write",
            json!({"file_path": "/tmp/a.txt", "content": "abc"})
        ),
        "to /tmp/a.txt (3 chars)"
    );
    assert_eq!(
        detail("edit", json!({"path": "/tmp/a.txt", "newText": "abcd"})),
        "in /tmp/a.txt (4 chars)"
    );
}

#[test]
fn openclaw_tool_display_web_search_query_with_quotes() {
    assert_eq!(
        detail("web_search", json!({"query": "OpenClaw docs", "count": 3})),
        "for \"OpenClaw docs\" (top 3)"
    );
}

#[test]
fn openclaw_tool_display_web_search_provider_query_shapes() {
    assert_eq!(
        detail(
            "web_search",
            json!({"q": "Codex OAuth API key", "max_results": 5})
        ),
        "for \"Codex OAuth API key\" (top 5)"
    );
    assert_eq!(
        detail(
            "web_search",
            json!({"search_query": [
                {"q": "latest Kimi model"}, {"q": "latest Gemini model"},
                {"q": "latest Claude model"}, {"q": "latest OpenAI model"}
            ]})
        ),
        "for \"latest Kimi model\", \"latest Gemini model\", \"latest Claude model\"…"
    );
}

#[test]
fn openclaw_tool_display_parallel_objective_and_search_queries() {
    assert_eq!(
        detail(
            "web_search",
            json!({
                "objective": "Find the OpenClaw repository on GitHub",
                "search_queries": ["openclaw github", "openclaw repository"],
                "count": 5
            })
        ),
        "for \"Find the OpenClaw repository on GitHub\", \"openclaw github\", \"openclaw repository\" (top 5)"
    );
}

#[test]
fn openclaw_tool_display_summarizes_exec_commands_with_context() {
    let d = detail(
        "exec",
        json!({
            "command": "set -euo pipefail\ngit -C /Users/adityasingh/.openclaw/workspace status --short | head -n 3",
            "workdir": "/Users/adityasingh/.openclaw/workspace"
        }),
    );
    assert!(d.contains("check git status -> show first 3 lines"), "{d}");
    assert!(d.contains("(agent)"), "{d}");
    assert!(!d.contains('\n'), "{d}");
}

#[test]
fn openclaw_tool_display_bash_uses_the_same_explainer() {
    assert_eq!(
        explain(
            "bash",
            json!({"command": "sed -n '1,80p' extensions/discord/src/draft-stream.ts"})
        ),
        "print lines 1-80 from extensions/discord/src/draft-stream.ts"
    );
}

#[test]
fn openclaw_tool_display_cd_path_becomes_context_and_raw_command_follows() {
    assert_eq!(
        detail("exec", json!({"command": "cd ~/my-project && npm install"})),
        "install dependencies (in ~/my-project), `cd ~/my-project && npm install`"
    );
}

#[test]
fn openclaw_tool_display_explain_mode_omits_the_raw_command() {
    assert_eq!(
        explain("exec", json!({"command": "cd ~/my-project && npm install"})),
        "install dependencies (in ~/my-project)"
    );
}

#[test]
fn openclaw_tool_display_compact_workspace_markers() {
    assert_eq!(
        explain(
            "bash",
            json!({"command": "git fetch", "workdir": "/Users/peter/mantis-workspace/openclaw"})
        ),
        "fetch git changes (agent)"
    );
    assert_eq!(
        explain(
            "bash",
            json!({"command": "git status", "workdir": "/Users/peter/Projects/openclaw"})
        ),
        "check git status (repo)"
    );
    assert_eq!(
        explain(
            "bash",
            json!({
                "command": "command -v discrawl",
                "workdir": "/root/.openclaw/sandboxes/agent-clawsweeper-sandbox-discor-766423d0"
            })
        ),
        "command -v discrawl"
    );
}

#[test]
fn openclaw_tool_display_cd_context_with_multiple_stages() {
    assert_eq!(
        detail(
            "exec",
            json!({"command": "cd ~/my-project && npm install && npm test"})
        ),
        "install dependencies → run tests (in ~/my-project), `cd ~/my-project && npm install && npm test`"
    );
}

#[test]
fn openclaw_tool_display_pushd_path_becomes_context() {
    assert_eq!(
        detail("exec", json!({"command": "pushd /tmp && git status"})),
        "check git status (in /tmp), `pushd /tmp && git status`"
    );
}

#[test]
fn openclaw_tool_display_popd_clears_the_inferred_directory() {
    assert_eq!(
        detail(
            "exec",
            json!({"command": "pushd /tmp && popd && npm install"})
        ),
        "install dependencies, `pushd /tmp && popd && npm install`"
    );
}

#[test]
fn openclaw_tool_display_or_separator_is_not_a_preamble() {
    let d = detail("exec", json!({"command": "cd /app || npm install"}));
    assert!(d.starts_with("run cd /app → install dependencies"), "{d}");
}

#[test]
fn openclaw_tool_display_explicit_workdir_wins_over_cd() {
    assert_eq!(
        detail(
            "exec",
            json!({"command": "cd /tmp && npm install", "workdir": "/app"})
        ),
        "install dependencies (in /app), `cd /tmp && npm install`"
    );
}

#[test]
fn openclaw_tool_display_summarizes_all_stages() {
    assert_eq!(
        detail(
            "exec",
            json!({"command": "git fetch && git rebase origin/main"})
        ),
        "fetch git changes → rebase git branch, `git fetch && git rebase origin/main`"
    );
}

#[test]
fn openclaw_tool_display_unknown_binary_is_raw() {
    assert_eq!(
        detail("exec", json!({"command": "jj rebase -s abc -d main"})),
        "jj rebase -s abc -d main"
    );
}

#[test]
fn openclaw_tool_display_unknown_binary_with_directory() {
    assert_eq!(
        detail(
            "exec",
            json!({"command": "mycli deploy --prod", "workdir": "/app"})
        ),
        "mycli deploy --prod (in /app)"
    );
}

#[test]
fn openclaw_tool_display_multi_stage_summary_with_some_generic_stages() {
    let d = detail("exec", json!({"command": "cargo build && npm test"}));
    assert!(d.starts_with("run cargo build → run tests"), "{d}");
}

#[test]
fn openclaw_tool_display_standalone_cd_is_raw() {
    assert_eq!(detail("exec", json!({"command": "cd /tmp"})), "cd /tmp");
}

#[test]
fn openclaw_tool_display_chained_cd_uses_the_last_path() {
    assert_eq!(
        detail("exec", json!({"command": "cd /tmp && cd /app"})),
        "cd /tmp && cd /app (in /app)"
    );
}

#[test]
fn openclaw_tool_display_quotes_protect_separators() {
    let d = detail(
        "exec",
        json!({"command": "export MSG=\"foo && bar\" && echo test"}),
    );
    assert!(d.starts_with("print text"), "{d}");
}

#[test]
fn openclaw_tool_display_heredoc_and_node_check() {
    let dir = "/Users/adityasingh/.openclaw/workspace";
    let py = detail(
        "exec",
        json!({"command": "python3 <<PY\nprint('x')\nPY", "workdir": dir}),
    );
    assert!(py.contains("run python3 inline script (heredoc)"), "{py}");
    for command in ["node --check /tmp/test.js", "node -c /tmp/test.js"] {
        let d = detail("exec", json!({"command": command, "workdir": dir}));
        assert!(d.contains("check js syntax for /tmp/test.js"), "{d}");
    }
}

#[test]
fn openclaw_tool_display_node_name_is_appended() {
    let d = detail(
        "exec",
        json!({"command": "docker pull pihole/pihole:latest", "host": "node", "node": "raspberrypi"}),
    );
    assert!(d.contains("node: raspberrypi"), "{d}");
}

#[test]
fn openclaw_tool_display_interpreter_commands_have_no_run_prefix() {
    let d = detail(
        "exec",
        json!({"command": "python3 /path/to/daily-cost-audit.py"}),
    );
    assert!(d.contains("python3 /path/to/daily-cost-audit.py"), "{d}");
    assert!(!d.contains("run python3"), "{d}");
}

#[test]
fn openclaw_tool_display_directory_and_node_together() {
    let d = detail(
        "exec",
        json!({"command": "npm install", "workdir": "/app", "host": "node", "node": "raspberrypi"}),
    );
    assert!(d.contains("(in /app)"), "{d}");
    assert!(d.contains("node: raspberrypi"), "{d}");
}

#[test]
fn openclaw_tool_display_no_node_label_without_a_node() {
    let d = detail("exec", json!({"command": "npm install", "host": "gateway"}));
    assert!(!d.contains("node:"), "{d}");
}

#[test]
fn openclaw_tool_display_no_node_label_for_other_hosts() {
    for host in ["gateway", "sandbox", "auto"] {
        let d = detail(
            "exec",
            json!({"command": "npm install", "host": host, "node": "raspberrypi"}),
        );
        assert!(!d.contains("node:"), "{host}: {d}");
    }
}

#[test]
fn openclaw_tool_display_compact_raw_command_keeps_start_and_end() {
    let long = "/opt/custom/bin/my-processor --input /data/warehouse/2024/q1/transactions/raw/batch_001.csv --output /data/warehouse/2024/q1/transactions/processed/batch_001_clean.csv";
    let d = detail("exec", json!({ "command": long }));
    assert!(d.contains("/opt/custom/bin/my-processor"), "{d}");
    assert!(d.contains("batch_001_clean.csv"), "{d}");
    assert!(d.contains('…'), "{d}");
    assert!(!d.ends_with('…'), "{d}");
    assert!(d.encode_utf16().count() <= 120, "{d}");
}

#[test]
fn openclaw_tool_display_compact_raw_command_short_commands_stay() {
    assert_eq!(
        detail(
            "exec",
            json!({"command": "/opt/custom/bin/my-tool --version"})
        ),
        "/opt/custom/bin/my-tool --version"
    );
}

#[test]
fn openclaw_tool_display_compact_raw_command_redacts_before_cutting() {
    let long = "/opt/custom/bin/deploy --region us-east-1 --token sk-proj-ABCDEFGHIJKLMNOP1234567890abcdefghij --output /data/results/deploy-output.json";
    let d = detail("exec", json!({ "command": long }));
    assert!(!d.contains("ABCDEFGHIJKLMNOP1234567890abcdefghij"), "{d}");
}

#[test]
fn openclaw_tool_display_compact_raw_command_uses_the_payload_redactor() {
    let long = "/opt/custom/bin/deploy --aws-key AKIDABCDEFGHIJKLMNOP1234567890 --output /data/results/deploy-output.json";
    let d = detail("exec", json!({ "command": long }));
    assert!(!d.contains("AKIDABCDEFGHIJKLMNOP1234567890"), "{d}");
    assert!(d.contains("AKIDAB…7890"), "{d}");
}

#[test]
fn openclaw_tool_display_compact_raw_command_never_splits_a_surrogate_pair() {
    let emoji = "\u{1F600}";
    let long = format!(
        "/opt/custom/bin/run {}{emoji}{}",
        "a".repeat(38),
        "b".repeat(80)
    );
    let d = detail("exec", json!({ "command": long }));
    assert!(!d.contains(emoji), "{d}");
    assert!(d.starts_with("/opt/custom/bin/run"), "{d}");
    assert!(d.contains('…'), "{d}");
    assert!(d.ends_with("bbbb"), "{d}");
    // Rust strings cannot hold a lone surrogate; the UTF-16 round trip proves none was made.
    assert_eq!(
        String::from_utf16(&d.encode_utf16().collect::<Vec<_>>()).ok(),
        Some(d)
    );
}

#[test]
fn openclaw_tool_display_long_values_keep_start_and_end() {
    let long_path = format!(
        "/usr/local/share/very/deeply/nested/directory/structure/{}/important-file.txt",
        "a".repeat(150)
    );
    let d = detail("sessions_spawn", json!({ "task": long_path }));
    assert!(d.contains("/usr/local/share/"), "{d}");
    assert!(d.contains("important-file.txt"), "{d}");
    assert!(d.contains('…'), "{d}");
}

#[test]
fn openclaw_tool_display_short_values_are_not_cut() {
    let d = detail("sessions_spawn", json!({"task": "short-task-name"}));
    assert_eq!(d, "short-task-name");
}

#[test]
fn openclaw_tool_display_long_values_are_redacted_before_cutting() {
    let long = format!(
        "Deploying service to production cluster with auth ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop and {} final-step",
        "x".repeat(200)
    );
    let d = detail("sessions_spawn", json!({ "task": long }));
    assert!(
        !d.contains("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"),
        "{d}"
    );
}

#[test]
fn openclaw_tool_display_long_values_use_the_payload_redactor() {
    let long = format!(
        "Deploying with AWS key AKIDABCDEFGHIJKLMNOP1234567890 and {} final-step",
        "x".repeat(200)
    );
    let d = detail("sessions_spawn", json!({ "task": long }));
    assert!(!d.contains("AKIDABCDEFGHIJKLMNOP1234567890"), "{d}");
    assert!(d.contains("AKIDAB…7890"), "{d}");
}
