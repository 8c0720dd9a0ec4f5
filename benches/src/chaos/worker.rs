//! One chaos worker process: leases and fenced writes, deletions, context resets and resets
//! with injected transaction failures, until its deadline (or its SIGKILL).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, TransactionTrait};
use serde_json::json;
use tether_core::HarnessRegistry;
use tether_core::{
    AgentHarness, BindingKey, Clock, Error, HarnessId, JsonObjectCodec, LeaseConfig, LeaseWrite,
    MutationRun, Namespace, QuarantineEntry, QuarantineStore, ResetParams, RowTransaction,
    RowWrite, SessionContextResetHook, SessionContextResetParams, SessionDeletionHook,
    SessionDeletionParams, SessionId, SessionKey, SessionMutation,
};
use tether_harness_sdk::backend::{BindingIdentity, ThreadBinding, WriteOptions};
use tether_harness_sdk::generation::BindingAuthority;
use tether_harness_sdk::hooks::ThreadBindingHarness;
use tether_harness_sdk::lifecycle::{Applied, LeaseOptions, Lifecycle, TransactOptions};
use tether_host::{ActiveRuns, HostSessions, TransactionHooks};
use tether_storage::{NewHostSession, NewTranscriptEntry, Store, TranscriptRole};

use super::{
    KEYS, NEW_THREAD, agent, db_error, lease_key, lease_ns, old_thread, session_binding,
    session_ns, stmt, thread_harness,
};

type Record = serde_json::Map<String, serde_json::Value>;

/// A small xorshift generator (no dependency; seeded per process).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn seeded(salt: u64) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Self((nanos ^ (u64::from(std::process::id()) << 32) ^ salt) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The harness of the drill: its prepared mutation deletes the session's binding row through
/// the host transaction (the SQL rollback restores it; nothing to undo by hand).
#[derive(Debug)]
struct ChaosHarness {
    id: HarnessId,
}

struct DeleteBinding {
    ns: Namespace,
    key: BindingKey,
}

#[async_trait]
impl SessionMutation for DeleteBinding {
    async fn commit(&self, tx: &dyn RowTransaction) -> Result<(), Error> {
        tx.delete_if(&self.ns, &self.key, &|_| true).await?;
        Ok(())
    }

    async fn rollback(&self) -> Result<(), Error> {
        Ok(())
    }
}

#[async_trait]
impl SessionDeletionHook for ChaosHarness {
    async fn with_session_deletion(
        &self,
        params: SessionDeletionParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        let key = session_binding(&params.session_key);
        run(Arc::new(DeleteBinding {
            ns: session_ns(),
            key,
        }))
        .await
    }
}

#[async_trait]
impl SessionContextResetHook for ChaosHarness {
    async fn with_session_context_reset(
        &self,
        params: SessionContextResetParams,
        run: MutationRun<'_>,
    ) -> Result<(), Error> {
        let key = session_binding(&params.session_key);
        run(Arc::new(DeleteBinding {
            ns: session_ns(),
            key,
        }))
        .await
    }
}

#[async_trait]
impl AgentHarness for ChaosHarness {
    fn id(&self) -> &HarnessId {
        &self.id
    }

    async fn reset(&self, _params: ResetParams) -> Result<(), Error> {
        Ok(())
    }

    fn session_deletion(&self) -> Option<&dyn SessionDeletionHook> {
        Some(self)
    }

    fn session_context_reset(&self) -> Option<&dyn SessionContextResetHook> {
        Some(self)
    }
}

/// How an injected failure hits a host transaction.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Inject {
    None,
    BeforeCommit,
    AfterCommit,
    /// (Resets only.) The reset commits and no harness is told: what a process that dies
    /// right after the COMMIT leaves.
    Unnotified,
}

