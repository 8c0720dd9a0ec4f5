//! Scenarios 1–5, 23, 26 and 28 against the SQL store (SQLite file and PostgreSQL), and two
//! lifecycle instances (two pools, as two hosts would have) contending for one key.
//!
//! PostgreSQL tests use a fresh database per test and are skipped with a notice when no server
//! answers (unless `TETHER_REQUIRE_PG=1`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tether_core::{
    BindingStore, Clock as _, Error, FakeClock, JsonObjectCodec, LeaseConfig, LeaseEpoch,
    LeaseWrite, Namespace, NamespaceConfig, SystemClock,
};
use tether_harness_sdk::lifecycle::{
    Applied, EpochFence, LeaseOptions, Lifecycle, TransactOptions,
};
use tether_storage::testing::PgTestDatabase;
use tether_storage::{Store, StoreOptions};

use super::support::{Fixture, Lc, Record, START, key, record};
use super::{deletion, leases};

/// A backend under test, kept alive for the test's duration.
enum Backing {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres(PgTestDatabase),
}

impl Backing {
    async fn cleanup(self) {
        if let Self::Postgres(db) = self {
            db.cleanup().await;
        }
    }
}

async fn open(url: &str, clock: Arc<dyn tether_core::Clock>) -> Store {
    Store::open_with(
        StoreOptions::new(url)
            .clock(clock)
            .synchronous_normal(true)
            .max_connections(4),
    )
    .await
    .unwrap_or_else(|e| panic!("open {url}: {e}"))
}

async fn sqlite_fixture() -> (Fixture, Backing) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/tether.db", dir.path().display());
    let clock = FakeClock::new(START);
    let store = open(&url, Arc::new(clock.clone())).await;
    let fixture = Fixture::over(clock, Arc::new(store.clone()), Arc::new(store), true).await;
    (fixture, Backing::Sqlite(dir))
}

async fn postgres_fixture() -> Option<(Fixture, Backing)> {
    let db = PgTestDatabase::create("harness_lifecycle").await?;
    let clock = FakeClock::new(START);
    let store = open(db.url(), Arc::new(clock.clone())).await;
    let fixture = Fixture::over(clock, Arc::new(store.clone()), Arc::new(store), true).await;
    Some((fixture, Backing::Postgres(db)))
}

macro_rules! on_sql {
    ($($name:ident => $body:path;)*) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() {
                    let (fixture, backing) = super::sqlite_fixture().await;
                    $body(&fixture).await;
                    drop(fixture);
                    backing.cleanup().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() {
                    let Some((fixture, backing)) = super::postgres_fixture().await else {
                        return;
                    };
                    $body(&fixture).await;
                    drop(fixture);
                    backing.cleanup().await;
                }
            )*
        }
    };
}

on_sql! {
    lifecycle_scenario_01_peer_waits_behind_absent_row_lease => super::leases::scenario_01;
    lifecycle_scenario_02_renewed_lease_across_long_request => super::leases::scenario_02;
    lifecycle_scenario_03_lease_released_after_callback_rejects => super::leases::scenario_03;
    lifecycle_scenario_04_fence_at_transaction => super::leases::scenario_04;
    lifecycle_scenario_05_fence_at_heartbeat_successor_untouched => super::leases::scenario_05;
    lifecycle_scenario_23_delete_only_requested_key_rollback_restores => super::deletion::scenario_23;
    lifecycle_scenario_26_rollback_never_overwrites_successor => super::deletion::scenario_26;
    lifecycle_scenario_28_queued_renewal_cannot_recreate_committed_deletion => super::deletion::scenario_28;
}

// Keep the scenario modules referenced from here (the macro uses paths).
#[allow(unused_imports)]
use {deletion as _, leases as _};

const ROUNDS: usize = 200;

/// One contender: a lifecycle over its own pool, real clock and tokio timers.
fn contender(store: Store, ns: &Namespace, name: &str) -> Lc {
    Lifecycle::builder(
        Arc::new(store),
        ns.clone(),
        JsonObjectCodec,
        Arc::new(|current: Option<&Record>, _: &LeaseWrite| {
            Some(current.cloned().unwrap_or_default())
        }),
    )
    .lease_config(LeaseConfig {
        lease_duration: Duration::from_secs(10),
        wait_budget: Duration::from_secs(120),
        retry_interval: Duration::from_millis(2),
        renew_interval: Duration::from_secs(3),
    })
    .holder(name)
    .build()
    .unwrap()
}

