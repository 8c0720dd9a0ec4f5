//! Group commit: concurrent lifecycle writes of one store share one database transaction and
//! one COMMIT, each keeping its own compare-and-swap and its own outcome.
//!
//! A write joins the *open batch* (or opens one) and waits for its turn at the batch's shared
//! transaction, where it reads its row, compares and writes exactly as it would alone. The last
//! member to finish seals the batch and ends it with one COMMIT; every member then learns the
//! outcome of that COMMIT:
//!
//! - COMMIT succeeded: each member's own result stands (applied, unchanged, conflict, or its
//!   own error).
//! - COMMIT failed: a member that wrote gets [`StoreErrorKind::CommitFailed`] (its outcome is
//!   unknown; the keyed writes report it as [`Error::OutcomeUnknown`] for their key); a member
//!   that wrote nothing keeps its own error, or gets a retryable
//!   [`StoreErrorKind::Unavailable`] when its answer was read in a batch that never committed.
//! - The batch was rolled back (see below): every member gets [`StoreErrorKind::Unavailable`]
//!   or its own error — nothing of the batch was saved.
//!
//! A write's own refusal (its admission, the namespace capacity, a changed row, an invalid
//! value) is decided before it writes anything and never touches its neighbours. A failure of
//! the database under a write (disk full, an I/O error, a broken connection) may leave that
//! write half applied or end the transaction (PostgreSQL aborts a transaction on any failed
//! statement, and answers its COMMIT with a silent rollback), so it stops the batch: members
//! after it do not run and get its error, and the batch is rolled back — except on SQLite
//! after a failed single statement, which undid only itself: there the writes before it are
//! still committed. A member dropped in the middle of its write rolls the batch back too.
//!
//! A write that finds itself alone when its turn comes (no one joined while it waited for the
//! write slot) writes as a plain transaction, or a single statement in autocommit: one owner
//! pays nothing for group commit. Batches form under concurrency, while the previous one
//! commits.
//!
//! No member returns before the COMMIT (or rollback) that ends its batch has answered, so no
//! write is acknowledged early, and nothing is ever replayed.
//!
//! On PostgreSQL a batch begins its transaction only when a member that runs statements of its
//! own takes its turn. A batch of members that only handed over single-statement writes (see the
//! `observed` module) on distinct keys never begins one: its end writes them all, with their
//! lease events, in one statement in autocommit, and that statement stands for its COMMIT (an
//! unknown outcome is [`StoreErrorKind::CommitFailed`] for every write it carried). Such a
//! member of a batch someone else opened does not wait for a turn at all: the batch writes its
//! write at its end.
//!
//! One batch writes at a time. On SQLite that is the store's *write slot*, an in-process fair
//! lock held from `BEGIN IMMEDIATE` to the end of the COMMIT and taken by every writer
//! transaction of the store ([`Store::begin_write`]), so writers queue in order instead of
//! polling SQLite's busy handler. On a SQLite file every writer transaction then begins on the
//! store's one writer connection (taken after the slot, never before it), whose page cache
//! stays warm from one batch to the next; an in-memory database has one connection for
//! everything. On PostgreSQL a batch slot orders the batches only; other writer transactions
//! (host transactions, sweeps) run beside them on the pool, and row locks order them.
//!
//! Architecture Invariant: a member's result leaves this module only after the COMMIT (or
//! rollback) of its batch has answered.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sea_orm::DatabaseTransaction;
use tether_core::{Error, StoreErrorKind};
use tokio::sync::{OwnedMutexGuard, watch};

use super::binding::EventRow;
use super::observed::{ObservedSet, SetResult};
use super::{End, Store};

/// The most members one batch takes; later writers open the next batch.
pub(crate) const MAX_MEMBERS: usize = 64;

/// Counts of a store's group commit since it was opened ([`Store::group_commit_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupCommitStats {
    /// Writes that found themselves alone and wrote by themselves.
    pub solo_writes: u64,
    /// Batches of two or more writes that ended (committed, failed or rolled back).
    pub batches: u64,
    /// Writes that ran in those batches.
    pub batched_writes: u64,
    /// Batches written by one statement in autocommit, with no transaction of their own
    /// (PostgreSQL, when every member handed over a single conditional write and no key came
    /// twice).
    pub single_statement_batches: u64,
    /// The most writes one batch carried.
    pub largest_batch: u64,
    /// Times a batch's first member gave writers still on their way a turn of the scheduler
    /// to join it. It does so only when writes have company (the last batch had several
    /// members, or the member waited for the slot), never for an owner writing alone.
    pub joining_turns: u64,
}

