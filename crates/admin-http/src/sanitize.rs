//! Sanitizing what operators see: transcript text, tool data, binding values and labels go
//! through the harness SDK's redaction (secrets, tokens, keys masked), lose control characters
//! and are truncated.

use tether_harness_sdk::results::redact::redact_text;
use tether_harness_sdk::results::sanitize::sanitize_tool_result;

/// Longest text shown, in characters.
pub const MAX_TEXT_CHARS: usize = 500;

/// Longest binding value preview, in characters.
pub const MAX_PREVIEW_CHARS: usize = 200;

fn truncate(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
        .take(max)
        .collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}

/// Redacts secrets in free text, then truncates it.
pub fn sanitize_text(text: &str) -> String {
    truncate(&redact_text(text), MAX_TEXT_CHARS)
}

/// Redacts secrets in an operator's reason and blanks its control characters, keeping it
/// whole: a reason is bounded by its text rule (4,096 bytes) and an audit trail shows all of
/// it.
pub fn sanitize_reason(text: &str) -> String {
    truncate(&redact_text(text), usize::MAX)
}

/// A sanitized preview of a stored value: JSON goes through the structured tool-result
/// sanitizer, anything else through the free-text one.
pub fn preview_bytes(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    let sanitized = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(json) => sanitize_tool_result(&json).to_string(),
        Err(_) => redact_text(&text),
    };
    truncate(&sanitized, MAX_PREVIEW_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_and_text_is_bounded() {
        let text = sanitize_text("use Bearer sk-abcdefghijklmnopqrstuvwxyz0123456789 now");
        assert!(
            !text.contains("abcdefghijklmnopqrstuvwxyz0123456789"),
            "{text}"
        );
        let long = "x".repeat(MAX_TEXT_CHARS + 10);
        assert_eq!(sanitize_text(&long).chars().count(), MAX_TEXT_CHARS + 1);
        assert_eq!(sanitize_text("a\u{7}b"), "a b");
        let preview = preview_bytes(br#"{"api_key":"sk-abcdefghijklmnopqrstuvwxyz0123456789"}"#);
        assert!(
            !preview.contains("abcdefghijklmnopqrstuvwxyz0123456789"),
            "{preview}"
        );
    }
}
