//! The shared state of the admin service.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use crate::auth::Tokens;

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
}

impl AppState {
    /// State over a health probe (usually the opened store).
    pub fn new(probe: Arc<dyn HealthProbe>, tokens: Tokens) -> Self {
        Self {
            inner: Arc::new(Inner {
                probe,
                tokens,
                started: Instant::now(),
            }),
        }
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
