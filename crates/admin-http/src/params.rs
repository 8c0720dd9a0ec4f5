//! Request parsing shared by the routes: page sizes, opaque cursors, typed ids, JSON bodies
//! whose rejections are typed [`ApiError`]s, and the operator's reason.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Page size when none is asked for.
pub const DEFAULT_PAGE_SIZE: usize = 50;

/// Largest accepted page size.
pub const MAX_PAGE_SIZE: usize = 200;

/// Largest accepted request body, in bytes.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Longest accepted request target (path and query), in bytes: a longer one is a typed 414
/// (`uri_too_long`).
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// Most request header fields accepted: more is a typed 431 (`headers_too_large`).
pub const MAX_HEADER_COUNT: usize = 100;

/// Largest accepted total of request header fields, in bytes (each field counted as
/// `name: value` and its line end): more is a typed 431 (`headers_too_large`).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// The page size of a request: the default when absent, a typed 400 beyond the maximum.
pub fn page_size(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit {
        None => Ok(DEFAULT_PAGE_SIZE),
        Some(0) => Err(ApiError::BadRequest("`limit` must be at least 1".into())),
        Some(n) if n > MAX_PAGE_SIZE => Err(ApiError::PageSizeTooLarge {
            asked: n,
            max: MAX_PAGE_SIZE,
        }),
        Some(n) => Ok(n),
    }
}

/// Encodes cursor parts as an opaque token.
pub fn encode_cursor(parts: &[&str]) -> String {
    let json = serde_json::to_string(parts).unwrap_or_default();
    URL_SAFE_NO_PAD.encode(json)
}

/// Decodes an opaque token made by [`encode_cursor`] with `n` parts.
///
/// An empty token is refused like any other malformed one; callers treat an empty `cursor`
/// query value as "first page" before calling this (see [`cursor`]).
pub fn decode_cursor(token: &str, n: usize) -> Result<Vec<String>, ApiError> {
    let invalid = || {
        ApiError::BadRequest(
            "invalid `cursor`: pass back the `next_cursor` of the previous page unchanged".into(),
        )
    };
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid())?;
    let parts: Vec<String> = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    if parts.len() == n {
        Ok(parts)
    } else {
        Err(invalid())
    }
}

/// The cursor of a request: an absent or empty `cursor` means the first page.
pub fn cursor(raw: Option<&str>) -> Option<&str> {
    raw.filter(|c| !c.is_empty())
}

/// Parses a typed id from a request, mapping the failure to a typed 400 naming the field.
pub fn parse_id<'a, T, E: std::fmt::Display>(
    field: &str,
    raw: &'a str,
    parse: impl FnOnce(&'a str) -> Result<T, E>,
) -> Result<T, ApiError> {
    parse(raw).map_err(|e| ApiError::BadRequest(format!("invalid `{field}`: {e}")))
}

/// An optional boolean query value where an empty value means "absent", as an HTML form sends
/// for "any"; otherwise `true` or `false`.
pub fn optional_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    use serde::Deserialize as _;
    use serde::de::Error as _;
    match Option::<String>::deserialize(d)?.as_deref() {
        None | Some("") => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(D::Error::custom(format!(
            "expected `true` or `false`, found `{other}`"
        ))),
    }
}

/// The operator's reason: required, not blank, the text rule of a reason
/// ([`tether_core::text::check_reason`]: no NUL, at most
/// [`MAX_REASON_LEN`](tether_core::text::MAX_REASON_LEN) bytes). Surrounding whitespace is
/// trimmed; the rest is kept whole, never cut: a reason too long is refused.
pub fn reason(raw: &str) -> Result<String, ApiError> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Err(ApiError::BadRequest(
            "`reason` is required: say why you take this action (it is recorded in the audit trail)"
                .into(),
        ));
    }
    tether_core::text::check_reason("reason", trimmed)
        .map_err(|e| ApiError::BadRequest(format!("`reason`: {e}")))?;
    Ok(trimmed.to_owned())
}

/// A JSON body whose rejections are typed errors (400 `bad_request`, 413
/// `payload_too_large`).
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(&rejection)),
        }
    }
}

/// Query parameters whose rejection is a typed 400 `bad_request` naming the problem.
#[derive(Debug, Clone)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Self(value)),
            Err(rejection) => Err(ApiError::BadRequest(format!(
                "invalid query string: {}",
                rejection.body_text()
            ))),
        }
    }
}

/// Path parameters whose rejection is a typed [`ApiError`]: a segment that does not decode (for
/// example percent-encoded bytes that are not UTF-8) is a 400 `bad_request`, not axum's plain
/// text answer.
#[derive(Debug, Clone)]
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Self(value)),
            // A route whose path has no such parameter: the server's own mistake.
            Err(rejection) if rejection.status().is_server_error() => Err(ApiError::Internal(
                format!("cannot read the path: {}", rejection.body_text()),
            )),
            Err(rejection) => Err(ApiError::BadRequest(format!(
                "invalid path: {}",
                rejection.body_text()
            ))),
        }
    }
}

fn json_rejection(rejection: &JsonRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge(format!(
            "the request body is above {MAX_BODY_BYTES} bytes; send a smaller body"
        ))
    } else {
        ApiError::BadRequest(format!("invalid JSON body: {}", rejection.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sizes_are_bounded() {
        assert_eq!(page_size(None).unwrap(), DEFAULT_PAGE_SIZE);
        assert_eq!(page_size(Some(7)).unwrap(), 7);
        assert!(matches!(page_size(Some(0)), Err(ApiError::BadRequest(_))));
        assert!(matches!(
            page_size(Some(MAX_PAGE_SIZE + 1)),
            Err(ApiError::PageSizeTooLarge { .. })
        ));
    }

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let token = encode_cursor(&["ns", "session:a:b"]);
        assert_eq!(decode_cursor(&token, 2).unwrap(), ["ns", "session:a:b"]);
        assert!(decode_cursor(&token, 1).is_err());
        assert!(decode_cursor("%%%", 1).is_err());
        assert!(reason("  ").is_err());
        assert_eq!(reason(" why ").unwrap(), "why");
        // Kept whole up to the limit, refused past it, never cut.
        let long = format!("INC-1: {} -- approved by lead", "x".repeat(580));
        assert_eq!(reason(&long).unwrap(), long);
        let limit = "y".repeat(tether_core::text::MAX_REASON_LEN);
        assert_eq!(reason(&limit).unwrap(), limit);
        assert!(matches!(
            reason(&format!("{limit}y")),
            Err(ApiError::BadRequest(message)) if message.contains("reason")
        ));
        assert!(reason("a\0b").is_err());
    }
}

/// The path of one binding row (`…/{namespace}/…/{key}`): the one place its OpenAPI
/// patterns are written. The routes check the values with the id rules of `tether-core`;
/// the patterns say the same for API clients.
#[derive(Debug, Clone, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct BindingPath {
    /// The binding namespace.
    #[param(pattern = "^[A-Za-z0-9._-]{1,128}$")]
    pub namespace: String,
    /// The binding key, e.g. `session:<agent>:<session id>`.
    #[param(
        pattern = "^(session:[^:\\u0000-\\u001f\\u007f-\\u009f]*[^:\\s\\u0000-\\u001f\\u007f-\\u009f][^:\\u0000-\\u001f\\u007f-\\u009f]*:[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*|session-key:[^:\\u0000-\\u001f\\u007f-\\u009f]*[^:\\s\\u0000-\\u001f\\u007f-\\u009f][^:\\u0000-\\u001f\\u007f-\\u009f]*:[A-Za-z0-9_-]{43}|conversation:[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*)$"
    )]
    pub key: String,
}