/// Shared observations of the contention run.
#[derive(Default)]
struct Ledger {
    inside: AtomicBool,
    rounds: AtomicUsize,
    entries: Mutex<Vec<(String, LeaseEpoch)>>,
    fence: EpochFence,
}

/// Marks an owner inside the contended section until dropped.
struct Inside<'a>(&'a AtomicBool);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// Each contender acquires the key, checks nobody else is inside, passes its epoch through a
/// target-side fence and writes a record whose apply refuses any newer stored epoch.
async fn contend(lc: Lc, name: &'static str, ledger: Arc<Ledger>) -> Result<usize, Error> {
    let k = key("contended");
    let mut mine = 0;
    while ledger.rounds.load(Ordering::SeqCst) < ROUNDS {
        let ledger = ledger.clone();
        let entered = lc
            .with_lease(&k, LeaseOptions::default(), |guard| {
                let lc = lc.clone();
                let k = k.clone();
                async move {
                    if ledger.rounds.load(Ordering::SeqCst) >= ROUNDS {
                        return Ok(false);
                    }
                    assert!(
                        !ledger.inside.swap(true, Ordering::SeqCst),
                        "two owners inside at once"
                    );
                    // Leaves on every path out of the body: a body that fails reports its own
                    // error instead of making the next owner trip over a flag left set.
                    let _inside = Inside(&ledger.inside);
                    let epoch = guard.epoch();
                    ledger
                        .entries
                        .lock()
                        .unwrap()
                        .push((name.to_owned(), epoch));
                    ledger.fence.admit(&k, epoch)?;
                    let round = ledger.rounds.fetch_add(1, Ordering::SeqCst) + 1;
                    lc.transact(&k, TransactOptions::default(), |current, token| {
                        assert!(token.is_some(), "written under the lease");
                        let stored = current
                            .and_then(|c| c.get("epoch"))
                            .and_then(serde_json::Value::as_u64)
                            .unwrap_or(0);
                        if stored > epoch.get() {
                            return Err(Error::other("a stale epoch tried to write"));
                        }
                        Ok(Applied::write(
                            record(json!({"epoch": epoch.get(), "round": round, "by": name})),
                            (),
                        ))
                    })
                    .await?;
                    assert_eq!(guard.verify_fence().await?, epoch);
                    tokio::task::yield_now().await;
                    Ok(true)
                }
            })
            .await?;
        if entered {
            mine += 1;
        }
    }
    Ok(mine)
}

async fn contention(url_a: &str, url_b: &str) {
    let ns = Namespace::new("contention").unwrap();
    let a = open(url_a, Arc::new(SystemClock)).await;
    let b = open(url_b, Arc::new(SystemClock)).await;
    a.register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    b.register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let ledger = Arc::new(Ledger::default());
    let first = tokio::spawn(contend(contender(a.clone(), &ns, "a"), "a", ledger.clone()));
    let second = tokio::spawn(contend(contender(b, &ns, "b"), "b", ledger.clone()));
    let (first, second) = (
        first.await.unwrap().unwrap(),
        second.await.unwrap().unwrap(),
    );
    assert_eq!(first + second, ROUNDS);
    let entries = ledger.entries.lock().unwrap().clone();
    assert_eq!(entries.len(), ROUNDS);
    assert!(
        entries.windows(2).all(|w| w[0].1 < w[1].1),
        "every acquisition got a strictly larger epoch"
    );
    let row = a.lookup(&ns, &key("contended")).await.unwrap().unwrap();
    assert!(
        row.lease
            .as_ref()
            .is_none_or(|l| !l.is_live(tether_core::Clock::now(&SystemClock)))
    );
    let value: serde_json::Value = serde_json::from_slice(&row.value).unwrap();
    assert_eq!(value["round"], ROUNDS);
    assert_eq!(value["epoch"], entries.last().unwrap().1.get());
}

/// Two lifecycle instances over one SQLite file (two pools) contend for one key 200 times:
/// never both inside, every write fenced by its epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_two_instances_contend_on_one_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/tether.db", dir.path().display());
    contention(&url, &url).await;
}

/// The same over PostgreSQL with two pools, as two hosts would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_two_instances_contend_on_postgres() {
    let Some(db) = PgTestDatabase::create("harness_contention").await else {
        return;
    };
    contention(db.url(), db.url()).await;
    db.cleanup().await;
}

