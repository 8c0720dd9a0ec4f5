//! `/healthz`: liveness plus a database reachability check.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The health report.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok` when the service answers with 200.
    pub status: String,
    /// The storage backend (`sqlite`, `postgres`).
    pub backend: String,
    /// The service version.
    pub version: String,
    /// Seconds since start.
    pub uptime_seconds: u64,
}

/// Liveness and database reachability.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    security(()),
    responses(
        (status = 200, description = "The service is up and its database answers", body = Health),
        (status = 503, description = "The database does not answer (code `unavailable`)", body = ErrorBody),
    )
)]
pub async fn healthz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    state
        .probe()
        .check()
        .await
        .map_err(|reason| ApiError::Unavailable(format!("database check failed: {reason}")))?;
    Ok(Json(Health {
        status: "ok".into(),
        backend: state.probe().backend().into(),
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_seconds: state.uptime_seconds(),
    }))
}
