//! The host side of session deletion and context reset, end to end (the contract:
//! `docs/deletion-and-reset.md`).
//!
//! [`HostSessions`] runs one operation over sorted, deduplicated targets:
//!
//! 1. **idle check** against competing admitted work ([`WorkTracker`]), before preparation and
//!    inside every authority check;
//! 2. **owner capture** from the [`HarnessRegistry`]: deletions go to harnesses with a deletion
//!    hook (filtered by the entry's `agent_harness_id` when set), context resets to every harness
//!    with a context-reset hook. Each owner's authority fails with
//!    [`Error::OwnerChanged`] once the operation closed or the registry changed;
//! 3. **nested preparation**: each (owner, target) pair's hook is called with a continuation that
//!    prepares the next pair, so every harness holds its lease across the whole host
//!    transaction; the innermost continuation runs the host transaction;
//! 4. **commit edge** inside the SQL transaction: the session row's `session_id`,
//!    `lifecycle_revision` (and for a context reset `previous_session_id`) must equal the
//!    target's; each prepared mutation is pushed onto the rollback list **before** its `commit`
//!    runs (through a [`SqlRowTransaction`], so binding rows in the
//!    same database change atomically with the session row); then the session row changes;
//! 5. **failure before COMMIT**: the SQL transaction rolls back, then the pushed mutations roll
//!    back in reverse order; rollback failures are aggregated into [`Error::RollbackFailed`].
//!    **Nothing is rolled back after COMMIT**;
//! 6. after a deletion every registered harness gets a `reset(reason: Deleted)` notification
//!    (it owns nothing; failures are logged).

mod host_writes;
mod work;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sea_orm::DatabaseTransaction;
use tether_core::{
    AgentHarness, AssertCurrent, BindingKey, BoxFuture, Error, HostSessionEntry,
    InitializationHandle, MutationRun, ResetParams, ResetReason, RowTransaction,
    SessionContextResetParams, SessionDeletionParams, SessionId, SessionKey, SessionMutation,
    SettlementOutcome, TranscriptAnchor,
};

pub use self::host_writes::HostTransaction;
use self::host_writes::HostWrites;
pub use self::work::{ActiveRuns, WorkTracker};
use crate::sql::{End, SqlRowTransaction, Store};
use crate::transcript::{Cut, CutStatus, NewHostSession};
pub use tether_core::HarnessRegistry;

type AfterMutations =
    Arc<dyn for<'a> Fn(&'a DatabaseTransaction) -> BoxFuture<'a, Result<(), Error>> + Send + Sync>;
type AfterCommit = Arc<dyn Fn() -> Result<(), Error> + Send + Sync>;

/// Fault injection into the host transaction, for tests and chaos drills (installed with
/// `HostSessions::with_hooks`, feature `test-support`). A host's own writes go through
/// [`HostSessions::delete_sessions_with`] instead.
#[derive(Clone, Default)]
pub struct TransactionHooks {
    after_mutations: Option<AfterMutations>,
    after_commit: Option<AfterCommit>,
}

impl std::fmt::Debug for TransactionHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionHooks")
            .field("after_mutations", &self.after_mutations.is_some())
            .field("after_commit", &self.after_commit.is_some())
            .finish()
    }
}

#[cfg_attr(not(feature = "test-support"), allow(dead_code))]
impl TransactionHooks {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs inside the SQL transaction after every harness `commit` and before the session row
    /// changes. An error fails the transaction before COMMIT.
    #[must_use]
    pub fn after_mutations(
        mut self,
        f: impl for<'a> Fn(&'a DatabaseTransaction) -> BoxFuture<'a, Result<(), Error>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.after_mutations = Some(Arc::new(f));
        self
    }

    /// Runs right after COMMIT (the publication step). An error is returned to the caller but
    /// rolls nothing back.
    #[must_use]
    pub fn after_commit(
        mut self,
        f: impl Fn() -> Result<(), Error> + Send + Sync + 'static,
    ) -> Self {
        self.after_commit = Some(Arc::new(f));
        self
    }
}

/// One session to delete, optionally undoing a failed session initialization.
#[derive(Clone)]
pub struct DeletionRequest {
    /// The session to delete.
    pub session_key: SessionKey,
    /// The initialization this deletion rolls back: handed to the harnesses in
    /// [`SessionDeletionParams::initialization`], and every owner's authority also requires
    /// [`InitializationHandle::assert_rollback_current`] to pass.
    pub initialization: Option<Arc<dyn InitializationHandle>>,
}