/// A lifecycle directly over `store` (no test wrapper, so the store's single-statement writes
/// and reported rows are in play), on the fake clock, with a lease no heartbeat renews during
/// the test.
fn direct(store: &Store, ns: &Namespace, clock: &FakeClock) -> Lc {
    Lifecycle::builder(
        Arc::new(store.clone()),
        ns.clone(),
        JsonObjectCodec,
        Arc::new(|current: Option<&Record>, _: &LeaseWrite| {
            Some(current.cloned().unwrap_or_default())
        }),
    )
    .lease_config(LeaseConfig {
        lease_duration: Duration::from_secs(60),
        wait_budget: Duration::from_secs(1),
        retry_interval: Duration::from_millis(5),
        renew_interval: Duration::from_secs(50),
    })
    .clock(Arc::new(clock.clone()))
    .holder("reuse")
    .build()
    .unwrap()
}

/// Runs `body` over a store on a SQLite file with a fake clock.
async fn on_fake_clock_sqlite<Fut: std::future::Future<Output = ()>>(
    body: impl FnOnce(Store, FakeClock) -> Fut,
) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/tether.db", dir.path().display());
    let clock = FakeClock::new(START);
    let store = open(&url, Arc::new(clock.clone())).await;
    body(store, clock).await;
}

/// Runs `body` over a store on a fresh PostgreSQL database named after `name`, with a fake
/// clock (skipped when no server answers, unless `TETHER_REQUIRE_PG=1`).
async fn on_fake_clock_postgres<Fut: std::future::Future<Output = ()>>(
    name: &str,
    body: impl FnOnce(Store, FakeClock) -> Fut,
) {
    let Some(db) = PgTestDatabase::create(name).await else {
        return;
    };
    let clock = FakeClock::new(START);
    let store = open(db.url(), Arc::new(clock.clone())).await;
    body(store.clone(), clock).await;
    let _ = store.close().await;
    db.cleanup().await;
}

/// An owner's writes start from the row its previous write left (no read in between). That
/// remembered row goes stale when someone else writes: after a renewal it had not seen (its
/// remembered lease expiry has passed, the stored one has not) the owner still writes, and
/// after a takeover its write is refused, fenced and reported as a lost lease.
async fn reused_observation_is_confirmed_by_the_store(store: Store, clock: FakeClock) {
    let ns = Namespace::new("reuse").unwrap();
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let lc = direct(&store, &ns, &clock);
    let k = &key("k");
    let write = |n: u64| {
        let lc = &lc;
        async move {
            lc.transact(k, TransactOptions::default(), move |_, _| {
                Ok(Applied::write(record(json!({"n": n})), ()))
            })
            .await
        }
    };
    let result = lc
        .with_lease(k, LeaseOptions::default(), |guard| {
            let (store, ns, clock, write) = (&store, &ns, &clock, &write);
            async move {
                let start = store.observe(ns, k).await?.comparison.revision().unwrap();
                for n in 1..=3 {
                    write(n).await?;
                }
                let row = store.lookup(ns, k).await?.unwrap();
                assert_eq!(
                    row.revision.get(),
                    start.get() + 3,
                    "one write per transact"
                );

                // A renewal the owner did not make (as the batched driver does), then time
                // passes beyond the expiry the owner last wrote but not the renewed one.
                let renewed = store
                    .renew_leases(
                        ns,
                        &[tether_core::LeaseRenewal {
                            key: k.clone(),
                            token: guard.token().clone(),
                            expires_at: clock.now() + Duration::from_secs(180),
                        }],
                        clock.now(),
                    )
                    .await?;
                assert_eq!(renewed, [true]);
                clock.advance(Duration::from_secs(90));
                write(4).await?;
                assert_eq!(
                    store.lookup(ns, k).await?.unwrap().value,
                    serde_json::to_vec(&record(json!({"n": 4}))).unwrap()
                );

                // A successor takes the row over behind the owner's back.
                let seen = store.observe(ns, k).await?;
                let mut takeover = seen.row.clone().unwrap().to_write();
                takeover.lease = Some(LeaseWrite {
                    token: tether_core::LeaseToken::new("successor-token").unwrap(),
                    expires_at: clock.now() + Duration::from_secs(60),
                    holder: Some("successor".into()),
                });
                store
                    .compare_and_apply(
                        ns,
                        k,
                        &seen.comparison,
                        tether_core::Intent::Set {
                            row: takeover,
                            ttl: None,
                        },
                        &tether_core::admit_all,
                    )
                    .await?;
                let stale = write(5).await;
                assert!(
                    matches!(stale, Err(Error::LostLease { .. })),
                    "a write after the takeover is refused: {stale:?}"
                );
                Ok(())
            }
        })
        .await;
    assert!(matches!(result, Err(Error::LostLease { .. })), "{result:?}");
    let row = store.lookup(&ns, k).await.unwrap().unwrap();
    assert_eq!(
        row.lease.unwrap().token.as_str(),
        "successor-token",
        "the successor keeps the row"
    );
    assert_eq!(
        row.value,
        serde_json::to_vec(&record(json!({"n": 4}))).unwrap(),
        "the stale write changed nothing"
    );
    let events = tether_storage::StoreAdmin::lease_events(
        &store,
        &tether_storage::LeaseEventQuery::for_key(ns.clone(), k.clone(), 100),
    )
    .await
    .unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.kind == tether_storage::LeaseEventKind::Fenced),
        "the refused write is recorded as fenced: {events:?}"
    );
}

