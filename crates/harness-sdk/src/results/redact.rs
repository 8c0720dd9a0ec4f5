//! Secret redaction for tool arguments, tool results and display text (see `docs/tool-results.md, 'Sanitizing and redaction'`).
//!
//! Two layers:
//! * **Free-text patterns** ([`redact_text`]): sensitive `KEY=value` / `"key": "value"`
//!   assignments, `<password>…</password>` elements, `Bearer <token>`, `--api-key <value>`
//!   flags, `curl -u <user:password>`, the password flags of known commands (`mysql -p…`,
//!   `sshpass -p …`, `command_flags`), well-known token prefixes (`sk-`, `ghp_`, `xoxb-`,
//!   `AKIA`, …), shell defaults `${SECRET_NAME:-default}`, and caller-configured token
//!   prefixes ([`RedactionConfig::token_prefixes`]).
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
//! Rules meet in one scan: a match whose span holds the start of another rule's match that
//! reaches further is merged with it into one mask (`swallowed`), and a text a mask changed so
//! that it may read differently is scanned again (`rescan`), so one call leaves nothing for a
//! second one (`docs/redaction.md`).
//!
//! App-specific passwords (`abcd-efgh-ijkl-mnop`) are masked inside values stored under
//! message-like keys (`text`, `content`, `message`, `error`, `details`, `reason`, `apple`,
//! `icloud`, …).
//!
//! Design decisions: custom patterns are literal token prefixes (no regular-expression engine);
//! benign `*_key` names (`primary_key`, `cache_key`, `idempotency_key`, …) are **not** sensitive.

use std::borrow::Cow;
use std::cell::Cell;

use command_flags::{Commands, CommandsMemo, Form};

mod command_flags;

/// The mask for short or non-string secrets.
pub const MASK: &str = "***";

/// Masks below this length (in characters) become [`MASK`].
pub const MASK_MIN_CHARS: usize = 18;

const ELLIPSIS: char = '…';

/// [`ELLIPSIS`] as a string.
const ELLIPSIS_STR: &str = "…";

/// Caller configuration of the pattern layer (the `logging.redactPatterns` equivalent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedactionConfig {
    /// Extra token prefixes: a word that starts with one of these, followed by at least one
    /// more token character, is masked wherever it appears (e.g. `custom-secret-`).
    pub token_prefixes: Vec<String>,
}

/// Masks one secret value (see the module docs).
pub fn mask_token(value: &str) -> String {
    let mut out = String::new();
    push_mask(&mut out, value, mask_edges(value));
    out
}

/// The byte ends of the kept edges of the mask of `value`: the end of the first 6 characters
/// and the start of the last 4; `None` when the mask is [`MASK`].
fn mask_edges(value: &str) -> Option<(usize, usize)> {
    // Fewer bytes than `MASK_MIN_CHARS` means fewer characters too.
    if value.len() < MASK_MIN_CHARS {
        return None;
    }
    if value.is_ascii() {
        // One byte per character, and no ellipsis anywhere.
        return Some((6, value.len() - 4));
    }
    if value.chars().count() < MASK_MIN_CHARS {
        return None;
    }
    // At least 18 characters: the byte ends of the first 6 and the start of the last 4.
    let head_end = value.char_indices().nth(6).map_or(value.len(), |(i, _)| i);
    let tail_start = value.char_indices().nth_back(3).map_or(0, |(i, _)| i);
    if has_ellipsis(&value[..head_end]) || has_ellipsis(&value[tail_start..]) {
        // An ellipsis in the kept edges would make the mask unrecognisable as one.
        return None;
    }
    Some((head_end, tail_start))
}

/// Whether `s` contains [`ELLIPSIS`] (looked for by its UTF-8 lead byte first).
fn has_ellipsis(s: &str) -> bool {
    s.as_bytes().contains(&0xE2) && s.contains(ELLIPSIS)
}

/// Appends the mask of `value` with the given edges ([`MASK`] for `None`).
fn push_mask(out: &mut String, value: &str, edges: Option<(usize, usize)>) {
    match edges {
        None => out.push_str(MASK),
        Some((head_end, tail_start)) => {
            out.reserve(head_end + ELLIPSIS.len_utf8() + (value.len() - tail_start));
            out.push_str(&value[..head_end]);
            out.push(ELLIPSIS);
            out.push_str(&value[tail_start..]);
        }
    }
}

/// Replaces `value` with its [`mask_token`] in place (a mask is never longer than a value of
/// at least 18 characters, so the buffer is reused).
pub(crate) fn mask_in_place(value: &mut String) {
    let len = value.len();
    if len < MASK_MIN_CHARS {
        // Fewer bytes than `MASK_MIN_CHARS` means fewer characters too.
        value.clear();
        value.push_str(MASK);
        return;
    }
    if value.is_ascii() {
        // One byte per character (the edges of [`mask_edges`]: the first six bytes and the last
        // four, no ellipsis among them).
        let mut tail = [0u8; 4];
        tail.copy_from_slice(&value.as_bytes()[len - 4..]);
        value.truncate(6);
        value.push_str(ELLIPSIS_STR);
        for b in tail {
            value.push(char::from(b));
        }
        return;
    }
    match mask_edges(value) {
        None => {
            value.clear();
            value.push_str(MASK);
        }
        Some((head_end, tail_start)) => {
            // The tail is four characters: at most 16 bytes.
            let mut tail = [0u8; 16];
            let tail_len = value.len() - tail_start;
            tail[..tail_len].copy_from_slice(&value.as_bytes()[tail_start..]);
            value.truncate(head_end);
            value.push(ELLIPSIS);
            // `tail_start` is a character boundary, so the copied bytes are valid UTF-8.
            value.push_str(std::str::from_utf8(&tail[..tail_len]).unwrap_or_default());
        }
    }
}

/// Whether `value` is already a mask produced by [`mask_token`] (`"***"` or `xxxxxx…yyyy`).
#[inline]
pub fn is_masked(value: &str) -> bool {
    let len = value.len();
    if len == MASK.len() {
        return value == MASK;
    }
    // Eleven characters, one of them the three-byte ellipsis: 13 to 43 bytes.
    if !(13..=43).contains(&len) {
        return false;
    }
    let bytes = value.as_bytes();
    // When the first six bytes are ASCII they are the first six characters, and the seventh
    // character, the ellipsis, starts at byte 6 with its lead byte.
    let mut head = [0u8; 8];
    head.copy_from_slice(&bytes[..8]);
    if u64::from_le_bytes(head) & 0x8080_8080_8080 == 0 && bytes[6] != 0xE2 {
        return false;
    }
    is_edge_mask(value)
}

/// The rest of [`is_masked`] for a value of 13 to 43 bytes: eleven characters, the seventh of
/// them the only ellipsis.
fn is_edge_mask(value: &str) -> bool {
    if !value.as_bytes().contains(&0xE2) {
        return false;
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

/// The sensitive keys in compact form (lower-cased, without `_` and `-`).
const SENSITIVE_COMPACT: &[&str] = &[
    "apikey",
    "apitoken",
    "bearertoken",
    "token",
    "secret",
    "password",
    "passwd",
    "pass",
    "passphrase",
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
    "accountkey",
    "sharedaccesskey",
    "connectionstring",
];

/// Generic names that are sensitive as JSON keys but too common in code and prose to be
/// treated as assignments inside free text.
const TEXT_EXEMPT_COMPACT: &[&str] = &["key", "session", "signature"];

/// Last words of `_`- or `-`-separated names that make the name sensitive (`GITHUB_TOKEN`,
/// `MYSQL_PWD`; `pwd` alone is a working directory and stays).
const ENV_SUFFIXES: &[&str] = &[
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "pass",
    "passphrase",
    "pwd",
    "cvc",
    "cvv",
];

/// Endings (lower case) that make a name sensitive even when nothing parts them from the
/// words before them: `PGPASSWORD`, `dbpassword`, `appsecret`. No English word ends like
/// them but the names themselves (unlike `key`, `pass` or `pwd`: `monkey`, `bypass`,
/// `OLDPWD`), so they are matched in any case, whatever comes before them. `token` is not
/// among them: a glued `…token` name is as often a page or a count as a credential
/// (`nexttoken`, `mytoken` in prose), and the names that carry one are spelled with a
/// separator or in camel case (`GITHUB_TOKEN`, `accessToken`).
const COMPOUND_SUFFIXES: &[&str] = &["password", "passwd", "passphrase", "secret"];

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

/// Camel-case suffixes of sensitive keys (`is_sensitive_key` matches them by last byte).
const CAMEL_SUFFIXES: &[&str] = &["Token", "Secret", "Password", "Passwd", "ApiKey"];

/// Longest compact key any of the key tables can match; longer keys match none of them.
const COMPACT_MAX: usize = 32;

/// [`KEY_ENDS`]: the byte (either case) starts an entry of [`SENSITIVE_COMPACT`].
const KEY_END_COMPACT_FIRST: u8 = 1;
/// [`KEY_ENDS`]: the byte (either case) ends an entry of [`SENSITIVE_COMPACT`].
const KEY_END_COMPACT_LAST: u8 = 1 << 1;
/// [`KEY_ENDS`]: the byte (either case) ends one of [`ENV_SUFFIXES`], [`CAMEL_SUFFIXES`] or
/// [`COMPOUND_SUFFIXES`].
const KEY_END_SUFFIX: u8 = 1 << 2;
/// [`KEY_ENDS`]: `_` or `-` (the last letter of the compact form is elsewhere).
const KEY_END_SEPARATOR: u8 = 1 << 3;

/// What each byte can be at either end of a sensitive key (see the `KEY_END_*` bits), derived
/// from the key tables.
static KEY_ENDS: [u8; 256] = {
    const fn mark(table: &mut [u8; 256], byte: u8, bit: u8) {
        table[byte.to_ascii_lowercase() as usize] |= bit;
        table[byte.to_ascii_uppercase() as usize] |= bit;
    }
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < SENSITIVE_COMPACT.len() {
        let entry = SENSITIVE_COMPACT[i].as_bytes();
        mark(&mut table, entry[0], KEY_END_COMPACT_FIRST);
        mark(&mut table, entry[entry.len() - 1], KEY_END_COMPACT_LAST);
        i += 1;
    }
    let mut i = 0;
    while i < ENV_SUFFIXES.len() {
        let suffix = ENV_SUFFIXES[i].as_bytes();
        mark(&mut table, suffix[suffix.len() - 1], KEY_END_SUFFIX);
        i += 1;
    }
    let mut i = 0;
    while i < CAMEL_SUFFIXES.len() {
        let suffix = CAMEL_SUFFIXES[i].as_bytes();
        mark(&mut table, suffix[suffix.len() - 1], KEY_END_SUFFIX);
        i += 1;
    }
    let mut i = 0;
    while i < COMPOUND_SUFFIXES.len() {
        let suffix = COMPOUND_SUFFIXES[i].as_bytes();
        mark(&mut table, suffix[suffix.len() - 1], KEY_END_SUFFIX);
        i += 1;
    }
    table[b'_' as usize] |= KEY_END_SEPARATOR;
    table[b'-' as usize] |= KEY_END_SEPARATOR;
    table
};

/// [`KEY_CLASS`] of an ASCII letter or digit.
const KEY_ALNUM: u8 = 1;
/// [`KEY_CLASS`] of `_` and `-`.
const KEY_SEPARATOR: u8 = 2;

/// The class of each byte in a key: [`KEY_ALNUM`], [`KEY_SEPARATOR`], or 0 for a byte that
/// no sensitive key contains.
static KEY_CLASS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() {
            table[b] = KEY_ALNUM;
        } else if c == b'_' || c == b'-' {
            table[b] = KEY_SEPARATOR;
        }
        b += 1;
    }
    table
};

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

/// Whether the compact form (lower-cased, without `_`/`-`) of `key` equals `target`.
fn compact_eq(key: &[u8], target: &[u8]) -> bool {
    let mut t = 0;
    for &b in key {
        if b == b'_' || b == b'-' {
            continue;
        }
        if target.get(t) != Some(&b.to_ascii_lowercase()) {
            return false;
        }
        t += 1;
    }
    t == target.len()
}

/// FNV-1a over the bytes of a compact key (the hash of [`SENSITIVE_SLOTS`]).
const fn compact_hash_step(hash: u64, byte: u8) -> u64 {
    (hash ^ byte as u64).wrapping_mul(0x0100_0000_01b3)
}

/// The FNV-1a offset basis.
const COMPACT_HASH_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Number of slots of [`SENSITIVE_SLOTS`] (a power of two, about three times the entries).
const SENSITIVE_SLOT_COUNT: usize = 128;

/// An open-addressing hash table of [`SENSITIVE_COMPACT`]: each slot holds an entry index plus
/// one, or 0 when empty; collisions go to the next slot.
static SENSITIVE_SLOTS: [u8; SENSITIVE_SLOT_COUNT] = {
    let mut slots = [0u8; SENSITIVE_SLOT_COUNT];
    let mut i = 0;
    while i < SENSITIVE_COMPACT.len() {
        let entry = SENSITIVE_COMPACT[i].as_bytes();
        let mut hash = COMPACT_HASH_START;
        let mut k = 0;
        while k < entry.len() {
            hash = compact_hash_step(hash, entry[k]);
            k += 1;
        }
        let mut slot = hash as usize % SENSITIVE_SLOT_COUNT;
        while slots[slot] != 0 {
            slot = (slot + 1) % SENSITIVE_SLOT_COUNT;
        }
        slots[slot] = (i + 1) as u8;
        i += 1;
    }
    slots
};

/// Whether the compact form of `key`, whose hash is `hash`, is in [`SENSITIVE_COMPACT`].
fn is_sensitive_compact(key: &[u8], hash: u64) -> bool {
    let mut slot = hash as usize % SENSITIVE_SLOT_COUNT;
    loop {
        let entry = SENSITIVE_SLOTS[slot];
        if entry == 0 {
            return false;
        }
        if compact_eq(key, SENSITIVE_COMPACT[usize::from(entry - 1)].as_bytes()) {
            return true;
        }
        slot = (slot + 1) % SENSITIVE_SLOT_COUNT;
    }
}

/// For each byte, the lengths (as bits) of the [`SENSITIVE_COMPACT`] entries that end with it
/// in either case.
static COMPACT_LENGTHS_BY_LAST: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < SENSITIVE_COMPACT.len() {
        let entry = SENSITIVE_COMPACT[i].as_bytes();
        let last = entry[entry.len() - 1];
        table[last.to_ascii_lowercase() as usize] |= 1 << entry.len();
        table[last.to_ascii_uppercase() as usize] |= 1 << entry.len();
        i += 1;
    }
    table
};

/// Whether an entry of [`SENSITIVE_COMPACT`] is `len` bytes long and ends with `last` (in
/// either case).
fn compact_length_fits(len: usize, last: u8) -> bool {
    len < 64 && COMPACT_LENGTHS_BY_LAST[usize::from(last)] & (1 << len) != 0
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
    // Quick rejection by the first and last bytes (most keys): the compact list can only
    // match a key whose first and last letters start and end one of its entries, the suffix
    // rules only a key ending like one of their suffixes.
    let last = bytes[bytes.len() - 1];
    if !(KEY_ENDS[usize::from(last)] & KEY_END_SUFFIX != 0
        || (KEY_ENDS[usize::from(first)] & KEY_END_COMPACT_FIRST != 0
            && KEY_ENDS[usize::from(last)] & (KEY_END_COMPACT_LAST | KEY_END_SEPARATOR) != 0))
    {
        return false;
    }
    // Without `_` or `-` the key is its own compact form (but for case) and no separator
    // rule applies: unless an entry of its length ends with its last letter, only the
    // camel-case suffixes can match.
    if !compact_length_fits(bytes.len(), last) {
        // Stops at the first separator (the full pass below judges such a key).
        let mut valid = true;
        let mut separators = false;
        for &b in bytes {
            let class = KEY_CLASS[usize::from(b)];
            if class == KEY_SEPARATOR {
                separators = true;
                break;
            }
            valid &= class != 0;
        }
        if !separators {
            return valid && (is_compound_sensitive(bytes) || is_camel_sensitive(key));
        }
    }
    // One pass: the characters (letters, digits, `_`, `-`), the separators and the hash of
    // the compact form.
    let mut valid = true;
    let mut separators = false;
    let mut hash = COMPACT_HASH_START;
    for &b in bytes {
        let class = KEY_CLASS[usize::from(b)];
        valid &= class != 0;
        if class == KEY_SEPARATOR {
            separators = true;
        } else {
            // `| 0x20` lower-cases a letter and keeps a digit (other bytes make the key
            // invalid anyway).
            hash = compact_hash_step(hash, b | 0x20);
        }
    }
    if !valid {
        return false;
    }
    if is_sensitive_compact(bytes, hash) {
        return true;
    }
    // Segments split on `_`/`-`: at least two, none empty (the first byte is alphabetic).
    if separators
        && let Some(last_sep) = bytes.iter().rposition(|&b| b == b'_' || b == b'-')
        && last_sep + 1 < key.len()
        && !bytes
            .windows(2)
            .any(|w| matches!(w[0], b'_' | b'-') && matches!(w[1], b'_' | b'-'))
    {
        let last = &key[last_sep + 1..];
        if ENV_SUFFIXES.iter().any(|s| last.eq_ignore_ascii_case(s)) {
            return !(last.eq_ignore_ascii_case("key")
                && compact_in(&key[..last_sep], BENIGN_KEY_PREFIXES));
        }
    }
    is_compound_sensitive(bytes) || is_camel_sensitive(key)
}

/// Whether `key` ends with one of [`COMPOUND_SUFFIXES`] in any case.
fn is_compound_sensitive(key: &[u8]) -> bool {
    // `COMPOUND_SUFFIXES` by last byte.
    let suffixes: &[&[u8]] = match key.last().map(u8::to_ascii_lowercase) {
        Some(b'd') => &[b"password", b"passwd"],
        Some(b'e') => &[b"passphrase"],
        Some(b't') => &[b"secret"],
        _ => return false,
    };
    suffixes.iter().any(|suffix| {
        key.len() >= suffix.len() && key[key.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
    })
}

/// Whether `key` ends with one of [`CAMEL_SUFFIXES`] (exact case) right after a lower-case
/// letter or a digit.
fn is_camel_sensitive(key: &str) -> bool {
    // `CAMEL_SUFFIXES` by last byte.
    let suffixes: &[&str] = match key.as_bytes().last() {
        Some(b'n') => &["Token"],
        Some(b't') => &["Secret"],
        Some(b'd') => &["Password", "Passwd"],
        Some(b'y') => &["ApiKey"],
        _ => return false,
    };
    suffixes.iter().any(|suffix| {
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
    (key.eq_ignore_ascii_case("id") && parent_key.is_some_and(is_share_parent))
        || (key.eq_ignore_ascii_case("code") && parent_key.is_some_and(is_code_secret_parent))
}

/// Parents under which a `code` is an authorization code, not an error code: OAuth and
/// provider sign-in objects, and an error's `cause` (where only a known transport error code
/// is kept; see [`TRANSPORT_ERROR_CODES`]).
fn is_code_secret_parent(parent: &str) -> bool {
    compact_lower(parent).is_some_and(|(buf, n)| {
        matches!(
            &buf[..n],
            b"oauth" | b"provider" | b"providerauth" | b"cause"
        )
    })
}

/// Whether `key` is `cause` (compared like the key table: case-insensitively, without `_` and
/// `-`).
pub(crate) fn is_cause_key(key: &str) -> bool {
    compact_eq(key.as_bytes(), b"cause")
}

/// Transport error codes kept as they are at the end of a cause chain (exact spelling; see
/// [`redact_field_value`]).
const TRANSPORT_ERROR_CODES: &[&str] = &[
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
];

/// Whether a parent key, lower-cased with everything but ASCII letters and digits removed,
/// contains `publicshare` or is `share`.
fn is_share_parent(parent: &str) -> bool {
    let mut buf = [0u8; 64];
    let mut n = 0;
    for b in parent.bytes().filter(u8::is_ascii_alphanumeric) {
        if n == buf.len() {
            let compact: String = parent
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .map(|c| c.to_ascii_lowercase())
                .collect();
            return compact.contains("publicshare") || compact == "share";
        }
        buf[n] = b.to_ascii_lowercase();
        n += 1;
    }
    let compact = &buf[..n];
    compact == b"share" || compact.windows(11).any(|w| w == b"publicshare")
}

/// Whether `key`, found in free text, names a secret: a sensitive key
/// ([`is_sensitive_key`]) other than the words too common in prose ([`TEXT_EXEMPT_COMPACT`]).
fn is_text_key(key: &str) -> bool {
    is_sensitive_key(key) && !is_text_exempt(key)
}

/// Whether the compact form of `key` is one of [`TEXT_EXEMPT_COMPACT`] (looked up only when
/// the first byte that is not `_` or `-` starts one of them).
fn is_text_exempt(key: &str) -> bool {
    key.bytes()
        .find(|&b| b != b'_' && b != b'-')
        .is_some_and(|b| TEXT_EXEMPT_FIRST[usize::from(b)])
        && TEXT_EXEMPT_COMPACT
            .iter()
            .any(|t| compact_eq(key.as_bytes(), t.as_bytes()))
}

/// The first letters of the [`TEXT_EXEMPT_COMPACT`] entries, in either case.
static TEXT_EXEMPT_FIRST: [bool; 256] = {
    let mut table = [false; 256];
    let mut k = 0;
    while k < TEXT_EXEMPT_COMPACT.len() {
        let first = TEXT_EXEMPT_COMPACT[k].as_bytes()[0];
        table[first.to_ascii_lowercase() as usize] = true;
        table[first.to_ascii_uppercase() as usize] = true;
        k += 1;
    }
    table
};

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
    "AKID",
    "AIza",
    "whsec_",
    "npm_",
    "spt_",
    "paycred_",
    "hf_",
    // Cloud and model-provider keys: Alibaba Cloud, GitLab OAuth, Replicate, xAI, Perplexity,
    // Groq, Tavily, Fireworks.
    "LTAI",
    "gloas-",
    "r8_",
    "xai-",
    "pplx-",
    "gsk_",
    "tvly-",
    "fw_",
    "fw-",
    "fpk_",
    // More GitLab token kinds (deploy, CI build, pipeline trigger, feed, incoming mail, agent,
    // workspace, SCIM OAuth, feature flags client, runner, runner registration).
    "gldt-",
    "glcbt-",
    "glptt-",
    "glft-",
    "glimt-",
    "glagent-",
    "glwt-",
    "glsoat-",
    "glffct-",
    "glrt-",
    "glrtr-",
    "GR1348941",
    // Fernet tokens (a version byte of 0x80 and a zero timestamp head, base64url).
    "gAAAA",
];

/// More vendor prefixes (package registries, cloud and CI services, collaboration suites and
/// AI services): their tokens are long, so they need [`VENDOR_MIN_BODY`] characters after the
/// prefix (`sbp_short`, `ATATT-example` stay prose).
const VENDOR_PREFIXES: &[&str] = &[
    "fal_",
    "fc-",
    "bb_live_",
    "api_org_",
    "pypi-",
    "dop_v1_",
    "doo_v1_",
    "dor_v1_",
    "dckr_pat_",
    "dckr_oat_",
    "bkua_",
    "CCIPAT_",
    "sbp_",
    "dapi",
    "ddp_",
    "glsa_",
    "glc_",
    "nfp_",
    "CFPAT-",
    "ATCTT",
    "ATATT",
    "ATBB",
    "BBDC-",
    "HRKU-",
    "pat-na1-",
    "pat-eu1-",
    "apify_api_",
    "fio-u-",
    "am_",
    "exa_",
    "syt_",
    "retaindb_",
    "hsk-",
    "mem0_",
    "brv_",
];

/// Characters a [`VENDOR_PREFIXES`] token needs after its prefix (32 for `dapi`).
const VENDOR_MIN_BODY: usize = 20;

/// Built-in prefixes need at least this many characters after the prefix.
const TOKEN_MIN_BODY: usize = 8;

/// Which bytes are word characters (`A-Z a-z 0-9 _ -`), indexed by byte.
static WORD_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
        b += 1;
    }
    table
};

/// A word character (`A-Z a-z 0-9 _ -`); a UTF-8 continuation or lead byte never is one.
#[inline]
fn is_word_byte(b: u8) -> bool {
    WORD_BYTES[usize::from(b)]
}

