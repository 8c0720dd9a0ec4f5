//! The state behind the in-memory store, with the synchronous write rules.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use tether_core::{
    BindingKey, Error, HostSessionEntry, LeaseEpoch, Namespace, NamespaceConfig, QuarantineEntry,
    Revision, RowWrite, SessionKey, StoreErrorKind, StoredRow, Timestamp,
};

use crate::events::{LeaseEvent, LeaseEventQuery, PendingEvent};
use crate::plan;

/// How many lease events the memory store keeps (oldest dropped first).
pub(crate) const EVENT_CAPACITY: usize = 10_000;

/// Everything the memory store holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct State {
    pub(crate) namespaces: HashMap<Namespace, NamespaceConfig>,
    pub(crate) rows: BTreeMap<Namespace, BTreeMap<BindingKey, StoredRow>>,
    /// Last revision handed out (store-wide, so a recreated row never reuses one).
    pub(crate) last_revision: u64,
    /// Last lease epoch handed out (store-wide, so epochs are never reused).
    pub(crate) last_epoch: u64,
    pub(crate) events: VecDeque<LeaseEvent>,
    pub(crate) last_event: u64,
    pub(crate) quarantine: BTreeMap<(Namespace, BindingKey), QuarantineEntry>,
    pub(crate) host_sessions: BTreeMap<SessionKey, HostSessionEntry>,
    /// When set, every host session read fails with this error (tests of the failed state).
    pub(crate) host_read_failure: Option<Error>,
    /// The transcript of each host session.
    pub(crate) transcripts: BTreeMap<SessionKey, Transcript>,
    /// Last transcript entry id handed out (store-wide, like the SQL store's row ids).
    pub(crate) last_entry: i64,
    /// Upstream (external harness) links of host sessions.
    pub(crate) upstream_links: BTreeMap<SessionKey, String>,
}

/// One host session's transcript tree and its active leaf.
#[derive(Debug, Clone, Default)]
pub(crate) struct Transcript {
    pub(crate) entries: HashMap<i64, crate::transcript::TranscriptEntry>,
    pub(crate) active_leaf: Option<i64>,
}

impl State {
    pub(crate) fn config(&self, ns: &Namespace) -> Result<&NamespaceConfig, Error> {
        self.namespaces.get(ns).ok_or_else(|| {
            Error::store(StoreErrorKind::UnknownNamespace {
                namespace: ns.to_string(),
            })
        })
    }

    pub(crate) fn live(
        &self,
        ns: &Namespace,
        key: &BindingKey,
        now: Timestamp,
    ) -> Option<&StoredRow> {
        self.rows
            .get(ns)
            .and_then(|rows| rows.get(key))
            .filter(|row| plan::row_is_live(row, now))
    }

    pub(crate) fn live_count(&self, ns: &Namespace, now: Timestamp) -> u64 {
        self.rows.get(ns).map_or(0, |rows| {
            rows.values().filter(|r| plan::row_is_live(r, now)).count() as u64
        })
    }

    pub(crate) fn push_event(
        &mut self,
        ns: &Namespace,
        key: &BindingKey,
        now: Timestamp,
        event: Option<PendingEvent>,
    ) {
        if let Some(event) = event {
            self.last_event += 1;
            self.events
                .push_back(event.into_event(self.last_event, ns, key, now));
            while self.events.len() > EVENT_CAPACITY {
                self.events.pop_front();
            }
        }
    }

    pub(crate) fn events(&self, query: &LeaseEventQuery) -> Vec<LeaseEvent> {
        self.events
            .iter()
            .filter(|e| query.matches(e))
            .take(query.limit)
            .cloned()
            .collect()
    }

    /// Writes `write` over the live row (which the caller has already compared), checking the
    /// value limit and, for a new row, the capacity. Returns the new revision and lease epoch.
    pub(crate) fn set(
        &mut self,
        ns: &Namespace,
        key: &BindingKey,
        write: RowWrite,
        ttl: Option<Duration>,
        now: Timestamp,
    ) -> Result<(Revision, Option<LeaseEpoch>), Error> {
        let config = self.config(ns)?.clone();
        plan::check_write(&config, &write)?;
        let current = self.live(ns, key, now).cloned();
        if current.is_none()
            && let Some(max) = config.max_entries
            && self.live_count(ns, now) >= max
        {
            return Err(plan::capacity_exceeded(&config, max));
        }
        let new_epoch = plan::needs_new_epoch(
            current.as_ref().and_then(|r| r.lease.as_ref()),
            write.lease.as_ref(),
        )
        .then(|| {
            self.last_epoch += 1;
            LeaseEpoch::new(self.last_epoch)
        });
        self.last_revision += 1;
        let revision = Revision::new(self.last_revision);
        let expires_at = plan::row_expiry(&config, ttl, now);
        let planned = plan::plan_set(
            current.as_ref(),
            write,
            expires_at,
            now,
            revision,
            new_epoch,
        )?;
        let epoch = planned.row.lease.as_ref().map(|l| l.epoch);
        let events: Vec<PendingEvent> = planned.events().collect();
        self.rows
            .entry(ns.clone())
            .or_default()
            .insert(key.clone(), planned.row);
        for event in events {
            self.push_event(ns, key, now, Some(event));
        }
        Ok((revision, epoch))
    }

    /// Removes the live row, returning it.
    pub(crate) fn delete(
        &mut self,
        ns: &Namespace,
        key: &BindingKey,
        now: Timestamp,
    ) -> Option<StoredRow> {
        self.live(ns, key, now)?;
        let removed = self.rows.get_mut(ns).and_then(|rows| rows.remove(key))?;
        self.push_event(ns, key, now, plan::release_event(&removed));
        Some(removed)
    }

    /// Removes up to `limit` expired rows, returning how many went.
    pub(crate) fn sweep(&mut self, now: Timestamp, limit: usize) -> usize {
        let expired: Vec<(Namespace, BindingKey)> = self
            .rows
            .iter()
            .flat_map(|(ns, rows)| {
                rows.iter()
                    .filter(|(_, r)| !plan::row_is_live(r, now))
                    .map(move |(k, _)| (ns.clone(), k.clone()))
            })
            .take(limit)
            .collect();
        for (ns, key) in &expired {
            if let Some(row) = self.rows.get_mut(ns).and_then(|rows| rows.remove(key)) {
                self.push_event(ns, key, now, plan::expired_event(&row));
            }
        }
        expired.len()
    }
}
