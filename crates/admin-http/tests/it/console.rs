//! The operator's console: counters maintained at write time, liveness without the database,
//! typed 404/405, log formats, cursor paging of every list, and the audit trail.

use std::process::Command;
use std::sync::Arc;

use axum::http::StatusCode;
use tether_admin_http::auth::Tokens;
use tether_admin_http::{AppState, HealthProbe};
use tether_core::{QuarantineEntry, QuarantineStore as _, SessionKey};
use tether_storage::{NewTranscriptEntry, TranscriptRole, session_binding_keys};

use crate::support::{ADMIN, Fixture, READ, T0, call, ns, seg, tokens};

fn metric(text: &str, line_start: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start))
        .unwrap_or_else(|| panic!("no `{line_start}` in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

async fn append(f: &Fixture, key: &str, role: TranscriptRole, content: &str) {
    f.store
        .append_transcript(
            &SessionKey::new(key).unwrap(),
            NewTranscriptEntry {
                role,
                content: content.into(),
                idempotency_key: None,
                metadata: None,
            },
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn finalizations_total_is_counted_at_write_time_and_never_decreases() {
    let f = Fixture::new().await;
    let state = f.state(Tokens::default());
    append(
        &f,
        "agent:ops:gamma",
        TranscriptRole::System,
        "finalization: succeeded",
    )
    .await;
    append(
        &f,
        "agent:ops:gamma",
        TranscriptRole::System,
        "finalization: fell back to the host answer (timeout)",
    )
    .await;
    // Neither a user's mention nor a system entry without the prefix is a record.
    append(
        &f,
        "agent:ops:gamma",
        TranscriptRole::User,
        "finalization: succeeded",
    )
    .await;
    append(
        &f,
        "agent:ops:gamma",
        TranscriptRole::System,
        "no finalization: succeeded",
    )
    .await;
    let succeeded = "tether_finalizations_total{outcome=\"succeeded\"} ";
    let fell_back = "tether_finalizations_total{outcome=\"fell_back\"} ";
    let before = call(&state, "GET", "/metrics", None, None).await.text;
    assert_eq!(metric(&before, succeeded), 1, "{before}");
    assert_eq!(metric(&before, fell_back), 1, "{before}");

    let admin = f.state(tokens());
    let deleted = call(
        &admin,
        "DELETE",
        &format!("/v1/sessions/{}", seg("agent:ops:gamma")),
        Some(ADMIN),
        Some(r#"{"reason":"test clean-up"}"#.into()),
    )
    .await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);
    let after = call(&admin, "GET", "/metrics", Some(READ), None).await.text;
    assert_eq!(metric(&after, succeeded), 1, "a counter never decreases");
    assert_eq!(metric(&after, fell_back), 1, "a counter never decreases");
}

#[derive(Debug)]
struct DatabaseDown;

#[async_trait::async_trait]
impl HealthProbe for DatabaseDown {
    async fn check(&self) -> Result<(), String> {
        Err("connection refused".into())
    }

    fn backend(&self) -> &'static str {
        "postgres"
    }
}

#[tokio::test]
async fn healthz_is_liveness_only_and_readyz_checks_the_database() {
    let state = AppState::new(Arc::new(DatabaseDown), Tokens::default());
    let live = call(&state, "GET", "/healthz", None, None).await;
    assert_eq!(live.status, StatusCode::OK, "{}", live.text);
    assert_eq!(live.json()["status"], "ok");
    call(&state, "GET", "/readyz", None, None)
        .await
        .expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
}

#[tokio::test]
async fn unknown_paths_and_methods_get_typed_json_errors() {
    let state = AppState::for_tests();
    for path in ["/nope", "/v1/nope", "/v1/sessions/a/b/c/d"] {
        let reply = call(&state, "GET", path, None, None).await;
        reply.expect_error(StatusCode::NOT_FOUND, "not_found");
        assert!(reply.json()["message"].as_str().unwrap().contains("/v1"));
    }
    let request = axum::http::Request::builder()
        .method("DELETE")
        .uri("/healthz")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = tower::ServiceExt::oneshot(tether_admin_http::app(state.clone()), request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(
        response.headers().get("allow").is_some(),
        "405 keeps its Allow header"
    );
    call(&state, "POST", "/v1/sessions", None, None)
        .await
        .expect_error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
}

/// A console page that cannot be rendered (a missing session, a malformed key) answers a page
/// with the error's status, message and code, not the API's JSON error body; the API answers
/// the same request with its typed JSON error.
#[tokio::test]
async fn a_console_page_that_fails_is_a_page_with_the_error_status() {
    let f = Fixture::new().await;
    let state = f.state(Tokens::default());
    let path = format!("/ui/sessions/{}", seg("agent:main:none"));
    let missing = call(&state, "GET", &path, None, None).await;
    missing.expect_error_page(StatusCode::NOT_FOUND, "not_found");
    assert!(
        missing
            .text
            .contains("no session `agent:main:none`: see the session list"),
        "{}",
        missing.text
    );
    assert!(!missing.text.contains("GET /v1"), "{}", missing.text);
    assert!(missing.text.contains("<a href=\"/\">Overview</a>"));
    call(&state, "GET", "/ui/sessions/%20", None, None)
        .await
        .expect_error_page(StatusCode::BAD_REQUEST, "bad_request");
    call(
        &state,
        "GET",
        &format!("/v1/sessions/{}", seg("agent:main:none")),
        None,
        None,
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "not_found");
}

#[test]
fn logs_have_no_colour_codes_off_a_terminal_and_json_is_one_object_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let run = |extra: &[&str], env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tether"));
        command
            .args(extra)
            .args(["migrate", "--database-url", &url])
            .env("RUST_LOG", "debug")
            .env_remove("TETHER_LOG_FORMAT")
            .env_remove("TETHER_DATABASE_URL");
        if let Some(format) = env {
            command.env("TETHER_LOG_FORMAT", format);
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let text = run(&[], None);
    assert!(!text.trim().is_empty(), "debug logging writes lines");
    assert!(!text.contains('\u{1b}'), "ANSI codes on a pipe: {text}");
    for json in [run(&["--log-format", "json"], None), run(&[], Some("json"))] {
        assert!(!json.trim().is_empty());
        for line in json.lines().filter(|l| !l.trim().is_empty()) {
            let value: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert!(value["level"].is_string(), "{line}");
        }
    }
}

/// Follows `next_cursor` from the first page to the last, returning every item.
async fn walk(
    state: &AppState,
    path: &str,
    field: &str,
    token: Option<&str>,
) -> Vec<serde_json::Value> {
    let mut items = Vec::new();
    let mut cursor = String::new();
    for _ in 0..100 {
        let page = call(
            state,
            "GET",
            &format!("{path}?limit=1&cursor={cursor}"),
            token,
            None,
        )
        .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.text);
        let page = page.json();
        let got = page[field].as_array().unwrap();
        assert!(got.len() <= 1);
        items.extend(got.iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => return items,
        }
    }
    panic!("{path} never ended");
}

#[tokio::test]
async fn lease_events_and_quarantine_page_with_cursors() {
    let f = Fixture::new().await;
    let gamma = f.entry("agent:ops:gamma").await;
    for key in session_binding_keys(&gamma) {
        f.bind(&key, Some(("worker", 60))).await;
    }
    for (i, key) in session_binding_keys(&gamma).iter().enumerate() {
        f.store
            .quarantine(QuarantineEntry {
                namespace: ns(),
                key: key.clone(),
                reason: format!("test {i}"),
                custody: None,
                // Two at the same instant: the cursor orders ties by namespace and key.
                quarantined_at: T0 + std::time::Duration::from_secs(1),
            })
            .await
            .unwrap();
    }
    let state = f.state(Tokens::default());
    let all = call(&state, "GET", "/v1/quarantine", None, None)
        .await
        .json();
    let all = all["quarantine"].as_array().unwrap().clone();
    assert_eq!(all.len(), 3);
    assert_eq!(
        walk(&state, "/v1/quarantine", "quarantine", None).await,
        all
    );

    let events = call(&state, "GET", "/v1/lease-events", None, None)
        .await
        .json();
    let events = events["events"].as_array().unwrap().clone();
    assert!(events.len() >= 3, "{events:?}");
    assert_eq!(
        walk(&state, "/v1/lease-events", "events", None).await,
        events
    );

    for path in ["/v1/quarantine", "/v1/lease-events"] {
        call(&state, "GET", &format!("{path}?cursor=garbage"), None, None)
            .await
            .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    }
}

#[tokio::test]
async fn every_api_action_is_audited_with_its_token_name_reason_and_outcome() {
    let f = Fixture::new().await;
    let tokens = Tokens::new(None, None)
        .unwrap()
        .with_named(Some("viewer:v-secret"), Some("alice:a-secret,bob:b-secret"))
        .unwrap();
    let state = f.state(tokens);
    let alpha = f.entry("agent:main:alpha").await;
    let leased = session_binding_keys(&alpha)[1].clone();
    let expire = format!(
        "/v1/namespaces/{}/bindings/{}/expire-lease",
        seg(crate::support::NS),
        seg(leased.as_str())
    );
    let delete = format!("/v1/sessions/{}", seg("agent:main:alpha"));
    let reason = |r: &str| Some(format!(r#"{{"reason":"{r}"}}"#));

    // Refused under the live lease, then expired, then deleted; a reader cannot act.
    let refused = call(
        &state,
        "DELETE",
        &delete,
        Some("b-secret"),
        reason("cleanup"),
    )
    .await;
    refused.expect_error(StatusCode::CONFLICT, "lease_held");
    call(&state, "DELETE", &delete, Some("v-secret"), reason("x"))
        .await
        .expect_error(StatusCode::FORBIDDEN, "forbidden");
    call(&state, "DELETE", &delete, Some("a-secret"), None)
        .await
        .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    call(&state, "DELETE", &delete, Some("a-secret"), reason(" "))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    // A reason past the 4,096-byte rule is refused whole, never cut and taken.
    call(
        &state,
        "DELETE",
        &delete,
        Some("a-secret"),
        reason(&"x".repeat(4097)),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    let long_reason = format!("INC-1: {} -- approved by lead", "y".repeat(580));
    let expired = call(
        &state,
        "POST",
        &expire,
        Some("a-secret"),
        reason("worker hung"),
    )
    .await;
    assert_eq!(expired.status, StatusCode::OK, "{}", expired.text);
    let deleted = call(
        &state,
        "DELETE",
        &delete,
        Some("b-secret"),
        reason(&long_reason),
    )
    .await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);

    let all = call(&state, "GET", "/v1/audit", Some("v-secret"), None).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert!(
        !all.text.contains("a-secret") && !all.text.contains("b-secret"),
        "no credential in the trail"
    );
    let all = all.json()["entries"].as_array().unwrap().clone();
    let summary: Vec<_> = all
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {}",
                e["actor"].as_str().unwrap(),
                e["action"].as_str().unwrap(),
                e["reason"].as_str().unwrap(),
                e["outcome"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            format!("bob delete_session {long_reason} succeeded").as_str(),
            "alice expire_lease worker hung succeeded",
            "bob delete_session cleanup refused",
        ],
        "newest first; requests refused before acting (scope, reason) are not actions"
    );
    assert_eq!(
        all[1]["target"],
        format!("{}/{}", crate::support::NS, leased)
    );
    assert!(all[0]["finished_at_ms"].as_i64().is_some());
    assert!(all[2]["detail"].as_str().unwrap().starts_with("lease_held"));
    assert_eq!(
        walk(&state, "/v1/audit", "entries", Some("v-secret")).await,
        all,
        "the trail pages with cursors"
    );

    let metrics = call(&state, "GET", "/metrics", Some("v-secret"), None)
        .await
        .text;
    for line in [
        "tether_operator_actions_total{action=\"delete_session\",outcome=\"refused\"} 1",
        "tether_operator_actions_total{action=\"delete_session\",outcome=\"succeeded\"} 1",
        "tether_operator_actions_total{action=\"expire_lease\",outcome=\"succeeded\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
}

#[tokio::test]
async fn epochs_read_as_generation_and_number_while_the_packed_epoch_still_fences() {
    let f = Fixture::new().await;
    let state = f.state(Tokens::default());
    let leases = call(&state, "GET", "/v1/leases", None, None).await.json();
    let lease = &leases["bindings"][0]["lease"];
    let epoch = lease["epoch"].as_u64().unwrap();
    assert!(epoch >= 1 << 32, "the store packs its epochs: {epoch}");
    let (generation, number) = tether_storage::epoch_parts(epoch);
    assert_eq!(lease["epoch_label"], format!("g{generation}·{number}"));
    assert!(
        generation >= 1 && number < 10,
        "small numbers: {generation}, {number}"
    );
    let events = call(&state, "GET", "/v1/lease-events", None, None)
        .await
        .json();
    assert_eq!(
        events["events"][0]["epoch_label"],
        format!("g{generation}·{number}")
    );
    let page = call(&state, "GET", "/", None, None).await.text;
    assert!(
        page.contains(&format!("title=\"epoch {epoch}\">g{generation}·{number}<")),
        "the dashboard shows the label with the packed epoch on hover"
    );
    assert!(
        !page.contains(&format!(">{epoch}<")),
        "no packed epoch as text"
    );
}

/// A request with extra headers and a body; returns status, headers and body text.
pub(crate) async fn send(
    state: &AppState,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, axum::http::HeaderMap, String) {
    use http_body_util::BodyExt as _;
    let mut request = axum::http::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = tower::ServiceExt::oneshot(
        tether_admin_http::app(state.clone()),
        request
            .body(axum::body::Body::from(body.to_owned()))
            .unwrap(),
    )
    .await
    .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

pub(crate) const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

#[tokio::test]
async fn a_browser_signs_in_with_a_token_gets_a_strict_cookie_and_signs_out_with_csrf() {
    let f = Fixture::new().await;
    let state = f.state(tokens());

    // No token, no session: the dashboard sends the browser to the sign-in form.
    let (status, headers, _) = send(&state, "GET", "/", &[], "").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/signin");
    let (status, _, form) = send(&state, "GET", "/signin", &[], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(form.contains("type=\"password\"") && form.contains("action=\"/signin\""));

    // A wrong token: the form again with 401 and no cookie.
    let (status, headers, page) = send(&state, "POST", "/signin", &[FORM], "token=nope").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(headers.get("set-cookie").is_none());
    assert!(page.contains("not valid"));

    // The read token: a session cookie, HttpOnly and SameSite=Strict; Secure behind TLS.
    let (status, headers, _) =
        send(&state, "POST", "/signin", &[FORM], &format!("token={READ}")).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{headers:?}");
    let set = headers["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains("Secure") && !set.contains(READ), "{set}");
    let cookie = set.split(';').next().unwrap().to_owned();
    let (_, tls, _) = send(
        &state,
        "POST",
        "/signin",
        &[FORM, ("x-forwarded-proto", "https")],
        &format!("token={READ}"),
    )
    .await;
    assert!(tls["set-cookie"].to_str().unwrap().contains("; Secure"));

    // Signed in: the dashboard and the API answer; the page offers a sign-out with its CSRF.
    let (status, _, page) = send(&state, "GET", "/", &[("cookie", &cookie)], "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("Signed in as <b>read</b>"), "{page}");
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    let (status, _, _) = send(&state, "GET", "/v1/sessions", &[("cookie", &cookie)], "").await;
    assert_eq!(status, StatusCode::OK);

    // A read session cannot act; actions through a cookie need the CSRF token anyway.
    let delete = format!("/v1/sessions/{}", seg("agent:ops:gamma"));
    let json = ("content-type", "application/json");
    let body = r#"{"reason":"browser"}"#;
    let (status, _, _) = send(
        &state,
        "DELETE",
        &delete,
        &[("cookie", &cookie), json],
        body,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Sign-out needs the CSRF token; then the cookie no longer works.
    let (status, _, _) = send(&state, "POST", "/signout", &[FORM, ("cookie", &cookie)], "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, headers, _) = send(
        &state,
        "POST",
        "/signout",
        &[FORM, ("cookie", &cookie)],
        &format!("csrf={csrf}"),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let (status, headers, _) = send(&state, "GET", "/", &[("cookie", &cookie)], "").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/signin");
    let (status, _, _) = send(&state, "GET", "/v1/sessions", &[("cookie", &cookie)], "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_admin_browser_session_acts_only_with_its_csrf_token_and_is_audited_by_name() {
    let f = Fixture::new().await;
    let state = f.state(
        Tokens::new(None, None)
            .unwrap()
            .with_named(None, Some("carol:c-secret"))
            .unwrap(),
    );
    let (_, headers, _) = send(&state, "POST", "/signin", &[FORM], "token=c-secret").await;
    let cookie = headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let (_, _, page) = send(&state, "GET", "/", &[("cookie", &cookie)], "").await;
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    let delete = format!("/v1/sessions/{}", seg("agent:ops:gamma"));
    let json = ("content-type", "application/json");
    let body = r#"{"reason":"from the browser"}"#;
    let (status, _, text) = send(
        &state,
        "DELETE",
        &delete,
        &[("cookie", &cookie), json],
        body,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    assert!(text.contains("CSRF"));
    let (status, _, text) = send(
        &state,
        "DELETE",
        &delete,
        &[("cookie", &cookie), json, ("x-csrf-token", "wrong")],
        body,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    let (status, _, text) = send(
        &state,
        "DELETE",
        &delete,
        &[("cookie", &cookie), json, ("x-csrf-token", &csrf)],
        body,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let audit = call(&state, "GET", "/v1/audit", Some("c-secret"), None)
        .await
        .json();
    assert_eq!(audit["entries"][0]["actor"], "carol");
    assert_eq!(audit["entries"][0]["reason"], "from the browser");
}

/// Signs in with `token`; returns the cookie and the dashboard's CSRF token (if it shows one).
pub(crate) async fn sign_in(state: &AppState, token: &str) -> (String, String) {
    let (_, headers, _) = send(state, "POST", "/signin", &[FORM], &format!("token={token}")).await;
    let cookie = headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let (_, _, page) = send(state, "GET", "/", &[("cookie", &cookie)], "").await;
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    (cookie, csrf)
}

#[tokio::test]
async fn dashboard_actions_need_admin_a_reason_and_a_confirmation() {
    let f = Fixture::new().await;
    let state = f.state(
        Tokens::new(Some(READ.into()), None)
            .unwrap()
            .with_named(None, Some("carol:c-secret"))
            .unwrap(),
    );
    // A reader's dashboard offers no actions, and a forged form is refused.
    let (reader, reader_csrf) = sign_in(&state, READ).await;
    let (_, _, page) = send(&state, "GET", "/", &[("cookie", &reader)], "").await;
    assert!(!page.contains("/ui/actions"));
    let delete = "action=delete_session&session_key=agent%3Aops%3Agamma&reason=gone";
    let (status, _, _) = send(
        &state,
        "POST",
        "/ui/actions",
        &[FORM, ("cookie", &reader)],
        &format!("{delete}&confirm=yes&csrf={reader_csrf}"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // An admin's dashboard offers each action with a required reason.
    let (admin, csrf) = sign_in(&state, "c-secret").await;
    let (_, _, page) = send(&state, "GET", "/", &[("cookie", &admin)], "").await;
    for action in ["delete_session", "expire_lease", "release_quarantine"] {
        assert!(
            page.contains(&format!("name=\"action\" value=\"{action}\"")),
            "{action}"
        );
    }
    assert!(page.contains("name=\"reason\" required"));
    let post = |body: String| {
        let state = state.clone();
        let admin = admin.clone();
        async move {
            send(
                &state,
                "POST",
                "/ui/actions",
                &[FORM, ("cookie", &admin)],
                &body,
            )
            .await
        }
    };
    // Wrong CSRF, blank reason: refused, nothing changes. The refusal is a page a browser
    // shows (not the API's JSON), saying nothing was done and what to do.
    let (status, headers, refused) = post(format!("{delete}&csrf=wrong")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        headers
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap_or_default().starts_with("text/html")),
        "{headers:?}"
    );
    assert!(
        refused.contains("Nothing was done") && refused.contains("reload the page"),
        "{refused}"
    );
    let blank = "action=delete_session&session_key=agent%3Aops%3Agamma&reason=+";
    assert_eq!(
        post(format!("{blank}&csrf={csrf}")).await.0,
        StatusCode::BAD_REQUEST
    );
    // The first step only asks for confirmation.
    let (status, _, confirm) = post(format!("{delete}&csrf={csrf}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        confirm.contains("Delete session <code>agent:ops:gamma</code>"),
        "{confirm}"
    );
    assert!(confirm.contains("name=\"confirm\" value=\"yes\""));
    assert!(
        f.store
            .session(&SessionKey::new("agent:ops:gamma").unwrap())
            .await
            .unwrap()
            .is_some()
    );
    // Confirmed: done, audited under the token's name.
    let (status, _, done) = post(format!("{delete}&csrf={csrf}&confirm=yes")).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert!(done.contains("were deleted"), "{done}");
    assert!(
        f.store
            .session(&SessionKey::new("agent:ops:gamma").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    // A refused action shows its typed error.
    let (status, _, refused) = post(format!("{delete}&csrf={csrf}&confirm=yes")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    assert!(refused.contains("not_found"));
    let audit = call(&state, "GET", "/v1/audit", Some("c-secret"), None)
        .await
        .json();
    assert_eq!(audit["entries"][1]["actor"], "carol");
    assert_eq!(audit["entries"][1]["reason"], "gone");
    assert_eq!(audit["entries"][1]["outcome"], "succeeded");
    assert_eq!(audit["entries"][0]["outcome"], "refused");
}

#[tokio::test]
async fn a_session_page_shows_lineage_bindings_history_and_transcript_sanitized() {
    let f = Fixture::new().await;
    let state = f.state(Tokens::default());
    let (_, _, dashboard) = send(&state, "GET", "/", &[], "").await;
    assert!(dashboard.contains("href=\"/ui/sessions/agent:main:alpha\""));
    let (status, headers, page) =
        send(&state, "GET", "/ui/sessions/agent:main:alpha", &[], "").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    for needle in [
        "<h1>Session agent:main:alpha</h1>",
        "<h2>Lineage</h2>",
        "&lt;script&gt;worker&lt;/script&gt;",
        "title=\"2023-11-14T22:13:20",
        "acquired",
        "Granted TTL",
        "deploy the service please",
        "<h2>Finalization records</h2>",
    ] {
        assert!(page.contains(needle), "missing {needle} in {page}");
    }
    assert!(
        page.contains("g") && page.contains("·"),
        "epoch label shown"
    );
    assert!(
        !page.contains(crate::support::SECRET),
        "transcript is sanitized"
    );
    assert!(!page.contains("<script>worker"));
    let (status, _, missing) = send(&state, "GET", "/ui/sessions/agent:main:nope", &[], "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    // A rotated session shows its predecessor and how it left it, on its page and in the list.
    let beta = f.entry("agent:main:beta").await;
    f.store
        .rotate_generation(
            &beta.session_key,
            &beta.session_id,
            tether_core::SessionId::new("beta-g2").unwrap(),
        )
        .await
        .unwrap()
        .expect("rotated");
    let shown = format!("<code>{}</code> transfer", beta.session_id);
    let (_, _, page) = send(&state, "GET", "/ui/sessions/agent:main:beta", &[], "").await;
    assert!(page.contains(&shown), "{shown} in {page}");
    let (_, _, dashboard) = send(&state, "GET", "/", &[], "").await;
    assert!(dashboard.contains(&shown), "{shown} in {dashboard}");

    let locked = f.state(tokens());
    let (status, headers, _) = send(&locked, "GET", "/ui/sessions/agent:main:alpha", &[], "").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/signin");
}

#[tokio::test]
async fn metrics_count_requests_per_route_template_with_latency_and_build_info() {
    let f = Fixture::new().await;
    let state = f.state(Tokens::default());
    for _ in 0..2 {
        call(&state, "GET", "/v1/sessions", None, None).await;
    }
    call(&state, "GET", "/v1/sessions/agent:main:alpha", None, None).await;
    call(&state, "GET", "/v1/sessions/agent:main:nope", None, None).await;
    let metrics = call(&state, "GET", "/metrics", None, None).await.text;
    for line in [
        "tether_http_requests_total{method=\"GET\",route=\"/v1/sessions\",status=\"200\"} 2",
        "tether_http_requests_total{method=\"GET\",route=\"/v1/sessions/{session_key}\",status=\"200\"} 1",
        "tether_http_requests_total{method=\"GET\",route=\"/v1/sessions/{session_key}\",status=\"404\"} 1",
        "tether_http_request_duration_seconds_count{method=\"GET\",route=\"/v1/sessions\"} 2",
        "tether_http_request_duration_seconds_bucket{method=\"GET\",route=\"/v1/sessions\",le=\"+Inf\"} 2",
        "# TYPE tether_http_request_duration_seconds histogram",
        "tether_process_uptime_seconds ",
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }
    assert!(metrics.contains(&format!(
        "tether_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    )));
    assert!(
        !metrics.contains("agent:main:alpha"),
        "raw paths never become labels"
    );
}
