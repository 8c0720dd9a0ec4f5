//! Proptest twins of the harness-SDK fuzz targets (`fuzz/fuzz_targets/`): the same checks
//! (`fuzz/checks/harness.rs`, compiled into both), over arbitrary bytes and over generated JSON,
//! with a bounded number of cases so they run in `cargo xtask ci`.

#[allow(unreachable_pub, dead_code)]
#[path = "../../../../fuzz/checks/harness.rs"]
mod checks;

use proptest::prelude::*;
use serde_json::Value;

/// Arbitrary JSON with the keys the checked functions look at.
fn json() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "command",
        "path",
        "file_path",
        "url",
        "query",
        "message",
        "to",
        "text",
        "token",
        "password",
        "details",
        "messageDelivery",
        "status",
        "target",
        "threadId",
        "platform",
        "messageId",
        "createdThreadIds",
        "version",
        "state",
        "binding",
        "sessionId",
        "x",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,24}".prop_map(Value::String),
        prop::sample::select(vec![
            "settled",
            "suppressed",
            "dryRun",
            "failed",
            "active",
            "retired"
        ])
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(keys.clone(), inner, 0..6).prop_map(|m| {
                Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..256)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("TETHER_PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A filler that spells a planted secret inside something that is not one (the card number
/// inside a 30-digit run, in the filler's first half) leaks nothing: found by the fuzzer, whose
/// check then counted any occurrence as a leak.
#[test]
fn a_secret_spelled_by_the_filler_is_not_a_leak() {
    let filler = format!("4111 1111 1114111 1111 1111 11111 1111{}", "x".repeat(48));
    checks::check_planted_secrets(filler.as_bytes());
}

/// Pieces of the texts around a secret that the fuzzer found rules tripping over: the
/// starts of other rules (header names, authorization schemes, flags, assignments, private key
/// headers, URLs), parts of secrets, quotes and separators. Glued together, one rule's span
/// may swallow the start of another's.
const RULE_PIECES: &[&str] = &[
    "Authorization: ",
    "authorization: '",
    "Basic ",
    "bearer ",
    "Token ",
    "Digest username=\"u\", ",
    "--api-key ",
    "--token=",
    "password=",
    "PASSWORD: ",
    "client_secret\u{3164}=",
    "client%5Fsecret=",
    "&code=",
    "?sig=",
    "token=${GITHUB_TOKEN}",
    "-----BEGIN ",
    "RSA PRIVATE KEY-----\n",
    "\n-----END PRIVATE KEY-----",
    "postgres://",
    "https://discord.com/api/webhooks/123/",
    "user:",
    "@",
    "4111",
    " 1111",
    "dXNlcjpwYXNzd29yZA==",
    "sk-proj-",
    "ghp_",
    "eyJ",
    "'",
    "\"",
    "\\\"",
    " ",
    "\n",
    "\\n",
    ",",
    ";",
    "}",
    "(",
    "x",
    "abc123",
];

/// Text glued from [`RULE_PIECES`].
fn rule_pieces() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(RULE_PIECES), 0..10).prop_map(|p| p.concat())
}

/// Inputs on which the fuzzer found a leak, kept in `fuzz/regressions/sanitize_tool_args/`:
/// `long-span-then-private-key`, an authorization header's credentials holding a hundred short
/// matches and then the planted private key, which a first bound on a span's dry runs (64 of
/// them) stopped before.
#[test]
fn fuzz_regressions_sanitize_tool_args() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/regressions/sanitize_tool_args"
    );
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).expect("the regression inputs") {
        let data = std::fs::read(entry.expect("an entry").path()).expect("a regression input");
        checks::check_sanitize_tool_args(&data);
        checks::check_planted_secrets(&data);
        checked += 1;
    }
    assert!(checked >= 1, "no regression input in {dir}");
}

/// A filler whose serialization spells a planted secret (a control character written as
/// `\u0004` between a `4` and the card number's other digits) leaks nothing: found by the
/// fuzzer, whose check compared serialized outputs with the raw filler.
#[test]
fn a_secret_spelled_by_an_escape_is_not_a_leak() {
    let filler = format!("{}\"card 4\u{4}111 1111 1111 1111 and", "x".repeat(48));
    checks::check_planted_secrets(filler.as_bytes());
}

