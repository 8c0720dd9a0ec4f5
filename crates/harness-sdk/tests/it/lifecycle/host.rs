//! End to end with the host's deletion transaction (`docs/deletion-and-reset.md`): a
//! harness built on [`Lifecycle::with_deletion`] takes part in `HostSessions::delete_sessions`;
//! its binding row disappears atomically with the session row, and a host transaction that
//! fails before COMMIT leaves both in place with the lease released.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use tether_core::HarnessRegistry;
use tether_core::{
    AgentHarness, AgentId, BindingKey, Error, FakeClock, HarnessId, MutationRun, ResetParams,
    SessionDeletionHook, SessionDeletionParams, SessionId, SessionKey, SessionMutation,
};
use tether_harness_sdk::lifecycle::DeletionOptions;
use tether_host::{ActiveRuns, HostSessions, TransactionHooks};
use tether_storage::testing::PgTestDatabase;
use tether_storage::{NewHostSession, Store, StoreOptions};

use super::support::{Fixture, Lc, START};

/// A harness whose native bindings live in the lifecycle's store.
#[derive(Debug)]
struct BindingHarness {
    id: HarnessId,
    lc: Lc,
}

#[async_trait]
impl AgentHarness for BindingHarness {
    fn id(&self) -> &HarnessId {
        &self.id
    }

    async fn reset(&self, _params: ResetParams) -> Result<(), Error> {
        Ok(())
    }

    fn session_deletion(&self) -> Option<&dyn SessionDeletionHook> {
        Some(self)
    }
}

#[async_trait]
impl SessionDeletionHook for BindingHarness {
    async fn with_session_deletion(
        &self,
        params: SessionDeletionParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        let key = BindingKey::physical(&params.agent_id, &params.session_id);
        self.lc
            .with_deletion(
                &key,
                DeletionOptions::new(params.assert_current.clone()),
                |_, mutation| async move {
                    let mutation: Arc<dyn SessionMutation> = Arc::new(mutation);
                    run(mutation).await
                },
            )
            .await
    }
}

async fn host_deletion_end_to_end(url: &str) {
    let clock = FakeClock::new(START);
    let store = Store::open_with(
        StoreOptions::new(url)
            .clock(Arc::new(clock.clone()))
            .synchronous_normal(true),
    )
    .await
    .unwrap();
    let f = &Fixture::over(
        clock,
        Arc::new(store.clone()),
        Arc::new(store.clone()),
        true,
    )
    .await;
    let harness_id = HarnessId::new("binding-harness").unwrap();
    let registry = HarnessRegistry::shared();
    registry.register(Arc::new(BindingHarness {
        id: harness_id.clone(),
        lc: f.lc.clone(),
    }));
    let agent = AgentId::new("main").unwrap();
    let mut sessions = Vec::new();
    for (key, id) in [("agent:main:one", "s-1"), ("agent:main:two", "s-2")] {
        let session_key = SessionKey::new(key).unwrap();
        let session_id = SessionId::new(id).unwrap();
        assert!(
            store
                .create_session(NewHostSession {
                    session_key: session_key.clone(),
                    agent_id: agent.clone(),
                    session_id: session_id.clone(),
                    agent_harness_id: Some(harness_id.clone()),
                })
                .await
                .unwrap()
        );
        let binding = BindingKey::physical(&agent, &session_id);
        f.put(&binding, json!({"thread": id}), None).await;
        sessions.push((session_key, binding));
    }
    let (one, one_binding) = sessions[0].clone();
    let (two, two_binding) = sessions[1].clone();

    // The host transaction fails after the harness committed, before COMMIT.
    let failing = HostSessions::new(store.clone(), registry.clone(), Arc::new(ActiveRuns::new()))
        .with_hooks(
            TransactionHooks::new().after_mutations(|_| {
                Box::pin(async { Err(Error::other("disk full before COMMIT")) })
            }),
        );
    let error = failing
        .delete_sessions(std::slice::from_ref(&one))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("disk full before COMMIT"),
        "{error}"
    );
    assert!(store.session(&one).await.unwrap().is_some(), "session kept");
    assert_eq!(
        f.unleased(&one_binding).await,
        Some(json!({"thread": "s-1"})),
        "binding restored by the transaction rollback, lease released"
    );

    // The real deletion: both rows disappear together; the other session is untouched.
    let hosts = HostSessions::new(store.clone(), registry, Arc::new(ActiveRuns::new()));
    let deleted = hosts
        .delete_sessions(std::slice::from_ref(&one))
        .await
        .unwrap();
    assert_eq!(deleted, vec![one.clone()]);
    assert!(store.session(&one).await.unwrap().is_none());
    assert!(
        f.raw(&one_binding).await.is_none(),
        "binding deleted atomically"
    );
    assert!(store.session(&two).await.unwrap().is_some());
    assert_eq!(
        f.unleased(&two_binding).await,
        Some(json!({"thread": "s-2"}))
    );
}

/// On a SQLite file.
#[tokio::test]
async fn lifecycle_host_deletion_is_atomic_with_the_session_row_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    host_deletion_end_to_end(&format!("sqlite://{}/tether.db", dir.path().display())).await;
}

/// On PostgreSQL.
#[tokio::test]
async fn lifecycle_host_deletion_is_atomic_with_the_session_row_on_postgres() {
    let Some(db) = PgTestDatabase::create("harness_host_deletion").await else {
        return;
    };
    host_deletion_end_to_end(db.url()).await;
    db.cleanup().await;
}
