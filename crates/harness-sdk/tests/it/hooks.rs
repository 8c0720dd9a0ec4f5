//! The harness hooks of the thread-binding backend (`docs/deletion-and-reset.md`, "The harness
//! side"): scenarios 53–56 on the
//! in-memory store, and the harness side of scenarios 57–65 driven by
//! `tether-storage`'s host deletion and context-reset transaction on SQLite and PostgreSQL.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tether_core::{
    AgentHarness, BindingId, BindingStore, Error, FakeClock, HarnessId, MutationRun, Namespace,
    ResetParams, ResetReason, RowTransaction, SequentialTokens, SessionContextResetHook,
    SessionContextResetParams, SessionDeletionHook, SessionDeletionParams, always_current,
};
use tether_harness_sdk::backend::{BindingIdentity, ThreadBinding, ThreadBindingStore};
use tether_harness_sdk::generation::GenerationAuthority;
use tether_harness_sdk::hooks::{NativeThreads, ThreadBindingHarness};
use tether_harness_sdk::lifecycle::{DirectRowTransaction, ManualTimer};

use crate::backend::{Fx, START, agent, caller, opts, sid, skey, thread};

/// The native side: claimed threads, released subscriptions and clients.
#[derive(Debug, Default)]
pub(crate) struct Threads {
    pub(crate) claimed: Mutex<HashSet<String>>,
    pub(crate) released: Mutex<Vec<String>>,
    pub(crate) clients: Mutex<Vec<String>>,
}

impl Threads {
    pub(crate) fn released(&self) -> Vec<String> {
        self.released.lock().unwrap().clone()
    }
}

#[async_trait]
impl NativeThreads for Threads {
    fn is_claimed(&self, thread_id: &str) -> bool {
        self.claimed.lock().unwrap().contains(thread_id)
    }

    async fn release_subscription(&self, binding: &ThreadBinding) -> Result<(), Error> {
        self.released
            .lock()
            .unwrap()
            .push(binding.thread_id.clone());
        Ok(())
    }

    async fn release_client(&self, client_id: &str) -> Result<(), Error> {
        self.clients.lock().unwrap().push(client_id.to_owned());
        Ok(())
    }
}

pub(crate) fn deletion(session: &str) -> SessionDeletionParams {
    SessionDeletionParams {
        agent_id: agent(),
        session_key: skey(),
        session_id: sid(session),
        lifecycle_revision: None,
        initialization: None,
        assert_current: always_current(),
    }
}

fn context_reset(session: &str, previous: Option<&str>) -> SessionContextResetParams {
    SessionContextResetParams {
        agent_id: agent(),
        session_key: skey(),
        session_id: sid(session),
        previous_session_id: previous.map(sid),
        lifecycle_revision: None,
        assert_current: always_current(),
    }
}

pub(crate) fn reset(session: &str, reason: ResetReason) -> ResetParams {
    ResetParams::new(agent(), sid(session), Some(skey()), reason)
}

/// A host continuation that commits the mutation through `tx` (a direct store transaction:
/// the effect is visible at once), then runs `after`.
pub(crate) fn committing<'a>(
    tx: Arc<dyn RowTransaction>,
    after: impl FnOnce() -> Result<(), Error> + Send + 'a,
) -> MutationRun<'a> {
    Box::new(move |m| {
        Box::pin(async move {
            m.commit(&*tx).await?;
            after()
        })
    })
}

pub(crate) fn direct(f: &Fx) -> Arc<dyn RowTransaction> {
    Arc::new(DirectRowTransaction::new(Arc::new(f.mem.clone())))
}

fn harness_with_threads(f: &Fx) -> (ThreadBindingHarness, Arc<Threads>) {
    let threads = Arc::new(Threads::default());
    (f.harness().with_threads(threads.clone()), threads)
}

#[tokio::test]
async fn lifecycle_scenario_53_reset_clears_in_place_without_stranding_the_successor() {
    let f = Fx::new().await;
    f.host("s1", None);
    let s1 = f.id("s1");
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    f.harness()
        .reset(reset("s1", ResetReason::Reset))
        .await
        .unwrap();
    assert_eq!(f.read(&s1).await, None);
    assert!(
        !f.record(&s1).await.is_some_and(|r| r.is_retired()),
        "an in-place reset never retires"
    );
    assert!(f.store.set(&s1, thread("thread-2"), opts()).await.unwrap());
    assert_eq!(f.read(&s1).await.as_deref(), Some("thread-2"));
}

#[tokio::test]
async fn lifecycle_scenario_54_reset_repairs_an_earlier_retirement_fence() {
    let f = Fx::new().await;
    f.host("s1", None);
    let s1 = f.id("s1");
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    f.store.retire(&s1, opts()).await.unwrap();
    assert!(!f.store.set(&s1, thread("thread-2"), opts()).await.unwrap());
    f.harness()
        .reset(reset("s1", ResetReason::Reset))
        .await
        .unwrap();
    let record = f.record(&s1).await.unwrap();
    assert!(!record.is_retired());
    assert_eq!(record.session_id, Some(sid("s1")));
    assert!(f.store.set(&s1, thread("thread-2"), opts()).await.unwrap());
}

