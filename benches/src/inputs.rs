//! The inputs of the pure benchmarks: tool-call JSON documents, a long transcript and a stream
//! of terminal tool reports. All deterministic.

use serde_json::{Map, Value, json};
use tether_core::{AgentMessage, ContentBlock, MessageRole};
use tether_harness_sdk::results::terminal::ToolTerminalObservation;

/// A typical tool call's arguments (a shell command with a working directory and options).
pub fn typical_tool_call() -> Value {
    json!({
        "command": "git log --oneline -n 20 -- crates/storage",
        "workdir": "/home/dev/projects/tether",
        "timeout": 30000,
        "env": {"GIT_PAGER": "cat", "LANG": "C.UTF-8"},
        "description": "Show the recent history of the storage crate",
        "background": false
    })
}

/// A nested document of about `target_bytes` serialized bytes: objects eight levels deep
/// with arrays of records (names, paths, numbers, flags, free text) at the leaves.
pub fn nested_document(target_bytes: usize) -> Value {
    fn record(i: usize) -> Value {
        json!({
            "id": i,
            "name": format!("item-{i}"),
            "path": format!("/srv/data/shard-{}/file-{i}.json", i % 17),
            "size": i * 37,
            "ok": !i.is_multiple_of(3),
            "note": "The quick brown fox jumps over the lazy dog while the build runs.",
            "tags": ["alpha", "beta", "gamma"]
        })
    }
    let leaf_records = 16;
    let one_leaf = serde_json::to_vec(&Value::Array((0..leaf_records).map(record).collect()))
        .map_or(4096, |v| v.len());
    let leaves = (target_bytes / one_leaf).max(1);
    let mut next = 0usize;
    // Build `leaves` leaf arrays and nest them: every level groups up to 4 children.
    let mut level: Vec<Value> = (0..leaves)
        .map(|_| {
            let leaf = Value::Array((next..next + leaf_records).map(record).collect());
            next += leaf_records;
            leaf
        })
        .collect();
    let mut depth = 0;
    while level.len() > 1 || depth < 8 {
        level = level
            .chunks(4)
            .enumerate()
            .map(|(i, group)| {
                let mut map = Map::new();
                map.insert("level".into(), json!(depth));
                map.insert("index".into(), json!(i));
                for (j, child) in group.iter().enumerate() {
                    map.insert(format!("child_{j}"), child.clone());
                }
                Value::Object(map)
            })
            .collect();
        depth += 1;
    }
    level.pop().unwrap_or(Value::Null)
}

/// A line of prose (a file path and a sentence end among its words).
pub const PROSE_LINE: &str = "The quick brown fox jumps over the lazy dog while the build runs; \
    see crates/storage/src/sql/mod.rs for the writer.\n";

/// Two lines of Rust (assignments, paths, snake_case names).
pub const CODE_LINES: &str = "    let row = store.binding_row(&ns, &key).await?;\n    \
    if row.revision != expected_revision { return Err(Error::Conflict); }\n";

/// A tool call that writes a long text (a file's content, a message): `unit` repeated to at
/// least `bytes` bytes under `content`, beside a short `path`.
pub fn long_text_call(unit: &str, bytes: usize) -> Value {
    let mut text = String::with_capacity(bytes + unit.len());
    while text.len() < bytes {
        text.push_str(unit);
    }
    json!({"path": "notes/summary.md", "content": text})
}

/// A document where most fields are secrets: sensitive keys, bearer headers, API-key-shaped
/// strings in free text, connection strings with passwords.
pub fn secret_heavy_document() -> Value {
    let entries: Vec<Value> = (0..200)
        .map(|i| {
            json!({
                "name": format!("service-{i}"),
                "password": format!("hunter{i}-correct-horse"),
                "api_key": format!("sk-proj-{i:04}abcdefghijklmnopqrstuvwxyz0123456789"),
                "token": format!("ghp_{i:04}ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef"),
                "headers": {
                    "Authorization": format!("Bearer eyJhbGciOiJIUzI1NiJ9.payload{i}.signature"),
                    "X-Api-Key": format!("key-{i}-0123456789abcdef")
                },
                "dsn": format!("postgres://admin:s3cr3t{i}@db.internal:5432/app"),
                "log": format!("login ok for user {i} with password=pw{i} and apikey=sk-live-{i:06}xyz"),
                "port": 5432 + i,
            })
        })
        .collect();
    json!({"services": entries, "client_secret": "cs-0123456789", "retries": 3})
}

