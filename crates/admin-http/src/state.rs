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

/// Now, in seconds since the Unix epoch.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

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
    started_unix: f64,
    store: Option<Store>,
    counters: Counters,
    ui_sessions: crate::signin::UiSessions,
    http: HttpMetrics,
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

/// Upper bounds of the request-latency histogram, in seconds.
pub const HTTP_LATENCY_BOUNDS: [f64; 10] =
    [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

/// One route's requests: a count per status and a latency histogram.
#[derive(Debug, Default, Clone)]
pub struct RouteStats {
    /// Requests by status code.
    pub by_status: std::collections::BTreeMap<u16, u64>,
    /// Requests at or under each bound of [`HTTP_LATENCY_BOUNDS`] (cumulative).
    pub buckets: [u64; HTTP_LATENCY_BOUNDS.len()],
    /// All requests.
    pub count: u64,
    /// Their total latency, in seconds.
    pub sum_seconds: f64,
}

/// HTTP request counts and latencies by (method, route template), since the process started.
/// Routes are the router's templates (`/v1/sessions/{session_key}`), never raw paths, so the
/// label set stays bounded; paths matching no route (the 404 fallback) are not counted.
#[derive(Debug, Default)]
pub struct HttpMetrics {
    routes: std::sync::Mutex<std::collections::BTreeMap<(String, String), RouteStats>>,
}

impl HttpMetrics {
    /// Records one request.
    pub fn record(&self, method: &str, route: &str, status: u16, elapsed: std::time::Duration) {
        let seconds = elapsed.as_secs_f64();
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let stats = routes
            .entry((method.to_owned(), route.to_owned()))
            .or_default();
        *stats.by_status.entry(status).or_default() += 1;
        for (bucket, bound) in stats.buckets.iter_mut().zip(HTTP_LATENCY_BOUNDS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
        stats.count += 1;
        stats.sum_seconds += seconds;
    }

    /// A copy of every route's statistics, keyed by (method, route).
    pub fn snapshot(&self) -> Vec<((String, String), RouteStats)> {
        self.routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
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
                started_unix: unix_now(),
                store: None,
                counters: Counters::default(),
                ui_sessions: crate::signin::UiSessions::default(),
                http: HttpMetrics::default(),
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
                started_unix: unix_now(),
                store: Some(store),
                counters: Counters::default(),
                ui_sessions: crate::signin::UiSessions::default(),
                http: HttpMetrics::default(),
            }),
        }
    }

    /// The store behind the API, or `unavailable` when the state has none.
    pub fn store(&self) -> Result<&Store, ApiError> {
        self.inner.store.as_ref().ok_or_else(|| {
            ApiError::Unavailable("this service has no database configured; start it with `tether serve --database-url URL`".into())
        })
    }

    /// Request counts and latencies per route.
    pub fn http_metrics(&self) -> &HttpMetrics {
        &self.inner.http
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

    /// When the state was built, in seconds since the Unix epoch.
    pub fn started_unix_seconds(&self) -> f64 {
        self.inner.started_unix
    }

    /// Seconds since the state was built.
    pub fn uptime_seconds(&self) -> u64 {
        self.inner.started.elapsed().as_secs()
    }
}
