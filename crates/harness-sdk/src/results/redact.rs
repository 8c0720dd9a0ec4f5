//! Secret redaction for tool arguments, tool results and display text (reference part D).
//!
//! Two layers:
//! * **Free-text patterns** ([`redact_text`]): sensitive `KEY=value` / `"key": "value"`
//!   assignments, `Bearer <token>`, `--api-key <value>` flags, well-known token prefixes
//!   (`sk-`, `ghp_`, `xoxb-`, `AKIA`, …), shell defaults `${SECRET_NAME:-default}`, and
//!   caller-configured token prefixes ([`RedactionConfig::token_prefixes`]).
//! * **Key-aware values** ([`redact_field_value`]): under a sensitive key
//!   ([`is_sensitive_key`]) the whole value is masked, except a shell reference to the key
//!   itself (`${DISCORD_BOT_TOKEN:-}` under `DISCORD_BOT_TOKEN`); under other keys the pattern
//!   layer applies. (OpenClaw applies the patterns first and masks the whole value only when no
//!   pattern changed it; masking the whole value is stricter and idempotent.)
//!
//! Masking ([`mask_token`]): `"***"` stays; fewer than 18 characters → `"***"`; otherwise the
//! first 6 characters, `…`, and the last 4 (counted in Unicode scalar values, never splitting
//! a character). Everything here is idempotent: a value already masked is recognised and kept.
//!
//! App-specific passwords (`abcd-efgh-ijkl-mnop`) are masked inside values stored under
//! message-like keys (`text`, `content`, `message`, `error`, `details`, `reason`, `apple`,
//! `icloud`, …).
//!
//! Design decisions: custom patterns are literal token prefixes (no regular-expression engine);
//! benign `*_key` names (`primary_key`, `cache_key`, `idempotency_key`, …) are **not** sensitive.

/// The mask for short or non-string secrets.
pub const MASK: &str = "***";

/// Masks below this length (in characters) become [`MASK`].
pub const MASK_MIN_CHARS: usize = 18;

const ELLIPSIS: char = '…';

/// Caller configuration of the pattern layer (the `logging.redactPatterns` equivalent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedactionConfig {
    /// Extra token prefixes: a word that starts with one of these, followed by at least one
    /// more token character, is masked wherever it appears (e.g. `custom-secret-`).
    pub token_prefixes: Vec<String>,
}

/// Masks one secret value (see the module docs).
pub fn mask_token(value: &str) -> String {
    if value == MASK {
        return MASK.to_owned();
    }
    let chars: Vec<char> = value.chars().collect();
    let edges_have_ellipsis = chars.len() >= MASK_MIN_CHARS
        && (chars[..6].contains(&ELLIPSIS) || chars[chars.len() - 4..].contains(&ELLIPSIS));
    if chars.len() < MASK_MIN_CHARS || edges_have_ellipsis {
        // An ellipsis in the kept edges would make the mask unrecognisable as one.
        return MASK.to_owned();
    }
    let mut out: String = chars[..6].iter().collect();
    out.push(ELLIPSIS);
    out.extend(&chars[chars.len() - 4..]);
    out
}

/// Whether `value` is already a mask produced by [`mask_token`] (`"***"` or `xxxxxx…yyyy`).
pub fn is_masked(value: &str) -> bool {
    if value == MASK {
        return true;
    }
    let mut n = 0usize;
    let mut ellipsis_at = None;
    for (i, c) in value.chars().enumerate() {
        if c == ELLIPSIS {
            if ellipsis_at.is_some() {
                return false;
            }
            ellipsis_at = Some(i);
        }
        n += 1;
    }
    n == 11 && ellipsis_at == Some(6)
}

