//! `/v1/sessions`: list, detail, deletion, and transcript search within one session.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::IntoResponse as _;
use serde::Deserialize;
use tether_core::{AgentId, HarnessId, HarnessRegistry, HostSessionEntry, SessionKey};
use tether_host::{DeletionRequest, HostSessions, WorkTracker};
use tether_storage::{SessionFilter, Store, StoreAdmin as _, session_binding_keys};
use utoipa::IntoParams;

use crate::auth::{AdminAccess, ReadAccess};
use crate::dto::ReasonBody;
use crate::dto::{
    ActionResult, BindingBody, LeaseEventBody, Lineage, QuarantineBody, SearchBody, SessionDetail,
    SessionPageBody, SessionPageRef, SessionSummary, SessionSummaryRef, TranscriptEntryBody,
    TranscriptHitBody,
};
use crate::error::{ActionErrors, ApiError, DetailErrors, ListErrors};
use crate::lists::search_text;
use crate::params::{ApiJson, ApiPath, reason};
use crate::params::{ApiQuery, cursor, decode_cursor, encode_cursor, page_size, parse_id};
use crate::state::{AppState, Counters};

/// How many transcript entries a session detail shows.
pub const TRANSCRIPT_TAIL: usize = 20;

/// Whether a transcript entry is a finalization record: a `system` entry that starts with
/// [`tether_storage::FINALIZATION_PREFIX`].
pub fn is_finalization_record(role: tether_storage::TranscriptRole, content: &str) -> bool {
    role == tether_storage::TranscriptRole::System
        && content.starts_with(tether_storage::FINALIZATION_PREFIX)
}

/// How many lease events a session detail shows.
pub const DETAIL_EVENTS: usize = 20;

/// Filters and paging of the session list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SessionQuery {
    /// Only sessions of this agent.
    pub agent: Option<String>,
    /// Only sessions driven by this harness.
    pub harness: Option<String>,
    /// Only sessions whose binding holds (`true`) or does not hold (`false`) a live lease;
    /// empty: either.
    #[serde(default, deserialize_with = "crate::params::optional_bool")]
    #[param(value_type = Option<String>, pattern = "^(true|false)?$")]
    pub has_lease: Option<bool>,
    /// Only sessions with (`true`) or without (`false`) a quarantined binding key; empty:
    /// either.
    #[serde(default, deserialize_with = "crate::params::optional_bool")]
    #[param(value_type = Option<String>, pattern = "^(true|false)?$")]
    pub quarantined: Option<bool>,
    /// Only sessions whose key contains this text (any case).
    pub q: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Page size (default 50, at most 200).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<usize>,
}

/// Lists host sessions.
#[utoipa::path(
    get,
    path = "/v1/sessions",
    tag = "sessions",
    params(SessionQuery),
    responses(
        (status = 200, description = "One page of sessions", body = SessionPageBody),
        ListErrors,
    )
)]
pub async fn list_sessions(
    _: ReadAccess,
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<SessionQuery>,
) -> Result<axum::response::Response, ApiError> {
    let store = state.store()?;
    // What `Json` answers, serialized into a buffer sized for the page up front (a page of 200
    // sessions is tens of kilobytes; growing from `Json`'s 128 bytes copies it repeatedly).
    let out = if search_text(q.q.as_deref()).is_some() {
        // A key search reads pages until it has found enough: the owned entries.
        let body = session_page(store, &q).await?;
        let mut out = Vec::with_capacity(256 + body.sessions.len() * 256);
        serde_json::to_writer(&mut out, &body).map_err(|e| ApiError::Internal(e.to_string()))?;
        out
    } else {
        // The page written straight from the store's text: no string is copied on the way.
        let filter = session_filter(&q)?;
        store
            .with_listed_sessions(&filter, |sessions, next| {
                let body = SessionPageRef {
                    sessions: sessions.iter().map(SessionSummaryRef::from).collect(),
                    next_cursor: next.map(|k| encode_cursor(&[k])),
                };
                let mut out = Vec::with_capacity(256 + sessions.len() * 256);
                serde_json::to_writer(&mut out, &body).map(|()| out)
            })
            .await?
            .map_err(|e| ApiError::Internal(e.to_string()))?
    };
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        out,
    )
        .into_response())
}

