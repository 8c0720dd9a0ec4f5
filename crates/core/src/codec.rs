//! The record codec contract.
//!
//! The lifecycle reads only a row's lease columns; the rest of a row belongs to the harness
//! backend, which encodes and decodes it through a [`RecordCodec`]. A **present** row whose
//! value fails to decode is an error ([`Error::InvalidRow`]), never an absent row.

use std::fmt;

use crate::error::{Error, ErrorTexts};
use crate::keys::BindingKey;
use crate::store::StoredRow;

/// Encodes and decodes a backend's binding record.
pub trait RecordCodec: Send + Sync + fmt::Debug {
    /// The decoded record.
    type Record: Clone + Send + Sync + fmt::Debug;

    /// Decodes a stored value. `None` means the value is not a valid record.
    fn decode(&self, value: &[u8]) -> Option<Self::Record>;

    /// Encodes a record.
    fn encode(&self, record: &Self::Record) -> Vec<u8>;
}

/// Decodes an optional row: absent stays absent; a present row that fails to decode is
/// [`Error::InvalidRow`].
pub fn decode_row<C: RecordCodec + ?Sized>(
    codec: &C,
    texts: &ErrorTexts,
    key: &BindingKey,
    row: Option<&StoredRow>,
) -> Result<Option<C::Record>, Error> {
    match row {
        None => Ok(None),
        Some(row) => codec
            .decode(&row.value)
            .map(Some)
            .ok_or_else(|| texts.invalid_row(key)),
    }
}

/// A codec for JSON records (`serde_json::Value`); the value must be a JSON object.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonObjectCodec;

impl RecordCodec for JsonObjectCodec {
    type Record = serde_json::Map<String, serde_json::Value>;

    fn decode(&self, value: &[u8]) -> Option<Self::Record> {
        match serde_json::from_slice(value).ok()? {
            serde_json::Value::Object(map) => Some(map),
            _ => None,
        }
    }

    fn encode(&self, record: &Self::Record) -> Vec<u8> {
        encode_object(record)
    }
}

/// What [`encode_object`] writes next.
enum Piece<'a> {
    Value(&'a serde_json::Value),
    Key(&'a str),
    Text(&'static [u8]),
}

/// Compact JSON of an object of any nesting depth, written with an explicit stack
/// (`serde_json`'s serializer recurses once per level, so a deep record would overflow the
/// stack). Keys keep the map's order; scalars are written by `serde_json`.
fn encode_object(record: &serde_json::Map<String, serde_json::Value>) -> Vec<u8> {
    use serde_json::Value;
    fn push_object<'a>(map: &'a serde_json::Map<String, Value>, stack: &mut Vec<Piece<'a>>) {
        stack.push(Piece::Text(b"}"));
        for (i, (k, v)) in map.iter().enumerate().rev() {
            stack.push(Piece::Value(v));
            stack.push(Piece::Key(k));
            if i > 0 {
                stack.push(Piece::Text(b","));
            }
        }
    }
    let mut out = vec![b'{'];
    let mut stack: Vec<Piece<'_>> = Vec::new();
    push_object(record, &mut stack);
    while let Some(piece) = stack.pop() {
        match piece {
            Piece::Text(t) => out.extend_from_slice(t),
            Piece::Key(k) => {
                // A string always serializes.
                let _ = serde_json::to_writer(&mut out, k);
                out.push(b':');
            }
            Piece::Value(Value::Array(items)) => {
                out.push(b'[');
                stack.push(Piece::Text(b"]"));
                for (i, v) in items.iter().enumerate().rev() {
                    stack.push(Piece::Value(v));
                    if i > 0 {
                        stack.push(Piece::Text(b","));
                    }
                }
            }
            Piece::Value(Value::Object(map)) => {
                out.push(b'{');
                push_object(map, &mut stack);
            }
            Piece::Value(scalar) => {
                // Scalars always serialize.
                let _ = serde_json::to_writer(&mut out, scalar);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{AgentId, SessionId};
    use crate::lease::Revision;
    use crate::time::Timestamp;

    fn row(value: &[u8]) -> StoredRow {
        StoredRow {
            value: value.to_vec(),
            lease: None,
            revision: Revision::INITIAL,
            created_at: Timestamp::EPOCH,
            expires_at: None,
        }
    }

    #[test]
    fn present_row_that_fails_to_decode_is_invalid_not_absent() {
        let key = BindingKey::physical(&AgentId::new("a").unwrap(), &SessionId::new("s").unwrap());
        let texts = ErrorTexts::default();
        let corrupted = row(b"\xff not json");
        let err = decode_row(&JsonObjectCodec, &texts, &key, Some(&corrupted)).unwrap_err();
        assert!(matches!(err, Error::InvalidRow { .. }), "{err:?}");
        let not_object = row(b"[1,2]");
        assert!(decode_row(&JsonObjectCodec, &texts, &key, Some(&not_object)).is_err());
        assert!(
            decode_row(&JsonObjectCodec, &texts, &key, None)
                .unwrap()
                .is_none()
        );
        let nested = serde_json::json!({"a": [1, "x\"y", {"b": null, "c": [true, 2.5]}], "d": {}});
        let map = nested.as_object().cloned().unwrap_or_default();
        assert_eq!(
            JsonObjectCodec.encode(&map),
            serde_json::to_vec(&nested).unwrap()
        );
        let ok = row(br#"{"value":"owner"}"#);
        let decoded = decode_row(&JsonObjectCodec, &texts, &key, Some(&ok))
            .unwrap()
            .unwrap();
        assert_eq!(decoded["value"], "owner");
    }
}