#[derive(Debug, Default)]
struct Counters {
    solo_writes: AtomicU64,
    batches: AtomicU64,
    batched_writes: AtomicU64,
    single_statement_batches: AtomicU64,
    largest_batch: AtomicU64,
    joining_turns: AtomicU64,
}

/// The group-commit state of one store.
pub(crate) struct GroupCommit {
    /// The batch new writers join, while it takes members.
    open: Mutex<Option<Arc<Batch>>>,
    /// SQLite: the write slot (see the module documentation); `None` on PostgreSQL.
    slot: Option<Arc<tokio::sync::Mutex<()>>>,
    /// PostgreSQL: the batch slot, held by the one batch that writes at a time.
    batch_slot: Arc<tokio::sync::Mutex<()>>,
    /// How long a writer waits for the write slot before it is told the database is busy.
    slot_timeout: Duration,
    counters: Counters,
    /// Whether the last batch to write had company: two or more members, or a first member
    /// that had to wait for the slot. Only then does a batch's first member yield for others
    /// to join (see [`Store::join_group`]).
    company: AtomicBool,
}

/// A writer transaction of the store: the transaction and, on SQLite, the write slot it holds
/// until it ends. Dereferences to the transaction.
pub(crate) struct WriteTx {
    tx: DatabaseTransaction,
    _slot: Option<OwnedMutexGuard<()>>,
}

impl std::ops::Deref for WriteTx {
    type Target = DatabaseTransaction;

    fn deref(&self) -> &DatabaseTransaction {
        &self.tx
    }
}

impl WriteTx {
    /// A writer transaction holding `slot` until it ends.
    pub(crate) fn new(tx: DatabaseTransaction, slot: Option<OwnedMutexGuard<()>>) -> Self {
        Self { tx, _slot: slot }
    }

    /// The transaction and the slot guard, which must live until the transaction ended.
    pub(crate) fn into_parts(self) -> (DatabaseTransaction, Option<OwnedMutexGuard<()>>) {
        (self.tx, self._slot)
    }

    /// Rolls the transaction back (and frees the write slot).
    pub(crate) async fn rollback(self) -> Result<(), sea_orm::DbErr> {
        self.tx.rollback().await
    }
}

impl GroupCommit {
    /// Group commit for a store; `single_writer` on SQLite.
    pub(crate) fn new(single_writer: bool, slot_timeout: Duration) -> Self {
        Self {
            open: Mutex::new(None),
            slot: single_writer.then(|| Arc::new(tokio::sync::Mutex::new(()))),
            batch_slot: Arc::new(tokio::sync::Mutex::new(())),
            slot_timeout,
            counters: Counters::default(),
            company: AtomicBool::new(false),
        }
    }

    /// Takes the write slot (SQLite), waiting at most the busy timeout.
    pub(crate) async fn slot(&self) -> Result<Option<OwnedMutexGuard<()>>, Error> {
        Ok(self.slot_noting_wait().await?.0)
    }

    /// [`GroupCommit::slot`], and whether it had to wait for it.
    async fn slot_noting_wait(&self) -> Result<(Option<OwnedMutexGuard<()>>, bool), Error> {
        match &self.slot {
            Some(slot) => self
                .lock_within(
                    slot,
                    "no write slot (another writer of this process holds it)",
                )
                .await
                .map(|(guard, waited)| (Some(guard), waited)),
            None => Ok((None, false)),
        }
    }

    /// Locks `slot`, waiting at most the busy timeout; `waited_for` says what did not come.
    /// Also says whether the slot was taken when asked for.
    async fn lock_within(
        &self,
        slot: &Arc<tokio::sync::Mutex<()>>,
        waited_for: &str,
    ) -> Result<(OwnedMutexGuard<()>, bool), Error> {
        if let Ok(guard) = Arc::clone(slot).try_lock_owned() {
            return Ok((guard, false));
        }
        tokio::time::timeout(self.slot_timeout, Arc::clone(slot).lock_owned())
            .await
            .map(|guard| (guard, true))
            .map_err(|_| {
                Error::store(StoreErrorKind::Unavailable {
                    message: format!(
                        "the database is busy: {waited_for} within {:?}; retry",
                        self.slot_timeout
                    ),
                    cause: None,
                })
            })
    }

    /// Counts one ended batch of `members` writes.
    fn count_batch(&self, members: usize) {
        let members = members as u64;
        let c = &self.counters;
        c.batches.fetch_add(1, Ordering::Relaxed);
        c.batched_writes.fetch_add(members, Ordering::Relaxed);
        c.largest_batch.fetch_max(members, Ordering::Relaxed);
        self.company.store(members > 1, Ordering::Relaxed);
    }

