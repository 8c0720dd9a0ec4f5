//! Browser sign-in for the dashboard: an operator pastes the read or admin token once and gets a
//! session cookie (`HttpOnly`, `SameSite=Strict`, `Secure` when the request came over TLS).
//!
//! The cookie holds a random session id, never the token; the session (the token's name and
//! scope, a CSRF token, an expiry) lives in this process only, so a restart signs everyone out.
//! Every mutating request authenticated by the cookie must carry the session's CSRF token (the
//! `csrf` form field or the `X-CSRF-Token` header), compared in constant time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::header::{COOKIE, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use crate::auth::{Principal, constant_time_eq};
use crate::routes::dashboard::escape;
use crate::state::AppState;

/// The session cookie's name.
pub const COOKIE_NAME: &str = "tether_session";
/// The header carrying the CSRF token on API calls made with the cookie.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a browser session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// Most browser sessions kept at once (the oldest goes first beyond it).
const MAX_SESSIONS: usize = 1024;

/// A signed-in browser. Its `Debug` never shows the CSRF token.
#[derive(Clone)]
pub struct UiSession {
    /// Who signed in.
    pub principal: Principal,
    /// The token every mutating form and call must echo.
    pub csrf: String,
    expires: Instant,
}

impl std::fmt::Debug for UiSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UiSession")
            .field("principal", &self.principal)
            .field("csrf", &"***")
            .field("expires", &self.expires)
            .finish()
    }
}

/// The browser sessions of this process. Its `Debug` shows how many there are, never their
/// ids (the cookie values) or CSRF tokens.
#[derive(Default)]
pub struct UiSessions {
    inner: Mutex<HashMap<String, UiSession>>,
}

impl std::fmt::Debug for UiSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let live = self.inner.lock().map_or(0, |sessions| sessions.len());
        f.debug_struct("UiSessions")
            .field("sessions", &live)
            .finish()
    }
}

fn random_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

impl UiSessions {
    /// Starts a session for `principal`; returns its id (the cookie value).
    pub fn start(&self, principal: Principal) -> String {
        let id = random_token();
        let now = Instant::now();
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, s| s.expires > now);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(
            id.clone(),
            UiSession {
                principal,
                csrf: random_token(),
                expires: now + SESSION_TTL,
            },
        );
        id
    }

    /// The live session of `id`.
    pub fn get(&self, id: &str) -> Option<UiSession> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.get(id).filter(|s| s.expires > Instant::now()).cloned()
    }

    /// Ends the session `id`.
    pub fn end(&self, id: &str) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}

/// The session cookie's value in `headers`, if any.
pub fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value.to_owned())
}

/// The signed-in session of a request, if its cookie names one.
pub fn current(state: &AppState, headers: &HeaderMap) -> Option<(String, UiSession)> {
    let id = session_id(headers)?;
    state.ui_sessions().get(&id).map(|s| (id, s))
}

/// Whether `presented` is the session's CSRF token.
pub fn csrf_ok(session: &UiSession, presented: Option<&str>) -> bool {
    presented.is_some_and(|p| constant_time_eq(&session.csrf, p))
}

/// Whether the request reached the service over TLS (directly or through a proxy that says so).
fn over_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

fn cookie(value: &str, max_age: u64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE_NAME}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("tether_session=; Max-Age=0"))
}

fn see_other(to: &'static str) -> Response {
    (
        StatusCode::SEE_OTHER,
        [(LOCATION, HeaderValue::from_static(to))],
    )
        .into_response()
}

/// The sign-in page, with an optional message.
fn page(status: StatusCode, message: Option<&str>) -> Response {
    let note = message.map_or_else(String::new, |m| {
        format!("<p role=\"alert\" id=\"error\">{}</p>", escape(m))
    });
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>Sign in · Tether admin</title></head>\
         <body style=\"font-family:system-ui,sans-serif;max-width:28rem;margin:4rem auto\">\
         <h1>Tether admin</h1>{note}\
         <form method=\"post\" action=\"/signin\">\
         <label for=\"token\">Read or admin token</label><br>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" required \
         style=\"width:100%;margin:.5rem 0\"><br>\
         <button type=\"submit\">Sign in</button></form></body></html>"
    );
    (status, Html(html)).into_response()
}

/// `GET /signin`: the sign-in form.
pub async fn signin_page() -> Response {
    page(StatusCode::OK, None)
}

/// The sign-in form's fields.
#[derive(Debug, Deserialize)]
pub struct SignInForm {
    /// The read or admin token.
    pub token: String,
}

