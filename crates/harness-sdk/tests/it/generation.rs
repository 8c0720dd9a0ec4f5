//! Generation authority scenarios 32–38 (the contract: `docs/generation.md`) and the regression
//! for an already readable binding that skipped the generation check (upstream bug #138767).
//!
//! The host session store is a small in-test [`HostSessionStore`]; the backend's generation
//! operations follow the thread-binding backend's rules (`docs/harness-backend.md`) on one
//! in-memory row.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tether_core::{
    AgentId, Error, HostSessionEntry, HostSessionRead, HostSessionStore, SessionId, SessionKey,
    Timestamp, always_current,
};
use tether_harness_sdk::generation::{
    AdoptionResult, BindingAuthority, BindingReader, GenerationAuthority, GenerationOperations,
    GenerationState, GenerationTarget, ReclaimPlan, ResolveRequest,
};
use tokio::sync::{Notify, oneshot};

fn sid(s: &str) -> SessionId {
    SessionId::new(s).unwrap()
}

fn skey(s: &str) -> SessionKey {
    SessionKey::new(s).unwrap()
}

const KEY: &str = "agent:main:direct:peer";

#[derive(Debug, Clone)]
enum HostRow {
    Entry(HostSessionEntry),
    Failing,
}

/// A host session store: rows by key, a read counter, and an optional gate that holds the next
/// read until released.
#[derive(Debug, Default)]
struct Host {
    rows: Mutex<HashMap<String, HostRow>>,
    reads: AtomicUsize,
    gate: Mutex<Option<oneshot::Receiver<()>>>,
    read_entered: Notify,
}

impl Host {
    fn put(&self, key: &str, session: &str, previous: Option<&str>) {
        let entry = HostSessionEntry::new(
            skey(key),
            AgentId::new("main").unwrap(),
            sid(session),
            Timestamp::from_millis(0),
        );
        let entry = match previous {
            Some(previous) => {
                entry.with_predecessor(sid(previous), tether_core::GenerationChange::Transfer)
            }
            None => entry,
        };
        self.rows
            .lock()
            .unwrap()
            .insert(key.to_owned(), HostRow::Entry(entry));
    }

    /// `/new`-style rotation: the current id becomes the predecessor.
    fn rotate(&self, key: &str, next: &str) {
        let mut rows = self.rows.lock().unwrap();
        let Some(HostRow::Entry(entry)) = rows.get_mut(key) else {
            panic!("no row to rotate");
        };
        entry.previous_session_id = Some(entry.session_id.clone());
        entry.previous_change = Some(tether_core::GenerationChange::Transfer);
        entry.session_id = sid(next);
        entry.lifecycle_revision = entry.lifecycle_revision.next();
    }

    /// Records how the current generation replaced its predecessor.
    fn set_change(&self, key: &str, change: tether_core::GenerationChange) {
        let mut rows = self.rows.lock().unwrap();
        if let Some(HostRow::Entry(entry)) = rows.get_mut(key) {
            entry.previous_change = Some(change);
        }
    }

    /// Metadata-only change: same generation and predecessor.
    fn touch(&self, key: &str) {
        let mut rows = self.rows.lock().unwrap();
        if let Some(HostRow::Entry(entry)) = rows.get_mut(key) {
            entry.updated_at = Timestamp::from_millis(entry.updated_at.as_millis() + 1);
        }
    }

    fn set_previous(&self, key: &str, previous: &str) {
        let mut rows = self.rows.lock().unwrap();
        if let Some(HostRow::Entry(entry)) = rows.get_mut(key) {
            entry.previous_session_id = Some(sid(previous));
        }
    }

    fn fail(&self, key: &str) {
        self.rows
            .lock()
            .unwrap()
            .insert(key.to_owned(), HostRow::Failing);
    }

    fn hold_next_read(&self) -> oneshot::Sender<()> {
        let (tx, rx) = oneshot::channel();
        *self.gate.lock().unwrap() = Some(rx);
        tx
    }

    fn entry(&self, key: &str) -> Option<HostSessionEntry> {
        match self.rows.lock().unwrap().get(key) {
            Some(HostRow::Entry(entry)) => Some(entry.clone()),
            _ => None,
        }
    }
}

#[async_trait]
impl HostSessionStore for Host {
    async fn read_session(&self, key: &SessionKey) -> HostSessionRead {
        let gate = self.gate.lock().unwrap().take();
        if let Some(gate) = gate {
            self.read_entered.notify_one();
            let _ = gate.await;
        }
        self.reads.fetch_add(1, Ordering::SeqCst);
        match self.rows.lock().unwrap().get(key.as_str()) {
            Some(HostRow::Entry(entry)) => HostSessionRead::Current(entry.clone()),
            Some(HostRow::Failing) => {
                HostSessionRead::Failed(Error::other("session store unavailable"))
            }
            None => HostSessionRead::Missing,
        }
    }
}