const fn is_value_terminator(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`' | ',' | ';' | '}' | ']' | ')' | '&')
}

/// [`is_value_terminator`] for every ASCII byte.
static ASCII_TERMINATORS: [bool; 128] = {
    let mut table = [false; 128];
    let mut b = 0;
    while b < 128 {
        table[b] = is_value_terminator(b as u8 as char);
        b += 1;
    }
    table
};

/// The character starting at byte `i` (a character boundary) of `s`.
fn char_at(s: &str, i: usize) -> Option<char> {
    s.get(i..).and_then(|rest| rest.chars().next())
}

/// The byte index of the first value terminator at or after `from`, or the end.
fn terminator_from(s: &str, from: usize) -> usize {
    let bytes = s.as_bytes();
    let mut k = from;
    while k < bytes.len() {
        let b = bytes[k];
        if b < 0x80 {
            if ASCII_TERMINATORS[usize::from(b)] {
                return k;
            }
            k += 1;
        } else {
            // `k` is a character boundary: ASCII bytes and whole characters are stepped over.
            match char_at(s, k) {
                Some(c) if is_value_terminator(c) => return k,
                Some(c) => k += c.len_utf8(),
                None => return bytes.len(),
            }
        }
    }
    bytes.len()
}

/// Copy-on-write output of a scan: nothing is allocated until a span is replaced.
struct Rewrite<'a> {
    text: &'a str,
    out: Option<String>,
    copied: usize,
    /// Whether the output may scan differently from the text ([`rescan`]): a mask kept edges
    /// of its secret ([`Rewrite::mask_whole`]), or a check that reads past its word for a
    /// value it validates (a card number's digit groups, a `Basic` credential, a private key
    /// block, a sensitive key's value) turned one down, and a later mask can end that value
    /// earlier.
    unsettled: bool,
    /// The start of the last span replaced, or found already masked and kept.
    last_from: usize,
    /// How many spans were replaced or found already masked.
    spans: usize,
    /// A dry rewrite only records where it would replace ([`swallowed`]).
    dry: bool,
    /// The command line of the last flag or assignment looked up for its command
    /// ([`Rewrite::commands_before`]).
    commands: CommandsMemo,
    /// Whether the text may hold a command whose every `KEY=value` is a secret
    /// ([`command_flags::may_assign_secrets`]), once looked at.
    assigns_secrets: Option<bool>,
}

/// Where a [`Rewrite`] stood before a match ([`Rewrite::mark`], [`Rewrite::rollback`]).
#[derive(Clone, Copy)]
struct RewriteMark {
    out_len: usize,
    copied: usize,
    spans: usize,
}

impl<'a> Rewrite<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            out: None,
            copied: 0,
            unsettled: false,
            last_from: 0,
            spans: 0,
            dry: false,
            commands: CommandsMemo::default(),
            assigns_secrets: None,
        }
    }

    /// A rule read the text back to byte `start` (a command's line, the start tag of an
    /// element): when that reaches into a span replaced in this scan, the output reads
    /// differently there (a mask may have taken out a separator of commands, a quote, an
    /// escape's letter, a command's name, a tag's `<` or `>`), and the next scan may find what
    /// this one did not: it is scanned again ([`rescan`]).
    #[inline]
    fn reads_back_to(&mut self, start: usize) {
        self.unsettled |= self.copied > 0 && start <= self.copied;
    }

    /// The commands of the command line of the word at byte `i` ([`CommandsMemo::before`];
    /// the line read back as [`Rewrite::reads_back_to`] says).
    fn commands_before(&mut self, i: usize) -> Commands {
        let (commands, start) = self.commands.before(self.text, i);
        self.reads_back_to(start);
        commands
    }

    /// Whether the text may hold a command whose every `KEY=value` is a secret (looked at
    /// once).
    fn assigns_secrets(&mut self) -> bool {
        *self
            .assigns_secrets
            .get_or_insert_with(|| command_flags::may_assign_secrets(self.text))
    }

    /// A rewrite that writes nothing and starts where `mark` stood: it tells whether a check
    /// would replace a span and where that span starts.
    fn dry(text: &'a str, mark: RewriteMark) -> Self {
        Self {
            copied: mark.copied,
            dry: true,
            ..Self::new(text)
        }
    }

    /// Where this rewrite stands now.
    fn mark(&self) -> RewriteMark {
        RewriteMark {
            out_len: self.out.as_ref().map_or(0, String::len),
            copied: self.copied,
            spans: self.spans,
        }
    }

    /// Undoes every replacement since `mark` (whether the output is unsettled is kept).
    fn rollback(&mut self, mark: RewriteMark) {
        if let Some(out) = &mut self.out {
            out.truncate(mark.out_len);
        }
        self.copied = mark.copied;
        self.spans = mark.spans;
    }

    /// Replaces bytes `from..to` (at or after everything replaced so far) with `with`.
    fn replace(&mut self, from: usize, to: usize, with: &str) {
        self.replace_with(from, to, |out| out.push_str(with));
    }

    /// Replaces bytes `from..to` with whatever `write` appends.
    #[inline]
    fn replace_with(&mut self, from: usize, to: usize, write: impl FnOnce(&mut String)) {
        self.last_from = from;
        self.spans += 1;
        if !self.dry {
            let out = self
                .out
                .get_or_insert_with(|| String::with_capacity(self.text.len()));
            out.push_str(&self.text[self.copied..from]);
            write(out);
        }
        self.copied = to;
    }

    /// Records that the span starting at `from` is a secret already masked, kept as it is.
    fn keep(&mut self, from: usize) {
        self.last_from = from;
        self.spans += 1;
    }

    /// Replaces bytes `from..to` with [`MASK`], unless they are that already (then kept).
    fn replace_with_mask(&mut self, from: usize, to: usize) {
        if &self.text[from..to] == MASK {
            self.keep(from);
        } else {
            self.replace(from, to, MASK);
        }
    }

    /// Masks bytes `from..to` with [`mask_span`] (an existing mask is left where it is).
    fn mask_span(&mut self, from: usize, to: usize, quoted: bool) {
        let span = &self.text[from..to];
        if is_masked(span) {
            self.keep(from);
        } else {
            self.mask_whole(from, to, quoted);
        }
    }

    /// Replaces bytes `from..to` with their mask ([`safe_mask_edges`]).
    fn mask_whole(&mut self, from: usize, to: usize, quoted: bool) {
        let span = &self.text[from..to];
        let edges = safe_mask_edges(span, quoted);
        self.unsettled |= edges.is_some();
        self.replace_with(from, to, |out| push_mask(out, span, edges));
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
///
/// The checks run in a fixed order at every word start (token prefix, `Bearer`, `--flag`,
/// assignment); each is gated on a cheap necessary condition (word length and first byte, the
/// byte after the word) so that ordinary words cost a table lookup per byte.
#[inline]
pub(crate) fn redact_text_cow<'a>(text: &'a str, config: &RedactionConfig) -> (Cow<'a, str>, bool) {
    let custom_prefixes = config.token_prefixes.iter().any(|p| !p.is_empty());
    let families = families_of(text, custom_prefixes);
    if families == 0 {
        // Most text: no family, nothing to scan (decided here, inlined into the callers).
        return (Cow::Borrowed(text), false);
    }
    scan_text(text, config, families, custom_prefixes)
}

/// The pattern families a scan of `text` runs: every family with caller prefixes (which the
/// families do not cover), else those of [`pattern_families`].
#[inline]
fn families_of(text: &str, custom_prefixes: bool) -> u16 {
    if custom_prefixes {
        FAMILY_ALL
    } else {
        pattern_families(text.as_bytes())
    }
}

/// The scans of [`redact_text_cow`] for a text where some `families` can match: one, and more
/// only when the first one's output may scan differently ([`rescan`]). Kept apart so that
/// the family check above stays small enough to inline.
fn scan_text<'a>(
    text: &'a str,
    config: &RedactionConfig,
    families: u16,
    custom_prefixes: bool,
) -> (Cow<'a, str>, bool) {
    let scan = scan_words::<true>(text, config, families, custom_prefixes);
    if !scan.unsettled {
        return (scan.text, scan.matched);
    }
    rescan(scan.text.into_owned(), config, custom_prefixes)
}

/// Most rescans [`rescan`] runs before it returns what it has.
const MAX_RESCANS: usize = 4;

/// [`redact_text_cow`] after a scan whose output may scan differently ([`Scan::unsettled`]):
/// a mask's kept edges (its first six and last four characters) stand beside the text around
/// it and together can read as a secret the scan did not see (a token's last four characters
/// starting a card number with the digit groups after it, a token that swallowed a URL's
/// scheme leaving the URL's password), and a mask can end a value that a check turned down
/// earlier in the text (a `Basic` credential with a token glued to it). The redacted text is
/// scanned again until a scan changes nothing, so what comes out redacts to itself (at most
/// [`MAX_RESCANS`] scans more; each one only masks).
#[cold]
fn rescan<'a>(
    mut text: String,
    config: &RedactionConfig,
    custom_prefixes: bool,
) -> (Cow<'a, str>, bool) {
    for _ in 0..MAX_RESCANS {
        let families = families_of(&text, custom_prefixes);
        if families == 0 {
            break;
        }
        let scan = scan_words::<true>(&text, config, families, custom_prefixes);
        let unsettled = scan.unsettled;
        match scan.text {
            Cow::Borrowed(_) => break,
            Cow::Owned(next) => text = next,
        }
        if !unsettled {
            break;
        }
    }
    (Cow::Owned(text), true)
}

/// What [`scan_words`] made of a text.
#[derive(Debug)]
struct Scan<'a> {
    /// The redacted text.
    text: Cow<'a, str>,
    /// Whether any pattern matched (even when its value was already masked and kept).
    matched: bool,
    /// Whether the text changed and a second scan may find more ([`rescan`];
    /// [`Rewrite::unsettled`]).
    unsettled: bool,
}

/// The word scan of [`redact_text_cow`], for a text where some `families` can match.
///
/// `GATED`: a word gets only the checks its first byte, length and next byte allow, and a
/// scan whose families start only at a few bytes jumps between them. Each gate only skips
/// work that cannot match; the tests compare this scan with the ungated one (`false`: every
/// word start gets every check of its families).
fn scan_words<'a, const GATED: bool>(
    text: &'a str,
    config: &RedactionConfig,
    families: u16,
    custom_prefixes: bool,
) -> Scan<'a> {
    let bytes = text.as_bytes();
    let n = bytes.len();
    let shell = families & FAMILY_SHELL != 0;
    let tokens = families & FAMILY_TOKEN != 0;
    let bearer = families & FAMILY_BEARER != 0;
    let basic = families & FAMILY_BASIC != 0;
    let flags = families & FAMILY_FLAG != 0;
    let assignments = families & FAMILY_ASSIGNMENT != 0;
    let extra = families & FAMILY_EXTRA != 0;
    // The word checks whose family can match.
    let mut enabled = 0;
    if tokens {
        enabled |= CHECK_TOKEN | CHECK_DOTTED;
    }
    if assignments {
        enabled |= CHECK_OPERATOR | CHECK_HIDDEN;
    }
    if bearer {
        enabled |= CHECK_BEARER;
    }
    if basic {
        enabled |= CHECK_BASIC;
    }
    if flags {
        enabled |= CHECK_FLAG;
    }
    if extra {
        enabled |= CHECK_CARD | CHECK_JWT | CHECK_OAUTH_ACCESS | CHECK_OAUTH_REFRESH;
    }
    let rules = ScanRules {
        config,
        custom_prefixes,
        enabled,
        // Caller prefixes can match a word of any length.
        any_length: if custom_prefixes { CHECK_TOKEN } else { 0 },
    };
    // Without token prefixes, assignments and the extra shapes, a match can only start at
    // `$`, or at a word that starts with `-` or `b`/`B`: jump from one such byte to the next.
    let jump = GATED && !(tokens || assignments || extra);
    let mut rw = Rewrite::new(text);
    let mut matched = false;
    let mut i = 0;
    while i < n {
        if jump {
            match bytes[i..].iter().position(|&b| {
                (flags && b == b'-')
                    || ((bearer || basic) && (b | 0x20) == b'b')
                    || (shell && b == b'$')
            }) {
                Some(k) => i += k,
                None => break,
            }
            if i > 0
                && is_word_byte(bytes[i])
                && is_word_byte(bytes[i - 1])
                && !escape_ends_at(bytes, i)
            {
                // Inside a word: not a word start, but a private key header glued to the word
                // before it is looked for where it starts.
                if flags && bytes[i..].starts_with(PEM_BEGIN) {
                    let j = word_end(bytes, i + 1);
                    if let Some(at) = glued_header(bytes, i - 1, j, rules)
                        && let Some(end) = glued_private_key::<GATED>(text, rules, &mut rw, at, j)
                    {
                        matched = true;
                        i = end;
                        continue;
                    }
                }
                i += 1;
                continue;
            }
        }
        let c = bytes[i];
        if !is_word_byte(c) {
            if shell
                && c == b'$'
                && bytes.get(i + 1) == Some(&b'{')
                && let Some((end, replacement, hit)) = shell_reference(text, i)
            {
                matched |= hit;
                if let Some(r) = replacement {
                    rw.replace(i, end, &r);
                }
                i = end;
            } else {
                i += 1;
            }
            continue;
        }
        // `i` starts a word: it follows a non-word byte or the end of a match, and every match
        // ends at a non-word byte, after `}` or at the end of the text.
        let j = word_end(bytes, i + 1);
        // A word that nothing matches is skipped with the space after it (a space starts
        // nothing).
        let skip = j + usize::from(bytes.get(j) == Some(&b' '));
        // A word glued to an escape (`\nghp_…`) is checked from after the escape first (its
        // reading in serialized text), then as it stands (in raw text).
        if let Some(end) = escaped_word_start(bytes, i, j)
            .and_then(|k| word_step::<GATED>(text, rules, &mut rw, k, j))
            .or_else(|| word_step::<GATED>(text, rules, &mut rw, i, j))
        {
            matched = true;
            i = end;
            continue;
        }
        i = skip;
    }
    // A flag that found no separator within reach reads the words within reach, which move
    // with the masks before it in the output.
    let unsettled = rw.out.is_some() && (rw.unsettled || rw.commands.limited);
    Scan {
        text: rw.finish(),
        matched,
        unsettled,
    }
}

/// The step of [`scan_words`] at the word `text[i..j]`: its checks ([`word_checks`],
/// [`match_word`]; a match that reaches past the word may have swallowed the start of another
/// rule's match, [`swallowed`]), else a private key header glued to its end (`…\n-----BEGIN`).
/// The end of the match when one matched.
#[inline(always)]
fn word_step<'a, const GATED: bool>(
    text: &'a str,
    rules: ScanRules<'_>,
    rw: &mut Rewrite<'a>,
    i: usize,
    j: usize,
) -> Option<usize> {
    let bytes = text.as_bytes();
    let checks = word_checks::<GATED>(bytes, i, j, rules);
    if checks != 0 {
        let mark = rw.mark();
        if let Some(end) = match_word(text, rules, rw, i, j, checks) {
            return Some(if end > j {
                swallowed::<GATED>(text, rules, rw, mark, j, end)
            } else {
                end
            });
        }
    }
    let at = glued_header(bytes, i, j, rules)?;
    glued_private_key::<GATED>(text, rules, rw, at, j)
}

/// The checks of [`scan_words`] at the word `text[i..j]` that `checks` allows (at least one):
/// the end of the match when one matched (its span rewritten in `rw`), `None` when none did.
/// Kept out of the scan loop, which most words leave before these checks.
#[inline(never)]
fn match_word<'a>(
    text: &'a str,
    rules: ScanRules<'_>,
    rw: &mut Rewrite<'a>,
    i: usize,
    j: usize,
    checks: u16,
) -> Option<usize> {
    let ScanRules {
        config,
        custom_prefixes,
        ..
    } = rules;
    let bytes = text.as_bytes();
    let c = bytes[i];
    let next = bytes.get(j).copied();
    // The assignment operator is decided here, once: most words are followed by a blank
    // and then another word, which no check after a word's end can use. (A space and a
    // word character, the most common case, leave no room for an operator.)
    let operator = if checks & CHECK_OPERATOR != 0 && !space_then_word(bytes, j) {
        // `<password>secret</password>`, `<ns:password>…`: an XML element named like a
        // sensitive key; and one whose start tag has attributes, found at its end tag
        // (`<wsse:Password Type="…">secret</wsse:Password>`).
        if next == Some(b'>')
            && let Some((open, closing)) = xml_tag_start(bytes, i)
        {
            if !closing && let Some((start, end)) = xml_element_value(text, open, i, j) {
                rw.mask_span(start, end, false);
                return Some(end);
            }
            if closing && is_text_key_memo(&text[i..j]) {
                match xml_attributed_element_value(text, open, j) {
                    ElementText::Text(start, _) if rw.copied > start => {
                        // A rule inside the element's text replaced a span of it (a token):
                        // the next scan, which keeps that span as it is, masks the text whole.
                        rw.unsettled = true;
                        return None;
                    }
                    ElementText::Text(start, end) => {
                        rw.mask_span(start, end, false);
                        return Some(j);
                    }
                    // Masked from its start tag, if at all.
                    ElementText::Nothing => {}
                    // A span replaced within reach may have taken a `<` or `>` out of the
                    // text, and the next scan may find the element where this one did not.
                    ElementText::NotFound => rw.reads_back_to(open.saturating_sub(2 * XML_REACH)),
                }
            }
        }
        // `<add key="Password" value="…"/>`: a tag's value attribute whose key names a secret.
        if next == Some(b'=')
            && j - i == 5
            && bytes[i..j].eq_ignore_ascii_case(b"value")
            && let Some((start, end)) = xml_attribute_value(text, i, j)
        {
            rw.mask_span(start, end, true);
            return Some(end);
        }
        assignment_operator(bytes, j)
    } else {
        None
    };
    // `:` right after the word (URLs, bot tokens) or an operator (assignments, encoded
    // keys): every check that looks past the word's end needs one of them.
    let colon = checks & CHECK_OPERATOR != 0 && next == Some(b':');
    // A key whose `=` follows invisible characters (`client_secret\u{3164}=`).
    let hidden_eq = if checks & CHECK_HIDDEN != 0 {
        invisible_run_to_eq(text, j)
    } else {
        None
    };
    if checks & !(CHECK_OPERATOR | CHECK_HIDDEN) == 0
        && operator.is_none()
        && !colon
        && hidden_eq.is_none()
    {
        return None;
    }
    let token_check = checks & CHECK_TOKEN != 0;
    let dotted_check = checks & CHECK_DOTTED != 0;
    let flag_check = checks & CHECK_FLAG != 0;
    let card_check = checks & CHECK_CARD != 0;
    let jwt_check = checks & CHECK_JWT != 0;
    let oauth_check = checks & (CHECK_OAUTH_ACCESS | CHECK_OAUTH_REFRESH) != 0;
    // A flag with one `-` counts after a blank or a quote, the pair the scan's filter looks
    // for ([`PAIR_FIRST`]); one with `--` anywhere.
    let single_dash =
        flag_check && i > 0 && matches!(bytes[i - 1], b' ' | b'\t' | b'\n' | b'"' | b'\'');
    // `mysql -pSECRET`, `sshpass -p SECRET`: a short flag that gives the command it follows a
    // password. First: a glued password can read as a flag's name (`-pmy-pass`), a URL's
    // scheme (`-pk3y…https://…`) or anything else a word can start.
    if single_dash && let Some((start, end)) = password_flag_value(text, i, j, rw) {
        rw.mask_span(start, end, false);
        return Some(end);
    }
    // PowerShell's `ConvertTo-SecureString "secret" -AsPlainText`: the plain text before the
    // flag, found from the flag.
    if single_dash
        && j - i == 12
        && word_is(bytes, i, j, b"-asplaintext")
        && let Some((start, end, quoted)) = secure_string_argument(bytes, i)
    {
        if rw.copied > start {
            // Masked already, or a span of it replaced by another rule: the next scan, which
            // keeps such a span as it is, masks the argument whole.
            rw.unsettled |= !(rw.last_from == start && rw.copied == end);
        } else {
            rw.mask_span(start, end, quoted);
            return Some(j);
        }
    }
    // Payment card numbers (their groups span several words), also right after a `-`
    // (`-4111 1111 …`: the `-` starts the word but is not part of the number).
    let card_start = i + usize::from(c == b'-');
    if card_check {
        if let Some(mut end) = card_number(bytes, card_start) {
            // Digits that read as a card but run into `:<token>` end in a bot token's secret.
            if bytes.get(end) == Some(&b':')
                && let Some(bot_end) = bot_token_end(bytes, end)
            {
                end = bot_end;
            }
            rw.mask_span(card_start, end, false);
            return Some(end);
        }
        rw.unsettled = true;
    }
    // JSON web tokens.
    if jwt_check
        && bytes[i..].starts_with(b"eyJ")
        && let Some(end) = jwt(bytes, i)
    {
        rw.mask_span(i, end, false);
        return Some(end);
    }
    // Google OAuth access (`ya29.…`) and refresh (`1//0…`) tokens.
    if oauth_check && let Some(end) = google_oauth_token(bytes, i, j) {
        rw.mask_span(i, end, false);
        return Some(end);
    }
    // `SG.…`, `dp.pt.…` and Discord bot tokens (`<id>.<time>.<hmac>`).
    if dotted_check && let Some(end) = dotted_token(bytes, i, j) {
        rw.mask_span(i, end, false);
        return Some(end);
    }
    // Word bytes are ASCII, so `i` and `j` are character boundaries.
    let word = &text[i..j];
    // Known token prefixes.
    if token_check
        && ((is_builtin_token(word) && !is_base64_continuation(bytes, i, word))
            || (custom_prefixes && is_custom_token(word, config)))
    {
        rw.mask_whole(i, j, false);
        return Some(j);
    }
    // A distinctive prefix after a `-` or `_` inside a longer word (`build-ghp_…`).
    if token_check && let Some(at) = embedded_token_start(word) {
        rw.mask_whole(i + at, j, false);
        return Some(j);
    }
    // `Bearer <token>`.
    if checks & CHECK_BEARER != 0
        && word.eq_ignore_ascii_case("bearer")
        && let Some((start, end)) = scheme_token(text, j)
    {
        rw.mask_span(start, end, false);
        return Some(end);
    }
    // `Basic <base64 of user:password>` (an existing mask is kept).
    if checks & CHECK_BASIC != 0 && word.eq_ignore_ascii_case("basic") {
        if let Some((start, end)) = scheme_token(text, j)
            && let Some(end) = basic_credential_end(&text[start..end])
                .map(|len| start + len)
                .or_else(|| is_masked(&text[start..end]).then_some(end))
        {
            rw.mask_span(start, end, false);
            return Some(end);
        }
        rw.unsettled = true;
    }
    // `-----BEGIN … PRIVATE KEY-----`: the key body becomes a mask.
    if flag_check && word == "-----BEGIN" {
        if let Some((start, end)) = pem_private_key(text, i) {
            // In serialized text the block's line breaks are escaped, and so are the mask's.
            let mask = if text[start..].starts_with("\\n") {
                "\\n***\\n"
            } else {
                "\n***\n"
            };
            if &text[start..end] == mask || text[start..end].trim() == MASK {
                rw.keep(start);
            } else {
                rw.replace(start, end, mask);
            }
            return Some(end);
        }
        rw.unsettled = true;
    }
    // Bot tokens: `<bot id>:<secret>`, bare or after `bot` in an API path.
    if colon
        && let Some(start) = bot_token_start(word, i)
        && let Some(end) = bot_token_end(bytes, j)
    {
        rw.mask_span(start, end, false);
        return Some(end);
    }
    // `scheme://user:password@host` (URLs and connection strings). The scan goes on after
    // the password, so a user name that is itself a token (`https://ghp_…:x-oauth-basic@…`,
    // a common way to clone with a token) is masked with it.
    if next == Some(b':')
        && bytes[j..].starts_with(b"://")
        && let Some((start, end)) = url_password(text, j)
    {
        let user = &text[j + 3..start - 1];
        let from = if is_builtin_token(user) || (custom_prefixes && is_custom_token(user, config)) {
            j + 3
        } else {
            start
        };
        rw.mask_span(from, end, false);
        return Some(end);
    }
    // Slack and Discord webhook URLs: the path after the fixed part is the secret.
    if next == Some(b':')
        && bytes[j..].starts_with(b"://")
        && let Some((start, end)) = webhook_secret(text, j)
    {
        rw.mask_span(start, end, false);
        return Some(end);
    }
    // `--api-key value`, `-token value`. (After `?` or `&` and before `=` such a word is a
    // query pair's key, `?--password=…`, whose value the assignment rule reads, up to a
    // fragment's `#`.)
    if (single_dash
        || (flag_check
            && word.starts_with("--")
            && !(next == Some(b'=') && after_query_separator(bytes, i))))
        && is_credential_flag(word)
        && let Some((start, end)) = flag_value(text, j)
    {
        rw.mask_span(start, end, false);
        return Some(end);
    }
    // `gh secret set NAME --body SECRET`: a long flag whose value a command that stores
    // secrets takes as one (`command_flags`).
    if flag_check
        && word.starts_with("--")
        && command_flags::is_long_flag_name(&bytes[i + 2..j])
        && let Some((start, end)) = flag_value(text, j)
        && let Some(flag) = rw.commands_before(i).long_flag(&bytes[i + 2..j])
    {
        let start = if flag.pair {
            // `--from-literal=KEY=SECRET`: the part after the pair's `=`.
            match memchr::memchr(b'=', &bytes[start..end]) {
                Some(eq) if start + eq + 1 < end => start + eq + 1,
                _ => return None,
            }
        } else {
            start
        };
        rw.mask_span(start, end, false);
        return Some(end);
    }
    // `curl -u user:password`: the whole value (a user name can be a token too).
    if flag_check
        && is_user_flag(word.as_bytes())
        && let Some((start, end)) = user_flag_value(text, j, word.starts_with("--"))
    {
        rw.mask_span(start, end, false);
        return Some(end);
    }
    // `KEY=value`, `"key": "value"`, `Authorization: Bearer x`.
    // (`assignment` first: it is pure and rejects most words at the next byte; it needs a
    // quote, a blank, `=` or `:` right after the word.)
    // In serialized or encoded text a key can follow an escape (`\nAuthorization:`,
    // `%20password=`): the key is the word after it. A flag's dashes are no part of its name
    // (`-password=…` glued to the text before it, where the flag rule does not look).
    let key = text[escaped_word_start(bytes, i, j).unwrap_or(i)..j].trim_start_matches('-');
    let key_kind = operator.and_then(|_| assignment_key(key, next));
    let assigned = match (operator, key_kind) {
        (Some((op, header_style)), Some(_)) => assignment_value(text, op, header_style),
        _ => None,
    };
    if key_kind == Some(true) && assigned.is_none() {
        // A sensitive key whose value was turned down: a later mask can end that value
        // earlier, and the next scan may take it.
        rw.unsettled = true;
    }
    if let Some(text_key) = key_kind
        && let Some(mut a) = assigned
        && (text_key
            || is_query_secret(bytes, i, next, &a, key)
            || is_gitlab_session(text, next, &a, key))
    {
        // In a query or form pair (`?code=…`, `&sig=…`) a `#` starts the fragment.
        if after_query_separator(bytes, i)
            && !a.quoted
            && let Some(hash) = text[a.value_start..a.value_end].find('#')
            && hash > 0
        {
            a.value_end = a.value_start + hash;
        }
        let value = &text[a.value_start..a.value_end];
        if is_authorization_key(key) {
            if a.quoted
                && let Some(credentials) = escaped_scheme_parameters(bytes, &a, value)
            {
                // `\"Digest response=\\\"…\\\"\"` in serialized text: the scheme stays,
                // its parameters become one mask.
                rw.replace_with_mask(credentials, a.value_end);
                return Some(a.value_end);
            }
            if a.quoted && value.contains(' ') {
                // `authorization: 'Bearer …'`: the quoted scheme and token, whole.
                rw.replace_with_mask(a.value_start, a.value_end);
                return Some(a.value_end);
            }
            if !a.quoted
                && !a.after_scheme
                && let Some((start, end)) =
                    authorization_credentials(text, a.value_start, a.value_end)
            {
                // `Authorization: Digest username="…", response="…"`: the scheme stays,
                // every credential parameter after it is masked.
                let credentials = &text[start..end];
                if credentials.contains([' ', ',', '"', '=']) {
                    rw.replace_with_mask(start, end);
                } else {
                    rw.mask_span(start, end, false);
                }
                return Some(end);
            }
        }
        if !is_own_shell_reference(key, value) {
            rw.mask_span(a.value_start, a.value_end, a.quoted);
        }
        return Some(a.value_end);
    }
    // `fly secrets set KEY=SECRET`, `vault kv put PATH KEY=SECRET`: after a command that
    // stores secrets, every value is one, whatever its key (`command_flags`). A flag's
    // `--name=value` is the flag's (its own rule reads it, or nothing does).
    if key_kind.is_none()
        && c != b'-'
        && let Some((op, false)) = operator
        && bytes[op] == b'='
        && rw.assigns_secrets()
        && rw.commands_before(i).assigns()
    {
        if let Some(a) = assignment_value(text, op, false) {
            rw.mask_span(a.value_start, a.value_end, a.quoted);
            return Some(a.value_end);
        }
        rw.unsettled = true;
    }
    // A query or form key spelled with percent escapes, `+` or invisible characters
    // (`client%5Fsecret=`, `client_se\u{200B}cret=`): decoded, it is a sensitive name.
    if operator.is_some()
        && next == Some(b'=')
        && let Some(key) = encoded_key(text, i, j, rw.copied)
        && is_text_key(&key)
    {
        if let Some(a) = assignment(text, j) {
            rw.mask_span(a.value_start, a.value_end, a.quoted);
            return Some(a.value_end);
        }
        rw.unsettled = true;
    }
    // The same with invisible characters between the key and its `=`: the key is judged
    // with every invisible character dropped.
    if let Some(eq) = hidden_eq
        && encoded_key(text, i, j, rw.copied)
            .map_or_else(|| is_text_key(word), |key| is_text_key(&key))
    {
        if let Some(a) = assignment(text, eq) {
            rw.mask_span(a.value_start, a.value_end, a.quoted);
            return Some(a.value_end);
        }
        // A value turned down: as for a key before its operator (above), a later mask can end
        // that value earlier, and the next scan may take it.
        rw.unsettled = true;
    }
    None
}

