//! `/v1/quarantine`: quarantined keys, their detail and their release.

use axum::Json;
use axum::extract::{Path, State};
use tether_core::QuarantineStore as _;
use tether_storage::StoreAdmin as _;

use crate::auth::{AdminAccess, ReadAccess};
use crate::dto::{ActionResult, BindingBody, QuarantineBody, QuarantineDetail, ReasonBody};
use crate::error::{ActionErrors, ApiError, DetailErrors, ListErrors};
use crate::params::{ApiJson, ApiQuery, page_size, reason};
use crate::routes::bindings::{EventQuery, parse_ns_key};
use crate::state::{AppState, Counters};

/// Quarantined keys, oldest first.
#[utoipa::path(
    get,
    path = "/v1/quarantine",
    tag = "quarantine",
    params(EventQuery),
    responses(
        (status = 200, description = "Quarantined keys, oldest first", body = Vec<QuarantineBody>),
        ListErrors,
    )
)]
pub async fn list_quarantine(
    _: ReadAccess,
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<EventQuery>,
) -> Result<Json<Vec<QuarantineBody>>, ApiError> {
    let limit = page_size(q.limit)?;
    let keys = state.store()?.quarantined_keys(limit).await?;
    Ok(Json(keys.iter().map(QuarantineBody::from).collect()))
}

/// One quarantined key with the binding row it blocks.
#[utoipa::path(
    get,
    path = "/v1/quarantine/{namespace}/{key}",
    tag = "quarantine",
    params(
        ("namespace" = String, Path, description = "The binding namespace", pattern = "^[A-Za-z0-9._-]{1,128}$"),
        ("key" = String, Path, description = "The quarantined key", pattern = "^(session:[^:\\u0000-\\u001f\\u007f-\\u009f]*[^:\\s\\u0000-\\u001f\\u007f-\\u009f][^:\\u0000-\\u001f\\u007f-\\u009f]*:[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*|session-key:[^:\\u0000-\\u001f\\u007f-\\u009f]*[^:\\s\\u0000-\\u001f\\u007f-\\u009f][^:\\u0000-\\u001f\\u007f-\\u009f]*:[A-Za-z0-9_-]{43}|conversation:[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*)$"),
    ),
    responses(
        (status = 200, description = "The quarantine record", body = QuarantineDetail),
        DetailErrors,
    )
)]
pub async fn get_quarantine(
    _: ReadAccess,
    State(state): State<AppState>,
    Path((namespace, key)): Path<(String, String)>,
) -> Result<Json<QuarantineDetail>, ApiError> {
    let (ns, key) = parse_ns_key(&namespace, &key)?;
    let store = state.store()?;
    let entry = store
        .quarantined(&ns, &key)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("{ns}/{key} is not quarantined")))?;
    let binding = store.binding_record(&ns, &key).await?;
    Ok(Json(QuarantineDetail {
        quarantine: QuarantineBody::from(&entry),
        binding: binding.map(|b| BindingBody::new(&b, store.clock().now())),
    }))
}

/// Releases a quarantined key (admin scope; the operator's reason is required and logged).
#[utoipa::path(
    post,
    path = "/v1/quarantine/{namespace}/{key}/release",
    tag = "actions",
    params(
        ("namespace" = String, Path, description = "The binding namespace", pattern = "^[A-Za-z0-9._-]{1,128}$"),
        ("key" = String, Path, description = "The quarantined key", pattern = "^(session:[^:\\u0000-\\u001f\\u007f-\\u009f]*[^:\\s\\u0000-\\u001f\\u007f-\\u009f][^:\\u0000-\\u001f\\u007f-\\u009f]*:[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*|session-key:[^:\\u0000-\\u001f\\u007f-\\u009f]*[^:\\s\\u0000-\\u001f\\u007f-\\u009f][^:\\u0000-\\u001f\\u007f-\\u009f]*:[A-Za-z0-9_-]{43}|conversation:[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*)$"),
    ),
    request_body = ReasonBody,
    responses(
        (status = 200, description = "The key is released", body = ActionResult),
        ActionErrors,
    ),
    security(("bearer" = []))
)]
pub async fn release_quarantine(
    _: AdminAccess,
    State(state): State<AppState>,
    Path((namespace, key)): Path<(String, String)>,
    ApiJson(body): ApiJson<ReasonBody>,
) -> Result<Json<ActionResult>, ApiError> {
    let (ns, key) = parse_ns_key(&namespace, &key)?;
    let why = reason(&body.reason)?;
    if !state.store()?.release_quarantine(&ns, &key, &why).await? {
        return Err(ApiError::NotFound(format!("{ns}/{key} is not quarantined")));
    }
    Counters::bump(&state.counters().quarantine_releases);
    Ok(Json(ActionResult {
        outcome: "released".into(),
        message: format!("{ns}/{key} is released; harnesses may bind it again"),
        previous_epoch: None,
    }))
}
