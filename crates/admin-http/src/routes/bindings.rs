//! Bindings and leases (`/v1/namespaces`, `/v1/leases`, `/v1/lease-events`) and the
//! force-expiry action.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use tether_core::{BindingKey, Namespace, QuarantineStore as _};
use utoipa::IntoParams;

use crate::auth::{AdminAccess, ReadAccess};
use crate::dto::{
    ActionResult, BindingBody, BindingDetail, BindingPageBody, ExpireLeaseBody, LeaseEventBody,
    LeaseEventPageBody, NamespaceBody, QuarantineBody,
};
use crate::error::{ActionErrors, ApiError, DetailErrors, ListErrors, ReadErrors};
use crate::lists::SessionNames;
use crate::params::{
    ApiJson, ApiPath, ApiQuery, BindingPath, cursor, decode_cursor, encode_cursor, page_size,
    parse_id, reason,
};
use crate::state::{AppState, Counters};

/// Lease history shown with a binding.
pub const BINDING_EVENTS: usize = 50;

pub(crate) fn parse_ns_key(ns: &str, key: &str) -> Result<(Namespace, BindingKey), ApiError> {
    Ok((
        parse_id("namespace", ns, Namespace::new)?,
        parse_id("key", key, BindingKey::parse)?,
    ))
}

/// The namespaces with live binding rows.
#[utoipa::path(
    get,
    path = "/v1/namespaces",
    tag = "bindings",
    responses(
        (status = 200, description = "Namespaces with their row and lease counts", body = Vec<NamespaceBody>),
        ReadErrors,
    )
)]
pub async fn list_namespaces(
    _: ReadAccess,
    State(state): State<AppState>,
) -> Result<Json<Vec<NamespaceBody>>, ApiError> {
    let namespaces = state.store()?.namespaces().await?;
    Ok(Json(namespaces.iter().map(NamespaceBody::from).collect()))
}

/// Filters and paging of the binding list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LeaseQuery {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only rows with a live lease (`true`, the default when absent or empty; `false` lists every
    /// live row).
    #[serde(default, deserialize_with = "crate::params::optional_bool")]
    #[param(value_type = Option<String>, pattern = "^(true|false)?$")]
    pub leased: Option<bool>,
    /// Only rows whose lease is held by exactly this holder ("what does worker X hold?").
    pub holder: Option<String>,
    /// Only rows whose namespace, key or holder contains this text (any case).
    pub q: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size (default 50, at most 200).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<usize>,
}

/// Lists binding rows with their leases (by default only live leases), each naming its host
/// session where the store knows it. A page filtered by `holder` or `q` may hold fewer rows
/// than asked and still have a `next_cursor`.
#[utoipa::path(
    get,
    path = "/v1/leases",
    tag = "bindings",
    params(LeaseQuery),
    responses(
        (status = 200, description = "One page of binding rows", body = BindingPageBody),
        ListErrors,
    )
)]
pub async fn list_leases(
    _: ReadAccess,
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<LeaseQuery>,
) -> Result<Json<BindingPageBody>, ApiError> {
    Ok(Json(binding_page(state.store()?, &q).await?))
}

/// One page of the binding list for `q` (the API's and the dashboard's).
pub async fn binding_page(
    store: &tether_storage::Store,
    q: &LeaseQuery,
) -> Result<BindingPageBody, ApiError> {
    let limit = page_size(q.limit)?;
    let namespace = q
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .map(|n| parse_id("namespace", n, Namespace::new))
        .transpose()?;
    let after = match cursor(q.cursor.as_deref()) {
        Some(token) => {
            let parts = decode_cursor(token, 2)?;
            Some(parse_ns_key(&parts[0], &parts[1])?)
        }
        None => None,
    };
    let (rows, next) = crate::lists::bindings(
        store,
        &crate::lists::BindingQuery {
            namespace,
            leased_only: q.leased.unwrap_or(true),
            holder: q.holder.clone(),
            q: q.q.clone(),
            after,
            limit,
        },
    )
    .await?;
    let names = SessionNames::resolve(store, rows.iter().map(|r| &r.key)).await?;
    let now = store.clock().now();
    Ok(BindingPageBody {
        bindings: rows
            .iter()
            .map(|r| BindingBody::new(r, now).named(&names))
            .collect(),
        next_cursor: next.map(|(n, k)| encode_cursor(&[n.as_str(), k.as_str()])),
    })
}

/// One binding row: holder, epoch, acquired / renewed / expires, and its lease history.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{namespace}/bindings/{key}",
    tag = "bindings",
    params(BindingPath),
    responses(
        (status = 200, description = "The binding row with its lease history", body = BindingDetail),
        DetailErrors,
    )
)]
pub async fn get_binding(
    _: ReadAccess,
    State(state): State<AppState>,
    ApiPath(BindingPath { namespace, key }): ApiPath<BindingPath>,
) -> Result<Json<BindingDetail>, ApiError> {
    let (ns, key) = parse_ns_key(&namespace, &key)?;
    let store = state.store()?;
    let record = store.binding_record(&ns, &key).await?.ok_or_else(|| {
        ApiError::NotFound(format!(
            "no live binding row at {ns}/{key}: list rows with GET /v1/leases?leased=false"
        ))
    })?;
    let quarantine = store.quarantined(&ns, &key).await?;
    let events = store
        .recent_lease_events(Some((&ns, &key)), BINDING_EVENTS)
        .await?;
    let names = SessionNames::resolve(store, [&key]).await?;
    Ok(Json(BindingDetail {
        binding: BindingBody::new(&record, store.clock().now()).named(&names),
        quarantine: quarantine
            .as_ref()
            .map(|q| QuarantineBody::from(q).named(&names)),
        events: events
            .iter()
            .map(|e| LeaseEventBody::from(e).named(&names))
            .collect(),
    }))
}

