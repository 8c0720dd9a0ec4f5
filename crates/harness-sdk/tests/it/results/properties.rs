//! Property tests over arbitrary JSON: no helper panics, none mutates its input, sanitizing is
//! idempotent, the shared-graph walks agree with the tree walks on a tree, redaction never leaks
//! a value under a secret key, 10,000-deep nesting is handled.

use std::borrow::Cow;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use tether_harness_sdk::results::delivery::{
    MessagingToolResult, extract_messaging_tool_source_reply_payload,
    is_delivered_messaging_tool_result, project_plugin_message_delivery_fact,
    read_message_delivery_fact, read_result_delivery_fact,
};
use tether_harness_sdk::results::display::{DetailMode, infer_tool_meta_from_args};
use tether_harness_sdk::results::mirror::restore_prepared_user_turn_meta;
use tether_harness_sdk::results::redact::{is_sensitive_key, redact_text};
use tether_harness_sdk::results::sanitize::{
    redact_structured, sanitize_tool_args, sanitize_tool_result,
};
use tether_harness_sdk::results::shared::{
    SharedValue, redact_shared_structured, sanitize_shared_tool_args,
};
use tether_harness_sdk::results::terminal::{
    FingerprintIdentity, OwnerMutation, ToolResult, ToolTerminalObservation,
    terminal_outcome_accumulator,
};
use tether_harness_sdk::results::{deep_clone, drop_deep};

const KEYS: &[&str] = &[
    "token",
    "apiKey",
    "password",
    "__proto__",
    "text",
    "content",
    "type",
    "id",
    "publicShare",
    "DISCORD_BOT_TOKEN",
    "cvc",
    "details",
    "messageId",
    "status",
    "ok",
    "error",
    "result",
    "results",
    "action",
    "path",
    "command",
    "data",
    "image",
    "session",
    "role",
    "__openclaw",
    "humanMentions",
    "deliveryStatus",
    "sentBeforeError",
    "payload",
    "sourceReplySink",
    "messageDelivery",
];

const SECRET_KEYS: &[&str] = &[
    "token",
    "apiKey",
    "api_key",
    "password",
    "passwd",
    "secret",
    "authorization",
    "client_secret",
    "OPENAI_API_KEY",
    "DISCORD_BOT_TOKEN",
    "cvc",
    "card_number",
    "cookie",
    "jwt",
    "privateKey",
];

