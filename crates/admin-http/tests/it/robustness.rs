//! API robustness (the "security and bad input" bar of `RELIABILITY.md`): every admin route answers malformed
//! JSON, wrong types, unknown fields, huge bodies, bad cursors and invalid ids with a typed 4xx
//! error, and changes nothing. The request-body twin of the fuzz targets is here too: a
//! bounded, seeded stream of mutated bodies (no proptest dependency in this package).

#[allow(unreachable_pub, dead_code)]
#[path = "../../../../fuzz/checks/admin.rs"]
mod admin_checks;

use tether_core::{BindingStore as _, QuarantineStore as _, SessionKey};
use tether_storage::session_binding_keys;

use super::support::{ADMIN, Fixture, READ, call, ns, seg, tokens};

/// Everything an admin action could change: sessions, binding rows (with their leases) and the
/// quarantine record.
async fn snapshot(f: &Fixture) -> String {
    let mut out = String::new();
    for key in ["agent:main:alpha", "agent:main:beta", "agent:ops:gamma"] {
        let entry = f
            .store
            .session(&SessionKey::new(key).unwrap())
            .await
            .unwrap();
        out.push_str(&format!("{entry:?}\n"));
        if let Some(entry) = entry {
            for binding in session_binding_keys(&entry) {
                let row = f.store.lookup(&ns(), &binding).await.unwrap();
                let quarantined = f.store.quarantined(&ns(), &binding).await.unwrap();
                out.push_str(&format!("{binding}: {row:?} {quarantined:?}\n"));
            }
        }
    }
    out
}

/// Sends the request; `Err` unless it got a typed 4xx error and nothing changed.
async fn refusal(
    f: &Fixture,
    method: &str,
    path: &str,
    body: Option<String>,
) -> Result<(), String> {
    let state = f.state(tokens());
    let before = snapshot(f).await;
    let reply = call(&state, method, path, Some(ADMIN), body.clone()).await;
    let shown: String = body.unwrap_or_default().chars().take(60).collect();
    let context = format!("{method} {path} {shown:?}: {} {}", reply.status, reply.text);
    if !reply.status.is_client_error() {
        return Err(format!("{context}: not a 4xx"));
    }
    if !reply.content_type.starts_with("application/json") {
        return Err(format!("{context}: not a typed JSON error"));
    }
    let coded = serde_json::from_str::<serde_json::Value>(&reply.text)
        .ok()
        .is_some_and(|json| json["code"].as_str().is_some_and(|c| !c.is_empty()));
    if !coded {
        return Err(format!("{context}: no stable error code"));
    }
    if snapshot(f).await != before {
        return Err(format!("{context}: the request changed the store"));
    }
    Ok(())
}

/// Asserts [`refusal`].
async fn refused(f: &Fixture, method: &str, path: &str, body: Option<String>) {
    if let Err(failure) = refusal(f, method, path, body).await {
        panic!("{failure}");
    }
}

async fn paths(f: &Fixture) -> (String, String) {
    let alpha = f.entry("agent:main:alpha").await;
    let beta = f.entry("agent:main:beta").await;
    let expire = format!(
        "/v1/namespaces/{}/bindings/{}/expire-lease",
        seg(ns().as_str()),
        seg(session_binding_keys(&alpha)[1].as_str())
    );
    let release = format!(
        "/v1/quarantine/{}/{}/release",
        seg(ns().as_str()),
        seg(session_binding_keys(&beta)[1].as_str())
    );
    (expire, release)
}

