//! Bearer-token authentication with read and admin scopes.
//!
//! - `TETHER_ADMIN_TOKEN` grants admin scope (reads and actions);
//! - `TETHER_READ_TOKEN` grants read scope;
//! - with no token configured, the (loopback-only) service is open for reads and refuses actions.
//!
//! Tokens are compared in constant time.

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

/// What a request may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Read the API.
    Read,
    /// Read and act (delete sessions, expire leases, release quarantine).
    Admin,
}

/// The configured tokens.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    read: Option<String>,
    admin: Option<String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("read", &self.read.as_ref().map(|_| "<set>"))
            .field("admin", &self.admin.as_ref().map(|_| "<set>"))
            .finish()
    }
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
        Ok(Self {
            read: check(READ_TOKEN_VAR, read)?,
            admin: check(ADMIN_TOKEN_VAR, admin)?,
        })
    }

    /// Tokens from `TETHER_READ_TOKEN` and `TETHER_ADMIN_TOKEN`; a variable that is set but
    /// blank, or not valid UTF-8, is a configuration error.
    pub fn from_env() -> Result<Self, ConfigError> {
        let read = |variable: &'static str| match std::env::var(variable) {
            Ok(value) => Ok(Some(value)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::BlankToken(variable)),
        };
        Self::new(read(READ_TOKEN_VAR)?, read(ADMIN_TOKEN_VAR)?)
    }

    /// Whether any token is configured.
    pub fn any(&self) -> bool {
        self.read.is_some() || self.admin.is_some()
    }

    /// The scope a request gets from its `Authorization` header value (if any).
    pub fn scope_for(&self, header: Option<&str>) -> Result<Scope, ApiError> {
        let presented = match header {
            None => None,
            Some(value) => Some(bearer_token(value).ok_or_else(|| {
                ApiError::Unauthorized("expected `Authorization: Bearer <token>`".into())
            })?),
        };
        match presented {
            None if !self.any() => Ok(Scope::Read),
            None => Err(ApiError::Unauthorized(
                "missing bearer token: send `Authorization: Bearer <token>`".into(),
            )),
            Some(token) => {
                if self
                    .admin
                    .as_deref()
                    .is_some_and(|a| constant_time_eq(a, token))
                {
                    Ok(Scope::Admin)
                } else if self
                    .read
                    .as_deref()
                    .is_some_and(|r| constant_time_eq(r, token))
                {
                    Ok(Scope::Read)
                } else {
                    Err(ApiError::Unauthorized("invalid bearer token".into()))
                }
            }
        }
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

/// Extractor: the request has admin scope.
#[derive(Debug, Clone, Copy)]
pub struct AdminAccess;

fn scope(parts: &Parts, state: &AppState) -> Result<Scope, ApiError> {
    let header = match parts.headers.get(AUTHORIZATION) {
        None => None,
        Some(v) => Some(v.to_str().map_err(|_| {
            ApiError::Unauthorized("the Authorization header is not valid text".into())
        })?),
    };
    state.tokens().scope_for(header)
}

impl FromRequestParts<AppState> for ReadAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        scope(parts, state).map(|_| Self)
    }
}

impl FromRequestParts<AppState> for AdminAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match scope(parts, state)? {
            Scope::Admin => Ok(Self),
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
