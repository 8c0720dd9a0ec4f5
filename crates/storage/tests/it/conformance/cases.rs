//! The conformance cases: one body per behavior, run against every backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tether_core::{
    ApplyOutcome, Comparison, Error, ErrorTexts, Intent, JsonObjectCodec, LeaseEpoch,
    QuarantineEntry, StoreErrorKind, admit_all, decode_row,
};
use tether_storage::{LeaseEventKind, LeaseEventQuery};

use crate::support::{Backend, START, key, leased, text, value};

fn set(row: tether_core::RowWrite) -> Intent {
    Intent::Set { row, ttl: None }
}

fn applied_revision(outcome: &ApplyOutcome) -> tether_core::Revision {
    match outcome {
        ApplyOutcome::Applied {
            revision: Some(r), ..
        } => *r,
        other => panic!("expected an applied write, got {other:?}"),
    }
}

/// A conflicting write changes nothing and hands back a fresh observation to re-evaluate
/// against (lifecycle scenario 6, store side; `docs/storage.md`, "Conditional writes").
pub(crate) async fn cas_conflict_returns_fresh_observation(b: &Backend) {
    let ns = b.namespace("cas", |c| c).await;
    let k = key("s1");
    let s = &b.store;
    let first = s.observe(&ns, &k).await.unwrap();
    assert!(first.row.is_none() && first.comparison.is_absent());
    let out = s
        .compare_and_apply(
            &ns,
            &k,
            &first.comparison,
            set(value("original")),
            &admit_all,
        )
        .await
        .unwrap();
    let rev1 = applied_revision(&out);

    let seen = s.observe(&ns, &k).await.unwrap();
    assert_eq!(seen.comparison.revision(), Some(rev1));
    // A successor replaces the row after our observation.
    s.compare_and_apply(
        &ns,
        &k,
        &seen.comparison,
        set(value("successor")),
        &admit_all,
    )
    .await
    .unwrap();
    let admitted = AtomicUsize::new(0);
    let admission = || {
        admitted.fetch_add(1, Ordering::SeqCst);
        Ok(())
    };
    let stale = s
        .compare_and_apply(&ns, &k, &seen.comparison, set(value("updated")), &admission)
        .await
        .unwrap();
    let ApplyOutcome::Conflict { current } = stale else {
        panic!("expected a conflict, got {stale:?}");
    };
    assert_eq!(
        admitted.load(Ordering::SeqCst),
        0,
        "admission runs only after the comparison held"
    );
    let row = current
        .row
        .clone()
        .expect("fresh observation carries the successor");
    assert_eq!(text(&row), r#"{"value":"successor"}"#);
    assert!(row.revision > rev1);
    // Re-evaluating against the fresh observation succeeds.
    let out = s
        .compare_and_apply(
            &ns,
            &k,
            &current.comparison,
            set(value("re-evaluated")),
            &admission,
        )
        .await
        .unwrap();
    assert!(matches!(out, ApplyOutcome::Applied { .. }));
    assert_eq!(admitted.load(Ordering::SeqCst), 1);
    assert_eq!(
        text(&s.lookup(&ns, &k).await.unwrap().unwrap()),
        r#"{"value":"re-evaluated"}"#
    );
}

/// Keep intents: unchanged when the comparison holds, a conflict with the fresh row when stale.
pub(crate) async fn keep_intents(b: &Backend) {
    let ns = b.namespace("keep", |c| c).await;
    let k = key("s1");
    let s = &b.store;
    s.register_if_absent(&ns, &k, value("a"), None)
        .await
        .unwrap();
    let seen = s.observe(&ns, &k).await.unwrap();
    let out = s
        .compare_and_apply(&ns, &k, &seen.comparison, Intent::Keep, &admit_all)
        .await
        .unwrap();
    assert_eq!(out, ApplyOutcome::Unchanged);
    let out = s
        .compare_and_apply(&ns, &k, &seen.comparison, Intent::KeepOnDelete, &admit_all)
        .await
        .unwrap();
    assert_eq!(out, ApplyOutcome::Unchanged);
    assert_eq!(
        s.observe(&ns, &k).await.unwrap(),
        seen,
        "keep writes nothing"
    );

    s.compare_and_apply(&ns, &k, &seen.comparison, set(value("b")), &admit_all)
        .await
        .unwrap();
    let out = s
        .compare_and_apply(&ns, &k, &seen.comparison, Intent::Keep, &admit_all)
        .await
        .unwrap();
    let ApplyOutcome::Conflict { current } = out else {
        panic!("stale keep must conflict, got {out:?}");
    };
    assert_eq!(text(current.row.as_ref().unwrap()), r#"{"value":"b"}"#);
}

/// The admission check runs after the comparison and before the write; its error aborts the
/// write and is returned unchanged.
pub(crate) async fn admission_error_aborts_the_write(b: &Backend) {
    let ns = b.namespace("admission", |c| c).await;
    let k = key("s1");
    let s = &b.store;
    s.register_if_absent(&ns, &k, value("before"), None)
        .await
        .unwrap();
    let seen = s.observe(&ns, &k).await.unwrap();
    let refuse = || Err(Error::revoked("caller revoked at admission"));
    let err = s
        .compare_and_apply(&ns, &k, &seen.comparison, set(value("after")), &refuse)
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::Revoked { message } if message == "caller revoked at admission"));
    let err = s
        .compare_and_apply(&ns, &k, &seen.comparison, Intent::Delete, &refuse)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Revoked { .. }));
    assert_eq!(
        s.observe(&ns, &k).await.unwrap(),
        seen,
        "nothing was written"
    );
}