/// The checks of [`scan_words`] that can match at the word `bytes[i..j]`: with `GATED`, those
/// of `enabled` whose first byte, length and next byte fit the word (see `CHECK_*`; most words
/// fit none), and none when only an assignment could match and a space and a word character
/// follow the word (no operator can be there, the most common case, decided here); without,
/// every one of `enabled`.
#[inline(always)]
fn word_checks<const GATED: bool>(bytes: &[u8], i: usize, j: usize, rules: ScanRules<'_>) -> u16 {
    if !GATED {
        return rules.enabled;
    }
    let next = bytes.get(j).copied();
    let checks = rules.enabled
        & CHECKS_BY_FIRST[usize::from(bytes[i])]
        & CHECKS_BY_NEXT[next.map_or(256, usize::from)]
        & (CHECKS_BY_LEN[(j - i).min(CHECK_LEN_MAX)] | rules.any_length);
    if checks == CHECK_OPERATOR && space_then_word(bytes, j) {
        0
    } else {
        checks
    }
}

/// After a match of [`scan_words`] at the word ending at `j` that reaches past it to `end`
/// (`mark`: where `rw` stood before the match): the scan's end of that step.
///
/// A rule's span can swallow the start of another rule's match: a flag's value that is a
/// header's name (`--api-key Authorization: Digest …`), a token that is a URL's scheme, a
/// credential that runs into a private key block. Masked on its own, the first span hides the
/// other rule's key and the scan goes on after it, so the other rule never sees its secret.
/// So every word that starts inside the masked span is checked as the scan would check it had
/// the match not been there (in a dry run: nothing written); when one matches past `end`, the
/// two spans become one [`MASK`] from the first one's start to the last one's end (and the
/// words up to that end are checked the same way). Each word is checked once, here or by the
/// scan. A span whose checks would read too much ([`DRY_RUN_BUDGET`]) is masked to the end of
/// the text. Kept out of line: most scans never get here.
#[inline(never)]
fn swallowed<const GATED: bool>(
    text: &str,
    rules: ScanRules<'_>,
    rw: &mut Rewrite<'_>,
    mark: RewriteMark,
    j: usize,
    end: usize,
) -> usize {
    if rw.spans == mark.spans {
        // Nothing masked (a value kept as it is): nothing swallowed.
        return end;
    }
    // The masked span (the text between the word and the span, such as a URL's user name,
    // stays as it is, and is not a rule's start: `postgres://secret:secret@host` is a URL,
    // not the assignment `secret:secret@host`).
    let span_from = rw.last_from;
    let bytes = text.as_bytes();
    let mut end = end;
    // The start of the merged span, once a word inside the span matched past it.
    let mut merged: Option<usize> = None;
    let mut p = span_from.max(j);
    // What the dry runs read, in bytes: a match inside the span of the same kind as the span
    // ends where the span ends, after reading as far, so a span holding many of them
    // (`Authorization: Digest x ` repeated on one line) would cost its length once for each.
    // Short matches inside a span (query pairs, a header's parameters) cost little and are
    // all checked; once the dry runs have read [`DRY_RUN_BUDGET`] times the span's length
    // (plus a little), the words left unchecked could still start a match reaching past the
    // span, so the mask runs to the end of the text instead (failing towards privacy), which
    // keeps the scan linear in the text.
    let mut read = 0usize;
    // Nothing reaches past the end of the text.
    while p < end && end < bytes.len() {
        if !is_word_byte(bytes[p]) {
            p += 1;
            continue;
        }
        if read >= DRY_RUN_BUDGET * (end - span_from) + DRY_RUN_BASE {
            merged = Some(merged.unwrap_or(span_from));
            end = bytes.len();
            break;
        }
        let q = word_end(bytes, p + 1);
        // The match a check makes at `at` (in a dry run): the start of its span and its end.
        let mut dry_match = |at: usize, checks: u16| {
            read += DRY_RUN_COST;
            let mut dry = Rewrite::dry(text, mark);
            let inner_end = match_word(text, rules, &mut dry, at, q, checks)?;
            read += inner_end - at;
            Some((if dry.spans > 0 { dry.last_from } else { at }, inner_end))
        };
        // The word's own checks, else a private key header glued to its end, as in the scan.
        // A token's match ends with its word: inside the span it cannot reach past it.
        let inside = if q <= end { !CHECK_TOKEN } else { CHECK_ALL };
        let checks = word_checks::<GATED>(bytes, p, q, rules) & inside;
        let inner = (checks != 0)
            .then(|| dry_match(p, checks))
            .flatten()
            .or_else(|| dry_match(glued_header(bytes, p, q, rules)?, CHECK_FLAG));
        if let Some((inner_from, inner_end)) = inner
            && inner_end > end
        {
            merged = Some(merged.unwrap_or(span_from).min(inner_from));
            end = inner_end;
        }
        p = escaped_word_start(bytes, p, q).unwrap_or(q);
    }
    if let Some(from) = merged {
        rw.rollback(mark);
        rw.replace_with_mask(from, end);
        // The merged span can end inside a word (a `Basic` credential ends at its padding)
        // and its mask then meets the text after it.
        rw.unsettled = true;
    }
    end
}

/// How many times its span's length the dry runs of [`swallowed`] may read (counted as the
/// length of each match they make, plus [`DRY_RUN_COST`] for each run) before the rest of the
/// text is masked unchecked.
const DRY_RUN_BUDGET: usize = 16;

/// What one dry run of [`swallowed`] counts besides the length of the match it makes.
const DRY_RUN_COST: usize = 64;

/// What the dry runs of [`swallowed`] may read beyond [`DRY_RUN_BUDGET`] times the span.
const DRY_RUN_BASE: usize = 4096;

/// The first word of a private key block's header.
const PEM_BEGIN: &[u8] = b"-----BEGIN";

/// A private key block whose header `text[at..j]` (`-----BEGIN`) is glued to the word before
/// it (in serialized text an escaped line break's `n` starts that word:
/// `…\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\n…`): the end of the scan's
/// step when the block matched.
fn glued_private_key<'a, const GATED: bool>(
    text: &'a str,
    rules: ScanRules<'_>,
    rw: &mut Rewrite<'a>,
    at: usize,
    j: usize,
) -> Option<usize> {
    let mark = rw.mark();
    let end = match_word(text, rules, rw, at, j, CHECK_FLAG)?;
    Some(swallowed::<GATED>(text, rules, rw, mark, j, end))
}

/// Where a private key header glued to the end of the word `bytes[i..j]` starts: the word is
/// longer than `-----BEGIN` and ends with it, and the scan looks for private keys.
#[inline]
fn glued_header(bytes: &[u8], i: usize, j: usize, rules: ScanRules<'_>) -> Option<usize> {
    (rules.enabled & CHECK_FLAG != 0 && j - i > PEM_BEGIN.len() && bytes[..j].ends_with(PEM_BEGIN))
        .then(|| j - PEM_BEGIN.len())
}

/// What the checks of one scan need besides the text: the caller's configuration and the
/// word gates of [`word_checks`].
#[derive(Clone, Copy)]
struct ScanRules<'c> {
    config: &'c RedactionConfig,
    /// Whether the caller configured token prefixes.
    custom_prefixes: bool,
    /// The word checks whose family can match in the text.
    enabled: u16,
    /// The checks that run at a word of any length ([`CHECK_TOKEN`] with caller prefixes).
    any_length: u16,
}

/// Where the word `bytes[i..j]` starts again after an escape glued to its front
/// ([`escaped_start`]). The one test inlined here (a backslash or `%` before the word) keeps
/// the escape's checks off the path of ordinary words.
#[inline(always)]
fn escaped_word_start(bytes: &[u8], i: usize, j: usize) -> Option<usize> {
    if i > 0 && matches!(bytes[i - 1], b'\\' | b'%') {
        escaped_start(bytes, i, j)
    } else {
        None
    }
}

/// Where the word `bytes[i..j]` starts again after an escape glued to its front, when the text
/// before it makes one: a backslash escape whose letter is a word character (`\n`, `\t`, `\r`,
/// `\f`, `\b`, `\v`, `\x0a`, `\u0020`: serialized text, where every line of a value but the
/// first starts glued to `n`, and the escaped strings of other languages) or a percent-encoded
/// byte (`%20`, `%0A`: encoded text). The scan checks the word from there first and then as
/// it stands, so a secret after an escaped line break or an encoded blank (`…\nghp_…`,
/// `msg=deploy%20ghp_…`) is found as if a separator stood before it. Kept out of line: the
/// scan calls it only after a backslash or `%` ([`escaped_word_start`]).
#[inline(never)]
fn escaped_start(bytes: &[u8], i: usize, j: usize) -> Option<usize> {
    let hex = |k: usize| bytes.get(k).is_some_and(u8::is_ascii_hexdigit);
    let k = match *bytes.get(i.checked_sub(1)?)? {
        b'\\' => match bytes[i] {
            b'n' | b't' | b'r' | b'f' | b'b' | b'v' => i + 1,
            b'x' if hex(i + 1) && hex(i + 2) => i + 3,
            b'u' if (i + 1..i + 5).all(hex) => i + 5,
            _ => return None,
        },
        b'%' if hex(i) && hex(i + 1) => i + 2,
        _ => return None,
    };
    (k < j).then_some(k)
}

/// Whether an escape that [`escaped_start`] skips ends at `k` (inside a word): where the
/// scan's jump lands there, a word starts. Kept out of line: the jump rarely lands inside a
/// word.
#[inline(never)]
fn escape_ends_at(bytes: &[u8], k: usize) -> bool {
    [1, 2, 3, 5]
        .into_iter()
        .any(|d| k > d && escaped_start(bytes, k - d, bytes.len()) == Some(k))
}

/// Whether the word ending at `j` is followed by a space and then a word character: no
/// assignment operator can follow it (the most common case after a word).
#[inline]
fn space_then_word(bytes: &[u8], j: usize) -> bool {
    bytes.get(j) == Some(&b' ') && bytes.get(j + 1).is_some_and(|&b| is_word_byte(b))
}

/// The end of the word characters of `bytes` from `from` (the index of the first other byte,
/// or the length). Kept out of [`scan_words`], whose many live values would otherwise be
/// reloaded from the stack at every byte.
#[inline(never)]
fn word_end(bytes: &[u8], from: usize) -> usize {
    let mut j = from;
    while j < bytes.len() && is_word_byte(bytes[j]) {
        j += 1;
    }
    j
}

/// Word checks of [`scan_words`], as bits: a check runs at a word only when the word's first
/// byte ([`CHECKS_BY_FIRST`]), its length ([`CHECKS_BY_LEN`]) and the byte after it
/// ([`CHECKS_BY_NEXT`]) all allow it. A token prefix: at least [`BUILTIN_TOKEN_MIN_LEN`]
/// bytes (any length for caller prefixes).
const CHECK_TOKEN: u16 = 1;
/// A dotted token (`SG.…`): the word is followed by `.`.
const CHECK_DOTTED: u16 = 1 << 1;
/// A key whose `=` follows invisible characters: the word is followed by a non-ASCII byte.
const CHECK_HIDDEN: u16 = 1 << 2;
/// `Bearer <token>`: a word of 6 bytes.
const CHECK_BEARER: u16 = 1 << 3;
/// `Basic <credential>`: a word of 5 bytes.
const CHECK_BASIC: u16 = 1 << 4;
/// `--flag value` and private key blocks: the word starts with `-`.
const CHECK_FLAG: u16 = 1 << 5;
/// Assignments, bot tokens and URLs: the word is followed by a quote, a blank, `=`, `:` or
/// `\` (everything [`assignment_operator`] can start with, and the `:` of a URL).
const CHECK_OPERATOR: u16 = 1 << 6;
/// Payment card numbers: the word starts with a digit, or with `-` (then a digit).
const CHECK_CARD: u16 = 1 << 7;
/// JSON web tokens: the word starts with `e` and is followed by `.`.
const CHECK_JWT: u16 = 1 << 8;
/// Google OAuth access tokens (`ya29.…`): a word of 4 bytes followed by `.`.
const CHECK_OAUTH_ACCESS: u16 = 1 << 9;
/// Google OAuth refresh tokens (`1//…`): a word of 1 byte followed by `/`.
const CHECK_OAUTH_REFRESH: u16 = 1 << 10;
/// Every word check.
const CHECK_ALL: u16 = (1 << 11) - 1;
/// Word lengths at or above this share one entry of [`CHECKS_BY_LEN`].
const CHECK_LEN_MAX: usize = BUILTIN_TOKEN_MIN_LEN;

/// For each first byte of a word, the checks it allows.
static CHECKS_BY_FIRST: [u16; 256] = {
    let mut table = [CHECK_ALL & !(CHECK_FLAG | CHECK_CARD | CHECK_JWT); 256];
    table[b'-' as usize] |= CHECK_FLAG | CHECK_CARD;
    let mut d = b'0';
    while d <= b'9' {
        table[d as usize] |= CHECK_CARD;
        d += 1;
    }
    table[b'e' as usize] |= CHECK_JWT;
    table
};

/// For each byte after a word (index 256: the word ends the text), the checks it allows.
static CHECKS_BY_NEXT: [u16; 257] = {
    let after = CHECK_DOTTED
        | CHECK_HIDDEN
        | CHECK_OPERATOR
        | CHECK_JWT
        | CHECK_OAUTH_ACCESS
        | CHECK_OAUTH_REFRESH;
    let mut table = [CHECK_ALL & !after; 257];
    table[b'.' as usize] |= CHECK_DOTTED | CHECK_JWT | CHECK_OAUTH_ACCESS;
    table[b'/' as usize] |= CHECK_OAUTH_REFRESH;
    let operators = b"\"' \t=:\\>";
    let mut k = 0;
    while k < operators.len() {
        table[operators[k] as usize] |= CHECK_OPERATOR;
        k += 1;
    }
    let mut b = 0x80;
    while b < 256 {
        table[b] |= CHECK_HIDDEN;
        b += 1;
    }
    table
};

/// For each word length up to [`CHECK_LEN_MAX`] (longer words use the last entry), the checks
/// it allows.
static CHECKS_BY_LEN: [u16; CHECK_LEN_MAX + 1] = {
    let by_len =
        CHECK_TOKEN | CHECK_BEARER | CHECK_BASIC | CHECK_OAUTH_ACCESS | CHECK_OAUTH_REFRESH;
    let mut table = [CHECK_ALL & !by_len; CHECK_LEN_MAX + 1];
    table[CHECK_LEN_MAX] |= CHECK_TOKEN;
    table[6] |= CHECK_BEARER;
    table[5] |= CHECK_BASIC;
    table[4] |= CHECK_OAUTH_ACCESS;
    table[1] |= CHECK_OAUTH_REFRESH;
    table
};

/// Pattern families of the text layer, as bits of [`pattern_families`].
const FAMILY_SHELL: u16 = 1;
/// `KEY=value`, `"key": "value"`: needs `=` or `:`.
const FAMILY_ASSIGNMENT: u16 = 1 << 1;
/// `--flag value`, `-u user:password`, `-token value`, `mysql -p…`: needs `--`, `-u`, `-U`, or
/// `-` after a blank or a quote ([`DASH_HINT`]; a flag with one `-` and a longer name counts
/// only there).
const FAMILY_FLAG: u16 = 1 << 2;
/// A built-in token prefix with `-` (`sk-`, `glpat-`, `xoxb-`, …): needs one of the letters
/// that precede the first `-` of such a prefix, then `-`.
const FAMILY_TOKEN_DASH: u16 = 1 << 3;
/// A built-in token prefix with `_` (`ghp_`, `npm_`, `hf_`, …): likewise with `_`.
const FAMILY_TOKEN_UNDERSCORE: u16 = 1 << 4;
/// `AKIA`, `ASIA`, `AKID`, `AIza`, `LTAI`, `GR1348941`, `gAAAA`, `AT…` (Atlassian), `dapi`:
/// needs `AK`, `AS`, `AI`, `LT`, `GR`, `AA`, `AT` or `da`.
const FAMILY_TOKEN_UPPER: u16 = 1 << 5;
/// `Bearer <token>`: needs `be` in any case.
const FAMILY_BEARER: u16 = 1 << 6;
/// JSON web tokens (`eyJ…`: needs `yJ`), Google OAuth tokens (`ya29.…`: `ya`; `1//…`: `1/`) and
/// payment card numbers (a run of at least 13 digits, single spaces or dashes allowed between
/// them).
const FAMILY_EXTRA: u16 = 1 << 7;
/// `Basic <credential>`: needs `ba` in any case (an HTTP scheme name is case-insensitive;
/// prose that merely says "basic" is told apart by the credential after it).
const FAMILY_BASIC: u16 = 1 << 8;
/// Any built-in token prefix.
const FAMILY_TOKEN: u16 =
    FAMILY_TOKEN_DASH | FAMILY_TOKEN_UNDERSCORE | FAMILY_TOKEN_UPPER | FAMILY_TOKEN_VENDOR;
/// Dotted tokens (`SG.…`, `dp.pt.…`, Discord bot tokens): a letter or digit followed by `.`,
/// in a text with at least two `.` and a `.` followed by a word character. (The
/// [`VENDOR_PREFIXES`] share the dash, underscore and upper-case families.)
const FAMILY_TOKEN_VENDOR: u16 = 1 << 9;
/// Every family (used with caller prefixes, which the families do not cover).
const FAMILY_ALL: u16 = u16::MAX;
/// The families a single byte starts on its own, whatever follows it.
const FAMILY_SINGLE: u16 = FAMILY_SHELL | FAMILY_ASSIGNMENT;

/// For each byte, the families it can be the first byte of a pair for.
static PAIR_FIRST: [u16; 256] = {
    let mut table = [0u16; 256];
    table[b'$' as usize] |= FAMILY_SHELL;
    table[b'=' as usize] |= FAMILY_ASSIGNMENT;
    table[b':' as usize] |= FAMILY_ASSIGNMENT;
    // The end of an XML element's start tag (`<password>…`, [`xml_element_value`]).
    table[b'>' as usize] |= FAMILY_ASSIGNMENT;
    table[b'-' as usize] |= FAMILY_FLAG;
    let dash_letters = b"ktbparsixywcTCUo";
    let mut k = 0;
    while k < dash_letters.len() {
        table[dash_letters[k] as usize] |= FAMILY_TOKEN_DASH;
        k += 1;
    }
    let underscore_letters = b"kpousrbtmdfcw8liaTyv0123456789";
    let mut k = 0;
    while k < underscore_letters.len() {
        table[underscore_letters[k] as usize] |= FAMILY_TOKEN_UNDERSCORE;
        k += 1;
    }
    table[b'A' as usize] |= FAMILY_TOKEN_UPPER;
    table[b'L' as usize] |= FAMILY_TOKEN_UPPER;
    table[b'G' as usize] |= FAMILY_TOKEN_UPPER;
    // `dapi…` (Databricks): `da`.
    table[b'd' as usize] |= FAMILY_TOKEN_UPPER;
    let mut b = 0;
    while b < 256 {
        if (b as u8).is_ascii_alphanumeric() {
            table[b] |= FAMILY_TOKEN_VENDOR;
        }
        b += 1;
    }
    table[b'b' as usize] |= FAMILY_BEARER | FAMILY_BASIC;
    table[b'B' as usize] |= FAMILY_BEARER | FAMILY_BASIC;
    table[b'y' as usize] |= FAMILY_EXTRA;
    table[b'1' as usize] |= FAMILY_EXTRA;
    let mut d = b'0';
    while d <= b'9' {
        table[d as usize] |= DIGIT_BIT;
        d += 1;
    }
    table
};

/// In [`PAIR_FIRST`]: the byte is an ASCII digit (not a family; masked out of pair checks).
const DIGIT_BIT: u16 = 1 << 15;