#[tokio::test]
async fn reset_keeps_a_retirement_fence_the_host_store_does_not_prove() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    f.store.retire(&s1, opts()).await.unwrap();
    // No host row (ephemeral), then a host row naming another generation: neither proves an
    // in-place lifecycle of s1.
    for host in [None, Some("s9")] {
        if let Some(session) = host {
            f.host(session, None);
        }
        let err = f
            .harness()
            .reset(reset("s1", ResetReason::Reset))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::SupersededGeneration { .. }), "{err:?}");
        assert!(f.record(&s1).await.unwrap().is_retired(), "fence kept");
        assert!(!f.store.set(&s1, thread("thread-2"), opts()).await.unwrap());
    }
    // A direct reclaim with a caller-only authority never lifts a same-id fence either.
    assert!(
        !f.store
            .reclaim_generation(&s1, &sid("s1"), &caller())
            .await
            .unwrap()
    );
    assert!(f.record(&s1).await.unwrap().is_retired());
}

#[tokio::test]
async fn lifecycle_scenario_55_context_reset_removes_the_binding_at_the_commit_boundary() {
    let f = Fx::new().await;
    f.host("s1", None);
    let s1 = f.id("s1");
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    let h = f.harness();
    let mem = f.mem.clone();
    let (ns, key) = (f.ns.clone(), s1.key().clone());
    let gone_at_commit = Arc::new(AtomicBool::new(false));
    let seen = gone_at_commit.clone();
    let run: MutationRun<'_> = Box::new(move |m| {
        Box::pin(async move {
            let tx = DirectRowTransaction::new(Arc::new(mem.clone()));
            m.commit(&tx).await?;
            seen.store(mem.lookup(&ns, &key).await?.is_none(), Ordering::SeqCst);
            Ok(())
        })
    });
    h.with_session_context_reset(context_reset("s1", None), run)
        .await
        .unwrap();
    assert!(
        gone_at_commit.load(Ordering::SeqCst),
        "absent right after commit"
    );
    h.reset(reset("s1", ResetReason::Deleted)).await.unwrap();
    assert_eq!(f.raw(&s1).await, None);
    assert_eq!(f.count().await, 0, "no tombstone");
}

#[tokio::test]
async fn context_reset_deletes_the_recorded_predecessor_without_adopting_it() {
    let f = Fx::new().await;
    // Compaction rotated s1 → s2, but the binding was not transferred yet.
    f.host("s2", Some("s1"));
    let (s1, s2) = (f.id("s1"), f.id("s2"));
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    let owner_at_run = Arc::new(Mutex::new(None));
    let seen = owner_at_run.clone();
    let store = f.store.clone();
    let probe = s2.clone();
    let tx = direct(&f);
    let run: MutationRun<'_> = Box::new(move |m| {
        Box::pin(async move {
            *seen.lock().unwrap() = store.record(&probe).await?.and_then(|r| r.session_id);
            m.commit(&*tx).await
        })
    });
    f.harness()
        .with_session_context_reset(context_reset("s2", Some("s1")), run)
        .await
        .unwrap();
    assert_eq!(
        *owner_at_run.lock().unwrap(),
        Some(sid("s1")),
        "the predecessor's binding was never adopted"
    );
    assert_eq!(f.raw(&s2).await, None);

    // A predecessor that is not the recorded one is not deleted: the current generation's
    // (absent) binding is.
    f.host("s3", Some("s2"));
    assert!(f.store.set(&s1, thread("thread-9"), opts()).await.unwrap());
    let tx = direct(&f);
    f.harness()
        .with_session_context_reset(context_reset("s3", Some("s2")), committing(tx, || Ok(())))
        .await
        .unwrap_err();
    assert_eq!(f.read(&s1).await.as_deref(), Some("thread-9"));
}

#[tokio::test]
async fn deletion_of_a_compacted_session_removes_the_untransferred_predecessor_binding() {
    let f = Fx::new().await;
    f.host("s2", Some("s1"));
    let (s1, s2) = (f.id("s1"), f.id("s2"));
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    let (h, threads) = harness_with_threads(&f);
    let store = f.store.clone();
    let probe = s2.clone();
    let tx = direct(&f);
    let owner_at_run = Arc::new(Mutex::new(None));
    let seen = owner_at_run.clone();
    let run: MutationRun<'_> = Box::new(move |m| {
        Box::pin(async move {
            *seen.lock().unwrap() = store.record(&probe).await?.and_then(|r| r.session_id);
            m.commit(&*tx).await
        })
    });
    h.with_session_deletion(deletion("s2"), run).await.unwrap();
    assert_eq!(
        *owner_at_run.lock().unwrap(),
        Some(sid("s1")),
        "never adopted"
    );
    assert_eq!(f.raw(&s2).await, None);
    assert_eq!(threads.released(), vec!["thread-1".to_owned()]);
}

#[tokio::test]
async fn lifecycle_scenario_56_deletion_refuses_supervision_before_the_transaction() {
    let f = Fx::new().await;
    f.host("s1", None);
    let s1 = f.id("s1");
    assert!(
        f.store
            .set(&s1, thread("thread-sup").supervised(), opts())
            .await
            .unwrap()
    );
    let before = f.raw(&s1).await;
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let run: MutationRun<'_> = Box::new(move |_| {
        flag.store(true, Ordering::SeqCst);
        Box::pin(async { Ok(()) })
    });
    let err = f
        .harness()
        .with_session_deletion(deletion("s1"), run)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("owned by supervision"), "{err}");
    assert!(!ran.load(Ordering::SeqCst), "run never called");
    assert_eq!(f.raw(&s1).await, before, "binding unchanged");
    assert!(!f.leased(&s1).await);
}