/// A row that expires between observe and apply conflicts, and the conflict shows it absent.
pub(crate) async fn row_expiring_after_observation_conflicts(b: &Backend) {
    let ns = b.namespace("expiry", |c| c).await;
    let k = key("s1");
    let s = &b.store;
    s.register_if_absent(&ns, &k, value("short"), Some(Duration::from_secs(10)))
        .await
        .unwrap();
    let seen = s.observe(&ns, &k).await.unwrap();
    assert_eq!(
        seen.comparison.expires_at(),
        Some(START + Duration::from_secs(10))
    );
    b.advance(Duration::from_secs(10));
    let out = s
        .compare_and_apply(&ns, &k, &seen.comparison, set(value("late")), &admit_all)
        .await
        .unwrap();
    let ApplyOutcome::Conflict { current } = out else {
        panic!("expired row must conflict, got {out:?}");
    };
    assert!(current.row.is_none() && current.comparison.is_absent());
    // The fresh (absent) comparison can be used to recreate the row.
    let out = s
        .compare_and_apply(&ns, &k, &current.comparison, set(value("new")), &admit_all)
        .await
        .unwrap();
    assert!(matches!(out, ApplyOutcome::Applied { .. }));
}

/// Expired rows are invisible at once (at `expires_at == now`) and the sweeper removes them.
pub(crate) async fn ttl_invisibility_and_sweep(b: &Backend) {
    let ns = b
        .namespace("ttl", |mut c| {
            c.default_ttl = Some(Duration::from_secs(30));
            c
        })
        .await;
    let s = &b.store;
    s.register_if_absent(&ns, &key("default-ttl"), value("a"), None)
        .await
        .unwrap();
    s.register_if_absent(
        &ns,
        &key("explicit"),
        value("b"),
        Some(Duration::from_secs(5)),
    )
    .await
    .unwrap();
    s.register_if_absent(
        &ns,
        &key("leased"),
        leased("c", "tok-sweep", START + Duration::from_secs(5)),
        Some(Duration::from_secs(5)),
    )
    .await
    .unwrap();
    assert_eq!(s.count(&ns).await.unwrap(), 3);
    b.advance(Duration::from_millis(4_999));
    assert!(s.lookup(&ns, &key("explicit")).await.unwrap().is_some());
    b.advance(Duration::from_millis(1));
    assert!(
        s.lookup(&ns, &key("explicit")).await.unwrap().is_none(),
        "expired at equality"
    );
    assert!(s.observe(&ns, &key("leased")).await.unwrap().row.is_none());
    assert_eq!(s.count(&ns).await.unwrap(), 1);
    let scanned = s.scan(&ns, None, 10).await.unwrap();
    assert_eq!(scanned.len(), 1);
    assert_eq!(scanned[0].0, key("default-ttl"));
    // An expired row does not block a new registration.
    b.advance(Duration::from_secs(25));
    assert_eq!(s.count(&ns).await.unwrap(), 0);
    let swept = s.sweep_expired(1_000).await.unwrap();
    assert!(swept >= 3, "swept {swept}");
    assert_eq!(s.sweep_expired(1_000).await.unwrap(), 0);
    let events = s
        .lease_events(&LeaseEventQuery::for_key(ns.clone(), key("leased"), 10))
        .await
        .unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![LeaseEventKind::Acquired, LeaseEventKind::Expired]
    );
    assert!(
        s.register_if_absent(&ns, &key("explicit"), value("again"), None)
            .await
            .unwrap()
    );
}

/// `max_entries` with reject-new: new rows are refused with a typed error, updates and deletes
/// of existing rows still work, expired rows do not count.
pub(crate) async fn capacity_reject_new(b: &Backend) {
    let ns = b.namespace("cap", |c| c.with_max_entries(2)).await;
    let s = &b.store;
    assert!(
        s.register_if_absent(&ns, &key("a"), value("a"), None)
            .await
            .unwrap()
    );
    assert!(
        s.register_if_absent(&ns, &key("b"), value("b"), Some(Duration::from_secs(1)))
            .await
            .unwrap()
    );
    let err = s
        .register_if_absent(&ns, &key("c"), value("c"), None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Store {
                kind: StoreErrorKind::CapacityExceeded { max_entries: 2, .. }
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("reject-new"));
    let absent = s.observe(&ns, &key("c")).await.unwrap();
    let err = s
        .compare_and_apply(
            &ns,
            &key("c"),
            &absent.comparison,
            set(value("c")),
            &admit_all,
        )
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Store {
            kind: StoreErrorKind::CapacityExceeded { .. }
        }
    ));
    assert!(
        s.lookup(&ns, &key("c")).await.unwrap().is_none(),
        "no partial write"
    );
    // Updating an existing row is still allowed at capacity.
    let seen = s.observe(&ns, &key("a")).await.unwrap();
    let out = s
        .compare_and_apply(
            &ns,
            &key("a"),
            &seen.comparison,
            set(value("a2")),
            &admit_all,
        )
        .await
        .unwrap();
    assert!(matches!(out, ApplyOutcome::Applied { .. }));
    // Expired rows free their slot at once.
    b.advance(Duration::from_secs(1));
    assert!(
        s.register_if_absent(&ns, &key("c"), value("c"), None)
            .await
            .unwrap()
    );
    // Deleting frees a slot.
    let removed = s.delete_if(&ns, &key("a"), &|_| true).await.unwrap();
    assert!(removed.is_some());
    assert!(
        s.register_if_absent(&ns, &key("d"), value("d"), None)
            .await
            .unwrap()
    );
    assert_eq!(s.count(&ns).await.unwrap(), 2);
}