/// One backend row (thread-binding backend semantics, see `docs/harness-backend.md`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    session_id: SessionId,
    active: bool,
    retired: bool,
    thread: Option<String>,
}

#[derive(Debug, Default)]
struct Bindings {
    row: Mutex<Option<Row>>,
    adopt_calls: AtomicUsize,
    reclaim_calls: AtomicUsize,
    prepare_gate: Mutex<Option<oneshot::Receiver<()>>>,
    prepare_entered: Notify,
}

impl Bindings {
    fn bound(owner: &str, thread: &str) -> Arc<Self> {
        let bindings = Arc::new(Self::default());
        *bindings.row.lock().unwrap() = Some(Row {
            session_id: sid(owner),
            active: true,
            retired: false,
            thread: Some(thread.to_owned()),
        });
        bindings
    }

    fn row(&self) -> Option<Row> {
        self.row.lock().unwrap().clone()
    }
}

/// The generation operations and binding reader of one target generation.
#[derive(Debug)]
struct Ops {
    bindings: Arc<Bindings>,
    target: SessionId,
}

#[async_trait]
impl GenerationOperations for Ops {
    async fn prepare_reclaim(&self) -> Result<ReclaimPlan, Error> {
        let gate = self.bindings.prepare_gate.lock().unwrap().take();
        if let Some(gate) = gate {
            self.bindings.prepare_entered.notify_one();
            let _ = gate.await;
        }
        Ok(match self.bindings.row() {
            None => ReclaimPlan::Resolved(true),
            Some(row) if row.session_id == self.target => {
                if !row.active && row.retired {
                    ReclaimPlan::Verify {
                        expected_previous: row.session_id,
                    }
                } else {
                    ReclaimPlan::Resolved(true)
                }
            }
            Some(row) => ReclaimPlan::Verify {
                expected_previous: row.session_id,
            },
        })
    }

    async fn adopt(
        &self,
        expected_previous: &SessionId,
        authority: &BindingAuthority,
    ) -> Result<AdoptionResult, Error> {
        self.bindings.adopt_calls.fetch_add(1, Ordering::SeqCst);
        authority
            .with_current(|| {
                let mut row = self.bindings.row.lock().unwrap();
                match row.as_mut() {
                    Some(r) if r.active => {
                        if r.session_id == self.target {
                            AdoptionResult::Current
                        } else if &r.session_id != expected_previous {
                            AdoptionResult::Conflict
                        } else {
                            r.session_id = self.target.clone();
                            AdoptionResult::Adopted
                        }
                    }
                    _ => AdoptionResult::Absent,
                }
            })
            .await
    }

    async fn reclaim(
        &self,
        expected_previous: &SessionId,
        authority: &BindingAuthority,
    ) -> Result<bool, Error> {
        self.bindings.reclaim_calls.fetch_add(1, Ordering::SeqCst);
        authority
            .with_current(|| {
                let mut row = self.bindings.row.lock().unwrap();
                match row.as_mut() {
                    None => true,
                    Some(r) if r.session_id == self.target => r.active || !r.retired,
                    Some(r) if &r.session_id != expected_previous => false,
                    Some(r) => {
                        *r = Row {
                            session_id: self.target.clone(),
                            active: false,
                            retired: false,
                            thread: None,
                        };
                        true
                    }
                }
            })
            .await
    }
}

#[async_trait]
impl BindingReader for Ops {
    type Binding = String;

    async fn read_binding(&self, generation: Option<&SessionId>) -> Result<Option<String>, Error> {
        let owner = generation.unwrap_or(&self.target);
        Ok(self
            .bindings
            .row()
            .filter(|r| r.active && &r.session_id == owner)
            .and_then(|r| r.thread))
    }
}

/// A reader that returns a binding whatever the host says (the #138767 shape).
#[derive(Debug)]
struct AlwaysReadable;

#[async_trait]
impl BindingReader for AlwaysReadable {
    type Binding = String;

    async fn read_binding(&self, _generation: Option<&SessionId>) -> Result<Option<String>, Error> {
        Ok(Some("thread-1".into()))
    }
}

fn target(session: &str) -> GenerationTarget {
    GenerationTarget::new(AgentId::new("main").unwrap(), sid(session), Some(skey(KEY)))
}

fn caller() -> BindingAuthority {
    BindingAuthority::caller(always_current())
}

