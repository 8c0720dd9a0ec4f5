//! Part D: `sanitize_tool_args` / `sanitize_tool_result` (vectors 75–96).

use serde_json::{Value, json};
use tether_harness_sdk::results::redact::RedactionConfig;
use tether_harness_sdk::results::sanitize::{
    TOOL_RESULT_MAX_CHARS, TRUNCATION_SUFFIX, redact_structured, sanitize_tool_args,
    sanitize_tool_result, sanitize_tool_result_with,
};
use tether_harness_sdk::results::shared::{
    SharedObject, SharedValue, redact_shared_structured, sanitize_shared_tool_args,
};

/// Every string in the value, depth first.
fn strings(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![v];
    while let Some(n) = stack.pop() {
        match n {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => stack.extend(a),
            Value::Object(m) => {
                out.extend(m.keys().cloned());
                stack.extend(m.values());
            }
            _ => {}
        }
    }
    out
}

fn assert_absent(v: &Value, secrets: &[&str]) {
    for s in strings(v) {
        for secret in secrets {
            assert!(!s.contains(secret), "secret {secret:?} leaked in {s:?}");
        }
    }
}

#[test]
fn tool_results_075_scalars_and_plain_objects_pass_through() {
    assert_eq!(sanitize_tool_args(&Value::Null), Value::Null);
    assert_eq!(sanitize_tool_args(&json!(42)), json!(42));
    let plain = json!({"count": 3, "file_path": "/scratch/x.txt"});
    assert_eq!(sanitize_tool_args(&plain), plain);
}

#[test]
fn tool_results_076_secrets_removed_everywhere() {
    let args = json!({"apiKey": "sk-1234567890abcdefXYZ",
        "headers": {"Authorization": "Bearer abcdef0123456789QWERTY="},
        "command": "OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789 ./run.sh",
        "flags": ["--api-key", "sk-1234567890abcdefXYZ"]});
    let out = sanitize_tool_args(&args);
    assert_absent(
        &out,
        &[
            "sk-1234567890abcdefXYZ",
            "abcdef0123456789QWERTY=",
            "sk-or-v1-abcdef0123456789",
        ],
    );
    assert_eq!(out["flags"][0], "--api-key");
    assert!(
        out["command"]
            .as_str()
            .is_some_and(|c| c.ends_with(" ./run.sh"))
    );
}

/// The exact mask of a shell default differs from OpenClaw's pattern table (which printed
/// `${GITHUB_TOKEN:-liter…890}`): under a sensitive key Tether masks the whole value with the
/// standard rule (first 6, `…`, last 4), so no part of the literal default survives.
#[test]
fn tool_results_077_shell_references() {
    let args = json!({"DISCORD_BOT_TOKEN": "${DISCORD_BOT_TOKEN:-}",
        "nested": {"apiKey": "${OPENAI_API_KEY:-}", "GITHUB_TOKEN": "${GITHUB_TOKEN:-literalgithub1234567890}"}});
    let out = sanitize_tool_args(&args);
    assert_eq!(out["DISCORD_BOT_TOKEN"], "${DISCORD_BOT_TOKEN:-}");
    assert_eq!(out["nested"]["apiKey"], "${OPEN…Y:-}");
    let gh = out["nested"]["GITHUB_TOKEN"].as_str().expect("string");
    assert_eq!(gh, "${GITH…890}");
    assert!(!gh.contains("literalgithub1234567890"));
}

#[test]
fn tool_results_078_password_string_masked_number_kept() {
    assert_eq!(
        sanitize_tool_args(&json!({"password": "hunter2"})),
        json!({"password": "***"})
    );
    assert_eq!(
        sanitize_tool_args(&json!({"password": 12345})),
        json!({"password": 12345})
    );
}

#[test]
fn tool_results_079_shared_reference_is_circular_in_args() {
    let s = SharedValue::from_json(&json!({"a": 1}));
    let root = SharedObject::new();
    root.insert("x", s.clone());
    root.insert("y", s);
    let out = sanitize_shared_tool_args(&SharedValue::Object(root));
    assert_eq!(out, json!({"x": {"a": 1}, "y": "[Circular]"}));
}

#[test]
fn tool_results_080_cycle_is_circular() {
    let o = SharedObject::new();
    o.insert("n", SharedValue::from_json(&json!(1)));
    o.insert("self", SharedValue::Object(o.clone()));
    let out = sanitize_shared_tool_args(&SharedValue::Object(o.clone()));
    assert_eq!(out, json!({"n": 1, "self": "[Circular]"}));
    // Break the cycle so the fixture is freed.
    o.insert("self", SharedValue::Null);
}

