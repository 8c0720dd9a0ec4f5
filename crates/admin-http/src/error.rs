//! Typed API errors: each is both the HTTP response and its OpenAPI entry, with a stable code.
//!
//! [`ApiError`] is what handlers return; the error-set types ([`ReadErrors`], [`ListErrors`],
//! [`DetailErrors`], [`ActionErrors`]) implement [`utoipa::IntoResponses`] and list, per route,
//! the statuses and stable codes it can answer with, all with the [`ErrorBody`] schema.

use std::collections::BTreeMap;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::{Ref, RefOr};

/// The JSON body of every error response.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// A stable, machine-readable code (for example `unavailable`).
    pub code: String,
    /// A human-readable explanation that says what to do.
    pub message: String,
    /// `epoch_mismatch` only: the epoch of the lease the binding holds now (read it, confirm,
    /// and expire that one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_epoch: Option<u64>,
}

/// An error returned by an admin route.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// A malformed parameter or body (400, `bad_request`).
    #[error("{0}")]
    BadRequest(String),
    /// A page size above the maximum (400, `page_size_too_large`).
    #[error(
        "page size {asked} is above the maximum of {max}; ask for at most {max} and follow `next_cursor`"
    )]
    PageSizeTooLarge {
        /// The size asked for.
        asked: usize,
        /// The largest accepted size.
        max: usize,
    },
    /// Missing or invalid bearer token (401, `unauthorized`).
    #[error("{0}")]
    Unauthorized(String),
    /// The token lacks the needed scope (403, `forbidden`).
    #[error("{0}")]
    Forbidden(String),
    /// The session, binding or quarantined key does not exist (404, `not_found`).
    #[error("{0}")]
    NotFound(String),
    /// The path exists but not with this method (405, `method_not_allowed`); answered by the
    /// router, never by a route.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// A live lease blocks the action (409, `lease_held`).
    #[error("{0}")]
    LeaseHeld(String),
    /// The state moved on between read and write, or the action does not apply (409,
    /// `conflict`).
    #[error("{0}")]
    Conflict(String),
    /// A force-expiry named a lease epoch that is no longer the binding's (409,
    /// `epoch_mismatch`; the body's `current_epoch` is the epoch it holds now).
    #[error("{message}")]
    EpochMismatch {
        /// The epoch of the lease the binding holds now.
        current: u64,
        /// What happened and what to do.
        message: String,
    },
    /// A force-expiry found no live lease on the binding: nothing to expire (409,
    /// `no_lease`). A retried expiry that already took effect answers this.
    #[error("{0}")]
    NoLease(String),
    /// The request body is above the limit (413, `payload_too_large`).
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The request target (path and query) is above the limit (414, `uri_too_long`).
    #[error("{0}")]
    UriTooLong(String),
    /// The request's header fields are too many or too large (431, `headers_too_large`).
    #[error("{0}")]
    HeadersTooLarge(String),
    /// The database is unreachable or not migrated, or a native agent runtime an operation
    /// needs is gone or cannot start (503, `unavailable`).
    #[error("{0}")]
    Unavailable(String),
    /// The action's write may or may not have been applied: its COMMIT failed or its answer
    /// was lost (500, `outcome_unknown`). Read the target again before deciding to retry.
    #[error("{0}")]
    OutcomeUnknown(String),
    /// An unexpected failure (500, `internal`).
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The stable code of the error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "bad_request",
            Self::PageSizeTooLarge { .. } => "page_size_too_large",
            Self::Unauthorized(_) => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::NotFound(_) => "not_found",
            Self::MethodNotAllowed(_) => "method_not_allowed",
            Self::LeaseHeld(_) => "lease_held",
            Self::Conflict(_) => "conflict",
            Self::EpochMismatch { .. } => "epoch_mismatch",
            Self::NoLease(_) => "no_lease",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::UriTooLong(_) => "uri_too_long",
            Self::HeadersTooLarge(_) => "headers_too_large",
            Self::Unavailable(_) => "unavailable",
            Self::OutcomeUnknown(_) => "outcome_unknown",
            Self::Internal(_) => "internal",
        }
    }

    /// The HTTP status of the error.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) | Self::PageSizeTooLarge { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::LeaseHeld(_)
            | Self::Conflict(_)
            | Self::EpochMismatch { .. }
            | Self::NoLease(_) => StatusCode::CONFLICT,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UriTooLong(_) => StatusCode::URI_TOO_LONG,
            Self::HeadersTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::OutcomeUnknown(_) | Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The error body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            code: self.code().to_owned(),
            message: self.to_string(),
            current_epoch: match self {
                Self::EpochMismatch { current, .. } => Some(*current),
                _ => None,
            },
        }
    }
}