/// Every planted secret glued to every one of the check's glues (a separator other than a
/// blank, or its escape in serialized or encoded text): before the scan looked past escapes,
/// a secret after an escaped line break (`…\nghp_…`, every line but the first of a value in
/// serialized text), an escaped tab or an encoded blank (`%20`) stayed in the clear, for every
/// row of the table but a few.
#[test]
fn planted_secrets_glued_to_separators_and_escapes_are_found() {
    for glue in checks::GLUES {
        for filler in [
            "",
            "word word",
            "a line\\nand \\\"more\\\"",
            "{\"log\": \"x\"}",
        ] {
            checks::check_planted_secrets_glued(filler.as_bytes(), *glue);
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// The planted secrets, each glued to a separator or escape, in arbitrary text.
    #[test]
    fn fuzz_twin_planted_secrets_glued(raw in bytes(), glue in prop::sample::select(checks::GLUES)) {
        checks::check_planted_secrets_glued(&raw, glue);
    }

    /// The planted secrets among the starts of other rules: no rule's span may swallow the
    /// start of another's and leave that one's secret in the clear.
    #[test]
    fn fuzz_twin_planted_secrets_among_rule_starts(head in rule_pieces(), tail in rule_pieces()) {
        checks::check_planted_secrets(format!("{head}{tail}").as_bytes());
    }

    #[test]
    fn fuzz_twin_sanitize_tool_args(value in json(), raw in bytes()) {
        checks::check_sanitize_tool_args(&serde_json::to_vec(&value).unwrap());
        checks::check_sanitize_tool_args(&raw);
    }

    #[test]
    fn fuzz_twin_planted_secrets(raw in bytes(), words in "[ -~]{0,64}", value in json()) {
        checks::check_planted_secrets(&raw);
        checks::check_planted_secrets(words.as_bytes());
        checks::check_planted_secrets(&serde_json::to_vec(&value).unwrap());
    }

    #[test]
    fn fuzz_twin_infer_tool_meta_from_args(tool in any::<u8>(), mode in any::<u8>(), value in json(), raw in bytes()) {
        let mut data = vec![tool, mode];
        data.extend(serde_json::to_vec(&value).unwrap());
        checks::check_infer_tool_meta_from_args(&data);
        checks::check_infer_tool_meta_from_args(&raw);
    }

    #[test]
    fn fuzz_twin_delivery_facts(value in json(), raw in bytes()) {
        checks::check_delivery_facts(&serde_json::to_vec(&value).unwrap());
        checks::check_delivery_facts(&raw);
    }

    #[test]
    fn fuzz_twin_binding_record_codecs(value in json(), raw in bytes()) {
        checks::check_binding_record_codecs(&serde_json::to_vec(&value).unwrap());
        checks::check_binding_record_codecs(&raw);
    }
}

/// The twins reach the interesting branches, not only the parse failures.
#[test]
fn fuzz_twin_checks_accept_known_good_inputs() {
    let fact = serde_json::json!({"status": "settled", "platform": "slack", "messageId": "m-1"});
    checks::check_delivery_facts(fact.to_string().as_bytes());
    let args = serde_json::json!({"command": "ls -la", "token": "secret"});
    let mut data = vec![0, 0];
    data.extend(args.to_string().as_bytes());
    checks::check_infer_tool_meta_from_args(&data);
    assert!(checks::json(args.to_string().as_bytes()).is_some());
    checks::check_sanitize_tool_args(args.to_string().as_bytes());
    checks::check_binding_record_codecs(br#"{"a":1}"#);
    for filler in [
        "",
        "password: \"",
        "4 4111 1111",
        "Bearer",
        "https://",
        "--api-key",
    ] {
        checks::check_planted_secrets(filler.as_bytes());
    }
    // Fuzzed JSON reaches the structured paths: strings, arrays, objects, nesting.
    for doc in [
        r#"{"command": "echo", "nested": [{"text": "x"}, "y", 1], "token": null}"#,
        r#"["a", {"b": {"c": "d"}}]"#,
        r#""just a string""#,
        "42",
    ] {
        assert!(checks::json(doc.as_bytes()).is_some(), "{doc}");
        checks::check_planted_secrets(doc.as_bytes());
    }
}
