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
var paused=false,btn=document.getElementById('pause'),note=document.getElementById('live-state');\
btn.addEventListener('click',function(){paused=!paused;\
btn.textContent=paused?'Resume live updates':'Pause live updates';\
note.textContent=paused?'paused':'';});\
function poll(){if(paused||document.hidden||[].some.call(document.querySelectorAll('#live input[name=reason]'),\
function(i){return i.value||i===document.activeElement;})){return;}\
fetch(location.pathname,{credentials:'same-origin',headers:{'Accept':'text/html'}})\
.then(function(r){if(!r.ok||r.redirected){throw new Error('HTTP '+r.status);}return r.text();})\
.then(function(t){var d=new DOMParser().parseFromString(t,'text/html');var m=d.getElementById('live');\
if(!m){throw new Error('no content');}document.getElementById('live').replaceWith(m);\
off=Number(d.body.dataset.now)-Date.now();tick();\
note.textContent='updated '+new Date().toLocaleTimeString();})\
.catch(function(e){note.textContent='update failed ('+e.message+'); retrying';});}\
tick();setInterval(tick,1000);setInterval(poll,10000);})();";

/// `headers`, plus an "Action" column when actions are offered.
fn with_action<'a>(admin_csrf: Option<&str>, headers: &[&'a str]) -> Vec<&'a str> {
    let mut all = headers.to_vec();
    if admin_csrf.is_some() {
        all.push("Action");
    }
    all
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
        "<input name=\"reason\" required maxlength=\"500\" placeholder=\"reason\" aria-label=\"reason\">\
         <button type=\"submit\">{}…</button></form>",
        escape(label)
    );
    form
}

/// Renders the dashboard from the store.
pub async fn render(state: &AppState) -> Result<String, ApiError> {
    render_for(state, None).await
}

