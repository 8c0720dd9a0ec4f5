//! The binding store contract: namespaced keyed rows with compare-and-swap writes.
//!
//! A row has an opaque `value` (the harness backend's record, encoded by its
//! [`RecordCodec`](crate::RecordCodec)) and lease columns that the lifecycle owns. Every write
//! is conditional:
//!
//! - [`BindingStore::observe`] reads a row and returns an opaque [`Comparison`] binding its
//!   revision and expiry;
//! - [`BindingStore::compare_and_apply`] applies an [`Intent`] only if the row still matches;
//!   otherwise it returns [`ApplyOutcome::Conflict`] with a fresh observation and changes nothing;
//! - [`BindingStore::register_if_absent`] and [`BindingStore::delete_if`] are the conditional
//!   create and delete.
//!
//! **A failed or uncertain write is never replayed.** Only an explicit conflict proves that
//! nothing happened. Expired rows are invisible to every read at once.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::Error;
use crate::ids::Namespace;
use crate::keys::BindingKey;
use crate::lease::{Lease, LeaseEpoch, LeaseToken, Revision};
use crate::time::Timestamp;

/// The default per-value size limit: 64 KiB, so records keep bounded digests, never raw payloads
/// (see `docs/storage.md`, "Namespaces: capacity and value size").
pub const DEFAULT_MAX_VALUE_BYTES: usize = 64 * 1024;

/// What happens when a namespace is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OverflowPolicy {
    /// Refuse new rows with
    /// [`StoreErrorKind::CapacityExceeded`](crate::StoreErrorKind::CapacityExceeded); existing rows
    /// can still be updated and deleted. No store-level eviction: only the binding backend knows
    /// which rows carry nothing (see `docs/storage.md`, "Namespaces: capacity and value size").
    #[default]
    RejectNew,
}

/// Per-namespace settings, registered with the store before use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// The namespace.
    pub namespace: Namespace,
    /// Most live rows allowed, if bounded.
    pub max_entries: Option<u64>,
    /// What happens when `max_entries` would be exceeded.
    pub overflow: OverflowPolicy,
    /// Largest accepted value, in bytes.
    pub max_value_bytes: usize,
    /// TTL applied to writes that do not name one (`None` keeps rows until deleted).
    pub default_ttl: Option<Duration>,
}

impl NamespaceConfig {
    /// An unbounded namespace with the default value limit and no default TTL.
    pub fn new(namespace: Namespace) -> Self {
        Self {
            namespace,
            max_entries: None,
            overflow: OverflowPolicy::RejectNew,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            default_ttl: None,
        }
    }

    /// Bounds the namespace to `max` live rows (policy `reject-new`).
    #[must_use]
    pub fn with_max_entries(mut self, max: u64) -> Self {
        self.max_entries = Some(max);
        self
    }

    /// Sets the value size limit.
    #[must_use]
    pub fn with_max_value_bytes(mut self, limit: usize) -> Self {
        self.max_value_bytes = limit;
        self
    }
}

/// The lease part of a write: the lifecycle decides it; the store assigns the epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseWrite {
    /// The exact token. A token different from the row's current one is a new acquisition and
    /// gets a new, strictly larger [`LeaseEpoch`]; the same token keeps its epoch (renewal).
    pub token: LeaseToken,
    /// The new expiry.
    pub expires_at: Timestamp,
    /// A label of the holder for operators.
    pub holder: Option<String>,
}

/// The content of a row as written: opaque value plus optional lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowWrite {
    /// The backend's encoded record.
    pub value: Vec<u8>,
    /// The lease to hold on the row, if any.
    pub lease: Option<LeaseWrite>,
}

/// A row as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRow {
    /// The backend's encoded record.
    pub value: Vec<u8>,
    /// The lease columns, when a lease is recorded (it may be expired: check with the clock).
    pub lease: Option<Lease>,
    /// Incremented on every write.
    pub revision: Revision,
    /// When the row was (re)written with a fresh creation time.
    pub created_at: Timestamp,
    /// Row expiry (TTL); the row is invisible once `expires_at <= now`.
    pub expires_at: Option<Timestamp>,
}

impl StoredRow {
    /// The live lease at `now`, if one is held.
    pub fn live_lease(&self, now: Timestamp) -> Option<&Lease> {
        self.lease.as_ref().filter(|l| l.is_live(now))
    }

    /// The same content as a write (keeping the lease token and expiry).
    pub fn to_write(&self) -> RowWrite {
        RowWrite {
            value: self.value.clone(),
            lease: self.lease.as_ref().map(|l| LeaseWrite {
                token: l.token.clone(),
                expires_at: l.expires_at,
                holder: l.holder.clone(),
            }),
        }
    }
}

/// The opaque comparison of an observation: absent, or a row at a revision and expiry.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Comparison(Option<(Revision, Option<Timestamp>)>);

