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

use std::borrow::Cow;

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
    if value == MASK || value.chars().count() < MASK_MIN_CHARS {
        return MASK.to_owned();
    }
    // At least 18 characters: the byte ends of the first 6 and the start of the last 4.
    let head_end = value.char_indices().nth(6).map_or(value.len(), |(i, _)| i);
    let tail_start = value.char_indices().nth_back(3).map_or(0, |(i, _)| i);
    let (head, tail) = (&value[..head_end], &value[tail_start..]);
    if head.contains(ELLIPSIS) || tail.contains(ELLIPSIS) {
        // An ellipsis in the kept edges would make the mask unrecognisable as one.
        return MASK.to_owned();
    }
    let mut out = String::with_capacity(head.len() + ELLIPSIS.len_utf8() + tail.len());
    out.push_str(head);
    out.push(ELLIPSIS);
    out.push_str(tail);
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

/// Longest compact key any of the key tables can match; longer keys match none of them.
const COMPACT_MAX: usize = 32;

/// The lower-cased key without `_` and `-` in a stack buffer, or `None` when it is longer
/// than [`COMPACT_MAX`] (then it equals no table entry). `key` must be ASCII.
fn compact_lower(key: &str) -> Option<([u8; COMPACT_MAX], usize)> {
    let mut buf = [0u8; COMPACT_MAX];
    let mut n = 0;
    for &b in key.as_bytes() {
        if b == b'_' || b == b'-' {
            continue;
        }
        if n == COMPACT_MAX {
            return None;
        }
        buf[n] = b.to_ascii_lowercase();
        n += 1;
    }
    Some((buf, n))
}

fn compact_in(key: &str, table: &[&str]) -> bool {
    compact_lower(key).is_some_and(|(buf, n)| table.iter().any(|t| t.as_bytes() == &buf[..n]))
}

/// Whether a JSON object key names a secret (case-insensitive, whole key).
pub fn is_sensitive_key(key: &str) -> bool {
    let bytes = key.as_bytes();
    let Some(&first) = bytes.first() else {
        return false;
    };
    if !first.is_ascii_alphabetic() {
        return false;
    }
    if !bytes
        .iter()
        .all(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
    {
        return false;
    }
    if compact_in(key, SENSITIVE_COMPACT) {
        return true;
    }
    // Segments split on `_`/`-`: at least two, none empty (the first byte is alphabetic).
    if let Some(last_sep) = key.rfind(['_', '-']) {
        let no_empty = last_sep + 1 < key.len()
            && !bytes
                .windows(2)
                .any(|w| matches!(w[0], b'_' | b'-') && matches!(w[1], b'_' | b'-'));
        if no_empty {
            let last = &key[last_sep + 1..];
            if ENV_SUFFIXES.iter().any(|s| last.eq_ignore_ascii_case(s)) {
                return !(last.eq_ignore_ascii_case("key")
                    && compact_in(&key[..last_sep], BENIGN_KEY_PREFIXES));
            }
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
    // A sensitive key is ASCII, as `compact_in` needs.
    is_sensitive_key(key) && !compact_in(key, TEXT_EXEMPT_COMPACT)
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

/// A word character (`A-Z a-z 0-9 _ -`); a UTF-8 continuation or lead byte never is one.
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn is_value_terminator(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | ',' | ';' | '}' | ']' | ')' | '&')
}

/// The character starting at byte `i` (a character boundary) of `s`.
fn char_at(s: &str, i: usize) -> Option<char> {
    s.get(i..).and_then(|rest| rest.chars().next())
}

/// The byte index of the first value terminator at or after `from`, or the end.
fn terminator_from(s: &str, from: usize) -> usize {
    s[from..]
        .char_indices()
        .find(|(_, c)| is_value_terminator(*c))
        .map_or(s.len(), |(k, _)| from + k)
}

/// Copy-on-write output of a scan: nothing is allocated until a span is replaced.
struct Rewrite<'a> {
    text: &'a str,
    out: Option<String>,
    copied: usize,
}

impl<'a> Rewrite<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            out: None,
            copied: 0,
        }
    }

    /// Replaces bytes `from..to` (at or after everything replaced so far) with `with`.
    fn replace(&mut self, from: usize, to: usize, with: &str) {
        let out = self
            .out
            .get_or_insert_with(|| String::with_capacity(self.text.len()));
        out.push_str(&self.text[self.copied..from]);
        out.push_str(with);
        self.copied = to;
    }

    fn finish(self) -> Cow<'a, str> {
        match self.out {
            None => Cow::Borrowed(self.text),
            Some(mut out) => {
                out.push_str(&self.text[self.copied..]);
                Cow::Owned(out)
            }
        }
    }
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
    let (text, matched) = redact_text_cow(text, config);
    TextRedaction {
        text: text.into_owned(),
        matched,
    }
}