/// `POST /signin`: checks the token and starts a session (303 to the dashboard), or shows the
/// form again with 401.
pub async fn signin(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<SignInForm>,
) -> Response {
    if !state.tokens().any() {
        return page(
            StatusCode::CONFLICT,
            Some("this service has no token configured: the dashboard is open on loopback"),
        );
    }
    let token = form.token.trim();
    match state
        .tokens()
        .principal_for(Some(&format!("Bearer {token}")))
    {
        Ok(principal) => {
            tracing::info!(actor = %principal.name, "dashboard sign-in");
            let id = state.ui_sessions().start(principal);
            let mut response = see_other("/");
            response.headers_mut().insert(
                SET_COOKIE,
                cookie(&id, SESSION_TTL.as_secs(), over_tls(&headers)),
            );
            response
        }
        Err(_) => {
            tracing::warn!("dashboard sign-in refused: invalid token");
            page(StatusCode::UNAUTHORIZED, Some("That token is not valid."))
        }
    }
}

/// The sign-out form's fields.
#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    /// The session's CSRF token.
    #[serde(default)]
    pub csrf: Option<String>,
}

/// `POST /signout`: ends the session (the form must carry its CSRF token) and clears the cookie.
pub async fn signout(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<CsrfForm>,
) -> Response {
    let Some((id, session)) = current(&state, &headers) else {
        return see_other("/signin");
    };
    if !csrf_ok(&session, form.csrf.as_deref()) {
        return csrf_refused();
    }
    state.ui_sessions().end(&id);
    tracing::info!(actor = %session.principal.name, "dashboard sign-out");
    let mut response = see_other("/signin");
    response
        .headers_mut()
        .insert(SET_COOKIE, cookie("", 0, over_tls(&headers)));
    response
}

/// The fields of an action form from the dashboard.
#[derive(Debug, Deserialize)]
pub struct ActionForm {
    /// The session's CSRF token.
    #[serde(default)]
    pub csrf: Option<String>,
    /// `delete_session`, `expire_lease` or `release_quarantine`.
    pub action: String,
    /// The session key (delete).
    #[serde(default)]
    pub session_key: Option<String>,
    /// The binding namespace (expire, release).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The binding key (expire, release).
    #[serde(default)]
    pub key: Option<String>,
    /// The lease epoch the operator saw (expire; the lease is expired only if it is still it).
    #[serde(default)]
    pub epoch: Option<String>,
    /// Why (required).
    #[serde(default)]
    pub reason: String,
    /// `yes` once the operator confirmed on the confirmation page.
    #[serde(default)]
    pub confirm: Option<String>,
}

fn hidden(name: &str, value: Option<&str>) -> String {
    value.map_or_else(String::new, |v| {
        format!(
            "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
            escape(name),
            escape(v)
        )
    })
}

fn result_page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{t} · Tether admin</title></head>\
         <body style=\"font-family:system-ui,sans-serif;max-width:40rem;margin:3rem auto\">\
         <h1>{t}</h1>{body}<p><a href=\"/\">Back to the dashboard</a></p></body></html>",
        t = escape(title)
    );
    (status, Html(html)).into_response()
}

/// A dashboard form whose CSRF token is missing or not the session's: a page (403) a browser
/// shows, saying what happened and what to do; nothing was done.
fn csrf_refused() -> Response {
    result_page(
        StatusCode::FORBIDDEN,
        "The form is out of date",
        "<p id=\"outcome\">Nothing was done: the form's security token is missing or is not \
         this sign-in's (the page was opened before you last signed in, or in another \
         session). Go back, reload the page and try again.</p>",
    )
}

