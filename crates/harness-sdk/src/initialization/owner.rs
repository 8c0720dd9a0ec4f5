//! The owner: ownership registry, bind, link and rollback.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use async_trait::async_trait;
use tether_core::{AssertCurrent, BoxFuture, Clock, Error, InitializationHandle};

use super::links::{LinkDeleteOutcome, UpstreamLink, UpstreamLinkInput, UpstreamLinks};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A backend's cleanup of what the initialization bound natively. It receives the rollback
/// authority (the handle's `assert_rollback_current`) to check before each effect.
pub type Cleanup =
    Arc<dyn Fn(AssertCurrent) -> BoxFuture<'static, Result<(), Error>> + Send + Sync>;

/// What a harness backend supplies to the owner.
#[async_trait]
pub trait InitializationBackend: Send + Sync + 'static {
    /// The backend's binding store (compared by object identity).
    type Store: ?Sized + Send + Sync + 'static;
    /// The binding identity (agent, session, key), compared by value.
    type Identity: Clone + PartialEq + fmt::Debug + Send + Sync + 'static;
    /// The binding, compared by value.
    type Binding: Clone + PartialEq + fmt::Debug + Send + Sync + 'static;

    /// Validates (and may normalize) a binding before it is recorded or written.
    fn validate_binding(&self, binding: Self::Binding) -> Result<Self::Binding, Error>;

    /// Writes the binding **only if absent** (set-if-absent), checking `assert_current` at the
    /// write's commit admission. Returns whether it was written.
    async fn write_binding(
        &self,
        store: &Self::Store,
        identity: &Self::Identity,
        binding: &Self::Binding,
        assert_current: &AssertCurrent,
    ) -> Result<bool, Error>;
}

/// The owner's error texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitializationTexts {
    /// The set-if-absent binding write was refused (someone else bound first).
    pub binding_changed: String,
    /// The link-if-absent write was refused.
    pub link_write_failed: String,
    /// The recorded link was changed by someone else before rollback.
    pub link_changed: String,
    /// The rollback was asked for another store, identity or binding than the one owned.
    pub owner_changed: String,
}

impl Default for InitializationTexts {
    fn default() -> Self {
        Self {
            binding_changed: "Native session binding changed during session initialization".into(),
            link_write_failed: "Session upstream link could not be written during initialization"
                .into(),
            link_changed: "Session upstream link changed before initialization rollback".into(),
            owner_changed: "Session initialization owner changed".into(),
        }
    }
}

impl InitializationTexts {
    /// [`Error::OwnerChanged`] (owner `native binding`).
    pub fn binding_changed(&self) -> Error {
        Error::OwnerChanged {
            owner: "native binding".into(),
            message: self.binding_changed.clone(),
        }
    }

    /// [`Error::Other`] with the link-write text.
    pub fn link_write_failed(&self) -> Error {
        Error::other(self.link_write_failed.clone())
    }

    /// [`Error::OwnerChanged`] (owner `upstream link`).
    pub fn link_changed(&self) -> Error {
        Error::OwnerChanged {
            owner: "upstream link".into(),
            message: self.link_changed.clone(),
        }
    }

    /// [`Error::OwnerChanged`] (owner `initialization:<handle id>`).
    pub fn owner_changed(&self, handle_id: u64) -> Error {
        Error::OwnerChanged {
            owner: format!("initialization:{handle_id}"),
            message: self.owner_changed.clone(),
        }
    }
}

struct Shared<B> {
    backend: Arc<B>,
    links: Arc<dyn UpstreamLinks>,
    clock: Arc<dyn Clock>,
    texts: InitializationTexts,
}

struct Ownership<B: InitializationBackend> {
    handle: Weak<dyn InitializationHandle>,
    store: Arc<B::Store>,
    identity: B::Identity,
    binding: Mutex<Option<B::Binding>>,
    link: Arc<Mutex<Option<UpstreamLink>>>,
    assert_cleanup_allowed: Option<AssertCurrent>,
    cleanup: Option<Cleanup>,
}

impl<B: InitializationBackend> Ownership<B> {
    fn owned_by(&self, handle: &Arc<dyn InitializationHandle>) -> bool {
        self.handle
            .upgrade()
            .is_some_and(|h| Arc::ptr_eq(&h, handle))
    }
}

/// Registers and redeems native-binding ownership of host session initializations.
pub struct InitializationOwner<B: InitializationBackend> {
    shared: Arc<Shared<B>>,
    ownerships: Mutex<HashMap<u64, Arc<Ownership<B>>>>,
}

impl<B: InitializationBackend> fmt::Debug for InitializationOwner<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InitializationOwner")
            .field("ownerships", &lock(&self.ownerships).len())
            .field("texts", &self.shared.texts)
            .finish_non_exhaustive()
    }
}

