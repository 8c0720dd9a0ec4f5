//! Batched heartbeats (SPEC section 5): one renewal driver per lifecycle instance renews every
//! lease the instance holds, each renew interval, through
//! [`BindingStore::renew_leases`](tether_core::BindingStore::renew_leases) — one transaction per
//! batch on SQL stores instead of one renewal transaction per lease.
//!
//! Turned on with [`LifecycleBuilder::batched_heartbeats`](super::LifecycleBuilder::batched_heartbeats).
//! The owner semantics are those of the per-owner heartbeat: only owners in phase `Held`
//! without a failure are renewed; a lease missing at renewal time, or a failed batch, makes the
//! owner's lease lost (sticky); `join_renewal` waits for a batch in flight. The driver task
//! starts with the first registered owner and ends when none is left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tether_core::LeaseRenewal;
use tracing::Instrument;

use super::owner::{OwnerPhase, OwnerState};
use super::shared::Shared;

/// Owners per `renew_leases` call.
const BATCH: usize = 10_000;

/// The registry of owners renewed by the driver.
#[derive(Debug, Default)]
pub(crate) struct BatchRenewal {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    owners: HashMap<u64, Arc<OwnerState>>,
    next_id: u64,
    running: bool,
}

/// Removes its owner from the driver's registry when dropped.
pub(crate) struct Registration {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(batch) = &self.shared.batch {
            batch.lock().owners.remove(&self.id);
        }
    }
}

impl BatchRenewal {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `owner` for renewal, starting the driver when it is not running.
    pub(crate) fn register(&self, shared: &Arc<Shared>, owner: Arc<OwnerState>) -> Registration {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.owners.insert(id, owner);
        if !state.running {
            state.running = true;
            tokio::spawn(drive(Arc::downgrade(shared)));
        }
        Registration {
            shared: shared.clone(),
            id,
        }
    }

    /// The owners to renew now, or `None` (and the driver stops) when none is registered.
    fn due(&self) -> Option<Vec<Arc<OwnerState>>> {
        let mut state = self.lock();
        if state.owners.is_empty() {
            state.running = false;
            return None;
        }
        Some(
            state
                .owners
                .values()
                .filter(|o| o.phase() == OwnerPhase::Held && o.failure().is_none())
                .cloned()
                .collect(),
        )
    }
}

/// The driver: every renew interval, renew every registered owner in batches.
async fn drive(shared: Weak<Shared>) {
    loop {
        let tick = match shared.upgrade() {
            Some(s) => s.timer.sleep(s.lease.renew_interval),
            None => return,
        };
        tick.await;
        let Some(s) = shared.upgrade() else { return };
        let Some(batch) = &s.batch else { return };
        let Some(owners) = batch.due() else { return };
        for chunk in owners.chunks(BATCH) {
            s.renew_batch(chunk).await;
        }
    }
}

impl Shared {
    /// One batched renewal of `owners` (reference §2.5, batched). Never fails: failures are
    /// recorded on the owners.
    pub(crate) async fn renew_batch(&self, owners: &[Arc<OwnerState>]) {
        let span = tracing::debug_span!("lifecycle.renew_batch", leases = owners.len());
        self.renew_batch_inner(owners).instrument(span).await;
    }