/// The pattern layer without copying: the text is borrowed when nothing was replaced.
pub(crate) fn redact_text_cow<'a>(text: &'a str, config: &RedactionConfig) -> (Cow<'a, str>, bool) {
    let bytes = text.as_bytes();
    let n = bytes.len();
    let mut rw = Rewrite::new(text);
    let mut matched = false;
    let mut i = 0;
    while i < n {
        let c = bytes[i];
        if c == b'$'
            && bytes.get(i + 1) == Some(&b'{')
            && let Some((end, replacement, hit)) = shell_reference(text, i)
        {
            matched |= hit;
            if let Some(r) = replacement {
                rw.replace(i, end, &r);
            }
            i = end;
            continue;
        }
        if !is_word_byte(c) || (i > 0 && is_word_byte(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < n && is_word_byte(bytes[j]) {
            j += 1;
        }
        let word = &text[i..j];
        // Known token prefixes.
        if is_prefixed_token(word, config) {
            matched = true;
            rw.replace(i, j, &safe_mask(word, false));
            i = j;
            continue;
        }
        // `Bearer <token>`.
        if word.eq_ignore_ascii_case("bearer")
            && let Some((start, end)) = scheme_token(text, j)
        {
            matched = true;
            rw.replace(start, end, &mask_span(&text[start..end], false));
            i = end;
            continue;
        }
        // `--api-key value`.
        if let Some(flag) = word.strip_prefix("--")
            && is_text_key(flag)
            && let Some((start, end)) = flag_value(text, j)
        {
            matched = true;
            rw.replace(start, end, &mask_span(&text[start..end], false));
            i = end;
            continue;
        }
        // `KEY=value`, `"key": "value"`, `Authorization: Bearer x`.
        // (`assignment` first: it is pure and rejects most words at the next byte.)
        if let Some(a) = assignment(text, j)
            && is_text_key(word)
        {
            matched = true;
            let value = &text[a.value_start..a.value_end];
            if !is_own_shell_reference(word, value) {
                rw.replace(a.value_start, a.value_end, &mask_span(value, a.quoted));
            }
            i = a.value_end;
            continue;
        }
        i = j;
    }
    (rw.finish(), matched)
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
fn mask_span(span: &str, quoted: bool) -> String {
    if is_masked(span) {
        return span.to_owned();
    }
    safe_mask(span, quoted)
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
    // `masked` is six characters, the ellipsis, four characters.
    let head_end = masked
        .char_indices()
        .nth(6)
        .map_or(masked.len(), |(i, _)| i);
    if masked[..head_end].contains(['=', ':', '$']) {
        return MASK.to_owned();
    }
    let tail = &masked[(head_end + ELLIPSIS.len_utf8()).min(masked.len())..];
    let tail_word = &tail[..tail
        .bytes()
        .position(|b| !is_word_byte(b))
        .unwrap_or(tail.len())];
    if is_sensitive_key(tail_word) || tail_word.starts_with("--") {
        return MASK.to_owned();
    }
    masked
}

/// `${NAME}` / `${NAME:-default}` at byte `start`: the end index, the replacement text when
/// the default of a sensitive name must be masked, and whether a secret default was seen
/// (masked now or already).
fn shell_reference(text: &str, start: usize) -> Option<(usize, Option<String>, bool)> {
    let bytes = text.as_bytes();
    let mut k = start + 2;
    let name_start = k;
    while k < bytes.len() && (bytes[k].is_ascii_alphanumeric() || bytes[k] == b'_') {
        k += 1;
    }
    if k == name_start {
        return None;
    }
    let name = &text[name_start..k];
    match bytes.get(k) {
        Some(b'}') => Some((k + 1, None, false)),
        Some(b':') if bytes.get(k + 1) == Some(&b'-') => {
            let default_start = k + 2;
            let mut e = default_start;
            while let Some(c) = char_at(text, e)
                && c != '}'
                && !c.is_whitespace()
            {
                if c == '$' || c == '{' {
                    return None;
                }
                e += c.len_utf8();
            }
            if bytes.get(e) != Some(&b'}') {
                return None;
            }
            let default = &text[default_start..e];
            if default.is_empty() || !is_sensitive_key(name) {
                return Some((e + 1, None, false));
            }
            if is_masked(default) {
                return Some((e + 1, None, true));
            }
            let mut replacement = text[start..default_start].to_owned();
            replacement.push_str(&safe_mask(default, true));
            replacement.push('}');
            Some((e + 1, Some(replacement), true))
        }
        _ => None,
    }
}

/// The token after `Bearer`: one or more spaces, then either an existing mask (the whole run
/// up to a terminator) or at least 8 token characters (`A-Z a-z 0-9 . _ ~ + / = -`).
fn scheme_token(text: &str, after: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut k = after;
    while k < bytes.len() && bytes[k] == b' ' {
        k += 1;
    }
    if k == after {
        return None;
    }
    let start = k;
    let end_any = terminator_from(text, start);
    if is_masked(&text[start..end_any]) {
        return Some((start, end_any));
    }
    let mut end_token = start;
    while end_token < bytes.len()
        && (bytes[end_token].is_ascii_alphanumeric()
            || matches!(
                bytes[end_token],
                b'.' | b'_' | b'~' | b'+' | b'/' | b'=' | b'-'
            ))
    {
        end_token += 1;
    }
    (end_token - start >= 8).then_some((start, end_token))
}

fn flag_value(text: &str, after: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let sep = *bytes.get(after)?;
    if sep != b' ' && sep != b'=' {
        return None;
    }
    let start = after + 1;
    let k = terminator_from(text, start);
    if k == start || bytes[start] == b'-' {
        return None;
    }
    Some((start, k))
}

struct Assignment {
    value_start: usize,
    value_end: usize,
    quoted: bool,
}

fn assignment(text: &str, after: usize) -> Option<Assignment> {
    let bytes = text.as_bytes();
    let mut k = after;
    if matches!(bytes.get(k), Some(b'"' | b'\'')) {
        k += 1;
    }
    while matches!(bytes.get(k), Some(b' ' | b'\t')) {
        k += 1;
    }
    match bytes.get(k) {
        Some(b'=') if bytes.get(k + 1) != Some(&b'=') => {}
        Some(b':') if !matches!(bytes.get(k + 1), Some(b'-' | b'/' | b':')) => {}
        _ => return None,
    }
    k += 1;
    while matches!(bytes.get(k), Some(b' ' | b'\t')) {
        k += 1;
    }
    // `Authorization: Bearer <token>` / `Basic <token>`: keep the scheme.
    let scheme_end = {
        let mut e = k;
        while e < bytes.len() && bytes[e].is_ascii_alphabetic() {
            e += 1;
        }
        let scheme = &text[k..e];
        (["bearer", "basic", "token"]
            .iter()
            .any(|s| scheme.eq_ignore_ascii_case(s))
            && bytes.get(e) == Some(&b' '))
        .then_some(e + 1)
    };
    if let Some(start) = scheme_end {
        let e = terminator_from(text, start);
        if e > start {
            return Some(Assignment {
                value_start: start,
                value_end: e,
                quoted: false,
            });
        }
    }
    match char_at(text, k) {
        Some(q @ ('"' | '\'')) => {
            let start = k + 1;
            let mut e = start;
            while let Some(c) = char_at(text, e)
                && c != q
            {
                e += c.len_utf8();
                if c == '\\'
                    && let Some(escaped) = char_at(text, e)
                {
                    e += escaped.len_utf8();
                }
            }
            if e >= bytes.len() || e == start {
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
            let e = terminator_from(text, start);
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
        let (text, _) = redact_text_cow(value, config);
        return if is_app_password_key(key) {
            mask_app_passwords(&text).into_owned()
        } else {
            text.into_owned()
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
    APP_PASSWORD_KEYS
        .iter()
        .any(|k| k.eq_ignore_ascii_case(key))
}

/// Four dash-separated groups of four lowercase ASCII letters.
fn is_app_password(word: &str) -> bool {
    let bytes = word.as_bytes();
    bytes.len() == 19
        && bytes.iter().enumerate().all(|(i, &b)| {
            if i % 5 == 4 {
                b == b'-'
            } else {
                b.is_ascii_lowercase()
            }
        })
}

/// Masks app-specific passwords (four dash-separated groups of four lowercase letters).
fn mask_app_passwords(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut rw = Rewrite::new(text);
    let mut i = 0;
    while i < bytes.len() {
        if !is_word_byte(bytes[i]) || (i > 0 && is_word_byte(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < bytes.len() && is_word_byte(bytes[j]) {
            j += 1;
        }
        let word = &text[i..j];
        if is_app_password(word) {
            rw.replace(i, j, &safe_mask(word, false));
        }
        i = j;
    }
    rw.finish()
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