impl Comparison {
    /// The comparison of an absent row.
    pub const ABSENT: Self = Self(None);

    /// The comparison of a row at `revision` with expiry `expires_at`.
    pub fn of(revision: Revision, expires_at: Option<Timestamp>) -> Self {
        Self(Some((revision, expires_at)))
    }

    /// The comparison for `row` (or absence).
    pub fn for_row(row: Option<&StoredRow>) -> Self {
        row.map_or(Self::ABSENT, |r| Self::of(r.revision, r.expires_at))
    }

    /// Whether the comparison is of an absent row.
    pub fn is_absent(&self) -> bool {
        self.0.is_none()
    }

    /// The observed revision, if a row was present.
    pub fn revision(&self) -> Option<Revision> {
        self.0.map(|(r, _)| r)
    }

    /// The observed row expiry, if a row was present and had one.
    pub fn expires_at(&self) -> Option<Timestamp> {
        self.0.and_then(|(_, e)| e)
    }
}

impl fmt::Debug for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("Comparison(absent)"),
            Some((r, e)) => write!(f, "Comparison(rev {r}, expires {e:?})"),
        }
    }
}

/// A read of one row with the comparison that a later conditional write must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// The live row, or `None` when absent or expired.
    pub row: Option<StoredRow>,
    /// What a conditional write must still find.
    pub comparison: Comparison,
}

impl Observation {
    /// An observation of `row`.
    pub fn new(row: Option<StoredRow>) -> Self {
        let comparison = Comparison::for_row(row.as_ref());
        Self { row, comparison }
    }
}

/// What a conditional write should do when the comparison still holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Intent {
    /// Write the row. Refreshes the creation time and TTL even when the value is unchanged.
    /// `ttl: None` uses the namespace default.
    Set {
        /// The new content.
        row: RowWrite,
        /// The row TTL from now.
        ttl: Option<Duration>,
    },
    /// Leave the row as it is (an update that decided not to write).
    Keep,
    /// Delete the row.
    Delete,
    /// A deletion that decided to keep the row.
    KeepOnDelete,
}

/// The result of [`BindingStore::compare_and_apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApplyOutcome {
    /// The write happened.
    Applied {
        /// The row's new revision (`None` after a delete).
        revision: Option<Revision>,
        /// The lease epoch of the written lease, if the write holds one.
        epoch: Option<LeaseEpoch>,
    },
    /// A keep intent: the row matched and nothing was written.
    Unchanged,
    /// The row no longer matches the comparison. Nothing was written.
    Conflict {
        /// A fresh observation to re-evaluate against.
        current: Observation,
    },
}

/// The result of [`BindingStore::apply_observed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedOutcome {
    /// What happened, as [`BindingStore::compare_and_apply`] reports it.
    pub outcome: ApplyOutcome,
    /// After an applied set, the row exactly as written, when the store knows it: an
    /// observation a later conditional write may start from instead of reading the row again
    /// (it goes stale as soon as anyone else writes the row; the comparison then refuses it).
    pub written: Option<Observation>,
}

impl ObservedOutcome {
    /// `outcome` without a reported row.
    pub fn unreported(outcome: ApplyOutcome) -> Self {
        Self {
            outcome,
            written: None,
        }
    }

    /// An applied set that wrote exactly `row`: its revision and lease epoch, and the row as
    /// the next observation.
    pub fn applied_set(row: StoredRow) -> Self {
        Self {
            outcome: ApplyOutcome::Applied {
                revision: Some(row.revision),
                epoch: row.lease.as_ref().map(|l| l.epoch),
            },
            written: Some(Observation::new(Some(row))),
        }
    }
}

/// A check run at write admission, just before the write.
///
/// Returning an error aborts the write (nothing is written) and that error is returned. A store
/// may run it more than once for one write (see [`BindingStore::apply_observed`]), so it must
/// not have side effects.
pub type Admission<'a> = &'a (dyn Fn() -> Result<(), Error> + Send + Sync);

/// A predicate over a stored row, run inside the store's transaction.
pub type RowPredicate<'a> = &'a (dyn Fn(&StoredRow) -> bool + Send + Sync);

/// One lease of a batch renewal ([`BindingStore::renew_leases`]): extend the exact `token`'s
/// lease on `key` to `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRenewal {
    /// The binding key.
    pub key: BindingKey,
    /// The exact token that must hold the live lease.
    pub token: LeaseToken,
    /// The new lease expiry.
    pub expires_at: Timestamp,
}

/// The binding store: reads plus compare-and-swap writes (the contract: `docs/storage.md`).
///
/// Implementations: the in-memory and SQL stores of `tether-storage`. All methods refuse an
/// unregistered namespace with
/// [`StoreErrorKind::UnknownNamespace`](crate::StoreErrorKind::UnknownNamespace).
#[async_trait]
pub trait BindingStore: Send + Sync + fmt::Debug {
    /// Registers (or updates) a namespace's settings.
    async fn register_namespace(&self, config: NamespaceConfig) -> Result<(), Error>;