/// The worker's outcome log (`--acks FILE`, used by `cargo xtask faults`): one line per
/// operation, written only after the operation returned, so a line `ack` is a write the worker
/// was told is committed. Lines: `ok <unix ms>`, `fail <unix ms> <class>`,
/// `ack <unix ms> <key> <epoch> <writer> <seq>`, `lost <unix ms>` (a held lease lapsed while
/// the worker held it), and for each lease it held: `hold <unix ms> <key> <epoch>` once
/// acquired, `begin <unix ms> <key> <epoch>` when its fenced write starts and `held <unix ms>
/// <key> <epoch>` when the work under it ended, each with the lease still live by the
/// worker's clock (the time read before that check), `unknown <unix ms> <key> <epoch> <writer> <seq>` when the
/// fenced write's COMMIT failed (its outcome unknown) and `quarantined <unix ms> <key>` when
/// the worker saw the key's durable quarantine record. Times are the real system time, never
/// a skewed clock. Kept outside the database's file system.
#[derive(Clone)]
pub(crate) struct Acks(Arc<std::sync::Mutex<std::fs::File>>);

impl Acks {
    pub(crate) fn open(path: &str) -> Result<Self, Error> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| Error::other(format!("cannot open the ack log {path}: {e}")))?;
        Ok(Self(Arc::new(std::sync::Mutex::new(file))))
    }

    fn line(&self, text: &str) {
        use std::io::Write as _;
        let line = format!("{text}\n");
        // One write per line (O_APPEND): a SIGKILL never leaves half a line behind a whole one.
        if let Ok(mut file) = self.0.lock()
            && let Err(e) = file.write_all(line.as_bytes())
        {
            tracing::warn!(error = %e, "cannot write the ack log");
        }
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// A short class of an operation's error, for the ack log.
fn class(error: &Error) -> &'static str {
    if error.is_outcome_unknown() {
        "unknown"
    } else if error.is_busy() {
        "busy"
    } else if error.is_lost_lease() {
        "lost-lease"
    } else if error.is_retryable() {
        "unavailable"
    } else if matches!(
        error,
        Error::Store {
            kind: tether_core::StoreErrorKind::Unusable { .. }
        }
    ) {
        "unusable"
    } else if error.to_string().contains("fence refused") {
        "fenced"
    } else {
        "other"
    }
}

/// One worker's state.
pub(crate) struct Worker {
    store: Store,
    name: String,
    acks: Option<Acks>,
    lc: Lifecycle<JsonObjectCodec>,
    registry: Arc<HarnessRegistry>,
    /// The thread-binding hooks of the sessions this worker resets, registered in
    /// `reset_registry` (the deletions and context resets keep the drill's own harness).
    threads: Arc<ThreadBindingHarness>,
    reset_registry: Arc<HarnessRegistry>,
    rng: Rng,
    seq: u64,
    sessions: u64,
    /// Lease keys this process saw durably quarantined after an unknown outcome: when an
    /// operator releases the record, the worker lifts its in-process block
    /// (`Lifecycle::unblock`), as a harness must.
    quarantined: std::collections::HashSet<BindingKey>,
    /// How long a fenced write holds its lease before writing (`--hold-ms`; 5 ms by default),
    /// giving up at once when the lease lapses (`LeaseGuard::lost`, the local expiry clock).
    hold: Duration,
    /// The clock leases are decided with.
    clock: Arc<dyn Clock>,
    /// Keys blocked after an unknown outcome whose durable quarantine record is not written.
    pending: Vec<(BindingKey, Error)>,
}