fn request<'a, R: BindingReader>(
    target: &'a GenerationTarget,
    caller: &'a BindingAuthority,
    reader: &'a R,
) -> ResolveRequest<'a, R> {
    ResolveRequest {
        target,
        caller,
        reader,
        generation: None,
        reclaim_stale: false,
        assert_binding: None,
    }
}

fn is_superseded(err: &Error, session: &str) -> bool {
    matches!(err, Error::SupersededGeneration { session_id, .. } if session_id == session)
        && err
            .to_string()
            .contains("Session generation is no longer current")
}

/// Scenario 32: a binding resolved for the current generation is fenced once the host rotates.
#[tokio::test]
async fn lifecycle_scenario_32_readable_binding_fenced_after_rotation() {
    let host = Arc::new(Host::default());
    host.put(KEY, "current", None);
    let authority = GenerationAuthority::new(host.clone());
    let ops = Ops {
        bindings: Bindings::bound("current", "thread-1"),
        target: sid("current"),
    };
    let target = target("current");
    let caller = caller();
    let resolved = authority
        .resolve_binding(request(&target, &caller, &ops))
        .await
        .unwrap();
    assert_eq!(resolved.binding.as_deref(), Some("thread-1"));
    assert_eq!(resolved.state, GenerationState::Current);
    let ran = resolved.authority.with_current(|| true).await.unwrap();
    assert!(ran, "consume runs while current");

    host.rotate(KEY, "successor");
    let err = resolved.authority.verify().await.unwrap_err();
    assert!(is_superseded(&err, "current"), "{err}");
    let mut consumed = false;
    let err = resolved
        .authority
        .with_current(|| consumed = true)
        .await
        .unwrap_err();
    assert!(is_superseded(&err, "current"));
    assert!(!consumed);
}

/// Scenario 33: an admitted stale session is rejected even though its binding is readable.
#[tokio::test]
async fn lifecycle_scenario_33_stale_admitted_session_rejected() {
    let host = Arc::new(Host::default());
    host.put(KEY, "session-current", None);
    let authority = GenerationAuthority::new(host.clone());
    let ops = Ops {
        bindings: Bindings::bound("session-stale", "thread-stale"),
        target: sid("session-stale"),
    };
    assert_eq!(
        ops.read_binding(None).await.unwrap().as_deref(),
        Some("thread-stale")
    );
    let target = target("session-stale");
    let caller = caller();
    let err = authority
        .resolve_binding(request(&target, &caller, &ops))
        .await
        .unwrap_err();
    assert!(is_superseded(&err, "session-stale"), "{err}");
    let capture = authority.capture(&target, &caller).await.unwrap();
    assert_eq!(capture.state(), GenerationState::Superseded);
    assert!(capture.assert_host_current().await.is_err());
}

/// Scenario 34: with no host row for the key, the session is ephemeral: the binding resolves,
/// and only the caller's authority governs afterwards.
#[tokio::test]
async fn lifecycle_scenario_34_ephemeral_session_keeps_caller_authority() {
    let host = Arc::new(Host::default());
    host.put("agent:main:other", "other", None);
    let authority = GenerationAuthority::new(host.clone());
    let ops = Ops {
        bindings: Bindings::bound("eph", "thread-eph"),
        target: sid("eph"),
    };
    let closed = Arc::new(AtomicBool::new(false));
    let flag = closed.clone();
    let caller = BindingAuthority::caller(Arc::new(move || {
        if flag.load(Ordering::SeqCst) {
            Err(Error::revoked("caller authority closed"))
        } else {
            Ok(())
        }
    }));
    let target = target("eph");
    let resolved = authority
        .resolve_binding(request(&target, &caller, &ops))
        .await
        .unwrap();
    assert_eq!(resolved.state, GenerationState::Ephemeral);
    assert_eq!(resolved.binding.as_deref(), Some("thread-eph"));
    resolved.authority.verify().await.unwrap();
    resolved.authority.assert_current().unwrap();

    closed.store(true, Ordering::SeqCst);
    let err = resolved.authority.verify().await.unwrap_err();
    assert_eq!(err.to_string(), "caller authority closed");
    assert!(resolved.authority.assert_current().is_err());
}

