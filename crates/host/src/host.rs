//! The facade: one store, one clock, one harness registry, and everything built over them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tether_core::{
    BindingStore as _, Clock, Error, HarnessId, HarnessRegistry, LeaseConfig, Namespace,
    NamespaceConfig, QuarantineStore, RecordCodec, SystemClock,
};
use tether_harness_sdk::backend::ThreadBindingStore;
use tether_harness_sdk::generation::GenerationAuthority;
use tether_harness_sdk::hooks::ThreadBindingHarness;
use tether_harness_sdk::lifecycle::{Lifecycle, LifecycleBuilder, PrepareLease};
use tether_storage::{ServerClock, Store, StoreOptions};

use crate::{ActiveRuns, HostSessions, WorkTracker};

use crate::SqlFallbackTranscript;

/// How often the server clock is measured again by default.
const DEFAULT_RESYNC: Duration = Duration::from_secs(60);

/// Which clock decides lease expiry.
enum ClockChoice {
    /// The database server's clock on PostgreSQL, the system clock on SQLite.
    Default,
    /// Always the system clock.
    System,
    /// The caller's clock (tests: a fake clock).
    Given(Arc<dyn Clock>),
}

/// Options of [`Host::open`] (from [`Host::builder`]).
pub struct HostBuilder {
    url: String,
    clock: ClockChoice,
    resync_every: Duration,
    holder: Option<String>,
    lease: LeaseConfig,
    namespaces: Vec<NamespaceConfig>,
    options: Option<Box<dyn FnOnce(StoreOptions) -> StoreOptions + Send>>,
}

impl fmt::Debug for HostBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password: only its redacted form is shown.
        f.debug_struct("HostBuilder")
            .field("url", &tether_storage::redact_url(&self.url))
            .field("resync_every", &self.resync_every)
            .field("holder", &self.holder)
            .field("lease", &self.lease)
            .field("namespaces", &self.namespaces.len())
            .finish_non_exhaustive()
    }
}

impl HostBuilder {
    /// Labels the leases this host takes (shown to operators as the holder); by default the
    /// host name and process id.
    #[must_use]
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// The lease timing of the thread bindings and lifecycles this host builds (default
    /// [`LeaseConfig::default`]: lease 65 s, wait 70 s, retry 1 s, renewal every third of the
    /// lease). Its wait budget is also how long a deletion or context reset waits for a
    /// session that another host process is driving before it fails with
    /// [`Error::LeaseTimeout`]. [`open`](Self::open) refuses a timing that cannot work
    /// ([`Error::InvalidArgument`], see [`LeaseConfig::validate`]).
    #[must_use]
    pub fn lease_config(mut self, lease: LeaseConfig) -> Self {
        self.lease = lease;
        self
    }

    /// Registers `config` with the store when it opens (namespaces used through
    /// [`Host::thread_bindings`] or [`Host::lifecycle`] are registered by those calls).
    #[must_use]
    pub fn namespace(mut self, config: NamespaceConfig) -> Self {
        self.namespaces.push(config);
        self
    }

    /// Uses the system clock even on PostgreSQL (one host process, or hosts whose clocks are
    /// known to agree).
    #[must_use]
    pub fn system_clock(mut self) -> Self {
        self.clock = ClockChoice::System;
        self
    }

    /// Uses `clock` for every lease decision (for tests: a fake clock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = ClockChoice::Given(clock);
        self
    }

    /// How often the PostgreSQL server clock is measured again (default 60 s).
    #[must_use]
    pub fn resync_every(mut self, every: Duration) -> Self {
        self.resync_every = every;
        self
    }

    /// Adjusts the store's options (pool size, SQLite durability, statement logging, …); the
    /// URL and the clock are the host's.
    #[must_use]
    pub fn store_options(
        mut self,
        adjust: impl FnOnce(StoreOptions) -> StoreOptions + Send + 'static,
    ) -> Self {
        self.options = Some(Box::new(adjust));
        self
    }

    /// Opens the store (creating and migrating it when needed), measures the server clock on
    /// PostgreSQL and keeps it in step in the background, and registers the namespaces given.
    #[tracing::instrument(level = "info", name = "host.open", skip(self))]
    pub async fn open(self) -> Result<Host, Error> {
        self.lease.validate().map_err(|reason| {
            Error::invalid_argument(format!("invalid host lease configuration: {reason}"))
        })?;
        let postgres = self.url.starts_with("postgres:") || self.url.starts_with("postgresql:");
        let server_clock = match &self.clock {
            ClockChoice::Default if postgres => Some(ServerClock::new()),
            _ => None,
        };
        let clock: Arc<dyn Clock> = match (self.clock, &server_clock) {
            (ClockChoice::Given(clock), _) => clock,
            (_, Some(server)) => Arc::new(server.clone()),
            _ => Arc::new(SystemClock),
        };
        let mut options = StoreOptions::new(self.url).clock(Arc::clone(&clock));
        if let Some(adjust) = self.options {
            options = adjust(options);
            // The host's clock is the store's clock, whatever the adjustment did.
            options = options.clock(Arc::clone(&clock));
        }
        let store = Store::open_with(options).await?;
        let resync = match &server_clock {
            Some(server) => {
                server.resync(&store).await?;
                tracing::info!(
                    offset_ms = server.offset_millis(),
                    "lease decisions follow the database server's clock"
                );
                Some(AbortOnDrop(
                    server.spawn_resync(store.clone(), self.resync_every),
                ))
            }
            None => None,
        };
        for config in self.namespaces {
            store.register_namespace(config).await?;
        }
        let holder = self.holder.unwrap_or_else(default_holder);
        Ok(Host {
            inner: Arc::new(Inner {
                store,
                clock,
                server_clock,
                registry: HarnessRegistry::shared(),
                runs: Arc::new(ActiveRuns::new()),
                holder,
                lease: self.lease,
                thread_bindings: std::sync::Mutex::default(),
                _resync: resync,
            }),
        })
    }
}

