//! The dashboard at `/`: one server-rendered HTML page (no external assets) with sessions, live
//! leases counting down, quarantined keys and recent lease events. It refreshes itself every
//! ten seconds; every value is HTML-escaped.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::Html;
use tether_core::Timestamp;
use tether_storage::{SessionFilter, StoreAdmin as _};

use crate::auth::ReadAccess;
use crate::dto::{BindingBody, LeaseEventBody, QuarantineBody, SessionSummary};
use crate::error::ApiError;
use crate::lists::SessionNames;
use crate::state::AppState;

/// Rows per dashboard table.
pub const ROWS: usize = 50;

/// Escapes text for HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn ago(now: Timestamp, at_ms: i64) -> String {
    let secs = (now.as_millis() - at_ms).max(0) / 1000;
    match secs {
        s if s < 120 => format!("{s}s ago"),
        s if s < 7200 => format!("{}m ago", s / 60),
        s if s < 172_800 => format!("{}h ago", s / 3600),
        s => format!("{}d ago", s / 86_400),
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1d2330;background:#f7f8fa}\
h1{font-size:1.4rem;margin:0 0 .2rem}h2{font-size:1.05rem;margin:1.6rem 0 .5rem}\
.sub{color:#5b6472;font-size:.85rem}table{border-collapse:collapse;width:100%;background:#fff;font-size:.85rem}\
th,td{text-align:left;padding:.35rem .55rem;border-bottom:1px solid #e3e6eb;vertical-align:top}\
th{background:#eef1f5;font-weight:600}code{font-size:.8rem;word-break:break-all}\
.empty{color:#7a8290;font-style:italic}.live{color:#0a7d32;font-weight:600}.gone{color:#b42318}\
.cards{display:flex;gap:.8rem;flex-wrap:wrap;margin-top:.8rem}.card{background:#fff;border:1px solid #e3e6eb;\
border-radius:6px;padding:.5rem .9rem}.card b{display:block;font-size:1.3rem}a{color:#2156c9}";

/// The Content-Security-Policy of the dashboard: nothing but its own inline style and script
/// (allowed by their SHA-256 hashes, so an injected `<script>` would not run), same-origin
/// requests, no framing.
pub(crate) fn content_security_policy() -> &'static str {
    static POLICY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        use base64::Engine as _;
        use sha2::Digest as _;
        let hash = |text: &str| {
            base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(text.as_bytes()))
        };
        format!(
            "default-src 'none'; style-src 'sha256-{}'; script-src 'sha256-{}'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
            hash(STYLE),
            hash(SCRIPT)
        )
    });
    &POLICY
}

const SCRIPT: &str = "(function(){var off=Number(document.body.dataset.now)-Date.now();\
function tick(){document.querySelectorAll('[data-expires]').forEach(function(el){\
var left=Math.round((Number(el.dataset.expires)-(Date.now()+off))/1000);\
if(left>0){el.textContent='expires in '+left+'s';el.className='live';}\
else{el.textContent='expired';el.className='gone';}});}\
var sorted=null;function tables(){return document.querySelectorAll('#live table');}\
function sortBy(ti,col,dir){var t=tables()[ti];if(!t||!t.tBodies[0]){return;}var b=t.tBodies[0];\
function v(r){var c=r.cells[col];if(!c){return '';}var e=c.querySelector('[data-v]');\
if(e){return Number(e.getAttribute('data-v'));}return c.textContent.trim().toLowerCase();}\
[].slice.call(b.rows).sort(function(x,y){var a=v(x),c=v(y);return (a<c?-1:a>c?1:0)*dir;})\
.forEach(function(r){b.appendChild(r);});\
[].forEach.call(t.tHead.rows[0].cells,function(h,i){h.setAttribute('aria-sort',i===col?(dir>0?'ascending':'descending'):'none');});}\
document.addEventListener('click',function(e){var h=e.target.closest&&e.target.closest('#live th');if(!h){return;}\
var ti=[].indexOf.call(tables(),h.closest('table')),col=h.cellIndex;\
var dir=(sorted&&sorted.ti===ti&&sorted.col===col)?-sorted.dir:1;sorted={ti:ti,col:col,dir:dir};sortBy(ti,col,dir);});\
var paused=false,btn=document.getElementById('pause'),note=document.getElementById('live-state');\
btn.addEventListener('click',function(){paused=!paused;\
btn.textContent=paused?'Resume live updates':'Pause live updates';\
note.textContent=paused?'paused':'';});\
function poll(){if(paused||document.hidden||[].some.call(document.querySelectorAll('#live input[name=reason]'),\
function(i){return i.value||i===document.activeElement;})){return;}\
fetch(location.pathname+location.search,{credentials:'same-origin',headers:{'Accept':'text/html'}})\
.then(function(r){if(!r.ok||r.redirected){throw new Error('HTTP '+r.status);}return r.text();})\
.then(function(t){var d=new DOMParser().parseFromString(t,'text/html');var m=d.getElementById('live');\
if(!m){throw new Error('no content');}document.getElementById('live').replaceWith(m);\
off=Number(d.body.dataset.now)-Date.now();tick();if(sorted){sortBy(sorted.ti,sorted.col,sorted.dir);}\
note.textContent='updated '+new Date().toLocaleTimeString();})\
.catch(function(e){note.textContent='update failed ('+e.message+'); retrying';});}\
tick();setInterval(tick,1000);setInterval(poll,10000);})();";

/// Who is looking at a page: the signed-in browser session, if any.
#[derive(Debug, Clone, Default)]
pub struct Viewer {
    /// The signed-in token's name.
    pub name: Option<String>,
    /// The session's CSRF token (for the sign-out form).
    pub csrf: Option<String>,
    /// The CSRF token again when the session has admin scope: actions are offered.
    pub admin_csrf: Option<String>,
}

impl Viewer {
    /// The viewer of a request.
    pub fn of(state: &AppState, headers: &axum::http::HeaderMap) -> Self {
        match crate::signin::current(state, headers) {
            None => Self::default(),
            Some((_, s)) => Self {
                name: Some(s.principal.name.clone()),
                csrf: Some(s.csrf.clone()),
                admin_csrf: (s.principal.scope == crate::auth::Scope::Admin)
                    .then(|| s.csrf.clone()),
            },
        }
    }
}

/// The pages of the navigation bar: (path, label).
const NAV: &[(&str, &str)] = &[
    ("/", "Overview"),
    ("/ui/sessions", "Sessions"),
    ("/ui/leases", "Leases"),
    ("/ui/lease-events", "Lease events"),
    ("/ui/quarantine", "Quarantine"),
    ("/ui/audit", "Audit trail"),
    ("/ui/search", "Transcript search"),
];

/// A whole page: the title, the navigation, the live-update controls, the sign-out form of a
/// signed-in viewer, and `body` inside `<main id="live">` (what live updates replace).
pub fn shell(title: &str, now: Timestamp, viewer: &Viewer, body: &str) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{t} · Tether admin</title><style>{STYLE}</style></head><body data-now=\"{}\">\
         <nav class=\"sub\">",
        now.as_millis(),
        t = escape(title),
    );
    let links: Vec<String> = NAV
        .iter()
        .map(|(href, label)| format!("<a href=\"{href}\">{}</a>", escape(label)))
        .chain([
            "<a href=\"/docs/\">API docs</a>".to_owned(),
            "<a href=\"/metrics\">metrics</a>".to_owned(),
        ])
        .collect();
    out.push_str(&links.join(" · "));
    if let (Some(name), Some(csrf)) = (&viewer.name, &viewer.csrf) {
        let _ = write!(
            out,
            "<form class=\"signout\" method=\"post\" action=\"/signout\">\
             Signed in as <b>{}</b> <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\">Sign out</button></form>",
            escape(name),
            escape(csrf)
        );
    }
    let _ = write!(
        out,
        "</nav><h1>{}</h1><div class=\"sub\">Live: updated every 10 s without reloading \
         <button type=\"button\" id=\"pause\">Pause live updates</button> \
         <span id=\"live-state\" aria-live=\"polite\"></span> · click a column heading to sort \
         this page</div><main id=\"live\">{body}</main><script>{SCRIPT}</script></body></html>",
        escape(title)
    );
    out
}

