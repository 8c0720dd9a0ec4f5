//! Group commit on the SQL store, on SQLite and PostgreSQL: concurrent writes gathered into
//! one batch keep their own outcomes, a batch of single-statement writes is one statement on
//! PostgreSQL, a failed COMMIT reports an unknown outcome to exactly the writes it carried, a refused or cancelled write leaves its neighbours alone, and many
//! owners interleaved through the batcher behave like a model of compare-and-swap registers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sea_orm::ConnectionTrait;
use tether_core::{
    ApplyOutcome, BindingKey, BindingStore, Error, Intent, Namespace, NamespaceConfig,
    StoreErrorKind, admit_all,
};
use tether_storage::testing::PgTestDatabase;
use tether_storage::{CommitFault, LeaseEventKind, LeaseEventQuery, Store, StoreAdmin};

use crate::support::{START, key, leased, open_store, sqlite_store, text, unique_ns, value};

fn set(row: tether_core::RowWrite) -> Intent {
    Intent::Set { row, ttl: None }
}

async fn namespace(store: &Store, label: &str) -> Namespace {
    let ns = unique_ns(label);
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    ns
}

/// Runs `check` on a SQLite file store and, when a server answers, a PostgreSQL store.
async fn on_both<F, Fut>(label: &str, check: F)
where
    F: Fn(Store) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (sqlite, _dir) = sqlite_store().await;
    check(sqlite).await;
    if let Some(db) = PgTestDatabase::create(label).await {
        let store = open_store(db.url()).await;
        check(store.clone()).await;
        store.close().await.unwrap();
        db.cleanup().await;
    }
}

/// An acquisition of `k` (absent before) by `token`, through the store's observed-write path.
async fn acquire(
    store: &Store,
    ns: &Namespace,
    k: &BindingKey,
    token: &str,
) -> Result<ApplyOutcome, Error> {
    let seen = store.observe(ns, k).await?;
    store
        .apply_observed(
            ns,
            k,
            &seen,
            set(leased(token, token, START + Duration::from_secs(60))),
            &admit_all,
        )
        .await
        .map(|o| o.outcome)
}