/// For each byte, the families it can complete as the second byte of a pair (every byte
/// completes the single-byte families).
static PAIR_SECOND: [u16; 256] = {
    let mut table = [FAMILY_SINGLE; 256];
    table[b'-' as usize] |= FAMILY_FLAG | FAMILY_TOKEN_DASH;
    // `-u` and `-U` ([`is_user_flag`]).
    table[b'u' as usize] |= FAMILY_FLAG;
    table[b'U' as usize] |= FAMILY_FLAG;
    table[b'_' as usize] |= FAMILY_TOKEN_UNDERSCORE;
    table[b'K' as usize] |= FAMILY_TOKEN_UPPER;
    table[b'S' as usize] |= FAMILY_TOKEN_UPPER;
    table[b'I' as usize] |= FAMILY_TOKEN_UPPER;
    table[b'T' as usize] |= FAMILY_TOKEN_UPPER;
    table[b'R' as usize] |= FAMILY_TOKEN_UPPER;
    // `gAAAA` (Fernet): `AA`.
    table[b'A' as usize] |= FAMILY_TOKEN_UPPER;
    table[b'a' as usize] |= FAMILY_TOKEN_UPPER;
    table[b'.' as usize] |= FAMILY_TOKEN_VENDOR;
    table[b'e' as usize] |= FAMILY_BEARER;
    table[b'E' as usize] |= FAMILY_BEARER;
    table[b'a' as usize] |= FAMILY_BASIC;
    table[b'A' as usize] |= FAMILY_BASIC;
    table[b'J' as usize] |= FAMILY_EXTRA;
    table[b'a' as usize] |= FAMILY_EXTRA;
    table[b'/' as usize] |= FAMILY_EXTRA;
    table
};

/// In [`PAIR`]: a digit followed by a digit, a space or a dash (every run that
/// [`has_card_run`] accepts holds such a pair). Not a family: it only says when to look for
/// card runs.
const CARD_HINT: u16 = 1 << 14;
/// In [`PAIR`]: `da`, the pair of [`FAMILY_TOKEN_UPPER`] that only `dapi…` needs (so `data`
/// alone does not turn the family on).
const DA_HINT: u16 = 1 << 13;
/// In [`PAIR`]: `ya`, the pair of [`FAMILY_EXTRA`] that only `ya29.…` needs.
const YA_HINT: u16 = 1 << 12;
/// In [`PAIR`]: `ap`, the other pair of `dapi` (looked for only with [`DA_HINT`]).
const AP_HINT: u16 = 1 << 10;
/// In [`PAIR`]: `.` followed by a word character, which every dotted token has (after each of
/// its two dots).
const DOT_HINT: u16 = 1 << 11;
/// In [`PAIR`]: `-` after a blank or a quote, where a flag with one `-` counts
/// ([`is_credential_flag`], [`password_flag_value`]): turned into [`FAMILY_FLAG`]. (A bit of its
/// own, so that a blank and a `u`, `-u`'s second byte, make no pair.)
const DASH_HINT: u16 = 1 << 15;
/// Every hint bit of [`PAIR`] (none of them is a family).
const HINTS: u16 = CARD_HINT | DA_HINT | YA_HINT | AP_HINT | DOT_HINT | DASH_HINT;

/// [`PAIR_FIRST`] and [`PAIR_SECOND`] in one load: the first-byte families in the low half,
/// the second-byte families in the high half (the digit bit left out), plus the hints
/// ([`CARD_HINT`], [`DA_HINT`], [`YA_HINT`], [`AP_HINT`], [`DOT_HINT`]): `da` and `ya` set a
/// hint instead of their family, which is then turned on only when the text holds `dapi` or
/// `ya29`.
static PAIR: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        let mut first = PAIR_FIRST[b] & !DIGIT_BIT;
        let mut second = PAIR_SECOND[b];
        if c.is_ascii_digit() {
            first |= CARD_HINT;
        }
        if c.is_ascii_digit() || c == b' ' || c == b'-' {
            second |= CARD_HINT;
        }
        if c == b'd' {
            first = (first & !FAMILY_TOKEN_UPPER) | DA_HINT;
        }
        if c == b'y' {
            first |= YA_HINT;
        }
        if c == b'a' {
            first |= AP_HINT;
            second = (second & !(FAMILY_TOKEN_UPPER | FAMILY_EXTRA)) | DA_HINT | YA_HINT;
        }
        if c == b'p' {
            second |= AP_HINT;
        }
        if c == b'.' {
            first |= DOT_HINT;
        }
        if WORD_BYTES[b] {
            second |= DOT_HINT;
        }
        if matches!(c, b' ' | b'\t' | b'\n' | b'"' | b'\'') {
            first |= DASH_HINT;
        }
        if c == b'-' {
            second |= DASH_HINT;
        }
        table[b] = first as u32 | (second as u32) << 16;
        b += 1;
    }
    table
};

/// The built-in pattern families that can match somewhere in `bytes`: a family whose bit is
/// clear cannot match anywhere, because the text lacks a byte pair every match of that family
/// contains (see the `FAMILY_*` constants), or, for a few families whose pairs are common in
/// prose, the word every match needs (`bearer`, `basic`, `dapi`, `ya29`). Most ordinary text
/// yields no family at all and is never scanned word by word.
fn pattern_families(bytes: &[u8]) -> u16 {
    // One load per byte: the previous byte's first-byte families, moved to the high half,
    // meet this byte's second-byte families there.
    let mut found = 0u32;
    let mut previous = 0u32;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        // Eight bytes per step (the same work as the loop below, fewer loop branches).
        let e: [u32; 8] = std::array::from_fn(|k| PAIR[usize::from(chunk[k])]);
        found |= (previous & e[0])
            | ((e[0] << 16) & e[1])
            | ((e[1] << 16) & e[2])
            | ((e[2] << 16) & e[3])
            | ((e[3] << 16) & e[4])
            | ((e[4] << 16) & e[5])
            | ((e[5] << 16) & e[6])
            | ((e[6] << 16) & e[7]);
        previous = e[7] << 16;
    }
    for &b in chunks.remainder() {
        let entry = PAIR[usize::from(b)];
        found |= previous & entry;
        previous = entry << 16;
    }
    let mut families = (found >> 16) as u16;
    if families & (CARD_HINT | DA_HINT | YA_HINT | FAMILY_BEARER | FAMILY_BASIC) != 0 {
        families = confirm_word_families(bytes, families);
    }
    let dot_before_word = families & DOT_HINT != 0;
    if families & DASH_HINT != 0 {
        families |= FAMILY_FLAG;
    }
    families &= !HINTS;
    // Every dotted token has two dots, each followed by a word character (`SG.<id>.<secret>`,
    // `dp.pt.<secret>`, `<id>.<time>.<hmac>`): one dot (`C.UTF-8`, `file.json`) or dots that
    // end sentences are not enough to scan for them.
    if families & FAMILY_TOKEN_VENDOR != 0 && !(dot_before_word && has_two_dots(bytes)) {
        families &= !FAMILY_TOKEN_VENDOR;
    }
    // The last byte pairs with nothing: only the single-byte families.
    families | ((previous >> 16) as u16 & FAMILY_SINGLE)
}

/// Turns the hints of [`pattern_families`] into families (the hint bits themselves are
/// cleared by the caller) and keeps `Bearer` and `Basic` only
/// when their word is in the text: the word checks of [`redact_text_cow`] need the whole word
/// (`bearer` and `basic` in any case, `dapi…` and `ya29.…` as spelled), so a text without it
/// cannot match them.
fn confirm_word_families(bytes: &[u8], mut families: u16) -> u16 {
    // A card number needs a run of `CARD_MIN_DIGITS` digits; runs are looked for only when
    // a digit is followed by a digit or a separator somewhere and the text holds that many
    // digits.
    if families & CARD_HINT != 0
        && count_digits(bytes) >= CARD_MIN_DIGITS as usize
        && has_card_run(bytes)
    {
        families |= FAMILY_EXTRA;
    }
    if families & (DA_HINT | AP_HINT) == DA_HINT | AP_HINT && contains_bytes(bytes, b"dapi", false)
    {
        families |= FAMILY_TOKEN_UPPER;
    }
    if families & YA_HINT != 0 && contains_bytes(bytes, b"ya29", false) {
        families |= FAMILY_EXTRA;
    }
    if families & FAMILY_BEARER != 0 && !contains_bytes(bytes, b"bearer", true) {
        families &= !FAMILY_BEARER;
    }
    if families & FAMILY_BASIC != 0 && !contains_bytes(bytes, b"basic", true) {
        families &= !FAMILY_BASIC;
    }
    families
}

/// Whether `needle` (lower-case ASCII when `any_case`) occurs in `bytes`, in any ASCII case
/// when `any_case`.
fn contains_bytes(bytes: &[u8], needle: &[u8], any_case: bool) -> bool {
    if any_case {
        bytes
            .windows(needle.len())
            .any(|w| w[0] | 0x20 == needle[0] && w.eq_ignore_ascii_case(needle))
    } else {
        bytes
            .windows(needle.len())
            .any(|w| w[0] == needle[0] && w == needle)
    }
}

/// The number of ASCII digits in `bytes`, eight bytes at a time.
fn count_digits(bytes: &[u8]) -> usize {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const ONES: u64 = 0x0101_0101_0101_0101;
    let mut count = 0usize;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        // Per byte, without carries between bytes (each low part is at most 0x7f, plus at
        // most 0x50): the high bit says `low >= b'0'`, then `low > b'9'`; a byte with its own
        // high bit set is not ASCII and never a digit.
        let low = w & !HIGH;
        let at_least_zero = (low + (0x80 - u64::from(b'0')) * ONES) & HIGH;
        let above_nine = (low + (0x80 - u64::from(b'9') - 1) * ONES) & HIGH;
        let digits = at_least_zero & !above_nine & !w & HIGH;
        // One bit per digit byte at bit 7 of its byte: summed with a multiply (at most 8).
        count += ((digits >> 7).wrapping_mul(ONES) >> 56) as usize;
    }
    count
        + chunks
            .remainder()
            .iter()
            .filter(|b| b.is_ascii_digit())
            .count()
}

/// Whether `bytes` holds at least two `.`, counted eight bytes at a time (the texts are
/// short: a search with `memchr` costs more to set up than this loop).
fn has_two_dots(bytes: &[u8]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const ONES: u64 = 0x0101_0101_0101_0101;
    let mut dots = 0u64;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        // The dots become zero bytes; per byte, without carries between bytes, the high bit
        // of `(low + 0x7f) | w` is set unless the byte is zero.
        let w = u64::from_le_bytes(word) ^ (u64::from(b'.') * ONES);
        let zeros = !(((w & !HIGH) + !HIGH) | w) & HIGH;
        // One bit per dot at bit 7 of its byte: summed with a multiply (at most 8).
        dots += (zeros >> 7).wrapping_mul(ONES) >> 56;
        if dots >= 2 {
            return true;
        }
    }
    dots + chunks.remainder().iter().filter(|&&b| b == b'.').count() as u64 >= 2
}

/// Whether `bytes` holds a run of at least [`CARD_MIN_DIGITS`] digits, single spaces or
/// dashes allowed between them.
fn has_card_run(bytes: &[u8]) -> bool {
    let mut run = 0u32;
    for &b in bytes {
        if b.is_ascii_digit() {
            run += 1;
            if run >= CARD_MIN_DIGITS {
                return true;
            }
        } else if b != b' ' && b != b'-' {
            run = 0;
        }
    }
    false
}

/// Fewest digits of a payment card number.
const CARD_MIN_DIGITS: u32 = 13;
/// Most digits of a payment card number.
const CARD_MAX_DIGITS: usize = 19;

/// Whether `digits` (ASCII digits only) pass the Luhn check.
fn luhn_valid(digits: &[u8]) -> bool {
    let mut sum = 0u32;
    for (i, d) in digits.iter().rev().enumerate() {
        let mut v = u32::from(d - b'0');
        if i % 2 == 1 {
            v *= 2;
            if v > 9 {
                v -= 9;
            }
        }
        sum += v;
    }
    sum.is_multiple_of(10)
}

/// Whether a digit string has the issuer prefix and length of a major card brand (Visa,
/// Mastercard, American Express, Discover, JCB, Diners Club, UnionPay).
fn card_brand_shape(digits: &[u8]) -> bool {
    let n = digits.len();
    let prefix = |k: usize| -> u32 {
        digits[..k]
            .iter()
            .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'))
    };
    match digits[0] {
        b'4' => matches!(n, 13 | 16 | 19),
        b'5' => n == 16 && (51..=55).contains(&prefix(2)),
        b'2' => n == 16 && (2221..=2720).contains(&prefix(4)),
        b'3' => match prefix(2) {
            34 | 37 => n == 15,
            35 => (16..=19).contains(&n),
            30 | 36 | 38 | 39 => (14..=19).contains(&n),
            _ => false,
        },
        b'6' => (16..=19).contains(&n),
        _ => false,
    }
}

/// A payment card number starting at byte `start` (a word start): 13 to 19 digits, with
/// single spaces or dashes between groups, a card brand's prefix and length, and a valid Luhn
/// check digit. Returns the end of its last digit. When digit groups run on (`4111 1111 1111
/// 1111 2 items`), the longest valid number ending at a group boundary wins.
fn card_number(bytes: &[u8], start: usize) -> Option<usize> {
    let mut digits = [0u8; CARD_MAX_DIGITS];
    let mut n = 0;
    // Candidate ends: (digit count, byte end) at each group boundary.
    let mut ends = [(0usize, 0usize); CARD_MAX_DIGITS + 1];
    let mut boundaries = 0;
    let mut k = start;
    let mut glued = false;
    while k < bytes.len() {
        let b = bytes[k];
        if b.is_ascii_digit() {
            if n == CARD_MAX_DIGITS {
                glued = true;
                break;
            }
            digits[n] = b;
            n += 1;
            k += 1;
        } else if (b == b' ' || b == b'-') && bytes.get(k + 1).is_some_and(u8::is_ascii_digit) {
            ends[boundaries] = (n, k);
            boundaries += 1;
            k += 1;
        } else {
            // The number must end the word: no letter or `_` glued to it.
            glued = is_word_byte(b) && b != b'-';
            break;
        }
    }
    if !glued {
        ends[boundaries] = (n, k);
        boundaries += 1;
    }
    ends[..boundaries].iter().rev().find_map(|&(count, end)| {
        let candidate = &digits[..count];
        (count >= CARD_MIN_DIGITS as usize && card_brand_shape(candidate) && luhn_valid(candidate))
            .then_some(end)
    })
}

/// A JSON web token at `start`: `eyJ…` then one or two more `.`-separated base64url segments
/// (the signature may be empty). Returns its end.
fn jwt(bytes: &[u8], start: usize) -> Option<usize> {
    let segment = |from: usize| {
        let mut k = from;
        while k < bytes.len()
            && (bytes[k].is_ascii_alphanumeric() || matches!(bytes[k], b'_' | b'-'))
        {
            k += 1;
        }
        k
    };
    let first = segment(start);
    if first - start < 10 || bytes.get(first) != Some(&b'.') {
        return None;
    }
    let second = segment(first + 1);
    if second == first + 1 {
        return None;
    }
    if bytes.get(second) == Some(&b'.') {
        Some(segment(second + 1))
    } else {
        Some(second)
    }
}

/// Whether `word` is an authorization scheme whose credential is one value after it
/// (`Bearer`, `Basic`, `Token`; any case).
fn is_value_scheme(word: &str) -> bool {
    ["bearer", "basic", "token"]
        .iter()
        .any(|scheme| word.eq_ignore_ascii_case(scheme))
}

/// Whether the word `text[start..end]`, where a rule would take it as a value (a flag's value,
/// a bearer token), starts another rule's match instead: a sensitive key or header name before
/// its `:` or `=` (`Authorization: Digest …`), or a URL's scheme before `://`. The scan goes on
/// to it, and that rule masks what follows it.
fn names_another_rule(text: &str, start: usize, end: usize) -> bool {
    let bytes = text.as_bytes();
    match bytes.get(end) {
        Some(b':') if bytes[end..].starts_with(b"://") && is_url_scheme(&bytes[start..end]) => true,
        Some(b':' | b'=') => is_text_key(&text[start..end]),
        _ => false,
    }
}

/// Whether `word` can be a URL's scheme: a letter, then letters, digits, `+`, `-` and `.`.
fn is_url_scheme(word: &[u8]) -> bool {
    word.first().is_some_and(u8::is_ascii_alphabetic)
        && word
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// The password of a URL's user information at `scheme_end` (the index of `:` in `://`):
/// `scheme://user:password@host`. Returns the byte range of the password.
fn url_password(text: &str, scheme_end: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let authority = scheme_end + 3;
    let mut at = None;
    let mut colon = None;
    for (k, &b) in bytes.iter().enumerate().skip(authority) {
        match AUTHORITY_BYTES[usize::from(b)] {
            AUTHORITY_OTHER => {}
            AUTHORITY_AT => at = Some(k),
            AUTHORITY_COLON => {
                colon = colon.or(Some(k));
            }
            _ => break,
        }
    }
    // The first `:` of the user information (before the last `@`).
    let (at, colon) = (at?, colon?);
    (colon + 1 < at).then_some((colon + 1, at))
}

/// In [`AUTHORITY_BYTES`]: a byte that neither ends the authority nor splits it.
const AUTHORITY_OTHER: u8 = 0;
/// In [`AUTHORITY_BYTES`]: `@`, the end of the user information.
const AUTHORITY_AT: u8 = 1;
/// In [`AUTHORITY_BYTES`]: `:`, between the user name and the password.
const AUTHORITY_COLON: u8 = 2;
/// In [`AUTHORITY_BYTES`]: a byte that ends the authority (`/`, `?`, `#`, a quote or backquote,
/// `<`, `>` and blanks).
const AUTHORITY_END: u8 = 3;

/// The class of each byte in the authority of a URL, for [`url_password`].
static AUTHORITY_BYTES: [u8; 256] = {
    let mut table = [AUTHORITY_OTHER; 256];
    let ends = b"/?#\"'`<>";
    let mut k = 0;
    while k < ends.len() {
        table[ends[k] as usize] = AUTHORITY_END;
        k += 1;
    }
    let mut b = 0;
    while b < 128 {
        if (b as u8).is_ascii_whitespace() {
            table[b] = AUTHORITY_END;
        }
        b += 1;
    }
    table[b'@' as usize] = AUTHORITY_AT;
    table[b':' as usize] = AUTHORITY_COLON;
    table
};

/// Longest label [`pem_private_key`] takes (`ENCRYPTED PRIVATE KEY`, `OPENSSH PRIVATE KEY`,
/// … are far shorter).
const PEM_LABEL_MAX: usize = 64;

/// `-----BEGIN … PRIVATE KEY-----` at `start`: the byte range of the key body (after the
/// header line, up to the matching `-----END` line, or to the end of the text when the block
/// is cut off). The label is upper-case letters, digits and spaces (or a mask), and holds no
/// secret of its own: the scan goes on after the body, so text inside a header is never
/// scanned.
fn pem_private_key(text: &str, start: usize) -> Option<(usize, usize)> {
    let rest = &text[start..];
    let header = rest.strip_prefix("-----BEGIN ")?;
    let close = header.find("-----")?;
    let label = &header[..close];
    if !label.ends_with("PRIVATE KEY")
        || label.len() > PEM_LABEL_MAX
        || !label
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || matches!(b, b' ' | b'*'))
        || matches!(
            redact_text_cow(label, &RedactionConfig::default()).0,
            Cow::Owned(_)
        )
    {
        return None;
    }
    let body_start = start + "-----BEGIN ".len() + close + 5;
    let body_end = text[body_start..]
        .find("-----END ")
        .map_or(text.len(), |i| body_start + i);
    Some((body_start, body_end))
}

/// The length of the `Basic` credential at the start of `token`: the whole token, or the part
/// up to the end of its `=` padding when more characters follow it (a base64 value ends at
/// its padding, and what is glued after it is scanned on its own).
fn basic_credential_end(token: &str) -> Option<usize> {
    if is_basic_credential(token) {
        return Some(token.len());
    }
    let pad_start = token.find('=')?;
    let pad_end = pad_start
        + token[pad_start..]
            .bytes()
            .take_while(|&b| b == b'=')
            .count();
    (pad_end < token.len() && is_basic_credential(&token[..pad_end])).then_some(pad_end)
}

/// A `Basic` credential: standard base64 (length a multiple of 4, at least 8) decoding to
/// printable ASCII `user:password`.
fn is_basic_credential(token: &str) -> bool {
    let bytes = token.as_bytes();
    if bytes.len() < 8 || !bytes.len().is_multiple_of(4) {
        return false;
    }
    let value = |b: u8| -> Option<u32> {
        Some(match b {
            b'A'..=b'Z' => u32::from(b - b'A'),
            b'a'..=b'z' => u32::from(b - b'a') + 26,
            b'0'..=b'9' => u32::from(b - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    };
    let mut colon = false;
    let last = bytes.len() / 4 - 1;
    for (index, chunk) in bytes.chunks(4).enumerate() {
        let pad = chunk.iter().rev().take_while(|&&b| b == b'=').count();
        if pad > 2 || (pad > 0 && index != last) {
            return false;
        }
        let mut n = 0u32;
        for &b in &chunk[..4 - pad] {
            match value(b) {
                Some(v) => n = (n << 6) | v,
                None => return false,
            }
        }
        n <<= 6 * pad as u32;
        for i in 0..3 - pad {
            let byte = ((n >> (16 - 8 * i)) & 0xff) as u8;
            if !(0x20..0x7f).contains(&byte) {
                return false;
            }
            colon |= byte == b':';
        }
    }
    colon
}

/// Shortest word a built-in prefix can match: the shortest prefix plus [`TOKEN_MIN_BODY`].
const BUILTIN_TOKEN_MIN_LEN: usize = 3 + TOKEN_MIN_BODY;

/// Whether `word` starts with a built-in token prefix and has a long enough body.
fn is_builtin_token(word: &str) -> bool {
    let bytes = word.as_bytes();
    if bytes.len() < BUILTIN_TOKEN_MIN_LEN {
        return false;
    }
    if is_vendor_token(word) || is_fly_token(bytes) {
        return true;
    }
    prefixes_by_first(TOKEN_PREFIXES, &TOKEN_PREFIXES_BY_FIRST, bytes[0])
        .any(|p| word.starts_with(p) && word.len() >= p.len() + min_body(p))
}

/// Whether `word` starts with one of the [`VENDOR_PREFIXES`] and has a long enough body.
fn is_vendor_token(word: &str) -> bool {
    let Some(&first) = word.as_bytes().first() else {
        return false;
    };
    prefixes_by_first(VENDOR_PREFIXES, &VENDOR_PREFIXES_BY_FIRST, first).any(|p| {
        let min = if p == "dapi" { 32 } else { VENDOR_MIN_BODY };
        word.starts_with(p) && word.len() >= p.len() + min
    })
}

/// For each byte, the set of the prefixes in `list` (at most 64, none empty) that start with
/// it, as bits by position in `list`.
const fn prefixes_by_first_byte(list: &[&str]) -> [u64; 256] {
    assert!(list.len() <= 64);
    let mut table = [0u64; 256];
    let mut k = 0;
    while k < list.len() {
        table[list[k].as_bytes()[0] as usize] |= 1 << k;
        k += 1;
    }
    table
}

/// [`TOKEN_PREFIXES`] by first byte ([`prefixes_by_first_byte`]).
static TOKEN_PREFIXES_BY_FIRST: [u64; 256] = prefixes_by_first_byte(TOKEN_PREFIXES);

/// [`VENDOR_PREFIXES`] by first byte ([`prefixes_by_first_byte`]).
static VENDOR_PREFIXES_BY_FIRST: [u64; 256] = prefixes_by_first_byte(VENDOR_PREFIXES);

/// The prefixes of `list` whose first byte is `first`, in list order, given `list`'s
/// [`prefixes_by_first_byte`] table: a word is compared only with the few prefixes that share
/// its first byte (none, for most words).
fn prefixes_by_first<'p>(
    list: &'p [&'p str],
    by_first: &[u64; 256],
    first: u8,
) -> impl Iterator<Item = &'p str> {
    bits(by_first[usize::from(first)]).map(move |k| list[k])
}

/// The positions of the set bits of `set`, lowest first.
fn bits(mut set: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if set == 0 {
            return None;
        }
        let k = set.trailing_zeros() as usize;
        set &= set - 1;
        Some(k)
    })
}