    async fn renew_batch_inner(&self, owners: &[Arc<OwnerState>]) {
        let now = self.clock.now();
        let expires_at = now + self.lease.lease_duration;
        let mut eligible = Vec::with_capacity(owners.len());
        for owner in owners {
            let check = owner
                .assert_current
                .as_ref()
                .map_or(Ok(()), |assert| assert())
                .and_then(|()| self.assert_settled(&owner.key))
                .and_then(|()| owner.assert_held(self));
            match check {
                Ok(()) => {
                    owner.set_renewal_pending(true);
                    eligible.push(owner);
                }
                Err(error) => owner.fail_if_held(error),
            }
        }
        let renewals: Vec<LeaseRenewal> = eligible
            .iter()
            .map(|o| LeaseRenewal {
                key: o.key.clone(),
                token: o.token.clone(),
                expires_at,
            })
            .collect();
        let outcome = self
            .store
            .renew_leases(&self.namespace, &renewals, now)
            .await;
        match outcome {
            Ok(renewed) if renewed.len() == eligible.len() => {
                for (owner, ok) in eligible.iter().zip(renewed) {
                    if ok {
                        owner.record_lease(expires_at, None);
                    } else {
                        owner.fail_if_held(self.lost(&owner.key));
                    }
                }
            }
            Ok(renewed) => {
                let error = tether_core::Error::other(format!(
                    "the store answered {} renewals for {} leases",
                    renewed.len(),
                    eligible.len()
                ));
                for owner in &eligible {
                    owner.fail_if_held(self.texts.lost_lease(&owner.key, Some(error.clone())));
                }
            }
            Err(error) => {
                tracing::warn!(error = %error, leases = eligible.len(), "batched lease renewal failed");
                for owner in &eligible {
                    owner.fail_if_held(self.texts.lost_lease(&owner.key, Some(error.clone())));
                }
            }
        }
        for owner in &eligible {
            owner.set_renewal_pending(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tether_core::{
        BindingId, BindingKey, BindingStore, Error, JsonObjectCodec, LeaseConfig, Namespace,
        NamespaceConfig,
    };
    use tether_storage::{MemoryStore, Store};

    use crate::lifecycle::{LeaseOptions, Lifecycle, PrepareLease};

    type Record = serde_json::Map<String, serde_json::Value>;

    fn key(i: usize) -> BindingKey {
        BindingKey::conversation(&BindingId::new(format!("held-{i}")).unwrap())
    }

    fn lease() -> LeaseConfig {
        LeaseConfig {
            lease_duration: Duration::from_millis(900),
            wait_budget: Duration::from_secs(2),
            retry_interval: Duration::from_millis(50),
            renew_interval: Duration::from_millis(300),
        }
    }

    async fn lifecycle(store: Arc<dyn BindingStore>) -> Lifecycle<JsonObjectCodec> {
        let ns = Namespace::new("batch").unwrap();
        store
            .register_namespace(NamespaceConfig::new(ns.clone()))
            .await
            .unwrap();
        let keep: PrepareLease<Record> =
            Arc::new(|current: Option<&Record>, _| Some(current.cloned().unwrap_or_default()));
        Lifecycle::builder(store, ns, JsonObjectCodec, keep)
            .lease_config(lease())
            .batched_heartbeats(true)
            .build()
            .unwrap()
    }

    /// Holds `n` leases for three lease periods; every one must survive.
    async fn hold_many(store: Arc<dyn BindingStore>, n: usize) {
        let lc = lifecycle(store.clone()).await;
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let lc = lc.clone();
                tokio::spawn(async move {
                    let key = key(i);
                    lc.with_lease(&key, LeaseOptions::default(), |guard| async move {
                        tokio::time::sleep(Duration::from_millis(2_700)).await;
                        guard.capture_lease_assertion()?;
                        Ok(guard.epoch())
                    })
                    .await
                })
            })
            .collect();
        for task in tasks {
            task.await
                .unwrap()
                .expect("the lease survived three periods");
        }
        // Released at exit.
        let row = store
            .lookup(lc.namespace(), &key(0))
            .await
            .unwrap()
            .unwrap();
        assert!(row.lease.is_none(), "released: {row:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batched_heartbeats_keep_many_sqlite_leases_alive() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        hold_many(Arc::new(store), 40).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batched_heartbeats_keep_many_memory_leases_alive() {
        hold_many(Arc::new(MemoryStore::default()), 40).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_gone_at_renewal_is_lost_and_the_others_survive() {
        let store: Arc<dyn BindingStore> = Arc::new(Store::open("sqlite::memory:").await.unwrap());
        let lc = lifecycle(store.clone()).await;
        let survivor = {
            let lc = lc.clone();
            tokio::spawn(async move {
                lc.with_lease(&key(1), LeaseOptions::default(), |_| async move {
                    tokio::time::sleep(Duration::from_millis(1_500)).await;
                    Ok(())
                })
                .await
            })
        };
        let store2 = store.clone();
        let ns = lc.namespace().clone();
        let lost = lc
            .with_lease(&key(0), LeaseOptions::default(), |_| async move {
                // Someone else removes the row under the owner.
                let removed = store2.delete_if(&ns, &key(0), &|_| true).await?;
                assert!(removed.is_some());
                tokio::time::sleep(Duration::from_millis(1_000)).await;
                Ok(())
            })
            .await;
        assert!(
            matches!(lost, Err(Error::LostLease { .. })),
            "the batch reports the loss: {lost:?}"
        );
        survivor.await.unwrap().expect("the other lease survived");
    }
}
