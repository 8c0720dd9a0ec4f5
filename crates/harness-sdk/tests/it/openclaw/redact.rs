//! `src/logging/redact.test.ts`: the cases about the default redaction patterns (the peer's
//! registry of exact secret values, source-code mode and bounded-replacement internals have no
//! Tether counterpart).

use tether_harness_sdk::results::redact::{RedactionConfig, redact_field_value, redact_text};
use tether_harness_sdk::results::sanitize::redact_structured;

fn field(key: &str, value: &str) -> String {
    redact_field_value(key, None, value, &RedactionConfig::default())
}

#[test]
fn openclaw_redact_large_benign_text_keeps_ordinary_assignments() {
    let text = format!(
        "{}compass=visible{}",
        " ".repeat(16_381),
        " ".repeat(16_384)
    );
    assert_eq!(redact_text(&text), text);
}

#[test]
fn openclaw_redact_long_blank_runs() {
    let input = format!("<details>a{}X</details>", "\n".repeat(60_000));
    assert_eq!(redact_text(&input), input);
}

#[test]
fn openclaw_redact_env_assignments_keep_the_key() {
    assert_eq!(
        redact_text("OPENAI_API_KEY=sk-1234567890abcdef"),
        "OPENAI_API_KEY=sk-123…cdef"
    );
}

#[test]
fn openclaw_redact_shell_env_references_in_assignments() {
    let input = [
        "DISCORD_BOT_TOKEN=\"${DISCORD_BOT_TOKEN:-}\"",
        "OPENAI_API_KEY=$OPENAI_API_KEY",
        "API_KEY=$API_KEY",
        "TOKEN=${TOKEN}",
        "PASSWORD=${PASSWORD:-}",
        "GITHUB_TOKEN=${GITHUB_TOKEN}",
    ]
    .join("\n");
    assert_eq!(redact_text(&input), input);
}

#[test]
fn openclaw_redact_mismatched_shell_references_are_masked() {
    assert_eq!(
        redact_text("DISCORD_BOT_TOKEN=$SUPERSECRET123"),
        "DISCORD_BOT_TOKEN=***"
    );
}

#[test]
fn openclaw_redact_literal_shell_defaults_in_assignments() {
    let fallback = "discordliteral1234567890";
    let out = redact_text(&format!(
        "DISCORD_BOT_TOKEN=\"${{DISCORD_BOT_TOKEN:-{fallback}}}\""
    ));
    assert!(!out.contains(fallback), "{out}");
    // Deliberate difference: OpenClaw keeps the reference's edges (`"${DISC…890}"`); Tether
    // masks a quoted secret value under a sensitive name whole when its edges hold `$`/`{`.
    assert_eq!(out, "DISCORD_BOT_TOKEN=\"***\"");
}

#[test]
fn openclaw_redact_aws_secret_access_keys() {
    let secret: String = (0..40).map(|i| ["W", "j", "7", "/"][i % 4]).collect();
    let masked = format!("{}…{}", &secret[..6], &secret[36..]);
    let out = redact_text(&format!(
        "aws_secret_access_key = {secret}\n{{\"SecretAccessKey\":\"{secret}\"}}"
    ));
    assert!(
        out.contains(&format!("aws_secret_access_key = {masked}")),
        "{out}"
    );
    assert!(
        out.contains(&format!("\"SecretAccessKey\":\"{masked}\"")),
        "{out}"
    );
    assert!(!out.contains(&secret), "{out}");
    // Deliberate difference: OpenClaw also guesses a bare 40-character secret; Tether only
    // masks AWS secrets by name (a bare guess also hits paths and hashes).
    let bare = format!("bare {secret}");
    assert_eq!(redact_text(&bare), bare);
}

#[test]
fn openclaw_redact_structured_aws_secret_fields() {
    let secret: String = (0..40)
        .map(|i| ["A", "b", "C", "d", "0", "/", "+"][i % 7])
        .collect();
    assert_eq!(
        field("awsSecretAccessKey", &secret),
        format!("{}…{}", &secret[..6], &secret[36..])
    );
}

#[test]
fn openclaw_redact_cli_flags() {
    assert_eq!(
        redact_text("curl --token abcdef1234567890ghij https://api.test"),
        "curl --token abcdef…ghij https://api.test"
    );
    assert_eq!(
        redact_text("gog gmail watch serve --hook-token abcdef1234567890ghij"),
        "gog gmail watch serve --hook-token abcdef…ghij"
    );
}

#[test]
fn openclaw_redact_aws_secret_flags_by_key() {
    let secret: String = (0..40).map(|i| ["A", "b", "C", "d"][i % 4]).collect();
    let out = redact_text(&format!(
        "cmd --aws-secret-access-key={secret}\ncmd --awsSecretAccessKey {secret}"
    ));
    assert!(!out.contains(&secret), "{out}");
    assert!(out.contains("--aws-secret-access-key=AbCdAb…AbCd"), "{out}");
    assert!(out.contains("--awsSecretAccessKey AbCdAb…AbCd"), "{out}");
}

#[test]
fn openclaw_redact_option_prose_is_not_a_flag_secret() {
    let input = "Use either --password or --password-file.";
    assert_eq!(redact_text(input), input);
}

#[test]
fn openclaw_redact_sensitive_url_query_parameters() {
    assert_eq!(
        redact_text(
            "connect https://user.example/sync?access_token=abcdef1234567890ghij&safe=value"
        ),
        "connect https://user.example/sync?access_token=abcdef…ghij&safe=value"
    );
    assert_eq!(
        redact_text("cdp=https://browserless.example.com/?token=supersecret123"),
        "cdp=https://browserless.example.com/?token=***"
    );
}

#[test]
fn openclaw_redact_standalone_diagnostic_assignments() {
    assert_eq!(
        redact_text("matrix access_token=abcdef1234567890ghij next"),
        "matrix access_token=abcdef…ghij next"
    );
    // Deliberate difference: OpenClaw's mask swallows the closing delimiter
    // (`(password=*** install`); Tether keeps the text's own punctuation.
    assert_eq!(
        redact_text(
            "Docker authentication failed (password=fixture-secret); install and start the engine"
        ),
        "Docker authentication failed (password=***); install and start the engine"
    );
    assert_eq!(
        redact_text("failed [token=fixture-secret]; retry"),
        "failed [token=***]; retry"
    );
    assert_eq!(
        redact_text("failed {client_secret=fixture-secret}; retry"),
        "failed {client_secret=***}; retry"
    );
    assert_eq!(
        redact_text("failed (password=\"it's-a-secret\"); retry"),
        "failed (password=\"***\"); retry"
    );
}

#[test]
fn openclaw_redact_non_secret_key_names_after_delimiters() {
    let input = "(token_count=42) [password_hint=visible] {mytoken=visible}";
    assert_eq!(redact_text(input), input);
}

#[test]
fn openclaw_redact_json_fields() {
    assert_eq!(
        redact_text("{\"token\":\"abcdef1234567890ghij\"}"),
        "{\"token\":\"abcdef…ghij\"}"
    );
}

#[test]
fn openclaw_redact_payment_credential_json_fields() {
    let input = "{\"card_number\":\"4242424242424242\",\"cvc\":\"123\",\"sharedPaymentToken\":\"spt_abcdefghijklmnopqrstuvwxyz\",\"payment_credential\":\"paycred_abcdefghijklmnopqrstuvwxyz\",\"amount\":\"4200\"}";
    assert_eq!(
        redact_text(input),
        "{\"card_number\":\"***\",\"cvc\":\"***\",\"sharedPaymentToken\":\"spt_ab…wxyz\",\"payment_credential\":\"paycre…wxyz\",\"amount\":\"4200\"}"
    );
}

#[test]
fn openclaw_redact_http_client_config_secrets() {
    let input = [
        "body: {\"app_secret\":\"feishu_app_secret_1234567890\"}",
        "config: { appSecret: 'feishu_app_secret_1234567890', client_secret: 'oauth_client_secret_1234567890' }",
        "details: { credential: 'opaque_credential_1234567890' }",
    ]
    .join("\n");
    let out = redact_text(&input);
    assert!(out.contains("\"app_secret\":\"feishu…7890\""), "{out}");
    assert!(out.contains("appSecret: 'feishu…7890'"), "{out}");
    assert!(out.contains("client_secret: 'oauth_…7890'"), "{out}");
    assert!(out.contains("credential: 'opaque…7890'"), "{out}");
    for secret in [
        "feishu_app_secret_1234567890",
        "oauth_client_secret_1234567890",
        "opaque_credential_1234567890",
    ] {
        assert!(!out.contains(secret), "{out}");
    }
}

#[test]
fn openclaw_redact_payment_credential_assignments_and_flags() {
    let out = redact_text(
        "LINK_CARD_NUMBER=4242424242424242 LINK_CVC=123 shared_payment_token=spt_abcdefghijklmnopqrstuvwxyz --payment-credential paycred_abcdefghijklmnopqrstuvwxyz --card-number 4000056655665556",
    );
    for secret in [
        "4242424242424242",
        "4000056655665556",
        "spt_abcdefghijklmnopqrstuvwxyz",
        "paycred_abcdefghijklmnopqrstuvwxyz",
    ] {
        assert!(!out.contains(secret), "{out}");
    }
    for kept in [
        "LINK_CARD_NUMBER=***",
        "LINK_CVC=***",
        "shared_payment_token=spt_ab…wxyz",
        "--payment-credential paycre…wxyz",
        "--card-number ***",
    ] {
        assert!(out.contains(kept), "{kept} in {out}");
    }
}

