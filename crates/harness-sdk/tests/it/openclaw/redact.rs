//! `src/logging/redact.test.ts`: the cases about the default redaction patterns (the peer's
//! registry of exact secret values, source-code mode and bounded-replacement internals have no
//! Tether counterpart).

use tether_harness_sdk::results::redact::{RedactionConfig, redact_field_value, redact_text};

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
