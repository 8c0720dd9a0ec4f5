//! Fencing by lease epoch on the target side (see `docs/lifecycle.md`, "Fencing native side
//! effects").

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tether_core::{BindingKey, Error, LeaseEpoch};

/// A target-side gate that rejects stale writers: per key, it remembers the highest lease
/// epoch it has admitted and refuses any writer presenting an older one.
///
/// A native side effect (a thread write, a file, a remote call) takes the owner's
/// [`LeaseGuard::epoch`](super::LeaseGuard::epoch) with it; the target calls
/// [`EpochFence::admit`]. Because the store hands out strictly increasing epochs per
/// acquisition, an owner whose lease was taken over can never write after its successor did.
///
/// ```
/// use tether_core::{AgentId, BindingKey, LeaseEpoch, SessionId};
/// use tether_harness_sdk::lifecycle::EpochFence;
///
/// let key = BindingKey::physical(&AgentId::new("a")?, &SessionId::new("s")?);
/// let fence = EpochFence::default();
/// fence.admit(&key, LeaseEpoch::new(2))?;
/// fence.admit(&key, LeaseEpoch::new(2))?;
/// assert!(fence.admit(&key, LeaseEpoch::new(1)).is_err(), "a stale writer is fenced");
/// fence.admit(&key, LeaseEpoch::new(3))?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct EpochFence {
    highest: Mutex<HashMap<BindingKey, LeaseEpoch>>,
}

impl EpochFence {
    /// Admits a writer of `key` at `epoch` unless a newer epoch was already admitted.
    pub fn admit(&self, key: &BindingKey, epoch: LeaseEpoch) -> Result<(), Error> {
        let mut highest = self.highest.lock().unwrap_or_else(PoisonError::into_inner);
        match highest.get(key) {
            Some(&seen) if epoch < seen => Err(Error::LostLease {
                key: key.clone(),
                message: format!(
                    "Fenced stale writer of {key}: lease epoch {epoch} is older than {seen}"
                ),
                cause: None,
            }),
            _ => {
                highest.insert(key.clone(), epoch);
                Ok(())
            }
        }
    }

    /// The highest epoch admitted for `key`.
    pub fn highest(&self, key: &BindingKey) -> Option<LeaseEpoch> {
        self.highest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .copied()
    }
}