#[test]
fn openclaw_redact_quoted_auth_headers_in_object_fields() {
    let out = redact_text(
        "headers: { authorization: 'Bearer feishu_tenant_access_abcdef123456', cookie: 'session_cookie_value_abcdef123456' }",
    );
    assert!(out.contains("authorization: '***'"), "{out}");
    assert!(out.contains("cookie: 'sessio…3456'"), "{out}");
    assert!(!out.contains("feishu_tenant_access_abcdef123456"), "{out}");
}

#[test]
fn openclaw_redact_payment_credential_query_parameters() {
    assert_eq!(
        redact_text(
            "POST /authorize?shared_payment_token=spt_abcdefghijklmnopqrstuvwxyz&card_number=4242424242424242&amount=4200"
        ),
        "POST /authorize?shared_payment_token=spt_ab…wxyz&card_number=***&amount=4200"
    );
}

#[test]
fn openclaw_redact_structured_payment_fields_by_key() {
    assert_eq!(
        field("sharedPaymentToken", "spt_abcdefghijklmnopqrstuvwxyz"),
        "spt_ab…wxyz"
    );
    assert_eq!(field("cardNumber", "4242424242424242"), "***");
    assert_eq!(field("amount", "4200"), "4200");
}

#[test]
fn openclaw_redact_structured_env_style_fields_by_key() {
    for key in ["GITHUB_TOKEN", "github_token", "openai_api_key"] {
        assert_eq!(
            field(key, "abcdefghijklmnopqrstuvwx1234567890"),
            "abcdef…7890",
            "{key}"
        );
    }
    assert_eq!(
        field("DISCORD_BOT_TOKEN", "${DISCORD_BOT_TOKEN:-}"),
        "${DISCORD_BOT_TOKEN:-}"
    );
    assert_eq!(field("apiKey", "${OPENAI_API_KEY:-}"), "${OPEN…Y:-}");
    assert_eq!(field("password", "$SUPERSECRET123"), "***");
    assert_eq!(field("apiKey", "${SECRET_TOKEN}"), "***");
    // Deliberate difference (as for structured arguments): the whole value under a sensitive
    // key is masked, not only the literal default (`${DISCORD_BOT_TOKEN:-disco…890}`).
    assert_eq!(
        field(
            "DISCORD_BOT_TOKEN",
            "${DISCORD_BOT_TOKEN:-discordliteral1234567890}"
        ),
        "${DISC…890}"
    );
    assert_eq!(field("MONKEY", "banana"), "banana");
}

#[test]
fn openclaw_redact_bearer_and_basic_headers() {
    assert_eq!(
        redact_text("Authorization: Bearer abcdef1234567890ghij"),
        "Authorization: Bearer abcdef…ghij"
    );
    assert_eq!(
        redact_text("Authorization: Basic c2VjcmV0OnBhc3M="),
        "Authorization: Basic ***"
    );
}

#[test]
fn openclaw_redact_other_authorization_schemes() {
    let bot = format!("{}.{}.{}", "A".repeat(24), "B".repeat(6), "C".repeat(27));
    let out = redact_text(&format!("Authorization: Bot {bot}"));
    assert!(!out.contains(&bot), "{out}");
    assert!(out.starts_with("Authorization: Bot "), "{out}");
    let first = "samplevalue1234567890abcd";
    let second = "sampleproxyvalue1234567890";
    let out = redact_text(&format!(
        "Authorization: token {first}\nProxy-Authorization: Digest {second}"
    ));
    assert!(out.contains("Authorization: token "), "{out}");
    assert!(out.contains("Proxy-Authorization: Digest "), "{out}");
    assert!(!out.contains(first) && !out.contains(second), "{out}");
}

#[test]
fn openclaw_redact_structured_authorization_fields() {
    let input = [
        "Authorization: Digest username=\"digest-user-example\", response=\"digest-response-1234567890abcdef\", cnonce=\"tail-nonce\"; request_id=digest-example",
        "Authorization: AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE1234567890/20260717/eu-west-1/s3/aws4_request, SignedHeaders=host, Signature=aws-signature-1234567890abcdef; status=403",
    ]
    .join("\n");
    let out = redact_text(&input);
    assert!(out.contains("Authorization: Digest "), "{out}");
    assert!(out.contains("Authorization: AWS4-HMAC-SHA256 "), "{out}");
    for secret in [
        "digest-response-1234567890abcdef",
        "AKIAEXAMPLE1234567890",
        "aws-signature-1234567890abcdef",
    ] {
        assert!(!out.contains(secret), "{secret} in {out}");
    }
}

#[test]
fn openclaw_redact_authorization_parameters_keep_following_diagnostics() {
    let out = redact_text(
        "Authorization: Digest username=\"digest-user-example\", response=\"digest-response-1234567890abcdef\"; request_id=digest-example",
    );
    assert_eq!(out, "Authorization: Digest ***; request_id=digest-example");
    assert_eq!(
        redact_text(
            "Authorization: Hawk id=\"client\", mac=\"hawk-credential-proof-1234567890abcdef\"; status=401"
        ),
        "Authorization: Hawk ***; status=401"
    );
    let out = redact_text(
        "Authorization: Foo id=abc'def`ghi, proof=token-grammar-proof-1234567890abcdef; status=401",
    );
    assert_eq!(out, "Authorization: Foo ***; status=401");
    assert_eq!(
        redact_text(
            "{Authorization: AWS4-HMAC-SHA256 Credential=scope/path, SignedHeaders=host, Signature=structural-aws-signature-1234567890abcdef}"
        ),
        "{Authorization: AWS4-HMAC-SHA256 ***}"
    );
}

#[test]
fn openclaw_redact_punctuated_auth_schemes() {
    assert_eq!(
        redact_text("Authorization: Foo+Bar extension-token-1234567890abcdef; status=401"),
        "Authorization: Foo+Bar extens…cdef; status=401"
    );
    assert_eq!(
        redact_text("Authorization: Basic+Foo extension-token-1234567890abcdef; status=401"),
        "Authorization: Basic+Foo extens…cdef; status=401"
    );
    assert_eq!(
        redact_text("Authorization: Basic dXNlcg==, status=401"),
        "Authorization: Basic ***, status=401"
    );
    assert_eq!(
        redact_text("(Authorization: Negotiate cHJvb2YxMjM0NTY3ODkw)"),
        "(Authorization: Negotiate cHJvb2…ODkw)"
    );
}

#[test]
fn openclaw_redact_token_headers_keep_adjacent_diagnostics() {
    let token = "opaque-auth-value-1234567890abcdef";
    let out = redact_text(&format!(
        "Authorization: {token}, status=401\nProxy-Authorization: {token}; request_id=example\nAuthorization: Token {token}, status=401"
    ));
    assert!(!out.contains(token), "{out}");
    assert!(out.contains(", status=401"), "{out}");
    assert!(out.contains("; request_id=example"), "{out}");
}

#[test]
fn openclaw_redact_authorization_prose_is_kept() {
    let input = "the authorization model is open";
    assert_eq!(redact_text(input), input);
}

#[test]
fn openclaw_redact_unquoted_credential_headers() {
    let values = [
        "samplekeyvalue1234567890",
        "samplegoogvalue1234567890",
        "sampleaccessvalue1234567890",
    ];
    let out = redact_text(&format!(
        "api-key: {}\nx-goog-api-key={}\nx-access-token: {}",
        values[0], values[1], values[2]
    ));
    for kept in ["api-key: ", "x-goog-api-key=", "x-access-token: "] {
        assert!(out.contains(kept), "{out}");
    }
    for value in values {
        assert!(!out.contains(value), "{out}");
    }
    let out = redact_text("api-key: samplekeyvalue1234567890, request_id=example, status=500");
    assert!(!out.contains("samplekeyvalue1234567890"), "{out}");
    assert!(out.contains(", request_id=example, status=500"), "{out}");
}

#[test]
fn openclaw_redact_punctuation_inside_header_values() {
    let out = redact_text("api-key: prefix)sensitive&suffix#tail");
    assert!(!out.contains("sensitive&suffix#tail"), "{out}");
    assert_eq!(
        redact_text("X-Api-Key: prefix&secret#suffix"),
        "X-Api-Key: prefix…ffix"
    );
    // Deliberate difference: in `name=value` form Tether treats `&` as the parameter separator
    // of a query or form body (`x-access-token=***&actual-secret#tail`); OpenClaw masks the
    // rest of the word as well. The `Name: value` header form above masks it whole.
    assert_eq!(
        redact_text("x-access-token=prefix&actual-secret#tail"),
        "x-access-token=***&actual-secret#tail"
    );
}

#[test]
fn openclaw_redact_named_gateway_security_headers() {
    let token = "supersecretgatewaytoken1234567890";
    let jwt = "eyJheaderabcd.eyJpayloadabcd.signatureabcd123456";
    let out = redact_text(&format!(
        "X-OpenClaw-Token: {token}\nx-pomerium-jwt-assertion: {jwt}\nX-Api-Key=shortsecret"
    ));
    assert!(out.contains("X-OpenClaw-Token: supers…7890"), "{out}");
    assert!(
        out.contains("x-pomerium-jwt-assertion: eyJhea…3456"),
        "{out}"
    );
    assert!(out.contains("X-Api-Key=***"), "{out}");
    assert!(
        !out.contains(token) && !out.contains(jwt) && !out.contains("shortsecret"),
        "{out}"
    );
}