/// A Fly.io macaroon part: `fm`, digits, `_`, then at least [`VENDOR_MIN_BODY`] characters.
fn is_fly_token(bytes: &[u8]) -> bool {
    let Some(rest) = bytes.strip_prefix(b"fm") else {
        return false;
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    digits > 0 && rest.get(digits) == Some(&b'_') && rest.len() > digits + VENDOR_MIN_BODY
}

/// The end of a dotted token starting with the word `bytes[i..j]` (followed by `.`): SendGrid
/// `SG.<id>.<secret>`, Doppler `dp.pt.<secret>`, or a Discord bot token (`<24 to 28>.<6 or
/// 7>.<27 or more>` token characters).
fn dotted_token(bytes: &[u8], i: usize, j: usize) -> Option<usize> {
    let segment = |from: usize| {
        let mut e = from;
        while e < bytes.len() && is_word_byte(bytes[e]) {
            e += 1;
        }
        e
    };
    if bytes.get(j) != Some(&b'.') {
        return None;
    }
    let word = &bytes[i..j];
    if word == b"SG" {
        let first = segment(j + 1);
        if first - j - 1 < 16 || bytes.get(first) != Some(&b'.') {
            return None;
        }
        let second = segment(first + 1);
        let secret = second - first - 1;
        return (secret >= 20).then_some(second);
    }
    if word == b"dp" && bytes[j..].starts_with(b".pt.") {
        let end = segment(j + 4);
        return (end - j - 4 >= 20).then_some(end);
    }
    if !(23..=28).contains(&word.len()) || !word.iter().all(u8::is_ascii_alphanumeric) {
        return None;
    }
    let middle = segment(j + 1);
    if !(6..=7).contains(&(middle - j - 1)) || bytes.get(middle) != Some(&b'.') {
        return None;
    }
    let last = segment(middle + 1);
    let hmac = last - middle - 1;
    (hmac >= 27).then_some(last)
}

/// The secret path of a Slack or Discord webhook URL whose `://` is at `scheme_end`: everything
/// after `hooks.slack.com/services/` or `discord(app).com/api/webhooks/` up to the end of the
/// URL.
fn webhook_secret(text: &str, scheme_end: usize) -> Option<(usize, usize)> {
    let rest = &text[scheme_end + 3..];
    let host = [
        "hooks.slack.com/services/",
        "discord.com/api/webhooks/",
        "discordapp.com/api/webhooks/",
    ]
    .iter()
    .find(|h| rest.starts_with(*h))?;
    let start = scheme_end + 3 + host.len();
    let end = start
        + text[start..]
            .find(|c: char| {
                c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | '?' | '#')
            })
            .unwrap_or(text.len() - start);
    (end - start >= 20).then_some((start, end))
}

/// A Fernet-shaped word right after a `+` continues a base64 blob (`…AAAA+gAAAA…`); it is
/// data, not a token.
fn is_base64_continuation(bytes: &[u8], start: usize, word: &str) -> bool {
    start > 0 && bytes[start - 1] == b'+' && word.starts_with("gAAAA")
}

/// The shortest body after a built-in prefix: [`TOKEN_MIN_BODY`], or more for the short,
/// word-like provider prefixes whose real tokens are long (`fw-tooshort` stays prose).
fn min_body(prefix: &str) -> usize {
    match prefix {
        "fw_" | "fw-" | "fpk_" => 32,
        "LTAI" | "r8_" | "xai-" | "pplx-" | "gsk_" | "tvly-" | "gloas-" | "gAAAA" => 20,
        _ => TOKEN_MIN_BODY,
    }
}

/// Whether `word` starts with a caller prefix and has at least one more character.
fn is_custom_token(word: &str, config: &RedactionConfig) -> bool {
    config
        .token_prefixes
        .iter()
        .any(|p| !p.is_empty() && word.starts_with(p.as_str()) && word.len() > p.len())
}

/// [`mask_token`], falling back to [`MASK`] when the kept edges could change how the text
/// scans next time (quotes or backslashes inside a quoted value, an assignment or shell
/// reference in the head, or a tail that reads as a sensitive key).
fn safe_mask(value: &str, quoted: bool) -> String {
    let mut out = String::new();
    push_mask(&mut out, value, safe_mask_edges(value, quoted));
    out
}

/// The mask edges of [`safe_mask`] (`None`: the mask is [`MASK`]).
fn safe_mask_edges(value: &str, quoted: bool) -> Option<(usize, usize)> {
    let (head_end, tail_start) = mask_edges(value)?;
    // The mask is the head (six characters), the ellipsis and the tail (four characters).
    let (head, tail) = (&value[..head_end], &value[tail_start..]);
    const QUOTES: [char; 3] = ['"', '\'', '\\'];
    if quoted && (head.contains(QUOTES) || tail.contains(QUOTES)) {
        return None;
    }
    if head.contains(['=', ':', '$']) {
        return None;
    }
    let tail_word = &tail[..tail
        .bytes()
        .position(|b| !is_word_byte(b))
        .unwrap_or(tail.len())];
    if is_sensitive_key(tail_word) || tail_word.starts_with("--") {
        return None;
    }
    Some((head_end, tail_start))
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
    // A flag (`Bearer --api-key …`) is no credential: the scan goes on to it.
    if bytes[start..].starts_with(b"--") {
        return None;
    }
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
    // A header name (`Bearer Authorization: Digest …`) or a URL's scheme (`Bearer
    // postgres://user:password@…`) is no credential.
    if names_another_rule(text, start, end_token) {
        return None;
    }
    (end_token - start >= 8).then_some((start, end_token))
}

/// The value of a credential flag ([`is_credential_flag`]) after the blank or `=` at `after`:
/// inside its quotes when it is quoted ([`flag_argument`]), else up to the next value
/// terminator, unless it is the next flag, a key or header name another rule reads, prose
/// (a short lowercase word), or what an earlier scan left of such a value; after an
/// authorization scheme, the credential after the scheme.
fn flag_value(text: &str, after: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let sep = *bytes.get(after)?;
    if sep != b' ' && sep != b'=' {
        return None;
    }
    let start = after + 1;
    // A quoted value (`--password "…"`, also in escaped quotes): inside its quotes, whatever
    // it holds.
    if escaped_quote_len(bytes, start).is_some() {
        let (start, end) = flag_argument(text, start);
        return (end > start).then_some((start, end));
    }
    let k = terminator_from(text, start);
    if k == start || bytes[start] == b'-' {
        return None;
    }
    // A key or header name (`--api-key Authorization: Digest …`) is not the value.
    if matches!(bytes[k - 1], b':' | b'=') && names_another_rule(text, start, k - 1) {
        return None;
    }
    // A mask before `:` or `=` is what an earlier scan left of such a key when a token rule
    // masked it (`--api-key ghp_my_password:` becomes `--api-key ***:`): the mask is the value
    // and the `:` stays, so a second scan keeps the text.
    if k - start > 1 && matches!(bytes[k - 1], b':' | b'=') && is_masked(&text[start..k - 1]) {
        return Some((start, k - 1));
    }
    // Such a key with a masked value (`--api-key token=***`, what an earlier scan left of
    // `--api-key token=}…`) is the assignment's: its own rule keeps it.
    if let Some(op) = memchr::memchr2(b'=', b':', &bytes[start..k]).map(|p| start + p)
        && op > start
        && is_masked(&text[op + 1..k])
        && names_another_rule(text, start, op)
    {
        return None;
    }
    // An authorization scheme (`--header-token Bearer <token>`): the credential after it is
    // the value, the scheme stays.
    if matches!(bytes.get(k), Some(b' ' | b'\t')) && is_value_scheme(&text[start..k]) {
        let mut from = k;
        while matches!(bytes.get(from), Some(b' ' | b'\t')) {
            from += 1;
        }
        let end = terminator_from(text, from);
        if end > from {
            return Some((from, end));
        }
    }
    // Prose such as "use --password or --password-file": a short lowercase word is not a
    // credential value.
    if k - start <= 4 && bytes[start..k].iter().all(u8::is_ascii_lowercase) {
        return None;
    }
    // PowerShell's `-Password (ConvertTo-SecureString "…" -AsPlainText)`: the plain text is
    // the value, masked from its `-AsPlainText` ([`secure_string_argument`]).
    if text[start..k]
        .trim_start_matches('(')
        .eq_ignore_ascii_case("ConvertTo-SecureString")
    {
        return None;
    }
    Some((start, k))
}

/// How long a namespace prefix of an element's name ([`xml_tag_start`]) may be.
const XML_PREFIX_MAX: usize = 64;