/// `POST /ui/actions`: an action from the dashboard (an admin's signed-in browser, with the
/// session's CSRF token and a reason). Without `confirm=yes` it answers a confirmation page
/// naming the action, its target and the reason; with it, the action runs through the same
/// audited path as the API, under the token's name.
pub async fn ui_action(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<ActionForm>,
) -> Response {
    let Some((_, session)) = current(&state, &headers) else {
        return see_other("/signin");
    };
    if !csrf_ok(&session, form.csrf.as_deref()) {
        return csrf_refused();
    }
    if session.principal.scope != crate::auth::Scope::Admin {
        return result_page(
            StatusCode::FORBIDDEN,
            "Not allowed",
            "<p>Actions need the admin token: sign out and sign in with it.</p>",
        );
    }
    let reason = match crate::params::reason(&form.reason) {
        Ok(r) => r,
        Err(e) => {
            return result_page(
                StatusCode::BAD_REQUEST,
                "A reason is required",
                &format!("<p>{}</p>", escape(&e.to_string())),
            );
        }
    };
    let (verb, target) = match (
        form.action.as_str(),
        &form.session_key,
        &form.namespace,
        &form.key,
    ) {
        ("delete_session", Some(k), _, _) => ("Delete session", k.clone()),
        ("expire_lease", _, Some(ns), Some(k)) => {
            ("Force-expire the lease on", format!("{ns}/{k}"))
        }
        ("release_quarantine", _, Some(ns), Some(k)) => {
            ("Release quarantined key", format!("{ns}/{k}"))
        }
        _ => {
            return result_page(
                StatusCode::BAD_REQUEST,
                "Unknown action",
                "<p>The form names no known action and target.</p>",
            );
        }
    };
    if form.confirm.as_deref() != Some("yes") {
        let epoch_note = form
            .epoch
            .as_deref()
            .filter(|e| !e.is_empty())
            .and_then(|e| e.parse::<u64>().ok())
            .map_or_else(String::new, |e| {
                format!(
                    " (epoch {}; refused if the lease moved on)",
                    escape(&crate::dto::epoch_label(e))
                )
            });
        let body = format!(
            "<p id=\"confirm-text\">{} <code>{}</code>{epoch_note}?</p><p>Reason: <q>{}</q></p>\
             <form method=\"post\" action=\"/ui/actions\">{}{}{}{}{}{}{}{}\
             <input type=\"hidden\" name=\"confirm\" value=\"yes\">\
             <button type=\"submit\" id=\"confirm\">Confirm</button> <a href=\"/\">Cancel</a></form>",
            escape(verb),
            escape(&target),
            escape(&reason),
            hidden("csrf", Some(&session.csrf)),
            hidden("action", Some(&form.action)),
            hidden("session_key", form.session_key.as_deref()),
            hidden("namespace", form.namespace.as_deref()),
            hidden("key", form.key.as_deref()),
            hidden("epoch", form.epoch.as_deref()),
            hidden("reason", Some(&reason)),
            "",
        );
        return result_page(StatusCode::OK, "Confirm the action", &body);
    }
    let result = run_ui_action(&state, &session.principal.name, &form, &reason).await;
    match result {
        Ok(done) => result_page(
            StatusCode::OK,
            "Done",
            &format!("<p id=\"outcome\">{}</p>", escape(&done.message)),
        ),
        Err(e) => result_page(
            e.status(),
            "Refused",
            &format!(
                "<p id=\"outcome\"><code>{}</code>: {}</p>",
                escape(e.code()),
                escape(&e.to_string())
            ),
        ),
    }
}

async fn run_ui_action(
    state: &AppState,
    actor: &str,
    form: &ActionForm,
    reason: &str,
) -> Result<crate::dto::ActionResult, crate::error::ApiError> {
    use crate::error::ApiError;
    let store = state.store()?;
    let ns_key = || {
        crate::routes::bindings::parse_ns_key(
            form.namespace.as_deref().unwrap_or_default(),
            form.key.as_deref().unwrap_or_default(),
        )
    };
    match form.action.as_str() {
        "delete_session" => {
            crate::actions::delete_session_action(
                store,
                actor,
                form.session_key.as_deref().unwrap_or_default(),
                reason,
            )
            .await
        }
        "expire_lease" => {
            let (ns, key) = ns_key()?;
            let epoch = match form.epoch.as_deref().filter(|e| !e.is_empty()) {
                None => None,
                Some(e) => Some(
                    e.parse::<u64>()
                        .map_err(|_| ApiError::BadRequest("invalid `epoch`".into()))?,
                ),
            };
            crate::actions::expire_lease_action(store, actor, &ns, &key, epoch, reason).await
        }
        "release_quarantine" => {
            let (ns, key) = ns_key()?;
            crate::actions::release_quarantine_action(store, actor, &ns, &key, reason).await
        }
        other => Err(ApiError::BadRequest(format!("unknown action `{other}`"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Scope;

    #[test]
    fn debug_never_shows_a_session_id_or_its_csrf_token() {
        let sessions = UiSessions::default();
        let id = sessions.start(Principal {
            name: "admin".into(),
            scope: Scope::Admin,
        });
        let session = sessions.get(&id).expect("the session just started");
        let shown = format!("{sessions:?} {session:?}");
        assert!(!shown.contains(&id), "{shown}");
        assert!(!shown.contains(&session.csrf), "{shown}");
        assert!(shown.contains("sessions: 1"), "{shown}");
    }
}
