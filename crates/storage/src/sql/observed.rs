//! The single-statement write over an observed live row, alone or with the others of a
//! group-commit batch in one statement.
//!
//! [`Store::write_observed`](super::Store) plans a write from the row an owner observed and
//! writes it with one conditional `UPDATE … WHERE revision = <observed>`. Alone, that is one
//! statement in autocommit (on PostgreSQL together with its lease events, a data-modifying
//! `WITH`); on SQLite a write with lease events sends the update and the event insert in one
//! call inside a transaction of its own. In a batch, the members do not take turns running
//! their statements: each hands its [`ObservedSet`] to the batch, and the batch writes all of
//! them with one `UPDATE … FROM (VALUES …)` before its COMMIT, each row still guarded by its
//! own expected revision and liveness, and the lease events of the rows that applied go into
//! the batch's one event insert. Two writes of one key in a batch never share a statement: the
//! later one runs in a later round and sees the earlier one's result, as it would have in turn.
//! On PostgreSQL a batch of such writes alone, on distinct keys, is one statement in autocommit
//! (`Store::write_observed_sets_alone`): the update in a data-modifying `WITH` and the insert
//! of the events of the rows it wrote.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Instant;

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, QueryResult, Value};
use tether_core::{BindingKey, Error, ErrorTexts, LeaseEpoch, Timestamp};

use super::binding::EventRow;
use super::group::MAX_MEMBERS;
use super::placeholders::{TextCache, push_param};
use super::{Store, db_error, micros, to_i64};
use crate::events::{LeaseEventKind, PendingEvent};

/// The placeholder of a lease epoch that the single-statement path counts up in SQL.
pub(crate) const EPOCH_FROM_SQL: LeaseEpoch = LeaseEpoch::new(u64::MAX);

/// The columns an observed write sets, in the order of [`ObservedSet::columns`].
const SET_COLUMNS: [&str; 9] = [
    "value",
    "revision",
    "lease_token",
    "lease_expires_at",
    "lease_acquired_at",
    "lease_renewed_at",
    "holder",
    "created_at",
    "expires_at",
];

/// The columns of a lease event row, as the statements here insert them.
pub(crate) const EVENT_COLUMNS: &str =
    "namespace, key, kind, epoch, token_prefix, other_token_prefix, holder, at, latency_us";

/// PostgreSQL types of one `VALUES` row of the batch statement: the key, the set columns, the
/// expected revision, the writer's clock reading and whether a new epoch is counted up.
const PG_ROW_TYPES: [&str; 14] = [
    "text", "text", "bytea", "bigint", "text", "bigint", "bigint", "bigint", "text", "bigint",
    "bigint", "bigint", "bigint", "boolean",
];

/// One planned single-statement write: the row's new columns, guarded by the revision the
/// write was planned from and by the row being live at `now`.
#[derive(Debug)]
pub(crate) struct ObservedSet {
    pub(crate) namespace: String,
    pub(crate) key: BindingKey,
    /// The new values of [`SET_COLUMNS`], in that order.
    pub(crate) columns: [Value; 9],
    /// The revision the write was planned from.
    pub(crate) expected: i64,
    /// The store clock when the write was planned.
    pub(crate) now: Timestamp,
    /// Whether the write counts a new lease epoch up from the row's epoch floor.
    pub(crate) new_epoch: bool,
    /// Lease events of the write (at most two); an epoch of [`EPOCH_FROM_SQL`] is the epoch
    /// the statement counts up.
    pub(crate) events: Vec<PendingEvent>,
    /// When the write's operation started (a `renewed` event records its latency).
    pub(crate) started: Instant,
}

impl ObservedSet {
    /// Whether the write needs more than the row update: a new epoch read back, or events.
    pub(crate) fn records(&self) -> bool {
        self.new_epoch || !self.events.is_empty()
    }