/// Filters and paging of the lease history.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LeaseEventQuery {
    /// Only events of this namespace.
    pub namespace: Option<String>,
    /// Only events of this binding key.
    pub key: Option<String>,
    /// Only events of this kind.
    #[param(value_type = Option<String>, pattern = "^(acquired|renewed|released|expired|taken_over|fenced)?$")]
    pub kind: Option<String>,
    /// Only events naming exactly this holder.
    pub holder: Option<String>,
    /// Page size (default 50, at most 200).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page (absent or empty: the first page).
    pub cursor: Option<String>,
}

/// The lease events of the whole store, newest first, one page at a time, each naming its
/// host session where the store knows it. A filtered page may hold fewer events than asked and
/// still have a `next_cursor`.
#[utoipa::path(
    get,
    path = "/v1/lease-events",
    tag = "bindings",
    params(LeaseEventQuery),
    responses(
        (status = 200, description = "One page of lease events, newest first", body = LeaseEventPageBody),
        ListErrors,
    )
)]
pub async fn list_lease_events(
    _: ReadAccess,
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<LeaseEventQuery>,
) -> Result<Json<LeaseEventPageBody>, ApiError> {
    Ok(Json(event_page(state.store()?, &q).await?))
}

/// One page of the lease history for `q` (the API's and the dashboard's).
pub async fn event_page(
    store: &tether_storage::Store,
    q: &LeaseEventQuery,
) -> Result<LeaseEventPageBody, ApiError> {
    let limit = page_size(q.limit)?;
    let before = match cursor(q.cursor.as_deref()) {
        None => None,
        Some(token) => Some(decode_seq_cursor(token)?),
    };
    let nonempty = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
    let kind = nonempty(&q.kind)
        .map(|k| {
            k.parse::<tether_storage::LeaseEventKind>().map_err(|_| {
                ApiError::BadRequest(format!(
                    "invalid `kind` `{k}`: one of acquired, renewed, released, expired, taken_over, fenced"
                ))
            })
        })
        .transpose()?;
    let (events, next) = crate::lists::events(
        store,
        &crate::lists::EventQuery {
            namespace: nonempty(&q.namespace)
                .map(|n| parse_id("namespace", &n, Namespace::new))
                .transpose()?,
            key: nonempty(&q.key)
                .map(|k| parse_id("key", &k, BindingKey::parse))
                .transpose()?,
            kind,
            holder: q.holder.clone(),
            before,
            limit,
        },
    )
    .await?;
    let names = SessionNames::resolve(store, events.iter().map(|e| &e.key)).await?;
    Ok(LeaseEventPageBody {
        events: events
            .iter()
            .map(|e| LeaseEventBody::from(e).named(&names))
            .collect(),
        next_cursor: next.map(|seq| encode_cursor(&[&seq.to_string()])),
    })
}

/// The position (a sequence number) of a cursor made by [`encode_cursor`] from one number.
pub(crate) fn decode_seq_cursor(token: &str) -> Result<u64, ApiError> {
    let parts = decode_cursor(token, 1)?;
    parts[0].parse().map_err(|_| {
        ApiError::BadRequest(
            "invalid `cursor`: pass back the `next_cursor` of the previous page unchanged".into(),
        )
    })
}

/// Force-expires the lease of a binding row (admin scope): the lease is removed, the epoch
/// floor and revision bumped so the old holder's next write is fenced, and an `expired` event
/// recorded. Refusals a client decides on: 409 `epoch_mismatch` when `expected_epoch` is not
/// the lease's epoch any more (the body's `current_epoch` says which it is), 409 `no_lease`
/// when the binding holds no live lease (an expiry retried after it took effect).
#[utoipa::path(
    post,
    path = "/v1/namespaces/{namespace}/bindings/{key}/expire-lease",
    tag = "actions",
    params(BindingPath),
    request_body = ExpireLeaseBody,
    responses(
        (status = 200, description = "The lease was expired", body = ActionResult),
        ActionErrors,
    ),
    security(("bearer" = []))
)]
pub async fn expire_lease(
    access: AdminAccess,
    State(state): State<AppState>,
    ApiPath(BindingPath { namespace, key }): ApiPath<BindingPath>,
    ApiJson(body): ApiJson<ExpireLeaseBody>,
) -> Result<Json<ActionResult>, ApiError> {
    let (ns, key) = parse_ns_key(&namespace, &key)?;
    let why = reason(&body.reason)?;
    let done = crate::actions::expire_lease_action(
        state.store()?,
        &access.actor,
        &ns,
        &key,
        body.expected_epoch,
        &why,
    )
    .await?;
    Counters::bump(&state.counters().force_expirations);
    Ok(Json(done))
}
