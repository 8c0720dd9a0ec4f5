//! The built-in tool mutation classifier (which calls may have side effects, which are
//! replay-safe reads).

use serde_json::{Map, Value};

/// Whether a tool call mutates anything and whether replaying it is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MutationFacts {
    /// The call may change external state.
    pub mutating_action: bool,
    /// Replaying the call is safe (a pure read).
    pub replay_safe: bool,
}

const NEUTRAL: MutationFacts = MutationFacts {
    mutating_action: false,
    replay_safe: false,
};
const MUTATING: MutationFacts = MutationFacts {
    mutating_action: true,
    replay_safe: false,
};
const READ: MutationFacts = MutationFacts {
    mutating_action: false,
    replay_safe: true,
};

const ALWAYS_MUTATING: &[&str] = &[
    "write",
    "edit",
    "apply_patch",
    "sessions_spawn",
    "sessions_send",
    "conversations_send",
    "conversations_turn",
    "create_goal",
    "update_goal",
];

const REPLAY_SAFE: &[&str] = &[
    "read",
    "find",
    "glob",
    "grep",
    "ls",
    "memory_get",
    "pdf",
    "search",
    "web_fetch",
    "web_search",
    "x_search",
    "tool_search",
    "tool_describe",
    "sessions_list",
    "sessions_history",
    "sessions_search",
    "agents_list",
    "conversations_list",
    "get_goal",
    "view_image",
    "tavily_search",
];

const MESSAGE_READ_ONLY: &[&str] = &[
    "reactions",
    "read",
    "list_pins",
    "permissions",
    "thread_list",
    "search",
    "sticker_search",
    "member_info",
    "role_info",
    "emoji_list",
    "channel_info",
    "channel_list",
    "voice_status",
    "event_list",
];

const PROCESS_MUTATING: &[&str] = &[
    "write",
    "send_keys",
    "submit",
    "paste",
    "kill",
    "clear",
    "remove",
];

const COMPUTER_READ_ONLY: &[&str] = &[
    "list_windows",
    "get_cursor_position",
    "screenshot",
    "get_screen_size",
    "list_apps",
    "get_window",
    "zoom",
];

const SUBAGENTS_MUTATING: &[&str] = &["cancel", "kill", "steer"];

const READ_ONLY_BINARIES: &[&str] = &[
    "cat", "grep", "head", "ls", "pwd", "rg", "stat", "tail", "wc",
];

/// Actions of an `*_actions` tool that only read (anything else, or no action, may mutate).
const READ_ONLY_ACTIONS: &[&str] = &[
    "get", "list", "read", "status", "show", "fetch", "search", "query", "view", "poll", "log",
    "inspect", "check", "probe",
];