/// Renders the dashboard; with `admin_csrf` (an admin's signed-in browser) each row offers its
/// action (force-expire, delete, release) behind a confirmation step and a required reason.
pub async fn render_for(state: &AppState, admin_csrf: Option<&str>) -> Result<String, ApiError> {
    let store = state.store()?;
    let now = store.clock().now();
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

    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>Tether admin</title><style>{STYLE}</style></head><body data-now=\"{}\">\
         <h1>Tether admin</h1><div class=\"sub\">Live: updated every 10 s without reloading \
         <button type=\"button\" id=\"pause\">Pause live updates</button> \
         <span id=\"live-state\" aria-live=\"polite\"></span> · \
         <a href=\"/docs/\">API docs</a> · <a href=\"/metrics\">metrics</a></div>\
         <main id=\"live\"><div class=\"cards\"><div class=\"card\"><b>{n_sessions}</b>sessions</div>\
         <div class=\"card\"><b>{}</b>live leases shown</div>\
         <div class=\"card\"><b>{n_quarantined}</b>quarantined keys</div></div>",
        now.as_millis(),
        leases.len(),
    );

    out.push_str("<h2>Live leases</h2>");
    let rows: Vec<Vec<String>> = leases
        .iter()
        .map(|b| BindingBody::new(b, now))
        .map(|b| {
            let lease = b.lease.as_ref();
            vec![
                code(&b.namespace),
                link(
                    &format!(
                        "/v1/namespaces/{}/bindings/{}",
                        encode_segment(&b.namespace),
                        encode_segment(&b.key)
                    ),
                    &b.key,
                ),
                native_cell(b.native_id.as_deref()),
                escape(lease.and_then(|l| l.holder.as_deref()).unwrap_or("—")),
                lease.map_or_else(String::new, |l| {
                    format!(
                        "<span title=\"epoch {}\">{}</span>",
                        l.epoch,
                        escape(&l.epoch_label)
                    )
                }),
                lease.map_or_else(String::new, |l| escape(&ago(now, l.acquired_at_ms))),
                lease.map_or_else(String::new, |l| escape(&ago(now, l.renewed_at_ms))),
                lease.map_or_else(String::new, |l| {
                    format!(
                        "<span data-expires=\"{}\">expires in {}s</span>",
                        l.expires_at_ms,
                        l.expires_in_ms / 1000
                    )
                }),
            ]
            .into_iter()
            .chain(admin_csrf.map(|csrf| {
                let epoch = lease.map(|l| l.epoch.to_string()).unwrap_or_default();
                action_form(
                    csrf,
                    "expire_lease",
                    &[
                        ("namespace", &b.namespace),
                        ("key", &b.key),
                        ("epoch", &epoch),
                    ],
                    "Force-expire",
                )
            }))
            .collect()
        })
        .collect();
    table(
        &mut out,
        &with_action(
            admin_csrf,
            &[
                "Namespace",
                "Key",
                "Native thread",
                "Holder",
                "Epoch",
                "Acquired",
                "Renewed",
                "Expiry",
            ],
        ),
        &rows,
        "No live leases.",
    );

    out.push_str("<h2>Sessions</h2>");
    let rows: Vec<Vec<String>> = sessions
        .sessions
        .iter()
        .map(SessionSummary::from)
        .map(|s| {
            vec![
                link(
                    &format!("/ui/sessions/{}", encode_segment(&s.session_key)),
                    &s.session_key,
                ),
                escape(&s.agent_id),
                code(&s.session_id),
                s.previous_session_id
                    .as_deref()
                    .map_or_else(String::new, code),
                s.lifecycle_revision.to_string(),
                escape(s.agent_harness_id.as_deref().unwrap_or("—")),
                escape(&ago(now, s.updated_at_ms)),
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
        .collect();
    table(
        &mut out,
        &with_action(
            admin_csrf,
            &[
                "Session key",
                "Agent",
                "Generation",
                "Previous",
                "Revision",
                "Harness",
                "Updated",
            ],
        ),
        &rows,
        "No sessions yet. Populate a database with `tether demo`.",
    );

    out.push_str("<h2>Quarantined keys</h2>");
    let rows: Vec<Vec<String>> = quarantined
        .iter()
        .map(QuarantineBody::from)
        .map(|q| {
            vec![
                code(&q.namespace),
                code(&q.key),
                escape(&q.reason),
                escape(q.custody.as_deref().unwrap_or("—")),
                escape(&ago(now, q.quarantined_at_ms)),
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
        .collect();
    table(
        &mut out,
        &with_action(
            admin_csrf,
            &["Namespace", "Key", "Reason", "Custody", "Since"],
        ),
        &rows,
        "No quarantined keys.",
    );

    out.push_str("<h2>Recent lease events</h2>");
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(LeaseEventBody::from)
        .map(|e| {
            vec![
                e.seq.to_string(),
                escape(&e.kind),
                code(&e.namespace),
                code(&e.key),
                e.epoch.map_or_else(String::new, |x| {
                    format!(
                        "<span title=\"epoch {x}\">{}</span>",
                        escape(&crate::dto::epoch_label(x))
                    )
                }),
                escape(e.holder.as_deref().unwrap_or("—")),
                escape(&ago(now, e.at_ms)),
            ]
        })
        .collect();
    table(
        &mut out,
        &["#", "Event", "Namespace", "Key", "Epoch", "Holder", "When"],
        &rows,
        "No lease events yet.",
    );
    let _ = write!(out, "</main><script>{SCRIPT}</script></body></html>");
    Ok(out)
}

/// The dashboard page (read scope). A browser without a token or session is sent to the
/// sign-in page instead of a JSON 401.
pub async fn dashboard(
    access: Result<ReadAccess, ApiError>,
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
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
        Ok(_) => {
            let session = crate::signin::current(&state, &headers).map(|(_, s)| s);
            let admin_csrf = session
                .as_ref()
                .filter(|s| s.principal.scope == crate::auth::Scope::Admin)
                .map(|s| s.csrf.clone());
            match render_for(&state, admin_csrf.as_deref()).await {
                Ok(mut html) => {
                    if let Some(session) = session {
                        let bar = format!(
                            "<form class=\"signout\" method=\"post\" action=\"/signout\">\
                             Signed in as <b>{}</b> <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
                             <button type=\"submit\">Sign out</button></form>",
                            escape(&session.principal.name),
                            escape(&session.csrf)
                        );
                        html = html.replacen(
                            "<h1>Tether admin</h1>",
                            &format!("<h1>Tether admin</h1>{bar}"),
                            1,
                        );
                    }
                    Html(html).into_response()
                }
                Err(e) => e.into_response(),
            }
        }
    }
}

/// A relative time with the absolute UTC time on hover.
fn when(now: Timestamp, at_ms: i64) -> String {
    format!(
        "<span title=\"{}\">{}</span>",
        escape(&Timestamp::from_millis(at_ms).to_string()),
        escape(&ago(now, at_ms))
    )
}

/// Renders one session: lineage, bindings with their leases, quarantine, the lease history as a
/// timeline, the transcript tail, the last tool outcomes and the finalization records (all
/// sanitized).
pub async fn render_session(state: &AppState, raw_key: &str) -> Result<String, ApiError> {
    let store = state.store()?;
    let now = store.clock().now();
    let entry = crate::routes::sessions::load_session(store, raw_key).await?;
    let d = crate::routes::sessions::session_detail(store, &entry).await?;
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{key} · Tether admin</title><style>{STYLE}</style></head><body>\
         <div class=\"sub\"><a href=\"/\">← Dashboard</a> · \
         <a href=\"/v1/sessions/{seg}\">JSON</a></div><h1>Session <code>{key}</code></h1>",
        key = escape(&d.session.session_key),
        seg = encode_segment(&d.session.session_key),
    );
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
            d.lineage
                .previous_session_id
                .as_deref()
                .map_or_else(String::new, code),
            d.lineage.lifecycle_revision.to_string(),
            escape(d.session.agent_harness_id.as_deref().unwrap_or("—")),
            when(now, d.session.created_at_ms),
            when(now, d.session.updated_at_ms),
            escape(d.upstream.as_deref().unwrap_or("—")),
        ]],
        "",
    );
    out.push_str("<h2>Bindings</h2>");
    let rows: Vec<Vec<String>> = d
        .bindings
        .iter()
        .map(|b| {
            let l = b.lease.as_ref();
            vec![
                code(&b.namespace),
                code(&b.key),
                escape(&b.key_kind),
                native_cell(b.native_id.as_deref()),
                escape(l.and_then(|l| l.holder.as_deref()).unwrap_or("—")),
                l.map_or_else(String::new, |l| {
                    format!(
                        "<span title=\"epoch {}\">{}</span>",
                        l.epoch,
                        escape(&l.epoch_label)
                    )
                }),
                l.map_or_else(String::new, |l| when(now, l.acquired_at_ms)),
                l.map_or_else(String::new, |l| when(now, l.renewed_at_ms)),
                l.map_or_else(
                    || "no lease".to_owned(),
                    |l| {
                        format!(
                            "<span title=\"{}\">{}</span>",
                            escape(&Timestamp::from_millis(l.expires_at_ms).to_string()),
                            if l.live {
                                format!("expires in {}s", l.expires_in_ms / 1000)
                            } else {
                                "expired".into()
                            }
                        )
                    },
                ),
                l.map_or_else(String::new, |l| {
                    format!("{}s", (l.expires_at_ms - l.renewed_at_ms).max(0) / 1000)
                }),
            ]
        })
        .collect();
    table(
        &mut out,
        &[
            "Namespace",
            "Key",
            "Kind",
            "Native thread",
            "Holder",
            "Epoch",
            "Acquired",
            "Renewed",
            "Expiry",
            "Granted TTL",
        ],
        &rows,
        "No binding rows.",
    );
    if !d.quarantine.is_empty() {
        out.push_str("<h2>Quarantined keys</h2>");
        let rows: Vec<Vec<String>> = d
            .quarantine
            .iter()
            .map(|q| {
                vec![
                    code(&q.key),
                    escape(&q.reason),
                    when(now, q.quarantined_at_ms),
                ]
            })
            .collect();
        table(&mut out, &["Key", "Reason", "Since"], &rows, "");
    }
    out.push_str("<h2>Lease history</h2>");
    let rows: Vec<Vec<String>> = d
        .lease_events
        .iter()
        .map(|e| {
            vec![
                when(now, e.at_ms),
                escape(&e.kind),
                code(&e.key),
                e.epoch_label.as_deref().map_or_else(String::new, escape),
                escape(e.holder.as_deref().unwrap_or("—")),
                e.token_prefix.as_deref().map_or_else(String::new, code),
            ]
        })
        .collect();
    table(
        &mut out,
        &["When", "Event", "Key", "Epoch", "Holder", "Token"],
        &rows,
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
    out.push_str("</body></html>");
    Ok(out)
}

/// `GET /ui/sessions/{key}`: one session's page (read scope; a browser without credentials is
/// sent to the sign-in form).
pub async fn session_page(
    access: Result<ReadAccess, ApiError>,
    State(state): State<AppState>,
    axum::extract::Path(key): axum::extract::Path<String>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
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
        Ok(_) => match render_session(&state, &key).await {
            Ok(html) => Html(html).into_response(),
            Err(e) => e.into_response(),
        },
    }
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
