//! The operator's lists in the API and the dashboard: filters, search, cursor paging, the
//! session each binding belongs to, the holder view and the audit trail page.

use axum::http::StatusCode;
use tether_core::{BindingKey, SessionKey};
use tether_storage::session_binding_keys;

use crate::console::{FORM, send, sign_in};
use crate::support::{ADMIN, Fixture, NS, call, seg, tokens};

const HOLDER: &str = "<script>worker</script>";

async fn alpha_stable(f: &Fixture) -> BindingKey {
    session_binding_keys(&f.entry("agent:main:alpha").await)[1].clone()
}

fn q(raw: &str) -> String {
    seg(raw)
}

#[tokio::test]
async fn api_lists_filter_search_and_name_the_session_of_each_binding() {
    let f = Fixture::new().await;
    let state = f.state(Default::default());
    let alpha_key = alpha_stable(&f).await;

    // Sessions: a part of the key, any case.
    let found = call(&state, "GET", "/v1/sessions?q=ALPH", None, None)
        .await
        .json();
    let keys: Vec<&str> = found["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["agent:main:alpha"]);

    // Leases name their session; the holder filter answers "what does worker X hold?".
    let held = call(
        &state,
        "GET",
        &format!("/v1/leases?holder={}", q(HOLDER)),
        None,
        None,
    )
    .await
    .json();
    let rows = held["bindings"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{held}");
    assert_eq!(rows[0]["key"], alpha_key.as_str());
    assert_eq!(rows[0]["session_key"], "agent:main:alpha");
    let none = call(&state, "GET", "/v1/leases?holder=nobody", None, None)
        .await
        .json();
    assert!(none["bindings"].as_array().unwrap().is_empty());
    let all = call(
        &state,
        "GET",
        "/v1/leases?leased=false&q=BETA-G1",
        None,
        None,
    )
    .await
    .json();
    assert_eq!(all["bindings"].as_array().unwrap().len(), 1, "{all}");
    assert_eq!(
        all["bindings"][0]["session_key"], "agent:main:beta",
        "a physical key names the session of its generation"
    );

    // Lease events: by kind, key and holder, each naming its session.
    let events = call(
        &state,
        "GET",
        &format!(
            "/v1/lease-events?kind=acquired&holder={}&key={}",
            q(HOLDER),
            q(alpha_key.as_str())
        ),
        None,
        None,
    )
    .await
    .json();
    let events = events["events"].as_array().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["session_key"], "agent:main:alpha");
    call(&state, "GET", "/v1/lease-events?kind=vanished", None, None)
        .await
        .expect_error(StatusCode::BAD_REQUEST, "bad_request");

    // Quarantine: searched, and the stable key names its session.
    let quarantined = call(&state, "GET", "/v1/quarantine?q=UNDECODABLE", None, None)
        .await
        .json();
    assert_eq!(
        quarantined["quarantine"][0]["session_key"],
        "agent:main:beta"
    );
    let missed = call(&state, "GET", "/v1/quarantine?q=zzz", None, None)
        .await
        .json();
    assert!(missed["quarantine"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn api_filtered_pages_follow_their_cursor_to_every_match_once() {
    let f = Fixture::new().await;
    let state = f.state(Default::default());
    for i in 0..7 {
        f.store
            .create_session(tether_storage::NewHostSession {
                session_key: SessionKey::new(format!("agent:main:extra-{i}")).unwrap(),
                agent_id: tether_core::AgentId::new("main").unwrap(),
                session_id: tether_core::SessionId::new(format!("extra-{i}-g1")).unwrap(),
                agent_harness_id: None,
            })
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = call(
            &state,
            "GET",
            &format!("/v1/sessions?q=extra&limit=3&cursor={cursor}"),
            None,
            None,
        )
        .await
        .json();
        for s in page["sessions"].as_array().unwrap() {
            seen.push(s["session_key"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    let expected: Vec<String> = (0..7).map(|i| format!("agent:main:extra-{i}")).collect();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn ui_lists_filter_page_sort_name_sessions_and_show_the_holder_view() {
    let f = Fixture::new().await;
    let state = f.state(Default::default());
    let get = |path: String| {
        let state = state.clone();
        async move {
            let reply = call(&state, "GET", &path, None, None).await;
            assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text);
            assert!(reply.content_type.starts_with("text/html"));
            reply.text
        }
    };

    // Every list page has a filter form, live updates and sortable columns.
    for path in [
        "/ui/sessions",
        "/ui/leases",
        "/ui/lease-events",
        "/ui/quarantine",
        "/ui/audit",
    ] {
        let page = get(path.to_owned()).await;
        assert!(
            page.contains("role=\"search\"") && page.contains("id=\"pause\""),
            "{path}"
        );
        assert!(page.contains("<main id=\"live\">"), "{path}");
    }

    // Sessions: search, filters, and cursor paging that keeps the filters.
    // What the filter form submits: every field, the unset ones empty.
    let page = get("/ui/sessions?q=beta&agent=&harness=&has_lease=&quarantined=".into()).await;
    assert!(page.contains("agent:main:beta") && !page.contains(">agent:main:alpha<"));
    let first = get("/ui/sessions?limit=1&agent=main".into()).await;
    assert!(first.contains(">agent:main:alpha<") && !first.contains(">agent:main:beta<"));
    let next = first
        .split("id=\"next-page\" href=\"")
        .nth(1)
        .expect("a next-page link")
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&");
    assert!(
        next.contains("agent=main") && next.contains("limit=1"),
        "{next}"
    );
    let second = get(next).await;
    assert!(second.contains(">agent:main:beta<") && !second.contains(">agent:main:alpha<"));

    // Leases name their session and link the holder view; absolute times on hover.
    let leases = get("/ui/leases".into()).await;
    assert!(leases.contains(&format!("href=\"/ui/sessions/{}\"", "agent:main:alpha")));
    assert!(leases.contains("href=\"/ui/leases?holder=%3Cscript%3Eworker%3C%2Fscript%3E\""));
    assert!(leases.contains("<time title=\""), "absolute time on hover");
    assert!(!leases.contains("<script>worker"), "escaped");
    let holder = get(format!("/ui/leases?holder={}", q(HOLDER))).await;
    assert!(holder.contains("id=\"holder-view\""));
    assert!(holder.contains(">agent:main:alpha<"));
    assert!(holder.contains("Recent lease events of"));
    // A binding key links to its own lease history.
    let history = format!(
        "/ui/lease-events?namespace={NS}&key={}",
        q(alpha_stable(&f).await.as_str())
    );
    assert!(leases.contains(&history.replace('&', "&amp;")), "{leases}");
    let own = get(history).await;
    assert!(own.contains(">acquired<") && own.contains("value=\"codex-bindings\""));
    let nobody = get("/ui/leases?q=&holder=nobody&namespace=&leased=".into()).await;
    assert!(nobody.contains("No binding rows match."));

    // Lease events by kind; quarantine names the session of its key.
    let acquired = get("/ui/lease-events?kind=acquired".into()).await;
    assert!(acquired.contains(">acquired<") && acquired.contains(">agent:main:alpha<"));
    let quarantine = get("/ui/quarantine".into()).await;
    assert!(quarantine.contains(">agent:main:beta<"));

    // Transcript search: sanitized snippets, each linking its session.
    let empty = get("/ui/search".into()).await;
    assert!(empty.contains("role=\"search\"") && !empty.contains("<table>"));
    let hits = get("/ui/search?q=deploying".into()).await;
    assert!(hits.contains(">agent:main:alpha<") && hits.contains("deploying with token"));
    assert!(!hits.contains(crate::support::SECRET), "sanitized");

    // The overview names the session of each lease and links the full lists.
    let overview = get("/".into()).await;
    assert!(overview.contains(">agent:main:alpha<") && overview.contains("href=\"/ui/audit\""));

    // A bad filter is the typed error: a page with its status and code for a browser, the
    // API's JSON body for a request that asks for JSON only.
    call(&state, "GET", "/ui/lease-events?kind=nope", None, None)
        .await
        .expect_error_page(StatusCode::BAD_REQUEST, "bad_request");
    let json_only = axum::http::Request::builder()
        .uri("/ui/lease-events?kind=nope")
        .header("accept", "application/json")
        .body(axum::body::Body::empty())
        .unwrap();
    crate::support::send(&state, json_only)
        .await
        .expect_error(StatusCode::BAD_REQUEST, "bad_request");
}

#[tokio::test]
async fn ui_audit_trail_lists_dashboard_actions_by_actor_and_outcome() {
    let f = Fixture::new().await;
    let state = f.state(tokens());
    let (cookie, csrf) = sign_in(&state, ADMIN).await;
    let key = session_binding_keys(&f.entry("agent:main:beta").await)[1].clone();
    let form = format!(
        "csrf={csrf}&action=release_quarantine&namespace={NS}&key={}&reason=repaired+by+hand&confirm=yes",
        q(key.as_str())
    );
    for _ in 0..2 {
        let (status, _, _) = send(
            &state,
            "POST",
            "/ui/actions",
            &[FORM, ("cookie", &cookie)],
            &form,
        )
        .await;
        assert!(status == StatusCode::OK || status == StatusCode::NOT_FOUND);
    }
    let (status, _, page) = send(
        &state,
        "GET",
        "/ui/audit?outcome=succeeded",
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("repaired by hand") && page.contains("<td>succeeded</td>"));
    assert!(!page.contains("<td>refused</td>"));
    let (_, _, refused) = send(
        &state,
        "GET",
        "/ui/audit?outcome=refused&actor=admin",
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert!(refused.contains("<td>refused</td>") && !refused.contains("<td>succeeded</td>"));

    // An unknown action or outcome is bad input, not an empty list.
    for bad in ["outcome=done", "action=reboot"] {
        call(
            &state,
            "GET",
            &format!("/v1/audit?{bad}"),
            Some(ADMIN),
            None,
        )
        .await
        .expect_error(StatusCode::BAD_REQUEST, "bad_request");
    }

    // Without a session a browser is sent to sign in.
    let (status, headers, _) = send(&state, "GET", "/ui/audit", &[], "").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/signin");
}

#[tokio::test]
async fn metrics_export_process_cpu_memory_file_descriptors_and_start_time() {
    let f = Fixture::new().await;
    let state = f.state(Default::default());
    let text = call(&state, "GET", "/metrics", None, None).await.text;
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .parse()
            .unwrap()
    };
    assert!(text.contains("# TYPE process_cpu_seconds_total counter"));
    assert!(value("process_cpu_seconds_total") > 0.0);
    assert!(value("process_resident_memory_bytes") > 1_000_000.0);
    assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
    assert!(value("process_open_fds") >= 3.0);
    assert!(value("process_max_fds") >= value("process_open_fds"));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = value("process_start_time_seconds");
    assert!(
        started <= now && now - started < 600.0,
        "{started} vs {now}"
    );
    assert!(text.contains("tether_build_info{version=\""));
}