#[test]
fn openclaw_redact_consecutive_and_serialized_auth_headers() {
    let out = redact_text(
        "Proxy-Authorization: Foo\nProxy-Authorization: Basic cHJveHk6cGFzcw==\nX-Authorization: Basic Y3VzdG9tOnBhc3M=\n{\"x-access-token\":\"sample-access-value-1234567890\",\"x-goog-api-key\":\"sample-google-value-1234567890\"}",
    );
    assert!(out.contains("Proxy-Authorization: Basic ***"), "{out}");
    assert!(out.contains("X-Authorization: Basic ***"), "{out}");
    for secret in [
        "cHJveHk6cGFzcw==",
        "Y3VzdG9tOnBhc3M=",
        "sample-access-value-1234567890",
        "sample-google-value-1234567890",
    ] {
        assert!(!out.contains(secret), "{out}");
    }
}

// ---- The rest of the default-pattern cases of `redactSensitiveText` ----

fn all_masked(out: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(!out.contains(secret), "{secret} survived in {out}");
    }
}

#[test]
fn openclaw_redact_json_escaped_quoted_env_assignments() {
    let xai = "issue85049-xai-cleartext-token-ABCDEFGHIJKLMNOPQRSTUVWXYZ1234567890";
    let brave = "issue85049-brave-cleartext-token-ABCDEFGHIJKLMNOPQRSTUVWXYZ1234567890";
    let input = format!(
        r#"raw_params={{"command":"export XAI_API_KEY=\"{xai}\" && export BRAVE_API_KEY=\\\"{brave}\\\" && echo blocked"}}"#
    );
    let out = redact_text(&input);
    assert!(out.contains("XAI_API_KEY="), "{out}");
    assert!(out.contains("BRAVE_API_KEY="), "{out}");
    all_masked(&out, &[xai, brave]);
    assert!(out.contains("issue8…7890"), "{out}");
}

#[test]
fn openclaw_redact_standalone_diagnostic_assignments_with_quotes() {
    assert_eq!(
        redact_text("failed [token='has\"quotes']; retry"),
        "failed [token='***']; retry"
    );
    assert_eq!(
        redact_text("failed {secret=`has'quotes`}; retry"),
        "failed {secret=`***`}; retry"
    );
    assert_eq!(
        redact_text("failed (token=\"unterminated retry"),
        "failed (token=*** retry"
    );
}

#[test]
fn openclaw_redact_unicode_token_hints_on_character_boundaries() {
    let x9 = "x".repeat(9);
    // Deliberate difference: the kept edges are 6 and 4 *characters* (never a split
    // character), where the peer counts UTF-16 units and drops a unit that would split one.
    for (secret, expected) in [
        (format!("abcde😀{x9}wxyz"), "abcde😀…wxyz"),
        (format!("abcdef{x9}😀abc"), "abcdef…😀abc"),
        // 17 characters: below the mask minimum, masked whole.
        (format!("abcd😀{x9}😀ab"), "***"),
    ] {
        assert_eq!(field("token", &secret), expected, "{secret}");
    }
}

#[test]
fn openclaw_redact_complete_structured_authorization_fields() {
    let user = "digest-user-example";
    let extension = "digest-extension-1234567890abcdef";
    let response = "digest-response-1234567890abcdef";
    let tail = "digest-tail-1234567890abcdef";
    let credential = "AKIAEXAMPLE1234567890/20260717/eu-west-1/s3/aws4_request";
    let signature = "aws-signature-1234567890abcdef";
    let input = [
        format!(
            "Authorization: Digest username=\"{user}\", 2fa=\"{extension}\", response=\"{response}\", extension=\"{tail}\", cnonce=\"tail-nonce\"; request_id=digest-example"
        ),
        format!(
            "Authorization: AWS4-HMAC-SHA256 Credential={credential}, SignedHeaders=:authority;x_custom;x.custom, Signature={signature}; status=403"
        ),
        format!(
            "Proxy-Authorization: Digest username=\"{user}\", response=\"{response}\"; request_id=proxy-example"
        ),
    ]
    .join("\n");
    let out = redact_text(&input);
    assert!(out.contains("Authorization: Digest "), "{out}");
    assert!(out.contains("Authorization: AWS4-HMAC-SHA256 "), "{out}");
    assert!(out.contains("Proxy-Authorization: Digest "), "{out}");
    all_masked(
        &out,
        &[
            user,
            extension,
            response,
            tail,
            credential,
            signature,
            "username=",
            "Credential=",
            "Signature=",
        ],
    );
    for kept in [
        "; request_id=digest-example",
        "; status=403",
        "; request_id=proxy-example",
    ] {
        assert!(out.contains(kept), "{kept} in {out}");
    }
}

#[test]
fn openclaw_redact_later_auth_params_and_token_credentials_after_punctuation() {
    let response = "later-response-value-1234567890";
    let negotiate = "cHJvb2YxMjM0NTY3ODkw";
    let folded = "Zm9sZGVkOnNlY3JldA==";
    let raw = "raw-header-value-1234567890";
    let input = [
        format!("Authorization: Digest username=\"sample\",,response=\"{response}\"; status=401"),
        format!("Authorization: Digest damaged,,response=\"{response}\"; status=403"),
        format!(
            "Authorization: Digest username=\"sample\", uri=/bad, response=\"{response}\"; status=407"
        ),
        format!(
            "Authorization: Digest username=\"sample\",\r\n response=\"{response}\"; status=408"
        ),
        format!(
            "Authorization: Digest uri=http://service, response=\"{response}\"; status=409"
        ),
        format!("Authorization: Digest response='{response}'; status=410"),
        format!(
            "Authorization: Digest realm=sample, authorization-param={response}; status=412"
        ),
        format!("Authorization: Digest username=sample,\\r\\n response={response}; status=413"),
        format!(
            "Authorization: Digest username=sample,\\r\\n\\tresponse={response}; status=414"
        ),
        format!("(Authorization: Negotiate {negotiate})"),
        format!("Authorization:\r\n Basic {folded}"),
        format!("Authorization:\nBasic {folded}"),
        format!("Authorization:\\nBasic {folded}"),
        format!("Authorization:\\tBearer {folded}"),
        format!("Authorization: Bearer\\t{folded}"),
        format!("Authorization: {raw}   "),
    ]
    .join("\n");
    let expected = [
        "Authorization: Digest ***; status=401",
        "Authorization: Digest ***; status=403",
        "Authorization: Digest ***; status=407",
        "Authorization: Digest ***; status=408",
        "Authorization: Digest ***; status=409",
        "Authorization: Digest ***; status=410",
        "Authorization: Digest ***; status=412",
        "Authorization: Digest ***; status=413",
        "Authorization: Digest ***; status=414",
        "(Authorization: Negotiate cHJvb2…ODkw)",
        "Authorization:\r\n Basic Zm9sZG…dA==",
        "Authorization:\nBasic Zm9sZG…dA==",
        "Authorization:\\nBasic Zm9sZG…dA==",
        "Authorization:\\tBearer Zm9sZG…dA==",
        "Authorization: Bearer\\tZm9sZG…dA==",
        "Authorization: raw-he…7890   ",
    ]
    .join("\n");
    assert_eq!(redact_text(&input), expected);
    let serialized = serde_json::to_string(&format!(
        "prefix\nAuthorization: Digest response=\"{response}\""
    ))
    .unwrap();
    assert_eq!(
        redact_text(&serialized),
        serde_json::to_string("prefix\nAuthorization: Digest ***").unwrap()
    );
}

#[test]
fn openclaw_redact_escaped_structured_authorization_fields() {
    let response = "escaped-digest-response-1234567890abcdef";
    let input = format!(
        "Authorization: Digest realm=\\\"Example Realm\\\", response=\\\"{response}\\\"; status=401"
    );
    assert_eq!(redact_text(&input), "Authorization: Digest ***; status=401");
}

#[test]
fn openclaw_redact_auth_param_names_beginning_with_the_display_marker() {
    let response = "marker-digest-response-1234567890abcdef";
    assert_eq!(
        redact_text(&format!(
            "Authorization: Digest ***ext=one, response=\"{response}\"; status=401"
        )),
        "Authorization: Digest ***; status=401"
    );
}

