//! Operator actions on binding rows: force-expiry of a lease, and the removal of a session's
//! binding rows inside the host's deletion transaction. Like every other write they are
//! guarded by the row's revision and record lease events; like the admin reads they need no
//! registered namespace.

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, Value};
use tether_core::{BindingKey, Error, HostSessionEntry, LeaseEpoch, Namespace, Revision};

use super::admin_read::{RECORD_COLUMNS, decode_record, session_binding_keys};
use super::{End, Store, db_error, to_i64};
use crate::events::LeaseEventKind;
use crate::plan;

/// What [`Store::force_expire_lease`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForceExpireOutcome {
    /// The lease was removed and the epoch floor bumped: the old holder's next conditional
    /// write is fenced and the next acquisition gets a larger epoch.
    Expired {
        /// The epoch of the removed lease.
        previous_epoch: LeaseEpoch,
        /// The holder label of the removed lease.
        previous_holder: Option<String>,
        /// The row's revision after the change.
        revision: Revision,
    },
    /// No live row exists at that namespace and key.
    Missing,
    /// The row carries no live lease.
    NoLease,
    /// The live lease has another epoch than the one the operator saw.
    EpochMismatch {
        /// The current epoch.
        current: LeaseEpoch,
    },
    /// A concurrent writer changed the row between the read and the guarded update.
    Conflict,
}

impl Store {
    /// Removes the live lease of `ns`/`key` for an operator: a guarded update (same revision)
    /// clears the lease, bumps the row's epoch floor (so the next acquisition's epoch is larger
    /// than any the old holder saw) and the revision (so the old holder's next conditional
    /// write is fenced), and records an `expired` lease event. With `expected_epoch`, only that
    /// lease is expired.
    #[tracing::instrument(level = "info", skip(self))]
    pub async fn force_expire_lease(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        expected_epoch: Option<LeaseEpoch>,
    ) -> Result<ForceExpireOutcome, Error> {
        let tx = self.begin_write().await?;
        let result = self.force_expire_in(&tx, ns, key, expected_epoch).await;
        self.finish(tx, result).await
    }

    async fn force_expire_in(
        &self,
        tx: &DatabaseTransaction,
        ns: &Namespace,
        key: &BindingKey,
        expected_epoch: Option<LeaseEpoch>,
    ) -> Result<(ForceExpireOutcome, End), Error> {
        let now = self.inner.clock.now();
        let Some(physical) = self
            .physical(tx, ns, key)
            .await?
            .filter(|p| plan::row_is_live(&p.row, now))
        else {
            return Ok((ForceExpireOutcome::Missing, End::Rollback));
        };
        let Some(lease) = physical.row.lease.clone().filter(|l| l.expires_at > now) else {
            return Ok((ForceExpireOutcome::NoLease, End::Rollback));
        };
        if let Some(expected) = expected_epoch
            && expected != lease.epoch
        {
            return Ok((
                ForceExpireOutcome::EpochMismatch {
                    current: lease.epoch,
                },
                End::Rollback,
            ));
        }
        let revision = physical.row.revision.next();
        let floor = physical
            .epoch_floor
            .max(lease.epoch.get())
            .saturating_add(1);
        let affected = tx
            .execute_raw(self.stmt(
                "UPDATE binding_records SET lease_token = NULL, lease_expires_at = NULL, \
                 lease_acquired_at = NULL, lease_renewed_at = NULL, holder = NULL, \
                 lease_epoch = $3, revision = $4 \
                 WHERE namespace = $1 AND key = $2 AND revision = $5 AND lease_token IS NOT NULL",
                vec![
                    ns.as_str().into(),
                    key.as_str().into(),
                    to_i64(floor).into(),
                    to_i64(revision.get()).into(),
                    to_i64(physical.row.revision.get()).into(),
                ],
            ))
            .await
            .map_err(db_error)?
            .rows_affected();
        if affected != 1 {
            return Ok((ForceExpireOutcome::Conflict, End::Rollback));
        }
        tx.execute_raw(self.stmt(
            "INSERT INTO lease_events (namespace, key, kind, epoch, token_prefix, other_token_prefix, holder, at) \
             VALUES ($1, $2, $3, $4, $5, NULL, $6, $7)",
            vec![
                ns.as_str().into(),
                key.as_str().into(),
                LeaseEventKind::Expired.as_str().into(),
                to_i64(lease.epoch.get()).into(),
                Value::from(Some(lease.token.as_str().chars().take(8).collect::<String>())),
                Value::from(lease.holder.clone()),
                now.as_millis().into(),
            ],
        ))
        .await
        .map_err(db_error)?;
        Ok((
            ForceExpireOutcome::Expired {
                previous_epoch: lease.epoch,
                previous_holder: lease.holder,
                revision,
            },
            End::Commit,
        ))
    }