/// Whether the word at byte `i` of `bytes` is the name of an XML tag, after `<` (a start tag)
/// or `</` (an end tag) and perhaps a namespace prefix (`<wsse:Password`): the index of the
/// tag's `<`, and whether it is an end tag.
#[inline]
fn xml_tag_start(bytes: &[u8], i: usize) -> Option<(usize, bool)> {
    let mut k = i;
    if k > 0 && bytes[k - 1] == b':' {
        let floor = k.saturating_sub(1 + XML_PREFIX_MAX);
        let prefix = bytes[floor..k - 1]
            .iter()
            .rev()
            .take_while(|&&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            .count();
        if prefix == 0 {
            return None;
        }
        k -= 1 + prefix;
    }
    match k.checked_sub(1).map(|p| bytes[p]) {
        Some(b'<') => Some((k - 1, false)),
        Some(b'/') if k >= 2 && bytes[k - 2] == b'<' => Some((k - 2, true)),
        _ => None,
    }
}

/// The text of an XML element whose start tag, `<` at byte `open` and the word `i..j` (its
/// name, after a namespace prefix if it has one) followed by `>`, names a sensitive key
/// ([`is_text_key`]), or that is a property list's value right after a sensitive key
/// ([`is_plist_secret`]): from after the `>` to the next `<` (or the end of the text), without
/// the blanks at either end. `None` for another element or an empty one.
fn xml_element_value(text: &str, open: usize, i: usize, j: usize) -> Option<(usize, usize)> {
    if !(is_text_key_memo(&text[i..j]) || (open + 1 == i && is_plist_secret(text, i, j))) {
        return None;
    }
    let bytes = text.as_bytes();
    let mut start = j + 1;
    let mut end = start + memchr::memchr(b'<', &bytes[start..]).unwrap_or(bytes.len() - start);
    while start < end && bytes[start].is_ascii_whitespace() {
        start += 1;
    }
    while end > start && bytes[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    (end > start).then_some((start, end))
}

/// How far an XML rule reads for the rest of its tag or the key before its element, in bytes
/// (a longer tag or key is not read: redaction stays linear in the text).
const XML_REACH: usize = 256;

/// What [`xml_attributed_element_value`] found before an element's end tag.
enum ElementText {
    /// The element's text, from its first byte to its end, without the blanks around it.
    Text(usize, usize),
    /// Nothing to mask here: the element's start tag has no attributes (its text is masked
    /// from the start tag, [`xml_element_value`]), or the element holds no text.
    Nothing,
    /// No start tag of the element within reach.
    NotFound,
}

/// The text of an XML element whose start tag has attributes (`<wsse:Password
/// Type="…#PasswordText">secret</wsse:Password>`), found from its end tag: `<` at byte
/// `open`, then `/` and the name (with its namespace prefix) up to byte `j`, where `>` follows
/// (whether the name is a sensitive key, [`is_text_key`], is the caller's to judge). From
/// after the start tag's `>` to the end tag, without the blanks at either end; the element's
/// text and its start tag are each read within [`XML_REACH`] bytes.
fn xml_attributed_element_value(text: &str, open: usize, j: usize) -> ElementText {
    let bytes = text.as_bytes();
    let floor = open.saturating_sub(XML_REACH);
    let Some(gt) = memchr::memrchr(b'>', &bytes[floor..open]).map(|k| floor + k) else {
        return ElementText::NotFound;
    };
    if memchr::memchr(b'<', &bytes[gt + 1..open]).is_some() || gt == 0 || bytes[gt - 1] == b'/' {
        return ElementText::NotFound;
    }
    let floor = gt.saturating_sub(XML_REACH);
    let Some(lt) = memchr::memrchr(b'<', &bytes[floor..gt]).map(|k| floor + k) else {
        return ElementText::NotFound;
    };
    // The start tag: the same name, then a blank before its attributes, and no other `>`.
    let name = &bytes[open + 2..j];
    let tag = &bytes[lt + 1..gt];
    if tag == name {
        return ElementText::Nothing;
    }
    if memchr::memchr(b'>', tag).is_some()
        || !tag.starts_with(name)
        || !tag[name.len()..]
            .first()
            .is_some_and(u8::is_ascii_whitespace)
    {
        return ElementText::NotFound;
    }
    let (mut start, mut end) = (gt + 1, open);
    while start < end && bytes[start].is_ascii_whitespace() {
        start += 1;
    }
    while end > start && bytes[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    if end > start {
        ElementText::Text(start, end)
    } else {
        ElementText::Nothing
    }
}

/// Whether the element named by the word `i..j` (after `<`) is a property list's value, a
/// `<string>` or `<data>`, right after a `<key>` that names a sensitive key
/// (`<key>password</key><string>…</string>`; blanks between them allowed).
fn is_plist_secret(text: &str, i: usize, j: usize) -> bool {
    let name = &text[i..j];
    if name != "string" && name != "data" {
        return false;
    }
    let before = text[..i - 1].trim_end();
    let Some(rest) = before.strip_suffix("</key>") else {
        return false;
    };
    let from = rest.len().saturating_sub(XML_REACH);
    let Some(open) = memchr::memmem::rfind(&rest.as_bytes()[from..], b"<key>") else {
        return false;
    };
    // `<key>` is ASCII: `from + open + 5` is a boundary (and `from` is reached only through
    // such a match).
    rest.get(from + open + 5..)
        .is_some_and(|key| is_text_key_memo(key.trim()))
}

/// `<add key="Password" value="…"/>`: the quoted value of the `value` attribute (the word
/// `i..j`, followed by `=`) of a tag that also has a `key` or `name` attribute naming a
/// sensitive key ([`is_text_key`]), as in .NET's `appSettings`. Quotes may be escaped (in
/// serialized text). `None` for any other attribute or tag, or an empty value.
fn xml_attribute_value(text: &str, i: usize, j: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let (start, end) = quoted_at(bytes, j + 1)?;
    // The tag around it: back to its `<`, on to its `>`, within reach.
    let floor = i.saturating_sub(XML_REACH);
    let open = floor + memchr::memrchr(b'<', &bytes[floor..i])?;
    if memchr::memchr(b'>', &bytes[open..i]).is_some() {
        return None;
    }
    let reach = (end + XML_REACH).min(bytes.len());
    let close = end + memchr::memchr(b'>', &bytes[end..reach]).unwrap_or(reach - end);
    let names_secret = |from: usize, to: usize| {
        memchr::memchr_iter(b'=', &bytes[from..to]).any(|k| {
            let eq = from + k;
            let name_start = bytes[from..eq]
                .iter()
                .rposition(|b| !b.is_ascii_alphanumeric())
                .map_or(from, |p| from + p + 1);
            let name = &bytes[name_start..eq];
            (name.eq_ignore_ascii_case(b"key") || name.eq_ignore_ascii_case(b"name"))
                && quoted_at(bytes, eq + 1)
                    .is_some_and(|(s, e)| e - s <= XML_REACH && is_text_key_memo(&text[s..e]))
        })
    };
    (end > start && (names_secret(open, i) || names_secret(end, close))).then_some((start, end))
}

/// The text inside the quotes that open at byte `at` (a quote, or an escaped one in serialized
/// text, [`escaped_quote_len`]) up to the same quote closing them. `None` without an opening
/// or a closing quote.
fn quoted_at(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    let len = escaped_quote_len(bytes, at)?;
    let start = at + len;
    let end = start + memchr::memmem::find(&bytes[start..], &bytes[at..start])?;
    Some((start, end))
}

/// Whether `word` is a flag with a sensitive name ([`is_text_key`]: `--api-key`,
/// `--password`), whose value is a credential. A single `-` also starts a name (`-password`,
/// `-token`: Go's flags, Java's and OpenSSL's tools) of at least four letters (`-cvv` is a
/// cluster of short flags); the keystore passwords of Java's `keytool` and `jarsigner`
/// (`-storepass`, `-keypass`, `-srcstorepass`, …) and curl's `--oauth2-bearer` count too
/// ([`is_secret_flag_name`]).
#[inline]
fn is_credential_flag(word: &str) -> bool {
    let dashes = match word.as_bytes() {
        [b'-', b'-', _, ..] => 2,
        [b'-', _, _, _, _, ..] => 1,
        _ => return false,
    };
    // The dashes are ASCII: `dashes` is a character boundary.
    let name = &word[dashes..];
    is_text_key_memo(name) || is_secret_flag_name(name.as_bytes())
}

/// Whether a flag's name, though no sensitive key, gives a secret (in any case): a keystore
/// password's (ending in `storepass` or `keypass`) or curl's `oauth2-bearer` token.
#[inline]
fn is_secret_flag_name(name: &[u8]) -> bool {
    // The last byte rules out most names.
    match name.last() {
        Some(b's' | b'S') => [b"storepass".as_slice(), b"keypass"].iter().any(|suffix| {
            name.len() >= suffix.len()
                && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
        }),
        Some(b'r' | b'R') => name.eq_ignore_ascii_case(b"oauth2-bearer"),
        _ => false,
    }
}

/// Whether `word` is a flag whose value is `user:password`: curl's `-u`/`--user` and
/// `-U`/`--proxy-user`.
#[inline]
fn is_user_flag(word: &[u8]) -> bool {
    // By length first: most flags a text holds are none of them.
    match word.len() {
        2 => word[0] == b'-' && word[1] | 0x20 == b'u',
        6 => word == b"--user",
        12 => word == b"--proxy-user",
        _ => false,
    }
}

/// The `user:password` value of a user flag ([`is_user_flag`]) starting after the blank at
/// `after` (or after `=` for a long flag, `--user=user:password`), quoted or not
/// ([`flag_argument`]). The whole value is the secret, not only the password: a user name can
/// be a token (`-u ghp_…:x-oauth-basic`), and text the mask does not cover is not looked at
/// again. `None` when the value is no `user:password` ([`is_user_password`]).
fn user_flag_value(text: &str, after: usize, long: bool) -> Option<(usize, usize)> {
    match text.as_bytes().get(after)? {
        b' ' => {}
        b'=' if long => {}
        _ => return None,
    }
    let (start, end) = flag_argument(text, after + 1);
    is_user_password(&text.as_bytes()[start..end]).then_some((start, end))
}

/// The argument of a flag that starts at `start`: inside its quotes when it opens with one
/// ([`escaped_quote_len`]: a quote, or an escaped one in serialized text, `-u \"…\"`, closed
/// by the same bytes), else (also for a quote that is never closed) where an unquoted
/// assignment's value ends ([`assignment_value_end`]). Possibly empty.
fn flag_argument(text: &str, start: usize) -> (usize, usize) {
    let bytes = text.as_bytes();
    if let Some(quoted) = quoted_at(bytes, start) {
        return quoted;
    }
    // Unquoted, or a quote never closed: after the quote, to where an unquoted value ends.
    let start = start + escaped_quote_len(bytes, start).unwrap_or(0);
    (start, assignment_value_end(text, start))
}

/// The password that the flag `text[i..j]` (a word starting with `-`) gives the command it
/// follows (`mysql -pSECRET`, `sshpass -p SECRET`, `docker login -p SECRET`; see
/// `command_flags`): glued to the flag's letter or after one blank, quoted or not
/// ([`flag_argument`]). `None` for any other flag, a flag of another command, a form the
/// command does not read (`mysql -p db` asks for the password) and a value that starts with
/// `-` (the next flag).
fn password_flag_value(
    text: &str,
    i: usize,
    j: usize,
    rw: &mut Rewrite<'_>,
) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let letter = *bytes.get(i + 1)?;
    if bytes[i] != b'-' || !command_flags::is_password_letter(letter) {
        return None;
    }
    let (form, from) = if j > i + 2 || escaped_quote_len(bytes, j).is_some() {
        (Form::Glued, i + 2)
    } else if bytes.get(j) == Some(&b' ') {
        (Form::Separate, j + 1)
    } else {
        return None;
    };
    let (start, mut end) = flag_argument(text, from);
    // A flag quoted whole with its password (`'-pmy pass'`): the password ends at the quote.
    if form == Form::Glued
        && start == from
        && let Some(open) = quote_before(bytes, i)
        && let Some(k) = memchr::memmem::find(&bytes[from..], open)
    {
        end = from + k;
    }
    if end == start || (form == Form::Separate && bytes[start] == b'-') {
        return None;
    }
    let flag = rw.commands_before(i).flag(letter, form)?;
    flag.takes(&bytes[start..end]).then_some((start, end))
}

/// Whether the word at byte `i` of `bytes` follows `?` or `&`: a query or form pair's key.
#[inline]
fn after_query_separator(bytes: &[u8], i: usize) -> bool {
    i > 0 && matches!(bytes[i - 1], b'?' | b'&')
}

/// Whether the word `bytes[i..j]` is `lower` (lower-case ASCII) in any ASCII case.
#[inline]
fn word_is(bytes: &[u8], i: usize, j: usize, lower: &[u8]) -> bool {
    bytes[i..j].eq_ignore_ascii_case(lower)
}

/// How far back from `-AsPlainText` [`secure_string_argument`] reads, in bytes.
const SECURE_STRING_REACH: usize = 256;

/// The plain text that PowerShell's `ConvertTo-SecureString` turns into a secure string,
/// given before its `-AsPlainText` flag at byte `i` of `bytes` (`ConvertTo-SecureString
/// "secret" -AsPlainText -Force`, also with `-String` before the text): its span and whether
/// it is quoted (a quote, or an escaped one in serialized text). `None` when the words before
/// the flag are not such a command, within [`SECURE_STRING_REACH`] bytes.
fn secure_string_argument(bytes: &[u8], i: usize) -> Option<(usize, usize, bool)> {
    let floor = i.saturating_sub(SECURE_STRING_REACH);
    let blanks_before = |mut k: usize| {
        while k > floor && matches!(bytes[k - 1], b' ' | b'\t') {
            k -= 1;
        }
        k
    };
    let word_before = |k: usize| {
        let start = bytes[floor..k]
            .iter()
            .rposition(|&b| matches!(b, b' ' | b'\t' | b'(' | b'=' | b'\n'))
            .map_or(floor, |p| floor + p + 1);
        (start, k)
    };
    let end_quoted = blanks_before(i);
    if end_quoted == i {
        return None;
    }
    // (A quote's escapes can run back past the reach: then it is read as no quote.)
    let (start, end, quoted, from) = if let Some(closing) = quote_before(bytes, end_quoted)
        && end_quoted - floor >= closing.len()
        && let Some(open) =
            memchr::memmem::rfind(&bytes[floor..end_quoted - closing.len()], closing)
    {
        let open = floor + open;
        (open + closing.len(), end_quoted - closing.len(), true, open)
    } else {
        let (start, end) = word_before(end_quoted);
        (start, end, false, start)
    };
    // A flag, or a variable (`$env:PASSWORD`), is not the text itself.
    if start >= end || bytes[start] == b'-' || (!quoted && bytes[start] == b'$') {
        return None;
    }
    let (mut w, mut e) = word_before(blanks_before(from));
    if bytes[w..e].eq_ignore_ascii_case(b"-string") {
        (w, e) = word_before(blanks_before(w));
    }
    // The command's name, also after a quote or an escape glued to it (`\nConvertTo-…` in
    // serialized text). The word is cut at ASCII bytes, so it is a `str` again.
    let word = std::str::from_utf8(&bytes[w..e]).ok()?;
    command_flags::command_name(word)
        .eq_ignore_ascii_case("ConvertTo-SecureString")
        .then_some((start, end, quoted))
}

/// The quote right before byte `i` of `bytes`, with the backslashes that escape it (`"`, or
/// `\"` in serialized text), if there is one.
fn quote_before(bytes: &[u8], i: usize) -> Option<&[u8]> {
    let quote = i.checked_sub(1)?;
    if !matches!(bytes[quote], b'"' | b'\'') {
        return None;
    }
    let escapes = bytes[..quote]
        .iter()
        .rev()
        .take_while(|&&b| b == b'\\')
        .count();
    Some(&bytes[quote - escapes..i])
}

/// Whether a user flag's value is a `user:password`: a `:` with something on both sides, but
/// not a user name holding `/` or a path after the `:` (a URL, `redis://host`, which its own
/// rule judges, or `rsync -u host:/data`), nor digits on both sides (`docker run -u
/// 1000:1000`, a user and group id), nor a value that starts with `+` (a time format, `date -u
/// +%H:%M`, where `-u` asks for UTC).
fn is_user_password(value: &[u8]) -> bool {
    let Some(colon) = memchr::memchr(b':', value) else {
        return false;
    };
    let (user, password) = (&value[..colon], &value[colon + 1..]);
    !(user.is_empty()
        || user[0] == b'+'
        || password.is_empty()
        || user.contains(&b'/')
        || password[0] == b'/'
        || (user.iter().all(u8::is_ascii_digit) && password.iter().all(u8::is_ascii_digit)))
}

/// Masks the credentials that flags give in an array of arguments, where a flag and its
/// value are two elements: `["--password", "…"]` (a [`is_credential_flag`]) or `["-u",
/// "user:…"]` (a user flag, [`is_user_flag`], before a [`is_user_password`] value) masks the
/// next element whole, and so does a command's password flag after that command
/// (`["sshpass", "-p", "…"]`, `["docker", "login", "-p", "…"]`; see `command_flags`), whose
/// value can also be glued to it (`["mysql", "-p…"]`: the part after the letter is masked).
/// After a command that stores secrets, its long flags' values are masked the same way
/// (`["gh", "secret", "set", "X", "--body", "…"]`, also glued after `=`; after a pair's `=`
/// for `--from-literal=KEY=…`), and so is the value of every `KEY=value` element when the
/// command takes them all as secrets (`["fly", "secrets", "set", "KEY=…"]`).
/// A value that starts with `-` is the next flag, not a value, and stays; so does an already
/// masked one, and any element after one that is not a string. Each element is a whole
/// argument: a value is not cut at a blank. `string` gives an element's string, if it is one
/// (the same rule serves `Value` and `SharedValue` arrays).
pub(crate) fn mask_flag_values<T>(items: &mut [T], string: impl Fn(&mut T) -> Option<&mut String>) {
    // The commands among the elements before `seen`, for their password flags: taken in
    // only when an element that such a command reads comes (most arrays hold none).
    let mut commands = Commands::default();
    let mut seen = 0;
    // What the previous element, a flag, makes of this one.
    let mut asks = FlagAsks::Nothing;
    for k in 0..items.len() {
        let (letter, commanded) = match string(&mut items[k]) {
            None => {
                asks = FlagAsks::Nothing;
                continue;
            }
            Some(arg) => match arg.as_bytes() {
                [b'-', letter, ..] if command_flags::is_password_letter(*letter) => {
                    (Some(*letter), true)
                }
                [b'-', b'-', rest @ ..] => {
                    (None, command_flags::is_long_flag_name(flag_name(rest)))
                }
                // `KEY=value` ([`command_flags::may_assign_secrets`]'s words are looked for
                // in the elements only when one comes).
                bytes => (
                    None,
                    bytes.first() != Some(&b'-')
                        && memchr::memchr(b'=', bytes).is_some_and(|p| p > 0),
                ),
            },
        };
        if commanded {
            for item in &mut items[seen..k] {
                if let Some(word) = string(item) {
                    commands.push(word);
                }
            }
            seen = k;
        }
        let Some(arg) = string(&mut items[k]) else {
            continue;
        };
        let bytes = arg.as_bytes();
        if bytes.first() == Some(&b'-') {
            // `-pSECRET`: the password is glued to the flag's letter (and asks nothing of the
            // next element, even when it reads as a flag's name, `-pmy-pass`).
            if bytes.len() > 2
                && let Some(flag) = letter.and_then(|letter| commands.flag(letter, Form::Glued))
                && flag.takes(&bytes[2..])
            {
                mask_after(arg, 2);
                asks = FlagAsks::Nothing;
                continue;
            }
            // `--body SECRET`, `--body=SECRET`, `--from-literal=KEY=SECRET` after a command
            // that stores secrets.
            if commanded
                && letter.is_none()
                && let Some(flag) = commands.long_flag(flag_name(&bytes[2..]))
            {
                asks = match memchr::memchr(b'=', bytes) {
                    Some(eq) => {
                        mask_after(arg, long_flag_secret(arg, eq + 1, flag));
                        FlagAsks::Nothing
                    }
                    None => FlagAsks::Long(flag),
                };
                continue;
            }
            let separate = letter
                .filter(|_| bytes.len() == 2)
                .and_then(|letter| commands.flag(letter, Form::Separate));
            asks = if is_user_flag(bytes) {
                FlagAsks::UserPassword(separate)
            } else if is_credential_flag(arg) {
                FlagAsks::Credential
            } else {
                separate.map_or(FlagAsks::Nothing, FlagAsks::Password)
            };
            continue;
        }
        let from = match std::mem::replace(&mut asks, FlagAsks::Nothing) {
            FlagAsks::Nothing => None,
            FlagAsks::Credential => Some(0),
            FlagAsks::UserPassword(flag) => {
                (is_user_password(bytes) || flag.is_some_and(|flag| flag.takes(bytes))).then_some(0)
            }
            FlagAsks::Password(flag) => flag.takes(bytes).then_some(0),
            FlagAsks::Long(flag) => Some(long_flag_secret(arg, 0, flag)),
        };
        // `["fly", "secrets", "set", "KEY=SECRET"]`: after a command that stores secrets,
        // every value is one.
        let from = from.or_else(|| {
            (commanded && commands.assigns())
                .then(|| memchr::memchr(b'=', bytes).map(|eq| eq + 1))
                .flatten()
        });
        if let Some(from) = from {
            mask_after(arg, from);
        }
    }
}

/// A long flag's name in the bytes after its dashes: up to its `=`, if it has one.
fn flag_name(rest: &[u8]) -> &[u8] {
    memchr::memchr(b'=', rest).map_or(rest, |eq| &rest[..eq])
}

/// Where the secret starts in the value of a [`command_flags::LongFlag`] that starts at byte
/// `from` of `arg`: there, or after the `=` of a `KEY=SECRET` pair (the end of `arg` when the
/// pair has none).
fn long_flag_secret(arg: &str, from: usize, flag: &command_flags::LongFlag) -> usize {
    if !flag.pair {
        return from;
    }
    memchr::memchr(b'=', &arg.as_bytes()[from..]).map_or(arg.len(), |eq| from + eq + 1)
}

/// Masks `arg` from byte `from` (an ASCII byte's end) on ([`safe_mask`]), unless that part is
/// empty or already masked.
fn mask_after(arg: &mut String, from: usize) {
    if from < arg.len() && !is_masked(&arg[from..]) {
        let mask = safe_mask(&arg[from..], false);
        arg.replace_range(from.., &mask);
    }
}

/// What a flag in an array of arguments makes of the next element ([`mask_flag_values`]).
#[derive(Clone, Copy)]
enum FlagAsks {
    /// Nothing: the next element is judged on its own.
    Nothing,
    /// A credential (`--password`): the next element whole.
    Credential,
    /// A user flag (`-u`, `--user`): the next element when it is a `user:password`, or when
    /// a command's password flag with the same letter takes it (Samba's `-U user%password`).
    UserPassword(Option<&'static command_flags::PasswordFlag>),
    /// A command's password flag (`sshpass -p`): the next element when the flag takes it.
    Password(&'static command_flags::PasswordFlag),
    /// A long flag of a command that stores secrets (`gh secret set NAME --body`): the next
    /// element (after its `=` for a `KEY=SECRET` pair).
    Long(&'static command_flags::LongFlag),
}

/// Whether `word` names an HTTP authorization header (`Authorization`, `Proxy-Authorization`).
fn is_authorization_key(word: &str) -> bool {
    // Both names end with `n`: the last letter tells most keys apart.
    word.bytes()
        .rev()
        .find(|&b| b != b'_' && b != b'-')
        .is_some_and(|b| b.eq_ignore_ascii_case(&b'n'))
        && (compact_eq(word.as_bytes(), b"authorization")
            || compact_eq(word.as_bytes(), b"proxyauthorization"))
}

/// The credentials after an authorization scheme that the assignment rule did not recognise
/// (`Digest …`, `AWS4-HMAC-SHA256 …`, `Bot …`): `scheme_end` is the end of the scheme word;
/// the credentials run to the first `;` followed by a blank, unfolded line break, or closing
/// `}` or `)` outside double quotes (so `; status=401` after them stays readable).
fn authorization_credentials(
    text: &str,
    scheme_start: usize,
    scheme_end: usize,
) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let scheme = &bytes[scheme_start..scheme_end];
    // A mask where the scheme would be is a value this rule masked whole before (its
    // characters are token characters, but it names no scheme).
    if scheme.is_empty()
        || scheme == MASK.as_bytes()
        || !scheme.iter().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'|'
                        | b'~'
                )
        })
        || bytes.get(scheme_end) != Some(&b' ')
        // A private key header, alone or glued to an escape (`%20-----BEGIN`), starts a block
        // whose body runs past this line: it is no scheme.
        || scheme.ends_with(PEM_BEGIN)
        // A word the token rules mask is a credential, not a scheme
        // (`Authorization: AKIA… ,x`); a scheme word holds no assignment, so this scan
        // cannot come back here.
        || matches!(
            redact_text_cow(&text[scheme_start..scheme_end], &RedactionConfig::default()).0,
            Cow::Owned(_)
        )
    {
        return None;
    }
    let start = scheme_end + 1;
    let mut k = start;
    let mut in_quotes = false;
    while k < bytes.len() {
        match bytes[k] {
            b'\\' => k += 1,
            // A parameter value opens its quotes right after `=`; any other quote outside them
            // closes the text around the header (a serialized string).
            b'"' if in_quotes => in_quotes = false,
            b'"' if k > 0 && bytes[k - 1] == b'=' => in_quotes = true,
            b'"' => break,
            // A line break continues the value only as a folded line (a blank follows it).
            b'\n' | b'\r' => {
                let mut next = k + 1;
                if bytes[k] == b'\r' && bytes.get(next) == Some(&b'\n') {
                    next += 1;
                }
                if !matches!(bytes.get(next), Some(b' ' | b'\t')) {
                    break;
                }
                k = next;
            }
            // `;` ends the credentials before a following diagnostic (`; status=401`), not
            // inside a parameter value (`SignedHeaders=host;x-amz-date`).
            b';' if !in_quotes && bytes.get(k + 1).is_none_or(|b| b.is_ascii_whitespace()) => {
                break;
            }
            b'}' | b')' if !in_quotes => break,
            // A private key block starts its own rule (its body runs past this line).
            b'-' if !in_quotes && bytes[k..].starts_with(b"-----BEGIN ") => break,
            // The closing quote of a single-quoted header (`-H 'Authorization: …'`).
            b'\'' if !in_quotes && bytes.get(k + 1).is_none_or(|b| b.is_ascii_whitespace()) => {
                break;
            }
            _ => {}
        }
        k += 1;
    }
    let end = start + text[start..k.min(bytes.len())].trim_end().len();
    (end > start).then_some((start, end))
}

struct Assignment {
    value_start: usize,
    value_end: usize,
    quoted: bool,
    /// The value follows a recognised scheme (`Bearer`, `Basic`, `Token`).
    after_scheme: bool,
}

/// The assignment operator after a key ending at `after`: the index of its `=` or `:` (of the
/// `>` of `=>`) and whether a blank may come before the value and it ends at `,` or `;` as a
/// header's does (`:`, and the `=>` of Ruby, PHP and Perl hashes, `"password" => "…"`), or
/// `None` when there is none (then [`assignment`] is `None` too). Cheap and inlined: most words
/// are followed by no operator.
#[inline]
fn assignment_operator(bytes: &[u8], after: usize) -> Option<(usize, bool)> {
    let mut k = after;
    // The key's closing quote, plain or escaped once or more (`\"key\":` inside serialized
    // JSON).
    k += escaped_quote_len(bytes, k).unwrap_or(0);
    while matches!(bytes.get(k), Some(b' ' | b'\t')) {
        k += 1;
    }
    match bytes.get(k) {
        Some(b'=') if bytes.get(k + 1) == Some(&b'>') => Some((k + 1, true)),
        Some(b'=') if bytes.get(k + 1) != Some(&b'=') => Some((k, false)),
        Some(b':') if !matches!(bytes.get(k + 1), Some(b'-' | b'/' | b':')) => Some((k, true)),
        _ => None,
    }
}

/// The assignment after a key ending at `after`: its operator ([`assignment_operator`]) and
/// its value ([`assignment_value`]).
fn assignment(text: &str, after: usize) -> Option<Assignment> {
    let (op, header_style) = assignment_operator(text.as_bytes(), after)?;
    assignment_value(text, op, header_style)
}

/// Whether the word `key`, followed by the byte `next` and an assignment operator, can be the
/// key of a masked assignment: `Some(true)` for a sensitive key ([`is_text_key`]),
/// `Some(false)` for a key that only a form pair or a session cookie makes secret (decided
/// by [`is_query_secret`] and [`is_gitlab_session`] once the value is known), `None` for any
/// other key (its value need not be found).
fn assignment_key(key: &str, next: Option<u8>) -> Option<bool> {
    if is_text_key_memo(key) {
        return Some(true);
    }
    // Both other rules need `=` and one of their few keys (the same lists they use).
    let form_key = next == Some(b'=')
        && (key.eq_ignore_ascii_case(GITLAB_SESSION_KEY)
            || compact_lower(key).is_some_and(|(buf, n)| {
                FORM_PAIR_KEYS.contains(&&buf[..n]) || BODY_PAIR_KEYS.contains(&&buf[..n])
            }));
    form_key.then_some(false)
}

/// The keys (compact, lower case) whose value [`is_query_secret`] masks in a query or form
/// pair (`?code=…`, `&sig=…`) or right after a body label.
const FORM_PAIR_KEYS: [&[u8]; 3] = [b"code", b"sig", b"xamzsignature"];

/// The keys (compact, lower case) whose value [`is_query_secret`] masks only right after a
/// body label (`body: signature=…`).
const BODY_PAIR_KEYS: [&[u8]; 1] = [b"signature"];

/// GitLab's web session cookie ([`is_gitlab_session`]), in any case.
const GITLAB_SESSION_KEY: &str = "_gitlab_session";

/// Keys of at most this many bytes are remembered by [`is_text_key_memo`].
const TEXT_KEY_MEMO_MAX: usize = 16;

/// Slots of [`TEXT_KEY_MEMO`] (a power of two).
const TEXT_KEY_MEMO_SLOTS: usize = 16;

/// One slot of [`TEXT_KEY_MEMO`]: a key's bytes (zero-padded, little-endian), its length (0:
/// an empty slot) and its [`is_text_key`] verdict.
type TextKeySlot = Cell<(u128, u8, bool)>;

thread_local! {
    /// Recent verdicts of [`is_text_key`] for short keys, in slots chosen by a hash of the key.
    static TEXT_KEY_MEMO: [TextKeySlot; TEXT_KEY_MEMO_SLOTS] =
        const { [const { Cell::new((0, 0, false)) }; TEXT_KEY_MEMO_SLOTS] };
}

/// [`is_text_key`], remembered per thread for keys of up to [`TEXT_KEY_MEMO_MAX`] bytes: the
/// keys of assignments and the names of `--flags` repeat from one text to the next (the records
/// of a document, the commands of a session), and a key costs far more to judge than to look
/// up.
fn is_text_key_memo(key: &str) -> bool {
    let bytes = key.as_bytes();
    let len = bytes.len();
    if len == 0 || len > TEXT_KEY_MEMO_MAX {
        return is_text_key(key);
    }
    let mut buf = [0u8; TEXT_KEY_MEMO_MAX];
    buf[..len].copy_from_slice(bytes);
    let packed = u128::from_le_bytes(buf);
    let len = len as u8;
    let mixed = (packed as u64 ^ (packed >> 64) as u64 ^ u64::from(len))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let slot = (mixed >> (64 - TEXT_KEY_MEMO_SLOTS.trailing_zeros())) as usize;
    TEXT_KEY_MEMO.with(|memo| {
        let (known, known_len, verdict) = memo[slot].get();
        if known_len == len && known == packed {
            return verdict;
        }
        let verdict = is_text_key(key);
        memo[slot].set((packed, len, verdict));
        verdict
    })
}

/// The value of an assignment whose operator is at `op` (`:` when `header_style`, else `=`).
fn assignment_value(text: &str, op: usize, header_style: bool) -> Option<Assignment> {
    let bytes = text.as_bytes();
    let mut k = op + 1;
    // Blanks, and in serialized text the escapes `\t`, `\n` and `\r` that stand for them.
    let blank_len = |at: usize| match bytes.get(at) {
        Some(b' ' | b'\t') => 1,
        Some(b'\\') if header_style && matches!(bytes.get(at + 1), Some(b't' | b'n' | b'r')) => 2,
        _ => 0,
    };
    loop {
        let n = blank_len(k);
        if n == 0 {
            break;
        }
        k += n;
    }
    // `Authorization: Bearer <token>` / `Basic <token>`: keep the scheme.
    let scheme_end = {
        let mut e = k;
        while e < bytes.len() && bytes[e].is_ascii_alphabetic() {
            e += 1;
        }
        let scheme = &text[k..e];
        let gap = blank_len(e);
        (is_value_scheme(scheme) && gap > 0 && bytes.get(e) != Some(&b'\t')).then_some(e + gap)
    };
    if let Some(start) = scheme_end {
        let e = terminator_from(text, start);
        if e > start {
            return Some(Assignment {
                value_start: start,
                value_end: e,
                quoted: false,
                after_scheme: true,
            });
        }
    }
    // A value in escaped quotes (`KEY=\"value\"` in serialized JSON): it ends at the same
    // quote, escaped the same way.
    if bytes.get(k) == Some(&b'\\')
        && let Some(open) = escaped_quote_len(bytes, k)
    {
        let start = k + open;
        let closing = &bytes[k..start];
        // A quote escaped more deeply than the opening one (`\\\"` inside `\"…\"`) is part of
        // the value: the closing run of backslashes must not follow another backslash.
        let mut e = start;
        while e < bytes.len() && !(bytes[e..].starts_with(closing) && bytes[e - 1] != b'\\') {
            e += 1;
        }
        if e >= bytes.len() || e == start {
            return None;
        }
        return Some(Assignment {
            value_start: start,
            value_end: e,
            quoted: true,
            after_scheme: false,
        });
    }
    match char_at(text, k) {
        Some(q @ ('"' | '\'' | '`')) => {
            let start = k + 1;
            // Byte steps: the bytes of a multi-byte character are never a quote or a
            // backslash, so skipping only the first byte of an escaped character is enough.
            let q = q as u8;
            let mut e = start;
            while e < bytes.len() && bytes[e] != q {
                e += 1;
                if bytes[e - 1] == b'\\' && e < bytes.len() {
                    e += 1;
                }
            }
            if e == start {
                return None;
            }
            if e >= bytes.len() {
                // An unterminated quote: the opening quote and the value are masked together,
                // the value ending where an unquoted one would (so masking twice changes
                // nothing more than masking once).
                let end = if header_style {
                    header_value_end(text, start)
                } else {
                    assignment_value_end(text, start)
                };
                return (end > start).then_some(Assignment {
                    value_start: k,
                    value_end: end,
                    quoted: false,
                    after_scheme: false,
                });
            }
            Some(Assignment {
                value_start: start,
                value_end: e,
                quoted: true,
                after_scheme: false,
            })
        }
        Some(_) => {
            let start = k;
            let mut e = if header_style {
                header_value_end(text, start)
            } else {
                assignment_value_end(text, start)
            };
            // `${NAME}` / `${NAME:-default}` ends at its closing brace, not before it.
            if text[start..].starts_with("${")
                && bytes.get(e) == Some(&b'}')
                && !text[start..e].contains(char::is_whitespace)
                && terminator_from(text, e + 1) == e + 1
            {
                e += 1;
            }
            // A value that is the lead-in of another shape (`--api-key …`, `Authorization: …`,
            // PowerShell's `ConvertTo-SecureString "…" -AsPlainText`) is left to that shape,
            // which masks what follows it.
            let value = &text[start..e];
            if value.starts_with("--")
                || value.ends_with(':')
                || value.eq_ignore_ascii_case("ConvertTo-SecureString")
            {
                return None;
            }
            (e > start).then_some(Assignment {
                value_start: start,
                value_end: e,
                quoted: false,
                after_scheme: false,
            })
        }
        None => None,
    }
}

/// The end of a Google OAuth token starting at `i` (the word `bytes[i..j]`): `ya29.` or `1//`
/// followed by token characters, at least 20 in all.
fn google_oauth_token(bytes: &[u8], i: usize, j: usize) -> Option<usize> {
    let word = &bytes[i..j];
    let body = if word == b"ya29" && bytes.get(j) == Some(&b'.') {
        j + 1
    } else if word == b"1" && bytes[j..].starts_with(b"//") {
        j + 2
    } else {
        return None;
    };
    let mut end = body;
    while end < bytes.len() && (is_word_byte(bytes[end]) || bytes[end] == b'.') {
        end += 1;
    }
    while end > body && bytes[end - 1] == b'.' {
        end -= 1;
    }
    (end - i >= 20).then_some(end)
}

/// The positions in [`TOKEN_PREFIXES`] of the prefixes distinctive enough to be found inside a
/// longer word (GitHub, GitLab personal access and Slack tokens), where shorter ones (`fw_`,
/// `sk_`) would hit ordinary identifiers: the run from `ghp_` to `xapp-`.
const EMBEDDABLE_POSITIONS: std::ops::Range<usize> = 4..17;

/// The prefixes at [`EMBEDDABLE_POSITIONS`].
#[cfg(test)]
const EMBEDDABLE_PREFIXES: &[&str] = TOKEN_PREFIXES
    .split_at(EMBEDDABLE_POSITIONS.start)
    .1
    .split_at(EMBEDDABLE_POSITIONS.end - EMBEDDABLE_POSITIONS.start)
    .0;

/// [`EMBEDDABLE_POSITIONS`] as bits of [`TOKEN_PREFIXES_BY_FIRST`].
const EMBEDDABLE_BITS: u64 = (1 << EMBEDDABLE_POSITIONS.end) - (1 << EMBEDDABLE_POSITIONS.start);

/// Where a token with one of the prefixes at [`EMBEDDABLE_POSITIONS`] starts inside `word`
/// after a `-` or `_`, if one does.
fn embedded_token_start(word: &str) -> Option<usize> {
    let bytes = word.as_bytes();
    (1..bytes.len()).find(|&p| {
        matches!(bytes[p - 1], b'-' | b'_')
            && bits(TOKEN_PREFIXES_BY_FIRST[usize::from(bytes[p])] & EMBEDDABLE_BITS).any(|k| {
                let prefix = TOKEN_PREFIXES[k];
                word[p..].starts_with(prefix) && word.len() - p >= prefix.len() + TOKEN_MIN_BODY
            })
    })
}

/// Whether `key` (the word at `i`) is a secret only as a URL query or form parameter
/// (`code`, `sig`, `x-amz-signature`): a `name=value` pair after `?` or `&`, or one followed by
/// `&` (the first pair of a form body). `code=E1` in a diagnostic stays readable.
///
/// The first pair right after an explicit body label (`body: code=…`, `form_body=signature=…`)
/// is a form pair too, even alone; there `signature` counts as well.
///
/// Called only for the keys that [`assignment_key`] lets through (it reads the same lists).
fn is_query_secret(bytes: &[u8], i: usize, next: Option<u8>, a: &Assignment, key: &str) -> bool {
    if next != Some(b'=') {
        return false;
    }
    let Some((buf, n)) = compact_lower(key) else {
        return false;
    };
    let compact = &buf[..n];
    if FORM_PAIR_KEYS.contains(&compact) {
        after_query_separator(bytes, i)
            || bytes.get(a.value_end) == Some(&b'&')
            || after_body_label(bytes, i)
    } else {
        BODY_PAIR_KEYS.contains(&compact) && after_body_label(bytes, i)
    }
}

/// Whether the word at `i` follows a body label: `body:` and blanks, or `body=` (also
/// `form_body=`, `request-body=`; the label is a word ending in `body`).
fn after_body_label(bytes: &[u8], i: usize) -> bool {
    let mut k = i;
    let label_end = if k > 0 && bytes[k - 1] == b'=' {
        k - 1
    } else {
        while k > 0 && matches!(bytes[k - 1], b' ' | b'\t') {
            k -= 1;
        }
        if k == i || k == 0 || bytes[k - 1] != b':' {
            return false;
        }
        k - 1
    };
    let mut start = label_end;
    while start > 0 && is_word_byte(bytes[start - 1]) {
        start -= 1;
    }
    let label = &bytes[start..label_end];
    label.len() >= 4 && {
        let (head, tail) = label.split_at(label.len() - 4);
        tail.eq_ignore_ascii_case(b"body")
            && (head.is_empty() || matches!(head.last(), Some(b'_' | b'-')))
    }
}

/// Where the parameters start when a value in escaped quotes (serialized text) is a
/// parameterized authorization scheme (`Digest response=\"…\"`, not `Bearer`, `Basic` or
/// `Token`): the scheme word, one blank, then parameters holding a `=` (or an earlier mask).
fn escaped_scheme_parameters(bytes: &[u8], a: &Assignment, value: &str) -> Option<usize> {
    if a.value_start < 2 || bytes[a.value_start - 1] != b'"' || bytes[a.value_start - 2] != b'\\' {
        return None;
    }
    let (scheme, rest) = value.split_once(' ')?;
    let parameterized = !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !is_value_scheme(scheme)
        && (rest.contains('=') || rest == MASK);
    parameterized.then_some(a.value_start + scheme.len() + 1)
}

/// GitLab's web session cookie, `_gitlab_session=<at least 32 token characters>`; a shorter
/// value (`_gitlab_session=short` in documentation) stays readable.
///
/// Called only for the keys that [`assignment_key`] lets through.
fn is_gitlab_session(text: &str, next: Option<u8>, a: &Assignment, key: &str) -> bool {
    next == Some(b'=')
        && key.eq_ignore_ascii_case(GITLAB_SESSION_KEY)
        && text[a.value_start..a.value_end]
            .bytes()
            .filter(|b| b.is_ascii_alphanumeric())
            .count()
            >= 32
}

/// The decoded key ending with the word `text[i..j]`, when the key is spelled with percent
/// escapes, `+` or invisible characters before it (`client%5Fsecret`, `client_se+cret`); the
/// escapes are decoded and `+`, blanks, control and invisible characters dropped. The key
/// starts at `floor` at the earliest (the end of the scan's last mask: the next scan reads
/// the mask there, which no key goes through).
fn encoded_key(text: &str, i: usize, j: usize, floor: usize) -> Option<String> {
    const MAX_KEY_BYTES: usize = 96;
    let mut start = i;
    let mut obfuscated = false;
    for c in text[floor.min(i)..i].chars().rev() {
        let plain = c.is_ascii_alphanumeric() || matches!(c, '_' | '-');
        let hidden = (c.is_control() && !c.is_whitespace()) || is_invisible(c);
        if !(plain || c == '%' || c == '+' || hidden) || i - start >= MAX_KEY_BYTES {
            break;
        }
        obfuscated |= !plain;
        start -= c.len_utf8();
    }
    if !obfuscated {
        return None;
    }
    let raw = &text.as_bytes()[start..j];
    let mut bytes = Vec::with_capacity(raw.len());
    let mut k = 0;
    while k < raw.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if raw[k] == b'%'
            && let (Some(h), Some(l)) = (
                raw.get(k + 1).copied().and_then(hex),
                raw.get(k + 2).copied().and_then(hex),
            )
        {
            bytes.push(u8::try_from(h * 16 + l).unwrap_or(0));
            k += 3;
        } else {
            bytes.push(raw[k]);
            k += 1;
        }
    }
    let decoded: String = String::from_utf8_lossy(&bytes)
        .chars()
        .filter(|c| !(*c == '+' || c.is_whitespace() || c.is_control() || is_invisible(*c)))
        .collect();
    (!decoded.is_empty()).then_some(decoded)
}