impl From<tether_core::Error> for ApiError {
    fn from(err: tether_core::Error) -> Self {
        use tether_core::{Error, HostErrorKind, RuntimeErrorKind, StoreErrorKind};
        match &err {
            Error::Store {
                kind: StoreErrorKind::Unavailable { .. },
            } => Self::Unavailable(format!("{err}; retry shortly")),
            Error::Store {
                kind: StoreErrorKind::Unusable { .. } | StoreErrorKind::SchemaTooNew { .. },
            } => Self::Unavailable(format!(
                "{err}; an operator must fix the database (retrying will not help)"
            )),
            Error::InvalidId(_) | Error::InvalidText(_) => Self::BadRequest(err.to_string()),
            Error::Host {
                kind: HostErrorKind::SessionNotFound { .. },
            } => Self::NotFound(err.to_string()),
            Error::Host { .. } => Self::Conflict(err.to_string()),
            Error::MutationBlocked { message } => Self::LeaseHeld(format!(
                "{message}: run `tether leases expire` (or POST …/expire-lease) for that binding, then retry"
            )),
            Error::LeaseTimeout { .. } => Self::LeaseHeld(format!(
                "{err}: a live lease held the key for the whole wait; retry later, or run `tether leases expire` (or POST …/expire-lease) for that binding"
            )),
            Error::CompetingWork { .. }
            | Error::SupersededGeneration { .. }
            | Error::OwnerChanged { .. } => Self::Conflict(format!("{err}; reload and retry")),
            Error::Runtime {
                kind: RuntimeErrorKind::Busy,
                ..
            } => Self::Conflict(format!(
                "{err}; another process holds the native session: retry once it lets go"
            )),
            Error::Runtime {
                kind: RuntimeErrorKind::Unavailable,
                ..
            } => Self::Unavailable(format!(
                "{err}; the native agent runtime is restarted for the next operation: retry shortly"
            )),
            Error::Runtime {
                kind: RuntimeErrorKind::Unusable,
                ..
            } => Self::Unavailable(format!(
                "{err}; the native agent runtime cannot start: an operator must fix its installation (retrying will not help)"
            )),
            _ if err.is_outcome_unknown() => Self::OutcomeUnknown(format!(
                "{err}; the change may or may not have been made: read it again before retrying"
            )),
            _ => Self::Internal(err.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), Json(self.body())).into_response();
        if matches!(self, Self::Unauthorized(_)) {
            // RFC 9110 section 11.6.1: a 401 names the scheme it wants.
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"tether\""),
            );
        }
        response
    }
}

/// One documented error status: which codes it carries and what they mean.
struct Documented {
    status: u16,
    text: &'static str,
}

const BAD_REQUEST: Documented = Documented {
    status: 400,
    text: "`bad_request`: a parameter or body is malformed; `page_size_too_large`: `limit` is above the maximum",
};
const UNAUTHORIZED: Documented = Documented {
    status: 401,
    text: "`unauthorized`: the bearer token is missing or wrong",
};
const FORBIDDEN: Documented = Documented {
    status: 403,
    text: "`forbidden`: the token has read scope only; actions need TETHER_ADMIN_TOKEN",
};
const NOT_FOUND: Documented = Documented {
    status: 404,
    text: "`not_found`: no such session, binding or quarantined key",
};
const CONFLICT: Documented = Documented {
    status: 409,
    text: "`lease_held`: a live lease blocks the action (force-expire it first); `conflict`: the state moved on or the action does not apply; `epoch_mismatch` (expire-lease): the lease is at another epoch now, given in `current_epoch`; `no_lease` (expire-lease): the binding holds no live lease, nothing to expire",
};
const TOO_LARGE: Documented = Documented {
    status: 413,
    text: "`payload_too_large`: the request body is above the limit",
};
const URI_TOO_LONG: Documented = Documented {
    status: 414,
    text: "`uri_too_long`: the path and query are above the limit (8 KiB)",
};
const HEADERS_TOO_LARGE: Documented = Documented {
    status: 431,
    text: "`headers_too_large`: more than 100 header fields, or above 32 KiB of them",
};
const UNAVAILABLE: Documented = Documented {
    status: 503,
    text: "`unavailable`: the database does not answer",
};
const INTERNAL: Documented = Documented {
    status: 500,
    text: "`internal`: an unexpected failure (see the service log)",
};
const INTERNAL_ACTION: Documented = Documented {
    status: 500,
    text: "`internal`: an unexpected failure (see the service log); `outcome_unknown`: the action's COMMIT failed or its answer was lost, so it may or may not have taken effect (read the target again before retrying)",
};