/// A transcript of `total` messages for turn `turn`: older user/assistant exchanges, then the
/// settled turn (prompt, tool call, tool result) carrying their mirror identities.
/// Returns `(history, settled)`.
pub fn transcript(turn: &str, total: usize) -> (Vec<AgentMessage>, Vec<AgentMessage>) {
    let settled = settled_turn(turn);
    let prior = total.saturating_sub(settled.len());
    let mut history: Vec<AgentMessage> = (0..prior)
        .map(|i| {
            let role = if i.is_multiple_of(2) {
                MessageRole::User
            } else {
                MessageRole::Assistant
            };
            let mut m = AgentMessage::text(
                role,
                format!("message {i}: please look at the build log and summarize what failed in step {i}"),
            );
            m.id = Some(format!("prior-{i}"));
            m
        })
        .collect();
    history.extend(settled.iter().cloned());
    (history, settled)
}

fn settled_turn(turn: &str) -> Vec<AgentMessage> {
    let mut prompt = AgentMessage::text(MessageRole::User, "please send the summary");
    prompt.id = Some(format!("{turn}:prompt"));
    let mut call = AgentMessage::text(MessageRole::Assistant, "");
    call.content = vec![ContentBlock::ToolCall {
        id: "c1".into(),
        name: "send".into(),
        arguments: json!({"to": "team"}),
    }];
    call.stop_reason = Some("toolUse".into());
    call.id = Some(format!("{turn}:tool:c1:call"));
    let mut result = AgentMessage::text(MessageRole::ToolResult, "sent");
    result.tool_call_id = Some("c1".into());
    result.tool_name = Some("send".into());
    result.id = Some(format!("{turn}:tool:c1:result"));
    vec![prompt, call, result]
}

/// `n` terminal tool reports: reads, shell commands, writes (some failing, some later
/// succeeding with the same arguments), and message sends.
pub fn terminal_reports(n: usize) -> Vec<ToolTerminalObservation> {
    (0..n)
        .map(|i| match i % 5 {
            0 => ToolTerminalObservation::success(
                "read",
                json!({"file_path": format!("/repo/src/file_{}.rs", i % 50)}),
            ),
            1 => ToolTerminalObservation::success(
                "exec",
                json!({"command": format!("cargo test -p pkg{}", i % 7)}),
            ),
            2 => ToolTerminalObservation::failure(
                "write",
                json!({"file_path": format!("/repo/out/{}.txt", i % 20), "content": "x"}),
                "permission denied",
            ),
            3 => ToolTerminalObservation::success(
                "write",
                json!({"file_path": format!("/repo/out/{}.txt", (i + 19) % 20), "content": "x"}),
            ),
            _ => ToolTerminalObservation::success(
                "message",
                json!({"action": "send", "to": "channel", "text": format!("update {i}")}),
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nested_document_is_about_the_requested_size_and_deep() {
        let doc = nested_document(1 << 20);
        let len = serde_json::to_vec(&doc).unwrap().len();
        assert!((900_000..1_400_000).contains(&len), "{len}");
        let mut depth = 0;
        let mut node = &doc;
        while let Some(child) = node.get("child_0") {
            node = child;
            depth += 1;
        }
        assert!(depth >= 8, "{depth}");
    }

    #[test]
    fn the_transcript_ends_with_the_settled_turn() {
        let (history, settled) = transcript("t", 10_000);
        assert_eq!(history.len(), 10_000);
        assert_eq!(history[history.len() - 3..], settled[..]);
    }

    #[test]
    fn terminal_reports_mix_outcomes() {
        let reports = terminal_reports(10);
        assert_eq!(reports.len(), 10);
        assert!(reports.iter().any(|r| r.failure.is_some()));
        assert!(reports.iter().any(|r| r.failure.is_none()));
    }
}