const SENSITIVE_COMPACT: &[&str] = &[
    "apikey",
    "apitoken",
    "bearertoken",
    "token",
    "secret",
    "password",
    "passwd",
    "awssecretaccesskey",
    "secretaccesskey",
    "awssessiontoken",
    "credential",
    "credentials",
    "authorization",
    "proxyauthorization",
    "privatekey",
    "accesstoken",
    "refreshtoken",
    "idtoken",
    "authtoken",
    "clientsecret",
    "appsecret",
    "secretvalue",
    "rawsecret",
    "secretinput",
    "key",
    "keymaterial",
    "jwt",
    "session",
    "signature",
    "cookie",
    "setcookie",
    "xapikey",
    "xauthtoken",
    "cardnumber",
    "cardcvc",
    "cardcvv",
    "cvc",
    "cvv",
    "securitycode",
    "paymentcredential",
    "sharedpaymenttoken",
];

/// Generic names that are sensitive as JSON keys but too common in code and prose to be
/// treated as assignments inside free text.
const TEXT_EXEMPT_COMPACT: &[&str] = &["key", "session", "signature"];

const ENV_SUFFIXES: &[&str] = &["key", "token", "secret", "password", "passwd"];

const BENIGN_KEY_PREFIXES: &[&str] = &[
    "primary",
    "foreign",
    "cache",
    "idempotency",
    "sort",
    "partition",
    "public",
    "session",
    "dedupe",
    "lookup",
    "routing",
    "row",
    "unique",
    "hash",
    "range",
    "index",
];

const CAMEL_SUFFIXES: &[&str] = &["Token", "Secret", "Password", "Passwd", "ApiKey"];

/// Whether a JSON object key names a secret (case-insensitive, whole key).
pub fn is_sensitive_key(key: &str) -> bool {
    let Some(first) = key.chars().next() else {
        return false;
    };
    if !first.is_ascii_alphabetic() {
        return false;
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return false;
    }
    let compact: String = key
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if SENSITIVE_COMPACT.contains(&compact.as_str()) {
        return true;
    }
    let segments: Vec<&str> = key.split(['_', '-']).collect();
    if segments.len() >= 2 && segments.iter().all(|s| !s.is_empty()) {
        let last = segments[segments.len() - 1].to_ascii_lowercase();
        if ENV_SUFFIXES.contains(&last.as_str()) {
            let head = segments[..segments.len() - 1].join("").to_ascii_lowercase();
            return !(last == "key" && BENIGN_KEY_PREFIXES.contains(&head.as_str()));
        }
    }
    CAMEL_SUFFIXES.iter().any(|suffix| {
        key.len() > suffix.len()
            && key.ends_with(suffix)
            && key[..key.len() - suffix.len()]
                .chars()
                .last()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    })
}

/// Whether `key` is sensitive given the key of the object that holds it (an `id` under a
/// `publicShare`-like parent is a secret share id).
pub fn is_sensitive_key_in(key: &str, parent_key: Option<&str>) -> bool {
    if is_sensitive_key(key) {
        return true;
    }
    key.eq_ignore_ascii_case("id")
        && parent_key.is_some_and(|p| {
            let compact: String = p
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .map(|c| c.to_ascii_lowercase())
                .collect();
            compact.contains("publicshare") || compact == "share"
        })
}

fn is_text_key(key: &str) -> bool {
    if !is_sensitive_key(key) {
        return false;
    }
    let compact: String = key
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    !TEXT_EXEMPT_COMPACT.contains(&compact.as_str())
}

const TOKEN_PREFIXES: &[&str] = &[
    "sk-",
    "sk_",
    "rk_live_",
    "pk_live_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxr-",
    "xoxs-",
    "xapp-",
    "AKIA",
    "ASIA",
    "AIza",
    "npm_",
    "spt_",
    "paycred_",
    "hf_",
];

/// Built-in prefixes need at least this many characters after the prefix.
const TOKEN_MIN_BODY: usize = 8;

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn is_value_terminator(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | ',' | ';' | '}' | ']' | ')' | '&')
}

