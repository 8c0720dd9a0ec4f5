//! The thread-binding backend as an initialization backend: bind with set-if-absent (see
//! `docs/harness-backend.md`, "Initialization owner").

use std::sync::Arc;

use async_trait::async_trait;
use tether_core::{AssertCurrent, Error};

use super::harness::InitializationRollbacks;
use crate::backend::{BindingIdentity, ThreadBinding, ThreadBindingStore, WriteOptions};
use crate::initialization::{InitializationBackend, InitializationOwner};

/// Writes initialization bindings into a [`ThreadBindingStore`] with set-if-absent.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadInitializationBackend;

#[async_trait]
impl InitializationBackend for ThreadInitializationBackend {
    type Store = ThreadBindingStore;
    type Identity = BindingIdentity;
    type Binding = ThreadBinding;

    fn validate_binding(&self, binding: ThreadBinding) -> Result<ThreadBinding, Error> {
        if binding.thread_id.trim().is_empty() || binding.cwd.trim().is_empty() {
            return Err(Error::invalid_argument(
                "an initialization binding needs a thread id and a working directory",
            ));
        }
        Ok(binding)
    }

    async fn write_binding(
        &self,
        store: &ThreadBindingStore,
        identity: &BindingIdentity,
        binding: &ThreadBinding,
        assert_current: &AssertCurrent,
    ) -> Result<bool, Error> {
        store
            .set_if_absent(
                identity,
                binding.clone(),
                WriteOptions::checked(Arc::clone(assert_current)),
            )
            .await
    }
}

/// The initialization rollbacks a [`ThreadBindingHarness`](super::ThreadBindingHarness)
/// computes at deletion, redeemed from `owner` for bindings written into `store`.
pub fn rollbacks_from_owner(
    owner: Arc<InitializationOwner<ThreadInitializationBackend>>,
    store: Arc<ThreadBindingStore>,
) -> InitializationRollbacks {
    Arc::new(move |identity, initialization, binding| {
        owner.get_rollback(&store, initialization, identity, binding)
    })
}