/// The store's filter for the list query `q` (the search text aside: the caller applies it).
fn session_filter(q: &SessionQuery) -> Result<SessionFilter, ApiError> {
    let limit = page_size(q.limit)?;
    let after = match cursor(q.cursor.as_deref()) {
        Some(token) => {
            let parts = decode_cursor(token, 1)?;
            Some(parse_id("cursor", &parts[0], SessionKey::new)?)
        }
        None => None,
    };
    Ok(SessionFilter {
        agent: q
            .agent
            .as_deref()
            .filter(|a| !a.is_empty())
            .map(|a| parse_id("agent", a, AgentId::new))
            .transpose()?,
        harness: q
            .harness
            .as_deref()
            .filter(|h| !h.is_empty())
            .map(|h| parse_id("harness", h, HarnessId::new))
            .transpose()?,
        has_lease: q.has_lease,
        quarantined: q.quarantined,
        after,
        limit,
    })
}

/// One page of the session list for `q` (the API's and the dashboard's).
pub async fn session_page(store: &Store, q: &SessionQuery) -> Result<SessionPageBody, ApiError> {
    let filter = session_filter(q)?;
    let (sessions, next) = crate::lists::sessions(store, filter, q.q.as_deref()).await?;
    Ok(SessionPageBody {
        sessions: sessions.into_iter().map(SessionSummary::from).collect(),
        next_cursor: next.map(|k| encode_cursor(&[k.as_str()])),
    })
}

/// What a "no session" answer of the API tells its reader to do. The CLI words the same hint
/// as its own command, and the console's error page as its session list.
pub const LIST_SESSIONS_HINT: &str = "list sessions with GET /v1/sessions";

/// The session stored under the raw key `raw` (a typed 400 for a malformed key, 404 when absent).
pub async fn load_session(store: &Store, raw: &str) -> Result<HostSessionEntry, ApiError> {
    let key = parse_id("session_key", raw, SessionKey::new)?;
    store
        .session(&key)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no session `{key}`: {LIST_SESSIONS_HINT}")))
}

/// Builds the detail of a session.
pub async fn session_detail(
    store: &Store,
    entry: &HostSessionEntry,
) -> Result<SessionDetail, ApiError> {
    let now = store.clock().now();
    let bindings = store.session_bindings(entry).await?;
    let keys = session_binding_keys(entry);
    let quarantined: Vec<_> = store
        .quarantined_keys(10_000)
        .await?
        .into_iter()
        .filter(|q| keys.contains(&q.key))
        .collect();
    let mut namespaces: Vec<_> = bindings
        .iter()
        .map(|b| b.namespace.clone())
        .chain(quarantined.iter().map(|q| q.namespace.clone()))
        .collect();
    namespaces.sort();
    namespaces.dedup();
    let mut lease_events = Vec::new();
    for ns in &namespaces {
        for key in &keys {
            lease_events.extend(
                store
                    .recent_lease_events(Some((ns, key)), DETAIL_EVENTS)
                    .await?,
            );
        }
    }
    lease_events.sort_by_key(|e| std::cmp::Reverse(e.seq));
    lease_events.truncate(DETAIL_EVENTS);
    let path = store.active_path(&entry.session_key).await?;
    let tail_start = path.len().saturating_sub(TRANSCRIPT_TAIL);
    let tools: Vec<_> = path
        .iter()
        .filter(|e| e.role == tether_storage::TranscriptRole::Tool)
        .collect();
    let tools_start = tools.len().saturating_sub(5);
    Ok(SessionDetail {
        session: SessionSummary::from(entry),
        lineage: Lineage {
            session_id: entry.session_id.to_string(),
            previous_session_id: entry.previous_session_id.as_ref().map(ToString::to_string),
            previous_change: entry.previous_change.map(Into::into),
            lifecycle_revision: entry.lifecycle_revision.get(),
        },
        bindings: bindings
            .iter()
            .map(|b| BindingBody {
                session_key: Some(entry.session_key.to_string()),
                ..BindingBody::new(b, now)
            })
            .collect(),
        quarantine: quarantined
            .iter()
            .map(|q| QuarantineBody {
                session_key: Some(entry.session_key.to_string()),
                ..QuarantineBody::from(q)
            })
            .collect(),
        transcript_tail: path[tail_start..]
            .iter()
            .map(TranscriptEntryBody::from)
            .collect(),
        tool_outcomes: tools[tools_start..]
            .iter()
            .map(|e| TranscriptEntryBody::from(*e))
            .collect(),
        finalizations: path
            .iter()
            .filter(|e| is_finalization_record(e.role, &e.content))
            .map(TranscriptEntryBody::from)
            .collect(),
        lease_events: lease_events
            .iter()
            .map(|e| LeaseEventBody {
                session_key: Some(entry.session_key.to_string()),
                ..LeaseEventBody::from(e)
            })
            .collect(),
        upstream: store
            .upstream_link(&entry.session_key)
            .await?
            .map(|u| crate::sanitize::sanitize_text(&u)),
    })
}

