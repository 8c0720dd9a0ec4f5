//! Typed API errors: each is both the HTTP response and its OpenAPI entry, with a stable code.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The JSON body of every error response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable, machine-readable code (for example `unavailable`).
    pub code: String,
    /// A human-readable explanation that says what to do.
    pub message: String,
}

/// An error returned by an admin route.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// Missing or invalid bearer token (401, `unauthorized`).
    #[error("{0}")]
    Unauthorized(String),
    /// The token lacks the needed scope (403, `forbidden`).
    #[error("{0}")]
    Forbidden(String),
    /// The database is unreachable or not migrated (503, `unavailable`).
    #[error("{0}")]
    Unavailable(String),
    /// An unexpected failure (500, `internal`).
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The stable code of the error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthorized(_) => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::Unavailable(_) => "unavailable",
            Self::Internal(_) => "internal",
        }
    }

    /// The HTTP status of the error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.code().to_owned(),
            message: self.to_string(),
        };
        (self.status(), Json(body)).into_response()
    }
}
