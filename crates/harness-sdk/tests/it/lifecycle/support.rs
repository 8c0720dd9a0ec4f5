//! The default fixture of reference §3: in-memory store, fake clock and manual timer, lease
//! 65 s / wait 70 s / retry 1 s / renew 21.666 s, `prepare_lease = {...cur, lease}`, the
//! reference error texts.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tether_core::{
    ApplyOutcome, BindingId, BindingKey, BindingStore, Clock, Error, FakeClock, Intent,
    JsonObjectCodec, Lease, LeaseConfig, LeaseToken, LeaseWrite, Namespace, NamespaceConfig,
    RowWrite, SequentialTokens, Timestamp, admit_all,
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

pub(crate) struct Fixture {
    pub(crate) clock: FakeClock,
    pub(crate) timer: Arc<ManualTimer>,
    pub(crate) store: MemoryStore,
    pub(crate) ns: Namespace,
    pub(crate) lc: Lc,
}

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

impl Fixture {
    pub(crate) async fn new() -> Self {
        let clock = FakeClock::new(START);
        let timer = Arc::new(ManualTimer::new(clock.clone()));
        let store = MemoryStore::new(Arc::new(clock.clone()));
        let ns = Namespace::new("lifecycle-test").unwrap();
        store
            .register_namespace(NamespaceConfig::new(ns.clone()))
            .await
            .unwrap();
        let lc = Self::instance(&clock, &timer, &store, &ns, "owner");
        Self {
            clock,
            timer,
            store,
            ns,
            lc,
        }
    }

    fn instance(
        clock: &FakeClock,
        timer: &Arc<ManualTimer>,
        store: &MemoryStore,
        ns: &Namespace,
        tokens: &str,
    ) -> Lc {
        Lifecycle::builder(
            Arc::new(store.clone()),
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
        .quarantine(Arc::new(store.clone()))
        .holder(tokens)
        .build()
        .unwrap()
    }

    /// A second lifecycle instance on the same store (another "process").
    pub(crate) fn peer(&self) -> Lc {
        Self::instance(&self.clock, &self.timer, &self.store, &self.ns, "peer")
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
        force_set(&self.store, &self.ns, key, value, lease).await;
    }

    /// The live row's value and lease.
    pub(crate) async fn row(&self, key: &BindingKey) -> Option<(Value, Option<Lease>)> {
        self.store
            .lookup(&self.ns, key)
            .await
            .unwrap()
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

pub(crate) async fn force_set(
    store: &MemoryStore,
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
#[derive(Clone)]
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
