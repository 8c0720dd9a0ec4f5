//! The default fixture of the lifecycle scenarios: in-memory store, fake clock and manual timer,
//! lease 65 s / wait 70 s / retry 1 s / renew 21.666 s, `prepare_lease = {...cur, lease}`, the
//! default error texts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use serde_json::{Map, Value, json};
use tether_core::{
    Admission, ApplyOutcome, BindingId, BindingKey, BindingStore, Clock, Comparison, Error,
    FakeClock, Intent, JsonObjectCodec, Lease, LeaseConfig, LeaseToken, LeaseWrite, Namespace,
    NamespaceConfig, Observation, QuarantineEntry, QuarantineStore, RowPredicate, RowWrite,
    SequentialTokens, StoredRow, Timestamp, admit_all,
};
use tether_harness_sdk::lifecycle::{Applied, Lifecycle, ManualTimer, TransactOptions};
use tether_storage::MemoryStore;
use tokio::sync::Semaphore;

pub(crate) type Record = Map<String, Value>;
pub(crate) type Lc = Lifecycle<JsonObjectCodec>;

pub(crate) const START: Timestamp = Timestamp::from_millis(1_700_000_000_000);
pub(crate) const STALE: Duration = Duration::from_secs(65);
pub(crate) const RETRY: Duration = Duration::from_secs(1);
pub(crate) const RENEW: Duration = Duration::from_millis(21_666);

pub(crate) fn key(name: &str) -> BindingKey {
    BindingKey::conversation(&BindingId::new(name).unwrap())
}