/// The outcome of the pattern layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextRedaction {
    /// The redacted text.
    pub text: String,
    /// Whether any pattern matched (even when its value was already masked and kept).
    pub matched: bool,
}

/// Applies the free-text pattern layer with the default configuration.
pub fn redact_text(text: &str) -> String {
    redact_text_with(text, &RedactionConfig::default()).text
}

/// Applies the free-text pattern layer.
pub fn redact_text_with(text: &str, config: &RedactionConfig) -> TextRedaction {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let mut out = String::with_capacity(text.len());
    let mut matched = false;
    let mut i = 0;
    while i < n {
        let c = chars[i];
        if c == '$'
            && chars.get(i + 1) == Some(&'{')
            && let Some((end, replacement, hit)) = shell_reference(&chars, i)
        {
            matched |= hit;
            if let Some(r) = replacement {
                out.push_str(&r);
            } else {
                out.extend(&chars[i..end]);
            }
            i = end;
            continue;
        }
        if !is_word(c) || (i > 0 && is_word(chars[i - 1])) {
            out.push(c);
            i += 1;
            continue;
        }
        let mut j = i;
        while j < n && is_word(chars[j]) {
            j += 1;
        }
        let word: String = chars[i..j].iter().collect();
        // Known token prefixes.
        if is_prefixed_token(&word, config) {
            matched = true;
            out.push_str(&safe_mask(&word, false));
            i = j;
            continue;
        }
        // `Bearer <token>`.
        if word.eq_ignore_ascii_case("bearer")
            && let Some((start, end)) = scheme_token(&chars, j)
        {
            matched = true;
            out.push_str(&word);
            out.extend(&chars[j..start]);
            out.push_str(&mask_span(&chars[start..end], false));
            i = end;
            continue;
        }
        // `--api-key value`.
        if let Some(flag) = word.strip_prefix("--")
            && is_text_key(flag)
            && let Some((start, end)) = flag_value(&chars, j)
        {
            matched = true;
            out.push_str(&word);
            out.extend(&chars[j..start]);
            out.push_str(&mask_span(&chars[start..end], false));
            i = end;
            continue;
        }
        // `KEY=value`, `"key": "value"`, `Authorization: Bearer x`.
        if is_text_key(&word)
            && let Some(a) = assignment(&chars, j)
        {
            matched = true;
            out.push_str(&word);
            out.extend(&chars[j..a.value_start]);
            let value = &chars[a.value_start..a.value_end];
            let value_str: String = value.iter().collect();
            if is_own_shell_reference(&word, &value_str) {
                out.push_str(&value_str);
            } else {
                out.push_str(&mask_span(value, a.quoted));
            }
            i = a.value_end;
            continue;
        }
        out.push_str(&word);
        i = j;
    }
    TextRedaction { text: out, matched }
}

fn is_prefixed_token(word: &str, config: &RedactionConfig) -> bool {
    TOKEN_PREFIXES
        .iter()
        .any(|p| word.starts_with(p) && word.len() >= p.len() + TOKEN_MIN_BODY)
        || config
            .token_prefixes
            .iter()
            .any(|p| !p.is_empty() && word.starts_with(p.as_str()) && word.len() > p.len())
}

/// Masks a span unless it already is a mask.
fn mask_span(span: &[char], quoted: bool) -> String {
    let s: String = span.iter().collect();
    if is_masked(&s) {
        return s;
    }
    safe_mask(&s, quoted)
}

/// [`mask_token`], falling back to [`MASK`] when the kept edges could change how the text
/// scans next time (quotes or backslashes inside a quoted value, an assignment or shell
/// reference in the head, or a tail that reads as a sensitive key).
fn safe_mask(value: &str, quoted: bool) -> String {
    let masked = mask_token(value);
    if masked == MASK {
        return masked;
    }
    if quoted && masked.chars().any(|c| matches!(c, '"' | '\'' | '\\')) {
        return MASK.to_owned();
    }
    let head: String = masked.chars().take(6).collect();
    if head.contains(['=', ':', '$']) {
        return MASK.to_owned();
    }
    let tail: String = masked.chars().skip(7).collect();
    let tail_word: String = tail.chars().take_while(|c| is_word(*c)).collect();
    if is_sensitive_key(&tail_word) || tail_word.starts_with("--") {
        return MASK.to_owned();
    }
    masked
}

