//! Router tests for every `/v1` route, `/readyz`, `/metrics` and the dashboard: success, each
//! typed error, tokens and scopes, pagination, filters and body limits.

use std::time::Duration;

use axum::http::StatusCode;
use tether_admin_http::AppState;
use tether_admin_http::auth::Tokens;
use tether_core::{BindingStore as _, Intent, LeaseWrite, RecordCodec as _, RowWrite, admit_all};
use tether_harness_sdk::backend::{ThreadBinding, ThreadBindingCodec, ThreadBindingRecord};
use tether_storage::{LeaseEventKind, session_binding_keys};

use crate::support::{ADMIN, Fixture, NS, READ, SECRET, call, ns, seg, tokens};

fn open(f: &Fixture) -> AppState {
    f.state(Tokens::default())
}

#[tokio::test]
async fn sessions_are_listed_in_pages_with_a_cursor() {
    let f = Fixture::new().await;
    let state = open(&f);
    let first = call(&state, "GET", "/v1/sessions?limit=2", None, None).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    let body = first.json();
    let keys: Vec<_> = body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, ["agent:main:alpha", "agent:main:beta"]);
    let cursor = body["next_cursor"].as_str().unwrap();
    let second = call(
        &state,
        "GET",
        &format!("/v1/sessions?limit=2&cursor={cursor}"),
        None,
        None,
    )
    .await
    .json();
    assert_eq!(second["sessions"][0]["session_key"], "agent:ops:gamma");
    assert!(second["next_cursor"].is_null());
}

/// The list route writes its page straight from the store's text; it answers the same JSON as
/// the typed page (the dashboard's), filtered or searched, keys that JSON escapes included
/// (predecessors: the store's own test of `with_listed_sessions`).
#[tokio::test]
async fn the_session_list_is_the_typed_page_written_without_copies() {
    use tether_admin_http::routes::sessions::{SessionQuery, session_page};
    use tether_core::{AgentId, SessionId, SessionKey};
    use tether_storage::NewHostSession;

    let f = Fixture::new().await;
    for key in ["agent:main:q \"x\" \\y", "agent:main:ü"] {
        f.store
            .create_session(NewHostSession {
                session_key: SessionKey::new(key).unwrap(),
                agent_id: AgentId::new("main").unwrap(),
                session_id: SessionId::new(format!("{key}-g1")).unwrap(),
                agent_harness_id: None,
            })
            .await
            .unwrap();
    }
    let state = open(&f);
    let queries: [(&str, SessionQuery); 5] = [
        (
            "limit=2",
            SessionQuery {
                limit: Some(2),
                ..SessionQuery::default()
            },
        ),
        ("", SessionQuery::default()),
        (
            "agent=main",
            SessionQuery {
                agent: Some("main".into()),
                ..SessionQuery::default()
            },
        ),
        (
            "has_lease=true",
            SessionQuery {
                has_lease: Some(true),
                ..SessionQuery::default()
            },
        ),
        (
            "q=ALPHA",
            SessionQuery {
                q: Some("ALPHA".into()),
                ..SessionQuery::default()
            },
        ),
    ];
    for (query, typed) in queries {
        let answer = call(&state, "GET", &format!("/v1/sessions?{query}"), None, None).await;
        assert_eq!(answer.status, StatusCode::OK, "{query}: {}", answer.text);
        let want = serde_json::to_value(session_page(&f.store, &typed).await.unwrap()).unwrap();
        assert_eq!(answer.json(), want, "{query}");
        assert!(!want["sessions"].as_array().unwrap().is_empty(), "{query}");
    }
}

