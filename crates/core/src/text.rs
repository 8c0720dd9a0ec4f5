//! What ids, labels and free text may hold: one rule for every store backend, checked before
//! anything is written, with a typed error.
//!
//! | kind | examples | may hold | size |
//! |---|---|---|---|
//! | id | agent id, session key, session id, harness id, idempotency key | printable characters; no control character, no invisible formatting character (zero-width, bidi override, BOM), no leading or trailing whitespace | 1–[`MAX_ID_LEN`](crate::ids::MAX_ID_LEN) bytes |
//! | label | lease holder, quarantine custody | as an id | 1–[`MAX_LABEL_LEN`] bytes |
//! | reason | quarantine reason, operator reason | any text but NUL; not blank | 1–[`MAX_REASON_LEN`] bytes |
//! | content | transcript entry content | any text but NUL | up to [`MAX_CONTENT_LEN`] bytes |
//!
//! Why: PostgreSQL's `text` cannot hold NUL, so a NUL must be refused on every backend alike
//! (a store that accepted it on SQLite and failed on PostgreSQL would behave differently per
//! deployment, and a refusal at the database looks like an unknown outcome). Invisible
//! formatting characters in keys let two keys look the same to an operator while naming
//! different rows. Bounded reasons keep the admin views readable.
//!
//! ```
//! use tether_core::text::{self, TextError};
//!
//! assert!(text::check_label("holder label", "worker-7").is_ok());
//! assert!(matches!(
//!     text::check_label("holder label", "worker\u{0}7"),
//!     Err(TextError::ControlCharacter { .. })
//! ));
//! assert!(matches!(
//!     text::check_reason("quarantine reason", "  "),
//!     Err(TextError::Blank { .. })
//! ));
//! assert!(text::check_content("transcript content", "line 1\nline 2").is_ok());
//! ```

/// Longest accepted label (lease holder, custody), in bytes.
pub const MAX_LABEL_LEN: usize = 256;

/// Longest accepted reason (quarantine and operator reasons), in bytes.
pub const MAX_REASON_LEN: usize = 4096;

/// Longest accepted transcript entry content, in bytes (1 MiB).
pub const MAX_CONTENT_LEN: usize = 1 << 20;

/// Why a text value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TextError {
    /// Empty or only whitespace where a value is required.
    #[error("{field} requires a non-blank value")]
    Blank {
        /// Which value (for example `quarantine reason`).
        field: &'static str,
    },
    /// Longer than the field's limit.
    #[error("{field} is {len} bytes long; the limit is {limit}")]
    TooLong {
        /// Which value.
        field: &'static str,
        /// The refused length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// A NUL character, which no backend stores alike.
    #[error("{field} contains a NUL character, which cannot be stored")]
    Nul {
        /// Which value.
        field: &'static str,
    },
    /// A control character in an id or label.
    #[error("{field} contains a control character (U+{code_point:04X})")]
    ControlCharacter {
        /// Which value.
        field: &'static str,
        /// The character.
        code_point: u32,
    },
    /// An invisible formatting character (zero-width, bidi control, BOM) in an id or label.
    #[error(
        "{field} contains the invisible formatting character U+{code_point:04X}, which would make different values look alike"
    )]
    Invisible {
        /// Which value.
        field: &'static str,
        /// The character.
        code_point: u32,
    },
    /// Leading or trailing whitespace in an id or label (never trimmed silently).
    #[error("{field} has leading or trailing whitespace; pass it trimmed")]
    SurroundingWhitespace {
        /// Which value.
        field: &'static str,
    },
    /// JSON nested deeper than the field's limit (arrays and objects count one level each).
    #[error("{field} is nested more than {limit} levels deep")]
    TooDeep {
        /// Which value.
        field: &'static str,
        /// The limit.
        limit: usize,
    },
}

/// Whether `c` is an invisible formatting character refused in ids and labels: soft hyphen,
/// zero-width characters, bidi marks, embeddings, overrides and isolates, the BOM, invisible
/// operators and the interlinear annotation controls.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{17B4}'
            | '\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFFB}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// The id and label rule: not blank, within `limit`, no surrounding whitespace, no control or
/// invisible formatting character.
pub fn check_token_like(field: &'static str, value: &str, limit: usize) -> Result<(), TextError> {
    // Fast path for the common case (ids are mostly printable ASCII): every byte printable,
    // the ends not blank, within the limit — nothing below can fail. Anything else takes the
    // full check, which picks the error.
    let bytes = value.as_bytes();
    if let (Some(&first), Some(&last)) = (bytes.first(), bytes.last())
        && bytes.len() <= limit
        && first != b' '
        && last != b' '
        && bytes.iter().all(|b| (0x20..0x7f).contains(b))
    {
        return Ok(());
    }
    if value.trim().is_empty() {
        return Err(TextError::Blank { field });
    }
    if value.len() > limit {
        return Err(TextError::TooLong {
            field,
            len: value.len(),
            limit,
        });
    }
    if value.trim() != value {
        return Err(TextError::SurroundingWhitespace { field });
    }
    for c in value.chars() {
        if c.is_control() {
            return Err(TextError::ControlCharacter {
                field,
                code_point: u32::from(c),
            });
        }
        if is_invisible(c) {
            return Err(TextError::Invisible {
                field,
                code_point: u32::from(c),
            });
        }
    }
    Ok(())
}

