//! A seeded store and a request helper for the router tests (no socket: `app(state).oneshot`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

use tether_admin_http::auth::Tokens;
use tether_admin_http::database::Database;
use tether_admin_http::{AppState, app};
use tether_core::{
    AgentId, ApplyOutcome, BindingKey, BindingStore as _, FakeClock, HarnessId, Intent, LeaseToken,
    LeaseWrite, Namespace, NamespaceConfig, QuarantineEntry, QuarantineStore as _, RowWrite,
    SessionId, SessionKey, Timestamp, admit_all,
};
use tether_storage::{
    NewHostSession, NewTranscriptEntry, Store, StoreOptions, TranscriptRole, session_binding_keys,
};

pub(crate) const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);
pub(crate) const NS: &str = "codex-bindings";
pub(crate) const SECRET: &str = "sk-abcdefghijklmnopqrstuvwxyz0123456789";
pub(crate) const READ: &str = "read-token-1";
pub(crate) const ADMIN: &str = "admin-token-1";

/// The seeded store: sessions `agent:main:alpha` (leased stable binding, transcript),
/// `agent:main:beta` (unleased physical binding, quarantined stable key) and
/// `agent:ops:gamma` (no harness, no binding).
#[derive(Debug, Clone)]
pub(crate) struct Fixture {
    pub(crate) store: Store,
    pub(crate) clock: Arc<FakeClock>,
}

pub(crate) fn ns() -> Namespace {
    Namespace::new(NS).unwrap()
}

impl Fixture {
    pub(crate) async fn new() -> Self {
        Self::on("sqlite::memory:").await
    }

    /// The seeded store on the database at `url`.
    pub(crate) async fn on(url: &str) -> Self {
        let clock = Arc::new(FakeClock::new(T0));
        let store = Store::open_with(StoreOptions::new(url).clock(clock.clone()))
            .await
            .unwrap();
        store
            .register_namespace(NamespaceConfig::new(ns()))
            .await
            .unwrap();
        let f = Self { store, clock };
        for (key, agent, harness) in [
            ("agent:main:alpha", "main", Some("codex")),
            ("agent:main:beta", "main", Some("codex")),
            ("agent:ops:gamma", "ops", None),
        ] {
            f.store
                .create_session(NewHostSession {
                    session_key: SessionKey::new(key).unwrap(),
                    agent_id: AgentId::new(agent).unwrap(),
                    session_id: SessionId::new(format!("{}-g1", &key[key.len() - 5..])).unwrap(),
                    agent_harness_id: harness.map(|h| HarnessId::new(h).unwrap()),
                })
                .await
                .unwrap();
        }
        let alpha = f.entry("agent:main:alpha").await;
        f.bind(
            &session_binding_keys(&alpha)[1],
            Some(("<script>worker</script>", 60)),
        )
        .await;
        let beta = f.entry("agent:main:beta").await;
        f.bind(&session_binding_keys(&beta)[0], None).await;
        f.store
            .quarantine(QuarantineEntry {
                namespace: ns(),
                key: session_binding_keys(&beta)[1].clone(),
                reason: format!("undecodable record holding {SECRET}"),
                custody: Some("host-1".into()),
                quarantined_at: T0,
            })
            .await
            .unwrap();
        for (role, text) in [
            (TranscriptRole::User, "deploy the service please".to_owned()),
            (
                TranscriptRole::Assistant,
                format!("deploying with token {SECRET}"),
            ),
            (TranscriptRole::Tool, "deploy exit code 0".to_owned()),
        ] {
            f.store
                .append_transcript(
                    &alpha.session_key,
                    NewTranscriptEntry {
                        role,
                        content: text,
                        idempotency_key: None,
                        metadata: None,
                    },
                )
                .await
                .unwrap();
        }
        f
    }

    pub(crate) async fn entry(&self, key: &str) -> tether_core::HostSessionEntry {
        self.store
            .session(&SessionKey::new(key).unwrap())
            .await
            .unwrap()
            .unwrap()
    }

