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
        serde_json::to_vec(record).unwrap_or_else(|_| b"{}".to_vec())
    }
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
        let ok = row(br#"{"value":"owner"}"#);
        let decoded = decode_row(&JsonObjectCodec, &texts, &key, Some(&ok))
            .unwrap()
            .unwrap();
        assert_eq!(decoded["value"], "owner");
    }
}