    /// The `UPDATE` of this write alone, with its parameters: `$1` namespace, `$2` key, the set
    /// columns `$3..=$11`, `$12` expected revision, `$13` now.
    fn update(&self) -> (String, Vec<Value>) {
        let mut values: Vec<Value> = Vec::with_capacity(13);
        values.push(self.namespace.as_str().into());
        values.push(self.key.as_str().into());
        values.extend(self.columns.iter().cloned());
        values.push(self.expected.into());
        values.push(self.now.as_millis().into());
        // Without a new epoch `lease_epoch` stays: it already holds the lease's epoch, or the
        // epoch floor of a row without a lease. With one, it counts up from that floor.
        let epoch = if self.new_epoch {
            "lease_epoch = COALESCE(lease_epoch, 0) + 1, "
        } else {
            ""
        };
        let sql = format!(
            "UPDATE binding_records SET value = $3, revision = $4, lease_token = $5, {epoch}\
             lease_expires_at = $6, lease_acquired_at = $7, lease_renewed_at = $8, holder = $9, \
             created_at = $10, expires_at = $11 \
             WHERE namespace = $1 AND key = $2 AND revision = $12 \
             AND (expires_at IS NULL OR expires_at > $13)"
        );
        (sql, values)
    }

    /// The statement of this write alone, one round trip. On PostgreSQL it inserts the lease
    /// events too (a data-modifying `WITH`) and answers the row's `lease_epoch` when it
    /// applied. On SQLite it is the bare `UPDATE` when not `returning` (for a write without
    /// events); when `returning`, the `UPDATE … RETURNING lease_epoch` followed (when the
    /// write has events) by a second statement in the same call that inserts them only if that
    /// `UPDATE` changed the row (`changes()`: the rows changed by the last completed write
    /// statement of the connection), to run inside a transaction of its own so that both land
    /// or neither.
    pub(crate) fn alone(&self, backend: DbBackend, returning: bool) -> (String, Vec<Value>) {
        let (update, mut values) = self.update();
        let postgres = backend == DbBackend::Postgres;
        let mut sql = if postgres {
            format!("WITH w AS ({update} RETURNING lease_epoch)")
        } else if returning {
            format!("{update} RETURNING lease_epoch")
        } else {
            return (update, values);
        };
        if !postgres && !self.events.is_empty() {
            sql.push_str(&format!("; INSERT INTO lease_events ({EVENT_COLUMNS}) "));
        }
        for (i, event) in self.events.iter().enumerate() {
            let mut param = |value: Value| {
                values.push(value);
                format!("${}", values.len())
            };
            let epoch = if event.epoch == Some(EPOCH_FROM_SQL) {
                "lease_epoch".to_owned()
            } else {
                param(Value::from(event.epoch.map(|e| to_i64(e.get()))))
            };
            let latency =
                (event.kind == LeaseEventKind::Renewed).then(|| micros(self.started.elapsed()));
            let kind = param(event.kind.as_str().into());
            let token = param(Value::from(event.token_prefix.clone()));
            let other = param(Value::from(event.other_token_prefix.clone()));
            let holder = param(Value::from(event.holder.clone()));
            let latency = param(Value::from(latency));
            let select = format!(
                "SELECT $1, $2, {kind}, {epoch}, {token}, {other}, {holder}, $13, {latency}"
            );
            if postgres {
                sql.push_str(&format!(
                    ", e{i} AS (INSERT INTO lease_events ({EVENT_COLUMNS}) {select} FROM w)"
                ));
            } else {
                if i > 0 {
                    sql.push_str(" UNION ALL ");
                }
                sql.push_str(&format!(
                    "{select} FROM binding_records \
                     WHERE namespace = $1 AND key = $2 AND changes() = 1"
                ));
            }
        }
        if postgres {
            sql.push_str(" SELECT lease_epoch FROM w");
        }
        (sql, values)
    }

    /// The lease event rows of this write, which applied and left `epoch` on the row.
    pub(crate) fn event_rows(&self, epoch: i64) -> Result<Vec<EventRow>, Error> {
        let epoch = LeaseEpoch::new(
            u64::try_from(epoch).map_err(|_| ErrorTexts::default().invalid_row(&self.key))?,
        );
        Ok(self
            .events
            .iter()
            .cloned()
            .map(|mut event| {
                if event.epoch == Some(EPOCH_FROM_SQL) {
                    event.epoch = Some(epoch);
                }
                let latency =
                    (event.kind == LeaseEventKind::Renewed).then(|| self.started.elapsed());
                EventRow::new(
                    self.namespace.clone(),
                    self.key.as_str().to_owned(),
                    self.now,
                    event,
                    latency,
                )
            })
            .collect())
    }
}