pub(crate) fn record(value: Value) -> Record {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

pub(crate) fn config() -> LeaseConfig {
    LeaseConfig {
        lease_duration: STALE,
        wait_budget: Duration::from_secs(70),
        retry_interval: RETRY,
        renew_interval: RENEW,
    }
}

pub(crate) struct Fixture {
    pub(crate) clock: FakeClock,
    pub(crate) timer: Arc<ManualTimer>,
    /// The store every lifecycle of the fixture uses (a [`GatedStore`] over the backend).
    pub(crate) store: Arc<GatedStore>,
    pub(crate) quarantine: Arc<dyn QuarantineStore>,
    memory: Option<MemoryStore>,
    pub(crate) ns: Namespace,
    pub(crate) lc: Lc,
}

impl Fixture {
    /// The default fixture: the in-memory store.
    pub(crate) async fn new() -> Self {
        let clock = FakeClock::new(START);
        let memory = MemoryStore::new(Arc::new(clock.clone()));
        let quarantine: Arc<dyn QuarantineStore> = Arc::new(memory.clone());
        let mut f = Self::over(clock, Arc::new(memory.clone()), quarantine, false).await;
        f.memory = Some(memory);
        f
    }

    /// The fixture over any backend whose expiry follows `clock`.
    ///
    /// With `real_io`, the manual timer waits for store calls in flight before moving on
    /// (the in-memory store answers at once, and its paused hooks must not count as busy).
    pub(crate) async fn over(
        clock: FakeClock,
        backend: Arc<dyn BindingStore>,
        quarantine: Arc<dyn QuarantineStore>,
        real_io: bool,
    ) -> Self {
        let store = Arc::new(GatedStore::new(backend, quarantine));
        let quarantine: Arc<dyn QuarantineStore> = store.clone();
        let probe = store.clone();
        let timer = Arc::new(if real_io {
            ManualTimer::with_idle_probe(clock.clone(), Arc::new(move || probe.idle()))
        } else {
            ManualTimer::new(clock.clone())
        });
        let ns = Namespace::new("lifecycle-test").unwrap();
        store
            .register_namespace(NamespaceConfig::new(ns.clone()))
            .await
            .unwrap();
        let lc = Self::instance(&clock, &timer, &store, &quarantine, &ns, "owner", "owner");
        Self {
            clock,
            timer,
            store,
            quarantine,
            memory: None,
            ns,
            lc,
        }
    }

    fn instance(
        clock: &FakeClock,
        timer: &Arc<ManualTimer>,
        store: &Arc<GatedStore>,
        quarantine: &Arc<dyn QuarantineStore>,
        ns: &Namespace,
        tokens: &str,
        holder: &str,
    ) -> Lc {
        Lifecycle::builder(
            store.clone(),
            ns.clone(),
            JsonObjectCodec,
            Arc::new(|current: Option<&Record>, _lease: &LeaseWrite| {
                Some(current.cloned().unwrap_or_default())
            }),
        )
        .lease_config(config())
        .clock(Arc::new(clock.clone()))
        .tokens(Arc::new(SequentialTokens::new(tokens)))
        .timer(timer.clone())
        .quarantine(quarantine.clone())
        .holder(holder)
        .build()
        .unwrap()
    }

    /// The in-memory backend (for its fault-injection hooks).
    pub(crate) fn mem(&self) -> &MemoryStore {
        self.memory.as_ref().expect("an in-memory fixture")
    }

    /// A second lifecycle instance on the same store (another "process").
    pub(crate) fn peer(&self) -> Lc {
        Self::instance(
            &self.clock,
            &self.timer,
            &self.store,
            &self.quarantine,
            &self.ns,
            "peer",
            "peer",
        )
    }

    /// A second lifecycle instance with the first one's holder label (two instances of one
    /// process over one namespace): an owner of its own, with tokens of its own.
    pub(crate) fn twin(&self) -> Lc {
        Self::instance(
            &self.clock,
            &self.timer,
            &self.store,
            &self.quarantine,
            &self.ns,
            "twin",
            "owner",
        )
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Writes a row unconditionally (observe + compare-and-apply), as an external writer.
    pub(crate) async fn put(
        &self,
        key: &BindingKey,
        value: Value,
        lease: Option<(&str, Timestamp)>,
    ) {
        force_set(&*self.store, &self.ns, key, value, lease).await;
    }

    /// The live row.
    pub(crate) async fn raw(&self, key: &BindingKey) -> Option<StoredRow> {
        self.store.lookup(&self.ns, key).await.unwrap()
    }

    /// The live row's value and lease.
    pub(crate) async fn row(&self, key: &BindingKey) -> Option<(Value, Option<Lease>)> {
        self.raw(key)
            .await
            .map(|row| (serde_json::from_slice(&row.value).unwrap(), row.lease))
    }

    /// The live row's value, asserting it carries no lease.
    pub(crate) async fn unleased(&self, key: &BindingKey) -> Option<Value> {
        self.row(key).await.map(|(value, lease)| {
            assert!(lease.is_none(), "row still leased: {lease:?}");
            value
        })
    }

    pub(crate) async fn delete(&self, key: &BindingKey) {
        self.store
            .delete_if(&self.ns, key, &|_| true)
            .await
            .unwrap()
            .expect("row to delete");
    }
}

/// A store wrapper for every backend (binding rows and quarantine): counts calls in flight (so the
/// manual timer can wait for real I/O) and can hold the next compare-and-apply on a [`Gate`].
#[derive(Debug)]
pub(crate) struct GatedStore {
    inner: Arc<dyn BindingStore>,
    quarantine: Arc<dyn QuarantineStore>,
    in_flight: AtomicUsize,
    hold_next_cas: Mutex<Option<Gate>>,
}

impl GatedStore {
    fn new(inner: Arc<dyn BindingStore>, quarantine: Arc<dyn QuarantineStore>) -> Self {
        Self {
            inner,
            quarantine,
            in_flight: AtomicUsize::new(0),
            hold_next_cas: Mutex::new(None),
        }
    }

    pub(crate) fn idle(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0
    }

    /// The next compare-and-apply (by anyone) waits on `gate` before it compares.
    pub(crate) fn hold_next_cas(&self, gate: &Gate) {
        *self.hold_next_cas.lock().unwrap() = Some(gate.clone());
    }

    async fn counted<T>(&self, fut: impl std::future::Future<Output = T>) -> T {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let out = fut.await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        out
    }
}

#[async_trait]
impl BindingStore for GatedStore {
    async fn register_namespace(&self, config: NamespaceConfig) -> Result<(), Error> {
        self.counted(self.inner.register_namespace(config)).await
    }

    async fn lookup(&self, ns: &Namespace, key: &BindingKey) -> Result<Option<StoredRow>, Error> {
        self.counted(self.inner.lookup(ns, key)).await
    }

    async fn observe(&self, ns: &Namespace, key: &BindingKey) -> Result<Observation, Error> {
        self.counted(self.inner.observe(ns, key)).await
    }

    async fn compare_and_apply(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        comparison: &Comparison,
        intent: Intent,
        admission: Admission<'_>,
    ) -> Result<ApplyOutcome, Error> {
        let gate = self.hold_next_cas.lock().unwrap().take();
        if let Some(gate) = gate {
            gate.wait().await;
        }
        self.counted(
            self.inner
                .compare_and_apply(ns, key, comparison, intent, admission),
        )
        .await
    }

    async fn register_if_absent(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        row: RowWrite,
        ttl: Option<Duration>,
    ) -> Result<bool, Error> {
        self.counted(self.inner.register_if_absent(ns, key, row, ttl))
            .await
    }

    async fn delete_if(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error> {
        self.counted(self.inner.delete_if(ns, key, predicate)).await
    }

    async fn scan(
        &self,
        ns: &Namespace,
        after: Option<&BindingKey>,
        limit: usize,
    ) -> Result<Vec<(BindingKey, StoredRow)>, Error> {
        self.counted(self.inner.scan(ns, after, limit)).await
    }

    async fn count(&self, ns: &Namespace) -> Result<u64, Error> {
        self.counted(self.inner.count(ns)).await
    }
}

pub(crate) async fn force_set(
    store: &dyn BindingStore,
    ns: &Namespace,
    key: &BindingKey,
    value: Value,
    lease: Option<(&str, Timestamp)>,
) {
    let seen = store.observe(ns, key).await.unwrap();
    let row = RowWrite {
        value: serde_json::to_vec(&value).unwrap(),
        lease: lease.map(|(token, expires_at)| LeaseWrite {
            token: LeaseToken::new(token).unwrap(),
            expires_at,
            holder: None,
        }),
    };
    let outcome = store
        .compare_and_apply(
            ns,
            key,
            &seen.comparison,
            Intent::Set { row, ttl: None },
            &admit_all,
        )
        .await
        .unwrap();
    assert!(
        matches!(outcome, ApplyOutcome::Applied { .. }),
        "{outcome:?}"
    );
}

/// `transact(key, cur => ({...cur, value}))`, returning true.
pub(crate) async fn set_value(lc: &Lc, key: &BindingKey, value: &str) -> Result<bool, Error> {
    let value = value.to_owned();
    lc.transact(key, TransactOptions::default(), move |current, _| {
        let mut next = current.cloned().unwrap_or_default();
        next.insert("value".into(), json!(value));
        Ok(Applied::write(next, true))
    })
    .await
}

/// A gate a hook can wait on; the test opens it.
#[derive(Clone, Debug)]
pub(crate) struct Gate {
    permits: Arc<Semaphore>,
    entered: Arc<AtomicUsize>,
}

impl Gate {
    pub(crate) fn new() -> Self {
        Self {
            permits: Arc::new(Semaphore::new(0)),
            entered: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Waits until opened (called from a hook).
    pub(crate) async fn wait(&self) {
        self.entered.fetch_add(1, Ordering::SeqCst);
        self.permits.acquire().await.unwrap().forget();
    }

    pub(crate) fn open(&self) {
        self.permits.add_permits(1);
    }

    pub(crate) fn entered(&self) -> usize {
        self.entered.load(Ordering::SeqCst)
    }
}

/// A counter shared with closures.
#[derive(Clone, Default)]
pub(crate) struct Counter(Arc<AtomicUsize>);

impl Counter {
    pub(crate) fn bump(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// An "outcome unknown" error for `key`.
pub(crate) fn unknown(key: &BindingKey) -> Error {
    Error::OutcomeUnknown {
        key: key.clone(),
        message: "native settlement outcome unknown".into(),
        cause: None,
    }
}

/// Asserts the error's text contains `needle`.
#[track_caller]
pub(crate) fn assert_err_contains<T: std::fmt::Debug>(
    result: Result<T, Error>,
    needle: &str,
) -> Error {
    match result {
        Ok(value) => panic!("expected an error containing {needle:?}, got Ok({value:?})"),
        Err(error) => {
            assert!(
                error.to_string().contains(needle),
                "expected {needle:?} in {error}"
            );
            error
        }
    }
}

#[async_trait]
impl QuarantineStore for GatedStore {
    async fn quarantine(&self, entry: QuarantineEntry) -> Result<(), Error> {
        self.counted(self.quarantine.quarantine(entry)).await
    }

    async fn quarantined(
        &self,
        ns: &Namespace,
        key: &BindingKey,
    ) -> Result<Option<QuarantineEntry>, Error> {
        self.counted(self.quarantine.quarantined(ns, key)).await
    }

    async fn release_quarantine(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        operator_reason: &str,
    ) -> Result<bool, Error> {
        self.counted(self.quarantine.release_quarantine(ns, key, operator_reason))
            .await
    }
}
