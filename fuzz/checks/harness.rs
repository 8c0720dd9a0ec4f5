//! Checks shared by the harness-SDK fuzz targets (`fuzz/fuzz_targets/`) and their proptest
//! twins (`crates/harness-sdk/tests/it/fuzz_twins.rs`): every parser and sanitizer takes
//! arbitrary bytes without panicking, never changes its input, and keeps its documented
//! algebra (idempotent sanitizing, codec and delivery-fact round trips).

use serde_json::Value;
use tether_core::{JsonObjectCodec, RecordCodec};
use tether_harness_sdk::backend::ThreadBindingCodec;
use tether_harness_sdk::results::delivery::{
    project_plugin_message_delivery_fact, read_message_delivery_fact, read_result_delivery_fact,
};
use tether_harness_sdk::results::display::{DetailMode, infer_tool_meta_from_args};
use tether_harness_sdk::results::redact::redact_text;
use tether_harness_sdk::results::sanitize::{
    redact_structured, sanitize_tool_args, sanitize_tool_result,
};

/// The tool names the display inference knows, plus one it does not.
pub const TOOLS: &[&str] = &[
    "exec",
    "bash",
    "read",
    "write",
    "edit",
    "apply_patch",
    "web_search",
    "web_fetch",
    "browser",
    "message",
    "sessions_spawn",
    "cron",
    "process",
    "no-such-tool",
];

/// Fuzz bytes as JSON, when they parse.
pub fn json(data: &[u8]) -> Option<Value> {
    serde_json::from_slice(data).ok()
}

/// `sanitize_tool_args`: input unchanged, result idempotent.
pub fn check_sanitize_tool_args(data: &[u8]) {
    let Some(args) = json(data) else { return };
    let before = args.clone();
    let once = sanitize_tool_args(&args);
    assert_eq!(args, before, "sanitize_tool_args changed its input");
    let twice = sanitize_tool_args(&once);
    assert_eq!(once, twice, "sanitize_tool_args is not idempotent");
}

