//! # tether-admin-http
//!
//! Tether's admin service: an axum router with the JSON API under `/v1` (sessions, bindings and
//! leases, lease history, transcript search, quarantined keys, and the admin actions: delete a
//! session, force-expire a lease, release a quarantined key), a server-rendered dashboard at `/`,
//! `/healthz`, `/readyz`, `/metrics`, its OpenAPI document at `/api-docs/openapi.json` and
//! Swagger UI at `/docs` (served from the binary, no network), plus the `tether` command-line
//! binary (`serve`, `migrate`, `demo` (`--codex` on the real Codex app-server), and operator
//! commands mirroring the API).
//!
//! The admin process registers no namespace and runs no harness: it reads binding rows straight
//! from the database by namespace and key, and deletes a session through the transactional
//! deletion path with the session's binding rows removed inside the same transaction (refused
//! while one of them holds a live lease).
//!
//! The router is built by [`app`] from an [`AppState`], so tests drive it with
//! `tower::ServiceExt::oneshot` and need no socket:
//!
//! ```
//! # tokio_test_block_on(async {
//! use axum::body::Body;
//! use axum::http::{Request, StatusCode};
//! use tower::ServiceExt as _;
//! use tether_admin_http::{AppState, app};
//!
//! let response = app(AppState::for_tests())
//!     .oneshot(Request::get("/healthz").body(Body::empty()).unwrap())
//!     .await
//!     .unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! # });
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! ```
//!
//! This is the only Tether crate that knows HTTP; its JSON DTOs (with `utoipa::ToSchema`) live
//! here, not in `tether-core`.

pub mod actions;
pub mod auth;
mod config;
pub mod database;
pub mod dto;
mod error;
pub(crate) mod lists;
mod openapi;
pub mod params;
pub mod routes;
pub mod sanitize;
mod server;
pub mod signin;
mod state;

pub use config::{ConfigError, DEFAULT_BIND, DEFAULT_DATABASE_URL, ServeConfig};
pub use error::{ApiError, ErrorBody};
pub use openapi::{OPENAPI_PATH, app, openapi};
pub use server::{MAX_HEADER_READ_TIMEOUT, ServeLimits, serve};
pub use state::{AppState, Counters, HTTP_LATENCY_BOUNDS, HealthProbe, HttpMetrics, RouteStats};