/// Where the `=` is when `text[from..]` starts with one or more invisible characters and then
/// `=`.
fn invisible_run_to_eq(text: &str, from: usize) -> Option<usize> {
    let mut k = from;
    for c in text[from..].chars() {
        if c == '=' {
            return (k > from).then_some(k);
        }
        if !is_invisible(c) {
            return None;
        }
        k += c.len_utf8();
    }
    None
}

/// Characters that render as nothing (zero-width and filler characters).
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2060}'..='\u{2064}'
            | '\u{3164}'
            | '\u{FEFF}'
            | '\u{FFA0}'
    )
}

/// Where the bot id of a bot token starts, when `word` (starting at byte `at`) is one: 6 to 12
/// digits, alone or after `bot`.
fn bot_token_start(word: &str, at: usize) -> Option<usize> {
    let digits = word.strip_prefix("bot").unwrap_or(word);
    ((6..=12).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()))
        .then_some(at + word.len() - digits.len())
}

/// The end of a bot token's secret after the `:` at `colon`: at least 30 word characters.
fn bot_token_end(bytes: &[u8], colon: usize) -> Option<usize> {
    let start = colon + 1;
    let mut end = start;
    while end < bytes.len() && is_word_byte(bytes[end]) {
        end += 1;
    }
    (end - start >= 30).then_some(end)
}

/// The length of a quote at `at`, plain (`"`, `'`) or preceded by a run of backslashes
/// (`\"`, `\\\"`), when there is one.
fn escaped_quote_len(bytes: &[u8], at: usize) -> Option<usize> {
    let mut k = at;
    while bytes.get(k) == Some(&b'\\') {
        k += 1;
    }
    matches!(bytes.get(k), Some(b'"' | b'\'')).then_some(k + 1 - at)
}

/// The end of an unquoted `name=value` value: the next blank, quote or `&` (a query or form
/// parameter separator); `,` `;` `)` `]` `}` inside the value belong to it, a run of them
/// right before that end is the text's own punctuation.
fn assignment_value_end(text: &str, from: usize) -> usize {
    let bytes = text.as_bytes();
    let mut k = from;
    while k < bytes.len() {
        let b = bytes[k];
        if b.is_ascii_whitespace() || matches!(b, b'"' | b'\'' | b'`' | b'&') {
            break;
        }
        if b >= 0x80 {
            match char_at(text, k) {
                Some(c) if c.is_whitespace() => break,
                Some(c) => k += c.len_utf8(),
                None => return bytes.len(),
            }
        } else {
            k += 1;
        }
    }
    while k > from && matches!(bytes[k - 1], b',' | b';' | b')' | b']' | b'}') {
        k -= 1;
    }
    k
}

/// The end of an unquoted `Name: value` header value: URL punctuation (`&`, `#`, `)`, `?`)
/// belongs to the value; blanks, quotes, `,`, `;`, `}` and `]` end it.
fn header_value_end(text: &str, from: usize) -> usize {
    let bytes = text.as_bytes();
    let mut k = from;
    while k < bytes.len() {
        let b = bytes[k];
        if b.is_ascii_whitespace() || matches!(b, b'"' | b'\'' | b'`' | b',' | b';' | b'}' | b']') {
            return k;
        }
        if b >= 0x80 {
            // A non-ASCII blank ends the value too; other characters are stepped over whole.
            match char_at(text, k) {
                Some(c) if c.is_whitespace() => return k,
                Some(c) => k += c.len_utf8(),
                None => return bytes.len(),
            }
        } else {
            k += 1;
        }
    }
    bytes.len()
}

/// Whether `value` is a shell reference to `key` itself (`$KEY`, `${KEY}`, `${KEY:-}`).
#[inline]
pub fn is_own_shell_reference(key: &str, value: &str) -> bool {
    // Most values start with a printable ASCII byte other than `$`: no leading whitespace to
    // trim, and not a reference.
    if let Some(&first) = value.as_bytes().first()
        && first != b'$'
        && first.is_ascii_graphic()
    {
        return false;
    }
    is_shell_reference_to(key, value)
}

/// [`is_own_shell_reference`] past its first-byte check.
fn is_shell_reference_to(key: &str, value: &str) -> bool {
    if !value.trim_start().starts_with('$') {
        return false;
    }
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
///
/// A known transport error code (`ECONNRESET`, …) under `code` with a `cause` parent is kept:
/// this function sees one level only, so it judges the value as if its holder were a `cause`
/// directly under the root. The structured walks (`redact_structured`, …) keep such a code only
/// at the end of a real cause chain (see `docs/redaction.md`).
pub fn redact_field_value(
    key: &str,
    parent_key: Option<&str>,
    value: &str,
    config: &RedactionConfig,
) -> String {
    redact_field_value_cow(key, parent_key, true, value, config).into_owned()
}

/// [`redact_field_value`] without copying: the value is borrowed when it is kept as it is.
/// `cause_chain`: whether the path from the root to the value is made of object keys only,
/// all `cause` but the last (the only place a transport error code is kept).
pub(crate) fn redact_field_value_cow<'a>(
    key: &str,
    parent_key: Option<&str>,
    cause_chain: bool,
    value: &'a str,
    config: &RedactionConfig,
) -> Cow<'a, str> {
    if !is_sensitive_key_in(key, parent_key) {
        return redact_plain_field(key, value, config);
    }
    if keeps_sensitive_value(key, parent_key, cause_chain, value) {
        return Cow::Borrowed(value);
    }
    Cow::Owned(mask_token(value))
}

/// What the key rules decide about one key on its own, whatever its parent: computed once per
/// distinct key by [`KeyMemo`] (keys repeat across the records of a document).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyFacts {
    /// [`is_sensitive_key`].
    sensitive: bool,
    /// The key is `id` (any case): sensitive under a share parent.
    id: bool,
    /// The key is `code` (any case): sensitive under an OAuth or `cause` parent.
    code: bool,
    /// The key is `session` (any case): a workspace session path under it is kept.
    session: bool,
    /// [`is_app_password_key`].
    app_password: bool,
}

impl KeyFacts {
    /// The facts of `key`.
    pub(crate) fn of(key: &str) -> Self {
        Self {
            sensitive: is_sensitive_key(key),
            id: key.eq_ignore_ascii_case("id"),
            code: key.eq_ignore_ascii_case("code"),
            session: key.eq_ignore_ascii_case("session"),
            app_password: is_app_password_key(key),
        }
    }

    /// [`is_sensitive_key_in`] of the key these facts are about.
    #[inline]
    pub(crate) fn sensitive_in(self, parent_key: Option<&str>) -> bool {
        self.sensitive
            || (self.id && parent_key.is_some_and(is_share_parent))
            || (self.code && parent_key.is_some_and(is_code_secret_parent))
    }
}

/// Longest key a [`KeyMemo`] slot holds; longer keys are judged every time.
const MEMO_KEY_MAX: usize = 24;

/// Number of [`KeyMemo`] sets (a power of two); each holds two keys.
const MEMO_SETS: usize = 32;

/// The facts of no key (the contents of an empty [`KeyMemo`] slot, never read).
const NO_FACTS: KeyFacts = KeyFacts {
    sensitive: false,
    id: false,
    code: false,
    session: false,
    app_password: false,
};

/// A key of at most [`MEMO_KEY_MAX`] bytes as three words: its first, middle and last eight
/// bytes (overlapping, and together covering the key) for a key of at least 8 bytes, or its
/// bytes packed into the first word for a shorter one; and its length. Equal tags mean equal
/// keys, so a memo hit costs a few word compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KeyTag {
    words: [u64; 3],
    len: usize,
}

impl KeyTag {
    /// The tag of `bytes` (1 to [`MEMO_KEY_MAX`] bytes).
    #[inline]
    fn of(bytes: &[u8]) -> Self {
        let len = bytes.len();
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let words = if len >= 8 {
            [word(0), word((len - 8) / 2), word(len - 8)]
        } else if len >= 4 {
            // Two overlapping four-byte halves cover 4 to 7 bytes.
            let half = |at: usize| {
                let mut w = [0u8; 4];
                w.copy_from_slice(&bytes[at..at + 4]);
                u64::from(u32::from_le_bytes(w))
            };
            [half(0) | half(len - 4) << 32, 0, 0]
        } else {
            // The first, middle and last bytes cover 1 to 3 bytes.
            [
                u64::from(bytes[0])
                    | u64::from(bytes[len / 2]) << 8
                    | u64::from(bytes[len - 1]) << 16,
                0,
                0,
            ]
        };
        Self { words, len }
    }

    /// The memo set of this tag.
    #[inline]
    fn set(self) -> usize {
        let mixed = self.words[0] ^ self.words[2].rotate_left(29) ^ self.len as u64;
        (mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59) as usize % MEMO_SETS
    }
}

/// The tag of no key (an empty [`KeyMemo`] slot: no key has length 0 there).
const NO_TAG: KeyTag = KeyTag {
    words: [0; 3],
    len: 0,
};

/// A small two-way set-associative memo of [`KeyFacts`]: the same few keys (`id`, `name`,
/// `path`, …) come back in every record of a document and in the arguments of every call of a
/// tool, and looking one up costs a fraction of judging it. The facts depend on the key alone,
/// so one memo per thread serves every walk ([`with_key_memo`]). A slot holds a key's
/// [`KeyTag`] (length 0 marks an empty slot, the empty key is never remembered).
#[derive(Debug)]
pub(crate) struct KeyMemo {
    tags: [KeyTag; 2 * MEMO_SETS],
    facts: [KeyFacts; 2 * MEMO_SETS],
}

thread_local! {
    /// The [`KeyMemo`] of this thread (taken out while a walk uses it).
    static KEY_MEMO: Cell<Option<Box<KeyMemo>>> = const { Cell::new(None) };
}

/// Runs `f` with this thread's [`KeyMemo`] (a fresh one on the thread's first walk, during
/// thread teardown, or if a walk were ever nested in another).
pub(crate) fn with_key_memo<R>(f: impl FnOnce(&mut KeyMemo) -> R) -> R {
    let mut memo = KEY_MEMO
        .try_with(Cell::take)
        .ok()
        .flatten()
        .unwrap_or_else(|| Box::new(KeyMemo::new()));
    let out = f(&mut memo);
    // Teardown: the memo is dropped instead.
    let _ = KEY_MEMO.try_with(|cell| cell.set(Some(memo)));
    out
}

impl KeyMemo {
    /// An empty memo.
    pub(crate) const fn new() -> Self {
        Self {
            tags: [NO_TAG; 2 * MEMO_SETS],
            facts: [NO_FACTS; 2 * MEMO_SETS],
        }
    }

    /// The facts of `key` (remembered when it is short enough).
    #[inline]
    pub(crate) fn facts(&mut self, key: &str) -> KeyFacts {
        let bytes = key.as_bytes();
        let len = bytes.len();
        if len == 0 || len > MEMO_KEY_MAX {
            return KeyFacts::of(key);
        }
        let tag = KeyTag::of(bytes);
        let first = 2 * tag.set();
        for slot in [first, first + 1] {
            if self.tags[slot] == tag {
                return self.facts[slot];
            }
        }
        self.remember(key, tag, first)
    }

    /// Judges `key` and remembers its facts in the set starting at slot `first`.
    #[cold]
    fn remember(&mut self, key: &str, tag: KeyTag, first: usize) -> KeyFacts {
        let facts = KeyFacts::of(key);
        // The second way when the first is taken and the second is free, else the first.
        let slot = if self.tags[first].len != 0 && self.tags[first + 1].len == 0 {
            first + 1
        } else {
            first
        };
        self.tags[slot] = tag;
        self.facts[slot] = facts;
        facts
    }
}

/// [`redact_field_value_cow`] on an owned string, in place (a masked secret reuses its buffer),
/// given the [`KeyFacts`] of `key`.
#[inline]
pub(crate) fn redact_field_value_in_place_with(
    key: &str,
    facts: KeyFacts,
    parent_key: Option<&str>,
    cause_chain: bool,
    value: &mut String,
    config: &RedactionConfig,
) {
    if !facts.sensitive_in(parent_key) {
        if let Cow::Owned(redacted) = redact_plain_text(facts.app_password, value, config) {
            *value = redacted;
        }
    } else if !keeps_sensitive_value_with(key, facts, parent_key, cause_chain, value) {
        mask_in_place(value);
    }
}

/// The pattern layer for a value under a key that is not sensitive (plus app passwords under
/// message-like keys).
fn redact_plain_field<'a>(key: &str, value: &'a str, config: &RedactionConfig) -> Cow<'a, str> {
    redact_plain_text(is_app_password_key(key), value, config)
}

/// [`redact_plain_field`] given whether the key is an app-password key.
#[inline]
fn redact_plain_text<'a>(
    app_password_key: bool,
    value: &'a str,
    config: &RedactionConfig,
) -> Cow<'a, str> {
    let (text, _) = redact_text_cow(value, config);
    if !app_password_key {
        return text;
    }
    match mask_app_passwords(&text) {
        Cow::Owned(masked) => Cow::Owned(masked),
        Cow::Borrowed(_) => text,
    }
}

/// Whether a value under the sensitive `key` is kept: already a mask, a shell reference to the
/// key itself, a `$WORKSPACE_DIR/….jsonl` session path, or a known transport error code at the
/// end of a cause chain.
fn keeps_sensitive_value(
    key: &str,
    parent_key: Option<&str>,
    cause_chain: bool,
    value: &str,
) -> bool {
    is_masked(value)
        || is_own_shell_reference(key, value)
        || (key.eq_ignore_ascii_case("session") && is_workspace_session_path(value))
        || (cause_chain
            && key.eq_ignore_ascii_case("code")
            && parent_key.is_some_and(is_cause_key)
            && TRANSPORT_ERROR_CODES.contains(&value))
}

/// [`keeps_sensitive_value`] given the [`KeyFacts`] of `key`.
#[inline]
fn keeps_sensitive_value_with(
    key: &str,
    facts: KeyFacts,
    parent_key: Option<&str>,
    cause_chain: bool,
    value: &str,
) -> bool {
    is_masked(value)
        || is_own_shell_reference(key, value)
        || (facts.session && is_workspace_session_path(value))
        || (cause_chain
            && facts.code
            && parent_key.is_some_and(is_cause_key)
            && TRANSPORT_ERROR_CODES.contains(&value))
}

/// Keys whose text may quote an app-specific password (`abcd-efgh-ijkl-mnop`);
/// `is_app_password_key` matches exactly these (case-insensitively).
#[cfg(test)]
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
    // `APP_PASSWORD_KEYS` by length.
    let candidates: &[&str] = match key.len() {
        4 => &["text"],
        5 => &["apple", "error"],
        6 => &["icloud", "detail", "reason"],
        7 => &["content", "message", "details"],
        12 => &["errormessage"],
        19 => &["appspecificpassword"],
        21 => &["app-specific-password", "app_specific_password"],
        _ => return false,
    };
    candidates.iter().any(|k| k.eq_ignore_ascii_case(key))
}

/// Four dash-separated groups of four lowercase ASCII letters.
fn is_app_password(word: &[u8]) -> bool {
    word.len() == APP_PASSWORD_LEN
        && word.iter().enumerate().all(|(i, &b)| {
            if i % 5 == 4 {
                b == b'-'
            } else {
                b.is_ascii_lowercase()
            }
        })
}

/// The length of an app-specific password (`abcd-efgh-ijkl-mnop`).
const APP_PASSWORD_LEN: usize = 19;

/// Masks app-specific passwords: words (runs of word characters) that are four dash-separated
/// groups of four lowercase letters.
///
/// Every such word has its first `-` four bytes after its start, so only the dashes of the text
/// are looked at (found with `memchr`, many bytes per step): the texts under these keys are the
/// long ones (file contents, messages), and most of their words are not candidates.
fn mask_app_passwords(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    if bytes.len() < APP_PASSWORD_LEN {
        return Cow::Borrowed(text);
    }
    let mut rw = Rewrite::new(text);
    for dash in memchr::memchr_iter(b'-', bytes) {
        let Some(start) = dash.checked_sub(4) else {
            continue;
        };
        let end = start + APP_PASSWORD_LEN;
        if end > bytes.len() {
            break;
        }
        // A whole word: no word character right before or right after it.
        let word_start = start == 0 || !is_word_byte(bytes[start - 1]);
        let word_end = bytes.get(end).is_none_or(|&b| !is_word_byte(b));
        if word_start && word_end && is_app_password(&bytes[start..end]) {
            // All ASCII, so `start` and `end` are character boundaries.
            rw.mask_whole(start, end, false);
        }
    }
    rw.finish()
}

