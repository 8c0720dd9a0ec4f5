//! The shared state of the admin service.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_trait::async_trait;

use tether_storage::Store;

use crate::auth::Tokens;
use crate::database::Database;
use crate::error::ApiError;

/// Something the service can ask whether its backing database is reachable and migrated.
#[async_trait]
pub trait HealthProbe: Send + Sync + fmt::Debug {
    /// `Ok(())` when the database answers; `Err(reason)` otherwise.
    async fn check(&self) -> Result<(), String>;

    /// A short description of the backend (for example `sqlite`), shown by `/healthz`.
    fn backend(&self) -> &'static str;
}

#[derive(Debug)]
struct AlwaysHealthy;

#[async_trait]
impl HealthProbe for AlwaysHealthy {
    async fn check(&self) -> Result<(), String> {
        Ok(())
    }

    fn backend(&self) -> &'static str {
        "none"
    }
}

/// State shared by every handler (cheap to clone).
#[derive(Clone, Debug)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    probe: Arc<dyn HealthProbe>,
    tokens: Tokens,
    started: Instant,
    store: Option<Store>,
    counters: Counters,
    ui_sessions: crate::signin::UiSessions,
}

/// Counts of the actions this process took (exported by `/metrics`).
#[derive(Debug, Default)]
pub struct Counters {
    /// Sessions deleted.
    pub deletions: AtomicU64,
    /// Deletions refused or rolled back.
    pub deletion_failures: AtomicU64,
    /// Leases force-expired.
    pub force_expirations: AtomicU64,
    /// Quarantined keys released.
    pub quarantine_releases: AtomicU64,
}

impl Counters {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads `counter`.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

impl AppState {
    /// State over a health probe (usually the opened store).
    pub fn new(probe: Arc<dyn HealthProbe>, tokens: Tokens) -> Self {
        Self {
            inner: Arc::new(Inner {
                probe,
                tokens,
                started: Instant::now(),
                store: None,
                counters: Counters::default(),
                ui_sessions: crate::signin::UiSessions::default(),
            }),
        }
    }

    /// State over an opened database: its store answers the API, it answers health checks.
    pub fn from_database(database: Database, tokens: Tokens) -> Self {
        let store = database.store().clone();
        Self {
            inner: Arc::new(Inner {
                probe: Arc::new(database),
                tokens,
                started: Instant::now(),
                store: Some(store),
                counters: Counters::default(),
                ui_sessions: crate::signin::UiSessions::default(),
            }),
        }
    }

    /// The store behind the API, or `unavailable` when the state has none.
    pub fn store(&self) -> Result<&Store, ApiError> {
        self.inner.store.as_ref().ok_or_else(|| {
            ApiError::Unavailable("this service has no database configured; start it with `tether serve --database-url URL`".into())
        })
    }

    /// The dashboard's signed-in browser sessions.
    pub fn ui_sessions(&self) -> &crate::signin::UiSessions {
        &self.inner.ui_sessions
    }

    /// The action counters.
    pub fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    /// State with no database behind it, for router tests and examples.
    pub fn for_tests() -> Self {
        Self::new(Arc::new(AlwaysHealthy), Tokens::default())
    }

    /// The configured bearer tokens.
    pub fn tokens(&self) -> &Tokens {
        &self.inner.tokens
    }

    /// The health probe.
    pub fn probe(&self) -> &Arc<dyn HealthProbe> {
        &self.inner.probe
    }

    /// Seconds since the state was built.
    pub fn uptime_seconds(&self) -> u64 {
        self.inner.started.elapsed().as_secs()
    }
}