/// `${NAME}` / `${NAME:-default}` at `start`: the end index, the replacement text when the
/// default of a sensitive name must be masked, and whether a secret default was seen (masked
/// now or already).
fn shell_reference(chars: &[char], start: usize) -> Option<(usize, Option<String>, bool)> {
    let mut k = start + 2;
    let name_start = k;
    while k < chars.len() && (chars[k].is_ascii_alphanumeric() || chars[k] == '_') {
        k += 1;
    }
    if k == name_start {
        return None;
    }
    let name: String = chars[name_start..k].iter().collect();
    match chars.get(k) {
        Some('}') => Some((k + 1, None, false)),
        Some(':') if chars.get(k + 1) == Some(&'-') => {
            let default_start = k + 2;
            let mut e = default_start;
            while e < chars.len() && chars[e] != '}' && !chars[e].is_whitespace() {
                if chars[e] == '$' || chars[e] == '{' {
                    return None;
                }
                e += 1;
            }
            if chars.get(e) != Some(&'}') {
                return None;
            }
            let default: String = chars[default_start..e].iter().collect();
            if default.is_empty() || !is_sensitive_key(&name) {
                return Some((e + 1, None, false));
            }
            if is_masked(&default) {
                return Some((e + 1, None, true));
            }
            let mut replacement: String = chars[start..default_start].iter().collect();
            replacement.push_str(&safe_mask(&default, true));
            replacement.push('}');
            Some((e + 1, Some(replacement), true))
        }
        _ => None,
    }
}

/// The token after `Bearer`: one or more spaces, then either an existing mask (the whole run
/// up to a terminator) or at least 8 token characters (`A-Z a-z 0-9 . _ ~ + / = -`).
fn scheme_token(chars: &[char], after: usize) -> Option<(usize, usize)> {
    let mut k = after;
    while k < chars.len() && chars[k] == ' ' {
        k += 1;
    }
    if k == after {
        return None;
    }
    let start = k;
    let mut end_any = start;
    while end_any < chars.len() && !is_value_terminator(chars[end_any]) {
        end_any += 1;
    }
    let whole: String = chars[start..end_any].iter().collect();
    if is_masked(&whole) {
        return Some((start, end_any));
    }
    let mut end_token = start;
    while end_token < chars.len()
        && (chars[end_token].is_ascii_alphanumeric()
            || matches!(chars[end_token], '.' | '_' | '~' | '+' | '/' | '=' | '-'))
    {
        end_token += 1;
    }
    (end_token - start >= 8).then_some((start, end_token))
}

fn flag_value(chars: &[char], after: usize) -> Option<(usize, usize)> {
    let sep = *chars.get(after)?;
    if sep != ' ' && sep != '=' {
        return None;
    }
    let start = after + 1;
    let mut k = start;
    while k < chars.len() && !is_value_terminator(chars[k]) {
        k += 1;
    }
    if k == start || chars[start] == '-' {
        return None;
    }
    Some((start, k))
}

struct Assignment {
    value_start: usize,
    value_end: usize,
    quoted: bool,
}

