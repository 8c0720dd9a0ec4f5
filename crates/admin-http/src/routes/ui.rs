//! The dashboard's list pages: sessions, leases (and the holder view, "what does worker X
//! hold?"), lease events, quarantined keys and the audit trail. Each has a filter form (plain
//! `GET`, so a filtered list is a link), cursor paging, sorting of the shown page by any column,
//! absolute times on hover and live updates; an admin's rows carry their actions. They read the
//! same pages as the JSON API.

use std::fmt::Write as _;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use crate::auth::ReadAccess;
use crate::error::ApiError;
use crate::params::ApiQuery;
use crate::routes::audit::{AuditQuery, audit_list};
use crate::routes::bindings::{LeaseEventQuery, LeaseQuery, binding_page, event_page};
use crate::routes::dashboard::{
    BINDING_HEADERS, EVENT_HEADERS, QUARANTINE_HEADERS, SESSION_HEADERS, Viewer, binding_rows,
    encode_query, escape, event_rows, holder_cell, page_or_signin, quarantine_rows, session_cell,
    session_rows, shell, table_html, when, with_action_headers,
};
use crate::routes::quarantine::{QuarantineQuery, quarantine_list};
use crate::routes::sessions::{SearchQuery, SessionQuery, search_hits, session_page};
use crate::state::AppState;

/// One field of a filter form.
enum Field<'a> {
    /// A text input: (name, label, current value).
    Text(&'a str, &'a str, Option<&'a str>),
    /// A choice: (name, label, options as (value, label), current value).
    Choice(&'a str, &'a str, &'a [(&'a str, &'a str)], Option<&'a str>),
}

/// A `GET` filter form over `path`, with a link back to the unfiltered list.
fn filter_form(path: &str, fields: &[Field<'_>]) -> String {
    let mut out =
        format!("<form class=\"filters\" method=\"get\" action=\"{path}\" role=\"search\">");
    for field in fields {
        match field {
            Field::Text(name, label, value) => {
                let _ = write!(
                    out,
                    "<label>{} <input name=\"{name}\" value=\"{}\"></label> ",
                    escape(label),
                    escape(value.unwrap_or_default())
                );
            }
            Field::Choice(name, label, options, value) => {
                let _ = write!(out, "<label>{} <select name=\"{name}\">", escape(label));
                for (v, l) in *options {
                    let selected = if value.unwrap_or_default() == *v {
                        " selected"
                    } else {
                        ""
                    };
                    let _ = write!(
                        out,
                        "<option value=\"{v}\"{selected}>{}</option>",
                        escape(l)
                    );
                }
                out.push_str("</select></label> ");
            }
        }
    }
    let _ = write!(
        out,
        "<button type=\"submit\">Filter</button> <a href=\"{path}\">Clear</a></form>"
    );
    out
}

/// The paging links: the first page, and the next one (the same filters with `cursor`).
fn pager(
    path: &str,
    params: &[(&str, Option<String>)],
    next: Option<&str>,
    shown: usize,
) -> String {
    let query = |cursor: Option<&str>| {
        let parts: Vec<String> = params
            .iter()
            .filter_map(|(k, v)| {
                v.as_deref()
                    .filter(|v| !v.is_empty())
                    .map(|v| format!("{k}={}", encode_query(v)))
            })
            .chain(cursor.map(|c| format!("cursor={}", encode_query(c))))
            .collect();
        if parts.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{}", parts.join("&"))
        }
    };
    let mut out = format!(
        "<p class=\"pager\">{shown} shown · <a href=\"{}\">First page</a>",
        escape(&query(None))
    );
    if let Some(next) = next {
        let _ = write!(
            out,
            " · <a rel=\"next\" id=\"next-page\" href=\"{}\">Next page →</a>",
            escape(&query(Some(next)))
        );
    }
    out.push_str("</p>");
    out
}

fn bool_text(v: Option<bool>) -> Option<String> {
    v.map(|b| b.to_string())
}

const YES_NO: &[(&str, &str)] = &[("", "any"), ("true", "yes"), ("false", "no")];

/// `GET /ui/sessions`: sessions with agent, harness, lease and quarantine filters and a key
/// search.
pub async fn sessions(
    access: Result<ReadAccess, ApiError>,
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<ApiQuery<SessionQuery>, ApiError>,
) -> Response {
    let viewer = Viewer::of(&state, &headers);
    page_or_signin(access, &headers, async {
        let ApiQuery(q) = query?;
        let store = state.store()?;
        let page = session_page(store, &q).await?;
        let now = store.clock().now();
        let (lease, quarantined) = (bool_text(q.has_lease), bool_text(q.quarantined));
        let mut body = filter_form(
            "/ui/sessions",
            &[
                Field::Text("q", "Key contains", q.q.as_deref()),
                Field::Text("agent", "Agent", q.agent.as_deref()),
                Field::Text("harness", "Harness", q.harness.as_deref()),
                Field::Choice("has_lease", "Live lease", YES_NO, lease.as_deref()),
                Field::Choice("quarantined", "Quarantined", YES_NO, quarantined.as_deref()),
            ],
        );
        let admin = viewer.admin_csrf.as_deref();
        let rows = session_rows(&page.sessions, now, admin);
        body.push_str(&table_html(
            &with_action_headers(admin, SESSION_HEADERS),
            &rows,
            "No sessions match.",
        ));
        body.push_str(&pager(
            "/ui/sessions",
            &[
                ("q", q.q.clone()),
                ("agent", q.agent.clone()),
                ("harness", q.harness.clone()),
                ("has_lease", lease),
                ("quarantined", quarantined),
                ("limit", q.limit.map(|l| l.to_string())),
            ],
            page.next_cursor.as_deref(),
            page.sessions.len(),
        ));
        Ok(shell("Sessions", now, &viewer, &body))
    })
    .await
}

