//! The error type of the Tether contracts, and the backend-suppliable message texts.
//!
//! One enum, [`Error`], crosses every crate boundary that speaks the core contracts. Its
//! variants are stable and matchable; the human text of the lifecycle errors comes from
//! [`ErrorTexts`], which a harness backend may replace so its users see its own wording.
//! Errors are `Clone`: a sticky lease failure is reported at every later operation.

use std::sync::Arc;

use crate::ids::IdError;
use crate::ids::SessionKey;
use crate::keys::BindingKey;

/// A boxed error for causes that come from outside Tether.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The backend's own error behind a [`StoreErrorKind`] (a database driver's error), kept as its
/// [`source`](std::error::Error::source) so a caller can walk the chain. Cheap to clone; two
/// causes compare equal when their texts do (the kind stays `Clone + Eq`).
#[derive(Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl Cause {
    /// Keeps `error` as a cause.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// The error itself.
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }

    /// The error itself as a `T`, when it is one (for example a harness crate's own error
    /// behind an [`Error::Runtime`]).
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }
}

impl std::fmt::Debug for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

/// Why a store operation failed (see [`Error::Store`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The namespace was never registered with the store.
    #[error("unknown namespace `{namespace}`; register it with the store before use")]
    UnknownNamespace {
        /// The namespace that was asked for.
        namespace: String,
    },
    /// `max_entries` would be exceeded and the overflow policy is `reject-new`.
    #[error(
        "namespace `{namespace}` is full ({max_entries} entries, policy reject-new); delete or let rows expire before adding more"
    )]
    CapacityExceeded {
        /// The namespace.
        namespace: String,
        /// Its configured capacity.
        max_entries: u64,
    },
    /// The value is larger than the namespace's limit.
    #[error(
        "value of {size} bytes exceeds the {limit}-byte limit of namespace `{namespace}`; store a bounded digest instead"
    )]
    ValueTooLarge {
        /// The namespace.
        namespace: String,
        /// The refused size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The store could not be reached or refused the operation before writing anything.
    #[error("store unavailable: {message}")]
    Unavailable {
        /// What the backend said.
        message: String,
        /// The backend's own error (a database driver's), when there is one.
        #[source]
        cause: Option<Cause>,
    },
    /// The database cannot be used as it is — a read-only file, a corrupt file, a file that is
    /// not a database, a server in read-only mode. Nothing was written; retrying does not help
    /// until an operator fixes the database.
    #[error("database unusable: {message}")]
    Unusable {
        /// What the backend said, and what to check.
        message: String,
        /// The backend's own error (a database driver's), when there is one.
        #[source]
        cause: Option<Cause>,
    },
    /// The configuration (URL, options) is unusable.
    #[error("invalid store configuration: {message}")]
    Configuration {
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The database schema is newer than this binary.
    #[error(
        "database schema version {found} is newer than this binary supports ({supported}); upgrade Tether"
    )]
    SchemaTooNew {
        /// Migration found in the database.
        found: String,
        /// Newest migration known to this binary.
        supported: String,
    },
    /// The COMMIT carrying the write failed, or its answer was lost: the write may or may not
    /// have been applied. Never replay it blindly; an owner blocks (quarantines) the key. The
    /// keyed store writes report this as [`Error::OutcomeUnknown`] for their key.
    #[error("the outcome of the write is unknown (its COMMIT failed): {message}")]
    CommitFailed {
        /// What the backend said.
        message: String,
        /// The backend's own error (a database driver's), when there is one.
        #[source]
        cause: Option<Cause>,
    },
    /// Any other backend failure.
    #[error("store backend error: {message}")]
    Backend {
        /// What the backend said.
        message: String,
        /// The backend's own error (a database driver's), when there is one.
        #[source]
        cause: Option<Cause>,
    },
}