/// A label (lease holder, custody): the id rule within [`MAX_LABEL_LEN`] bytes.
pub fn check_label(field: &'static str, value: &str) -> Result<(), TextError> {
    check_token_like(field, value, MAX_LABEL_LEN)
}

/// A reason: not blank, no NUL, within [`MAX_REASON_LEN`] bytes.
pub fn check_reason(field: &'static str, value: &str) -> Result<(), TextError> {
    if value.trim().is_empty() {
        return Err(TextError::Blank { field });
    }
    check_bounded(field, value, MAX_REASON_LEN)
}

/// Transcript content: no NUL, within [`MAX_CONTENT_LEN`] bytes (empty is allowed).
pub fn check_content(field: &'static str, value: &str) -> Result<(), TextError> {
    check_bounded(field, value, MAX_CONTENT_LEN)
}

/// Makes a reason out of generated text (an error message) that always passes
/// [`check_reason`]: NUL becomes U+FFFD, text past [`MAX_REASON_LEN`] is cut at a character
/// boundary and ends with `…`, blank text becomes `(no reason given)`. For reasons a program
/// writes itself; text from a person is checked, never rewritten.
pub fn to_reason(text: &str) -> String {
    if text.trim().is_empty() {
        return "(no reason given)".to_owned();
    }
    let mut reason = text.replace('\0', "\u{FFFD}");
    if reason.len() > MAX_REASON_LEN {
        let ellipsis = '…';
        let mut end = MAX_REASON_LEN - ellipsis.len_utf8();
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push(ellipsis);
    }
    reason
}

fn check_bounded(field: &'static str, value: &str, limit: usize) -> Result<(), TextError> {
    if value.len() > limit {
        return Err(TextError::TooLong {
            field,
            len: value.len(),
            limit,
        });
    }
    if value.contains('\0') {
        return Err(TextError::Nul { field });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_refuse_nul_controls_invisibles_and_padding() {
        assert!(check_label("holder", "worker-1 (host a)").is_ok());
        for (bad, code_point) in [("a\0b", 0), ("a\u{1b}b", 0x1b), ("a\nb", 0x0a)] {
            assert_eq!(
                check_label("holder", bad),
                Err(TextError::ControlCharacter {
                    field: "holder",
                    code_point
                })
            );
        }
        for c in ['\u{200B}', '\u{202E}', '\u{2066}', '\u{FEFF}', '\u{E0041}'] {
            assert!(
                matches!(
                    check_label("holder", &format!("ab{c}")),
                    Err(TextError::Invisible { code_point, .. }) if code_point == u32::from(c)
                ),
                "U+{:04X}",
                u32::from(c)
            );
        }
        assert_eq!(
            check_label("holder", " a"),
            Err(TextError::SurroundingWhitespace { field: "holder" })
        );
        assert_eq!(
            check_label("holder", ""),
            Err(TextError::Blank { field: "holder" })
        );
        assert!(matches!(
            check_label("holder", &"x".repeat(MAX_LABEL_LEN + 1)),
            Err(TextError::TooLong { .. })
        ));
        assert!(check_label("holder", "ünïcödé-名前").is_ok());
    }

    #[test]
    fn reasons_and_content_refuse_only_nul_and_excess() {
        assert!(check_reason("reason", "line 1\n\tline 2 \u{200B}").is_ok());
        assert_eq!(
            check_reason("reason", "a\0"),
            Err(TextError::Nul { field: "reason" })
        );
        assert_eq!(
            check_reason("reason", " \n"),
            Err(TextError::Blank { field: "reason" })
        );
        assert!(check_reason("reason", &"r".repeat(MAX_REASON_LEN)).is_ok());
        assert!(matches!(
            check_reason("reason", &"r".repeat(MAX_REASON_LEN + 1)),
            Err(TextError::TooLong { .. })
        ));
        assert!(check_content("content", "").is_ok());
        assert!(matches!(
            check_content("content", &"c".repeat(MAX_CONTENT_LEN + 1)),
            Err(TextError::TooLong { .. })
        ));
        assert_eq!(
            check_content("content", "\0"),
            Err(TextError::Nul { field: "content" })
        );
    }

    #[test]
    fn generated_reasons_always_pass() {
        for text in ["", " ", "a\0b", &"é".repeat(MAX_REASON_LEN), "plain"] {
            let reason = to_reason(text);
            assert!(check_reason("reason", &reason).is_ok(), "{text:?}");
        }
        assert_eq!(to_reason("a\0b"), "a\u{FFFD}b");
        assert!(to_reason(&"x".repeat(MAX_REASON_LEN + 10)).ends_with('…'));
    }
}
