//! `/v1/audit`: the operators' audit trail, newest first, with cursor paging.

use axum::Json;
use axum::extract::State;

use crate::auth::ReadAccess;
use crate::dto::{AuditEntryBody, AuditPageBody};
use crate::error::{ApiError, ListErrors};
use crate::params::{ApiQuery, cursor, encode_cursor, page_size};
use crate::routes::bindings::{EventQuery, decode_seq_cursor};
use crate::state::AppState;

/// Operator actions (API and CLI) with actor, reason, time and outcome, newest first.
#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "actions",
    params(EventQuery),
    responses(
        (status = 200, description = "One page of the audit trail, newest first", body = AuditPageBody),
        ListErrors,
    )
)]
pub async fn list_audit(
    _: ReadAccess,
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<EventQuery>,
) -> Result<Json<AuditPageBody>, ApiError> {
    let limit = page_size(q.limit)?;
    let before = match cursor(q.cursor.as_deref()) {
        None => None,
        Some(token) => Some(decode_seq_cursor(token)?),
    };
    let page = state.store()?.audit_page(before, limit).await?;
    Ok(Json(AuditPageBody {
        entries: page.entries.iter().map(AuditEntryBody::from).collect(),
        next_cursor: page.next.map(|id| encode_cursor(&[&id.to_string()])),
    }))
}
