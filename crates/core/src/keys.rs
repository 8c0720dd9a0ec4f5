//! Binding-key derivation.
//!
//! Three key shapes exist (see `docs/harness-backend.md`, "Record, keys and capacity"):
//!
//! - physical: `session:<agent>:<session-id>`, one row per physical session generation;
//! - stable: `session-key:<agent>:<43-char base64url SHA-256 of the session key>`, one row per
//!   logical session across physical rotations; the raw session key never appears;
//! - conversation: `conversation:<binding-id>`.
//!
//! The agent part is the lower-cased agent id (ids are never trimmed: surrounding whitespace
//! is refused), so identical session ids under different agents never share a row.

use std::fmt;

use base64::Engine as _;
use sha2::{Digest as _, Sha256};

use crate::ids::{AgentId, BindingId, IdError, SessionId, SessionKey};

/// Which of the three key shapes a [`BindingKey`] has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BindingKeyKind {
    /// `session:<agent>:<session-id>`.
    Physical,
    /// `session-key:<agent>:<hash>`.
    Stable,
    /// `conversation:<binding-id>`.
    Conversation,
}

/// A store key for one native-session binding row.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BindingKey(String);

impl BindingKey {
    /// The physical key `session:<agent>:<session-id>`.
    pub fn physical(agent: &AgentId, session_id: &SessionId) -> Self {
        Self(format!("session:{}:{}", agent.normalized(), session_id))
    }

    /// The stable key `session-key:<agent>:<base64url(SHA-256(session key))>` (43 characters,
    /// no padding). Equal inputs give equal keys; the raw key never appears.
    pub fn stable(agent: &AgentId, session_key: &SessionKey) -> Self {
        let digest = Sha256::digest(session_key.as_str().as_bytes());
        let hash = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest);
        Self(format!("session-key:{}:{hash}", agent.normalized()))
    }

    /// The key for a session: stable when a session key is known, physical otherwise.
    pub fn for_session(
        agent: &AgentId,
        session_id: &SessionId,
        session_key: Option<&SessionKey>,
    ) -> Self {
        match session_key {
            Some(key) => Self::stable(agent, key),
            None => Self::physical(agent, session_id),
        }
    }

    /// The conversation key `conversation:<binding-id>`.
    pub fn conversation(binding: &BindingId) -> Self {
        Self(format!("conversation:{binding}"))
    }

    /// Parses a key read back from storage, checking that it has one of the three shapes.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        let ok = if let Some(rest) = raw.strip_prefix("session-key:") {
            match rest.split_once(':') {
                Some((agent, hash)) => {
                    !agent.trim().is_empty()
                        && hash.len() == 43
                        && hash
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                }
                None => false,
            }
        } else if let Some(rest) = raw.strip_prefix("session:") {
            matches!(rest.split_once(':'), Some((a, s)) if !a.trim().is_empty() && !s.trim().is_empty())
        } else if let Some(rest) = raw.strip_prefix("conversation:") {
            !rest.trim().is_empty()
        } else {
            false
        };
        if ok && !raw.chars().any(char::is_control) {
            Ok(Self(raw.to_owned()))
        } else {
            Err(IdError::Malformed {
                kind: "binding key",
                reason: "expected session:<agent>:<id>, session-key:<agent>:<hash> or conversation:<id>",
            })
        }
    }

    /// Which shape this key has.
    pub fn kind(&self) -> BindingKeyKind {
        if self.0.starts_with("session-key:") {
            BindingKeyKind::Stable
        } else if self.0.starts_with("session:") {
            BindingKeyKind::Physical
        } else {
            BindingKeyKind::Conversation
        }
    }

    /// The key as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BindingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for BindingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BindingKey({:?})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_stable_shape(key: &str, agent: &str) -> bool {
        let Some(rest) = key.strip_prefix(&format!("session-key:{agent}:")) else {
            return false;
        };
        rest.len() == 43
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }

    /// Backend scenario 50: stable keys hide the raw session key, differ per agent, and are
    /// deterministic; blank ids are refused with a clear error.
    #[test]
    fn lifecycle_scenario_50_stable_key_derivation() {
        let main = AgentId::new("Main").unwrap();
        let other = AgentId::new("other").unwrap();
        let raw = "agent:main:telegram:direct:peer@example.com";
        let key = SessionKey::new(raw).unwrap();

        let a = BindingKey::stable(&main, &key);
        assert!(is_stable_shape(a.as_str(), "main"), "{a}");
        assert!(!a.as_str().contains("peer@example.com"));
        assert!(!a.as_str().contains(raw));
        // The agent id is lower-cased in the key; surrounding whitespace is refused when the
        // id is built (never trimmed silently), so no two spellings name one row unnoticed.
        assert_eq!(a, BindingKey::stable(&AgentId::new("MAIN").unwrap(), &key));
        assert!(AgentId::new(" main ").is_err());
        let b = BindingKey::stable(&other, &key);
        assert_ne!(a, b);
        assert_eq!(a.kind(), BindingKeyKind::Stable);
        assert_eq!(BindingKey::parse(a.as_str()).unwrap(), a);

        let blank_agent = AgentId::new(" ").unwrap_err();
        assert!(blank_agent.to_string().contains("agent id"));
        let blank_session = SessionId::new("").unwrap_err();
        assert!(blank_session.to_string().contains("session id"));
    }

    #[test]
    fn physical_keys_isolate_agents() {
        let s = SessionId::new("s-1").unwrap();
        let a = BindingKey::physical(&AgentId::new("A").unwrap(), &s);
        let b = BindingKey::physical(&AgentId::new("b").unwrap(), &s);
        assert_eq!(a.as_str(), "session:a:s-1");
        assert_ne!(a, b);
        assert_eq!(a.kind(), BindingKeyKind::Physical);
    }

    #[test]
    fn conversation_keys_and_parse_errors() {
        let c = BindingKey::conversation(&BindingId::new("legacy-1").unwrap());
        assert_eq!(c.as_str(), "conversation:legacy-1");
        assert_eq!(c.kind(), BindingKeyKind::Conversation);
        assert!(BindingKey::parse("nonsense").is_err());
        assert!(BindingKey::parse("session-key:main:short").is_err());
        assert!(BindingKey::parse("session::x").is_err());
    }
}