/// Scenario 35: the host rotates while the backend prepares the reclaim; the call fails with
/// the superseded error instead of adopting across two generations, and the next generation
/// cannot adopt a row whose owner is not its recorded predecessor.
#[tokio::test]
async fn lifecycle_scenario_35_no_bridging_during_predecessor_wait() {
    let host = Arc::new(Host::default());
    host.put(KEY, "current", Some("previous"));
    let authority = GenerationAuthority::new(host.clone());
    let bindings = Bindings::bound("previous", "thread-1");
    let (release, gate) = oneshot::channel();
    *bindings.prepare_gate.lock().unwrap() = Some(gate);
    let ops = Ops {
        bindings: bindings.clone(),
        target: sid("current"),
    };
    let target_current = target("current");
    let caller = caller();
    let reclaim = authority.reclaim_generation(&target_current, &caller, &ops, false);
    let rotate = async {
        bindings.prepare_entered.notified().await;
        host.rotate(KEY, "next");
        release.send(()).unwrap();
    };
    let (result, ()) = tokio::join!(reclaim, rotate);
    let err = result.unwrap_err();
    assert!(is_superseded(&err, "current"), "{err}");
    assert_eq!(
        err.to_string(),
        "Session generation is no longer current: current"
    );
    assert_eq!(bindings.adopt_calls.load(Ordering::SeqCst), 0);
    assert_eq!(bindings.row().unwrap().session_id, sid("previous"));
    let entry = host.entry(KEY).unwrap();
    assert_eq!(entry.session_id, sid("next"));
    assert_eq!(entry.previous_session_id, Some(sid("current")));

    let next_ops = Ops {
        bindings: bindings.clone(),
        target: sid("next"),
    };
    let result = authority
        .reclaim_generation(&target("next"), &caller, &next_ops, false)
        .await
        .unwrap();
    assert!(!result, "the predecessor of next is current, not previous");
    assert_eq!(bindings.adopt_calls.load(Ordering::SeqCst), 0);
    assert_eq!(bindings.row().unwrap().session_id, sid("previous"));
}

/// The verified predecessor is adopted before any stale reclamation; a stale row owned by a
/// generation that is not the recorded predecessor is reclaimed only with `reclaim_stale`.
#[tokio::test]
async fn reclaim_adopts_verified_predecessor_before_stale_reclamation() {
    let host = Arc::new(Host::default());
    host.put(KEY, "s2", Some("s1"));
    let authority = GenerationAuthority::new(host.clone());
    let bindings = Bindings::bound("s1", "thread-1");
    let ops = Ops {
        bindings: bindings.clone(),
        target: sid("s2"),
    };
    assert!(
        authority
            .reclaim_generation(&target("s2"), &caller(), &ops, true)
            .await
            .unwrap()
    );
    assert_eq!(bindings.adopt_calls.load(Ordering::SeqCst), 1);
    assert_eq!(bindings.reclaim_calls.load(Ordering::SeqCst), 0);
    let row = bindings.row().unwrap();
    assert_eq!((row.session_id, row.active), (sid("s2"), true));
    assert_eq!(row.thread.as_deref(), Some("thread-1"));

    // A row owned by an unrelated generation: not adopted; reclaimed only when allowed.
    let stale = Bindings::bound("s0", "thread-0");
    let stale_ops = Ops {
        bindings: stale.clone(),
        target: sid("s2"),
    };
    assert!(
        !authority
            .reclaim_generation(&target("s2"), &caller(), &stale_ops, false)
            .await
            .unwrap()
    );
    assert_eq!(stale.adopt_calls.load(Ordering::SeqCst), 0);
    assert!(
        authority
            .reclaim_generation(&target("s2"), &caller(), &stale_ops, true)
            .await
            .unwrap()
    );
    let row = stale.row().unwrap();
    assert_eq!((row.session_id, row.active), (sid("s2"), false));

    // Without a session key nothing needs reclaiming.
    let keyless = GenerationTarget::new(AgentId::new("main").unwrap(), sid("s9"), None);
    assert!(
        authority
            .reclaim_generation(&keyless, &caller(), &stale_ops, false)
            .await
            .unwrap()
    );
}