/// `<host name>-<process id>`, or `pid-<process id>` without a host name. The host name is the
/// kernel's (Linux), else `HOSTNAME` (which shells set but rarely export).
fn default_holder() -> String {
    let pid = std::process::id();
    let usable = |name: String| {
        let name = name.trim();
        (!name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
        .then(|| name.to_owned())
    };
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .and_then(usable)
        .or_else(|| std::env::var("HOSTNAME").ok().and_then(usable));
    match name {
        Some(name) => format!("{name}-{pid}"),
        None => format!("pid-{pid}"),
    }
}

/// Aborts the background task when the host is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Inner {
    store: Store,
    clock: Arc<dyn Clock>,
    server_clock: Option<ServerClock>,
    registry: Arc<HarnessRegistry>,
    runs: Arc<ActiveRuns>,
    holder: String,
    lease: LeaseConfig,
    /// The thread-binding store of each namespace asked for, built once: every caller in this
    /// host shares its lifecycle instance, so the harness holding a turn's lease and a write
    /// through the store inside that turn are one owner, never two waiting on each other.
    thread_bindings: std::sync::Mutex<std::collections::HashMap<String, ThreadBindingStore>>,
    _resync: Option<AbortOnDrop>,
}

/// A host gateway's view of Tether: one store, the clock every lease decision uses, one
/// harness registry, and everything built over them. Cheap to clone (shared).
///
/// Open it once per process with [`Host::open`] or [`Host::builder`].
#[derive(Clone)]
pub struct Host {
    inner: Arc<Inner>,
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host")
            .field("store", &self.inner.store)
            .field("server_clock", &self.inner.server_clock.is_some())
            .field("holder", &self.inner.holder)
            .field("registry", &self.inner.registry)
            .finish_non_exhaustive()
    }
}

impl Host {
    /// Options for opening a host on the database at `url` (`sqlite://path`,
    /// `sqlite::memory:`, `postgres://…`).
    pub fn builder(url: impl Into<String>) -> HostBuilder {
        HostBuilder {
            url: url.into(),
            clock: ClockChoice::Default,
            resync_every: DEFAULT_RESYNC,
            holder: None,
            lease: LeaseConfig::default(),
            namespaces: Vec::new(),
            options: None,
        }
    }

