//! The binding-record contract on the SQL store: reads, compare-and-swap writes, the observed
//! single-statement path, leases and their events.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, QueryResult, Value};
use tether_core::{
    Admission, ApplyOutcome, BindingKey, BindingStore, Comparison, Error, ErrorTexts, Intent,
    Lease, LeaseEpoch, LeaseRenewal, LeaseToken, Namespace, NamespaceConfig, Observation,
    ObservedOutcome, Revision, RowPredicate, RowWrite, StoredRow, Timestamp,
};

use super::observed::{EPOCH_FROM_SQL, EVENT_COLUMNS, ObservedSet};
use super::placeholders::{TextCache, push_param};
use super::{End, Store, count_rows, db_error, micros, to_i64, unusable};
use crate::events::{LeaseEventKind, PendingEvent};
use crate::plan;

const ROW_COLUMNS: &str = "value, revision, lease_token, lease_epoch, lease_expires_at, \
     lease_acquired_at, lease_renewed_at, holder, created_at, expires_at";

fn opt_ts(v: Option<Timestamp>) -> Value {
    Value::from(v.map(Timestamp::as_millis))
}

fn decode_row(key: &BindingKey, row: &QueryResult) -> Result<StoredRow, Error> {
    let invalid = || ErrorTexts::default().invalid_row(key);
    let get_i64 = |col: &str| row.try_get::<i64>("", col).map_err(db_error);
    let get_opt_i64 = |col: &str| row.try_get::<Option<i64>>("", col).map_err(db_error);
    let value: Vec<u8> = row.try_get("", "value").map_err(db_error)?;
    let token: Option<String> = row.try_get("", "lease_token").map_err(db_error)?;
    let lease = match token {
        None => None,
        Some(token) => {
            let token = LeaseToken::new(token).map_err(|_| invalid())?;
            let (Some(epoch), Some(expires_at), Some(acquired_at), Some(renewed_at)) = (
                get_opt_i64("lease_epoch")?,
                get_opt_i64("lease_expires_at")?,
                get_opt_i64("lease_acquired_at")?,
                get_opt_i64("lease_renewed_at")?,
            ) else {
                return Err(invalid());
            };
            Some(Lease {
                token,
                epoch: LeaseEpoch::new(u64::try_from(epoch).map_err(|_| invalid())?),
                expires_at: Timestamp::from_millis(expires_at),
                acquired_at: Timestamp::from_millis(acquired_at),
                renewed_at: Timestamp::from_millis(renewed_at),
                holder: row.try_get("", "holder").map_err(db_error)?,
            })
        }
    };
    Ok(StoredRow {
        value,
        lease,
        revision: Revision::new(u64::try_from(get_i64("revision")?).map_err(|_| invalid())?),
        created_at: Timestamp::from_millis(get_i64("created_at")?),
        expires_at: get_opt_i64("expires_at")?.map(Timestamp::from_millis),
    })
}

/// A binding row as stored (live or expired) with the last epoch handed out on it.
#[derive(Debug, Clone)]
pub(crate) struct Physical {
    pub(crate) row: StoredRow,
    /// The largest lease epoch this row ever carried (kept after a release).
    pub(crate) epoch_floor: u64,
}

/// When a write began: the store clock's reading once the write holds its row (stored on the
/// row and its events), and the monotonic instant its operation started at (a `renewed` event
/// records the time since then as the renewal's latency).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteTime {
    pub(crate) now: Timestamp,
    pub(crate) started: Instant,
}

impl WriteTime {
    /// A write that started at `started` and reads the store clock as `now`.
    pub(crate) fn new(started: Instant, now: Timestamp) -> Self {
        Self { now, started }
    }
}

/// Revisions and epochs of one row lifetime count up from `draw << 32`.
const ROW_SPAN_BITS: u32 = 32;

/// An SQL store's lease epoch split for people: `(generation, number)`, where `generation` is the
/// row lifetime's draw from the store-wide counter (a new one each time the row is created) and
/// `number` counts the epochs handed out in that lifetime (acquisitions and operator expiries;
/// the lifetime's first epoch is number 0). The pair never repeats for a key and orders like the epoch itself; fencing still
/// compares the whole epoch.
pub fn epoch_parts(epoch: u64) -> (u64, u64) {
    (epoch >> ROW_SPAN_BITS, epoch & ((1 << ROW_SPAN_BITS) - 1))
}

/// A lease event row to insert: one row of `lease_events`.
#[derive(Debug, Clone)]
pub(crate) struct EventRow {
    namespace: String,
    key: String,
    at: Timestamp,
    event: PendingEvent,
    latency: Option<Duration>,
}

