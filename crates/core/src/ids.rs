//! Validated identifier newtypes.
//!
//! Every id follows the id rule of [`text`]: 1–[`MAX_ID_LEN`] bytes, no control
//! character, no invisible formatting character (zero-width, bidi control, BOM) and no
//! leading or trailing whitespace. A value that breaks it is refused with an [`IdError`] —
//! never trimmed or cleaned silently — so ids can be logged, stored and shown without
//! escaping surprises, and two ids that look the same are the same.

use std::fmt;

use crate::text::{self, TextError};

/// Longest accepted identifier, in bytes.
pub const MAX_ID_LEN: usize = 512;

/// Why a string was refused as an identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The value was empty or only whitespace.
    #[error("{kind} requires a non-blank value")]
    Blank {
        /// Which id kind was being built (for example `agent id`).
        kind: &'static str,
    },
    /// The value is longer than [`MAX_ID_LEN`] bytes.
    #[error("{kind} is {len} bytes long; the limit is {MAX_ID_LEN}")]
    TooLong {
        /// Which id kind was being built.
        kind: &'static str,
        /// The length that was refused.
        len: usize,
    },
    /// The value contains a control character.
    #[error("{kind} contains a control character")]
    ControlCharacter {
        /// Which id kind was being built.
        kind: &'static str,
    },
    /// The value contains an invisible formatting character (zero-width, bidi control, BOM).
    #[error(
        "{kind} contains the invisible formatting character U+{code_point:04X}, which would make different ids look alike"
    )]
    InvisibleCharacter {
        /// Which id kind was being built.
        kind: &'static str,
        /// The character.
        code_point: u32,
    },
    /// The value has leading or trailing whitespace (ids are never trimmed silently).
    #[error("{kind} has leading or trailing whitespace; pass it trimmed")]
    SurroundingWhitespace {
        /// Which id kind was being built.
        kind: &'static str,
    },
    /// The value does not follow the id kind's format.
    #[error("{kind} is malformed: {reason}")]
    Malformed {
        /// Which id kind was being built.
        kind: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl From<TextError> for IdError {
    fn from(err: TextError) -> Self {
        match err {
            TextError::Blank { field } => Self::Blank { kind: field },
            TextError::TooLong { field, len, .. } => Self::TooLong { kind: field, len },
            TextError::Nul { field } | TextError::ControlCharacter { field, .. } => {
                Self::ControlCharacter { kind: field }
            }
            TextError::Invisible { field, code_point } => Self::InvisibleCharacter {
                kind: field,
                code_point,
            },
            TextError::SurroundingWhitespace { field } => {
                Self::SurroundingWhitespace { kind: field }
            }
            TextError::TooDeep { field, .. } => Self::Malformed {
                kind: field,
                reason: "nested too deep",
            },
        }
    }
}

pub(crate) fn validate(kind: &'static str, raw: &str) -> Result<String, IdError> {
    text::check_token_like(kind, raw, MAX_ID_LEN)?;
    Ok(raw.to_owned())
}

macro_rules! string_id {
    ($(#[$meta:meta])* $name:ident, $kind:literal) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Validates and builds the id (the id rule of [`text`](crate::text); nothing is trimmed).
            pub fn new(raw: impl AsRef<str>) -> Result<Self, IdError> {
                validate($kind, raw.as_ref()).map(Self)
            }

            /// Checks `raw` by the rule [`Self::new`] applies, without building an id (for a
            /// reader that only passes the text on).
            pub fn check(raw: &str) -> Result<(), IdError> {
                text::check_token_like($kind, raw, MAX_ID_LEN).map_err(IdError::from)
            }

            /// [`Self::new`] taking ownership of `raw` (validated the same way, not copied).
            pub fn from_string(raw: String) -> Result<Self, IdError> {
                text::check_token_like($kind, &raw, MAX_ID_LEN)?;
                Ok(Self(raw))
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Consumes the id, returning the inner string.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;
            fn try_from(s: &str) -> Result<Self, Self::Error> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                Self::from_string(s)
            }
        }
    };
}

string_id!(
    /// The host's agent identifier. Binding keys use its lower-cased form (see [`AgentId::normalized`]).
    AgentId,
    "agent id"
);
string_id!(
    /// The host's logical session key (stable across physical session rotations).
    ///
    /// It may carry personal data (peer e-mail addresses, phone numbers), so binding keys never
    /// contain it in the clear: see [`crate::BindingKey::stable`].
    SessionKey,
    "session key"
);
string_id!(
    /// A physical session id: one generation of a host session.
    SessionId,
    "session id"
);
string_id!(
    /// The identifier of a registered agent harness (for example `codex` or `acpx`).
    HarnessId,
    "harness id"
);
string_id!(
    /// A conversation binding id (the part after `conversation:`).
    BindingId,
    "binding id"
);
string_id!(
    /// A tool-run identifier chosen by the host for one attempt run.
    RunId,
    "run id"
);

impl AgentId {
    /// The lower-cased id used inside binding keys, so `Main` and `main` share rows.
    pub fn normalized(&self) -> String {
        self.0.to_lowercase()
    }
}

/// A store namespace (one per harness backend, for example `app-server-thread-bindings`).
///
/// Namespaces are 1–128 characters of `[A-Za-z0-9._-]`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace(String);

impl Namespace {
    /// Validates and builds a namespace name.
    pub fn new(raw: impl AsRef<str>) -> Result<Self, IdError> {
        let raw = raw.as_ref();
        if raw.is_empty() {
            return Err(IdError::Blank { kind: "namespace" });
        }
        if raw.len() > 128 {
            return Err(IdError::TooLong {
                kind: "namespace",
                len: raw.len(),
            });
        }
        if !raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(IdError::Malformed {
                kind: "namespace",
                reason: "only ASCII letters, digits, '.', '_' and '-' are allowed",
            });
        }
        Ok(Self(raw.to_owned()))
    }

    /// The namespace as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Namespace({:?})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_ids_are_rejected_with_their_kind() {
        let err = AgentId::new("   ").unwrap_err();
        assert_eq!(err, IdError::Blank { kind: "agent id" });
        assert_eq!(err.to_string(), "agent id requires a non-blank value");
        assert!(matches!(
            SessionId::new(""),
            Err(IdError::Blank { kind: "session id" })
        ));
    }

    #[test]
    fn ids_are_never_trimmed_silently() {
        assert_eq!(
            SessionKey::new("  a:b  "),
            Err(IdError::SurroundingWhitespace {
                kind: "session key"
            })
        );
        assert_eq!(SessionKey::new("a: b").unwrap().as_str(), "a: b");
    }

    #[test]
    fn invisible_characters_are_refused() {
        for c in ['\u{200B}', '\u{202E}', '\u{FEFF}'] {
            assert!(matches!(
                SessionKey::new(format!("agent:main:{c}x")),
                Err(IdError::InvisibleCharacter { code_point, .. }) if code_point == u32::from(c)
            ));
        }
        assert!(matches!(
            SessionId::new("s\0"),
            Err(IdError::ControlCharacter { .. })
        ));
    }

    #[test]
    fn control_characters_and_oversized_ids_are_rejected() {
        assert!(matches!(
            HarnessId::new("co\ndex"),
            Err(IdError::ControlCharacter { .. })
        ));
        assert!(matches!(
            RunId::new("x".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong { .. })
        ));
    }

    #[test]
    fn namespaces_are_restricted() {
        assert!(Namespace::new("app-server-thread-bindings").is_ok());
        assert!(Namespace::new("bad namespace").is_err());
        assert!(Namespace::new("").is_err());
    }
}
