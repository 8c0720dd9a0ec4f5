//! The lease event history: what happened to the lease of a binding row, for the admin service
//! and metrics.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use tether_core::{BindingKey, LeaseEpoch, Namespace, Timestamp};

/// What happened to a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseEventKind {
    /// A lease was written on a row that held no live lease.
    Acquired,
    /// The holder extended its own lease (same token, new expiry).
    Renewed,
    /// The lease was removed by a write or by deleting its row.
    Released,
    /// A lease lapsed: replaced by another token after its expiry, or swept with its row.
    Expired,
    /// A different token replaced a still-live lease (the previous one is recorded in the
    /// event).
    TakenOver,
    /// A conditional write carrying a lease was refused because the row moved on.
    Fenced,
}

impl LeaseEventKind {
    /// Every kind, in declaration order.
    pub const ALL: [Self; 6] = [
        Self::Acquired,
        Self::Renewed,
        Self::Released,
        Self::Expired,
        Self::TakenOver,
        Self::Fenced,
    ];

    /// The stored name (`acquired`, `renewed`, `released`, `expired`, `taken_over`, `fenced`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acquired => "acquired",
            Self::Renewed => "renewed",
            Self::Released => "released",
            Self::Expired => "expired",
            Self::TakenOver => "taken_over",
            Self::Fenced => "fenced",
        }
    }
}

impl fmt::Display for LeaseEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LeaseEventKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown lease event kind `{s}`"))
    }
}

/// One entry of the lease history. Tokens are recorded by their eight-character prefix only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseEvent {
    /// Position in the store's history (increasing).
    pub seq: u64,
    /// The namespace.
    pub namespace: Namespace,
    /// The key.
    pub key: BindingKey,
    /// What happened.
    pub kind: LeaseEventKind,
    /// The epoch of the lease the event is about (the new one for acquisitions and takeovers).
    pub epoch: Option<LeaseEpoch>,
    /// The first characters of the token the event is about.
    pub token_prefix: Option<String>,
    /// For a takeover or a fence: the prefix of the other token involved (previous holder, or
    /// the refused writer).
    pub other_token_prefix: Option<String>,
    /// The holder label, when known.
    pub holder: Option<String>,
    /// When it happened.
    pub at: Timestamp,
    /// For a `renewed` event written by the SQL store: how long the renewal's conditional write
    /// spent in the store, from its start (including any wait for the row or the database's
    /// write lock) until the renewed lease was written; the commit is not included. `None` for
    /// other kinds, for the in-memory store, and for batched renewals
    /// ([`BindingStore::renew_leases`](tether_core::BindingStore::renew_leases)), which record no
    /// event per lease.
    pub latency: Option<Duration>,
}

/// A lease event before the store assigned its sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingEvent {
    pub(crate) kind: LeaseEventKind,
    pub(crate) epoch: Option<LeaseEpoch>,
    pub(crate) token_prefix: Option<String>,
    pub(crate) other_token_prefix: Option<String>,
    pub(crate) holder: Option<String>,
}

impl PendingEvent {
    pub(crate) fn into_event(
        self,
        seq: u64,
        namespace: &Namespace,
        key: &BindingKey,
        at: Timestamp,
    ) -> LeaseEvent {
        LeaseEvent {
            seq,
            namespace: namespace.clone(),
            key: key.clone(),
            kind: self.kind,
            epoch: self.epoch,
            token_prefix: self.token_prefix,
            other_token_prefix: self.other_token_prefix,
            holder: self.holder,
            at,
            latency: None,
        }
    }
}

/// A filter for reading the lease history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseEventQuery {
    /// Only this namespace.
    pub namespace: Option<Namespace>,
    /// Only this key.
    pub key: Option<BindingKey>,
    /// Only events with `seq > after`.
    pub after: Option<u64>,
    /// At most this many events (oldest first).
    pub limit: usize,
}

impl LeaseEventQuery {
    /// The oldest `limit` events of the whole store.
    pub fn all(limit: usize) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    /// The oldest `limit` events of one key.
    pub fn for_key(namespace: Namespace, key: BindingKey, limit: usize) -> Self {
        Self {
            namespace: Some(namespace),
            key: Some(key),
            after: None,
            limit,
        }
    }

    pub(crate) fn matches(&self, event: &LeaseEvent) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|n| *n == event.namespace)
            && self.key.as_ref().is_none_or(|k| *k == event.key)
            && self.after.is_none_or(|a| event.seq > a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_names() {
        for kind in LeaseEventKind::ALL {
            assert_eq!(kind.as_str().parse::<LeaseEventKind>(), Ok(kind));
        }
        assert!("stolen".parse::<LeaseEventKind>().is_err());
    }
}
