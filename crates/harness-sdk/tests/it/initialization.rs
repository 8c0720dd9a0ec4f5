//! Initialization owner scenarios 68–71 and the ownership, link and rollback-guard rules of
//! `docs/harness-backend.md`, "Initialization owner".

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tether_core::Clock as _;
use tether_core::{
    AgentId, AssertCurrent, Error, FakeClock, HarnessId, InitializationHandle, SessionKey,
    Timestamp,
};
use tether_harness_sdk::initialization::{
    Cleanup, InitializationBackend, InitializationOwner, LinkDeleteOutcome, PrepareParams,
    UpstreamLink, UpstreamLinkInput, UpstreamLinks,
};

#[derive(Debug)]
struct Handle {
    id: u64,
    rollback_current: AtomicBool,
}

impl Handle {
    fn new(id: u64) -> Arc<Self> {
        Arc::new(Self {
            id,
            rollback_current: AtomicBool::new(true),
        })
    }
}

impl InitializationHandle for Handle {
    fn assert_rollback_current(&self) -> Result<(), Error> {
        if self.rollback_current.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(Error::revoked("initialization rollback no longer current"))
        }
    }

    fn handle_id(&self) -> u64 {
        self.id
    }
}

/// The backend's binding store: identity → native thread.
#[derive(Debug, Default)]
struct Store {
    rows: Mutex<HashMap<String, String>>,
}

#[derive(Debug, Default)]
struct Backend {
    writes: AtomicUsize,
    uncertain: AtomicBool,
}

#[async_trait]
impl InitializationBackend for Backend {
    type Store = Store;
    type Identity = String;
    type Binding = String;

    fn validate_binding(&self, binding: String) -> Result<String, Error> {
        if binding.trim().is_empty() {
            return Err(Error::other("binding requires a thread id"));
        }
        Ok(binding.trim().to_owned())
    }

    async fn write_binding(
        &self,
        store: &Store,
        identity: &String,
        binding: &String,
        assert_current: &AssertCurrent,
    ) -> Result<bool, Error> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        assert_current()?;
        let mut rows = store.rows.lock().unwrap();
        if rows.contains_key(identity) {
            return Ok(false);
        }
        rows.insert(identity.clone(), binding.clone());
        if self.uncertain.load(Ordering::SeqCst) {
            return Err(Error::other("storage outcome unknown"));
        }
        Ok(true)
    }
}

#[derive(Debug, Default)]
struct Links {
    rows: Mutex<HashMap<String, UpstreamLink>>,
}

impl Links {
    fn get(&self, key: &str) -> Option<UpstreamLink> {
        self.rows.lock().unwrap().get(key).cloned()
    }
}

#[async_trait]
impl UpstreamLinks for Links {
    async fn insert_link_if_absent(
        &self,
        link: &UpstreamLink,
        assert_commit: &AssertCurrent,
    ) -> Result<bool, Error> {
        let mut rows = self.rows.lock().unwrap();
        if rows.contains_key(link.session_key.as_str()) {
            return Ok(false);
        }
        assert_commit()?;
        rows.insert(link.session_key.as_str().to_owned(), link.clone());
        Ok(true)
    }

    async fn delete_link_if_unchanged(
        &self,
        expected: &UpstreamLink,
        assert_commit: &AssertCurrent,
    ) -> Result<LinkDeleteOutcome, Error> {
        let mut rows = self.rows.lock().unwrap();
        match rows.get(expected.session_key.as_str()) {
            None => Ok(LinkDeleteOutcome::Absent),
            Some(stored) if stored != expected => Ok(LinkDeleteOutcome::Changed),
            Some(_) => {
                assert_commit()?;
                rows.remove(expected.session_key.as_str());
                Ok(LinkDeleteOutcome::Deleted)
            }
        }
    }
}

const SESSION: &str = "agent:main:direct:peer";

struct Fixture {
    owner: InitializationOwner<Backend>,
    backend: Arc<Backend>,
    links: Arc<Links>,
    store: Arc<Store>,
    clock: Arc<FakeClock>,
    cleanups: Arc<AtomicUsize>,
    cleanup_saw_link: Arc<Mutex<Vec<bool>>>,
}