/// The parameters of [`InitializationOwner::prepare`].
pub struct PrepareParams<B: InitializationBackend> {
    /// The host's initialization handle (ownership is keyed by this exact handle).
    pub initialization: Arc<dyn InitializationHandle>,
    /// The initialization's write authority (fails once the initialization is over).
    pub assert_current: AssertCurrent,
    /// The backend's binding store.
    pub store: Arc<B::Store>,
    /// The binding identity.
    pub identity: B::Identity,
    /// The backend cleanup run by a rollback, after the link is removed.
    pub cleanup: Option<Cleanup>,
    /// Refuses a rollback while native work is indeterminate.
    pub assert_cleanup_allowed: Option<AssertCurrent>,
}

impl<B: InitializationBackend> fmt::Debug for PrepareParams<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrepareParams")
            .field("initialization", &self.initialization)
            .field("identity", &self.identity)
            .field("cleanup", &self.cleanup.is_some())
            .finish_non_exhaustive()
    }
}

impl<B: InitializationBackend> InitializationOwner<B> {
    /// An owner writing bindings through `backend` and links through `links`.
    pub fn new(backend: Arc<B>, links: Arc<dyn UpstreamLinks>, clock: Arc<dyn Clock>) -> Self {
        Self {
            shared: Arc::new(Shared {
                backend,
                links,
                clock,
                texts: InitializationTexts::default(),
            }),
            ownerships: Mutex::new(HashMap::new()),
        }
    }

    /// Replaces the error texts (of initializations prepared from now on).
    #[must_use]
    pub fn with_texts(mut self, texts: InitializationTexts) -> Self {
        self.shared = Arc::new(Shared {
            backend: Arc::clone(&self.shared.backend),
            links: Arc::clone(&self.shared.links),
            clock: Arc::clone(&self.shared.clock),
            texts,
        });
        self
    }

    /// Asserts the initialization, then registers ownership **before any write** and returns
    /// the handle to bind and link with. A second preparation for the same handle replaces the
    /// first.
    #[tracing::instrument(name = "initialization.prepare", skip_all, fields(handle = params.initialization.handle_id()))]
    pub fn prepare(&self, params: PrepareParams<B>) -> Result<PreparedInitialization<B>, Error> {
        (params.assert_current)()?;
        let ownership = Arc::new(Ownership {
            handle: Arc::downgrade(&params.initialization),
            store: params.store,
            identity: params.identity,
            binding: Mutex::new(None),
            link: Arc::new(Mutex::new(None)),
            assert_cleanup_allowed: params.assert_cleanup_allowed,
            cleanup: params.cleanup,
        });
        {
            let mut ownerships = lock(&self.ownerships);
            ownerships.retain(|_, o| o.handle.strong_count() > 0);
            ownerships.insert(params.initialization.handle_id(), Arc::clone(&ownership));
        }
        Ok(PreparedInitialization {
            shared: Arc::clone(&self.shared),
            ownership,
            assert_current: params.assert_current,
        })
    }

    /// Drops the ownership of `initialization` (its creation committed: nothing to roll back).
    /// Returns whether one was registered.
    pub fn forget(&self, initialization: &Arc<dyn InitializationHandle>) -> bool {
        let mut ownerships = lock(&self.ownerships);
        let owned = ownerships
            .get(&initialization.handle_id())
            .is_some_and(|o| o.owned_by(initialization));
        if owned {
            ownerships.remove(&initialization.handle_id());
        }
        owned
    }

    /// The rollback a deletion of `identity` must run after it commits:
    ///
    /// - no initialization handle → `None`;
    /// - the handle's `assert_rollback_current` must pass;
    /// - no ownership and no binding → `None` (nothing of this initialization to undo);
    /// - ownership missing, or another store object, or an unequal identity, or (a binding was
    ///   given and it is not the owned one) → the owner-changed error;
    /// - `assert_cleanup_allowed` must pass ("reject indeterminate native work before either
    ///   local deletion commits").
    pub fn get_rollback(
        &self,
        store: &Arc<B::Store>,
        initialization: Option<&Arc<dyn InitializationHandle>>,
        identity: &B::Identity,
        binding: Option<&B::Binding>,
    ) -> Result<Option<InitializationRollback>, Error> {
        let Some(handle) = initialization else {
            return Ok(None);
        };
        handle.assert_rollback_current()?;
        let ownership = lock(&self.ownerships)
            .get(&handle.handle_id())
            .filter(|o| o.owned_by(handle))
            .cloned();
        let texts = &self.shared.texts;
        let Some(ownership) = ownership else {
            return match binding {
                None => Ok(None),
                Some(_) => Err(texts.owner_changed(handle.handle_id())),
            };
        };
        let same_binding = binding.is_none_or(|b| lock(&ownership.binding).as_ref() == Some(b));
        if !Arc::ptr_eq(&ownership.store, store) || &ownership.identity != identity || !same_binding
        {
            return Err(texts.owner_changed(handle.handle_id()));
        }
        if let Some(allowed) = &ownership.assert_cleanup_allowed {
            allowed()?;
        }
        Ok(Some(InitializationRollback {
            handle: Arc::clone(handle),
            links: Arc::clone(&self.shared.links),
            link: Arc::clone(&ownership.link),
            cleanup: ownership.cleanup.clone(),
            texts: texts.clone(),
        }))
    }
}