/// Values over the namespace limit are refused with a typed error and nothing is written.
pub(crate) async fn value_size_limit(b: &Backend) {
    let ns = b.namespace("size", |c| c.with_max_value_bytes(64)).await;
    let s = &b.store;
    let big = tether_core::RowWrite {
        value: vec![b'x'; 65],
        lease: None,
    };
    let err = s
        .register_if_absent(&ns, &key("a"), big.clone(), None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Store {
                kind: StoreErrorKind::ValueTooLarge {
                    size: 65,
                    limit: 64,
                    ..
                }
            }
        ),
        "{err:?}"
    );
    let absent = s.observe(&ns, &key("a")).await.unwrap();
    let err = s
        .compare_and_apply(&ns, &key("a"), &absent.comparison, set(big), &admit_all)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Store {
            kind: StoreErrorKind::ValueTooLarge { .. }
        }
    ));
    assert_eq!(s.count(&ns).await.unwrap(), 0);
    let exact = tether_core::RowWrite {
        value: vec![b'x'; 64],
        lease: None,
    };
    assert!(
        s.register_if_absent(&ns, &key("a"), exact, None)
            .await
            .unwrap()
    );
    // The default limit is 64 KiB.
    let default_ns = b.namespace("size-default", |c| c).await;
    let over = tether_core::RowWrite {
        value: vec![b'x'; tether_core::DEFAULT_MAX_VALUE_BYTES + 1],
        lease: None,
    };
    assert!(
        s.register_if_absent(&default_ns, &key("a"), over, None)
            .await
            .is_err()
    );
}

/// Every operation refuses an unregistered namespace with a typed error.
pub(crate) async fn unknown_namespace_is_refused(b: &Backend) {
    let ns = crate::support::unique_ns("never-registered");
    let s = &b.store;
    let is_unknown = |e: Error| {
        assert!(
            matches!(&e, Error::Store { kind: StoreErrorKind::UnknownNamespace { namespace } } if *namespace == ns.to_string()),
            "{e:?}"
        );
        assert!(e.to_string().contains("register it"));
    };
    is_unknown(s.lookup(&ns, &key("a")).await.unwrap_err());
    is_unknown(s.observe(&ns, &key("a")).await.unwrap_err());
    is_unknown(
        s.compare_and_apply(
            &ns,
            &key("a"),
            &Comparison::ABSENT,
            set(value("a")),
            &admit_all,
        )
        .await
        .unwrap_err(),
    );
    is_unknown(
        s.register_if_absent(&ns, &key("a"), value("a"), None)
            .await
            .unwrap_err(),
    );
    is_unknown(s.delete_if(&ns, &key("a"), &|_| true).await.unwrap_err());
    is_unknown(s.scan(&ns, None, 1).await.unwrap_err());
    is_unknown(s.count(&ns).await.unwrap_err());
}

/// Lease epochs: a new token gets a strictly larger epoch, the same token keeps it, and epochs
/// are never reused for a key, even after the row is deleted. Lease columns round-trip.
pub(crate) async fn lease_epochs_are_monotonic(b: &Backend) {
    let ns = b.namespace("epoch", |c| c).await;
    let k = key("s1");
    let s = &b.store;
    let exp = |secs| START + Duration::from_secs(secs);
    let seen = s.observe(&ns, &k).await.unwrap();
    let out = s
        .compare_and_apply(
            &ns,
            &k,
            &seen.comparison,
            set(leased("v", "token-a", exp(65))),
            &admit_all,
        )
        .await
        .unwrap();
    let ApplyOutcome::Applied {
        epoch: Some(e1), ..
    } = out
    else {
        panic!("{out:?}")
    };
    let row = s.lookup(&ns, &k).await.unwrap().unwrap();
    let lease = row.lease.clone().unwrap();
    assert_eq!(lease.epoch, e1);
    assert_eq!(lease.token.as_str(), "token-a");
    assert_eq!(lease.expires_at, exp(65));
    assert_eq!(lease.acquired_at, START);
    assert_eq!(lease.renewed_at, START);
    assert_eq!(lease.holder.as_deref(), Some("holder-token-a"));

    // Renewal: same token keeps the epoch and acquisition time.
    b.advance(Duration::from_secs(20));
    let seen = s.observe(&ns, &k).await.unwrap();
    let out = s
        .compare_and_apply(
            &ns,
            &k,
            &seen.comparison,
            set(leased("v", "token-a", exp(85))),
            &admit_all,
        )
        .await
        .unwrap();
    assert!(matches!(out, ApplyOutcome::Applied { epoch: Some(e), .. } if e == e1));
    let lease = s.lookup(&ns, &k).await.unwrap().unwrap().lease.unwrap();
    assert_eq!((lease.epoch, lease.acquired_at), (e1, START));
    assert_eq!(lease.renewed_at, START + Duration::from_secs(20));

    // A different token is a new acquisition.
    let seen = s.observe(&ns, &k).await.unwrap();
    let out = s
        .compare_and_apply(
            &ns,
            &k,
            &seen.comparison,
            set(leased("v", "token-b", exp(100))),
            &admit_all,
        )
        .await
        .unwrap();
    let ApplyOutcome::Applied {
        epoch: Some(e2), ..
    } = out
    else {
        panic!("{out:?}")
    };
    assert!(e2 > e1);

    // Delete the row and recreate it with the first token: still a larger epoch.
    let seen = s.observe(&ns, &k).await.unwrap();
    s.compare_and_apply(&ns, &k, &seen.comparison, Intent::Delete, &admit_all)
        .await
        .unwrap();
    assert!(
        s.register_if_absent(&ns, &k, leased("v", "token-a", exp(200)), None)
            .await
            .unwrap()
    );
    let e3 = s
        .lookup(&ns, &k)
        .await
        .unwrap()
        .unwrap()
        .lease
        .unwrap()
        .epoch;
    assert!(e3 > e2, "{e3} > {e2}");
    assert!(e3 > LeaseEpoch::INITIAL);

    // Releasing the lease keeps the row.
    let seen = s.observe(&ns, &k).await.unwrap();
    let out = s
        .compare_and_apply(&ns, &k, &seen.comparison, set(value("v")), &admit_all)
        .await
        .unwrap();
    assert!(matches!(out, ApplyOutcome::Applied { epoch: None, .. }));
    assert!(s.lookup(&ns, &k).await.unwrap().unwrap().lease.is_none());

    // Re-acquiring after a release (same token even) is a new acquisition with a larger epoch.
    let seen = s.observe(&ns, &k).await.unwrap();
    let out = s
        .compare_and_apply(
            &ns,
            &k,
            &seen.comparison,
            set(leased("v", "token-a", exp(300))),
            &admit_all,
        )
        .await
        .unwrap();
    let ApplyOutcome::Applied {
        epoch: Some(e4), ..
    } = out
    else {
        panic!("{out:?}")
    };
    assert!(e4 > e3, "{e4} > {e3}");

    // A row that expired and is written again keeps counting up.
    let seen = s.observe(&ns, &k).await.unwrap();
    s.compare_and_apply(
        &ns,
        &k,
        &seen.comparison,
        Intent::Set {
            row: leased("v", "token-c", exp(400)),
            ttl: Some(Duration::from_secs(1)),
        },
        &admit_all,
    )
    .await
    .unwrap();
    let e5 = s
        .lookup(&ns, &k)
        .await
        .unwrap()
        .unwrap()
        .lease
        .unwrap()
        .epoch;
    b.advance(Duration::from_secs(1));
    assert!(
        s.register_if_absent(&ns, &k, leased("v", "token-d", exp(500)), None)
            .await
            .unwrap()
    );
    let e6 = s
        .lookup(&ns, &k)
        .await
        .unwrap()
        .unwrap()
        .lease
        .unwrap()
        .epoch;
    assert!(e5 > e4 && e6 > e5, "{e4} < {e5} < {e6}");
}