impl Worker {
    /// A worker deciding leases with `clock` (the store's clock too).
    pub(crate) fn new(store: Store, name: &str, clock: Arc<dyn Clock>) -> Result<Self, Error> {
        let lc = Lifecycle::builder(
            Arc::new(store.clone()),
            lease_ns(),
            JsonObjectCodec,
            Arc::new(|current: Option<&Record>, _lease: &LeaseWrite| {
                Some(current.cloned().unwrap_or_default())
            }),
        )
        .lease_config(LeaseConfig {
            lease_duration: Duration::from_secs(3),
            wait_budget: Duration::from_secs(5),
            retry_interval: Duration::from_millis(25),
            renew_interval: Duration::from_secs(1),
        })
        .clock(clock.clone())
        .quarantine(Arc::new(store.clone()))
        .holder(name)
        .build()?;
        let registry = HarnessRegistry::shared();
        registry.register(Arc::new(ChaosHarness {
            id: HarnessId::new("chaos")?,
        }));
        let threads = Arc::new(thread_harness(&store, clock.clone(), name)?);
        let reset_registry = HarnessRegistry::shared();
        reset_registry.register(threads.clone() as Arc<dyn AgentHarness>);
        Ok(Self {
            store,
            name: name.to_owned(),
            lc,
            registry,
            threads,
            reset_registry,
            rng: Rng::seeded(name.len() as u64),
            seq: 0,
            sessions: 0,
            acks: None,
            quarantined: std::collections::HashSet::new(),
            hold: Duration::from_millis(5),
            clock,
            pending: Vec::new(),
        })
    }

    /// Holds each lease `hold` before its fenced write.
    pub(crate) fn with_hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    /// Logs every operation's outcome to `acks`.
    pub(crate) fn with_acks(mut self, acks: Acks) -> Self {
        self.acks = Some(acks);
        self
    }