#[test]
fn openclaw_redact_structured_auth_in_serialized_header_objects() {
    let response = "json-digest-response-1234567890abcdef";
    let input =
        format!(r#"{{"Authorization":"Digest username=\"example\", response=\"{response}\""}}"#);
    assert_eq!(redact_text(&input), r#"{"Authorization":"***"}"#);
}

#[test]
fn openclaw_redact_nested_serialized_auth_objects() {
    let response = "nested-digest-response-1234567890abcdef";
    let header =
        serde_json::json!({"Authorization": format!("Digest response=\"{response}\\\\\"")});
    let once = serde_json::to_string(&header).unwrap();
    let twice = serde_json::to_string(&once).unwrap();
    let expected_twice = serde_json::to_string(
        &serde_json::to_string(&serde_json::json!({"Authorization": "Digest ***"})).unwrap(),
    )
    .unwrap();
    assert_eq!(redact_text(&twice), expected_twice);
    assert_eq!(
        redact_text(&once),
        serde_json::to_string(&serde_json::json!({"Authorization": "***"})).unwrap()
    );
}

#[test]
fn openclaw_redact_token_credentials_in_nested_serialized_auth() {
    let nested = |value: serde_json::Value| {
        serde_json::to_string(&serde_json::to_string(&value).unwrap()).unwrap()
    };
    // Deliberate difference: a quoted `Authorization` value holding a scheme and a
    // credential is masked whole, at any level of serialization (the peer keeps `Basic`).
    assert_eq!(
        redact_text(&nested(
            serde_json::json!({"Authorization": "Basic dXNlcjpwYXNz"})
        )),
        nested(serde_json::json!({"Authorization": "***"}))
    );
    let bearer = "/opaque-~bearer-1234567890abcdef";
    assert_eq!(
        redact_text(&format!("Authorization: Bearer {bearer}")),
        "Authorization: Bearer /opaqu…cdef"
    );
    assert_eq!(
        redact_text(&nested(
            serde_json::json!({"Authorization": format!("Bearer {bearer}")})
        )),
        nested(serde_json::json!({"Authorization": "***"}))
    );
    let opaque = "opaque-credential-1234567890abcdef";
    assert_eq!(
        redact_text(&nested(
            serde_json::json!({"Authorization": opaque, "Proxy-Authorization": opaque})
        )),
        nested(
            serde_json::json!({"Authorization": "opaque…cdef", "Proxy-Authorization": "opaque…cdef"})
        )
    );
}

#[test]
fn openclaw_redact_structured_authorization_inside_quoted_diagnostics() {
    let response = "quoted-header-response-1234567890abcdef";
    assert_eq!(
        redact_text(&format!(
            "curl -H 'Authorization: Digest username=\"example\", response=\"{response}\"'"
        )),
        "curl -H 'Authorization: Digest ***'"
    );
}

#[test]
fn openclaw_redact_escaped_auth_fields_with_encoded_quoted_pairs() {
    let response = "escaped-quoted-response-1234567890abcdef";
    let input = format!(
        "Authorization: Digest realm=\\\"Example \\\\\\\"Realm\\\\\\\"\\\", response=\\\"{response}\\\"; status=401"
    );
    assert_eq!(redact_text(&input), "Authorization: Digest ***; status=401");
}

#[test]
fn openclaw_redact_authorization_in_long_text() {
    let response = "cross-chunk-response-1234567890abcdef";
    let out = redact_text(&format!(
        "{}\nAuthorization: Digest username=\"example\", response=\"{response}\"",
        "x".repeat(32_768)
    ));
    all_masked(&out, &[response, "response="]);
    let header = format!("{}==", "A".repeat(96));
    let standalone = format!("{}==", "B".repeat(96));
    let out = redact_text(&format!(
        "{} Authorization: Bearer {header}\nrequest failed: Bearer {standalone}",
        "x".repeat(32_760)
    ));
    all_masked(&out, &[&header, &standalone]);
    assert!(
        out.contains("Authorization: Bearer AAAAAA…AA=="),
        "{out:.100}"
    );
    assert!(out.contains("request failed: Bearer BBBBBB…BB=="));
}

#[test]
fn openclaw_redact_form_and_unicode_line_prefixes() {
    assert_eq!(
        redact_text("😀safe\r\nbody: code=&safe=1\rclient%5Fsecret=\"abc\";&safe=2"),
        // Deliberate difference: an empty value has nothing to mask, and the text's own quotes
        // stay around the mask.
        "😀safe\r\nbody: code=&safe=1\rclient%5Fsecret=\"***\";&safe=2"
    );
}

#[test]
fn openclaw_redact_token_prefixes_after_adjacent_text() {
    let token = format!("ghp_{}", "a".repeat(5_000));
    let out = redact_text(&format!("prefix-{token} suffix"));
    assert_eq!(out, "prefix-ghp_aa…aaaa suffix");
}

#[test]
fn openclaw_redact_url_query_tokens() {
    assert_eq!(
        redact_text("GET /_matrix/client/v3/sync?access_token=abcdef1234567890ghij"),
        "GET /_matrix/client/v3/sync?access_token=abcdef…ghij"
    );
    assert_eq!(
        redact_text("GET /_matrix/client/v3/sync?access_token=abcdef1234567890ghij&since=123"),
        "GET /_matrix/client/v3/sync?access_token=abcdef…ghij&since=123"
    );
    assert_eq!(
        redact_text("connect https://gateway.example/ws?Access-Token=short-token&ok=1"),
        "connect https://gateway.example/ws?Access-Token=***&ok=1"
    );
}

#[test]
fn openclaw_redact_bot_style_tokens() {
    assert_eq!(
        redact_text("123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef"),
        "123456…cdef"
    );
    assert_eq!(
        redact_text(
            "GET https://api.example.test/bot123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef/getMe HTTP/1.1"
        ),
        "GET https://api.example.test/bot123456…cdef/getMe HTTP/1.1"
    );
}

#[test]
fn openclaw_redact_short_tokens_fully() {
    assert_eq!(redact_text("TOKEN=shortvalue"), "TOKEN=***");
}

#[test]
fn openclaw_redact_diagnostics_that_are_not_secrets() {
    for input in [
        "agents.defaults: Unrecognized key: \"llm\"",
        "Oops: failed: code=E1 status=500",
        "GET https://example.test/cb?signal=visible&sigmoid=visible&signature_algorithm=v4&x-api-version=1&x-request-id=req-123",
    ] {
        assert_eq!(redact_text(input), input);
    }
}

#[test]
fn openclaw_redact_standalone_pass_assignments() {
    assert_eq!(
        redact_text("db pass=opaque-pass-secret-1234567890 next"),
        "db pass=opaque…7890 next"
    );
    assert_eq!(
        redact_text("db pass=opaquepass123 next"),
        "db pass=*** next"
    );
}

#[test]
fn openclaw_redact_common_config_file_secret_assignments() {
    let db_password = "db-password-fixture-1234567890";
    let database_password = "database-password-fixture-1234567890";
    let api_secret = "api-secret-fixture-1234567890";
    let secret_key = "django-secret-key-1234567890";
    let passphrase = "tls-passphrase-fixture-1234567890";
    let db_pass = "db-pass-fixture-1234567890";
    let readonly = "readonly-db-password-fixture-1234567890";
    let jwt = "jwt-fixture-1234567890";
    let access = "access-token-fixture-1234567890";
    let secret_value = "bare-secret-fixture-1234567890";
    let token_value = "bare-token-fixture-1234567890";
    let input = [
        format!("password = {db_password}"),
        format!("password = \"{db_password}\""),
        format!("password= \"{db_password}\""),
        format!("password= {db_password}"),
        format!("db_password = {db_password}"),
        format!("database_password: {database_password}"),
        format!("api_secret: '{api_secret}'"),
        format!("api_secret= '{api_secret}'"),
        format!("db_password={db_password}"),
        format!("api_secret: {api_secret}"),
        format!("api_secret={api_secret}"),
        format!("api_secret= {api_secret}"),
        format!("jdbc.password={db_password}"),
        format!("jdbc.password=\"{db_password}\""),
        format!("secret_key = {secret_key}"),
        format!("secret_key={secret_key}"),
        format!("tls.passphrase: {passphrase}"),
        format!("tls_passphrase={passphrase}"),
        format!("readonly_db_password = {readonly}"),
        format!("service_tls_passphrase: '{passphrase}'"),
        format!("db_pass={db_pass}"),
        format!("jwt: {jwt}"),
        format!("access-token={access}"),
        format!("secret = \"{secret_value}\""),
        format!("token: '{token_value}'"),
        "password = abc,def".into(),
        "api_secret=abc,def".into(),
        format!("passphrase={passphrase}"),
        "safe_option = visible".into(),
    ]
    .join("\n");
    let out = redact_text(&input);
    for kept in [
        "password = db-pas…7890",
        "password = \"db-pas…7890\"",
        "password= \"db-pas…7890\"",
        "password= db-pas…7890",
        "db_password = db-pas…7890",
        "database_password: databa…7890",
        "api_secret: 'api-se…7890'",
        "api_secret= 'api-se…7890'",
        "db_password=db-pas…7890",
        "api_secret: api-se…7890",
        "api_secret=api-se…7890",
        "api_secret= api-se…7890",
        "jdbc.password=db-pas…7890",
        "jdbc.password=\"db-pas…7890\"",
        "secret_key = django…7890",
        "secret_key=django…7890",
        "tls.passphrase: tls-pa…7890",
        "tls_passphrase=tls-pa…7890",
        "readonly_db_password = readon…7890",
        "service_tls_passphrase: 'tls-pa…7890'",
        "db_pass=db-pas…7890",
        "jwt: jwt-fi…7890",
        "access-token=access…7890",
        "secret = \"bare-s…7890\"",
        "token: 'bare-t…7890'",
        "password = ***",
        "api_secret=***",
        "passphrase=tls-pa…7890",
        "safe_option = visible",
    ] {
        assert!(out.contains(kept), "{kept} in {out}");
    }
    all_masked(
        &out,
        &[
            db_password,
            database_password,
            api_secret,
            secret_key,
            passphrase,
            db_pass,
            readonly,
            jwt,
            access,
            secret_value,
            token_value,
            "abc,def",
        ],
    );
}

#[test]
fn openclaw_redact_complete_unquoted_values_with_delimiter_punctuation() {
    let out = redact_text("password=abc,def token=abc;def client_secret=abc]def pass=abc)def");
    assert_eq!(out, "password=*** token=*** client_secret=*** pass=***");
}

#[test]
fn openclaw_redact_quoted_standalone_assignments() {
    assert_eq!(
        redact_text("password='abc;def' token=\"abc;def\" secret=`abc;def`"),
        "password='***' token=\"***\" secret=`***`"
    );
    assert_eq!(
        redact_text("password=\"it's-a-secret\" next"),
        "password=\"***\" next"
    );
    assert_eq!(redact_text("token=\"opaque-abc123 rest"), "token=*** rest");
}

#[test]
fn openclaw_redact_opaque_sensitive_url_query_parameters() {
    assert_eq!(
        redact_text(
            "callback https://example.test/oauth?code=oauth-code-abc123&state=visible&x-amz-signature=abc123xyz&x-amz-security-token=aws-session-token-123&authorization=authz-secret-123&private_key=pk-secret-123&app_secret=app-secret-123&credential=credential-secret-123"
        ),
        "callback https://example.test/oauth?code=***&state=visible&x-amz-signature=***&x-amz-security-token=aws-se…-123&authorization=***&private_key=***&app_secret=***&credential=creden…-123"
    );
}

#[test]
fn openclaw_redact_canonical_url_auth_aliases() {
    assert_eq!(
        redact_text(
            "sig=short-sig-123&x-api-key=short-key-123&x-access-token=short-at-123&x-auth-token=short-authtok&safe=value"
        ),
        "sig=***&x-api-key=***&x-access-token=***&x-auth-token=***&safe=value"
    );
    assert_eq!(
        redact_text(
            "GET https://example.test/cb?sig=short-sig-123&X-Api-Key=long-api-key-1234567890&x-access-token=long-access-token-1234567890&x-auth-token=short-authtok&safe=value"
        ),
        "GET https://example.test/cb?sig=***&X-Api-Key=long-a…7890&x-access-token=long-a…7890&x-auth-token=***&safe=value"
    );
    assert_eq!(
        redact_text("https://example.test/cb?sig=opaque-signed-value"),
        "https://example.test/cb?sig=opaque…alue"
    );
    // Deliberate difference: one mask rule everywhere, so a long value keeps its edges in a
    // form body too (the peer masks form values whole).
    assert_eq!(
        redact_text("sig=opaque-signed-value&safe=visible"),
        "sig=opaque…alue&safe=visible"
    );
}

#[test]
fn openclaw_redact_url_userinfo_and_connection_string_passwords() {
    let input = [
        "https://browser-user:browser-password-1234567890@api.example.test/v1",
        "https://:empty-username-password-1234567890@api.example.test/v1",
        "https://same:same@example.test/v1",
        "postgres://dbuser:database-password-1234567890@db.example.test/openclaw",
        "postgres://secret:secret@db.example.test/openclaw",
        "mongodb+srv://mongo:mongodb-password-1234567890@cluster.example.test/app",
        "redis://:redis-password-1234567890@cache.example.test/0",
        "rediss://cache:redis-tls-password-1234567890@cache.example.test/0",
    ]
    .join(" ");
    let out = redact_text(&input);
    for kept in [
        "https://browser-user:browse…7890@api.example.test/v1",
        "https://:empty-…7890@api.example.test/v1",
        "https://same:***@example.test/v1",
        "postgres://dbuser:databa…7890@db.example.test/openclaw",
        "postgres://secret:***@db.example.test/openclaw",
        "mongodb+srv://mongo:mongod…7890@cluster.example.test/app",
        "redis://:redis-…7890@cache.example.test/0",
        "rediss://cache:redis-…7890@cache.example.test/0",
    ] {
        assert!(out.contains(kept), "{kept} in {out}");
    }
    assert_eq!(
        redact_text("postgres://dbuser:opaquepw12345@db.example.test/openclaw"),
        "postgres://dbuser:***@db.example.test/openclaw"
    );
}

#[test]
fn openclaw_redact_form_urlencoded_body_fields_by_exact_key() {
    assert_eq!(
        redact_text(
            "code=oauth-code-123&hook_token=hook-token-123&jwt=jwt-secret-123&pass=form-pass-123&client_secret=oauth-client-secret-1234567890&refresh_token=refresh-token-1234567890&token_count=42&session_id=session-visible"
        ),
        // Deliberate difference: long form values keep their edges (one mask rule).
        "code=***&hook_token=***&jwt=***&pass=***&client_secret=oauth-…7890&refresh_token=refres…7890&token_count=42&session_id=session-visible"
    );
    assert_eq!(
        redact_text(
            "client_id=visible&app_secret=opaque-app-secret&credential=opaque-credential&shared_payment_token=spt_abcdefghijklmnopqrstuvwxyz&safe=value"
        ),
        "client_id=visible&app_secret=***&credential=***&shared_payment_token=spt_ab…wxyz&safe=value"
    );
}

#[test]
fn openclaw_redact_form_bodies_in_diagnostic_prose() {
    for (input, expected) in [
        (
            "body: client_id=visible&app_secret=opaque-app-secret&credential=opaque-credential&safe=value",
            "body: client_id=visible&app_secret=***&credential=***&safe=value",
        ),
        (
            "request start\nbody: client_id=visible&app_secret=opaque-app-secret&safe=value\nrequest end",
            "request start\nbody: client_id=visible&app_secret=***&safe=value\nrequest end",
        ),
        (
            "body: \"client_secret=oauth-secret&safe=value\" fallback: `safe=value&app_secret=app-secret`",
            "body: \"client_secret=***&safe=value\" fallback: `safe=value&app_secret=***`",
        ),
        (
            "body: password=\"opaque-password-secret\" client_id=visible&app_secret=\"opaque-app-secret\"&safe=1",
            // Deliberate difference: the text's own quotes stay, and a long value keeps its
            // edges (one mask rule).
            "body: password=\"opaque…cret\" client_id=visible&app_secret=\"***\"&safe=1",
        ),
        (
            "body: client_secret=abc)def&safe=1 next: client%5Fsecret=abc]def&safe=1",
            "body: client_secret=***&safe=1 next: client%5Fsecret=***&safe=1",
        ),
        (
            "body=client_secret=oauth-secret&safe=1",
            "body=client_secret=***&safe=1",
        ),
        (
            "form_body=client_secret=oauth-secret&app_secret=app-secret",
            "form_body=client_secret=***&app_secret=***",
        ),
        (
            "manual callback code=oauth-code-123&state=visible",
            "manual callback code=***&state=visible",
        ),
        ("jwt=opaque.jwt.value&safe=1", "jwt=***&safe=1"),
    ] {
        assert_eq!(redact_text(input), expected, "{input}");
    }
}

#[test]
fn openclaw_redact_encoded_and_obfuscated_form_and_query_keys() {
    for (input, expected) in [
        (
            "body: client%5Fsecret=oauth-secret&app%2Dsecret=app-secret&safe=value",
            "body: client%5Fsecret=***&app%2Dsecret=***&safe=value",
        ),
        (
            "body: client%5Fse\u{200B}cret=oauth-secret&safe=value",
            "body: client%5Fse\u{200B}cret=***&safe=value",
        ),
        (
            "body: \u{200B}client_secret=oauth-secret&safe=value",
            "body: \u{200B}client_secret=***&safe=value",
        ),
        (
            "body: client_se+cret=oauth-secret&safe=value",
            "body: client_se+cret=***&safe=value",
        ),
        (
            "body: client_se\u{0}cret=oauth-secret&safe=value GET /cb?client_se\u{1}cret=query-secret&safe=1",
            "body: client_se\u{0}cret=***&safe=value GET /cb?client_se\u{1}cret=***&safe=1",
        ),
        (
            "body: client%5Fse%E2%80%8Bcret=oauth-secret&safe=value",
            "body: client%5Fse%E2%80%8Bcret=***&safe=value",
        ),
        (
            "body: client%5Fse%20cret=space-secret&safe=value next: client%5Fse%00cret=nul-secret&safe=value",
            "body: client%5Fse%20cret=***&safe=value next: client%5Fse%00cret=***&safe=value",
        ),
        (
            "GET https://example.test/cb?client%5Fse%E2%80%8Bcret=oauth-secret&safe=1",
            "GET https://example.test/cb?client%5Fse%E2%80%8Bcret=***&safe=1",
        ),
        (
            "GET https://example.test/cb?client_se+cret=oauth-secret&safe=1",
            "GET https://example.test/cb?client_se+cret=***&safe=1",
        ),
        (
            "GET https://example.test/cb?client%5Fse%20cret=space-secret&safe=1&client%5Fse%00cret=nul-secret",
            "GET https://example.test/cb?client%5Fse%20cret=***&safe=1&client%5Fse%00cret=***",
        ),
        (
            "body: client_secre%74=opaque-value-123&safe=1",
            "body: client_secre%74=***&safe=1",
        ),
        (
            "client%5Fsecret=single-secret\ntrace body: client%5Fsecret=multiline-secret&safe=1",
            "client%5Fsecret=***\ntrace body: client%5Fsecret=***&safe=1",
        ),
    ] {
        assert_eq!(redact_text(input), expected, "{input:?}");
    }
}

#[test]
fn openclaw_redact_complete_query_and_form_values() {
    for (input, expected) in [
        (
            "GET https://example.test/cb?scope=read,write&client%5Fsecret=oauth-secret",
            "GET https://example.test/cb?scope=read,write&client%5Fsecret=***",
        ),
        (
            "GET https://example.test/cb?client%5Fsecret=abc,def&safe=1",
            "GET https://example.test/cb?client%5Fsecret=***&safe=1",
        ),
        (
            "GET /cb?token=\"opaque-token-secret\"&safe=1 /cb?client%5Fsecret=\"oauth-secret\"",
            // Deliberate difference: the text's own quotes stay around the mask (the peer
            // drops them in a query string).
            "GET /cb?token=\"opaque…cret\"&safe=1 /cb?client%5Fsecret=\"***\"",
        ),
        (
            "body: client%5Fsecret=abc,def&safe=value",
            "body: client%5Fsecret=***&safe=value",
        ),
        (
            "https://example.test/callback?pass=opensesamevalue",
            "https://example.test/callback?pass=***",
        ),
        (
            "https://example.test/callback?security_code=123456",
            "https://example.test/callback?security_code=***",
        ),
        (
            "https://example.test/callback?id_token=id-value&private_key=private-value&x-amz-security-token=aws-value",
            "https://example.test/callback?id_token=***&private_key=***&x-amz-security-token=***",
        ),
    ] {
        assert_eq!(redact_text(input), expected, "{input}");
    }
}

#[test]
fn openclaw_redact_complete_query_and_form_values_code_keys() {
    for (input, expected) in [
        (
            "GET /cb?token=abc)def&safe=1 /cb?client%5Fsecret=abc]def&safe=1 /cb?code=short#frag",
            "GET /cb?token=***&safe=1 /cb?client%5Fsecret=***&safe=1 /cb?code=***#frag",
        ),
        (
            "GET https://example.test/oauth?code=opaque-grant-123",
            "GET https://example.test/oauth?code=***",
        ),
    ] {
        assert_eq!(redact_text(input), expected, "{input}");
    }
}

#[test]
fn openclaw_redact_encoded_and_obfuscated_form_and_query_keys_trailing_filler() {
    assert_eq!(
        redact_text("body: client_se\u{3164}cret\u{3164}=opaque-value-123&safe=1"),
        "body: client_se\u{3164}cret\u{3164}=***&safe=1"
    );
}

#[test]
fn openclaw_redact_form_bodies_in_diagnostic_prose_single_pairs() {
    assert_eq!(
        redact_text("body: code=oauth-code-123 form_body=signature=aws-signature-123 Oops code=E1"),
        "body: code=*** form_body=signature=*** Oops code=E1"
    );
}

#[test]
fn openclaw_redact_private_key_blocks() {
    let input = [
        "-----BEGIN PRIVATE KEY-----",
        "ABCDEF1234567890",
        "ZYXWVUT987654321",
        "-----END PRIVATE KEY-----",
    ]
    .join("\n");
    // Deliberate difference: the key body becomes the one mask every rule recognises (`***`),
    // not the peer's `…redacted…`.
    assert_eq!(
        redact_text(&input),
        [
            "-----BEGIN PRIVATE KEY-----",
            "***",
            "-----END PRIVATE KEY-----"
        ]
        .join("\n")
    );
}

#[test]
fn openclaw_redact_large_payloads() {
    let out = redact_text(&format!(
        "{} OPENAI_API_KEY=sk-1234567890abcdef {}",
        "x".repeat(40_000),
        "y".repeat(40_000)
    ));
    assert!(out.contains("OPENAI_API_KEY=sk-123…cdef"));
}

#[test]
fn openclaw_redact_cloud_and_registry_token_prefixes() {
    for (input, expected) in [
        (
            "SecretId is AKIDZ8EXAMPLEFAKE01KEY99TEST",
            "SecretId is AKIDZ8…TEST",
        ),
        ("AKIDz8exampleFake01Key99Test", "AKIDz8…Test"),
        (
            "AccessKeyId=LTAI5tExampleFakeKeyXyz9",
            "AccessKeyId=LTAI5t…Xyz9",
        ),
        ("hf_ABCDEFghijklmnopqrstuv", "hf_ABC…stuv"),
        ("r8_ABCDEFghijklmnopqrstuv", "r8_ABC…stuv"),
    ] {
        assert_eq!(redact_text(input), expected, "{input}");
    }
}

#[test]
fn openclaw_redact_expanded_vendor_prefix_corpus() {
    let tokens = [
        "sk-ant-abcdefghijklmnopqrstuvwxyz".to_owned(),
        "gho_abcdefghijklmnopqrstuvwxyz".into(),
        "ghu_abcdefghijklmnopqrstuvwxyz".into(),
        "ghs_abcdefghijklmnopqrstuvwxyz".into(),
        "ghr_abcdefghijklmnopqrstuvwxyz".into(),
        "glpat-abcdefghijklmnopqrstuvwxyz12.ab.abcdefghi".into(),
        format!("gloas-{}", "a".repeat(64)),
        "xoxb-1234567890-abcdefghijklmnopqrstuvwxyz".into(),
        "https://hooks.slack.com/services/T1234567890/B1234567890/abcdefghijklmnopqrstuvwxy".into(),
        "https://discord.com/api/webhooks/123456789012345678/abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdef".into(),
        format!("discord bot token {}.{}.{}", "A".repeat(24), "B".repeat(6), "C".repeat(27)),
        "AIzaabcdefghijklmnopqrstuvwxyzABCDE".into(),
        "pplx-abcdefghijklmnopqrstuvwxyz".into(),
        "fal_abcdefghijklmnopqrstuvwxyz".into(),
        "fc-abcdefghijklmnopqrstuvwxyz".into(),
        "bb_live_abcdefghijklmnopqrstuvwxyz".into(),
        "gAAAAabcdefghijklmnopqrstuvwxyz123456".into(),
        "AKIAABCDEFGHIJKLMNOP".into(),
        "ASIAABCDEFGHIJKLMNOP".into(),
        "api_org_abcdefghijklmnopqrstuvwxyz12345678".into(),
        "sk_live_abcdefghijklmnopqrstuvwxyz".into(),
        "sk_test_abcdefghijklmnopqrstuvwxyz".into(),
        "rk_live_abcdefghijklmnopqrstuvwxyz".into(),
        "SG.abcdefghijklmnopqrstuvwxyz.0123456789abcdefghijklmnopqrstuvwxyz".into(),
        "npm_abcdefghijklmnopqrstuvwxyz".into(),
        "pypi-abcdefghijklmnopqrstuvwxyz".into(),
        "dop_v1_abcdefghijklmnopqrstuvwxyz".into(),
        "doo_v1_abcdefghijklmnopqrstuvwxyz".into(),
        "dor_v1_abcdefghijklmnopqrstuvwxyz".into(),
        format!("dp.pt.{}", "A".repeat(43)),
        format!("dckr_pat_{}", "A".repeat(27)),
        format!("dckr_oat_{}", "B".repeat(32)),
        format!("bkua_{}", "a".repeat(40)),
        format!("CCIPAT_{}_{}", "A".repeat(22), "a".repeat(40)),
        format!("sbp_{}", "a".repeat(40)),
        format!("dapi{}-1", "a".repeat(32)),
        format!("ddp_{}", "A".repeat(36)),
        format!("glsa_{}", "A".repeat(41)),
        format!("glc_eyJ{}", "A".repeat(80)),
        format!("nfp_{}", "A".repeat(36)),
        format!("CFPAT-{}", "A".repeat(43)),
        format!("ATCTT3xFfG{}=ABCDEF12", "A".repeat(48)),
        format!("ATATT{}=ABCDEF12", "A".repeat(48)),
        format!("ATBB{}", "A".repeat(24)),
        format!("BBDC-{}", "A".repeat(42)),
        format!("HRKU-AA{}", "A".repeat(58)),
        "pat-na1-12345678-1234-1234-1234-123456789abc".into(),
        format!("apify_api_{}", "A".repeat(36)),
        format!("FlyV1 fm123_{}", "A".repeat(120)),
        format!("fio-u-{}", "A".repeat(64)),
        "am_abcdefghijklmnopqrstuvwxyz".into(),
        "sk_abcdefghijklmnopqrstuvwxyz".into(),
        "tvly-abcdefghijklmnopqrstuvwxyz".into(),
        "exa_abcdefghijklmnopqrstuvwxyz".into(),
        "gsk_abcdefghijklmnopqrstuvwxyz".into(),
        "syt_abcdefghijklmnopqrstuvwxyz".into(),
        "retaindb_abcdefghijklmnopqrstuvwxyz".into(),
        "hsk-abcdefghijklmnopqrstuvwxyz".into(),
        "mem0_abcdefghijklmnopqrstuvwxyz".into(),
        "brv_abcdefghijklmnopqrstuvwxyz".into(),
        "xai-abcdefghijklmnopqrstuvwxyzABCDE".into(),
        format!("fw-{}", "C".repeat(40)),
        format!("fw_{}", "A".repeat(40)),
        format!("fpk_{}", "B".repeat(40)),
    ];
    let survivors: Vec<&String> = tokens
        .iter()
        .filter(|t| redact_text(t).contains(t.as_str()))
        .collect();
    assert!(survivors.is_empty(), "unmasked: {survivors:#?}");
    for (input, expected) in [
        ("AKIAABCDEFGHIJKLMNOP", "AKIAAB…MNOP"),
        ("sk_live_abcdefghijklmnopqrstuvwxyz", "sk_liv…wxyz"),
        (
            "SG.abcdefghijklmnopqrstuvwxyz.0123456789abcdefghijklmnopqrstuvwxyz",
            "SG.abc…wxyz",
        ),
        ("xai-abcdefghijklmnopqrstuvwxyzABCDE", "xai-ab…BCDE"),
    ] {
        assert_eq!(redact_text(input), expected);
    }
    for (token, masked) in [
        (format!("fw-{}", "C".repeat(40)), "fw-CCC…CCCC"),
        (format!("fw_{}", "A".repeat(40)), "fw_AAA…AAAA"),
        (format!("fpk_{}", "B".repeat(40)), "fpk_BB…BBBB"),
    ] {
        assert_eq!(redact_text(&token), masked);
        assert_eq!(redact_text(masked), masked, "idempotent");
    }
}

#[test]
fn openclaw_redact_additional_gitlab_token_prefixes() {
    let a = |n: usize| "A".repeat(n);
    let tokens = [
        format!("gloas-{}", "a".repeat(32)),
        format!("gloas-{}", "a".repeat(80)),
        format!("gloas-{}Z{}", "a".repeat(32), "b".repeat(31)),
        format!("gldt-{}", a(20)),
        format!("glcbt-a1B2_{}", a(20)),
        format!("glptt-{}", a(40)),
        format!("glft-{}", a(20)),
        "glft-a0b1-123_".to_owned(),
        format!("glimt-{}", a(25)),
        format!("glagent-{}", a(50)),
        format!("glwt-{}", a(20)),
        format!("glsoat-{}", a(20)),
        format!("glffct-{}", a(20)),
        format!("glrt-t1_{}", a(20)),
        "glrt-2CR8_eVxiioB1QmzPZwa".into(),
        "glrt-ABCdef1234567890xyzW".into(),
        format!("glrt-{}.01.{}", a(27), "a".repeat(9)),
        format!("glrtr-{}.01.{}", a(27), "a".repeat(9)),
        format!("GR1348941{}", a(20)),
    ];
    let survivors: Vec<&String> = tokens
        .iter()
        .filter(|t| redact_text(t).contains(t.as_str()))
        .collect();
    assert!(survivors.is_empty(), "unmasked: {survivors:#?}");
}

#[test]
fn openclaw_redact_additional_gitlab_token_prefixes_session_cookie() {
    let cookie = format!("_gitlab_session={}", "A".repeat(32));
    assert!(!redact_text(&cookie).contains(&cookie));
}

#[test]
fn openclaw_redact_ordinary_identifiers_with_short_prefix_substrings() {
    let input = [
        "npm_telegram_package_spec ask_openclaw_query_patterns team_management risk_assessment glpat-docs gloas-docs gldt-docs glcbt-docs glptt-docs glft-docs glimt-docs glagent-docs glwt-docs glsoat-docs glffct-docs glrt-docs glrtr-docs GR1348941-docs _gitlab_session=short dapi-example sbp_short nfp_site CCIPAT_docs ATATT-example fw-tooshort fw_tooshort fpk_tooshort".to_owned(),
        format!("fixturefw-{}", "C".repeat(40)),
        format!("fixture_fw_{}", "A".repeat(40)),
        format!("fixture_fpk_{}", "B".repeat(40)),
    ]
    .join(" ");
    // Deliberate difference: a registry prefix followed by at least 8 token characters is
    // masked (`npm_te…spec`); the peer requires the registry's exact token length.
    let expected = input.replacen("npm_telegram_package_spec", "npm_te…spec", 1);
    assert_eq!(redact_text(&input), expected);
}

#[test]
fn openclaw_redact_tokens_deep_inside_long_text() {
    let chunk = 16_384;
    let prefix = format!("{} ", "x".repeat(chunk - 2));
    let suffix = "y".repeat(chunk);
    for token in [
        format!("fw-{}", "C".repeat(40)),
        format!("fw_{}", "A".repeat(40)),
        format!("fpk_{}", "B".repeat(40)),
    ] {
        assert!(!redact_text(&format!("{prefix}{token}{suffix}")).contains(&token));
    }
    let credential = format!("123456:{}WXYZ", "A".repeat(28));
    for (token, masked) in [
        (format!("bot{credential}"), "bot123456…WXYZ"),
        (credential.clone(), "123456…WXYZ"),
    ] {
        let prefix = format!("{} ", "x".repeat(chunk - 13));
        let suffix = format!(" {}", "y".repeat(chunk * 2));
        assert_eq!(
            redact_text(&format!("{prefix}{token}{suffix}")),
            format!("{prefix}{masked}{suffix}")
        );
    }
}

#[test]
fn openclaw_redact_base64_blobs_are_not_corrupted() {
    let png = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR4nGNgYAAAAAMAASsJTYQAAAAASUVORK5CYII=";
    assert_eq!(redact_text(png), png);
    let run = format!("blob: {}AKIAABCDEFGHIJKLMNOPqrstuv", "x".repeat(4));
    assert_eq!(redact_text(&run), run);
    let plus = format!(
        "data:application/octet-stream;base64,AAAA+gAAAA{}",
        "B".repeat(24)
    );
    assert_eq!(redact_text(&plus), plus);
    assert_eq!(
        redact_text("aws AKIA_ID=AKIAABCDEFGHIJKLMNOP"),
        "aws AKIA_ID=AKIAAB…MNOP"
    );
    let prefix = "data:application/octet-stream;base64,";
    let chunk = 16_384;
    let large = format!(
        "{prefix}{}gAAAA{}{}",
        "A".repeat(chunk * 2 - prefix.len()),
        "B".repeat(24),
        "C".repeat(chunk)
    );
    assert_eq!(redact_text(&large), large);
}

#[test]
fn openclaw_redact_base64_alphabet_tokens_after_url_and_path_delimiters() {
    let fernet = format!("gAAAA{}", "B".repeat(24));
    let out = redact_text(&format!("https://app.example/reset/{fernet} visited"));
    assert!(!out.contains(&fernet), "{out}");
    assert!(out.contains("https://app.example/reset/"), "{out}");
    assert_eq!(
        redact_text("fetch /buckets/AKIAABCDEFGHIJKLMNOP/objects"),
        "fetch /buckets/AKIAAB…MNOP/objects"
    );
}

#[test]
fn openclaw_redact_raw_secret_values_containing_an_ellipsis() {
    assert_eq!(redact_text("password=abcdef…1234567890"), "password=***");
    assert_eq!(field("password", "abcdef…1234567890"), "***");
}

#[test]
fn openclaw_redact_oauth_and_jwt_token_shapes() {
    let out = redact_text(
        "ya29.fake-access-token-with-enough-length 1//0fake-refresh-token-with-enough-length eyJheaderabcd.eyJpayloadabcd.signatureabcd123456",
    );
    all_masked(
        &out,
        &[
            "ya29.fake-access-token",
            "1//0fake-refresh-token",
            "eyJheaderabcd.eyJpayloadabcd.signatureabcd123456",
        ],
    );
}

#[test]
fn openclaw_redact_app_specific_passwords_only_in_secret_contexts() {
    let out = redact_text(
        "password=abcd-efgh-ijkl-mnop --password qrst-uvwx-yzab-cdef {\"password\":\"lmno-pqrs-tuvw-xyza\"} main-test-case-name",
    );
    all_masked(
        &out,
        &[
            "abcd-efgh-ijkl-mnop",
            "qrst-uvwx-yzab-cdef",
            "lmno-pqrs-tuvw-xyza",
        ],
    );
    assert!(out.contains("main-test-case-name"), "{out}");
}

#[test]
fn openclaw_redact_tool_details_and_standalone_bearer_tokens() {
    assert_eq!(
        redact_text("OPENAI_API_KEY=sk-1234567890abcdef"),
        "OPENAI_API_KEY=sk-123…cdef"
    );
    assert_eq!(
        redact_text("Bearer abcdef1234567890ghij"),
        "Bearer abcdef…ghij"
    );
}

// ---- `redactSecrets`: structured payloads (Tether's `redact_structured`) ----

#[test]
fn openclaw_redact_nested_structured_payloads() {
    let out = redact_structured(&serde_json::json!({
        "plugin": {"config": {
            "apiKey": "AIzaSyD-very-real-looking-google-api-key-123",
            "access": "ya29.fake-access-token-with-enough-length",
            "refresh": "1//0fake-refresh-token-with-enough-length",
            "password": "abcd-efgh-ijkl-mnop",
        }},
        "transcript": [
            {"text": "jwt eyJheaderabcd.eyJpayloadabcd.signatureabcd123456 and main-test-case-name"},
            {"text": "standalone app password abcd-efgh-ijkl-mnop",
             "errorMessage": "failed with app password qrst-uvwx-yzab-cdef"},
        ],
    }))
    .to_string();
    all_masked(
        &out,
        &[
            "AIzaSyD-very-real-looking",
            "ya29.fake-access-token",
            "1//0fake-refresh-token",
            "eyJheaderabcd.eyJpayloadabcd.signatureabcd123456",
            "abcd-efgh-ijkl-mnop",
            "qrst-uvwx-yzab-cdef",
        ],
    );
    // Deliberate difference: four groups of four letters in message text read as an app
    // password and are masked without a password context (`main-t…name`); the peer keeps them.
    assert!(out.contains("main-t…name"), "{out}");
}

#[test]
fn openclaw_redact_benign_bare_access_and_refresh_fields() {
    let out = redact_structured(&serde_json::json!({
        "permissions": {"access": "read", "refresh": "monthly"},
        "oauth": {
            "access": "ya29.fake-access-token-with-enough-length",
            "refresh": "1//0fake-refresh-token-with-enough-length",
            "accessToken": "opaque-access-token-value",
            "refreshToken": "opaque-refresh-token-value",
        },
    }));
    assert_eq!(
        out["permissions"],
        serde_json::json!({"access": "read", "refresh": "monthly"})
    );
    all_masked(
        &out.to_string(),
        &[
            "ya29.fake-access-token",
            "1//0fake-refresh-token",
            "opaque-access-token-value",
            "opaque-refresh-token-value",
        ],
    );
}

#[test]
fn openclaw_redact_known_transport_codes_in_cause_chains() {
    for code in [
        "ECONNREFUSED",
        "ECONNRESET",
        "ECONNABORTED",
        "ENETRESET",
        "EPIPE",
        "ENOTFOUND",
        "EAI_AGAIN",
        "ENETUNREACH",
        "EHOSTUNREACH",
        "EHOSTDOWN",
    ] {
        let chain = serde_json::json!({"cause": {"code": code, "cause": {"code": code}}});
        assert_eq!(redact_structured(&chain), chain, "{code}");
        let upper = serde_json::json!({"Cause": {"CODE": code}});
        assert_eq!(redact_structured(&upper), upper, "{code}");
    }
}

#[test]
fn openclaw_redact_authorization_codes_outside_the_transport_boundary() {
    use serde_json::json;
    for (input, expected) in [
        (
            json!({"cause": {"code": "p4Q6x7J9"}}),
            json!({"cause": {"code": "***"}}),
        ),
        (
            json!({"cause": {"code": "token-EAI_AGAIN-secret"}}),
            json!({"cause": {"code": "token-…cret"}}),
        ),
        (
            json!({"cause": {"code": " EAI_AGAIN"}}),
            json!({"cause": {"code": "***"}}),
        ),
        (
            json!({"cause": {"code": "EAI_AGAIN\n"}}),
            json!({"cause": {"code": "***"}}),
        ),
        (
            json!({"cause": {"code": 123456}}),
            json!({"cause": {"code": "***"}}),
        ),
        (
            json!({"cause": {"code": true}}),
            json!({"cause": {"code": "***"}}),
        ),
        (
            json!({"providerAuth": {"cause": {"code": "p4Q6x7J9"}}}),
            json!({"providerAuth": {"cause": {"code": "***"}}}),
        ),
    ] {
        assert_eq!(redact_structured(&input), expected, "{input}");
    }
}

#[test]
fn openclaw_redact_authorization_codes_outside_the_transport_boundary_nested() {
    use serde_json::json;
    for (input, expected) in [
        (
            json!({"oauth": {"cause": {"code": "EAI_AGAIN"}}}),
            json!({"oauth": {"cause": {"code": "***"}}}),
        ),
        (
            json!({"cause": [{"code": "EAI_AGAIN"}]}),
            json!({"cause": [{"code": "***"}]}),
        ),
        (
            json!({"cause": {"code": ["EAI_AGAIN"]}}),
            json!({"cause": {"code": ["***"]}}),
        ),
        (
            json!([{"cause": {"code": "EAI_AGAIN"}}]),
            json!([{"cause": {"code": "***"}}]),
        ),
    ] {
        assert_eq!(redact_structured(&input), expected, "{input}");
    }
}

#[test]
fn openclaw_redact_diagnostic_codes_and_source_paths_kept_authorization_fields_masked() {
    use serde_json::json;
    let out = redact_structured(&json!({
        "manifest": {
            "sourceFiles": {"session": "$WORKSPACE_DIR/session.jsonl"},
            "warnings": [{"code": "invalid-runtime-event"}],
        },
        "status": {"code": "SYSTEM_RUN_DENIED"},
        "nodeError": {"code": "NOT_PAIRED"},
        "error": {"code": "ERR_ROOTOPAQUECODE1234567890"},
        "provider": {"code": "provider-code-value-1234567890"},
        "providerNestedError": {"error": {"code": "ERR_PROVIDEROPAQUECODE1234567890"}},
        "bearerToken": "bearer-token-value-1234567890",
        "numericSecrets": {"cardNumber": 4111111111111111_u64, "cvc": 123, "token": 1234567890, "amount": 4200},
    }));
    assert_eq!(
        out,
        json!({
            "manifest": {
                "sourceFiles": {"session": "$WORKSPACE_DIR/session.jsonl"},
                "warnings": [{"code": "invalid-runtime-event"}],
            },
            "status": {"code": "SYSTEM_RUN_DENIED"},
            "nodeError": {"code": "NOT_PAIRED"},
            "error": {"code": "ERR_ROOTOPAQUECODE1234567890"},
            "provider": {"code": "provid…7890"},
            "providerNestedError": {"error": {"code": "ERR_PROVIDEROPAQUECODE1234567890"}},
            "bearerToken": "bearer…7890",
            "numericSecrets": {"cardNumber": "***", "cvc": "***", "token": "***", "amount": 4200},
        })
    );
}

#[test]
fn openclaw_redact_structured_error_codes_kept_and_oauth_codes_masked() {
    let out = redact_structured(&serde_json::json!({
        "manifest": {
            "sourceFiles": {"session": "$WORKSPACE_DIR/session.jsonl"},
            "warnings": [
                {"code": "invalid-runtime-event"},
                {"code": "cyclic-session-branch"},
                {"code": "incomplete-session-branch"},
            ],
        },
        "status": {"code": "SYSTEM_RUN_DENIED"},
        "invalidRequestStatus": {"status": {"code": "INVALID_REQUEST"}},
        "details": {"error": {"code": "SYSTEM_RUN_DENIED"}},
        "nodeError": {"code": "NOT_PAIRED"},
        "policyError": {"error": {"code": "POLICY_DENIED"}},
        "invalidRequestDetails": {"error": {"code": "INVALID_REQUEST"}},
        "error": {"code": "ERR_ROOTOPAQUECODE1234567890"},
        "diagnostic": {"error": {"code": "ERR_DIAGNOSTIC_TEST"}},
        "stabilityBundle": {"error": {"code": "ERR_STABILITY_TEST"}},
        "trajectoryExport": {"error": {"code": "ERR_TRAJECTORY_TEST"}},
        "oauth": {"code": "oauth-code-value-1234567890"},
        "oauthNestedError": {"error": {"code": "ERR_OPAQUEOAUTHCODE1234567890"}},
        "provider": {"code": "provider-code-value-1234567890"},
        "providerAuth": {"code": "provider-auth-code-value-1234567890"},
        "bearerToken": "bearer-token-value-1234567890",
        "bearer_token": "bearer-token-snake-value-1234567890",
        "providerDetails": {"error": {"code": "SYSTEM_RUN_DENIED"}},
        "providerNestedError": {"error": {"code": "ERR_PROVIDEROPAQUECODE1234567890"}},
        "numericSecrets": {"cardNumber": 4111111111111111_u64, "cvc": 123, "token": 1234567890, "amount": 4200},
    }));
    let kept = [
        (
            "/manifest/sourceFiles/session",
            "$WORKSPACE_DIR/session.jsonl",
        ),
        ("/manifest/warnings/0/code", "invalid-runtime-event"),
        ("/manifest/warnings/1/code", "cyclic-session-branch"),
        ("/manifest/warnings/2/code", "incomplete-session-branch"),
        ("/status/code", "SYSTEM_RUN_DENIED"),
        ("/invalidRequestStatus/status/code", "INVALID_REQUEST"),
        ("/details/error/code", "SYSTEM_RUN_DENIED"),
        ("/nodeError/code", "NOT_PAIRED"),
        ("/policyError/error/code", "POLICY_DENIED"),
        ("/invalidRequestDetails/error/code", "INVALID_REQUEST"),
        ("/error/code", "ERR_ROOTOPAQUECODE1234567890"),
        ("/diagnostic/error/code", "ERR_DIAGNOSTIC_TEST"),
        ("/stabilityBundle/error/code", "ERR_STABILITY_TEST"),
        ("/trajectoryExport/error/code", "ERR_TRAJECTORY_TEST"),
        (
            "/oauthNestedError/error/code",
            "ERR_OPAQUEOAUTHCODE1234567890",
        ),
        ("/providerDetails/error/code", "SYSTEM_RUN_DENIED"),
        (
            "/providerNestedError/error/code",
            "ERR_PROVIDEROPAQUECODE1234567890",
        ),
    ];
    for (pointer, value) in kept {
        assert_eq!(
            out.pointer(pointer),
            Some(&serde_json::json!(value)),
            "{pointer}"
        );
    }
    for (pointer, secret) in [
        ("/oauth/code", "oauth-code-value-1234567890"),
        ("/provider/code", "provider-code-value-1234567890"),
        ("/providerAuth/code", "provider-auth-code-value-1234567890"),
        ("/bearerToken", "bearer-token-value-1234567890"),
        ("/bearer_token", "bearer-token-snake-value-1234567890"),
    ] {
        assert_ne!(
            out.pointer(pointer),
            Some(&serde_json::json!(secret)),
            "{pointer}"
        );
    }
    assert_eq!(
        out["numericSecrets"],
        serde_json::json!({"cardNumber": "***", "cvc": "***", "token": "***", "amount": 4200})
    );
}
