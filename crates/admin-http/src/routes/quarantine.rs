//! `/v1/quarantine`: quarantined keys, their detail and their release.

use axum::Json;
use axum::extract::State;
use tether_core::{BindingKey, Namespace, QuarantineStore as _, Timestamp};
use tether_storage::QuarantineCursor;

use crate::auth::{AdminAccess, ReadAccess};
use crate::dto::{
    ActionResult, BindingBody, QuarantineBody, QuarantineDetail, QuarantinePageBody, ReasonBody,
};
use crate::error::{ActionErrors, ApiError, DetailErrors, ListErrors};
use crate::params::{
    ApiJson, ApiPath, ApiQuery, BindingPath, cursor, decode_cursor, encode_cursor, page_size,
    reason,
};
use crate::routes::bindings::parse_ns_key;
use crate::state::{AppState, Counters};

/// Search and paging of the quarantine list.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct QuarantineQuery {
    /// Only keys whose namespace, key or reason contains this text (any case).
    pub q: Option<String>,
    /// Page size (default 50, at most 200).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page (absent or empty: the first page).
    pub cursor: Option<String>,
}

/// Quarantined keys, oldest first, one page at a time, each naming its host session where the
/// store knows it. A page searched with `q` may hold fewer keys than asked and still have a
/// `next_cursor`.
#[utoipa::path(
    get,
    path = "/v1/quarantine",
    tag = "quarantine",
    params(QuarantineQuery),
    responses(
        (status = 200, description = "One page of quarantined keys, oldest first", body = QuarantinePageBody),
        ListErrors,
    )
)]
pub async fn list_quarantine(
    _: ReadAccess,
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<QuarantineQuery>,
) -> Result<Json<QuarantinePageBody>, ApiError> {
    Ok(Json(quarantine_list(state.store()?, &q).await?))
}

/// One page of the quarantine list for `q` (the API's and the dashboard's).
pub async fn quarantine_list(
    store: &tether_storage::Store,
    q: &QuarantineQuery,
) -> Result<QuarantinePageBody, ApiError> {
    let limit = page_size(q.limit)?;
    let after = match cursor(q.cursor.as_deref()) {
        None => None,
        Some(token) => Some(decode_quarantine_cursor(token)?),
    };
    let (keys, next) = crate::lists::quarantine(store, after, limit, q.q.as_deref()).await?;
    let names = crate::lists::SessionNames::resolve(store, keys.iter().map(|k| &k.key)).await?;
    Ok(QuarantinePageBody {
        quarantine: keys
            .iter()
            .map(|k| QuarantineBody::from(k).named(&names))
            .collect(),
        next_cursor: next.map(|c| {
            encode_cursor(&[
                &c.quarantined_at.as_millis().to_string(),
                c.namespace.as_str(),
                c.key.as_str(),
            ])
        }),
    })
}

fn decode_quarantine_cursor(token: &str) -> Result<QuarantineCursor, ApiError> {
    let invalid = || {
        ApiError::BadRequest(
            "invalid `cursor`: pass back the `next_cursor` of the previous page unchanged".into(),
        )
    };
    let parts = decode_cursor(token, 3)?;
    Ok(QuarantineCursor {
        quarantined_at: Timestamp::from_millis(parts[0].parse().map_err(|_| invalid())?),
        namespace: Namespace::new(parts[1].clone()).map_err(|_| invalid())?,
        key: BindingKey::parse(&parts[2]).map_err(|_| invalid())?,
    })
}

/// One quarantined key with the binding row it blocks.
#[utoipa::path(
    get,
    path = "/v1/quarantine/{namespace}/{key}",
    tag = "quarantine",
    params(BindingPath),
    responses(
        (status = 200, description = "The quarantine record", body = QuarantineDetail),
        DetailErrors,
    )
)]
pub async fn get_quarantine(
    _: ReadAccess,
    State(state): State<AppState>,
    ApiPath(BindingPath { namespace, key }): ApiPath<BindingPath>,
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
    params(BindingPath),
    request_body = ReasonBody,
    responses(
        (status = 200, description = "The key is released", body = ActionResult),
        ActionErrors,
    ),
    security(("bearer" = []))
)]
pub async fn release_quarantine(
    access: AdminAccess,
    State(state): State<AppState>,
    ApiPath(BindingPath { namespace, key }): ApiPath<BindingPath>,
    ApiJson(body): ApiJson<ReasonBody>,
) -> Result<Json<ActionResult>, ApiError> {
    let (ns, key) = parse_ns_key(&namespace, &key)?;
    let why = reason(&body.reason)?;
    let done =
        crate::actions::release_quarantine_action(state.store()?, &access.actor, &ns, &key, &why)
            .await?;
    Counters::bump(&state.counters().quarantine_releases);
    Ok(Json(done))
}
