//! `/v1/audit`: the operators' audit trail, newest first, with cursor paging.

use axum::Json;
use axum::extract::State;

use crate::auth::ReadAccess;
use crate::dto::{AuditEntryBody, AuditPageBody};
use crate::error::{ApiError, ListErrors};
use crate::params::{ApiQuery, cursor, encode_cursor, page_size};
use crate::routes::bindings::decode_seq_cursor;
use crate::state::AppState;

/// Filters and paging of the audit trail.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only actions by exactly this actor (a token's name, `cli` or `anonymous`).
    pub actor: Option<String>,
    /// Only this action.
    #[param(pattern = "^(delete_session|expire_lease|release_quarantine)?$")]
    pub action: Option<String>,
    /// Only this outcome.
    #[param(pattern = "^(started|succeeded|refused|failed)?$")]
    pub outcome: Option<String>,
    /// Page size (default 50, at most 200).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page (absent or empty: the first page).
    pub cursor: Option<String>,
}

/// Operator actions (API, dashboard and CLI) with actor, reason, time and outcome, newest
/// first. A filtered page may hold fewer entries than asked and still have a `next_cursor`.
#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "actions",
    params(AuditQuery),
    responses(
        (status = 200, description = "One page of the audit trail, newest first", body = AuditPageBody),
        ListErrors,
    )
)]
pub async fn list_audit(
    _: ReadAccess,
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<AuditPageBody>, ApiError> {
    Ok(Json(audit_list(state.store()?, &q).await?))
}

/// One page of the audit trail for `q` (the API's and the dashboard's).
pub async fn audit_list(
    store: &tether_storage::Store,
    q: &AuditQuery,
) -> Result<AuditPageBody, ApiError> {
    let limit = page_size(q.limit)?;
    let before = match cursor(q.cursor.as_deref()) {
        None => None,
        Some(token) => Some(decode_seq_cursor(token)?),
    };
    let one_of = |field: &str, value: &Option<String>, allowed: &[&str]| match value.as_deref() {
        Some(v) if !v.is_empty() && !allowed.contains(&v) => Err(ApiError::BadRequest(format!(
            "invalid `{field}` `{v}`: one of {}",
            allowed.join(", ")
        ))),
        _ => Ok(()),
    };
    one_of(
        "action",
        &q.action,
        &[
            crate::actions::DELETE_SESSION,
            crate::actions::EXPIRE_LEASE,
            crate::actions::RELEASE_QUARANTINE,
        ],
    )?;
    one_of(
        "outcome",
        &q.outcome,
        &tether_storage::AuditOutcome::ALL.map(tether_storage::AuditOutcome::as_str),
    )?;
    let (entries, next) = crate::lists::audit(
        store,
        &crate::lists::AuditQuery {
            actor: q.actor.clone(),
            action: q.action.clone(),
            outcome: q.outcome.clone(),
            before,
            limit,
        },
    )
    .await?;
    Ok(AuditPageBody {
        entries: entries.iter().map(AuditEntryBody::from).collect(),
        next_cursor: next.map(|id| encode_cursor(&[&id.to_string()])),
    })
}