fn assignment(chars: &[char], after: usize) -> Option<Assignment> {
    let mut k = after;
    if matches!(chars.get(k), Some('"' | '\'')) {
        k += 1;
    }
    while matches!(chars.get(k), Some(' ' | '\t')) {
        k += 1;
    }
    match chars.get(k) {
        Some('=') if chars.get(k + 1) != Some(&'=') => {}
        Some(':') if !matches!(chars.get(k + 1), Some('-' | '/' | ':')) => {}
        _ => return None,
    }
    k += 1;
    while matches!(chars.get(k), Some(' ' | '\t')) {
        k += 1;
    }
    // `Authorization: Bearer <token>` / `Basic <token>`: keep the scheme.
    let scheme_end = {
        let mut e = k;
        while e < chars.len() && chars[e].is_ascii_alphabetic() {
            e += 1;
        }
        let scheme: String = chars[k..e].iter().collect();
        (["bearer", "basic", "token"]
            .iter()
            .any(|s| scheme.eq_ignore_ascii_case(s))
            && chars.get(e) == Some(&' '))
        .then_some(e + 1)
    };
    if let Some(start) = scheme_end {
        let mut e = start;
        while e < chars.len() && !is_value_terminator(chars[e]) {
            e += 1;
        }
        if e > start {
            return Some(Assignment {
                value_start: start,
                value_end: e,
                quoted: false,
            });
        }
    }
    match chars.get(k) {
        Some(&q @ ('"' | '\'')) => {
            let start = k + 1;
            let mut e = start;
            while e < chars.len() && chars[e] != q {
                if chars[e] == '\\' {
                    e += 1;
                }
                e += 1;
            }
            if e >= chars.len() || e == start {
                return None;
            }
            Some(Assignment {
                value_start: start,
                value_end: e,
                quoted: true,
            })
        }
        Some(_) => {
            let start = k;
            let mut e = start;
            while e < chars.len() && !is_value_terminator(chars[e]) {
                e += 1;
            }
            (e > start).then_some(Assignment {
                value_start: start,
                value_end: e,
                quoted: false,
            })
        }
        None => None,
    }
}

/// Whether `value` is a shell reference to `key` itself (`$KEY`, `${KEY}`, `${KEY:-}`).
pub fn is_own_shell_reference(key: &str, value: &str) -> bool {
    let v = value.trim();
    let inner = if let Some(rest) = v.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
        rest.strip_suffix(":-").unwrap_or(rest)
    } else if let Some(rest) = v.strip_prefix('$') {
        rest
    } else {
        return false;
    };
    !inner.is_empty() && inner.eq_ignore_ascii_case(key)
}

/// Key-aware redaction of one string stored under `key` (whose holder sits under
/// `parent_key`).
///
/// Under a sensitive key the whole value is masked (unless it is already a mask, a shell
/// reference to the key itself, or a `$WORKSPACE_DIR/….jsonl` session path); masking the whole
/// value rather than only the pattern hits keeps the rule idempotent and never leaves part of
/// a secret behind. Under any other key the free-text patterns apply.
pub fn redact_field_value(
    key: &str,
    parent_key: Option<&str>,
    value: &str,
    config: &RedactionConfig,
) -> String {
    if !is_sensitive_key_in(key, parent_key) {
        let text = redact_text_with(value, config).text;
        return if is_app_password_key(key) {
            mask_app_passwords(&text)
        } else {
            text
        };
    }
    if is_masked(value) || is_own_shell_reference(key, value) {
        return value.to_owned();
    }
    if key.eq_ignore_ascii_case("session") && is_workspace_session_path(value) {
        return value.to_owned();
    }
    mask_token(value)
}

/// Keys whose text may quote an app-specific password (`abcd-efgh-ijkl-mnop`).
const APP_PASSWORD_KEYS: &[&str] = &[
    "apple",
    "icloud",
    "app-specific-password",
    "app_specific_password",
    "appspecificpassword",
    "text",
    "content",
    "message",
    "error",
    "errormessage",
    "detail",
    "details",
    "reason",
];

fn is_app_password_key(key: &str) -> bool {
    APP_PASSWORD_KEYS.contains(&key.to_ascii_lowercase().as_str())
}