/// `GET /ui/leases`: binding rows with namespace, lease, holder and search filters; with
/// `holder` it is the holder view: what that worker holds, and its recent lease events.
pub async fn leases(
    access: Result<ReadAccess, ApiError>,
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<ApiQuery<LeaseQuery>, ApiError>,
) -> Response {
    let viewer = Viewer::of(&state, &headers);
    page_or_signin(access, &headers, async {
        let ApiQuery(q) = query?;
        let store = state.store()?;
        let page = binding_page(store, &q).await?;
        let now = store.clock().now();
        let holder = q.holder.as_deref().filter(|h| !h.is_empty());
        let leased = bool_text(q.leased);
        let mut body = filter_form(
            "/ui/leases",
            &[
                Field::Text("q", "Search", q.q.as_deref()),
                Field::Text("holder", "Holder", q.holder.as_deref()),
                Field::Text("namespace", "Namespace", q.namespace.as_deref()),
                Field::Choice(
                    "leased",
                    "Rows",
                    &[("", "live leases"), ("false", "every binding row")],
                    leased.as_deref(),
                ),
            ],
        );
        if let Some(h) = holder {
            let _ = write!(
                body,
                "<h2 id=\"holder-view\">What does {} hold?</h2>",
                holder_cell(Some(h))
            );
        }
        let admin = viewer.admin_csrf.as_deref();
        body.push_str(&table_html(
            &with_action_headers(admin, BINDING_HEADERS),
            &binding_rows(&page.bindings, now, admin),
            "No binding rows match.",
        ));
        body.push_str(&pager(
            "/ui/leases",
            &[
                ("q", q.q.clone()),
                ("holder", q.holder.clone()),
                ("namespace", q.namespace.clone()),
                ("leased", leased),
                ("limit", q.limit.map(|l| l.to_string())),
            ],
            page.next_cursor.as_deref(),
            page.bindings.len(),
        ));
        if let Some(h) = holder {
            let events = event_page(
                store,
                &LeaseEventQuery {
                    holder: Some(h.to_owned()),
                    limit: Some(20),
                    ..LeaseEventQuery::default()
                },
            )
            .await?;
            let _ = write!(body, "<h2>Recent lease events of {}</h2>", escape(h));
            body.push_str(&table_html(
                EVENT_HEADERS,
                &event_rows(&events.events, now),
                "No lease events name this holder.",
            ));
        }
        let title = holder.map_or_else(|| "Leases".to_owned(), |h| format!("Held by {h}"));
        Ok(shell(&title, now, &viewer, &body))
    })
    .await
}

/// `GET /ui/lease-events`: the lease history with namespace, key, kind and holder filters.
pub async fn lease_events(
    access: Result<ReadAccess, ApiError>,
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<ApiQuery<LeaseEventQuery>, ApiError>,
) -> Response {
    let viewer = Viewer::of(&state, &headers);
    page_or_signin(access, &headers, async {
        let ApiQuery(q) = query?;
        let store = state.store()?;
        let page = event_page(store, &q).await?;
        let now = store.clock().now();
        let mut body = filter_form(
            "/ui/lease-events",
            &[
                Field::Text("namespace", "Namespace", q.namespace.as_deref()),
                Field::Text("key", "Key", q.key.as_deref()),
                Field::Choice(
                    "kind",
                    "Event",
                    &[
                        ("", "any"),
                        ("acquired", "acquired"),
                        ("renewed", "renewed"),
                        ("released", "released"),
                        ("expired", "expired"),
                        ("taken_over", "taken over"),
                        ("fenced", "fenced"),
                    ],
                    q.kind.as_deref(),
                ),
                Field::Text("holder", "Holder", q.holder.as_deref()),
            ],
        );
        body.push_str(&table_html(
            EVENT_HEADERS,
            &event_rows(&page.events, now),
            "No lease events match.",
        ));
        body.push_str(&pager(
            "/ui/lease-events",
            &[
                ("namespace", q.namespace.clone()),
                ("key", q.key.clone()),
                ("kind", q.kind.clone()),
                ("holder", q.holder.clone()),
                ("limit", q.limit.map(|l| l.to_string())),
            ],
            page.next_cursor.as_deref(),
            page.events.len(),
        ));
        Ok(shell("Lease events", now, &viewer, &body))
    })
    .await
}

