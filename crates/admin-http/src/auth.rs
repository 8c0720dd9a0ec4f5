//! Bearer-token authentication with read and admin scopes.
//!
//! - `TETHER_ADMIN_TOKEN` grants admin scope (reads and actions);
//! - `TETHER_READ_TOKEN` grants read scope;
//! - `TETHER_ADMIN_TOKENS` / `TETHER_READ_TOKENS` hold named tokens, `name:secret,name:secret`,
//!   so the audit trail says who acted (the single-token variables are named `admin` and `read`);
//! - with no token configured, the (loopback-only) service is open for reads and refuses actions.
//!
//! Tokens are compared in constant time; a secret never appears in a message or a log.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use crate::config::ConfigError;
use crate::error::ApiError;
use crate::state::AppState;

/// The variable holding the admin-scope token.
pub const ADMIN_TOKEN_VAR: &str = "TETHER_ADMIN_TOKEN";
/// The variable holding the read-scope token.
pub const READ_TOKEN_VAR: &str = "TETHER_READ_TOKEN";
/// The variable holding named admin-scope tokens (`name:secret,…`).
pub const ADMIN_TOKENS_VAR: &str = "TETHER_ADMIN_TOKENS";
/// The variable holding named read-scope tokens (`name:secret,…`).
pub const READ_TOKENS_VAR: &str = "TETHER_READ_TOKENS";
/// The actor recorded for a request when no token is configured (loopback only).
pub const ANONYMOUS: &str = "anonymous";

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Read the API.
    Read,
    /// Read and act (delete sessions, expire leases, release quarantine).
    Admin,
}

/// Who a request is: the token's name and its scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name (`admin`, `read`, a name from a `…_TOKENS` list, or [`ANONYMOUS`]).
    pub name: String,
    /// What it may do.
    pub scope: Scope,
}