/// The recorded predecessor's binding is adopted only across a transfer: after a reset or a
/// cut it is reclaimed (cleared for the new generation), even when the caller did not allow
/// reclaiming stale rows; `resolve_binding` checks its ownership first (a refused owner is
/// neither adopted nor cleared) and never returns it.
#[tokio::test]
async fn reclaim_never_adopts_across_a_reset_or_a_cut() {
    use tether_core::GenerationChange;

    for change in [GenerationChange::Reset, GenerationChange::Cut] {
        let host = Arc::new(Host::default());
        host.put(KEY, "s2", Some("s1"));
        host.set_change(KEY, change);
        let authority = GenerationAuthority::new(host.clone());
        let bindings = Bindings::bound("s1", "thread-1");
        let ops = Ops {
            bindings: bindings.clone(),
            target: sid("s2"),
        };
        assert!(
            authority
                .reclaim_generation(&target("s2"), &caller(), &ops, false)
                .await
                .unwrap(),
            "{change:?}"
        );
        assert_eq!(bindings.adopt_calls.load(Ordering::SeqCst), 0, "{change:?}");
        assert_eq!(
            bindings.reclaim_calls.load(Ordering::SeqCst),
            1,
            "{change:?}"
        );
        let row = bindings.row().unwrap();
        assert_eq!(
            (row.session_id, row.active),
            (sid("s2"), false),
            "{change:?}"
        );
        assert_eq!(row.thread, None, "{change:?}");

        // A row an earlier generation left (two changes without a turn between them): the
        // reset or cut ended that context too, so it is cleared, never adopted, whatever
        // `reclaim_stale` says; under an ownership check (which sees only the current and the
        // predecessor's binding) it is left alone.
        let earlier = Bindings::bound("s0", "thread-0");
        let earlier_ops = Ops {
            bindings: earlier.clone(),
            target: sid("s2"),
        };
        assert!(
            authority
                .reclaim_generation(&target("s2"), &caller(), &earlier_ops, false)
                .await
                .unwrap(),
            "{change:?}"
        );
        assert_eq!(earlier.adopt_calls.load(Ordering::SeqCst), 0, "{change:?}");
        let row = earlier.row().unwrap();
        assert_eq!(
            (row.session_id, row.active),
            (sid("s2"), false),
            "{change:?}"
        );
        let earlier = Bindings::bound("s0", "thread-0");
        let earlier_ops = Ops {
            bindings: earlier.clone(),
            target: sid("s2"),
        };
        let accept_any: &(dyn Fn(Option<&String>) -> Result<(), Error> + Send + Sync) = &|_| Ok(());
        let (t, c) = (target("s2"), caller());
        let resolved = authority
            .resolve_binding(ResolveRequest {
                generation: Some(&earlier_ops),
                assert_binding: Some(accept_any),
                ..request(&t, &c, &earlier_ops)
            })
            .await
            .unwrap();
        assert_eq!(resolved.binding, None, "{change:?}");
        assert_eq!(
            earlier.reclaim_calls.load(Ordering::SeqCst),
            0,
            "{change:?}"
        );
        assert_eq!(earlier.row().unwrap().session_id, sid("s0"), "{change:?}");

        // Resolving: an ownership check that refuses the predecessor's binding refuses the
        // resolution before anything is adopted or cleared; one that accepts it gets the
        // row cleared and no binding back.
        let bindings = Bindings::bound("s1", "thread-1");
        let ops = Ops {
            bindings: bindings.clone(),
            target: sid("s2"),
        };
        let refuse_any: &(dyn Fn(Option<&String>) -> Result<(), Error> + Send + Sync) =
            &|binding| match binding {
                Some(thread) => Err(Error::other(format!("owned elsewhere: {thread}"))),
                None => Ok(()),
            };
        let (t, c) = (target("s2"), caller());
        let refused = authority
            .resolve_binding(ResolveRequest {
                generation: Some(&ops),
                assert_binding: Some(refuse_any),
                ..request(&t, &c, &ops)
            })
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("owned elsewhere: thread-1"),
            "{refused}"
        );
        assert_eq!(bindings.adopt_calls.load(Ordering::SeqCst), 0, "{change:?}");
        assert_eq!(
            bindings.reclaim_calls.load(Ordering::SeqCst),
            0,
            "{change:?}"
        );
        let resolved = authority
            .resolve_binding(ResolveRequest {
                generation: Some(&ops),
                ..request(&t, &c, &ops)
            })
            .await
            .unwrap();
        assert_eq!(resolved.binding, None, "{change:?}");
        assert_eq!(resolved.previous_change, Some(change));
        assert_eq!(bindings.adopt_calls.load(Ordering::SeqCst), 0, "{change:?}");
        assert_eq!(
            bindings.reclaim_calls.load(Ordering::SeqCst),
            1,
            "{change:?}"
        );
    }

    // The same rows across a transfer: adopted, the thread continues.
    let host = Arc::new(Host::default());
    host.put(KEY, "s2", Some("s1"));
    let authority = GenerationAuthority::new(host.clone());
    let bindings = Bindings::bound("s1", "thread-1");
    let ops = Ops {
        bindings: bindings.clone(),
        target: sid("s2"),
    };
    let (t, c) = (target("s2"), caller());
    let resolved = authority
        .resolve_binding(ResolveRequest {
            generation: Some(&ops),
            ..request(&t, &c, &ops)
        })
        .await
        .unwrap();
    assert_eq!(resolved.binding.as_deref(), Some("thread-1"));
    assert_eq!(resolved.previous_change, Some(GenerationChange::Transfer));
}