#[tokio::test]
async fn deletion_refuses_a_claimed_thread_before_run_and_again_at_commit() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    let (h, threads) = harness_with_threads(&f);
    threads.claimed.lock().unwrap().insert("thread-1".into());
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let run: MutationRun<'_> = Box::new(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(()) })
    });
    let err = h
        .with_session_deletion(deletion("s1"), run)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("claimed by active work"), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // Claimed after preparation: the commit refuses and nothing is deleted.
    threads.claimed.lock().unwrap().clear();
    let claims = threads.clone();
    let tx = direct(&f);
    let run: MutationRun<'_> = Box::new(move |m| {
        Box::pin(async move {
            claims.claimed.lock().unwrap().insert("thread-1".into());
            let result = m.commit(&*tx).await;
            m.rollback().await?;
            result
        })
    });
    let err = h
        .with_session_deletion(deletion("s1"), run)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("claimed by active work"), "{err}");
    assert_eq!(f.read(&s1).await.as_deref(), Some("thread-1"));
    assert!(threads.released().is_empty());
}

#[tokio::test]
async fn deletion_cleans_up_only_after_the_host_transaction() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    assert!(
        f.store
            .set(&s1, thread("thread-1").with_client("client-a"), opts())
            .await
            .unwrap()
    );
    let (h, threads) = harness_with_threads(&f);
    let during = threads.clone();
    let tx = direct(&f);
    let run = committing(tx, move || {
        assert!(
            during.released().is_empty(),
            "no cleanup inside the transaction"
        );
        Ok(())
    });
    h.with_session_deletion(deletion("s1"), run).await.unwrap();
    assert_eq!(f.raw(&s1).await, None);
    assert_eq!(threads.released(), vec!["thread-1".to_owned()]);
    assert_eq!(
        *threads.clients.lock().unwrap(),
        vec!["client-a".to_owned()]
    );
}

#[tokio::test]
async fn deletion_keeps_the_subscription_another_row_still_owns() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    let other = BindingIdentity::session(agent(), sid("o1"), None);
    assert!(
        f.store
            .set(&s1, thread("thread-shared"), opts())
            .await
            .unwrap()
    );
    assert!(
        f.store
            .set(&other, thread("thread-shared"), opts())
            .await
            .unwrap()
    );
    let (h, threads) = harness_with_threads(&f);
    h.with_session_deletion(deletion("s1"), committing(direct(&f), || Ok(())))
        .await
        .unwrap();
    assert_eq!(f.raw(&s1).await, None);
    assert!(
        threads.released().is_empty(),
        "another binding owns the thread"
    );
}

#[tokio::test]
async fn errors_after_commit_never_restore_the_binding() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    let (h, threads) = harness_with_threads(&f);
    let run = committing(direct(&f), || {
        Err(Error::other("publication failed after COMMIT"))
    });
    let err = h
        .with_session_deletion(deletion("s1"), run)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "publication failed after COMMIT");
    assert_eq!(f.raw(&s1).await, None, "never resurrected");
    assert_eq!(threads.released(), vec!["thread-1".to_owned()]);
}

#[tokio::test]
async fn a_rolled_back_deletion_restores_and_skips_cleanup() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    let (h, threads) = harness_with_threads(&f);
    let tx = direct(&f);
    let run: MutationRun<'_> = Box::new(move |m| {
        Box::pin(async move {
            m.commit(&*tx).await?;
            m.rollback().await?;
            Err(Error::other("host transaction failed before COMMIT"))
        })
    });
    h.with_session_deletion(deletion("s1"), run)
        .await
        .unwrap_err();
    assert_eq!(f.read(&s1).await.as_deref(), Some("thread-1"));
    assert!(
        !f.leased(&s1).await,
        "the restored row's lease was released"
    );
    assert!(threads.released().is_empty());
}

#[tokio::test]
async fn ordinary_compaction_is_a_transfer_not_a_context_reset() {
    let f = Fx::new().await;
    let (s1, s2) = (f.id("s1"), f.id("s2"));
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    // Compaction: a new physical id under the same key.
    f.host("s2", Some("s1"));
    let resolved = f.harness().resolve(&s2, &caller()).await.unwrap();
    assert_eq!(
        resolved.binding.map(|b| b.thread_id).as_deref(),
        Some("thread-1")
    );
    assert_eq!(f.record(&s2).await.unwrap().session_id, Some(sid("s2")));
    assert_eq!(f.read(&s1).await, None, "the predecessor no longer owns it");
    resolved.authority.verify().await.unwrap();
}

#[tokio::test]
async fn resolving_an_identity_without_a_session_is_an_invalid_argument() {
    let f = Fx::new().await;
    let conversation = BindingIdentity::conversation(&BindingId::new("room-1").unwrap());
    let err = f
        .harness()
        .resolve(&conversation, &caller())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert!(err.to_string().contains("session identity"), "{err}");
}

// --- The harness inside tether-storage's host transaction (SQLite) ----------------------