    /// Reads a live row, if any.
    async fn lookup(&self, ns: &Namespace, key: &BindingKey) -> Result<Option<StoredRow>, Error>;

    /// Reads a live row together with its comparison. No transaction stays open.
    async fn observe(&self, ns: &Namespace, key: &BindingKey) -> Result<Observation, Error> {
        self.lookup(ns, key).await.map(Observation::new)
    }

    /// Applies `intent` if the row still matches `comparison`.
    ///
    /// `admission` runs inside the write transaction after the comparison is checked and before
    /// the write (see [`Admission`]); an error from it aborts the write and is returned
    /// unchanged. Any other error
    /// means the outcome may be unknown: callers must not replay the write.
    async fn compare_and_apply(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        comparison: &Comparison,
        intent: Intent,
        admission: Admission<'_>,
    ) -> Result<ApplyOutcome, Error>;

    /// [`BindingStore::compare_and_apply`] given the whole observation the comparison came
    /// from, reporting the row as written when the store knows it.
    ///
    /// The outcome is the one `compare_and_apply(ns, key, &observed.comparison, intent,
    /// admission)` would give. A store may plan the write from the observed row and apply it with
    /// a single conditional statement (the observed revision guarantees the row is exactly the
    /// observed one); to keep the outcome the same it may run `admission` speculatively before
    /// the comparison is confirmed, and when that speculative admission fails or the row moved,
    /// it falls back to the full compare-and-apply, which confirms the comparison before it
    /// reports an admission error. The default delegates to `compare_and_apply` and reports no
    /// written row.
    async fn apply_observed(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        observed: &Observation,
        intent: Intent,
        admission: Admission<'_>,
    ) -> Result<ObservedOutcome, Error> {
        let outcome = self
            .compare_and_apply(ns, key, &observed.comparison, intent, admission)
            .await?;
        Ok(ObservedOutcome::unreported(outcome))
    }

    /// Creates the row only if no live row exists. Returns whether it was created.
    async fn register_if_absent(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        row: RowWrite,
        ttl: Option<Duration>,
    ) -> Result<bool, Error>;

    /// Deletes the live row only if `predicate` accepts it, returning the exact removed row.
    async fn delete_if(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error>;

    /// Live rows of a namespace in key order, after `after`, at most `limit`.
    async fn scan(
        &self,
        ns: &Namespace,
        after: Option<&BindingKey>,
        limit: usize,
    ) -> Result<Vec<(BindingKey, StoredRow)>, Error>;

    /// Number of live rows in a namespace.
    async fn count(&self, ns: &Namespace) -> Result<u64, Error>;

    /// Renews many leases at once (heartbeats batched into shared transactions; see
    /// `docs/lifecycle.md`, "Batched heartbeats"). For each renewal, in order: `true` when the live
    /// row held exactly that token's lease, live at `now`, and the lease now expires at
    /// `expires_at` (value, epoch, holder and row expiry kept; the revision changes, so older
    /// observations conflict); `false` when that lease is no longer there. An error leaves the
    /// outcome of the whole batch unknown.
    ///
    /// The default renews one row at a time with [`BindingStore::observe`] and
    /// [`BindingStore::compare_and_apply`] (re-deciding on conflicts); SQL stores override it
    /// with set-based statements in one transaction.
    async fn renew_leases(
        &self,
        ns: &Namespace,
        renewals: &[LeaseRenewal],
        now: Timestamp,
    ) -> Result<Vec<bool>, Error> {
        let mut renewed = Vec::with_capacity(renewals.len());
        for renewal in renewals {
            let mut observation = self.observe(ns, &renewal.key).await?;
            let done = loop {
                let Some(row) = observation.row.as_ref() else {
                    break false;
                };
                let Some(lease) = row
                    .lease
                    .as_ref()
                    .filter(|l| l.token == renewal.token && l.is_live(now))
                else {
                    break false;
                };
                let intent = Intent::Set {
                    row: RowWrite {
                        value: row.value.clone(),
                        lease: Some(LeaseWrite {
                            token: renewal.token.clone(),
                            expires_at: renewal.expires_at,
                            holder: lease.holder.clone(),
                        }),
                    },
                    ttl: row.expires_at.map(|at| at.saturating_since(now)),
                };
                match self
                    .compare_and_apply(
                        ns,
                        &renewal.key,
                        &observation.comparison,
                        intent,
                        &admit_all,
                    )
                    .await?
                {
                    ApplyOutcome::Applied { .. } => break true,
                    ApplyOutcome::Conflict { current } => observation = current,
                    _ => break false,
                }
            };
            renewed.push(done);
        }
        Ok(renewed)
    }
}

/// Admission that always passes.
pub fn admit_all() -> Result<(), Error> {
    Ok(())
}