#[tokio::test]
async fn lifecycle_reused_observation_is_confirmed_by_the_store_sqlite() {
    on_fake_clock_sqlite(reused_observation_is_confirmed_by_the_store).await;
}

#[tokio::test]
async fn lifecycle_reused_observation_is_confirmed_by_the_store_postgres() {
    on_fake_clock_postgres(
        "harness_reuse",
        reused_observation_is_confirmed_by_the_store,
    )
    .await;
}

/// An acquisition after this instance released the key starts from the row the release left
/// (no read). That row goes stale when another instance takes the key: the acquisition is then
/// refused by the store's comparison and waits behind the live foreign lease like any other.
async fn free_row_after_release_is_confirmed_by_the_store(store: Store, clock: FakeClock) {
    use tether_storage::fault_injection::FaultInjectingStore;
    let ns = Namespace::new("free-row").unwrap();
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let counted = Arc::new(FaultInjectingStore::new(Arc::new(store.clone())));
    let lc: Lc = Lifecycle::builder(
        counted.clone(),
        ns.clone(),
        JsonObjectCodec,
        Arc::new(|current: Option<&Record>, _: &LeaseWrite| {
            Some(current.cloned().unwrap_or_default())
        }),
    )
    .lease_config(LeaseConfig {
        lease_duration: Duration::from_secs(60),
        wait_budget: Duration::ZERO,
        retry_interval: Duration::from_millis(5),
        renew_interval: Duration::from_secs(50),
    })
    .clock(Arc::new(clock.clone()))
    .holder("free-row")
    .build()
    .unwrap();
    let k = &key("k");
    let cycle = || {
        lc.with_lease(k, LeaseOptions::default(), |guard| async move {
            Ok(guard.epoch())
        })
    };

    let first = cycle().await.unwrap();
    let reads = counted.stats().reads;
    let second = cycle().await.unwrap();
    assert_eq!(
        counted.stats().reads,
        reads,
        "the second acquisition started from the released row"
    );
    assert!(second > first, "{second:?} > {first:?}");

    // Another instance takes the key behind this one's back.
    let seen = store.observe(&ns, k).await.unwrap();
    let mut takeover = seen.row.clone().unwrap().to_write();
    takeover.lease = Some(LeaseWrite {
        token: tether_core::LeaseToken::new("foreign-token").unwrap(),
        expires_at: clock.now() + Duration::from_secs(60),
        holder: Some("foreign".into()),
    });
    let taken = store
        .compare_and_apply(
            &ns,
            k,
            &seen.comparison,
            tether_core::Intent::Set {
                row: takeover,
                ttl: None,
            },
            &tether_core::admit_all,
        )
        .await
        .unwrap();
    assert!(
        matches!(taken, tether_core::ApplyOutcome::Applied { .. }),
        "{taken:?}"
    );
    let refused = cycle().await;
    assert!(
        matches!(refused, Err(Error::LeaseTimeout { .. })),
        "the stale free row does not win over the live foreign lease: {refused:?}"
    );
    let row = store.lookup(&ns, k).await.unwrap().unwrap();
    assert_eq!(row.lease.unwrap().token.as_str(), "foreign-token");
}

#[tokio::test]
async fn lifecycle_free_row_after_release_is_confirmed_by_the_store_sqlite() {
    on_fake_clock_sqlite(free_row_after_release_is_confirmed_by_the_store).await;
}

#[tokio::test]
async fn lifecycle_free_row_after_release_is_confirmed_by_the_store_postgres() {
    on_fake_clock_postgres(
        "harness_free_row",
        free_row_after_release_is_confirmed_by_the_store,
    )
    .await;
}