/// The statement writing `n` observed sets at once: one `VALUES` row per write (the
/// parameters of [`batch_values`], in the backend's own placeholders); it answers the key and
/// `lease_epoch` of every row it wrote. Made once per backend and size (a batch takes at most
/// [`MAX_MEMBERS`] writes).
fn batch_sql(backend: DbBackend, n: usize) -> Cow<'static, str> {
    static TEXTS: TextCache<MAX_MEMBERS> = TextCache::new();
    TEXTS.get(backend, n, || make_batch_sql(backend, n))
}

/// [`batch_sql`], made.
fn make_batch_sql(backend: DbBackend, n: usize) -> String {
    let width = PG_ROW_TYPES.len();
    let mut rows = String::with_capacity(n * width * 8);
    for r in 0..n {
        if r > 0 {
            rows.push_str(", ");
        }
        rows.push('(');
        for (c, ty) in PG_ROW_TYPES.iter().enumerate() {
            if c > 0 {
                rows.push_str(", ");
            }
            push_param(&mut rows, backend, r * width + c + 1);
            if backend == DbBackend::Postgres && r == 0 {
                rows.push_str("::");
                rows.push_str(ty);
            }
        }
        rows.push(')');
    }
    // The `VALUES` columns: the key, the set columns under their own names, then the guard.
    let names: Vec<&str> = ["namespace", "key"]
        .into_iter()
        .chain(SET_COLUMNS)
        .chain(["expected", "now", "new_epoch"])
        .collect();
    let set = SET_COLUMNS
        .iter()
        .map(|column| format!("{column} = v.{column}"))
        .collect::<Vec<_>>()
        .join(", ");
    let from = if backend == DbBackend::Postgres {
        format!("(VALUES {rows}) AS v({})", names.join(", "))
    } else {
        // SQLite names the columns of a VALUES list column1, column2, …
        let renamed = names
            .iter()
            .enumerate()
            .map(|(i, name)| format!("column{} AS {name}", i + 1))
            .collect::<Vec<_>>()
            .join(", ");
        format!("(SELECT {renamed} FROM (VALUES {rows})) AS v")
    };
    // SQLite's RETURNING names the updated table's columns bare (no alias); PostgreSQL's
    // needs the alias, the `VALUES` list having columns of the same names.
    let returning = if backend == DbBackend::Postgres {
        "b.namespace, b.key, b.lease_epoch"
    } else {
        "namespace, key, lease_epoch"
    };
    format!(
        "UPDATE binding_records AS b SET {set}, \
         lease_epoch = CASE WHEN v.new_epoch THEN COALESCE(b.lease_epoch, 0) + 1 ELSE b.lease_epoch END \
         FROM {from} \
         WHERE b.namespace = v.namespace AND b.key = v.key AND b.revision = v.expected \
         AND (b.expires_at IS NULL OR b.expires_at > v.now) \
         RETURNING {returning}"
    )
}

/// PostgreSQL types of one `VALUES` row of the lease events in [`batch_alone`]: the key, the
/// event's columns as `lease_events` stores them (its epoch `NULL` when the epoch is the one
/// the update counts up), whether it takes that epoch, and its place in the insert order.
#[cfg(feature = "postgres")]
const PG_EVENT_TYPES: [&str; 11] = [
    "text", "text", "text", "bigint", "boolean", "text", "text", "text", "bigint", "bigint",
    "bigint",
];