/// Revisions increase on every write and never repeat for a recreated row, so an old
/// comparison can never match a new row.
pub(crate) async fn revisions_increase_and_recreation_does_not_match(b: &Backend) {
    let ns = b.namespace("rev", |c| c).await;
    let k = key("s1");
    let s = &b.store;
    s.register_if_absent(&ns, &k, value("a"), None)
        .await
        .unwrap();
    let first = s.observe(&ns, &k).await.unwrap();
    s.delete_if(&ns, &k, &|_| true).await.unwrap();
    s.register_if_absent(&ns, &k, value("a"), None)
        .await
        .unwrap();
    let second = s.observe(&ns, &k).await.unwrap();
    assert!(second.comparison.revision() > first.comparison.revision());
    let out = s
        .compare_and_apply(&ns, &k, &first.comparison, set(value("x")), &admit_all)
        .await
        .unwrap();
    assert!(matches!(out, ApplyOutcome::Conflict { .. }));
    // A set refreshes the creation time even when the value is unchanged.
    b.advance(Duration::from_secs(3));
    s.compare_and_apply(&ns, &k, &second.comparison, set(value("a")), &admit_all)
        .await
        .unwrap();
    let row = s.lookup(&ns, &k).await.unwrap().unwrap();
    assert_eq!(row.created_at, START + Duration::from_secs(3));
    assert!(Some(row.revision) > second.comparison.revision());
}