fn is_app_password(word: &str) -> bool {
    let groups: Vec<&str> = word.split('-').collect();
    groups.len() == 4
        && groups
            .iter()
            .all(|g| g.len() == 4 && g.chars().all(|c| c.is_ascii_lowercase()))
}

/// Masks app-specific passwords (four dash-separated groups of four lowercase letters).
fn mask_app_passwords(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if !is_word(chars[i]) || (i > 0 && is_word(chars[i - 1])) {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && is_word(chars[j]) {
            j += 1;
        }
        let word: String = chars[i..j].iter().collect();
        if is_app_password(&word) {
            out.push_str(&safe_mask(&word, false));
        } else {
            out.push_str(&word);
        }
        i = j;
    }
    out
}

fn is_workspace_session_path(value: &str) -> bool {
    value.starts_with("$WORKSPACE_DIR/") && value.ends_with(".jsonl")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_rule() {
        assert_eq!(mask_token("hunter2"), "***");
        assert_eq!(mask_token("***"), "***");
        assert_eq!(mask_token("sk-1234567890abcdefXYZ"), "sk-123…fXYZ");
        assert!(is_masked("sk-123…fXYZ"));
        assert!(!is_masked("sk-123-fXYZ"));
    }

    #[test]
    fn sensitive_keys() {
        for k in [
            "apiKey",
            "API_KEY",
            "api-key",
            "token",
            "Authorization",
            "OPENROUTER_API_KEY",
            "DISCORD_BOT_TOKEN",
            "client_secret",
            "set-cookie",
            "cvc",
            "sharedPaymentToken",
            "card_number",
            "botToken",
        ] {
            assert!(is_sensitive_key(k), "{k}");
        }
        for k in [
            "model",
            "sessionKey",
            "childSessionKey",
            "primary_key",
            "idempotency_key",
            "amount",
            "_key",
            "id",
            "MODEL",
        ] {
            assert!(!is_sensitive_key(k), "{k}");
        }
        assert!(is_sensitive_key_in("id", Some("publicShare")));
        assert!(!is_sensitive_key_in("id", Some("ordinary")));
    }

    #[test]
    fn text_patterns() {
        let t = redact_text("OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789\nMODEL=gpt-4");
        assert!(!t.contains("abcdef0123456789"), "{t}");
        assert!(t.contains("MODEL=gpt-4"));
        let t = redact_text("Authorization: Bearer abcdef0123456789QWERTY=");
        assert!(t.starts_with("Authorization: Bearer "), "{t}");
        assert!(!t.contains("abcdef0123456789QWERTY="), "{t}");
        let t = redact_text(r#"{"cvc":"123","amount":"4200"}"#);
        assert_eq!(t, r#"{"cvc":"***","amount":"4200"}"#);
        let t = redact_text("run --api-key hunter22 now");
        assert_eq!(t, "run --api-key *** now");
    }

    #[test]
    fn app_passwords_under_message_keys() {
        let cfg = RedactionConfig::default();
        let out = redact_field_value("text", None, "use abcd-efgh-ijkl-mnop now", &cfg);
        assert_eq!(out, "use abcd-e…mnop now");
        assert_eq!(redact_field_value("text", None, &out, &cfg), out);
        let kept = redact_field_value("path", None, "abcd-efgh-ijkl-mnop", &cfg);
        assert_eq!(kept, "abcd-efgh-ijkl-mnop");
    }

    #[test]
    fn text_patterns_are_idempotent_on_samples() {
        for s in [
            "OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789",
            "Authorization: Bearer abcdef0123456789QWERTY=",
            "token=sk-abcdefghijk-ey=value",
            "${GITHUB_TOKEN:-literalgithub1234567890}",
            r#"{"apiKey":"sk-1234567890abcdef","model":"gpt-4"}"#,
            "password: 'a\\'bcdefghijklmnopqrstu'",
        ] {
            let once = redact_text(s);
            assert_eq!(redact_text(&once), once, "{s}");
        }
    }
}
