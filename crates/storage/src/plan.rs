//! Backend-independent write rules shared by the memory and SQL stores: value limits, row
//! expiry, lease epoch assignment and the lease events a write produces.

use std::time::Duration;

use tether_core::{
    Error, Lease, LeaseEpoch, LeaseWrite, NamespaceConfig, Revision, RowWrite, StoreErrorKind,
    StoredRow, Timestamp,
};

use crate::events::{LeaseEventKind, PendingEvent};

/// Refuses a row write the stores must not take: a value larger than the namespace limit, or
/// a lease holder label breaking the label rule of [`tether_core::text`] (checked before
/// anything is written, the same on every backend).
pub(crate) fn check_write(
    config: &NamespaceConfig,
    row: &tether_core::RowWrite,
) -> Result<(), Error> {
    if let Some(holder) = row.lease.as_ref().and_then(|l| l.holder.as_deref()) {
        tether_core::text::check_label("lease holder label", holder)?;
    }
    check_value(config, &row.value)
}

/// Refuses a quarantine record breaking the reason rule (reason and custody).
pub(crate) fn check_quarantine(entry: &tether_core::QuarantineEntry) -> Result<(), Error> {
    tether_core::text::check_reason("quarantine reason", &entry.reason)?;
    if let Some(custody) = &entry.custody {
        tether_core::text::check_reason("quarantine custody", custody)?;
    }
    Ok(())
}

/// Refuses a value larger than the namespace limit.
fn check_value(config: &NamespaceConfig, value: &[u8]) -> Result<(), Error> {
    if value.len() > config.max_value_bytes {
        return Err(Error::store(StoreErrorKind::ValueTooLarge {
            namespace: config.namespace.to_string(),
            size: value.len(),
            limit: config.max_value_bytes,
        }));
    }
    Ok(())
}

/// The capacity error of a full namespace.
pub(crate) fn capacity_exceeded(config: &NamespaceConfig, max_entries: u64) -> Error {
    Error::store(StoreErrorKind::CapacityExceeded {
        namespace: config.namespace.to_string(),
        max_entries,
    })
}

/// The row expiry of a write: the explicit TTL, else the namespace default.
pub(crate) fn row_expiry(
    config: &NamespaceConfig,
    ttl: Option<Duration>,
    now: Timestamp,
) -> Option<Timestamp> {
    ttl.or(config.default_ttl).map(|d| now + d)
}

/// Whether writing `next` over a row holding `current` is a new acquisition that needs a fresh
/// epoch (a token different from the current one, or a lease on a row without one).
pub(crate) fn needs_new_epoch(current: Option<&Lease>, next: Option<&LeaseWrite>) -> bool {
    match (current, next) {
        (_, None) => false,
        (Some(cur), Some(next)) => cur.token != next.token,
        (None, Some(_)) => true,
    }
}

/// The row a set produces, and the lease event it implies.
#[derive(Debug)]
pub(crate) struct SetPlan {
    pub(crate) row: StoredRow,
    /// The `expired` event of a lapsed lease this write replaces (recorded first).
    pub(crate) lapsed: Option<PendingEvent>,
    pub(crate) event: Option<PendingEvent>,
}

impl SetPlan {
    /// The events of the write, in order.
    pub(crate) fn events(&self) -> impl Iterator<Item = PendingEvent> + '_ {
        self.lapsed.iter().chain(self.event.iter()).cloned()
    }
}