#[tokio::test]
async fn sessions_are_filtered() {
    let f = Fixture::new().await;
    let state = open(&f);
    let keys = |path: &'static str| {
        let state = state.clone();
        async move {
            call(&state, "GET", path, None, None).await.json()["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["session_key"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(keys("/v1/sessions?agent=ops").await, ["agent:ops:gamma"]);
    assert_eq!(keys("/v1/sessions?harness=codex").await.len(), 2);
    assert_eq!(
        keys("/v1/sessions?has_lease=true").await,
        ["agent:main:alpha"]
    );
    assert_eq!(
        keys("/v1/sessions?quarantined=true").await,
        ["agent:main:beta"]
    );
    assert_eq!(
        keys("/v1/sessions?has_lease=false&quarantined=false").await,
        ["agent:ops:gamma"]
    );
}

#[tokio::test]
async fn page_sizes_cursors_and_filters_are_checked() {
    let f = Fixture::new().await;
    let state = open(&f);
    call(&state, "GET", "/v1/sessions?limit=201", None, None)
        .await
        .expect_error(StatusCode::BAD_REQUEST, "page_size_too_large");
    call(&state, "GET", "/v1/sessions?limit=0", None, None)
        .await
        .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    call(&state, "GET", "/v1/sessions?cursor=nonsense!", None, None)
        .await
        .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    call(&state, "GET", "/v1/leases?limit=500", None, None)
        .await
        .expect_error(StatusCode::BAD_REQUEST, "page_size_too_large");
    call(&state, "GET", "/v1/lease-events?limit=500", None, None)
        .await
        .expect_error(StatusCode::BAD_REQUEST, "page_size_too_large");
    call(&state, "GET", "/v1/quarantine?limit=500", None, None)
        .await
        .expect_error(StatusCode::BAD_REQUEST, "page_size_too_large");
}

#[tokio::test]
async fn session_detail_shows_bindings_lineage_and_sanitized_transcript() {
    let f = Fixture::new().await;
    let state = open(&f);
    let reply = call(
        &state,
        "GET",
        &format!("/v1/sessions/{}", seg("agent:main:alpha")),
        None,
        None,
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(
        !reply.text.contains(SECRET),
        "secrets never leave: {}",
        reply.text
    );
    let d = reply.json();
    assert_eq!(d["lineage"]["lifecycle_revision"], 1);
    assert_eq!(d["lineage"]["session_id"], "alpha-g1");
    let binding = &d["bindings"][0];
    assert_eq!(binding["key_kind"], "stable");
    assert_eq!(binding["lease"]["live"], true);
    assert_eq!(binding["lease"]["expires_in_ms"], 60_000);
    assert_eq!(d["transcript_tail"].as_array().unwrap().len(), 3);
    assert_eq!(d["tool_outcomes"][0]["content"], "deploy exit code 0");
    assert_eq!(d["lease_events"][0]["kind"], "acquired");

    let beta = call(
        &state,
        "GET",
        &format!("/v1/sessions/{}", seg("agent:main:beta")),
        None,
        None,
    )
    .await;
    assert!(!beta.text.contains(SECRET), "{}", beta.text);
    assert_eq!(beta.json()["quarantine"].as_array().unwrap().len(), 1);

    call(&state, "GET", "/v1/sessions/agent:main:nope", None, None)
        .await
        .expect_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn tokens_and_scopes_are_enforced() {
    let f = Fixture::new().await;
    let state = f.state(tokens());
    call(&state, "GET", "/v1/sessions", None, None)
        .await
        .expect_error(StatusCode::UNAUTHORIZED, "unauthorized");
    call(&state, "GET", "/v1/sessions", Some("wrong"), None)
        .await
        .expect_error(StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(
        call(&state, "GET", "/v1/sessions", Some(READ), None)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        call(&state, "GET", "/v1/sessions", Some(ADMIN), None)
            .await
            .status,
        StatusCode::OK
    );
    let delete = format!("/v1/sessions/{}", seg("agent:ops:gamma"));
    call(&state, "DELETE", &delete, Some(READ), None)
        .await
        .expect_error(StatusCode::FORBIDDEN, "forbidden");
    call(&state, "DELETE", &delete, None, None)
        .await
        .expect_error(StatusCode::UNAUTHORIZED, "unauthorized");
    for (path, body) in [
        (
            format!("/v1/namespaces/{NS}/bindings/x/expire-lease"),
            r#"{"reason":"x"}"#,
        ),
        (
            format!("/v1/quarantine/{NS}/x/release"),
            r#"{"reason":"x"}"#,
        ),
    ] {
        call(&state, "POST", &path, Some(READ), Some(body.into()))
            .await
            .expect_error(StatusCode::FORBIDDEN, "forbidden");
        call(&state, "POST", &path, Some("wrong"), Some(body.into()))
            .await
            .expect_error(StatusCode::UNAUTHORIZED, "unauthorized");
    }
    for path in [
        "/",
        "/metrics",
        "/v1/sessions?limit=1",
        "/v1/sessions/agent:main:alpha",
        "/v1/sessions/agent:main:alpha/transcript/search?q=deploy",
        "/v1/transcripts/search?q=deploy",
        "/v1/leases",
        "/v1/lease-events",
        "/v1/quarantine",
        "/v1/quarantine/codex-bindings/session:main:x",
        "/v1/namespaces",
        "/v1/namespaces/codex-bindings/bindings/session:main:x",
    ] {
        let anonymous = call(&state, "GET", path, None, None).await;
        if path == "/" {
            // A browser without a token is sent to the sign-in form.
            assert_eq!(
                anonymous.status,
                StatusCode::SEE_OTHER,
                "{}",
                anonymous.text
            );
        } else {
            anonymous.expect_error(StatusCode::UNAUTHORIZED, "unauthorized");
        }
        call(&state, "GET", path, Some("wrong"), None)
            .await
            .expect_error(StatusCode::UNAUTHORIZED, "unauthorized");
        let read = call(&state, "GET", path, Some(READ), None).await;
        assert_ne!(
            read.status,
            StatusCode::UNAUTHORIZED,
            "{path}: {}",
            read.text
        );
        assert_ne!(read.status, StatusCode::FORBIDDEN, "{path}: {}", read.text);
    }
    // Probes stay open for orchestrators.
    assert_eq!(
        call(&state, "GET", "/healthz", None, None).await.status,
        StatusCode::OK
    );
    assert_eq!(
        call(&state, "GET", "/readyz", None, None).await.status,
        StatusCode::OK
    );

    // Without any token the loopback service is open for reads only.
    let open = open(&f);
    call(&open, "DELETE", &delete, None, None)
        .await
        .expect_error(StatusCode::FORBIDDEN, "forbidden");
    assert_eq!(
        call(&open, "GET", "/v1/sessions", None, None).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn bindings_show_the_native_thread_id_of_thread_binding_records() {
    let f = Fixture::new().await;
    let alpha = f.entry("agent:main:alpha").await;
    let key = session_binding_keys(&alpha)[1].clone();
    let record = ThreadBindingRecord::active(
        ThreadBinding::new("019a7f00-codex-thread", "/srv/work"),
        Some(alpha.session_id.clone()),
    );
    f.bind_value(
        &key,
        ThreadBindingCodec.encode(&record),
        Some(("worker-1", 60)),
    )
    .await;
    let state = open(&f);

    // The binding list: the thread-binding record shows its thread id; a value of another
    // format shows none.
    let all = call(&state, "GET", "/v1/leases?leased=false", None, None)
        .await
        .json();
    let rows = all["bindings"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        if row["key"] == key.to_string() {
            assert_eq!(row["native_id"], "019a7f00-codex-thread");
        } else {
            assert!(row["native_id"].is_null(), "{row}");
        }
    }
    // The binding detail and the session detail.
    let detail = call(
        &state,
        "GET",
        &format!("/v1/namespaces/{NS}/bindings/{}", seg(key.as_str())),
        None,
        None,
    )
    .await
    .json();
    assert_eq!(detail["binding"]["native_id"], "019a7f00-codex-thread");
    let session = call(
        &state,
        "GET",
        &format!("/v1/sessions/{}", seg("agent:main:alpha")),
        None,
        None,
    )
    .await
    .json();
    assert_eq!(session["bindings"][0]["native_id"], "019a7f00-codex-thread");
    // A cleared record has no thread.
    let cleared = ThreadBindingRecord::cleared(Some(alpha.session_id.clone()), false);
    f.bind_value(&key, ThreadBindingCodec.encode(&cleared), None)
        .await;
    let detail = call(
        &state,
        "GET",
        &format!("/v1/namespaces/{NS}/bindings/{}", seg(key.as_str())),
        None,
        None,
    )
    .await
    .json();
    assert!(detail["binding"]["native_id"].is_null());
}

#[tokio::test]
async fn dashboard_shows_the_native_thread_id_of_a_leased_binding() {
    let f = Fixture::new().await;
    let alpha = f.entry("agent:main:alpha").await;
    let key = session_binding_keys(&alpha)[1].clone();
    let record = ThreadBindingRecord::active(
        ThreadBinding::new("019a7f00-codex-thread", "/srv/work"),
        Some(alpha.session_id.clone()),
    );
    f.bind_value(
        &key,
        ThreadBindingCodec.encode(&record),
        Some(("worker-1", 60)),
    )
    .await;
    let state = open(&f);
    let page = call(&state, "GET", "/", None, None).await.text;
    assert!(page.contains("Native thread"), "{page}");
    assert!(
        page.contains("<code>019a7f00-codex-thread</code>"),
        "{page}"
    );
    let session = call(
        &state,
        "GET",
        &format!("/ui/sessions/{}", seg("agent:main:alpha")),
        None,
        None,
    )
    .await;
    assert_eq!(session.status, StatusCode::OK, "{}", session.text);
    assert!(
        session.text.contains("<code>019a7f00-codex-thread</code>"),
        "{}",
        session.text
    );
}

#[tokio::test]
async fn bindings_leases_and_history_are_read_by_namespace_and_key() {
    let f = Fixture::new().await;
    let state = open(&f);
    let namespaces = call(&state, "GET", "/v1/namespaces", None, None)
        .await
        .json();
    assert_eq!(namespaces[0]["namespace"], NS);
    assert_eq!(namespaces[0]["rows"], 2);
    assert_eq!(namespaces[0]["leased"], 1);

    let leased = call(&state, "GET", "/v1/leases", None, None).await.json();
    assert_eq!(leased["bindings"].as_array().unwrap().len(), 1);
    let holder = leased["bindings"][0]["lease"]["holder"].as_str().unwrap();
    assert_eq!(
        holder, "<script>worker</script>",
        "JSON keeps text; HTML escapes it"
    );
    let all = call(&state, "GET", "/v1/leases?leased=false&limit=1", None, None)
        .await
        .json();
    assert_eq!(all["bindings"].as_array().unwrap().len(), 1);
    let cursor = all["next_cursor"].as_str().unwrap();
    let rest = call(
        &state,
        "GET",
        &format!("/v1/leases?leased=false&limit=1&cursor={cursor}"),
        None,
        None,
    )
    .await
    .json();
    assert_eq!(rest["bindings"].as_array().unwrap().len(), 1);
    assert!(rest["next_cursor"].is_null());
    assert_ne!(all["bindings"][0]["key"], rest["bindings"][0]["key"]);
    let other_ns = call(&state, "GET", "/v1/leases?namespace=other", None, None)
        .await
        .json();
    assert!(other_ns["bindings"].as_array().unwrap().is_empty());

    let alpha = f.entry("agent:main:alpha").await;
    let key = session_binding_keys(&alpha)[1].to_string();
    let detail = call(
        &state,
        "GET",
        &format!("/v1/namespaces/{NS}/bindings/{}", seg(&key)),
        None,
        None,
    )
    .await;
    assert_eq!(detail.status, StatusCode::OK, "{}", detail.text);
    assert!(!detail.text.contains(SECRET), "{}", detail.text);
    let detail = detail.json();
    assert!(detail["binding"]["lease"]["epoch"].as_u64().is_some());
    assert_eq!(detail["events"][0]["kind"], "acquired");
    assert!(detail["quarantine"].is_null());

    call(
        &state,
        "GET",
        &format!("/v1/namespaces/{NS}/bindings/not-a-key"),
        None,
        None,
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    call(
        &state,
        "GET",
        &format!("/v1/namespaces/{NS}/bindings/{}", seg("session:main:none")),
        None,
        None,
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "not_found");

    let events = call(&state, "GET", "/v1/lease-events?limit=10", None, None)
        .await
        .json();
    assert_eq!(events["events"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn force_expire_fences_the_holder_and_reports_each_refusal() {
    let f = Fixture::new().await;
    let state = f.state(tokens());
    let alpha = f.entry("agent:main:alpha").await;
    let key = session_binding_keys(&alpha)[1].clone();
    let path = format!(
        "/v1/namespaces/{NS}/bindings/{}/expire-lease",
        seg(key.as_str())
    );
    let held = f.store.observe(&ns(), &key).await.unwrap();
    let epoch = held
        .row
        .as_ref()
        .unwrap()
        .lease
        .as_ref()
        .unwrap()
        .epoch
        .get();

    call(
        &state,
        "POST",
        &path,
        Some(ADMIN),
        Some(r#"{"reason":"  "}"#.into()),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    call(&state, "POST", &path, Some(ADMIN), Some("{".into()))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    let mismatch = call(
        &state,
        "POST",
        &path,
        Some(ADMIN),
        Some(format!(
            r#"{{"reason":"stuck","expected_epoch":{}}}"#,
            epoch + 1
        )),
    )
    .await;
    mismatch.expect_error(StatusCode::CONFLICT, "epoch_mismatch");
    // The body names the epoch the binding holds now, so a client needs no text parsing.
    assert_eq!(mismatch.json()["current_epoch"], epoch, "{}", mismatch.text);
    let ok = call(
        &state,
        "POST",
        &path,
        Some(ADMIN),
        Some(format!(
            r#"{{"reason":"stuck worker","expected_epoch":{epoch}}}"#
        )),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    assert_eq!(ok.json()["previous_epoch"], epoch);
    call(
        &state,
        "POST",
        &path,
        Some(ADMIN),
        Some(r#"{"reason":"again"}"#.into()),
    )
    .await
    .expect_error(StatusCode::CONFLICT, "no_lease");
    let missing = format!(
        "/v1/namespaces/{NS}/bindings/{}/expire-lease",
        seg("session:main:none")
    );
    call(
        &state,
        "POST",
        &missing,
        Some(ADMIN),
        Some(r#"{"reason":"x"}"#.into()),
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "not_found");

    // The old holder is fenced: its renewal with its observation conflicts.
    let renew = f
        .store
        .compare_and_apply(
            &ns(),
            &key,
            &held.comparison,
            Intent::Set {
                row: RowWrite {
                    value: b"{}".to_vec(),
                    lease: Some(LeaseWrite {
                        token: held.row.unwrap().lease.unwrap().token,
                        expires_at: crate::support::T0 + Duration::from_secs(300),
                        holder: None,
                    }),
                },
                ttl: None,
            },
            &admit_all,
        )
        .await
        .unwrap();
    assert!(matches!(renew, tether_core::ApplyOutcome::Conflict { .. }));
}

#[tokio::test]
async fn deletion_refuses_a_live_lease_then_removes_session_and_bindings() {
    let f = Fixture::new().await;
    let state = f.state(tokens());
    let alpha = f.entry("agent:main:alpha").await;
    let path = format!("/v1/sessions/{}", seg("agent:main:alpha"));
    let refused = call(
        &state,
        "DELETE",
        &path,
        Some(ADMIN),
        Some(r#"{"reason":"operator test"}"#.into()),
    )
    .await;
    refused.expect_error(StatusCode::CONFLICT, "lease_held");
    assert!(
        refused.json()["message"]
            .as_str()
            .unwrap()
            .contains("force-expire")
    );
    assert!(f.store.session(&alpha.session_key).await.unwrap().is_some());

    let key = session_binding_keys(&alpha)[1].clone();
    let expire = format!(
        "/v1/namespaces/{NS}/bindings/{}/expire-lease",
        seg(key.as_str())
    );
    assert_eq!(
        call(
            &state,
            "POST",
            &expire,
            Some(ADMIN),
            Some(r#"{"reason":"delete"}"#.into())
        )
        .await
        .status,
        StatusCode::OK
    );
    let deleted = call(
        &state,
        "DELETE",
        &path,
        Some(ADMIN),
        Some(r#"{"reason":"operator test"}"#.into()),
    )
    .await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);
    assert_eq!(deleted.json()["outcome"], "deleted");
    assert!(f.store.session(&alpha.session_key).await.unwrap().is_none());
    assert!(f.store.session_bindings(&alpha).await.unwrap().is_empty());
    assert!(
        f.store
            .active_path(&alpha.session_key)
            .await
            .unwrap()
            .is_empty()
    );
    call(
        &state,
        "DELETE",
        &path,
        Some(ADMIN),
        Some(r#"{"reason":"operator test"}"#.into()),
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "not_found");
    let metrics = call(&state, "GET", "/metrics", Some(READ), None).await.text;
    assert!(
        metrics.contains("tether_admin_session_deletions_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tether_admin_session_deletion_failures_total 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn quarantine_is_listed_shown_and_released_with_a_reason() {
    let f = Fixture::new().await;
    let state = f.state(tokens());
    let list = call(&state, "GET", "/v1/quarantine", Some(READ), None).await;
    assert!(!list.text.contains(SECRET), "{}", list.text);
    let list = list.json();
    assert_eq!(list["quarantine"].as_array().unwrap().len(), 1);
    let key = list["quarantine"][0]["key"].as_str().unwrap().to_owned();
    let detail_path = format!("/v1/quarantine/{NS}/{}", seg(&key));
    let detail = call(&state, "GET", &detail_path, Some(READ), None).await;
    assert_eq!(detail.status, StatusCode::OK, "{}", detail.text);
    assert_eq!(detail.json()["quarantine"]["custody"], "host-1");

    let release = format!("{detail_path}/release");
    call(
        &state,
        "POST",
        &release,
        Some(ADMIN),
        Some(r#"{"reason":""}"#.into()),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    call(&state, "POST", &release, Some(ADMIN), Some(r#"{}"#.into()))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    let ok = call(
        &state,
        "POST",
        &release,
        Some(ADMIN),
        Some(r#"{"reason":"record repaired"}"#.into()),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    call(
        &state,
        "POST",
        &release,
        Some(ADMIN),
        Some(r#"{"reason":"again"}"#.into()),
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "not_found");
    call(&state, "GET", &detail_path, Some(READ), None)
        .await
        .expect_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn transcripts_are_searched_across_and_within_sessions_sanitized() {
    let f = Fixture::new().await;
    let state = open(&f);
    let all = call(&state, "GET", "/v1/transcripts/search?q=deploy", None, None).await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(
        all.json()["hits"].as_array().unwrap().len(),
        2,
        "whole words: `deploying` does not match"
    );
    let token = call(&state, "GET", "/v1/transcripts/search?q=token", None, None).await;
    assert_eq!(token.json()["hits"].as_array().unwrap().len(), 1);
    assert!(!token.text.contains(SECRET), "{}", token.text);
    let within = call(
        &state,
        "GET",
        &format!(
            "/v1/sessions/{}/transcript/search?q=exit",
            seg("agent:main:alpha")
        ),
        None,
        None,
    )
    .await
    .json();
    assert_eq!(within["hits"][0]["role"], "tool");
    let none = call(
        &state,
        "GET",
        &format!(
            "/v1/sessions/{}/transcript/search?q=deploy",
            seg("agent:main:beta")
        ),
        None,
        None,
    )
    .await
    .json();
    assert!(none["hits"].as_array().unwrap().is_empty());
    call(&state, "GET", "/v1/transcripts/search?q=%20", None, None)
        .await
        .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    // Words without an ASCII letter or digit: the message says what search matches, not that
    // `q` is missing.
    let foreign = call(
        &state,
        "GET",
        &format!("/v1/transcripts/search?q={}", seg("日本")),
        None,
        None,
    )
    .await;
    foreign.expect_error(StatusCode::BAD_REQUEST, "bad_request");
    assert!(
        foreign.text.contains("ASCII letters and digits only"),
        "{}",
        foreign.text
    );
    call(
        &state,
        "GET",
        "/v1/transcripts/search?q=x&limit=999",
        None,
        None,
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "page_size_too_large");
    call(
        &state,
        "GET",
        "/v1/sessions/agent:x:y/transcript/search?q=x",
        None,
        None,
    )
    .await
    .expect_error(StatusCode::NOT_FOUND, "not_found");
}

#[tokio::test]
async fn oversized_bodies_are_refused_with_a_typed_413() {
    let f = Fixture::new().await;
    let state = f.state(tokens());
    let big = format!(r#"{{"reason":"{}"}}"#, "x".repeat(64 * 1024));
    for path in [
        format!("/v1/quarantine/{NS}/{}/release", seg("session:main:x")),
        format!(
            "/v1/namespaces/{NS}/bindings/{}/expire-lease",
            seg("session:main:x")
        ),
    ] {
        call(&state, "POST", &path, Some(ADMIN), Some(big.clone()))
            .await
            .expect_error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    }
}

#[tokio::test]
async fn readiness_and_metrics() {
    let f = Fixture::new().await;
    let state = open(&f);
    let ready = call(&state, "GET", "/readyz", None, None).await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.text);
    assert_eq!(ready.json()["sessions"], 3);
    call(&AppState::for_tests(), "GET", "/readyz", None, None)
        .await
        .expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    call(&AppState::for_tests(), "GET", "/v1/sessions", None, None)
        .await
        .expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");

    let before = call(&state, "GET", "/metrics", None, None).await;
    assert!(
        before
            .text
            .contains("tether_lease_renew_latency_seconds_count 0"),
        "{}",
        before.text
    );
    // One renewal of alpha's held lease: the store times it on its `renewed` event.
    let key = f.renew_alpha().await;
    let events = f
        .store
        .recent_lease_events(Some((&ns(), &key)), 1)
        .await
        .unwrap();
    assert_eq!(events[0].kind, LeaseEventKind::Renewed);
    let latency = events[0].latency.expect("a renewal records its latency");
    assert!(latency < Duration::from_secs(5), "{latency:?}");
    let history = call(&state, "GET", "/v1/lease-events?limit=1", None, None).await;
    assert_eq!(history.status, StatusCode::OK, "{}", history.text);
    let newest = &history.json()["events"][0];
    assert_eq!(newest["kind"], "renewed", "{newest}");
    assert_eq!(
        newest["latency_us"].as_u64(),
        Some(u64::try_from(latency.as_micros()).unwrap())
    );

    let metrics = call(&state, "GET", "/metrics", None, None).await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert!(metrics.content_type.starts_with("text/plain"));
    for line in [
        "# TYPE tether_lease_renew_latency_seconds histogram",
        "tether_lease_renew_latency_seconds_bucket{le=\"5\"} 1",
        "tether_lease_renew_latency_seconds_bucket{le=\"+Inf\"} 1",
        "tether_lease_renew_latency_seconds_count 1",
        "tether_lease_renewals_total 1",
        "tether_lease_events_total{kind=\"acquired\"} 1",
        "tether_lease_acquisitions_total 1",
        "tether_fenced_writes_total 0",
        "tether_lease_takeovers_total 0",
        "tether_sessions 3",
        "tether_quarantined_keys 1",
        "tether_live_leases{namespace=\"codex-bindings\"} 1",
    ] {
        assert!(
            metrics.text.contains(line),
            "missing `{line}` in\n{}",
            metrics.text
        );
    }
}

#[tokio::test]
async fn dashboard_renders_everything_escaped() {
    let f = Fixture::new().await;
    let state = open(&f);
    let page = call(&state, "GET", "/", None, None).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.content_type.starts_with("text/html"));
    for needle in [
        "agent:main:alpha",
        "Live leases",
        "data-expires=",
        "Quarantined keys",
        "Recent lease events",
        "&lt;script&gt;worker&lt;/script&gt;",
        "<main id=\"live\">",
        "id=\"pause\"",
        "fetch(location.pathname",
    ] {
        assert!(page.text.contains(needle), "missing {needle}");
    }
    assert!(
        !page.text.contains("location.reload"),
        "live updates replace the content in place, never the whole page"
    );
    assert!(
        !page.text.contains("<script>worker"),
        "holder label is escaped"
    );
    assert!(!page.text.contains(SECRET));
    assert!(!page.text.contains("http://") && !page.text.contains("https://"));
}

#[tokio::test]
async fn every_route_and_its_typed_errors_are_in_the_openapi_document() {
    let doc = serde_json::to_value(tether_admin_http::openapi()).unwrap();
    let paths = &doc["paths"];
    for (path, method, statuses) in [
        (
            "/v1/sessions",
            "get",
            &["200", "400", "401", "500", "503"][..],
        ),
        (
            "/v1/sessions/{session_key}",
            "get",
            &["200", "400", "401", "404"],
        ),
        (
            "/v1/sessions/{session_key}",
            "delete",
            &["200", "401", "403", "404", "409", "413"],
        ),
        (
            "/v1/sessions/{session_key}/transcript/search",
            "get",
            &["200", "404"],
        ),
        ("/v1/transcripts/search", "get", &["200", "400"]),
        ("/v1/namespaces", "get", &["200", "401"]),
        ("/v1/leases", "get", &["200", "400"]),
        ("/v1/lease-events", "get", &["200", "400"]),
        (
            "/v1/namespaces/{namespace}/bindings/{key}",
            "get",
            &["200", "404"],
        ),
        (
            "/v1/namespaces/{namespace}/bindings/{key}/expire-lease",
            "post",
            &["200", "403", "409", "413"],
        ),
        ("/v1/quarantine", "get", &["200", "400"]),
        ("/v1/quarantine/{namespace}/{key}", "get", &["200", "404"]),
        (
            "/v1/quarantine/{namespace}/{key}/release",
            "post",
            &["200", "403", "404", "413"],
        ),
        ("/readyz", "get", &["200", "503"]),
        ("/metrics", "get", &["200", "401"]),
        ("/healthz", "get", &["200"]),
    ] {
        let op = &paths[path][method];
        assert!(op.is_object(), "{method} {path} is missing");
        for status in statuses {
            assert!(
                op["responses"][status].is_object(),
                "{method} {path} lacks {status}"
            );
        }
    }
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
}

#[tokio::test]
async fn unknown_body_fields_and_bad_query_strings_are_typed_400s() {
    let f = Fixture::new().await;
    let state = f.state(tokens());
    let release = format!("/v1/quarantine/{NS}/{}/release", seg("session:main:x"));
    call(
        &state,
        "POST",
        &release,
        Some(ADMIN),
        Some(r#"{"reason":"x","force":true}"#.into()),
    )
    .await
    .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    for path in [
        "/v1/sessions?limit=abc",
        "/v1/sessions?has_lease=maybe",
        "/v1/leases?leased=2",
        "/v1/transcripts/search",
    ] {
        call(&state, "GET", path, Some(READ), None)
            .await
            .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    }
    // An unknown parameter is refused, naming itself and the parameters the route takes
    // (`search` for `q` filtered nothing before: the whole list came back).
    for (path, unknown, known) in [
        ("/v1/sessions?search=alpha", "search", "`q`"),
        ("/v1/leases?holdr=worker-1", "holdr", "`holder`"),
        ("/v1/lease-events?kinds=renewed", "kinds", "`kind`"),
        ("/v1/quarantine?query=x", "query", "`q`"),
        ("/v1/audit?who=alice", "who", "`actor`"),
        ("/v1/transcripts/search?q=deploy&page=2", "page", "`limit`"),
        (
            "/v1/sessions/agent:main:alpha/transcript/search?q=deploy&size=2",
            "size",
            "`limit`",
        ),
    ] {
        let refused = call(&state, "GET", path, Some(READ), None).await;
        refused.expect_error(StatusCode::BAD_REQUEST, "bad_request");
        assert!(
            refused.text.contains(&format!("unknown field `{unknown}`"))
                && refused.text.contains(known),
            "{path}: {}",
            refused.text
        );
    }
    // The dashboard's pages read the same parameters.
    let page = call(&state, "GET", "/ui/sessions?search=alpha", Some(READ), None).await;
    page.expect_error_page(StatusCode::BAD_REQUEST, "bad_request");
    assert!(
        page.text.contains("unknown field `search`"),
        "{}",
        page.text
    );
}

/// The read routes, `/readyz` and `/metrics` on a PostgreSQL-backed store (the SQL differs per
/// backend: JSON page aggregation, histogram casts, search). Skipped when no server answers,
/// unless `TETHER_REQUIRE_PG=1`.
#[tokio::test]
async fn read_routes_and_metrics_on_postgres() {
    let Some(db) = tether_storage::testing::PgTestDatabase::create("admin_routes").await else {
        return;
    };
    let f = Fixture::on(db.url()).await;
    // A renewal, so the latency histogram has a sample to sum.
    let key = f.renew_alpha().await;
    let state = open(&f);

    let page = call(&state, "GET", "/v1/sessions?limit=2", None, None).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    let keys: Vec<String> = page.json()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, ["agent:main:alpha", "agent:main:beta"]);
    let next = page.json()["next_cursor"].as_str().unwrap().to_owned();
    let rest = call(
        &state,
        "GET",
        &format!("/v1/sessions?limit=2&cursor={next}"),
        None,
        None,
    )
    .await;
    assert_eq!(rest.status, StatusCode::OK, "{}", rest.text);
    assert_eq!(rest.json()["sessions"][0]["session_key"], "agent:ops:gamma");

    let detail = call(
        &state,
        "GET",
        &format!("/v1/sessions/{}", seg("agent:main:alpha")),
        None,
        None,
    )
    .await;
    assert_eq!(detail.status, StatusCode::OK, "{}", detail.text);
    assert!(!detail.text.contains(SECRET), "sanitized");
    let hits = call(&state, "GET", "/v1/transcripts/search?q=deploy", None, None).await;
    assert_eq!(hits.status, StatusCode::OK, "{}", hits.text);
    assert!(!hits.text.contains(SECRET), "sanitized");

    for path in [
        "/v1/namespaces".to_owned(),
        "/v1/leases".to_owned(),
        "/v1/leases?leased=true".to_owned(),
        "/v1/lease-events".to_owned(),
        "/v1/quarantine".to_owned(),
        format!("/v1/namespaces/{NS}/bindings/{}", seg(key.as_str())),
        format!(
            "/v1/sessions/{}/transcript/search?q=deploy",
            seg("agent:main:alpha")
        ),
        "/".to_owned(),
        "/ui/sessions?q=alpha&has_lease=".to_owned(),
        "/ui/leases?holder=nobody".to_owned(),
        "/ui/lease-events?kind=renewed".to_owned(),
        "/ui/quarantine?q=undecodable".to_owned(),
        "/ui/audit".to_owned(),
        "/ui/search?q=deploy".to_owned(),
        format!("/ui/sessions/{}", seg("agent:main:alpha")),
    ] {
        let reply = call(&state, "GET", &path, None, None).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text);
        assert!(!reply.text.contains(SECRET), "{path} is sanitized");
    }
    // The lists' filters and the session names on PostgreSQL.
    let held = call(&state, "GET", "/v1/leases?q=WORKER", None, None)
        .await
        .json();
    assert_eq!(
        held["bindings"][0]["session_key"], "agent:main:alpha",
        "{held}"
    );
    let renewed = call(&state, "GET", "/v1/lease-events?kind=renewed", None, None)
        .await
        .json();
    assert_eq!(renewed["events"].as_array().unwrap().len(), 1, "{renewed}");
    assert_eq!(renewed["events"][0]["session_key"], "agent:main:alpha");
    let searched = call(&state, "GET", "/v1/sessions?q=GAMMA", None, None)
        .await
        .json();
    assert_eq!(searched["sessions"][0]["session_key"], "agent:ops:gamma");
    let ready = call(&state, "GET", "/readyz", None, None).await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.text);
    let metrics = call(&state, "GET", "/metrics", None, None).await;
    assert_eq!(metrics.status, StatusCode::OK, "{}", metrics.text);
    for line in [
        "tether_lease_renew_latency_seconds_count 1",
        "tether_lease_renewals_total 1",
        "tether_sessions 3",
    ] {
        assert!(
            metrics.text.contains(line),
            "missing `{line}` in\n{}",
            metrics.text
        );
    }
    f.store.close().await.unwrap();
    db.cleanup().await;
}

/// Operators deleting one session at once: one deletion succeeds and every other one is told
/// the session is gone (404), never "changed, reload and retry" (409) about a session that no
/// longer exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deletions_of_one_session_answer_deleted_or_gone() {
    let dir = tempfile::tempdir().unwrap();
    let f = Fixture::on(&format!(
        "sqlite://{}",
        dir.path().join("race.db").display()
    ))
    .await;
    let state = f.state(tokens());
    for round in 0..3 {
        let key = format!("agent:main:direct:race-{round}");
        f.store
            .create_session(tether_storage::NewHostSession {
                session_key: tether_core::SessionKey::new(&key).unwrap(),
                agent_id: tether_core::AgentId::new("main").unwrap(),
                session_id: tether_core::SessionId::new("gen-1").unwrap(),
                agent_harness_id: None,
            })
            .await
            .unwrap();
        let path = format!("/v1/sessions/{}", seg(&key));
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let (state, path) = (state.clone(), path.clone());
                tokio::spawn(async move {
                    call(
                        &state,
                        "DELETE",
                        &path,
                        Some(ADMIN),
                        Some(r#"{"reason":"race"}"#.into()),
                    )
                    .await
                })
            })
            .collect();
        let mut statuses = Vec::new();
        for c in calls {
            let reply = c.await.unwrap();
            assert!(
                reply.status == StatusCode::OK || reply.status == StatusCode::NOT_FOUND,
                "{} {}",
                reply.status,
                reply.text
            );
            statuses.push(reply.status);
        }
        assert_eq!(
            statuses.iter().filter(|s| **s == StatusCode::OK).count(),
            1,
            "{statuses:?}"
        );
    }
}

/// During a database outage `/metrics` still answers 200 with this process's own series and
/// `tether_database_up 0`, within its limit while the database is stuck and at once when it is
/// gone: the process's counters are what an operator reads then.
#[tokio::test]
async fn metrics_keep_the_process_series_while_the_database_is_stuck_or_gone() {
    use tether_admin_http::routes::ops::METRICS_DATABASE_TIMEOUT;
    use tether_storage::{HostBackend as _, HostTransaction as _};
    let Some(db) = tether_storage::testing::PgTestDatabase::create("metrics_outage").await else {
        return;
    };
    let f = Fixture::on(db.url()).await;
    let state = f.state(tokens());
    let process_series = [
        "tether_process_uptime_seconds ",
        "tether_build_info{",
        "tether_http_requests_total{method=\"GET\",route=\"/metrics\",status=\"200\"}",
        "tether_admin_session_deletions_total 0",
    ];
    let healthy = call(&state, "GET", "/metrics", Some(READ), None).await;
    assert_eq!(healthy.status, StatusCode::OK, "{}", healthy.text);
    assert!(
        healthy.text.contains("tether_database_up 1\n"),
        "{}",
        healthy.text
    );
    assert!(
        healthy.text.contains("tether_sessions "),
        "{}",
        healthy.text
    );

    let locked = f.store.begin_host().await.unwrap();
    locked
        .execute("LOCK TABLE host_sessions IN ACCESS EXCLUSIVE MODE", vec![])
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let stuck = call(&state, "GET", "/metrics", Some(READ), None).await;
    let waited = started.elapsed();
    assert_eq!(stuck.status, StatusCode::OK, "{}", stuck.text);
    assert!(
        waited >= METRICS_DATABASE_TIMEOUT
            && waited < METRICS_DATABASE_TIMEOUT + Duration::from_secs(5),
        "waited {waited:?}"
    );
    assert!(
        stuck.text.contains("tether_database_up 0\n"),
        "{}",
        stuck.text
    );
    assert!(!stuck.text.contains("tether_sessions "), "{}", stuck.text);
    for series in process_series {
        assert!(
            stuck.text.contains(series),
            "missing `{series}` in\n{}",
            stuck.text
        );
    }
    locked.rollback().await.unwrap();

    // The database is dropped under the service (its connections terminated).
    db.cleanup().await;
    let started = std::time::Instant::now();
    let gone = call(&state, "GET", "/metrics", Some(READ), None).await;
    assert_eq!(gone.status, StatusCode::OK, "{}", gone.text);
    assert!(
        started.elapsed() < METRICS_DATABASE_TIMEOUT + Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(
        gone.text.contains("tether_database_up 0\n"),
        "{}",
        gone.text
    );
    assert!(
        !gone.text.contains("tether_lease_events_total"),
        "{}",
        gone.text
    );
    for series in process_series {
        assert!(
            gone.text.contains(series),
            "missing `{series}` in\n{}",
            gone.text
        );
    }
    // Both earlier scrapes were answered and are counted (this one is counted once answered).
    assert!(
        gone.text.contains(
            "tether_http_requests_total{method=\"GET\",route=\"/metrics\",status=\"200\"} 2"
        ),
        "{}",
        gone.text
    );
}

/// `/readyz` answers 503 within its time limit while the database is stuck (here a lock on
/// the sessions table), instead of hanging for as long as the lock is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_within_its_limit_while_the_database_is_stuck() {
    use tether_storage::{HostBackend as _, HostTransaction as _};
    let Some(db) = tether_storage::testing::PgTestDatabase::create("readyz_stuck").await else {
        return;
    };
    let f = Fixture::on(db.url()).await;
    let state = f.state(tokens());
    assert_eq!(
        call(&state, "GET", "/readyz", None, None).await.status,
        StatusCode::OK
    );
    let locked = f.store.begin_host().await.unwrap();
    locked
        .execute("LOCK TABLE host_sessions IN ACCESS EXCLUSIVE MODE", vec![])
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let stuck = call(&state, "GET", "/readyz", None, None).await;
    let waited = started.elapsed();
    stuck.expect_error(StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    assert!(
        stuck.text.contains("did not answer within"),
        "{}",
        stuck.text
    );
    assert!(
        waited >= tether_admin_http::routes::ops::READY_TIMEOUT
            && waited < tether_admin_http::routes::ops::READY_TIMEOUT + Duration::from_secs(5),
        "waited {waited:?}"
    );
    locked.rollback().await.unwrap();
    assert_eq!(
        call(&state, "GET", "/readyz", None, None).await.status,
        StatusCode::OK
    );
    f.store.close().await.unwrap();
    db.cleanup().await;
}

/// An operator's deletion of a session the Codex harness drove (no harness runs in the admin
/// process) records a due `thread/delete` for each of its Codex threads — the bound one and
/// the ones a reset or rewind archived — in the deletion's transaction, so the Codex harness
/// deletes them later instead of leaving the conversation on disk with no record of it.
#[tokio::test]
async fn an_operator_deletion_leaves_the_codex_harness_the_sessions_threads_to_delete() {
    let f = Fixture::new().await;
    let state = f.state(tokens());
    let gamma = f.entry("agent:ops:gamma").await;
    let keys = session_binding_keys(&gamma);
    let codex = tether_core::Namespace::new(tether_codex::NAMESPACE).unwrap();
    let archives = tether_core::Namespace::new(tether_codex::ARCHIVE_NAMESPACE).unwrap();
    let cleanups = tether_core::Namespace::new(tether_codex::CLEANUP_NAMESPACE).unwrap();
    for ns in [&codex, &archives, &cleanups] {
        f.store
            .register_namespace(tether_core::NamespaceConfig::new(ns.clone()))
            .await
            .unwrap();
    }
    let record = ThreadBindingRecord::active(
        ThreadBinding::new("thread-bound", "/srv/work"),
        Some(gamma.session_id.clone()),
    );
    for (ns, value) in [
        (&codex, ThreadBindingCodec.encode(&record)),
        (
            &archives,
            br#"{"threadIds":["thread-old","thread-older"]}"#.to_vec(),
        ),
    ] {
        f.store
            .register_if_absent(ns, &keys[1], RowWrite { value, lease: None }, None)
            .await
            .unwrap();
    }
    let deleted = call(
        &state,
        "DELETE",
        &format!("/v1/sessions/{}", seg("agent:ops:gamma")),
        Some(ADMIN),
        Some(r#"{"reason":"erasure request"}"#.into()),
    )
    .await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);
    assert!(
        deleted
            .text
            .contains("3 Codex thread(s) are recorded for deletion"),
        "{}",
        deleted.text
    );
    assert!(f.store.session(&gamma.session_key).await.unwrap().is_none());
    for key in &keys {
        assert!(f.store.lookup(&codex, key).await.unwrap().is_none());
        assert!(f.store.lookup(&archives, key).await.unwrap().is_none());
    }
    for thread in ["thread-bound", "thread-old", "thread-older"] {
        let key =
            tether_core::BindingKey::conversation(&tether_core::BindingId::new(thread).unwrap());
        let row = f
            .store
            .lookup(&cleanups, &key)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no cleanup recorded for {thread}"));
        let due: tether_codex::PendingCleanup = serde_json::from_slice(&row.value).unwrap();
        assert_eq!(due.thread_id, thread);
        assert_eq!(due.action, tether_codex::NativeCleanup::Delete);
        assert!(
            due.error
                .as_deref()
                .is_some_and(|e| e.contains("erasure request")),
            "{due:?}"
        );
    }
}