fn responses(set: &[Documented]) -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
    set.iter()
        .map(|d| {
            let response = ResponseBuilder::new()
                .description(d.text)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build();
            (d.status.to_string(), RefOr::T(response))
        })
        .collect()
}

macro_rules! error_set {
    ($(#[$doc:meta])* $name:ident = [$($d:ident),*]) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub(crate) struct $name;

        impl utoipa::IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::response::Response>> {
                responses(&[$($d),*])
            }
        }
    };
}

error_set!(
    /// Errors of a plain read: 401, 414, 431, 500, 503.
    ReadErrors = [UNAUTHORIZED, URI_TOO_LONG, HEADERS_TOO_LARGE, INTERNAL, UNAVAILABLE]
);
error_set!(
    /// Errors of a list or search: 400, 401, 414, 431, 500, 503.
    ListErrors = [
        BAD_REQUEST,
        UNAUTHORIZED,
        URI_TOO_LONG,
        HEADERS_TOO_LARGE,
        INTERNAL,
        UNAVAILABLE
    ]
);
error_set!(
    /// Errors of a detail read: 400, 401, 404, 414, 431, 500, 503.
    DetailErrors = [
        BAD_REQUEST,
        UNAUTHORIZED,
        NOT_FOUND,
        URI_TOO_LONG,
        HEADERS_TOO_LARGE,
        INTERNAL,
        UNAVAILABLE
    ]
);
error_set!(
    /// Errors of an action: 400, 401, 403, 404, 409, 413, 414, 431, 500, 503.
    ActionErrors = [
        BAD_REQUEST,
        UNAUTHORIZED,
        FORBIDDEN,
        NOT_FOUND,
        CONFLICT,
        TOO_LARGE,
        URI_TOO_LONG,
        HEADERS_TOO_LARGE,
        INTERNAL_ACTION,
        UNAVAILABLE
    ]
);
error_set!(
    /// Errors of the metrics endpoint: 401, 414, 431 (a database failure leaves its series out
    /// and says so in `tether_database_up`, never fails the scrape).
    MetricsErrors = [UNAUTHORIZED, URI_TOO_LONG, HEADERS_TOO_LARGE]
);
error_set!(
    /// Errors of the readiness probe: 414, 431, 503.
    ReadyErrors = [URI_TOO_LONG, HEADERS_TOO_LARGE, UNAVAILABLE]
);

#[cfg(test)]
mod tests {
    use super::*;
    use utoipa::IntoResponses as _;

    #[test]
    fn host_errors_are_404_and_409_never_500() {
        use tether_core::{Error, HostErrorKind};
        let missing = ApiError::from(Error::from(HostErrorKind::SessionNotFound {
            key: "k".into(),
        }));
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        for kind in [
            HostErrorKind::SessionExists { key: "k".into() },
            HostErrorKind::SessionChanged { key: "k".into() },
        ] {
            assert_eq!(
                ApiError::from(Error::from(kind)).status(),
                StatusCode::CONFLICT
            );
        }
    }