impl EventRow {
    /// The event row of `event` on `namespace`/`key` at `at`.
    pub(crate) fn new(
        namespace: String,
        key: String,
        at: Timestamp,
        event: PendingEvent,
        latency: Option<Duration>,
    ) -> Self {
        Self {
            namespace,
            key,
            at,
            event,
            latency,
        }
    }
}

impl Store {
    pub(super) fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// The physical row (live or expired), locked for update on PostgreSQL.
    pub(crate) async fn physical_row(
        &self,
        tx: &DatabaseTransaction,
        ns: &Namespace,
        key: &BindingKey,
    ) -> Result<Option<StoredRow>, Error> {
        Ok(self.physical(tx, ns, key).await?.map(|p| p.row))
    }

    /// The physical row with its epoch floor, locked for update on PostgreSQL.
    pub(crate) async fn physical(
        &self,
        tx: &DatabaseTransaction,
        ns: &Namespace,
        key: &BindingKey,
    ) -> Result<Option<Physical>, Error> {
        let lock = if self.inner.backend == DbBackend::Postgres {
            " FOR UPDATE"
        } else {
            ""
        };
        let sql = format!(
            "SELECT {ROW_COLUMNS} FROM binding_records WHERE namespace = $1 AND key = $2{lock}"
        );
        let found = tx
            .query_one_raw(self.stmt(&sql, vec![ns.as_str().into(), key.as_str().into()]))
            .await
            .map_err(db_error)?;
        found
            .map(|r| {
                let floor: Option<i64> = r.try_get("", "lease_epoch").map_err(db_error)?;
                Ok(Physical {
                    row: decode_row(key, &r)?,
                    epoch_floor: floor.and_then(|f| u64::try_from(f).ok()).unwrap_or(0),
                })
            })
            .transpose()
    }

    /// The first revision (and epoch floor) of a new row lifetime.
    async fn next_row_base(&self, tx: &DatabaseTransaction) -> Result<u64, Error> {
        let stmt = match self.inner.backend {
            DbBackend::Postgres => self.stmt("SELECT nextval('tether_row_base') AS value", vec![]),
            _ => self.stmt(
                "UPDATE tether_counters SET value = value + 1 WHERE name = 'row_base' RETURNING value",
                vec![],
            ),
        };
        let row = tx
            .query_one_raw(stmt)
            .await
            .map_err(db_error)?
            .ok_or_else(|| {
                unusable("the row counter is missing from the schema: run `tether migrate`")
            })?;
        let draw: i64 = row.try_get("", "value").map_err(db_error)?;
        u64::try_from(draw)
            .ok()
            .filter(|d| *d < (1 << (63 - ROW_SPAN_BITS)))
            .map(|d| d << ROW_SPAN_BITS)
            .ok_or_else(|| {
                unusable(format!(
                    "the row counter is exhausted or corrupted ({draw}); restore the database from a backup"
                ))
            })
    }

    /// Live rows of `ns`, counted up to `cap` (the capacity check needs no more, so its cost
    /// is bounded by the capacity, not the table).
    async fn live_count_tx(
        &self,
        tx: &DatabaseTransaction,
        ns: &Namespace,
        now: Timestamp,
        cap: u64,
    ) -> Result<u64, Error> {
        count_rows(
            tx,
            self.stmt(
                "SELECT COUNT(*) AS n FROM (SELECT 1 FROM binding_records WHERE namespace = $1 \
                 AND (expires_at IS NULL OR expires_at > $2) LIMIT $3) AS live",
                vec![
                    ns.as_str().into(),
                    now.as_millis().into(),
                    to_i64(cap).into(),
                ],
            ),
        )
        .await
    }

    pub(super) async fn insert_event(
        &self,
        tx: &DatabaseTransaction,
        ns: &Namespace,
        key: &BindingKey,
        now: Timestamp,
        event: Option<PendingEvent>,
        latency: Option<Duration>,
    ) -> Result<(), Error> {
        let Some(event) = event else { return Ok(()) };
        let row = EventRow {
            namespace: ns.as_str().to_owned(),
            key: key.as_str().to_owned(),
            at: now,
            event,
            latency,
        };
        self.insert_event_rows(tx, std::slice::from_ref(&row)).await
    }