/// The program name of a command word: `/usr/bin/ls` and `./ls` run `ls`.
fn program_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// The normalized action of a call (`args.action`, lowercased, spaces and dashes → `_`).
pub(crate) fn normalized_action(args: Option<&Map<String, Value>>) -> Option<String> {
    let a = args?.get("action")?.as_str()?.trim();
    (!a.is_empty()).then(|| {
        a.chars()
            .map(|c| {
                if c == ' ' || c == '-' {
                    '_'
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect()
    })
}

/// The canonical classifier name (`sandbox_exec` → `exec`, `sandbox_process` → `process`).
pub(crate) fn classifier_name(tool_name: &str) -> String {
    let name = tool_name.trim().to_ascii_lowercase();
    match name.as_str() {
        "sandbox_exec" => "exec".into(),
        "sandbox_process" => "process".into(),
        _ => name,
    }
}

/// Classifies a call by tool name and executed arguments.
pub fn classify_tool_mutation(tool_name: &str, args: Option<&Map<String, Value>>) -> MutationFacts {
    let name = classifier_name(tool_name);
    let action = normalized_action(args);
    let action = action.as_deref();
    if ALWAYS_MUTATING.contains(&name.as_str()) {
        return MUTATING;
    }
    match name.as_str() {
        "exec" | "bash" => {
            let command = args
                .and_then(|a| a.get("command").or_else(|| a.get("cmd")))
                .and_then(Value::as_str);
            return MutationFacts {
                mutating_action: !command.is_some_and(is_read_only_command),
                replay_safe: false,
            };
        }
        "message" => {
            return if action.is_some_and(|a| MESSAGE_READ_ONLY.contains(&a)) {
                READ
            } else {
                MUTATING
            };
        }
        "process" => {
            return if action.is_some_and(|a| PROCESS_MUTATING.contains(&a)) {
                MUTATING
            } else {
                NEUTRAL
            };
        }
        "computer" | "mobile_ui" => {
            return if action.is_some_and(|a| COMPUTER_READ_ONLY.contains(&a)) {
                READ
            } else {
                MUTATING
            };
        }
        "subagents" => {
            return if action.is_some_and(|a| SUBAGENTS_MUTATING.contains(&a)) {
                MUTATING
            } else {
                NEUTRAL
            };
        }
        "session_status" => {
            return if args.is_some_and(|a| a.get("model").is_some_and(|m| !m.is_null())) {
                MUTATING
            } else {
                NEUTRAL
            };
        }
        _ => {}
    }
    if REPLAY_SAFE.contains(&name.as_str()) {
        return READ;
    }
    if name.ends_with("_actions") {
        // A plugin's multi-action tool (`github_actions`, `calendar_actions`): mutating
        // unless its action is a known read.
        return if action.is_some_and(|a| READ_ONLY_ACTIONS.contains(&a)) {
            NEUTRAL
        } else {
            MUTATING
        };
    }
    if name.starts_with("message_") || name.contains("send") {
        return MUTATING;
    }
    NEUTRAL
}

/// Whether a shell command is a plain read-only command: no shell metacharacters outside single
/// quotes, and every `&&` segment runs an allowed read-only program.
pub fn is_read_only_command(command: &str) -> bool {
    // `masked` is `command` with `|` and `&` inside single quotes replaced by `x` (same byte
    // offsets), so separators are only found outside quotes.
    let mut in_single = false;
    let mut masked = String::with_capacity(command.len());
    for c in command.chars() {
        if c == '\'' {
            in_single = !in_single;
            masked.push(c);
            continue;
        }
        if in_single {
            masked.push(if c == '|' || c == '&' { 'x' } else { c });
            continue;
        }
        if matches!(
            c,
            ';' | '<' | '>' | '`' | '\\' | '$' | '*' | '?' | '[' | ']' | '{' | '}' | '~'
        ) {
            return false;
        }
        masked.push(c);
    }
    if in_single {
        return false;
    }
    let mut start = 0;
    let mut segments = Vec::new();
    while let Some(at) = masked[start..].find("&&") {
        segments.push((start, start + at));
        start += at + 2;
    }
    segments.push((start, masked.len()));
    segments.into_iter().all(|(from, to)| {
        if masked[from..to].contains(['|', '&']) {
            return false;
        }
        let segment = &command[from..to];
        let words: Vec<&str> = segment.split_whitespace().collect();
        match words.as_slice() {
            [] => false,
            [bin, ..] if READ_ONLY_BINARIES.contains(&program_name(bin)) => true,
            ["sed", "-n", script] => {
                let s = script.trim_matches('\'');
                s.ends_with('p')
                    && s[..s.len() - 1]
                        .split(',')
                        .all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            }
            ["sed", "-n", script, _file] => {
                let s = script.trim_matches('\'');
                s.ends_with('p')
                    && s[..s.len() - 1]
                        .split(',')
                        .all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
            }
            [
                "gh",
                "pr" | "issue",
                "view" | "list" | "diff" | "status" | "checks",
                ..,
            ] => true,
            ["gh", "search", ..] => true,
            ["mcporter", "list", ..] => true,
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn classifier_tables() {
        assert_eq!(classify_tool_mutation("write", None), MUTATING);
        assert_eq!(classify_tool_mutation("read", None), READ);
        assert_eq!(classify_tool_mutation("memory_search", None), NEUTRAL);
        assert_eq!(classify_tool_mutation("message", None), MUTATING);
        assert_eq!(
            classify_tool_mutation("message", Some(&args(json!({"action": "List-Pins"})))),
            READ
        );
        assert_eq!(
            classify_tool_mutation(
                "sandbox_process",
                Some(&args(json!({"action": "send keys"})))
            ),
            MUTATING
        );
        assert_eq!(classify_tool_mutation("slack_send", None), MUTATING);
        assert_eq!(classify_tool_mutation("github_actions", None), MUTATING);
        assert_eq!(
            classify_tool_mutation(
                "github_actions",
                Some(&args(json!({"action": "create_issue"})))
            ),
            MUTATING
        );
        assert_eq!(
            classify_tool_mutation("Calendar_Actions", Some(&args(json!({"action": "List"})))),
            NEUTRAL
        );
    }

    #[test]
    fn read_only_commands() {
        assert!(is_read_only_command("ls -la && wc -l a.txt"));
        assert!(is_read_only_command("sed -n '1,20p' src/main.rs"));
        assert!(is_read_only_command("grep 'a|b' file"));
        assert!(is_read_only_command("/usr/bin/ls -la"));
        assert!(is_read_only_command("/bin/cat a.txt && ./wc -l a.txt"));
        assert!(!is_read_only_command("/bin/rm -rf x"));
        assert!(!is_read_only_command("ls | xargs rm"));
        assert!(!is_read_only_command("cat a > b"));
        assert!(!is_read_only_command("rm -rf x"));
        assert!(!is_read_only_command("echo $HOME"));
    }
}