/// The statement writing `sets` (of distinct keys) together with their lease events, to run
/// in autocommit on PostgreSQL: [`batch_sql`] in a data-modifying `WITH`, and one insert of
/// the events joined to the rows it answered, so that a write's events go in exactly when it
/// applied, with the epoch it left on the row, in the order the writes handed them over. It
/// answers what [`batch_sql`] answers.
#[cfg(feature = "postgres")]
fn batch_alone(sets: &[&ObservedSet]) -> (String, Vec<Value>) {
    let mut values = batch_values(sets);
    let mut sql = format!("WITH w AS ({})", batch_sql(DbBackend::Postgres, sets.len()));
    let mut rows = String::new();
    let mut ord: i64 = 0;
    for set in sets {
        for event in &set.events {
            let from_sql = event.epoch == Some(EPOCH_FROM_SQL);
            let epoch = event
                .epoch
                .filter(|_| !from_sql)
                .map(|epoch| to_i64(epoch.get()));
            let latency =
                (event.kind == LeaseEventKind::Renewed).then(|| micros(set.started.elapsed()));
            let columns: [Value; 11] = [
                set.namespace.as_str().into(),
                set.key.as_str().into(),
                event.kind.as_str().into(),
                Value::from(epoch),
                from_sql.into(),
                Value::from(event.token_prefix.clone()),
                Value::from(event.other_token_prefix.clone()),
                Value::from(event.holder.clone()),
                set.now.as_millis().into(),
                Value::from(latency),
                ord.into(),
            ];
            rows.push_str(if ord == 0 { "(" } else { ", (" });
            for (c, (value, ty)) in columns.into_iter().zip(PG_EVENT_TYPES).enumerate() {
                values.push(value);
                if c > 0 {
                    rows.push_str(", ");
                }
                push_param(&mut rows, DbBackend::Postgres, values.len());
                // The first row types the `VALUES` list's columns.
                if ord == 0 {
                    rows.push_str("::");
                    rows.push_str(ty);
                }
            }
            rows.push(')');
            ord += 1;
        }
    }
    if ord > 0 {
        sql.push_str(&format!(
            ", e AS (INSERT INTO lease_events ({EVENT_COLUMNS}) \
             SELECT x.namespace, x.key, x.kind, \
             CASE WHEN x.from_sql THEN w.lease_epoch ELSE x.epoch END, \
             x.token_prefix, x.other_token_prefix, x.holder, x.at, x.latency_us \
             FROM (VALUES {rows}) AS x(namespace, key, kind, epoch, from_sql, token_prefix, \
             other_token_prefix, holder, at, latency_us, ord) \
             JOIN w ON w.namespace = x.namespace AND w.key = x.key ORDER BY x.ord)"
        ));
    }
    sql.push_str(" SELECT namespace, key, lease_epoch FROM w");
    (sql, values)
}

/// The parameters of [`batch_sql`] for `sets`.
fn batch_values(sets: &[&ObservedSet]) -> Vec<Value> {
    let mut values = Vec::with_capacity(sets.len() * PG_ROW_TYPES.len());
    for set in sets {
        values.push(set.namespace.as_str().into());
        values.push(set.key.as_str().into());
        values.extend(set.columns.iter().cloned());
        values.push(set.expected.into());
        values.push(set.now.as_millis().into());
        values.push(set.new_epoch.into());
    }
    values
}

/// Splits `sets` into rounds in which every key occurs once, keeping the order of the writes
/// of one key: the n-th write of a key runs in round n.
pub(crate) fn rounds(sets: &[ObservedSet]) -> Vec<Vec<usize>> {
    let mut seen: HashMap<(&str, &str), usize> = HashMap::with_capacity(sets.len());
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    for (i, set) in sets.iter().enumerate() {
        let n = seen
            .entry((set.namespace.as_str(), set.key.as_str()))
            .or_insert(0);
        if rounds.len() <= *n {
            rounds.push(Vec::new());
        }
        rounds[*n].push(i);
        *n += 1;
    }
    rounds
}