/// Builds the row written by a set over the live row `current` (`None` when absent or
/// expired). `new_epoch` must be `Some` when [`needs_new_epoch`] says so.
pub(crate) fn plan_set(
    current: Option<&StoredRow>,
    write: RowWrite,
    expires_at: Option<Timestamp>,
    now: Timestamp,
    revision: Revision,
    new_epoch: Option<LeaseEpoch>,
) -> Result<SetPlan, Error> {
    let current_lease = current.and_then(|r| r.lease.as_ref());
    let mut lapsed = None;
    let (lease, event) = match (current_lease, write.lease) {
        (None, None) => (None, None),
        (Some(old), None) => (
            None,
            Some(PendingEvent {
                kind: LeaseEventKind::Released,
                epoch: Some(old.epoch),
                token_prefix: Some(old.token.prefix().to_owned()),
                other_token_prefix: None,
                holder: old.holder.clone(),
            }),
        ),
        (Some(old), Some(next)) if old.token == next.token => {
            let renewed = old.expires_at != next.expires_at;
            let lease = Lease {
                token: next.token,
                epoch: old.epoch,
                expires_at: next.expires_at,
                acquired_at: old.acquired_at,
                renewed_at: if renewed { now } else { old.renewed_at },
                holder: next.holder.or_else(|| old.holder.clone()),
            };
            let event = renewed.then(|| PendingEvent {
                kind: LeaseEventKind::Renewed,
                epoch: Some(lease.epoch),
                token_prefix: Some(lease.token.prefix().to_owned()),
                other_token_prefix: None,
                holder: lease.holder.clone(),
            });
            (Some(lease), event)
        }
        (old, Some(next)) => {
            let epoch = new_epoch.ok_or_else(|| {
                Error::other("internal: a new lease acquisition was planned without an epoch")
            })?;
            let lease = Lease {
                token: next.token,
                epoch,
                expires_at: next.expires_at,
                acquired_at: now,
                renewed_at: now,
                holder: next.holder,
            };
            // A different token over a live lease takes it over; over a lapsed lease it is a
            // plain acquisition, recorded after the lapsed lease's expiry.
            let live_old = old.filter(|o| o.is_live(now));
            lapsed = old.filter(|o| !o.is_live(now)).and_then(|o| {
                expired_event(&StoredRow {
                    lease: Some(o.clone()),
                    value: Vec::new(),
                    revision,
                    created_at: now,
                    expires_at: None,
                })
            });
            let event = PendingEvent {
                kind: if live_old.is_some() {
                    LeaseEventKind::TakenOver
                } else {
                    LeaseEventKind::Acquired
                },
                epoch: Some(epoch),
                token_prefix: Some(lease.token.prefix().to_owned()),
                other_token_prefix: old.map(|o| o.token.prefix().to_owned()),
                holder: lease.holder.clone(),
            };
            (Some(lease), Some(event))
        }
    };
    Ok(SetPlan {
        row: StoredRow {
            value: write.value,
            lease,
            revision,
            created_at: now,
            expires_at,
        },
        lapsed,
        event,
    })
}

/// The event of deleting a row that carries a lease.
pub(crate) fn release_event(row: &StoredRow) -> Option<PendingEvent> {
    row.lease.as_ref().map(|l| PendingEvent {
        kind: LeaseEventKind::Released,
        epoch: Some(l.epoch),
        token_prefix: Some(l.token.prefix().to_owned()),
        other_token_prefix: None,
        holder: l.holder.clone(),
    })
}

/// The event of sweeping an expired row that carries a lease.
pub(crate) fn expired_event(row: &StoredRow) -> Option<PendingEvent> {
    row.lease.as_ref().map(|l| PendingEvent {
        kind: LeaseEventKind::Expired,
        epoch: Some(l.epoch),
        token_prefix: Some(l.token.prefix().to_owned()),
        other_token_prefix: None,
        holder: l.holder.clone(),
    })
}

/// The event of refusing a stale lease-carrying write (`current` is the row that won).
pub(crate) fn fenced_event(
    current: Option<&StoredRow>,
    refused: &RowWrite,
) -> Option<PendingEvent> {
    let refused_lease = refused.lease.as_ref()?;
    let current_lease = current.and_then(|r| r.lease.as_ref());
    if current_lease.is_some_and(|l| l.token == refused_lease.token) {
        // Same holder raced with its own write (for example a renewal): not a fence.
        return None;
    }
    Some(PendingEvent {
        kind: LeaseEventKind::Fenced,
        epoch: current_lease.map(|l| l.epoch),
        token_prefix: current_lease.map(|l| l.token.prefix().to_owned()),
        other_token_prefix: Some(refused_lease.token.prefix().to_owned()),
        holder: refused_lease.holder.clone(),
    })
}