/// One planted secret per row of the redaction table (`docs/redaction.md`): the row, the text
/// to plant and the secret inside it that must never come out.
pub const PLANTED_SECRETS: &[(&str, &str, &str)] = &[
    (
        "assignment",
        "OPENAI_API_KEY=abc123def456ghi789",
        "abc123def456ghi789",
    ),
    ("flag", "--api-key k3yMaterial991", "k3yMaterial991"),
    (
        "query and form",
        "https://example.test/callback?code=oauthGrantValue5678&state=x",
        "oauthGrantValue5678",
    ),
    (
        "encoded key",
        "client%5Fsecret=opaqueOauthSecret77",
        "opaqueOauthSecret77",
    ),
    (
        "bearer",
        "Authorization: Bearer opaqueTokenValue12345",
        "opaqueTokenValue12345",
    ),
    (
        "basic",
        "Basic dXNlcjpzM2NyM3QtcGFzcw==",
        "dXNlcjpzM2NyM3QtcGFzcw==",
    ),
    (
        "authorization",
        "Authorization: Digest username=ops, response=digestresponse1234567890",
        "digestresponse1234567890",
    ),
    ("aws", "AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    (
        "google oauth",
        "ya29.a0AfH6SMBx-fake-access-token-1234",
        "ya29.a0AfH6SMBx-fake-access-token-1234",
    ),
    (
        "alibaba",
        "LTAI5tExampleFakeKeyXyz9",
        "LTAI5tExampleFakeKeyXyz9",
    ),
    (
        "model provider",
        "xai-AbCdEfGhIjKlMnOpQrStUvWxYz",
        "xai-AbCdEfGhIjKlMnOpQrStUvWxYz",
    ),
    (
        "xml element",
        "<password>s3cr3t-xml-pass</password>",
        "s3cr3t-xml-pass",
    ),
    (
        "user flag",
        "curl -u admin:s3cr3t-user-pass",
        "s3cr3t-user-pass",
    ),
    (
        "xml attribute",
        "<add key=\"ApiKey\" value=\"s3cr3t-xml-attr\"/>",
        "s3cr3t-xml-attr",
    ),
    (
        "plist value",
        "<key>password</key><string>s3cr3t-plist-pw</string>",
        "s3cr3t-plist-pw",
    ),
    (
        "single-dash flag",
        "tool -token s3cr3t-dash-token",
        "s3cr3t-dash-token",
    ),
    (
        "quoted flag",
        "tool --password 's3cr3t quoted pw'",
        "s3cr3t quoted pw",
    ),
    (
        "command flag glued",
        "mysql -uroot -ps3cr3t-mysql-pass",
        "s3cr3t-mysql-pass",
    ),
    (
        "command flag",
        "sshpass -p s3cr3t-sshpass-pw ssh",
        "s3cr3t-sshpass-pw",
    ),
    (
        "namespaced xml element",
        "<wsse:Password Type=\"#PasswordText\">s3cr3t-wsse-pw</wsse:Password>",
        "s3cr3t-wsse-pw",
    ),
    (
        "secret store flag",
        "gh secret set X --body s3cr3t-gh-body",
        "s3cr3t-gh-body",
    ),
    (
        "secret store pair",
        "fly secrets set FOO=s3cr3t-fly-value",
        "s3cr3t-fly-value",
    ),
    (
        "secure string",
        "ConvertTo-SecureString 's3cr3t-ps-plain' -AsPlainText",
        "s3cr3t-ps-plain",
    ),
    (
        "gitlab session",
        "_gitlab_session=0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef",
    ),
    (
        "vendor",
        "dckr_pat_AbCdEfGhIjKlMnOpQrStUvWxYz0",
        "dckr_pat_AbCdEfGhIjKlMnOpQrStUvWxYz0",
    ),
    (
        "dotted",
        "SG.AbCdEfGhIjKlMnOpQrStUv.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abc",
        "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abc",
    ),
    (
        "discord bot",
        "MTIzNDU2Nzg5MDEyMzQ1Njc4.GAbCdE.AbCdEfGhIjKlMnOpQrStUvWxYz0123",
        "AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    ),
    (
        "webhook",
        "https://hooks.slack.com/services/T0123ABCD/B0456EFGH/AbCdEfGhIjKlMnOpQrStUvWx",
        "AbCdEfGhIjKlMnOpQrStUvWx",
    ),
    (
        "fernet",
        "gAAAAABlZxYzAbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "gAAAAABlZxYzAbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    ),
    (
        "bot",
        "123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef",
    ),
    (
        "tencent",
        "AKIDz8krbsJ5yKBZQpn74WFkmLPx3EXAMPLE",
        "AKIDz8krbsJ5yKBZQpn74WFkmLPx3EXAMPLE",
    ),
    (
        "google",
        "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
        "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    ),
    (
        "azure",
        "AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==;",
        "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==",
    ),
    (
        "github",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    ),
    (
        "slack",
        "xoxb-2048-4096-AbCdEfGhIjKlMnOp",
        "xoxb-2048-4096-AbCdEfGhIjKlMnOp",
    ),
    (
        "stripe",
        "sk_live_51HxYzAbCdEfGhIjKlMn",
        "sk_live_51HxYzAbCdEfGhIjKlMn",
    ),
    (
        "anthropic",
        "sk-ant-api03-AbCdEf0123456789-xyz",
        "sk-ant-api03-AbCdEf0123456789-xyz",
    ),
    (
        "registry",
        "hf_AbCdEfGhIjKlMnOpQrStUv",
        "hf_AbCdEfGhIjKlMnOpQrStUv",
    ),
    (
        "pem",
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----",
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
    ),
    (
        "jwt",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
    ),
    (
        "url",
        "postgres://app:s3cr3t-db-pass@db:5432/prod",
        "s3cr3t-db-pass",
    ),
    (
        "url token user",
        "https://ghp_16C7e42F292c6912E7710c838347Ae178B4a:x-oauth-basic@github.com/o/r",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    ),
    ("card", "4111 1111 1111 1111", "4111 1111 1111 1111"),
    (
        "shell",
        "${GITHUB_TOKEN:-literalgithub1234567890}",
        "literalgithub1234567890",
    ),
];

/// Sensitive key names of the key table (`docs/redaction.md`, "Key names"), one per shape:
/// exact names, separators and case, the `SNAKE_CASE`, camel-case and compound suffix rules.
pub const PLANTED_KEYS: &[&str] = &[
    "apiKey",
    "api-key",
    "PASSWORD",
    "client_secret",
    "privateKey",
    "Authorization",
    "cookie",
    "connectionString",
    "cardNumber",
    "cvc",
    "sharedPaymentToken",
    "GITHUB_TOKEN",
    "DB_PASSWD",
    "stripeSecret",
    "openaiApiKey",
    "PGPASSWORD",
    "MYSQL_PWD",
];

/// A secret planted under a sensitive key or as a flag's value in an array of arguments (no
/// free-text shape would catch it alone).
pub const PLANTED_KEY_SECRET: &str = "opaque plain words 0427";

/// What a planted secret is glued to on each side (after the blank that parts it from the
/// filler): nothing, a separator other than a blank, or a separator's escape in serialized or
/// encoded text (`\n` written as a backslash and `n`, `\u0020`, `%20`). Each leaves the secret
/// a word of its own, so none may hide it. (A `+` is not among them: a Fernet token right
/// after one continues a base64 blob.)
pub const GLUES: &[(&str, &str)] = &[
    ("", ""),
    ("\t", "\t"),
    ("\r\n", "\r\n"),
    ("\"", "\""),
    ("'", "'"),
    ("`", "`"),
    ("(", ")"),
    ("[", "]"),
    ("{", "}"),
    ("<", ">"),
    (",", ","),
    (";", ";"),
    ("|", "|"),
    ("/", "/"),
    ("@", "@"),
    ("!", "!"),
    ("?", "?"),
    (": ", ","),
    ("=", "&"),
    ("* ", " *"),
    ("# ", " #"),
    ("- ", " -"),
    ("\\n", "\\n"),
    ("\\t", "\\t"),
    ("\\r\\n", "\\r\\n"),
    ("\\u0020", "\\u0020"),
    ("\\x0a", "\\x20"),
    ("\\v", "\\v"),
    ("\\\\n", "\\\\n"),
    ("\\\"", "\\\""),
    ("%20", "%20"),
    ("%0A", "%0A"),
    ("&#10;", "&#10;"),
];

/// Plants every row's secret between two halves of arbitrary text (separated by blanks; line
/// breaks for a card number), glued to one of [`GLUES`] (which one moves with the row and the
/// input's length), and,
/// when the bytes are JSON, into every string of that JSON and under every sensitive key of
/// the key table at every object; checks that no redaction path lets a whole secret through.
pub fn check_planted_secrets(data: &[u8]) {
    check_planted_secrets_with(data, |row| GLUES[(data.len() + row) % GLUES.len()]);
}

/// [`check_planted_secrets`] with every row's secret glued to `glue`.
pub fn check_planted_secrets_glued(data: &[u8], glue: (&str, &str)) {
    check_planted_secrets_with(data, |_| glue);
}

/// [`check_planted_secrets`] with the glue of each row (by its index) from `glue`.
fn check_planted_secrets_with<'g>(data: &[u8], glue: impl Fn(usize) -> (&'g str, &'g str)) {
    let filler = String::from_utf8_lossy(data);
    let mid = (0..=filler.len() / 2)
        .rev()
        .find(|i| filler.is_char_boundary(*i))
        .unwrap_or(0);
    let (head, tail) = filler.split_at(mid);
    let fuzzed = json(data);
    for (index, (row, planted, secret)) in PLANTED_SECRETS.iter().enumerate() {
        // Digit groups one blank apart read as one number, so a card number is planted on
        // its own line (filler digits next to it would make a longer, non-card number).
        let sep = if *row == "card" { '\n' } else { ' ' };
        let (open, close) = glue(index);
        let text = format!("{head}{sep}{open}{planted}{close}{sep}{tail}");
        let value = Value::String(text.clone());
        let outputs = [
            redact_text(&text),
            sanitize_tool_args(&serde_json::json!({ "task": value.clone() })).to_string(),
            sanitize_tool_result(
                &serde_json::json!({"content": [{"type": "text", "text": value}]}),
            )
            .to_string(),
        ];
        // The filler may spell a secret inside something that is not one (`4111 1111 1111
        // 1111` inside a 30-digit number): only more occurrences than it had are a leak. The
        // serialized outputs are compared with the serialized filler, whose escapes can spell
        // one too (`4\u{4}111 1111 1111 1111` is written `4\u0004111 1111 1111 1111`).
        let in_filler = head.matches(secret).count() + tail.matches(secret).count();
        let in_serialized_filler = Value::String(format!("{head}{sep}{open}{close}{sep}{tail}"))
            .to_string()
            .matches(secret)
            .count();
        for (k, out) in outputs.iter().enumerate() {
            let allowed = if k == 0 {
                in_filler
            } else {
                in_serialized_filler
            };
            assert!(
                out.matches(secret).count() <= allowed,
                "the {row} secret survived redaction in {text:?}"
            );
        }
        if let Some(fuzzed) = &fuzzed {
            let planted_json = plant_in_strings(fuzzed, planted);
            let in_fuzzed = fuzzed.to_string().matches(secret).count();
            for out in redaction_paths(&planted_json) {
                assert!(
                    out.matches(secret).count() <= in_fuzzed,
                    "the {row} secret survived redaction inside {planted_json}"
                );
            }
        }
    }
    let carrier = fuzzed.unwrap_or_else(|| Value::String(filler.into_owned()));
    let in_carrier = carrier.to_string().matches(PLANTED_KEY_SECRET).count();
    let keyed = plant_under_keys(&carrier);
    for out in redaction_paths(&keyed) {
        assert!(
            out.matches(PLANTED_KEY_SECRET).count() <= in_carrier,
            "a secret under a sensitive key survived redaction inside {keyed}"
        );
    }
}

/// The structured redaction paths, serialized.
fn redaction_paths(value: &Value) -> [String; 3] {
    [
        sanitize_tool_args(value).to_string(),
        redact_structured(value).to_string(),
        sanitize_tool_result(value).to_string(),
    ]
}

/// A copy of `value` with `planted` appended to every string (on a line of its own), a `task` field holding it in
/// every object and an element holding it in every array (iteratively: fuzzed JSON can be
/// deep).
fn plant_in_strings(value: &Value, planted: &str) -> Value {
    let mut out = value.clone();
    let mut stack = vec![&mut out];
    while let Some(node) = stack.pop() {
        match node {
            Value::String(s) => {
                s.push('\n');
                s.push_str(planted);
            }
            Value::Array(items) => {
                items.push(Value::String(planted.to_owned()));
                stack.extend(items.iter_mut());
            }
            Value::Object(map) => {
                map.insert("task".into(), Value::String(planted.to_owned()));
                stack.extend(map.values_mut());
            }
            _ => {}
        }
    }
    if !out.is_object() && !out.is_array() {
        out = serde_json::json!({ "task": out });
    }
    out
}

/// A copy of `value` (wrapped in an object when it is not one) where every object also holds
/// the planted key secret under every key of [`PLANTED_KEYS`] and, under an ordinary key, as
/// the values of credential flags and of commands that store secrets in an array of
/// arguments; every array also ends with such a flag and the secret.
fn plant_under_keys(value: &Value) -> Value {
    let mut out = match value {
        Value::Object(_) => value.clone(),
        other => serde_json::json!({ "payload": other }),
    };
    let mut stack = vec![&mut out];
    while let Some(node) = stack.pop() {
        match node {
            Value::Array(items) => {
                items.push(Value::String("--password".to_owned()));
                items.push(Value::String(PLANTED_KEY_SECRET.to_owned()));
                stack.extend(items.iter_mut());
            }
            Value::Object(map) => {
                for key in PLANTED_KEYS {
                    map.insert(
                        (*key).to_owned(),
                        Value::String(PLANTED_KEY_SECRET.to_owned()),
                    );
                }
                map.insert(
                    "argv".to_owned(),
                    serde_json::json!([
                        "tool",
                        "--api-key",
                        PLANTED_KEY_SECRET,
                        "-u",
                        format!("admin:{PLANTED_KEY_SECRET}"),
                        "sshpass",
                        "-p",
                        PLANTED_KEY_SECRET,
                        "mysql",
                        format!("-p{PLANTED_KEY_SECRET}"),
                        "gh",
                        "secret",
                        "set",
                        "X",
                        "--body",
                        PLANTED_KEY_SECRET,
                        "fly",
                        "secrets",
                        "set",
                        format!("FOO={PLANTED_KEY_SECRET}"),
                    ]),
                );
                stack.extend(map.values_mut());
            }
            _ => {}
        }
    }
    out
}

/// `infer_tool_meta_from_args`: the first byte picks the tool, the second the detail mode, the
/// rest is the arguments; deterministic, input unchanged, never an empty display.
pub fn check_infer_tool_meta_from_args(data: &[u8]) {
    let [tool, mode, rest @ ..] = data else {
        return;
    };
    let Some(args) = json(rest) else { return };
    let tool = TOOLS[usize::from(*tool) % TOOLS.len()];
    let mode = if mode % 2 == 0 {
        DetailMode::Raw
    } else {
        DetailMode::Explain
    };
    let before = args.clone();
    let first = infer_tool_meta_from_args(tool, &args, mode);
    assert_eq!(args, before, "infer_tool_meta_from_args changed its input");
    assert_eq!(first, infer_tool_meta_from_args(tool, &args, mode));
    if let Some(meta) = first {
        assert!(!meta.is_empty(), "an empty display for {tool}");
    }
}

/// The delivery-fact readers: no panic, input unchanged, a read fact survives its own
/// serialization.
pub fn check_delivery_facts(data: &[u8]) {
    let Some(value) = json(data) else { return };
    let before = value.clone();
    let read = read_message_delivery_fact(&value);
    let _ = read_result_delivery_fact(&value);
    let _ = project_plugin_message_delivery_fact(&value);
    assert_eq!(value, before, "a delivery-fact reader changed its input");
    if let Some(fact) = read {
        let again = read_message_delivery_fact(&fact.to_json());
        assert_eq!(again.as_ref(), Some(&fact), "delivery fact round trip");
    }
}

/// Whether a JSON value holds a non-integer number anywhere. Without serde_json's
/// `float_roundtrip` feature, parsing a float is not correctly rounded, so a re-encoded float
/// can differ in its last bit (a finding of these targets, recorded in `RELIABILITY.md`).
pub fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

/// The binding record codecs: a decoded record re-encodes to a value that decodes to it (for
/// the JSON object codec, exactly when the record holds no float).
pub fn check_binding_record_codecs(data: &[u8]) {
    if let Some(record) = ThreadBindingCodec.decode(data) {
        let again = ThreadBindingCodec.decode(&ThreadBindingCodec.encode(&record));
        assert_eq!(
            again.as_ref(),
            Some(&record),
            "thread binding codec round trip"
        );
    }
    if let Some(record) = JsonObjectCodec.decode(data) {
        let again = JsonObjectCodec
            .decode(&JsonObjectCodec.encode(&record))
            .expect("an encoded record decodes");
        if !record.values().any(has_float) {
            assert_eq!(again, record, "JSON object codec round trip");
        }
        assert_eq!(again.len(), record.len(), "no field lost");
    }
}