/// A predecessor recorded before the change column existed (`previous_change: None`) reads
/// as a transfer: its binding is adopted, as it was then.
#[tokio::test]
async fn a_predecessor_without_a_recorded_change_is_adopted_as_before() {
    let host = Arc::new(Host::default());
    host.put(KEY, "s2", Some("s1"));
    {
        let mut rows = host.rows.lock().unwrap();
        let Some(HostRow::Entry(entry)) = rows.get_mut(KEY) else {
            panic!("no row");
        };
        entry.previous_change = None;
    }
    let authority = GenerationAuthority::new(host.clone());
    let bindings = Bindings::bound("s1", "thread-1");
    let ops = Ops {
        bindings: bindings.clone(),
        target: sid("s2"),
    };
    assert!(
        authority
            .reclaim_generation(&target("s2"), &caller(), &ops, false)
            .await
            .unwrap()
    );
    assert_eq!(bindings.adopt_calls.load(Ordering::SeqCst), 1);
    assert_eq!(bindings.reclaim_calls.load(Ordering::SeqCst), 0);
    let row = bindings.row().unwrap();
    assert_eq!(row.session_id, sid("s2"));
    assert_eq!(row.thread.as_deref(), Some("thread-1"));
}

/// `resolve_binding` checks ownership against the predecessor's binding without adopting it,
/// then (with generation operations) adopts only through the verified plan.
#[tokio::test]
async fn resolve_checks_predecessor_ownership_without_adopting() {
    let host = Arc::new(Host::default());
    host.put(KEY, "s2", Some("s1"));
    let authority = GenerationAuthority::new(host.clone());
    let bindings = Bindings::bound("s1", "thread-1");
    let ops = Ops {
        bindings: bindings.clone(),
        target: sid("s2"),
    };
    let seen = Mutex::new(Vec::new());
    let check = |binding: Option<&String>| {
        seen.lock().unwrap().push(binding.cloned());
        Ok(())
    };
    let target = target("s2");
    let caller = caller();
    let resolved = authority
        .resolve_binding(ResolveRequest {
            assert_binding: Some(&check),
            ..request(&target, &caller, &ops)
        })
        .await
        .unwrap();
    assert_eq!(resolved.binding, None);
    assert_eq!(
        *seen.lock().unwrap(),
        vec![Some("thread-1".to_owned()), None],
        "the predecessor's binding before, the (absent) final binding after"
    );
    assert_eq!(bindings.adopt_calls.load(Ordering::SeqCst), 0);
    assert_eq!(bindings.row().unwrap().session_id, sid("s1"));

    let resolved = authority
        .resolve_binding(ResolveRequest {
            generation: Some(&ops),
            ..request(&target, &caller, &ops)
        })
        .await
        .unwrap();
    assert_eq!(resolved.binding.as_deref(), Some("thread-1"));
    assert_eq!(bindings.row().unwrap().session_id, sid("s2"));

    // A refused predecessor is never adopted, even with generation operations.
    let fresh = Bindings::bound("s1", "thread-1");
    let fresh_ops = Ops {
        bindings: fresh.clone(),
        target: sid("s2"),
    };
    let supervised = |binding: Option<&String>| match binding {
        Some(_) => Err(Error::other("owned by supervision")),
        None => Ok(()),
    };
    let err = authority
        .resolve_binding(ResolveRequest {
            generation: Some(&fresh_ops),
            assert_binding: Some(&supervised),
            ..request(&target, &caller, &fresh_ops)
        })
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "owned by supervision");
    assert_eq!(fresh.adopt_calls.load(Ordering::SeqCst), 0);
    assert_eq!(fresh.row().unwrap().session_id, sid("s1"));

    // An ownership refusal is returned as is.
    let refuse = |_: Option<&String>| Err(Error::other("owned by supervision"));
    let err = authority
        .resolve_binding(ResolveRequest {
            assert_binding: Some(&refuse),
            ..request(&target, &caller, &ops)
        })
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "owned by supervision");
}

/// With `reclaim_stale`, an absent binding whose row cannot be reclaimed is the superseded
/// error; without it, the resolution simply has no binding.
#[tokio::test]
async fn resolve_with_reclaim_stale_fails_when_the_row_cannot_be_reclaimed() {
    let host = Arc::new(Host::default());
    host.put(KEY, "s3", Some("s2"));
    let authority = GenerationAuthority::new(host.clone());
    // The target's own retired fence: the plan asks to verify s3, which is not the recorded
    // predecessor, and this backend refuses to reclaim its own retired fence.
    let bindings = Arc::new(Bindings::default());
    *bindings.row.lock().unwrap() = Some(Row {
        session_id: sid("s3"),
        active: false,
        retired: true,
        thread: None,
    });
    let ops = Ops {
        bindings: bindings.clone(),
        target: sid("s3"),
    };
    let target = target("s3");
    let caller = caller();
    let err = authority
        .resolve_binding(ResolveRequest {
            generation: Some(&ops),
            reclaim_stale: true,
            ..request(&target, &caller, &ops)
        })
        .await
        .unwrap_err();
    assert!(is_superseded(&err, "s3"), "{err}");
    assert_eq!(bindings.adopt_calls.load(Ordering::SeqCst), 0);
    assert_eq!(bindings.reclaim_calls.load(Ordering::SeqCst), 1);

    let resolved = authority
        .resolve_binding(ResolveRequest {
            generation: Some(&ops),
            ..request(&target, &caller, &ops)
        })
        .await
        .unwrap();
    assert_eq!(resolved.binding, None);
    assert_eq!(bindings.reclaim_calls.load(Ordering::SeqCst), 1);
}

