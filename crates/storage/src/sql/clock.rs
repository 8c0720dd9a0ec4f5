//! A clock that follows the database server's time (see `docs/storage.md`, "One clock").

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use sea_orm::DbBackend;
use tether_core::{Clock, Error, SystemClock, Timestamp};

use super::{Store, db_error};

/// The database server's clock, as seen from this host: the local clock plus an offset measured
/// against the server ([`resync`](Self::resync)). With several hosts sharing PostgreSQL every
/// lease decision then uses one time line, whatever the hosts' clocks say.
///
/// Create it with a zero offset, open the store with it, then resync (and keep resyncing with
/// [`spawn_resync`](Self::spawn_resync)):
///
/// ```no_run
/// # async fn demo() -> Result<(), tether_core::Error> {
/// use std::sync::Arc;
/// use tether_storage::{ServerClock, Store, StoreOptions};
/// let clock = ServerClock::new();
/// let store = Store::open_with(StoreOptions::new("postgres://tether@db/tether").clock(Arc::new(clock.clone()))).await?;
/// clock.resync(&store).await?;
/// let _task = clock.spawn_resync(store.clone(), std::time::Duration::from_secs(60));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ServerClock {
    offset_ms: Arc<AtomicI64>,
    /// The host's own clock, which the offset corrects (the system clock unless a test gives
    /// a host a clock that runs ahead or behind).
    local: Arc<dyn Clock>,
}

impl Default for ServerClock {
    fn default() -> Self {
        Self::over(Arc::new(SystemClock))
    }
}

impl ServerClock {
    /// A server clock with no offset measured yet (it reads the local clock until resynced).
    pub fn new() -> Self {
        Self::default()
    }

    /// A server clock correcting `local` instead of the system clock: what a host whose own
    /// clock is wrong (ahead, behind) reads once resynced. For drills of clock skew between
    /// hosts; production uses [`ServerClock::new`].
    pub fn over(local: Arc<dyn Clock>) -> Self {
        Self {
            offset_ms: Arc::new(AtomicI64::new(0)),
            local,
        }
    }

    /// The measured offset, server minus local, in milliseconds.
    pub fn offset_millis(&self) -> i64 {
        self.offset_ms.load(Ordering::SeqCst)
    }

    /// Measures the offset against the server (half the round trip is credited to each way).
    pub async fn resync(&self, store: &Store) -> Result<(), Error> {
        let sql = match store.backend() {
            DbBackend::Postgres => {
                "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT) AS ms"
            }
            _ => "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER) AS ms",
        };
        let before = self.local.now();
        let row =
            sea_orm::ConnectionTrait::query_one_raw(store.connection(), store.stmt(sql, vec![]))
                .await
                .map_err(db_error)?
                .ok_or_else(|| Error::other("the server returned no time"))?;
        let after = self.local.now();
        let server: i64 = row.try_get("", "ms").map_err(db_error)?;
        let midpoint = before.as_millis() + (after.as_millis() - before.as_millis()) / 2;
        self.offset_ms
            .store(server.saturating_sub(midpoint), Ordering::SeqCst);
        Ok(())
    }

    /// Resyncs every `interval` (at least one millisecond) until the handle is aborted or the
    /// store is gone (the task does not keep it open); failures are logged and the last offset
    /// kept.
    pub fn spawn_resync(&self, store: Store, interval: Duration) -> tokio::task::JoinHandle<()> {
        let clock = self.clone();
        store.spawn_periodic(interval, "clock resync", move |store| {
            let clock = clock.clone();
            async move {
                if let Err(err) = clock.resync(&store).await {
                    tracing::warn!(error = %err, "server clock resync failed");
                }
            }
        })
    }
}

impl Clock for ServerClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(
            self.local
                .now()
                .as_millis()
                .saturating_add(self.offset_millis()),
        )
    }
}