    /// Inserts `rows` into `lease_events` inside `tx`, in order, a bounded number of rows per
    /// statement.
    pub(crate) async fn insert_event_rows(
        &self,
        tx: &DatabaseTransaction,
        rows: &[EventRow],
    ) -> Result<(), Error> {
        const COLUMNS: usize = 9;
        const CHUNK: usize = 100;
        static TEXTS: TextCache<CHUNK> = TextCache::new();
        let backend = self.inner.backend;
        for chunk in rows.chunks(CHUNK) {
            let sql = TEXTS.get(backend, chunk.len(), || {
                let mut sql = format!("INSERT INTO lease_events ({EVENT_COLUMNS}) VALUES ");
                for i in 0..chunk.len() {
                    sql.push_str(if i > 0 { ", (" } else { "(" });
                    for c in 1..=COLUMNS {
                        if c > 1 {
                            sql.push_str(", ");
                        }
                        push_param(&mut sql, backend, i * COLUMNS + c);
                    }
                    sql.push(')');
                }
                sql
            });
            let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * COLUMNS);
            for row in chunk {
                let e = &row.event;
                values.extend([
                    row.namespace.clone().into(),
                    row.key.clone().into(),
                    e.kind.as_str().into(),
                    Value::from(e.epoch.map(|x| to_i64(x.get()))),
                    Value::from(e.token_prefix.clone()),
                    Value::from(e.other_token_prefix.clone()),
                    Value::from(e.holder.clone()),
                    row.at.as_millis().into(),
                    Value::from(row.latency.map(micros)),
                ]);
            }
            tx.execute_raw(self.native_stmt(&sql, values))
                .await
                .map_err(db_error)?;
        }
        Ok(())
    }

    /// Writes `write` over `physical` (the locked physical row, live or expired) inside `tx`,
    /// returning the row as written. Returns `None` when a concurrent writer created the row
    /// first (a conflict).
    #[allow(clippy::too_many_arguments)] // one write's full context; a struct would only rename it
    pub(crate) async fn set_tx(
        &self,
        tx: &DatabaseTransaction,
        config: &NamespaceConfig,
        key: &BindingKey,
        physical: Option<&Physical>,
        write: RowWrite,
        ttl: Option<Duration>,
        at: WriteTime,
    ) -> Result<Option<StoredRow>, Error> {
        let now = at.now;
        let ns = &config.namespace;
        plan::check_write(config, &write)?;
        let live = physical
            .map(|p| &p.row)
            .filter(|r| plan::row_is_live(r, now));
        if live.is_none()
            && let Some(max) = config.max_entries
        {
            if self.inner.backend == DbBackend::Postgres {
                // Serialize creations per namespace so two writers cannot both pass the count.
                tx.execute_raw(self.stmt(
                    "SELECT pg_advisory_xact_lock(hashtext($1))",
                    vec![format!("tether-capacity:{ns}").into()],
                ))
                .await
                .map_err(db_error)?;
            }
            if self.live_count_tx(tx, ns, now, max).await? >= max {
                return Err(plan::capacity_exceeded(config, max));
            }
        }
        let needs_epoch =
            plan::needs_new_epoch(live.and_then(|r| r.lease.as_ref()), write.lease.as_ref());
        let (revision, new_epoch, floor) = match physical {
            Some(p) => {
                let current = live
                    .and_then(|r| r.lease.as_ref())
                    .map_or(0, |l| l.epoch.get());
                let floor = p.epoch_floor.max(current);
                let epoch = needs_epoch.then(|| floor.saturating_add(1));
                (p.row.revision.next(), epoch, epoch.unwrap_or(floor))
            }
            None => {
                let base = self.next_row_base(tx).await?;
                (Revision::new(base), needs_epoch.then_some(base), base)
            }
        };
        let new_epoch = new_epoch.map(LeaseEpoch::new);
        let expires_at = plan::row_expiry(config, ttl, now);
        let planned = plan::plan_set(live, write, expires_at, now, revision, new_epoch)?;
        let row = &planned.row;
        let lease = row.lease.as_ref();
        let mut values: Vec<Value> = vec![
            ns.as_str().into(),
            key.as_str().into(),
            row.value.clone().into(),
            to_i64(row.revision.get()).into(),
            Value::from(lease.map(|l| l.token.as_str().to_owned())),
            to_i64(lease.map_or(floor, |l| l.epoch.get())).into(),
            opt_ts(lease.map(|l| l.expires_at)),
            opt_ts(lease.map(|l| l.acquired_at)),
            opt_ts(lease.map(|l| l.renewed_at)),
            Value::from(lease.and_then(|l| l.holder.clone())),
            row.created_at.as_millis().into(),
            opt_ts(row.expires_at),
        ];
        let affected = match physical {
            Some(old) => {
                values.push(to_i64(old.row.revision.get()).into());
                tx.execute_raw(self.stmt(
                    "UPDATE binding_records SET value = $3, revision = $4, lease_token = $5, lease_epoch = $6, \
                     lease_expires_at = $7, lease_acquired_at = $8, lease_renewed_at = $9, holder = $10, \
                     created_at = $11, expires_at = $12 \
                     WHERE namespace = $1 AND key = $2 AND revision = $13",
                    values,
                ))
                .await
                .map_err(db_error)?
                .rows_affected()
            }
            None => tx
                .execute_raw(self.stmt(
                    "INSERT INTO binding_records (namespace, key, value, revision, lease_token, lease_epoch, \
                     lease_expires_at, lease_acquired_at, lease_renewed_at, holder, created_at, expires_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                     ON CONFLICT (namespace, key) DO NOTHING",
                    values,
                ))
                .await
                .map_err(db_error)?
                .rows_affected(),
        };
        if affected != 1 {
            return Ok(None);
        }
        for event in planned.events() {
            let latency = (event.kind == LeaseEventKind::Renewed).then(|| at.started.elapsed());
            self.insert_event(tx, ns, key, now, Some(event), latency)
                .await?;
        }
        Ok(Some(planned.row))
    }

    pub(crate) async fn delete_tx(
        &self,
        tx: &DatabaseTransaction,
        ns: &Namespace,
        key: &BindingKey,
        live: &StoredRow,
        now: Timestamp,
    ) -> Result<bool, Error> {
        let affected = tx
            .execute_raw(self.stmt(
                "DELETE FROM binding_records WHERE namespace = $1 AND key = $2 AND revision = $3",
                vec![
                    ns.as_str().into(),
                    key.as_str().into(),
                    to_i64(live.revision.get()).into(),
                ],
            ))
            .await
            .map_err(db_error)?
            .rows_affected();
        if affected == 1 {
            self.insert_event(tx, ns, key, now, plan::release_event(live), None)
                .await?;
        }
        Ok(affected == 1)
    }

    /// The body of `compare_and_apply` inside its transaction. `None` means a concurrent
    /// writer created the row first.
    #[allow(clippy::too_many_arguments)] // the compare-and-apply call plus its start instant
    async fn cas_in(
        &self,
        tx: &DatabaseTransaction,
        config: &NamespaceConfig,
        key: &BindingKey,
        comparison: &Comparison,
        intent: Intent,
        admission: Admission<'_>,
        started: Instant,
    ) -> Result<(Option<ObservedOutcome>, End), Error> {
        let ns = &config.namespace;
        let now = self.now();
        let physical = self.physical(tx, ns, key).await?;
        let live = physical
            .as_ref()
            .map(|p| p.row.clone())
            .filter(|r| plan::row_is_live(r, now));
        if Comparison::for_row(live.as_ref()) != *comparison {
            let mut end = End::Rollback;
            if let Intent::Set { row, .. } = &intent {
                let fenced = plan::fenced_event(live.as_ref(), row);
                if fenced.is_some() {
                    self.insert_event(tx, ns, key, now, fenced, None).await?;
                    end = End::Commit;
                }
            }
            let current = Observation::new(live);
            let conflict = ObservedOutcome::unreported(ApplyOutcome::Conflict { current });
            return Ok((Some(conflict), end));
        }
        admission()?;
        Ok(match intent {
            Intent::Set { row, ttl } => {
                match self
                    .set_tx(
                        tx,
                        config,
                        key,
                        physical.as_ref(),
                        row,
                        ttl,
                        WriteTime::new(started, now),
                    )
                    .await?
                {
                    Some(written) => (Some(ObservedOutcome::applied_set(written)), End::Commit),
                    None => (None, End::Rollback),
                }
            }
            Intent::Delete => {
                if let Some(row) = &live {
                    self.delete_tx(tx, ns, key, row, now).await?;
                }
                let deleted = ApplyOutcome::Applied {
                    revision: None,
                    epoch: None,
                };
                (Some(ObservedOutcome::unreported(deleted)), End::Commit)
            }
            Intent::Keep | Intent::KeepOnDelete => (
                Some(ObservedOutcome::unreported(ApplyOutcome::Unchanged)),
                End::Rollback,
            ),
            #[allow(unreachable_patterns)]
            other => {
                return Err(Error::other(format!(
                    "unsupported compare-and-apply intent {other:?}"
                )));
            }
        })
    }

    /// `compare_and_apply` in one writer transaction: lock and read the row, compare, admit,
    /// write, record the lease events.
    async fn compare_and_apply_tx(
        &self,
        config: &NamespaceConfig,
        key: &BindingKey,
        comparison: &Comparison,
        intent: Intent,
        admission: Admission<'_>,
        started: Instant,
    ) -> Result<ObservedOutcome, Error> {
        if let Intent::Set { row, .. } = &intent {
            plan::check_write(config, row)?;
        }
        let written = self
            .write_in(true, async |scope| {
                self.cas_in(
                    scope.tx(),
                    config,
                    key,
                    comparison,
                    intent,
                    admission,
                    started,
                )
                .await
            })
            .await
            .map_err(|e| super::for_key(key, e))?;
        match written {
            Some(applied) => Ok(applied),
            // A concurrent writer created the row first: nothing was written.
            None => Ok(ObservedOutcome::unreported(ApplyOutcome::Conflict {
                current: self.fresh_observation(&config.namespace, key).await?,
            })),
        }
    }

    /// The single-statement path of [`BindingStore::apply_observed`]: a set over the observed
    /// live row, planned from the observed row and written by one conditional
    /// `UPDATE … WHERE revision = <observed>`. The revision names exactly one row state
    /// (revisions never repeat, even across a delete and re-create), so the write is the one the
    /// transactional path would make.
    ///
    /// On SQLite it takes the writes that need no new lease epoch and record no lease event
    /// (above all an owner writing under its own lease). On PostgreSQL it also takes
    /// acquisitions, renewals and releases over a live row: the new epoch is counted up in SQL
    /// from the row's epoch floor and the lease events are inserted by the same statement (a
    /// data-modifying `WITH`), so each is one round trip in autocommit.
    ///
    /// Returns the written row, or `None` when the path does not apply, when the speculative
    /// admission fails, or when the row moved: the caller then runs the transactional path,
    /// which confirms the comparison, records a fence when there is one and reports the
    /// admission error only for a row that still matches.
    async fn write_observed(
        &self,
        config: &NamespaceConfig,
        key: &BindingKey,
        observed: &Observation,
        intent: &Intent,
        admission: Admission<'_>,
        started: Instant,
    ) -> Result<Option<StoredRow>, Error> {
        let (Intent::Set { row: write, ttl }, Some(current)) = (intent, observed.row.as_ref())
        else {
            return Ok(None);
        };
        let new_epoch = plan::needs_new_epoch(current.lease.as_ref(), write.lease.as_ref());
        let now = self.now();
        if !plan::row_is_live(current, now) {
            return Ok(None);
        }
        plan::check_write(config, write)?;
        let expires_at = plan::row_expiry(config, *ttl, now);
        let planned = plan::plan_set(
            Some(current),
            write.clone(),
            expires_at,
            now,
            current.revision.next(),
            new_epoch.then_some(EPOCH_FROM_SQL),
        )?;
        let events: Vec<PendingEvent> = planned.events().collect();
        if events.len() > 2 || admission().is_err() {
            return Ok(None);
        }
        let mut row = planned.row;
        let lease = row.lease.as_ref();
        let set = ObservedSet {
            namespace: config.namespace.as_str().to_owned(),
            key: key.clone(),
            columns: [
                row.value.clone().into(),
                to_i64(row.revision.get()).into(),
                Value::from(lease.map(|l| l.token.as_str().to_owned())),
                opt_ts(lease.map(|l| l.expires_at)),
                opt_ts(lease.map(|l| l.acquired_at)),
                opt_ts(lease.map(|l| l.renewed_at)),
                Value::from(lease.and_then(|l| l.holder.clone())),
                row.created_at.as_millis().into(),
                opt_ts(row.expires_at),
            ],
            expected: to_i64(current.revision.get()),
            now,
            new_epoch,
            events,
            started,
        };
        let Some(epoch) = self.write_set(set).await? else {
            return Ok(None);
        };
        if let (Some(epoch), Some(lease)) = (epoch, row.lease.as_mut())
            && new_epoch
        {
            lease.epoch = LeaseEpoch::new(
                u64::try_from(epoch).map_err(|_| ErrorTexts::default().invalid_row(key))?,
            );
        }
        Ok(Some(row))
    }

    /// Runs the single-statement write `set`: in a group-commit batch with the others of the
    /// batch (see the `observed` module), else by itself. Returns the epoch it left on the row
    /// when it applied (`Some(None)` when it did not read it back), `None` when the row moved.
    async fn write_set(&self, set: ObservedSet) -> Result<Option<Option<i64>>, Error> {
        let key = set.key.clone();
        let slot = if self.grouped() {
            let mut member = self
                .join_group(super::group::Work::Set)
                .await
                .map_err(|e| super::for_key(&key, e))?;
            match member.solo.take() {
                Some(slot) => Some(slot),
                None => {
                    return member
                        .finish_observed(set)
                        .await
                        .map_err(|e| super::for_key(&key, e));
                }
            }
        } else {
            None
        };
        let postgres = self.inner.backend == DbBackend::Postgres;
        if postgres || !set.records() {
            // One statement in autocommit (alone in its batch: in the write slot it holds).
            let (sql, values) = set.alone(self.inner.backend, false);
            let stmt = self.stmt(&sql, values);
            // Boxed, as the statement of the transaction below: the driver's futures are
            // several kilobytes, and every write through this function would otherwise carry
            // and copy them (a batched write never runs them).
            let written = if postgres {
                Box::pin(self.query_one_alone(stmt))
                    .await
                    .and_then(|found| {
                        found
                            .map(|r| r.try_get::<i64>("", "lease_epoch").map(Some))
                            .transpose()
                    })
            } else {
                Box::pin(self.execute_alone_sqlite(stmt))
                    .await
                    .map(|changed| (changed == 1).then_some(None))
            };
            drop(slot);
            return written.map_err(|e| super::for_key(&key, super::autocommit_error(e)));
        }
        // SQLite with a new epoch or events: the update reports the epoch it wrote and the
        // events follow it in the same call, in a transaction of its own.
        let tx = match slot {
            Some(slot) => self.begin_in_slot(slot).await,
            None => self.begin_write().await,
        }
        .map_err(|e| super::for_key(&key, e))?;
        let (sql, values) = set.alone(self.inner.backend, true);
        let stmt = self.stmt(&sql, values);
        let result = async {
            // Every row answered is the update's (the event insert answers none).
            let found = Box::pin(tx.query_all_raw(stmt)).await.map_err(db_error)?;
            let Some(epoch) = found
                .first()
                .map(|r| r.try_get::<i64>("", "lease_epoch").map_err(db_error))
                .transpose()?
            else {
                return Ok((None, End::Rollback));
            };
            Ok((Some(Some(epoch)), End::Commit))
        }
        .await;
        self.finish(tx, result)
            .await
            .map_err(|e| super::for_key(&key, e))
    }

    async fn fresh_observation(
        &self,
        ns: &Namespace,
        key: &BindingKey,
    ) -> Result<Observation, Error> {
        self.lookup(ns, key).await.map(Observation::new)
    }
}

