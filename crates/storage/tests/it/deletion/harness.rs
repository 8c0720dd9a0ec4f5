//! A small recording harness: its hooks record prepare, commit, rollback, finalization and
//! reset, and its deletion commit removes its binding row through the host's transaction.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tether_core::{
    AgentHarness, AgentId, AssertCurrent, BindingKey, BindingStore, BoxFuture, Error, HarnessId,
    MutationRun, Namespace, NamespaceConfig, ResetParams, RowTransaction, RowWrite,
    SessionContextResetHook, SessionContextResetParams, SessionDeletionHook, SessionDeletionParams,
    SessionKey, SessionMutation, SettlementOutcome,
};

/// The shared event log of a test.
pub(crate) type Log = Arc<Mutex<Vec<String>>>;

pub(crate) fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

type PrepareAction = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// A harness whose hooks record what happens.
pub(crate) struct RecordingHarness {
    pub(crate) id: HarnessId,
    log: Log,
    ns: Namespace,
    deletion: bool,
    context_reset: bool,
    pub(crate) finalized: AtomicBool,
    pub(crate) fail_rollback: Arc<AtomicBool>,
    pub(crate) captured: Mutex<Option<AssertCurrent>>,
    on_prepare: Mutex<Option<PrepareAction>>,
}

impl std::fmt::Debug for RecordingHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingHarness")
            .field("id", &self.id)
            .finish()
    }
}

impl RecordingHarness {
    pub(crate) fn new(
        id: &str,
        log: &Log,
        ns: &Namespace,
        deletion: bool,
        context_reset: bool,
    ) -> Arc<Self> {
        Arc::new(Self {
            id: HarnessId::new(id).unwrap(),
            log: Arc::clone(log),
            ns: ns.clone(),
            deletion,
            context_reset,
            finalized: AtomicBool::new(false),
            fail_rollback: Arc::new(AtomicBool::new(false)),
            captured: Mutex::new(None),
            on_prepare: Mutex::new(None),
        })
    }

    /// Runs `action` once, inside the next preparation, before the harness calls `run`.
    pub(crate) fn on_prepare(
        &self,
        action: impl FnOnce() -> BoxFuture<'static, ()> + Send + 'static,
    ) {
        *self.on_prepare.lock().unwrap() = Some(Box::new(action));
    }

    pub(crate) fn finalized(&self) -> bool {
        self.finalized.load(Ordering::SeqCst)
    }

    fn record(&self, event: String) {
        self.log.lock().unwrap().push(event);
    }

    async fn prepare(
        &self,
        session_key: &SessionKey,
        agent: &AgentId,
        assert: AssertCurrent,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        self.record(format!("prepare:{}:{session_key}", self.id));
        *self.captured.lock().unwrap() = Some(Arc::clone(&assert));
        let action = self.on_prepare.lock().unwrap().take();
        if let Some(action) = action {
            action().await;
        }
        let mutation = Arc::new(RecordingMutation {
            id: self.id.clone(),
            log: Arc::clone(&self.log),
            ns: self.ns.clone(),
            key: binding_key(agent, session_key),
            fail_rollback: Arc::clone(&self.fail_rollback),
        });
        let result = run(mutation).await;
        if result.is_ok() {
            self.finalized.store(true, Ordering::SeqCst);
            self.record(format!("finalized:{}", self.id));
        }
        result
    }
}

/// The binding row of a session, in the harness namespace.
pub(crate) fn binding_key(agent: &AgentId, session_key: &SessionKey) -> BindingKey {
    BindingKey::stable(agent, session_key)
}

/// Registers the harness namespace and writes a binding row for `session_key`.
pub(crate) async fn bind(store: &dyn BindingStore, ns: &Namespace, session_key: &SessionKey) {
    store
        .register_namespace(NamespaceConfig::new(ns.clone()))
        .await
        .unwrap();
    let row = RowWrite {
        value: br#"{"thread":"native-1"}"#.to_vec(),
        lease: None,
    };
    let key = binding_key(&AgentId::new("main").unwrap(), session_key);
    assert!(store.register_if_absent(ns, &key, row, None).await.unwrap());
}

struct RecordingMutation {
    id: HarnessId,
    log: Log,
    ns: Namespace,
    key: BindingKey,
    fail_rollback: Arc<AtomicBool>,
}

#[async_trait]
impl SessionMutation for RecordingMutation {
    async fn commit(&self, tx: &dyn RowTransaction) -> Result<(), Error> {
        self.log.lock().unwrap().push(format!("commit:{}", self.id));
        tx.delete_if(&self.ns, &self.key, &|_| true).await?;
        Ok(())
    }

    async fn rollback(&self) -> Result<(), Error> {
        self.log
            .lock()
            .unwrap()
            .push(format!("rollback:{}", self.id));
        if self.fail_rollback.load(Ordering::SeqCst) {
            return Err(Error::other(format!("rollback of {} failed", self.id)));
        }
        Ok(())
    }

    async fn settle_outcome(
        &self,
        outcome: SettlementOutcome,
        _error: Option<Error>,
    ) -> Result<(), Error> {
        let outcome = match outcome {
            SettlementOutcome::Committed => "committed",
            SettlementOutcome::RolledBack => "rolled-back",
            SettlementOutcome::Unknown => "unknown",
        };
        self.log
            .lock()
            .unwrap()
            .push(format!("settle:{outcome}:{}", self.id));
        Ok(())
    }
}

#[async_trait]
impl SessionDeletionHook for RecordingHarness {
    async fn with_session_deletion(
        &self,
        params: SessionDeletionParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        if let Some(init) = &params.initialization {
            self.record(format!("init:{}:{}", self.id, init.handle_id()));
        }
        self.prepare(
            &params.session_key,
            &params.agent_id,
            params.assert_current,
            run,
        )
        .await
    }
}

#[async_trait]
impl SessionContextResetHook for RecordingHarness {
    async fn with_session_context_reset(
        &self,
        params: SessionContextResetParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        self.prepare(
            &params.session_key,
            &params.agent_id,
            params.assert_current,
            run,
        )
        .await
    }
}

#[async_trait]
impl AgentHarness for RecordingHarness {
    fn id(&self) -> &HarnessId {
        &self.id
    }

    async fn reset(&self, params: ResetParams) -> Result<(), Error> {
        self.record(format!("reset:{}:{:?}", self.id, params.reason));
        Ok(())
    }

    fn session_deletion(&self) -> Option<&dyn SessionDeletionHook> {
        self.deletion.then_some(self as &dyn SessionDeletionHook)
    }

    fn session_context_reset(&self) -> Option<&dyn SessionContextResetHook> {
        self.context_reset
            .then_some(self as &dyn SessionContextResetHook)
    }
}