    /// Counts one batch written by a single statement in autocommit.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))] // PostgreSQL batches only
    fn count_single_statement_batch(&self) {
        self.counters
            .single_statement_batches
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the slot a batch writes in: the write slot on SQLite, the batch slot elsewhere
    /// (one batch at a time; other writer transactions run beside it). Also says whether it
    /// had to wait for it.
    async fn batch_slot(&self) -> Result<(Option<OwnedMutexGuard<()>>, bool), Error> {
        if self.slot.is_some() {
            return self.slot_noting_wait().await;
        }
        self.lock_within(&self.batch_slot, "the previous group commit did not end")
            .await
            .map(|(guard, waited)| (Some(guard), waited))
    }

    /// Joins the open batch, or opens a new one (then `true`).
    fn join(&self) -> (Arc<Batch>, bool) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(batch) = open.as_ref() {
            let mut members = batch.members();
            if !members.sealed && members.joined < MAX_MEMBERS {
                members.joined += 1;
                if members.joined == MAX_MEMBERS {
                    drop(members);
                    let full = open.take().unwrap_or_else(|| unreachable!("checked above"));
                    return (full, false);
                }
                drop(members);
                return (Arc::clone(batch), false);
            }
        }
        let batch = Arc::new(Batch::new());
        *open = Some(Arc::clone(&batch));
        (batch, true)
    }

    /// Stops `batch` taking members, if it still does.
    fn close(&self, batch: &Arc<Batch>) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.as_ref().is_some_and(|b| Arc::ptr_eq(b, batch)) {
            *open = None;
        }
    }
}

/// How the shared transaction of a batch stands.
enum TxState {
    /// No member has begun it yet.
    Idle,
    /// PostgreSQL: the batch holds its slot and no member has needed a transaction yet. A
    /// member that hands over a single-statement write needs none; the first member that runs
    /// statements of its own begins it. A batch still unbegun at its end writes in one
    /// statement in autocommit.
    Unbegun(Option<OwnedMutexGuard<()>>),
    /// Open: members write into it.
    Open(WriteTx),
    /// It can take no more writes: `error` says why (members after this get it). `tx` is
    /// committed at the end when `commit` is set (the writes released into it before the break
    /// may still be saved), rolled back otherwise.
    Broken {
        tx: Option<WriteTx>,
        error: Error,
        commit: bool,
    },
    /// Committed or rolled back.
    Ended,
}

#[derive(Debug, Default)]
struct Members {
    joined: usize,
    finished: usize,
    sealed: bool,
}

/// How a batch ended, as its members learn it.
#[derive(Debug, Clone)]
enum Outcome {
    /// COMMIT succeeded.
    Committed,
    /// COMMIT failed: the writes may or may not be saved.
    Unknown(Error),
    /// Rolled back: nothing of the batch was saved.
    Abandoned(Error),
}

struct Batch {
    tx: Arc<tokio::sync::Mutex<TxState>>,
    members: Mutex<Members>,
    /// Lease events of the members' writes, inserted in one statement before the COMMIT.
    events: Mutex<Vec<EventRow>>,
    /// Single-statement writes the members handed over, written together before the COMMIT.
    sets: Mutex<Sets>,
    outcome: watch::Sender<Option<Outcome>>,
}

/// The single-statement writes of a batch ([`Member::finish_observed`]) and what became of them.
#[derive(Debug, Default)]
struct Sets {
    /// Handed over and not yet written (taken out when the batch writes them).
    writes: Vec<ObservedSet>,
    /// Per write, in the order handed over, once written: the epoch it left on its row, `None`
    /// when its row moved, or its own error.
    applied: Vec<SetResult>,
    /// The error of the statement that wrote them, when it failed.
    failed: Option<Error>,
}

impl Batch {
    fn sets(&self) -> std::sync::MutexGuard<'_, Sets> {
        self.sets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn new() -> Self {
        Self {
            tx: Arc::new(tokio::sync::Mutex::new(TxState::Idle)),
            members: Mutex::new(Members {
                joined: 1,
                ..Members::default()
            }),
            events: Mutex::new(Vec::new()),
            sets: Mutex::new(Sets::default()),
            outcome: watch::channel(None).0,
        }
    }

    fn members(&self) -> std::sync::MutexGuard<'_, Members> {
        self.members.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a member of a batch does in its turn at the batch's transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Work {
    /// Hands one single-statement write to the batch ([`Member::finish_observed`]) and runs
    /// no statement of its own.
    Set,
    /// Runs statements of its own in the batch's transaction; `multi`: possibly more than one
    /// write statement.
    Statements {
        /// Whether it may run more than one write statement.
        multi: bool,
    },
}