#[async_trait]
impl BindingStore for Store {
    async fn register_namespace(&self, config: NamespaceConfig) -> Result<(), Error> {
        self.inner
            .namespaces
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(config.namespace.clone(), config);
        Ok(())
    }

    async fn lookup(&self, ns: &Namespace, key: &BindingKey) -> Result<Option<StoredRow>, Error> {
        self.config(ns)?;
        let now = self.now();
        let sql = format!(
            "SELECT {ROW_COLUMNS} FROM binding_records WHERE namespace = $1 AND key = $2 \
             AND (expires_at IS NULL OR expires_at > $3)"
        );
        let found = self
            .query_one_alone(self.stmt(
                &sql,
                vec![
                    ns.as_str().into(),
                    key.as_str().into(),
                    now.as_millis().into(),
                ],
            ))
            .await
            .map_err(db_error)?;
        found.map(|r| decode_row(key, &r)).transpose()
    }

    #[tracing::instrument(level = "debug", skip(self, intent, admission), fields(store = "sql"))]
    async fn compare_and_apply(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        comparison: &Comparison,
        intent: Intent,
        admission: Admission<'_>,
    ) -> Result<ApplyOutcome, Error> {
        let config = self.config(ns)?;
        self.compare_and_apply_tx(&config, key, comparison, intent, admission, Instant::now())
            .await
            .map(|applied| applied.outcome)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(store = "sql", key = %key))]
    async fn apply_observed(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        observed: &Observation,
        intent: Intent,
        admission: Admission<'_>,
    ) -> Result<ObservedOutcome, Error> {
        let started = Instant::now();
        let config = self.config(ns)?;
        if let Some(written) = self
            .write_observed(&config, key, observed, &intent, admission, started)
            .await?
        {
            return Ok(ObservedOutcome::applied_set(written));
        }
        self.compare_and_apply_tx(
            &config,
            key,
            &observed.comparison,
            intent,
            admission,
            started,
        )
        .await
    }

    async fn register_if_absent(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        row: RowWrite,
        ttl: Option<Duration>,
    ) -> Result<bool, Error> {
        let started = Instant::now();
        let config = self.config(ns)?;
        plan::check_write(&config, &row)?;
        self.write_in(true, async |scope| {
            let tx = scope.tx();
            let now = self.now();
            let physical = self.physical(tx, ns, key).await?;
            if physical
                .as_ref()
                .is_some_and(|p| plan::row_is_live(&p.row, now))
            {
                return Ok((false, End::Rollback));
            }
            Ok(
                match self
                    .set_tx(
                        tx,
                        &config,
                        key,
                        physical.as_ref(),
                        row,
                        ttl,
                        WriteTime::new(started, now),
                    )
                    .await?
                {
                    Some(_) => (true, End::Commit),
                    None => (false, End::Rollback),
                },
            )
        })
        .await
        .map_err(|e| super::for_key(key, e))
    }

    async fn delete_if(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        predicate: RowPredicate<'_>,
    ) -> Result<Option<StoredRow>, Error> {
        self.config(ns)?;
        self.write_in(true, async |scope| {
            let tx = scope.tx();
            let now = self.now();
            let live = self
                .physical_row(tx, ns, key)
                .await?
                .filter(|r| plan::row_is_live(r, now));
            Ok(match live {
                Some(row) if predicate(&row) => {
                    if self.delete_tx(tx, ns, key, &row, now).await? {
                        (Some(row), End::Commit)
                    } else {
                        (None, End::Rollback)
                    }
                }
                _ => (None, End::Rollback),
            })
        })
        .await
        .map_err(|e| super::for_key(key, e))
    }

    async fn scan(
        &self,
        ns: &Namespace,
        after: Option<&BindingKey>,
        limit: usize,
    ) -> Result<Vec<(BindingKey, StoredRow)>, Error> {
        self.config(ns)?;
        let now = self.now();
        let sql = format!(
            "SELECT key, {ROW_COLUMNS} FROM binding_records WHERE namespace = $1 \
             AND (expires_at IS NULL OR expires_at > $2) AND key > $3 ORDER BY key LIMIT $4"
        );
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                &sql,
                vec![
                    ns.as_str().into(),
                    now.as_millis().into(),
                    after.map_or("", BindingKey::as_str).into(),
                    to_i64(limit as u64).into(),
                ],
            ))
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|r| {
                let raw: String = r.try_get("", "key").map_err(db_error)?;
                let key = BindingKey::parse(&raw)?;
                let row = decode_row(&key, r)?;
                Ok((key, row))
            })
            .collect()
    }

    async fn renew_leases(
        &self,
        ns: &Namespace,
        renewals: &[LeaseRenewal],
        now: Timestamp,
    ) -> Result<Vec<bool>, Error> {
        self.renew_leases_batched(ns, renewals, now).await
    }

    async fn count(&self, ns: &Namespace) -> Result<u64, Error> {
        self.config(ns)?;
        let now = self.now();
        count_rows(
            &self.inner.db,
            self.stmt(
                "SELECT COUNT(*) AS n FROM binding_records WHERE namespace = $1 AND (expires_at IS NULL OR expires_at > $2)",
                vec![ns.as_str().into(), now.as_millis().into()],
            ),
        )
        .await
    }
}