/// `headers`, plus an "Action" column when actions are offered.
fn with_action<'a>(admin_csrf: Option<&str>, headers: &[&'a str]) -> Vec<&'a str> {
    let mut all = headers.to_vec();
    if admin_csrf.is_some() {
        all.push("Action");
    }
    all
}

/// A table of `rows` under `headers` (or the `empty` note); cells are HTML already.
pub fn table_html(headers: &[&str], rows: &[Vec<String>], empty: &str) -> String {
    let mut out = String::new();
    table(&mut out, headers, rows, empty);
    out
}

/// `headers`, plus an "Action" column when `admin_csrf` is given.
pub fn with_action_headers<'a>(admin_csrf: Option<&str>, headers: &[&'a str]) -> Vec<&'a str> {
    with_action(admin_csrf, headers)
}

fn table(out: &mut String, headers: &[&str], rows: &[Vec<String>], empty: &str) {
    if rows.is_empty() {
        let _ = write!(out, "<p class=\"empty\">{}</p>", escape(empty));
        return;
    }
    out.push_str("<table><thead><tr>");
    for h in headers {
        let _ = write!(out, "<th>{}</th>", escape(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            // Cells are built from escaped text below.
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
}

/// Percent-encodes a path segment.
pub fn encode_segment(raw: &str) -> String {
    raw.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~:".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn link(href: &str, text: &str) -> String {
    format!(
        "<a href=\"{}\"><code>{}</code></a>",
        escape(href),
        escape(text)
    )
}

fn code(text: &str) -> String {
    format!("<code>{}</code>", escape(text))
}

/// The predecessor generation and how the session left it (`transfer`, `cut`, `reset`).
fn previous_cell(
    previous: Option<&str>,
    change: Option<crate::dto::GenerationChangeBody>,
) -> String {
    previous.map_or_else(String::new, |previous| match change {
        Some(change) => format!("{} {}", code(previous), change.as_str()),
        None => code(previous),
    })
}

/// The native thread id of a binding row (the Codex thread id), or a dash.
fn native_cell(native_id: Option<&str>) -> String {
    native_id.map_or_else(|| "—".to_owned(), code)
}

/// A small form posting an operator action to the confirmation step (`/ui/actions`): hidden
/// target fields, the session's CSRF token and a required reason.
fn action_form(csrf: &str, action: &str, fields: &[(&str, &str)], label: &str) -> String {
    let mut form = format!(
        "<form method=\"post\" action=\"/ui/actions\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <input type=\"hidden\" name=\"action\" value=\"{}\">",
        escape(csrf),
        escape(action)
    );
    for (name, value) in fields {
        let _ = write!(
            form,
            "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
            escape(name),
            escape(value)
        );
    }
    let _ = write!(
        form,
        "<input name=\"reason\" required maxlength=\"4096\" placeholder=\"reason\" aria-label=\"reason\">\
         <button type=\"submit\">{}…</button></form>",
        escape(label)
    );
    form
}

/// A cell linking a session key to its page, or a dash.
pub fn session_cell(session_key: Option<&str>) -> String {
    session_key.map_or_else(
        || "—".to_owned(),
        |k| link(&format!("/ui/sessions/{}", encode_segment(k)), k),
    )
}

/// A cell linking a binding key to its lease history page.
pub fn history_link(namespace: &str, key: &str) -> String {
    format!(
        "<a href=\"/ui/lease-events?namespace={}&amp;key={}\" title=\"lease history of this binding\"><code>{}</code></a>",
        escape(&encode_query(namespace)),
        escape(&encode_query(key)),
        escape(key)
    )
}

/// A cell linking a holder to its holder view ("what does it hold?"), or a dash.
pub fn holder_cell(holder: Option<&str>) -> String {
    holder.map_or_else(
        || "—".to_owned(),
        |h| {
            format!(
                "<a href=\"/ui/leases?holder={}\" title=\"what does it hold?\">{}</a>",
                escape(&encode_query(h)),
                escape(h)
            )
        },
    )
}

/// Percent-encodes a query value.
pub fn encode_query(raw: &str) -> String {
    raw.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// An epoch cell: the readable label, the packed fencing number on hover.
fn epoch_cell(epoch: u64, label: &str) -> String {
    format!(
        "<span data-v=\"{epoch}\" title=\"epoch {epoch}\">{}</span>",
        escape(label)
    )
}

/// The expiry cell of a lease (counting down in the browser).
fn expiry_cell(l: &crate::dto::LeaseBody) -> String {
    format!(
        "<span data-expires=\"{}\" title=\"{}\">{}</span>",
        l.expires_at_ms,
        escape(&Timestamp::from_millis(l.expires_at_ms).to_string()),
        if l.live {
            format!("expires in {}s", l.expires_in_ms / 1000)
        } else {
            "expired".into()
        }
    )
}

/// The rows of a binding table (namespace, key, session, native thread, holder, epoch,
/// acquired, renewed, expiry), with a force-expire form per leased row for an admin.
pub fn binding_rows(
    bindings: &[BindingBody],
    now: Timestamp,
    admin_csrf: Option<&str>,
) -> Vec<Vec<String>> {
    bindings
        .iter()
        .map(|b| {
            let lease = b.lease.as_ref();
            let mut row = vec![
                code(&b.namespace),
                history_link(&b.namespace, &b.key),
                session_cell(b.session_key.as_deref()),
                native_cell(b.native_id.as_deref()),
                holder_cell(lease.and_then(|l| l.holder.as_deref())),
                lease.map_or_else(String::new, |l| epoch_cell(l.epoch, &l.epoch_label)),
                lease.map_or_else(String::new, |l| when(now, l.acquired_at_ms)),
                lease.map_or_else(String::new, |l| when(now, l.renewed_at_ms)),
                lease.map_or_else(|| "no lease".to_owned(), expiry_cell),
            ];
            if let Some(csrf) = admin_csrf {
                row.push(lease.filter(|l| l.live).map_or_else(String::new, |l| {
                    action_form(
                        csrf,
                        "expire_lease",
                        &[
                            ("namespace", &b.namespace),
                            ("key", &b.key),
                            ("epoch", &l.epoch.to_string()),
                        ],
                        "Force-expire",
                    )
                }));
            }
            row
        })
        .collect()
}

/// The headings of [`binding_rows`].
pub const BINDING_HEADERS: &[&str] = &[
    "Namespace",
    "Key",
    "Session",
    "Native thread",
    "Holder",
    "Epoch",
    "Acquired",
    "Renewed",
    "Expiry",
];

/// The rows of a session table, with a delete form per row for an admin.
pub fn session_rows(
    sessions: &[SessionSummary],
    now: Timestamp,
    admin_csrf: Option<&str>,
) -> Vec<Vec<String>> {
    sessions
        .iter()
        .map(|s| {
            vec![
                session_cell(Some(&s.session_key)),
                escape(&s.agent_id),
                code(&s.session_id),
                previous_cell(s.previous_session_id.as_deref(), s.previous_change),
                s.lifecycle_revision.to_string(),
                escape(s.agent_harness_id.as_deref().unwrap_or("—")),
                when(now, s.updated_at_ms),
            ]
            .into_iter()
            .chain(admin_csrf.map(|csrf| {
                action_form(
                    csrf,
                    "delete_session",
                    &[("session_key", &s.session_key)],
                    "Delete",
                )
            }))
            .collect()
        })
        .collect()
}

/// The headings of [`session_rows`].
pub const SESSION_HEADERS: &[&str] = &[
    "Session key",
    "Agent",
    "Generation",
    "Previous",
    "Revision",
    "Harness",
    "Updated",
];

/// The rows of a quarantine table, with a release form per row for an admin.
pub fn quarantine_rows(
    keys: &[QuarantineBody],
    now: Timestamp,
    admin_csrf: Option<&str>,
) -> Vec<Vec<String>> {
    keys.iter()
        .map(|q| {
            vec![
                code(&q.namespace),
                code(&q.key),
                session_cell(q.session_key.as_deref()),
                escape(&q.reason),
                escape(q.custody.as_deref().unwrap_or("—")),
                when(now, q.quarantined_at_ms),
            ]
            .into_iter()
            .chain(admin_csrf.map(|csrf| {
                action_form(
                    csrf,
                    "release_quarantine",
                    &[("namespace", &q.namespace), ("key", &q.key)],
                    "Release",
                )
            }))
            .collect()
        })
        .collect()
}

/// The headings of [`quarantine_rows`].
pub const QUARANTINE_HEADERS: &[&str] =
    &["Namespace", "Key", "Session", "Reason", "Custody", "Since"];

/// The rows of a lease-event table (the lease history as a timeline, newest first).
pub fn event_rows(events: &[LeaseEventBody], now: Timestamp) -> Vec<Vec<String>> {
    events
        .iter()
        .map(|e| {
            vec![
                format!("<span data-v=\"{0}\">{0}</span>", e.seq),
                when(now, e.at_ms),
                escape(&e.kind),
                code(&e.namespace),
                history_link(&e.namespace, &e.key),
                session_cell(e.session_key.as_deref()),
                e.epoch.map_or_else(String::new, |x| {
                    epoch_cell(x, e.epoch_label.as_deref().unwrap_or_default())
                }),
                holder_cell(e.holder.as_deref()),
                e.token_prefix.as_deref().map_or_else(String::new, code),
            ]
        })
        .collect()
}

/// The headings of [`event_rows`].
pub const EVENT_HEADERS: &[&str] = &[
    "#",
    "When",
    "Event",
    "Namespace",
    "Key",
    "Session",
    "Epoch",
    "Holder",
    "Token",
];

/// Renders the overview from the store.
pub async fn render(state: &AppState) -> Result<String, ApiError> {
    render_for(state, &Viewer::default()).await
}

/// Renders the overview: the newest rows of each list, with links to the full, filterable
/// lists; an admin's signed-in browser gets each row's action (force-expire, delete, release)
/// behind a confirmation step and a required reason.
pub async fn render_for(state: &AppState, viewer: &Viewer) -> Result<String, ApiError> {
    let store = state.store()?;
    let now = store.clock().now();
    let admin_csrf = viewer.admin_csrf.as_deref();
    let sessions = store
        .list_sessions(&SessionFilter {
            limit: ROWS,
            ..SessionFilter::default()
        })
        .await?;
    let leases = store.list_bindings(None, true, None, ROWS).await?;
    let quarantined = store.quarantined_keys(ROWS).await?;
    let events = store.recent_lease_events(None, ROWS).await?;
    let (n_sessions, n_quarantined) = store.admin_counts().await?;
    let names = SessionNames::resolve(
        store,
        leases
            .iter()
            .map(|l| &l.key)
            .chain(quarantined.iter().map(|q| &q.key))
            .chain(events.iter().map(|e| &e.key)),
    )
    .await?;

    let mut out = String::new();
    let _ = write!(
        out,
        "<div class=\"cards\"><div class=\"card\"><b>{n_sessions}</b>sessions</div>\
         <div class=\"card\"><b>{}</b>live leases shown</div>\
         <div class=\"card\"><b>{n_quarantined}</b>quarantined keys</div></div>",
        leases.len(),
    );
    let more = |out: &mut String, href: &str, shown: usize| {
        if shown >= ROWS {
            let _ = write!(
                out,
                "<p><a href=\"{href}\">All of them, with filters and paging →</a></p>"
            );
        }
    };

    out.push_str("<h2>Live leases</h2>");
    let bodies: Vec<BindingBody> = leases
        .iter()
        .map(|b| BindingBody::new(b, now).named(&names))
        .collect();
    table(
        &mut out,
        &with_action(admin_csrf, BINDING_HEADERS),
        &binding_rows(&bodies, now, admin_csrf),
        "No live leases.",
    );
    more(&mut out, "/ui/leases", leases.len());

    out.push_str("<h2>Sessions</h2>");
    let summaries: Vec<SessionSummary> =
        sessions.sessions.iter().map(SessionSummary::from).collect();
    table(
        &mut out,
        &with_action(admin_csrf, SESSION_HEADERS),
        &session_rows(&summaries, now, admin_csrf),
        "No sessions yet. Populate a database with `tether demo`.",
    );
    more(&mut out, "/ui/sessions", summaries.len());

    out.push_str("<h2>Quarantined keys</h2>");
    let keys: Vec<QuarantineBody> = quarantined
        .iter()
        .map(|q| QuarantineBody::from(q).named(&names))
        .collect();
    table(
        &mut out,
        &with_action(admin_csrf, QUARANTINE_HEADERS),
        &quarantine_rows(&keys, now, admin_csrf),
        "No quarantined keys.",
    );
    more(&mut out, "/ui/quarantine", keys.len());

    out.push_str("<h2>Recent lease events</h2>");
    let bodies: Vec<LeaseEventBody> = events
        .iter()
        .map(|e| LeaseEventBody::from(e).named(&names))
        .collect();
    table(
        &mut out,
        EVENT_HEADERS,
        &event_rows(&bodies, now),
        "No lease events yet.",
    );
    more(&mut out, "/ui/lease-events", bodies.len());
    Ok(shell("Tether admin", now, viewer, &out))
}

/// Answers a page request: the page, or for a browser without credentials a redirect to the
/// sign-in form instead of a JSON 401.
pub async fn page_or_signin<F>(
    access: Result<ReadAccess, ApiError>,
    headers: &axum::http::HeaderMap,
    render: F,
) -> axum::response::Response
where
    F: std::future::Future<Output = Result<String, ApiError>>,
{
    use axum::response::IntoResponse as _;
    match access {
        Err(ApiError::Unauthorized(_))
            if headers.get(axum::http::header::AUTHORIZATION).is_none() =>
        {
            (
                axum::http::StatusCode::SEE_OTHER,
                [(axum::http::header::LOCATION, "/signin")],
            )
                .into_response()
        }
        Err(e) => e.into_response(),
        Ok(_) => match render.await {
            Ok(html) => Html(html).into_response(),
            Err(e) if wants_json(headers) => e.into_response(),
            Err(e) => error_page(&e),
        },
    }
}

/// Whether the request asks for JSON and not for HTML (a script reading a console page), so
/// that an error is the API's typed JSON body rather than a page.
fn wants_json(headers: &axum::http::HeaderMap) -> bool {
    let accept = headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    accept.contains("application/json") && !accept.contains("text/html")
}

/// A page that could not be rendered, as a page: the error's status, its message and stable
/// code, and the way back to the overview (a browser would otherwise show the API's JSON
/// error body). A request that asks for JSON only gets the typed JSON error instead.
fn error_page(error: &ApiError) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let status = error.status();
    let title = status.canonical_reason().unwrap_or("Error");
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{t} · Tether admin</title><style>{STYLE}</style></head><body>\
         <nav class=\"sub\"><a href=\"/\">Overview</a> · <a href=\"/ui/sessions\">Sessions</a></nav>\
         <h1>{t}</h1><p id=\"error\">{message}</p><p class=\"sub\">HTTP {code} · <code>{api_code}</code></p>\
         </body></html>",
        t = escape(title),
        // The API's hint names its own request; the console has a page for it.
        message = escape(&error.to_string().replace(
            crate::routes::sessions::LIST_SESSIONS_HINT,
            "see the session list",
        )),
        code = status.as_u16(),
        api_code = escape(error.code()),
    );
    (status, Html(html)).into_response()
}

/// The overview page (read scope). A browser without a token or session is sent to the
/// sign-in page instead of a JSON 401.
pub async fn dashboard(
    access: Result<ReadAccess, ApiError>,
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    let viewer = Viewer::of(&state, &headers);
    page_or_signin(access, &headers, render_for(&state, &viewer)).await
}

/// A relative time with the absolute UTC time on hover (and the instant for sorting).
pub fn when(now: Timestamp, at_ms: i64) -> String {
    let absolute = escape(&Timestamp::from_millis(at_ms).to_string());
    format!(
        "<time title=\"{absolute}\" data-v=\"{at_ms}\">{}</time>",
        escape(&ago(now, at_ms))
    )
}

/// Renders one session: lineage, bindings with their leases, quarantine, the lease history as a
/// timeline, the transcript tail, the last tool outcomes and the finalization records (all
/// sanitized).
pub async fn render_session(
    state: &AppState,
    viewer: &Viewer,
    raw_key: &str,
) -> Result<String, ApiError> {
    let store = state.store()?;
    let now = store.clock().now();
    let entry = crate::routes::sessions::load_session(store, raw_key).await?;
    let d = crate::routes::sessions::session_detail(store, &entry).await?;
    let admin_csrf = viewer.admin_csrf.as_deref();
    let mut out = String::new();
    let _ = write!(
        out,
        "<p class=\"sub\"><a href=\"/v1/sessions/{seg}\">JSON</a> · \
         <a href=\"/ui/lease-events?key={stable}\">full lease history</a></p>",
        seg = encode_segment(&d.session.session_key),
        stable = encode_query(d.bindings.first().map_or_else(|| "", |b| b.key.as_str())),
    );
    if let Some(csrf) = admin_csrf {
        out.push_str(&action_form(
            csrf,
            "delete_session",
            &[("session_key", &d.session.session_key)],
            "Delete this session",
        ));
    }
    out.push_str("<h2>Lineage</h2>");
    table(
        &mut out,
        &[
            "Agent",
            "Generation",
            "Previous",
            "Revision",
            "Harness",
            "Created",
            "Updated",
            "Upstream",
        ],
        &[vec![
            escape(&d.session.agent_id),
            code(&d.lineage.session_id),
            previous_cell(
                d.lineage.previous_session_id.as_deref(),
                d.lineage.previous_change,
            ),
            d.lineage.lifecycle_revision.to_string(),
            escape(d.session.agent_harness_id.as_deref().unwrap_or("—")),
            when(now, d.session.created_at_ms),
            when(now, d.session.updated_at_ms),
            escape(d.upstream.as_deref().unwrap_or("—")),
        ]],
        "",
    );
    out.push_str("<h2>Bindings</h2>");
    let rows: Vec<Vec<String>> = binding_rows(&d.bindings, now, admin_csrf)
        .into_iter()
        .zip(&d.bindings)
        .map(|(mut row, b)| {
            row.remove(2); // the session is this page's
            let ttl = b.lease.as_ref().map_or_else(String::new, |l| {
                format!("{}s", (l.expires_at_ms - l.renewed_at_ms).max(0) / 1000)
            });
            row.insert(8, ttl);
            row.insert(2, escape(&b.key_kind));
            row
        })
        .collect();
    let mut headers: Vec<&str> = BINDING_HEADERS.to_vec();
    headers.remove(2);
    headers.insert(8, "Granted TTL");
    headers.insert(2, "Kind");
    table(
        &mut out,
        &with_action(admin_csrf, &headers),
        &rows,
        "No binding rows.",
    );
    if !d.quarantine.is_empty() {
        out.push_str("<h2>Quarantined keys</h2>");
        table(
            &mut out,
            &with_action(admin_csrf, QUARANTINE_HEADERS),
            &quarantine_rows(&d.quarantine, now, admin_csrf),
            "",
        );
    }
    out.push_str("<h2>Lease history</h2>");
    table(
        &mut out,
        EVENT_HEADERS,
        &event_rows(&d.lease_events, now),
        "No lease events.",
    );
    for (title, entries, empty) in [
        (
            "Finalization records",
            &d.finalizations,
            "No finalization records.",
        ),
        ("Last tool outcomes", &d.tool_outcomes, "No tool outcomes."),
        (
            "Transcript tail",
            &d.transcript_tail,
            "No transcript entries.",
        ),
    ] {
        let _ = write!(out, "<h2>{}</h2>", escape(title));
        let rows: Vec<Vec<String>> = entries
            .iter()
            .map(|t| {
                vec![
                    when(now, t.created_at_ms),
                    escape(&t.role),
                    escape(&t.content),
                ]
            })
            .collect();
        table(&mut out, &["When", "Role", "Content"], &rows, empty);
    }
    Ok(shell(
        &format!("Session {}", d.session.session_key),
        now,
        viewer,
        &out,
    ))
}

/// `GET /ui/sessions/{key}`: one session's page (read scope; a browser without credentials is
/// sent to the sign-in form).
pub async fn session_page(
    access: Result<ReadAccess, ApiError>,
    State(state): State<AppState>,
    axum::extract::Path(key): axum::extract::Path<String>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    let viewer = Viewer::of(&state, &headers);
    page_or_signin(access, &headers, render_session(&state, &viewer, &key)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(ago(Timestamp::from_millis(10_000), 5_000), "5s ago");
        assert_eq!(encode_segment("agent:a b/c"), "agent:a%20b%2Fc");
    }
}