/// Conditional create and delete, scans in key order with paging, counts.
pub(crate) async fn register_delete_scan_count(b: &Backend) {
    let ns = b.namespace("crud", |c| c).await;
    let s = &b.store;
    for id in ["c", "a", "b"] {
        assert!(
            s.register_if_absent(&ns, &key(id), value(id), None)
                .await
                .unwrap()
        );
    }
    assert!(
        !s.register_if_absent(&ns, &key("a"), value("zz"), None)
            .await
            .unwrap()
    );
    assert_eq!(
        text(&s.lookup(&ns, &key("a")).await.unwrap().unwrap()),
        r#"{"value":"a"}"#
    );
    assert_eq!(s.count(&ns).await.unwrap(), 3);
    let page = s.scan(&ns, None, 2).await.unwrap();
    let keys: Vec<_> = page.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(keys, vec![key("a"), key("b")]);
    let rest = s.scan(&ns, Some(&key("b")), 10).await.unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].0, key("c"));

    let refused = s
        .delete_if(&ns, &key("b"), &|row| row.value == b"nope")
        .await
        .unwrap();
    assert!(refused.is_none());
    let removed = s
        .delete_if(&ns, &key("b"), &|row| row.value == br#"{"value":"b"}"#)
        .await
        .unwrap()
        .expect("removed");
    assert_eq!(text(&removed), r#"{"value":"b"}"#);
    assert!(s.lookup(&ns, &key("b")).await.unwrap().is_none());
    assert!(
        s.delete_if(&ns, &key("b"), &|_| true)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(s.count(&ns).await.unwrap(), 2);
}

/// Lease history: acquired, renewed, taken over, fenced, released.
pub(crate) async fn lease_event_history(b: &Backend) {
    let ns = b.namespace("events", |c| c).await;
    let k = key("s1");
    let s = &b.store;
    let exp = |secs| START + Duration::from_secs(secs);
    let cas = |row| {
        let ns = ns.clone();
        let k = k.clone();
        async move {
            let seen = s.observe(&ns, &k).await.unwrap();
            s.compare_and_apply(&ns, &k, &seen.comparison, set(row), &admit_all)
                .await
                .unwrap()
        }
    };
    cas(leased("v", "owner-token", exp(65))).await;
    let stale = s.observe(&ns, &k).await.unwrap();
    cas(leased("v", "owner-token", exp(90))).await;
    cas(leased("v", "peer-token", exp(120))).await;
    // The old owner writes with its stale observation: refused and recorded as fenced.
    let out = s
        .compare_and_apply(
            &ns,
            &k,
            &stale.comparison,
            set(leased("v", "owner-token", exp(130))),
            &admit_all,
        )
        .await
        .unwrap();
    assert!(matches!(out, ApplyOutcome::Conflict { .. }));
    cas(value("v")).await;
    let events = s
        .lease_events(&LeaseEventQuery::for_key(ns.clone(), k.clone(), 100))
        .await
        .unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            LeaseEventKind::Acquired,
            LeaseEventKind::Renewed,
            LeaseEventKind::TakenOver,
            LeaseEventKind::Fenced,
            LeaseEventKind::Released,
        ]
    );
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
    let takeover = &events[2];
    assert_eq!(takeover.token_prefix.as_deref(), Some("peer-tok"));
    assert_eq!(takeover.other_token_prefix.as_deref(), Some("owner-to"));
    assert!(takeover.epoch > events[0].epoch);
    let fenced = &events[3];
    assert_eq!(fenced.other_token_prefix.as_deref(), Some("owner-to"));
    assert!(events.iter().all(|e| e.namespace == ns && e.key == k));
    // Paging with `after`.
    let after = s
        .lease_events(&LeaseEventQuery {
            after: Some(events[1].seq),
            ..LeaseEventQuery::for_key(ns.clone(), k.clone(), 2)
        })
        .await
        .unwrap();
    assert_eq!(after.len(), 2);
    assert_eq!(after[0].kind, LeaseEventKind::TakenOver);

    // A lapsed lease replaced by a new token: `expired` for the old one, then `acquired`.
    cas(leased("v", "short-token", exp(1))).await;
    b.advance(Duration::from_secs(10));
    cas(leased("v", "late-token", exp(300))).await;
    let tail = s
        .lease_events(&LeaseEventQuery {
            after: Some(events[4].seq),
            ..LeaseEventQuery::for_key(ns.clone(), k.clone(), 10)
        })
        .await
        .unwrap();
    let kinds: Vec<_> = tail.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![
            LeaseEventKind::Acquired,
            LeaseEventKind::Expired,
            LeaseEventKind::Acquired
        ]
    );
    assert_eq!(tail[1].token_prefix.as_deref(), Some("short-to"));
    assert_eq!(tail[2].token_prefix.as_deref(), Some("late-tok"));

    // Retention: events before a cut-off are pruned, later ones kept.
    let pruned = s
        .prune_lease_events(START + Duration::from_secs(5))
        .await
        .unwrap();
    assert!(pruned >= 6, "pruned {pruned}");
    let left = s
        .lease_events(&LeaseEventQuery::for_key(ns.clone(), k.clone(), 100))
        .await
        .unwrap();
    let kinds: Vec<_> = left.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![LeaseEventKind::Expired, LeaseEventKind::Acquired]
    );
}

/// A present row whose bytes do not decode is an invalid row, never an absent one.
pub(crate) async fn corrupted_value_is_an_invalid_row(b: &Backend) {
    let ns = b.namespace("corrupt", |c| c).await;
    let k = key("s1");
    let s = &b.store;
    let garbage = tether_core::RowWrite {
        value: vec![0xff, 0x00, b'{', 0xfe],
        lease: None,
    };
    assert!(s.register_if_absent(&ns, &k, garbage, None).await.unwrap());
    let row = s.lookup(&ns, &k).await.unwrap();
    assert_eq!(
        row.as_ref().unwrap().value,
        vec![0xff, 0x00, b'{', 0xfe],
        "bytes kept exactly"
    );
    let err = decode_row(&JsonObjectCodec, &ErrorTexts::default(), &k, row.as_ref()).unwrap_err();
    assert!(matches!(err, Error::InvalidRow { .. }));
    assert!(err.to_string().contains("original state retained"));
}

/// Quarantine: idempotent record keeping the first time, lookup, operator release.
pub(crate) async fn quarantine_records_and_releases(b: &Backend) {
    let ns = b.namespace("quarantine", |c| c).await;
    let k = key("s1");
    let s = &b.store;
    assert!(s.quarantined(&ns, &k).await.unwrap().is_none());
    let entry = QuarantineEntry {
        namespace: ns.clone(),
        key: k.clone(),
        reason: "storage outcome unknown".into(),
        custody: Some("host-a/42".into()),
        quarantined_at: START,
    };
    s.quarantine(entry.clone()).await.unwrap();
    s.quarantine(QuarantineEntry {
        reason: "second".into(),
        quarantined_at: START + Duration::from_secs(5),
        ..entry.clone()
    })
    .await
    .unwrap();
    assert_eq!(s.quarantined(&ns, &k).await.unwrap(), Some(entry.clone()));
    let listed = s.quarantined_keys(10_000).await.unwrap();
    assert!(listed.contains(&entry));
    assert!(
        s.release_quarantine(&ns, &k, "checked by operator")
            .await
            .unwrap()
    );
    assert!(!s.release_quarantine(&ns, &k, "again").await.unwrap());
    assert!(s.quarantined(&ns, &k).await.unwrap().is_none());
}