/// `serde_json::Value` is a tree: the same input converted to a tree has no repeats, so both
/// copies are sanitized (the property our tree type guarantees).
#[test]
fn tool_results_080b_tree_values_never_repeat() {
    let s = json!({"a": 1, "token": "abc"});
    let tree = json!({"x": s.clone(), "y": s});
    let out = sanitize_tool_args(&tree);
    assert_eq!(
        out,
        json!({"x": {"a": 1, "token": "***"}, "y": {"a": 1, "token": "***"}})
    );
}

#[test]
fn tool_results_081_proto_is_an_ordinary_key() {
    let input: Value =
        serde_json::from_str(r#"{"__proto__":{"token":"abc"},"ok":1}"#).expect("json");
    let before = input.to_string();
    let out = sanitize_tool_args(&input);
    assert_eq!(out, json!({"__proto__": {"token": "***"}, "ok": 1}));
    assert_eq!(input.to_string(), before);
}

#[test]
fn tool_results_082_input_not_mutated() {
    let input = json!({"apiKey": "sk-1234567890abcdefXYZ", "list": ["ghp_abcdefghij1234567890"],
        "content": [{"type": "image", "data": "aGVsbG8="}, {"type": "text", "text": "x".repeat(9000)}]});
    let before = input.to_string();
    let _ = sanitize_tool_args(&input);
    let _ = sanitize_tool_result(&input);
    assert_eq!(input.to_string(), before);
}

#[test]
fn tool_results_083_json_text_block_redacted() {
    let r = json!({"content": [{"type": "text", "text": "{\"apiKey\":\"sk-1234567890abcdef\",\"model\":\"gpt-4\"}"}]});
    let out = sanitize_tool_result(&r);
    let text = out["content"][0]["text"].as_str().expect("text");
    assert!(!text.contains("sk-1234567890abcdef"), "{text}");
    assert!(text.contains("model"), "{text}");
}

#[test]
fn tool_results_084_payment_fields() {
    let text = r#"{"shared_payment_token":"spt_live_abcdefghijklmnop","paymentCredential":"paycred_abcdefghijklmnop","card_number":"4242424242424242","cvc":"123","amount":"4200"}"#;
    let r = json!({"content": [{"type": "text", "text": text}],
        "details": {"structuredContent": {"sharedPaymentToken": "spt_test_zyxwvutsrqpo", "cardNumber": "4000056655665556", "amount": "4200"}}});
    let out = sanitize_tool_result(&r);
    assert_absent(
        &out,
        &[
            "spt_live_abcdefghijklmnop",
            "paycred_abcdefghijklmnop",
            "4242424242424242",
            "123",
            "spt_test_zyxwvutsrqpo",
            "4000056655665556",
        ],
    );
    assert!(
        out["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains(r#""amount":"4200""#))
    );
    assert_eq!(out["details"]["structuredContent"]["amount"], "4200");
}

fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

fn first_text(v: &Value) -> String {
    v["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn tool_results_085_env_assignment_in_text() {
    let out = first_text(&sanitize_tool_result(&text_result(
        "OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789\nMODEL=gpt-4",
    )));
    assert!(!out.contains("sk-or-v1-abcdef0123456789"), "{out}");
    assert!(out.contains("MODEL=gpt-4"), "{out}");
}

#[test]
fn tool_results_086_own_shell_references_unchanged() {
    let text = "DISCORD_BOT_TOKEN=\"${DISCORD_BOT_TOKEN:-}\"\nTELEGRAM_BOT_TOKEN=\"${TELEGRAM_BOT_TOKEN:-}\"";
    assert_eq!(first_text(&sanitize_tool_result(&text_result(text))), text);
}

/// We pin the decoded-size estimate: `"base64imagedata"` (15 characters) → 11 bytes.
#[test]
fn tool_results_087_image_data_omitted() {
    let r =
        json!({"content": [{"type": "image", "data": "base64imagedata", "mimeType": "image/png"}]});
    let out = sanitize_tool_result(&r);
    let img = &out["content"][0];
    assert!(img.get("data").is_none());
    assert_eq!(img["omitted"], true);
    assert_eq!(img["bytes"], 11);
    assert_eq!(img["mimeType"], "image/png");
    let again = sanitize_tool_result(&out);
    assert_eq!(again, out, "bytes kept when data is gone");
}

#[test]
fn tool_results_088_details_aggregated_output() {
    let r = json!({"details": {"status": "completed",
        "aggregated": "OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789\napiKey: \"ghp_abcdefghij1234567890\"",
        "exitCode": 0, "cwd": "/scratch/work"}});
    let out = sanitize_tool_result(&r);
    assert_absent(
        &out,
        &["sk-or-v1-abcdef0123456789", "ghp_abcdefghij1234567890"],
    );
    assert_eq!(out["details"]["status"], "completed");
    assert_eq!(out["details"]["exitCode"], 0);
    assert_eq!(out["details"]["cwd"], "/scratch/work");
}

#[test]
fn tool_results_089_top_level_fields() {
    let r = json!({"output": "OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789",
        "metadata": {"token": "ghp_abcdefghij1234567890ABCDEF", "nested": {"auth": "Bearer abcdef0123456789QWERTY="}},
        "summary": "ok"});
    let out = sanitize_tool_result(&r);
    assert_absent(
        &out,
        &[
            "sk-or-v1-abcdef0123456789",
            "ghp_abcdefghij1234567890ABCDEF",
            "abcdef0123456789QWERTY=",
        ],
    );
    assert_eq!(out["summary"], "ok");
}

#[test]
fn tool_results_090_string_result() {
    let out = sanitize_tool_result(&json!("OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789"));
    let s = out.as_str().expect("still a string");
    assert!(!s.contains("sk-or-v1-abcdef0123456789"));
    assert!(s.contains("OPENROUTER_API_KEY="));
}

#[test]
fn tool_results_091_array_result() {
    let r = json!([{"output": "Authorization: Bearer abcdef0123456789QWERTY="}, "apiKey=sk-1234567890abcdefXYZ"]);
    let out = sanitize_tool_result(&r);
    assert!(out.is_array());
    assert_absent(&out, &["abcdef0123456789QWERTY=", "sk-1234567890abcdefXYZ"]);
    assert!(
        out[0]["output"]
            .as_str()
            .is_some_and(|s| s.contains("Authorization: Bearer"))
    );
}

/// Custom patterns are literal token prefixes in Tether (no regex engine): the reference's
/// `\bcustom-secret-[A-Za-z0-9]+\b` becomes the prefix `custom-secret-`.
#[test]
fn tool_results_092_custom_pattern() {
    let config = RedactionConfig {
        token_prefixes: vec!["custom-secret-".into()],
    };
    let out = sanitize_tool_result_with(&text_result("value custom-secret-abc123"), &config);
    assert_eq!(first_text(&out), "value custom…c123");
}

#[test]
fn tool_results_093_text_truncation() {
    let long = "x".repeat(TOOL_RESULT_MAX_CHARS + 1);
    let out = first_text(&sanitize_tool_result(&text_result(&long)));
    assert_eq!(
        out,
        format!("{}{TRUNCATION_SUFFIX}", "x".repeat(TOOL_RESULT_MAX_CHARS))
    );
    let exact = "x".repeat(TOOL_RESULT_MAX_CHARS);
    assert_eq!(
        first_text(&sanitize_tool_result(&text_result(&exact))),
        exact
    );
}

#[test]
fn tool_results_094_structured_proto_keys() {
    let input: Value = serde_json::from_str(
        r#"{"__proto__":{"label":"root","token":"fixture-value"},"nested":{"__proto__":null},"items":[{"__proto__":"ordinary"},{"__proto__":123}]}"#,
    )
    .expect("json");
    let before = input.to_string();
    let out = redact_structured(&input);
    let expected: Value = serde_json::from_str(
        r#"{"__proto__":{"label":"root","token":"***"},"nested":{"__proto__":null},"items":[{"__proto__":"ordinary"},{"__proto__":123}]}"#,
    )
    .expect("json");
    assert_eq!(out, expected);
    assert_eq!(input.to_string(), before);
}

/// There is no `Date` in JSON; the shared graph checks the distinct-copies and cycle parts.
#[test]
fn tool_results_095_structured_shared_copies_and_cycle() {
    let s = SharedValue::from_json(&json!({"label": "ordinary", "token": "fixture-value"}));
    let root = SharedObject::new();
    root.insert("first", s.clone());
    root.insert("second", s.clone());
    root.insert("self", SharedValue::Object(root.clone()));
    let out = redact_shared_structured(&SharedValue::Object(root.clone()));
    let copy = json!({"label": "ordinary", "token": "***"});
    assert_eq!(
        out,
        json!({"first": copy, "second": copy, "self": "[Circular]"})
    );
    if let SharedValue::Object(o) = &s {
        assert!(matches!(o.get("token"), Some(SharedValue::String(t)) if t == "fixture-value"));
    }
    root.insert("self", SharedValue::Null);
}

#[test]
fn tool_results_096_public_share_id() {
    let id = "a".repeat(48);
    let input = json!({"publicShare": {"id": id, "sessionId": "session-1", "createdAt": 1}, "ordinary": {"id": id}});
    let out = sanitize_tool_args(&input);
    assert_eq!(out["publicShare"]["id"], "aaaaaa…aaaa");
    assert_eq!(out["publicShare"]["sessionId"], "session-1");
    assert_eq!(out["ordinary"]["id"], id.as_str());
}