    /// Loops until `deadline`; returns the number of operations attempted.
    pub(crate) async fn run(&mut self, deadline: Instant) -> u64 {
        let mut ops = 0;
        while Instant::now() < deadline {
            self.record_pending().await;
            let result = match self.rng.below(12) {
                0..=6 => self.fenced_write().await,
                7 => self.session_op(false, Inject::None).await,
                8 => self.session_op(false, Inject::BeforeCommit).await,
                9 => {
                    let inject = self.pick_inject();
                    self.session_op(true, inject).await
                }
                10 => {
                    let rewind = self.rng.below(2) == 0;
                    self.session_op(rewind, Inject::AfterCommit).await
                }
                _ => {
                    let inject = [
                        Inject::None,
                        Inject::BeforeCommit,
                        Inject::AfterCommit,
                        Inject::Unnotified,
                    ][self.rng.below(4) as usize];
                    self.reset_op(inject).await
                }
            };
            match (&result, &self.acks) {
                (Ok(()), Some(acks)) => acks.line(&format!("ok {}", unix_ms())),
                (Err(error), Some(acks)) => {
                    acks.line(&format!("fail {} {}", unix_ms(), class(error)));
                }
                (_, None) => {}
            }
            if let Err(error) = result {
                tracing::debug!(worker = %self.name, error = %error, "chaos operation failed");
                if self.acks.is_some() {
                    // Under resource faults most operations fail at once: do not spin.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            ops += 1;
        }
        ops
    }

    fn pick_inject(&mut self) -> Inject {
        if self.rng.below(2) == 0 {
            Inject::None
        } else {
            Inject::BeforeCommit
        }
    }

    /// [`Worker::fenced_write`] on a random key; a key blocked after an unknown outcome is
    /// unblocked once an operator released the quarantine record this worker saw.
    async fn fenced_write(&mut self) -> Result<(), Error> {
        let key = lease_key(self.rng.below(KEYS as u64) as usize);
        if self.quarantined.contains(&key)
            && self.store.quarantined(&lease_ns(), &key).await?.is_none()
        {
            self.quarantined.remove(&key);
            self.lc.unblock(&key);
        }
        let result = self.fenced_write_on(&key).await;
        if let Err(error) = &result
            && error.is_outcome_unknown()
            && !self.quarantined.contains(&key)
        {
            match self.store.quarantined(&lease_ns(), &key).await {
                Ok(Some(_)) => self.seen_quarantined(key),
                // Not written yet (the store was out of reach when the key was blocked):
                // written before the next operation, as soon as the store accepts it.
                Ok(None) | Err(_) => self.pending.push((key, error.clone())),
            }
        }
        result
    }

    /// Notes that `key`'s durable quarantine record exists.
    fn seen_quarantined(&mut self, key: BindingKey) {
        if let Some(acks) = &self.acks {
            acks.line(&format!("quarantined {} {key}", unix_ms()));
        }
        self.quarantined.insert(key);
    }

    /// Writes the durable quarantine records that could not be written when their keys were
    /// blocked.
    async fn record_pending(&mut self) {
        for (key, error) in std::mem::take(&mut self.pending) {
            match self
                .lc
                .block(&key, error.clone(), Some(self.name.clone()))
                .await
            {
                Ok(()) => self.seen_quarantined(key),
                Err(_) => self.pending.push((key, error)),
            }
        }
    }

    /// Acquires the lease of `key` and writes through it to the fenced log.
    async fn fenced_write_on(&mut self, key: &BindingKey) -> Result<(), Error> {
        let key = key.clone();
        self.seq += 1;
        let (seq, name, store, lc) = (self.seq, self.name.clone(), &self.store, &self.lc);
        let acks = self.acks.clone();
        let hold = self.hold;
        let key_ref = &key;
        lc.with_lease(key_ref, LeaseOptions::default(), |guard| async move {
            let epoch = guard.epoch().get();
            if let Some(acks) = &acks {
                acks.line(&format!("hold {} {key_ref} {epoch}", unix_ms()));
            }
            // Hold the lease a little so that contention and kills overlap; a holder cut off
            // from the database learns here that its lease lapsed.
            tokio::select! {
                () = tokio::time::sleep(hold) => {}
                lost = guard.lost() => {
                    // When the holder learned it (`with_lease` returns only after its
                    // release, which waits for the database).
                    if let Some(acks) = &acks {
                        acks.line(&format!("lost {}", unix_ms()));
                    }
                    return Err(lost);
                }
            }
            // The side effect starts only under a lease still live by the worker's clock
            // (the time read before the check: the lease was live at least until then).
            let at = unix_ms();
            guard.capture_lease_assertion()?;
            if let Some(acks) = &acks {
                acks.line(&format!("begin {at} {key_ref} {epoch}"));
            }
            match fence_and_log(store, key_ref, epoch, &name, seq).await {
                Ok(()) => {}
                Err(error) if error.is_outcome_unknown() => {
                    // The COMMIT failed: the write may stand or not. Stop, and block the key
                    // (quarantined durably now, or at its next entry point when the store is
                    // out of reach) until an operator checked it.
                    if let Some(acks) = &acks {
                        acks.line(&format!(
                            "unknown {} {key_ref} {epoch} {name} {seq}",
                            unix_ms()
                        ));
                    }
                    if let Err(e) = guard.block(error.clone(), Some(name.clone())).await {
                        tracing::warn!(key = %key_ref, error = %e, "quarantine record not written yet");
                    }
                    return Err(error);
                }
                Err(error) => return Err(error),
            }
            if let Some(acks) = &acks {
                acks.line(&format!("ack {} {key_ref} {epoch} {name} {seq}", unix_ms()));
            }
            lc.transact(key_ref, TransactOptions::default(), |current, _| {
                let mut next = current.cloned().unwrap_or_default();
                next.insert("writer".into(), json!(name));
                next.insert("seq".into(), json!(seq));
                Ok(Applied::write(next, ()))
            })
            .await?;
            // The time is read before the check: the lease was live at least until then.
            let at = unix_ms();
            if guard.capture_lease_assertion().is_ok()
                && let Some(acks) = &acks
            {
                acks.line(&format!("held {at} {key_ref} {epoch}"));
            }
            Ok(())
        })
        .await
    }

    /// Creates a session with a binding and a short transcript, then deletes it or rewinds
    /// it (moving it to generation `s-2`), with the given injected failure.
    async fn session_op(&mut self, rewind: bool, inject: Inject) -> Result<(), Error> {
        self.sessions += 1;
        let session = SessionKey::new(format!("agent:main:chaos-{}-{}", self.name, self.sessions))?;
        let kind = if rewind { "rewind" } else { "delete" };
        let db = self.store.connection();
        db.execute_raw(stmt(
            &self.store,
            "INSERT INTO chaos_sessions (session_key, writer, kind, status) VALUES (?, ?, ?, 'creating')",
            vec![session.as_str().into(), self.name.clone().into(), kind.into()],
        ))
        .await
        .map_err(db_error)?;
        let row = RowWrite {
            value: br#"{"thread":"native"}"#.to_vec(),
            lease: None,
        };
        tether_core::BindingStore::register_if_absent(
            &self.store,
            &session_ns(),
            &session_binding(&session),
            row,
            None,
        )
        .await?;
        self.create_session(&session).await?;
        let mut anchors = Vec::new();
        for (role, text) in [
            (TranscriptRole::User, "u1"),
            (TranscriptRole::Assistant, "a1"),
            (TranscriptRole::User, "u2"),
        ] {
            let entry = NewTranscriptEntry {
                role,
                content: text.into(),
                idempotency_key: None,
                metadata: None,
            };
            anchors.push(self.store.append_transcript(&session, entry).await?.anchor);
        }
        self.status(&session, "created").await?;
        let hosts = HostSessions::new(
            self.store.clone(),
            self.registry.clone(),
            Arc::new(ActiveRuns::new()),
        )
        .with_hooks(hooks(inject));
        let result = if rewind {
            hosts
                .rewind(&session, anchors[2], SessionId::new("s-2")?)
                .await
                .map(|_| ())
        } else {
            hosts
                .delete_sessions(std::slice::from_ref(&session))
                .await
                .map(|_| ())
        };
        match (result, inject) {
            (Ok(()), _) => {
                self.status(&session, if rewind { "rewound" } else { "deleted" })
                    .await
            }
            (Err(_), Inject::BeforeCommit) => self.status(&session, "kept").await,
            (Err(error), Inject::AfterCommit) => {
                // The outcome is unknown to this process: explain, then quarantine.
                db.execute_raw(stmt(
                    &self.store,
                    "INSERT INTO chaos_explained (session_key, reason) VALUES (?, ?)",
                    vec![session.as_str().into(), error.to_string().into()],
                ))
                .await
                .map_err(db_error)?;
                self.store
                    .quarantine(QuarantineEntry {
                        namespace: session_ns(),
                        key: session_binding(&session),
                        reason: format!("host transaction outcome unknown: {error}"),
                        custody: Some(self.name.clone()),
                        quarantined_at: self.clock.now(),
                    })
                    .await?;
                self.status(&session, "unknown").await
            }
            (Err(error), Inject::None | Inject::Unnotified) => {
                self.status(&session, "failed").await?;
                Err(error)
            }
        }
    }

    /// Creates a session bound to a thread through the SDK's thread-binding backend (generation
    /// `s-1`, thread [`old_thread`]), resets it (`/new`, to generation `s-2`) with the given
    /// injected failure — or commits the reset without telling any harness, as a process that
    /// died right after the COMMIT leaves it — and then, half the time, runs a turn of the
    /// new generation that binds a thread of its own ([`NEW_THREAD`]), half of those followed by
    /// the reset's notification once more ([`Self::late_notification`]). The checker asserts
    /// that the reset generation never continues the old thread, and that a late notification
    /// never takes away the thread the new generation bound.
    async fn reset_op(&mut self, inject: Inject) -> Result<(), Error> {
        self.sessions += 1;
        let session = SessionKey::new(format!("agent:main:chaos-{}-{}", self.name, self.sessions))?;
        self.store
            .connection()
            .execute_raw(stmt(
                &self.store,
                "INSERT INTO chaos_sessions (session_key, writer, kind, status) VALUES (?, ?, 'reset', 'creating')",
                vec![session.as_str().into(), self.name.clone().into()],
            ))
            .await
            .map_err(db_error)?;
        self.create_session(&session).await?;
        self.bind_in_turn(&session, "s-1", old_thread(&session))
            .await?;
        self.status(&session, "created").await?;
        let next = SessionId::new("s-2")?;
        let result = if inject == Inject::Unnotified {
            tether_storage::testing::commit_unnotified_reset(&self.store, &session, &next)
                .await?
                .map(|_| ())
                .ok_or_else(|| Error::other("chaos: the session moved on before its reset"))
        } else {
            HostSessions::new(
                self.store.clone(),
                self.reset_registry.clone(),
                Arc::new(ActiveRuns::new()),
            )
            .with_hooks(hooks(inject))
            .reset(&session, next, tether_core::ResetReason::New)
            .await
            .map(|_| ())
        };
        let committed = match (result, inject) {
            (Ok(()), Inject::Unnotified) => {
                self.status(&session, "unnotified").await?;
                true
            }
            (Ok(()), _) => {
                self.status(&session, "reset").await?;
                true
            }
            (Err(_), Inject::BeforeCommit) => {
                self.status(&session, "kept").await?;
                false
            }
            (Err(error), Inject::AfterCommit) if is_injected_after_commit(&error) => {
                self.status(&session, "unknown").await?;
                true
            }
            // A failure of its own (a database fault of `cargo xtask faults`, before or
            // during the COMMIT) rather than the injected one: as without an injection.
            (Err(error), Inject::None | Inject::Unnotified | Inject::AfterCommit) => {
                self.status(&session, "failed").await?;
                return Err(error);
            }
        };
        if committed && self.rng.below(2) == 0 {
            self.bind_in_turn(&session, "s-2", format!("{NEW_THREAD}{session}"))
                .await?;
            if self.rng.below(2) == 0 {
                self.late_notification(&session).await?;
            }
        }
        Ok(())
    }

    /// The reset's notification again, after the new generation's turn bound its thread (a
    /// slow fan-out of another process, or a host repeating it after a restart); `late` once
    /// every harness took it. The checker asserts the new generation's thread is still bound.
    async fn late_notification(&self, session: &SessionKey) -> Result<(), Error> {
        let entry = self
            .store
            .session(session)
            .await?
            .ok_or_else(|| Error::session_not_found(session))?;
        let report = tether_harness_sdk::reset::reset_registered_harness_sessions(
            &[&self.reset_registry],
            &tether_core::ResetParams::of_entry(&entry, tether_core::ResetReason::New),
        )
        .await;
        if report.failures().next().is_none() {
            self.status(session, "late").await?;
        }
        Ok(())
    }

    /// A turn of `session`'s generation `generation` binding `thread` (the SDK's turn lease:
    /// a binding the recorded predecessor left is adopted or cleared as the row says).
    async fn bind_in_turn(
        &self,
        session: &SessionKey,
        generation: &str,
        thread: String,
    ) -> Result<(), Error> {
        let identity =
            BindingIdentity::session(agent(), SessionId::new(generation)?, Some(session.clone()));
        let caller = BindingAuthority::caller(tether_core::always_current());
        let bindings = self.threads.store().clone();
        self.threads
            .with_turn_lease(&identity, &caller, |_lease, authority| {
                let identity = identity.clone();
                async move {
                    let written = bindings
                        .set(
                            &identity,
                            ThreadBinding::new(thread, "/chaos"),
                            WriteOptions::checked(authority.assert_current_fn()),
                        )
                        .await?;
                    if written {
                        Ok(())
                    } else {
                        Err(Error::other(format!(
                            "chaos: the turn of {} could not bind its thread",
                            identity.key()
                        )))
                    }
                }
            })
            .await
    }

    /// Creates the host session `session` at generation `s-1`.
    async fn create_session(&self, session: &SessionKey) -> Result<(), Error> {
        self.store
            .create_session(NewHostSession {
                session_key: session.clone(),
                agent_id: agent(),
                session_id: SessionId::new("s-1")?,
                agent_harness_id: None,
            })
            .await?;
        Ok(())
    }

    async fn status(&self, session: &SessionKey, status: &str) -> Result<(), Error> {
        self.store
            .connection()
            .execute_raw(stmt(
                &self.store,
                "UPDATE chaos_sessions SET status = ? WHERE session_key = ?",
                vec![status.into(), session.as_str().into()],
            ))
            .await
            .map_err(db_error)?;
        Ok(())
    }
}

/// The transaction hooks that inject `inject`'s failure.
fn hooks(inject: Inject) -> TransactionHooks {
    match inject {
        Inject::None | Inject::Unnotified => TransactionHooks::new(),
        Inject::BeforeCommit => TransactionHooks::new().after_mutations(|_| {
            Box::pin(async { Err(Error::other("chaos: injected failure before COMMIT")) })
        }),
        Inject::AfterCommit => {
            TransactionHooks::new().after_commit(|| Err(Error::other(INJECTED_AFTER_COMMIT)))
        }
    }
}

/// The failure [`Inject::AfterCommit`] injects once the COMMIT succeeded.
const INJECTED_AFTER_COMMIT: &str = "chaos: injected failure after COMMIT";

/// Whether `error` is the injected failure after a successful COMMIT (not a failure of the
/// transaction itself, which a fault run also causes).
fn is_injected_after_commit(error: &Error) -> bool {
    error.to_string() == INJECTED_AFTER_COMMIT
}

/// The fenced write: in one SQL transaction, advance the key's fence to `epoch` only if the
/// fence is not newer, and log the write only if it was accepted.
async fn fence_and_log(
    store: &Store,
    key: &BindingKey,
    epoch: u64,
    writer: &str,
    seq: u64,
) -> Result<(), Error> {
    let epoch = i64::try_from(epoch).map_err(|_| Error::other("epoch overflow"))?;
    let seq = i64::try_from(seq).map_err(|_| Error::other("seq overflow"))?;
    let tx = store.connection().begin().await.map_err(db_error)?;
    let fenced = tx
        .execute_raw(stmt(
            store,
            "UPDATE chaos_fence SET epoch = ?, writer = ? WHERE key = ? AND epoch <= ?",
            vec![
                epoch.into(),
                writer.into(),
                key.as_str().into(),
                epoch.into(),
            ],
        ))
        .await
        .map_err(db_error)?;
    if fenced.rows_affected() == 1 {
        tx.execute_raw(stmt(
            store,
            "INSERT INTO chaos_log (key, epoch, writer, seq) VALUES (?, ?, ?, ?)",
            vec![key.as_str().into(), epoch.into(), writer.into(), seq.into()],
        ))
        .await
        .map_err(db_error)?;
        // A COMMIT that fails (or whose answer is lost) leaves the write standing or not.
        tx.commit().await.map_err(|e| Error::OutcomeUnknown {
            key: key.clone(),
            message: format!(
                "the COMMIT of the fenced write failed; it may or may not be saved: {e}"
            ),
            cause: None,
        })?;
        Ok(())
    } else {
        tx.rollback().await.map_err(db_error)?;
        store
            .connection()
            .execute_raw(stmt(
                store,
                "INSERT INTO chaos_rejects (key, epoch, writer) VALUES (?, ?, ?)",
                vec![key.as_str().into(), epoch.into(), writer.into()],
            ))
            .await
            .map_err(db_error)?;
        Err(Error::other("chaos: the fence refused a stale epoch"))
    }
}
