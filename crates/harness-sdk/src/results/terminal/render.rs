//! User-facing tool warning lines (never raw error text, paths or owner keys).

use tether_core::{TerminalDiagnostic, ToolErrorSummary};

use super::ToolRecovery;

/// A display label for a tool (`memory_search` → `Memory Search`, `sessions_spawn` →
/// `🧑‍🔧 Sub-agent`).
pub fn tool_label(tool_name: &str) -> String {
    match tool_name.trim().to_ascii_lowercase().as_str() {
        "sessions_spawn" => "🧑‍🔧 Sub-agent".into(),
        other => other
            .split(['_', '-', ' '])
            .filter(|w| !w.is_empty())
            .map(|w| {
                let mut cs = w.chars();
                cs.next()
                    .map(|f| f.to_uppercase().chain(cs).collect::<String>())
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// The one-line warning for a tool failure: `⚠️ <Tool> failed`, `⚠️ <Tool> blocked` (never
/// started), or a timeout line with partial results.
pub fn render_tool_warning(error: &ToolErrorSummary) -> String {
    let label = tool_label(&error.tool_name);
    if let Some(TerminalDiagnostic::Timeout {
        timeout_ms,
        partial_results,
    }) = &error.terminal_diagnostic
    {
        return match partial_results {
            Some(1) => format!(
                "⚠️ {label} timed out after {}; 1 partial result is available.",
                seconds(*timeout_ms)
            ),
            Some(n) if *n > 1 => {
                format!(
                    "⚠️ {label} timed out after {}; {n} partial results are available.",
                    seconds(*timeout_ms)
                )
            }
            _ => format!("⚠️ {label} timed out after {}.", seconds(*timeout_ms)),
        };
    }
    if error.execution_started == Some(false) {
        format!("⚠️ {label} blocked")
    } else {
        format!("⚠️ {label} failed")
    }
}

/// The recovery receipt line: `✅ <Tool> succeeded after retry.`
pub fn render_tool_recovery(recovery: &ToolRecovery) -> String {
    format!(
        "✅ {} succeeded after retry.",
        tool_label(&recovery.tool_name)
    )
}

/// The warning policy: an unresolved **mutating** failure is always reported (the reply may
/// claim success for an action that did not happen); any other failure only when the run
/// would otherwise end without a user-facing reply.
pub fn tool_warning_payload(
    last_tool_error: Option<&ToolErrorSummary>,
    has_user_facing_reply: bool,
) -> Option<String> {
    let error = last_tool_error?;
    (error.mutating_action == Some(true) || !has_user_facing_reply)
        .then(|| render_tool_warning(error))
}
