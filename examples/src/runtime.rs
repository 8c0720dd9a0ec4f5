//! A simulated native runtime: threads that keep their own message history and answer
//! deterministically, sometimes running a tool.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// How a tool run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolOutcome {
    /// The tool finished successfully.
    Succeeded,
    /// The tool ran and failed.
    Failed,
}

impl ToolOutcome {
    /// `succeeded` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }
}

/// A tool the native runtime ran during a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRun {
    /// The tool name.
    pub name: String,
    /// How it ended.
    pub outcome: ToolOutcome,
    /// Its output.
    pub output: String,
}

/// The native runtime's answer to one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeReply {
    /// The assistant text.
    pub text: String,
    /// The tool it ran, if any.
    pub tool: Option<ToolRun>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    threads: BTreeMap<String, Vec<String>>,
}

/// The simulated runtime (shared by every harness instance of a process).
#[derive(Debug, Default)]
pub struct SimulatedRuntime {
    state: Mutex<State>,
}

impl SimulatedRuntime {
    /// An empty runtime.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a native thread and returns its id.
    pub fn start_thread(&self) -> String {
        let mut state = self.lock();
        state.next += 1;
        let id = format!("thread-{:04}", state.next);
        state.threads.insert(id.clone(), Vec::new());
        id
    }

    /// Whether the thread exists.
    pub fn has_thread(&self, id: &str) -> bool {
        self.lock().threads.contains_key(id)
    }

    /// Closes a thread (its context is gone).
    pub fn close_thread(&self, id: &str) -> bool {
        self.lock().threads.remove(id).is_some()
    }

    /// How many messages a thread has seen.
    pub fn history_len(&self, id: &str) -> Option<usize> {
        self.lock().threads.get(id).map(Vec::len)
    }

    /// The settled-turn finalization replay: the thread answers once more from its history,
    /// with no tool available, as the narrow result JSON (`{"assistant": {...}}`). A thread
    /// whose last message asked for `garbled` output returns a result with a forbidden field.
    pub fn finalize(&self, id: &str) -> Option<serde_json::Value> {
        let state = self.lock();
        let history = state.threads.get(id)?;
        let last = history.last().cloned().unwrap_or_default();
        let text = format!("Done: {} (after {} messages).", last, history.len());
        let mut result = serde_json::json!({
            "assistant": {
                "role": "assistant",
                "content": [{"type": "text", "text": text}],
                "stop_reason": "stop"
            }
        });
        if last.contains("garbled") {
            result["tools"] = serde_json::json!([{"name": "shell"}]);
        }
        Some(result)
    }

    /// Sends a user message to a thread; `None` when the thread does not exist. A message
    /// starting with `run ` runs the `shell` tool (it fails when the command contains `fail`).
    pub fn send(&self, id: &str, text: &str) -> Option<NativeReply> {
        let mut state = self.lock();
        let history = state.threads.get_mut(id)?;
        history.push(text.to_owned());
        let turn = history.len();
        let tool = text.strip_prefix("run ").map(|command| {
            let failed = command.contains("fail");
            ToolRun {
                name: "shell".into(),
                outcome: if failed {
                    ToolOutcome::Failed
                } else {
                    ToolOutcome::Succeeded
                },
                output: if failed {
                    format!("`{command}` exited with status 1")
                } else {
                    format!("`{command}` exited with status 0")
                },
            }
        });
        let text = match &tool {
            Some(run) => format!(
                "I ran `{}` ({}) on turn {turn}.",
                run.name,
                run.outcome.as_str()
            ),
            None => format!("Noted on turn {turn}: {text}"),
        };
        Some(NativeReply { text, tool })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_answer_deterministically() {
        let rt = SimulatedRuntime::new();
        let t = rt.start_thread();
        assert!(rt.send(&t, "hello").unwrap().tool.is_none());
        let reply = rt.send(&t, "run make fail").unwrap();
        assert_eq!(reply.tool.unwrap().outcome, ToolOutcome::Failed);
        assert_eq!(rt.history_len(&t), Some(2));
        assert!(rt.close_thread(&t));
        assert!(rt.send(&t, "x").is_none());
    }
}