/// The one error enum of the Tether contracts.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An identifier or key was refused.
    #[error(transparent)]
    InvalidId(#[from] IdError),

    /// A text value (label, reason, transcript content, idempotency key) was refused before
    /// anything was written (the rules are in [`text`](crate::text)).
    #[error(transparent)]
    InvalidText(#[from] crate::text::TextError),

    /// The owner's lease was replaced, expired, or could not be renewed.
    #[error("{message}")]
    LostLease {
        /// The binding key.
        key: BindingKey,
        /// Backend-supplied text.
        message: String,
        /// What made the lease be lost, when known (for example a renewal failure).
        #[source]
        cause: Option<Arc<Error>>,
    },
    /// Another live lease kept the key busy for the whole wait budget.
    #[error("{message}")]
    LeaseTimeout {
        /// The binding key.
        key: BindingKey,
        /// Backend-supplied text.
        message: String,
    },
    /// The key is leased by a live owner of the same lifecycle instance, but the call runs
    /// outside that owner's scope (typically a task spawned from inside `with_lease`, which
    /// does not inherit the scope). Waiting would only wait for the caller itself: write under
    /// the held lease with the owner's guard (`Lifecycle::transact_under`) instead.
    #[error("{message}")]
    HeldOutsideScope {
        /// The binding key.
        key: BindingKey,
        /// What to do instead.
        message: String,
    },
    /// The backend's `prepare_lease` refused the acquisition.
    #[error("{message}")]
    AcquisitionRejected {
        /// The binding key.
        key: BindingKey,
        /// Backend-supplied text.
        message: String,
    },
    /// A row is present but its value does not decode. Invalid rows fail closed: never "absent".
    #[error("{message}")]
    InvalidRow {
        /// The binding key.
        key: BindingKey,
        /// Backend-supplied text.
        message: String,
    },
    /// A mutation was refused because an exclusive operation is pending.
    #[error("{message}")]
    MutationBlocked {
        /// Backend-supplied text.
        message: String,
    },
    /// The row changed between deletion preparation and commit.
    #[error("{message}")]
    DeletionChanged {
        /// The binding key.
        key: BindingKey,
        /// Backend-supplied text.
        message: String,
    },
    /// A deletion rollback found a successor and refused to overwrite it.
    #[error("{message}")]
    RollbackChanged {
        /// The binding key.
        key: BindingKey,
        /// Backend-supplied text.
        message: String,
    },
    /// One or more rollbacks failed after a failed transaction; carries the original error.
    #[error("Session deletion rollback failed: {original}; {} rollback failure(s)", failures.len())]
    RollbackFailed {
        /// The error that made the transaction fail.
        original: Arc<Error>,
        /// The rollback failures, in the order they happened.
        failures: Vec<Error>,
    },
    /// The host session generation moved (or could not be read), so the caller's authority ended.
    #[error("{message}")]
    SupersededGeneration {
        /// The generation the caller acted for.
        session_id: String,
        /// Backend-supplied text.
        message: String,
    },
    /// The outcome of a write is unknown; the key is blocked until an operator releases it.
    #[error("{message}")]
    OutcomeUnknown {
        /// The binding key.
        key: BindingKey,
        /// Text describing the uncertain step.
        message: String,
        /// The failure that made the outcome unknown.
        #[source]
        cause: Option<Arc<Error>>,
    },
    /// The harness registration that owned an operation changed or the operation closed.
    #[error("{message}")]
    OwnerChanged {
        /// The owner (harness id, initialization handle) that changed.
        owner: String,
        /// Backend-supplied text.
        message: String,
    },
    /// Competing admitted work is in flight for the session.
    #[error("{message}")]
    CompetingWork {
        /// The session key (or id) with work in flight.
        session: String,
        /// Host-supplied text.
        message: String,
    },
    /// The caller's own authority refused the operation (cancelled, closed, revoked).
    #[error("{message}")]
    Revoked {
        /// Why the authority refused.
        message: String,
    },
    /// A store operation failed. Only an explicit conflict proves nothing happened; a store
    /// error from a write is never replayed.
    #[error(transparent)]
    Store {
        /// What failed (its source is the backend's own error, when there is one).
        kind: StoreErrorKind,
    },
    /// A host-session operation was refused for a reason a caller decides on (a missing
    /// session is a "not found", an existing one a conflict).
    #[error("{kind}")]
    Host {
        /// What was refused.
        kind: HostErrorKind,
    },
    /// The native agent runtime a harness drives (an app-server process, an ACP agent, a CLI
    /// daemon) failed the operation, for a reason a caller decides on: busy elsewhere, gone,
    /// unusable, refusing, or a failed native turn. The harness's own error is kept in
    /// `cause` (also the [`source`](std::error::Error::source)): a caller that knows the
    /// harness reads it with [`Cause::downcast_ref`] to the harness crate's error type.
    #[error("{message}")]
    Runtime {
        /// What kind of failure it is.
        kind: RuntimeErrorKind,
        /// The harness's text.
        message: String,
        /// The harness's own error, when there is one.
        #[source]
        cause: Option<Cause>,
    },
    /// The call was refused for what its caller passed or how the caller set it up, before
    /// anything was written: an identity without the session the call needs, a binding
    /// without a thread id, an invalid lease timing, a lease guard used with another lifecycle
    /// instance. A programming error of the caller: retrying the same call cannot succeed.
    #[error("{message}")]
    InvalidArgument {
        /// What was wrong and what to pass instead.
        message: String,
    },
    /// Any other failure with a message (a backend's own error).
    #[error("{message}")]
    Other {
        /// The message.
        message: String,
        /// The cause, if any.
        #[source]
        cause: Option<Arc<Error>>,
    },
}

impl Error {
    /// A store error of the given kind.
    pub fn store(kind: StoreErrorKind) -> Self {
        Self::Store { kind }
    }

    /// A plain error with a message.
    pub fn other(message: impl Into<String>) -> Self {
        Self::Other {
            message: message.into(),
            cause: None,
        }
    }

    /// A refusal of the caller's arguments or set-up ([`Error::InvalidArgument`]).
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            message: message.into(),
        }
    }

    /// A host-session operation on a session that does not exist
    /// ([`HostErrorKind::SessionNotFound`]; HTTP 404).
    pub fn session_not_found(key: &SessionKey) -> Self {
        HostErrorKind::SessionNotFound {
            key: key.to_string(),
        }
        .into()
    }

    /// A revocation (the caller's assertion refused).
    pub fn revoked(message: impl Into<String>) -> Self {
        Self::Revoked {
            message: message.into(),
        }
    }

    /// A native-runtime failure of the given kind (see [`Error::Runtime`]), keeping the
    /// harness's own error as its source.
    pub fn runtime(
        kind: RuntimeErrorKind,
        message: impl Into<String>,
        cause: Option<Cause>,
    ) -> Self {
        Self::Runtime {
            kind,
            message: message.into(),
            cause,
        }
    }

    /// Whether another owner or run is using the key right now, so the same call may succeed
    /// later: [`Error::LeaseTimeout`] (a live lease outlasted the wait budget),
    /// [`Error::CompetingWork`], a [`Error::MutationBlocked`] by a live lease, and a native
    /// session held by another process ([`RuntimeErrorKind::Busy`]).
    pub fn is_busy(&self) -> bool {
        matches!(
            self,
            Self::LeaseTimeout { .. }
                | Self::CompetingWork { .. }
                | Self::MutationBlocked { .. }
                | Self::Runtime {
                    kind: RuntimeErrorKind::Busy,
                    ..
                }
        )
    }

    /// Whether retrying the same call later can succeed without anyone changing anything:
    /// [`is_busy`](Self::is_busy), a store that was unavailable before it wrote anything, or a
    /// native runtime that was gone or hung ([`RuntimeErrorKind::Unavailable`]: the next
    /// operation runs on a fresh one). Never true for an unknown outcome (the key must be
    /// checked first), a lost lease (the owner must start over) or bad input.
    pub fn is_retryable(&self) -> bool {
        self.is_busy()
            || matches!(
                self,
                Self::Store {
                    kind: StoreErrorKind::Unavailable { .. }
                } | Self::Runtime {
                    kind: RuntimeErrorKind::Unavailable,
                    ..
                }
            )
    }

    /// Whether this is a lease loss.
    pub fn is_lost_lease(&self) -> bool {
        matches!(self, Self::LostLease { .. })
    }

    /// Whether the write's outcome is unknown (the key must be quarantined): an
    /// [`Error::OutcomeUnknown`], or a store write whose COMMIT failed
    /// ([`StoreErrorKind::CommitFailed`]).
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(
            self,
            Self::OutcomeUnknown { .. }
                | Self::Store {
                    kind: StoreErrorKind::CommitFailed { .. }
                }
        )
    }
}