impl std::fmt::Debug for DeletionRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeletionRequest")
            .field("session_key", &self.session_key)
            .field("initialization", &self.initialization)
            .finish()
    }
}

impl DeletionRequest {
    /// A plain deletion of `session_key`.
    pub fn new(session_key: SessionKey) -> Self {
        Self {
            session_key,
            initialization: None,
        }
    }

    /// Marks the deletion as the rollback of `initialization`.
    #[must_use]
    pub fn with_initialization(mut self, initialization: Arc<dyn InitializationHandle>) -> Self {
        self.initialization = Some(initialization);
        self
    }
}

type Initializations = Vec<Option<Arc<dyn InitializationHandle>>>;

/// Which operation runs.
#[derive(Debug, Clone)]
enum Operation {
    Delete,
    ContextReset { cut: Cut, next: SessionId },
}

impl Operation {
    fn is_delete(&self) -> bool {
        matches!(self, Self::Delete)
    }

    fn owner_changed(&self, owner: &str) -> Error {
        let what = if self.is_delete() {
            "deletion"
        } else {
            "mutation"
        };
        Error::OwnerChanged {
            owner: owner.to_owned(),
            message: format!("Session {what} harness owner changed: {owner}"),
        }
    }

    fn competing(&self, key: &SessionKey) -> Error {
        let verb = if self.is_delete() { "delete" } else { "mutate" };
        Error::CompetingWork {
            session: key.to_string(),
            message: format!(
                "Cannot {verb} session while competing work is in flight for {key}; retry after the run completes"
            ),
        }
    }
}

fn session_changed(key: &SessionKey, session_id: &SessionId) -> Error {
    Error::SupersededGeneration {
        session_id: session_id.to_string(),
        message: format!("Session changed before deletion: {key}"),
    }
}

fn external_harness(key: &SessionKey, upstream: &str) -> Error {
    Error::Revoked {
        message: format!(
            "Cannot change the context of session {key}: it is driven by an external agent harness ({upstream})"
        ),
    }
}

/// A harness mutation whose `commit` and `rollback` check the owner's authority first.
struct GuardedMutation {
    inner: Arc<dyn SessionMutation>,
    assert_current: AssertCurrent,
}

#[async_trait]
impl SessionMutation for GuardedMutation {
    async fn commit(&self, tx: &dyn RowTransaction) -> Result<(), Error> {
        (self.assert_current)()?;
        self.inner.commit(tx).await
    }

    async fn rollback(&self) -> Result<(), Error> {
        (self.assert_current)()?;
        self.inner.rollback().await
    }

    /// Settlement reports what already happened; it needs no authority.
    async fn settle_outcome(
        &self,
        outcome: SettlementOutcome,
        error: Option<Error>,
    ) -> Result<(), Error> {
        self.inner.settle_outcome(outcome, error).await
    }
}

struct Owner {
    harness: Arc<dyn AgentHarness>,
    assert_current: AssertCurrent,
}

struct Prepared {
    target: usize,
    mutation: Arc<dyn SessionMutation>,
}

struct OpContext {
    op: Operation,
    targets: Vec<HostSessionEntry>,
    initializations: Initializations,
    owners: Vec<Owner>,
    /// (owner index, target index), targets outermost in key order.
    pairs: Vec<(usize, usize)>,
    prepared: Mutex<Vec<Prepared>>,
    host_ran: AtomicBool,
    host_error: Mutex<Option<Error>>,
    closed: Arc<AtomicBool>,
    host_writes: Option<HostWrites>,
}

/// Host session operations that involve the registered harnesses: deletion and context reset
/// (rewind, branch switch), plus fork (which never touches native context).
pub struct HostSessions {
    store: Store,
    registry: Arc<HarnessRegistry>,
    work: Arc<dyn WorkTracker>,
    hooks: TransactionHooks,
}

impl std::fmt::Debug for HostSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSessions")
            .field("store", &self.store)
            .field("registry", &self.registry)
            .field("work", &self.work)
            .field("hooks", &self.hooks)
            .finish()
    }
}

impl HostSessions {
    /// Operations over `store`'s host sessions with owners from `registry`.
    pub fn new(store: Store, registry: Arc<HarnessRegistry>, work: Arc<dyn WorkTracker>) -> Self {
        Self {
            store,
            registry,
            work,
            hooks: TransactionHooks::default(),
        }
    }