/// Two connections race on one key with the same observation: exactly one wins.
pub(crate) async fn racing_connections_exactly_one_wins(b: &Backend) {
    let ns = b.namespace("race", |c| c).await;
    let other = (b.reopen)().await;
    other
        .register_namespace(tether_core::NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    for round in 0..5 {
        let k = key(&format!("race-{round}"));
        if round % 2 == 1 {
            b.store
                .register_if_absent(&ns, &k, value("seed"), None)
                .await
                .unwrap();
        }
        let seen_a = b.store.observe(&ns, &k).await.unwrap();
        let seen_b = other.observe(&ns, &k).await.unwrap();
        assert_eq!(seen_a.comparison, seen_b.comparison);
        let (sa, sb) = (Arc::clone(&b.store), Arc::clone(&other));
        let (nsa, nsb, ka, kb) = (ns.clone(), ns.clone(), k.clone(), k.clone());
        let ta = tokio::spawn(async move {
            sa.compare_and_apply(
                &nsa,
                &ka,
                &seen_a.comparison,
                set(leased("a", "token-a", START + Duration::from_secs(65))),
                &admit_all,
            )
            .await
        });
        let tb = tokio::spawn(async move {
            sb.compare_and_apply(
                &nsb,
                &kb,
                &seen_b.comparison,
                set(leased("b", "token-b", START + Duration::from_secs(65))),
                &admit_all,
            )
            .await
        });
        let (ra, rb) = (ta.await.unwrap().unwrap(), tb.await.unwrap().unwrap());
        let wins = [&ra, &rb]
            .iter()
            .filter(|o| matches!(o, ApplyOutcome::Applied { .. }))
            .count();
        assert_eq!(wins, 1, "{}: round {round}: {ra:?} / {rb:?}", b.name);
        let row = b.store.lookup(&ns, &k).await.unwrap().unwrap();
        let winner = if matches!(ra, ApplyOutcome::Applied { .. }) {
            "token-a"
        } else {
            "token-b"
        };
        assert_eq!(row.lease.unwrap().token.as_str(), winner);
    }
}

/// A transact-like loop: observe, apply `f`, write; re-evaluate only on an explicit conflict.
/// Any error is returned as is (never replayed). Returns `f`'s result and how often it ran.
async fn transact(
    store: &dyn tether_core::BindingStore,
    ns: &tether_core::Namespace,
    k: &tether_core::BindingKey,
    f: impl Fn(&str) -> Option<String>,
) -> (Result<bool, Error>, usize) {
    let mut calls = 0;
    let mut seen = match store.observe(ns, k).await {
        Ok(seen) => seen,
        Err(err) => return (Err(err), calls),
    };
    loop {
        calls += 1;
        let current = seen.row.as_ref().map(text).unwrap_or_default();
        let intent = match f(&current) {
            Some(next) => set(value(&next)),
            None => Intent::Keep,
        };
        let wrote = matches!(intent, Intent::Set { .. });
        match store
            .compare_and_apply(ns, k, &seen.comparison, intent, &admit_all)
            .await
        {
            Ok(ApplyOutcome::Conflict { current }) => seen = current,
            Ok(_) => return (Ok(wrote), calls),
            Err(err) => return (Err(err), calls),
        }
    }
}

fn inner_value(raw: &str) -> String {
    serde_json::from_str::<serde_json::Value>(raw)
        .ok()
        .and_then(|v| v.get("value").and_then(|s| s.as_str()).map(str::to_owned))
        .unwrap_or_default()
}

/// Lifecycle scenario 6 on every backend: a fault replaces the row just before the first
/// compare; the conflict re-evaluates with the fresh observation (apply runs twice) and writes
/// nothing.
pub(crate) async fn scenario_6_conflict_reevaluates_with_the_fresh_observation(b: &Backend) {
    let ns = b.namespace("s6", |c| c).await;
    let k = key("s1");
    b.store
        .register_if_absent(&ns, &k, value("original"), None)
        .await
        .unwrap();
    let faulty = tether_storage::fault_injection::FaultInjectingStore::new(Arc::clone(&b.store));
    let (fns, fk) = (ns.clone(), k.clone());
    faulty.before_compare(move |inner, call| {
        let (ns, k) = (fns.clone(), fk.clone());
        Box::pin(async move {
            if call.seq == 1 {
                let seen = inner.observe(&ns, &k).await?;
                inner
                    .compare_and_apply(
                        &ns,
                        &k,
                        &seen.comparison,
                        set(value("successor")),
                        &admit_all,
                    )
                    .await?;
            }
            Ok(())
        })
    });
    let (result, calls) = transact(&faulty, &ns, &k, |cur| {
        (inner_value(cur) == "original").then(|| "updated".to_owned())
    })
    .await;
    assert!(!result.unwrap(), "{}: nothing written", b.name);
    assert_eq!(calls, 2, "apply ran twice");
    assert_eq!(
        text(&b.store.lookup(&ns, &k).await.unwrap().unwrap()),
        r#"{"value":"successor"}"#
    );
}

/// Lifecycle scenario 7 on every backend: the write applies and then the call fails; the error
/// is returned and the write is not replayed.
pub(crate) async fn scenario_7_uncertain_outcome_is_not_replayed(b: &Backend) {
    let ns = b.namespace("s7", |c| c).await;
    let k = key("s1");
    b.store
        .register_if_absent(&ns, &k, value("original"), None)
        .await
        .unwrap();
    use tether_storage::fault_injection::{Fault, FaultInjectingStore, FaultKind, FaultPoint};
    let faulty = FaultInjectingStore::new(Arc::clone(&b.store));
    faulty.arm(Fault::new(FaultPoint::CompareAfter, FaultKind::Unknown));
    let (result, calls) = transact(&faulty, &ns, &k, |cur| {
        Some(format!("{}:once", inner_value(cur)))
    })
    .await;
    let error = result.unwrap_err();
    assert!(
        error.to_string().contains("the outcome is unknown"),
        "{}: {error}",
        b.name
    );
    assert_eq!(calls, 1);
    assert_eq!(faulty.stats().cas_total(), 1, "the write is not replayed");
    assert_eq!(faulty.stats().writes_applied, 1);
    assert_eq!(
        text(&b.store.lookup(&ns, &k).await.unwrap().unwrap()),
        r#"{"value":"original:once"}"#
    );
}

/// `apply_observed` on an owner's write under its own live lease: the outcome of
/// `compare_and_apply`, and the reported written row is exactly what a fresh read returns (SQL
/// stores write it with one conditional statement; the in-memory store reports none).
pub(crate) async fn apply_observed_writes_and_reports_the_row(b: &Backend) {
    let ns = b.namespace("observed", |c| c).await;
    let k = key("s1");
    let s = &b.store;
    let expires = START + Duration::from_secs(65);
    let seen = s.observe(&ns, &k).await.unwrap();
    let acquired = s
        .apply_observed(
            &ns,
            &k,
            &seen,
            set(leased("a", "owner-token", expires)),
            &admit_all,
        )
        .await
        .unwrap();
    let ApplyOutcome::Applied {
        epoch: Some(epoch), ..
    } = acquired.outcome
    else {
        panic!("expected an acquisition, got {acquired:?}");
    };
    let mut seen = s.observe(&ns, &k).await.unwrap();
    if let Some(written) = &acquired.written {
        assert_eq!(written, &seen, "the reported row is the stored row");
    }
    for (i, v) in ["b", "c", "d"].into_iter().enumerate() {
        b.advance(Duration::from_millis(5));
        let start = seen.clone();
        let out = s
            .apply_observed(
                &ns,
                &k,
                &start,
                set(leased(v, "owner-token", expires)),
                &admit_all,
            )
            .await
            .unwrap();
        let revision = applied_revision(&out.outcome);
        assert!(revision > start.comparison.revision().unwrap(), "write {i}");
        let ApplyOutcome::Applied { epoch: kept, .. } = out.outcome else {
            unreachable!()
        };
        assert_eq!(kept, Some(epoch), "an owner's write keeps its epoch");
        seen = s.observe(&ns, &k).await.unwrap();
        assert_eq!(
            text(seen.row.as_ref().unwrap()),
            format!(r#"{{"value":"{v}"}}"#)
        );
        match (&out.written, b.name) {
            (Some(written), _) => {
                assert_eq!(written, &seen, "the reported row is the stored row");
                // The next write may start from the reported row instead of a read.
                seen = written.clone();
            }
            (None, "memory") => {}
            (None, other) => panic!("the {other} store reports the row it wrote"),
        }
    }
    let lease = seen.row.as_ref().unwrap().lease.clone().unwrap();
    assert_eq!((lease.epoch, lease.expires_at), (epoch, expires));
    assert_eq!(lease.acquired_at, START, "acquisition time is kept");
}

/// A stale observation through `apply_observed`: nothing written, admission never reported,
/// a conflict with the fresh row — and a stale lease-carrying write of another token is
/// recorded as fenced, as `compare_and_apply` would.
pub(crate) async fn apply_observed_refuses_a_stale_observation(b: &Backend) {
    let ns = b.namespace("observed-stale", |c| c).await;
    let k = key("s1");
    let s = &b.store;
    let expires = START + Duration::from_secs(65);
    let empty = s.observe(&ns, &k).await.unwrap();
    s.apply_observed(
        &ns,
        &k,
        &empty,
        set(leased("a", "owner", expires)),
        &admit_all,
    )
    .await
    .unwrap();
    let stale = s.observe(&ns, &k).await.unwrap();
    // A write by the owner moves the row on.
    s.apply_observed(
        &ns,
        &k,
        &stale,
        set(leased("b", "owner", expires)),
        &admit_all,
    )
    .await
    .unwrap();
    let current = s.observe(&ns, &k).await.unwrap();

    // The same owner writing from the stale observation: a conflict, not a fence; an
    // admission that refuses is not reported for a row that no longer matches.
    let refuse = || Err(Error::revoked("refused at admission"));
    let out = s
        .apply_observed(&ns, &k, &stale, set(leased("c", "owner", expires)), &refuse)
        .await
        .unwrap();
    let ApplyOutcome::Conflict { current: fresh } = out.outcome else {
        panic!("expected a conflict, got {out:?}");
    };
    assert_eq!(fresh, current);
    assert!(out.written.is_none());
    assert_eq!(
        s.observe(&ns, &k).await.unwrap(),
        current,
        "nothing written"
    );

    // With a matching observation the admission error is returned and nothing is written.
    let err = s
        .apply_observed(
            &ns,
            &k,
            &current,
            set(leased("c", "owner", expires)),
            &refuse,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Revoked { .. }), "{err:?}");
    assert_eq!(
        s.observe(&ns, &k).await.unwrap(),
        current,
        "nothing written"
    );

    // A write of another token from the stale observation is fenced.
    let out = s
        .apply_observed(
            &ns,
            &k,
            &stale,
            set(leased("x", "intruder", expires)),
            &admit_all,
        )
        .await
        .unwrap();
    assert!(
        matches!(out.outcome, ApplyOutcome::Conflict { .. }),
        "{out:?}"
    );
    let events = s
        .lease_events(&LeaseEventQuery::for_key(ns.clone(), k.clone(), 100))
        .await
        .unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [LeaseEventKind::Acquired, LeaseEventKind::Fenced]);
    assert_eq!(
        s.observe(&ns, &k).await.unwrap(),
        current,
        "nothing written"
    );

    // A row that expired after the observation is not written either.
    let ns = b.namespace("observed-ttl", |c| c).await;
    s.register_if_absent(&ns, &k, value("short"), Some(Duration::from_secs(10)))
        .await
        .unwrap();
    let seen = s.observe(&ns, &k).await.unwrap();
    b.advance(Duration::from_secs(11));
    let out = s
        .apply_observed(&ns, &k, &seen, set(value("late")), &admit_all)
        .await
        .unwrap();
    let ApplyOutcome::Conflict { current } = out.outcome else {
        panic!("an expired row conflicts, got {out:?}");
    };
    assert!(current.row.is_none());
}