/// The configured tokens.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    read: Option<String>,
    admin: Option<String>,
    /// Named tokens: (name, secret, scope).
    named: Vec<(String, String, Scope)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("read", &self.read.as_ref().map(|_| "<set>"))
            .field("admin", &self.admin.as_ref().map(|_| "<set>"))
            .field(
                "named",
                &self
                    .named
                    .iter()
                    .map(|(n, _, s)| (n, s))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Parses a `name:secret,name:secret` list; every part must have a non-blank name made of
/// letters, digits, `.`, `_` or `-` and a non-blank secret; names are unique.
fn parse_named(
    variable: &'static str,
    raw: &str,
    scope: Scope,
) -> Result<Vec<(String, String, Scope)>, ConfigError> {
    let refuse = |why: &str| ConfigError::InvalidTokenList {
        variable,
        reason: why.to_owned(),
    };
    let mut out: Vec<(String, String, Scope)> = Vec::new();
    for (i, part) in raw.split(',').enumerate() {
        let n = i + 1;
        let Some((name, secret)) = part.split_once(':') else {
            return Err(refuse(&format!("entry {n} is not `name:secret`")));
        };
        let name = name.trim();
        if name.is_empty() || secret.trim().is_empty() {
            return Err(refuse(&format!("entry {n} has a blank name or secret")));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            || name.len() > 64
        {
            return Err(refuse(&format!(
                "entry {n}: a name is 1-64 letters, digits, `.`, `_` or `-`"
            )));
        }
        if out.iter().any(|(other, _, _)| other == name) {
            return Err(refuse(&format!(
                "entry {n}: the name `{name}` is used twice"
            )));
        }
        out.push((name.to_owned(), secret.trim().to_owned(), scope));
    }
    Ok(out)
}

impl Tokens {
    /// Tokens from explicit values; `None` leaves a scope without a token. A blank value (empty
    /// or only whitespace) is refused: it would look like a token while granting nothing, and a
    /// guard that asked "is a token set?" would read it as set.
    pub fn new(read: Option<String>, admin: Option<String>) -> Result<Self, ConfigError> {
        let check = |variable: &'static str, token: Option<String>| match token {
            Some(t) if t.trim().is_empty() => Err(ConfigError::BlankToken(variable)),
            other => Ok(other),
        };
        let tokens = Self {
            read: check(READ_TOKEN_VAR, read)?,
            admin: check(ADMIN_TOKEN_VAR, admin)?,
            named: Vec::new(),
        };
        tokens.check_distinct_secrets()?;
        Ok(tokens)
    }

    /// Refuses two tokens with one secret: a request presenting it would get the wider scope
    /// and the audit trail would name whichever token matched, so a "read" token could act as
    /// an admin under another name.
    fn check_distinct_secrets(&self) -> Result<(), ConfigError> {
        let all: Vec<(&'static str, &str, &str)> = [
            (READ_TOKEN_VAR, "the read token", self.read.as_deref()),
            (ADMIN_TOKEN_VAR, "the admin token", self.admin.as_deref()),
        ]
        .into_iter()
        .filter_map(|(variable, label, secret)| secret.map(|s| (variable, label, s)))
        .chain(self.named.iter().map(|(name, secret, scope)| {
            let variable = match scope {
                Scope::Admin => ADMIN_TOKENS_VAR,
                Scope::Read => READ_TOKENS_VAR,
            };
            (variable, name.as_str(), secret.as_str())
        }))
        .collect();
        for (i, (variable, label, secret)) in all.iter().enumerate() {
            if let Some((_, first, _)) = all[..i].iter().find(|(_, _, s)| s == secret) {
                return Err(ConfigError::InvalidTokenList {
                    variable,
                    reason: format!(
                        "`{label}` has the same secret as `{first}`: give every token its own secret"
                    ),
                });
            }
        }
        Ok(())
    }

    /// These tokens plus the named tokens of `admin_list` and `read_list` (each
    /// `name:secret,…`, as in `TETHER_ADMIN_TOKENS` / `TETHER_READ_TOKENS`). A blank list, a
    /// blank part, a part without a name or secret, or a name used twice is refused.
    pub fn with_named(
        mut self,
        read_list: Option<&str>,
        admin_list: Option<&str>,
    ) -> Result<Self, ConfigError> {
        for (variable, list, scope) in [
            (ADMIN_TOKENS_VAR, admin_list, Scope::Admin),
            (READ_TOKENS_VAR, read_list, Scope::Read),
        ] {
            if let Some(list) = list {
                for entry in parse_named(variable, list, scope)? {
                    if self.named.iter().any(|(n, _, _)| *n == entry.0) {
                        return Err(ConfigError::InvalidTokenList {
                            variable,
                            reason: format!("the name `{}` is used twice", entry.0),
                        });
                    }
                    self.named.push(entry);
                }
            }
        }
        self.check_distinct_secrets()?;
        Ok(self)
    }

    /// Tokens from `TETHER_READ_TOKEN` and `TETHER_ADMIN_TOKEN`; a variable that is set but
    /// blank, or not valid UTF-8, is a configuration error.
    pub fn from_env() -> Result<Self, ConfigError> {
        let read = |variable: &'static str| match std::env::var(variable) {
            Ok(value) => Ok(Some(value)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::BlankToken(variable)),
        };
        Self::new(read(READ_TOKEN_VAR)?, read(ADMIN_TOKEN_VAR)?)?.with_named(
            read(READ_TOKENS_VAR)?.as_deref(),
            read(ADMIN_TOKENS_VAR)?.as_deref(),
        )
    }

    /// Whether any token is configured.
    pub fn any(&self) -> bool {
        self.read.is_some() || self.admin.is_some() || !self.named.is_empty()
    }

    /// The scope a request gets from its `Authorization` header value (if any).
    pub fn scope_for(&self, header: Option<&str>) -> Result<Scope, ApiError> {
        self.principal_for(header).map(|p| p.scope)
    }

    /// Who a request is, from its `Authorization` header value (if any). Every configured
    /// token is compared (in constant time), so the time taken does not say which one matched.
    pub fn principal_for(&self, header: Option<&str>) -> Result<Principal, ApiError> {
        let presented = match header {
            None => None,
            Some(value) => Some(bearer_token(value).ok_or_else(|| {
                ApiError::Unauthorized("expected `Authorization: Bearer <token>`".into())
            })?),
        };
        let token = match presented {
            None if !self.any() => {
                return Ok(Principal {
                    name: ANONYMOUS.into(),
                    scope: Scope::Read,
                });
            }
            None => {
                return Err(ApiError::Unauthorized(
                    "missing bearer token: send `Authorization: Bearer <token>`".into(),
                ));
            }
            Some(token) => token,
        };
        let single = [
            ("admin", self.admin.as_deref(), Scope::Admin),
            ("read", self.read.as_deref(), Scope::Read),
        ];
        let mut found: Option<Principal> = None;
        let candidates = single
            .iter()
            .filter_map(|(n, s, scope)| s.map(|s| (*n, s, *scope)))
            .chain(
                self.named
                    .iter()
                    .map(|(n, s, scope)| (n.as_str(), s.as_str(), *scope)),
            );
        for (name, secret, scope) in candidates {
            if constant_time_eq(secret, token) && found.as_ref().is_none_or(|f| f.scope < scope) {
                found = Some(Principal {
                    name: name.to_owned(),
                    scope,
                });
            }
        }
        found.ok_or_else(|| ApiError::Unauthorized("invalid bearer token".into()))
    }
}