mod sql {
    use super::*;
    use tether_core::HarnessRegistry;
    use tether_host::{ActiveRuns, HostSessions, TransactionHooks};
    use tether_storage::testing::PgTestDatabase;
    use tether_storage::{
        CutStatus, NewHostSession, NewTranscriptEntry, Store, StoreOptions, TranscriptRole,
    };

    /// What keeps the database alive for the test.
    enum Backing {
        Sqlite(#[allow(dead_code)] tempfile::TempDir),
        Postgres(PgTestDatabase),
    }

    pub(super) struct SqlFx {
        pub(super) store: Store,
        backing: Backing,
        pub(super) registry: Arc<HarnessRegistry>,
        pub(super) runs: Arc<ActiveRuns>,
        clock: FakeClock,
    }

    impl SqlFx {
        async fn open(url: &str, backing: Backing) -> Self {
            let clock = FakeClock::new(START);
            let store = Store::open_with(
                StoreOptions::new(url)
                    .clock(Arc::new(clock.clone()))
                    .max_connections(4),
            )
            .await
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
            Self {
                store,
                backing,
                registry: HarnessRegistry::shared(),
                runs: Arc::new(ActiveRuns::new()),
                clock,
            }
        }

        pub(super) async fn sqlite() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let url = format!("sqlite://{}", dir.path().join("tether.db").display());
            Self::open(&url, Backing::Sqlite(dir)).await
        }

        pub(super) async fn postgres() -> Option<Self> {
            let db = PgTestDatabase::create("harness_hooks").await?;
            let url = db.url().to_owned();
            Some(Self::open(&url, Backing::Postgres(db)).await)
        }

        pub(super) async fn cleanup(self) {
            if let Backing::Postgres(db) = self.backing {
                db.cleanup().await;
            }
        }

        pub(super) fn hosts(&self, hooks: TransactionHooks) -> HostSessions {
            HostSessions::new(self.store.clone(), self.registry.clone(), self.runs.clone())
                .with_hooks(hooks)
        }

        /// A harness with its own namespace in the same database, registered with the host.
        pub(super) async fn harness(&self, id: &str) -> (ThreadBindingHarness, Arc<Threads>) {
            let ns = Namespace::new(format!("{id}-bindings")).unwrap();
            self.store
                .register_namespace(ThreadBindingStore::namespace_config(ns.clone()))
                .await
                .unwrap();
            let bindings = ThreadBindingStore::builder(Arc::new(self.store.clone()), ns)
                .clock(Arc::new(self.clock.clone()))
                .timer(Arc::new(ManualTimer::new(self.clock.clone())))
                .tokens(Arc::new(SequentialTokens::new(id)))
                .build()
                .unwrap();
            let threads = Arc::new(Threads::default());
            let harness = ThreadBindingHarness::new(
                HarnessId::new(id).unwrap(),
                bindings,
                GenerationAuthority::new(Arc::new(self.store.clone())),
            )
            .with_threads(threads.clone());
            self.registry.register(Arc::new(harness.clone()));
            (harness, threads)
        }

        /// A session `s-1` with the transcript `u1 → a1 → u2 → a2`; returns the anchor of `u2`.
        pub(super) async fn session(&self) -> tether_core::TranscriptAnchor {
            self.session_anchors().await.swap_remove(2)
        }

        /// A session `s-1` with the transcript `u1 → a1 → u2 → a2`; returns the four anchors.
        pub(super) async fn session_anchors(&self) -> Vec<tether_core::TranscriptAnchor> {
            assert!(
                self.store
                    .create_session(NewHostSession {
                        session_key: skey(),
                        agent_id: agent(),
                        session_id: sid("s-1"),
                        agent_harness_id: None,
                    })
                    .await
                    .unwrap()
            );
            let mut anchors = Vec::new();
            for (role, text) in [
                (TranscriptRole::User, "u1"),
                (TranscriptRole::Assistant, "a1"),
                (TranscriptRole::User, "u2"),
                (TranscriptRole::Assistant, "a2"),
            ] {
                let entry = NewTranscriptEntry {
                    role,
                    content: text.into(),
                    idempotency_key: None,
                    metadata: None,
                };
                anchors.push(
                    self.store
                        .append_transcript(&skey(), entry)
                        .await
                        .unwrap()
                        .anchor,
                );
            }
            anchors
        }
    }

    pub(super) fn identity(session: &str) -> BindingIdentity {
        BindingIdentity::session(agent(), sid(session), Some(skey()))
    }

    fn failing_hooks() -> TransactionHooks {
        TransactionHooks::new().after_mutations(|_| {
            Box::pin(async { Err(Error::other("injected failure before COMMIT")) })
        })
    }

    async fn lifecycle_scenario_57_harness_side_rewind_commit_retires_native_context(f: &SqlFx) {
        let (h, threads) = f.harness("threads").await;
        let u2 = f.session().await;
        let s1 = identity("s-1");
        assert!(
            h.store()
                .set(&s1, thread("thread-1"), opts())
                .await
                .unwrap()
        );

        let status = f
            .hosts(TransactionHooks::new())
            .rewind(&skey(), u2, sid("s-2"))
            .await
            .unwrap();
        assert_eq!(status, CutStatus::Created);
        let entry = f.store.session(&skey()).await.unwrap().unwrap();
        assert_eq!(entry.previous_session_id, Some(sid("s-1")));
        assert_eq!(entry.session_id, sid("s-2"));
        assert_eq!(
            h.store().record(&s1).await.unwrap(),
            None,
            "binding cleared"
        );
        assert_eq!(
            threads.released(),
            vec!["thread-1".to_owned()],
            "post-commit cleanup ran"
        );
    }