/// A renewal through `apply_observed` is recorded as `renewed`; the SQL stores time it.
pub(crate) async fn apply_observed_renewal_records_its_latency(b: &Backend) {
    let ns = b.namespace("observed-renew", |c| c).await;
    let k = key("s1");
    let s = &b.store;
    let empty = s.observe(&ns, &k).await.unwrap();
    s.apply_observed(
        &ns,
        &k,
        &empty,
        set(leased("a", "owner", START + Duration::from_secs(65))),
        &admit_all,
    )
    .await
    .unwrap();
    b.advance(Duration::from_secs(20));
    let seen = s.observe(&ns, &k).await.unwrap();
    let out = s
        .apply_observed(
            &ns,
            &k,
            &seen,
            set(leased("a", "owner", START + Duration::from_secs(85))),
            &admit_all,
        )
        .await
        .unwrap();
    assert!(
        matches!(out.outcome, ApplyOutcome::Applied { .. }),
        "{out:?}"
    );
    let events = s
        .lease_events(&LeaseEventQuery::for_key(ns.clone(), k.clone(), 100))
        .await
        .unwrap();
    let renewed = events.last().unwrap();
    assert_eq!(renewed.kind, LeaseEventKind::Renewed);
    assert!(events[0].latency.is_none(), "acquisitions carry no latency");
    match b.name {
        "memory" => assert!(renewed.latency.is_none()),
        _ => {
            let latency = renewed.latency.expect("the SQL store times renewals");
            assert!(latency < Duration::from_secs(30), "{latency:?}");
        }
    }
}