/// One session: entry, lineage, bindings with leases, quarantine, transcript tail (sanitized),
/// last tool outcomes and lease events.
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_key}",
    tag = "sessions",
    params(("session_key" = String, Path, description = "The logical session key (no control characters, not blank)", pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$", max_length = 512)),
    responses(
        (status = 200, description = "The session", body = SessionDetail),
        DetailErrors,
    )
)]
pub async fn get_session(
    _: ReadAccess,
    State(state): State<AppState>,
    ApiPath(session_key): ApiPath<String>,
) -> Result<Json<SessionDetail>, ApiError> {
    let store = state.store()?;
    let entry = load_session(store, &session_key).await?;
    Ok(Json(session_detail(store, &entry).await?))
}

#[derive(Debug)]
struct NoRuns;

impl WorkTracker for NoRuns {
    fn has_competing_work(&self, _: &SessionKey, _: &tether_core::SessionId) -> bool {
        false
    }
}

/// Deletes `entry` through the host layer's one deletion coordinator ([`HostSessions`]): the session row,
/// its transcript and its binding rows go in one transaction. No harness is registered in the
/// admin process, so the binding rows are removed inside that transaction by the store, which
/// refuses (rolling everything back) while one of them holds a live lease. The session's Codex
/// threads (bound and archived) are recorded in the same transaction as due deletions for the
/// Codex harness ([`tether_codex::record_deleted_session_threads`]). `None` when the session
/// was deleted meanwhile; else the Codex threads recorded.
pub async fn delete_session(
    store: &Store,
    entry: &HostSessionEntry,
    reason: &str,
) -> Result<Option<Vec<String>>, ApiError> {
    let now = store.clock().now();
    if let Some(held) = store
        .session_bindings(entry)
        .await?
        .iter()
        .find(|b| b.live_lease(now).is_some())
    {
        return Err(ApiError::LeaseHeld(format!(
            "session `{}` is bound at {}/{} under a live lease; force-expire it first (`tether leases expire --namespace {} --key {} --reason …`), then retry",
            entry.session_key, held.namespace, held.key, held.namespace, held.key
        )));
    }
    // No harness runs in the admin process: the session's binding rows go in the same
    // transaction as the session row, refused (nothing changed) if one holds a live lease.
    let request = DeletionRequest::new(entry.session_key.clone()).removing_unowned_bindings();
    // The Codex harness's namespaces, as it registers them (the admin process runs none).
    let namespace =
        |name: &str| tether_core::Namespace::new(name).map_err(tether_core::Error::from);
    for config in [
        tether_harness_sdk::backend::ThreadBindingStore::namespace_config(namespace(
            tether_codex::NAMESPACE,
        )?),
        tether_core::NamespaceConfig::new(namespace(tether_codex::ARCHIVE_NAMESPACE)?),
        tether_core::NamespaceConfig::new(namespace(tether_codex::CLEANUP_NAMESPACE)?),
    ] {
        tether_core::BindingStore::register_namespace(store, config).await?;
    }
    let recorded = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (into, why) = (
        Arc::clone(&recorded),
        format!("an operator deleted it: {reason}"),
    );
    match HostSessions::new(store.clone(), HarnessRegistry::shared(), Arc::new(NoRuns))
        .delete_requests_with(&[request], move |tx, entries| {
            let (into, why) = (Arc::clone(&into), why.clone());
            let keys: Vec<_> = entries.iter().flat_map(session_binding_keys).collect();
            Box::pin(async move {
                let threads = tether_codex::record_deleted_session_threads(
                    tether_storage::HostTransaction::row_tx(tx),
                    &keys,
                    &why,
                )
                .await?;
                into.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend(threads);
                Ok(())
            })
        })
        .await
    {
        Ok(deleted) if deleted.is_empty() => Ok(None),
        Ok(_) => Ok(Some(std::mem::take(
            &mut *recorded
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        ))),
        // The session changed under the deletion: when it changed by being deleted (another
        // operator's deletion won the race), say so, not "reload and retry".
        Err(
            error @ (tether_core::Error::SupersededGeneration { .. }
            | tether_core::Error::Host {
                kind: tether_core::HostErrorKind::SessionChanged { .. },
            }),
        ) => match store.session(&entry.session_key).await? {
            None => Ok(None),
            Some(_) => Err(error.into()),
        },
        Err(error) => Err(error.into()),
    }
}