    pub(crate) async fn bind(&self, key: &BindingKey, lease: Option<(&str, u64)>) {
        let value = format!("{{\"thread\":\"th-1\",\"api_key\":\"{SECRET}\"}}").into_bytes();
        self.bind_value(key, value, lease).await;
    }

    /// Writes `value` at `key` (in [`NS`]), with a lease `(holder, seconds)` when given.
    pub(crate) async fn bind_value(
        &self,
        key: &BindingKey,
        value: Vec<u8>,
        lease: Option<(&str, u64)>,
    ) {
        let seen = self.store.observe(&ns(), key).await.unwrap();
        let now = tether_core::Clock::now(&*self.clock);
        let outcome = self
            .store
            .compare_and_apply(
                &ns(),
                key,
                &seen.comparison,
                Intent::Set {
                    row: RowWrite {
                        value,
                        lease: lease.map(|(holder, secs)| LeaseWrite {
                            token: LeaseToken::new(format!("tok-{}", now.as_millis())).unwrap(),
                            expires_at: now + Duration::from_secs(secs),
                            holder: Some(holder.into()),
                        }),
                    },
                    ttl: None,
                },
                &admit_all,
            )
            .await
            .unwrap();
        assert!(
            matches!(outcome, ApplyOutcome::Applied { .. }),
            "{outcome:?}"
        );
    }

    /// Renews alpha's held stable-key lease by 30 s through the store (one `renewed` event);
    /// returns that key.
    pub(crate) async fn renew_alpha(&self) -> BindingKey {
        let alpha = self.entry("agent:main:alpha").await;
        let key = session_binding_keys(&alpha)[1].clone();
        let seen = self.store.observe(&ns(), &key).await.unwrap();
        let mut row = seen.row.as_ref().unwrap().to_write();
        if let Some(lease) = row.lease.as_mut() {
            lease.expires_at = lease.expires_at + Duration::from_secs(30);
        }
        let renewed = self
            .store
            .compare_and_apply(
                &ns(),
                &key,
                &seen.comparison,
                Intent::Set { row, ttl: None },
                &admit_all,
            )
            .await
            .unwrap();
        assert!(
            matches!(renewed, ApplyOutcome::Applied { .. }),
            "{renewed:?}"
        );
        key
    }

    pub(crate) fn state(&self, tokens: Tokens) -> AppState {
        AppState::from_database(Database::from_store(self.store.clone()), tokens)
    }
}

pub(crate) fn tokens() -> Tokens {
    Tokens::new(Some(READ.into()), Some(ADMIN.into())).unwrap()
}

/// A response: status, content type and body text.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) content_type: String,
    pub(crate) text: String,
}

impl Reply {
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }

    /// Asserts a typed error with this status and stable code.
    pub(crate) fn expect_error(&self, status: StatusCode, code: &str) {
        assert_eq!(self.status, status, "{}", self.text);
        assert!(self.content_type.starts_with("application/json"));
        assert_eq!(self.json()["code"], code, "{}", self.text);
        assert!(!self.json()["message"].as_str().unwrap().is_empty());
    }

    /// Asserts a console error page with this status and stable code.
    pub(crate) fn expect_error_page(&self, status: StatusCode, code: &str) {
        assert_eq!(self.status, status, "{}", self.text);
        assert!(
            self.content_type.starts_with("text/html"),
            "{}",
            self.content_type
        );
        assert!(
            self.text.contains(&format!("<code>{code}</code>")),
            "{}",
            self.text
        );
    }
}

/// Sends one request through the router.
pub(crate) async fn call(
    state: &AppState,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<String>,
) -> Reply {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    let request = request
        .body(body.map_or_else(Body::empty, Body::from))
        .unwrap();
    send(state, request).await
}

/// Sends a request built by the caller through the router.
pub(crate) async fn send(state: &AppState, request: Request<Body>) -> Reply {
    let response = app(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        content_type,
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// Percent-encodes a path segment.
pub(crate) fn seg(raw: &str) -> String {
    raw.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