/// Records in `results` the epoch each write of `round` (indexes into `sets`) left on its
/// row, from the rows the statement that wrote them answered; a write whose row it did not
/// answer keeps `Ok(None)` (its row had moved).
fn record_answers(
    sets: &[ObservedSet],
    round: &[usize],
    written: Vec<QueryResult>,
    results: &mut [SetResult],
) -> Result<(), Error> {
    let mut answered = vec![false; round.len()];
    for row in written {
        let namespace: String = row.try_get("", "namespace").map_err(db_error)?;
        let key: String = row.try_get("", "key").map_err(db_error)?;
        let epoch: Option<i64> = row.try_get("", "lease_epoch").map_err(db_error)?;
        let found = round
            .iter()
            .position(|&i| sets[i].namespace == namespace && sets[i].key.as_str() == key);
        let Some(at) = found.filter(|&at| !std::mem::replace(&mut answered[at], true)) else {
            return Err(Error::other(format!(
                "a batched write answered for a row it did not write ({key}; a Tether bug)"
            )));
        };
        // A row that never held a lease keeps a NULL epoch; nothing reads it then.
        results[round[at]] = Ok(Some(epoch.unwrap_or(0)));
    }
    Ok(())
}

/// What became of one write of [`Store::write_observed_sets`]: the epoch it left on its row
/// when it applied, `None` when its row had moved, or its own error.
pub(crate) type SetResult = Result<Option<i64>, Error>;

impl Store {
    /// Writes `sets` inside `tx`, one statement per round of distinct keys, and says per write
    /// what became of it. An `Err` is a failure of the batch as a whole: the transaction must
    /// not commit (PostgreSQL aborted it with the failed statement). On SQLite a failed
    /// statement undid only itself, so the writes of its round are retried one by one there:
    /// a write the database refuses fails alone and its neighbours are still written.
    pub(crate) async fn write_observed_sets(
        &self,
        tx: &DatabaseTransaction,
        sets: &[ObservedSet],
    ) -> Result<Vec<SetResult>, Error> {
        let mut results: Vec<SetResult> = (0..sets.len()).map(|_| Ok(None)).collect();
        let backend = self.inner.backend;
        for round in rounds(sets) {
            let members: Vec<&ObservedSet> = round.iter().map(|&i| &sets[i]).collect();
            let stmt = self.native_stmt(&batch_sql(backend, members.len()), batch_values(&members));
            let written = match tx.query_all_raw(stmt).await {
                Ok(written) => written,
                Err(error) if backend == DbBackend::Sqlite && round.len() > 1 => {
                    tracing::debug!(error = %error, writes = round.len(), "a batched statement failed; its writes run one by one");
                    for &i in &round {
                        results[i] = self.write_one_set(tx, &sets[i]).await;
                    }
                    continue;
                }
                Err(error) => return Err(db_error(error)),
            };
            record_answers(sets, &round, written, &mut results)?;
        }
        Ok(results)
    }

    /// Writes `sets`, of distinct keys, and their lease events with one statement in
    /// autocommit ([`batch_alone`]), and says per write what became of it. The statement
    /// stands for the COMMIT of a batch that needed no transaction: an `Err` is
    /// [`StoreErrorKind::CommitFailed`] when the statement's outcome is unknown (see
    /// [`super::autocommit_error`]), else a refusal after which nothing of it was saved.
    ///
    /// [`StoreErrorKind::CommitFailed`]: tether_core::StoreErrorKind::CommitFailed
    #[cfg(feature = "postgres")]
    pub(crate) async fn write_observed_sets_alone(
        &self,
        sets: &[ObservedSet],
    ) -> Result<Vec<SetResult>, Error> {
        let members: Vec<&ObservedSet> = sets.iter().collect();
        let (sql, values) = batch_alone(&members);
        let stmt = self.stmt(&sql, values);
        let written = self
            .commit_alone(async {
                self.query_all_alone(stmt)
                    .await
                    .map_err(super::autocommit_error)
            })
            .await?;
        let mut results: Vec<SetResult> = (0..sets.len()).map(|_| Ok(None)).collect();
        let round: Vec<usize> = (0..sets.len()).collect();
        // The statement committed: an answer that cannot be read leaves the writes' outcome
        // unknown, never refused.
        record_answers(sets, &round, written, &mut results).map_err(|error| {
            super::commit::commit_failed(&format!(
                "the answer of a group commit's statement could not be read ({error})"
            ))
        })?;
        Ok(results)
    }