impl Fixture {
    fn new() -> Self {
        let backend = Arc::new(Backend::default());
        let links = Arc::new(Links::default());
        let clock = Arc::new(FakeClock::new(Timestamp::from_millis(1_000)));
        Self {
            owner: InitializationOwner::new(backend.clone(), links.clone(), clock.clone()),
            backend,
            links,
            store: Arc::new(Store::default()),
            clock,
            cleanups: Arc::new(AtomicUsize::new(0)),
            cleanup_saw_link: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// A cleanup that removes the bound row and records whether the link was still there.
    fn cleanup(&self) -> Cleanup {
        let store = self.store.clone();
        let links = self.links.clone();
        let count = self.cleanups.clone();
        let saw = self.cleanup_saw_link.clone();
        Arc::new(move |assert_rollback: AssertCurrent| {
            let store = store.clone();
            let links = links.clone();
            let count = count.clone();
            let saw = saw.clone();
            Box::pin(async move {
                assert_rollback()?;
                saw.lock().unwrap().push(links.get(SESSION).is_some());
                store.rows.lock().unwrap().remove("identity-1");
                count.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        })
    }

    fn params(&self, handle: &Arc<Handle>) -> PrepareParams<Backend> {
        PrepareParams {
            initialization: handle.clone(),
            assert_current: tether_core::always_current(),
            store: self.store.clone(),
            identity: "identity-1".into(),
            cleanup: Some(self.cleanup()),
            assert_cleanup_allowed: None,
        }
    }
}

fn link_input(upstream: &str) -> UpstreamLinkInput {
    UpstreamLinkInput {
        session_key: SessionKey::new(SESSION).unwrap(),
        agent_id: AgentId::new("main").unwrap(),
        harness_id: HarnessId::new("codex").unwrap(),
        upstream_id: upstream.into(),
    }
}

fn dyn_handle(handle: &Arc<Handle>) -> Arc<dyn InitializationHandle> {
    handle.clone()
}

fn is_owner_changed(err: &Error) -> bool {
    matches!(err, Error::OwnerChanged { owner, .. } if owner.starts_with("initialization:"))
        && err.to_string() == "Session initialization owner changed"
}

/// Scenario 68: `bind` whose set-if-absent write is refused fails with the binding-changed
/// error, and the ownership then records no binding.
#[tokio::test]
async fn lifecycle_scenario_68_refused_bind_forgets_the_binding() {
    let f = Fixture::new();
    f.store
        .rows
        .lock()
        .unwrap()
        .insert("identity-1".into(), "thread-other".into());
    let handle = Handle::new(68);
    let prepared = f.owner.prepare(f.params(&handle)).unwrap();
    let err = prepared.bind("thread-1".into()).await.unwrap_err();
    assert!(
        matches!(err, Error::OwnerChanged { ref owner, .. } if owner == "native binding"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "Native session binding changed during session initialization"
    );
    assert_eq!(prepared.recorded_binding(), None);
    assert_eq!(
        f.store.rows.lock().unwrap().get("identity-1").unwrap(),
        "thread-other",
        "the other owner's binding is untouched"
    );

    let h = dyn_handle(&handle);
    let err = f
        .owner
        .get_rollback(
            &f.store,
            Some(&h),
            &"identity-1".into(),
            Some(&"thread-other".into()),
        )
        .unwrap_err();
    assert!(
        is_owner_changed(&err),
        "the other binding is not ours: {err}"
    );
    assert!(
        f.owner
            .get_rollback(&f.store, Some(&h), &"identity-1".into(), None)
            .unwrap()
            .is_some()
    );
}

/// Scenario 69: after prepare, bind and link, a rollback asked for another store object,
/// identity or binding is refused with the owner-changed error.
#[tokio::test]
async fn lifecycle_scenario_69_rollback_for_another_owner_is_refused() {
    let f = Fixture::new();
    let handle = Handle::new(69);
    let prepared = f.owner.prepare(f.params(&handle)).unwrap();
    prepared.bind("thread-1".into()).await.unwrap();
    prepared.link(link_input("upstream-1")).await.unwrap();
    let h = dyn_handle(&handle);
    let identity = "identity-1".to_owned();
    let binding = "thread-1".to_owned();

    let other_store = Arc::new(Store::default());
    let err = f
        .owner
        .get_rollback(&other_store, Some(&h), &identity, Some(&binding))
        .unwrap_err();
    assert!(is_owner_changed(&err), "{err}");
    let err = f
        .owner
        .get_rollback(&f.store, Some(&h), &"identity-2".into(), Some(&binding))
        .unwrap_err();
    assert!(is_owner_changed(&err), "{err}");
    let err = f
        .owner
        .get_rollback(&f.store, Some(&h), &identity, Some(&"thread-2".into()))
        .unwrap_err();
    assert!(is_owner_changed(&err), "{err}");

    // A different handle object with the same id is not the exact handle.
    let impostor = dyn_handle(&Handle::new(69));
    let err = f
        .owner
        .get_rollback(&f.store, Some(&impostor), &identity, Some(&binding))
        .unwrap_err();
    assert!(is_owner_changed(&err), "{err}");

    assert!(
        f.owner
            .get_rollback(&f.store, Some(&h), &identity, Some(&binding))
            .unwrap()
            .is_some()
    );
}

/// Scenario 70: the upstream link was changed by someone else: rollback fails with the
/// link-changed error, the other link stays, and the backend cleanup does not run.
#[tokio::test]
async fn lifecycle_scenario_70_changed_link_blocks_rollback_and_cleanup() {
    let f = Fixture::new();
    let handle = Handle::new(70);
    let prepared = f.owner.prepare(f.params(&handle)).unwrap();
    prepared.bind("thread-1".into()).await.unwrap();
    prepared.link(link_input("upstream-1")).await.unwrap();

    f.clock.advance(Duration::from_secs(5));
    let successor = UpstreamLink::new(link_input("upstream-successor"), f.clock.now());
    f.links
        .rows
        .lock()
        .unwrap()
        .insert(SESSION.into(), successor.clone());

    let h = dyn_handle(&handle);
    let rollback = f
        .owner
        .get_rollback(
            &f.store,
            Some(&h),
            &"identity-1".into(),
            Some(&"thread-1".into()),
        )
        .unwrap()
        .unwrap();
    let err = rollback.run().await.unwrap_err();
    assert!(
        matches!(err, Error::OwnerChanged { ref owner, .. } if owner == "upstream link"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "Session upstream link changed before initialization rollback"
    );
    assert_eq!(f.links.get(SESSION), Some(successor));
    assert_eq!(f.cleanups.load(Ordering::SeqCst), 0, "cleanup not run");
    assert!(f.store.rows.lock().unwrap().contains_key("identity-1"));
}

/// Scenario 71: no initialization handle → no rollback; a handle with no ownership and no
/// binding → no rollback (nothing to undo).
#[tokio::test]
async fn lifecycle_scenario_71_no_handle_or_no_ownership_means_no_rollback() {
    let f = Fixture::new();
    let identity = "identity-1".to_owned();
    assert!(
        f.owner
            .get_rollback(&f.store, None, &identity, Some(&"thread-1".into()))
            .unwrap()
            .is_none()
    );
    let stranger = dyn_handle(&Handle::new(71));
    assert!(
        f.owner
            .get_rollback(&f.store, Some(&stranger), &identity, None)
            .unwrap()
            .is_none()
    );
    // Ownership missing but a binding named: that binding is someone else's.
    let err = f
        .owner
        .get_rollback(
            &f.store,
            Some(&stranger),
            &identity,
            Some(&"thread-1".into()),
        )
        .unwrap_err();
    assert!(is_owner_changed(&err), "{err}");
}

/// The full rollback: the unchanged link is deleted first, then the backend cleanup runs with
/// the rollback authority; a second run finds nothing to delete.
#[tokio::test]
async fn rollback_deletes_the_unchanged_link_then_runs_cleanup() {
    let f = Fixture::new();
    let handle = Handle::new(100);
    let prepared = f.owner.prepare(f.params(&handle)).unwrap();
    prepared.bind("  thread-1 ".into()).await.unwrap();
    assert_eq!(prepared.recorded_binding().as_deref(), Some("thread-1"));
    prepared.link(link_input("upstream-1")).await.unwrap();
    let link = prepared.recorded_link().unwrap();
    assert_eq!(link.created_at, Timestamp::from_millis(1_000));
    assert_eq!(f.links.get(SESSION), Some(link));

    let h = dyn_handle(&handle);
    let rollback = f
        .owner
        .get_rollback(
            &f.store,
            Some(&h),
            &"identity-1".into(),
            Some(&"thread-1".into()),
        )
        .unwrap()
        .unwrap();
    rollback.run().await.unwrap();
    assert_eq!(f.links.get(SESSION), None);
    assert_eq!(f.cleanups.load(Ordering::SeqCst), 1);
    assert_eq!(*f.cleanup_saw_link.lock().unwrap(), vec![false]);
    assert!(f.store.rows.lock().unwrap().is_empty());

    rollback.run().await.unwrap();
    assert_eq!(f.cleanups.load(Ordering::SeqCst), 2);

    assert!(f.owner.forget(&h));
    assert!(
        f.owner
            .get_rollback(&f.store, Some(&h), &"identity-1".into(), None)
            .unwrap()
            .is_none()
    );
}

/// Ownership is registered before any write: an uncertain binding write keeps the binding
/// recorded, so the rollback still covers it; a refused preparation registers nothing.
#[tokio::test]
async fn ownership_is_registered_before_any_write() {
    let f = Fixture::new();
    let handle = Handle::new(101);
    let h = dyn_handle(&handle);
    let refused = PrepareParams {
        assert_current: Arc::new(|| Err(Error::revoked("initialization closed"))),
        ..f.params(&handle)
    };
    let err = f.owner.prepare(refused).unwrap_err();
    assert_eq!(err.to_string(), "initialization closed");
    assert!(
        f.owner
            .get_rollback(&f.store, Some(&h), &"identity-1".into(), None)
            .unwrap()
            .is_none()
    );

    f.backend.uncertain.store(true, Ordering::SeqCst);
    let prepared = f.owner.prepare(f.params(&handle)).unwrap();
    let err = prepared.bind("thread-1".into()).await.unwrap_err();
    assert_eq!(err.to_string(), "storage outcome unknown");
    assert_eq!(prepared.recorded_binding().as_deref(), Some("thread-1"));
    let rollback = f
        .owner
        .get_rollback(
            &f.store,
            Some(&h),
            &"identity-1".into(),
            Some(&"thread-1".into()),
        )
        .unwrap()
        .unwrap();
    rollback.run().await.unwrap();
    assert!(f.store.rows.lock().unwrap().is_empty());
}

/// Writes stop once the initialization is over; a link that already exists is not
/// overwritten (link-if-absent) and is not recorded as ours.
#[tokio::test]
async fn writes_are_guarded_by_the_initialization_and_links_are_written_if_absent() {
    let f = Fixture::new();
    let handle = Handle::new(102);
    let open = Arc::new(AtomicBool::new(true));
    let flag = open.clone();
    let prepared = f
        .owner
        .prepare(PrepareParams {
            assert_current: Arc::new(move || {
                if flag.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err(Error::revoked("initialization closed"))
                }
            }),
            ..f.params(&handle)
        })
        .unwrap();

    let existing = UpstreamLink::new(link_input("someone-else"), Timestamp::from_millis(1));
    f.links
        .rows
        .lock()
        .unwrap()
        .insert(SESSION.into(), existing.clone());
    let err = prepared.link(link_input("upstream-1")).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Session upstream link could not be written during initialization"
    );
    assert_eq!(prepared.recorded_link(), None);
    assert_eq!(f.links.get(SESSION), Some(existing));

    open.store(false, Ordering::SeqCst);
    let err = prepared.bind("thread-1".into()).await.unwrap_err();
    assert_eq!(err.to_string(), "initialization closed");
    assert_eq!(
        f.backend.writes.load(Ordering::SeqCst),
        0,
        "no write attempted"
    );
    assert!(prepared.assert_current().is_err());
}

/// The rollback is guarded by the initialization handle (before it is handed out and between
/// its steps) and by the backend's `assert_cleanup_allowed`.
#[tokio::test]
async fn rollback_is_guarded_by_the_handle_and_cleanup_admission() {
    let f = Fixture::new();
    let handle = Handle::new(103);
    let prepared = f.owner.prepare(f.params(&handle)).unwrap();
    prepared.bind("thread-1".into()).await.unwrap();
    prepared.link(link_input("upstream-1")).await.unwrap();
    let h = dyn_handle(&handle);
    let identity = "identity-1".to_owned();

    let rollback = f
        .owner
        .get_rollback(&f.store, Some(&h), &identity, None)
        .unwrap()
        .unwrap();
    handle.rollback_current.store(false, Ordering::SeqCst);
    let err = f
        .owner
        .get_rollback(&f.store, Some(&h), &identity, None)
        .unwrap_err();
    assert_eq!(err.to_string(), "initialization rollback no longer current");
    let err = rollback.run().await.unwrap_err();
    assert_eq!(err.to_string(), "initialization rollback no longer current");
    assert!(f.links.get(SESSION).is_some(), "nothing undone");
    assert_eq!(f.cleanups.load(Ordering::SeqCst), 0);

    let guarded = Handle::new(104);
    let refusing = PrepareParams {
        assert_cleanup_allowed: Some(Arc::new(|| {
            Err(Error::other("native work is indeterminate"))
        })),
        ..f.params(&guarded)
    };
    f.owner.prepare(refusing).unwrap();
    let err = f
        .owner
        .get_rollback(&f.store, Some(&dyn_handle(&guarded)), &identity, None)
        .unwrap_err();
    assert_eq!(err.to_string(), "native work is indeterminate");
}
