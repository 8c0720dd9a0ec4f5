//! Shared fixtures: a store handle over every backend, with a fake clock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tether_core::{
    AgentId, BindingKey, BindingStore, FakeClock, LeaseToken, LeaseWrite, Namespace,
    NamespaceConfig, QuarantineStore, RowWrite, SessionId, Timestamp,
};
use tether_storage::{MemoryStore, StoreAdmin};

/// Everything a conformance test needs from a store.
pub(crate) trait AnyStore: BindingStore + QuarantineStore + StoreAdmin {}
impl<T: BindingStore + QuarantineStore + StoreAdmin> AnyStore for T {}

/// A future producing another connection to the same store.
pub(crate) type Reopen =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Arc<dyn AnyStore>> + Send>> + Send + Sync>;

/// One backend under test.
pub(crate) struct Backend {
    pub(crate) name: &'static str,
    pub(crate) store: Arc<dyn AnyStore>,
    pub(crate) clock: FakeClock,
    /// Opens a second, independent connection to the same data.
    pub(crate) reopen: Reopen,
}

/// The fake clock start used by every fixture (2026-01-01T00:00:00Z).
pub(crate) const START: Timestamp = Timestamp::from_millis(1_767_225_600_000);

pub(crate) fn memory_backend() -> Backend {
    let clock = FakeClock::new(START);
    let store = MemoryStore::new(Arc::new(clock.clone()));
    let shared = store.clone();
    Backend {
        name: "memory",
        store: Arc::new(store),
        clock,
        reopen: Arc::new(move || {
            let s = shared.clone();
            Box::pin(async move { Arc::new(s) as Arc<dyn AnyStore> })
        }),
    }
}

static NEXT_NS: AtomicU64 = AtomicU64::new(1);

/// A namespace unique to this test process and call.
pub(crate) fn unique_ns(label: &str) -> Namespace {
    let n = NEXT_NS.fetch_add(1, Ordering::SeqCst);
    Namespace::new(format!("{label}-{}-{n}", std::process::id())).unwrap()
}

impl Backend {
    /// Registers a fresh namespace with `config` applied.
    pub(crate) async fn namespace(
        &self,
        label: &str,
        config: impl FnOnce(NamespaceConfig) -> NamespaceConfig,
    ) -> Namespace {
        let ns = unique_ns(label);
        self.store
            .register_namespace(config(NamespaceConfig::new(ns.clone())))
            .await
            .unwrap();
        ns
    }

    pub(crate) fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }
}

pub(crate) fn key(id: &str) -> BindingKey {
    BindingKey::physical(&AgentId::new("main").unwrap(), &SessionId::new(id).unwrap())
}

pub(crate) fn value(v: &str) -> RowWrite {
    RowWrite {
        value: format!(r#"{{"value":"{v}"}}"#).into_bytes(),
        lease: None,
    }
}

pub(crate) fn leased(v: &str, token: &str, expires_at: Timestamp) -> RowWrite {
    RowWrite {
        value: format!(r#"{{"value":"{v}"}}"#).into_bytes(),
        lease: Some(LeaseWrite {
            token: LeaseToken::new(token).unwrap(),
            expires_at,
            holder: Some(format!("holder-{token}")),
        }),
    }
}

pub(crate) fn text(row: &tether_core::StoredRow) -> String {
    String::from_utf8(row.value.clone()).unwrap()
}

/// A SQLite store in a temporary file (the directory lives as long as the backend's store).
pub(crate) async fn sqlite_backend() -> Backend {
    let clock = FakeClock::new(START);
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let url = format!("sqlite://{}", dir.path().join("tether.db").display());
    open_backend("sqlite", url, clock, Some(dir)).await
}

/// A backend over an existing URL (PostgreSQL test database).
pub(crate) async fn open_backend(
    name: &'static str,
    url: String,
    clock: FakeClock,
    keep: Option<Arc<tempfile::TempDir>>,
) -> Backend {
    let open = {
        let clock = clock.clone();
        move |url: String| {
            let clock = clock.clone();
            async move {
                tether_storage::Store::open_with(
                    tether_storage::StoreOptions::new(url).clock(Arc::new(clock)),
                )
                .await
                .unwrap()
            }
        }
    };
    let store = open(url.clone()).await;
    let reopen_url = url.clone();
    Backend {
        name,
        store: Arc::new(store),
        clock,
        reopen: Arc::new(move || {
            let open = open.clone();
            let url = reopen_url.clone();
            let keep = keep.clone();
            Box::pin(async move {
                let _dir = keep;
                Arc::new(open(url).await) as Arc<dyn AnyStore>
            })
        }),
    }
}

/// A SQL store on `url` with the fixture's fake clock at [`START`].
pub(crate) async fn open_store(url: &str) -> tether_storage::Store {
    tether_storage::Store::open_with(
        tether_storage::StoreOptions::new(url).clock(Arc::new(FakeClock::new(START))),
    )
    .await
    .unwrap()
}

/// A SQL store in a temporary SQLite file (keep the directory alive).
pub(crate) async fn sqlite_store() -> (tether_storage::Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tether.db").display());
    (open_store(&url).await, dir)
}