/// One write's membership of a batch: joined, then (with [`Member::turn`]) holding the shared
/// transaction, then finished. Dropping it at any point leaves the batch consistent: a member
/// dropped in the middle of its write dooms the batch (rolled back, nothing saved).
pub(crate) struct Member {
    store: Store,
    batch: Arc<Batch>,
    turn: Option<OwnedMutexGuard<TxState>>,
    /// Alone in its batch: the write slot it writes under, as a plain transaction.
    pub(crate) solo: Option<Option<OwnedMutexGuard<()>>>,
    /// What it does in its turn.
    work: Work,
    finished: bool,
}

impl Store {
    /// Joins the group commit of this store for one write and waits for its turn. A member
    /// with [`Member::solo`] set is alone and writes by itself in that write slot; otherwise
    /// it does its `work`: hands its write over with [`Member::finish_observed`], or writes
    /// into [`Member::tx`] and ends with [`Member::finish`].
    pub(crate) async fn join_group(&self, work: Work) -> Result<Member, Error> {
        let (batch, opened) = self.inner.group.join();
        let mut member = Member {
            store: self.clone(),
            batch,
            turn: None,
            solo: None,
            work,
            finished: false,
        };
        if work == Work::Set && !opened {
            // A write handed over to a batch someone else opened needs no turn at the
            // transaction: the batch writes it at its end. Waiting for the turn would only
            // chain one task wake-up per member before the batch can end. (The member that
            // opened the batch takes its turn: it may be the one that takes the slot.)
            return Ok(member);
        }
        let mut guard = Arc::clone(&member.batch.tx).lock_owned().await;
        if matches!(*guard, TxState::Idle) {
            // The batch's first member: take the write slot, then see whether anyone joined
            // while it waited. Alone, it writes as a plain transaction (no savepoint, no
            // shared COMMIT) and the batch takes nobody else.
            let group = &self.inner.group;
            let (slot, waited) = match group.batch_slot().await {
                Ok(taken) => taken,
                Err(error) => {
                    *guard = TxState::Broken {
                        tx: None,
                        error: error.clone(),
                        commit: false,
                    };
                    drop(guard);
                    member.leave().await;
                    return Err(error);
                }
            };
            // Writers woken together (by the COMMIT of the previous batch) are often still
            // on their way: when writes have company (the last batch had several members, or
            // this one waited for the slot), give them one turn of the scheduler to join. A
            // writer working alone does not yield: on a multi-threaded runtime a yielded task
            // wakes another worker thread, which takes it over, a thread wake-up on every write.
            if member.batch.members().joined == 1
                && (waited || group.company.load(Ordering::Relaxed))
            {
                group.counters.joining_turns.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
            let alone = {
                let mut members = member.batch.members();
                if members.joined == 1 {
                    members.sealed = true;
                }
                members.sealed
            };
            if alone {
                group.close(&member.batch);
                group.counters.solo_writes.fetch_add(1, Ordering::Relaxed);
                group.company.store(waited, Ordering::Relaxed);
                *guard = TxState::Ended;
                member.solo = Some(slot);
                return Ok(member);
            }
            // On PostgreSQL the transaction waits for a member that needs it: a batch of
            // single-statement writes needs none (see `end_batch`). SQLite's `BEGIN
            // IMMEDIATE` is what takes the database's write lock, so it comes first there.
            *guard = if self.inner.backend == sea_orm::DbBackend::Postgres {
                TxState::Unbegun(slot)
            } else {
                begun_in(self.begin_in_slot(slot).await)
            };
        }
        if matches!(work, Work::Statements { .. }) && matches!(*guard, TxState::Unbegun(_)) {
            // Idle while it begins: should this future be dropped meanwhile (the slot with
            // it), the batch is one nobody began, and the next member to need it, or the
            // batch's end, takes the slot again.
            let TxState::Unbegun(slot) = std::mem::replace(&mut *guard, TxState::Idle) else {
                unreachable!("matched above");
            };
            *guard = begun_in(self.begin_in_slot(slot).await);
        }
        let begun = match (&*guard, work) {
            (TxState::Open(_), _) | (TxState::Unbegun(_), Work::Set) => Ok(()),
            (TxState::Broken { error, .. }, _) => Err(error.clone()),
            (TxState::Unbegun(_), Work::Statements { .. }) => {
                unreachable!("a member that runs statements begins the transaction above")
            }
            (TxState::Idle | TxState::Ended, _) => Err(Error::other(
                "a group-commit batch was used after it ended (a Tether bug)",
            )),
        };
        if let Err(error) = begun {
            break_batch(&mut guard, error.clone(), true);
            drop(guard);
            member.leave().await;
            return Err(error);
        }
        member.turn = Some(guard);
        Ok(member)
    }
}

impl Store {
    /// What group commit did on this store since it was opened: writes that wrote alone,
    /// batches with the writes they carried, and the turns first members gave others to join.
    pub fn group_commit_stats(&self) -> GroupCommitStats {
        let c = &self.inner.group.counters;
        GroupCommitStats {
            solo_writes: c.solo_writes.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            batched_writes: c.batched_writes.load(Ordering::Relaxed),
            single_statement_batches: c.single_statement_batches.load(Ordering::Relaxed),
            largest_batch: c.largest_batch.load(Ordering::Relaxed),
            joining_turns: c.joining_turns.load(Ordering::Relaxed),
        }
    }