    async fn lifecycle_scenario_58_harness_side_failed_cut_restores_native_context(f: &SqlFx) {
        let (h, threads) = f.harness("threads").await;
        let u2 = f.session().await;
        let s1 = identity("s-1");
        assert!(
            h.store()
                .set(&s1, thread("thread-1"), opts())
                .await
                .unwrap()
        );
        let before = f.store.session(&skey()).await.unwrap();

        let err = f
            .hosts(failing_hooks())
            .rewind(&skey(), u2, sid("s-2"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("injected failure"), "{err}");
        assert_eq!(f.store.session(&skey()).await.unwrap(), before);
        assert_eq!(
            h.store().read(&s1).await.unwrap().unwrap().thread_id,
            "thread-1"
        );
        let row = f
            .store
            .lookup(h.store().namespace(), s1.key())
            .await
            .unwrap()
            .unwrap();
        assert!(row.lease.is_none(), "restored and released");
        assert!(threads.released().is_empty(), "nothing finalized");
    }

    async fn harness_side_deletion_removes_the_binding_with_the_session_row(f: &SqlFx) {
        let (h, threads) = f.harness("threads").await;
        f.session().await;
        let s1 = identity("s-1");
        assert!(
            h.store()
                .set(&s1, thread("thread-1"), opts())
                .await
                .unwrap()
        );
        let deleted = f
            .hosts(TransactionHooks::new())
            .delete_sessions(&[skey()])
            .await
            .unwrap();
        assert_eq!(deleted, vec![skey()]);
        assert_eq!(f.store.session(&skey()).await.unwrap(), None);
        assert_eq!(h.store().record(&s1).await.unwrap(), None);
        assert_eq!(
            f.store.count(h.store().namespace()).await.unwrap(),
            0,
            "the post-delete reset notification wrote no tombstone"
        );
        assert_eq!(threads.released(), vec!["thread-1".to_owned()]);
    }

    async fn lifecycle_scenario_64_harness_side_failed_transaction_restores_every_harness(
        f: &SqlFx,
    ) {
        let (a, a_threads) = f.harness("alpha").await;
        let (b, b_threads) = f.harness("beta").await;
        f.session().await;
        let s1 = identity("s-1");
        assert!(
            a.store()
                .set(&s1, thread("thread-a"), opts())
                .await
                .unwrap()
        );
        assert!(
            b.store()
                .set(&s1, thread("thread-b"), opts())
                .await
                .unwrap()
        );
        let err = f
            .hosts(failing_hooks())
            .delete_sessions(&[skey()])
            .await
            .unwrap_err();
        assert!(err.to_string().contains("injected failure"), "{err}");
        assert!(f.store.session(&skey()).await.unwrap().is_some());
        assert_eq!(
            a.store().read(&s1).await.unwrap().unwrap().thread_id,
            "thread-a"
        );
        assert_eq!(
            b.store().read(&s1).await.unwrap().unwrap().thread_id,
            "thread-b"
        );
        assert!(a_threads.released().is_empty() && b_threads.released().is_empty());
    }

    async fn lifecycle_scenario_65_harness_side_competing_work_touches_no_binding(f: &SqlFx) {
        let (h, _threads) = f.harness("threads").await;
        f.session().await;
        let s1 = identity("s-1");
        assert!(
            h.store()
                .set(&s1, thread("thread-1"), opts())
                .await
                .unwrap()
        );
        let before = f
            .store
            .lookup(h.store().namespace(), s1.key())
            .await
            .unwrap();
        f.runs.admit(&skey());
        let err = f
            .hosts(TransactionHooks::new())
            .delete_sessions(&[skey()])
            .await
            .unwrap_err();
        assert!(matches!(err, Error::CompetingWork { .. }), "{err:?}");
        assert!(err.to_string().contains("retry after the run completes"));
        let after = f
            .store
            .lookup(h.store().namespace(), s1.key())
            .await
            .unwrap();
        assert_eq!(after, before, "no lease taken, nothing written");
    }

    /// Rotates the host generation from inside the harness's preparation, just before the
    /// host's continuation: the host transaction then meets a changed row at its commit edge.
    #[derive(Debug)]
    struct RotatingHarness {
        inner: ThreadBindingHarness,
        store: Store,
    }

    #[async_trait]
    impl AgentHarness for RotatingHarness {
        fn id(&self) -> &HarnessId {
            self.inner.id()
        }

        async fn reset(&self, params: tether_core::ResetParams) -> Result<(), Error> {
            self.inner.reset(params).await
        }

        fn session_deletion(&self) -> Option<&dyn SessionDeletionHook> {
            Some(self)
        }
    }

    #[async_trait]
    impl SessionDeletionHook for RotatingHarness {
        async fn with_session_deletion(
            &self,
            params: SessionDeletionParams,
            run: MutationRun<'_>,
        ) -> Result<(), Error> {
            let store = self.store.clone();
            let expected = params.session_id.clone();
            let wrapped: MutationRun<'_> = Box::new(move |m| {
                Box::pin(async move {
                    store
                        .rotate_generation(&skey(), &expected, sid("s-2"))
                        .await?
                        .expect("rotated");
                    run(m).await
                })
            });
            self.inner.with_session_deletion(params, wrapped).await
        }
    }

    async fn lifecycle_scenario_62_harness_side_commit_edge_generation_check(f: &SqlFx) {
        let (h, threads) = f.harness("threads").await;
        // Replace the plain registration with the rotating wrapper.
        f.registry.unregister(h.id());
        f.registry.register(Arc::new(RotatingHarness {
            inner: h.clone(),
            store: f.store.clone(),
        }));
        f.session().await;
        let s1 = identity("s-1");
        assert!(
            h.store()
                .set(&s1, thread("thread-1"), opts())
                .await
                .unwrap()
        );
        let before = f
            .store
            .lookup(h.store().namespace(), s1.key())
            .await
            .unwrap();
        let err = f
            .hosts(TransactionHooks::new())
            .delete_sessions(&[skey()])
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("Session changed before deletion"),
            "{err}"
        );
        let after = f
            .store
            .lookup(h.store().namespace(), s1.key())
            .await
            .unwrap();
        let (before, after) = (before.unwrap(), after.expect("no harness commit ran"));
        assert_eq!(after.value, before.value);
        assert!(after.lease.is_none(), "the deletion's lease was released");
        assert_eq!(after.expires_at, None);
        assert!(threads.released().is_empty());
    }

    async fn lifecycle_scenario_63_harness_side_unprepared_deletion_is_refused(f: &SqlFx) {
        let (h, _threads) = f.harness("threads").await;
        f.session().await;
        let s1 = identity("s-1");
        assert!(
            h.store()
                .set(&s1, thread("thread-1"), opts())
                .await
                .unwrap()
        );
        let err = f
            .hosts(TransactionHooks::new())
            .delete_without_harnesses(&skey())
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("Session deletion requires prepared harness ownership"),
            "{err}"
        );
        assert!(f.store.session(&skey()).await.unwrap().is_some());
        assert_eq!(
            h.store().read(&s1).await.unwrap().unwrap().thread_id,
            "thread-1"
        );
    }

    async fn lifecycle_scenario_59_harness_side_rejected_cuts_do_not_touch_native_context(
        f: &SqlFx,
    ) {
        let (h, threads) = f.harness("threads").await;
        let anchors = f.session_anchors().await;
        let s1 = identity("s-1");
        assert!(
            h.store()
                .set(&s1, thread("thread-1"), opts())
                .await
                .unwrap()
        );
        let before = f
            .store
            .lookup(h.store().namespace(), s1.key())
            .await
            .unwrap();
        let hosts = f.hosts(TransactionHooks::new());
        let status = hosts.rewind(&skey(), anchors[1], sid("s-2")).await.unwrap();
        assert_eq!(status, CutStatus::NotUserMessage);
        let status = hosts
            .switch_branch(&skey(), anchors[3], sid("s-2"))
            .await
            .unwrap();
        assert_eq!(status, CutStatus::AlreadyActive);
        let after = f
            .store
            .lookup(h.store().namespace(), s1.key())
            .await
            .unwrap();
        assert_eq!(after, before, "no lease taken, nothing written");
        assert!(threads.released().is_empty());
        assert_eq!(
            f.store.session(&skey()).await.unwrap().unwrap().session_id,
            sid("s-1")
        );
    }

    async fn lifecycle_scenario_60_harness_side_fork_leaves_the_source_native_context(f: &SqlFx) {
        let (h, threads) = f.harness("threads").await;
        let anchors = f.session_anchors().await;
        let s1 = identity("s-1");
        assert!(
            h.store()
                .set(&s1, thread("thread-1"), opts())
                .await
                .unwrap()
        );
        let before = f
            .store
            .lookup(h.store().namespace(), s1.key())
            .await
            .unwrap();
        let fork_key = tether_core::SessionKey::new("agent:main:fork").unwrap();
        let status = f
            .hosts(TransactionHooks::new())
            .fork(
                &skey(),
                &anchors[2],
                NewHostSession {
                    session_key: fork_key,
                    agent_id: agent(),
                    session_id: sid("fork-1"),
                    agent_harness_id: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(status, CutStatus::Created);
        let after = f
            .store
            .lookup(h.store().namespace(), s1.key())
            .await
            .unwrap();
        assert_eq!(after, before, "the source binding is untouched");
        assert!(threads.released().is_empty());
    }

    /// Adopts an upstream link for the session from inside the harness's context-reset
    /// preparation, just before the host's continuation.
    #[derive(Debug)]
    struct LinkingHarness {
        inner: ThreadBindingHarness,
        store: Store,
    }

    #[async_trait]
    impl AgentHarness for LinkingHarness {
        fn id(&self) -> &HarnessId {
            self.inner.id()
        }

        async fn reset(&self, params: tether_core::ResetParams) -> Result<(), Error> {
            self.inner.reset(params).await
        }

        fn session_context_reset(&self) -> Option<&dyn SessionContextResetHook> {
            Some(self)
        }
    }

    #[async_trait]
    impl SessionContextResetHook for LinkingHarness {
        async fn with_session_context_reset(
            &self,
            params: SessionContextResetParams,
            run: MutationRun<'_>,
        ) -> Result<(), Error> {
            let store = self.store.clone();
            let wrapped: MutationRun<'_> = Box::new(move |m| {
                Box::pin(async move {
                    assert!(store.link_upstream(&skey(), "acp:external-1").await?);
                    run(m).await
                })
            });
            self.inner.with_session_context_reset(params, wrapped).await
        }
    }

    async fn lifecycle_scenario_61_harness_side_upstream_link_mid_cut_keeps_the_binding(f: &SqlFx) {
        let (h, threads) = f.harness("threads").await;
        f.registry.unregister(h.id());
        f.registry.register(Arc::new(LinkingHarness {
            inner: h.clone(),
            store: f.store.clone(),
        }));
        let u2 = f.session().await;
        let s1 = identity("s-1");
        assert!(
            h.store()
                .set(&s1, thread("thread-1"), opts())
                .await
                .unwrap()
        );
        let entry = f.store.session(&skey()).await.unwrap();
        let before = f
            .store
            .lookup(h.store().namespace(), s1.key())
            .await
            .unwrap()
            .unwrap();
        let err = f
            .hosts(TransactionHooks::new())
            .rewind(&skey(), u2, sid("s-2"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("external agent harness"), "{err}");
        assert_eq!(f.store.session(&skey()).await.unwrap(), entry);
        let after = f
            .store
            .lookup(h.store().namespace(), s1.key())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            after.value, before.value,
            "the binding is present, unchanged"
        );
        assert!(after.lease.is_none());
        assert!(threads.released().is_empty(), "nothing finalized");
    }

    /// Runs each case on a SQLite file and on PostgreSQL (skipped with a notice when no
    /// server answers, unless `TETHER_REQUIRE_PG=1`).
    macro_rules! on_sql {
        ($($name:ident),* $(,)?) => {
            mod sqlite {
                $(
                    #[tokio::test]
                    async fn $name() {
                        let f = super::SqlFx::sqlite().await;
                        super::$name(&f).await;
                        f.cleanup().await;
                    }
                )*
            }
            mod postgres {
                $(
                    #[tokio::test]
                    async fn $name() {
                        let Some(f) = super::SqlFx::postgres().await else {
                            return;
                        };
                        super::$name(&f).await;
                        f.cleanup().await;
                    }
                )*
            }
        };
    }

    on_sql!(
        lifecycle_scenario_57_harness_side_rewind_commit_retires_native_context,
        lifecycle_scenario_58_harness_side_failed_cut_restores_native_context,
        harness_side_deletion_removes_the_binding_with_the_session_row,
        lifecycle_scenario_64_harness_side_failed_transaction_restores_every_harness,
        lifecycle_scenario_65_harness_side_competing_work_touches_no_binding,
        lifecycle_scenario_62_harness_side_commit_edge_generation_check,
        lifecycle_scenario_63_harness_side_unprepared_deletion_is_refused,
        lifecycle_scenario_59_harness_side_rejected_cuts_do_not_touch_native_context,
        lifecycle_scenario_60_harness_side_fork_leaves_the_source_native_context,
        lifecycle_scenario_61_harness_side_upstream_link_mid_cut_keeps_the_binding,
    );
}