    /// Installs fault-injection hooks (feature `test-support`).
    #[cfg(feature = "test-support")]
    #[must_use]
    pub fn with_hooks(mut self, hooks: TransactionHooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn idle(&self, op: &Operation, targets: &[HostSessionEntry]) -> Result<(), Error> {
        for t in targets {
            if self.work.has_competing_work(&t.session_key, &t.session_id) {
                return Err(op.competing(&t.session_key));
            }
        }
        Ok(())
    }

    /// Deletes the sessions of `keys` (deduplicated, sorted; missing keys skipped) together
    /// with their transcripts and, through the harnesses' prepared mutations, their native
    /// bindings. Returns the deleted keys.
    #[tracing::instrument(level = "info", skip(self, keys), fields(count = keys.len()))]
    pub async fn delete_sessions(&self, keys: &[SessionKey]) -> Result<Vec<SessionKey>, Error> {
        let requests: Vec<DeletionRequest> =
            keys.iter().cloned().map(DeletionRequest::new).collect();
        self.delete_requests(&requests).await
    }

    /// Like [`delete_sessions`](Self::delete_sessions), with the host's own writes in the same
    /// SQL transaction: `host_writes` runs once, after every harness committed its prepared
    /// mutation and before the session rows are removed, with a [`HostTransaction`] and the
    /// sessions being deleted. If it fails, nothing commits: the SQL transaction rolls back and
    /// the harness mutations roll back newest first. It is not called when none of `keys`
    /// exists.
    ///
    /// ```no_run
    /// # async fn demo(hosts: tether_storage::HostSessions, key: tether_core::SessionKey) -> Result<(), tether_core::Error> {
    /// hosts
    ///     .delete_sessions_with(&[key], |tx, deleted| {
    ///         Box::pin(async move {
    ///             for entry in deleted {
    ///                 tx.execute(
    ///                     "DELETE FROM my_chat_threads WHERE session_key = $1",
    ///                     vec![entry.session_key.as_str().into()],
    ///                 )
    ///                 .await?;
    ///             }
    ///             Ok(())
    ///         })
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(level = "info", skip(self, keys, host_writes), fields(count = keys.len()))]
    pub async fn delete_sessions_with<F>(
        &self,
        keys: &[SessionKey],
        host_writes: F,
    ) -> Result<Vec<SessionKey>, Error>
    where
        F: for<'a> Fn(
                HostTransaction<'a>,
                &'a [HostSessionEntry],
            ) -> BoxFuture<'a, Result<(), Error>>
            + Send
            + Sync
            + 'static,
    {
        let requests: Vec<DeletionRequest> =
            keys.iter().cloned().map(DeletionRequest::new).collect();
        self.delete(&requests, Some(Arc::new(host_writes))).await
    }

    /// Like [`delete_sessions`](Self::delete_sessions), with per-session options (the
    /// initialization a deletion rolls back). For a key requested twice the first request wins.
    #[tracing::instrument(level = "info", skip(self, requests), fields(count = requests.len()))]
    pub async fn delete_requests(
        &self,
        requests: &[DeletionRequest],
    ) -> Result<Vec<SessionKey>, Error> {
        self.delete(requests, None).await
    }

    async fn delete(
        &self,
        requests: &[DeletionRequest],
        host_writes: Option<HostWrites>,
    ) -> Result<Vec<SessionKey>, Error> {
        let mut requests: Vec<DeletionRequest> = requests.to_vec();
        requests.sort_by(|a, b| a.session_key.cmp(&b.session_key));
        requests.dedup_by(|later, first| later.session_key == first.session_key);
        let mut targets = Vec::new();
        let mut initializations = Vec::new();
        for request in &requests {
            if let Some(entry) = self.store.session(&request.session_key).await? {
                targets.push(entry);
                initializations.push(request.initialization.clone());
            }
        }
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        self.run(
            Operation::Delete,
            targets.clone(),
            initializations,
            host_writes,
        )
        .await?;
        for t in &targets {
            self.notify_deleted(t).await;
        }
        Ok(targets.into_iter().map(|t| t.session_key).collect())
    }

    /// Deletes a session outside a prepared deletion: refused while any registered harness
    /// implements the deletion hook (its native binding would be abandoned).
    pub async fn delete_without_harnesses(&self, key: &SessionKey) -> Result<bool, Error> {
        let (_, harnesses) = self.registry.snapshot();
        if harnesses.iter().any(|h| h.session_deletion().is_some()) {
            return Err(Error::MutationBlocked {
                message: format!("Session deletion requires prepared harness ownership: {key}"),
            });
        }
        let Some(entry) = self.store.session(key).await? else {
            return Ok(false);
        };
        let tx = self.store.begin_write().await?;
        let result = self
            .store
            .delete_session_in(&tx, &entry)
            .await
            .map(|deleted| (deleted, End::Commit));
        self.store.finish(tx, result).await
    }

    /// Rewinds the session to just before the user message `to`, invalidating native context
    /// through every harness with a context-reset hook, and moves it to generation `next`.
    #[tracing::instrument(level = "info", skip(self))]
    pub async fn rewind(
        &self,
        key: &SessionKey,
        to: TranscriptAnchor,
        next: SessionId,
    ) -> Result<CutStatus, Error> {
        self.context_reset(key, Cut::Rewind { to }, next).await
    }

    /// Makes the branch tip `to` the active leaf, invalidating native context, and moves the
    /// session to generation `next`.
    #[tracing::instrument(level = "info", skip(self))]
    pub async fn switch_branch(
        &self,
        key: &SessionKey,
        to: TranscriptAnchor,
        next: SessionId,
    ) -> Result<CutStatus, Error> {
        self.context_reset(key, Cut::SwitchBranch { to }, next)
            .await
    }

    /// Forks at a user message into a new session. The source and its native context are not
    /// touched.
    pub async fn fork(
        &self,
        source: &SessionKey,
        at: &TranscriptAnchor,
        new: NewHostSession,
    ) -> Result<CutStatus, Error> {
        self.store.fork_session(source, at, new).await
    }

    async fn context_reset(
        &self,
        key: &SessionKey,
        cut: Cut,
        next: SessionId,
    ) -> Result<CutStatus, Error> {
        let db = self.store.connection();
        let Some(session) = self.store.session_row(db, key).await? else {
            return Ok(CutStatus::MissingEntry);
        };
        if let Err(status) = self.store.plan_cut_in(db, &session, &cut).await? {
            return Ok(status);
        }
        if let Some(upstream) = self.store.upstream_link(key).await? {
            return Err(external_harness(key, &upstream));
        }
        self.run(
            Operation::ContextReset { cut, next },
            vec![session.entry],
            vec![None],
            None,
        )
        .await?;
        Ok(CutStatus::Created)
    }

    async fn run(
        &self,
        op: Operation,
        targets: Vec<HostSessionEntry>,
        initializations: Initializations,
        host_writes: Option<HostWrites>,
    ) -> Result<(), Error> {
        self.idle(&op, &targets)?;
        let (generation, harnesses) = self.registry.snapshot();
        let closed = Arc::new(AtomicBool::new(false));
        let owners: Vec<Owner> = harnesses
            .into_iter()
            .filter(|h| {
                if op.is_delete() {
                    h.session_deletion().is_some()
                } else {
                    h.session_context_reset().is_some()
                }
            })
            .map(|harness| {
                let id = harness.id().to_string();
                let (closed, registry, work, op2, keys, inits) = (
                    Arc::clone(&closed),
                    Arc::clone(&self.registry),
                    Arc::clone(&self.work),
                    op.clone(),
                    targets.clone(),
                    initializations.clone(),
                );
                let assert_current: AssertCurrent = Arc::new(move || {
                    if closed.load(Ordering::SeqCst) || registry.generation() != generation {
                        return Err(op2.owner_changed(&id));
                    }
                    for init in inits.iter().flatten() {
                        init.assert_rollback_current()?;
                    }
                    for t in &keys {
                        if work.has_competing_work(&t.session_key, &t.session_id) {
                            return Err(op2.competing(&t.session_key));
                        }
                    }
                    Ok(())
                });
                Owner {
                    harness,
                    assert_current,
                }
            })
            .collect();
        let mut pairs = Vec::new();
        for (ti, target) in targets.iter().enumerate() {
            for (oi, owner) in owners.iter().enumerate() {
                let selected = !op.is_delete()
                    || target
                        .agent_harness_id
                        .as_ref()
                        .is_none_or(|h| h == owner.harness.id());
                if selected {
                    pairs.push((oi, ti));
                }
            }
        }
        let ctx = OpContext {
            op,
            targets,
            initializations,
            owners,
            pairs,
            prepared: Mutex::new(Vec::new()),
            host_ran: AtomicBool::new(false),
            host_error: Mutex::new(None),
            closed,
            host_writes,
        };
        let chain = self.prepare(&ctx, 0).await;
        ctx.closed.store(true, Ordering::SeqCst);
        let host_error = ctx
            .host_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        match (host_error, chain) {
            (Some(host), _) => Err(host),
            (None, Err(err)) => Err(err),
            (None, Ok(())) if !ctx.host_ran.load(Ordering::SeqCst) => Err(Error::other(
                "a harness returned from its deletion hook without running the host operation; nothing was changed",
            )),
            (None, Ok(())) => Ok(()),
        }
    }

    fn prepare<'a>(&'a self, ctx: &'a OpContext, idx: usize) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            let Some(&(oi, ti)) = ctx.pairs.get(idx) else {
                ctx.host_ran.store(true, Ordering::SeqCst);
                let result = self.host_transaction(ctx).await;
                if let Err(err) = &result {
                    *ctx.host_error
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(err.clone());
                }
                return result;
            };
            let owner = &ctx.owners[oi];
            let target = &ctx.targets[ti];
            let run: MutationRun<'a> = Box::new(move |mutation| {
                Box::pin(async move {
                    ctx.prepared
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(Prepared {
                            target: ti,
                            mutation: Arc::new(GuardedMutation {
                                inner: mutation,
                                assert_current: Arc::clone(&owner.assert_current),
                            }),
                        });
                    self.prepare(ctx, idx + 1).await
                })
            });
            let id = owner.harness.id().to_string();
            match &ctx.op {
                Operation::Delete => {
                    let hook = owner
                        .harness
                        .session_deletion()
                        .ok_or_else(|| ctx.op.owner_changed(&id))?;
                    let params = SessionDeletionParams {
                        agent_id: target.agent_id.clone(),
                        session_key: target.session_key.clone(),
                        session_id: target.session_id.clone(),
                        lifecycle_revision: Some(target.lifecycle_revision),
                        initialization: ctx.initializations.get(ti).cloned().flatten(),
                        assert_current: Arc::clone(&owner.assert_current),
                    };
                    hook.with_session_deletion(params, run).await
                }
                Operation::ContextReset { .. } => {
                    let hook = owner
                        .harness
                        .session_context_reset()
                        .ok_or_else(|| ctx.op.owner_changed(&id))?;
                    let params = SessionContextResetParams {
                        agent_id: target.agent_id.clone(),
                        session_key: target.session_key.clone(),
                        session_id: target.session_id.clone(),
                        previous_session_id: target.previous_session_id.clone(),
                        lifecycle_revision: Some(target.lifecycle_revision),
                        assert_current: Arc::clone(&owner.assert_current),
                    };
                    hook.with_session_context_reset(params, run).await
                }
            }
        })
    }

    async fn host_transaction(&self, ctx: &OpContext) -> Result<(), Error> {
        let tx = self.store.begin_write().await?;
        let mut pushed: Vec<Arc<dyn SessionMutation>> = Vec::new();
        if let Err(original) = self.commit_edge(ctx, &tx, &mut pushed).await {
            // Failed before COMMIT: the SQL rollback restores the rows deleted through the
            // transaction; the harnesses undo what they hold elsewhere, newest first.
            if let Err(rollback) = tx.rollback().await {
                tracing::warn!(error = %rollback, "host transaction rollback failed");
            }
            return Err(Self::roll_back(&pushed, original).await);
        }
        if let Err(err) = self.store.commit(tx).await {
            // The COMMIT itself failed: whether it happened cannot be known, so nothing is
            // rolled back (that could resurrect committed deletions); every owner blocks its key.
            // The error names the first target's physical binding key; the message names all.
            let Some(first) = ctx.targets.first() else {
                return Err(err);
            };
            let keys: Vec<&str> = ctx.targets.iter().map(|t| t.session_key.as_str()).collect();
            let error = Error::OutcomeUnknown {
                key: BindingKey::physical(&first.agent_id, &first.session_id),
                message: format!(
                    "the host transaction's COMMIT for {} failed and its outcome is unknown: {err}; the affected keys are quarantined until an operator checks them",
                    keys.join(", ")
                ),
                cause: Some(Arc::new(err)),
            };
            for mutation in &pushed {
                if let Err(settle) = mutation
                    .settle_outcome(SettlementOutcome::Unknown, Some(error.clone()))
                    .await
                {
                    tracing::warn!(error = %settle, "settling an unknown deletion outcome failed");
                }
            }
            return Err(error);
        }
        // Committed: from here on nothing is undone.
        for mutation in &pushed {
            if let Err(err) = mutation
                .settle_outcome(SettlementOutcome::Committed, None)
                .await
            {
                tracing::warn!(error = %err, "session mutation committed, but its post-commit settlement failed");
            }
        }
        if let Some(after) = &self.hooks.after_commit {
            after()?;
        }
        Ok(())
    }

    /// Runs the rollback list newest first, settling each rolled-back mutation, and aggregates
    /// failures with the original error.
    async fn roll_back(pushed: &[Arc<dyn SessionMutation>], original: Error) -> Error {
        let mut failures = Vec::new();
        for mutation in pushed.iter().rev() {
            match mutation.rollback().await {
                Ok(()) => {
                    if let Err(err) = mutation
                        .settle_outcome(SettlementOutcome::RolledBack, None)
                        .await
                    {
                        failures.push(err);
                    }
                }
                Err(err) => failures.push(err),
            }
        }
        if failures.is_empty() {
            original
        } else {
            Error::RollbackFailed {
                original: Arc::new(original),
                failures,
            }
        }
    }

    async fn commit_edge(
        &self,
        ctx: &OpContext,
        tx: &DatabaseTransaction,
        pushed: &mut Vec<Arc<dyn SessionMutation>>,
    ) -> Result<(), Error> {
        let mut rows = Vec::with_capacity(ctx.targets.len());
        for target in &ctx.targets {
            let row = self
                .store
                .session_row(tx, &target.session_key)
                .await?
                .filter(|row| {
                    row.entry.session_id == target.session_id
                        && row.entry.lifecycle_revision == target.lifecycle_revision
                        && (ctx.op.is_delete()
                            || row.entry.previous_session_id == target.previous_session_id)
                })
                .ok_or_else(|| session_changed(&target.session_key, &target.session_id))?;
            rows.push(row);
        }
        let check_links = || async {
            if !ctx.op.is_delete() {
                for t in &ctx.targets {
                    if let Some(upstream) = self.store.upstream_link_in(tx, &t.session_key).await? {
                        return Err(external_harness(&t.session_key, &upstream));
                    }
                }
            }
            Ok::<(), Error>(())
        };
        check_links().await?;
        self.idle(&ctx.op, &ctx.targets)?;
        let prepared: Vec<(usize, Arc<dyn SessionMutation>)> = ctx
            .prepared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|p| (p.target, Arc::clone(&p.mutation)))
            .collect();
        for (ti, target) in ctx.targets.iter().enumerate() {
            let has_owner = ctx.pairs.iter().any(|&(_, t)| t == ti);
            if has_owner && !prepared.iter().any(|(t, _)| *t == ti) {
                return Err(Error::MutationBlocked {
                    message: format!(
                        "Session deletion requires prepared harness ownership: {}",
                        target.session_key
                    ),
                });
            }
        }
        let row_tx = SqlRowTransaction::new(&self.store, tx);
        for (_, mutation) in prepared {
            pushed.push(Arc::clone(&mutation));
            mutation.commit(&row_tx).await?;
        }
        if let Some(writes) = &ctx.host_writes {
            writes(HostTransaction::new(&self.store, tx), &ctx.targets).await?;
        }
        if let Some(after) = &self.hooks.after_mutations {
            after(tx).await?;
        }
        check_links().await?;
        for row in rows {
            let key = &row.entry.session_key;
            let applied = match &ctx.op {
                Operation::Delete => self.store.delete_session_in(tx, &row.entry).await?,
                Operation::ContextReset { cut, next } => {
                    match self.store.plan_cut_in(tx, &row, cut).await? {
                        Ok(leaf) => self
                            .store
                            .rotate_in(tx, &row.entry, next, leaf)
                            .await?
                            .is_some(),
                        Err(_) => false,
                    }
                }
            };
            if !applied {
                return Err(session_changed(key, &row.entry.session_id));
            }
        }
        Ok(())
    }

    async fn notify_deleted(&self, target: &HostSessionEntry) {
        let (_, harnesses) = self.registry.snapshot();
        for harness in harnesses {
            let params = ResetParams {
                agent_id: target.agent_id.clone(),
                session_id: target.session_id.clone(),
                session_key: Some(target.session_key.clone()),
                reason: ResetReason::Deleted,
                lifecycle_revision: Some(target.lifecycle_revision),
            };
            if let Err(err) = harness.reset(params).await {
                tracing::warn!(harness = %harness.id(), session = %target.session_key, error = %err, "post-delete reset notification failed");
            }
        }
    }
}