/// Lets the spawned writers join the held batch.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_gathers_concurrent_writes_and_each_keeps_its_outcome() {
    on_both("group_outcomes", |store| async move {
        let ns = namespace(&store, "group").await;
        let before = store.group_commit_stats();
        let hold = store.hold_group_commit().await;
        let mut own = Vec::new();
        for i in 0..10 {
            let (store, ns) = (store.clone(), ns.clone());
            own.push(tokio::spawn(async move {
                acquire(&store, &ns, &key(&format!("own-{i}")), &format!("tok-{i}")).await
            }));
        }
        // Three writers race for one key from the same observation: one applies.
        let shared = key("shared");
        let seen = store.observe(&ns, &shared).await.unwrap();
        let mut racers = Vec::new();
        for i in 0..3 {
            let (store, ns, shared, seen) =
                (store.clone(), ns.clone(), shared.clone(), seen.clone());
            racers.push(tokio::spawn(async move {
                store
                    .compare_and_apply(
                        &ns,
                        &shared,
                        &seen.comparison,
                        set(value(&format!("racer-{i}"))),
                        &admit_all,
                    )
                    .await
            }));
        }
        // A write refused by its own admission, in the middle of the batch.
        let refused = {
            let (store, ns) = (store.clone(), ns.clone());
            tokio::spawn(async move {
                let k = key("refused");
                let seen = store.observe(&ns, &k).await.unwrap();
                store
                    .compare_and_apply(&ns, &k, &seen.comparison, set(value("no")), &|| {
                        Err(Error::revoked("refused by the test"))
                    })
                    .await
            })
        };
        settle().await;
        assert_eq!(
            store.group_commit_stats(),
            before,
            "nothing committed while held"
        );
        drop(hold);

        for (i, task) in own.into_iter().enumerate() {
            let outcome = task.await.unwrap().unwrap();
            assert!(
                matches!(outcome, ApplyOutcome::Applied { epoch: Some(_), .. }),
                "{outcome:?}"
            );
            let row = store
                .lookup(&ns, &key(&format!("own-{i}")))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(row.lease.unwrap().token.as_str(), format!("tok-{i}"));
        }
        let mut applied = 0;
        for task in racers {
            match task.await.unwrap().unwrap() {
                ApplyOutcome::Applied { .. } => applied += 1,
                ApplyOutcome::Conflict { current } => {
                    assert!(text(current.row.as_ref().unwrap()).contains("racer-"));
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(applied, 1, "exactly one racer applies");
        let err = refused.await.unwrap().unwrap_err();
        assert!(matches!(err, Error::Revoked { .. }), "{err:?}");
        assert!(store.lookup(&ns, &key("refused")).await.unwrap().is_none());

        let after = store.group_commit_stats();
        assert!(after.batches > before.batches, "{after:?}");
        assert!(
            after.largest_batch >= 10,
            "the held writes went in one batch: {after:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_a_failed_commit_reports_unknown_to_exactly_the_writes_it_carried() {
    on_both("group_commit_fault", |store| async move {
        for fault in [CommitFault::Fail, CommitFault::FailAfterCommit] {
            let ns = namespace(&store, "group-fault").await;
            // A row whose observation goes stale before the batch: its writer writes nothing.
            let stale_key = key("stale");
            assert!(
                store
                    .register_if_absent(&ns, &stale_key, value("v0"), None)
                    .await
                    .unwrap()
            );
            let stale = store.observe(&ns, &stale_key).await.unwrap();
            let fresh = store.observe(&ns, &stale_key).await.unwrap();
            store
                .compare_and_apply(
                    &ns,
                    &stale_key,
                    &fresh.comparison,
                    set(value("v1")),
                    &admit_all,
                )
                .await
                .unwrap();

            let hold = store.hold_group_commit().await;
            let mut writers = Vec::new();
            for i in 0..6 {
                let (store, ns) = (store.clone(), ns.clone());
                writers.push(tokio::spawn(async move {
                    acquire(&store, &ns, &key(&format!("w-{i}")), &format!("t-{i}")).await
                }));
            }
            let stale_writer = {
                let (store, ns, k) = (store.clone(), ns.clone(), stale_key.clone());
                tokio::spawn(async move {
                    store
                        .compare_and_apply(
                            &ns,
                            &k,
                            &stale.comparison,
                            set(value("late")),
                            &admit_all,
                        )
                        .await
                })
            };
            settle().await;
            store.arm_commit_fault(fault);
            drop(hold);

            for (i, task) in writers.into_iter().enumerate() {
                let k = key(&format!("w-{i}"));
                match task.await.unwrap() {
                    Err(Error::OutcomeUnknown { key: named, .. }) => assert_eq!(named, k),
                    other => panic!("{fault:?}: writer {i} got {other:?}"),
                }
                let row = store.lookup(&ns, &k).await.unwrap();
                assert_eq!(
                    row.is_some(),
                    fault == CommitFault::FailAfterCommit,
                    "{fault:?}: all or nothing"
                );
            }
            // The stale writer wrote nothing: not an unknown outcome, a retryable refusal.
            match stale_writer.await.unwrap() {
                Err(Error::Store {
                    kind: StoreErrorKind::Unavailable { .. },
                }) => {}
                other => panic!("{fault:?}: the stale writer got {other:?}"),
            }
            assert!(text(&store.lookup(&ns, &stale_key).await.unwrap().unwrap()).contains("v1"));
            // Nothing is replayed, and the store keeps working.
            store.disarm_commit_faults();
            let outcome = acquire(&store, &ns, &key("after"), "after").await.unwrap();
            assert!(matches!(outcome, ApplyOutcome::Applied { .. }));
        }
    })
    .await;
}

/// Registers `n` live rows `{label}-{i}` in `ns` (no lease), so that acquisitions of them are
/// single-statement writes over an observed live row.
async fn live_rows(store: &Store, ns: &Namespace, label: &str, n: usize) -> Vec<BindingKey> {
    let mut keys = Vec::new();
    for i in 0..n {
        let k = key(&format!("{label}-{i}"));
        assert!(
            store
                .register_if_absent(ns, &k, value("v0"), None)
                .await
                .unwrap()
        );
        keys.push(k);
    }
    keys
}

/// The `acquired` events of `k`.
async fn acquired_events(
    store: &Store,
    ns: &Namespace,
    k: &BindingKey,
) -> Vec<tether_storage::LeaseEvent> {
    store
        .lease_events(&LeaseEventQuery::for_key(ns.clone(), k.clone(), 100))
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == LeaseEventKind::Acquired)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_single_statement_writes_commit_in_one_statement() {
    on_both("group_one_statement", |store| async move {
        let postgres = store.connection().get_database_backend() == sea_orm::DbBackend::Postgres;
        let ns = namespace(&store, "group-one").await;
        let keys = live_rows(&store, &ns, "one", 8).await;

        // Acquisitions of live rows on distinct keys: each hands one conditional write to
        // the batch, and on PostgreSQL the batch writes them, with their lease events, in
        // one statement in autocommit.
        let before = store.group_commit_stats();
        let hold = store.hold_group_commit().await;
        let mut writers = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let (store, ns, k) = (store.clone(), ns.clone(), k.clone());
            writers.push(tokio::spawn(async move {
                acquire(&store, &ns, &k, &format!("one-{i}")).await
            }));
        }
        settle().await;
        drop(hold);
        for (i, (task, k)) in writers.into_iter().zip(&keys).enumerate() {
            let outcome = task.await.unwrap().unwrap();
            let ApplyOutcome::Applied {
                epoch: Some(epoch), ..
            } = outcome
            else {
                panic!("{k}: {outcome:?}");
            };
            let lease = store.lookup(&ns, k).await.unwrap().unwrap().lease.unwrap();
            assert_eq!(lease.token.as_str(), format!("one-{i}"));
            assert_eq!(lease.epoch, epoch, "{k}: the epoch reported is the row's");
            // Exactly one `acquired` event, carrying the epoch the statement counted up.
            let events = acquired_events(&store, &ns, k).await;
            assert_eq!(events.len(), 1, "{k}: {events:?}");
            assert_eq!(events[0].epoch, Some(epoch), "{k}: {events:?}");
        }
        let after = store.group_commit_stats();
        assert!(after.largest_batch >= 8, "one batch: {after:?}");
        assert_eq!(
            after.single_statement_batches - before.single_statement_batches,
            u64::from(postgres),
            "one statement on PostgreSQL, a transaction on SQLite: {after:?}"
        );

        // Two writes of one key from the same observation need two rounds: the batch begins
        // its transaction after all, and the later write finds the row moved.
        let shared = live_rows(&store, &ns, "one-shared", 1).await.remove(0);
        let seen_live = store.observe(&ns, &shared).await.unwrap();
        let before = store.group_commit_stats();
        let hold = store.hold_group_commit().await;
        let mut racers = Vec::new();
        for i in 0..2 {
            let (store, ns, shared, seen) =
                (store.clone(), ns.clone(), shared.clone(), seen_live.clone());
            racers.push(tokio::spawn(async move {
                store
                    .apply_observed(
                        &ns,
                        &shared,
                        &seen,
                        set(leased(
                            &format!("racer-{i}"),
                            &format!("racer-{i}"),
                            START + Duration::from_secs(60),
                        )),
                        &admit_all,
                    )
                    .await
                    .map(|o| o.outcome)
            }));
        }
        settle().await;
        drop(hold);
        let mut applied = 0;
        for task in racers {
            match task.await.unwrap().unwrap() {
                ApplyOutcome::Applied { .. } => applied += 1,
                ApplyOutcome::Conflict { current } => {
                    assert!(current.row.unwrap().lease.is_some(), "the winner's lease");
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            applied, 1,
            "exactly one of the two writes of one key applies"
        );
        assert_eq!(acquired_events(&store, &ns, &shared).await.len(), 1);
        let after = store.group_commit_stats();
        assert_eq!(
            after.single_statement_batches, before.single_statement_batches,
            "two rounds are written in a transaction: {after:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_a_failed_single_statement_batch_reports_unknown_to_every_write() {
    on_both("group_one_fault", |store| async move {
        for fault in [CommitFault::Fail, CommitFault::FailAfterCommit] {
            let ns = namespace(&store, "group-one-fault").await;
            let keys = live_rows(&store, &ns, "fault", 6).await;
            let hold = store.hold_group_commit().await;
            let mut writers = Vec::new();
            for (i, k) in keys.iter().enumerate() {
                let (store, ns, k) = (store.clone(), ns.clone(), k.clone());
                writers.push(tokio::spawn(async move {
                    acquire(&store, &ns, &k, &format!("f-{i}")).await
                }));
            }
            settle().await;
            // On PostgreSQL the batch's one statement stands for its COMMIT; on SQLite the
            // batch commits a transaction. Either way the fault hits the batch's end.
            store.arm_commit_fault(fault);
            drop(hold);
            for (task, k) in writers.into_iter().zip(&keys) {
                match task.await.unwrap() {
                    Err(Error::OutcomeUnknown { key: named, .. }) => assert_eq!(&named, k),
                    other => panic!("{fault:?}: {k} got {other:?}"),
                }
                let leased = store.lookup(&ns, k).await.unwrap().unwrap().lease.is_some();
                let saved = fault == CommitFault::FailAfterCommit;
                assert_eq!(leased, saved, "{fault:?}: {k}: all or nothing");
                let events = acquired_events(&store, &ns, k).await;
                assert_eq!(
                    events.len(),
                    usize::from(saved),
                    "{fault:?}: {k}: {events:?}"
                );
            }
            store.disarm_commit_faults();
            // Nothing is replayed, and the store keeps working.
            let outcome = acquire(&store, &ns, &key("fault-after"), "after")
                .await
                .unwrap();
            assert!(matches!(outcome, ApplyOutcome::Applied { .. }));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_a_handed_over_write_survives_its_batch_opener_being_dropped() {
    on_both("group_opener_dropped", |store| async move {
        let ns = namespace(&store, "group-opener").await;
        let keys = live_rows(&store, &ns, "opener", 2).await;
        let hold = store.hold_group_commit().await;
        // The opener joins first and waits for the slot the test holds; the second write
        // joins its batch, hands its write over and waits for the batch's end.
        let opener = {
            let (store, ns, k) = (store.clone(), ns.clone(), keys[0].clone());
            tokio::spawn(async move { acquire(&store, &ns, &k, "opener").await })
        };
        settle().await;
        let handed = {
            let (store, ns, k) = (store.clone(), ns.clone(), keys[1].clone());
            tokio::spawn(async move { acquire(&store, &ns, &k, "handed").await })
        };
        settle().await;
        opener.abort();
        assert!(opener.await.unwrap_err().is_cancelled());
        drop(hold);
        let outcome = handed.await.unwrap().unwrap();
        assert!(
            matches!(outcome, ApplyOutcome::Applied { .. }),
            "{outcome:?}"
        );
        let lease = store.lookup(&ns, &keys[1]).await.unwrap().unwrap().lease;
        assert_eq!(lease.unwrap().token.as_str(), "handed");
        assert_eq!(acquired_events(&store, &ns, &keys[1]).await.len(), 1);
        // The opener never wrote.
        assert!(
            store
                .lookup(&ns, &keys[0])
                .await
                .unwrap()
                .unwrap()
                .lease
                .is_none()
        );
        assert!(acquired_events(&store, &ns, &keys[0]).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_a_cancelled_writer_leaves_its_batch_intact() {
    on_both("group_cancel", |store| async move {
        let ns = namespace(&store, "group-cancel").await;
        let hold = store.hold_group_commit().await;
        let mut writers = Vec::new();
        for i in 0..5 {
            let (store, ns) = (store.clone(), ns.clone());
            writers.push(tokio::spawn(async move {
                acquire(&store, &ns, &key(&format!("c-{i}")), &format!("c-{i}")).await
            }));
        }
        let cancelled = {
            let (store, ns) = (store.clone(), ns.clone());
            tokio::spawn(async move { acquire(&store, &ns, &key("gone"), "gone").await })
        };
        settle().await;
        cancelled.abort();
        assert!(cancelled.await.unwrap_err().is_cancelled());
        drop(hold);
        for task in writers {
            assert!(matches!(
                task.await.unwrap().unwrap(),
                ApplyOutcome::Applied { .. }
            ));
        }
        assert!(store.lookup(&ns, &key("gone")).await.unwrap().is_none());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_a_lone_owner_never_waits_for_company() {
    on_both("group_lone", |store| async move {
        let ns = namespace(&store, "group-lone").await;
        let turns = |store: &Store| store.group_commit_stats().joining_turns;
        // One owner writing alone: every write goes alone, and none waits for company (a
        // yield hands the task to another worker thread on a multi-threaded runtime).
        let before = store.group_commit_stats();
        for i in 0..20 {
            let outcome = acquire(&store, &ns, &key(&format!("lone-{i}")), "lone").await;
            assert!(
                matches!(outcome, Ok(ApplyOutcome::Applied { .. })),
                "{outcome:?}"
            );
        }
        let after = store.group_commit_stats();
        assert_eq!(after.solo_writes - before.solo_writes, 20, "{after:?}");
        assert_eq!(after.joining_turns, before.joining_turns, "{after:?}");

        // Writers that find the slot taken share a batch (all of them joined while it was
        // held, so its first member had no one left to wait for).
        let hold = store.hold_group_commit().await;
        let mut writers = Vec::new();
        for i in 0..5 {
            let (store, ns) = (store.clone(), ns.clone());
            writers.push(tokio::spawn(async move {
                acquire(&store, &ns, &key(&format!("crowd-{i}")), "crowd").await
            }));
        }
        settle().await;
        drop(hold);
        for task in writers {
            let outcome = task.await.unwrap();
            assert!(
                matches!(outcome, Ok(ApplyOutcome::Applied { .. })),
                "{outcome:?}"
            );
        }
        let crowd = store.group_commit_stats();
        assert!(crowd.batches > after.batches, "{crowd:?}");

        // After a shared batch the next write still waits for company once; finding none,
        // it writes alone, and the write after it no longer waits.
        let first = turns(&store);
        acquire(&store, &ns, &key("after-1"), "after")
            .await
            .unwrap();
        assert_eq!(turns(&store), first + 1);
        acquire(&store, &ns, &key("after-2"), "after")
            .await
            .unwrap();
        acquire(&store, &ns, &key("after-3"), "after")
            .await
            .unwrap();
        assert_eq!(turns(&store), first + 1);
    })
    .await;
}

/// Makes every insert or update of a binding row whose key contains `poison` fail inside the
/// database (a trigger raising an error), so a write can fail mid-batch for real.
async fn poison_rows(store: &Store) {
    use sea_orm::DbBackend;
    let sql = match store.connection().get_database_backend() {
        DbBackend::Postgres => {
            "CREATE OR REPLACE FUNCTION tether_test_poison() RETURNS trigger AS $$ \
             BEGIN IF NEW.key LIKE '%poison%' THEN RAISE EXCEPTION 'poisoned row'; END IF; \
             RETURN NEW; END $$ LANGUAGE plpgsql; \
             CREATE TRIGGER tether_test_poison BEFORE INSERT OR UPDATE ON binding_records \
             FOR EACH ROW EXECUTE FUNCTION tether_test_poison();"
        }
        _ => {
            "CREATE TRIGGER tether_test_poison_insert BEFORE INSERT ON binding_records \
             WHEN NEW.key LIKE '%poison%' BEGIN SELECT RAISE(ABORT, 'poisoned row'); END; \
             CREATE TRIGGER tether_test_poison_update BEFORE UPDATE ON binding_records \
             WHEN NEW.key LIKE '%poison%' BEGIN SELECT RAISE(ABORT, 'poisoned row'); END;"
        }
    };
    schema_change(store, sql).await;
}

async fn cure_rows(store: &Store) {
    use sea_orm::DbBackend;
    let sql = match store.connection().get_database_backend() {
        DbBackend::Postgres => "DROP TRIGGER tether_test_poison ON binding_records",
        _ => "DROP TRIGGER tether_test_poison_insert; DROP TRIGGER tether_test_poison_update",
    };
    schema_change(store, sql).await;
}

/// Runs `sql` (a change of the schema, in one or more statements). On SQLite it runs in a host
/// transaction, on the store's writer connection like every other write: a pooled connection
/// that has not read since another connection dropped a trigger still has the trigger in its
/// copy of the schema, and SQLite answers its `CREATE TRIGGER` with "already exists".
async fn schema_change(store: &Store, sql: &str) {
    use tether_storage::{HostBackend as _, HostTransaction as _};
    if store.connection().get_database_backend() == sea_orm::DbBackend::Postgres {
        store.connection().execute_unprepared(sql).await.unwrap();
        return;
    }
    let tx = store.begin_host().await.unwrap();
    tx.sql().execute_unprepared(sql).await.unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_a_statement_failing_mid_batch_acknowledges_only_what_was_saved() {
    on_both("group_mid_batch", |store| async move {
        // Fresh rows are written by several statements (a multi-statement member); live rows
        // by one conditional statement each, which the batch writes together (on SQLite a
        // failed statement undoes only itself, and its writes are retried one by one).
        for existing in [false, true] {
            let ns = namespace(&store, "group-mid").await;
            let names: Vec<String> = (0..7)
                .map(|i| {
                    if i == 3 {
                        format!("poison-{existing}")
                    } else {
                        format!("mid-{existing}-{i}")
                    }
                })
                .collect();
            if existing {
                for name in &names {
                    assert!(
                        store
                            .register_if_absent(&ns, &key(name), value("v0"), None)
                            .await
                            .unwrap()
                    );
                }
            }
            poison_rows(&store).await;
            let before = store.group_commit_stats();
            let hold = store.hold_group_commit().await;
            let mut writers = Vec::new();
            for name in &names {
                let (store, ns, name) = (store.clone(), ns.clone(), name.clone());
                writers.push((
                    name.clone(),
                    tokio::spawn(async move { acquire(&store, &ns, &key(&name), &name).await }),
                ));
                // Spread the writers over the batch, the poisoned one in the middle.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            settle().await;
            drop(hold);

            let mut failed = Vec::new();
            for (name, task) in writers {
                let done = task.await.unwrap();
                let row = store.lookup(&ns, &key(&name)).await.unwrap();
                let saved = row
                    .as_ref()
                    .and_then(|r| r.lease.as_ref())
                    .is_some_and(|l| l.token.as_str() == name);
                match done {
                    Ok(outcome) => {
                        assert!(
                            matches!(outcome, ApplyOutcome::Applied { .. }),
                            "{name}: {outcome:?}"
                        );
                        assert!(saved, "{name} was acknowledged but not saved");
                    }
                    Err(error) => {
                        assert!(!saved, "{name} failed ({error}) but was saved");
                        assert!(
                            !matches!(error, Error::OutcomeUnknown { .. }),
                            "{name}: a failed statement before the COMMIT is a known outcome: {error:?}"
                        );
                        if existing {
                            assert!(text(row.as_ref().unwrap()).contains("v0"), "{name}");
                        } else {
                            assert!(row.is_none(), "{name}: half-applied");
                        }
                        failed.push(name);
                    }
                }
            }
            assert!(
                failed.contains(&format!("poison-{existing}")),
                "the poisoned write failed: {failed:?}"
            );
            // Each acknowledged acquisition left exactly one `acquired` event (also when its
            // round's statement failed and it was written again by itself), a failed one none.
            for name in &names {
                let acquired = acquired_events(&store, &ns, &key(name)).await;
                let expected = usize::from(!failed.contains(name));
                assert_eq!(acquired.len(), expected, "{name}: {acquired:?}");
            }
            // PostgreSQL aborts the transaction on a failed statement, and a multi-statement
            // write may have been half applied: the whole batch is rolled back. On SQLite a
            // failed single statement undid only itself; what ran before it stays committed.
            let sqlite = store.connection().get_database_backend() == sea_orm::DbBackend::Sqlite;
            if sqlite && existing {
                // The live rows' single statements are written together; the one the database
                // refuses fails alone and its neighbours are saved.
                assert_eq!(
                    failed,
                    vec![format!("poison-{existing}")],
                    "only the poisoned write failed"
                );
            } else {
                assert_eq!(failed.len(), names.len(), "the batch was rolled back: {failed:?}");
            }
            let after = store.group_commit_stats();
            assert!(
                after.largest_batch >= 2 && after.batches > before.batches,
                "the writes met in a batch: {after:?}"
            );

            // Nothing is replayed: once the cause is gone, every failed write is written again
            // by its owner, exactly once, and the store keeps working.
            cure_rows(&store).await;
            for name in &failed {
                let outcome = acquire(&store, &ns, &key(name), name).await.unwrap();
                assert!(matches!(outcome, ApplyOutcome::Applied { .. }), "{name}");
            }
            for name in &names {
                let row = store.lookup(&ns, &key(name)).await.unwrap().unwrap();
                assert_eq!(row.lease.unwrap().token.as_str(), name);
            }
        }
    })
    .await;
}

/// One write of the model test: key index, and what to write.
#[derive(Debug, Clone)]
enum ModelOp {
    Plain(usize, u8),
    Acquire(usize, u8),
    Release(usize),
}

impl ModelOp {
    fn key(&self) -> usize {
        match *self {
            Self::Plain(k, _) | Self::Acquire(k, _) | Self::Release(k) => k,
        }
    }
}

fn model_op() -> impl Strategy<Value = ModelOp> {
    prop_oneof![
        (0..4usize, any::<u8>()).prop_map(|(k, v)| ModelOp::Plain(k, v)),
        (0..4usize, any::<u8>()).prop_map(|(k, t)| ModelOp::Acquire(k, t)),
        (0..4usize).prop_map(ModelOp::Release),
    ]
}

/// Runs `waves` against `store`: each wave observes every key, then runs its writes
/// concurrently from those observations (gathered in one batch when `held`), and checks them
/// against the model: per key, exactly one write of the wave applies, the row is what it
/// wrote, revisions only grow, and every acquisition gets an epoch above all earlier ones.
async fn run_model(store: &Store, waves: Vec<(bool, Vec<ModelOp>)>) {
    let ns = namespace(store, "group-model").await;
    let mut last_revision: BTreeMap<usize, u64> = BTreeMap::new();
    let mut last_epoch: BTreeMap<usize, u64> = BTreeMap::new();
    for (wave, (held, ops)) in waves.into_iter().enumerate() {
        let mut seen = BTreeMap::new();
        for k in 0..4 {
            seen.insert(
                k,
                store.observe(&ns, &key(&format!("m-{k}"))).await.unwrap(),
            );
        }
        let hold = if held {
            Some(store.hold_group_commit().await)
        } else {
            None
        };
        let mut tasks = Vec::new();
        for (n, op) in ops.iter().cloned().enumerate() {
            let (store, ns) = (store.clone(), ns.clone());
            let observed = seen[&op.key()].clone();
            tasks.push(tokio::spawn(async move {
                let row = match op {
                    ModelOp::Plain(_, v) => value(&format!("plain-{v}-{n}")),
                    // A token of its own (the wave in it): the same token again would be a
                    // write under the lease it holds, which keeps the epoch.
                    ModelOp::Acquire(_, t) => leased(
                        &format!("acq-{n}"),
                        &format!("tok-{t}-{wave}-{n}"),
                        START + Duration::from_secs(60),
                    ),
                    ModelOp::Release(_) => value(&format!("released-{n}")),
                };
                let k = key(&format!("m-{}", op.key()));
                let done = store
                    .apply_observed(&ns, &k, &observed, set(row), &admit_all)
                    .await;
                (op, n, done)
            }));
        }
        if hold.is_some() {
            settle().await;
        }
        drop(hold);
        let mut applied: BTreeMap<usize, (usize, ApplyOutcome)> = BTreeMap::new();
        for task in tasks {
            let (op, n, done) = task.await.unwrap();
            let outcome = done.unwrap_or_else(|e| panic!("{op:?}: {e}")).outcome;
            match outcome {
                ApplyOutcome::Applied { .. } => {
                    let before = applied.insert(op.key(), (n, outcome));
                    assert!(
                        before.is_none(),
                        "two writes of key {} applied from one observation",
                        op.key()
                    );
                }
                ApplyOutcome::Conflict { .. } => {}
                other => panic!("{op:?}: {other:?}"),
            }
        }
        let keys: std::collections::BTreeSet<usize> = ops.iter().map(ModelOp::key).collect();
        for k in keys {
            let (n, outcome) = applied
                .get(&k)
                .unwrap_or_else(|| panic!("no write of key {k} applied"));
            let row = store
                .lookup(&ns, &key(&format!("m-{k}")))
                .await
                .unwrap()
                .unwrap();
            assert!(
                text(&row).contains(&format!("-{n}\"")),
                "key {k}: {} is not write {n}",
                text(&row)
            );
            let ApplyOutcome::Applied { revision, epoch } = outcome else {
                unreachable!()
            };
            assert_eq!(*revision, Some(row.revision));
            let revision = row.revision.get();
            assert!(
                last_revision
                    .insert(k, revision)
                    .is_none_or(|r| r < revision)
            );
            if let Some(epoch) = epoch {
                assert_eq!(row.lease.as_ref().map(|l| l.epoch), Some(*epoch));
                let epoch = epoch.get();
                assert!(
                    last_epoch.insert(k, epoch).is_none_or(|e| e < epoch),
                    "epochs only grow"
                );
            }
        }
    }
}

fn model_waves() -> impl Strategy<Value = Vec<(bool, Vec<ModelOp>)>> {
    prop::collection::vec(
        (any::<bool>(), prop::collection::vec(model_op(), 1..12)),
        1..5,
    )
}

#[test]
fn group_commit_interleaved_owners_match_the_model_on_sqlite() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (store, _dir) = rt.block_on(sqlite_store());
    let store = Arc::new(store);
    proptest!(ProptestConfig::with_cases(24), |(waves in model_waves())| {
        rt.block_on(run_model(&store, waves));
    });
}

#[test]
fn group_commit_interleaved_owners_match_the_model_on_postgres() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let Some(db) = rt.block_on(PgTestDatabase::create("group_model")) else {
        return;
    };
    let store = rt.block_on(open_store(db.url()));
    proptest!(ProptestConfig::with_cases(12), |(waves in model_waves())| {
        rt.block_on(run_model(&store, waves));
    });
    rt.block_on(db.cleanup());
}