    /// Inside the host's deletion transaction: removes the binding rows of `entry` (both key
    /// shapes, every namespace), recording `released` events for leased rows. Refuses with
    /// [`Error::MutationBlocked`] — changing nothing — while any of them holds a live lease:
    /// the operator must force-expire it first, so no running harness is cut off silently;
    /// and with [`HostErrorKind::BindingQuarantined`](tether_core::HostErrorKind::BindingQuarantined)
    /// while one of its keys is quarantined: the operator checks and releases it first.
    pub(crate) async fn delete_session_bindings_in(
        &self,
        tx: &DatabaseTransaction,
        entry: &HostSessionEntry,
    ) -> Result<usize, Error> {
        let now = self.inner.clock.now();
        let lock = if self.inner.backend == DbBackend::Postgres {
            " FOR UPDATE"
        } else {
            ""
        };
        let [physical, stable] = session_binding_keys(entry);
        let quarantined = tx
            .query_all_raw(self.stmt(
                "SELECT namespace, key, reason, custody, quarantined_at FROM quarantined_keys \
                 WHERE key = $1 OR key = $2 ORDER BY namespace, key LIMIT 1",
                vec![physical.as_str().into(), stable.as_str().into()],
            ))
            .await
            .map_err(db_error)?;
        if let Some(row) = quarantined.first() {
            let q = super::quarantine::decode_quarantine(row)?;
            return Err(plan::quarantine_refusal(
                &q.namespace,
                &q.key,
                &entry.session_key,
                &q.reason,
            ));
        }
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM binding_records WHERE key = $1 OR key = $2 ORDER BY namespace, key{lock}"
        );
        let rows = tx
            .query_all_raw(self.stmt(&sql, vec![physical.as_str().into(), stable.as_str().into()]))
            .await
            .map_err(db_error)?;
        let records = rows
            .iter()
            .map(decode_record)
            .collect::<Result<Vec<_>, Error>>()?;
        if let Some((held, lease)) = records
            .iter()
            .filter(|r| plan::row_is_live(&r.row, now))
            .find_map(|r| r.live_lease(now).map(|lease| (r, lease)))
        {
            return Err(plan::live_lease_refusal(
                &held.namespace,
                &held.key,
                &entry.session_key,
                lease,
            ));
        }
        let mut removed = 0;
        for r in records {
            if plan::row_is_live(&r.row, now) {
                if self
                    .delete_tx(tx, &r.namespace, &r.key, &r.row, now)
                    .await?
                {
                    removed += 1;
                }
            } else {
                tx.execute_raw(self.stmt(
                    "DELETE FROM binding_records WHERE namespace = $1 AND key = $2 AND revision = $3",
                    vec![
                        r.namespace.as_str().into(),
                        r.key.as_str().into(),
                        to_i64(r.row.revision.get()).into(),
                    ],
                ))
                .await
                .map_err(db_error)?;
            }
        }
        Ok(removed)
    }
}