/// Deletes a session, its transcript and its binding rows in one transaction (admin scope; the
/// operator's reason is required and recorded in the audit trail). Refused with `lease_held`
/// while its binding holds a live lease.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{session_key}",
    tag = "actions",
    params(("session_key" = String, Path, description = "The logical session key (no control characters, not blank)", pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$", max_length = 512)),
    request_body = ReasonBody,
    responses(
        (status = 200, description = "The session is gone", body = ActionResult),
        ActionErrors,
    ),
    security(("bearer" = []))
)]
pub async fn delete_session_route(
    access: AdminAccess,
    State(state): State<AppState>,
    ApiPath(session_key): ApiPath<String>,
    ApiJson(body): ApiJson<ReasonBody>,
) -> Result<Json<ActionResult>, ApiError> {
    let why = reason(&body.reason)?;
    let store = state.store()?;
    let result =
        crate::actions::delete_session_action(store, &access.actor, &session_key, &why).await;
    match &result {
        Ok(_) => Counters::bump(&state.counters().deletions),
        Err(
            ApiError::LeaseHeld(_)
            | ApiError::Conflict(_)
            | ApiError::OutcomeUnknown(_)
            | ApiError::Internal(_),
        ) => {
            Counters::bump(&state.counters().deletion_failures);
        }
        Err(_) => {}
    }
    result.map(Json)
}

/// Transcript search parameters.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SearchQuery {
    /// Words that must all appear.
    #[param(min_length = 1, pattern = "[A-Za-z0-9]")]
    pub q: String,
    /// At most this many hits (default 50, at most 200).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<usize>,
}

/// Searches the transcripts of every session (sanitized snippets).
#[utoipa::path(
    get,
    path = "/v1/transcripts/search",
    tag = "transcripts",
    params(SearchQuery),
    responses(
        (status = 200, description = "The hits", body = SearchBody),
        ListErrors,
    )
)]
pub async fn search_all(
    _: ReadAccess,
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<SearchQuery>,
) -> Result<Json<SearchBody>, ApiError> {
    search(&state, None, &q).await
}

/// Searches the transcript of one session (sanitized snippets).
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_key}/transcript/search",
    tag = "transcripts",
    params(("session_key" = String, Path, description = "The logical session key (no control characters, not blank)", pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$", max_length = 512), SearchQuery),
    responses(
        (status = 200, description = "The hits", body = SearchBody),
        DetailErrors,
    )
)]
pub async fn search_session(
    _: ReadAccess,
    State(state): State<AppState>,
    ApiPath(session_key): ApiPath<String>,
    ApiQuery(q): ApiQuery<SearchQuery>,
) -> Result<Json<SearchBody>, ApiError> {
    let entry = load_session(state.store()?, &session_key).await?;
    search(&state, Some(&entry.session_key), &q).await
}

async fn search(
    state: &AppState,
    session: Option<&SessionKey>,
    q: &SearchQuery,
) -> Result<Json<SearchBody>, ApiError> {
    Ok(Json(search_hits(state.store()?, session, q).await?))
}

/// The transcript hits of `q` (the API's and the dashboard's), within one session or all.
pub async fn search_hits(
    store: &Store,
    session: Option<&SessionKey>,
    q: &SearchQuery,
) -> Result<SearchBody, ApiError> {
    let limit = page_size(q.limit)?;
    if !q.q.chars().any(|c| c.is_ascii_alphanumeric()) {
        return Err(ApiError::BadRequest(if q.q.trim().is_empty() {
            "`q` is required: pass the words to search for (ASCII letters or digits)".into()
        } else {
            "`q` has no ASCII letter or digit: transcript search matches words of ASCII letters and digits only".into()
        }));
    }
    let hits = store.search_transcripts(&q.q, session, limit).await?;
    Ok(SearchBody {
        hits: hits.iter().map(TranscriptHitBody::from).collect(),
    })
}
