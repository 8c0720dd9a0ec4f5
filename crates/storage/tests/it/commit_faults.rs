//! The SQL store's own COMMIT, failing before and after it saved, for every kind of write
//! that commits a transaction, on SQLite and PostgreSQL: the caller is told the outcome is
//! unknown (a keyed write names its key), the row is exactly the old or the new state, and
//! the store keeps working on every pooled connection afterwards (no connection is left
//! inside a transaction).

use std::time::Duration;

use tether_core::{
    ApplyOutcome, BindingStore, Error, Intent, LeaseRenewal, LeaseToken, Namespace,
    NamespaceConfig, QuarantineEntry, QuarantineStore, RowWrite, StoreErrorKind, admit_all,
};
use tether_storage::testing::PgTestDatabase;
use tether_storage::{CommitFault, NewTranscriptEntry, Store, TranscriptRole};

use crate::conformance::host_cases::new_session;
use crate::support::{START, key, leased, open_store, text, unique_ns, value};

/// The host session the transcript write of `k` goes to.
fn session_of(ns: &Namespace, k: &tether_core::BindingKey) -> tether_core::SessionKey {
    tether_core::SessionKey::new(format!("agent:main:{ns}:{k}")).unwrap()
}

/// The writes walked, each run against a fresh key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Acquire,
    Write,
    Register,
    Delete,
    Renew,
    Quarantine,
    Transcript,
}

const OPS: [Op; 7] = [
    Op::Acquire,
    Op::Write,
    Op::Register,
    Op::Delete,
    Op::Renew,
    Op::Quarantine,
    Op::Transcript,
];

/// Sets up the row `v0` (leased by `owner` for `Renew`) that `op` then changes.
async fn setup(store: &Store, ns: &Namespace, k: &tether_core::BindingKey, op: Op) {
    let row = match op {
        Op::Register => return,
        Op::Renew => leased("v0", "owner", START + Duration::from_secs(60)),
        _ => value("v0"),
    };
    assert!(store.register_if_absent(ns, k, row, None).await.unwrap());
}

/// Runs `op`, checking that the store reported it applied.
async fn run(
    store: &Store,
    ns: &Namespace,
    k: &tether_core::BindingKey,
    op: Op,
) -> Result<(), Error> {
    let set = |row: RowWrite| Intent::Set { row, ttl: None };
    match op {
        Op::Acquire | Op::Write => {
            let seen = store.observe(ns, k).await?;
            let row = if op == Op::Acquire {
                leased("v1", "owner", START + Duration::from_secs(60))
            } else {
                value("v1")
            };
            let outcome = store
                .compare_and_apply(ns, k, &seen.comparison, set(row), &admit_all)
                .await?;
            assert!(
                matches!(outcome, ApplyOutcome::Applied { .. }),
                "{outcome:?}"
            );
        }
        Op::Register => {
            assert!(store.register_if_absent(ns, k, value("v1"), None).await?);
        }
        Op::Delete => {
            assert!(store.delete_if(ns, k, &|_| true).await?.is_some());
        }
        Op::Renew => {
            let renewed = store
                .renew_leases(
                    ns,
                    &[LeaseRenewal {
                        key: k.clone(),
                        token: LeaseToken::new("owner").unwrap(),
                        expires_at: START + Duration::from_secs(120),
                    }],
                    START,
                )
                .await?;
            assert_eq!(renewed, vec![true]);
        }
        Op::Quarantine => {
            store
                .quarantine(QuarantineEntry {
                    namespace: ns.clone(),
                    key: k.clone(),
                    reason: "checked by the commit walk".into(),
                    custody: None,
                    quarantined_at: START,
                })
                .await?;
        }
        Op::Transcript => {
            let session = session_of(ns, k);
            store
                .append_transcript(
                    &session,
                    NewTranscriptEntry {
                        role: TranscriptRole::User,
                        content: "hello".into(),
                        idempotency_key: Some(format!("idem-{k}")),
                        metadata: None,
                    },
                )
                .await?;
        }
    }
    Ok(())
}

/// Whether the write of `op` is in the store.
async fn stands(store: &Store, ns: &Namespace, k: &tether_core::BindingKey, op: Op) -> bool {
    let row = store.lookup(ns, k).await.unwrap();
    match op {
        Op::Acquire => {
            let row = row.unwrap();
            assert_eq!(
                row.lease.is_some(),
                text(&row).contains("v1"),
                "all or nothing"
            );
            row.lease.is_some()
        }
        Op::Write | Op::Register => row.is_some_and(|r| text(&r).contains("v1")),
        Op::Delete => row.is_none(),
        Op::Renew => row.unwrap().lease.unwrap().expires_at > START + Duration::from_secs(60),
        Op::Quarantine => store.quarantined(ns, k).await.unwrap().is_some(),
        Op::Transcript => {
            let session = session_of(ns, k);
            !store.active_path(&session).await.unwrap().is_empty()
        }
    }
}

async fn walk(name: &str, store: &Store) {
    let ns = unique_ns(&format!("commit-{name}"));
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let mut n = 0;
    for op in OPS {
        if op == Op::Renew && store.backend() == sea_orm::DbBackend::Postgres {
            // PostgreSQL renews a batch with one autocommit statement: no COMMIT of ours.
            continue;
        }
        for fault in [CommitFault::Fail, CommitFault::FailAfterCommit] {
            n += 1;
            let context = format!("{name} {op:?} {fault:?}");
            let k = key(&format!("commit-walk-{n}"));
            setup(store, &ns, &k, op).await;
            if op == Op::Transcript {
                // The session row is created first; its COMMIT must not take the fault.
                let session = session_of(&ns, &k);
                store
                    .create_session(new_session(&session, "s-0"))
                    .await
                    .unwrap();
            }
            store.arm_commit_fault(fault);
            let error = run(store, &ns, &k, op).await.expect_err(&context);
            store.disarm_commit_faults();
            assert!(error.is_outcome_unknown(), "{context}: {error:?}");
            match op {
                Op::Acquire | Op::Write | Op::Register | Op::Delete => assert!(
                    matches!(&error, Error::OutcomeUnknown { key, .. } if *key == k),
                    "{context}: a keyed write names its key: {error:?}"
                ),
                _ => assert!(
                    matches!(
                        &error,
                        Error::Store {
                            kind: StoreErrorKind::CommitFailed { .. }
                        }
                    ),
                    "{context}: {error:?}"
                ),
            }
            assert_eq!(
                stands(store, &ns, &k, op).await,
                fault == CommitFault::FailAfterCommit,
                "{context}: the write stands iff the COMMIT happened"
            );
            // Every pooled connection works again: more writes than the pool has connections,
            // some concurrent, each one saved.
            let mut writes = tokio::task::JoinSet::new();
            for i in 0..12 {
                let (store, ns) = (store.clone(), ns.clone());
                let k = key(&format!("after-{n}-{i}"));
                writes.spawn(
                    async move { store.register_if_absent(&ns, &k, value("x"), None).await },
                );
            }
            while let Some(created) = writes.join_next().await {
                assert!(created.unwrap().expect(&context), "{context}");
            }
        }
    }
    assert!(n >= 12);
}

#[tokio::test]
async fn commit_fault_walk_every_write_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&format!("sqlite://{}", dir.path().join("t.db").display())).await;
    walk("sqlite", &store).await;
}

#[tokio::test]
async fn commit_fault_walk_every_write_on_postgres() {
    let Some(db) = PgTestDatabase::create("commit_walk").await else {
        return;
    };
    let store = open_store(db.url()).await;
    walk("postgres", &store).await;
    store.close().await.unwrap();
    db.cleanup().await;
}