/// Scenario 36, in our design. OpenClaw reads an incognito key's lineage natively, without SQL.
/// Our lineage reads all go through [`HostSessionStore`], so the same property is: a combined
/// authority reads each distinct lineage source once per admission (one pass, duplicates
/// shared), and a changed **predecessor** alone (same `session_id`) is rejected.
#[tokio::test]
async fn lifecycle_scenario_36_one_pass_lineage_and_changed_predecessor_rejected() {
    let host = Arc::new(Host::default());
    host.put(KEY, "current", Some("predecessor"));
    let authority = GenerationAuthority::new(host.clone());
    let caller = caller();
    let a = authority
        .capture(&target("current"), &caller)
        .await
        .unwrap();
    let b = authority
        .capture(&target("current"), &caller)
        .await
        .unwrap();
    let combined = BindingAuthority::combine([
        a.authority().clone(),
        b.authority().clone(),
        a.authority().clone(),
    ]);
    assert_eq!(combined.lineage().len(), 2, "deduplicated by authority");
    let before = host.reads.load(Ordering::SeqCst);
    assert!(combined.with_current(|| true).await.unwrap());
    assert_eq!(
        host.reads.load(Ordering::SeqCst) - before,
        1,
        "both lineage entries share one read of the same row"
    );

    host.set_previous(KEY, "someone-else");
    let mut consumed = false;
    let err = combined.with_current(|| consumed = true).await.unwrap_err();
    assert!(is_superseded(&err, "current"), "{err}");
    assert!(!consumed);
    assert!(a.assert_host_current().await.is_err());
    assert!(a.assert_current().await.is_err());
}

/// Scenario 37, in our design. OpenClaw pins an incognito store's incarnation across a durable
/// read. Our equivalent: while one lineage read of the pass waits, the caller's authority (the
/// owner of the other source) closes — the admission fails and `consume` never runs; and a
/// source whose read fails in the pass fails the whole admission.
#[tokio::test]
async fn lifecycle_scenario_37_source_change_during_a_waiting_read_refuses_consume() {
    let durable = Arc::new(Host::default());
    durable.put(KEY, "current", None);
    let other = Arc::new(Host::default());
    other.put("agent:main:incognito", "inc", None);
    let closed = Arc::new(AtomicBool::new(false));
    let flag = closed.clone();
    let caller = BindingAuthority::caller(Arc::new(move || {
        if flag.load(Ordering::SeqCst) {
            Err(Error::revoked("Session currency owner changed"))
        } else {
            Ok(())
        }
    }));
    let a = GenerationAuthority::new(durable.clone())
        .capture(&target("current"), &caller)
        .await
        .unwrap();
    let incognito = GenerationTarget::new(
        AgentId::new("main").unwrap(),
        sid("inc"),
        Some(skey("agent:main:incognito")),
    );
    let b = GenerationAuthority::new(other.clone())
        .capture(&incognito, &caller)
        .await
        .unwrap();
    let combined = BindingAuthority::combine([a.authority().clone(), b.authority().clone()]);

    let release = durable.hold_next_read();
    let consumed = AtomicBool::new(false);
    let admission = combined.with_current(|| consumed.store(true, Ordering::SeqCst));
    let close = async {
        durable.read_entered.notified().await;
        closed.store(true, Ordering::SeqCst);
        release.send(()).unwrap();
    };
    let (result, ()) = tokio::join!(admission, close);
    assert_eq!(
        result.unwrap_err().to_string(),
        "Session currency owner changed"
    );
    assert!(!consumed.load(Ordering::SeqCst));

    closed.store(false, Ordering::SeqCst);
    combined.verify().await.unwrap();
    other.fail("agent:main:incognito");
    let err = combined
        .with_current(|| consumed.store(true, Ordering::SeqCst))
        .await
        .unwrap_err();
    assert!(is_superseded(&err, "inc"), "{err}");
    assert!(!consumed.load(Ordering::SeqCst));
}

