//! Operator-facing store operations shared by every backend: the lease history, the expiry
//! sweeper and the list of quarantined keys.

use std::fmt;

use async_trait::async_trait;
use tether_core::{Error, QuarantineEntry, Timestamp};

use crate::events::{LeaseEvent, LeaseEventQuery};

/// Maintenance and history reads, for the admin service and for background tasks.
#[async_trait]
pub trait StoreAdmin: Send + Sync + fmt::Debug {
    /// The lease history matching `query`, oldest first.
    async fn lease_events(&self, query: &LeaseEventQuery) -> Result<Vec<LeaseEvent>, Error>;

    /// Deletes up to `limit` expired binding rows (they are already invisible), recording an
    /// `expired` lease event for each one that still carried a lease. Returns how many went.
    async fn sweep_expired(&self, limit: usize) -> Result<usize, Error>;

    /// Deletes lease events recorded before `before` (history retention). Returns how many
    /// went.
    async fn prune_lease_events(&self, before: Timestamp) -> Result<u64, Error>;

    /// Quarantined keys, oldest first, at most `limit`.
    async fn quarantined_keys(&self, limit: usize) -> Result<Vec<QuarantineEntry>, Error>;
}