/// The hook objects are what a host registry holds.
#[test]
fn the_harness_exposes_both_hooks() {
    fn assert_hooks(h: &dyn AgentHarness) -> bool {
        h.session_deletion().is_some() && h.session_context_reset().is_some()
    }
    let clock = FakeClock::new(START);
    let mem = tether_storage::MemoryStore::new(Arc::new(clock));
    let store = ThreadBindingStore::builder(Arc::new(mem.clone()), Namespace::new("n").unwrap())
        .build()
        .unwrap();
    let h = ThreadBindingHarness::new(
        HarnessId::new("threads").unwrap(),
        store,
        GenerationAuthority::new(Arc::new(mem)),
    );
    assert!(assert_hooks(&h));
    assert_eq!(h.id().as_str(), "threads");
}

/// A harness given a finalizer exposes exactly that finalizer; without one it has none.
#[tokio::test]
async fn the_harness_exposes_the_finalizer_it_was_given() {
    struct Answers;
    #[async_trait]
    impl tether_core::SettledTurnFinalizer for Answers {
        async fn finalize_settled_turn(
            &self,
            _attempt: tether_core::FinalizationAttempt,
            _settled: &tether_core::AttemptResult,
        ) -> Result<serde_json::Value, Error> {
            Ok(serde_json::json!({"from": "answers"}))
        }
    }
    let clock = FakeClock::new(START);
    let mem = tether_storage::MemoryStore::new(Arc::new(clock));
    let store = ThreadBindingStore::builder(Arc::new(mem.clone()), Namespace::new("n").unwrap())
        .build()
        .unwrap();
    let plain = ThreadBindingHarness::new(
        HarnessId::new("threads").unwrap(),
        store,
        GenerationAuthority::new(Arc::new(mem)),
    );
    assert!(plain.settled_turn_finalizer().is_none());
    let finalizing = plain.clone().with_finalizer(Arc::new(Answers));
    assert!(
        finalizing.session_deletion().is_some(),
        "the other hooks stay"
    );
    let finalizer = finalizing
        .settled_turn_finalizer()
        .expect("the finalizer it was given");
    let attempt = tether_core::FinalizationAttempt::new(
        tether_core::RunId::new("run-1").unwrap(),
        "Give the final answer.".to_owned(),
        tether_core::SessionTarget {
            agent_id: tether_core::AgentId::new("main").unwrap(),
            session_key: None,
            session_id: tether_core::SessionId::new("s-1").unwrap(),
        },
        tether_core::Cancellation::new(),
        None,
        1,
    );
    let answer = finalizer
        .finalize_settled_turn(attempt, &tether_core::AttemptResult::default())
        .await
        .unwrap();
    assert_eq!(answer["from"], "answers");
}