/// The token of an `Authorization` header value of the `Bearer` scheme. The scheme name is
/// matched case-insensitively (RFC 7235, section 2.1) and must be followed by whitespace.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case("bearer") || !rest.starts_with([' ', '\t']) {
        return None;
    }
    let token = rest.trim();
    (!token.is_empty()).then_some(token)
}

/// Compares two strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// Extractor: the request has at least read scope.
#[derive(Debug, Clone, Copy)]
pub struct ReadAccess;

/// Extractor: the request has admin scope; `actor` names its token for the audit trail.
#[derive(Debug, Clone)]
pub struct AdminAccess {
    /// The name of the token that authorised the request.
    pub actor: String,
}

/// Who a request is: from its bearer token, or else from its dashboard session cookie (then
/// with that session, whose CSRF token a mutating request must echo).
fn principal(
    parts: &Parts,
    state: &AppState,
) -> Result<(Principal, Option<crate::signin::UiSession>), ApiError> {
    let header = match parts.headers.get(AUTHORIZATION) {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| {
            ApiError::Unauthorized("the Authorization header is not valid text".into())
        })?),
    };
    if header.is_none()
        && state.tokens().any()
        && let Some((_, session)) = crate::signin::current(state, &parts.headers)
    {
        return Ok((session.principal.clone(), Some(session)));
    }
    state.tokens().principal_for(header).map(|p| (p, None))
}

impl FromRequestParts<AppState> for ReadAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        principal(parts, state).map(|_| Self)
    }
}