/// Why a native agent runtime failed an operation ([`Error::Runtime`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RuntimeErrorKind {
    /// Another process holds the native session (for example its writer): the same call can
    /// succeed once that process lets go. Counted by [`Error::is_busy`].
    Busy,
    /// The runtime is gone or hung (its process exited, or a request got no answer in time).
    /// The harness starts a fresh one for the next operation, so the call is retryable
    /// ([`Error::is_retryable`]).
    Unavailable,
    /// The runtime cannot be started as configured (a missing or unusable binary): an operator
    /// must fix the installation; retrying does not help.
    Unusable,
    /// The runtime refused the request, answered outside its protocol, or the harness refused
    /// the operation for the session (nothing bound to act on).
    Refused,
    /// The native turn ran and the runtime reported it failed.
    TurnFailed,
}

impl std::fmt::Display for RuntimeErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Busy => "busy",
            Self::Unavailable => "unavailable",
            Self::Unusable => "unusable",
            Self::Refused => "refused",
            Self::TurnFailed => "turn failed",
        })
    }
}

/// Why a host-session operation was refused ([`Error::Host`]). Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostErrorKind {
    /// The session does not exist.
    #[error("no host session `{key}`; create the session first")]
    SessionNotFound {
        /// The session key asked for.
        key: String,
    },
    /// A session with this key already exists.
    #[error("host session `{key}` already exists; use a new session key")]
    SessionExists {
        /// The session key.
        key: String,
    },
    /// The session changed (another generation, revision or leaf) while the operation ran.
    #[error("host session `{key}` changed during the operation; reload and retry")]
    SessionChanged {
        /// The session key.
        key: String,
    },
    /// An operator's deletion of the session was refused: one of its binding rows is
    /// quarantined (the outcome of a write to it is unknown). Deleting would drop the row the
    /// quarantine asks an operator to check, and leave the quarantine blocking a new session
    /// under the same key.
    #[error(
        "binding `{binding}` of host session `{key}` is quarantined ({reason}); check it, release the quarantine, then retry"
    )]
    BindingQuarantined {
        /// The session key.
        key: String,
        /// The quarantined binding, `namespace/key`.
        binding: String,
        /// The quarantine's reason.
        reason: String,
    },
}