// --- Initialization rollback through the deletion hook ------------------------------------

mod initialization {
    use super::*;
    use tether_core::{BoxFuture, InitializationHandle};
    use tether_harness_sdk::hooks::{ThreadInitializationBackend, rollbacks_from_owner};
    use tether_harness_sdk::initialization::{
        Cleanup, InitializationOwner, LinkDeleteOutcome, PrepareParams, UpstreamLink, UpstreamLinks,
    };

    #[derive(Debug)]
    struct Handle;

    impl InitializationHandle for Handle {
        fn assert_rollback_current(&self) -> Result<(), Error> {
            Ok(())
        }

        fn handle_id(&self) -> u64 {
            7
        }
    }

    /// No upstream links are written by these tests.
    #[derive(Debug)]
    struct NoLinks;

    #[async_trait]
    impl UpstreamLinks for NoLinks {
        async fn insert_link_if_absent(
            &self,
            _link: &UpstreamLink,
            _assert_commit: &tether_core::AssertCurrent,
        ) -> Result<bool, Error> {
            Err(Error::other("no links in this test"))
        }

        async fn delete_link_if_unchanged(
            &self,
            _expected: &UpstreamLink,
            _assert_commit: &tether_core::AssertCurrent,
        ) -> Result<LinkDeleteOutcome, Error> {
            Ok(LinkDeleteOutcome::Absent)
        }
    }

