//! A deterministic corpus of tool-argument documents for the differential test of the
//! redaction walks: keys from the sensitive tables and their neighbours, and strings glued
//! together from fragments of every pattern family (token prefixes, assignments, schemes,
//! flags, URLs, cards, JWTs, shell references, PEM blocks, escapes, invisible and other
//! non-ASCII characters).

use serde_json::{Map, Value};

/// A xorshift64* generator: the same sequence on every platform.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (0 is replaced by a fixed non-zero seed).
    pub(crate) fn new(seed: u64) -> Self {
        Self(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Object keys: sensitive names in several spellings, benign look-alikes, message-like keys,
/// parents that change a child's rule (`cause`, `oauth`, `publicShare`), and plain keys.
const KEYS: &[&str] = &[
    "command",
    "workdir",
    "path",
    "name",
    "note",
    "tags",
    "env",
    "headers",
    "url",
    "query",
    "description",
    "id",
    "ID",
    "code",
    "Code",
    "cause",
    "Cause",
    "c_a-use",
    "oauth",
    "provider",
    "providerAuth",
    "publicShare",
    "share",
    "myPublicShareLink",
    "session",
    "Session",
    "sessionKey",
    "token",
    "TOKEN",
    "api_key",
    "apiKey",
    "API-KEY",
    "X-Api-Key",
    "x_api_key",
    "password",
    "Passwd",
    "pass",
    "secret",
    "client_secret",
    "clientSecret",
    "Authorization",
    "proxy-authorization",
    "cookie",
    "Set-Cookie",
    "private_key",
    "primary_key",
    "cache_key",
    "idempotency_key",
    "public_key",
    "_key",
    "key",
    "KEY",
    "OPENROUTER_API_KEY",
    "DISCORD_BOT_TOKEN",
    "GITHUB_TOKEN",
    "my_secret",
    "db_password",
    "botToken",
    "userPassword",
    "openaiApiKey",
    "Token",
    "bearerToken",
    "jwt",
    "signature",
    "cvc",
    "card_number",
    "connectionString",
    "text",
    "Text",
    "content",
    "message",
    "error",
    "errorMessage",
    "details",
    "detail",
    "reason",
    "apple",
    "icloud",
    "app-specific-password",
    "texts",
    "messages",
    "__proto__",
    "",
    "k\u{e9}y",
    "t\u{200B}oken",
    "level",
    "index",
    "child_0",
    "ok",
    "size",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_token",
];

/// Pieces of free text, each aimed at one pattern (or at a near miss of one).
const FRAGMENTS: &[&str] = &[
    "git log --oneline -n 20",
    "The quick brown fox jumps over the lazy dog.",
    "/srv/data/shard-3/file-12.json",
    "item-7",
    "C.UTF-8",
    "alpha",
    "beta",
    "gamma",
    "basic",
    "Basic",
    "Basic dXNlcjpwYXNzd29yZA==",
    "Basic ***",
    "Bearer",
    "Bearer ",
    "bearer abcdef0123456789QWERTY=",
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig",
    "Authorization: Digest username=\"u\", response=\"abc\"",
    "authorization: 'Bearer tok tok'",
    "\\\"Authorization\\\": \\\"Digest response=\\\\\\\"x\\\\\\\"\\\"",
    "Authorization: Token abc123456789",
    "sk-1234567890abcdefXYZ",
    "sk-proj-0001abcdefghijklmnopqrstuvwxyz0123456789",
    "sk-short",
    "ghp_0001ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef",
    "build-ghp_ABCDEFGHIJKLMNOP",
    "github_pat_11ABCDEFG0123456789",
    "glpat-abcdefghijklmnop",
    "xoxb-1234-5678-abcdefgh",
    "AKIAIOSFODNN7EXAMPLE",
    "AIzaSyA1234567890abcdef",
    "gAAAAABhZ0123456789",
    "GR1348941abcdefghij",
    "dapi0123456789abcdef0123456789abcdef",
    "dapi-short",
    "sbp_0123456789abcdefghij0123",
    "sbp_short",
    "ATATT3xFfGF0abcdefghijklmnopqrst",
    "pat-na1-0123456789abcdefghijkl",
    "fm2_abcdefghijklmnopqrstuvwxyz",
    "hf_abcdefghijklmnop",
    "npm_abcdefghijklmnop",
    "custom-secret-abc",
    "SG.AbCdEfGhIjKlMnOpQrStUv.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abc",
    "dp.pt.AbCdEfGhIjKlMnOpQrStUvWxYz",
    "MTIzNDU2Nzg5MDEyMzQ1Njc4.GAbCdE.AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "ya29.a0AfH6SMBabcdefghijklmnop",
    "1//0gabcdefghijklmnopqrstu",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    "eyJhbGci.x",
    "4111 1111 1111 1111",
    "4111-1111-1111-1111",
    "4111111111111111",
    "4111 1111 1111 1111 2 items",
    "5500 0000 0000 0004",
    "378282246310005",
    "1234567890123",
    "123456789:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh",
    "bot123456789:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh",
    "postgres://admin:s3cr3t@db.internal:5432/app",
    "https://user@example.com/x",
    "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX",
    "https://discord.com/api/webhooks/123/abcdefghijk",
    "https://example.com/cb?code=abc123&state=x",
    "?sig=abcdef&x=1",
    "&code=E1",
    "code=E1",
    "body: code=abc",
    "form_body=signature=abcdef",
    "_gitlab_session=0123456789abcdef0123456789abcdef01",
    "_gitlab_session=short",
    "client%5Fsecret=abc123",
    "client_se+cret=abc123",
    "client_secret\u{3164}=hidden123",
    "client_se\u{200B}cret=zw123",
    "password=hunter2",
    "password=pw5 and apikey=sk-live-000005xyz",
    "PASSWORD = 'a\\'bcdefghijklmnopqrstu'",
    "password: \"correct horse battery staple\"",
    "password=\"\"",
    "password='unterminated",
    "\"apiKey\":\"sk-1234567890abcdef\",\"model\":\"gpt-4\"",
    "{\"cvc\":\"123\",\"amount\":\"4200\"}",
    "\\\"token\\\": \\\"abc\\\\\\\"def\\\"",
    "\\ntoken: abcdef",
    "token=${GITHUB_TOKEN}",
    "token=${GITHUB_TOKEN:-fallback123}",
    "${GITHUB_TOKEN:-literalgithub1234567890}",
    "${DISCORD_BOT_TOKEN:-}",
    "$OPENROUTER_API_KEY",
    "OPENROUTER_API_KEY=sk-or-v1-abcdef0123456789",
    "MODEL=gpt-4",
    "key=value",
    "session=abc",
    "x-amz-signature=abc",
    "sort_key=name",
    "a==b",
    "a:-b",
    "url: http://x",
    "run --api-key hunter22 now",
    "--password=secret123",
    "--token \"quoted value\"",
    "--verbose",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----\nMIIEcut",
    "-----BEGIN PUBLIC KEY-----\nMIIE\n-----END PUBLIC KEY-----",
    "use abcd-efgh-ijkl-mnop now",
    "abcd-efgh-ijkl-mnop",
    "***",
    "sk-123…fXYZ",
    "abc…",
    "caf\u{e9} cr\u{e8}me",
    "\u{65e5}\u{672c}\u{8a9e}\u{306e}\u{30d1}\u{30b9}\u{30ef}\u{30fc}\u{30c9}",
    "\u{1f511}\u{1f511}",
    "token\u{a0}=\u{a0}nbsp",
    "ECONNRESET",
    "ENOTFOUND",
    "$WORKSPACE_DIR/sessions/a.jsonl",
    "hunter5-correct-horse",
    "key-5-0123456789abcdef",
    "cs-0123456789",
    "login ok for user 7",
    "Set-Cookie: sid=abc; Path=/",
    "X-Api-Key: key-1-0123456789abcdef",
    "",
];

const SEPARATORS: &[&str] = &[
    " ", " ", " ", "", "\n", "\t", ", ", "; ", "=", ": ", "\"", "'", "&", "?", "\\n", "/", ".",
    "-", "_", "(", ")", "[", "]", "{", "}", "`",
];

/// A string glued together from up to six fragments.
pub(crate) fn text(rng: &mut Rng) -> String {
    let mut out = String::new();
    let parts = 1 + rng.below(6);
    for p in 0..parts {
        if p > 0 {
            out.push_str(rng.pick(SEPARATORS));
        }
        let fragment = rng.pick(FRAGMENTS);
        if rng.below(8) == 0 && !fragment.is_empty() {
            // A cut fragment: near misses and unterminated shapes (cut at a character boundary).
            let mut cut = rng.below(fragment.len());
            while !fragment.is_char_boundary(cut) {
                cut -= 1;
            }
            out.push_str(&fragment[..cut]);
        } else {
            out.push_str(fragment);
        }
    }
    out
}

/// A key: usually from [`KEYS`], sometimes a key-shaped fragment.
fn key(rng: &mut Rng) -> String {
    if rng.below(10) == 0 {
        let k = rng.pick(FRAGMENTS);
        k.chars().take(24).collect()
    } else {
        rng.pick(KEYS).to_owned()
    }
}

/// A document nested at most `depth` levels.
pub(crate) fn document(rng: &mut Rng, depth: usize) -> Value {
    let choice = if depth == 0 {
        rng.below(5)
    } else {
        rng.below(8)
    };
    match choice {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => Value::from(rng.below(100_000) as u64),
        3 | 4 => Value::String(text(rng)),
        5 => Value::Array(
            (0..rng.below(4))
                .map(|_| document(rng, depth - 1))
                .collect(),
        ),
        _ => {
            let mut map = Map::new();
            for _ in 0..rng.below(7) {
                map.insert(key(rng), document(rng, depth - 1));
            }
            Value::Object(map)
        }
    }
}

/// The `index`-th document of the corpus (each from its own seed, so one can be rebuilt
/// alone).
pub(crate) fn corpus_document(index: u64) -> Value {
    let mut rng = Rng::new(index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03);
    let depth = 1 + rng.below(5);
    document(&mut rng, depth)
}

/// FNV-1a over `bytes`.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The digest of a document's outputs (each serialized, separated by a NUL byte).
pub(crate) fn outputs_digest(outputs: &[Value]) -> u64 {
    let mut bytes = Vec::new();
    for out in outputs {
        bytes.extend_from_slice(out.to_string().as_bytes());
        bytes.push(0);
    }
    fnv1a(&bytes)
}