impl From<HostErrorKind> for Error {
    fn from(kind: HostErrorKind) -> Self {
        Self::Host { kind }
    }
}

impl From<StoreErrorKind> for Error {
    fn from(kind: StoreErrorKind) -> Self {
        Self::Store { kind }
    }
}

/// The texts of the lifecycle errors. `{key}` is replaced with the binding key.
///
/// Defaults are generic ("Lost binding lease: k", …). A backend sets its
/// own wording, for example "Codex binding generation was retired: {key}" for a rejected
/// acquisition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorTexts {
    /// Lost lease (`{key}`).
    pub lost_lease: String,
    /// Lease wait budget exhausted (`{key}`).
    pub lease_timeout: String,
    /// Acquisition refused by `prepare_lease` (`{key}`).
    pub acquisition_rejected: String,
    /// Present row failing to decode (`{key}`).
    pub invalid_row: String,
    /// Mutation refused while an exclusive operation is pending.
    pub mutation_blocked: String,
    /// Row changed before deletion commit (`{key}` optional).
    pub deletion_changed: String,
    /// Successor found at rollback (`{key}` optional).
    pub rollback_changed: String,
}

impl Default for ErrorTexts {
    fn default() -> Self {
        Self {
            lost_lease: "Lost binding lease: {key}".into(),
            lease_timeout: "Binding lease timed out: {key}".into(),
            acquisition_rejected: "Binding lease rejected: {key}".into(),
            invalid_row: "Invalid binding row: {key}; original state retained. Back up the row and repair or delete it before retrying".into(),
            mutation_blocked: "Binding mutation blocked while native archive is in progress".into(),
            deletion_changed: "Binding changed before session deletion".into(),
            rollback_changed: "Binding changed before session deletion rollback".into(),
        }
    }
}

fn fill(template: &str, key: &BindingKey) -> String {
    template.replace("{key}", key.as_str())
}

impl ErrorTexts {
    /// [`Error::LostLease`] for `key`, optionally with its cause.
    pub fn lost_lease(&self, key: &BindingKey, cause: Option<Error>) -> Error {
        Error::LostLease {
            key: key.clone(),
            message: fill(&self.lost_lease, key),
            cause: cause.map(Arc::new),
        }
    }

    /// [`Error::LeaseTimeout`] for `key`.
    pub fn lease_timeout(&self, key: &BindingKey) -> Error {
        Error::LeaseTimeout {
            key: key.clone(),
            message: fill(&self.lease_timeout, key),
        }
    }

    /// [`Error::AcquisitionRejected`] for `key`.
    pub fn acquisition_rejected(&self, key: &BindingKey) -> Error {
        Error::AcquisitionRejected {
            key: key.clone(),
            message: fill(&self.acquisition_rejected, key),
        }
    }