impl FromRequestParts<AppState> for AdminAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let (who, session) = principal(parts, state)?;
        if let Some(session) = session {
            let presented = parts
                .headers
                .get(crate::signin::CSRF_HEADER)
                .and_then(|v| v.to_str().ok());
            if !crate::signin::csrf_ok(&session, presented) {
                return Err(ApiError::Forbidden(
                    "an action from a signed-in browser needs its CSRF token (X-CSRF-Token): reload the page and retry"
                        .into(),
                ));
            }
        }
        match who.scope {
            Scope::Admin => Ok(Self { actor: who.name }),
            Scope::Read if !state.tokens().any() => Err(ApiError::Forbidden(
                "actions need admin scope: configure TETHER_ADMIN_TOKEN and send it as a bearer token"
                    .into(),
            )),
            Scope::Read => Err(ApiError::Forbidden(
                "this action needs the admin token".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_comparison() {
        assert!(constant_time_eq("secret", "secret"));
        assert!(!constant_time_eq("secret", "secreT"));
        assert!(!constant_time_eq("secret", "secret2"));
        assert!(!constant_time_eq("", "x"));
    }

    #[test]
    fn scopes() {
        let open = Tokens::default();
        assert_eq!(open.scope_for(None).unwrap(), Scope::Read);
        let tokens = Tokens::new(Some("r".into()), Some("a".into())).unwrap();
        assert!(matches!(
            tokens.scope_for(None),
            Err(ApiError::Unauthorized(_))
        ));
        assert_eq!(tokens.scope_for(Some("Bearer r")).unwrap(), Scope::Read);
        assert_eq!(tokens.scope_for(Some("Bearer a")).unwrap(), Scope::Admin);
        assert!(tokens.scope_for(Some("Bearer nope")).is_err());
        assert!(tokens.scope_for(Some("Basic a")).is_err());
        assert!(!format!("{tokens:?}").contains('a') || format!("{tokens:?}").contains("<set>"));
    }

    #[test]
    fn the_bearer_scheme_is_matched_case_insensitively() {
        let tokens = Tokens::new(None, Some("a".into())).unwrap();
        for header in [
            "Bearer a",
            "bearer a",
            "BEARER a",
            "bEaReR   a",
            "Bearer\ta",
        ] {
            assert_eq!(
                tokens.scope_for(Some(header)).unwrap(),
                Scope::Admin,
                "{header}"
            );
        }
        for header in [
            "Bearera",
            "Bearer",
            "Bearer  ",
            "Bear a",
            "Basic a",
            "ébearer a",
        ] {
            assert!(tokens.scope_for(Some(header)).is_err(), "{header}");
        }
    }

    #[test]
    fn one_secret_for_two_tokens_is_refused_without_showing_it() {
        let same = |err: ConfigError| {
            let text = err.to_string();
            assert!(text.contains("same secret"), "{text}");
            assert!(
                !text.contains("s3cret"),
                "the secret is never shown: {text}"
            );
        };
        same(Tokens::new(Some("s3cret".into()), Some("s3cret".into())).unwrap_err());
        same(
            Tokens::new(None, None)
                .unwrap()
                .with_named(Some("bob:s3cret"), Some("alice:s3cret"))
                .unwrap_err(),
        );
        same(
            Tokens::new(Some("s3cret".into()), None)
                .unwrap()
                .with_named(None, Some("alice:s3cret"))
                .unwrap_err(),
        );
        assert!(
            Tokens::new(Some("r".into()), Some("a".into()))
                .unwrap()
                .with_named(Some("bob:b"), Some("alice:c"))
                .is_ok()
        );
    }

    #[test]
    fn named_tokens_name_the_actor_and_blank_parts_are_refused() {
        let tokens = Tokens::new(None, Some("a".into()))
            .unwrap()
            .with_named(Some("viewer:v1"), Some("alice:s1, bob:s2"))
            .unwrap();
        let who = |t: &str| tokens.principal_for(Some(&format!("Bearer {t}"))).unwrap();
        assert_eq!(who("s1").name, "alice");
        assert_eq!(who("s1").scope, Scope::Admin);
        assert_eq!(who("s2").name, "bob");
        assert_eq!(who("v1").scope, Scope::Read);
        assert_eq!(who("a").name, "admin");
        assert!(tokens.principal_for(Some("Bearer nope")).is_err());
        let debug = format!("{tokens:?}");
        assert!(debug.contains("alice") && !debug.contains("s1"), "{debug}");
        for bad in [
            "",
            ",",
            "alice",
            "alice:",
            ":s1",
            " :s1",
            "alice: ",
            "a:1,,b:2",
            "a:1,a:2",
            "bad name:x",
        ] {
            let err = Tokens::default().with_named(None, Some(bad)).unwrap_err();
            assert!(
                matches!(
                    err,
                    ConfigError::InvalidTokenList {
                        variable: ADMIN_TOKENS_VAR,
                        ..
                    }
                ),
                "{bad:?}: {err}"
            );
        }
        let err = Tokens::default()
            .with_named(Some("x:hunter-r"), Some("x:hunter-a"))
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter"), "{err}");
        assert!(
            Tokens::default()
                .with_named(None, Some("ops:1"))
                .unwrap()
                .any()
        );
    }

    #[test]
    fn a_blank_token_is_a_configuration_error_never_unset() {
        for blank in ["", " ", "\t\n"] {
            assert_eq!(
                Tokens::new(None, Some(blank.into())),
                Err(ConfigError::BlankToken(ADMIN_TOKEN_VAR))
            );
            assert_eq!(
                Tokens::new(Some(blank.into()), Some("a".into())),
                Err(ConfigError::BlankToken(READ_TOKEN_VAR))
            );
        }
        assert!(!Tokens::new(None, None).unwrap().any());
    }
}