/// Bodies that are not JSON, or not the right JSON.
fn bad_bodies() -> Vec<String> {
    vec![
        "{".into(),
        "not json".into(),
        "\u{0}\u{1}".into(),
        "[]".into(),
        "null".into(),
        "\"reason\"".into(),
        "{}".into(),
        r#"{"reason": 5}"#.into(),
        r#"{"reason": null}"#.into(),
        r#"{"reason": ["a"]}"#.into(),
        r#"{"reason": ""}"#.into(),
        r#"{"reason": "check", "reason": "twice"}"#.into(),
        r#"{"reason": "   "}"#.into(),
        format!(r#"{{"reason": "{}"}}"#, "a".repeat(3 * 1024 * 1024)),
    ]
}

#[tokio::test]
async fn robustness_action_bodies_are_refused_with_typed_errors_and_change_nothing() {
    let f = Fixture::new().await;
    let (expire, release) = paths(&f).await;
    for body in bad_bodies() {
        refused(&f, "POST", &expire, Some(body.clone())).await;
        refused(&f, "POST", &release, Some(body)).await;
    }
    for body in [
        r#"{"reason": "check", "expected_epoch": "seven"}"#,
        r#"{"reason": "check", "expected_epoch": -1}"#,
        r#"{"reason": "check", "expected_epoch": 1.5}"#,
    ] {
        refused(&f, "POST", &expire, Some(body.into())).await;
    }
    // No body at all.
    refused(&f, "POST", &expire, None).await;
    refused(&f, "POST", &release, None).await;
}

#[tokio::test]
async fn robustness_bad_cursors_are_typed_4xx() {
    let f = Fixture::new().await;
    for path in [
        "/v1/sessions?cursor=!!!not-a-cursor",
        "/v1/sessions?cursor=%00",
        "/v1/leases?cursor=zzz",
    ] {
        refused(&f, "GET", path, None).await;
    }
}

/// Unknown body fields and query strings that do not deserialize: typed 400s, nothing
/// changed (gaps this suite found in the admin service, fixed in `03d0a0b`).
#[tokio::test]
async fn robustness_unknown_fields_and_bad_query_strings_are_typed_4xx() {
    let f = Fixture::new().await;
    let (expire, release) = paths(&f).await;
    let mut failures = Vec::new();
    let unknown = r#"{"reason": "check", "unknown_field": 1}"#;
    for path in [&expire, &release] {
        if let Err(gap) = refusal(&f, "POST", path, Some(unknown.into())).await {
            failures.push(gap);
        }
    }
    for path in [
        "/v1/sessions?limit=abc",
        "/v1/sessions?limit=-1",
        "/v1/sessions?has_lease=maybe",
        "/v1/leases?leased=2",
        "/v1/lease-events?limit=x",
        "/v1/quarantine?limit=%FF",
        "/v1/transcripts/search",
        "/v1/transcripts/search?q=a&limit=many",
    ] {
        if let Err(gap) = refusal(&f, "GET", path, None).await {
            failures.push(gap);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn robustness_invalid_ids_are_typed_4xx_and_change_nothing() {
    let f = Fixture::new().await;
    let long = "x".repeat(5000);
    for (method, path) in [
        ("GET", "/v1/sessions/%00".to_owned()),
        ("GET", format!("/v1/sessions/{long}")),
        ("DELETE", "/v1/sessions/%20".to_owned()),
        ("DELETE", "/v1/sessions/%0Abad".to_owned()),
        ("GET", "/v1/namespaces/Bad%20NS/bindings/k".to_owned()),
        (
            "GET",
            "/v1/namespaces/codex-bindings/bindings/%00".to_owned(),
        ),
        ("GET", "/v1/quarantine/%00/x".to_owned()),
        // Percent-encoded bytes that are not UTF-8: the path itself does not decode.
        ("GET", "/v1/sessions/%FF".to_owned()),
        ("DELETE", "/v1/sessions/%C3%28".to_owned()),
        ("GET", "/v1/namespaces/%FF/bindings/k".to_owned()),
        ("GET", "/v1/quarantine/codex-bindings/%FE".to_owned()),
    ] {
        refused(&f, method, &path, None).await;
    }
    let (expire, _) = paths(&f).await;
    let bad_ns = expire.replace(&seg(ns().as_str()), "Bad%20NS");
    refused(&f, "POST", &bad_ns, Some(r#"{"reason":"check"}"#.into())).await;
}

/// The request-body twin: mutations of valid bodies (truncation, byte flips, type swaps) never
/// produce a server error, and a refused body changes nothing.
#[tokio::test]
async fn fuzz_twin_admin_request_bodies() {
    let f = Fixture::new().await;
    let state = f.state(tokens());
    let (expire, release) = paths(&f).await;
    let seeds = [
        r#"{"reason":"operator check","expected_epoch":1}"#,
        r#"{"reason":"operator check"}"#,
    ];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut refusals = 0;
    for i in 0..200 {
        let mut body = seeds[i % seeds.len()].as_bytes().to_vec();
        match next() % 3 {
            0 => body.truncate(usize::try_from(next() % body.len() as u64).unwrap()),
            1 => {
                let at = usize::try_from(next() % body.len() as u64).unwrap();
                body[at] = u8::try_from(next() % 256).unwrap();
            }
            _ => body = format!(r#"{{"reason":{}}}"#, next() % 1000).into_bytes(),
        }
        admin_checks::check_admin_request_bodies(&body);
        let body = String::from_utf8_lossy(&body).into_owned();
        // Read-only callers are always refused; the admin may be refused or succeed.
        let path = if i % 2 == 0 { &release } else { &expire };
        let before = snapshot(&f).await;
        let read_only = call(&state, "POST", path, Some(READ), Some(body.clone())).await;
        assert!(read_only.status.is_client_error(), "{}", read_only.text);
        assert_eq!(snapshot(&f).await, before);
        let reply = call(&state, "POST", path, Some(ADMIN), Some(body.clone())).await;
        assert!(
            !reply.status.is_server_error(),
            "{body:?}: {} {}",
            reply.status,
            reply.text
        );
        if reply.status.is_client_error() {
            refusals += 1;
            assert_eq!(snapshot(&f).await, before, "{body:?}: refused but changed");
            assert!(reply.json()["code"].is_string(), "{}", reply.text);
        }
    }
    assert!(
        refusals > 100,
        "the mutations mostly hit the refusal paths: {refusals}"
    );
}