#[cfg(test)]
mod epoch_parts_tests {
    use super::epoch_parts;

    #[test]
    fn epoch_parts_split_the_packed_epoch_and_keep_its_order() {
        assert_eq!(epoch_parts(12_884_901_891), (3, 3));
        assert_eq!(epoch_parts((7 << 32) | 1), (7, 1));
        let a = epoch_parts((3 << 32) | 9);
        let b = epoch_parts(4 << 32 | 1);
        assert!(
            a < b,
            "a later lifetime orders after every epoch of an earlier one"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tether_core::{BindingId, FakeClock, LeaseToken, LeaseWrite, admit_all};

    use super::*;
    use crate::StoreOptions;
    use crate::admin::StoreAdmin as _;
    use crate::events::LeaseEventQuery;

    fn write(value: &str, token: &str, expires_at: i64) -> RowWrite {
        RowWrite {
            value: value.as_bytes().to_vec(),
            lease: Some(LeaseWrite {
                token: LeaseToken::new(token).unwrap(),
                expires_at: Timestamp::from_millis(expires_at),
                holder: Some("h".into()),
            }),
        }
    }

    fn set(row: RowWrite) -> Intent {
        Intent::Set { row, ttl: None }
    }

    /// The observed-write path takes the writes over the observed live row — an owner's write
    /// under its own lease, a renewal, a release, an acquisition — and leaves a first
    /// acquisition (no row), refused admissions and moved rows to the transactional path.
    #[tokio::test]
    async fn the_observed_write_path_takes_writes_over_the_observed_live_row() {
        let clock = Arc::new(FakeClock::new(Timestamp::from_millis(1_000)));
        let store = Store::open_with(StoreOptions::new("sqlite::memory:").clock(clock.clone()))
            .await
            .unwrap();
        let ns = Namespace::new("observed").unwrap();
        let config = NamespaceConfig::new(ns.clone());
        store.register_namespace(config.clone()).await.unwrap();
        let key = BindingKey::conversation(&BindingId::new("b-1").unwrap());

        let empty = store.observe(&ns, &key).await.unwrap();
        let fast = |observed: Observation, intent: Intent| {
            let (store, config, key) = (&store, &config, &key);
            async move {
                store
                    .write_observed(config, key, &observed, &intent, &admit_all, Instant::now())
                    .await
                    .unwrap()
            }
        };
        // An acquisition needs a new epoch: not taken.
        assert!(
            fast(empty.clone(), set(write("a", "tok", 60_000)))
                .await
                .is_none()
        );
        let acquired = store
            .apply_observed(
                &ns,
                &key,
                &empty,
                set(write("a", "tok", 60_000)),
                &admit_all,
            )
            .await
            .unwrap();
        let observed = acquired.written.expect("the written row is reported");

        // The owner's write under its lease, same expiry: one statement, the exact row.
        clock.advance(Duration::from_millis(10));
        let written = fast(observed.clone(), set(write("b", "tok", 60_000)))
            .await
            .expect("taken by the single-statement path");
        assert_eq!(
            Some(&written),
            store.lookup(&ns, &key).await.unwrap().as_ref()
        );
        assert_eq!(
            written.revision,
            observed.comparison.revision().unwrap().next()
        );

        // The observation is now stale: the statement matches no row.
        assert!(
            fast(observed.clone(), set(write("c", "tok", 60_000)))
                .await
                .is_none()
        );
        // A refusing admission is never reported from here.
        let current = Observation::new(Some(written));
        let refuse = || Err(Error::revoked("no"));
        let refused = store
            .write_observed(
                &config,
                &key,
                &current,
                &set(write("c", "tok", 60_000)),
                &refuse,
                Instant::now(),
            )
            .await
            .unwrap();
        assert!(refused.is_none());
        assert_eq!(
            store.observe(&ns, &key).await.unwrap(),
            current,
            "nothing was written by the refused or stale attempts"
        );

        // A renewal, a release and a new holder's acquisition over the observed live row are
        // taken too, with their lease events, and write what the transactional path writes.
        let all = LeaseEventQuery::all(100);
        let events_before = store.lease_events(&all).await.unwrap().len();
        let renewed = fast(current.clone(), set(write("c", "tok", 90_000)))
            .await
            .expect("a renewal is one conditional update plus its event");
        assert_eq!(
            renewed.lease.as_ref().unwrap().expires_at.as_millis(),
            90_000
        );
        let epoch = renewed.lease.as_ref().unwrap().epoch;
        let release = RowWrite {
            value: b"c".to_vec(),
            lease: None,
        };
        let released = fast(Observation::new(Some(renewed)), set(release))
            .await
            .expect("a release is taken");
        assert!(released.lease.is_none());
        let taken = fast(
            Observation::new(Some(released)),
            set(write("d", "other", 60_000)),
        )
        .await
        .expect("an acquisition over a live row is taken");
        let lease = taken.lease.as_ref().unwrap();
        assert_eq!(
            lease.epoch.get(),
            epoch.get() + 1,
            "the epoch counts up from the floor"
        );
        assert_eq!(
            Some(&taken),
            store.lookup(&ns, &key).await.unwrap().as_ref()
        );
        let events = store.lease_events(&all).await.unwrap();
        let kinds: Vec<_> = events[events_before..].iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            vec![
                LeaseEventKind::Renewed,
                LeaseEventKind::Released,
                LeaseEventKind::Acquired
            ]
        );
        assert_eq!(events.last().unwrap().epoch, Some(lease.epoch));
    }

    /// The size of a future is what every call copies as it is created and moved into its
    /// caller's: a write's future must not carry the futures of ending a batch or of the
    /// driver's statements (kilobytes each), which run boxed. Measured before they were boxed:
    /// `join_group` 6.7 KB and `write_observed` 8.5 KB in a debug build (18.9 and 20.7 KB in
    /// release).
    #[tokio::test]
    async fn a_write_future_does_not_carry_the_statements_it_may_run() {
        fn size<F: std::future::Future>(_: &F) -> usize {
            std::mem::size_of::<F>()
        }
        let store = Store::open_with(StoreOptions::new("sqlite::memory:"))
            .await
            .unwrap();
        let ns = Namespace::new("sizes").unwrap();
        let config = NamespaceConfig::new(ns.clone());
        store.register_namespace(config.clone()).await.unwrap();
        let key = BindingKey::conversation(&BindingId::new("b-1").unwrap());
        let observed = store.observe(&ns, &key).await.unwrap();
        let joining = size(&store.join_group(super::super::group::Work::Set));
        assert!(joining <= 1024, "join_group's future is {joining} bytes");
        let intent = Intent::Delete;
        let writing = size(&store.write_observed(
            &config,
            &key,
            &observed,
            &intent,
            &admit_all,
            Instant::now(),
        ));
        assert!(
            writing <= 4096,
            "write_observed's future is {writing} bytes"
        );
    }
}
