//! `src/agents/embedded-agent-subscribe.tools.test.ts`: error extraction, the tool-result
//! error rule, sanitized results and arguments, and result text.

use serde_json::{Value, json};
use tether_harness_sdk::results::errors::{
    extract_tool_error_code, extract_tool_error_message, extract_tool_result_text,
    is_tool_result_error, tool_lifecycle_error_result,
};
use tether_harness_sdk::results::redact::RedactionConfig;
use tether_harness_sdk::results::sanitize::{
    sanitize_tool_args, sanitize_tool_result, sanitize_tool_result_with,
};

fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_ignores_non_error_status_values() {
    for status in ["0", "completed", "ok"] {
        assert_eq!(
            extract_tool_error_message(&json!({"details": {"status": status}})),
            None
        );
    }
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_keeps_error_like_status_values() {
    for status in ["failed", "timeout"] {
        assert_eq!(
            extract_tool_error_message(&json!({"details": {"status": status}})).as_deref(),
            Some(status)
        );
    }
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_prefers_aggregated_denial_text() {
    let result = json!({
        "content": [{"type": "text", "text": "SYSTEM_RUN_DENIED: approval required"}],
        "details": {"status": "failed", "aggregated": "SYSTEM_RUN_DENIED: approval required"}
    });
    assert_eq!(
        extract_tool_error_message(&result).as_deref(),
        Some("SYSTEM_RUN_DENIED: approval required")
    );
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_prose_denial_does_not_beat_failed_status() {
    let result = json!({
        "content": [{"type": "text", "text": "SYSTEM_RUN_DENIED: approval required"}],
        "details": {"status": "failed"}
    });
    assert_eq!(
        extract_tool_error_message(&result).as_deref(),
        Some("failed")
    );
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_extracts_structured_error_codes() {
    let code = |v: Value| extract_tool_error_code(&v);
    assert_eq!(
        code(json!({"details": {"status": "failed", "error": {
            "code": "SYSTEM_RUN_DENIED", "message": "approval required"
        }}}))
        .as_deref(),
        Some("SYSTEM_RUN_DENIED")
    );
    assert_eq!(
        code(
            json!({"details": {"status": "failed", "gatewayCode": "UNAVAILABLE", "nodeError": {
                "code": "UNAVAILABLE", "message": "SYSTEM_RUN_DENIED: approval required"
            }}})
        )
        .as_deref(),
        Some("SYSTEM_RUN_DENIED")
    );
    assert_eq!(
        code(json!({"details": {"status": "failed", "nodeError": {
            "code": "INVALID_REQUEST", "message": "approval expired"
        }}}))
        .as_deref(),
        Some("INVALID_REQUEST")
    );
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_no_codes_from_prose() {
    assert_eq!(
        extract_tool_error_code(&json!({
            "content": [{"type": "text", "text": "SYSTEM_RUN_DENIED: approval required"}],
            "details": {"status": "failed"}
        })),
        None
    );
    assert_eq!(
        extract_tool_error_code(&json!({"details": {
            "status": "failed", "error": "SYSTEM_RUN_DENIED: approval required"
        }})),
        None
    );
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_thrown_gateway_error_codes_survive() {
    let node_error =
        json!({"code": "UNAVAILABLE", "message": "SYSTEM_RUN_DENIED: approval required"});
    let result = tool_lifecycle_error_result(
        "UNAVAILABLE: SYSTEM_RUN_DENIED: approval required",
        Some("UNAVAILABLE"),
        node_error.as_object(),
    );
    assert_eq!(
        extract_tool_error_code(&result).as_deref(),
        Some("SYSTEM_RUN_DENIED")
    );
    assert_eq!(
        extract_tool_error_message(&result).as_deref(),
        Some("UNAVAILABLE: SYSTEM_RUN_DENIED: approval required")
    );
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_returned_failures_and_nonzero_exits() {
    let error = |details: Value| is_tool_result_error(&json!({ "details": details }));
    assert!(error(json!({"status": "failed"})));
    assert!(error(json!({"status": "blocked"})));
    assert!(error(json!({"status": "approval-unavailable"})));
    assert!(error(json!({"status": "completed", "timedOut": true})));
    assert!(error(json!({"status": "completed", "exitCode": 1})));
    assert!(!error(json!({"status": "completed", "exitCode": 0})));
    assert!(!error(json!({"ok": true, "status": "cancelled"})));
    assert!(!error(json!({"success": true, "status": "canceled"})));
    assert!(error(json!({"ok": false, "status": "completed"})));
    assert!(error(
        json!({"ok": true, "status": "cancelled", "timedOut": true})
    ));
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_redacts_json_api_keys_in_text() {
    let out = sanitize_tool_result(&json!({"content": [
        {"type": "text", "text": "{\"apiKey\":\"sk-1234567890abcdef\",\"model\":\"gpt-4\"}"}
    ]}));
    let text = text_of(&out);
    assert!(!text.contains("sk-1234567890abcdef"), "{text}");
    assert!(text.contains("model"), "{text}");
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_redacts_payment_credentials() {
    let out = sanitize_tool_result(&json!({
        "content": [{"type": "text", "text": "{\"shared_payment_token\":\"spt_abcdefghijklmnopqrstuvwxyz\",\"paymentCredential\":\"paycred_abcdefghijklmnopqrstuvwxyz\",\"card_number\":\"4242424242424242\",\"cvc\":\"123\",\"amount\":\"4200\"}"}],
        "details": {"structuredContent": {
            "sharedPaymentToken": "spt_zyxwvutsrqponmlkjihgfedcba",
            "cardNumber": "4000056655665556",
            "amount": "4200"
        }}
    }));
    let serialized = out.to_string();
    for secret in [
        "spt_abcdefghijklmnopqrstuvwxyz",
        "paycred_abcdefghijklmnopqrstuvwxyz",
        "4242424242424242",
        "123",
        "spt_zyxwvutsrqponmlkjihgfedcba",
        "4000056655665556",
    ] {
        assert!(!serialized.contains(secret), "{secret} in {serialized}");
    }
    assert!(text_of(&out).contains("\"amount\":\"4200\""));
    assert_eq!(out["details"]["structuredContent"]["amount"], json!("4200"));
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_redacts_env_style_assignments() {
    let out = sanitize_tool_result(&json!({"content": [
        {"type": "text", "text": "OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789\nMODEL=gpt-4"}
    ]}));
    let text = text_of(&out);
    assert!(!text.contains("sk-or-v1-abcdef0123456789"), "{text}");
    assert!(text.contains("MODEL=gpt-4"), "{text}");
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_preserves_env_placeholders_in_text() {
    let text = "DISCORD_BOT_TOKEN=\"${DISCORD_BOT_TOKEN:-}\"\nTELEGRAM_BOT_TOKEN=\"${TELEGRAM_BOT_TOKEN:-}\"";
    let out = sanitize_tool_result(&json!({"content": [{"type": "text", "text": text}]}));
    assert_eq!(text_of(&out), text);
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_redacts_bearer_tokens() {
    let out = sanitize_tool_result(&json!({"content": [
        {"type": "text", "text": "Authorization: Bearer abcdef0123456789QWERTY="}
    ]}));
    assert!(!text_of(&out).contains("abcdef0123456789QWERTY="));
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_strips_image_content() {
    let out = sanitize_tool_result(&json!({"content": [
        {"type": "image", "data": "base64imagedata", "mimeType": "image/png"}
    ]}));
    let image = &out["content"][0];
    assert!(image.get("data").is_none(), "{image}");
    assert_eq!(image["omitted"], json!(true));
    // Deliberate difference: the peer's test expects the base64 text length (15); Tether
    // reports the decoded byte size, as the peer's own sanitizer computes it.
    assert_eq!(image["bytes"], json!(11));
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_redacts_details() {
    let out = sanitize_tool_result(&json!({
        "content": [{"type": "text", "text": "ok"}],
        "details": {
            "status": "completed",
            "aggregated": "OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789\napiKey: \"ghp_abcdefghij1234567890\"",
            "exitCode": 0,
            "cwd": "/tmp/work"
        }
    }));
    let aggregated = out["details"]["aggregated"].as_str().unwrap_or_default();
    assert!(
        !aggregated.contains("sk-or-v1-abcdef0123456789"),
        "{aggregated}"
    );
    assert!(
        !aggregated.contains("ghp_abcdefghij1234567890"),
        "{aggregated}"
    );
    assert_eq!(out["details"]["status"], json!("completed"));
    assert_eq!(out["details"]["exitCode"], json!(0));
    assert_eq!(out["details"]["cwd"], json!("/tmp/work"));
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_redacts_top_level_fields() {
    let out = sanitize_tool_result(&json!({
        "output": "OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789",
        "metadata": {
            "token": "ghp_abcdefghij1234567890ABCDEF",
            "nested": {"auth": "Bearer abcdef0123456789QWERTY="}
        },
        "summary": "ok"
    }));
    let s = out.to_string();
    assert!(!s.contains("sk-or-v1-abcdef0123456789"), "{s}");
    assert!(!s.contains("ghp_abcdefghij1234567890ABCDEF"), "{s}");
    assert!(!s.contains("abcdef0123456789QWERTY="), "{s}");
    assert_eq!(out["summary"], json!("ok"));
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_redacts_details_only_results() {
    let out = sanitize_tool_result(&json!({"details": {"config": {
        "apiKey": "sk-1234567890abcdefXYZ", "model": "gpt-4"
    }}}));
    assert!(!out.to_string().contains("sk-1234567890abcdefXYZ"));
    assert_eq!(out["details"]["config"]["model"], json!("gpt-4"));
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_redacts_primitive_strings() {
    let out = sanitize_tool_result(&json!("OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789"));
    let s = out.as_str().unwrap_or_default();
    assert!(!s.contains("sk-or-v1-abcdef0123456789"), "{s}");
    assert!(s.contains("OPENROUTER_API_KEY="), "{s}");
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_keeps_top_level_arrays() {
    let out = sanitize_tool_result(&json!([
        {"output": "Authorization: Bearer abcdef0123456789QWERTY="},
        "apiKey=sk-1234567890abcdefXYZ"
    ]));
    assert!(out.is_array());
    let s = out.to_string();
    assert!(!s.contains("abcdef0123456789QWERTY="), "{s}");
    assert!(!s.contains("sk-1234567890abcdefXYZ"), "{s}");
    assert!(
        out[0]["output"]
            .as_str()
            .unwrap_or_default()
            .contains("Authorization: Bearer")
    );
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_configured_patterns() {
    let config = RedactionConfig {
        token_prefixes: vec!["custom-secret-".into()],
    };
    let out = sanitize_tool_result_with(
        &json!({"content": [{"type": "text", "text": "value custom-secret-abc123"}]}),
        &config,
    );
    let text = text_of(&out);
    assert!(!text.contains("custom-secret-abc123"), "{text}");
    assert!(text.contains("custom…c123"), "{text}");
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_args_redact_nested_credentials() {
    let out = sanitize_tool_args(&json!({
        "apiKey": "sk-1234567890abcdefXYZ",
        "headers": {"Authorization": "Bearer abcdef0123456789QWERTY="},
        "command": "OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789 ./run.sh",
        "flags": ["--api-key", "sk-1234567890abcdefXYZ"]
    }));
    let s = out.to_string();
    assert!(!s.contains("sk-1234567890abcdefXYZ"), "{s}");
    assert!(!s.contains("abcdef0123456789QWERTY="), "{s}");
    assert!(!s.contains("sk-or-v1-abcdef0123456789"), "{s}");
    assert_eq!(out["flags"][0], json!("--api-key"));
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_args_env_placeholders() {
    let out = sanitize_tool_args(&json!({
        "DISCORD_BOT_TOKEN": "${DISCORD_BOT_TOKEN:-}",
        "nested": {
            "apiKey": "${OPENAI_API_KEY:-}",
            "GITHUB_TOKEN": "${GITHUB_TOKEN:-literalgithub1234567890}"
        }
    }));
    assert_eq!(out["DISCORD_BOT_TOKEN"], json!("${DISCORD_BOT_TOKEN:-}"));
    assert_eq!(out["nested"]["apiKey"], json!("${OPEN…Y:-}"));
    // Deliberate difference: OpenClaw masks only the literal default inside the reference
    // (`${GITHUB_TOKEN:-liter…890}`); Tether masks a value under a sensitive key whole.
    let github = out["nested"]["GITHUB_TOKEN"].as_str().unwrap_or_default();
    assert!(!github.contains("literalgithub1234567890"), "{github}");
    assert_eq!(github, "${GITH…890}");
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_args_pass_plain_values_through() {
    assert_eq!(sanitize_tool_args(&Value::Null), Value::Null);
    assert_eq!(sanitize_tool_args(&json!(42)), json!(42));
    let plain = json!({"count": 3, "file_path": "/tmp/x.txt"});
    assert_eq!(sanitize_tool_args(&plain), plain);
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_result_text_of_non_objects() {
    assert_eq!(extract_tool_result_text(&Value::Null), None);
    assert_eq!(extract_tool_result_text(&json!("string")), None);
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_result_text_joins_text_blocks() {
    assert_eq!(
        extract_tool_result_text(&json!({"content": [
            {"type": "text", "text": "hello"}, {"type": "text", "text": "world"}
        ]}))
        .as_deref(),
        Some("hello\nworld")
    );
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_result_text_serializes_structured_blocks() {
    let text = extract_tool_result_text(&json!({"content": [
        {"type": "resource", "resource": {"uri": "file:///tmp/data.json"}}
    ]}))
    .unwrap_or_default();
    assert!(text.contains("resource"), "{text}");
    assert!(text.contains("file:///tmp/data.json"), "{text}");
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_result_text_skips_images() {
    assert_eq!(
        extract_tool_result_text(&json!({"content": [
            {"type": "image", "data": "base64...", "mimeType": "image/png"}
        ]})),
        None
    );
}

#[test]
fn openclaw_embedded_agent_subscribe_tools_result_text_prefers_text_blocks() {
    assert_eq!(
        extract_tool_result_text(&json!({"content": [
            {"type": "text", "text": "visible output"},
            {"type": "resource", "resource": {"uri": "file:///tmp/data.json"}}
        ]}))
        .as_deref(),
        Some("visible output")
    );
    let fallback = extract_tool_result_text(&json!({"content": [
        {"type": "resource", "resource": {"uri": "file:///tmp/data.json"}}
    ]}))
    .unwrap_or_default();
    assert!(fallback.contains("resource"), "{fallback}");
}