/// A prepared initialization: bind and link under the initialization's authority.
pub struct PreparedInitialization<B: InitializationBackend> {
    shared: Arc<Shared<B>>,
    ownership: Arc<Ownership<B>>,
    assert_current: AssertCurrent,
}

impl<B: InitializationBackend> fmt::Debug for PreparedInitialization<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedInitialization")
            .field("identity", &self.ownership.identity)
            .field("binding", &*lock(&self.ownership.binding))
            .field("link", &*lock(&self.ownership.link))
            .finish_non_exhaustive()
    }
}

impl<B: InitializationBackend> PreparedInitialization<B> {
    /// The initialization's write authority.
    pub fn assert_current(&self) -> Result<(), Error> {
        (self.assert_current)()
    }

    /// The binding recorded as owned (set before the write, cleared when the write is refused).
    pub fn recorded_binding(&self) -> Option<B::Binding> {
        lock(&self.ownership.binding).clone()
    }

    /// The link recorded as written by this initialization.
    pub fn recorded_link(&self) -> Option<UpstreamLink> {
        lock(&self.ownership.link).clone()
    }

    /// Validates and records the binding, then writes it set-if-absent. A refused write
    /// forgets the binding and fails with the binding-changed error; a failed (uncertain) write
    /// keeps it recorded so a rollback still covers it. Asserts before and after.
    #[tracing::instrument(name = "initialization.bind", skip_all)]
    pub async fn bind(&self, binding: B::Binding) -> Result<(), Error> {
        self.assert_current()?;
        let binding = self.shared.backend.validate_binding(binding)?;
        *lock(&self.ownership.binding) = Some(binding.clone());
        let stored = self
            .shared
            .backend
            .write_binding(
                &self.ownership.store,
                &self.ownership.identity,
                &binding,
                &self.assert_current,
            )
            .await?;
        if !stored {
            *lock(&self.ownership.binding) = None;
            return Err(self.shared.texts.binding_changed());
        }
        self.assert_current()
    }

    /// Records the link (stamped now), then writes it only if the session has none. A refused
    /// write forgets it and fails with the link-write error; a failed (uncertain) write keeps it
    /// recorded. Asserts before and after.
    #[tracing::instrument(name = "initialization.link", skip_all)]
    pub async fn link(&self, input: UpstreamLinkInput) -> Result<(), Error> {
        self.assert_current()?;
        let link = UpstreamLink::new(input, self.shared.clock.now());
        *lock(&self.ownership.link) = Some(link.clone());
        let stored = self
            .shared
            .links
            .insert_link_if_absent(&link, &self.assert_current)
            .await?;
        if !stored {
            *lock(&self.ownership.link) = None;
            return Err(self.shared.texts.link_write_failed());
        }
        self.assert_current()
    }
}

/// The rollback of one initialization, run by the deletion path after its commit.
pub struct InitializationRollback {
    handle: Arc<dyn InitializationHandle>,
    links: Arc<dyn UpstreamLinks>,
    link: Arc<Mutex<Option<UpstreamLink>>>,
    cleanup: Option<Cleanup>,
    texts: InitializationTexts,
}

impl fmt::Debug for InitializationRollback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InitializationRollback")
            .field("handle", &self.handle)
            .field("link", &*lock(&self.link))
            .field("cleanup", &self.cleanup.is_some())
            .finish_non_exhaustive()
    }
}

impl InitializationRollback {
    /// Undoes the initialization, re-asserting the handle between steps:
    ///
    /// 1. `assert_rollback_current`;
    /// 2. the recorded link is deleted **only if it is unchanged** — a changed link is the
    ///    link-changed error and nothing further runs;
    /// 3. the backend cleanup runs with the rollback authority.
    #[tracing::instrument(name = "initialization.rollback", skip_all, fields(handle = self.handle.handle_id()))]
    pub async fn run(&self) -> Result<(), Error> {
        let handle = Arc::clone(&self.handle);
        let assert_rollback: AssertCurrent = Arc::new(move || handle.assert_rollback_current());
        self.handle.assert_rollback_current()?;
        let link = lock(&self.link).clone();
        if let Some(link) = link {
            match self
                .links
                .delete_link_if_unchanged(&link, &assert_rollback)
                .await?
            {
                LinkDeleteOutcome::Changed => return Err(self.texts.link_changed()),
                LinkDeleteOutcome::Deleted | LinkDeleteOutcome::Absent => {
                    *lock(&self.link) = None;
                }
            }
        }
        self.handle.assert_rollback_current()?;
        if let Some(cleanup) = &self.cleanup {
            cleanup(Arc::clone(&assert_rollback)).await?;
        }
        self.handle.assert_rollback_current()
    }
}