/// One text rule on every backend, checked before any write: a lease holder label with a NUL,
/// a control or an invisible character, and quarantine reasons or custody with a NUL or over
/// the limit, are refused with a typed error and change nothing — on SQLite as on PostgreSQL,
/// which could not store a NUL at all.
pub(crate) async fn text_rules_refuse_before_writing(b: &Backend) {
    use tether_core::text::MAX_REASON_LEN;
    use tether_core::{LeaseToken, LeaseWrite, RowWrite, TextError};
    let ns = b.namespace("text", |c| c).await;
    let s = &b.store;
    let k = key("text-1");
    for bad in ["host\0a", "host\u{202E}a", "host\na", " host", ""] {
        let row = RowWrite {
            value: b"{}".to_vec(),
            lease: Some(LeaseWrite {
                token: LeaseToken::new("t").unwrap(),
                expires_at: START + Duration::from_secs(60),
                holder: Some(bad.to_owned()),
            }),
        };
        let seen = s.observe(&ns, &k).await.unwrap();
        let err = s
            .compare_and_apply(&ns, &k, &seen.comparison, set(row.clone()), &admit_all)
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidText(_)),
            "{}: holder {bad:?}: {err:?}",
            b.name
        );
        let err = s.register_if_absent(&ns, &k, row, None).await.unwrap_err();
        assert!(matches!(err, Error::InvalidText(_)), "{}: {err:?}", b.name);
        assert!(
            s.lookup(&ns, &k).await.unwrap().is_none(),
            "nothing written"
        );
    }
    let entry = |reason: &str, custody: Option<&str>| QuarantineEntry {
        namespace: ns.clone(),
        key: k.clone(),
        reason: reason.to_owned(),
        custody: custody.map(str::to_owned),
        quarantined_at: START,
    };
    for (reason, custody) in [
        ("bad\0reason", None),
        ("ok", Some("cus\0tody")),
        ("  ", None),
        (&*"r".repeat(MAX_REASON_LEN + 1), None),
    ] {
        let err = s.quarantine(entry(reason, custody)).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidText(_)),
            "{}: {reason:.20?}: {err:?}",
            b.name
        );
        assert!(
            s.quarantined(&ns, &k).await.unwrap().is_none(),
            "nothing recorded"
        );
    }
    // What the rule allows is stored and read back unchanged, on every backend.
    let reason = "line one\nline two\twith \u{200B} and ünïcödé";
    s.quarantine(entry(reason, Some("worker-1 (host a)")))
        .await
        .unwrap();
    assert_eq!(
        s.quarantined(&ns, &k).await.unwrap().unwrap().reason,
        reason
    );
    assert!(matches!(
        s.release_quarantine(&ns, &k, "a\0b").await,
        Err(Error::InvalidText(TextError::Nul { .. }))
    ));
    assert!(s.release_quarantine(&ns, &k, "checked").await.unwrap());
}