    /// Holds back every group-commit batch of this store until the returned guard is dropped
    /// (feature `test-support`): writes started meanwhile gather in one batch. On SQLite this
    /// holds the write slot, so every writer transaction of the store waits.
    #[cfg(feature = "test-support")]
    pub async fn hold_group_commit(&self) -> GroupCommitHold {
        let slot = self
            .inner
            .group
            .batch_slot()
            .await
            .unwrap_or_else(|e| panic!("hold_group_commit: {e}"))
            .0;
        GroupCommitHold(slot)
    }

    /// Runs `body` as one writer transaction's work: through group commit when the store uses
    /// it, else in a transaction of its own. What it wrote is kept when it returns
    /// `Ok((_, End::Commit))`. `multi_statement`: `body` may run more than one write statement.
    pub(crate) async fn write_in<T>(
        &self,
        multi_statement: bool,
        body: impl AsyncFnOnce(WriteScope<'_>) -> Result<(T, End), Error>,
    ) -> Result<T, Error> {
        let slot = if self.grouped() {
            let mut member = self
                .join_group(Work::Statements {
                    multi: multi_statement,
                })
                .await?;
            match member.solo.take() {
                Some(slot) => Some(slot),
                None => {
                    let result = body(WriteScope::Batch(&member)).await;
                    return member.finish(result).await;
                }
            }
        } else {
            None
        };
        let tx = match slot {
            Some(slot) => self.begin_in_slot(slot).await?,
            None => self.begin_write().await?,
        };
        let result = body(WriteScope::Own(&tx)).await;
        self.finish(tx, result).await
    }
}

/// Where the body of [`Store::write_in`] writes: a transaction of its own, or a batch's shared
/// transaction.
pub(crate) enum WriteScope<'a> {
    /// The write's own transaction.
    Own(&'a DatabaseTransaction),
    /// Its turn at a batch's transaction.
    Batch(&'a Member),
}

impl WriteScope<'_> {
    /// The transaction to write in.
    pub(crate) fn tx(&self) -> &DatabaseTransaction {
        match self {
            Self::Own(tx) => tx,
            Self::Batch(member) => member.tx(),
        }
    }
}

/// Holds back a store's group-commit batches while it lives (feature `test-support`, from
/// [`Store::hold_group_commit`]).
#[cfg(feature = "test-support")]
#[derive(Debug)]
pub struct GroupCommitHold(#[allow(dead_code)] Option<OwnedMutexGuard<()>>);

/// The state of a batch whose transaction `begun` began (or failed to).
fn begun_in(begun: Result<WriteTx, Error>) -> TxState {
    match begun {
        Ok(tx) => TxState::Open(tx),
        Err(error) => TxState::Broken {
            tx: None,
            error,
            commit: false,
        },
    }
}

/// Whether `error` may come from the database failing under a write (rather than the write's
/// own refusal, decided before it wrote anything).
fn touched_database(error: &Error) -> bool {
    match error {
        Error::Store { kind } => matches!(
            kind,
            StoreErrorKind::Unavailable { .. }
                | StoreErrorKind::Unusable { .. }
                | StoreErrorKind::Backend { .. }
                | StoreErrorKind::CommitFailed { .. }
        ),
        Error::Other { .. } => true,
        _ => false,
    }
}

/// Marks the open transaction broken: later members get `error`; `commit` says whether what
/// earlier members released into it is still committed.
fn break_batch(state: &mut TxState, error: Error, commit: bool) {
    let taken = std::mem::replace(state, TxState::Ended);
    *state = match taken {
        TxState::Open(tx) => TxState::Broken {
            tx: Some(tx),
            error,
            commit,
        },
        TxState::Broken {
            tx,
            error: first,
            commit: was,
        } => TxState::Broken {
            tx,
            error: first,
            commit: was && commit,
        },
        // Nothing was written yet: the slot goes with the batch.
        TxState::Idle | TxState::Unbegun(_) | TxState::Ended => TxState::Broken {
            tx: None,
            error,
            commit: false,
        },
    };
}

impl Member {
    /// The shared transaction (valid until [`Member::finish`]).
    pub(crate) fn tx(&self) -> &DatabaseTransaction {
        match self.turn.as_deref() {
            Some(TxState::Open(tx)) => tx,
            _ => unreachable!("a member holds an open transaction from join_group until finish"),
        }
    }

    /// Ends this write with `result` (what it wrote is kept on `Ok((_, End::Commit))`), waits for the batch's COMMIT and returns what the write may
    /// report: its own result once the batch committed; see the module documentation for a
    /// failed or abandoned batch.
    pub(crate) async fn finish<T>(mut self, result: Result<(T, End), Error>) -> Result<T, Error> {
        let wrote = matches!(result, Ok((_, End::Commit)));
        let mut guard = self
            .turn
            .take()
            .unwrap_or_else(|| unreachable!("finish is called once, on a member with its turn"));
        // A write's own refusals (admission, capacity, comparison, an invalid row) come before
        // its first write statement and leave nothing to undo. A failure of the database under
        // a write may have left it half applied, or ended the transaction (PostgreSQL aborts it
        // on any failed statement; SQLite may roll it back on a full disk or an I/O error), so
        // no later member runs in it.
        if let (TxState::Open(_), Err(error)) = (&*guard, &result)
            && touched_database(error)
        {
            // On SQLite a failed single statement undid only itself: what earlier members
            // wrote is still committed. Otherwise the batch is rolled back as a whole.
            let commit = self.store.inner.backend == sea_orm::DbBackend::Sqlite
                && self.work != (Work::Statements { multi: true });
            if !commit {
                tracing::warn!(error = %error, "a write of a group commit failed in the database; the batch is rolled back");
            }
            break_batch(&mut guard, error.clone(), commit);
        }
        drop(guard);
        let outcome = self.leave().await;
        match (outcome, result) {
            (Outcome::Committed, result) => result.map(|(value, _)| value),
            (_, Err(own)) => Err(own),
            (Outcome::Unknown(error), Ok(_)) if wrote => Err(error),
            (Outcome::Unknown(error) | Outcome::Abandoned(error), Ok(_)) => {
                Err(Error::store(StoreErrorKind::Unavailable {
                    message: format!(
                        "the group commit this call's answer was read in did not commit ({error}); nothing of this call was saved; retry"
                    ),
                    cause: None,
                }))
            }
        }
    }

    /// Ends this write by handing its single statement to the batch, which writes it with the
    /// other members' before its COMMIT (one statement per round of distinct keys), and waits
    /// for that COMMIT. Returns the epoch the write left on its row (`Some(Some(_))`) or `None`
    /// when the row had moved, once the batch committed; when the COMMIT failed, a write that
    /// applied gets [`StoreErrorKind::CommitFailed`]; when the batch was rolled back, the
    /// statement's own error if it was the one that failed, else a retryable
    /// [`StoreErrorKind::Unavailable`].
    pub(crate) async fn finish_observed(
        mut self,
        set: ObservedSet,
    ) -> Result<Option<Option<i64>>, Error> {
        let index = {
            let mut sets = self.batch.sets();
            sets.writes.push(set);
            sets.writes.len() - 1
        };
        // Nothing was written yet: the turn passes on untouched.
        drop(self.turn.take());
        let outcome = self.leave().await;
        let (own, failed) = {
            let sets = self.batch.sets();
            (sets.applied.get(index).cloned(), sets.failed.clone())
        };
        let retry = |error: Error| {
            Error::store(StoreErrorKind::Unavailable {
                message: format!(
                    "the group commit this write was to be saved in did not commit ({error}); nothing of this call was saved; retry"
                ),
                cause: None,
            })
        };
        match (outcome, own, failed) {
            (Outcome::Committed, Some(own), _) => own.map(|applied| applied.map(Some)),
            (_, Some(Err(own)), _) | (Outcome::Abandoned(_), _, Some(own)) => Err(own),
            (Outcome::Unknown(error), Some(Ok(Some(_))), _) => Err(error),
            (Outcome::Committed, None, _) => Err(retry(Error::other(
                "its write was never run (a Tether bug)",
            ))),
            (Outcome::Unknown(error) | Outcome::Abandoned(error), _, _) => Err(retry(error)),
        }
    }

    /// Counts this member finished and waits for the batch's outcome; the last member ends the
    /// batch itself (a guard reports the outcome unknown should this future be dropped in the
    /// middle of the COMMIT).
    async fn leave(&mut self) -> Outcome {
        let mut outcome = self.batch.outcome.subscribe();
        if self.mark_finished() {
            let mut pending = Pending(Some(Arc::clone(&self.batch)));
            // Boxed: ending a batch runs the database's statements, whose futures are large,
            // and only one member per batch does it; inline, every write's future would carry
            // (and copy) their size.
            let done = Box::pin(end_batch(&self.store, &self.batch)).await;
            pending.0 = None;
            self.batch.outcome.send_replace(Some(done.clone()));
            return done;
        }
        loop {
            if let Some(done) = outcome.borrow_and_update().clone() {
                return done;
            }
            if outcome.changed().await.is_err() {
                return Outcome::Abandoned(Error::other(
                    "a group-commit batch ended without an outcome (a Tether bug)",
                ));
            }
        }
    }

    /// Counts this member finished; `true` for the last one, which seals the batch and must
    /// end it.
    fn mark_finished(&mut self) -> bool {
        if std::mem::replace(&mut self.finished, true) {
            return false;
        }
        let last = {
            let mut members = self.batch.members();
            members.finished += 1;
            let last = members.finished == members.joined;
            if last {
                members.sealed = true;
            }
            last
        };
        if last {
            self.store.inner.group.close(&self.batch);
        }
        last
    }
}

/// Reports a batch's outcome unknown if the member ending it is dropped before it finished.
struct Pending(Option<Arc<Batch>>);

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(batch) = self.0.take() {
            batch
                .outcome
                .send_replace(Some(Outcome::Unknown(super::commit::commit_failed(
                    &"the group commit was interrupted while it ended",
                ))));
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(mut guard) = self.turn.take() {
            // Dropped in the middle of its write: what it wrote cannot be undone from here.
            break_batch(
                &mut guard,
                Error::store(StoreErrorKind::Unavailable {
                    message: "a write of this group commit was cancelled in the middle; the batch was rolled back and nothing of it was saved; retry".into(),
 cause: None,
}),
                false,
            );
        }
        if self.mark_finished() {
            let idle = self.batch.tx.try_lock().is_ok_and(|state| match *state {
                TxState::Ended => true,
                // Writes handed over to a batch whose opener was dropped before it took the
                // slot still need writing.
                TxState::Idle => self.batch.sets().writes.is_empty(),
                _ => false,
            });
            if idle {
                // A solo write, or a batch nobody began and nobody handed a write to: nothing
                // to end.
                self.batch.outcome.send_replace(Some(Outcome::Committed));
            } else {
                let (store, batch) = (self.store.clone(), Arc::clone(&self.batch));
                // Spawned: a destructor cannot wait for the COMMIT.
                tokio::spawn(async move {
                    let done = end_batch(&store, &batch).await;
                    batch.outcome.send_replace(Some(done));
                });
            }
        }
    }
}

/// Writes the single-statement writes handed to `batch` inside `tx` and queues the lease
/// events of those that applied; on failure records the error for those writes and returns it.
async fn write_sets(store: &Store, tx: &WriteTx, batch: &Batch) -> Result<(), Error> {
    let writes = std::mem::take(&mut batch.sets().writes);
    if writes.is_empty() {
        return Ok(());
    }
    let written = async {
        let applied = store.write_observed_sets(tx, &writes).await?;
        let mut events = Vec::new();
        for (set, applied) in writes.iter().zip(&applied) {
            if let Ok(Some(epoch)) = applied {
                events.extend(set.event_rows(*epoch)?);
            }
        }
        Ok::<_, Error>((applied, events))
    }
    .await;
    let mut sets = batch.sets();
    match written {
        Ok((applied, events)) => {
            sets.applied = applied;
            drop(sets);
            batch
                .events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(events);
            Ok(())
        }
        Err(error) => {
            sets.failed = Some(error.clone());
            Err(error)
        }
    }
}

/// Commits (or rolls back) a sealed batch; returns what its members learn.
async fn end_batch(store: &Store, batch: &Batch) -> Outcome {
    let members = batch.members().joined;
    if members > 1 {
        store.inner.group.count_batch(members);
    }
    let state = {
        let mut guard = batch.tx.lock().await;
        std::mem::replace(&mut *guard, TxState::Ended)
    };
    match state {
        TxState::Unbegun(slot) => end_unbegun(store, batch, slot).await,
        TxState::Open(tx)
        | TxState::Broken {
            tx: Some(tx),
            commit: true,
            ..
        } => end_open(store, batch, tx).await,
        TxState::Broken {
            tx: Some(tx),
            error,
            commit: false,
        } => {
            if let Err(rollback) = tx.rollback().await {
                tracing::warn!(error = %rollback, "rollback of an abandoned group commit failed");
            }
            Outcome::Abandoned(error)
        }
        TxState::Broken {
            tx: None, error, ..
        } => Outcome::Abandoned(error),
        // Nobody took the slot (the member that opened the batch was dropped before its
        // turn), but writes handed over may still wait: the batch takes the slot itself.
        TxState::Idle if !batch.sets().writes.is_empty() => {
            match store.inner.group.batch_slot().await {
                Ok((slot, _)) => end_unbegun(store, batch, slot).await,
                Err(error) => {
                    batch.sets().failed = Some(error.clone());
                    Outcome::Abandoned(error)
                }
            }
        }
        TxState::Idle | TxState::Ended => Outcome::Committed,
    }
}

/// Ends a batch no member began a transaction for (every member handed over a
/// single-statement write), in its `slot`: on PostgreSQL one statement in autocommit writes
/// them all with their lease events, and stands for the batch's COMMIT. When two writes of one
/// key need two rounds, or on SQLite, the batch begins its transaction after all and ends as a
/// begun one.
async fn end_unbegun(store: &Store, batch: &Batch, slot: Option<OwnedMutexGuard<()>>) -> Outcome {
    let writes = std::mem::take(&mut batch.sets().writes);
    if writes.is_empty() {
        return Outcome::Committed;
    }
    #[cfg(feature = "postgres")]
    if store.inner.backend == sea_orm::DbBackend::Postgres
        && super::observed::rounds(&writes).len() == 1
    {
        let written = store.write_observed_sets_alone(&writes).await;
        drop(slot);
        let mut sets = batch.sets();
        return match written {
            Ok(applied) => {
                store.inner.group.count_single_statement_batch();
                sets.applied = applied;
                Outcome::Committed
            }
            // Every write the statement carried may or may not be saved.
            Err(error)
                if matches!(
                    error,
                    Error::Store {
                        kind: StoreErrorKind::CommitFailed { .. }
                    }
                ) =>
            {
                tracing::error!(error = %error, "the statement of a group commit failed; the outcome of its writes is unknown");
                sets.applied = writes.iter().map(|_| Err(error.clone())).collect();
                Outcome::Unknown(error)
            }
            Err(error) => {
                tracing::warn!(error = %error, "the statement of a group commit failed; nothing of it was saved");
                sets.failed = Some(error.clone());
                Outcome::Abandoned(error)
            }
        };
    }
    batch.sets().writes = writes;
    match store.begin_in_slot(slot).await {
        Ok(tx) => end_open(store, batch, tx).await,
        Err(error) => {
            batch.sets().failed = Some(error.clone());
            Outcome::Abandoned(error)
        }
    }
}

/// Ends a batch with an open transaction: writes the handed-over single-statement writes and
/// the lease events, then commits (rolls back when a write fails).
async fn end_open(store: &Store, batch: &Batch, tx: WriteTx) -> Outcome {
    if let Err(error) = write_sets(store, &tx, batch).await {
        tracing::warn!(error = %error, "the batched writes of a group commit failed; the batch is rolled back");
        if let Err(rollback) = tx.rollback().await {
            tracing::warn!(error = %rollback, "rollback of a group commit failed");
        }
        return Outcome::Abandoned(error);
    }
    let events = std::mem::take(&mut *batch.events.lock().unwrap_or_else(PoisonError::into_inner));
    match store.insert_event_rows(&tx, &events).await {
        Err(error) => {
            tracing::warn!(error = %error, "the lease events of a group commit could not be written; the batch is rolled back");
            if let Err(rollback) = tx.rollback().await {
                tracing::warn!(error = %rollback, "rollback of a group commit failed");
            }
            Outcome::Abandoned(error)
        }
        Ok(()) => match store.commit(tx).await {
            Ok(()) => Outcome::Committed,
            Err(error) => Outcome::Unknown(error),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_batch_takes_no_more_members() {
        let group = GroupCommit::new(true, Duration::from_secs(1));
        let (first, opened) = group.join();
        assert!(opened);
        for _ in 1..MAX_MEMBERS {
            let (joined, opened) = group.join();
            assert!(Arc::ptr_eq(&first, &joined) && !opened);
        }
        assert_eq!(first.members().joined, MAX_MEMBERS);
        let (next, opened) = group.join();
        assert!(!Arc::ptr_eq(&first, &next), "the full batch is closed");
        assert!(opened);
    }
}