    /// A failed creation is rolled back by deleting its session: the initialization's own
    /// supervision binding may then be deleted, and the initialization cleanup runs only
    /// after the host transaction.
    #[tokio::test]
    async fn initialization_rollback_deletes_its_own_supervision_binding_after_commit() {
        let f = Fx::new().await;
        let s1 = f.id("s1");
        let store = Arc::new(f.store.clone());
        let owner = Arc::new(InitializationOwner::new(
            Arc::new(ThreadInitializationBackend),
            Arc::new(NoLinks),
            Arc::new(f.clock.clone()),
        ));
        let cleaned = Arc::new(AtomicUsize::new(0));
        let counter = cleaned.clone();
        let cleanup: Cleanup = Arc::new(move |_assert| -> BoxFuture<'static, Result<(), Error>> {
            counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        });
        let handle: Arc<dyn InitializationHandle> = Arc::new(Handle);
        let prepared = owner
            .prepare(PrepareParams {
                initialization: handle.clone(),
                assert_current: always_current(),
                store: store.clone(),
                identity: s1.clone(),
                cleanup: Some(cleanup),
                assert_cleanup_allowed: None,
            })
            .unwrap();
        prepared
            .bind(thread("thread-sup").supervised())
            .await
            .unwrap();
        // Set-if-absent: a second initialization cannot bind over it.
        assert!(
            !f.store
                .set_if_absent(&s1, thread("other"), opts())
                .await
                .unwrap()
        );

        let h = f
            .harness()
            .with_initialization_rollbacks(rollbacks_from_owner(owner, store));
        let during = cleaned.clone();
        let run = committing(direct(&f), move || {
            assert_eq!(during.load(Ordering::SeqCst), 0, "cleanup waits for COMMIT");
            Ok(())
        });
        let mut params = deletion("s1");
        params.initialization = Some(handle);
        h.with_session_deletion(params, run).await.unwrap();
        assert_eq!(f.raw(&s1).await, None);
        assert_eq!(cleaned.load(Ordering::SeqCst), 1);
    }
}

/// A host whose transaction failed after the harness commit, without calling its rollback
/// (for example because the owner authority refused it), restored the row itself: the
/// harness must not release a thread that is still bound.
#[tokio::test]
async fn no_cleanup_when_the_host_transaction_restored_the_row_without_rollback() {
    let f = Fx::new().await;
    let s1 = f.id("s1");
    assert!(f.store.set(&s1, thread("thread-1"), opts()).await.unwrap());
    let (h, threads) = harness_with_threads(&f);
    let mem = f.mem.clone();
    let run: MutationRun<'_> = Box::new(move |m| {
        Box::pin(async move {
            let tx = mem.begin();
            m.commit(&tx).await?;
            tx.rollback();
            Err(Error::other("host transaction failed before COMMIT"))
        })
    });
    h.with_session_deletion(deletion("s1"), run)
        .await
        .unwrap_err();
    assert_eq!(f.read(&s1).await.as_deref(), Some("thread-1"));
    assert!(threads.released().is_empty(), "the bound thread was kept");
    assert!(threads.clients.lock().unwrap().is_empty());
}
