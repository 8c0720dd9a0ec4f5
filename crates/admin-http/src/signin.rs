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

/// A signed-in browser.
#[derive(Debug, Clone)]
pub struct UiSession {
    /// Who signed in.
    pub principal: Principal,
    /// The token every mutating form and call must echo.
    pub csrf: String,
    expires: Instant,
}

/// The browser sessions of this process.
#[derive(Debug, Default)]
pub struct UiSessions {
    inner: Mutex<HashMap<String, UiSession>>,
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
        return crate::error::ApiError::Forbidden(
            "the form's CSRF token is missing or wrong: reload the page and retry".into(),
        )
        .into_response();
    }
    state.ui_sessions().end(&id);
    tracing::info!(actor = %session.principal.name, "dashboard sign-out");
    let mut response = see_other("/signin");
    response
        .headers_mut()
        .insert(SET_COOKIE, cookie("", 0, over_tls(&headers)));
    response
}