    /// A write whose outcome is unknown is never reported as an ordinary failure (the
    /// operator must read the target again), and a busy key is a 409 like a live lease.
    #[test]
    fn unknown_outcomes_and_busy_keys_have_their_own_codes() {
        use tether_core::{BindingKey, Error, StoreErrorKind};
        let key = BindingKey::parse("session:main:s-1").unwrap();
        for unknown in [
            Error::OutcomeUnknown {
                key: key.clone(),
                message: "the COMMIT's answer was lost".into(),
                cause: None,
            },
            Error::store(StoreErrorKind::CommitFailed {
                message: "connection reset".into(),
                cause: None,
            }),
        ] {
            let api = ApiError::from(unknown);
            assert_eq!(api.code(), "outcome_unknown");
            assert_eq!(api.status(), StatusCode::INTERNAL_SERVER_ERROR);
            assert!(api.to_string().contains("read it again"), "{api}");
        }
        let busy = ApiError::from(Error::LeaseTimeout {
            key,
            message: "still held".into(),
        });
        assert_eq!(busy.code(), "lease_held");
        assert_eq!(busy.status(), StatusCode::CONFLICT);
        assert_eq!(
            ApiError::from(Error::other("boom")).code(),
            "internal",
            "anything else stays internal"
        );
    }

    /// A native runtime's failure keeps its kind through the admin API: busy elsewhere is a
    /// 409, a runtime that is gone or cannot start a 503, a refused or failed turn a 500.
    #[test]
    fn native_runtime_errors_keep_their_kind() {
        use tether_core::{Error, RuntimeErrorKind};
        let api = |kind| ApiError::from(Error::runtime(kind, "codex says no", None));
        assert_eq!(api(RuntimeErrorKind::Busy).code(), "conflict");
        assert_eq!(api(RuntimeErrorKind::Unavailable).code(), "unavailable");
        assert!(
            api(RuntimeErrorKind::Unavailable)
                .to_string()
                .contains("retry shortly")
        );
        let unusable = api(RuntimeErrorKind::Unusable);
        assert_eq!(unusable.code(), "unavailable");
        assert!(
            unusable.to_string().contains("retrying will not help"),
            "{unusable}"
        );
        assert_eq!(api(RuntimeErrorKind::Refused).code(), "internal");
        assert_eq!(api(RuntimeErrorKind::TurnFailed).code(), "internal");
    }

    /// Only an epoch mismatch carries `current_epoch`; every other body has no such field.
    #[test]
    fn an_epoch_mismatch_names_the_current_epoch_in_its_body() {
        let body = ApiError::EpochMismatch {
            current: 7,
            message: "moved".into(),
        }
        .body();
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            serde_json::json!({"code": "epoch_mismatch", "message": "moved", "current_epoch": 7})
        );
        let other = serde_json::to_value(ApiError::NoLease("none".into()).body()).unwrap();
        assert_eq!(
            other,
            serde_json::json!({"code": "no_lease", "message": "none"})
        );
        // An older body without the field still reads.
        let old: ErrorBody = serde_json::from_str(r#"{"code":"conflict","message":"m"}"#).unwrap();
        assert_eq!(old.current_epoch, None);
    }

    #[test]
    fn every_variant_has_a_distinct_code_and_a_documented_status() {
        let all = [
            ApiError::BadRequest(String::new()),
            ApiError::PageSizeTooLarge { asked: 2, max: 1 },
            ApiError::Unauthorized(String::new()),
            ApiError::Forbidden(String::new()),
            ApiError::NotFound(String::new()),
            ApiError::MethodNotAllowed(String::new()),
            ApiError::LeaseHeld(String::new()),
            ApiError::Conflict(String::new()),
            ApiError::EpochMismatch {
                current: 3,
                message: String::new(),
            },
            ApiError::NoLease(String::new()),
            ApiError::PayloadTooLarge(String::new()),
            ApiError::Unavailable(String::new()),
            ApiError::OutcomeUnknown(String::new()),
            ApiError::Internal(String::new()),
        ];
        let mut codes: Vec<_> = all.iter().map(ApiError::code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), all.len());
        let documented = ActionErrors::responses();
        // 405 comes from the router (a path served with other methods), not from any route.
        for e in all
            .iter()
            .filter(|e| !matches!(e, ApiError::MethodNotAllowed(_)))
        {
            let status = e.status().as_u16().to_string();
            let Some(RefOr::T(response)) = documented.get(&status) else {
                panic!("status {status} of `{}` is not documented", e.code());
            };
            assert!(
                response.description.contains(e.code()),
                "`{}` missing from {status}",
                e.code()
            );
        }
    }
}
