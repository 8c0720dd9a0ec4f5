//! [`GenerationOperations`] and [`BindingReader`] over the thread-binding store.

use async_trait::async_trait;
use tether_core::{Error, SessionId};

use super::identity::BindingIdentity;
use super::record::ThreadBinding;
use super::store::ThreadBindingStore;
use crate::generation::{
    AdoptionResult, BindingAuthority, BindingReader, GenerationOperations, ReclaimPlan,
};

/// The generation operations of one identity over a [`ThreadBindingStore`], for
/// [`GenerationAuthority::reclaim_prepared`](crate::generation::GenerationAuthority::reclaim_prepared)
/// and [`GenerationAuthority::resolve_binding`](crate::generation::GenerationAuthority::resolve_binding).
///
/// Inside a lease scope of the identity's key (see
/// [`ThreadBindingStore::with_reclaimed_lease`]) every write keeps and is fenced by the lease.
#[derive(Debug, Clone)]
pub struct ThreadGenerationOps {
    store: ThreadBindingStore,
    identity: BindingIdentity,
}

impl ThreadGenerationOps {
    /// The operations of `identity`.
    pub fn new(store: ThreadBindingStore, identity: BindingIdentity) -> Self {
        Self { store, identity }
    }

    /// The identity.
    pub fn identity(&self) -> &BindingIdentity {
        &self.identity
    }
}

#[async_trait]
impl GenerationOperations for ThreadGenerationOps {
    async fn prepare_reclaim(&self) -> Result<ReclaimPlan, Error> {
        self.store.prepare_reclaim(&self.identity).await
    }

    async fn adopt(
        &self,
        expected_previous: &SessionId,
        authority: &BindingAuthority,
    ) -> Result<AdoptionResult, Error> {
        self.store
            .adopt(&self.identity, expected_previous, authority)
            .await
    }

    async fn reclaim(
        &self,
        expected_previous: &SessionId,
        authority: &BindingAuthority,
    ) -> Result<bool, Error> {
        self.store
            .reclaim_generation(&self.identity, expected_previous, authority)
            .await
    }
}

#[async_trait]
impl BindingReader for ThreadGenerationOps {
    type Binding = ThreadBinding;

    async fn read_binding(
        &self,
        generation: Option<&SessionId>,
    ) -> Result<Option<ThreadBinding>, Error> {
        match generation {
            None => self.store.read(&self.identity).await,
            Some(session_id) => {
                self.store
                    .read(&self.identity.with_session_id(session_id.clone()))
                    .await
            }
        }
    }
}