    /// [`Error::InvalidRow`] for `key`.
    pub fn invalid_row(&self, key: &BindingKey) -> Error {
        Error::InvalidRow {
            key: key.clone(),
            message: fill(&self.invalid_row, key),
        }
    }

    /// [`Error::MutationBlocked`].
    pub fn mutation_blocked(&self) -> Error {
        Error::MutationBlocked {
            message: self.mutation_blocked.clone(),
        }
    }

    /// [`Error::DeletionChanged`] for `key`.
    pub fn deletion_changed(&self, key: &BindingKey) -> Error {
        Error::DeletionChanged {
            key: key.clone(),
            message: fill(&self.deletion_changed, key),
        }
    }

    /// [`Error::RollbackChanged`] for `key`.
    pub fn rollback_changed(&self, key: &BindingKey) -> Error {
        Error::RollbackChanged {
            key: key.clone(),
            message: fill(&self.rollback_changed, key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{AgentId, SessionId};

    #[test]
    fn busy_and_retryable_errors_are_classified() {
        let key = BindingKey::physical(&AgentId::new("a").unwrap(), &SessionId::new("k").unwrap());
        let texts = ErrorTexts::default();
        let timeout = texts.lease_timeout(&key);
        assert!(timeout.is_busy() && timeout.is_retryable());
        let unavailable = Error::store(StoreErrorKind::Unavailable {
            message: "down".into(),
            cause: None,
        });
        assert!(!unavailable.is_busy() && unavailable.is_retryable());
        let held = Error::runtime(RuntimeErrorKind::Busy, "held elsewhere", None);
        assert!(held.is_busy() && held.is_retryable());
        let gone = Error::runtime(RuntimeErrorKind::Unavailable, "exited", None);
        assert!(!gone.is_busy() && gone.is_retryable());
        for never in [
            Error::runtime(RuntimeErrorKind::Unusable, "no binary", None),
            Error::runtime(RuntimeErrorKind::Refused, "refused", None),
            Error::runtime(RuntimeErrorKind::TurnFailed, "failed", None),
            texts.lost_lease(&key, None),
            Error::OutcomeUnknown {
                key: key.clone(),
                message: "?".into(),
                cause: None,
            },
            Error::store(StoreErrorKind::CommitFailed {
                message: "?".into(),
                cause: None,
            }),
            Error::HeldOutsideScope {
                key,
                message: "own".into(),
            },
            Error::invalid_argument("no session"),
        ] {
            assert!(!never.is_retryable(), "{never:?}");
        }
    }

    #[test]
    fn texts_are_filled_and_replaceable() {
        let key = BindingKey::physical(&AgentId::new("a").unwrap(), &SessionId::new("k").unwrap());
        let texts = ErrorTexts::default();
        assert_eq!(
            texts.lost_lease(&key, None).to_string(),
            "Lost binding lease: session:a:k"
        );
        let custom = ErrorTexts {
            acquisition_rejected: "Codex binding generation was retired: {key}".into(),
            ..ErrorTexts::default()
        };
        let err = custom.acquisition_rejected(&key);
        assert!(matches!(err, Error::AcquisitionRejected { .. }));
        assert_eq!(
            err.to_string(),
            "Codex binding generation was retired: session:a:k"
        );
    }

    #[test]
    fn a_runtime_error_keeps_the_harness_error_as_its_source() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such binary");
        let err = Error::runtime(
            RuntimeErrorKind::Unusable,
            "cannot start",
            Some(Cause::new(io)),
        );
        assert_eq!(err.to_string(), "cannot start");
        let source = std::error::Error::source(&err).expect("cause kept");
        assert_eq!(source.to_string(), "no such binary");
        let Error::Runtime {
            cause: Some(cause), ..
        } = &err
        else {
            unreachable!("built above")
        };
        assert_eq!(
            cause
                .downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind),
            Some(std::io::ErrorKind::NotFound)
        );
        assert_eq!(RuntimeErrorKind::TurnFailed.to_string(), "turn failed");
    }

    #[test]
    fn lost_lease_keeps_its_cause() {
        let key = BindingKey::physical(&AgentId::new("a").unwrap(), &SessionId::new("k").unwrap());
        let cause = Error::other("renewal observe failed");
        let err = ErrorTexts::default().lost_lease(&key, Some(cause));
        let source = std::error::Error::source(&err).expect("cause kept");
        assert_eq!(source.to_string(), "renewal observe failed");
    }
}