/// `GET /ui/quarantine`: quarantined keys with a search.
pub async fn quarantine(
    access: Result<ReadAccess, ApiError>,
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<ApiQuery<QuarantineQuery>, ApiError>,
) -> Response {
    let viewer = Viewer::of(&state, &headers);
    page_or_signin(access, &headers, async {
        let ApiQuery(q) = query?;
        let store = state.store()?;
        let page = quarantine_list(store, &q).await?;
        let now = store.clock().now();
        let mut body = filter_form(
            "/ui/quarantine",
            &[Field::Text("q", "Search", q.q.as_deref())],
        );
        let admin = viewer.admin_csrf.as_deref();
        body.push_str(&table_html(
            &with_action_headers(admin, QUARANTINE_HEADERS),
            &quarantine_rows(&page.quarantine, now, admin),
            "No quarantined keys match.",
        ));
        body.push_str(&pager(
            "/ui/quarantine",
            &[
                ("q", q.q.clone()),
                ("limit", q.limit.map(|l| l.to_string())),
            ],
            page.next_cursor.as_deref(),
            page.quarantine.len(),
        ));
        Ok(shell("Quarantined keys", now, &viewer, &body))
    })
    .await
}

/// `GET /ui/audit`: the operators' audit trail with actor, action and outcome filters.
pub async fn audit(
    access: Result<ReadAccess, ApiError>,
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<ApiQuery<AuditQuery>, ApiError>,
) -> Response {
    let viewer = Viewer::of(&state, &headers);
    page_or_signin(access, &headers, async {
        let ApiQuery(q) = query?;
        let store = state.store()?;
        let page = audit_list(store, &q).await?;
        let now = store.clock().now();
        let mut body = filter_form(
            "/ui/audit",
            &[
                Field::Text("actor", "Actor", q.actor.as_deref()),
                Field::Choice(
                    "action",
                    "Action",
                    &[
                        ("", "any"),
                        ("delete_session", "delete session"),
                        ("expire_lease", "force-expire lease"),
                        ("release_quarantine", "release quarantine"),
                    ],
                    q.action.as_deref(),
                ),
                Field::Choice(
                    "outcome",
                    "Outcome",
                    &[
                        ("", "any"),
                        ("succeeded", "succeeded"),
                        ("refused", "refused"),
                        ("failed", "failed"),
                        ("started", "started (never completed)"),
                    ],
                    q.outcome.as_deref(),
                ),
            ],
        );
        let rows: Vec<Vec<String>> = page
            .entries
            .iter()
            .map(|e| {
                vec![
                    format!("<span data-v=\"{0}\">{0}</span>", e.id),
                    when(now, e.at_ms),
                    escape(&e.actor),
                    escape(&e.action),
                    format!("<code>{}</code>", escape(&e.target)),
                    escape(&e.reason),
                    escape(&e.outcome),
                    escape(e.detail.as_deref().unwrap_or("")),
                ]
            })
            .collect();
        body.push_str(&table_html(
            &[
                "#", "When", "Actor", "Action", "Target", "Reason", "Outcome", "Detail",
            ],
            &rows,
            "No recorded actions match.",
        ));
        body.push_str(&pager(
            "/ui/audit",
            &[
                ("actor", q.actor.clone()),
                ("action", q.action.clone()),
                ("outcome", q.outcome.clone()),
                ("limit", q.limit.map(|l| l.to_string())),
            ],
            page.next_cursor.as_deref(),
            page.entries.len(),
        ));
        Ok(shell("Audit trail", now, &viewer, &body))
    })
    .await
}

/// The query of the transcript search page (`q` may be absent: the empty form).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranscriptSearchQuery {
    /// Words that must all appear.
    #[serde(default)]
    pub q: Option<String>,
    /// At most this many hits (default 50, at most 200).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `GET /ui/search`: transcript search across every session (sanitized snippets), each hit
/// linking its session.
pub async fn transcript_search(
    access: Result<ReadAccess, ApiError>,
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<ApiQuery<TranscriptSearchQuery>, ApiError>,
) -> Response {
    let viewer = Viewer::of(&state, &headers);
    page_or_signin(access, &headers, async {
        let ApiQuery(q) = query?;
        let store = state.store()?;
        let now = store.clock().now();
        let words = q.q.as_deref().map(str::trim).filter(|w| !w.is_empty());
        let mut body = filter_form("/ui/search", &[Field::Text("q", "Words", words)]);
        if let Some(words) = words {
            let hits = search_hits(
                store,
                None,
                &SearchQuery {
                    q: words.to_owned(),
                    limit: q.limit,
                },
            )
            .await?;
            let rows: Vec<Vec<String>> = hits
                .hits
                .iter()
                .map(|h| {
                    vec![
                        session_cell(Some(&h.session_key)),
                        escape(&h.role),
                        escape(&h.snippet),
                    ]
                })
                .collect();
            body.push_str(&table_html(
                &["Session", "Role", "Text"],
                &rows,
                "No transcript entry holds all these words.",
            ));
            let _ = write!(body, "<p class=\"pager\">{} shown</p>", hits.hits.len());
        }
        Ok(shell("Transcript search", now, &viewer, &body))
    })
    .await
}