/// Whether a stored row is live at `now` (no expiry, or `expires_at > now`).
pub(crate) fn row_is_live(row: &StoredRow, now: Timestamp) -> bool {
    row.expires_at.is_none_or(|e| tether_core::is_live(e, now))
}

/// The refusal of an operator's deletion of `session` while its binding `ns`/`key` is
/// quarantined (see [`tether_core::HostErrorKind::BindingQuarantined`]).
pub(crate) fn quarantine_refusal(
    ns: &tether_core::Namespace,
    key: &tether_core::BindingKey,
    session: &tether_core::SessionKey,
    reason: &str,
) -> Error {
    tether_core::HostErrorKind::BindingQuarantined {
        key: session.to_string(),
        binding: format!("{ns}/{key}"),
        reason: reason.to_owned(),
    }
    .into()
}

/// The refusal of an operator's binding removal while the row `ns`/`key` of `session` holds the
/// live `lease` (both stores: nothing is removed; the operator force-expires the lease first).
pub(crate) fn live_lease_refusal(
    ns: &tether_core::Namespace,
    key: &tether_core::BindingKey,
    session: &tether_core::SessionKey,
    lease: &Lease,
) -> Error {
    Error::MutationBlocked {
        message: format!(
            "binding {ns}/{key} of session {session} holds a live lease (epoch {}, holder {}); force-expire it first",
            lease.epoch.get(),
            lease.holder.as_deref().unwrap_or("unknown"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::LeaseToken;

    fn write(token: Option<&str>, expires: i64) -> RowWrite {
        RowWrite {
            value: b"{}".to_vec(),
            lease: token.map(|t| LeaseWrite {
                token: LeaseToken::new(t).unwrap(),
                expires_at: Timestamp::from_millis(expires),
                holder: Some("h".into()),
            }),
        }
    }

    #[test]
    fn acquisition_renewal_takeover_and_release() {
        let t0 = Timestamp::from_millis(10);
        let acquired = plan_set(
            None,
            write(Some("a"), 100),
            None,
            t0,
            Revision::new(1),
            Some(LeaseEpoch::new(7)),
        )
        .unwrap();
        let lease = acquired.row.lease.clone().unwrap();
        assert_eq!(lease.epoch, LeaseEpoch::new(7));
        assert_eq!(lease.acquired_at, t0);
        assert_eq!(acquired.event.unwrap().kind, LeaseEventKind::Acquired);

        assert!(!needs_new_epoch(
            Some(&lease),
            write(Some("a"), 200).lease.as_ref()
        ));
        let t1 = Timestamp::from_millis(20);
        let renewed = plan_set(
            Some(&acquired.row),
            write(Some("a"), 200),
            None,
            t1,
            Revision::new(2),
            None,
        )
        .unwrap();
        let renewed_lease = renewed.row.lease.clone().unwrap();
        assert_eq!(renewed_lease.epoch, LeaseEpoch::new(7));
        assert_eq!(renewed_lease.acquired_at, t0);
        assert_eq!(renewed_lease.renewed_at, t1);
        assert_eq!(renewed.event.unwrap().kind, LeaseEventKind::Renewed);

        assert!(needs_new_epoch(
            Some(&renewed_lease),
            write(Some("b"), 300).lease.as_ref()
        ));
        let taken = plan_set(
            Some(&renewed.row),
            write(Some("b"), 300),
            None,
            t1,
            Revision::new(3),
            Some(LeaseEpoch::new(8)),
        )
        .unwrap();
        let event = taken.event.unwrap();
        assert_eq!(event.kind, LeaseEventKind::TakenOver);
        assert_eq!(event.other_token_prefix.as_deref(), Some("a"));

        let released = plan_set(
            Some(&taken.row),
            write(None, 0),
            None,
            t1,
            Revision::new(4),
            None,
        )
        .unwrap();
        assert!(released.row.lease.is_none());
        assert_eq!(released.event.unwrap().kind, LeaseEventKind::Released);
    }

    #[test]
    fn missing_epoch_for_an_acquisition_is_an_error_not_a_panic() {
        let err = plan_set(
            None,
            write(Some("a"), 1),
            None,
            Timestamp::EPOCH,
            Revision::INITIAL,
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("epoch"));
    }
}