fn is_workspace_session_path(value: &str) -> bool {
    value.starts_with("$WORKSPACE_DIR/") && value.ends_with(".jsonl")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A proptest configuration of `n` cases that records no failures on disk.
    /// `n` cases, or `TETHER_PROPTEST_CASES` of them (longer runs by hand).
    fn cases(n: u32) -> proptest::prelude::ProptestConfig {
        proptest::prelude::ProptestConfig {
            cases: std::env::var("TETHER_PROPTEST_CASES")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(n),
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        }
    }

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
            "PGPASSWORD",
            "MYSQL_PWD",
            "Dbpassword",
            "APPSECRET",
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
            "pwd",
            "OLDPWD",
            "monkey",
            "bypass",
            "tokenizer",
            "max_tokens",
            "secretary",
            "csrftoken",
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

    /// [`mask_app_passwords`] as first written: every word of the text judged in turn.
    fn mask_app_passwords_reference(text: &str) -> Cow<'_, str> {
        let bytes = text.as_bytes();
        let mut rw = Rewrite::new(text);
        let mut i = 0;
        while i < bytes.len() {
            if !is_word_byte(bytes[i]) || (i > 0 && is_word_byte(bytes[i - 1])) {
                i += 1;
                continue;
            }
            let j = word_end(bytes, i);
            let word = &text[i..j];
            if is_app_password(word.as_bytes()) {
                let edges = safe_mask_edges(word, false);
                rw.replace_with(i, j, |out| push_mask(out, word, edges));
            }
            i = j;
        }
        rw.finish()
    }

    #[test]
    fn app_passwords_at_the_edges_of_a_text() {
        for (text, expected) in [
            ("abcd-efgh-ijkl-mnop", "abcd-e…mnop"),
            (
                "abcd-efgh-ijkl-mnop abcd-efgh-ijkl-mnop",
                "abcd-e…mnop abcd-e…mnop",
            ),
            ("x-abcd-efgh-ijkl-mnop", "x-abcd-efgh-ijkl-mnop"),
            ("abcd-efgh-ijkl-mnop-", "abcd-efgh-ijkl-mnop-"),
            ("abcd-efgh-ijkl-mnopq", "abcd-efgh-ijkl-mnopq"),
            ("é abcd-efgh-ijkl-mnop.", "é abcd-e…mnop."),
            ("abcd-efgh-ijkl-mno", "abcd-efgh-ijkl-mno"),
        ] {
            assert_eq!(mask_app_passwords(text), expected, "{text}");
            assert_eq!(mask_app_passwords_reference(text), expected, "{text}");
        }
    }

    proptest::proptest! {
        #![proptest_config(cases(2048))]

        /// Texts made of app passwords, their near misses and the bytes around words: the
        /// dash-driven search masks exactly what judging every word masks.
        #[test]
        fn app_passwords_match_the_word_by_word_reference(
            picks in proptest::collection::vec(0usize..64, 0..40),
        ) {
            const PIECES: &[&str] = &[
                "abcd-efgh-ijkl-mnop", "abcd-efgh-ijkl-mnoP", "abcd-efgh-ijkl", "-mnop", "abcd",
                "-", " ", ".", "_", "x", "Z", "9", "é", "\n", "—", "wxyz-", "q-rstu-vwxy-zabc-defg",
            ];
            let text: String = picks.iter().map(|&p| PIECES[p % PIECES.len()]).collect();
            proptest::prop_assert_eq!(
                mask_app_passwords(&text),
                mask_app_passwords_reference(&text),
                "{:?}",
                text
            );
        }
    }

    #[test]
    fn key_tables_match_their_reference_lists() {
        for entry in SENSITIVE_COMPACT {
            assert!(is_sensitive_key(entry), "{entry}");
            assert!(is_sensitive_key(&entry.to_ascii_uppercase()), "{entry}");
            let hash = entry.bytes().fold(COMPACT_HASH_START, compact_hash_step);
            assert!(is_sensitive_compact(entry.as_bytes(), hash), "{entry}");
        }
        for suffix in CAMEL_SUFFIXES {
            assert!(is_sensitive_key(&format!("my{suffix}")), "{suffix}");
        }
        for suffix in ENV_SUFFIXES {
            assert!(is_sensitive_key(&format!("MY_{suffix}")), "{suffix}");
        }
        for suffix in COMPOUND_SUFFIXES {
            assert!(is_sensitive_key(&format!("db{suffix}")), "{suffix}");
            let upper = suffix.to_ascii_uppercase();
            assert!(is_sensitive_key(&format!("PG{upper}")), "{suffix}");
            assert!(is_sensitive_key(&format!("Db{suffix}")), "{suffix}");
        }
        for key in APP_PASSWORD_KEYS {
            assert!(is_app_password_key(key), "{key}");
            assert!(is_app_password_key(&key.to_ascii_uppercase()), "{key}");
        }
        for key in [
            "texts",
            "apples",
            "messages",
            "app-specific-passwords",
            "name",
        ] {
            assert!(!is_app_password_key(key), "{key}");
        }
    }

    /// The key rules written plainly, as `docs/redaction.md` states them (the implementation
    /// before its quick rejections, length gate and hash table): the oracle of
    /// [`is_sensitive_key`].
    fn is_sensitive_key_reference(key: &str) -> bool {
        let bytes = key.as_bytes();
        let Some(&first) = bytes.first() else {
            return false;
        };
        if !first.is_ascii_alphabetic()
            || !bytes
                .iter()
                .all(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        {
            return false;
        }
        if compact_in(key, SENSITIVE_COMPACT) {
            return true;
        }
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
        let lower = key.to_ascii_lowercase();
        if COMPOUND_SUFFIXES
            .iter()
            .any(|suffix| lower.ends_with(suffix))
        {
            return true;
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

    /// A key of pieces: table entries, suffixes and benign prefixes in some case, separators,
    /// letters, digits and bytes no sensitive key holds.
    fn key_of(picks: &[(usize, u8)]) -> String {
        let mut key = String::new();
        for &(pick, case) in picks {
            let piece: String = match pick % 8 {
                0 | 1 => SENSITIVE_COMPACT[pick / 8 % SENSITIVE_COMPACT.len()].to_owned(),
                2 => ENV_SUFFIXES[pick / 8 % ENV_SUFFIXES.len()].to_owned(),
                3 => CAMEL_SUFFIXES[pick / 8 % CAMEL_SUFFIXES.len()].to_owned(),
                4 => BENIGN_KEY_PREFIXES[pick / 8 % BENIGN_KEY_PREFIXES.len()].to_owned(),
                5 => ["_", "-", "__", "_-"][pick / 8 % 4].to_owned(),
                6 => ["a", "Z", "x", "9", "0", "id", "my", "aws", "Api"][pick / 8 % 9].to_owned(),
                _ => [".", " ", "é", "$", "/", ":"][pick / 8 % 6].to_owned(),
            };
            // Each letter upper-cased where `case` has a bit set (cycling over its 8 bits).
            key.extend(piece.chars().enumerate().map(|(k, c)| {
                if case >> (k % 8) & 1 == 1 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            }));
        }
        key
    }

    proptest::proptest! {
        #![proptest_config(cases(8192))]

        /// The quick rejections (first and last bytes, entry lengths by last byte) and the
        /// hash table of [`is_sensitive_key`], and the first-byte gate of the free-text
        /// exemptions, decide every key as the plain rules do.
        #[test]
        fn the_key_rules_match_their_plain_reading(
            picks in proptest::collection::vec((0usize..1024, proptest::prelude::any::<u8>()), 0..5),
        ) {
            let key = key_of(&picks);
            let sensitive = is_sensitive_key_reference(&key);
            proptest::prop_assert_eq!(is_sensitive_key(&key), sensitive, "{:?}", key);
            proptest::prop_assert_eq!(
                is_text_key(&key),
                sensitive && !compact_in(&key, TEXT_EXEMPT_COMPACT),
                "{:?}",
                key
            );
            proptest::prop_assert_eq!(KeyFacts::of(&key).sensitive, sensitive, "{:?}", key);
        }
    }

    #[test]
    fn the_length_gate_keeps_the_rules() {
        // Rejected by the length of their compact entries, then judged by the camel and
        // compound suffixes.
        for (key, sensitive) in [
            ("command", false),
            ("workdir", false),
            ("background", false),
            ("myToken", true),
            ("userPassword", true),
            ("openaiApiKey", true),
            ("a.bToken", false),
            ("a bToken", false),
            ("Token", true),
            ("xToken", true),
            ("mytoken", false),
            ("PGPASSWORD", true),
            ("dbsecret", true),
            // Separators: the full rules.
            ("set-cookie", true),
            ("client_secret", true),
            ("primary_key", false),
            ("my_stuff", false),
        ] {
            assert_eq!(is_sensitive_key(key), sensitive, "{key}");
        }
    }

    #[test]
    fn key_tags_tell_keys_apart() {
        let base = "abcdefghijklmnopqrstuvwx";
        for len in 1..=MEMO_KEY_MAX {
            let key = &base[..len];
            assert_eq!(KeyTag::of(key.as_bytes()), KeyTag::of(key.as_bytes()));
            for at in 0..len {
                let mut other = key.as_bytes().to_vec();
                other[at] = b'Z';
                assert_ne!(
                    KeyTag::of(key.as_bytes()),
                    KeyTag::of(&other),
                    "{key} at {at}"
                );
            }
            if len > 1 {
                assert_ne!(
                    KeyTag::of(key.as_bytes()),
                    KeyTag::of(&key.as_bytes()[..len - 1])
                );
            }
        }
    }

    #[test]
    fn the_memo_gives_the_facts_of_each_key() {
        let keys: Vec<String> = (0..200)
            .map(|i| format!("k{}{}", "x".repeat(i % 30), i))
            .chain(["token", "id", "code", "session", "text", "apiKey"].map(str::to_owned))
            .collect();
        with_key_memo(|memo| {
            for _ in 0..2 {
                for key in &keys {
                    assert_eq!(memo.facts(key), KeyFacts::of(key), "{key}");
                    // A walk nested in another gets a memo of its own.
                    assert_eq!(with_key_memo(|inner| inner.facts(key)), KeyFacts::of(key));
                }
            }
        });
    }

    /// The byte-pair filter as it was before [`PAIR`] (two loads and a digit count per
    /// byte): the oracle of [`pattern_families`].
    fn pattern_families_reference(bytes: &[u8]) -> u16 {
        let mut families = 0u16;
        let mut first = 0u16;
        let mut digits = 0u32;
        for &b in bytes {
            let entry = PAIR_FIRST[usize::from(b)];
            families |= first & PAIR_SECOND[usize::from(b)];
            first = entry & !DIGIT_BIT;
            digits += u32::from(entry >> 15);
        }
        if digits >= CARD_MIN_DIGITS && has_card_run(bytes) {
            families |= FAMILY_EXTRA;
        }
        let dot_before_word = bytes.windows(2).any(|w| w[0] == b'.' && is_word_byte(w[1]));
        if bytes
            .windows(2)
            .any(|w| matches!(w[0], b' ' | b'\t' | b'\n' | b'"' | b'\'') && w[1] == b'-')
        {
            families |= FAMILY_FLAG;
        }
        if families & FAMILY_TOKEN_VENDOR != 0 && !(dot_before_word && has_two_dots(bytes)) {
            families &= !FAMILY_TOKEN_VENDOR;
        }
        families | (first & FAMILY_SINGLE)
    }

    proptest::proptest! {
        #![proptest_config(cases(4096))]

        /// Texts over the bytes the filter looks at (and a few it does not), digits and
        /// separators in runs: the one-load filter agrees with the reference.
        #[test]
        fn pattern_families_match_the_reference(
            picks in proptest::collection::vec(0usize..96, 0..48),
        ) {
            const ALPHABET: &[u8] = b"$=:-_./ 1234567890KSITRAJEaebBdyLGgkptxwcoUhz\\\"'\t\n{}%+@#?&";
            const WORDS: &[&[u8]] = &[b"bearer", b"BEARER", b"Basic", b"bAsIc", b"dapi", b"ya29", b"eyJ", b"1//", b"data", b"api"];
            let mut text = Vec::new();
            for &p in &picks {
                match p.checked_sub(64) {
                    Some(w) => text.extend_from_slice(WORDS[w % WORDS.len()]),
                    None => text.push(ALPHABET[p % ALPHABET.len()]),
                }
            }
            let new = pattern_families(&text);
            let reference = pattern_families_reference(&text);
            let shown = String::from_utf8_lossy(&text);
            // Never a family the pair filter alone rules out.
            proptest::prop_assert_eq!(new & !reference, 0, "{:?}", shown);
            // Only the families confirmed by a word can be dropped, and only when the text
            // lacks that word.
            let dropped = reference & !new;
            proptest::prop_assert_eq!(
                dropped & !(FAMILY_TOKEN_UPPER | FAMILY_EXTRA | FAMILY_BEARER | FAMILY_BASIC),
                0,
                "{:?}",
                shown
            );
            let lower = shown.to_ascii_lowercase();
            if dropped & FAMILY_BEARER != 0 {
                proptest::prop_assert!(!lower.contains("bearer"), "{:?}", shown);
            }
            if dropped & FAMILY_BASIC != 0 {
                proptest::prop_assert!(!lower.contains("basic"), "{:?}", shown);
            }
            if dropped & FAMILY_TOKEN_UPPER != 0 {
                proptest::prop_assert!(!shown.contains("dapi"), "{:?}", shown);
            }
            if dropped & FAMILY_EXTRA != 0 {
                proptest::prop_assert!(!shown.contains("ya29"), "{:?}", shown);
            }
        }
    }

    #[test]
    fn digits_are_counted_in_every_byte_position() {
        for text in [
            "",
            "0123456789",
            "a0b1c2d3e4f5g6h7i8j9",
            "/:09\u{7f}\u{80}é٣0",
            "0000000000000000000000000000001",
            "no digits at all here, just words",
        ] {
            let expected = text.bytes().filter(u8::is_ascii_digit).count();
            assert_eq!(count_digits(text.as_bytes()), expected, "{text}");
        }
        let every_byte: Vec<u8> = (0..=255u8).collect();
        assert_eq!(count_digits(&every_byte), 10);
    }

    #[test]
    fn pattern_families_agree_on_card_shapes() {
        for text in [
            "4111 1111 1111 1111",
            "4 1 1 1 1 1 1 1 1 1 1 1 1",
            "4-1-1-1-1-1-1-1-1-1-1-1-1",
            "4  -  1 1 1 1 1 1 1 1 1 1 1 1",
            "user 7 with 123456789012",
            "1234567890123",
            "123456789012",
            "12.34.56.78.90.12.34",
        ] {
            assert_eq!(
                pattern_families(text.as_bytes()),
                pattern_families_reference(text.as_bytes()),
                "{text}"
            );
        }
    }

    /// Pieces of the differential scan tests: parts of every secret shape of the pattern
    /// layer, near misses, and the bytes that end words, start operators or quote values.
    const SCAN_PIECES: &[&str] = &[
        "sk-",
        "sk-proj-",
        "sk-ant-",
        "ghp_",
        "github_pat_",
        "xoxb-",
        "glpat-",
        "npm_",
        "hf_",
        "AKIA",
        "ASIA",
        "AIza",
        "LTAI",
        "GR1348941",
        "gAAAA",
        "ATATT3",
        "dapi",
        "eyJ",
        "ya29.",
        "1//0",
        "SG.",
        "dp.pt.",
        "Bearer",
        "bearer",
        "BEARER",
        "Basic",
        "basic",
        "BASIC",
        "dXNlcjpwYXNzd29yZA==",
        "--password",
        "--api-key",
        "--token",
        "-p",
        "-u",
        "-U",
        "-a",
        "-token",
        "-storepass",
        "mysql",
        "sshpass",
        "docker",
        "login",
        "smbclient",
        "gh secret set",
        "--body",
        "-b",
        "fly secrets set",
        "vault kv put",
        "kubectl create secret",
        "--from-literal=",
        "FOO=",
        "ConvertTo-SecureString",
        "-AsPlainText",
        "\"",
        "'",
        "(",
        "<ns:",
        "<wsse:Password Type=\"x\">",
        "</wsse:Password>",
        " a=\"1\">",
        ";",
        "value=",
        "key=",
        "<key>",
        "</key>",
        "<string>",
        "admin%",
        "--user",
        "admin:",
        "<password>",
        "</",
        "<",
        ">",
        "-----BEGIN",
        "PRIVATE KEY-----",
        "-----END",
        "password",
        "token",
        "api_key",
        "client_secret",
        "Authorization",
        "secret",
        "code",
        "sig",
        "=",
        ":",
        "://",
        "@",
        "?",
        "&",
        "#",
        "\"",
        "'",
        " ",
        "  ",
        "\n",
        "\t",
        "\\",
        "\\n",
        "\\t",
        "\\u0020",
        "\\x0a",
        "\\\"",
        ".",
        "-",
        "_",
        "/",
        "$",
        "${",
        "}",
        "abcdefgh12345678",
        "ABCDEFGHIJKLMNOP",
        "Zx9Qw8Er7Ty6Ui5O",
        "0123456789",
        "4111",
        "1111 ",
        "12345678901234567",
        "é",
        "\u{200B}",
        "\u{3164}",
        "%5F",
        "%20",
        "%0A",
        "+",
        "postgres",
        "https",
        "hooks.slack.com/services/",
        "discord.com/api/webhooks/",
        "bot",
        "123456789",
        "abcd-efgh-ijkl-mnop",
        "x",
        "Z",
        "9",
        "***",
        "…",
    ];

    /// A whole secret of each shape of the pattern layer (and one near miss of `Basic`).
    const WHOLE_SECRETS: &[&str] = &[
        "OPENAI_API_KEY=abc123def456ghi789",
        "--api-key k3yMaterial991",
        "curl -u admin:k3yMaterial992",
        "<password>k3yMaterial993</password>",
        "https://example.test/callback?code=oauthGrantValue5678&state=x",
        "client%5Fsecret=opaqueOauthSecret77",
        "Authorization: Bearer opaqueTokenValue12345",
        "Basic dXNlcjpzM2NyM3QtcGFzcw==",
        "basic dXNlcjpzM2NyM3QtcGFzcw== Bar",
        "basic dXNlcjpzM2NyM3QtcGFzcw==",
        "AKIAIOSFODNN7EXAMPLE",
        "4111 1111 1111 1111",
        "postgres://admin:s3cr3t@db.internal:5432/app",
        "sk-proj-abcdefghijklmnop1234",
        "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
        "ya29.a0AfH6SMBxyz123456",
        "1//0gLx-abcdefghijklmnop",
        "SG.abcdefghijklmnop.qrstuvwxyz0123456789",
        "dp.pt.abcdefghijklmnopqrstuvwxyz",
        "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
        "https://hooks.slack.com/services/T000/B000/XXXXXXXX",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
        "${OPENAI_API_KEY}",
        "\"password\": \"hunter2hunter2\"",
        "client_se\u{200B}cret=opaque1234567",
        "client_secret\u{3164}=opaque1234567",
        "mysql -uroot -pk3yMaterial994",
        "sshpass -p 'k3y Material 995' ssh",
        "docker login -u x -p k3yMaterial996",
        "go run . -token k3yMaterial997",
        "--password \"k3y Material 998\"",
        "<add key=\"ApiKey\" value=\"k3yMaterial999\"/>",
        "<key>token</key><string>k3yMaterial990</string>",
        "<wsse:Password Type=\"#PasswordText\">k3yMaterial981</wsse:Password>",
        "<ns:password>k3yMaterial982</ns:password>",
        "gh secret set X --body k3yMaterial983",
        "fly secrets set FOO=k3yMaterial984",
        "kubectl create secret generic x --from-literal=pw=k3yMaterial985",
        "$p = ConvertTo-SecureString 'k3yMaterial986' -AsPlainText",
    ];

    /// A text of [`SCAN_PIECES`] and, one pick in eight, [`WHOLE_SECRETS`].
    fn text_of_pieces(picks: &[usize]) -> String {
        picks
            .iter()
            .map(|&p| {
                if p % 8 == 0 {
                    WHOLE_SECRETS[p / 8 % WHOLE_SECRETS.len()]
                } else {
                    SCAN_PIECES[p % SCAN_PIECES.len()]
                }
            })
            .collect()
    }

    /// What a scan made of a text and whether anything matched (whether it is
    /// [`Scan::unsettled`] depends on which checks ran, which is what the gates change).
    fn outcome(scan: Scan<'_>) -> (String, bool) {
        (scan.text.into_owned(), scan.matched)
    }

    /// [`scan_words`] with and without its gates on `text` and `families`: same output,
    /// same verdict.
    fn assert_gates_change_nothing(text: &str, families: u16) {
        let config = RedactionConfig::default();
        let gated = outcome(scan_words::<true>(text, &config, families, false));
        let ungated = outcome(scan_words::<false>(text, &config, families, false));
        assert_eq!(gated, ungated, "families {families:#x}: {text:?}");
    }

    /// [`scan_words`] without its gates, with the families of the byte-pair filter and with
    /// every family: same output, same verdict.
    fn assert_filter_changes_nothing(text: &str) {
        let config = RedactionConfig::default();
        let filtered = outcome(scan_words::<false>(
            text,
            &config,
            pattern_families(text.as_bytes()),
            false,
        ));
        let every = outcome(scan_words::<false>(text, &config, FAMILY_ALL, false));
        assert_eq!(filtered, every, "{text:?}");
    }

    /// An XML element's end tag after its masked text asks for no second scan (the text was
    /// the start tag's to mask); after a mask that may have taken a `<` or a `>` out of the
    /// text, it does.
    #[test]
    fn an_end_tag_asks_for_a_second_scan_only_after_a_mask_that_moves_tags() {
        let config = RedactionConfig::default();
        let scan = |text: &str| {
            let scan = scan_words::<true>(text, &config, pattern_families(text.as_bytes()), false);
            (scan.text.into_owned(), scan.unsettled)
        };
        for text in [
            "<password>hunter2hunter2</password>",
            "<ns:password>hunter2hunter2</ns:password>",
            "<password a=\"1\">hunter2hunter2</password>",
        ] {
            let (once, unsettled) = scan(text);
            assert!(!unsettled, "{text}: {once}");
            assert!(!once.contains("hunter2"), "{text}: {once}");
        }
        // `token=a<b>c` masked: in the output the element holds text alone.
        let text = "<password a=\"1\">x token=a<b>c </password>";
        let (once, unsettled) = scan(text);
        assert_eq!(once, "<password a=\"1\">x token=*** </password>");
        assert!(unsettled);
        assert_eq!(redact_text(text), "<password a=\"1\">*** </password>");
    }

    #[test]
    fn the_gates_and_the_filter_change_nothing_on_whole_secrets() {
        for &secret in WHOLE_SECRETS {
            for text in [
                secret.to_owned(),
                format!("see {secret} here"),
                format!("x={secret}\n{secret}"),
            ] {
                assert_gates_change_nothing(&text, pattern_families(text.as_bytes()));
                assert_gates_change_nothing(&text, FAMILY_ALL);
                assert_filter_changes_nothing(&text);
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(cases(8192))]

        /// The word gates of [`scan_words`] (first byte, length and next byte tables, the
        /// jump between the bytes a few families start at, the skip after a word followed by
        /// a space) only skip work: the scan masks exactly what every check at every word
        /// start masks, with the families of the byte-pair filter and with all of them.
        #[test]
        fn the_word_gates_change_nothing(
            picks in proptest::collection::vec(0usize..1024, 0..40),
        ) {
            let text = text_of_pieces(&picks);
            assert_gates_change_nothing(&text, pattern_families(text.as_bytes()));
            assert_gates_change_nothing(&text, FAMILY_ALL);
        }

        /// A redacted text redacts to itself: nothing a mask keeps of its secret (six
        /// characters at the head, four at the tail), with the text around it, reads as a
        /// secret the next time.
        #[test]
        fn redacting_pieces_of_secrets_is_idempotent(
            picks in proptest::collection::vec(0usize..1024, 0..40),
        ) {
            let text = text_of_pieces(&picks);
            let once = redact_text(&text);
            proptest::prop_assert_eq!(redact_text(&once), once.clone(), "{:?}", text);
        }

        /// The byte-pair filter only rules out families that cannot match: the ungated scan
        /// with the filter's families masks what it masks with every family.
        #[test]
        fn the_pair_filter_changes_nothing(
            picks in proptest::collection::vec(0usize..1024, 0..40),
        ) {
            assert_filter_changes_nothing(&text_of_pieces(&picks));
        }
    }

    #[test]
    fn prefixes_by_first_byte_are_the_prefixes_with_that_first_byte() {
        for (list, table) in [
            (TOKEN_PREFIXES, &TOKEN_PREFIXES_BY_FIRST),
            (VENDOR_PREFIXES, &VENDOR_PREFIXES_BY_FIRST),
        ] {
            for b in 0..=255u8 {
                let found: Vec<&str> = prefixes_by_first(list, table, b).collect();
                let expected: Vec<&str> = list
                    .iter()
                    .copied()
                    .filter(|p| p.as_bytes()[0] == b)
                    .collect();
                assert_eq!(found, expected, "{:?}", char::from(b));
            }
        }
        let embeddable: Vec<&str> = bits(EMBEDDABLE_BITS).map(|k| TOKEN_PREFIXES[k]).collect();
        assert_eq!(embeddable, EMBEDDABLE_PREFIXES);
    }

    #[test]
    fn embeddable_prefixes_are_the_github_gitlab_and_slack_run_of_the_token_prefixes() {
        // The slice of `TOKEN_PREFIXES` is taken by position: a reordered list shows here.
        assert_eq!(
            (EMBEDDABLE_PREFIXES.first(), EMBEDDABLE_PREFIXES.last()),
            (Some(&"ghp_"), Some(&"xapp-"))
        );
        let others: Vec<&&str> = EMBEDDABLE_PREFIXES
            .iter()
            .filter(|p| {
                !["gh", "github_", "gl", "xox", "xapp"]
                    .iter()
                    .any(|v| p.starts_with(v))
            })
            .collect();
        assert!(others.is_empty(), "{others:?}");
        for prefix in EMBEDDABLE_PREFIXES {
            let word = format!("build-{prefix}{}", "abcdefgh".repeat(2));
            assert_eq!(embedded_token_start(&word), Some(6), "{word}");
        }
        assert_eq!(embedded_token_start("build-sk_abcdefghabcdefgh"), None);
    }

    #[test]
    fn pattern_families_cover_every_pattern() {
        for prefix in VENDOR_PREFIXES {
            let word = format!("x {prefix}{} y", "abcdefgh".repeat(4));
            assert_ne!(
                pattern_families(word.as_bytes()) & FAMILY_TOKEN,
                0,
                "{prefix}"
            );
            assert_ne!(redact_text(&word), word, "{prefix}");
        }
        for prefix in TOKEN_PREFIXES {
            let word = format!(
                "x {prefix}{} y",
                "abcdefgh".repeat(4)[..min_body(prefix)].to_owned()
            );
            assert_ne!(
                pattern_families(word.as_bytes()) & FAMILY_TOKEN,
                0,
                "{prefix}"
            );
            assert_ne!(redact_text(&word), word, "{prefix}");
        }
        for (text, family) in [
            ("${A:-b}", FAMILY_SHELL),
            ("a=b", FAMILY_ASSIGNMENT),
            ("a: b", FAMILY_ASSIGNMENT),
            ("x --flag", FAMILY_FLAG),
            ("BEARER abc", FAMILY_BEARER),
            ("Basic abc", FAMILY_BASIC),
            ("basic abc", FAMILY_BASIC),
            ("card 4111111111111111", FAMILY_EXTRA),
            ("eyJhbGciOiJIUzI1NiJ9.e30.x", FAMILY_EXTRA),
        ] {
            assert_ne!(pattern_families(text.as_bytes()) & family, 0, "{text}");
        }
        for text in [
            "",
            "plain words only",
            "/home/dev/projects/tether",
            "item-7",
            "C.UTF-8",
            "The build runs.",
        ] {
            assert_eq!(pattern_families(text.as_bytes()), 0, "{text}");
        }
        for text in [
            "SG.AbCdEfGhIjKlMnOpQrStUv.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abc",
            "dp.pt.AbCdEfGhIjKlMnOpQrStUvWxYz",
            "MTIzNDU2Nzg5MDEyMzQ1Njc4.GAbCdE.AbCdEfGhIjKlMnOpQrStUvWxYz0123",
        ] {
            assert_ne!(
                pattern_families(text.as_bytes()) & FAMILY_TOKEN_VENDOR,
                0,
                "{text}"
            );
            assert_ne!(redact_text(text), text, "{text}");
        }
    }

    #[test]
    fn masking_in_place_equals_mask_token() {
        for value in [
            "",
            "ab",
            "***",
            "hunter2",
            "sk-1234567890abcdefXYZ",
            "ééééééééééééééééééééé",
            "日本語のパスワードは長い秘密の文字列です",
            "abc…defghijklmnopqrstu",
            "abcdefghijklmnopq…rst",
            "🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑🔑",
            "abcdefghijklmnopq",
            "abcdefghijklmnopqr",
            "abcdefghijklmnopqé",
            "éabcdefghijklmnopqrs",
        ] {
            let mut owned = value.to_owned();
            mask_in_place(&mut owned);
            assert_eq!(owned, mask_token(value), "{value}");
        }
    }

    #[test]
    fn mask_recognition_follows_its_definition() {
        // Eleven characters, the seventh the only ellipsis (or `***`), whatever the bytes.
        let definition = |v: &str| {
            let chars: Vec<char> = v.chars().collect();
            v == MASK
                || (chars.len() == 11
                    && chars[6] == ELLIPSIS
                    && chars.iter().filter(|c| **c == ELLIPSIS).count() == 1)
        };
        for value in [
            "***",
            "**",
            "****",
            "sk-123…fXYZ",
            "sk-123…fXY",
            "sk-1234…XYZ",
            "sk-12…fXYZa",
            "sk-123…f…YZ",
            "sk-123-fXYZ",
            "éééééé…ab日d",
            "ééééé…abcde",
            "日本語のパス…ワードは",
            "🔑🔑🔑🔑🔑🔑…🔑🔑🔑🔑",
            "🔑🔑🔑🔑🔑🔑🔑…🔑🔑🔑",
            "abcdefghijklm",
            "abcdef…",
        ] {
            assert_eq!(is_masked(value), definition(value), "{value}");
        }
    }

    #[test]
    fn own_shell_references_after_any_leading_whitespace() {
        for (value, own) in [
            ("$DISCORD_BOT_TOKEN", true),
            ("${DISCORD_BOT_TOKEN:-}", true),
            (" ${discord_bot_token}", true),
            ("\t$DISCORD_BOT_TOKEN", true),
            ("\u{b}$DISCORD_BOT_TOKEN", true),
            ("\u{a0}\u{3000}${DISCORD_BOT_TOKEN}", true),
            ("x$DISCORD_BOT_TOKEN", false),
            ("é$DISCORD_BOT_TOKEN", false),
            ("\u{1}$DISCORD_BOT_TOKEN", false),
            ("$OTHER_TOKEN", false),
            ("", false),
            ("$", false),
        ] {
            assert_eq!(
                is_own_shell_reference("DISCORD_BOT_TOKEN", value),
                own,
                "{value:?}"
            );
        }
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

    #[test]
    fn form_pair_keys_reach_their_rules() {
        // Every key `is_query_secret` or `is_gitlab_session` can accept gets past
        // `assignment_key`, whatever its case and separators.
        for key in [
            "code",
            "CODE",
            "c_o-d_e",
            "sig",
            "x-amz-signature",
            "X_Amz_Signature",
            "xamzsignature",
            "signature",
            "_gitlab_session",
            "_GitLab_Session",
        ] {
            assert_eq!(assignment_key(key, Some(b'=')), Some(false), "{key}");
            assert_eq!(assignment_key(key, Some(b':')), None, "{key}");
        }
        assert_eq!(assignment_key("password", Some(b':')), Some(true));
        assert_eq!(assignment_key("name", Some(b'=')), None);
    }
}