const FRAGMENTS: &[&str] = &[
    "token=",
    "Bearer ",
    "sk-",
    "abcdefghij1234",
    "${",
    "GITHUB_TOKEN",
    ":-",
    "}",
    "\"",
    "'",
    "--api-key ",
    "password: ",
    " ",
    "\n",
    "…",
    "***",
    "apiKey",
    "=",
    ":",
    "ghp_",
    "custom",
    "-",
    "_",
    "\\",
    "{\"messageId\":\"m1\"}",
    "sent",
    "image",
    "OPENROUTER_API_KEY",
    "xyz",
    "0123456789",
    "abcd-efgh",
    "-ijkl-mnop",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(KEYS).prop_map(str::to_owned),
        1 => "[a-zA-Z_]{1,8}",
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,24}",
        proptest::collection::vec(proptest::sample::select(FRAGMENTS), 0..8)
            .prop_map(|f| f.concat()),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map(key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

/// Runs every helper; outputs are dropped without recursion (they may be as deep as the input).
fn all_helpers(v: &Value, other: &Value) {
    drop_deep(sanitize_tool_args(v));
    drop_deep(sanitize_tool_result(v));
    drop_deep(redact_structured(v));
    for tool in [
        "exec",
        "read",
        "write",
        "message",
        "web_search",
        "unknown_tool",
        "sessions_spawn",
    ] {
        let _ = infer_tool_meta_from_args(tool, v, DetailMode::Raw);
    }
    let _ = project_plugin_message_delivery_fact(v);
    let _ = read_message_delivery_fact(v);
    let _ = read_result_delivery_fact(v);
    let _ = extract_messaging_tool_source_reply_payload(v);
    let _ = is_delivered_messaging_tool_result(&MessagingToolResult {
        args: Some(other),
        result: Some(v),
        hook_result: Some(other),
        ..Default::default()
    });
    if let Cow::Owned(restored) = restore_prepared_user_turn_meta(v, Some(other)) {
        drop_deep(restored);
    }
    let _ = tether_harness_sdk::results::spawn::normalize_accepted_session_spawn_result(v);
    observe_all(v, other);
}

/// Feeds the terminal-outcome accumulator observations built from arbitrary JSON.
fn observe_all(v: &Value, other: &Value) {
    let (mut observer, host) = terminal_outcome_accumulator("run-p", Arc::new(FingerprintIdentity));
    host.record_adjusted_params("call-adjusted", deep_clone(other));
    for tool in [
        "message",
        "write",
        "exec",
        "memory_store",
        "apply_patch",
        "read",
    ] {
        for (call, failed, owner) in [("call-adjusted", true, false), ("call-2", false, true)] {
            let base = if failed {
                ToolTerminalObservation::failure(tool, deep_clone(v), "x")
            } else {
                ToolTerminalObservation::success(tool, deep_clone(v))
            };
            let observation = ToolTerminalObservation {
                tool_call_id: Some(call.into()),
                result: Some(ToolResult::new(deep_clone(other))),
                owner_mutation: owner.then(|| OwnerMutation {
                    owner_key: "owner".into(),
                }),
                ..base
            };
            let resolution = observer.observe(&observation);
            if let Some(args) = resolution.executed_arguments {
                drop_deep(Value::Object(args));
            }
            if let Some(args) = observation.arguments {
                drop_deep(args);
            }
            if let Some(result) = observation.result {
                drop_deep(result.into_value());
            }
        }
    }
}

/// Found by `sanitizing_is_idempotent`: an unterminated quote used to end its masked value at
/// the next terminator while an unquoted value runs on, so a second pass masked more.
#[test]
fn sanitizing_an_unterminated_quote_is_idempotent() {
    for text in [
        "token=\"\u{2026}}token=",
        "token=\"abc}def ghi",
        "api_key='x,y;z w",
    ] {
        let v = json!([{ "details": text }]);
        let once = sanitize_tool_args(&v);
        assert_eq!(sanitize_tool_args(&once), once, "{text}");
        let once = redact_text(text);
        assert_eq!(redact_text(&once), once, "{text}");
        assert!(!once.contains("abc") && !once.contains("x,y"), "{once}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn helpers_never_panic_nor_mutate(v in json_value(), other in json_value()) {
        let (before_v, before_o) = (v.clone(), other.clone());
        all_helpers(&v, &other);
        let mut user = json!({"role": "user", "content": v.clone()});
        user["__openclaw"] = other.clone();
        all_helpers(&user, &user);
        prop_assert_eq!(&v, &before_v);
        prop_assert_eq!(&other, &before_o);
    }

    #[test]
    fn sanitizing_is_idempotent(v in json_value()) {
        let args = sanitize_tool_args(&v);
        prop_assert_eq!(&sanitize_tool_args(&args), &args);
        let result = sanitize_tool_result(&v);
        prop_assert_eq!(&sanitize_tool_result(&result), &result);
        let structured = redact_structured(&v);
        prop_assert_eq!(&redact_structured(&structured), &structured);
    }

    /// The shared-graph walks judge each scalar through their own path (no key memo, no
    /// in-place rewrite); on a tree, where no node repeats, they give the tree walks' output.
    #[test]
    fn shared_walks_agree_with_the_tree_walks_on_a_tree(v in json_value()) {
        let shared = SharedValue::from_json(&v);
        prop_assert_eq!(sanitize_shared_tool_args(&shared), sanitize_tool_args(&v));
        prop_assert_eq!(redact_shared_structured(&shared), redact_structured(&v));
    }

    #[test]
    fn text_redaction_is_idempotent(s in text()) {
        let once = redact_text(&s);
        prop_assert_eq!(redact_text(&once), once);
    }

    #[test]
    fn redaction_never_leaks_a_value_under_a_secret_key(
        k in proptest::sample::select(SECRET_KEYS),
        secret in "[A-Za-z0-9_-]{4,40}",
        noise in json_value(),
    ) {
        prop_assert!(is_sensitive_key(k));
        let input = json!({"outer": [noise, {k: secret.clone()}], k: secret.clone()});
        for out in [sanitize_tool_args(&input), sanitize_tool_result(&input), redact_structured(&input)] {
            let direct = out[k].as_str().unwrap_or_default();
            prop_assert!(!direct.contains(secret.as_str()), "{} leaked as {}", secret, direct);
            let nested = out["outer"][1][k].as_str().unwrap_or_default();
            prop_assert!(!nested.contains(secret.as_str()), "{} leaked as {}", secret, nested);
        }
    }
}

/// 10,000 levels of alternating arrays and objects (with secret keys on the way).
fn deep_value(levels: usize) -> Value {
    let mut v = json!({"token": "hunter2-hunter2-hunter2", "text": "ok"});
    for i in 0..levels {
        v = if i % 2 == 0 {
            Value::Array(vec![v, json!("sk-1234567890abcdefXYZ")])
        } else {
            let mut m = Map::new();
            m.insert(
                if i % 3 == 0 {
                    "result".into()
                } else {
                    "content".into()
                },
                v,
            );
            m.insert("apiKey".into(), json!("sk-1234567890abcdefXYZ"));
            Value::Object(m)
        };
    }
    v
}

/// Follows the first child down; returns the depth and the innermost value's `token`.
fn descend(v: &Value) -> (usize, Option<String>) {
    let mut depth = 0;
    let mut cur = v;
    loop {
        let next = match cur {
            Value::Array(a) => a.first(),
            Value::Object(m) => m.get("result").or_else(|| m.get("content")),
            _ => None,
        };
        match next {
            Some(n) => {
                depth += 1;
                cur = n;
            }
            None => {
                return (
                    depth,
                    cur.get("token").and_then(Value::as_str).map(str::to_owned),
                );
            }
        }
    }
}

#[test]
fn ten_thousand_deep_nesting_is_handled() {
    let handle = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(|| {
            let v = deep_value(10_000);
            let other = deep_value(10_000);
            all_helpers(&v, &other);
            for out in [
                sanitize_tool_args(&v),
                sanitize_tool_result(&v),
                redact_structured(&v),
            ] {
                let (depth, token) = descend(&out);
                assert_eq!(depth, 10_000);
                assert_eq!(token.as_deref(), Some("hunter…ter2"));
                drop_deep(out);
            }
            drop_deep(v);
            drop_deep(other);
        })
        .expect("spawn");
    handle.join().expect("no stack overflow on a 1 MiB stack");
}