    /// Opens a host on the database at `url` with the defaults of [`Host::builder`]: the
    /// server's clock on PostgreSQL (measured now and every minute), the system clock on
    /// SQLite, leases labelled with the host name and process id.
    pub async fn open(url: impl Into<String>) -> Result<Self, Error> {
        Self::builder(url).open().await
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The clock every lease decision of this host uses (the store's clock).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The server clock, when lease decisions follow the PostgreSQL server's time.
    pub fn server_clock(&self) -> Option<&ServerClock> {
        self.inner.server_clock.as_ref()
    }

    /// The label of the leases this host takes.
    pub fn holder(&self) -> &str {
        &self.inner.holder
    }

    /// The lease timing of the bindings and lifecycles this host builds
    /// ([`HostBuilder::lease_config`]).
    pub fn lease_config(&self) -> &LeaseConfig {
        &self.inner.lease
    }

    /// The harness registry: register each harness the host drives.
    pub fn registry(&self) -> &Arc<HarnessRegistry> {
        &self.inner.registry
    }

    /// The host's record of runs in flight: admit a run before driving a session and finish
    /// it after, so a deletion or reset of that session is refused at once
    /// ([`Error::CompetingWork`], busy: retry after the run) instead of racing it. It sees
    /// this process's runs only; a run of another host process is fenced by the session's
    /// lease, which the deletion waits for. The Codex harness `codex_harness` builds (feature
    /// `codex`) admits each of its turns here itself.
    pub fn runs(&self) -> &Arc<ActiveRuns> {
        &self.inner.runs
    }

    /// The host's session operations: deletion and context reset of sessions together with
    /// their transcripts and, through the registered harnesses, their native bindings, in
    /// one transaction.
    pub fn sessions(&self) -> HostSessions {
        HostSessions::new(
            self.inner.store.clone(),
            Arc::clone(&self.inner.registry),
            Arc::clone(&self.inner.runs) as Arc<dyn WorkTracker>,
        )
    }

    /// The generation authority over this host's sessions.
    pub fn generation(&self) -> GenerationAuthority {
        GenerationAuthority::new(Arc::new(self.inner.store.clone()))
    }

    /// Thread bindings in `namespace` (registered with the thread-binding defaults when it
    /// is not yet), on this host's clock and lease timing, leases labelled with its holder,
    /// blocked keys quarantined durably in the store.
    ///
    /// Every call for one namespace, on this host or a clone of it, answers the same store
    /// (one lifecycle instance), and so does [`Host::thread_harness`]'s harness: a write through
    /// it inside a turn lease that harness holds is the holder's own write. (Two lifecycle
    /// instances over one namespace are two owners: the second would wait behind the first's
    /// lease, even in one process.) A Codex harness ([`Host::codex_harness`], feature `codex`)
    /// shares the store of its namespace (`tether_codex::NAMESPACE`) the same way.
    pub async fn thread_bindings(&self, namespace: &str) -> Result<ThreadBindingStore, Error> {
        let ns = self
            .ensure_namespace(namespace, ThreadBindingStore::namespace_config)
            .await?;
        self.shared_thread_bindings(ns)
    }

    /// The one binding store of `ns` this host (and every clone of it) shares, built on first
    /// use. It does not register the namespace: [`Host::thread_bindings`] does, and so does a
    /// Codex harness's `build`.
    pub(crate) fn shared_thread_bindings(
        &self,
        ns: Namespace,
    ) -> Result<ThreadBindingStore, Error> {
        let cached = |host: &Self| {
            host.inner
                .thread_bindings
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(ns.as_str())
                .cloned()
        };
        if let Some(bindings) = cached(self) {
            return Ok(bindings);
        }
        let built = ThreadBindingStore::builder(Arc::new(self.inner.store.clone()), ns.clone())
            .clock(Arc::clone(&self.inner.clock))
            .holder(self.inner.holder.clone())
            .lease_config(self.inner.lease)
            .quarantine(self.quarantine())
            .build()?;
        // Two first calls at once: the first to finish is the one every caller shares.
        Ok(self
            .inner
            .thread_bindings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(ns.as_str().to_owned())
            .or_insert(built)
            .clone())
    }

    /// The ready harness hooks (deletion, context reset, reset) of harness `id` over thread
    /// bindings in `namespace`. Register it (`host.registry().register(Arc::new(harness))`),
    /// after adding a finalizer with
    /// [`ThreadBindingHarness::with_finalizer`] when the harness has one.
    pub async fn thread_harness(
        &self,
        id: &str,
        namespace: &str,
    ) -> Result<ThreadBindingHarness, Error> {
        let bindings = self.thread_bindings(namespace).await?;
        Ok(ThreadBindingHarness::new(
            HarnessId::new(id)?,
            bindings,
            self.generation(),
        ))
    }

    /// A lifecycle builder for records of your own in `namespace` (registered with `config`'s
    /// settings when it is not yet), preset with this host's clock, lease timing, holder and
    /// durable quarantine; finish it with `build()`.
    pub async fn lifecycle<C: RecordCodec + 'static>(
        &self,
        config: NamespaceConfig,
        codec: C,
        prepare_lease: PrepareLease<C::Record>,
    ) -> Result<LifecycleBuilder<C>, Error> {
        let ns = config.namespace.clone();
        self.ensure_namespace(ns.as_str(), |_| config).await?;
        Ok(
            Lifecycle::builder(Arc::new(self.inner.store.clone()), ns, codec, prepare_lease)
                .clock(Arc::clone(&self.inner.clock))
                .holder(self.inner.holder.clone())
                .lease_config(self.inner.lease)
                .quarantine(self.quarantine()),
        )
    }

    /// The settled-turn finalizer's fallback transcript over this host's store.
    pub fn fallback_transcript(&self) -> SqlFallbackTranscript {
        SqlFallbackTranscript::new(self.inner.store.clone())
    }

    /// Closes the store's pool (after the last clone of this host is dropped; a no-op while
    /// others are alive).
    pub async fn close(self) -> Result<(), Error> {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => {
                drop(inner._resync);
                inner.store.close().await
            }
            Err(_) => Ok(()),
        }
    }

    /// The durable quarantine of keys whose write outcome is unknown: this host's store.
    pub(crate) fn quarantine(&self) -> Arc<dyn QuarantineStore> {
        Arc::new(self.inner.store.clone())
    }

    /// Registers `namespace` with `config(namespace)` unless it is registered already (a
    /// namespace given to the builder keeps its own settings).
    async fn ensure_namespace(
        &self,
        namespace: &str,
        config: impl FnOnce(Namespace) -> NamespaceConfig,
    ) -> Result<Namespace, Error> {
        let ns = Namespace::new(namespace)?;
        if !self.inner.store.has_namespace(&ns) {
            self.inner
                .store
                .register_namespace(config(ns.clone()))
                .await?;
        }
        Ok(ns)
    }
}
