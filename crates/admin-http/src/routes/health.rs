//! `/healthz`: liveness only. It never asks the database: an orchestrator that restarts a
//! process whose liveness fails would restart every replica while the database is down (a
//! restart storm that helps nothing). Database reachability is `/readyz`.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

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

/// Liveness: the process answers. The database is not consulted (see `/readyz`).
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    security(()),
    responses(
        (status = 200, description = "The process is up (the database is not checked: see `/readyz`)", body = Health),
    )
)]
pub async fn healthz(State(state): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        backend: state.probe().backend().into(),
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_seconds: state.uptime_seconds(),
    })
}
