//! Operator bookkeeping on the SQL store: the audit trail of operator actions, the counters
//! maintained at write time (finalization outcomes), and the cursor-paged lease history and
//! quarantine list read by the admin service.

use sea_orm::{ConnectionTrait, DatabaseTransaction, QueryResult, Value};
use tether_core::{BindingKey, Error, Namespace, QuarantineEntry, Timestamp, text};

use super::admin_read::{decode_event, select_lease_events};
use super::quarantine::decode_quarantine;
use super::{End, Store, db_error, to_i64, unusable};
use crate::events::LeaseEvent;
use crate::transcript::FinalizationOutcome;

/// The finalization outcomes recorded since the store was created (never decreasing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FinalizationCounts {
    /// Finalizations whose turn produced the visible answer.
    pub succeeded: u64,
    /// Finalizations that fell back to the host's answer.
    pub fell_back: u64,
}

/// An operator action about to run, for the audit trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAuditEntry {
    /// Who acts: a token's name, `cli`, or `anonymous`.
    pub actor: String,
    /// What is done (for example `delete_session`).
    pub action: String,
    /// What it is done to (a session key, or `namespace/key`).
    pub target: String,
    /// Why, as the operator gave it.
    pub reason: String,
}

/// How an audited action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuditOutcome {
    /// Recorded before the action ran and never completed (the process stopped half-way).
    Started,
    /// The action took effect.
    Succeeded,
    /// The action was refused (missing target, live lease, conflict); nothing changed.
    Refused,
    /// The action failed for another reason (database unreachable), or its outcome is unknown
    /// (its COMMIT failed or the answer was lost: the detail then starts with
    /// `outcome_unknown`, and the target must be read again to know).
    Failed,
}

impl AuditOutcome {
    /// Every outcome.
    pub const ALL: [Self; 4] = [Self::Started, Self::Succeeded, Self::Refused, Self::Failed];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Succeeded => "succeeded",
            Self::Refused => "refused",
            Self::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Result<Self, Error> {
        Self::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| Error::other(format!("unknown audit outcome `{s}`")))
    }
}

/// One recorded operator action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// Position in the trail (increasing).
    pub id: u64,
    /// When the action started.
    pub at: Timestamp,
    /// Who acted.
    pub actor: String,
    /// What was done.
    pub action: String,
    /// What it was done to.
    pub target: String,
    /// Why.
    pub reason: String,
    /// How it ended.
    pub outcome: AuditOutcome,
    /// What the service answered (the result message or the error).
    pub detail: Option<String>,
    /// When it ended.
    pub finished_at: Option<Timestamp>,
}

/// One page of the audit trail, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPage {
    /// The entries.
    pub entries: Vec<AuditEntry>,
    /// Pass as `before` to read the next (older) page; `None` on the last page.
    pub next: Option<u64>,
}

/// The position after which the next page of quarantined keys starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineCursor {
    /// The last listed key's quarantine time.
    pub quarantined_at: Timestamp,
    /// Its namespace.
    pub namespace: Namespace,
    /// Its key.
    pub key: BindingKey,
}

const AUDIT_COLUMNS: &str = "id, at, actor, action, target, reason, outcome, detail, finished_at";

fn decode_audit(r: &QueryResult) -> Result<AuditEntry, Error> {
    let id: i64 = r.try_get("", "id").map_err(db_error)?;
    let outcome: String = r.try_get("", "outcome").map_err(db_error)?;
    let finished: Option<i64> = r.try_get("", "finished_at").map_err(db_error)?;
    Ok(AuditEntry {
        id: u64::try_from(id).unwrap_or(0),
        at: Timestamp::from_millis(r.try_get("", "at").map_err(db_error)?),
        actor: r.try_get("", "actor").map_err(db_error)?,
        action: r.try_get("", "action").map_err(db_error)?,
        target: r.try_get("", "target").map_err(db_error)?,
        reason: r.try_get("", "reason").map_err(db_error)?,
        outcome: AuditOutcome::parse(&outcome)?,
        detail: r.try_get("", "detail").map_err(db_error)?,
        finished_at: finished.map(Timestamp::from_millis),
    })
}