    /// Writes one set inside `tx` by itself (SQLite, after its round's statement failed).
    /// Its lease events are not written here: the batch inserts those of every write that
    /// applied, this one's included.
    async fn write_one_set(&self, tx: &DatabaseTransaction, set: &ObservedSet) -> SetResult {
        let (update, values) = set.update();
        let found = tx
            .query_one_raw(self.stmt(&format!("{update} RETURNING lease_epoch"), values))
            .await
            .map_err(db_error)?;
        found
            .map(|r| {
                r.try_get::<Option<i64>>("", "lease_epoch")
                    .map(|epoch| epoch.unwrap_or(0))
                    .map_err(db_error)
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str) -> ObservedSet {
        ObservedSet {
            namespace: "ns".into(),
            key: BindingKey::parse(&format!("session:main:{key}")).unwrap(),
            columns: std::array::from_fn(|_| Value::from(None::<i64>)),
            expected: 1,
            now: Timestamp::from_millis(0),
            new_epoch: false,
            events: Vec::new(),
            started: Instant::now(),
        }
    }

    #[test]
    fn writes_of_one_key_run_in_later_rounds_in_their_order() {
        let sets = [set("a"), set("b"), set("a"), set("c"), set("a"), set("b")];
        assert_eq!(rounds(&sets), vec![vec![0, 1, 3], vec![2, 5], vec![4]]);
        assert_eq!(rounds(&[]), Vec::<Vec<usize>>::new());
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn the_autocommit_batch_statement_numbers_every_parameter_once_and_inserts_only_events() {
        let event = |kind, epoch| PendingEvent {
            kind,
            epoch,
            token_prefix: Some("tok".into()),
            other_token_prefix: None,
            holder: None,
        };
        let mut acquire = set("a");
        acquire.new_epoch = true;
        acquire.events = vec![event(LeaseEventKind::Acquired, Some(EPOCH_FROM_SQL))];
        let mut release = set("b");
        release.events = vec![event(LeaseEventKind::Released, Some(LeaseEpoch::new(7)))];
        let plain = set("c");

        let (sql, values) = batch_alone(&[&acquire, &release, &plain]);
        let width = PG_ROW_TYPES.len();
        let params = 3 * width + 2 * PG_EVENT_TYPES.len();
        assert_eq!(values.len(), params);
        for p in 1..=params {
            assert!(sql.contains(&format!("${p}")), "${p} missing");
        }
        assert!(!sql.contains(&format!("${}", params + 1)));
        assert!(sql.contains("INSERT INTO lease_events") && sql.ends_with("FROM w"));
        // The counted-up epoch is not sent: the statement takes the row's.
        assert_eq!(values[3 * width + 3], Value::from(None::<i64>));
        assert_eq!(values[3 * width + 4], Value::from(true));
        assert_eq!(
            values[3 * width + PG_EVENT_TYPES.len() + 3],
            Value::from(Some(7_i64))
        );

        let (sql, values) = batch_alone(&[&plain]);
        assert_eq!(values.len(), width);
        assert!(!sql.contains("lease_events"), "no events, no insert: {sql}");
    }

    #[test]
    fn the_batch_statement_numbers_every_parameter_once() {
        let width = PG_ROW_TYPES.len();
        let sql = batch_sql(DbBackend::Postgres, 3);
        for p in 1..=3 * width {
            assert!(sql.contains(&format!("${p}")), "${p} missing");
        }
        assert!(!sql.contains(&format!("${}", 3 * width + 1)));
        // SQLite: anonymous parameters, bound in order, one per value.
        let sql = batch_sql(DbBackend::Sqlite, 3);
        assert_eq!(sql.matches('?').count(), 3 * width);
        assert!(!sql.contains('$'));
        for backend in [DbBackend::Postgres, DbBackend::Sqlite] {
            let sql = batch_sql(backend, 3);
            assert!(sql.contains("RETURNING") && sql.contains("lease_epoch"));
            // Made once: the same text every time, for every size a batch can have.
            assert_eq!(sql, make_batch_sql(backend, 3));
            assert!(matches!(batch_sql(backend, MAX_MEMBERS), Cow::Borrowed(_)));
        }
    }
}