/// Scenario 38, in our design. OpenClaw detects a lineage database file replaced during an
/// awaited tool preparation. Our equivalent: a lineage change that lands during any awaited
/// preparation is caught by the admission that follows, and the effect is not run; only an
/// unchanged row or a metadata-only change (same generation and predecessor) admits.
#[tokio::test]
async fn lifecycle_scenario_38_lineage_change_during_preparation_refuses_effect() {
    let host = Arc::new(Host::default());
    host.put(KEY, "current", Some("prev"));
    let authority = GenerationAuthority::new(host.clone());
    let capture = authority
        .capture(&target("current"), &caller())
        .await
        .unwrap();

    // Unchanged and metadata-only: admitted.
    tokio::task::yield_now().await;
    assert!(capture.authority().with_current(|| true).await.unwrap());
    host.touch(KEY);
    tokio::task::yield_now().await;
    assert!(capture.authority().with_current(|| true).await.unwrap());

    // Replaced during the preparation: refused, effect not run.
    let mut consumed = false;
    let prepared = async {
        tokio::task::yield_now().await;
        host.rotate(KEY, "replacement");
    };
    prepared.await;
    let err = capture
        .authority()
        .with_current(|| consumed = true)
        .await
        .unwrap_err();
    assert!(is_superseded(&err, "current"));
    assert!(!consumed);
}

/// Regression for #138767: an already-readable binding must not bypass the generation fence.
/// A binding is readable, but the host row moved on or cannot be read: resolution fails
/// closed; and a binding resolved while current stops authorizing once the host rotates.
#[tokio::test]
async fn regression_138767_readable_binding_cannot_bypass_generation_fence() {
    let host = Arc::new(Host::default());
    host.put(KEY, "rotated", Some("s1"));
    let authority = GenerationAuthority::new(host.clone());
    let target = target("s1");
    let caller = caller();
    let err = authority
        .resolve_binding(request(&target, &caller, &AlwaysReadable))
        .await
        .unwrap_err();
    assert!(is_superseded(&err, "s1"), "{err}");

    host.fail(KEY);
    let err = authority
        .resolve_binding(request(&target, &caller, &AlwaysReadable))
        .await
        .unwrap_err();
    assert!(
        is_superseded(&err, "s1"),
        "a failed host read never authorizes: {err}"
    );
    let capture = authority.capture(&target, &caller).await.unwrap();
    assert_eq!(capture.state(), GenerationState::Superseded);

    host.put(KEY, "s1", None);
    let resolved = authority
        .resolve_binding(request(&target, &caller, &AlwaysReadable))
        .await
        .unwrap();
    assert_eq!(resolved.binding.as_deref(), Some("thread-1"));
    host.rotate(KEY, "s2");
    assert!(resolved.authority.verify().await.is_err());
}

/// The same fence against the storage crate's in-memory host session store: resolution while
/// current, rotation supersedes, an injected read failure fails closed, and a missing row is
/// ephemeral.
#[tokio::test]
async fn generation_fence_over_the_memory_host_store() {
    use tether_core::FakeClock;
    use tether_storage::MemoryStore;

    let store = Arc::new(MemoryStore::new(Arc::new(FakeClock::new(
        Timestamp::from_millis(0),
    ))));
    store.put_host_session(HostSessionEntry::new(
        skey(KEY),
        AgentId::new("main").unwrap(),
        sid("s1"),
        Timestamp::from_millis(0),
    ));
    let authority = GenerationAuthority::new(store.clone());
    let s1 = target("s1");
    let caller = caller();
    let resolved = authority
        .resolve_binding(request(&s1, &caller, &AlwaysReadable))
        .await
        .unwrap();
    assert_eq!(resolved.state, GenerationState::Current);
    resolved.authority.verify().await.unwrap();

    store.fail_host_session_reads(Some(Error::other("disk gone")));
    let err = resolved.authority.verify().await.unwrap_err();
    assert!(is_superseded(&err, "s1"), "{err}");
    store.fail_host_session_reads(None);
    resolved.authority.verify().await.unwrap();

    store.rotate_host_session(&skey(KEY), sid("s2")).unwrap();
    assert!(resolved.authority.verify().await.is_err());
    let next = authority.capture(&target("s2"), &caller).await.unwrap();
    assert_eq!(next.state(), GenerationState::Current);
    assert_eq!(next.previous_session_id(), Some(&sid("s1")));

    store.remove_host_session(&skey(KEY));
    let gone = authority.capture(&target("s2"), &caller).await.unwrap();
    assert_eq!(gone.state(), GenerationState::Ephemeral);
}