/// The `LIMIT` of a page of `limit` rows: one more, to learn whether a next page exists.
fn fetch_limit(limit: usize) -> Value {
    to_i64(u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1)).into()
}

impl Store {
    /// Adds one to the counter `name` of `tether_counters` inside `tx`.
    pub(crate) async fn bump_counter(
        &self,
        tx: &DatabaseTransaction,
        name: &str,
    ) -> Result<(), Error> {
        let affected = tx
            .execute_raw(self.stmt(
                "UPDATE tether_counters SET value = value + 1 WHERE name = $1",
                vec![name.into()],
            ))
            .await
            .map_err(db_error)?
            .rows_affected();
        if affected == 1 {
            Ok(())
        } else {
            Err(unusable(format!(
                "the counter `{name}` is missing: run `tether migrate`"
            )))
        }
    }

    /// The finalization outcomes counted when their records were appended. Deleting a session
    /// never lowers them.
    pub async fn finalization_counts(&self) -> Result<FinalizationCounts, Error> {
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                "SELECT name, value FROM tether_counters WHERE name IN ($1, $2)",
                vec![
                    FinalizationOutcome::Succeeded.counter().into(),
                    FinalizationOutcome::FellBack.counter().into(),
                ],
            ))
            .await
            .map_err(db_error)?;
        let mut counts = FinalizationCounts::default();
        for r in &rows {
            let name: String = r.try_get("", "name").map_err(db_error)?;
            let value =
                u64::try_from(r.try_get::<i64>("", "value").map_err(db_error)?).unwrap_or(0);
            if name == FinalizationOutcome::Succeeded.counter() {
                counts.succeeded = value;
            } else {
                counts.fell_back = value;
            }
        }
        Ok(counts)
    }

    /// Records an operator action before it runs (outcome [`AuditOutcome::Started`]) and
    /// returns its id for [`Store::audit_finish`]. The reason must not be blank.
    #[tracing::instrument(level = "info", skip(self, entry), fields(actor = %entry.actor, action = %entry.action, target = %entry.target))]
    pub async fn audit_begin(&self, entry: &NewAuditEntry) -> Result<u64, Error> {
        text::check_label("actor", &entry.actor)?;
        text::check_label("action", &entry.action)?;
        text::check_reason("target", &entry.target)?;
        text::check_reason("reason", &entry.reason)?;
        let row = self
            .inner
            .db
            .query_one_raw(self.stmt(
                "INSERT INTO operator_audit (at, actor, action, target, reason, outcome) \
                 VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                vec![
                    self.inner.clock.now().as_millis().into(),
                    entry.actor.as_str().into(),
                    entry.action.as_str().into(),
                    entry.target.as_str().into(),
                    entry.reason.as_str().into(),
                    AuditOutcome::Started.as_str().into(),
                ],
            ))
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::other("audit insert returned no id"))?;
        let id: i64 = row.try_get("", "id").map_err(db_error)?;
        Ok(u64::try_from(id).unwrap_or(0))
    }

    /// Completes the audit record `id` with how the action ended. `detail` is cut to the
    /// reason size limit.
    pub async fn audit_finish(
        &self,
        id: u64,
        outcome: AuditOutcome,
        detail: &str,
    ) -> Result<(), Error> {
        let detail = text::to_reason(detail);
        let tx = self.begin_write().await?;
        let result = async {
            tx.execute_raw(self.stmt(
                "UPDATE operator_audit SET outcome = $1, detail = $2, finished_at = $3 \
                 WHERE id = $4 AND outcome = $5",
                vec![
                    outcome.as_str().into(),
                    detail.into(),
                    self.inner.clock.now().as_millis().into(),
                    to_i64(id).into(),
                    AuditOutcome::Started.as_str().into(),
                ],
            ))
            .await
            .map_err(db_error)?;
            Ok(((), End::Commit))
        }
        .await;
        self.finish(tx, result).await
    }

    /// The audit trail, newest first: at most `limit` entries older than `before` (all when
    /// `None`).
    pub async fn audit_page(&self, before: Option<u64>, limit: usize) -> Result<AuditPage, Error> {
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM operator_audit WHERE ($1 IS NULL OR id < $1) \
             ORDER BY id DESC LIMIT $2"
        );
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                &sql,
                vec![Value::from(before.map(to_i64)), fetch_limit(limit)],
            ))
            .await
            .map_err(db_error)?;
        let mut entries = rows
            .iter()
            .map(decode_audit)
            .collect::<Result<Vec<_>, _>>()?;
        let next = if entries.len() > limit {
            entries.truncate(limit);
            entries.last().map(|e| e.id)
        } else {
            None
        };
        Ok(AuditPage { entries, next })
    }

    /// How many audited actions ended each way, by action and outcome (actions still
    /// `started` are not counted: their outcome is not known yet). Audit rows are never
    /// deleted, so these counts never decrease.
    pub async fn audit_counts(&self) -> Result<Vec<(String, AuditOutcome, u64)>, Error> {
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                "SELECT action, outcome, COUNT(*) AS n FROM operator_audit \
                 WHERE outcome <> $1 GROUP BY action, outcome ORDER BY action, outcome",
                vec![AuditOutcome::Started.as_str().into()],
            ))
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|r| {
                let action: String = r.try_get("", "action").map_err(db_error)?;
                let outcome: String = r.try_get("", "outcome").map_err(db_error)?;
                let n: i64 = r.try_get("", "n").map_err(db_error)?;
                Ok((
                    action,
                    AuditOutcome::parse(&outcome)?,
                    u64::try_from(n).unwrap_or(0),
                ))
            })
            .collect()
    }

    /// The lease history of the whole store, newest first: at most `limit` events older than
    /// the event `before` (the newest when `None`), and the cursor of the next page.
    pub async fn lease_events_page(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> Result<(Vec<LeaseEvent>, Option<u64>), Error> {
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                select_lease_events!("WHERE ($1 IS NULL OR id < $1) ORDER BY id DESC LIMIT $2"),
                vec![Value::from(before.map(to_i64)), fetch_limit(limit)],
            ))
            .await
            .map_err(db_error)?;
        let mut events = rows
            .iter()
            .map(decode_event)
            .collect::<Result<Vec<_>, _>>()?;
        let next = if events.len() > limit {
            events.truncate(limit);
            events.last().map(|e| e.seq)
        } else {
            None
        };
        Ok((events, next))
    }

    /// Quarantined keys, oldest first: at most `limit` after `after` (from the first when
    /// `None`), and the cursor of the next page.
    pub async fn quarantine_page(
        &self,
        after: Option<&QuarantineCursor>,
        limit: usize,
    ) -> Result<(Vec<QuarantineEntry>, Option<QuarantineCursor>), Error> {
        let (at, ns, key) = match after {
            Some(c) => (
                Some(c.quarantined_at.as_millis()),
                Some(c.namespace.as_str().to_owned()),
                Some(c.key.as_str().to_owned()),
            ),
            None => (None, None, None),
        };
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                "SELECT namespace, key, reason, custody, quarantined_at FROM quarantined_keys \
                 WHERE ($1 IS NULL OR quarantined_at > $1 \
                        OR (quarantined_at = $1 AND (namespace > $2 OR (namespace = $2 AND key > $3)))) \
                 ORDER BY quarantined_at, namespace, key LIMIT $4",
                vec![
                    Value::from(at),
                    Value::from(ns),
                    Value::from(key),
                    fetch_limit(limit),
                ],
            ))
            .await
            .map_err(db_error)?;
        let mut entries = rows
            .iter()
            .map(decode_quarantine)
            .collect::<Result<Vec<_>, _>>()?;
        let next = if entries.len() > limit {
            entries.truncate(limit);
            entries.last().map(|q| QuarantineCursor {
                quarantined_at: q.quarantined_at,
                namespace: q.namespace.clone(),
                key: q.key.clone(),
            })
        } else {
            None
        };
        Ok((entries, next))
    }
}
